"""The server side of the Kafka wire protocol, sans-IO: bytes in, requests out; responses in,
bytes out.

kafka-python's `kafka.protocol` classes are the codec (their schemas are Kafka's own JSON
message definitions); this module owns only the framing, the request header, the version
table tidelog advertises, and the choice of response header. Rules:

- One `KafkaConnection` per client connection. `receive_data()` buffers; `next_request()`
  returns one decoded `KafkaRequest` or `NEED_DATA`; `send_response()` returns the frame.
- A frame larger than REQUEST_SIZE_MAX, an unknown api key, an unsupported version (except
  of ApiVersions), a body that does not decode within its frame, or a null where the
  schema allows none (a string, bytes, array or struct field that is not nullable at that
  version) raises `ProtocolError`; the caller closes that connection. Kafka brokers do the
  same, and as they do, bytes after a whole body are ignored. Handlers therefore never see
  a null they did not ask for.
- Errors quote at most QUOTED_MAX characters of what the client sent.
- An ApiVersions request of a version tidelog does not support is answered, not refused:
  error UNSUPPORTED_VERSION in a v0 body listing the supported versions (KIP-511), so the
  client retries with one we speak.
- Response headers: v0, or v1 (tagged fields) for flexible versions; ApiVersions responses
  always use v0, whatever their version.
- Record batches stay bytes: kafka-python's `records` type is plain Bytes, so a Produce
  partition's `records` is the batches exactly as sent, and a Fetch partition's `records`
  is the concatenation of stored batches (`join_batches`). Fetch and Produce responses
  are encoded by hand (protocol/kafka_responses.py, every served version) around those
  bytes, never copying them; this module frames them (`send_raw_response`), with response
  header v1 at flexible versions, as every response. Callers import their names from here.
- A uuid field of zeros (Kafka's ZERO_UUID) decodes to None; it is a value no topic has,
  not a null: a Fetch or Produce naming it is answered UNKNOWN_TOPIC_ID, as Kafka does.
"""

from __future__ import annotations

import struct
import uuid
import warnings
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final, NamedTuple

# kafka-python 3.0.12 loads its JSON schemas with importlib.resources.read_text, deprecated
# since Python 3.11: silence that one import-time warning (pytest turns warnings into errors).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin import (
        AlterConfigsRequest,
        AlterConfigsResponse,
        AlterPartitionReassignmentsRequest,
        AlterPartitionReassignmentsResponse,
        AlterUserScramCredentialsRequest,
        AlterUserScramCredentialsResponse,
        CreateAclsRequest,
        CreateAclsResponse,
        CreatePartitionsRequest,
        CreatePartitionsResponse,
        CreateTopicsRequest,
        CreateTopicsResponse,
        DeleteAclsRequest,
        DeleteAclsResponse,
        DeleteGroupsRequest,
        DeleteGroupsResponse,
        DeleteRecordsRequest,
        DeleteRecordsResponse,
        DeleteTopicsRequest,
        DeleteTopicsResponse,
        DescribeAclsRequest,
        DescribeAclsResponse,
        DescribeClusterRequest,
        DescribeClusterResponse,
        DescribeConfigsRequest,
        DescribeConfigsResponse,
        DescribeGroupsRequest,
        DescribeGroupsResponse,
        DescribeLogDirsRequest,
        DescribeLogDirsResponse,
        DescribeQuorumRequest,
        DescribeQuorumResponse,
        DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse,
        ElectLeadersRequest,
        ElectLeadersResponse,
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
        ListGroupsRequest,
        ListGroupsResponse,
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
    )
    from kafka.protocol.api_header import RequestHeader
    from kafka.protocol.consumer import (
        FetchRequest,
        FetchResponse,
        HeartbeatRequest,
        HeartbeatResponse,
        JoinGroupRequest,
        JoinGroupResponse,
        LeaveGroupRequest,
        LeaveGroupResponse,
        ListOffsetsRequest,
        ListOffsetsResponse,
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetDeleteRequest,
        OffsetDeleteResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
        OffsetForLeaderEpochRequest,
        OffsetForLeaderEpochResponse,
        SyncGroupRequest,
        SyncGroupResponse,
    )
    from kafka.protocol.metadata import (
        ApiVersionsRequest,
        ApiVersionsResponse,
        FindCoordinatorRequest,
        FindCoordinatorResponse,
        MetadataRequest,
        MetadataResponse,
    )
    from kafka.protocol.producer import (
        InitProducerIdRequest,
        InitProducerIdResponse,
        ProduceRequest,
        ProduceResponse,
    )
    from kafka.protocol.sasl import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
        SaslHandshakeResponse,
    )

