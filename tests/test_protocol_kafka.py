"""The Kafka server codec against kafka-python's own client-side framing and parsing.

Requests are encoded exactly as kafka-python's client does (`KafkaProtocol.send_request`),
and responses the server codec produces are parsed by the same client object, which checks
correlation ids and response header versions as it would against a real broker.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest

import tidelog.protocol.kafka  # noqa: F401  (first: it imports kafka-python quietly)

# isort: split
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from tidelog.errors import (
    CorruptBatch,
    FencedEpoch,
    LogDiverged,
    NotEnoughReplicas,
    NotLeader,
    OffsetNotAvailable,
    OffsetOutOfRange,
    RequestTimedOut,
    StorageError,
    TidelogError,
)
from tidelog.protocol.framing import NEED_DATA, ProtocolError
from tidelog.protocol.kafka import (
    _APIS,
    FETCH_TOPIC_ID_MIN,
    PRODUCE_LEADER_HINT_MIN,
    PRODUCE_TOPIC_ID_MIN,
    REQUEST_SIZE_MAX,
    SUPPORTED_VERSIONS,
    TOPIC_ID_ZERO,
    ApiKey,
    KafkaConnection,
    KafkaRequest,
    api_versions_response,
    iter_produce_partitions,
    join_batches,
    request_class,
)
from tidelog.protocol.kafka_errors import ErrorCode, error_code_for
from tidelog.types import Epoch, NodeId, Offset

CLIENT_ID = "tidelog-test"


def client() -> Any:
    return KafkaProtocol(client_id=CLIENT_ID)


def drain(connection: KafkaConnection) -> list[KafkaRequest]:
    requests: list[KafkaRequest] = []
    while (request := connection.next_request()) is not NEED_DATA:
        assert isinstance(request, KafkaRequest)
        requests.append(request)
    return requests


def send_one(sent: Any) -> tuple[Any, KafkaConnection, KafkaRequest]:
    """kafka-python's client sends `sent`; the server codec decodes it."""
    kafka_client = client()
    kafka_client.send_request(sent)
    connection = KafkaConnection()
    connection.receive_data(kafka_client.send_bytes())
    [request] = drain(connection)
    return kafka_client, connection, request


def api_versions_request(version: int) -> Any:
    return ApiVersionsRequest(
        version=version, client_software_name="kp", client_software_version="3"
    )


