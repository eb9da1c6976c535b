"""The group coordinator of one `__consumer_offsets` partition, as a state machine with no
IO (Kafka's classic group protocol), in the manner of the replication core.

Inputs go in: a request with its id (`handle`), the outcome of a write (`written`), the
committed records of the partition (`apply`, then `applied`), leadership (`lead`,
`resign`) and time (`tick`). Effects come out (`take`): `Reply` answers one request, once;
`Write` asks for records appended with acks=all. Time is handed in (`Now`: a monotonic
clock for sessions and deadlines, the time of day for commit times and expiry), and so
are member ids and whether a topic exists. The asyncio adapter (`tidelog.server.groups`)
does the IO; the group scenarios and the group simulator (`tidelog.testing.groups`) run
this same machine over the replicated partition of the simulator. Its rooms: this class
(leadership, applying the log, writes and replies, the rebalance protocol, time);
groups/offsets.py (what the offset requests and retention check and write);
groups/joining.py (a join's checks and answer); groups/group.py (a group in memory).

Rules of this file:
- The partition's log is the only durable state. Committed offsets and each group's last
  generation (members and assignments) are records in it; an OffsetCommit is answered
  only once its record is committed *and applied here*.
- Offsets are applied from the committed log, in offset order: what OffsetFetch answers
  is a function of the committed prefix, never of a write that could still be lost.
- A new leader serves no request until it has applied everything below an HWM that has
  reached its own epoch (`applied(..., caught_up=True)`); until then
  COORDINATOR_LOAD_IN_PROGRESS. `lead` in a new epoch and `resign` drop all in-memory
  state and answer NOT_COORDINATOR to every request still waiting; a write's outcome that
  arrives after that is ignored.
- A group moves only by `next_state` (groups/state.py); membership lives in memory, and a
  generation is written when its assignment is complete and when the group empties, so a
  new coordinator carries on with the same generation and members: stale members stay
  fenced (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID).
- Every request gets exactly one Reply: at once, when its rebalance or write completes,
  when it times out (a join after its rebalance timeout and JOIN_WAIT_SLACK_MS, a write
  after `commit_timeout_ms`), or when this node stops coordinating.
- Offsets of deleted topics and of groups empty for `offsets_retention_ms` expire by
  tombstones. Records it cannot read are skipped with one log line (the log is input).
"""

from __future__ import annotations

import binascii
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from tidelog.groups.group import Group, Member, apply_group, apply_offset
from tidelog.groups.joining import check_join, join_result, log_reason, names_another, new_member
from tidelog.groups.messages import (
    Commit,
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
)
from tidelog.groups.offsets import (
    commit_records,
    delete_group_keys,
    delete_offsets_keys,
    expired_keys,
    fetch_offsets,
    forget,
)
from tidelog.groups.records import group_key
from tidelog.groups.state import GroupEvent, GroupState, next_state
from tidelog.protocol.kafka_errors import ErrorCode

log = logging.getLogger("tidelog.groups")

JOIN_WAIT_SLACK_MS = 5_000


@dataclass(slots=True)
class _Pending:
    """A write in flight and what its outcome completes."""

    kind: str  # "commit" (and offset deletes) | "sync" | "persist" | "expire" | "delete"
    # | "static" (a static member's new id, KIP-345)
    group_id: str = ""
    request: int | None = None  # the commit (or static member's join) it answers
    codes: dict[tuple[str, int], ErrorCode] = field(default_factory=dict)
    generation: int = 0  # the generation a sync write stores
    dead: tuple[str, ...] = ()  # the groups an expiry deletes
    joined: JoinResult | None = None  # a static member's answer, once its id is stored
    next_offset: int | None = None  # once written: applied up to here means done
    deadline_ms: int = 0


