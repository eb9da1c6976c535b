"""What a node knows of itself, as one JSON-ready value: `GET /status` answers it, and the
metrics (`server/metrics.py`) and the live page read the same value.

`status(broker)` is this node's view: whether it is ready (the metadata log has a leader), who
that is, the SCRAM users it knows (their names), its open Kafka connections and the bytes of
requests it holds, each partition it hosts with its role, epoch, leader, HWM, log start and
log end offsets, replicas and in-sync replicas (in ISR mode, the committed ISR, partition epoch
and ELR of the controller's record), whether its replica is repairing or waits for its disk,
and the committed offset of every consumer group this node coordinates (it leads the group's
`__consumer_offsets` partition), with its lag against this node's replica of that partition.

Rules of this file:
- A partition's `data_end` is the offset after the last data record below its HWM: the HWM
  less the control batches at the top of the log below it (each new leader appends one at
  the start of its epoch), as this replica knows them (`PartitionRunner.data_end_offset`).
- A group's lag (`group_lag`) is data_end - max(committed, log start offset), never
  negative: a group that read every data record has lag 0, even when failovers appended
  control batches after it stopped. Control batches between data records still count, as
  in Kafka (whose lag is the HWM minus the committed offset). The same lag as the live
  page's (`server/cluster_view.py`) and `tidelog groups describe`'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidelog.protocol.peer import PartitionKey
from tidelog.server.handlers import in_sync_of
from tidelog.server.metadata import METADATA_TOPIC
from tidelog.server.view import BrokerView


def group_lag(committed: int, *, log_start_offset: int, data_end: int) -> int:
    """data_end - max(committed, log start offset), never negative (the rules above)."""
    return max(0, data_end - max(committed, log_start_offset))


def leaders(broker: BrokerView) -> dict[str, Any]:
    """`GET /leaders`: the partitions this node hosts and the ones it leads, without the
    rest of `status` (cheap at thousands of partitions: a tool waiting for leaders polls
    it)."""
    hosted = 0
    leading: list[list[Any]] = []
    for runner in broker.hosted():
        key = runner.key
        if key.topic == METADATA_TOPIC:
            continue
        hosted += 1
        if runner.leading:
            leading.append([key.topic, key.partition])
    return {"node_id": int(broker.node_id), "hosted": hosted, "leaders": leading}


def status(broker: BrokerView) -> dict[str, Any]:
    partitions: list[dict[str, Any]] = []
    for runner in sorted(broker.hosted(), key=lambda runner: runner.key):
        key = runner.key
        if key.topic == METADATA_TOPIC:
            continue
        snapshot = runner.snapshot()  # one frozen value: every field of one moment
        state = snapshot.status
        replicas = tuple(int(n) for n in state.replicas)
        reported = broker.image.partitions.get((key.topic, key.partition))
        record = broker.image.records.get((key.topic, key.partition))
        if record is not None:  # ISR mode: the controller's record is what Metadata answers
            reported_isr: list[int] | None = [int(node) for node in record.isr]
        else:
            reported_isr = None if reported is None else list(reported.isr)
        partitions.append(
            {
                "topic": key.topic,
                "partition": key.partition,
                "replicas": list(replicas),
                "role": state.role.value,
                "leader": state.leader_id,
                "epoch": int(state.epoch),
                "hwm": int(state.hwm),
                # The offset after the last data record below the HWM (the rules above).
                "data_end": int(snapshot.data_end),
                "log_start_offset": int(state.log_start_offset),
                "log_end_offset": int(state.log_end_offset),
                "isr": in_sync_of(state, replicas),
                # This copy's directory id and the voter set its log holds (KIP-853), as
                # [node, directory] pairs (directory 0: not known).
                "directory": int(state.directory_id),
                "voters": sorted([int(k.node), int(k.directory)] for k in state.voters),
                # As the metadata log holds it (the leader's report): what Metadata answers.
                "reported_isr": reported_isr,
                "replication": "quorum" if record is None else "isr",
                # ISR mode: the record's partition epoch and eligible leader replicas.
                "partition_epoch": None if record is None else record.partition_epoch,
                "elr": None if record is None else [int(node) for node in record.elr],
                "repairing": snapshot.repairing,
                "disk_error": snapshot.disk_error,
                # Asleep (core/quiesce.py): no heartbeats or ticks until something wakes it.
                "quiesced": state.quiesced,
            }
        )
    controller = broker.controller_id()
    # Ready: a metadata leader exists, this node's registration is applied (partitions made
    # from now on name its data directory), and it can tell clients the address of every
    # broker that is not fenced (one that is down stays fenced until it is back).
    ready = (
        controller >= 0
        and broker.image.directories.get(broker.node_id) == broker.directory_id
        and all(
            node in broker.kafka_ports or node in broker.image.fenced for node in broker.all_nodes
        )
    )
    return {
        "node_id": int(broker.node_id),
        "directory_id": int(broker.directory_id),  # the data directory's (KIP-858)
        "ready": ready,
        "metadata_leader": controller if controller >= 0 else None,
        "fenced": sorted(broker.image.fenced),
        # The SCRAM users this node's metadata image holds (names only): a client logs in
        # at this node once its name is here.
        "scram_users": sorted({user for user, _ in broker.image.scram}),
        "kafka_connections": broker.kafka_connections,
        "request_bytes_held": broker.request_bytes.used,
        # Node liveness (server/liveness.py): the brokers this node declared dead.
        "dead_nodes": broker.dead_nodes(),
        "partitions": partitions,
        "groups": group_offsets(broker, {(p["topic"], p["partition"]): p for p in partitions}),
    }


def group_offsets(
    broker: BrokerView, hosted: dict[tuple[str, int], dict[str, Any]]
) -> list[dict[str, Any]]:
    """The committed offsets of the groups this node coordinates, each with its lag
    against this node's replica of the partition (`hosted`: its status row; `group_lag`;
    None when this node hosts no replica of it). A group's offsets are read where they are
    authoritative: at the leader of its `__consumer_offsets` partition, once loaded."""
    rows = []
    for coordinator in broker.coordinators.values():
        machine = coordinator.machine
        if not (machine.active and machine.loaded):
            continue
        for group_id, group in sorted(machine.groups.items()):
            for (topic, partition), committed in sorted(group.offsets.items()):
                replica = hosted.get((topic, partition))
                lag = None
                if replica is not None:
                    lag = group_lag(
                        committed.offset,
                        log_start_offset=replica["log_start_offset"],
                        data_end=replica["data_end"],
                    )
                rows.append(
                    {
                        "group": group_id,
                        "topic": topic,
                        "partition": partition,
                        "committed_offset": committed.offset,
                        "hwm": None if replica is None else replica["hwm"],
                        "lag": lag,
                    }
                )
    return rows


class StateCollector(Collector):
    """The gauges, from one `status()` of the node per scrape."""

    def __init__(self, broker: BrokerView) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        state = status(broker)
        node = str(state["node_id"])
        labels = ["topic", "partition", "node"]

        def family(name: str, documentation: str, names: list[str] = labels) -> Any:
            return GaugeMetricFamily(name, documentation, labels=names)

        log_start = family("tidelog_partition_log_start_offset", "The log start offset.")
        hwm = family("tidelog_partition_high_watermark", "The HWM: offsets below it are committed.")
        log_end = family("tidelog_partition_log_end_offset", "The offset after the log's last.")
        epoch = family("tidelog_partition_leader_epoch", "The leader epoch this replica is in.")
        isr = family("tidelog_partition_in_sync_replicas", "The ISR's size, as this node sees it.")
        replicas = family("tidelog_partition_replicas", "The partition's replication factor.")
        role = family("tidelog_partition_role", "1 for the replica's role.", [*labels, "role"])
        under_replicated = under_min_isr = 0
        for part in state["partitions"]:
            values = [part["topic"], str(part["partition"]), node]
            log_start.add_metric(values, part["log_start_offset"])
            hwm.add_metric(values, part["hwm"])
            log_end.add_metric(values, part["log_end_offset"])
            epoch.add_metric(values, part["epoch"])
            isr.add_metric(values, len(part["isr"]))
            replicas.add_metric(values, len(part["replicas"]))
            role.add_metric([*values, part["role"]], 1)
            if part["role"] == "leader":
                in_sync, factor = len(part["isr"]), len(part["replicas"])
                under_replicated += in_sync < factor
                topic = broker.image.topics.get(part["topic"])
                if topic is not None and in_sync < topic.config.min_insync(factor):
                    under_min_isr += 1
        yield from (log_start, hwm, log_end, epoch, isr, replicas, role)

        controller = state["metadata_leader"] == state["node_id"]
        yield _gauge(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions this node leads whose ISR is smaller than their replicas.",
            under_replicated,
        )
        yield _gauge(
            "kafka_server_replicamanager_underminisrpartitioncount",
            "Partitions this node leads whose ISR is below min.insync.replicas.",
            under_min_isr,
        )
        yield _gauge(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the metadata log's leader (the controller), else 0.",
            int(controller),
        )
        yield _gauge(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "On the controller: partitions with no leader, or one that is fenced.",
            offline_partitions(broker) if controller else 0,
        )

        committed = family(
            "tidelog_consumer_group_committed_offset",
            "A group's committed offset (at its coordinator).",
            ["group", "topic", "partition"],
        )
        lag = family(
            "tidelog_consumer_group_lag",
            "Offsets between the group's committed offset (at least the log start) and the "
            "end of the partition's data below the HWM, at the coordinator (control "
            "batches at the top do not count).",
            ["group", "topic", "partition"],
        )
        for row in state["groups"]:
            values = [row["group"], row["topic"], str(row["partition"])]
            committed.add_metric(values, row["committed_offset"])
            if row["lag"] is not None:
                lag.add_metric(values, row["lag"])
        yield committed
        yield lag
        yield _gauge(
            "tidelog_connections", "Open Kafka client connections.", state["kafka_connections"]
        )
        yield _gauge(
            "tidelog_queued_request_bytes",
            "Bytes of Kafka requests read and not yet answered (queued.max.request.bytes).",
            state["request_bytes_held"],
        )
        yield _gauge("tidelog_ready", "1 once the node serves clients.", int(state["ready"]))


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def offline_partitions(broker: BrokerView) -> int:
    """Partitions of the metadata image whose leader this node does not know or knows fenced."""
    offline = 0
    for name, topic in broker.image.topics.items():
        for partition in range(topic.partitions):
            leader, _ = broker.leader_of(PartitionKey(name, partition))
            offline += leader < 0 or leader in broker.image.fenced
    return offline
