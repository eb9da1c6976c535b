"""The Kafka-style client commands against a fake, in-memory Kafka broker written here.

The fake answers just what kafka-python's admin client, producer and consumer ask of these
commands: ApiVersions, Metadata, CreateTopics, DeleteTopics, ListOffsets, Produce, Fetch,
DeleteRecords, InitProducerId, and a one-member consumer group (FindCoordinator, JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch). It decodes requests with
tidelog's sans-IO codec (`tidelog.protocol.kafka`), keeps record batches as bytes, and
stamps offsets by overwriting a batch's baseOffset. It claims replicas 1..R for each
partition but only broker 1 exists; fake admin `/status` endpoints serve nodes 1 and 2.

The commands run through click's CliRunner, and once as a real `python -m tidelog`
subprocess. Everything binds 127.0.0.1 on port 0 and is stopped by its fixture.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import tidelog.protocol.kafka  # noqa: F401  (first: it imports kafka-python quietly)

# isort: split
from kafka.protocol.admin import (
    CreateTopicsResponse,
    DeleteRecordsResponse,
    DeleteTopicsResponse,
)
from kafka.protocol.consumer import (
    FetchResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListOffsetsResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse
from kafka.protocol.producer import InitProducerIdResponse, ProduceResponse
from kafka.record.memory_records import MemoryRecords

from tidelog.cli import main
from tidelog.protocol.framing import NEED_DATA, ProtocolError
from tidelog.protocol.kafka import (
    ApiKey,
    KafkaConnection,
    KafkaRequest,
    api_versions_response,
    iter_produce_partitions,
    join_batches,
)
from tidelog.tools.client import find_local_cluster, record_text
from tidelog.tools.client_kafka import ClientError, parse_offset_time, split_bootstrap
from tidelog.tools.client_records import ConsumedRecord

NODE_ID = 1
WAIT_S_MAX = 10.0
FETCH_WAIT_S_MAX = 0.5
POLL_S = 0.05
"""How often the fake servers check for shutdown."""
UNKNOWN_TOPIC = 3
TOPIC_ALREADY_EXISTS = 36
OFFSET_OUT_OF_RANGE = 1


# The fake broker: state


@dataclass
class FakePartition:
    """One partition's log: (base offset, last offset, batch bytes), and its offsets."""

    batches: list[tuple[int, int, bytes]] = field(default_factory=list)
    log_start_offset: int = 0
    hwm: int = 0

    def append(self, records: bytes) -> int:
        """Stamp and store every batch of `records`; the first batch's base offset."""
        first = self.hwm
        position = 0
        while position < len(records):
            (length,) = struct.unpack_from(">i", records, position + 8)
            (last_delta,) = struct.unpack_from(">i", records, position + 23)
            batch = struct.pack(">q", self.hwm) + records[position + 8 : position + 12 + length]
            self.batches.append((self.hwm, self.hwm + last_delta, batch))
            self.hwm += last_delta + 1
            position += 12 + length
        return first

    def read(self, offset: int, size_max: int) -> bytes:
        chosen: list[bytes] = []
        for _, last, batch in self.batches:
            if last >= offset and (not chosen or sum(map(len, chosen)) + len(batch) <= size_max):
                chosen.append(batch)
        return join_batches(chosen)

    def offset_for_time(self, timestamp: int) -> int:
        for record in self.records():
            if record.offset >= self.log_start_offset and record.timestamp >= timestamp:
                return int(record.offset)
        return -1

    def records(self) -> Iterator[Any]:
        memory = MemoryRecords(join_batches(batch for _, _, batch in self.batches))
        for batch in iter(memory.next_batch, None):
            yield from batch


@dataclass
class FakeTopic:
    partitions: list[FakePartition]
    replicas: list[int]
    configs: dict[str, str]


