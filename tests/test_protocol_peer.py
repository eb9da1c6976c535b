"""The peer codec: round trips of every core message, fragmentation, and malformed frames."""

from __future__ import annotations

import dataclasses
import struct
import typing

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.core.liveness import NodePing, NodePong
from tidelog.core.messages import (
    AppendRequest,
    AppendResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from tidelog.protocol.framing import NEED_DATA, ProtocolError
from tidelog.protocol.peer import (
    _LAYOUT_BY_CLASS,
    MESSAGE_TAGS,
    PEER_FRAME_SIZE_MAX,
    SCHEMA_FINGERPRINT,
    BrokerNotice,
    ElectPreferred,
    ForwardReply,
    ForwardRequest,
    FrameTooLarge,
    Handshake,
    LeaderNotice,
    PartitionKey,
    PeerDecoder,
    PeerEncoder,
    PeerItem,
    PeersNotice,
    QuorumAnswer,
    QuorumQuery,
    _layout_of,
)
from tidelog.types import Epoch, NodeId, Offset

CLUSTER = "tide-cluster"
SENDER = NodeId(1)
INT32 = (-(2**31) + 1, 2**31 - 1)  # the smallest int32 is the None sentinel
INT64 = (-(2**63) + 1, 2**63 - 1)


def connected_decoder(cluster_id: str = CLUSTER) -> tuple[PeerEncoder, PeerDecoder]:
    encoder = PeerEncoder(node_id=SENDER, cluster_id=CLUSTER)
    decoder = PeerDecoder(cluster_id=cluster_id)
    decoder.receive_data(encoder.encode_handshake())
    assert decoder.next_frame() == Handshake(SENDER, CLUSTER)
    return encoder, decoder


def round_trip(items: list[PeerItem]) -> list[PeerItem] | object:
    encoder, decoder = connected_decoder()
    decoder.receive_data(encoder.encode_frame(items))
    decoded = decoder.next_frame()
    assert decoder.next_frame() is NEED_DATA
    return decoded


# Built from the dataclass fields, like the codec's layouts, so fields the core adds later
# are covered without editing these tests.
_ANNOTATION_BOUNDS: dict[str, tuple[int, int]] = {
    "NodeId": INT32,
    "Epoch": INT32,
    "Offset": INT64,
    "DirectoryId": INT64,
    "int": INT64,
}
_BATCHES = "tuple[bytes,...]"
PORTS = (0, 65_535)  # a BrokerNotice refuses any other port
LISTENERS = (  # a BrokerNotice's advertised listeners, each protocol at most once
    b"PLAINTEXT://10.0.0.1:9092",
    b"SSL://broker-1.example.com:1",
    b"SASL_PLAINTEXT://[fd00::1]:65535",
    b"SASL_SSL://" + b"h" * 253 + b":9095",
)
PEER = (b"h" * 253 + b":9192",)  # a BrokerNotice's peer address: one at most
PEERS = (b"1@10.0.0.1:9192", b"2147483647@[fd00::1]:1", b"0@" + b"h" * 253 + b":65535")
PARSED = {"listeners": LISTENERS, "peer": PEER, "peers": PEERS}  # bytes fields that are parsed


def bounds_of(field: dataclasses.Field[object]) -> tuple[int, int]:
    if field.name.endswith("_port"):
        return PORTS
    return _ANNOTATION_BOUNDS[_annotation(field).removesuffix("|None")]


def _annotation(field: dataclasses.Field[object]) -> str:
    return str(field.type).replace(" ", "")


def make(cls: type[Message], **given: object) -> Message:
    """A message of `cls` with `given` fields, every other one 0, False or empty."""
    values: dict[str, object] = {"sender": SENDER}
    for field in dataclasses.fields(cls):
        annotation = _annotation(field)
        values.setdefault(
            field.name, () if annotation == _BATCHES else False if annotation == "bool" else 0
        )
    values.update(given)
    return cls(**values)


def extreme(cls: type[Message], side: int) -> Message:
    """Every numeric field at its smallest (side 0) or largest (side 1) encodable value."""
    given: dict[str, object] = {}
    for field in dataclasses.fields(cls):
        base = _annotation(field).removesuffix("|None")
        if base in _ANNOTATION_BOUNDS and field.name != "sender":
            given[field.name] = bounds_of(field)[side]
        elif base == "bool":
            given[field.name] = bool(side)
        elif base == _BATCHES and field.name in PARSED:  # a notice's: parsed
            given[field.name] = PARSED[field.name] if side else ()
        elif base == _BATCHES:
            given[field.name] = (b"", b"x" * 70_000, bytes(range(256))) if side else ()
    return make(cls, **given)


EDGE_MESSAGES: list[Message] = [
    extreme(cls, side) for cls in MESSAGE_TAGS.values() for side in (0, 1)
] + [
    make(AppendRequest, prev_epoch=Epoch(-1), hwm=Offset(-1)),
    # Two bytes fields, each in its own place: a reset's producer snapshot after batches.
    make(AppendRequest, batches=(b"batch",), reset=True, producers=(b"p" * 36, b"q" * 36)),
    make(AppendResponse, success=False, match_offset=Offset(-1), hint_epoch=Epoch(-1)),
    make(VoteRequest, last_epoch=Epoch(-1), pre_vote=True),
    make(VoteResponse, epoch=Epoch(-1), granted=True),
]


@pytest.mark.parametrize("message", EDGE_MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_type_round_trips(message: Message) -> None:
    items: list[PeerItem] = [(PartitionKey("t", 0), message)]
    assert round_trip(items) == items


def test_every_message_type_has_a_tag() -> None:
    notices = {
        LeaderNotice,
        BrokerNotice,
        PeersNotice,
        ForwardRequest,
        ForwardReply,
        ElectPreferred,
        QuorumQuery,
        QuorumAnswer,
        PeersNotice,
        NodePing,  # node liveness (core/liveness.py)
        NodePong,
    }
    assert set(typing.get_args(Message)) | notices == set(MESSAGE_TAGS.values())


def test_mixed_frame_keeps_order_and_partition_keys() -> None:
    keys = [PartitionKey("orders", 0), PartitionKey("orders", 1), PartitionKey("ünïcode", 7)]
    items: list[PeerItem] = [
        (keys[i % len(keys)], message) for i, message in enumerate(EDGE_MESSAGES * 3)
    ]
    assert round_trip(items) == items


def test_empty_frame() -> None:
    assert round_trip([]) == []


def test_batches_come_back_as_bytes() -> None:
    batch = bytearray(b"abc")
    message = make(AppendRequest, batches=(bytes(batch),))
    [(_, decoded)] = round_trip([(PartitionKey("t", 0), message)])  # type: ignore[misc]
    assert isinstance(decoded, AppendRequest)
    assert [type(b) for b in decoded.batches] == [bytes]


@dataclasses.dataclass(frozen=True, slots=True)
class _WithOptional:
    sender: NodeId
    voted_for: NodeId | None
    epoch: Epoch | None
    batches: tuple[bytes, ...]
    hwm: Offset | None


def test_optional_fields_use_a_sentinel_distinct_from_minus_one() -> None:
    layout = _layout_of(99, _WithOptional)
    assert layout.bytes_fields == (("batches", 3),)
    assert [sentinel for _, sentinel in layout.optional] == [-(2**31), -(2**31), -(2**63)]
    assert layout.item.format == ">BHiiiiqI"


def test_the_schema_fingerprint_follows_the_layouts() -> None:
    assert SCHEMA_FINGERPRINT == SCHEMA_FINGERPRINT & 0xFFFFFFFF
    assert len({layout.description for layout in _LAYOUT_BY_CLASS.values()}) == len(MESSAGE_TAGS)


def strategy_of(field: dataclasses.Field[object]) -> st.SearchStrategy[object]:
    annotation = _annotation(field)
    base = annotation.removesuffix("|None")
    if base == _BATCHES and field.name in PARSED:  # a notice's: parsed
        size = 1 if field.name == "peer" else 4
        return st.lists(st.sampled_from(PARSED[field.name]), max_size=size, unique=True).map(tuple)
    if base == _BATCHES:
        return st.lists(st.binary(max_size=300), max_size=4).map(tuple)
    found: st.SearchStrategy[object] = (
        st.booleans() if base == "bool" else st.integers(*bounds_of(field))
    )
    return found if base == annotation else st.none() | found


def messages_of(cls: type[Message]) -> st.SearchStrategy[Message]:
    fields = {
        field.name: strategy_of(field)
        for field in dataclasses.fields(cls)
        if field.name != "sender"
    }
    return st.builds(cls, sender=st.just(SENDER), **fields)


messages = st.one_of(*(messages_of(cls) for cls in MESSAGE_TAGS.values()))
keys = st.builds(PartitionKey, st.text(max_size=20), st.integers(0, 2**31 - 1))


@given(st.lists(st.tuples(keys, messages), max_size=30), st.integers(1, 64))
def test_any_frames_round_trip_in_any_chunking(items: list[PeerItem], chunk: int) -> None:
    encoder, decoder = connected_decoder()
    data = encoder.encode_frame(items) + encoder.encode_frame(items[::-1])
    frames: list[object] = []
    for start in range(0, len(data), chunk):
        decoder.receive_data(data[start : start + chunk])
        while (frame := decoder.next_frame()) is not NEED_DATA:
            frames.append(frame)
    assert frames == [items, items[::-1]]


def test_one_byte_at_a_time_including_the_handshake() -> None:
    encoder = PeerEncoder(node_id=SENDER, cluster_id=CLUSTER)
    items: list[PeerItem] = [(PartitionKey("t", 1), message) for message in EDGE_MESSAGES]
    data = encoder.encode_handshake() + encoder.encode_frame(items)
    decoder = PeerDecoder(cluster_id=CLUSTER)
    frames: list[object] = []
    for i in range(len(data)):
        decoder.receive_data(data[i : i + 1])
        while (frame := decoder.next_frame()) is not NEED_DATA:
            frames.append(frame)
    assert frames == [Handshake(SENDER, CLUSTER), items]
    assert decoder.peer_node_id == SENDER


def expect_protocol_error(decoder: PeerDecoder, data: bytes, match: str | None = None) -> None:
    decoder.receive_data(data)
    with pytest.raises(ProtocolError, match=match):
        decoder.next_frame()
    with pytest.raises(ProtocolError):  # the stream stays dead
        decoder.next_frame()


def test_handshake_of_another_cluster_is_refused() -> None:
    encoder = PeerEncoder(node_id=SENDER, cluster_id="other")
    expect_protocol_error(PeerDecoder(cluster_id=CLUSTER), encoder.encode_handshake(), "cluster")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (struct.pack(">BHIi", 1, 99, SCHEMA_FINGERPRINT, 1) + b"\x00\x00", "protocol v99"),
        (struct.pack(">BHIi", 1, 1, SCHEMA_FINGERPRINT ^ 1, 1) + b"\x00\x00", "schema"),
        (struct.pack(">BHI", 2, 0, 0), r"expected a handshake, got .* b'\\x02\\x00"),
        (struct.pack(">BHIi", 1, 1, SCHEMA_FINGERPRINT, 1), "malformed"),
        (struct.pack(">BHIiH", 1, 1, SCHEMA_FINGERPRINT, 1, 50) + b"abc", "runs past"),
    ],
)
def test_bad_handshakes(payload: bytes, match: str) -> None:
    expect_protocol_error(PeerDecoder(cluster_id=""), frame(payload), match)


