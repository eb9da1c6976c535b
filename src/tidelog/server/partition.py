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
  Fetch) is repaired in this partition alone, at the start of its next round: the log sets
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
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from functools import partial
from typing import TypeVar

from tidelog.core.isr import IsrProposal
from tidelog.core.messages import Message, ProduceResult, Ready
from tidelog.core.replica import Replica, ReplicaStatus, Role
from tidelog.core.storage import RepairFloor
from tidelog.errors import NotLeader, RequestTimedOut, StorageError, TidelogError
from tidelog.node.driver import begin_round, finish_round
from tidelog.protocol.peer import PartitionKey
from tidelog.server.deadlines import Deadlines
from tidelog.server.logs import partition_fields
from tidelog.server.metrics import NULL_METRICS, NodeMetrics
from tidelog.types import Offset
from tidelog.wal import DiskStorage

log = logging.getLogger(__name__)


Action = Callable[[Replica], None]
T = TypeVar("T")
Send = Callable[[PartitionKey, Sequence[Message]], None]
OpenReplica = Callable[[DiskStorage], Replica]
INPUTS_MAX = 100_000
# What a failing disk raises: the partition waits for it; anything else is a bug.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})
DISK_RETRY_S_MIN = 0.1
DISK_RETRY_S_MAX = 5.0
DISK_QUIET_S = 5.0  # a disk that took every write this long after a failure is well again
SYNC_INLINE_BYTES_MAX = 4096  # a round that wrote at most this may sync on the loop
SYNC_INLINE_SLOW_S = 0.02  # far beyond a small fsync; far below an election timeout
SYNC_INLINE_BACKOFF_S = 1.0