class FakeState:
    """The broker's memory, shared by connection threads under one condition."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.topics: dict[str, FakeTopic] = {}
        self.committed: dict[tuple[str, str, int], int] = {}
        self.produce_error = 0
        self.stopped = False
        self.requests: list[ApiKey] = []
        self.unsupported: set[ApiKey] = set()


# The fake broker: one handler per API


Handler = Callable[["FakeBroker", Any], Any]


def on_metadata(broker: FakeBroker, body: Any) -> Any:
    state = broker.state
    names = list(state.topics) if not body.topics else [t.name for t in body.topics]
    part = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition
    topics = []
    for name in names:
        topic = state.topics.get(name)
        partitions = (
            []
            if topic is None
            else [
                part(
                    error_code=0,
                    partition_index=i,
                    leader_id=NODE_ID,
                    leader_epoch=0,
                    replica_nodes=topic.replicas,
                    isr_nodes=topic.replicas,
                    offline_replicas=[],
                )
                for i in range(len(topic.partitions))
            ]
        )
        topics.append(
            MetadataResponse.MetadataResponseTopic(
                error_code=UNKNOWN_TOPIC if topic is None else 0,
                name=name,
                is_internal=False,
                partitions=partitions,
            )
        )
    broker_info = MetadataResponse.MetadataResponseBroker(
        node_id=NODE_ID, host="127.0.0.1", port=broker.port, rack=None
    )
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[broker_info],
        cluster_id="fake",
        controller_id=NODE_ID,
        topics=topics,
    )


def on_create_topics(broker: FakeBroker, body: Any) -> Any:
    results = []
    for topic in body.topics:
        exists = topic.name in broker.state.topics
        if not exists:
            broker.state.topics[topic.name] = FakeTopic(
                partitions=[FakePartition() for _ in range(topic.num_partitions)],
                replicas=list(range(1, topic.replication_factor + 1)),
                configs={c.name: c.value for c in topic.configs},
            )
        results.append(
            CreateTopicsResponse.CreatableTopicResult(
                name=topic.name,
                error_code=TOPIC_ALREADY_EXISTS if exists else 0,
                error_message=f"Topic '{topic.name}' already exists." if exists else None,
            )
        )
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


def on_delete_topics(broker: FakeBroker, body: Any) -> Any:
    results = [
        DeleteTopicsResponse.DeletableTopicResult(
            name=name, error_code=0 if broker.state.topics.pop(name, None) else UNKNOWN_TOPIC
        )
        for name in body.topic_names
    ]
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


def on_list_offsets(broker: FakeBroker, body: Any) -> Any:
    topic_response = ListOffsetsResponse.ListOffsetsTopicResponse
    topics = []
    for topic in body.topics:
        answers = []
        for p in topic.partitions:
            log = broker.partition(topic.name, p.partition_index)
            offset = (
                -1
                if log is None
                else (
                    log.hwm
                    if p.timestamp == -1
                    else log.log_start_offset
                    if p.timestamp == -2
                    else log.offset_for_time(p.timestamp)
                )
            )
            answers.append(
                topic_response.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index,
                    error_code=0 if log else UNKNOWN_TOPIC,
                    timestamp=-1,
                    offset=offset,
                    leader_epoch=0,
                )
            )
        topics.append(topic_response(name=topic.name, partitions=answers))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def on_produce(broker: FakeBroker, body: Any) -> Any:
    answer = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    by_topic: dict[str, list[Any]] = {}
    for produced in iter_produce_partitions(body):
        log = broker.partition(produced.topic, produced.partition)
        error = UNKNOWN_TOPIC if log is None else broker.state.produce_error
        base = -1 if log is None or error else log.append(produced.records or b"")
        by_topic.setdefault(produced.topic, []).append(
            answer(
                index=produced.partition,
                error_code=error,
                base_offset=base,
                log_append_time_ms=-1,
                log_start_offset=log.log_start_offset if log else -1,
            )
        )
    broker.state.changed.notify_all()
    return ProduceResponse(
        throttle_time_ms=0,
        responses=[
            ProduceResponse.TopicProduceResponse(name=name, partition_responses=parts)
            for name, parts in by_topic.items()
        ],
    )


def fetch_partition(broker: FakeBroker, topic: str, p: Any) -> Any:
    data = FetchResponse.FetchableTopicResponse.PartitionData
    log = broker.partition(topic, p.partition)
    if log is None or not log.log_start_offset <= p.fetch_offset <= log.hwm:
        error = UNKNOWN_TOPIC if log is None else OFFSET_OUT_OF_RANGE
        return data(
            partition_index=p.partition,
            error_code=error,
            high_watermark=-1,
            last_stable_offset=-1,
            log_start_offset=-1,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=b"",
        )
    return data(
        partition_index=p.partition,
        error_code=0,
        high_watermark=log.hwm,
        last_stable_offset=log.hwm,
        log_start_offset=log.log_start_offset,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=log.read(p.fetch_offset, p.partition_max_bytes),
    )


def on_fetch(broker: FakeBroker, body: Any) -> Any:
    def has_data() -> bool:
        return broker.state.stopped or any(
            (log := broker.partition(t.topic, p.partition)) is None or p.fetch_offset != log.hwm
            for t in body.topics
            for p in t.partitions
        )

    broker.state.changed.wait_for(has_data, timeout=min(body.max_wait_ms / 1000, FETCH_WAIT_S_MAX))
    topics = [
        FetchResponse.FetchableTopicResponse(
            topic=t.topic, partitions=[fetch_partition(broker, t.topic, p) for p in t.partitions]
        )
        for t in body.topics
    ]
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)


def on_delete_records(broker: FakeBroker, body: Any) -> Any:
    result = DeleteRecordsResponse.DeleteRecordsTopicResult
    topics = []
    for topic in body.topics:
        answers = []
        for p in topic.partitions:
            log = broker.partition(topic.name, p.partition_index)
            offset = log.hwm if log is not None and p.offset == -1 else p.offset
            error = (
                UNKNOWN_TOPIC
                if log is None
                else (0 if log.log_start_offset <= offset <= log.hwm else OFFSET_OUT_OF_RANGE)
            )
            if log is not None and error == 0:
                log.log_start_offset = offset
            answers.append(
                result.DeleteRecordsPartitionResult(
                    partition_index=p.partition_index,
                    error_code=error,
                    low_watermark=log.log_start_offset if log else -1,
                )
            )
        topics.append(result(name=topic.name, partitions=answers))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


def on_init_producer_id(broker: FakeBroker, body: Any) -> Any:
    return InitProducerIdResponse(
        throttle_time_ms=0, error_code=0, producer_id=4000, producer_epoch=0
    )


def on_find_coordinator(broker: FakeBroker, body: Any) -> Any:
    return FindCoordinatorResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        node_id=NODE_ID,
        host="127.0.0.1",
        port=broker.port,
    )


def on_join_group(broker: FakeBroker, body: Any) -> Any:
    """A group of one: every joiner is its own leader, of generation 1."""
    member_id = body.member_id or "member-1"
    protocol = body.protocols[0]
    member = JoinGroupResponse.JoinGroupResponseMember(
        member_id=member_id, group_instance_id=None, metadata=protocol.metadata
    )
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=0,
        generation_id=1,
        protocol_name=protocol.name,
        leader=member_id,
        member_id=member_id,
        members=[member],
    )


def on_sync_group(broker: FakeBroker, body: Any) -> Any:
    mine = [a.assignment for a in body.assignments if a.member_id == body.member_id]
    return SyncGroupResponse(throttle_time_ms=0, error_code=0, assignment=mine[0] if mine else b"")


def on_heartbeat(broker: FakeBroker, body: Any) -> Any:
    return HeartbeatResponse(throttle_time_ms=0, error_code=0)


def on_leave_group(broker: FakeBroker, body: Any) -> Any:
    return LeaveGroupResponse(throttle_time_ms=0, error_code=0, members=[])


def on_offset_commit(broker: FakeBroker, body: Any) -> Any:
    topic = OffsetCommitResponse.OffsetCommitResponseTopic
    for t in body.topics:
        for p in t.partitions:
            broker.state.committed[(body.group_id, t.name, p.partition_index)] = p.committed_offset
    return OffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            topic(
                name=t.name,
                partitions=[
                    topic.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=0
                    )
                    for p in t.partitions
                ],
            )
            for t in body.topics
        ],
    )


def on_offset_fetch(broker: FakeBroker, body: Any) -> Any:
    topic = OffsetFetchResponse.OffsetFetchResponseTopic
    committed = broker.state.committed
    return OffsetFetchResponse(
        throttle_time_ms=0,
        error_code=0,
        topics=[
            topic(
                name=t.name,
                partitions=[
                    topic.OffsetFetchResponsePartition(
                        partition_index=i,
                        committed_offset=committed.get((body.group_id, t.name, i), -1),
                        committed_leader_epoch=-1,
                        metadata="",
                        error_code=0,
                    )
                    for i in t.partition_indexes
                ],
            )
            for t in body.topics or []
        ],
    )


HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.METADATA: on_metadata,
    ApiKey.CREATE_TOPICS: on_create_topics,
    ApiKey.DELETE_TOPICS: on_delete_topics,
    ApiKey.LIST_OFFSETS: on_list_offsets,
    ApiKey.PRODUCE: on_produce,
    ApiKey.FETCH: on_fetch,
    ApiKey.DELETE_RECORDS: on_delete_records,
    ApiKey.INIT_PRODUCER_ID: on_init_producer_id,
    ApiKey.FIND_COORDINATOR: on_find_coordinator,
    ApiKey.JOIN_GROUP: on_join_group,
    ApiKey.SYNC_GROUP: on_sync_group,
    ApiKey.HEARTBEAT: on_heartbeat,
    ApiKey.LEAVE_GROUP: on_leave_group,
    ApiKey.OFFSET_COMMIT: on_offset_commit,
    ApiKey.OFFSET_FETCH: on_offset_fetch,
}


# The fake broker: sockets


class FakeBroker:
    """A threaded TCP server on 127.0.0.1 answering Kafka requests from `FakeState`."""

    def __init__(self) -> None:
        self.state = FakeState()
        self.connections: set[socket.socket] = set()
        broker = self

        class Connection(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                broker.serve_connection(self.request)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Connection)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(
            target=self.server.serve_forever, args=(POLL_S,), daemon=True
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def partition(self, topic: str, index: int) -> FakePartition | None:
        found = self.state.topics.get(topic)
        if found is None or not 0 <= index < len(found.partitions):
            return None
        return found.partitions[index]

    def answer(self, request: KafkaRequest) -> Any:
        if request.api_key is ApiKey.API_VERSIONS:
            response = api_versions_response(request.api_version)
            response.api_keys = [
                k for k in response.api_keys if k.api_key not in self.state.unsupported
            ]
            return response
        with self.state.changed:
            self.state.requests.append(request.api_key)
            return HANDLERS[request.api_key](self, request.body)

    def serve_connection(self, sock: socket.socket) -> None:
        self.connections.add(sock)
        codec = KafkaConnection()
        try:
            while data := sock.recv(65536):
                codec.receive_data(data)
                while (request := codec.next_request()) is not NEED_DATA:
                    assert isinstance(request, KafkaRequest)
                    response = self.answer(request)
                    if request.expects_response:
                        sock.sendall(codec.send_response(request, response))
        except (OSError, ProtocolError):
            pass
        finally:
            self.connections.discard(sock)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        with self.state.changed:
            self.state.stopped = True
            self.state.changed.notify_all()
        self.server.shutdown()
        self.server.server_close()
        for sock in list(self.connections):
            sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(WAIT_S_MAX)


class StatusServer:
    """A fake admin endpoint: `GET /status` of one node, from the fake broker's state."""

    def __init__(self, broker: FakeBroker, node_id: int) -> None:
        def status() -> dict[str, Any]:
            with broker.state.changed:
                return {
                    "node_id": node_id,
                    "ready": True,
                    "metadata_leader": NODE_ID,
                    "partitions": [
                        {
                            "topic": name,
                            "partition": i,
                            "replicas": topic.replicas,
                            "role": "leader" if node_id == NODE_ID else "follower",
                            "leader": NODE_ID,
                            "epoch": 3,
                            "hwm": log.hwm,
                            "log_start_offset": log.log_start_offset,
                            "log_end_offset": log.hwm + node_id - 1,
                            "isr": topic.replicas,
                        }
                        for name, topic in broker.state.topics.items()
                        for i, log in enumerate(topic.partitions)
                        if node_id in topic.replicas
                    ],
                }

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps(status()).encode()
                self.send_response(200 if self.path == "/status" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, args=(POLL_S,), daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(WAIT_S_MAX)


# Fixtures and helpers


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeBroker]:
    # No local cluster unless a test writes one: ./data must not leak in.
    monkeypatch.setenv("TIDELOG_DATA_DIR", str(tmp_path / "no-cluster"))
    fake = FakeBroker()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def local_cluster(
    broker: FakeBroker, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Path]:
    """A cluster.json naming the fake broker; nodes 1 and 2 answer /status, node 3 does not."""
    servers = [StatusServer(broker, 1), StatusServer(broker, 2)]
    nodes = [
        {
            "id": i + 1,
            "pid": os.getpid(),
            "kafka": broker.bootstrap,
            "peer": "127.0.0.1:1",
            "admin": address,
            "data_dir": str(tmp_path / f"node{i + 1}"),
        }
        for i, address in enumerate([s.address for s in servers] + [f"127.0.0.1:{free_port()}"])
    ]
    directory = tmp_path / "data"
    directory.mkdir()
    (directory / "cluster.json").write_text(
        json.dumps({"bootstrap": broker.bootstrap, "nodes": nodes})
    )
    monkeypatch.setenv("TIDELOG_DATA_DIR", str(directory))
    yield directory
    for server in servers:
        server.stop()