def good_frame() -> bytes:
    message = make(AppendRequest, recipient=NodeId(2), epoch=Epoch(1), batches=(b"batch",))
    encoder = PeerEncoder(node_id=SENDER, cluster_id=CLUSTER)
    return encoder.encode_frame([(PartitionKey("t", 0), message)])


@pytest.mark.parametrize("cut", [1, 5, 6, 20])
def test_truncated_frames(cut: int) -> None:
    good = good_frame()[4:]
    _, decoder = connected_decoder()
    expect_protocol_error(decoder, frame(good[:-cut]))


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda p: p + b"\x00", "after the last item"),
        (lambda p: p[:10] + b"\x63" + p[11:], "unknown message tag"),  # the tag after "t"
        (lambda p: p[:11] + b"\x00\x05" + p[13:], "malformed"),  # topic index out of range
        (lambda p: b"\x01" + p[1:], "expected a message frame"),
        (lambda p: p[:9] + b"\xff" + p[10:], "malformed"),  # bad UTF-8 topic
        (lambda p: p[:3] + b"\x00\x01\x00\x00" + p[7:], "items exceed"),
    ],
)
def test_malformed_frames(mutate: object, match: str) -> None:
    assert callable(mutate)
    _, decoder = connected_decoder()
    expect_protocol_error(decoder, frame(mutate(good_frame()[4:])), match)


