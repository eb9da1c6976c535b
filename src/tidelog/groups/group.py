"""A consumer group and its members as the coordinator holds them in memory, and the
group's record value (its stored generation)."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from tidelog.groups.messages import CommittedOffset, Now
from tidelog.groups.records import group_value, member_of
from tidelog.groups.state import GroupState, loaded_state


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join: int | None = None  # the request waiting for the join phase to end
    sync: int | None = None  # the request waiting for the leader's assignment
    heartbeat_deadline_ms: int = 0

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((data for name, data in self.protocols if name == protocol), b"")

    def heard(self, now: Now) -> None:
        self.heartbeat_deadline_ms = now.mono_ms + self.session_timeout_ms


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
    rebalance_deadline_ms: int = 0
    join_not_before_ms: int = 0
    # Member ids given with MEMBER_ID_REQUIRED (KIP-394), not joined yet: id -> the
    # monotonic ms at which the id lapses (the session timeout it was asked with).
    pending: dict[str, int] = field(default_factory=dict)

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

    def static_member(self, instance_id: str | None) -> Member | None:
        """The member of a group instance id (a static member, KIP-345), if any."""
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.group_instance_id == instance_id), None)

    def fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A request naming an instance id whose member is another (Kafka's
        isStaticMemberFenced): an older incarnation of a static member."""
        member = self.static_member(instance_id)
        return member is not None and member.member_id != member_id

    def size(self) -> int:
        """Its members and the member ids given out (Kafka counts both against
        group.max.size)."""
        return len(self.members) + len(self.pending)

    def all_joined(self) -> bool:
        """Every member has joined again and no member id given out waits to join (a
        rebalance waits for them, up to their session timeouts, as Kafka's does)."""
        return not self.pending and all(m.join is not None for m in self.members.values())

    def is_shell(self) -> bool:
        """Nothing but a name: no member, no member id given out, no offset, never had a
        protocol (what a MEMBER_ID_REQUIRED answer to a new group's first join leaves once
        the id lapses)."""
        return not (self.members or self.pending or self.offsets or self.protocol_type)

    def stored(self) -> bytes:
        """The group's record value: its generation, members and assignments."""
        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "session_timeout_ms": m.session_timeout_ms,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "subscription": m.metadata_for(self.protocol),
                "assignment": m.assignment,
            }
            for m in self.members.values()
        ]
        return group_value(
            protocol_type=self.protocol_type,
            protocol=self.protocol,
            generation=self.generation,
            leader=self.leader,
            state_ms=self.state_ms,
            members=members,
        )


def apply_offset(
    groups: dict[str, Group],
    group_id: str,
    topic: str,
    partition: int,
    content: dict[str, Any] | None,
) -> None:
    """A committed offset record (a tombstone when `content` is None), as read."""
    group = groups.setdefault(group_id, Group(group_id))
    if content is None:
        group.offsets.pop((topic, partition), None)
        if not group.offsets and group.state is GroupState.EMPTY and not group.protocol_type:
            del groups[group_id]
        return
    group.offsets[(topic, partition)] = CommittedOffset(
        offset=int(content["offset"]),
        leader_epoch=int(content.get("leader_epoch", -1)),
        metadata=str(content.get("metadata") or ""),
        commit_ms=int(content.get("commit_ms", 0)),
    )


def apply_group(groups: dict[str, Group], group_id: str, content: dict[str, Any] | None) -> None:
    """A committed group record: its stored generation (a tombstone: the group is gone)."""
    if content is None:
        groups.pop(group_id, None)
        return
    members = [member_of(entry) for entry in content.get("members", [])]
    group = groups.setdefault(group_id, Group(group_id))
    group.members = {
        m["member_id"]: Member(
            member_id=m["member_id"],
            group_instance_id=m["group_instance_id"],
            client_id=m["client_id"],
            client_host=m["client_host"],
            session_timeout_ms=m["session_timeout_ms"],
            rebalance_timeout_ms=m["rebalance_timeout_ms"],
            protocols=((content["protocol"], m["subscription"]),)
            if content.get("protocol")
            else (),
            assignment=m["assignment"],
        )
        for m in members
    }
    group.generation = int(content["generation"])
    group.protocol_type = content.get("protocol_type")
    group.protocol = content.get("protocol")
    group.leader = content.get("leader")
    group.state_ms = int(content.get("state_ms", 0))
    group.state = loaded_state(bool(group.members))