def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(broker: FakeBroker | None, *args: str, stdin: str | None = None) -> Result:
    bootstrap = [] if broker is None else ["--bootstrap-server", broker.bootstrap]
    return CliRunner().invoke(main, [*args, *bootstrap], input=stdin)


def ok(broker: FakeBroker | None, *args: str, stdin: str | None = None) -> Result:
    result = run(broker, *args, stdin=stdin)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def create(broker: FakeBroker, topic: str, partitions: int = 1, factor: int = 3) -> None:
    ok(
        broker,
        "topics",
        "create",
        topic,
        "--partitions",
        str(partitions),
        "--replication-factor",
        str(factor),
    )


def failed(result: Result, message: str) -> None:
    """An expected failure: exit 1, `error: ...` on stderr, no traceback."""
    assert result.exit_code == 1, result.output
    assert f"error: {message}" in result.stderr
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


# topics


def test_topics_create_list_describe_delete(broker: FakeBroker) -> None:
    result = ok(
        broker,
        "topics",
        "create",
        "orders",
        "--partitions",
        "2",
        "--replication-factor",
        "3",
        "--config",
        "retention.ms=1000",
    )
    assert result.stdout == "Created topic orders.\n"
    assert broker.state.topics["orders"].configs == {"retention.ms": "1000"}
    create(broker, "audit", partitions=1, factor=1)
    assert ok(broker, "topics", "list").stdout == "audit\norders\n"
    assert json.loads(ok(broker, "topics", "list", "--json").stdout) == {
        "topics": ["audit", "orders"]
    }
    assert ok(broker, "topics", "describe", "orders").stdout == (
        "Topic: orders\tPartitionCount: 2\tReplicationFactor: 3\n"
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\n"
        "\tTopic: orders\tPartition: 1\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\n"
    )
    every = ok(broker, "topics", "describe").stdout.splitlines()
    assert [line for line in every if not line.startswith("\t")] == [
        "Topic: audit\tPartitionCount: 1\tReplicationFactor: 1",
        "Topic: orders\tPartitionCount: 2\tReplicationFactor: 3",
    ]
    assert ok(broker, "topics", "delete", "audit").stdout == "Deleted topic audit.\n"
    assert json.loads(ok(broker, "topics", "delete", "orders", "--json").stdout) == {
        "topic": "orders",
        "deleted": True,
    }
    assert ok(broker, "topics", "list").stdout == ""


