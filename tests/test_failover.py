"""Faults with real processes and real clients: kill -9 the leader, pause a node, restart.

A confluent-kafka producer (acks=all, idempotent) writes numbered records while the test
kills the partition's leader with SIGKILL, pauses another node (SIGSTOP) for longer than an
election timeout, resumes it and restarts the killed node; a kafka-python consumer reads
throughout, in each replication mode (in ISR mode the controller elects the new leader
once the killed one's session ends). Then: every acknowledged record is in the log exactly
once; offsets are contiguous; every record the consumer read is at the same offset in the
final log; the HWM the consumer saw never went back; all replicas hold identical batches
below the HWM.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from tidelog.testing.live import LiveCluster, ProducerLoad, create_topic, dump_log, tidelog

TOPIC = "faults"
RECORDS = 3000
RATE_PER_S = 600
DEADLINE_S = 90.0
PAUSE_S = 1.5  # election timeout: 10 to 20 ticks of 50 ms


class ConsumerThread(threading.Thread):
    """Reads from the start until told to stop; remembers each record and every HWM seen."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.read: dict[int, bytes] = {}
        self.hwms: list[int] = []
        self.stop_at: int | None = None  # stop once this many records are read
        self.deadline = time.monotonic() + DEADLINE_S

    def run(self) -> None:
        partition = TopicPartition(TOPIC, 0)
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            request_timeout_ms=20_000,
            metadata_max_age_ms=500,
        )
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        while time.monotonic() < self.deadline:
            if self.stop_at is not None and len(self.read) >= self.stop_at:
                break
            for records in consumer.poll(timeout_ms=200).values():
                for record in records:
                    self.read[record.offset] = record.value
            highwater = consumer.highwater(partition)
            if highwater is not None:
                self.hwms.append(highwater)
        consumer.close()


@pytest.mark.parametrize("mode", ["quorum", "isr"])
def test_acknowledged_records_survive_a_killed_leader_and_a_paused_node(
    tmp_path: Path, mode: str
) -> None:
    cluster = LiveCluster(tmp_path)
    try:
        create_topic(cluster.bootstrap, TOPIC, partitions=1, configs={"replication.mode": mode})
        producer = ProducerLoad(
            cluster.bootstrap, TOPIC, records=RECORDS, rate_per_s=RATE_PER_S, deadline_s=DEADLINE_S
        )
        consumer = ConsumerThread(cluster.bootstrap)
        producer.start()
        consumer.start()
        time.sleep(1.0)  # let records flow before the faults
        leader = cluster.leader_of(TOPIC)
        assert (
            tidelog(
                "cluster", "kill", "--data-dir", str(tmp_path), "--node", str(leader)
            ).returncode
            == 0
        )
        other = next(node for node in (1, 2, 3) if node != leader)
        time.sleep(1.0)  # the survivors elect a new leader meanwhile
        assert (
            tidelog(
                "cluster", "pause", "--data-dir", str(tmp_path), "--node", str(other)
            ).returncode
            == 0
        )
        time.sleep(PAUSE_S)
        assert (
            tidelog(
                "cluster", "resume", "--data-dir", str(tmp_path), "--node", str(other)
            ).returncode
            == 0
        )
        restart = tidelog("cluster", "restart", "--data-dir", str(tmp_path), "--node", str(leader))
        assert restart.returncode == 0, restart.stderr
        producer.join(DEADLINE_S)
        assert not producer.is_alive()
        consumer.stop_at = len(producer.acked)
        consumer.join(DEADLINE_S)
        check_outcome(cluster, producer, consumer, tmp_path)
    finally:
        cluster.down()


def check_outcome(
    cluster: LiveCluster, producer: ProducerLoad, consumer: ConsumerThread, directory: Path
) -> None:
    final = read_final_log(cluster)
    by_value: dict[bytes, list[int]] = {}
    for offset, value in final.items():
        by_value.setdefault(value, []).append(offset)
    assert producer.acked, "nothing was acknowledged"
    for value, offset in producer.acked.items():
        assert by_value.get(value) == [offset], (
            f"{value!r} acked at {offset}, log has {by_value.get(value)}"
        )
    assert all(len(offsets) == 1 for offsets in by_value.values()), "a record is in the log twice"
    for offset, value in consumer.read.items():
        assert final.get(offset) == value, f"consumer read {value!r} at {offset}"
    assert consumer.hwms == sorted(consumer.hwms), "the HWM a consumer saw went back"
    batches = {node: dump_log(directory / f"node-{node}" / f"{TOPIC}-0") for node in (1, 2, 3)}
    for node_batches in batches.values():  # contiguous: each batch starts where the last ended
        for before, after in itertools.pairwise(node_batches):
            assert after["baseOffset"] == before["lastOffset"] + 1  # type: ignore[operator]
    hwm = min(consumer.hwms[-1], *(len(b) and b[-1]["lastOffset"] + 1 for b in batches.values()))  # type: ignore[operator]
    keys = {
        node: [
            (b["baseOffset"], b["partitionLeaderEpoch"], b["crc"])
            for b in node_batches
            if b["lastOffset"] < hwm
        ]  # type: ignore[operator]
        for node, node_batches in batches.items()
    }
    assert keys[1] == keys[2] == keys[3]


def read_final_log(cluster: LiveCluster) -> dict[int, bytes]:
    partition = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
    )
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    final = {record.offset: record.value for record in consumer}
    consumer.close()
    return final
