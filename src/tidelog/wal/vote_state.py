"""The vote (epoch and vote cast, `HardState`): written in place, never renamed.

Every campaign and every vote cast writes it, durably, before a message leaves
(core/replica.py rule 2): after a node's death the survivors write it for each of the
thousands of partitions it led. A checkpoint's temporary file, rename and directory sync
would cost each of them a commit of the file system's journal; an overwrite of a slot
costs one sync of the file (or a share of a group commit's, wal/group_sync.py).

Rules of this file:
- `vote-state` holds two slots of SLOT_BYTES each, in sectors of their own. A slot is one
  line, `v2 SEQ EPOCH VOTED CRC` (VOTED -1: none; CRC the CRC-32C of the text before it),
  padded with spaces. A write fills the slot that does not hold the latest sequence, with
  the next one: a torn write spoils only that slot, and the other still holds the vote
  before it, which is all that was promised.
- Reading takes the valid slot of the highest sequence. A file holding no valid slot is
  malformed (StorageError): a vote is never guessed.
- A file of the checkpoint format (checkpoint.py; a version line `0`) is read as one. A
  missing file means no vote yet. Either is replaced by a file of both slots made as a
  checkpoint is (a temporary file renamed); every later write is in place.
- Nothing here syncs but `write`: `stage` leaves the sync (and a new file's rename,
  `checkpoint.publish_checkpoints`) to the caller's group commit.
"""

from __future__ import annotations

import posixpath

from crc32c import crc32c

from tidelog.core.messages import HardState
from tidelog.errors import StorageError
from tidelog.types import Epoch, NodeId
from tidelog.wal import checkpoint as ckpt
from tidelog.wal.fs import FileSystem

SLOT_BYTES = 512
FORMAT = "v2"
NO_VOTE = ckpt.NO_VOTE


def slot_bytes(seq: int, hard_state: HardState) -> bytes:
    voted = NO_VOTE if hard_state.voted_for is None else int(hard_state.voted_for)
    text = f"{FORMAT} {seq} {int(hard_state.epoch)} {voted}"
    line = f"{text} {crc32c(text.encode()):08x}\n".encode()
    return line.ljust(SLOT_BYTES, b" ")


def parse_slot(data: bytes) -> tuple[int, HardState] | None:
    """(sequence, vote) of a valid slot, else None."""
    line = data.split(b"\n", 1)[0].decode("ascii", errors="replace")
    text, _, crc = line.rpartition(" ")
    fields = text.split()
    if len(fields) != 4 or fields[0] != FORMAT:
        return None
    try:
        if int(crc, 16) != crc32c(text.encode()):
            return None
        seq, epoch, voted = (int(field) for field in fields[1:])
    except ValueError:
        return None
    return seq, HardState(Epoch(epoch), None if voted == NO_VOTE else NodeId(voted))


class VoteState:
    """The vote file of one log directory (see the rules above)."""

    def __init__(self, fs: FileSystem, directory: str) -> None:
        self.fs = fs
        self.directory = directory
        self.path = posixpath.join(directory, ckpt.VOTE_STATE)
        self.seq = 0  # the latest sequence read or written
        self.in_place = False  # the file holds both slots: writes go in place

    def read(self) -> HardState:
        if not self.fs.exists(self.path):
            return HardState(epoch=Epoch(0), voted_for=None)
        head = self.fs.pread(self.path, 0, 2 * SLOT_BYTES)
        if head.startswith(f"{ckpt.CHECKPOINT_VERSION}\n".encode()):
            rows = ckpt.read_checkpoint(self.fs, self.path, width=2)
            epoch, voted = rows[0] if rows else (0, NO_VOTE)
            return HardState(Epoch(epoch), None if voted == NO_VOTE else NodeId(voted))
        slots = [parse_slot(head[i : i + SLOT_BYTES]) for i in (0, SLOT_BYTES)]
        valid = [slot for slot in slots if slot is not None]
        if not valid:
            raise StorageError(f"{self.path} holds no valid vote")
        self.seq, hard_state = max(valid, key=lambda slot: slot[0])
        self.in_place = True
        return hard_state

    def stage(self, hard_state: HardState) -> ckpt.Renames:
        """Write `hard_state`, syncing nothing: in place (no rename), or to a temporary
        file (its rename returned) the first time."""
        self.seq += 1
        slot = slot_bytes(self.seq, hard_state)
        if self.in_place:
            self.fs.pwrite(self.path, (self.seq % 2) * SLOT_BYTES, slot)
            return []
        # A new file: the other slot holds the same vote one sequence back, so both are
        # valid from the start.
        slots = {self.seq % 2: slot, (self.seq - 1) % 2: slot_bytes(self.seq - 1, hard_state)}
        renames = [ckpt.stage_file(self.fs, self.directory, ckpt.VOTE_STATE, slots[0] + slots[1])]
        self.in_place = True
        return renames

    def write(self, hard_state: HardState) -> None:
        """`stage`, then make it durable on its own."""
        renames = self.stage(hard_state)
        if renames:
            ckpt.commit_renames(self.fs, self.directory, renames)
        else:
            self.fs.fdatasync(self.path)
