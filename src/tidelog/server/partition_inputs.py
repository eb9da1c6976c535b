"""The inputs of a partition runner, one frozen dataclass per kind, and the steps that carry
them out on its replica. Part of the runner (server/partition.py): its one dispatch,
`PartitionRunner._step`, takes each input it queued (`PartitionRunner.submit`) to the
replica here.

Rules of this file:
- An input is data, never a closure: what it asks is named by its class and its fields, so
  a reader (and a tool) can follow it past `submit`. The runner steps the inputs queued in
  order, at the start of its next round (between `advance` and the next `ready`).
- Only the runner (server/partition.py, server/disk_health.py and this file) touches a
  replica or its disk log; every other server module asks the runner's typed methods.
- `isr_of` is the one place the server asks which replication mode a replica is in.
- A refusal the replica gives an input is logged here, one line; none of them is an error
  of the caller (a peer message that cannot be right, a handover the replica will not make).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from tidelog.core.isr import AlterResult, IsrProposal, PartitionRecord
from tidelog.core.messages import Message
from tidelog.core.replica import Replica, ReplicaStatus, Role
from tidelog.errors import TidelogError
from tidelog.protocol.peer import PartitionKey
from tidelog.server.logs import partition_fields
from tidelog.types import NodeId, Offset

log = logging.getLogger("tidelog.server.partition")


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: a monotonic reading (it dates the read lease) and the wall clock (None:
    the replica's last)."""

    monotonic_ms: int
    wall_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """A peer's message for this partition."""

    message: Message


@dataclass(frozen=True, slots=True)
class Propose:
    """A record batch to append (built by `PartitionRunner.produce`, which answers it)."""

    request_id: int
    batch: bytes
    acks: int


@dataclass(frozen=True, slots=True)
class Campaign:
    """A new partition's preferred replica campaigns while no one leads epoch 0
    (server/leadership.py); a replica that knows a leader, or a later epoch, is left alone."""


@dataclass(frozen=True, slots=True)
class Transfer:
    """The leader here hands its leadership over: to `target`, or (None) to its first
    in-sync replica not in `avoid` (server/leadership.py); only to an in-sync replica."""

    target: NodeId | None = None
    avoid: frozenset[NodeId] = frozenset()


@dataclass(frozen=True, slots=True)
class SetMinInsync:
    """The topic's min.insync.replicas changed (validated when committed)."""

    value: int | None


@dataclass(frozen=True, slots=True)
class SetMembers:
    """The partition's replica set changed (KIP-455, core/config.py's `members` and
    `target`): the leader replicates to `members` and, in quorum mode, moves the voter set
    to `target`."""

    members: tuple[NodeId, ...]
    target: tuple[NodeId, ...]
    done: asyncio.Future[bool] | None = None  # completes with whether the replica took them


@dataclass(frozen=True, slots=True)
class SetThrottle:
    """The replication throttle for the copies that do not vote (Kafka's
    leader.replication.throttled.rate; None: none)."""

    bytes_per_s: int | None


@dataclass(frozen=True, slots=True)
class TakeRecord:
    """ISR mode: take the controller's record of this partition, read from `records` (the
    metadata image's) when the replica takes it (server/isr_control.py)."""

    records: Mapping[tuple[str, int], PartitionRecord]


@dataclass(frozen=True, slots=True)
class TakeAnswer:
    """ISR mode: the controller's answer to this leader's ISR proposal."""

    proposal: IsrProposal
    result: AlterResult


@dataclass(frozen=True, slots=True)
class Retain:
    """Apply retention.ms and retention.bytes as of `wall_ms`."""

    wall_ms: int


@dataclass(frozen=True, slots=True)
class DeleteRecords:
    """DeleteRecords on the leader: move the log start to `offset` (None: as far as it may
    be read); `done` completes with the new log start, or the refusal."""

    offset: Offset | None
    done: asyncio.Future[Offset]


@dataclass(frozen=True, slots=True)
class NodeChange:
    """Node liveness declared `node` dead, or found it started again (server/liveness.py):
    a quiesced partition it shares wakes (core/quiesce.py)."""

    node: NodeId


Input = (
    Propose
    | Step
    | Tick
    | Campaign
    | Transfer
    | SetMinInsync
    | SetMembers
    | SetThrottle
    | TakeRecord
    | TakeAnswer
    | Retain
    | DeleteRecords
    | NodeChange
)
"""What a runner takes (`PartitionRunner.submit`); `Propose` only from its `produce`."""


def isr_of(replica: Replica) -> Replica | None:
    """The replica when it replicates in ISR mode (docs/isr.md), else None: the one place
    the server asks a replica's replication mode."""
    return None if replica.isr is None else replica


