"""The metadata log's quorum as its leader sees it: what DescribeQuorum answers (KIP-595,
KIP-836, KIP-853), as one value that any node can encode for its client.

Rules of this file:
- Only the leader of a partition knows how far each copy has come, so only a leader makes a
  `QuorumReport` (`report_of`); a node that does not lead the metadata log asks the one that
  does over the peer link (QuorumQuery/QuorumAnswer, server/quorum_queries.py), as Kafka's
  brokers forward DescribeQuorum to the active controller.
- CurrentVoters is the voter set the log holds, in node order. A voter's LogEndOffset is its
  copy's match offset as the leader sees it (-1 while unknown, or while the copy that answers
  is not the voter's directory); the leader's own is its log end. Its directory id is the
  voter set's, or, where the set names none (a set written before the directories were
  known, membership rule 7), that of the copy that answers (the leader's: its own).
- Observers are the copies that answer but do not vote, and the partition's replicas that
  are neither voters nor heard from (-1 for what is unknown).
- Times are wall-clock ms. The core stamps a follower's last answer on the monotonic clock it
  is ticked with (`tidelog.clock.monotonic_ms`, tidelog.server.broker's ticker); the report
  moves it to the wall clock by the two clocks' difference at the moment it is made.
  LastFetchTimestamp is when the leader sent the latest request the copy answered.
  LastCaughtUpTimestamp is that same time when the copy's match has reached the leader's
  HWM, else -1: the core keeps no separate caught-up time. The leader reports the present
  for both, as Kafka's LeaderState does.
- A report travels between nodes as JSON; one that comes in is checked at the door
  (`decode_report` returns None for anything malformed), never trusted.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Final

from tidelog.core.replica import FollowerStatus, ReplicaStatus
from tidelog.types import NO_DIRECTORY

UNKNOWN: Final = -1
REPORT_BYTES_MAX: Final = 1024 * 1024
REPLICAS_MAX: Final = 10_000  # voters plus observers one report may name
_INT64_MAX: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One copy of the log, as DescribeQuorum's ReplicaState names it."""

    replica_id: int
    directory_id: int  # the low 64 bits of KIP-853's directory uuid; 0: not known
    log_end_offset: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int


@dataclass(frozen=True, slots=True)
class QuorumReport:
    """The metadata log's leader, epoch, HWM, voters and observers, from its leader."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]


def report_of(status: ReplicaStatus, *, monotonic_now_ms: int, wall_now_ms: int) -> QuorumReport:
    """The report of a leader's status (the caller checked it leads), its times moved from
    the monotonic clock to the wall clock at the moment (`monotonic_now_ms`, `wall_now_ms`)."""
    assert status.is_leader
    assert status.leader_id is not None

    def state_of(node: int, directory: int, follower: FollowerStatus | None) -> ReplicaState:
        if node == status.node_id and directory in (status.directory_id, NO_DIRECTORY):
            return ReplicaState(
                node, status.directory_id, status.log_end_offset, wall_now_ms, wall_now_ms
            )
        if follower is None:
            return ReplicaState(node, directory, UNKNOWN, UNKNOWN, UNKNOWN)
        directory = directory or follower.directory or NO_DIRECTORY
        fetched = (
            UNKNOWN
            if follower.contact_ms is None
            else wall_now_ms - (monotonic_now_ms - follower.contact_ms)
        )
        match = UNKNOWN if follower.match_offset is None else int(follower.match_offset)
        caught_up = fetched if match >= status.hwm else UNKNOWN
        return ReplicaState(node, directory, match, fetched, caught_up)

    answering = {(f.node, f.directory): f for f in status.followers if f.directory is not None}
    voters = []
    for key in sorted(status.voters, key=lambda key: (key.node, key.directory)):
        follower = answering.get((key.node, key.directory))
        if follower is None and key.directory == NO_DIRECTORY:
            follower = next((f for f in status.followers if f.node == key.node), None)
        voters.append(state_of(key.node, key.directory, follower))
    voter_nodes = {key.node for key in status.voters}
    observers = [
        state_of(f.node, f.directory, f)
        for f in status.followers
        if f.directory is not None and not f.voter
    ]
    heard = voter_nodes | {f.node for f in status.followers if f.directory is not None}
    observers += [
        state_of(node, NO_DIRECTORY, None) for node in status.replicas if node not in heard
    ]
    return QuorumReport(
        leader_id=int(status.leader_id),
        leader_epoch=int(status.epoch),
        high_watermark=int(status.hwm),
        voters=tuple(voters),
        observers=tuple(sorted(observers, key=lambda s: (s.replica_id, s.directory_id))),
    )


def encode_report(report: QuorumReport) -> bytes:
    """The report as JSON, for the peer link."""
    return json.dumps(asdict(report), separators=(",", ":")).encode()


def decode_report(data: bytes) -> QuorumReport | None:
    """A report another node sent, or None when it is not one (checked at the door)."""
    if len(data) > REPORT_BYTES_MAX:
        return None
    try:
        fields = json.loads(data)
        return QuorumReport(
            leader_id=_int(fields["leader_id"]),
            leader_epoch=_int(fields["leader_epoch"]),
            high_watermark=_int(fields["high_watermark"]),
            voters=_states(fields["voters"]),
            observers=_states(fields["observers"]),
        )
    except (ValueError, TypeError, KeyError):
        return None


def _int(value: Any) -> int:
    if type(value) is not int or not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise ValueError(f"not an int64: {value!r}")
    return value


def _states(values: Any) -> tuple[ReplicaState, ...]:
    if not isinstance(values, list) or len(values) > REPLICAS_MAX:
        raise ValueError("not a list of replica states")
    return tuple(
        ReplicaState(
            replica_id=_int(value["replica_id"]),
            directory_id=_directory(value["directory_id"]),
            log_end_offset=_int(value["log_end_offset"]),
            last_fetch_timestamp=_int(value["last_fetch_timestamp"]),
            last_caught_up_timestamp=_int(value["last_caught_up_timestamp"]),
        )
        for value in values
    )


def _directory(value: Any) -> int:
    if type(value) is not int or not 0 <= value < 2**64:
        raise ValueError(f"not a directory id: {value!r}")
    return value
