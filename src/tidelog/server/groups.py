"""Consumer groups on a broker: the asyncio adapter around the sans-IO coordinator
(`tidelog.groups.coordinator`) of one `__consumer_offsets` partition.

Rules of this file:
- The rules of groups live in the coordinator; this file only does its IO: it hands in
  the time, the committed records and the partition's leadership after each round, turns
  requests into futures, appends the coordinator's `Write`s to the partition with acks=all
  and reports their outcome.
- Reads of committed offsets also need the leader's read lease: a deposed leader that has
  not noticed yet must not answer offsets a newer leader has moved.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Callable
from typing import Any

from tidelog.clock import monotonic_ms, wall_ms
from tidelog.core.replica import ACKS_ALL, Role
from tidelog.errors import NotLeader, OffsetNotAvailable
from tidelog.groups.coordinator import Coordinator
from tidelog.groups.group import (
    Group,
)
from tidelog.groups.messages import (
    Commit,
    CommittedOffset,
    DeleteGroup,
    DeleteOffsets,
    Effect,
    FetchOffsets,
    GroupConfig,
    GroupError,
    Heartbeat,
    Join,
    JoinResult,
    Leave,
    Now,
    Reply,
    Request,
    Sync,
    SyncResult,
    Write,
    error_of_write,
)
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.metadata import OFFSETS_TOPIC
from tidelog.server.partition import PartitionRunner
from tidelog.wal.batches import producer_batch

__all__ = [
    "OFFSETS_TOPIC",
    "GroupConfig",
    "GroupCoordinator",
    "GroupError",
    "group_partition",
]

log = logging.getLogger("tidelog.groups")


def result_of(reply: Reply) -> Any:
    """A reply's result; GroupError when it failed (MEMBER_ID_REQUIRED carries the member
    id to join with, KIP-394)."""
    if reply.error is not ErrorCode.NONE:
        given = reply.result.member_id if isinstance(reply.result, JoinResult) else ""
        raise GroupError(reply.error, member_id=given)
    return reply.result


def group_partition(group_id: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of a group: Kafka's `abs(hashCode) % partitions`,
    with Java's String.hashCode over UTF-16 code units, so groups land where Kafka puts them."""
    data = group_id.encode("utf-16-be")
    code = 0
    for index in range(0, len(data), 2):
        code = (31 * code + int.from_bytes(data[index : index + 2], "big")) & 0xFFFFFFFF
    return (code & 0x7FFFFFFF) % partitions


def now() -> Now:
    return Now(monotonic_ms(), wall_ms())