from tidelog.protocol.framing import NEED_DATA, FrameBuffer, NeedData, ProtocolError
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.kafka_extra import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)
from tidelog.protocol.kafka_responses import (
    FETCH_FLEXIBLE_MIN,
    FETCH_NODE_ENDPOINTS_MIN,
    FETCH_RAW_VERSIONS,
    FETCH_TOPIC_ID_MIN,
    PRODUCE_LEADER_HINT_MIN,
    PRODUCE_TOPIC_ID_MIN,
    TOPIC_ID_ZERO,
    FetchedPartition,
    FetchedTopic,
    LeaderAndEpoch,
    NodeEndpoint,
    ProducedPartition,
    ProducedTopic,
    RawResponse,
    encode_fetch_response,
    encode_produce_response,
    join_batches,
)

# The names of this module, and those of the hand-encoded responses (kafka_responses.py)
# that its callers import from here.
__all__ = [
    "FETCH_FLEXIBLE_MIN",
    "FETCH_NODE_ENDPOINTS_MIN",
    "FETCH_RAW_VERSIONS",
    "FETCH_TOPIC_ID_MIN",
    "PRODUCE_LEADER_HINT_MIN",
    "PRODUCE_TOPIC_ID_MIN",
    "QUOTED_MAX",
    "REQUEST_SIZE_MAX",
    "SUPPORTED_VERSIONS",
    "TOPIC_ID_ZERO",
    "ApiKey",
    "FetchedPartition",
    "FetchedTopic",
    "KafkaConnection",
    "KafkaMessage",
    "KafkaRequest",
    "LeaderAndEpoch",
    "NodeEndpoint",
    "ProducePartition",
    "ProducedPartition",
    "ProducedTopic",
    "RawResponse",
    "api_versions_response",
    "bounded",
    "decode_request",
    "encode_fetch_response",
    "encode_produce_response",
    "is_supported",
    "iter_produce_partitions",
    "join_batches",
    "request_class",
    "response_class",
]

REQUEST_SIZE_MAX: Final = 100 * 1024 * 1024
"""The largest request frame accepted (Kafka's socket.request.max.bytes is 100 MiB)."""

QUOTED_MAX: Final = 300


