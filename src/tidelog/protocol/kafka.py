"""The server side of the Kafka wire protocol, sans-IO: bytes in, requests out; responses in,
bytes out.

kafka-python's `kafka.protocol` classes are the codec (their schemas are Kafka's own JSON
message definitions); this module owns only the framing, the request header, the version
table tidelog advertises, and the choice of response header. Rules:

- One `KafkaConnection` per client connection. `receive_data()` buffers; `next_request()`
  returns one decoded `KafkaRequest` or `NEED_DATA`; `send_response()` returns the frame.
- A frame larger than REQUEST_SIZE_MAX, an unknown api key, an unsupported version (except
  of ApiVersions), a body that does not decode to exactly its frame, or a null where the
  schema allows none (a string, bytes, array or struct field that is not nullable at that
  version) raises `ProtocolError`; the caller closes that connection. Kafka brokers do the
  same. Handlers therefore never see a null they did not ask for.
- Errors quote at most QUOTED_MAX characters of what the client sent.
- An ApiVersions request of a version tidelog does not support is answered, not refused:
  error UNSUPPORTED_VERSION in a v0 body listing the supported versions (KIP-511), so the
  client retries with one we speak. kafka-python 3 asks v4 first.
- Response headers: v0, or v1 (tagged fields) for flexible versions; ApiVersions responses
  always use v0, whatever their version.
- Record batches stay bytes: kafka-python's `records` type is plain Bytes, so a Produce
  partition's `records` is the batches exactly as sent, and a Fetch partition's `records`
  is the concatenation of stored batches (`join_batches`).
"""

from __future__ import annotations

import io
import struct
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator
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
        DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse,
        ElectLeadersRequest,
        ElectLeadersResponse,
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
        ListGroupsRequest,
        ListGroupsResponse,
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
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60


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
    ApiKey.DELETE_GROUPS: _Api(DeleteGroupsRequest, DeleteGroupsResponse, (0, 2)),
    ApiKey.OFFSET_DELETE: _Api(OffsetDeleteRequest, OffsetDeleteResponse, (0, 0)),
    ApiKey.DESCRIBE_CLUSTER: _Api(DescribeClusterRequest, DescribeClusterResponse, (0, 2)),
    ApiKey.DESCRIBE_LOG_DIRS: _Api(DescribeLogDirsRequest, DescribeLogDirsResponse, (1, 4)),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _Api(
        OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, (0, 4)
    ),
    ApiKey.PRODUCE: _Api(ProduceRequest, ProduceResponse, (3, 8)),
    ApiKey.FETCH: _Api(FetchRequest, FetchResponse, (4, 11)),
    ApiKey.LIST_OFFSETS: _Api(ListOffsetsRequest, ListOffsetsResponse, (1, 5)),
    ApiKey.METADATA: _Api(MetadataRequest, MetadataResponse, (0, 7)),
    ApiKey.OFFSET_COMMIT: _Api(OffsetCommitRequest, OffsetCommitResponse, (2, 10)),
    ApiKey.OFFSET_FETCH: _Api(OffsetFetchRequest, OffsetFetchResponse, (1, 10)),
    ApiKey.FIND_COORDINATOR: _Api(FindCoordinatorRequest, FindCoordinatorResponse, (0, 6)),
    ApiKey.JOIN_GROUP: _Api(JoinGroupRequest, JoinGroupResponse, (0, 9)),
    ApiKey.HEARTBEAT: _Api(HeartbeatRequest, HeartbeatResponse, (0, 4)),
    ApiKey.LEAVE_GROUP: _Api(LeaveGroupRequest, LeaveGroupResponse, (0, 5)),
    ApiKey.SYNC_GROUP: _Api(SyncGroupRequest, SyncGroupResponse, (0, 5)),
    ApiKey.DESCRIBE_GROUPS: _Api(DescribeGroupsRequest, DescribeGroupsResponse, (0, 6)),
    ApiKey.LIST_GROUPS: _Api(ListGroupsRequest, ListGroupsResponse, (0, 5)),
    ApiKey.API_VERSIONS: _Api(ApiVersionsRequest, ApiVersionsResponse, (0, 3)),
    ApiKey.CREATE_TOPICS: _Api(CreateTopicsRequest, CreateTopicsResponse, (0, 4)),
    ApiKey.DELETE_TOPICS: _Api(DeleteTopicsRequest, DeleteTopicsResponse, (0, 3)),
    ApiKey.DELETE_RECORDS: _Api(DeleteRecordsRequest, DeleteRecordsResponse, (0, 1)),
    ApiKey.INIT_PRODUCER_ID: _Api(InitProducerIdRequest, InitProducerIdResponse, (0, 2)),
    ApiKey.DESCRIBE_CONFIGS: _Api(DescribeConfigsRequest, DescribeConfigsResponse, (0, 2)),
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

# What a malformed body makes kafka-python's generated decoders raise.
_DECODE_ERRORS: Final = (struct.error, ValueError, IndexError, KeyError, OverflowError)


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


def join_batches(batches: Iterable[bytes]) -> bytes:
    """The `records` field of a Fetch partition: stored batches, concatenated as they are."""
    return b"".join(batches)