def frame_of(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def make_batch(count: int, *, base_sequence: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=1000,
        producer_epoch=0,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(
            i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"value-%d" % i, headers=[]
        )
    return bytes(builder.build())


def request_for(api_key: ApiKey, version: int) -> Any:
    """A request of every field's default, except that a Produce must expect a response."""
    cls = _APIS[api_key].request_class
    if api_key is ApiKey.PRODUCE:
        return cls(version=version, acks=-1, timeout_ms=1000, topic_data=[])
    return cls(version=version)


EDGE_VERSIONS = [
    (key, version)
    for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
    for version in sorted({low, high})
]


@pytest.mark.parametrize(("api_key", "version"), EDGE_VERSIONS)
def test_every_api_round_trips_at_its_edge_versions(api_key: int, version: int) -> None:
    sent = request_for(ApiKey(api_key), version)
    kafka_client, connection, request = send_one(sent)
    assert (request.api_key, request.api_version) == (api_key, version)
    assert request.correlation_id == sent.header.correlation_id
    assert request.client_id == CLIENT_ID
    assert request.body == sent
    if api_key == ApiKey.API_VERSIONS:
        response = api_versions_response(version)
    else:
        response = request.response_class(version=version)
    [(got_id, got)] = kafka_client.receive_bytes(connection.send_response(request, response))
    assert got_id == request.correlation_id
    assert type(got) is type(response)
    assert got.to_dict() == response.to_dict()


def test_versions_are_clipped_to_what_kafka_python_defines() -> None:
    # Produce and Fetch: every version Kafka 4.0's schemas keep.
    assert SUPPORTED_VERSIONS[ApiKey.PRODUCE] == (3, 13)
    assert SUPPORTED_VERSIONS[ApiKey.FETCH] == (4, 18)
    assert SUPPORTED_VERSIONS[ApiKey.METADATA] == (0, 13)
    # Kafka 4.0 removed these versions from its schemas (KIP-896).
    assert SUPPORTED_VERSIONS[ApiKey.CREATE_TOPICS] == (2, 7)
    assert SUPPORTED_VERSIONS[ApiKey.DELETE_TOPICS] == (1, 6)
    assert SUPPORTED_VERSIONS[ApiKey.DESCRIBE_CONFIGS] == (1, 4)


def test_every_api_is_served_at_every_version_kafka_python_declares_valid() -> None:
    """What ApiVersions advertises is, for every API served, exactly the versions Kafka
    4.0's schemas keep (kafka-python 3.0.12's `valid_versions`)."""
    for key in SUPPORTED_VERSIONS:
        declared = request_class(ApiKey(key)).valid_versions
        assert SUPPORTED_VERSIONS[key] == (int(declared[0]), int(declared[1])), ApiKey(key)


def test_unsupported_api_versions_gets_error_35_in_a_v0_body() -> None:
    """A client newer than tidelog asks ApiVersions v5 (kafka-python's newest, v4, sent
    with its version field raised: its flexible header is v5's too)."""
    kafka_client = client()
    kafka_client.send_request(api_versions_request(4))
    sent = bytearray(kafka_client.send_bytes())
    struct.pack_into(">h", sent, 6, 5)  # size (4 bytes), api key (2), version (2)
    connection = KafkaConnection()
    connection.receive_data(bytes(sent))
    [request] = drain(connection)
    assert request.api_version == 5
    assert request.body is None
    assert request.response_version == 0
    frame = connection.send_response(request, api_versions_response(request.api_version))
    [(_, response)] = kafka_client.receive_bytes(frame)
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert response.version == 0
    listed = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert listed == SUPPORTED_VERSIONS


def test_api_versions_v3_response_keeps_header_v0() -> None:
    kafka_client, connection, request = send_one(api_versions_request(3))
    frame = connection.send_response(request, api_versions_response(3))
    # size | correlation id | error code: no tagged-field byte after the correlation id.
    assert struct.unpack_from(">h", frame, 8) == (0,)
    [(_, response)] = kafka_client.receive_bytes(frame)
    assert response.error_code == 0


def several_requests() -> tuple[Any, bytes]:
    kafka_client = client()
    for version in (0, 4, 7):
        kafka_client.send_request(MetadataRequest(version=version, topics=None))
    kafka_client.send_request(api_versions_request(3))
    return kafka_client, kafka_client.send_bytes()


def test_several_frames_in_one_chunk() -> None:
    _, data = several_requests()
    connection = KafkaConnection()
    connection.receive_data(data)
    requests = drain(connection)
    assert [r.correlation_id for r in requests] == [1, 2, 3, 4]
    assert [r.api_version for r in requests] == [0, 4, 7, 3]


def test_one_byte_at_a_time() -> None:
    _, data = several_requests()
    connection = KafkaConnection()
    requests: list[KafkaRequest] = []
    for i in range(len(data)):
        connection.receive_data(data[i : i + 1])
        requests += drain(connection)
    assert [r.correlation_id for r in requests] == [1, 2, 3, 4]


def test_oversized_frame_is_refused_before_its_payload_arrives() -> None:
    connection = KafkaConnection()
    connection.receive_data(struct.pack(">i", REQUEST_SIZE_MAX + 1))
    with pytest.raises(ProtocolError, match="outside"):
        connection.next_request()
    with pytest.raises(ProtocolError):
        connection.receive_data(b"more")


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"\x00", id="shorter-than-api-key"),
        pytest.param(struct.pack(">hhi", 3, 4, 1), id="no-client-id"),
        pytest.param(struct.pack(">hhih", 3, 4, 1, 50) + b"abc", id="client-id-past-end"),
        pytest.param(struct.pack(">hhih", 99, 0, 1, -1), id="unknown-api-key"),
        pytest.param(struct.pack(">hhih", 0, 2, 1, -1), id="produce-below-min"),
        pytest.param(struct.pack(">hhih", 0, 14, 1, -1), id="produce-above-max"),
        pytest.param(struct.pack(">hhih", 1, 3, 1, -1), id="fetch-below-min"),
        pytest.param(struct.pack(">hhih", 1, 19, 1, -1), id="fetch-above-max"),
        pytest.param(struct.pack(">hhih", -1, 0, 1, -1), id="negative-api-key"),
    ],
)
def test_garbage_raises_protocol_error(payload: bytes) -> None:
    connection = KafkaConnection()
    connection.receive_data(frame_of(payload))
    with pytest.raises(ProtocolError):
        connection.next_request()