def step_message(replica: Replica, message: Message) -> None:
    refusal = replica.step(message)
    if refusal is not None:  # it cannot be right (the core's rule 9): one line, no harm
        log.warning("dropped a peer message: %s", refusal)


def campaign_if_leaderless(replica: Replica) -> None:
    status = replica.status()
    if status.epoch == 0 and status.leader_id is None and status.role is not Role.LEADER:
        replica.campaign()


def successor(status: ReplicaStatus, avoid: frozenset[NodeId]) -> NodeId | None:
    """Who this leader should hand over to: the first of its replicas (the preferred one
    first) that is in sync, never this node or one in `avoid` (shutting down); None when
    there is none. In quorum mode only a voter takes it (an observer may not lead)."""
    in_sync = set(status.in_sync_replicas) - avoid - {status.node_id}
    voting = {key.node for key in status.voters}
    return next(
        (node for node in status.replicas if node in in_sync and (node in voting or not voting)),
        None,
    )


def transfer(key: PartitionKey, replica: Replica, asked: Transfer) -> bool:
    """Carry out a `Transfer`; True when the replica began the handover."""
    status = replica.status()
    chosen = successor(status, asked.avoid) if asked.target is None else asked.target
    if status.role is not Role.LEADER or chosen is None:
        return False
    if chosen not in status.in_sync_replicas:
        return False
    refusal = replica.transfer_leadership(chosen)
    if refusal is None:
        return True
    log.info(
        "%s: no handover to node %d: %s",
        key,
        chosen,
        refusal,
        extra=partition_fields(key.topic, key.partition, status.epoch),
    )
    return False


def reconfigure(
    key: PartitionKey, replica: Replica, asked: SetMinInsync | SetMembers | SetThrottle
) -> None:
    """A setting of the replica changed (validated when committed: a refusal is a bug)."""
    match asked:
        case SetMinInsync():
            refusal = replica.set_min_insync_replicas(asked.value)
        case SetMembers():
            refusal = replica.set_members(asked.members, asked.target)
            if asked.done is not None and not asked.done.done():
                asked.done.set_result(refusal is None)
        case SetThrottle():
            refusal = replica.set_throttle(asked.bytes_per_s)
    if refusal is not None:
        log.error("%s-%d: %s not taken: %s", key.topic, key.partition, asked, refusal)


def carry_settings(key: PartitionKey, replica: Replica, before: ReplicaStatus) -> None:
    """A replica started again (a repair, a disk outage) takes the settings its
    predecessor was given since the partition was opened."""
    now = replica.status()
    if now.min_insync_replicas != before.min_insync_replicas:
        reconfigure(key, replica, SetMinInsync(before.min_insync_replicas))
    if (now.replicas, now.target) != (before.replicas, before.target):
        reconfigure(key, replica, SetMembers(before.replicas, before.target))
    if now.throttle_bytes_per_s != before.throttle_bytes_per_s:
        reconfigure(key, replica, SetThrottle(before.throttle_bytes_per_s))


def take_record(key: PartitionKey, replica: Replica, asked: TakeRecord) -> PartitionRecord | None:
    """Carry out a `TakeRecord`; the record when the replica declines the leadership it
    names it for (it started again: the controller is to be told), else None."""
    isr = isr_of(replica)
    record = asked.records.get((key.topic, key.partition))
    if isr is None or record is None:
        return None
    if record.leader_epoch < isr.status().epoch:
        return None  # the image is behind this replica (a replay): a later record comes
    refusal = isr.on_partition_record(record)
    fields = partition_fields(key.topic, key.partition, record.leader_epoch)
    if isr.declines_leadership():  # expected after a restart: the controller is told
        if refusal is not None:
            log.info("%s-%d: %s", key.topic, key.partition, refusal, extra=fields)
        return record
    if refusal is not None:
        log.warning("%s-%d: %s", key.topic, key.partition, refusal, extra=fields)
    return None


def take_answer(key: PartitionKey, replica: Replica, asked: TakeAnswer) -> None:
    isr = isr_of(replica)
    if isr is None or asked.result.record.leader_epoch < isr.status().epoch:
        return
    refusal = isr.on_isr_answer(asked.proposal, asked.result)
    if refusal is not None:
        log.warning(
            "%s-%d: answer not taken: %s",
            key.topic,
            key.partition,
            refusal,
            extra=partition_fields(key.topic, key.partition, asked.result.record.leader_epoch),
        )


def delete_records(replica: Replica, asked: DeleteRecords) -> None:
    """Carry out a `DeleteRecords`; its future completes with the outcome."""
    try:
        offset = replica.status().readable_end if asked.offset is None else asked.offset
        low = replica.delete_records(Offset(offset))
    except TidelogError as error:
        if not asked.done.done():
            asked.done.set_exception(error)
    else:
        if not asked.done.done():
            asked.done.set_result(low)