def test_oversized_frame_is_refused_from_its_size() -> None:
    _, decoder = connected_decoder()
    expect_protocol_error(decoder, struct.pack(">i", PEER_FRAME_SIZE_MAX + 1), "outside")


def test_message_from_another_sender_is_refused() -> None:
    _, decoder = connected_decoder()
    impostor = PeerEncoder(node_id=NodeId(9), cluster_id=CLUSTER)
    vote = make(VoteResponse, sender=NodeId(9))
    expect_protocol_error(decoder, impostor.encode_frame([(PartitionKey("t", 0), vote)]), "node 9")


def test_encoder_refuses_a_frame_over_its_limit() -> None:
    encoder = PeerEncoder(node_id=SENDER, cluster_id=CLUSTER, frame_size_max=1000)
    message = make(AppendRequest, batches=(b"x" * 1000,))
    with pytest.raises(FrameTooLarge):
        encoder.encode_frame([(PartitionKey("t", 0), message)])


def test_broker_notice_names_its_advertised_listeners_and_admin_port() -> None:
    listeners = (b"PLAINTEXT://10.0.0.1:9092", b"SASL_SSL://[fd00::1]:9095")
    notice = make(BrokerNotice, recipient=NodeId(2), listeners=listeners, admin_port=9292)
    assert round_trip([(PartitionKey("__metadata", 0), notice)]) == [
        (PartitionKey("__metadata", 0), notice)
    ]
    # The admin port is no Kafka listener.
    assert notice.addresses() == {"PLAINTEXT": ("10.0.0.1", 9092), "SASL_SSL": ("fd00::1", 9095)}