def test_topics_create_json_and_errors(broker: FakeBroker) -> None:
    result = ok(broker, "topics", "create", "t", "--partitions", "3", "--json")
    assert json.loads(result.stdout) == {
        "topic": "t",
        "partitions": 3,
        "replication_factor": 1,
        "configs": {},
    }
    failed(run(broker, "topics", "create", "t"), "topic 't' already exists")
    failed(run(broker, "topics", "create", "u", "--config", "novalue"), "bad --config")
    assert run(broker, "topics", "create", "u", "--partitions", "0").exit_code == 2
    failed(run(broker, "topics", "describe", "nope"), "unknown topic 'nope'")
    failed(run(broker, "topics", "delete", "nope"), "unknown topic 'nope'")


def test_describe_json_without_a_local_cluster(broker: FakeBroker) -> None:
    create(broker, "t", partitions=1, factor=2)
    assert json.loads(ok(broker, "topics", "describe", "t", "--json").stdout) == [
        {"topic": "t", "partition": 0, "leader": 1, "replicas": [1, 2], "isr": [1, 2]}
    ]


def test_describe_adds_each_replicas_state_from_admin_status(
    broker: FakeBroker, local_cluster: Path
) -> None:
    create(broker, "t")
    ok(broker, "produce", "t", stdin="a\nb\n")
    assert ok(None, "topics", "describe", "t").stdout == (
        "Topic: t\tPartitionCount: 1\tReplicationFactor: 3\n"
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\n"
        "\t\tReplica: 1\tRole: leader\tEpoch: 3\tLogStartOffset: 0\tHighWatermark: 2\t"
        "LogEndOffset: 2\n"
        "\t\tReplica: 2\tRole: follower\tEpoch: 3\tLogStartOffset: 0\tHighWatermark: 2\t"
        "LogEndOffset: 3\n"
        "\t\tReplica: 3\tStatus: unknown\n"
    )
    [row] = json.loads(ok(None, "topics", "describe", "t", "--json").stdout)
    assert row["replica_status"] == [
        {
            "node_id": 1,
            "role": "leader",
            "epoch": 3,
            "log_start_offset": 0,
            "hwm": 2,
            "log_end_offset": 2,
        },
        {
            "node_id": 2,
            "role": "follower",
            "epoch": 3,
            "log_start_offset": 0,
            "hwm": 2,
            "log_end_offset": 3,
        },
        None,
    ]
    table = ok(None, "topics", "describe", "t", "--table").stdout
    assert "HIGH-WATERMARK" in table
    assert "follower" in table


