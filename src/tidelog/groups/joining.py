"""The pure pieces of JoinGroup and SyncGroup the coordinator (groups/coordinator.py) uses:
a join's checks before anything changes, a member made from a join, the answer a member
gets when the join phase ends, and the comparisons Kafka makes of protocol names.

Rules of this file: no IO, no clock, no state of its own; a check that fails raises
GroupError with the Kafka code before the group is touched.
"""

from __future__ import annotations

import logging

from tidelog.groups.group import Group, Member
from tidelog.groups.messages import GroupConfig, GroupError, Join, JoinResult
from tidelog.protocol.kafka_errors import ErrorCode

log = logging.getLogger("tidelog.groups")

GROUP_ID_LENGTH_MAX = 255
REASON_LOGGED_MAX = 300  # characters of a client's join or leave reason that are logged


def check_join(body: Join, config: GroupConfig) -> None:
    """INVALID_GROUP_ID for an empty or too long group id; INVALID_SESSION_TIMEOUT for a
    session timeout outside the coordinator's bounds."""
    if not body.group_id or len(body.group_id) > GROUP_ID_LENGTH_MAX:
        raise GroupError(ErrorCode.INVALID_GROUP_ID)
    if (
        not config.session_timeout_ms_min
        <= body.session_timeout_ms
        <= config.session_timeout_ms_max
    ):
        raise GroupError(ErrorCode.INVALID_SESSION_TIMEOUT)


def new_member(member_id: str, body: Join) -> Member:
    """The member a join makes, under `member_id`."""
    return Member(
        member_id=member_id,
        group_instance_id=body.group_instance_id,
        client_id=body.client_id,
        client_host=body.client_host,
        session_timeout_ms=body.session_timeout_ms,
        rebalance_timeout_ms=body.rebalance_timeout_ms,
        protocols=body.protocols,
    )


def join_result(group: Group, member: Member) -> JoinResult:
    """A member's answer at the end of the join phase: the leader gets every member's
    metadata for the chosen protocol, the others none."""
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
        protocol_type=group.protocol_type,
    )


def names_another(given: str | None, chosen: str | None) -> bool:
    """Whether a client named a protocol (or type) other than the group's; a name not
    given, or a group that has none, never differs (Kafka's isProtocolInconsistent)."""
    return given is not None and chosen is not None and given != chosen


def log_reason(group: Group, member_id: str, what: str, reason: str | None) -> None:
    """Log the reason a client gave for a member's join or leave (KIP-800), cut short."""
    if reason:
        log.info(
            "group %s: %s %s (client reason: %.*s)",
            group.group_id,
            member_id,
            what,
            REASON_LOGGED_MAX,
            reason,
        )