def bounded(text: str, limit: int = QUOTED_MAX) -> str:
    """`text` cut to `limit` characters: what a log line or an error may quote of input."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


KafkaMessage = Any
"""A kafka-python request or response object (kafka-python is untyped)."""


class ApiKey(IntEnum):
    """The Kafka APIs tidelog answers (numbers from Kafka's ApiKeys)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_LOG_DIRS = 35
    DELETE_GROUPS = 42
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    DESCRIBE_CLUSTER = 60
    UNREGISTER_BROKER = 64
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81


class _Api(NamedTuple):
    request_class: Any
    response_class: Any
    versions_wanted: tuple[int, int]


# What tidelog wants to speak (shared/docs/kafka-protocol.md). The advertised range is this
# clipped to what kafka-python's schemas define: Kafka 4.0 dropped old versions, so e.g.
# CreateTopics starts at 2, DeleteTopics and DescribeConfigs at 1.
_APIS: Final[dict[ApiKey, _Api]] = {
    ApiKey.ELECT_LEADERS: _Api(ElectLeadersRequest, ElectLeadersResponse, (0, 2)),
    ApiKey.CREATE_PARTITIONS: _Api(CreatePartitionsRequest, CreatePartitionsResponse, (0, 3)),
    ApiKey.ALTER_CONFIGS: _Api(AlterConfigsRequest, AlterConfigsResponse, (0, 2)),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _Api(
        IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, (0, 1)
    ),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _Api(
        AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, (0, 1)
    ),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _Api(
        ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, (0, 0)
    ),
    ApiKey.DELETE_GROUPS: _Api(DeleteGroupsRequest, DeleteGroupsResponse, (0, 2)),
    ApiKey.OFFSET_DELETE: _Api(OffsetDeleteRequest, OffsetDeleteResponse, (0, 0)),
    ApiKey.DESCRIBE_CLUSTER: _Api(DescribeClusterRequest, DescribeClusterResponse, (0, 2)),
    ApiKey.DESCRIBE_LOG_DIRS: _Api(DescribeLogDirsRequest, DescribeLogDirsResponse, (1, 5)),
    ApiKey.DESCRIBE_QUORUM: _Api(DescribeQuorumRequest, DescribeQuorumResponse, (0, 2)),
    # KIP-853's voter changes and UnregisterBroker: kafka-python has no classes for them
    # (tidelog.protocol.kafka_extra).
    ApiKey.ADD_RAFT_VOTER: _Api(AddRaftVoterRequest, AddRaftVoterResponse, (0, 0)),
    ApiKey.REMOVE_RAFT_VOTER: _Api(RemoveRaftVoterRequest, RemoveRaftVoterResponse, (0, 0)),
    ApiKey.UNREGISTER_BROKER: _Api(UnregisterBrokerRequest, UnregisterBrokerResponse, (0, 0)),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _Api(
        OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, (0, 4)
    ),
    ApiKey.PRODUCE: _Api(ProduceRequest, ProduceResponse, (3, 13)),
    ApiKey.FETCH: _Api(FetchRequest, FetchResponse, (4, 18)),
    ApiKey.LIST_OFFSETS: _Api(ListOffsetsRequest, ListOffsetsResponse, (1, 11)),
    ApiKey.METADATA: _Api(MetadataRequest, MetadataResponse, (0, 13)),
    ApiKey.OFFSET_COMMIT: _Api(OffsetCommitRequest, OffsetCommitResponse, (2, 10)),
    ApiKey.OFFSET_FETCH: _Api(OffsetFetchRequest, OffsetFetchResponse, (1, 10)),
    ApiKey.FIND_COORDINATOR: _Api(FindCoordinatorRequest, FindCoordinatorResponse, (0, 6)),
    ApiKey.JOIN_GROUP: _Api(JoinGroupRequest, JoinGroupResponse, (0, 9)),
    ApiKey.HEARTBEAT: _Api(HeartbeatRequest, HeartbeatResponse, (0, 4)),
    ApiKey.LEAVE_GROUP: _Api(LeaveGroupRequest, LeaveGroupResponse, (0, 5)),
    ApiKey.SYNC_GROUP: _Api(SyncGroupRequest, SyncGroupResponse, (0, 5)),
    ApiKey.DESCRIBE_GROUPS: _Api(DescribeGroupsRequest, DescribeGroupsResponse, (0, 6)),
    ApiKey.LIST_GROUPS: _Api(ListGroupsRequest, ListGroupsResponse, (0, 5)),
    ApiKey.API_VERSIONS: _Api(ApiVersionsRequest, ApiVersionsResponse, (0, 4)),
    ApiKey.CREATE_TOPICS: _Api(CreateTopicsRequest, CreateTopicsResponse, (0, 7)),
    ApiKey.DELETE_TOPICS: _Api(DeleteTopicsRequest, DeleteTopicsResponse, (0, 6)),
    ApiKey.DELETE_RECORDS: _Api(DeleteRecordsRequest, DeleteRecordsResponse, (0, 2)),
    ApiKey.INIT_PRODUCER_ID: _Api(InitProducerIdRequest, InitProducerIdResponse, (0, 6)),
    ApiKey.DESCRIBE_CONFIGS: _Api(DescribeConfigsRequest, DescribeConfigsResponse, (0, 4)),
    # librdkafka looks for v0 before it uses v1 with SaslAuthenticate (as every client
    # does). A v0 client sends raw tokens after the handshake: they are no Kafka request,
    # so its connection closes (sasl.py answers a v0 handshake that way too).
    ApiKey.SASL_HANDSHAKE: _Api(SaslHandshakeRequest, SaslHandshakeResponse, (0, 1)),
    ApiKey.SASL_AUTHENTICATE: _Api(SaslAuthenticateRequest, SaslAuthenticateResponse, (0, 2)),
    ApiKey.DESCRIBE_ACLS: _Api(DescribeAclsRequest, DescribeAclsResponse, (1, 3)),
    ApiKey.CREATE_ACLS: _Api(CreateAclsRequest, CreateAclsResponse, (1, 3)),
    ApiKey.DELETE_ACLS: _Api(DeleteAclsRequest, DeleteAclsResponse, (1, 3)),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _Api(
        DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, (0, 0)
    ),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _Api(
        AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, (0, 0)
    ),
}


def _clip_to_schema(api: _Api) -> tuple[int, int]:
    """`api.versions_wanted` within the versions both kafka-python classes define."""
    low, high = api.versions_wanted
    for cls in (api.request_class, api.response_class):
        schema_low, schema_high = cls.valid_versions
        low, high = max(low, int(schema_low)), min(high, int(schema_high))
    assert low <= high, f"{api.request_class.name}: no version left"
    return low, high


SUPPORTED_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    key: _clip_to_schema(api) for key, api in _APIS.items()
}
"""api key -> (min, max) version, as advertised in ApiVersions responses."""

