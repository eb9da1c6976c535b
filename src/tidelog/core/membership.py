"""Who votes in one partition: its voter set and the history of its changes (KIP-853).

A replica is named by its node id *and* the id of the directory that holds its copy of the
log (KIP-853's ReplicaKey, Kafka's directory id): a node that comes back on an empty disk
has a new directory id, so it is a new member, never the old voter. Its old
acknowledgements, matches and vote die with the old key; it counts again only once a
change has made its new key a voter (and, as a learner before that, it has caught up).

Rules of this file (sources: Ongaro's thesis §4.1-4.3; Ongaro, raft-dev, 2015-07-10, "bug
in single-server membership changes"; KIP-853; KAFKA-16580's invariants; etcd-io/raft's
confchange):
1. A voter set is a non-empty set of replica keys, at most one per node id. Its majority
   is `quorum.majority` of its size: one arithmetic for every count.
2. A change adds or removes exactly one voter (`VoterSet.add`, `VoterSet.remove`): any
   majority of the old set and any majority of the new one then share a voter, so two
   leaders can never be elected by the two sets in one epoch.
3. A leader proposes a change (one voter added or removed, or the directories of voters
   known by node alone named: `names_directories`) only when (a) it has committed a record
   of its own epoch (its HWM is past its epoch's start: without it, changes from two
   epochs can both commit, the raft-dev 2015 bug), and (b) no change is uncommitted (its
   HWM is past the last entry of the history): at most one voter set lies between the HWM
   and the log end (KAFKA-16580). `change_refusal` says why not, or None.
4. A voter set takes effect where it is appended, not when it commits: every replica uses
   the last entry its log holds (`VoterSetHistory.current`), a leader as a follower, so
   that the new set's majority decides its own commit.
5. The history follows the log as the leader-epoch history does (core/epochs.py): an
   entry at an offset the log loses by truncation is removed (`truncate`); retention and
   DeleteRecords keep the entry in effect at the new log start (`trim`); a replica reset
   to a leader's log start takes the leader's set at that start (`reset`).
6. A replica whose key is not in the current voter set is an observer (a learner): it
   fetches, but it neither votes, nor campaigns, nor counts for the HWM. One exception
   (Raft thesis §4.1): a voter removed by a change its log holds but has not seen
   committed may campaign, counting the votes of the new set only, for the leader that
   wrote the change may have lost it with its unsynced writes, and the new set's voters
   may need it to commit the change (`ReplicaState.may_stand`). Elected, it counts for
   nothing itself and hands leadership to a voter once the change is committed.
7. A key whose directory is NO_DIRECTORY (a set written before the directories were
   known: the partition's first set in a cluster that assigns none) matches its node on
   any directory (`VoterSet.voter_key`), as KIP-853's Uuid.ZERO does.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from tidelog.core.quorum import majority
from tidelog.records import (
    CONTROL_TYPE_VOTERS,
    build_control_batch,
    control_record,
    read_uvarint,
    uvarint,
)
from tidelog.types import NO_DIRECTORY, DirectoryId, Epoch, NodeId, Offset

BEFORE_THE_LOG = Offset(-1)
"""Where the partition's first voter set sits: before any record."""


@dataclass(frozen=True, slots=True, order=True)
class ReplicaKey:
    """One copy of a partition's log: the node that runs it and the directory that holds
    it (a fresh one for every empty disk the node starts on)."""

    node: NodeId
    directory: DirectoryId

    def __str__(self) -> str:
        if self.directory == NO_DIRECTORY:
            return f"{self.node}/?"
        return f"{self.node}/{self.directory}"


