"""One partition on this broker: its replica, its disk log, and the task that drives them.

Rules of this file:
- Inputs (ticks, peer messages, produce requests) queue up and are stepped together; then
  one `Ready` is carried out: write, send `messages`, fsync, send `messages_after_persist`,
  `advance` (tidelog.node.driver). Inputs that arrive during the fsync wait for the next
  round, so one fsync covers them all (group commit).
- The fsync runs in a worker thread, or on the loop itself when the round wrote little and
  no other sync of the node is in a thread (`Syncs`): a lone record is then not handed to a
  thread and back (two thread wakeups, the second behind the loop's hold on the GIL), and
  what the round sends leaves before the loop blocks. A sync on the loop that took longer
  than `SYNC_INLINE_SLOW_S` sends every sync of the node to the threads for a while.
- Nothing steps the replica between `ready()` and `advance()`.
- Damage a read found (StorageError with the log marked `needs_repair`, by a round or by a
  Fetch, which starts a round if none is coming: a quiesced partition has no ticks) is
  repaired in this partition alone, at the start of its next round: the log sets
  it aside (`DiskStorage.quarantine`) and the replica starts again on what is left, a
  follower with a repair floor that fetches the rest from its leader (scenario 16). Both
  run in a worker thread (they read and copy up to whole segments); meanwhile `busy` is
  set and nothing else touches the log (the handlers answer KAFKA_STORAGE_ERROR).
- A write or fsync that fails with a disk error (ENOSPC, EDQUOT, EIO, EROFS) is never
  retried: the partition fails the produce requests that wait, takes no new input (what was
  queued goes to the replica that starts again), and reopens its log from disk
  (`DiskStorage.reopen`: recovery, cut back to the last completed sync; fsyncgate) with a
  growing delay until the disk takes it, then starts the replica again on it. Meanwhile it
  refuses writes (StorageError) and serves the reads its old replica may. The node logs the
  outage once (`DiskHealth`). Any other failure stops the node (fail-stop): it is a bug.
- This is the partition's one door: the other server modules give it typed inputs
  (server/partition_inputs.py, one frozen dataclass per kind, stepped by `_step`) and read
  it through its typed queries (`status`, `read`, `latest_offset`, ...); none of them
  touches its replica or its disk log. What it tells them (a round done, ISR proposals,
  damage set aside, a record declined) goes to the callbacks it is built with.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial
from typing import assert_never

from tidelog.clock import wall_ms
from tidelog.core.isr import IsrProposal, PartitionRecord
from tidelog.core.messages import FetchResult, Message, ProduceResult
from tidelog.core.replica import (
    NO_LIVENESS,
    Liveness,
    Replica,
    ReplicaConfig,
    ReplicaStatus,
    Rng,
    Role,
)
from tidelog.core.storage import RepairFloor
from tidelog.errors import NotLeader, OffsetOutOfRange, RequestTimedOut, StorageError, TidelogError
from tidelog.node.driver import (
    ApplyRecord,
    apply_committed,
    begin_round,
    finish_round,
    open_replica,
)
from tidelog.protocol.kafka import join_batches
from tidelog.protocol.peer import PartitionKey
from tidelog.server.deadlines import Deadlines
from tidelog.server.disk_health import (
    DISK_RETRY_S_MAX,
    DISK_RETRY_S_MIN,
    DiskHealth,
    Syncs,
    describe_disk_error,
    is_disk_error,
)
from tidelog.server.logs import partition_fields
from tidelog.server.metrics import NULL_METRICS, NodeMetrics
from tidelog.server.partition_inputs import (
    Campaign,
    DeleteRecords,
    Input,
    NodeChange,
    Propose,
    Retain,
    SetMembers,
    SetMinInsync,
    SetThrottle,
    Step,
    TakeAnswer,
    TakeRecord,
    Tick,
    Transfer,
    campaign_if_leaderless,
    carry_settings,
    delete_records,
    isr_of,
    reconfigure,
    step_message,
    take_answer,
    take_record,
    transfer,
)
from tidelog.server.round_lines import (
    name_lost_copies,
    name_repair,
    name_role,
    name_what_is_given_up,
)
from tidelog.server.topic_config import TopicConfig
from tidelog.types import DirectoryId, Epoch, NodeId, Offset
from tidelog.wal import DiskStorage, WalConfig

log = logging.getLogger(__name__)


Send = Callable[[PartitionKey, Sequence[Message]], None]
OpenReplica = Callable[[DiskStorage], Replica]
OnRound = Callable[["PartitionRunner"], None]
OnProposals = Callable[["PartitionRunner", Sequence[IsrProposal]], None]
OnDeclined = Callable[[PartitionKey, PartitionRecord], None]
OnQuiesce = Callable[["PartitionRunner"], None]
INPUTS_MAX = 100_000


@dataclass(frozen=True, slots=True)
class PartitionSnapshot:
    """What /status tells of a partition: its replica's status, the offset after the last
    data record below its HWM (`PartitionRunner.data_end_offset`), the disk error its
    log waits on (None: none), and whether it repairs, all of one moment."""

    status: ReplicaStatus
    data_end: Offset
    disk_error: str | None
    # Damage a read found waits for its repair, a worker sets it aside, or the replica
    # fetches back up to its repair floor: the replica's status does not show the first
    # two (its log is cut under it, and the replica is replaced once the cut is done).
    repairing: bool


def release(waiters: set[asyncio.Future[None]]) -> None:
    """End the waits of long-polling fetchers (those not already ended)."""
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)


def timed_out(request_id: int, timeout_s: float) -> ProduceResult:
    """The answer to a produce not answered in `timeout_s`."""
    return ProduceResult(
        request_id, None, None, RequestTimedOut(f"not answered in {timeout_s:g} s")
    )


def nothing() -> None:
    """What a long-polling fetch's wait ends with at its deadline."""