# produce and consume


def test_produce_then_consume_from_the_beginning(broker: FakeBroker) -> None:
    create(broker, "t", partitions=2)
    result = ok(broker, "produce", "t", "--partition", "1", stdin="one\ntwo\n\nthree\n")
    assert result.stderr == "4 records produced\n"
    assert broker.partition("t", 1).hwm == 4  # type: ignore[union-attr]
    result = ok(broker, "consume", "t", "--from-beginning", "--max-messages", "4")
    assert result.stdout == "one\ntwo\n\nthree\n"
    assert result.stderr == "Processed a total of 4 messages\n"
    result = ok(
        broker,
        "consume",
        "t",
        "--partition",
        "1",
        "--offset",
        "2",
        "--print-offset",
        "--timeout-ms",
        "300",
    )
    assert result.stdout == "1:2:\n1:3:three\n"


def test_produce_keys_and_acks(broker: FakeBroker) -> None:
    create(broker, "t")
    for acks in ("all", "1", "0"):
        ok(broker, "produce", "t", "--acks", acks, "--key-separator", "=", stdin=f"k={acks}\n")
    result = ok(broker, "consume", "t", "--from-beginning", "--print-key", "--max-messages", "3")
    assert result.stdout == "k\tall\nk\t1\nk\t0\n"
    lines = ok(broker, "consume", "t", "--from-beginning", "--max-messages", "1", "--json")
    record = json.loads(lines.stdout)
    assert {k: record[k] for k in ("topic", "partition", "offset", "key", "value")} == {
        "topic": "t",
        "partition": 0,
        "offset": 0,
        "key": "k",
        "value": "all",
    }


