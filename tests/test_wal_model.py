"""Model-based test of the disk log: random appends (of VOTERS control batches too),
truncations, syncs, retention, reopens and crashes (with torn writes) on a
FaultyFileSystem, against a list of batches, their epochs and their voter sets
(`VoterSetRecords`, as MemoryStorage keeps them).

After a crash the log holds the durable prefix (what the last sync covered), extended at
most by whole batches that were appended after it, never a torn one.
"""

from __future__ import annotations

import random
from typing import Any, cast

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tidelog.core.epochs import EpochEntry, EpochHistory
from tidelog.core.membership import ReplicaKey, VoterSet, VoterSetRecords, encode_voters
from tidelog.core.messages import HardState
from tidelog.records import CONTROL_TYPE_VOTERS, build_control_batch, read_header
from tidelog.types import DirectoryId, Epoch, NodeId, Offset
from tidelog.wal import DiskStorage, FaultyFileSystem, WalConfig
from tidelog.wal import checkpoint as ckpt
from tidelog.wal.batches import build_batches

CONFIG = WalConfig(
    segment_bytes=700, index_interval_bytes=150, hwm_checkpoint_interval_ms=0, retention_bytes=1000
)
DIRECTORY = "/data/topic-0"


def derive_epochs(epochs: list[EpochEntry], batches: list[bytes]) -> list[EpochEntry]:
    """The epoch history extended by `batches`, as Kafka derives it on append."""
    history = EpochHistory(epochs)
    for batch in batches:
        history.extend(read_header(batch))
    return list(history)


def trim_epochs(epochs: list[EpochEntry], first_offset: Offset) -> list[EpochEntry]:
    """The epoch history from the record before `first_offset` on, as Kafka trims it."""
    history = EpochHistory(epochs)
    history.trim(first_offset)
    return list(history)


class DiskLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fs = FaultyFileSystem(random.Random(0))
        self.now_ms = 0
        self.storage = self.open()
        self.working: list[bytes] = []
        self.durable: list[bytes] = []
        self.log_start = Offset(0)
        self.hwm = Offset(0)
        self.epoch = Epoch(1)
        self.epochs: list[EpochEntry] = []
        self.durable_epochs: list[EpochEntry] = []
        self.voters = VoterSetRecords()
        self.durable_voters = VoterSetRecords()
        self.hard_state = self.durable_hard_state = HardState(Epoch(0), None)

    def open(self) -> DiskStorage:
        return DiskStorage(DIRECTORY, clock=lambda: self.now_ms, config=CONFIG, fs=self.fs)

    @property
    def end(self) -> Offset:
        return (
            Offset(read_header(self.working[-1]).next_offset) if self.working else (self.log_start)
        )

    @rule(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4), bump=st.booleans())
    def append(self, sizes: list[int], bump: bool) -> None:
        if bump:
            self.epoch = Epoch(self.epoch + 1)
        batches = build_batches(
            sizes, base_offset=self.end, epochs=[self.epoch] * len(sizes), timestamp_ms=self.now_ms
        )
        self.storage.append(batches)
        self.working += batches
        self.epochs = derive_epochs(self.epochs, batches)

    @rule(nodes=st.sets(st.integers(1, 5), min_size=1, max_size=4), bump=st.booleans())
    def append_voters(self, nodes: set[int], bump: bool) -> None:
        if bump:
            self.epoch = Epoch(self.epoch + 1)
        voters = VoterSet.of(ReplicaKey(NodeId(n), DirectoryId(n + 10)) for n in nodes)
        batch = build_control_batch(
            base_offset=self.end,
            epoch=self.epoch,
            control_type=CONTROL_TYPE_VOTERS,
            timestamp_ms=self.now_ms,
            value=encode_voters(voters),
        )
        self.storage.append([batch])
        self.working.append(batch)
        self.epochs = derive_epochs(self.epochs, [batch])
        assert self.voters.on_batch(batch, read_header(batch).base_offset)

    @rule()
    def sync(self) -> None:
        self.storage.sync()
        self.now_durable()

    def now_durable(self) -> None:
        self.durable = list(self.working)
        self.durable_hard_state = self.hard_state
        self.durable_epochs = list(self.epochs)
        self.durable_voters = self.voters.copy()

    @rule(epoch=st.integers(0, 3), vote=st.none() | st.integers(1, 3))
    def save_hard_state(self, epoch: int, vote: int | None) -> None:
        voted_for = None if vote is None else NodeId(vote)
        state = HardState(Epoch(self.hard_state.epoch + epoch), voted_for)
        self.storage.save_hard_state(state)
        self.hard_state = state

    @precondition(lambda self: self.durable)
    @rule(data=st.data())
    def save_hwm(self, data: st.DataObject) -> None:
        durable_end = read_header(self.durable[-1]).next_offset
        if durable_end > self.end or durable_end < self.hwm:
            return
        self.hwm = Offset(data.draw(st.integers(self.hwm, durable_end)))
        self.storage.save_hwm(self.hwm)

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        keep = [i for i, b in enumerate(self.working) if read_header(b).base_offset >= self.hwm]
        if not keep:
            return
        index = data.draw(st.sampled_from(keep))
        offset = read_header(self.working[index]).base_offset
        self.storage.truncate_to(offset=offset)
        del self.working[index:]
        self.epochs = [entry for entry in self.epochs if entry.start_offset < offset]
        self.voters.truncate(offset)
        self.now_durable()  # A truncation syncs.

    @rule(advance_ms=st.integers(0, 10))
    def retention(self, advance_ms: int) -> None:
        self.now_ms += advance_ms
        if self.storage.apply_retention(self.now_ms):  # as MemoryStorage: only a move trims
            self.drop_below(self.storage.load().log_start_offset)

    @precondition(lambda self: self.hwm > self.log_start)
    @rule(data=st.data())
    def advance_log_start(self, data: st.DataObject) -> None:
        """DeleteRecords, to any offset up to the HWM (inside a batch too)."""
        offset = Offset(data.draw(st.integers(self.log_start + 1, self.hwm)))
        self.storage.advance_log_start(offset)
        self.drop_below(offset)

    def drop_below(self, log_start: Offset) -> None:
        """The log now starts at `log_start`: trimmed as MemoryStorage trims, at the first
        offset it holds (the base of the batch holding the start, or the start)."""
        assert log_start <= self.hwm
        self.log_start = log_start
        self.working = [b for b in self.working if read_header(b).next_offset > log_start]
        self.durable = [b for b in self.durable if read_header(b).next_offset > log_start]
        first = Offset(read_header(self.working[0]).base_offset) if self.working else log_start
        self.epochs = trim_epochs(self.epochs, first)
        self.durable_epochs = trim_epochs(self.durable_epochs, first)
        self.voters.trim(first)
        self.durable_voters.trim(first)

    @rule()
    def reopen(self) -> None:
        self.storage.close()
        self.storage = self.open()
        self.now_durable()

    @rule(tear=st.booleans())
    def crash(self, tear: bool) -> None:
        self.fs.crash(tear=tear)
        self.storage = self.open()
        recovered = self.read_all()
        assert recovered[: len(self.durable)] == self.durable or recovered == self.durable
        extra = recovered[len(self.durable) :]
        assert extra == self.working[len(self.durable) : len(recovered)]
        self.epochs = derive_epochs(self.durable_epochs, extra)
        self.voters = self.durable_voters.copy()
        for batch in extra:
            self.voters.on_batch(batch, read_header(batch).base_offset)
        self.working = list(recovered)
        self.hard_state = self.durable_hard_state
        self.now_durable()
        self.hwm = self.storage.load().hwm

    def read_all(self) -> list[bytes]:
        state = self.storage.load()
        return self.storage.read(
            state.log_start_offset, end_offset=state.log_end_offset, max_bytes=1 << 30
        )

    @invariant()
    def log_matches_the_model(self) -> None:
        state = self.storage.load()
        assert self.read_all() == self.working
        assert state.log_end_offset == self.end
        assert state.log_start_offset == self.log_start
        assert state.hard_state == self.hard_state
        assert state.hwm == min(self.hwm, self.end)
        assert state.epochs == tuple(self.epochs)
        assert state.voter_sets == self.voters.entries
        assert self.storage.needs_repair is None

    def teardown(self) -> None:
        self.storage.close()


DiskLogMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None, report_multiple_bugs=False
)
TestDiskLog = DiskLogMachine.TestCase


class Draws:
    """The values a step's `data.draw` returns, in order: to replay a falsifying example."""

    def __init__(self, *values: int) -> None:
        self.values = list(values)

    def draw(self, strategy: object) -> int:
        return self.values.pop(0)


def test_retention_after_a_torn_crash_keeps_the_epoch_before_the_log_start() -> None:
    """A torn crash leaves offsets 0-2 (epoch 1) durable, their epoch derived by recovery but
    not checkpointed yet; retention then deletes that segment. The epoch history trimmed to
    the new log start (epoch 1 from offset 2) must be checkpointed before the segment goes:
    after the next crash nothing else tells the epoch of the record before the log start."""
    machine = DiskLogMachine()
    steps = [
        lambda: machine.append(bump=False, sizes=[3, 1]),
        lambda: machine.crash(tear=True),
        lambda: machine.save_hwm(data=cast(Any, Draws(3))),
        lambda: machine.append(bump=False, sizes=[3, 1, 1, 2]),
        lambda: machine.retention(advance_ms=0),
        lambda: machine.crash(tear=False),
    ]
    try:
        machine.log_matches_the_model()
        for step in steps:
            step()
            machine.log_matches_the_model()
        state = machine.storage.load()
        assert (state.log_start_offset, state.log_end_offset, state.hwm) == (3, 3, 3)
        assert state.epochs == (EpochEntry(Epoch(1), Offset(2)),)
        assert ckpt.read_epochs(machine.fs, DIRECTORY) == [EpochEntry(Epoch(1), Offset(2))]
    finally:
        machine.teardown()


def test_a_reopen_keeps_the_voter_set_carried_below_the_log_start() -> None:
    """Retention moves the log start past a VOTERS batch (its set is carried, at offset 4),
    a truncation empties the log and a new VOTERS batch lands at the log start: a reopen
    keeps both, as MemoryStorage does (trimming the carried set at recovery would leave
    none in effect at the record before the start)."""
    machine = DiskLogMachine()
    steps = [
        lambda: machine.append(bump=False, sizes=[1, 3]),
        lambda: machine.append_voters(bump=False, nodes={1}),
        lambda: machine.append(bump=False, sizes=[1, 3, 4]),
        machine.reopen,
        lambda: machine.save_hwm(data=cast(Any, Draws(5))),
        lambda: machine.retention(advance_ms=0),
        lambda: machine.truncate(data=cast(Any, Draws(0))),
        lambda: machine.append_voters(bump=False, nodes={2}),
        machine.reopen,
    ]
    try:
        for step in steps:
            step()
            machine.log_matches_the_model()
        state = machine.storage.load()
        assert state.log_start_offset == 5
        assert [(entry.offset, entry.voters.nodes) for entry in state.voter_sets] == [
            (4, {1}),
            (5, {2}),
        ]
    finally:
        machine.teardown()