def metadata_payload() -> bytes:
    kafka_client = client()
    topics = [MetadataRequest.MetadataRequestTopic(name="t")]
    kafka_client.send_request(MetadataRequest(version=4, topics=topics))
    return kafka_client.send_bytes()[4:]


@pytest.mark.parametrize("cut", [1, 3, 6])
def test_truncated_body_raises_protocol_error(cut: int) -> None:
    connection = KafkaConnection()
    connection.receive_data(frame_of(metadata_payload()[:-cut]))
    with pytest.raises(ProtocolError):
        connection.next_request()


def test_bytes_after_a_whole_body_are_ignored_as_kafka_ignores_them() -> None:
    """librdkafka 2.16's Metadata v13 for every topic, as it sends it: a 4-byte array
    count placeholder where a 1-byte varint belongs, then its own three fields."""
    payload = bytes.fromhex("0003000d00000003000772646b61666b610000000000010000")
    connection = KafkaConnection()
    connection.receive_data(frame_of(payload))
    [request] = drain(connection)
    assert (request.api_key, request.api_version, request.correlation_id) == (3, 13, 3)
    assert request.body.topics is None  # every topic
    connection = KafkaConnection()
    connection.receive_data(frame_of(metadata_payload() + b"\x00"))
    assert drain(connection)[0].api_key == ApiKey.METADATA


def test_the_connection_stays_failed_after_a_protocol_error() -> None:
    connection = KafkaConnection()
    unknown = frame_of(struct.pack(">hhih", 99, 0, 1, -1))
    connection.receive_data(unknown + frame_of(metadata_payload()))
    with pytest.raises(ProtocolError):
        connection.next_request()
    with pytest.raises(ProtocolError):
        connection.next_request()


EVENTS_ID = uuid.UUID("5f1c0e2a-8b7d-4c3e-9a21-0d6e4f8b7a10")
PRODUCE_VERSIONS = range(
    SUPPORTED_VERSIONS[ApiKey.PRODUCE][0], SUPPORTED_VERSIONS[ApiKey.PRODUCE][1] + 1
)
FETCH_VERSIONS = range(SUPPORTED_VERSIONS[ApiKey.FETCH][0], SUPPORTED_VERSIONS[ApiKey.FETCH][1] + 1)


def produce_request(
    version: int, acks: int, batches: dict[int, bytes], *, topic_id: uuid.UUID | None = EVENTS_ID
) -> Any:
    """A Produce of `batches` (partition -> batch) to "events", named by `topic_id` at v13."""
    topic = ProduceRequest.TopicProduceData
    partition = topic.PartitionProduceData
    return ProduceRequest(
        version=version,
        transactional_id=None,
        acks=acks,
        timeout_ms=30_000,
        topic_data=[
            topic(
                name="events",
                topic_id=topic_id,
                partition_data=[
                    partition(index=index, records=batch) for index, batch in batches.items()
                ],
            )
        ],
    )


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_records_come_out_as_the_identical_bytes(version: int) -> None:
    batches = {0: make_batch(3), 2: make_batch(1, base_sequence=3), 5: make_batch(200)}
    _, _, request = send_one(produce_request(version, -1, batches))
    partitions = list(iter_produce_partitions(request.body))
    topic = "events" if version < PRODUCE_TOPIC_ID_MIN else EVENTS_ID
    assert [(p.topic, p.partition) for p in partitions] == [(topic, 0), (topic, 2), (topic, 5)]
    for produced in partitions:
        assert type(produced.records) is bytes
        assert produced.records == batches[produced.partition]
    assert request.expects_response


