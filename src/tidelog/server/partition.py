"""One partition on this broker: its replica, its disk log, and the task that drives them.

Rules of this file:
- Inputs (ticks, peer messages, produce requests) queue up and are stepped together; then
  one `Ready` is carried out: write, send `messages`, fsync in a worker thread, send
  `messages_after_persist`, `advance` (tidelog.node.driver). Inputs that arrive during the
  fsync wait for the next round, so one fsync covers them all (group commit).
- Nothing steps the replica between `ready()` and `advance()`.
- A failed fsync stops the process (fail-stop): after it the kernel may have dropped the
  dirty pages, and retrying would acknowledge writes that are not on disk.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TypeVar

from tidelog.core.messages import Message, ProduceResult
from tidelog.core.replica import Replica
from tidelog.errors import TidelogError
from tidelog.node.driver import write_ready
from tidelog.protocol.peer import PartitionKey
from tidelog.records import read_header
from tidelog.types import Offset
from tidelog.wal import DiskStorage

log = logging.getLogger(__name__)

APPLY_CHUNK_BYTES = 1 << 20
ApplyRecord = Callable[[int, "bytes | None", "bytes | None"], None]

Action = Callable[[Replica], None]
T = TypeVar("T")
Send = Callable[[PartitionKey, Sequence[Message]], None]
INPUTS_MAX = 100_000


class PartitionRunner:
    """Drives one replica; `submit` work, `produce` batches, wait for the HWM to move."""

    def __init__(
        self,
        key: PartitionKey,
        replica: Replica,
        storage: DiskStorage,
        *,
        send: Send,
        executor: Executor,
        fatal: Callable[[BaseException], None],
        on_round: Callable[[PartitionRunner], None] | None = None,
    ) -> None:
        self.key = key
        self.replica = replica
        self.storage = storage
        self.send = send
        self.executor = executor
        self.fatal = fatal
        self.on_round = on_round
        self.inputs: deque[Action] = deque()
        self.futures: dict[int, asyncio.Future[ProduceResult]] = {}
        self.next_request = 0
        self.task: asyncio.Task[None] | None = None
        self.stopped = False
        self.hwm_moved = asyncio.Event()
        self.hwm_announced = replica.hwm  # the HWM long-polling fetchers were woken for
        self.seen_role = (replica.role, replica.epoch, replica.leader_id)

    # ---------------------------------------------------------------- inputs -----------
    def submit(self, action: Action) -> None:
        if self.stopped:
            return
        if len(self.inputs) >= INPUTS_MAX:
            log.warning("%s: input queue full, dropping an input", self.key)
            return
        self.inputs.append(action)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._drive())

    def call(self, function: Callable[[Replica], T]) -> asyncio.Future[T]:
        """Run `function` on the replica in its turn (between rounds); its result or error
        completes the future."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def action(replica: Replica) -> None:
            try:
                result = function(replica)
            except TidelogError as error:
                future.set_exception(error)
            else:
                future.set_result(result)

        self.submit(action)
        return future

    def apply_retention(self, now_ms: int) -> None:
        """Delete segments past retention.ms / retention.bytes (never at or above the HWM
        the log saved), then tell the replica where its log starts now."""

        def retain(replica: Replica) -> None:
            if self.storage.apply_retention(now_ms):
                replica.note_log_start(self.storage.log_start_offset)

        self.submit(retain)

    def produce(self, batch: bytes, acks: int) -> asyncio.Future[ProduceResult]:
        """Propose one record batch; the future completes with its ProduceResult."""
        self.next_request += 1
        request_id = self.next_request
        future: asyncio.Future[ProduceResult] = asyncio.get_running_loop().create_future()
        self.futures[request_id] = future
        self.submit(lambda replica: replica.propose(request_id, batch, acks=acks))
        return future

    async def wait_for_hwm(self, seen: Offset, timeout_s: float) -> None:
        """Return once the HWM is past `seen`, or after `timeout_s` (long-poll fetch)."""
        if self.replica.hwm > seen or timeout_s <= 0:
            return
        event = self.hwm_moved
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            return

    # ---------------------------------------------------------------- the round --------
    async def _drive(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self.stopped:
                while self.inputs:
                    self.inputs.popleft()(self.replica)
                # Stepping an acknowledgement may move the HWM before any Ready.
                self._maybe_wake_fetchers()
                if not self.replica.has_ready():
                    return
                ready = self.replica.ready()
                write_ready(self.storage, ready)
                self.send(self.key, ready.messages)
                self._complete(ready.completions)
                if ready.must_sync:
                    await loop.run_in_executor(self.executor, self.storage.sync)
                self.send(self.key, ready.messages_after_persist)
                self.replica.advance(ready)
                self._maybe_wake_fetchers()
                self._log_role_change()
                if self.on_round is not None:
                    self.on_round(self)
        except Exception as error:  # a failed write or fsync: stop the node (fail-stop)
            self.fatal(error)
            raise
        finally:
            self.task = None

    def _log_role_change(self) -> None:
        replica = self.replica
        role = (replica.role, replica.epoch, replica.leader_id)
        if role != self.seen_role:
            self.seen_role = role
            log.info(
                "%s-%d: %s in epoch %d (leader %s, hwm %d, log end %d)",
                self.key.topic,
                self.key.partition,
                replica.role.value,
                replica.epoch,
                replica.leader_id,
                replica.hwm,
                replica.log.log_end_offset,
            )

    def _complete(self, completions: Sequence[ProduceResult]) -> None:
        for result in completions:
            future = self.futures.pop(result.request_id, None)
            if future is not None and not future.done():
                future.set_result(result)

    def _maybe_wake_fetchers(self) -> None:
        if self.replica.hwm != self.hwm_announced:
            self.hwm_announced = self.replica.hwm
            self._wake_fetchers()

    def _wake_fetchers(self) -> None:
        self.hwm_moved.set()
        self.hwm_moved = asyncio.Event()

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
        self._wake_fetchers()
        self.storage.close()


def decode_records(batch: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of each record of a data batch."""
    from kafka.record.default_records import DefaultRecordBatch  # noqa: PLC0415

    return [(record.offset, record.key, record.value) for record in DefaultRecordBatch(batch)]


def apply_committed(replica: Replica, applied_offset: int, apply: ApplyRecord) -> int:
    """Hand `apply` every committed data record at or above `applied_offset`, in offset
    order (commit index, then last applied); returns the new applied offset. The metadata
    log and the group coordinators' logs are state machines fed this way."""
    end = Offset(min(replica.hwm, replica.log.log_end_offset))
    while applied_offset < end:
        batches = replica.log.read(
            Offset(applied_offset), end_offset=end, max_bytes=APPLY_CHUNK_BYTES
        )
        if not batches:
            break
        for batch in batches:
            header = read_header(batch)
            if not header.is_control:
                for offset, key, value in decode_records(batch):
                    if offset >= applied_offset:
                        apply(offset, key, value)
            applied_offset = header.next_offset
    return applied_offset