def disk_log(
    directory: str, wal_config: WalConfig, directory_id: DirectoryId | None = None
) -> DiskStorage:
    """A partition's disk log in `directory`, recovered: what a `PartitionRunner` is built
    on. A new directory takes the id `directory_id` (None: a random one), durable with the
    log's first sync (lazy: the first rounds of a new topic's partitions sync in groups).
    Disk work only, fit for a worker thread (server/copies.py opens a new topic's logs
    so)."""
    given = None if directory_id is None else lambda: directory_id
    return DiskStorage(
        directory, clock=wall_ms, config=wal_config, new_directory_id=given, lazy=True
    )


def replica_opener(
    replica_config: ReplicaConfig, rng: Rng, liveness: Liveness = NO_LIVENESS
) -> OpenReplica:
    """How a partition's replica starts on its disk log (now, and again after a repair or
    a disk outage)."""

    def start_replica(storage: DiskStorage) -> Replica:
        return open_replica(replica_config, storage, rng, liveness)

    return start_replica


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """A partition about to be opened on this node (`Broker.plan_partition`): its settings,
    and where its log lies, with the id a new directory takes (its copy claimed)."""

    key: PartitionKey
    config: TopicConfig
    replica_config: ReplicaConfig
    directory: str
    wal_config: WalConfig
    directory_id: DirectoryId | None

    def open_log(self) -> OpenedLog:
        """Its disk log, recovered (disk work only: a worker thread may run it)."""
        return OpenedLog(disk_log(self.directory, self.wal_config, self.directory_id))


@dataclass(frozen=True, slots=True)
class OpenedLog:
    """A planned partition's disk log, opened (`PartitionPlan.open_log`): handed as it is to
    the runner made on it (`Broker.start_partition`), or released."""

    storage: DiskStorage

    def release(self) -> None:
        self.storage.release()