def test_produce_v13_topic_id_of_zeros_is_a_value_not_a_null() -> None:
    _, _, request = send_one(produce_request(13, -1, {0: make_batch(1)}, topic_id=None))
    [partition] = iter_produce_partitions(request.body)
    assert partition.topic == TOPIC_ID_ZERO


@pytest.mark.parametrize("version", [3, 8, 9, 13])
def test_produce_with_acks_0_expects_no_response(version: int) -> None:
    _, _, request = send_one(produce_request(version, 0, {0: make_batch(1)}))
    assert not request.expects_response


@pytest.mark.parametrize("version", [9, 13])
def test_a_truncated_flexible_produce_raises_protocol_error(version: int) -> None:
    kafka_client = client()
    kafka_client.send_request(produce_request(version, -1, {0: make_batch(2)}))
    payload = kafka_client.send_bytes()[4:]
    for cut in (1, 2, 40):
        connection = KafkaConnection()
        connection.receive_data(frame_of(payload[:-cut]))
        with pytest.raises(ProtocolError):
            connection.next_request()


@pytest.mark.parametrize("version", [v for v in PRODUCE_VERSIONS if v >= PRODUCE_LEADER_HINT_MIN])
def test_produce_response_names_the_current_leader_from_v10(version: int) -> None:
    kafka_client, connection, request = send_one(produce_request(version, -1, {0: make_batch(1)}))
    cls = ProduceResponse
    partition_cls = cls.TopicProduceResponse.PartitionProduceResponse
    answer = cls(
        version=version,
        throttle_time_ms=0,
        responses=[
            cls.TopicProduceResponse(
                name="events",
                topic_id=EVENTS_ID,
                partition_responses=[
                    partition_cls(
                        index=0,
                        error_code=int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
                        base_offset=-1,
                        current_leader=partition_cls.LeaderIdAndEpoch(leader_id=2, leader_epoch=7),
                    )
                ],
            )
        ],
        node_endpoints=[cls.NodeEndpoint(node_id=2, host="127.0.0.1", port=9093, rack=None)],
    )
    [(_, got)] = kafka_client.receive_bytes(connection.send_response(request, answer))
    topic = got.responses[0]
    if version >= PRODUCE_TOPIC_ID_MIN:
        assert topic.topic_id == EVENTS_ID
    else:
        assert topic.name == "events"
    leader = topic.partition_responses[0].current_leader
    assert (leader.leader_id, leader.leader_epoch) == (2, 7)
    assert [(n.node_id, n.host, n.port) for n in got.node_endpoints] == [(2, "127.0.0.1", 9093)]


def fetch_request(version: int, *, topic_id: uuid.UUID | None = EVENTS_ID, **fields: Any) -> Any:
    """A Fetch of partitions 0 and 3 of "events" (by `topic_id` from v13), forgetting
    partition 1 of it, with `fields` set."""
    cls = FetchRequest
    partitions = [
        cls.FetchTopic.FetchPartition(
            partition=index,
            current_leader_epoch=4,
            fetch_offset=10 * index,
            last_fetched_epoch=3,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )
        for index in (0, 3)
    ]
    return cls(
        version=version,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 24,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[cls.FetchTopic(topic="events", topic_id=topic_id, partitions=partitions)],
        forgotten_topics_data=[
            cls.ForgottenTopic(topic="events", topic_id=topic_id, partitions=[1])
        ],
        rack_id="",
        **fields,
    )


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_requests_decode_at_every_version(version: int) -> None:
    _, _, request = send_one(fetch_request(version))
    body = request.body
    [topic] = body.topics
    if version >= FETCH_TOPIC_ID_MIN:
        assert topic.topic_id == EVENTS_ID
    else:
        assert topic.topic == "events"
    assert [(p.partition, p.fetch_offset) for p in topic.partitions] == [(0, 0), (3, 30)]
    if version >= 7:
        [forgotten] = body.forgotten_topics_data
        assert forgotten.partitions == [1]
    assert getattr(body, "replica_id", -1) == -1
    assert getattr(body, "replica_state", None) is None


