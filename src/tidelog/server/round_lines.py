"""The log lines a partition's round writes about what its Ready says was lost: a
follower's copy that lost records it acknowledged, and (ISR mode) records given up to a new
leader's log after an unclean election; and about its replica's role and repair as they
change. Part of the partition runner (server/partition.py), which calls these only when
its Ready names any, or the change happened.

Rules of this file:
- One ERROR or WARNING line per loss, naming the offsets, the nodes and the epochs, with
  the partition's structured fields (server/logs.py); nothing here changes any state.
"""

from __future__ import annotations

import logging

from tidelog.core.isr import PartitionRecord
from tidelog.core.messages import Ready
from tidelog.core.replica import ReplicaStatus
from tidelog.protocol.peer import PartitionKey
from tidelog.server.logs import partition_fields
from tidelog.types import Offset

log = logging.getLogger("tidelog.server.partition")


def name_lost_copies(key: PartitionKey, ready: Ready, fields: dict[str, object]) -> None:
    """A follower proved its copy lost records it acknowledged (rule 7 of the replica):
    a disk replaced or a partition directory deleted, while the node was down."""
    for lost in ready.lost_copies:
        log.warning(
            "%s-%d: node %d's copy ends at %d, below the %d it acknowledged: it lost "
            "records (a disk replaced, or its directory deleted?); sending it the log again",
            key.topic,
            key.partition,
            lost.follower,
            lost.log_end,
            lost.acknowledged,
            extra=fields,
        )


def name_what_is_given_up(
    key: PartitionKey, ready: Ready, log_end: Offset, record: PartitionRecord | None
) -> None:
    """ISR mode, after an unclean election (docs/isr.md rule 10): log the records this
    replica gives up to the new leader's log, those it had committed (`given_up`) and
    those above its HWM, which its old leader may have acknowledged (`record`: the
    controller's record the replica holds)."""
    name = f"{key.topic}-{key.partition}"
    for lost in ready.given_up:
        log.error(
            "%s: gave up offsets %d..%d, committed here, to leader %d of epoch %d after the "
            "unclean election of epoch %d: those records are lost",
            name,
            lost.start_offset,
            lost.end_offset - 1,
            lost.leader,
            lost.leader_epoch,
            lost.unclean_epoch,
            extra=partition_fields(key.topic, key.partition, lost.leader_epoch),
        )
    if ready.truncate_to is None or record is None:
        return
    if not record.may_give_up(record.leader_epoch):
        return
    start = max([ready.truncate_to, *(lost.end_offset for lost in ready.given_up)])
    if start < log_end:
        log.error(
            "%s: gave up offsets %d..%d to leader %d of epoch %d after the unclean election "
            "of epoch %d: any of them its old leader acknowledged is lost",
            name,
            start,
            log_end - 1,
            record.leader,
            record.leader_epoch,
            record.unclean_epoch,
            extra=partition_fields(key.topic, key.partition, record.leader_epoch),
        )


def name_role(key: PartitionKey, status: ReplicaStatus, fields: dict[str, object]) -> None:
    """The replica's role, epoch or leader changed."""
    log.info(
        "%s-%d: %s in epoch %d (leader %s, hwm %d, log end %d)",
        key.topic,
        key.partition,
        status.role.value,
        status.epoch,
        status.leader_id,
        status.hwm,
        status.log_end_offset,
        extra=fields,
    )


def name_repair(
    key: PartitionKey, status: ReplicaStatus, directory: object, fields: dict[str, object]
) -> None:
    """The replica went under repair (rule 8 of the replica), or came out of it."""
    floor = status.repair_floor
    name = f"{key.topic}-{key.partition}"
    if floor is None:
        log.info("%s: repaired: its log is as far as before the damage again", name, extra=fields)
        return
    end = "an unknown offset" if floor.end_offset is None else f"offset {floor.end_offset}"
    log.warning(
        "%s: under repair: damaged records were set aside (%s/quarantine); its log "
        "reached %s in epoch %d before: until it is that far again (fetched from its "
        "peers) it votes for no replica behind that and does not lead",
        name,
        directory,
        end,
        floor.epoch,
        extra=fields,
    )