class PartitionRunner:
    """Drives one replica; `submit` inputs, `produce` batches, wait for the HWM to move.

    `on_round` is called after each round that carried out a Ready; ISR mode: a leader's
    ISR proposals go to `on_proposals`, damage set aside to `on_set_aside`, and a record
    this replica declines to lead for (it started again) to `on_declined`."""

    def __init__(
        self,
        key: PartitionKey,
        storage: DiskStorage | OpenedLog,
        *,
        open_replica: OpenReplica,
        send: Send,
        executor: Executor,
        fatal: Callable[[BaseException], None],
        disk: DiskHealth,
        on_round: OnRound | None = None,
        on_proposals: OnProposals | None = None,
        on_set_aside: OnRound | None = None,
        on_declined: OnDeclined | None = None,
        syncs: Syncs | None = None,
        metrics: NodeMetrics = NULL_METRICS,
        on_quiesce: OnQuiesce | None = None,
    ) -> None:
        self.key = key
        # A log opened for it (`PartitionPlan.open_log`, maybe in a worker thread).
        self.storage = storage.storage if isinstance(storage, OpenedLog) else storage
        self.open_replica = open_replica
        try:
            self.replica = open_replica(self.storage)
        except BaseException:
            self.storage.release()
            raise
        self.send = send
        self.executor = executor
        self.fatal = fatal
        self.disk = disk
        self.on_round = on_round
        self.syncs = Syncs(executor) if syncs is None else syncs
        self.metrics = metrics
        # ISR mode (server/isr_control.py): a leader's ISR proposals, damage set aside, and
        # a record declined.
        self.on_proposals = on_proposals
        self.on_set_aside = on_set_aside
        self.on_declined = on_declined
        # Whether its replica sleeps (core/quiesce.py): told to `on_quiesce` as it changes,
        # so that the node ticks only the partitions awake.
        self.on_quiesce = on_quiesce
        self.quiesced = False
        self._status: ReplicaStatus | None = None  # `status()`, until the next round
        self._isr_mode = isr_of(self.replica) is not None
        self.inputs: deque[Input] = deque()
        self.futures: dict[int, asyncio.Future[ProduceResult]] = {}
        self.next_request = 0
        self.task: asyncio.Task[None] | None = None
        self.stopped = False
        self.disk_error: OSError | None = None  # the log waits for its disk
        self.busy = False  # a worker thread repairs the log: no one else may touch it
        self.disk_retry_s = DISK_RETRY_S_MIN
        # Long-polling fetchers wait for the HWM to move; waits end at their deadlines.
        self.hwm_waiters: set[asyncio.Future[None]] = set()
        self.deadlines = Deadlines()
        status = self.replica.status()
        self.hwm_announced = status.hwm  # the HWM long-polling fetchers were woken for
        self.seen_role = (status.role, status.epoch, status.leader_id)
        self.seen_floor: RepairFloor | None = None
        self._log_repair_change(status)

    # ---------------------------------------------------------------- inputs -----------
    def submit(self, command: Input) -> None:
        """Queue an input for the next round; dropped while the log waits for its disk
        (the replica starts again from disk: peers resend, ticks come again)."""
        if self.stopped or self.disk_error is not None:
            return
        if len(self.inputs) >= INPUTS_MAX:
            log.warning("%s: input queue full, dropping an input", self.key, extra=self._fields())
            return
        self.inputs.append(command)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._drive())

    def tick(self, command: Tick) -> None:
        """The node's timer, to a partition awake: stepped at once when no round runs or
        waits to run, and a round started only when the tick left the replica something
        to do (most ticks of an awake follower leave nothing): no task per partition per
        tick. Else queued as any input."""
        if (
            self.task is not None
            or self.inputs
            or self.stopped
            or self.disk_error is not None
            or self.storage.needs_repair is not None
        ):
            self.submit(command)
            return
        try:
            self._step(command)
        except Exception as error:  # a bug: stop the node (fail-stop), as a round would
            self.fatal(error)
            raise
        self._status = None
        self._note_quiesced()
        if self.replica.has_ready():
            self.task = asyncio.get_running_loop().create_task(self._drive())

    def _step(self, command: Input) -> None:
        """Carry out one input on the replica (the one dispatch of every input kind)."""
        replica = self.replica
        match command:
            case Propose():  # the hot paths first: a class pattern is one isinstance
                replica.propose(command.request_id, command.batch, acks=command.acks)
            case Step():
                step_message(replica, command.message)
            case Tick():
                replica.tick(now_ms=command.monotonic_ms, wall_clock_ms=command.wall_ms)
            case Campaign():
                campaign_if_leaderless(replica)
            case Transfer():
                if transfer(self.key, replica, command):
                    self.metrics.transferred()
            case SetMinInsync() | SetMembers() | SetThrottle():
                reconfigure(self.key, replica, command)
            case TakeRecord():
                declined = take_record(self.key, replica, command)
                if declined is not None and self.on_declined is not None:
                    self.on_declined(self.key, declined)
            case TakeAnswer():
                take_answer(self.key, replica, command)
            case Retain():
                self._retain(replica, command.wall_ms)
            case DeleteRecords():
                delete_records(replica, command)
            case NodeChange():
                replica.on_node_change(command.node)
            case _:
                assert_never(command)

    def _retain(self, replica: Replica, wall_ms: int) -> None:
        """Delete segments past retention.ms / retention.bytes (never at or above the HWM
        the log saved), saving the idempotent producers' snapshot at the new log start with
        it, then tell the replica where its log starts now; one INFO line per round that
        deletes any."""
        before = self.storage.log_start_offset
        deleted = self.storage.apply_retention(wall_ms, replica.producer_snapshot)
        if deleted:
            start = self.storage.log_start_offset
            replica.note_log_start(start)
            log.info(
                "%s-%d: retention deleted %d segment%s (offsets %d-%d); log start offset now %d",
                self.key.topic,
                self.key.partition,
                deleted,
                "" if deleted == 1 else "s",
                before,
                start - 1,
                start,
                extra=self._fields(),
            )

    def retention_due(self, wall_ms: int) -> bool:
        """Whether retention would delete a segment of its log now (`Retain` it then)."""
        return self.disk_error is None and not self.busy and self.storage.retention_due(wall_ms)

    def delete_records(self, offset: Offset | None) -> asyncio.Future[Offset]:
        """DeleteRecords on the leader, in its turn: the new log start, or the refusal."""
        future: asyncio.Future[Offset] = asyncio.get_running_loop().create_future()
        if self.disk_error is not None:
            future.set_exception(self.storage_error())
            return future
        self.submit(DeleteRecords(offset, future))
        return future

    def reconfigure(self, wal_config: WalConfig, min_insync: int | None) -> None:
        """The topic's configs changed: retention and segments at once, min.insync.replicas
        from the next round."""
        self.storage.config = wal_config
        self.submit(SetMinInsync(min_insync))

    def produce(
        self, batch: bytes, acks: int, timeout_s: float | None = None
    ) -> asyncio.Future[ProduceResult]:
        """Propose one record batch; the future completes with its ProduceResult, or with
        RequestTimedOut after `timeout_s` (None: no limit here) if that comes first (the
        batch may still be committed later, as in Kafka)."""
        self.next_request += 1
        request_id = self.next_request
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ProduceResult] = loop.create_future()
        if self.disk_error is not None:
            future.set_result(ProduceResult(request_id, None, None, self.storage_error()))
            return future
        self.futures[request_id] = future
        if timeout_s is not None:
            self.deadlines.add(
                loop.time() + timeout_s, future, partial(timed_out, request_id, timeout_s)
            )
        self.submit(Propose(request_id, batch, acks))
        return future

    async def wait_for_hwm(self, seen: Offset, timeout_s: float) -> None:
        """Return once the HWM is past `seen`, or after `timeout_s` (long-poll fetch)."""
        if self.replica.high_watermark() > seen or timeout_s <= 0:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self.hwm_waiters.add(waiter)
        self.deadlines.add(loop.time() + timeout_s, waiter, nothing)
        try:
            await waiter
        finally:
            self.hwm_waiters.discard(waiter)

    def data_end_offset(self, hwm: Offset) -> Offset:
        """The offset after the last data record below `hwm` (this replica's HWM): `hwm`
        less the control batches at the top of the log below it (new leaders'), which a
        consumer group's lag does not count (`DiskStorage.data_end_offset`). `hwm` itself
        while a worker thread repairs the log or the log waits for its disk."""
        if self.busy or self.disk_error is not None:
            return hwm
        return self.storage.data_end_offset(hwm)

    # ---------------------------------------------------------------- queries ----------
    # Read between rounds, on the loop: each answers as of this moment.
    def status(self) -> ReplicaStatus:
        """The replica's status: one frozen value, every field of one moment. Kept from
        one round to the next (only a round changes the replica): the node's periodic
        passes over thousands of idle partitions read it without building it again."""
        if self._status is None:
            self._status = self.replica.status()
        return self._status

    def high_watermark(self) -> Offset:
        return self.replica.high_watermark()

    @property
    def leading(self) -> bool:
        """Whether the replica leads (`status().is_leader`, without building the status)."""
        return self.replica.role is Role.LEADER

    @property
    def repairing(self) -> bool:
        """A worker thread repairs the log: it serves no read (KAFKA_STORAGE_ERROR)."""
        return self.busy

    @property
    def isr_mode(self) -> bool:
        """Whether the replica replicates in ISR mode (docs/isr.md), not by quorum: fixed
        by the topic, for every replica it starts."""
        return self._isr_mode

    def isr_record(self) -> PartitionRecord | None:
        """ISR mode: the controller's record the replica holds (None: none, or quorum)."""
        replica = isr_of(self.replica)
        return None if replica is None else replica.partition_record()

    def declines_leadership(self) -> bool:
        """ISR mode: the replica will not lead the epoch its record names it for."""
        replica = isr_of(self.replica)
        return replica is not None and replica.declines_leadership()

    def snapshot(self) -> PartitionSnapshot:
        status = self.replica.status()
        error = None if self.disk_error is None else str(self.disk_error)
        repairing = (
            self.busy or self.storage.needs_repair is not None or status.repair_floor is not None
        )
        return PartitionSnapshot(status, self.data_end_offset(status.hwm), error, repairing)

    def size_bytes(self) -> int:
        """The bytes of its log's segments (DescribeLogDirs)."""
        return self.storage.size_bytes()

    def read(
        self, offset: Offset, *, current_leader_epoch: Epoch | None, max_bytes: int, now_ms: int
    ) -> tuple[FetchResult, bytes | memoryview]:
        """A consumer's Fetch at `offset`: what the replica may serve (`Replica.fetch_bounds`:
        its error, or the HWM and log start), and the committed batches from `offset` below
        that HWM, at most `max_bytes` (at least one batch). Raises StorageError (a batch
        failed its CRC) or OSError (the disk failed to read)."""
        bounds = self.replica.fetch_bounds(
            offset, current_leader_epoch=current_leader_epoch, now_ms=now_ms
        )
        if bounds.error is not None or offset >= bounds.hwm:
            return bounds, b""
        try:
            return bounds, self._read_committed(offset, bounds.hwm, max_bytes)
        except StorageError:
            if self.storage.needs_repair is not None and self.task is None:
                # A quiesced partition has no round coming: start one, which repairs.
                self.task = asyncio.get_running_loop().create_task(self._drive())
            raise

    def _read_committed(self, offset: Offset, end: Offset, max_bytes: int) -> bytes | memoryview:
        """Committed batches from `offset` to `end`: straight from the segment file when they
        are written there (always, below a leader's HWM), else through the replica's log."""
        if end <= self.storage.log_end_offset:
            try:
                return self.storage.read_range(offset, end_offset=end, max_bytes=max_bytes)
            except OffsetOutOfRange:
                pass  # retention moved the log start since the bounds were taken: ask the core
        result = self.replica.fetch(offset, max_bytes=max_bytes)
        return join_batches(result.batches)

    def latest_offset(self, *, now_ms: int) -> Offset:
        """The "latest" offset clients may see (the HWM); raises while it is not known
        (`Replica.latest_offset`: a new epoch's HWM, a read lease, not the leader)."""
        return self.replica.latest_offset(now_ms=now_ms)

    def offset_for_timestamp(self, timestamp: int) -> tuple[Offset, int] | None:
        """(offset, timestamp) of the first data record at or after `timestamp`, or None."""
        return self.storage.offset_for_timestamp(timestamp)

    def max_timestamp_record(self, below: Offset) -> tuple[Offset, int] | None:
        """(offset, timestamp) of the first data record below `below` with the largest
        timestamp, or None (ListOffsets' MAX_TIMESTAMP)."""
        return self.storage.max_timestamp_record(below)

    def end_offset_for_epoch(
        self, leader_epoch: Epoch, *, current_leader_epoch: Epoch | None, now_ms: int
    ) -> tuple[Epoch, Offset]:
        """OffsetForLeaderEpoch for a client (`Replica.end_offset_for_epoch`)."""
        return self.replica.end_offset_for_epoch(
            leader_epoch, current_leader_epoch=current_leader_epoch, now_ms=now_ms
        )

    def apply_committed(self, applied_offset: int, apply: ApplyRecord) -> int:
        """Hand `apply` every committed data record at or above `applied_offset`
        (`tidelog.node.driver.apply_committed`); the new applied offset. Called from
        `on_round` (between rounds), by the state machines fed by a log."""
        return apply_committed(self.replica, applied_offset, apply)

    # ---------------------------------------------------------------- the round --------
    async def _drive(self) -> None:
        try:
            while not self.stopped:
                try:
                    if not await self._round_or_repair():
                        return
                except OSError as error:
                    if not is_disk_error(error):
                        raise
                    await self._wait_for_disk(error)
        except Exception as error:  # a bug: stop the node (fail-stop)
            self.fatal(error)
            raise
        finally:
            self.task = None

    async def _round_or_repair(self) -> bool:
        """A round, or the repair of the damage a read in it found; False when idle."""
        try:
            return await self._round()
        except StorageError:
            if self.storage.needs_repair is None:
                raise
            await self._repair()
            return True

    async def _round(self) -> bool:
        """Step every queued input, then carry out one Ready; False when there is none."""
        if self.storage.needs_repair is not None:  # a Fetch found damage
            await self._repair()
        while self.inputs:
            self._step(self.inputs.popleft())
        self._status = None
        self._note_quiesced()
        log_end = self.storage.log_end_offset
        ready = begin_round(self.replica, self.storage, self._send)
        if ready is None:
            # Stepping an acknowledgement may have moved the HWM.
            self._maybe_wake_fetchers(self.replica.high_watermark())
            return False
        if ready.given_up or ready.truncate_to is not None:
            name_what_is_given_up(self.key, ready, log_end, self.isr_record())
        if ready.lost_copies:
            name_lost_copies(self.key, ready, self._fields())
        if ready.truncate_to is not None:
            self.metrics.truncated(self.key.topic, self.key.partition)
        if ready.reset_to is not None:
            self.metrics.reset(self.key.topic, self.key.partition)
        # The produce requests a moved HWM completes are answered before the fetchers
        # it wakes read anything (`_maybe_wake_fetchers`).
        self._complete(ready.completions)
        self._maybe_wake_fetchers(self.replica.high_watermark())
        if ready.isr_proposals and self.on_proposals is not None:
            self.on_proposals(self, ready.isr_proposals)
        inline = False
        if ready.must_sync:
            written = sum(len(batch) for batch in ready.batches)
            inline = await self.syncs.sync(self.storage, written)
            self.disk.on_sync()
        finish_round(self.replica, ready, self._send)
        self._status = None
        if inline:
            self.syncs.sent()
        # A HWM the round moved (finish_round) is announced by the next round, after
        # the produce requests it completes (a one-replica log's HWM moves when its own
        # sync is done; those come out in the next Ready).
        replica = self.replica
        if (replica.role, replica.epoch, replica.leader_id) != self.seen_role or (
            replica.repair_floor != self.seen_floor
        ):
            status = self.status()
            self._log_role_change(status)
            self._log_repair_change(status)
        if self.on_round is not None:
            self.on_round(self)
        return True

    def _note_quiesced(self) -> None:
        """Tell `on_quiesce` when the replica fell asleep or woke (core/quiesce.py)."""
        if self.replica.quiesced != self.quiesced:
            self.quiesced = self.replica.quiesced
            if self.on_quiesce is not None:
                self.on_quiesce(self)

    def shares(self, node: NodeId) -> bool:
        """Whether `node` holds a copy of this partition (a member or a voter)."""
        return node in self.replica.peers

    def _fields(self, epoch: int | None = None) -> dict[str, object]:
        """The structured fields of a log line about this partition (server/logs.py), in
        `epoch`, or in the replica's epoch now."""
        if epoch is None:
            epoch = self.replica.status().epoch
        return partition_fields(self.key.topic, self.key.partition, epoch)

    def _send(self, messages: tuple[Message, ...]) -> None:
        self.send(self.key, messages)

    async def _repair(self) -> None:
        """Set aside the damage a read found; start the replica again on what is left."""
        damage = self.storage.needs_repair
        name = f"{self.key.topic}-{self.key.partition}"
        loop = asyncio.get_running_loop()
        self.busy = True
        try:
            set_aside = await loop.run_in_executor(self.executor, self.storage.quarantine)
            replica = await loop.run_in_executor(self.executor, self.open_replica, self.storage)
        finally:
            self.busy = False
        fields = self._fields()  # the epoch the damage was found in
        if set_aside:
            log.error(
                "%s: %s: set aside; this partition repairs, the others go on",
                name,
                damage,
                extra=fields,
            )
        else:
            log.warning(
                "%s: %s: not found when read again (index rebuilt)", name, damage, extra=fields
            )
        self._adopt(self.storage, replica, NotLeader(None))
        if set_aside and self.on_set_aside is not None:
            self.on_set_aside(self)

    async def _wait_for_disk(self, error: OSError) -> None:
        """A write or fsync failed: reopen the log from disk until the disk takes it (see
        the module's rules), then start the replica again on it."""
        self.disk_error = error
        # Within an outage each try waits longer than the last, across reopens too.
        ongoing = self.disk.failure is not None
        self.disk.on_failure(self.key, error, epoch=self.replica.status().epoch)
        self._fail_pending(self.storage_error())
        delay = min(self.disk_retry_s * 2, DISK_RETRY_S_MAX) if ongoing else DISK_RETRY_S_MIN
        while not self.stopped:
            self.disk_retry_s = delay
            await asyncio.sleep(delay)
            if self._reopen():
                self.disk_error = None
                return
            delay = min(delay * 2, DISK_RETRY_S_MAX)

    def _reopen(self) -> bool:
        """Reopen the log from disk and start the replica on it; False while the disk
        still fails."""
        try:
            storage = self.storage.reopen()
        except OSError as error:
            if not is_disk_error(error):
                raise
            return False
        try:
            self._restart(storage, self.storage_error())
        except OSError as error:
            storage.release()
            if not is_disk_error(error):
                raise
            return False
        return True

    def _restart(self, storage: DiskStorage, error: TidelogError) -> None:
        """The replica starts again on `storage` (it comes back a follower); what waited
        on the old one fails with `error`."""
        self._adopt(storage, self.open_replica(storage), error)

    def _adopt(self, storage: DiskStorage, replica: Replica, error: TidelogError) -> None:
        carry_settings(self.key, replica, self.replica.status())
        self.replica = replica
        self.storage = storage
        self._status = None
        self._note_quiesced()  # a replica starts awake
        self._fail_pending(error)
        self._wake_fetchers()
        status = self.replica.status()
        self._log_role_change(status)
        self._log_repair_change(status)

    def _fail_pending(self, error: TidelogError) -> None:
        for request_id, future in self.futures.items():
            if not future.done():
                future.set_result(ProduceResult(request_id, None, None, error))
        self.futures.clear()

    def storage_error(self) -> StorageError:
        reason = "" if self.disk_error is None else f": {describe_disk_error(self.disk_error)}"
        return StorageError(f"{self.key.topic}-{self.key.partition} takes no writes{reason}")

    def _log_role_change(self, status: ReplicaStatus) -> None:
        role = (status.role, status.epoch, status.leader_id)
        if role != self.seen_role:
            if status.role is Role.LEADER:
                self.metrics.elected(self.key.topic, self.key.partition)
            self.seen_role = role
            name_role(self.key, status, self._fields(status.epoch))

    def _log_repair_change(self, status: ReplicaStatus) -> None:
        if status.repair_floor != self.seen_floor:
            self.seen_floor = status.repair_floor
            name_repair(self.key, status, self.storage.directory, self._fields(status.epoch))

    def _complete(self, completions: Sequence[ProduceResult]) -> None:
        for result in completions:
            future = self.futures.pop(result.request_id, None)
            if future is not None and not future.done():
                future.set_result(result)

    def _maybe_wake_fetchers(self, hwm: Offset) -> None:
        """Wake the long-polling fetchers when the HWM moved, one loop iteration later
        than the produce requests it completed. A completed produce resumes in the next
        iteration and its response is written in the one after (the connection's writer
        awaits the handler's task); fetchers woken now would resume beside it and read
        and encode their records before that write. Woken one iteration later, they run
        after it."""
        if hwm != self.hwm_announced:
            self.hwm_announced = hwm
            if self.hwm_waiters:
                waiters, self.hwm_waiters = self.hwm_waiters, set()
                asyncio.get_running_loop().call_soon(release, waiters)

    def _wake_fetchers(self) -> None:
        waiters, self.hwm_waiters = self.hwm_waiters, set()
        release(waiters)

    # ---------------------------------------------------------------- stop -------------
    async def stop(self) -> None:
        """Finish the round in progress, then close the log (syncing what was written)."""
        self.stopped = True
        task = self.task
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        for future in self.futures.values():
            future.cancel()
        self.futures.clear()
        self.deadlines.close()
        self._wake_fetchers()
        if self.disk_error is None:
            self._close()
        else:
            self.storage.release()  # nothing it holds unsynced is to be trusted

    def _close(self) -> None:
        """Close the log (it syncs); a disk that fails then only leaves it unsynced."""
        try:
            self.storage.close()
        except OSError as error:
            if not is_disk_error(error):
                raise
            log.warning(
                "%s-%d: closed unsynced: %s",
                self.key.topic,
                self.key.partition,
                describe_disk_error(error),
                extra=self._fields(),
            )
            self.storage.release()
