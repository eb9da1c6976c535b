"""Distinct types for the ids and positions every layer passes around.

Offsets follow Kafka: an offset is a place in the log, the high-water mark (HWM) and the log
end offset are exclusive (the offset of the next record), so records at offsets < HWM are
committed.
"""

from typing import NewType

Epoch = NewType("Epoch", int)
Offset = NewType("Offset", int)
NodeId = NewType("NodeId", int)

# An epoch no leader ever had: what an empty log, or an offset before any epoch, answers.
NO_EPOCH = Epoch(-1)
# The largest epoch a message may carry: epochs are Kafka's int32 leader epochs, and a
# candidate campaigns in its epoch + 1.
EPOCH_MAX = Epoch(2**31 - 2)

# The id of the directory that holds one copy of a partition's log (KIP-853's directory
# id): made anew with every empty log directory, so a node back on an empty disk is a new
# member, never the old voter (core/membership.py). NO_DIRECTORY is Kafka's Uuid.ZERO: not
# known, which any directory matches (a voter set written before the ids were known).
DirectoryId = NewType("DirectoryId", int)
NO_DIRECTORY = DirectoryId(0)
