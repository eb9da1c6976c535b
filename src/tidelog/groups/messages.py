"""What goes into the group coordinator and what comes out of it: its requests, their
answers, its effects, the time it is handed, and its settings (as core/messages.py is to
the replication core)."""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.errors import NotEnoughReplicas, NotLeader, TidelogError, check_range
from tidelog.protocol.kafka_errors import ErrorCode


class GroupError(TidelogError):
    """A group request refused with a Kafka error code."""

    def __init__(self, code: ErrorCode, message: str = "", *, member_id: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code
        self.member_id = member_id  # MEMBER_ID_REQUIRED: the id to join with


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The coordinator's settings (Kafka's group.* and offsets.* broker configs); raises
    ConfigError when one is out of range."""

    session_timeout_ms_min: int = 6_000
    session_timeout_ms_max: int = 1_800_000
    initial_rebalance_delay_ms: int = 0
    # Members (and member ids given out, KIP-394) a group may hold: Kafka's
    # group.max.size (KIP-389); a join past it is refused GROUP_MAX_SIZE_REACHED.
    group_max_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    commit_timeout_ms: int = 5_000

    def __post_init__(self) -> None:
        """ConfigError naming the first setting out of range (tidelog.errors)."""
        check_range("GroupConfig.session_timeout_ms_min", self.session_timeout_ms_min, 1)
        check_range(
            "GroupConfig.session_timeout_ms_max",
            self.session_timeout_ms_max,
            self.session_timeout_ms_min,
        )
        check_range("GroupConfig.initial_rebalance_delay_ms", self.initial_rebalance_delay_ms, 0)
        check_range("GroupConfig.group_max_size", self.group_max_size, 1)
        check_range("GroupConfig.offsets_retention_ms", self.offsets_retention_ms, 1)
        check_range(
            "GroupConfig.offsets_retention_check_interval_ms",
            self.offsets_retention_check_interval_ms,
            1,
        )
        check_range("GroupConfig.commit_timeout_ms", self.commit_timeout_ms, 1)


@dataclass(frozen=True, slots=True)
class Now:
    """The time handed in with every input: `mono_ms` for sessions and deadlines,
    `wall_ms` (the time of day) for commit times and offsets expiry."""

    mono_ms: int
    wall_ms: int


# ---------------------------------------------------------------------- requests -------
@dataclass(frozen=True, slots=True)
class Join:
    """JoinGroup; `reason` is the client's, logged with the member (KIP-800).
    `require_known_member_id` (JoinGroup v4+, KIP-394): a member without an id is given
    one with MEMBER_ID_REQUIRED and joins when it comes back with it. A
    `group_instance_id` makes a static member (KIP-345): joining without a member id, it
    takes the place of the member of that instance id, if any, under a new member id
    (that member's id is fenced from then on: FENCED_INSTANCE_ID)."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    reason: str | None = None
    require_known_member_id: bool = False


@dataclass(frozen=True, slots=True)
class Sync:
    """SyncGroup; `protocol_type` and `protocol`, when the client names them (KIP-559),
    must be the group's. A `group_instance_id` (a static member, KIP-345) must be the
    member's: FENCED_INSTANCE_ID otherwise (so in Heartbeat, LeaveGroup and Commit)."""

    group_id: str
    generation: int
    member_id: str
    assignments: tuple[tuple[str, bytes], ...]
    protocol_type: str | None = None
    protocol: str | None = None
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    group_id: str
    generation: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class Leave:
    """LeaveGroup; `reasons`, when given, are the clients' for each member (KIP-800);
    `instance_ids` their group instance ids (a static member may leave by it alone, its
    member id empty)."""

    group_id: str
    member_ids: tuple[str, ...]
    reasons: tuple[str | None, ...] = ()
    instance_ids: tuple[str | None, ...] = ()


@dataclass(frozen=True, slots=True)
class Commit:
    """OffsetCommit: ((topic, partition), (offset, leader epoch, metadata)) pairs."""

    group_id: str
    generation: int
    member_id: str
    offsets: tuple[tuple[tuple[str, int], tuple[int, int, str]], ...]
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class FetchOffsets:
    """OffsetFetch: these partitions, or every partition with an offset when None."""

    group_id: str
    partitions: tuple[tuple[str, int], ...] | None


@dataclass(frozen=True, slots=True)
class DeleteGroup:
    """DeleteGroups, one group: an empty group's offsets and record are deleted."""

    group_id: str


@dataclass(frozen=True, slots=True)
class DeleteOffsets:
    """OffsetDelete: a group's committed offsets of these partitions are deleted."""

    group_id: str
    partitions: tuple[tuple[str, int], ...]


Request = Join | Sync | Heartbeat | Leave | Commit | FetchOffsets | DeleteGroup | DeleteOffsets


# ---------------------------------------------------------------------- answers --------
@dataclass(frozen=True, slots=True)
class JoinResult:
    generation: int
    protocol: str | None
    leader: str
    member_id: str
    members: list[tuple[str, str | None, bytes]]  # for the leader only
    protocol_type: str | None = None


@dataclass(frozen=True, slots=True)
class SyncResult:
    protocol_type: str | None
    protocol: str | None
    assignment: bytes


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_ms: int


# ---------------------------------------------------------------------- effects --------
@dataclass(frozen=True, slots=True)
class Reply:
    """The one answer to request `request`: `result`, or the error `error` when not NONE."""

    request: int
    result: object = None
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class Write:
    """Append these records with acks=all, stamped `wall_ms`; report with `written`."""

    write: int
    keys: tuple[bytes, ...]
    values: tuple[bytes | None, ...]
    wall_ms: int


Effect = Reply | Write


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
