"""Produce validation on a real 3-node cluster.

Every hostile batch of tidelog.testing.batches goes to the partition's leader in a raw
Produce request (kafka-python's protocol classes over one socket): each is answered with
Kafka's error and its reason, the same connection then takes a good batch, and nothing of
the hostile ones is appended (the log end moves by the good batches only, and consumers of
three kinds read exactly the good records). Then confluent-kafka, kafka-python and kcat
produce and consume batches of every codec.
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.parser import KafkaProtocol

from tidelog.protocol.kafka import _APIS, ApiKey
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.testing.batches import HOSTILE, Hostile, batch, record
from tidelog.testing.live import DEADLINE_S, LiveCluster, RawConnection, create_topic

SMALL_BYTES_MAX = 1000  # the max.message.bytes of topic "small"
CODECS = ("gzip", "snappy", "lz4", "zstd")
LOG_LINE_LENGTH_MAX = 1000
ATTEMPTS = 5
RETRY_WAIT_S = 0.5


def produce_request(
    topic: str, records: bytes, *, version: int = 8, acks: int = -1, transactional_id: str | None
) -> Any:
    """A Produce request of `records` to partition 0 of `topic`."""
    cls = _APIS[ApiKey.PRODUCE].request_class
    data = cls.TopicProduceData
    partition = data.PartitionProduceData(index=0, records=records)
    return cls(
        version=version,
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=30_000,
        topic_data=[data(name=topic, partition_data=[partition])],
    )


class Leader:
    """A raw connection to the leader of partition 0 of a new one-partition topic. It
    follows the leadership when the partition elects another leader (a loaded machine may
    miss heartbeats), and only then does it open another connection."""

    def __init__(self, cluster: LiveCluster, topic: str, **configs: str) -> None:
        create_topic(cluster.bootstrap, topic, partitions=1, configs=configs)
        cluster.wait_hosted_everywhere(topic, 1)
        self.cluster, self.topic = cluster, topic
        self.connection = RawConnection(self.address())

    def address(self) -> tuple[str, int]:
        admin = KafkaAdminClient(bootstrap_servers=self.cluster.bootstrap)
        try:
            leader = admin.describe_topics([self.topic])[0]["partitions"][0]["leader_id"]
        finally:
            admin.close()
        node = next(node for node in self.cluster.record["nodes"] if node["id"] == leader)
        host, port = node["kafka"].rsplit(":", 1)
        return host, int(port)

    def follow(self) -> None:
        """Connect to the partition's leader anew."""
        self.connection.close()
        time.sleep(RETRY_WAIT_S)
        self.connection = RawConnection(self.address())

    def produce(
        self,
        records: bytes,
        *,
        version: int = 8,
        acks: int = -1,
        transactional_id: str | None = None,
    ) -> Any:
        """The partition's answer to a Produce of `records`, from its leader."""
        request = produce_request(
            self.topic, records, version=version, acks=acks, transactional_id=transactional_id
        )
        for _ in range(ATTEMPTS):
            answer = self.connection.ask(request).responses[0].partition_responses[0]
            if answer.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
                return answer
            self.follow()  # refused before any check: nothing was appended
        raise AssertionError(f"no leader of {self.topic} took a Produce")

    def position(self) -> tuple[int, int]:
        """(leader epoch, latest offset = HWM) of the partition, from its leader."""
        cls = _APIS[ApiKey.LIST_OFFSETS].request_class
        part = cls.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1)
        topic = cls.ListOffsetsTopic(name=self.topic, partitions=[part])
        request = cls(version=4, replica_id=-1, isolation_level=0, topics=[topic])
        for _ in range(ATTEMPTS):
            answer = self.connection.ask(request).topics[0].partitions[0]
            if answer.error_code == 0:
                return answer.leader_epoch, answer.offset
            self.follow()
        raise AssertionError(f"no leader of {self.topic} answered ListOffsets")

    def close(self) -> None:
        self.connection.close()


def good_batch(value: str) -> bytes:
    return batch([record(0, value.encode())])


