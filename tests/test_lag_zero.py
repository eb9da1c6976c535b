"""A group that has consumed everything shows lag 0, even when a control batch ends the
partition (a new leader's, after a restart): with `tidelog consume --group`, kafka-python,
confluent-kafka and kcat, `tidelog groups describe` says LAG 0 (promise 4: lag is the HWM
minus the committed offset, and a consumer's position is past the control batches it
skipped)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from kafka import KafkaConsumer, KafkaProducer

from tidelog.testing.live import (
    DEADLINE_S,
    LiveCluster,
    create_topic,
    eventually,
    knows_before_joining,
    tidelog,
)

TOPIC = "drained"
RECORDS = 10


def lag_of(bootstrap: str, group: str) -> list[Any]:
    result = tidelog("groups", "describe", group, "--json", "--bootstrap-server", bootstrap)
    assert result.returncode == 0, result.stderr
    return [row["lag"] for row in json.loads(result.stdout)["offsets"]]


def test_a_drained_group_shows_lag_0_behind_a_control_batch(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path / "cluster")
    try:
        create_topic(cluster.bootstrap, TOPIC, partitions=1)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        for i in range(RECORDS):
            producer.send(TOPIC, f"r{i}".encode(), partition=0).get(timeout=30)
        producer.close()
        node = cluster.leader_of(TOPIC)
        restarted = tidelog(
            "cluster", "restart", "--data-dir", str(tmp_path / "cluster"), "--node", str(node)
        )
        assert restarted.returncode == 0, restarted.stderr
        cluster.wait_hosted_everywhere(TOPIC, 1)  # the partition now ends with a control batch
        bootstrap = cluster.bootstrap

        read = tidelog(
            "consume", TOPIC, "--group", "cli", "--from-beginning", "--timeout-ms", "3000",
            "--bootstrap-server", bootstrap,
        )  # fmt: skip
        assert read.returncode == 0 and len(read.stdout.split()) == RECORDS, read.stderr
        assert lag_of(bootstrap, "cli") == [0]

        consumer = KafkaConsumer(
            TOPIC,
            bootstrap_servers=bootstrap,
            group_id="kafka-python",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        knows_before_joining(consumer, TOPIC)
        seen: list[bytes] = []

        def drained() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                seen.extend(record.value for record in records)
            return len(seen) >= RECORDS and not consumer.poll(timeout_ms=500)

        eventually(drained, "kafka-python read everything")
        consumer.commit()  # its positions
        consumer.close()
        assert lag_of(bootstrap, "kafka-python") == [0]

        confluent = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "confluent",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        confluent.subscribe([TOPIC])
        got = 0

        def confluent_drained() -> bool:
            nonlocal got
            message = confluent.poll(0.5)
            if message is not None and message.error() is None:
                got += 1
            return got >= RECORDS and message is None

        eventually(confluent_drained, "confluent-kafka read everything")
        confluent.commit(asynchronous=False)
        confluent.close()
        assert lag_of(bootstrap, "confluent") == [0]

        kcat = shutil.which("kcat")
        assert kcat is not None, "kcat is installed by `make test`"
        subprocess.run(
            [kcat, "-b", bootstrap, "-G", "kcat", TOPIC, "-o", "beginning", "-e", "-q",
             "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100"],
            capture_output=True, timeout=DEADLINE_S, check=True,
        )  # fmt: skip
        eventually(lambda: lag_of(bootstrap, "kcat") == [0], "kcat's group at lag 0")
    finally:
        cluster.down()
