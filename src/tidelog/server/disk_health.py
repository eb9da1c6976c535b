"""The disk under a node's partitions: whether it takes writes, and where each round fsyncs.

Part of the partition runner (server/partition.py), whose module rules say when the runner
waits for its disk and when a round syncs on the loop.

Rules of this file:
- A write or fsync fails with a disk error (`DISK_ERRNOS`: ENOSPC, EDQUOT, EIO, EROFS), or
  with a bug: only the first is waited for (`is_disk_error`).
- `DiskHealth` logs an outage once when it begins and once when it is over, however often
  the partitions fail and try again in between.
- `Syncs` fsyncs a round on the loop only when it wrote little, writes no checkpoint (the
  vote, the HWM: a file written, synced and renamed), no sync of the node is in a worker
  thread, and no sync on the loop was slow lately; else in a worker thread, in a group
  commit: the rounds that ask while a group syncs wait for the next, which syncs them all
  at once (wal/group_sync.py: one sync of the file system for many logs), one group at a
  time. A group's failure fails each of its rounds, as its own sync would have.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor

from tidelog.protocol.peer import PartitionKey
from tidelog.server.logs import partition_fields
from tidelog.server.metrics import NULL_METRICS, NodeMetrics
from tidelog.wal import DiskStorage
from tidelog.wal.group_sync import sync_logs

log = logging.getLogger("tidelog.server.partition")

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


def describe_disk_error(error: OSError) -> str:
    """'disk full (No space left on device: PATH)', or 'disk error (...)'."""
    full = error.errno in (errno.ENOSPC, errno.EDQUOT)
    where = f": {error.filename}" if error.filename else ""
    return f"{'disk full' if full else 'disk error'} ({error.strerror or error}{where})"


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
        self.waiting: list[tuple[DiskStorage, asyncio.Future[float]]] = []  # the next group
        self.group: asyncio.Task[None] | None = None  # syncing groups until none waits

    def inline(self, written_bytes: int) -> bool:
        return (
            written_bytes <= SYNC_INLINE_BYTES_MAX
            and self.in_threads == 0
            and self.clock() >= self.inline_after
        )

    async def sync(self, storage: DiskStorage, written_bytes: int) -> bool:
        """`storage.sync()`, here or in a thread; True when it ran on the loop. One that
        writes a checkpoint too (the vote, the HWM) goes to a thread."""
        if self.inline(written_bytes) and not storage.checkpoint_due():
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
            loop = asyncio.get_running_loop()
            future: asyncio.Future[float] = loop.create_future()
            self.waiting.append((storage, future))
            if self.group is None:
                self.group = loop.create_task(self._sync_groups())
            took = await future
        finally:
            self.in_threads -= 1
        self.metrics.fsynced(took, written_bytes)
        return False

    async def _sync_groups(self) -> None:
        """Sync the rounds waiting, a group at a time in a worker thread, until none waits
        (see the module's rules)."""
        loop = asyncio.get_running_loop()
        group: list[tuple[DiskStorage, asyncio.Future[float]]] = []
        try:
            while self.waiting:
                await asyncio.sleep(0)  # the rounds of this turn of the loop join it
                group, self.waiting = self.waiting, []
                started = self.clock()
                errors = await loop.run_in_executor(
                    self.executor, sync_logs, [storage for storage, _ in group]
                )
                took = self.clock() - started
                for (_, future), error in zip(group, errors, strict=True):
                    if future.done():
                        continue
                    if error is None:
                        future.set_result(took)
                    else:
                        future.set_exception(error)
                group = []
        except BaseException as error:  # a bug, or the node stops: no round waits forever
            for _, future in group + self.waiting:
                if future.done():
                    continue
                if isinstance(error, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(error)
            self.waiting = []
            raise
        finally:
            self.group = None

    def sent(self) -> None:
        """After a round that synced on the loop: its acknowledgements leave now."""
        if self.flush is not None:
            self.flush()
