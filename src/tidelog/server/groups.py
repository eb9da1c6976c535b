"""Consumer groups: the coordinator of the groups whose id hashes to one partition of
`__consumer_offsets`, on the node that leads that partition (Kafka's classic protocol).

Rules of this file:
- The partition's log is the only durable state. Committed offsets and each group's last
  generation (members and assignments) are records in it, written with acks=all; an
  OffsetCommit is answered only once its record is below the partition's HWM.
- Offsets are *applied* from the committed log, in offset order, on every node that leads
  the partition (commit index, then last applied): what OffsetFetch answers is a function
  of the committed prefix, never of a write that could still be lost.
- A new leader serves no group request until it has applied everything below an HWM that
  has reached its own epoch (COORDINATOR_LOAD_IN_PROGRESS until then). Losing leadership
  drops all in-memory state and answers NOT_COORDINATOR to whatever was waiting.
- Group membership (joins, syncs, heartbeats) lives in memory; a generation is persisted
  when its assignment is complete and when the group becomes empty, so a new coordinator
  carries on with the same generation and the same members, and stale members stay fenced.
- Generations fence: a join, sync, heartbeat or commit names its generation and member id;
  anything else is ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID, as in Kafka.
- Offsets of deleted topics and of groups empty for `offsets_retention_ms` expire:
  the coordinator writes tombstones (records with a null value), applied like any record.

Record format (JSON, keyed as Kafka keys its records):
    key {"type": "offset", "group": G, "topic": T, "partition": P}
        value {"offset": O, "leader_epoch": E, "metadata": M, "commit_ms": MS} | null
    key {"type": "group", "group": G}
        value {"protocol_type", "protocol", "generation", "leader", "state_ms",
               "members": [{member_id, group_instance_id, client_id, client_host,
                            session_timeout_ms, rebalance_timeout_ms, subscription (base64),
                            assignment (base64)}]} | null
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import functools
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidelog.clock import wall_ms
from tidelog.core.replica import ACKS_ALL, Role
from tidelog.errors import NotEnoughReplicas, NotLeader, OffsetNotAvailable, TidelogError
from tidelog.groups.records import encode_json, group_key, offset_key
from tidelog.groups.state import GroupEvent, GroupState, loaded_state, next_state
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.metadata import OFFSETS_TOPIC
from tidelog.server.partition import PartitionRunner, apply_committed
from tidelog.wal.batches import producer_batch

log = logging.getLogger("tidelog.groups")

OFFSET_METADATA_BYTES_MAX = 4096
JOIN_WAIT_SLACK_S = 5.0
GROUP_ID_LENGTH_MAX = 255


def group_partition(group_id: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of a group: Kafka's `abs(hashCode) % partitions`,
    with Java's String.hashCode over UTF-16 code units, so groups land where Kafka puts them."""
    data = group_id.encode("utf-16-be")
    code = 0
    for index in range(0, len(data), 2):
        code = (31 * code + int.from_bytes(data[index : index + 2], "big")) & 0xFFFFFFFF
    return (code & 0x7FFFFFFF) % partitions