class Coordinator:
    """The groups of one `__consumer_offsets` partition while this node leads it."""

    def __init__(
        self,
        partition: int,
        config: GroupConfig,
        *,
        topic_exists: Callable[[str], bool],
        new_member_id: Callable[[str], str],
    ) -> None:
        self.partition = partition
        self.config = config
        self.topic_exists = topic_exists
        self.new_member_id = new_member_id  # client id -> a new, unique member id
        self.active = False
        self.loaded = False
        self.epoch = -1
        self.applied_offset = 0
        self.groups: dict[str, Group] = {}
        self._effects: list[Effect] = []
        self._waiting: dict[int, int] = {}  # request -> deadline (mono ms), 0: none
        self._writes: dict[int, _Pending] = {}
        self._write_ids = 0
        self._next_expiry_check_ms = 0

    # ================================================================ leadership ======
    def lead(self, epoch: int, log_start: int) -> None:
        """This node leads the partition in `epoch`: load the groups from `log_start`."""
        if self.active and epoch == self.epoch:
            return
        self.resign("a new epoch")
        self.active, self.epoch = True, epoch
        self.applied_offset = log_start
        log.info("loading groups of partition %d (epoch %d)", self.partition, epoch)

    def resign(self, why: str) -> None:
        """Not the leader (or a new epoch): forget everything, fail whatever waits."""
        if self.active:
            log.info("partition %d: not coordinating (%s)", self.partition, why)
        for request in list(self._waiting):
            self._reply(request, error=ErrorCode.NOT_COORDINATOR)
        self._writes.clear()
        self.groups.clear()
        self.active = self.loaded = False
        self.epoch = -1

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """One committed record of the partition, in offset order."""
        self.applied_offset = max(self.applied_offset, offset + 1)
        try:
            fields = json.loads(key or b"")
            kind, group_id = fields["type"], str(fields["group"])
            content = None if value is None else json.loads(value)
            if kind == "offset":
                apply_offset(
                    self.groups, group_id, str(fields["topic"]), int(fields["partition"]), content
                )
            elif kind == "group" and not self.loaded:  # once loaded, these are our own
                apply_group(self.groups, group_id, content)
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as error:
            log.warning("partition %d: skipping a record it cannot read: %r", self.partition, error)

    def applied(self, next_offset: int, now: Now, *, caught_up: bool) -> None:
        """Everything committed below `next_offset` is applied; `caught_up` once the HWM
        has reached this leader's epoch (everything an earlier leader committed is in)."""
        if not self.active:
            return
        self.applied_offset = max(self.applied_offset, next_offset)
        if not self.loaded and caught_up:
            self.loaded = True
            for group in self.groups.values():
                for member in group.members.values():
                    member.heard(now)
            log.info(
                "coordinator of %d groups in partition %d (epoch %d, loaded to offset %d)",
                len(self.groups),
                self.partition,
                self.epoch,
                self.applied_offset,
            )
        for write, pending in list(self._writes.items()):
            if pending.next_offset is not None and pending.next_offset <= self.applied_offset:
                del self._writes[write]
                self._finish_write(pending, ErrorCode.NONE, now)

    # ================================================================ effects =========
    def take(self) -> list[Effect]:
        """The effects so far, oldest first (and forget them)."""
        effects, self._effects = self._effects, []
        return effects

    def _reply(
        self, request: int, result: object = None, error: ErrorCode = ErrorCode.NONE
    ) -> None:
        """Answer `request` unless it was answered already (timed out, say)."""
        if self._waiting.pop(request, None) is not None:
            self._effects.append(Reply(request, result, error))

    def _write(
        self, keys: list[bytes], values: list[bytes | None], pending: _Pending, now: Now
    ) -> None:
        self._write_ids += 1
        pending.deadline_ms = now.mono_ms + self.config.commit_timeout_ms
        self._writes[self._write_ids] = pending
        self._effects.append(Write(self._write_ids, tuple(keys), tuple(values), now.wall_ms))

    def written(self, write: int, error: ErrorCode, next_offset: int | None, now: Now) -> None:
        """The outcome of `Write` `write`: NONE with the offset after its records once
        committed (done when applied here too), or the error that failed it."""
        pending = self._writes.get(write)
        if pending is None:
            return  # from before a new epoch: its requests were answered then
        if error is ErrorCode.NONE and next_offset is None:
            error = ErrorCode.REQUEST_TIMED_OUT  # committed where? not known: not done
        if error is ErrorCode.NONE and next_offset is not None:
            pending.next_offset = next_offset
            pending.deadline_ms = now.mono_ms + self.config.commit_timeout_ms
            if next_offset > self.applied_offset:
                return  # done once applied (`applied`)
        del self._writes[write]
        self._finish_write(pending, error, now)

    def _finish_write(self, pending: _Pending, code: ErrorCode, now: Now) -> None:
        if code is not ErrorCode.NONE and pending.kind in ("persist", "expire"):
            log.warning(
                "partition %d: a group record was not written: %s", self.partition, code.name
            )
        if pending.kind == "commit":
            assert pending.request is not None
            codes = {key: code if c is ErrorCode.NONE else c for key, c in pending.codes.items()}
            self._reply(pending.request, codes)
        elif pending.kind == "delete":
            assert pending.request is not None
            forget(self.groups, pending.dead, code)
            self._reply(pending.request, error=code)
        elif pending.kind == "sync":
            self._synced(pending.group_id, pending.generation, code, now)
        elif pending.kind == "expire":
            forget(self.groups, pending.dead, code)
        elif pending.kind == "static":
            assert pending.request is not None and pending.joined is not None
            group = self.groups.get(pending.group_id)
            unmoved = (
                group is not None
                and group.state is GroupState.STABLE
                and group.generation == pending.generation
                and pending.joined.member_id in group.members
            )
            if code is ErrorCode.NONE and unmoved:
                self._reply(pending.request, pending.joined)
            else:  # not stored, or the group moved on meanwhile: the client joins again
                self._reply(pending.request, error=code or ErrorCode.REBALANCE_IN_PROGRESS)

    # ================================================================ requests ========
    def handle(self, request: int, body: Request, now: Now) -> None:
        """Take request `request`; its Reply comes out now or later."""
        self._waiting[request] = 0
        try:
            if not self.active:
                raise GroupError(ErrorCode.NOT_COORDINATOR)
            if not self.loaded:
                raise GroupError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            group = self.groups.get(body.group_id)
            dead = group is not None and group.state is GroupState.DEAD
            if dead and not isinstance(body, FetchOffsets):
                # Its tombstone is being written: as Kafka, the client retries shortly.
                raise GroupError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            if isinstance(body, Join):
                self._join(request, body, now)
            elif isinstance(body, Sync):
                self._sync(request, body, now)
            elif isinstance(body, Heartbeat):
                self._heartbeat(body, now)
                self._reply(request)
            elif isinstance(body, Leave):
                self._reply(request, self._leave(body, now))
            elif isinstance(body, Commit):
                self._commit(request, body, now)
            elif isinstance(body, DeleteGroup):
                self._delete_group(request, body, now)
            elif isinstance(body, DeleteOffsets):
                self._delete_offsets(request, body, now)
            else:
                self._reply(request, fetch_offsets(self.groups, body))
        except GroupError as error:
            self._reply(request, error=error.code)

    def _group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        return group

    # ---------------------------------------------------------------- join -----------
    def _join(self, request: int, body: Join, now: Now) -> None:
        """JoinGroup: answered when the rebalance completes (or at once, when nothing
        changed for a known member)."""
        config = self.config
        check_join(body, config)
        group = self.groups.get(body.group_id)
        if group is None:
            if body.member_id:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            group = self.groups[body.group_id] = Group(body.group_id)
        if not group.supports(body.protocol_type, [name for name, _ in body.protocols]):
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        static = None if body.member_id else group.static_member(body.group_instance_id)
        if static is not None:
            # KIP-345: a static member restarted (or a second instance of it): it takes
            # the member's place under a new member id, and the old id is fenced.
            if self._replace_static_member(request, group, static, body, now):
                return
        elif not body.member_id and group.size() >= config.group_max_size:
            raise GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED)  # KIP-389
        elif not body.member_id and body.require_known_member_id and body.group_instance_id is None:
            # KIP-394: the id first, the join when the client comes back with it; a
            # client that lost this answer and asks again leaves only a lapsing id.
            member_id = self.new_member_id(body.client_id or "member")
            group.pending[member_id] = now.mono_ms + body.session_timeout_ms
            required = JoinResult(-1, None, "", member_id, [])
            self._reply(request, required, ErrorCode.MEMBER_ID_REQUIRED)
            return
        elif not body.member_id or group.pending.pop(body.member_id, None) is not None:
            member_id = body.member_id or self.new_member_id(body.client_id or "member")
            member = new_member(member_id, body)
            group.members[member.member_id] = member
            group.protocol_type = body.protocol_type
            member.heard(now)
            member.join = request
            log_reason(group, member.member_id, "joins", body.reason)
            self._prepare_rebalance(group, f"{member.member_id} joined", now)
        else:
            if group.fenced(body.member_id, body.group_instance_id):
                raise GroupError(ErrorCode.FENCED_INSTANCE_ID)
            known = group.members.get(body.member_id)
            unknown_instance = group.static_member(body.group_instance_id) is None
            if known is None or (body.group_instance_id is not None and unknown_instance):
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            if group.size() > config.group_max_size and known.join is None:
                # Over the limit (it was lowered): members are shed as they join again.
                self._remove_member(group, known, ErrorCode.GROUP_MAX_SIZE_REACHED)
                self._member_gone(group, f"{known.member_id} shed (group.max.size)", now)
                raise GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED)
            member = known
            changed = member.protocols != body.protocols
            member.protocols = body.protocols
            member.session_timeout_ms = body.session_timeout_ms
            member.rebalance_timeout_ms = body.rebalance_timeout_ms
            member.heard(now)
            log_reason(group, member.member_id, "joins again", body.reason)
            steady = group.state is GroupState.COMPLETING_REBALANCE or (
                group.state is GroupState.STABLE and body.member_id != group.leader
            )
            if steady and not changed:
                self._reply(request, join_result(group, member))
                return
            if member.join is not None:
                self._reply(member.join, error=ErrorCode.UNKNOWN_MEMBER_ID)
            member.join = request
            if group.state is not GroupState.PREPARING_REBALANCE:
                self._prepare_rebalance(group, f"{body.member_id} rejoined", now)
        self._waiting[request] = now.mono_ms + body.rebalance_timeout_ms + JOIN_WAIT_SLACK_MS
        self._maybe_complete_join(group, now)

    def _replace_static_member(
        self, request: int, group: Group, member: Member, body: Join, now: Now
    ) -> bool:
        """A static member joins without its member id: it takes `member`'s place under a
        new id, and what the old id waited for is answered FENCED_INSTANCE_ID. In a stable
        group with the same subscription it keeps its generation and assignment, with no
        rebalance (the point of KIP-345), and is answered once the group's record names
        its new id (True). Otherwise it joins a rebalance like any member joining again
        (False: the caller goes on)."""
        old_id, leader = member.member_id, group.leader
        self._fail_member(member, ErrorCode.FENCED_INSTANCE_ID)
        del group.members[old_id]
        member.member_id = self.new_member_id(body.client_id or "member")
        group.members[member.member_id] = member
        if leader == old_id:
            group.leader = member.member_id
        changed = member.protocols != body.protocols
        member.protocols = body.protocols
        member.client_id, member.client_host = body.client_id, body.client_host
        member.session_timeout_ms = body.session_timeout_ms
        member.rebalance_timeout_ms = body.rebalance_timeout_ms
        member.heard(now)
        log.info(
            "group %s: static member %s rejoins as %s (%s is fenced)",
            group.group_id,
            body.group_instance_id,
            member.member_id,
            old_id,
        )
        if group.state is GroupState.STABLE and not changed:
            # Answered once the generation's record names the new id (a new coordinator
            # must fence the old one too), with the old leader id, as Kafka answers: a
            # replaced leader must not take itself for the leader and assign again, as a
            # stable group sends nothing on.
            result = JoinResult(
                generation=group.generation,
                protocol=group.protocol,
                leader=leader or "",
                member_id=member.member_id,
                members=[],
                protocol_type=group.protocol_type,
            )
            pending = _Pending(
                "static",
                group_id=group.group_id,
                request=request,
                generation=group.generation,
                joined=result,
            )
            self._write([group_key(group.group_id)], [group.stored()], pending, now)
            return True
        member.join = request
        if group.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"static member {body.group_instance_id} rejoined", now)
        return False

    def _prepare_rebalance(self, group: Group, reason: str, now: Now) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                if member.sync is not None:
                    self._reply(member.sync, error=ErrorCode.REBALANCE_IN_PROGRESS)
                member.sync = None
        if group.state is GroupState.EMPTY and self.config.initial_rebalance_delay_ms > 0:
            group.join_not_before_ms = now.mono_ms + self.config.initial_rebalance_delay_ms
        timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.rebalance_deadline_ms = now.mono_ms + timeout_ms
        if group.state is not GroupState.PREPARING_REBALANCE:
            log.info("group %s: rebalancing (%s)", group.group_id, reason)
        group.state = next_state(group.state, GroupEvent.REBALANCE)

    def _maybe_complete_join(self, group: Group, now: Now) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.all_joined() and now.mono_ms >= group.join_not_before_ms:
            self._complete_join(group, now)

    def _complete_join(self, group: Group, now: Now) -> None:
        """End the join phase: members that did not rejoin are out; a new generation."""
        for member in list(group.members.values()):
            if member.join is None:
                self._remove_member(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
        group.generation += 1
        if not group.members:
            group.state = next_state(group.state, GroupEvent.NONE_LEFT)
            group.protocol = group.leader = None
            group.state_ms = now.wall_ms
            log.info("group %s: empty (generation %d)", group.group_id, group.generation)
            self._persist(group, now)
            return
        group.protocol = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = next_state(group.state, GroupEvent.ALL_JOINED)
        log.info(
            "group %s: generation %d with %d members (leader %s)",
            group.group_id,
            group.generation,
            len(group.members),
            group.leader,
        )
        for member in group.members.values():
            waiting, member.join = member.join, None
            member.heard(now)
            if waiting is not None:
                self._reply(waiting, join_result(group, member))

    def _remove_member(self, group: Group, member: Member, code: ErrorCode) -> None:
        self._fail_member(member, code)
        group.members.pop(member.member_id, None)
        if group.leader == member.member_id:
            group.leader = None

    def _fail_member(self, member: Member, code: ErrorCode) -> None:
        for waiting in (member.join, member.sync):
            if waiting is not None:
                self._reply(waiting, error=code)
        member.join = member.sync = None

    def _persist(self, group: Group, now: Now) -> None:
        self._write([group_key(group.group_id)], [group.stored()], _Pending("persist"), now)

    # ---------------------------------------------------------------- sync -----------
    def _sync(self, request: int, body: Sync, now: Now) -> None:
        """SyncGroup: the member's assignment, once the leader's is stored."""
        group = self._group(body.group_id)
        if group.fenced(body.member_id, body.group_instance_id):
            raise GroupError(ErrorCode.FENCED_INSTANCE_ID)
        member = group.members.get(body.member_id)
        if member is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if body.generation != group.generation:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)
        # A protocol the client names must be the group's (KIP-559); one not named passes.
        if names_another(body.protocol_type, group.protocol_type) or names_another(
            body.protocol, group.protocol
        ):
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is GroupState.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)
        member.heard(now)
        if group.state is GroupState.STABLE:
            self._reply(request, SyncResult(group.protocol_type, group.protocol, member.assignment))
            return
        if group.state is not GroupState.COMPLETING_REBALANCE:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if member.sync is not None:
            self._reply(member.sync, error=ErrorCode.REBALANCE_IN_PROGRESS)
        member.sync = request
        if body.member_id == group.leader:
            assignments = dict(body.assignments)
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            pending = _Pending("sync", group_id=group.group_id, generation=group.generation)
            self._write([group_key(group.group_id)], [group.stored()], pending, now)

    def _synced(self, group_id: str, generation: int, code: ErrorCode, now: Now) -> None:
        """The leader's assignment is stored (or not): answer every member."""
        group = self.groups.get(group_id)
        if group is None or group.generation != generation:
            return  # a rebalance started meanwhile and answered the waiters
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return
        if code is not ErrorCode.NONE:
            for member in group.members.values():
                member.assignment = b""
                self._fail_member(member, code)
            self._prepare_rebalance(group, f"its generation could not be stored: {code.name}", now)
            return
        group.state = next_state(group.state, GroupEvent.SYNCED)
        log.info("group %s: stable in generation %d", group.group_id, generation)
        protocol_type, protocol = group.protocol_type, group.protocol
        for member in group.members.values():
            waiting, member.sync = member.sync, None
            if waiting is not None:
                self._reply(waiting, SyncResult(protocol_type, protocol, member.assignment))

    # ---------------------------------------------------------------- membership -----
    def _heartbeat(self, body: Heartbeat, now: Now) -> None:
        group = self._group(body.group_id)
        if group.fenced(body.member_id, body.group_instance_id):
            raise GroupError(ErrorCode.FENCED_INSTANCE_ID)
        member = group.members.get(body.member_id)
        if member is None or group.state is GroupState.EMPTY:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if body.generation != group.generation:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)
        member.heard(now)
        if group.state is GroupState.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)

    def _leave(self, body: Leave, now: Now) -> list[ErrorCode]:
        """LeaveGroup: one code per member id; the group rebalances without them."""
        group = self._group(body.group_id)
        codes = []
        for index, member_id in enumerate(body.member_ids):
            instance_id = body.instance_ids[index] if index < len(body.instance_ids) else None
            if member_id and group.fenced(member_id, instance_id):
                codes.append(ErrorCode.FENCED_INSTANCE_ID)
                continue
            member = group.static_member(instance_id) or group.members.get(member_id)
            if member is None:
                if group.pending.pop(member_id, None) is None:
                    codes.append(ErrorCode.UNKNOWN_MEMBER_ID)
                else:  # an id given out (KIP-394) that will not join: a join waits no more
                    codes.append(ErrorCode.NONE)
                    self._maybe_complete_join(group, now)
                continue
            reason = body.reasons[index] if index < len(body.reasons) else None
            log_reason(group, member.member_id, "leaves", reason)
            self._remove_member(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
            self._member_gone(group, f"{member.member_id} left", now)
            codes.append(ErrorCode.NONE)
        return codes

    def _member_gone(self, group: Group, reason: str, now: Now) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason, now)
        self._maybe_complete_join(group, now)

    # ---------------------------------------------------------------- offsets --------
    def _commit(self, request: int, body: Commit, now: Now) -> None:
        """OffsetCommit: one code per partition, NONE only once the record is committed
        and applied."""
        codes, (keys, values) = commit_records(self.groups, body, now, self.topic_exists)
        if not keys:
            self._reply(request, codes)
            return
        self._write(keys, values, _Pending("commit", request=request, codes=codes), now)

    def _delete_group(self, request: int, body: DeleteGroup, now: Now) -> None:
        """DeleteGroups: answered once the group's tombstones are committed."""
        keys = delete_group_keys(self.groups, body)
        pending = _Pending("delete", request=request, dead=(body.group_id,))
        self._write(keys, [None] * len(keys), pending, now)

    def _delete_offsets(self, request: int, body: DeleteOffsets, now: Now) -> None:
        """OffsetDelete: answered once the offsets' tombstones are committed."""
        codes, keys = delete_offsets_keys(self.groups, body)
        if not keys:
            self._reply(request, codes)
            return
        self._write(keys, [None] * len(keys), _Pending("commit", request=request, codes=codes), now)

    # ================================================================ time ============
    def tick(self, now: Now) -> None:
        """Session timeouts, rebalance timeouts, requests and writes past their deadline
        and, now and then, offsets retention."""
        if not self.active:
            return
        for request, deadline in list(self._waiting.items()):
            if deadline and now.mono_ms >= deadline:
                self._reply(request, error=ErrorCode.REBALANCE_IN_PROGRESS)
        for write, pending in list(self._writes.items()):
            if now.mono_ms >= pending.deadline_ms:
                del self._writes[write]
                self._finish_write(pending, ErrorCode.REQUEST_TIMED_OUT, now)
        if not self.loaded:
            return
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                if member.join is None and now.mono_ms > member.heartbeat_deadline_ms:
                    log.info("group %s: %s timed out", group.group_id, member.member_id)
                    self._remove_member(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
                    self._member_gone(group, f"{member.member_id} timed out", now)
            for member_id, lapses_ms in list(group.pending.items()):
                if now.mono_ms > lapses_ms:
                    log.info("group %s: %s did not join in time", group.group_id, member_id)
                    del group.pending[member_id]
            if group.is_shell() and group.state is GroupState.EMPTY:
                del self.groups[group.group_id]
                continue
            if group.state is GroupState.PREPARING_REBALANCE:
                due = now.mono_ms >= group.rebalance_deadline_ms
                if due and now.mono_ms >= group.join_not_before_ms:
                    self._complete_join(group, now)
                else:
                    self._maybe_complete_join(group, now)
        if now.mono_ms >= self._next_expiry_check_ms:
            self._next_expiry_check_ms = (
                now.mono_ms + self.config.offsets_retention_check_interval_ms
            )
            self._expire_offsets(now)

    def expire_now(self) -> None:
        """Check retention at the next tick (a topic was deleted)."""
        self._next_expiry_check_ms = 0

    def _expire_offsets(self, now: Now) -> None:
        """Tombstones for what retention expires (groups/offsets.py), in one write."""
        keys = expired_keys(self.groups, self.config.offsets_retention_ms, now, self.topic_exists)
        if keys:
            log.info("partition %d: expiring %d records", self.partition, len(keys))
            dead = tuple(g.group_id for g in self.groups.values() if g.state is GroupState.DEAD)
            self._write(keys, [None] * len(keys), _Pending("expire", dead=dead), now)