@dataclass(frozen=True, slots=True)
class VoterSet:
    """The replicas whose votes elect a leader and whose durable copies commit (rule 1)."""

    voters: frozenset[ReplicaKey]

    def __post_init__(self) -> None:
        if not self.voters:
            raise ValueError("a voter set holds at least one voter")
        nodes = [key.node for key in self.voters]
        if len(set(nodes)) != len(nodes):
            raise ValueError(f"a voter set holds one key per node: {sorted(self.voters)}")

    @classmethod
    def of(cls, keys: Iterable[ReplicaKey]) -> VoterSet:
        return cls(frozenset(keys))

    def __iter__(self) -> Iterator[ReplicaKey]:
        return iter(sorted(self.voters))

    def __len__(self) -> int:
        return len(self.voters)

    def __contains__(self, key: object) -> bool:
        return key in self.voters

    @property
    def nodes(self) -> frozenset[NodeId]:
        return frozenset(key.node for key in self.voters)

    @property
    def majority(self) -> int:
        return majority(len(self.voters))

    def key_of(self, node: NodeId) -> ReplicaKey | None:
        """The key under which `node` votes, None when it does not."""
        for key in self.voters:
            if key.node == node:
                return key
        return None

    def voter_key(self, node: NodeId, directory: DirectoryId) -> ReplicaKey | None:
        """The key under which the copy `directory` of `node` votes, None when that copy
        does not (rule 7: a key of no known directory matches any)."""
        key = self.key_of(node)
        if key is None or key.directory not in (directory, NO_DIRECTORY):
            return None
        return key

    def is_quorum(self, keys: Iterable[ReplicaKey]) -> bool:
        """Whether `keys` hold a majority of this set (keys outside it count for nothing)."""
        return len(self.voters.intersection(keys)) >= self.majority

    def add(self, key: ReplicaKey) -> VoterSet:
        """This set and one voter more (rule 2); its node must not vote yet."""
        if key.node in self.nodes:
            raise ValueError(f"node {key.node} already votes as {self.key_of(key.node)}")
        return VoterSet(self.voters | {key})

    def remove(self, key: ReplicaKey) -> VoterSet:
        """This set and one voter fewer (rule 2); never the last one."""
        if key not in self.voters:
            raise ValueError(f"{key} is no voter")
        return VoterSet(self.voters - {key})

    def differs_by_at_most_one(self, other: VoterSet) -> bool:
        return len(self.voters ^ other.voters) <= 1


class VoterSetEntry(NamedTuple):
    """One line of the history: `voters` in effect from `offset` on."""

    offset: Offset
    voters: VoterSet