def is_disk_error(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in DISK_ERRNOS


class DiskHealth:
    """Whether this node's disk takes writes. An outage begins at the first write or fsync
    that fails, and is over once a sync completed after the last failure and `quiet_s`
    passed without another (`on_sync`, or `maybe_over` from a timer): each is logged once
    (one line, no traceback), however often the partitions fail and try again in between
    (a little room freed, then filled again)."""

    def __init__(
        self, *, quiet_s: float = DISK_QUIET_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.quiet_s = quiet_s
        self.clock = clock
        self.failure: OSError | None = None
        self.failed_at = 0.0
        self.synced_since = False

    def on_failure(self, key: PartitionKey, error: OSError, *, epoch: int | None = None) -> None:
        """A write, fsync or open of partition `key` (in `epoch`, if known) failed."""
        if self.failure is None:
            log.error(
                "%s-%d: %s; this node acknowledges no write until the disk takes them "
                "again (it serves the reads it can meanwhile, and retries on its own)",
                key.topic,
                key.partition,
                describe_disk_error(error),
                extra=partition_fields(key.topic, key.partition, epoch),
            )
        self.failure = error
        self.failed_at = self.clock()
        self.synced_since = False

    def on_sync(self) -> None:
        if self.failure is not None:
            self.synced_since = True
            self.maybe_over()

    def maybe_over(self) -> None:
        if (
            self.failure is not None
            and self.synced_since
            and self.clock() - self.failed_at >= self.quiet_s
        ):
            log.warning(
                "the disk takes writes again: %s is over", describe_disk_error(self.failure)
            )
            self.failure = None


class Syncs:
    """Where the rounds of one node's partitions fsync: on the loop when the round wrote
    little, no sync is in a worker thread, and no sync on the loop was slow lately; else in
    `executor` (see the module's rules). `flush` sends what the rounds queued for the peers
    (the transport's), called before and after a sync on the loop."""

    def __init__(
        self,
        executor: Executor,
        flush: Callable[[], None] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        metrics: NodeMetrics = NULL_METRICS,
    ) -> None:
        self.executor = executor
        self.flush = flush
        self.clock = clock
        self.metrics = metrics
        self.in_threads = 0
        self.inline_after = 0.0  # a slow sync on the loop: threads only until then

    def inline(self, written_bytes: int) -> bool:
        return (
            written_bytes <= SYNC_INLINE_BYTES_MAX
            and self.in_threads == 0
            and self.clock() >= self.inline_after
        )

    async def sync(self, storage: DiskStorage, written_bytes: int) -> bool:
        """`storage.sync()`, here or in a thread; True when it ran on the loop."""
        if self.inline(written_bytes):
            if self.flush is not None:
                self.flush()  # the peers' messages leave before the loop blocks
            started = self.clock()
            storage.sync()
            took = self.clock() - started
            if took > SYNC_INLINE_SLOW_S:
                self.inline_after = self.clock() + SYNC_INLINE_BACKOFF_S
            self.metrics.fsynced(took, written_bytes)
            return True
        self.in_threads += 1
        try:
            took = await asyncio.get_running_loop().run_in_executor(
                self.executor, timed_sync, storage, self.clock
            )
        finally:
            self.in_threads -= 1
        self.metrics.fsynced(took, written_bytes)
        return False

    def sent(self) -> None:
        """After a round that synced on the loop: its acknowledgements leave now."""
        if self.flush is not None:
            self.flush()


def release(waiters: set[asyncio.Future[None]]) -> None:
    """End the waits of long-polling fetchers (those not already ended)."""
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)


def timed_sync(storage: DiskStorage, clock: Callable[[], float]) -> float:
    """`storage.sync()` in a worker thread; the seconds it took there."""
    started = clock()
    storage.sync()
    return clock() - started


def timed_out(request_id: int, timeout_s: float) -> ProduceResult:
    """The answer to a produce not answered in `timeout_s`."""
    return ProduceResult(
        request_id, None, None, RequestTimedOut(f"not answered in {timeout_s:g} s")
    )


def nothing() -> None:
    """What a long-polling fetch's wait ends with at its deadline."""


def describe_disk_error(error: OSError) -> str:
    """'disk full (No space left on device: PATH)', or 'disk error (...)'."""
    full = error.errno in (errno.ENOSPC, errno.EDQUOT)
    where = f": {error.filename}" if error.filename else ""
    return f"{'disk full' if full else 'disk error'} ({error.strerror or error}{where})"


class PartitionRunner:
    """Drives one replica; `submit` work, `produce` batches, wait for the HWM to move."""

    def __init__(
        self,
        key: PartitionKey,
        storage: DiskStorage,
        *,
        open_replica: OpenReplica,
        send: Send,
        executor: Executor,
        fatal: Callable[[BaseException], None],
        disk: DiskHealth,
        on_round: Callable[[PartitionRunner], None] | None = None,
        syncs: Syncs | None = None,
        metrics: NodeMetrics = NULL_METRICS,
    ) -> None:
        self.key = key
        self.storage = storage
        self.open_replica = open_replica
        self.replica = open_replica(storage)
        self.send = send
        self.executor = executor
        self.fatal = fatal
        self.disk = disk
        self.on_round = on_round
        self.syncs = Syncs(executor) if syncs is None else syncs
        self.metrics = metrics
        # ISR mode (server/isr_control.py): a leader's ISR proposals, and damage set aside.
        self.on_proposals: Callable[[PartitionRunner, Sequence[IsrProposal]], None] | None = None
        self.on_set_aside: Callable[[PartitionRunner], None] | None = None
        self.inputs: deque[Action] = deque()
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
    def submit(self, action: Action) -> None:
        """Queue an input for the next round; dropped while the log waits for its disk
        (the replica starts again from disk: peers resend, ticks come again)."""
        if self.stopped or self.disk_error is not None:
            return
        if len(self.inputs) >= INPUTS_MAX:
            log.warning("%s: input queue full, dropping an input", self.key, extra=self._fields())
            return
        self.inputs.append(action)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._drive())

    def call(self, function: Callable[[Replica], T]) -> asyncio.Future[T]:
        """Run `function` on the replica in its turn (between rounds); its result or error
        completes the future."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if self.disk_error is not None:
            future.set_exception(self.storage_error())
            return future

        def action(replica: Replica) -> None:
            try:
                result = function(replica)
            except TidelogError as error:
                future.set_exception(error)
            else:
                future.set_result(result)

        self.submit(action)
        return future

    def apply_retention(self, wall_ms: int) -> None:
        """Delete segments past retention.ms / retention.bytes (never at or above the HWM
        the log saved), saving the idempotent producers' snapshot at the new log start with
        it, then tell the replica where its log starts now; one INFO line per round that
        deletes any."""

        def retain(replica: Replica) -> None:
            before = self.storage.log_start_offset
            deleted = self.storage.apply_retention(wall_ms, replica.producer_snapshot)
            if deleted:
                start = self.storage.log_start_offset
                replica.note_log_start(start)
                log.info(
                    "%s-%d: retention deleted %d segment%s (offsets %d-%d); log start offset "
                    "now %d",
                    self.key.topic,
                    self.key.partition,
                    deleted,
                    "" if deleted == 1 else "s",
                    before,
                    start - 1,
                    start,
                    extra=self._fields(),
                )

        self.submit(retain)

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
        self.submit(lambda replica: replica.propose(request_id, batch, acks=acks))
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
            self.inputs.popleft()(self.replica)
        log_end = self.storage.log_end_offset
        ready = begin_round(self.replica, self.storage, self._send)
        if ready is None:
            # Stepping an acknowledgement may have moved the HWM.
            self._maybe_wake_fetchers(self.replica.high_watermark())
            return False
        self._name_what_is_given_up(ready, log_end)
        self._name_lost_copies(ready)
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
        if inline:
            self.syncs.sent()
        # A HWM the round moved (finish_round) is announced by the next round, after
        # the produce requests it completes (a one-replica log's HWM moves when its own
        # sync is done; those come out in the next Ready).
        status = self.replica.status()
        self._log_role_change(status)
        self._log_repair_change(status)
        if self.on_round is not None:
            self.on_round(self)
        return True

    def _name_lost_copies(self, ready: Ready) -> None:
        """A follower proved its copy lost records it acknowledged (rule 7 of the replica):
        a disk replaced or a partition directory deleted, while the node was down."""
        for lost in ready.lost_copies:
            log.warning(
                "%s-%d: node %d's copy ends at %d, below the %d it acknowledged: it lost "
                "records (a disk replaced, or its directory deleted?); sending it the log again",
                self.key.topic,
                self.key.partition,
                lost.follower,
                lost.log_end,
                lost.acknowledged,
                extra=self._fields(),
            )

    def _name_what_is_given_up(self, ready: Ready, log_end: Offset) -> None:
        """ISR mode, after an unclean election (docs/isr.md rule 10): log the records this
        replica gives up to the new leader's log, those it had committed (`given_up`) and
        those above its HWM, which its old leader may have acknowledged."""
        name = f"{self.key.topic}-{self.key.partition}"
        for lost in ready.given_up:
            log.error(
                "%s: gave up offsets %d..%d, committed here, to leader %d of epoch %d after the "
                "unclean election of epoch %d: those records are lost",
                name,
                lost.start_offset,
                lost.end_offset - 1,
                lost.leader,
                lost.leader_epoch,
                lost.unclean_epoch,
                extra=self._fields(lost.leader_epoch),
            )
        replica = self.replica
        if ready.truncate_to is None or replica.isr is None:
            return
        record = replica.partition_record()
        if record is None or not record.may_give_up(record.leader_epoch):
            return
        start = max([ready.truncate_to, *(lost.end_offset for lost in ready.given_up)])
        if start < log_end:
            log.error(
                "%s: gave up offsets %d..%d to leader %d of epoch %d after the unclean election "
                "of epoch %d: any of them its old leader acknowledged is lost",
                name,
                start,
                log_end - 1,
                record.leader,
                record.leader_epoch,
                record.unclean_epoch,
                extra=self._fields(record.leader_epoch),
            )

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
        self.replica = replica
        self.storage = storage
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
            log.info(
                "%s-%d: %s in epoch %d (leader %s, hwm %d, log end %d)",
                self.key.topic,
                self.key.partition,
                status.role.value,
                status.epoch,
                status.leader_id,
                status.hwm,
                status.log_end_offset,
                extra=self._fields(status.epoch),
            )

    def _log_repair_change(self, status: ReplicaStatus) -> None:
        floor = status.repair_floor
        if floor == self.seen_floor:
            return
        name = f"{self.key.topic}-{self.key.partition}"
        fields = self._fields(status.epoch)
        if floor is None:
            log.info(
                "%s: repaired: its log is as far as before the damage again", name, extra=fields
            )
        else:
            end = "an unknown offset" if floor.end_offset is None else f"offset {floor.end_offset}"
            log.warning(
                "%s: under repair: damaged records were set aside (%s/quarantine); its log "
                "reached %s in epoch %d before: until it is that far again (fetched from its "
                "peers) it votes for no replica behind that and does not lead",
                name,
                self.storage.directory,
                end,
                floor.epoch,
                extra=fields,
            )
        self.seen_floor = floor

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