def test_produce_json_summary(broker: FakeBroker) -> None:
    create(broker, "t")
    result = ok(broker, "produce", "t", "--json", stdin="a\nb\nc\n")
    assert json.loads(result.stdout) == {
        "topic": "t",
        "produced": 3,
        "failed": 0,
        "errors": [],
        "last_offsets": {"0": 2},
    }


def test_produce_reports_failed_sends(broker: FakeBroker) -> None:
    create(broker, "t")
    result = run(broker, "produce", "t", "--key-separator", ":", stdin="k:v\nnokey\n")
    failed(result, "line 2: no key separator ':'")
    assert "1 records produced" in result.stderr
    broker.state.produce_error = 29  # TOPIC_AUTHORIZATION_FAILED: not retriable
    result = run(broker, "produce", "t", stdin="x\n")
    failed(result, "TopicAuthorizationFailedError")
    assert "0 records produced" in result.stderr


def test_consume_stops_after_the_idle_timeout(broker: FakeBroker) -> None:
    create(broker, "t")
    ok(broker, "produce", "t", stdin="old\n")
    started = time.monotonic()
    result = ok(broker, "consume", "t", "--timeout-ms", "300")
    assert result.stdout == ""
    assert result.stderr == "Processed a total of 0 messages\n"
    assert time.monotonic() - started < WAIT_S_MAX