def refuse(leader: Leader, hostile: Hostile) -> None:
    """`hostile` is refused as the catalogue says and the log end does not move (measured
    again when a new leader's control batch moved it meanwhile)."""
    for _ in range(ATTEMPTS):
        before = leader.position()
        answer = leader.produce(
            hostile.records, version=hostile.api_version, transactional_id=hostile.transactional_id
        )
        assert ErrorCode(answer.error_code).name == hostile.code, (hostile.name, answer)
        if hostile.api_version >= 8:  # error_message is in Produce responses from v8
            assert hostile.reason in answer.error_message, (hostile.name, answer)
        after = leader.position()
        if after[0] == before[0]:
            assert after == before, hostile.name
            return
    raise AssertionError(f"{hostile.name}: the partition's leader never held still")


def append(leader: Leader, value: str) -> None:
    answer = leader.produce(good_batch(value))
    assert answer.error_code == 0, (value, answer)


def test_every_hostile_batch_is_refused_with_its_reason_and_nothing_appended(
    cluster: LiveCluster,
) -> None:
    """After each refusal the same connection appends a good record; in the end the
    consumers read exactly the good records."""
    leader = Leader(cluster, "hostile")
    good = [f"good-{i}" for i in range(len(HOSTILE))]
    try:
        for hostile, value in zip(HOSTILE, good, strict=True):
            refuse(leader, hostile)
            append(leader, value)
    finally:
        leader.close()
    assert_consumers_read(cluster.bootstrap, "hostile", good, partitions=1)


def test_a_malformed_produce_request_closes_only_its_connection(cluster: LiveCluster) -> None:
    """A Produce whose records run past the end of its frame is no request: that
    connection is closed, the leader's other connections carry on."""
    leader = Leader(cluster, "malformed")
    try:
        protocol = KafkaProtocol(client_id="validation-test")
        protocol.send_request(
            produce_request("malformed", good_batch("lost"), transactional_id=None)
        )
        cut = protocol.send_bytes()[4:-5]  # the records' last bytes are missing
        with socket.create_connection(leader.address(), timeout=DEADLINE_S) as malformed:
            malformed.sendall(struct.pack(">i", len(cut)) + cut)
            assert malformed.recv(100) == b""  # closed by the broker
        append(leader, "after-a-malformed-request")
    finally:
        leader.close()
    assert_consumers_read(cluster.bootstrap, "malformed", ["after-a-malformed-request"], 1)


def test_log_append_time_lists_each_record_in_record_errors(cluster: LiveCluster) -> None:
    hostile = next(h for h in HOSTILE if h.code == "INVALID_TIMESTAMP")
    leader = Leader(cluster, "log-append-time")
    try:
        answer = leader.produce(hostile.records)
    finally:
        leader.close()
    assert [e.batch_index for e in answer.record_errors] == [0, 1, 2]
    assert "LogAppendTime" in answer.record_errors[0].batch_index_error_message


def test_a_transactional_batch_without_a_transactional_id_fails_the_request(
    cluster: LiveCluster,
) -> None:
    transactional = next(h for h in HOSTILE if h.transactional_id is not None)
    leader = Leader(cluster, "transactional")
    try:
        refuse(leader, transactional._replace(
            transactional_id=None, code="TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
            reason="need a transactional id",
        ))  # fmt: skip
        append(leader, "after-the-transactional-batch")
    finally:
        leader.close()


def test_invalid_acks_are_refused_and_the_node_carries_on(cluster: LiveCluster) -> None:
    """acks=2 once tripped an assertion in the core and stopped the node."""
    leader = Leader(cluster, "acks")
    try:
        before = leader.position()
        assert leader.produce(good_batch("acks-2"), acks=2).error_code == (
            ErrorCode.INVALID_REQUIRED_ACKS
        )
        after = leader.position()
        assert after == before or after[0] != before[0]
        append(leader, "after-acks-2")
    finally:
        leader.close()
    assert_consumers_read(cluster.bootstrap, "acks", ["after-acks-2"], partitions=1)