class GroupError(TidelogError):
    """A group request refused with a Kafka error code."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


@dataclass(frozen=True, slots=True)
class GroupConfig:
    session_timeout_ms_min: int = 6_000
    session_timeout_ms_max: int = 1_800_000
    initial_rebalance_delay_ms: int = 0
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    commit_timeout_ms: int = 5_000


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_ms: int


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join: asyncio.Future[JoinResult] | None = None
    sync: asyncio.Future[bytes] | None = None
    heartbeat_deadline: float = 0.0

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((data for name, data in self.protocols if name == protocol), b"")

    def heard(self, now: float) -> None:
        self.heartbeat_deadline = now + self.session_timeout_ms / 1000


@dataclass(frozen=True, slots=True)
class JoinResult:
    generation: int
    protocol: str | None
    leader: str
    member_id: str
    members: list[tuple[str, str | None, bytes]]  # for the leader only


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    state_ms: int = 0  # wall time of the last move to Empty (offsets expire from there)
    rebalance_deadline: float = 0.0
    join_not_before: float = 0.0

    def candidate_protocols(self) -> set[str]:
        names = [set(member.protocol_names()) for member in self.members.values()]
        return set.intersection(*names) if names else set()

    def supports(self, protocol_type: str, names: list[str]) -> bool:
        if self.state is GroupState.EMPTY or not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(self.candidate_protocols() & set(names))

    def select_protocol(self) -> str | None:
        candidates = self.candidate_protocols()
        votes = collections.Counter(
            next(name for name in member.protocol_names() if name in candidates)
            for member in self.members.values()
        )
        return votes.most_common(1)[0][0] if votes else None

    def all_joined(self) -> bool:
        return all(member.join is not None for member in self.members.values())


def group_value(group: Group) -> bytes:
    members = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "session_timeout_ms": m.session_timeout_ms,
            "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "protocol": group.protocol,
            "subscription": base64.b64encode(m.metadata_for(group.protocol)).decode(),
            "assignment": base64.b64encode(m.assignment).decode(),
        }
        for m in group.members.values()
    ]
    return encode_json(
        {
            "protocol_type": group.protocol_type,
            "protocol": group.protocol,
            "generation": group.generation,
            "leader": group.leader,
            "state_ms": group.state_ms,
            "members": members,
        }
    )


def member_of(entry: dict[str, Any]) -> Member:
    protocol = entry.get("protocol")
    subscription = base64.b64decode(entry.get("subscription", ""))
    return Member(
        member_id=str(entry["member_id"]),
        group_instance_id=entry.get("group_instance_id"),
        client_id=str(entry.get("client_id", "")),
        client_host=str(entry.get("client_host", "")),
        session_timeout_ms=int(entry["session_timeout_ms"]),
        rebalance_timeout_ms=int(entry["rebalance_timeout_ms"]),
        protocols=[(protocol, subscription)] if protocol else [],
        assignment=base64.b64decode(entry.get("assignment", "")),
    )


def error_of_write(error: BaseException | None) -> ErrorCode:
    """The group error code that answers a failed write to `__consumer_offsets` (Kafka's
    mapping: the client looks the coordinator up again, or retries)."""
    if error is None:
        return ErrorCode.NONE
    if isinstance(error, NotLeader):
        return ErrorCode.NOT_COORDINATOR
    if isinstance(error, NotEnoughReplicas):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode.REQUEST_TIMED_OUT


class GroupCoordinator:
    """The groups of one `__consumer_offsets` partition, while this node leads it."""

    def __init__(
        self,
        partition: int,
        config: GroupConfig,
        *,
        topic_exists: Callable[[str], bool],
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], int] = wall_ms,
    ) -> None:
        self.partition = partition
        self.config = config
        self.topic_exists = topic_exists
        self.clock = clock  # seconds, monotonic: sessions, rebalance deadlines
        self.wall_clock = wall_clock  # ms of the day: commit times, offset expiry
        self.runner: PartitionRunner | None = None
        self.active = False
        self.loaded = False
        self.epoch = -1
        self.applied_offset = 0
        self.groups: dict[str, Group] = {}
        self.next_expiry_check = 0.0
        self.tasks: set[asyncio.Task[None]] = set()

    # ================================================================ leadership ======
    def on_round(self, runner: PartitionRunner) -> None:
        """After each round of the partition: follow its leadership, apply what committed."""
        self.runner = runner
        state = runner.replica.status()
        if state.role is not Role.LEADER:
            if self.active:
                self.deactivate("no longer the leader")
            return
        if not self.active or state.epoch != self.epoch:
            self.deactivate("a new epoch")
            self.active, self.epoch = True, int(state.epoch)
            self.applied_offset = int(state.log_start_offset)
            log.info(
                "loading groups of %s-%d (epoch %d)", OFFSETS_TOPIC, self.partition, self.epoch
            )
        self.apply_committed()
        if not self.loaded and state.hwm > state.epoch_start_offset:
            self.loaded = True
            now = self.clock()
            for group in self.groups.values():
                for member in group.members.values():
                    member.heard(now)
            log.info(
                "coordinator of %d groups in %s-%d (epoch %d, loaded to offset %d)",
                len(self.groups),
                OFFSETS_TOPIC,
                self.partition,
                self.epoch,
                self.applied_offset,
            )

    def deactivate(self, why: str) -> None:
        if self.active:
            log.info("%s-%d: not coordinating (%s)", OFFSETS_TOPIC, self.partition, why)
        for group in self.groups.values():
            for member in group.members.values():
                fail_waiters(member, ErrorCode.NOT_COORDINATOR)
        self.groups.clear()
        self.active = self.loaded = False
        self.epoch = -1

    def apply_committed(self) -> None:
        """Apply every committed record not applied yet, in offset order."""
        assert self.runner is not None
        self.applied_offset = apply_committed(
            self.runner.replica, self.applied_offset, self.apply_record
        )

    def apply_record(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        try:
            fields = json.loads(key or b"")
            kind, group_id = fields["type"], str(fields["group"])
            content = None if value is None else json.loads(value)
            if kind == "offset":
                self.apply_offset(group_id, fields["topic"], int(fields["partition"]), content)
            elif kind == "group" and not self.loaded:  # once loaded, these are our own
                self.apply_group(group_id, content)
        except (ValueError, KeyError, TypeError, binascii.Error) as error:
            log.warning(
                "%s-%d: skipping a record it cannot read: %r", OFFSETS_TOPIC, self.partition, error
            )

    def apply_offset(
        self, group_id: str, topic: str, partition: int, content: dict[str, Any] | None
    ) -> None:
        group = self.groups.setdefault(group_id, Group(group_id))
        if content is None:
            group.offsets.pop((topic, partition), None)
            if not group.offsets and group.state is GroupState.EMPTY and not group.protocol_type:
                del self.groups[group_id]
            return
        group.offsets[(topic, partition)] = CommittedOffset(
            offset=int(content["offset"]),
            leader_epoch=int(content.get("leader_epoch", -1)),
            metadata=str(content.get("metadata") or ""),
            commit_ms=int(content.get("commit_ms", 0)),
        )

    def apply_group(self, group_id: str, content: dict[str, Any] | None) -> None:
        if content is None:
            self.groups.pop(group_id, None)
            return
        group = self.groups.setdefault(group_id, Group(group_id))
        group.members = {m.member_id: m for m in map(member_of, content.get("members", []))}
        group.generation = int(content["generation"])
        group.protocol_type = content.get("protocol_type")
        group.protocol = content.get("protocol")
        group.leader = content.get("leader")
        group.state_ms = int(content.get("state_ms", 0))
        group.state = loaded_state(bool(group.members))

    # ================================================================ serving =========
    def check_serving(self) -> None:
        """Raise unless this node coordinates these groups now."""
        if not self.active or self.runner is None:
            raise GroupError(ErrorCode.NOT_COORDINATOR)
        if self.runner.replica.status().role is not Role.LEADER:
            self.deactivate("no longer the leader")
            raise GroupError(ErrorCode.NOT_COORDINATOR)
        if not self.loaded:
            raise GroupError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

    def check_read(self, now_ms: int) -> None:
        """Reads of committed offsets also need the leader's read lease: a deposed leader
        that has not noticed yet must not answer offsets a newer leader has moved."""
        self.check_serving()
        assert self.runner is not None
        try:
            self.runner.replica.latest_offset(now_ms=now_ms)
        except OffsetNotAvailable:
            raise GroupError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) from None
        except NotLeader:
            raise GroupError(ErrorCode.NOT_COORDINATOR) from None

    async def write(self, keys: list[bytes], values: list[bytes | None]) -> ErrorCode:
        """Append records with acks=all; NONE once committed and applied here."""
        runner = self.runner
        if runner is None or not self.active:
            return ErrorCode.NOT_COORDINATOR
        batch = producer_batch(values, keys=keys, timestamp_ms=self.wall_clock())
        epoch = self.epoch
        try:
            result = await asyncio.wait_for(
                runner.produce(batch, ACKS_ALL), self.config.commit_timeout_ms / 1000
            )
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT
        except asyncio.CancelledError:
            return ErrorCode.NOT_COORDINATOR
        code = error_of_write(result.error)
        if code is not ErrorCode.NONE:
            return code
        if not self.active or self.epoch != epoch:
            return ErrorCode.NOT_COORDINATOR
        assert result.next_offset is not None
        deadline = time.monotonic() + self.config.commit_timeout_ms / 1000
        while self.applied_offset < result.next_offset:
            self.apply_committed()
            remaining = deadline - time.monotonic()
            if self.applied_offset >= result.next_offset or remaining <= 0:
                break
            await runner.wait_for_hwm(runner.replica.status().hwm, remaining)
        return (
            ErrorCode.NONE
            if self.applied_offset >= result.next_offset
            else ErrorCode.REQUEST_TIMED_OUT
        )

    def write_in_background(
        self,
        keys: list[bytes],
        values: list[bytes | None],
        then: Callable[[ErrorCode], None] | None = None,
    ) -> None:
        """Write records without waiting; `then(code)` once they are committed or failed."""

        async def write() -> None:
            code = await self.write(keys, values)
            if code is not ErrorCode.NONE:
                log.warning(
                    "%s-%d: a group record was not written: %s",
                    OFFSETS_TOPIC,
                    self.partition,
                    code.name,
                )
            if then is not None:
                then(code)

        task = asyncio.get_running_loop().create_task(write())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def persist_group(self, group: Group) -> None:
        self.write_in_background([group_key(group.group_id)], [group_value(group)])

    def group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        return group

    # ================================================================ join ============
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
    ) -> JoinResult:
        """JoinGroup: answered when the rebalance completes (or at once, when nothing
        changed for a known member)."""
        self.check_serving()
        if not group_id or len(group_id) > GROUP_ID_LENGTH_MAX:
            raise GroupError(ErrorCode.INVALID_GROUP_ID)
        config = self.config
        if not config.session_timeout_ms_min <= session_timeout_ms <= config.session_timeout_ms_max:
            raise GroupError(ErrorCode.INVALID_SESSION_TIMEOUT)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            group = self.groups[group_id] = Group(group_id)
        if not group.supports(protocol_type, [name for name, _ in protocols]):
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        now = self.clock()
        loop = asyncio.get_running_loop()
        if not member_id:
            member = Member(
                member_id=f"{client_id or 'member'}-{uuid.uuid4()}",
                group_instance_id=group_instance_id,
                client_id=client_id,
                client_host=client_host,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                protocols=protocols,
            )
            group.members[member.member_id] = member
            group.protocol_type = protocol_type
            member.heard(now)
            waiter = member.join = loop.create_future()
            self.prepare_rebalance(group, f"{member.member_id} joined")
        else:
            known = group.members.get(member_id)
            if known is None:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            member = known
            changed = member.protocols != protocols
            member.protocols = protocols
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.heard(now)
            steady = group.state is GroupState.COMPLETING_REBALANCE or (
                group.state is GroupState.STABLE and member_id != group.leader
            )
            if steady and not changed:
                return self.join_result(group, member)
            if member.join is not None and not member.join.done():
                member.join.set_exception(GroupError(ErrorCode.UNKNOWN_MEMBER_ID))
            waiter = member.join = loop.create_future()
            if group.state is not GroupState.PREPARING_REBALANCE:
                self.prepare_rebalance(group, f"{member_id} rejoined")
        self.maybe_complete_join(group)
        timeout_s = rebalance_timeout_ms / 1000 + JOIN_WAIT_SLACK_S
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
        except TimeoutError:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS) from None

    def join_result(self, group: Group, member: Member) -> JoinResult:
        members = (
            [
                (m.member_id, m.group_instance_id, m.metadata_for(group.protocol))
                for m in group.members.values()
            ]
            if member.member_id == group.leader
            else []
        )
        return JoinResult(
            generation=group.generation,
            protocol=group.protocol,
            leader=group.leader or "",
            member_id=member.member_id,
            members=members,
        )

    def prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                if member.sync is not None and not member.sync.done():
                    member.sync.set_exception(GroupError(ErrorCode.REBALANCE_IN_PROGRESS))
                member.sync = None
        now = self.clock()
        if group.state is GroupState.EMPTY and self.config.initial_rebalance_delay_ms > 0:
            group.join_not_before = now + self.config.initial_rebalance_delay_ms / 1000
        timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.rebalance_deadline = now + timeout_ms / 1000
        if group.state is not GroupState.PREPARING_REBALANCE:
            log.info("group %s: rebalancing (%s)", group.group_id, reason)
        group.state = next_state(group.state, GroupEvent.REBALANCE)

    def maybe_complete_join(self, group: Group) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.all_joined() and self.clock() >= group.join_not_before:
            self.complete_join(group)

    def complete_join(self, group: Group) -> None:
        """End the join phase: members that did not rejoin are out; a new generation."""
        for member in list(group.members.values()):
            if member.join is None:
                self.remove_member(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
        group.generation += 1
        if not group.members:
            group.state = next_state(group.state, GroupEvent.NONE_LEFT)
            group.protocol = group.leader = None
            group.state_ms = self.wall_clock()
            log.info("group %s: empty (generation %d)", group.group_id, group.generation)
            self.persist_group(group)
            return
        group.protocol = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = next_state(group.state, GroupEvent.ALL_JOINED)
        now = self.clock()
        log.info(
            "group %s: generation %d with %d members (leader %s)",
            group.group_id,
            group.generation,
            len(group.members),
            group.leader,
        )
        for member in group.members.values():
            waiter, member.join = member.join, None
            member.heard(now)
            if waiter is not None and not waiter.done():
                waiter.set_result(self.join_result(group, member))

    def remove_member(self, group: Group, member: Member, code: ErrorCode) -> None:
        fail_waiters(member, code)
        group.members.pop(member.member_id, None)
        if group.leader == member.member_id:
            group.leader = None

    # ================================================================ sync ============
    async def sync(
        self,
        group_id: str,
        *,
        generation: int,
        member_id: str,
        assignments: dict[str, bytes],
    ) -> tuple[str | None, str | None, bytes]:
        """SyncGroup: (protocol type, protocol, this member's assignment)."""
        self.check_serving()
        group = self.group(group_id)
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation != group.generation:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)
        if group.state is GroupState.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)
        member.heard(self.clock())
        if group.state is GroupState.STABLE:
            return group.protocol_type, group.protocol, member.assignment
        assert group.state is GroupState.COMPLETING_REBALANCE
        waiter = member.sync = asyncio.get_running_loop().create_future()
        if member_id == group.leader:
            await self.complete_sync(group, assignments)
        assignment = await asyncio.shield(waiter)
        return group.protocol_type, group.protocol, assignment

    async def complete_sync(self, group: Group, assignments: dict[str, bytes]) -> None:
        """The leader's assignment: persist the generation, then answer every member."""
        generation = group.generation
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        code = await self.write([group_key(group.group_id)], [group_value(group)])
        if group.generation != generation or group.state is not GroupState.COMPLETING_REBALANCE:
            return  # a rebalance started meanwhile and answered the waiters
        if code is not ErrorCode.NONE:
            for member in group.members.values():
                member.assignment = b""
                fail_waiters(member, code)
            self.prepare_rebalance(group, f"its generation could not be stored: {code.name}")
            return
        group.state = next_state(group.state, GroupEvent.SYNCED)
        log.info("group %s: stable in generation %d", group.group_id, generation)
        for member in group.members.values():
            waiter, member.sync = member.sync, None
            if waiter is not None and not waiter.done():
                waiter.set_result(member.assignment)

    # ================================================================ membership ======
    def heartbeat(self, group_id: str, *, generation: int, member_id: str) -> None:
        self.check_serving()
        group = self.group(group_id)
        member = group.members.get(member_id)
        if member is None or group.state is GroupState.EMPTY:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation != group.generation:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)
        member.heard(self.clock())
        if group.state is GroupState.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)

    def leave(self, group_id: str, member_ids: list[str]) -> list[ErrorCode]:
        """LeaveGroup: one code per member id; the group rebalances without them."""
        self.check_serving()
        group = self.group(group_id)
        codes = []
        for member_id in member_ids:
            member = group.members.get(member_id)
            if member is None:
                codes.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            self.remove_member(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
            self.member_gone(group, f"{member_id} left")
            codes.append(ErrorCode.NONE)
        return codes

    def member_gone(self, group: Group, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(group, reason)
        self.maybe_complete_join(group)

    # ================================================================ offsets =========
    async def commit(
        self,
        group_id: str,
        *,
        generation: int,
        member_id: str,
        offsets: dict[tuple[str, int], tuple[int, int, str]],
    ) -> dict[tuple[str, int], ErrorCode]:
        """OffsetCommit: {(topic, partition): (offset, leader epoch, metadata)}; one code
        per partition, NONE only once the record is committed."""
        self.check_serving()
        if not group_id:
            raise GroupError(ErrorCode.INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        standalone = generation < 0 and not member_id
        if standalone and group is not None and group.state is not GroupState.EMPTY:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if not standalone:
            if group is None or group.state is GroupState.EMPTY:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            if group.state is GroupState.COMPLETING_REBALANCE:
                raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)
            member = group.members.get(member_id)
            if member is None:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            if generation != group.generation:
                raise GroupError(ErrorCode.ILLEGAL_GENERATION)
            member.heard(self.clock())
        codes: dict[tuple[str, int], ErrorCode] = {}
        keys: list[bytes] = []
        values: list[bytes | None] = []
        now = self.wall_clock()
        for (topic, partition), (offset, epoch, metadata) in offsets.items():
            if not self.topic_exists(topic):
                codes[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode()) > OFFSET_METADATA_BYTES_MAX:
                codes[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                keys.append(offset_key(group_id, topic, partition))
                values.append(
                    encode_json(
                        {
                            "offset": offset,
                            "leader_epoch": epoch,
                            "metadata": metadata,
                            "commit_ms": now,
                        }
                    )
                )
                codes[(topic, partition)] = ErrorCode.NONE
        if keys:
            code = await self.write(keys, values)
            for key, value in codes.items():
                if value is ErrorCode.NONE:
                    codes[key] = code
        return codes

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None, *, now_ms: int
    ) -> dict[tuple[str, int], CommittedOffset | None]:
        """OffsetFetch: the committed offset of each partition (None: none committed);
        every partition with one when `partitions` is None."""
        self.check_read(now_ms)
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if partitions is None:
            return dict(sorted(offsets.items()))
        return {key: offsets.get(key) for key in partitions}

    # ================================================================ time ============
    def tick(self) -> None:
        """Session timeouts, rebalance timeouts and, now and then, offsets retention."""
        if not self.active or self.runner is None:
            return
        if self.runner.replica.status().role is not Role.LEADER:
            self.deactivate("no longer the leader")
            return
        if not self.loaded:
            return
        now = self.clock()
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                awaiting_join = member.join is not None and not member.join.done()
                if not awaiting_join and now > member.heartbeat_deadline:
                    log.info("group %s: %s timed out", group.group_id, member.member_id)
                    self.remove_member(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
                    self.member_gone(group, f"{member.member_id} timed out")
            if group.state is GroupState.PREPARING_REBALANCE:
                if now >= group.rebalance_deadline and now >= group.join_not_before:
                    self.complete_join(group)
                else:
                    self.maybe_complete_join(group)
        if now >= self.next_expiry_check:
            self.next_expiry_check = now + self.config.offsets_retention_check_interval_ms / 1000
            self.expire_offsets()

    def expire_offsets(self) -> None:
        """Tombstones for offsets of deleted topics, and of groups empty for longer than
        the retention; then for empty groups left with no offsets."""
        now = self.wall_clock()
        keys: list[bytes] = []
        retention = self.config.offsets_retention_ms
        for group in self.groups.values():
            empty = group.state is GroupState.EMPTY
            expired = [
                key
                for key, committed in group.offsets.items()
                if not self.topic_exists(key[0])
                or (empty and max(committed.commit_ms, group.state_ms) + retention < now)
            ]
            keys.extend(offset_key(group.group_id, topic, p) for topic, p in expired)
            if empty and len(expired) == len(group.offsets) and group.protocol_type:
                keys.append(group_key(group.group_id))
                group.state = next_state(group.state, GroupEvent.EXPIRED)
        if keys:
            log.info("%s-%d: expiring %d records", OFFSETS_TOPIC, self.partition, len(keys))
            dead = [g.group_id for g in self.groups.values() if g.state is GroupState.DEAD]
            self.write_in_background(
                keys, [None] * len(keys), then=functools.partial(self.forget, dead)
            )

    def forget(self, group_ids: list[str], code: ErrorCode) -> None:
        """Drop expired groups once their tombstones are committed (a restart must not bring
        them back); when the write failed, they stay empty and the next check tries again."""
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None or group.state is not GroupState.DEAD:
                continue  # gone with a new coordinator's state, or joined again meanwhile
            if code is ErrorCode.NONE:
                del self.groups[group_id]
            else:
                group.state = next_state(group.state, GroupEvent.DELETE_FAILED)

    def expire_now(self) -> None:
        """Check retention at the next tick (a topic was deleted)."""
        self.next_expiry_check = 0.0


def fail_waiters(member: Member, code: ErrorCode) -> None:
    for waiter in (member.join, member.sync):
        if waiter is not None and not waiter.done():
            waiter.set_exception(GroupError(code))
    member.join = member.sync = None