def test_consume_with_a_group_commits_and_resumes(broker: FakeBroker) -> None:
    create(broker, "t")
    ok(broker, "produce", "t", stdin="a\nb\nc\n")
    first = ok(broker, "consume", "t", "--group", "g", "--from-beginning", "--max-messages", "2")
    assert first.stdout == "a\nb\n"
    assert broker.state.committed[("g", "t", 0)] == 2
    second = ok(broker, "consume", "t", "--group", "g", "--timeout-ms", "1000")
    assert second.stdout == "c\n"
    assert broker.state.committed[("g", "t", 0)] == 3
    assert ApiKey.JOIN_GROUP in broker.state.requests


# offsets and records


def test_get_offsets_latest_earliest_and_by_time(broker: FakeBroker) -> None:
    create(broker, "t", partitions=2)
    before = int(time.time() * 1000) - 1
    ok(broker, "produce", "t", "--partition", "0", stdin="a\nb\nc\n")
    assert ok(broker, "get-offsets", "t").stdout == "t:0:3\nt:1:0\n"
    assert ok(broker, "get-offsets", "t", "--time", "earliest").stdout == "t:0:0\nt:1:0\n"
    assert ok(broker, "get-offsets", "t", "--time", str(before), "--partition", "0").stdout == (
        "t:0:0\n"
    )
    assert ok(broker, "get-offsets", "t", "--time", str(before + 10**9)).stdout == (
        "t:0:-1\nt:1:-1\n"
    )
    assert json.loads(ok(broker, "get-offsets", "t", "--json").stdout) == [
        {"topic": "t", "partition": 0, "offset": 3},
        {"topic": "t", "partition": 1, "offset": 0},
    ]
    failed(run(broker, "get-offsets", "t", "--time", "yesterday"), "bad --time")
    failed(run(broker, "get-offsets", "t", "--partition", "5"), "unknown partition 5 of 't'")


def test_delete_records_moves_the_low_watermark(broker: FakeBroker) -> None:
    create(broker, "t")
    ok(broker, "produce", "t", stdin="a\nb\nc\nd\n")
    result = ok(broker, "delete-records", "t", "--partition", "0", "--offset", "2")
    assert result.stdout == "partition: t-0\tlow_watermark: 2\n"
    assert ok(broker, "get-offsets", "t", "--time", "earliest").stdout == "t:0:2\n"
    assert ok(broker, "consume", "t", "--from-beginning", "--max-messages", "2").stdout == (
        "c\nd\n"
    )
    result = ok(broker, "delete-records", "t", "--partition", "0", "--offset", "-1", "--json")
    assert json.loads(result.stdout) == {"topic": "t", "partition": 0, "low_watermark": 4}
    failed(
        run(broker, "delete-records", "t", "--partition", "0", "--offset", "9"),
        "OffsetOutOfRangeError",
    )


# expected failures


def test_apis_the_broker_lacks_are_named(broker: FakeBroker) -> None:
    create(broker, "t")
    broker.state.unsupported = {ApiKey.DELETE_RECORDS, ApiKey.FIND_COORDINATOR}
    result = run(broker, "delete-records", "t", "--partition", "0", "--offset", "0")
    failed(result, "the broker does not support DeleteRecords yet")
    result = run(broker, "consume", "t", "--group", "g", "--timeout-ms", "500")
    failed(result, "the broker does not support consumer groups yet")