# ApiVersions v3+ requests use the flexible request header v2 (KIP-511), even at versions
# this broker cannot decode: that is how it can still read their correlation id.
_API_VERSIONS_FLEXIBLE_MIN: Final = 3
_API_KEY_AND_VERSION = struct.Struct(">hh")
_I32 = struct.Struct(">i")
_NO_TAGS = b"\x00"  # an empty tagged-field section (flexible versions)

# What a malformed body makes kafka-python's generated decoders raise.
# kafka-python's generated decoders also assert on what they read (a tagged-field section
# whose size is not what follows it): from our side of the door, a malformed request.
_DECODE_ERRORS: Final = (
    struct.error,
    ValueError,
    IndexError,
    KeyError,
    OverflowError,
    AssertionError,
)


@dataclass(frozen=True, slots=True)
class KafkaRequest:
    """One decoded request.

    `body` is the kafka-python request object, or None for an ApiVersions request of an
    unsupported version (answer it with `api_versions_response(request.api_version)`).
    `response_version` is the version its response is encoded at.
    """

    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    body: KafkaMessage | None
    response_version: int

    @property
    def expects_response(self) -> bool:
        """False for a Produce with acks=0: Kafka sends no response to it."""
        return self.body is None or bool(self.body.expect_response())

    @property
    def response_class(self) -> Any:
        """The kafka-python response class to build this request's answer from."""
        return _APIS[self.api_key].response_class


def request_class(api_key: ApiKey) -> Any:
    """The kafka-python class of `api_key`'s requests (its schema, for tools and tests)."""
    return _APIS[api_key].request_class


def response_class(api_key: ApiKey) -> Any:
    """The kafka-python class of `api_key`'s responses."""
    return _APIS[api_key].response_class


def is_supported(api_key: int, api_version: int) -> bool:
    """True when tidelog speaks `api_version` of `api_key`."""
    versions = SUPPORTED_VERSIONS.get(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1]


def api_versions_response(version: int, served: Collection[int] | None = None) -> KafkaMessage:
    """The ApiVersions answer for a request of `version`, listing the APIs in `served`
    (every supported one when None): a client uses only what is listed.

    Unsupported versions get UNSUPPORTED_VERSION in a v0 body that still lists every
    supported version, so the client can retry (KIP-511).
    """
    error = ErrorCode.NONE
    if not is_supported(ApiKey.API_VERSIONS, version):
        error, version = ErrorCode.UNSUPPORTED_VERSION, 0
    api_keys = [
        ApiVersionsResponse.ApiVersion(api_key=int(key), min_version=low, max_version=high)
        for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
        if served is None or key in served or key == ApiKey.API_VERSIONS
    ]
    return ApiVersionsResponse(
        version=version, error_code=int(error), api_keys=api_keys, throttle_time_ms=0
    )


class ProducePartition(NamedTuple):
    """One partition's data in a Produce request; `records` are raw batch bytes. `topic`
    is the topic's name, or from v13 its id (TOPIC_ID_ZERO when the client sent zeros)."""

    topic: str | uuid.UUID
    partition: int
    records: bytes | None


def iter_produce_partitions(body: KafkaMessage) -> Iterator[ProducePartition]:
    """The partitions of a decoded Produce request (v3-v13), in order."""
    by_id = body.version >= PRODUCE_TOPIC_ID_MIN
    for topic in body.topic_data:
        key = (topic.topic_id or TOPIC_ID_ZERO) if by_id else topic.name
        for data in topic.partition_data:
            yield ProducePartition(key, data.index, data.records)


