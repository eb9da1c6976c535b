"""What a node knows of itself, as one JSON-ready value: `GET /status` answers it, and the
metrics (`server/metrics.py`) and the live page read the same value.

`status(broker)` is this node's view: whether it is ready (the metadata log has a leader), who
that is, the SCRAM users it knows (their names), its open Kafka connections and the bytes of
requests it holds, each partition it hosts with its role, epoch, leader, HWM, log start and
log end offsets, replicas and in-sync replicas (in ISR mode, the committed ISR, partition epoch
and ELR of the controller's record), whether its replica is repairing or waits for its disk,
and the committed offset of every consumer group this node coordinates (it leads the group's
`__consumer_offsets` partition), with its lag against this node's HWM of that partition.
"""

from __future__ import annotations

from typing import Any

from tidelog.server.handlers import in_sync_nodes
from tidelog.server.metadata import METADATA_TOPIC
from tidelog.server.view import BrokerView


def status(broker: BrokerView) -> dict[str, Any]:
    partitions: list[dict[str, Any]] = []
    hwms: dict[tuple[str, int], int] = {}
    for key, runner in sorted(broker.runners.items()):
        if key.topic == METADATA_TOPIC:
            continue
        state = runner.replica.status()  # one frozen value: every field of one moment
        replicas = tuple(int(n) for n in state.replicas)
        reported = broker.image.partitions.get((key.topic, key.partition))
        record = broker.image.records.get((key.topic, key.partition))
        if record is not None:  # ISR mode: the controller's record is what Metadata answers
            reported_isr: list[int] | None = [int(node) for node in record.isr]
        else:
            reported_isr = None if reported is None else list(reported.isr)
        hwms[key.topic, key.partition] = int(state.hwm)
        partitions.append(
            {
                "topic": key.topic,
                "partition": key.partition,
                "replicas": list(replicas),
                "role": state.role.value,
                "leader": state.leader_id,
                "epoch": int(state.epoch),
                "hwm": int(state.hwm),
                "log_start_offset": int(state.log_start_offset),
                "log_end_offset": int(state.log_end_offset),
                "isr": in_sync_nodes(broker, key, replicas),
                # As the metadata log holds it (the leader's report): what Metadata answers.
                "reported_isr": reported_isr,
                "replication": "quorum" if record is None else "isr",
                # ISR mode: the record's partition epoch and eligible leader replicas.
                "partition_epoch": None if record is None else record.partition_epoch,
                "elr": None if record is None else [int(node) for node in record.elr],
                "repairing": state.repair_floor is not None,
                "disk_error": None if runner.disk_error is None else str(runner.disk_error),
            }
        )
    controller = broker.controller_id()
    # Ready: a metadata leader exists and this node can tell clients the address of every
    # broker that is not fenced (one that is down stays fenced until it is back).
    ready = controller >= 0 and all(
        node in broker.kafka_ports or node in broker.image.fenced for node in broker.all_nodes
    )
    return {
        "node_id": int(broker.node_id),
        "ready": ready,
        "metadata_leader": controller if controller >= 0 else None,
        "fenced": sorted(broker.image.fenced),
        # The SCRAM users this node's metadata image holds (names only): a client logs in
        # at this node once its name is here.
        "scram_users": sorted({user for user, _ in broker.image.scram}),
        "kafka_connections": broker.kafka_connections,
        "request_bytes_held": broker.request_bytes.used,
        "partitions": partitions,
        "groups": group_offsets(broker, hwms),
    }


def group_offsets(broker: BrokerView, hwms: dict[tuple[str, int], int]) -> list[dict[str, Any]]:
    """The committed offsets of the groups this node coordinates, each with its lag: the
    partition's HWM here minus the committed offset (None when this node hosts no replica
    of that partition). A group's offsets are read where they are authoritative: at the
    leader of its `__consumer_offsets` partition, once loaded."""
    rows = []
    for coordinator in broker.coordinators.values():
        machine = coordinator.machine
        if not (machine.active and machine.loaded):
            continue
        for group_id, group in sorted(machine.groups.items()):
            for (topic, partition), committed in sorted(group.offsets.items()):
                hwm = hwms.get((topic, partition))
                rows.append(
                    {
                        "group": group_id,
                        "topic": topic,
                        "partition": partition,
                        "committed_offset": committed.offset,
                        "hwm": hwm,
                        "lag": None if hwm is None else max(0, hwm - committed.offset),
                    }
                )
    return rows