class VoterSetHistory:
    """The voter sets a log holds, by the offset where each was appended (Kafka's
    VoterSetHistory); the first entry is the set the partition was created with."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[VoterSetEntry]) -> None:
        self._entries: list[VoterSetEntry] = list(entries)
        if not self._entries:
            raise ValueError("a voter set history starts with the partition's first set")
        offsets = [entry.offset for entry in self._entries]
        if offsets != sorted(set(offsets)):
            raise ValueError(f"voter sets at offsets that do not rise: {offsets}")

    @classmethod
    def starting_with(cls, voters: VoterSet) -> VoterSetHistory:
        return cls([VoterSetEntry(BEFORE_THE_LOG, voters)])

    # --- questions ------------------------------------------------------------------
    @property
    def entries(self) -> tuple[VoterSetEntry, ...]:
        return tuple(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VoterSetHistory) and self._entries == other._entries

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"VoterSetHistory({self._entries!r})"

    @property
    def current(self) -> VoterSet:
        """The set in effect: the last one the log holds (rule 4)."""
        return self._entries[-1].voters

    @property
    def last_offset(self) -> Offset:
        """Where the current set was appended (BEFORE_THE_LOG for the partition's first;
        one below the log start for a set a reset carried over)."""
        return self._entries[-1].offset

    def at(self, offset: Offset) -> VoterSet:
        """The set in effect at `offset`: the last one appended at or before it."""
        index = bisect.bisect_right(self._entries, offset, key=lambda entry: entry.offset)
        return self._entries[max(index - 1, 0)].voters

    def committed(self, hwm: Offset) -> VoterSet:
        """The last set below the HWM (what every future leader holds)."""
        return self.at(Offset(hwm - 1))

    def uncommitted(self, hwm: Offset) -> bool:
        """Whether a change lies at or above the HWM (rule 3b)."""
        return self.last_offset >= hwm

    # --- changes ----------------------------------------------------------------------
    def append(self, offset: Offset, voters: VoterSet) -> None:
        """A batch holding a new voter set was appended at `offset` (rule 4)."""
        if offset <= self.last_offset:
            raise ValueError(f"a voter set at {offset}, not after the last at {self.last_offset}")
        self._entries.append(VoterSetEntry(offset, voters))

    def truncate(self, offset: Offset) -> bool:
        """The log lost everything at or above `offset`: so do its voter sets (rule 5).
        The first entry stays (a partition is never without voters). True if changed."""
        entries = self._entries
        changed = False
        while len(entries) > 1 and entries[-1].offset >= offset:
            entries.pop()
            changed = True
        return changed

    def trim(self, start_offset: Offset) -> bool:
        """The log's first batch is now at `start_offset`: keep the set in effect just below
        it (what a reset to it carries) and every later one (rule 5). True if changed."""
        index = bisect.bisect_left(self._entries, start_offset, key=lambda entry: entry.offset)
        if index <= 1:
            return False
        self._entries = self._entries[index - 1 :]
        return True

    def reset(self, start_offset: Offset, voters: VoterSet) -> None:
        """The log was emptied at `start_offset` to follow a leader whose set there is
        `voters` (rule 5): in effect from the record before it on."""
        self._entries = [VoterSetEntry(Offset(start_offset - 1), voters)]


class VoterSetRecords:
    """The voter sets a storage holds for its log (`StoredState.voter_sets`): an entry for
    each VOTERS control batch it holds, by base offset, and the set in effect at its log
    start when that came from below it (a record retention or DeleteRecords removed, or a
    reset's: at the offset before the start). Empty: the log holds none, and the
    partition's first set (its configuration) is in effect (`history_of`)."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[VoterSetEntry] = ()) -> None:
        self._entries = list(entries)

    @property
    def entries(self) -> tuple[VoterSetEntry, ...]:
        return tuple(self._entries)

    def copy(self) -> VoterSetRecords:
        return VoterSetRecords(self._entries)

    def on_batch(self, batch: bytes, base_offset: Offset) -> bool:
        """A batch appended (or found by recovery) at `base_offset`: True if it holds a
        voter set. A VOTERS batch that cannot be read counts for nothing (the core refuses
        one at its door)."""
        try:
            voters = voters_in_batch(batch)
        except ValueError:
            return False
        if voters is None:
            return False
        self._entries = [e for e in self._entries if e.offset < base_offset]
        self._entries.append(VoterSetEntry(base_offset, voters))
        return True

    def truncate(self, offset: Offset) -> bool:
        """The log lost everything at or above `offset`. True if changed."""
        kept = [entry for entry in self._entries if entry.offset < offset]
        changed = len(kept) != len(self._entries)
        self._entries = kept
        return changed

    def trim(self, first_offset: Offset) -> bool:
        """The log's first batch is at `first_offset`: keep the set in effect below it
        (a reset sends it) and every later one. True if changed."""
        index = bisect.bisect_left(self._entries, first_offset, key=lambda entry: entry.offset)
        if index <= 1:
            return False
        del self._entries[: index - 1]
        return True

    def reset(self, start_offset: Offset, voters: VoterSet | None) -> None:
        """The log was emptied at `start_offset`, `voters` in effect there (None: the
        partition's first set)."""
        self._entries = [] if voters is None else [VoterSetEntry(Offset(start_offset - 1), voters)]


def history_of(
    first: VoterSet, entries: Iterable[VoterSetEntry], log_start_offset: Offset
) -> VoterSetHistory:
    """The history a replica starts with: what its storage holds (`VoterSetRecords`),
    after the partition's first set unless an entry from below the log start stands in for
    it."""
    held = list(entries)
    if held and held[0].offset < log_start_offset:
        return VoterSetHistory(held)
    return VoterSetHistory([VoterSetEntry(BEFORE_THE_LOG, first), *held])


def change_refusal(
    history: VoterSetHistory,
    proposed: VoterSet,
    *,
    hwm: Offset,
    epoch_start_offset: Offset,
) -> str | None:
    """Why a leader may not append `proposed` now (rules 2, 3), or None when it may."""
    if hwm <= epoch_start_offset:
        return "no record of the leader's own epoch is committed yet"
    if history.uncommitted(hwm):
        return f"the voter set appended at {history.last_offset} is not committed yet"
    current = history.current
    if proposed == current:
        return "the voter set is already that"
    if not current.differs_by_at_most_one(proposed) and not names_directories(current, proposed):
        return "a change adds or removes one voter at a time"
    return None


def names_directories(current: VoterSet, proposed: VoterSet) -> bool:
    """Whether `proposed` is `current` with the directories of some voters known by node
    alone named (rule 7's keys bound to the copies that answer): every majority of it is
    one of `current`, so naming any number at once is as safe as one change."""
    if current.nodes != proposed.nodes:
        return False
    for key in proposed:
        before = current.key_of(key.node)
        if before != key and (before is None or before.directory != NO_DIRECTORY):
            return False
    return True


# ---------------------------------------------------------------- the VotersRecord -----
VOTERS_RECORD_VERSION = 0
KRAFT_VERSION_MIN, KRAFT_VERSION_MAX = 0, 1  # the KRaftVersionFeature each voter supports
_VOTER = struct.Struct(">iQQ")  # VoterId, VoterDirectoryId as a uuid (its high half 0)


def encode_voters(voters: VoterSet) -> bytes:
    """Kafka's VotersRecord v0 (KIP-853, flexible), the value of a VOTERS control record:
    Version int16, Voters (compact array of VoterId int32, VoterDirectoryId uuid, Endpoints
    (compact array, empty here: a partition's voters are found by node id), and
    KRaftVersionFeature {MinSupportedVersion, MaxSupportedVersion int16}), tagged fields."""
    out = bytearray(struct.pack(">h", VOTERS_RECORD_VERSION))
    out += uvarint(len(voters) + 1)
    for key in voters:
        out += _VOTER.pack(key.node, 0, key.directory)
        out += uvarint(1)  # no endpoints
        out += struct.pack(">hh", KRAFT_VERSION_MIN, KRAFT_VERSION_MAX) + uvarint(0)
        out += uvarint(0)  # the voter's tagged fields
    out += uvarint(0)
    return bytes(out)


def decode_voters(value: bytes) -> VoterSet:
    """The voter set of a VotersRecord value (`encode_voters`; endpoints are skipped).
    Raises ValueError when it cannot be one."""
    try:
        (version,) = struct.unpack_from(">h", value, 0)
        if version != VOTERS_RECORD_VERSION:
            raise ValueError(f"VotersRecord version {version}")
        count, position = read_uvarint(value, 2)
        keys = []
        for _ in range(count - 1):
            node, high, low = _VOTER.unpack_from(value, position)
            if high or node < 0:
                raise ValueError(f"voter {node} with directory {high:x}{low:016x}")
            position += _VOTER.size
            endpoints, position = read_uvarint(value, position)
            for _ in range(endpoints - 1):  # Name, Host (compact strings), Port, tags
                for _ in range(2):
                    length, position = read_uvarint(value, position)
                    position += length - 1
                position += 2
                position = _skip_tags(value, position)
            position += 4  # KRaftVersionFeature's two int16
            position = _skip_tags(value, _skip_tags(value, position))
            keys.append(ReplicaKey(NodeId(node), DirectoryId(low)))
        if _skip_tags(value, position) != len(value):
            raise ValueError("bytes after the VotersRecord")
    except struct.error as error:
        raise ValueError(f"a VotersRecord cut short: {error}") from error
    return VoterSet.of(keys)


def _skip_tags(value: bytes, position: int) -> int:
    count, position = read_uvarint(value, position)
    for _ in range(count):
        _, position = read_uvarint(value, position)
        size, position = read_uvarint(value, position)
        position += size
    if position > len(value):
        raise ValueError("tagged fields past the end of the VotersRecord")
    return position


def voters_batch(
    voters: VoterSet, *, base_offset: Offset, epoch: Epoch, timestamp_ms: int = 0
) -> bytes:
    """A VOTERS control batch of one record holding `voters` (a leader's change)."""
    return build_control_batch(
        base_offset=base_offset,
        epoch=epoch,
        control_type=CONTROL_TYPE_VOTERS,
        timestamp_ms=timestamp_ms,
        value=encode_voters(voters),
    )


def voters_in_batch(batch: bytes) -> VoterSet | None:
    """The voter set a VOTERS control batch holds; None for any other batch. Raises
    ValueError for a VOTERS batch that cannot be read."""
    record = control_record(batch)
    if record is None or record[0] != CONTROL_TYPE_VOTERS:
        return None
    if record[1] is None:
        raise ValueError("a VOTERS control record without a value")
    return decode_voters(record[1])