class KafkaConnection:
    """The server side of one client connection (sans-IO).

    Feed received bytes to `receive_data()`, then call `next_request()` until it returns
    NEED_DATA; answer each request whose `expects_response` is true with the bytes of
    `send_response()`. Kafka clients pipeline requests and match responses by correlation
    id, but expect them in request order: the caller must write responses in that order.
    """

    def __init__(self, *, request_size_max: int = REQUEST_SIZE_MAX) -> None:
        self._frames = FrameBuffer(frame_size_max=request_size_max, name="kafka request")

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._frames.receive_data(data)

    def request_of(self, payload: bytes) -> KafkaRequest:
        """The request in one frame's payload, read by the caller (who bounded its size).
        Raises ProtocolError."""
        return decode_request(payload)

    def next_request(self) -> KafkaRequest | NeedData:
        """The next complete request, or NEED_DATA. Raises ProtocolError."""
        payload = self._frames.next_frame()
        if payload is None:
            return NEED_DATA
        try:
            return decode_request(payload)
        except ProtocolError:
            self._frames.fail()
            raise

    def send_raw_response(
        self, request: KafkaRequest, response: RawResponse
    ) -> list[bytes | memoryview]:
        """The frame answering `request` with an encoded body, as chunks to write in order:
        response header v0, or v1 (an empty tagged-field section) at flexible versions."""
        assert request.expects_response
        header = _I32.pack(request.correlation_id)
        if request.response_class.flexible_version_q(request.response_version):
            header += _NO_TAGS
        return [_I32.pack(len(header) + response.size_bytes) + header, *response.chunks]

    def send_response(self, request: KafkaRequest, response: KafkaMessage) -> bytes:
        """The frame answering `request` with `response` (a kafka-python response object)."""
        assert request.expects_response
        assert request.api_key == response.API_KEY
        # The version goes in before the header: kafka-python's API_VERSION setter also
        # writes `request_api_version` into any header, which a ResponseHeader lacks.
        response.API_VERSION = request.response_version
        response.with_header(correlation_id=request.correlation_id)
        # kafka-python encodes into a bytearray: the frame is handed on as bytes.
        return bytes(response.encode(header=True, framed=True))


def decode_request(payload: bytes) -> KafkaRequest:
    """Decode one request frame's payload (header and body). Raises ProtocolError."""
    if len(payload) < _API_KEY_AND_VERSION.size:
        raise ProtocolError(f"request of {len(payload)} bytes has no header")
    raw_key, version = _API_KEY_AND_VERSION.unpack_from(payload, 0)
    if raw_key not in SUPPORTED_VERSIONS:
        raise ProtocolError(f"unknown api key {raw_key}")
    api_key = ApiKey(raw_key)
    request_class = _APIS[api_key].request_class
    supported = is_supported(api_key, version)
    if supported:
        flexible = bool(request_class.flexible_version_q(version))
    elif api_key is ApiKey.API_VERSIONS:
        flexible = version >= _API_VERSIONS_FLEXIBLE_MIN
    else:
        raise ProtocolError(f"unsupported version {version} of {api_key.name}")
    correlation_id, client_id, body_position = _decode_header(payload, flexible=flexible)
    if not supported:
        return KafkaRequest(api_key, version, correlation_id, client_id, None, 0)
    body = _decode_body(api_key, version, payload, body_position)
    return KafkaRequest(api_key, version, correlation_id, client_id, body, version)


def _decode_header(payload: bytes, *, flexible: bool) -> tuple[int, str | None, int]:
    """(correlation id, client id, position of the body) of a request header v1 or v2."""
    decoder = _HEADER_DECODERS[flexible]
    try:
        header, end = decoder(memoryview(payload), 0)
    except _DECODE_ERRORS as error:
        raise ProtocolError(f"malformed request header: {bounded(repr(error))}") from error
    if end > len(payload):
        raise ProtocolError("request header runs past the end of its frame")
    client_id = header.client_id
    return int(header.correlation_id), None if client_id is None else str(client_id), end


def _header_decoder(flexible: bool) -> Any:
    """kafka-python's generated decoder of request header v2 (flexible) or v1: what
    `RequestHeader.decode` runs, without its stream, and telling where it stopped."""
    struct_ = RequestHeader._struct
    version = RequestHeader._flexible_versions[0] if flexible else RequestHeader._valid_versions[0]
    return struct_.compiled_decode_from(
        version, compact=False, tagged=flexible, data_class=RequestHeader
    )