class GroupCoordinator:
    """The groups of one `__consumer_offsets` partition, while this node leads it."""

    def __init__(
        self,
        partition: int,
        config: GroupConfig,
        *,
        topic_exists: Callable[[str], bool],
        clock: Callable[[], Now] = now,
    ) -> None:
        self.machine = Coordinator(
            partition,
            config,
            topic_exists=topic_exists,
            new_member_id=lambda client_id: f"{client_id}-{uuid.uuid4()}",
        )
        self.partition = partition
        self.config = config
        self.clock = clock
        self.runner: PartitionRunner | None = None
        self.futures: dict[int, asyncio.Future[Reply]] = {}
        self.request_ids = itertools.count(1)
        self.tasks: set[asyncio.Task[None]] = set()

    @property
    def loaded(self) -> bool:
        return self.machine.loaded

    @property
    def groups(self) -> dict[str, Group]:
        return self.machine.groups

    # ================================================================ the partition ===
    def on_round(self, runner: PartitionRunner) -> None:
        """After each round of the partition: follow its leadership, apply what committed."""
        self.runner = runner
        state = runner.status()
        machine = self.machine
        if state.role is not Role.LEADER:
            if machine.active:
                machine.resign("no longer the leader")
                self.flush()
            return
        machine.lead(int(state.epoch), int(state.log_start_offset))
        applied = runner.apply_committed(machine.applied_offset, machine.apply)
        machine.applied(applied, self.clock(), caught_up=state.hwm > state.epoch_start_offset)
        self.flush()

    def tick(self) -> None:
        """Session and rebalance timeouts, deadlines, offsets retention."""
        runner = self.runner
        if runner is not None and self.machine.active and not self.leads(runner):
            self.machine.resign("no longer the leader")
        self.machine.tick(self.clock())
        self.flush()

    @staticmethod
    def leads(runner: PartitionRunner) -> bool:
        return runner.status().role is Role.LEADER

    def expire_now(self) -> None:
        self.machine.expire_now()

    def flush(self) -> None:
        """Carry out the coordinator's effects: answer requests, start writes."""
        for effect in self.machine.take():
            self.carry_out(effect)

    def carry_out(self, effect: Effect) -> None:
        if isinstance(effect, Reply):
            future = self.futures.pop(effect.request, None)
            if future is not None and not future.done():
                future.set_result(effect)
            return
        task = asyncio.get_running_loop().create_task(self.write(effect))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def write(self, write: Write) -> None:
        """Append a Write with acks=all; report its outcome to the coordinator."""
        runner = self.runner
        next_offset: int | None = None
        if runner is None:
            code = ErrorCode.NOT_COORDINATOR
        else:
            batch = producer_batch(
                list(write.values), keys=list(write.keys), timestamp_ms=write.wall_ms
            )
            try:
                result = await asyncio.wait_for(
                    runner.produce(batch, ACKS_ALL), self.config.commit_timeout_ms / 1000
                )
                code, next_offset = error_of_write(result.error), result.next_offset
            except TimeoutError:
                code = ErrorCode.REQUEST_TIMED_OUT
            except asyncio.CancelledError:
                code = ErrorCode.NOT_COORDINATOR
        self.machine.written(write.write, code, next_offset, self.clock())
        if code is ErrorCode.NONE and runner is not None:
            self.on_round(runner)  # apply it now if it is committed already
        self.flush()

    # ================================================================ requests ========
    def check_serving(self) -> None:
        """Raise unless this node coordinates these groups now."""
        machine = self.machine
        if not machine.active or self.runner is None:
            raise GroupError(ErrorCode.NOT_COORDINATOR)
        if not self.leads(self.runner):
            machine.resign("no longer the leader")
            self.flush()
            raise GroupError(ErrorCode.NOT_COORDINATOR)
        if not machine.loaded:
            raise GroupError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

    def submit(self, body: Request) -> asyncio.Future[Reply]:
        self.check_serving()
        request = next(self.request_ids)
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.futures[request] = future
        self.machine.handle(request, body, self.clock())
        self.flush()
        return future

    async def ask(self, body: Request) -> Any:
        """The result of a request, once answered; GroupError when it failed."""
        return result_of(await self.submit(body))

    def ask_now(self, body: Request) -> Any:
        """The result of a request the coordinator answers at once."""
        future = self.submit(body)
        assert future.done(), "answered at once"
        return result_of(future.result())

    async def join(
        self,
        group_id: str,
        *,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        reason: str | None = None,
        require_known_member_id: bool = False,
    ) -> JoinResult:
        """JoinGroup; GroupError when refused (MEMBER_ID_REQUIRED with the id to join
        with, when `require_known_member_id`: KIP-394)."""
        body = Join(
            group_id,
            member_id,
            group_instance_id,
            client_id,
            client_host,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            tuple(protocols),
            reason,
            require_known_member_id,
        )
        result: JoinResult = await self.ask(body)
        return result

    async def sync(
        self,
        group_id: str,
        *,
        generation: int,
        member_id: str,
        assignments: dict[str, bytes],
        protocol_type: str | None = None,
        protocol: str | None = None,
        group_instance_id: str | None = None,
    ) -> tuple[str | None, str | None, bytes]:
        """SyncGroup: (protocol type, protocol, this member's assignment). A protocol type
        or protocol named (not None) must be the group's: INCONSISTENT_GROUP_PROTOCOL."""
        body = Sync(
            group_id,
            generation,
            member_id,
            tuple(assignments.items()),
            protocol_type,
            protocol,
            group_instance_id,
        )
        result: SyncResult = await self.ask(body)
        return result.protocol_type, result.protocol, result.assignment

    def heartbeat(
        self,
        group_id: str,
        *,
        generation: int,
        member_id: str,
        group_instance_id: str | None = None,
    ) -> None:
        self.ask_now(Heartbeat(group_id, generation, member_id, group_instance_id))

    def leave(
        self,
        group_id: str,
        member_ids: list[str],
        reasons: tuple[str | None, ...] = (),
        instance_ids: tuple[str | None, ...] = (),
    ) -> list[ErrorCode]:
        body = Leave(group_id, tuple(member_ids), reasons, instance_ids)
        codes: list[ErrorCode] = self.ask_now(body)
        return codes

    def has_group(self, group_id: str) -> bool:
        """Whether `group_id` exists here (members, or offsets); GroupError unless this
        node coordinates its groups now."""
        self.check_serving()
        return group_id in self.machine.groups

    async def commit(
        self,
        group_id: str,
        *,
        generation: int,
        member_id: str,
        offsets: dict[tuple[str, int], tuple[int, int, str]],
        group_instance_id: str | None = None,
    ) -> dict[tuple[str, int], ErrorCode]:
        codes: dict[tuple[str, int], ErrorCode] = await self.ask(
            Commit(group_id, generation, member_id, tuple(offsets.items()), group_instance_id)
        )
        return codes

    async def delete_group(self, group_id: str) -> None:
        await self.ask(DeleteGroup(group_id))

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        codes: dict[tuple[str, int], ErrorCode] = await self.ask(
            DeleteOffsets(group_id, tuple(partitions))
        )
        return codes

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None, *, now_ms: int
    ) -> dict[tuple[str, int], CommittedOffset | None]:
        """OffsetFetch, under the leader's read lease."""
        self.check_serving()
        assert self.runner is not None
        try:
            self.runner.latest_offset(now_ms=now_ms)
        except OffsetNotAvailable:
            raise GroupError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) from None
        except NotLeader:
            raise GroupError(ErrorCode.NOT_COORDINATOR) from None
        asked = None if partitions is None else tuple(partitions)
        offsets: dict[tuple[str, int], CommittedOffset | None] = self.ask_now(
            FetchOffsets(group_id, asked)
        )
        return offsets