@pytest.mark.parametrize(
    "args",
    [
        ["produce", "nope"],
        ["consume", "nope"],
        ["get-offsets", "nope"],
        ["delete-records", "nope", "--partition", "0", "--offset", "0"],
    ],
)
def test_unknown_topic(broker: FakeBroker, args: list[str]) -> None:
    failed(run(broker, *args, stdin="x\n"), "unknown topic 'nope'")


def test_bad_flag_combinations(broker: FakeBroker) -> None:
    create(broker, "t")
    failed(run(broker, "consume", "t", "--offset", "1"), "--offset needs --partition")
    failed(run(broker, "consume", "t", "--group", "g", "--partition", "0"), "--group cannot")
    failed(run(broker, "produce", "t", "--key-separator", ""), "--key-separator must not")
    assert run(broker, "produce", "t", "--acks", "2").exit_code == 2
    assert run(broker, "delete-records", "t", "--offset", "1").exit_code == 2


@pytest.mark.parametrize(
    "args", [["topics", "list"], ["get-offsets", "t"], ["produce", "t"], ["consume", "t"]]
)
def test_no_broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str]) -> None:
    monkeypatch.setenv("TIDELOG_DATA_DIR", str(tmp_path))
    address = f"127.0.0.1:{free_port()}"
    result = CliRunner().invoke(main, [*args, "--bootstrap-server", address], input="x\n")
    failed(result, f"no broker at {address} (is the cluster up? tidelog cluster up ...)")


# the local cluster file


def test_find_local_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TIDELOG_DATA_DIR", str(tmp_path))
    assert find_local_cluster() is None
    (tmp_path / "cluster.json").write_text("{not json")
    assert find_local_cluster() is None
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    cluster = {"bootstrap": "127.0.0.1:1", "nodes": [{"id": 1, "pid": int(dead.stdout)}]}
    (tmp_path / "cluster.json").write_text(json.dumps(cluster))
    assert find_local_cluster() is None
    cluster["nodes"] = [{"id": 1, "pid": os.getpid()}]
    (tmp_path / "cluster.json").write_text(json.dumps(cluster))
    assert find_local_cluster() == cluster
    monkeypatch.delenv("TIDELOG_DATA_DIR")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "cluster.json").write_text(json.dumps(cluster))
    assert find_local_cluster() == cluster


def test_commands_default_to_the_local_cluster(broker: FakeBroker, local_cluster: Path) -> None:
    create(broker, "t")
    assert ok(None, "topics", "list").stdout == "t\n"


# small pieces


def test_split_bootstrap_and_parse_time() -> None:
    assert split_bootstrap("a:1, b:2,c") == [("a", 1), ("b", 2), ("c", 9092)]
    with pytest.raises(ClientError):
        split_bootstrap("a:x")
    assert [parse_offset_time(t) for t in ("earliest", "LATEST", "12")] == [-2, -1, 12]


def test_record_text_like_the_console_consumer() -> None:
    record = ConsumedRecord("t", 2, 7, 0, None, None)
    assert record_text(record, print_offset=False, print_key=False) == b"null"
    assert record_text(record, print_offset=True, print_key=True) == b"2:7:null\tnull"


# a real process


def test_python_dash_m_tidelog_round_trip(broker: FakeBroker, tmp_path: Path) -> None:
    create(broker, "t")
    env = {**os.environ, "TIDELOG_DATA_DIR": str(tmp_path / "none")}
    command = [sys.executable, "-m", "tidelog"]
    produced = subprocess.run(
        [*command, "produce", "t", "--bootstrap-server", broker.bootstrap],
        input=b"hello\nworld\n",
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    assert produced.stderr.decode().endswith("2 records produced\n")
    offsets = subprocess.run(
        [*command, "get-offsets", "t", "--bootstrap-server", broker.bootstrap],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert offsets.stdout == b"t:0:2\n"
    missing = subprocess.run(
        [*command, "topics", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}"],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 1
    assert missing.stderr.startswith(b"error: no broker at 127.0.0.1:")
    assert b"Traceback" not in missing.stderr