_HEADER_DECODERS: Final = {flexible: _header_decoder(flexible) for flexible in (False, True)}


_Decoder = Callable[[memoryview, int], tuple[Any, int]]
_decoders: dict[tuple[ApiKey, int], _Decoder] = {}


def _decoder_for(api_key: ApiKey, version: int) -> _Decoder:
    """kafka-python's generated decoder of one request version (compiled once, cached).

    It is used instead of `Request.decode` because it also returns where decoding stopped,
    which is how a body shorter or longer than its frame is caught: the generated code
    slices bytes fields without checking they are all there.
    """
    decoder = _decoders.get((api_key, version))
    if decoder is None:
        cls = _APIS[api_key].request_class
        flexible = bool(cls.flexible_version_q(version))
        decoder = cls._struct.compiled_decode_from(
            version, compact=flexible, tagged=flexible, data_class=cls[None]
        )
        _decoders[(api_key, version)] = decoder
    return decoder


def _decode_body(api_key: ApiKey, version: int, payload: bytes, position: int) -> KafkaMessage:
    decoder = _decoder_for(api_key, version)
    try:
        body, end = decoder(memoryview(payload), position)
    except _DECODE_ERRORS as error:
        what = f"malformed {api_key.name} v{version}"
        raise ProtocolError(f"{what}: {bounded(repr(error))}") from error
    if end > len(payload):
        raise ProtocolError(
            f"{api_key.name} v{version} body runs to byte {end} of a {len(payload)}-byte frame"
        )
    # Bytes after a whole body are ignored, as Kafka ignores them: librdkafka (2.16) asks
    # Metadata v9+ for every topic with its 4-byte placeholder of the array count left in
    # the request; its first zero reads as the null array (every topic), the next three as
    # the other fields, and the three bytes librdkafka meant for those are left over.
    null = _null_field(_null_plan(_APIS[api_key].request_class._struct, version), body)
    if null is not None:
        raise ProtocolError(f"{api_key.name} v{version}: {null} is null, which it may not be")
    body._version = version
    return body


_NullCheck = tuple[str, bool, int, tuple[Any, ...]]  # name, may be null, kind, its fields
_SCALAR, _ARRAY, _STRUCT, _STRUCT_ARRAY = range(4)
_null_plans: dict[tuple[int, int], tuple[Any, tuple[_NullCheck, ...]]] = {}


def _null_plan(struct: Any, version: int) -> tuple[_NullCheck, ...]:
    """What `_null_field` checks of `struct` at `version`, worked out once from the schema
    (cached: a request's walk then costs a getattr per field). Tagged fields are optional:
    not checked. A uuid of zeros decodes as None: a value (no topic has it), not a null."""
    cached = _null_plans.get((id(struct), version))
    if cached is not None:
        return cached[1]
    checks: list[_NullCheck] = []
    for name, field in struct.fields.items():
        if not field.for_version_q(version) or field.tagged_field_q(version):
            continue
        may_be_null = bool(field.nullable_for_version_q(version)) or field.type_str == "uuid"
        if field.is_struct_array():
            checks.append((name, may_be_null, _STRUCT_ARRAY, _null_plan(field.array_of, version)))
        elif field.is_struct():
            checks.append((name, may_be_null, _STRUCT, _null_plan(field, version)))
        else:
            checks.append((name, may_be_null, _ARRAY if field.is_array() else _SCALAR, ()))
    plan = tuple(checks)
    _null_plans[(id(struct), version)] = (struct, plan)  # the struct kept: its id stays its
    return plan


def _null_field(plan: tuple[_NullCheck, ...], value: Any, path: str = "") -> str | None:
    """The path of the first field of `value` that is null although its schema (`plan`, from
    `_null_plan`) does not allow it, or None."""
    for name, may_be_null, kind, fields in plan:
        item = getattr(value, name, None)
        if item is None:
            if not may_be_null:
                return f"{path}{name}"
        elif kind == _STRUCT_ARRAY:
            for index, element in enumerate(item):
                found = _null_field(fields, element, f"{path}{name}[{index}].")
                if found is not None:
                    return found
        elif kind == _STRUCT:
            found = _null_field(fields, item, f"{path}{name}.")
            if found is not None:
                return found
        elif kind == _ARRAY and any(element is None for element in item):
            return f"{path}{name}[]"
    return None
