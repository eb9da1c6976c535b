"""The coordinator's offset requests (OffsetCommit, OffsetDelete, DeleteGroups, OffsetFetch)
and offsets retention, as functions over the groups held in memory: they check a request
and say which records to write; the coordinator (groups/coordinator.py) writes them and
answers.

Rules of this file:
- No IO, no clock: time comes in as `Now`, whether a topic exists as `topic_exists`.
- A check that fails raises GroupError with the Kafka code; nothing is changed then.
- A commit's codes are NONE only for the partitions whose records are written; the
  coordinator answers NONE only once those records are committed *and applied*.
- A group leaves memory (`forget`) only once its tombstones are committed: a restart must
  not bring it back, and a failed write leaves it empty for the next check.
"""

from __future__ import annotations

from collections.abc import Callable

from tidelog.groups.group import Group
from tidelog.groups.messages import (
    Commit,
    CommittedOffset,
    DeleteGroup,
    DeleteOffsets,
    FetchOffsets,
    GroupError,
    Now,
)
from tidelog.groups.records import group_key, offset_key, offset_value
from tidelog.groups.state import GroupEvent, GroupState, next_state
from tidelog.protocol.kafka_errors import ErrorCode

OFFSET_METADATA_BYTES_MAX = 4096

Codes = dict[tuple[str, int], ErrorCode]
Records = tuple[list[bytes], list[bytes | None]]


def check_committer(groups: dict[str, Group], body: Commit, now: Now) -> None:
    """OffsetCommit's fencing: a standalone commit (no generation, no member) only to a
    group without members; otherwise a member of the current generation (heard now)."""
    if not body.group_id:
        raise GroupError(ErrorCode.INVALID_GROUP_ID)
    group = groups.get(body.group_id)
    standalone = body.generation < 0 and not body.member_id
    if standalone and group is not None and group.state is not GroupState.EMPTY:
        raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
    if not standalone:
        if group is None or group.state is GroupState.EMPTY:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.fenced(body.member_id, body.group_instance_id):
            raise GroupError(ErrorCode.FENCED_INSTANCE_ID)
        if group.state is GroupState.COMPLETING_REBALANCE:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)
        member = group.members.get(body.member_id)
        if member is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if body.generation != group.generation:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)
        member.heard(now)


def commit_records(
    groups: dict[str, Group], body: Commit, now: Now, topic_exists: Callable[[str], bool]
) -> tuple[Codes, Records]:
    """OffsetCommit: one code per partition and the offset records to write (none when
    every partition is refused)."""
    check_committer(groups, body, now)
    codes: Codes = {}
    keys: list[bytes] = []
    values: list[bytes | None] = []
    for (topic, partition), (offset, epoch, metadata) in body.offsets:
        if not topic_exists(topic):
            codes[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif len(metadata.encode()) > OFFSET_METADATA_BYTES_MAX:
            codes[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
        else:
            keys.append(offset_key(body.group_id, topic, partition))
            values.append(offset_value(offset, epoch, metadata, now.wall_ms))
            codes[(topic, partition)] = ErrorCode.NONE
    return codes, (keys, values)


def delete_group_keys(groups: dict[str, Group], body: DeleteGroup) -> list[bytes]:
    """DeleteGroups: an empty group goes (DEAD until its tombstones, the keys returned, are
    committed), its offsets with it. A group with members: NON_EMPTY_GROUP."""
    group = groups.get(body.group_id)
    if group is None:
        raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND)
    if group.state is not GroupState.EMPTY:
        raise GroupError(ErrorCode.NON_EMPTY_GROUP)
    keys = [offset_key(group.group_id, topic, p) for topic, p in sorted(group.offsets)]
    keys.append(group_key(group.group_id))
    group.state = next_state(group.state, GroupEvent.EXPIRED)
    return keys


def delete_offsets_keys(groups: dict[str, Group], body: DeleteOffsets) -> tuple[Codes, list[bytes]]:
    """OffsetDelete: one code per partition and the tombstones to write. A group with
    members keeps every offset (GROUP_SUBSCRIBED_TO_TOPIC: tidelog does not read their
    subscriptions); an empty one loses the offsets named."""
    group = groups.get(body.group_id)
    if group is None:
        raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND)
    if group.state is not GroupState.EMPTY:
        return dict.fromkeys(body.partitions, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC), []
    codes = dict.fromkeys(body.partitions, ErrorCode.NONE)
    return codes, [offset_key(group.group_id, t, p) for t, p in body.partitions]


def fetch_offsets(
    groups: dict[str, Group], body: FetchOffsets
) -> dict[tuple[str, int], CommittedOffset | None]:
    """OffsetFetch: the committed offset of each partition (None: none committed).
    The caller holds the leader's read lease (a deposed leader must not answer)."""
    group = groups.get(body.group_id)
    offsets = group.offsets if group is not None else {}
    if body.partitions is None:
        return dict(sorted(offsets.items()))
    return {key: offsets.get(key) for key in body.partitions}


def expired_keys(
    groups: dict[str, Group], retention_ms: int, now: Now, topic_exists: Callable[[str], bool]
) -> list[bytes]:
    """Tombstones for offsets of deleted topics, and of groups empty for longer than
    the retention; then for empty groups left with no offsets (those turn DEAD)."""
    keys: list[bytes] = []
    for group in groups.values():
        empty = group.state is GroupState.EMPTY
        expired = [
            key
            for key, committed in group.offsets.items()
            if not topic_exists(key[0])
            or (empty and max(committed.commit_ms, group.state_ms) + retention_ms < now.wall_ms)
        ]
        keys.extend(offset_key(group.group_id, topic, p) for topic, p in expired)
        if empty and len(expired) == len(group.offsets) and group.protocol_type:
            keys.append(group_key(group.group_id))
            group.state = next_state(group.state, GroupEvent.EXPIRED)
    return keys


def forget(groups: dict[str, Group], group_ids: tuple[str, ...], code: ErrorCode) -> None:
    """Drop expired groups once their tombstones are committed (a restart must not bring
    them back); when the write failed, they stay empty and the next check tries again."""
    for group_id in group_ids:
        group = groups.get(group_id)
        if group is None or group.state is not GroupState.DEAD:
            continue  # gone with a new coordinator's state, or joined again meanwhile
        if code is ErrorCode.NONE:
            del groups[group_id]
        else:
            group.state = next_state(group.state, GroupEvent.DELETE_FAILED)