@pytest.mark.parametrize(
    ("listeners", "message"),
    [
        ((b"PLAINTEXT://10.0.0.1:0",), "out of range"),
        ((b"PLAINTEXT://10.0.0.1:65536",), "out of range"),
        ((b"TLS://10.0.0.1:9092",), "unknown"),
        ((b"10.0.0.1:9092",), "unknown"),
        ((b"SSL://a:1", b"SSL://b:2"), "twice"),
        ((b"PLAINTEXT://\xff:1",), "decode"),
        ((b"PLAINTEXT://:9092",), "not HOST:PORT"),
        ((b"SSL://" + b"h" * 600 + b":1",), "exceeds"),
        ((*LISTENERS, b"SSL://a:1"), "one per protocol"),
    ],
)
def test_a_broker_notice_with_a_bad_listener_is_malformed(
    listeners: tuple[bytes, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        make(BrokerNotice, listeners=listeners)
    # The same value from a peer: the frame does not decode.
    layout = _LAYOUT_BY_CLASS[BrokerNotice]
    values = {name.name: 0 for name in dataclasses.fields(BrokerNotice)}
    values.update(sender=SENDER, recipient=2, stopping=False, listeners=len(listeners))
    item = layout.item.pack(layout.tag, 0, 0, *values.values())
    item += b"".join(struct.pack(">I", len(each)) + each for each in listeners)
    payload = struct.pack(">BHIH", 2, 1, 1, 1) + b"t" + item
    _, decoder = connected_decoder()
    expect_protocol_error(decoder, frame(payload), "malformed")


@pytest.mark.parametrize("port", [-1, 65_536, 2**40])
def test_a_broker_notice_with_an_admin_port_out_of_range_is_malformed(port: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        make(BrokerNotice, admin_port=port)
    # The same values as a peer would send them: packed as the layout lays them out.
    layout = _LAYOUT_BY_CLASS[BrokerNotice]
    values = {name.name: 0 for name in dataclasses.fields(BrokerNotice)}
    values.update(sender=SENDER, recipient=2, stopping=False, admin_port=port)
    item = layout.item.pack(layout.tag, 0, 0, *values.values())
    payload = struct.pack(">BHIH", 2, 1, 1, 1) + b"t" + item
    _, decoder = connected_decoder()
    expect_protocol_error(decoder, frame(payload), "outside")