FETCH_RAW_VERSIONS: Final = (4, 11)
"""The Fetch response versions `encode_fetch_response` writes (all that tidelog serves)."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_FETCH_TOP = struct.Struct(">iihi")  # throttle, error (v7+), session (v7+), topic count
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error, hwm, last stable offset
_I64 = struct.Struct(">q")
_NO_ABORTED = _I32.pack(-1)


class FetchedPartition(NamedTuple):
    """One partition of a Fetch response; `records` are whole stored batches, as read."""

    partition_index: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes | memoryview


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A response already encoded as chunks (header excluded): the broker writes them as
    they are, so record bytes read from a segment file are never copied into a frame."""

    chunks: list[bytes | memoryview]

    @property
    def size_bytes(self) -> int:
        return sum(len(chunk) for chunk in self.chunks)


def encode_fetch_response(
    version: int, topics: list[tuple[str, list[FetchedPartition]]]
) -> RawResponse:
    """A Fetch response body of `version` (v4-v11, non-flexible), byte for byte what
    kafka-python encodes, with each partition's records as a chunk of its own. No
    throttle, no top-level error, session 0, no aborted transactions; the last stable
    offset is the HWM (no transactions)."""
    assert FETCH_RAW_VERSIONS[0] <= version <= FETCH_RAW_VERSIONS[1]
    head = bytearray()
    if version >= 7:
        head += _FETCH_TOP.pack(0, 0, 0, len(topics))
    else:
        head += _I32.pack(0) + _I32.pack(len(topics))
    chunks: list[bytes | memoryview] = []
    for name, partitions in topics:
        encoded = name.encode()
        head += _I16.pack(len(encoded)) + encoded + _I32.pack(len(partitions))
        for part in partitions:
            head += _PARTITION_V4.pack(
                part.partition_index, part.error_code, part.high_watermark, part.high_watermark
            )
            if version >= 5:
                head += _I64.pack(part.log_start_offset)
            head += _NO_ABORTED
            if version >= 11:
                head += _I32.pack(-1)  # preferred read replica: none
            head += _I32.pack(len(part.records))
            if part.records:
                chunks.append(bytes(head))
                chunks.append(part.records)
                head = bytearray()
    chunks.append(bytes(head))
    return RawResponse(chunks)


class ProducePartition(NamedTuple):
    """One partition's data in a Produce request; `records` are raw batch bytes."""

    topic: str
    partition: int
    records: bytes | None


def iter_produce_partitions(body: KafkaMessage) -> Iterator[ProducePartition]:
    """The partitions of a decoded Produce request (v3-v12, topics named), in order."""
    for topic in body.topic_data:
        for data in topic.partition_data:
            yield ProducePartition(topic.name, data.index, data.records)


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
        """The frame answering `request` with an encoded body, as chunks to write in order
        (response header v0: the raw bodies are all of non-flexible versions)."""
        assert request.expects_response
        header = _I32.pack(4 + response.size_bytes) + _I32.pack(request.correlation_id)
        return [header, *response.chunks]

    def send_response(self, request: KafkaRequest, response: KafkaMessage) -> bytes:
        """The frame answering `request` with `response` (a kafka-python response object)."""
        assert request.expects_response
        assert request.api_key == response.API_KEY
        # The version goes in before the header: kafka-python's API_VERSION setter also
        # writes `request_api_version` into any header, which a ResponseHeader lacks.
        response.API_VERSION = request.response_version
        response.with_header(correlation_id=request.correlation_id)
        data: bytes = response.encode(header=True, framed=True)
        return data


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
    stream = io.BytesIO(payload)
    try:
        header = RequestHeader.decode(stream, flexible=flexible)
    except _DECODE_ERRORS as error:
        raise ProtocolError(f"malformed request header: {bounded(repr(error))}") from error
    if stream.tell() > len(payload):
        raise ProtocolError("request header runs past the end of its frame")
    client_id = header.client_id
    return int(header.correlation_id), None if client_id is None else str(client_id), stream.tell()


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
    if end != len(payload):
        raise ProtocolError(
            f"{api_key.name} v{version} body ends at byte {end} of a {len(payload)}-byte frame"
        )
    null = _null_field(_APIS[api_key].request_class._struct, body, version)
    if null is not None:
        raise ProtocolError(f"{api_key.name} v{version}: {null} is null, which it may not be")
    body._version = version
    return body


def _null_field(struct: Any, value: Any, version: int, path: str = "") -> str | None:
    """The path of the first field of `value` that is null although `struct`'s schema
    does not allow it at `version`, or None. Tagged fields are optional: not checked."""
    for name, field in struct.fields.items():
        if not field.for_version_q(version) or field.tagged_field_q(version):
            continue
        item = getattr(value, name, None)
        where = f"{path}{name}"
        if item is None:
            if not field.nullable_for_version_q(version):
                return where
        elif field.is_struct_array():
            for index, element in enumerate(item):
                found = _null_field(field.array_of, element, version, f"{where}[{index}].")
                if found is not None:
                    return found
        elif field.is_struct():
            found = _null_field(field, item, version, f"{where}.")
            if found is not None:
                return found
        elif field.is_array() and any(element is None for element in item):
            return f"{where}[]"
    return None
