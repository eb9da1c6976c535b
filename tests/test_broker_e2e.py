"""A real 3-node cluster (separate processes on 127.0.0.1) and real Kafka clients.

The cluster is started and stopped with `tidelog cluster up|down`, as a user would; the
clients are kafka-python, confluent-kafka (librdkafka) and kcat.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from tidelog.testing.live import (
    DEADLINE_S,
    LiveCluster,
    create_topic,
)


def test_kafka_python_produces_and_consumes(cluster: LiveCluster) -> None:
    create_topic(cluster.bootstrap, "kp")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=2)
    sent = {f"kp-{i}".encode() for i in range(500)}
    futures = [producer.send("kp", value=value) for value in sorted(sent)]
    producer.flush(timeout=30)
    acked = [future.get(timeout=30) for future in futures]
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
    )
    partitions = [KafkaTopicPartition("kp", p) for p in range(3)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    records = list(consumer)
    ends = consumer.end_offsets(partitions)
    consumer.close()
    assert {record.value for record in records} == sent
    assert len(records) == len(sent)
    for partition in partitions:  # offsets are dense after each leader's control batch
        offsets = sorted(r.offset for r in records if r.partition == partition.partition)
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        assert ends[partition] == offsets[-1] + 1
    assert {(m.partition, m.offset) for m in acked} == {(r.partition, r.offset) for r in records}


def test_confluent_kafka_produces_and_consumes(cluster: LiveCluster) -> None:
    create_topic(cluster.bootstrap, "ck")
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    acked: list[tuple[int, int]] = []

    def delivered(error: object, message: object) -> None:
        assert error is None, error
        acked.append((message.partition(), message.offset()))  # type: ignore[attr-defined]

    for i in range(2000):
        producer.produce("ck", value=f"ck-{i}".encode(), on_delivery=delivered)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("ck", p, 0) for p in range(3)])
    seen: set[tuple[int, int]] = set()
    deadline = time.monotonic() + DEADLINE_S
    while len(seen) < len(acked) and time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=1.0):
            assert message.error() is None, message.error()
            seen.add((message.partition(), message.offset()))
    marks = [consumer.get_watermark_offsets(TopicPartition("ck", p), timeout=10) for p in range(3)]
    consumer.close()
    assert seen == set(acked)
    assert sum(high - low for low, high in marks) == len(acked) + 3  # + 3 control batches


def test_kcat_lists_metadata_and_consumes(cluster: LiveCluster) -> None:
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is installed by the Makefile's test set-up"
    create_topic(cluster.bootstrap, "kc", partitions=1)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(10):
        producer.send("kc", value=f"kc-{i}".encode())
    producer.flush(timeout=30)
    producer.close()
    listing = subprocess.run(
        [kcat, "-b", cluster.bootstrap, "-L"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert "3 brokers:" in listing
    assert '"kc" with 1 partitions' in listing
    consumed = subprocess.run(
        [kcat, "-b", cluster.bootstrap, "-C", "-t", "kc", "-o", "beginning", "-e", "-q"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert consumed.stdout.split() == [f"kc-{i}" for i in range(10)]


def test_a_malformed_request_closes_only_that_connection(cluster: LiveCluster) -> None:
    host, port = cluster.bootstrap.split(",")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"\x00\x00\x00\x10" + b"\xff" * 16)  # a frame that is no request
        assert sock.recv(100) == b""  # the broker closed it
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20_000)
    try:
        assert len(admin.describe_cluster()["brokers"]) == 3  # still answering
    finally:
        admin.close()


def test_clients_cannot_write_internal_topics(cluster: LiveCluster) -> None:
    """Only the group coordinators write __consumer_offsets: a client's Produce there is
    refused with INVALID_TOPIC_EXCEPTION, as Kafka refuses it."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "message.timeout.ms": 20_000})
    errors: list[object] = []
    producer.produce(
        "__consumer_offsets",
        b"forged commit",
        partition=0,
        on_delivery=lambda error, message: errors.append(error),
    )
    deadline = time.monotonic() + DEADLINE_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors, "no delivery report before the deadline"
    assert errors[0] is not None and errors[0].code() == 17, errors  # TOPIC_EXCEPTION