def test_max_message_bytes_refuses_a_larger_batch(cluster: LiveCluster) -> None:
    small = Leader(cluster, "small", **{"max.message.bytes": str(SMALL_BYTES_MAX)})
    try:
        fits = batch([record(0, b"x" * 900)])
        too_large = batch([record(0, b"x" * 1000)])
        assert len(fits) <= SMALL_BYTES_MAX < len(too_large)
        answer = small.produce(too_large)
        assert answer.error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert f"maximum configured value of {SMALL_BYTES_MAX}" in answer.error_message
        assert small.produce(fits).error_code == 0
    finally:
        small.close()
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "message.timeout.ms": 20_000})
    producer.produce("small", b"y" * 2000, on_delivery=lambda error, _: errors.append(error))
    producer.flush(30)
    assert [e.name() for e in errors] == ["MSG_SIZE_TOO_LARGE"]


def test_log_lines_quote_little_of_what_clients_sent(cluster: LiveCluster) -> None:
    """A refusal is logged with its reason; no such line grows with the client's input."""
    leader = Leader(cluster, "logged")
    try:
        for hostile in HOSTILE:
            leader.produce(hostile.records, version=hostile.api_version)
    finally:
        leader.close()
    lines = [
        line
        for path in sorted(cluster.directory.glob("node-*/broker.log"))
        for line in path.read_text().splitlines()
        if "produce to logged-0 refused" in line
    ]
    assert len(lines) >= len(HOSTILE) - 1  # all but the request-level refusal
    assert max(len(line) for line in lines) <= LOG_LINE_LENGTH_MAX


# ---------------------------------------------------------------------- clients --------
def produce_with_every_client(bootstrap: str, topic: str) -> list[str]:
    """Records of every codec from confluent-kafka, kafka-python and kcat; their values."""
    sent: list[str] = []
    for codec in CODECS:
        values = [f"ck-{codec}-{i}" for i in range(200)]
        producer = Producer(
            {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20,
             "enable.idempotence": True}
        )  # fmt: skip
        for value in values:
            producer.produce(topic, value.encode())
        assert producer.flush(30) == 0
        sent += values
        values = [f"kp-{codec}-{i}" for i in range(200)]
        kp = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=20)
        for future in [kp.send(topic, value.encode()) for value in values]:
            future.get(timeout=30)
        kp.close()
        sent += values
        values = [f"kcat-{codec}-{i}" for i in range(200)]
        subprocess.run(
            [kcat(), "-b", bootstrap, "-P", "-t", topic, "-z", codec, "-X", "linger.ms=20"],
            input="\n".join(values) + "\n", text=True, timeout=60, check=True,
        )  # fmt: skip
        sent += values
    return sent


def kcat() -> str:
    path = shutil.which("kcat")
    assert path is not None, "kcat is installed by the Makefile's test set-up"
    return path


def assert_consumers_read(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    """confluent-kafka, kafka-python and kcat each read exactly `values` from the start."""
    expected = sorted(values)
    assert sorted(read_confluent(bootstrap, topic, partitions, len(values))) == expected
    kp = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
    )
    kp.assign([KafkaTopicPartition(topic, p) for p in range(partitions)])
    kp.seek_to_beginning()
    read = [message.value.decode() for message in kp]
    kp.close()
    assert sorted(read) == expected
    consumed = subprocess.run(
        [kcat(), "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert sorted(consumed.stdout.split()) == expected


def read_confluent(bootstrap: str, topic: str, partitions: int, count: int) -> list[str]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    read: list[str] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(read) < count and time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=0.5):
            assert message.error() is None, message.error()
            read.append(message.value().decode())
    for message in consumer.consume(500, timeout=1.0):  # nothing more may come
        read.append(message.value().decode())
    consumer.close()
    return read


def test_every_client_produces_and_consumes_every_codec(cluster: LiveCluster) -> None:
    create_topic(cluster.bootstrap, "codecs")
    cluster.wait_hosted_everywhere("codecs", 3)
    sent = produce_with_every_client(cluster.bootstrap, "codecs")
    assert_consumers_read(cluster.bootstrap, "codecs", sent, partitions=3)