@pytest.mark.parametrize("version", [v for v in FETCH_VERSIONS if v >= FETCH_TOPIC_ID_MIN])
def test_fetch_topic_id_of_zeros_is_a_value_not_a_null(version: int) -> None:
    _, _, request = send_one(fetch_request(version, topic_id=None))
    assert request.body.topics[0].topic_id is None  # kafka-python's zero uuid


def test_fetch_v15_to_v18_tagged_fields_decode() -> None:
    state = FetchRequest.ReplicaState(replica_id=2, replica_epoch=9)
    _, _, request = send_one(fetch_request(15, cluster_id="c1", replica_state=state))
    assert request.body.cluster_id == "c1"
    assert request.body.replica_state.replica_id == 2
    sent = fetch_request(18)
    directory = uuid.UUID("0b8ef3c6-1d1f-4f5e-8d1e-7a5c3c2b1a09")
    for part in sent.topics[0].partitions:
        part.replica_directory_id, part.high_watermark = directory, 41
    _, _, request = send_one(sent)
    for part in request.body.topics[0].partitions:
        assert (part.replica_directory_id, part.high_watermark) == (directory, 41)


def test_fetch_v11_response_with_raw_batches_decodes_to_the_records() -> None:
    first, second = make_batch(2), make_batch(3, base_sequence=2)
    # The leader stamps offsets: the second batch starts after the first.
    second = struct.pack(">q", 2) + second[8:]
    kafka_client, connection, request = send_one(_APIS[ApiKey.FETCH].request_class(version=11))
    topic = FetchResponse.FetchableTopicResponse
    response = FetchResponse(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            topic(
                topic="events",
                partitions=[
                    topic.PartitionData(
                        partition_index=0,
                        error_code=0,
                        high_watermark=5,
                        last_stable_offset=5,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=join_batches([first, second]),
                    )
                ],
            )
        ],
    )
    [(_, got)] = kafka_client.receive_bytes(connection.send_response(request, response))
    data = got.responses[0].partitions[0]
    assert data.high_watermark == 5
    records = MemoryRecords(data.records)
    decoded = [
        (record.offset, record.key, record.value)
        for batch in iter(records.next_batch, None)
        for record in batch
    ]
    assert decoded == [
        (0, b"k0", b"value-0"),
        (1, b"k1", b"value-1"),
        (2, b"k0", b"value-0"),
        (3, b"k1", b"value-1"),
        (4, b"k2", b"value-2"),
    ]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (None, ErrorCode.NONE),
        (NotLeader(NodeId(2)), ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (NotEnoughReplicas(1, 2), ErrorCode.NOT_ENOUGH_REPLICAS),
        (OffsetNotAvailable(), ErrorCode.OFFSET_NOT_AVAILABLE),
        (RequestTimedOut(), ErrorCode.REQUEST_TIMED_OUT),
        (FencedEpoch(Epoch(1), Epoch(2)), ErrorCode.FENCED_LEADER_EPOCH),
        (OffsetOutOfRange(Offset(9), Offset(0), Offset(5)), ErrorCode.OFFSET_OUT_OF_RANGE),
        (LogDiverged(Epoch(1), Offset(3)), ErrorCode.OFFSET_OUT_OF_RANGE),
        (CorruptBatch("crc"), ErrorCode.CORRUPT_MESSAGE),
        (StorageError("disk"), ErrorCode.KAFKA_STORAGE_ERROR),
        (TidelogError("?"), ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_error_codes_of_tidelog_errors(error: TidelogError | None, code: ErrorCode) -> None:
    assert error_code_for(error) == code


def test_named_error_codes_match_kafka() -> None:
    assert int(ErrorCode.UNSUPPORTED_VERSION) == 35
    assert int(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND) == 20
    assert int(ErrorCode.MEMBER_ID_REQUIRED) == 79
    assert int(ErrorCode.UNKNOWN_TOPIC_ID) == 100
    assert int(ErrorCode.GROUP_ID_NOT_FOUND) == 69
