"""The inter-node (peer) protocol, sans-IO: core messages of many partitions over one stream.

One TCP stream between two nodes carries the messages of every partition they share. Each
frame is coalesced: all the (partition key, message) pairs the transport gathered for that
peer in one event-loop round travel as one size-prefixed frame.

Rules:
- The first frame each way is a handshake (protocol version, message schema fingerprint,
  sender node id, cluster id). A decoder refuses a stream whose handshake differs from what
  it expects, and any message whose `sender` is not the node of the handshake.
- The message layouts are derived from the core's dataclasses (`tidelog.core.messages`): a
  field's annotation picks its struct code, so a field added there travels without a change
  here; the fingerprint of the layouts is in the handshake, so nodes built from different
  message definitions refuse each other instead of misreading each other.
- Record batches travel as raw length-prefixed bytes, never decoded here.
- Every size is bounded (PEER_FRAME_SIZE_MAX, PEER_FRAME_ITEMS_MAX, ...); malformed input
  raises ProtocolError, after which the stream is dead and must be closed. A message type
  may check its values when it is built (BrokerNotice its listeners): a value it refuses
  (ValueError) makes the frame malformed too.

Frame payload (big-endian):
    kind u8 = 1 (handshake): version u16 | fingerprint u32 | node id i32 | cluster id str16
    kind u8 = 2 (messages):  topic count u16 | item count u32 | topic str16 * topic count |
                             item * item count
    item:   tag u8 | topic index u16 | partition i32 | scalar fields | [batch count u32 |
            (size u32 | batch bytes) * batch count]
Optional fields (`X | None`) carry the smallest value of their width for None; -1 would be
ambiguous, since NO_EPOCH is -1.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Final, NamedTuple

from tidelog.address import Address, parse_address
from tidelog.client_config import PROTOCOLS
from tidelog.core.liveness import NodePing, NodePong
from tidelog.core.messages import (
    AppendRequest,
    AppendResponse,
    Message,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    WakeUp,
)
from tidelog.protocol.framing import (
    FRAME_SIZE,
    NEED_DATA,
    FrameBuffer,
    NeedData,
    ProtocolError,
)
from tidelog.types import Epoch, NodeId

PEER_PROTOCOL_VERSION: Final = 1
PEER_FRAME_SIZE_MAX: Final = 128 * 1024 * 1024  # two of the largest record batches
PEER_FRAME_ITEMS_MAX: Final = 65_535
TOPIC_NAME_SIZE_MAX: Final = 249  # Kafka's limit
CLUSTER_ID_SIZE_MAX: Final = 255
PORT_MAX: Final = 65_535
LISTENER_SIZE_MAX: Final = 512  # PROTOCOL://HOST:PORT, a DNS name of 253 bytes at most
PEERS_NOTICE_MAX: Final = 1000  # nodes one PeersNotice names


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderNotice:
    """`sender` leads the partition in `epoch`: told to nodes that do not host it, so that
    every broker can answer Metadata requests for every partition."""

    sender: NodeId
    recipient: NodeId
    epoch: Epoch


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerNotice:
    """`sender` serves Kafka clients at its advertised `listeners` (`PROTOCOL://HOST:PORT`
    in UTF-8, one per security protocol: the endpoints of Kafka's broker registration), for
    Metadata on each listener, and its admin endpoint on `admin_port` of its peer host (0:
    none), for the live page of another node; `peer` (none or one `HOST:PORT`) is where the
    others dial it, so a node that joins the cluster is dialled back (server/joining.py).

    A listener that does not parse, of an unknown or repeated protocol, or a port outside
    its range is refused on construction (ValueError), and so is a peer address that does
    not parse, so a frame that names one does not decode (ProtocolError)."""

    sender: NodeId
    recipient: NodeId
    epoch: Epoch
    stopping: bool = False  # it is shutting down: hand it no leadership
    admin_port: int = 0
    listeners: tuple[bytes, ...] = ()
    peer: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.admin_port <= PORT_MAX:
            raise ValueError(f"port {self.admin_port} outside 0-{PORT_MAX}")
        if len(self.listeners) > len(PROTOCOLS):
            raise ValueError(f"{len(self.listeners)} listeners, one per protocol at most")
        self.addresses()  # each one parses, once per protocol
        if len(self.peer) > 1:
            raise ValueError(f"{len(self.peer)} peer addresses, one at most")
        self.peer_address()

    def peer_address(self) -> Address | None:
        """Where the others dial the sender, when it says; ValueError for a bad one."""
        if not self.peer:
            return None
        if len(self.peer[0]) > LISTENER_SIZE_MAX:
            raise ValueError(f"a peer address of {len(self.peer[0])} bytes")
        return parse_address(self.peer[0].decode())

    def addresses(self) -> dict[str, Address]:
        """The listeners it names: {protocol: (host, port)}; ValueError for a bad one."""
        addresses: dict[str, Address] = {}
        for listener in self.listeners:
            if len(listener) > LISTENER_SIZE_MAX:
                raise ValueError(f"a listener of {len(listener)} bytes exceeds {LISTENER_SIZE_MAX}")
            protocol, _, address = listener.decode().partition("://")
            if protocol not in PROTOCOLS:
                raise ValueError(f"listener protocol {protocol!r} unknown")
            if protocol in addresses:
                raise ValueError(f"listener protocol {protocol} named twice")
            addresses[protocol] = parse_address(address)
        return addresses


@dataclasses.dataclass(frozen=True, slots=True)
class ForwardRequest:
    """`sender`, a broker that does not lead the metadata log, asks its leader (the
    controller) to commit `commands` (one metadata command, JSON) for a client it has
    authenticated and authorized, as KRaft brokers forward admin requests."""

    sender: NodeId
    recipient: NodeId
    request_id: int
    commands: tuple[bytes, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class ForwardReply:
    """The controller's answer to a ForwardRequest: a Kafka error code, the message of an
    error (none or one), and the metadata log's offset after the command."""

    sender: NodeId
    recipient: NodeId
    request_id: int
    error_code: int
    next_offset: int
    message: tuple[bytes, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class ElectPreferred:
    """`sender` asks the leader of the partition in `epoch` to hand its leadership to the
    partition's preferred replica (ElectLeaders, or the leader rebalance)."""

    sender: NodeId
    recipient: NodeId
    epoch: Epoch


@dataclasses.dataclass(frozen=True, slots=True)
class QuorumQuery:
    """`sender`, a node that does not lead the metadata log, asks its leader how the quorum
    stands (a client's DescribeQuorum, which only the leader can answer)."""

    sender: NodeId
    recipient: NodeId
    request_id: int


@dataclasses.dataclass(frozen=True, slots=True)
class QuorumAnswer:
    """The metadata log leader's answer to a QuorumQuery: its quorum report (JSON,
    tidelog.server.quorum), or none when it does not lead any more."""

    sender: NodeId
    recipient: NodeId
    request_id: int
    report: tuple[bytes, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class PeersNotice:
    """The peer address of each node `sender` knows (`ID@HOST:PORT`, at most
    PEERS_NOTICE_MAX), told to a node that announced itself and is no registered broker
    yet: a node joining the cluster learns there whom to dial, and whom to ask to register
    it (server/joining.py)."""

    sender: NodeId
    recipient: NodeId
    controller: NodeId | None  # the metadata log's leader as `sender` knows it
    peers: tuple[bytes, ...]

    def __post_init__(self) -> None:
        if len(self.peers) > PEERS_NOTICE_MAX:
            raise ValueError(f"{len(self.peers)} peers, at most {PEERS_NOTICE_MAX}")
        self.addresses()

    def addresses(self) -> dict[NodeId, Address]:
        """{node: (host, port)}; ValueError for an entry that is not ID@HOST:PORT."""
        addresses: dict[NodeId, Address] = {}
        for entry in self.peers:
            if len(entry) > LISTENER_SIZE_MAX:
                raise ValueError(f"a peer entry of {len(entry)} bytes")
            node, sep, address = entry.decode().partition("@")
            if not sep or not node.isdigit() or int(node) >= 2**31:
                raise ValueError(f"peer entry {entry!r} is not ID@HOST:PORT")
            addresses[NodeId(int(node))] = parse_address(address)
        return addresses


# Tags are the wire identity of a message type: append new types, never renumber.
MESSAGE_TAGS: Final[dict[int, type[Any]]] = {
    1: AppendRequest,
    2: AppendResponse,
    3: VoteRequest,
    4: VoteResponse,
    5: LeaderNotice,
    6: BrokerNotice,
    7: ForwardRequest,
    8: ForwardReply,
    9: TimeoutNow,
    10: ElectPreferred,
    11: QuorumQuery,
    12: QuorumAnswer,
    13: PeersNotice,
    14: NodePing,
    15: NodePong,
    16: WakeUp,
}

_KIND_HANDSHAKE: Final = 1
_KIND_MESSAGES: Final = 2
_SHOWN_BYTES_MAX: Final = 8
"""How many bytes of an unexpected frame an error shows (as a bytes literal)."""
_HANDSHAKE = struct.Struct(">BHIi")
_MESSAGES = struct.Struct(">BHI")
_STR16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_ITEM_KEY_FORMAT: Final = "BHi"  # tag, topic index, partition
_BATCHES_ANNOTATION: Final = "tuple[bytes, ...]"
_DECODE_ERRORS: Final = (struct.error, IndexError, ValueError)

# Struct code of each scalar annotation the core's messages use.
_SCALAR_CODES: Final[dict[str, str]] = {
    "NodeId": "i",
    "Epoch": "i",
    "DirectoryId": "q",
    "Offset": "q",
    "int": "q",
    "bool": "?",
}
_NONE_SENTINELS: Final[dict[str, int]] = {"i": -(2**31), "q": -(2**63)}


class PartitionKey(NamedTuple):
    """Which partition a peer message belongs to."""

    topic: str
    partition: int


class Handshake(NamedTuple):
    """The first frame of a peer stream."""

    node_id: NodeId
    cluster_id: str
    version: int = PEER_PROTOCOL_VERSION


class FrameTooLarge(ProtocolError):
    """encode_frame() was given more than one frame may hold: split the items."""


PeerItem = tuple[PartitionKey, Message]


@dataclasses.dataclass(frozen=True, slots=True)
class _Layout:
    """How one message type is laid out on the wire, derived from its dataclass fields."""

    tag: int
    cls: type[Any]
    item: struct.Struct  # item key, scalar fields, then the count of each bytes field
    get_scalars: Callable[[Any], tuple[Any, ...]]
    optional: tuple[tuple[int, int], ...]  # (index among scalars, None sentinel)
    # Each bytes field (`tuple[bytes, ...]`: batches, a reset's producer snapshot): its
    # name and where it goes among the constructor's arguments, in field order.
    bytes_fields: tuple[tuple[str, int], ...]
    scalars_end: int  # the scalar fields are item.unpack(...)[3:scalars_end]
    description: str


def _layout_of(tag: int, cls: type[Any]) -> _Layout:
    names: list[str] = []
    codes: list[str] = []
    optional: list[tuple[int, int]] = []
    bytes_fields: list[tuple[str, int]] = []
    for index, field in enumerate(dataclasses.fields(cls)):
        annotation = str(field.type).replace(" ", "")
        if annotation == _BATCHES_ANNOTATION.replace(" ", ""):
            bytes_fields.append((field.name, index))
            continue
        base = annotation.removesuffix("|None")
        assert base in _SCALAR_CODES, f"{cls.__name__}.{field.name}: no code for {annotation}"
        code = _SCALAR_CODES[base]
        if base != annotation:
            optional.append((len(names), _NONE_SENTINELS[code]))
        names.append(field.name)
        codes.append(code)
    assert len(names) >= 2, "attrgetter returns a tuple only for two names or more"
    fmt = ">" + _ITEM_KEY_FORMAT + "".join(codes) + "I" * len(bytes_fields)
    return _Layout(
        tag=tag,
        cls=cls,
        item=struct.Struct(fmt),
        get_scalars=attrgetter(*names),
        optional=tuple(optional),
        bytes_fields=tuple(bytes_fields),
        scalars_end=3 + len(names),
        description=f"{tag}:{cls.__name__}:{','.join(names)}:{fmt}",
    )


_LAYOUT_BY_TAG: Final = {tag: _layout_of(tag, cls) for tag, cls in MESSAGE_TAGS.items()}
_LAYOUT_BY_CLASS: Final = {layout.cls: layout for layout in _LAYOUT_BY_TAG.values()}
SCHEMA_FINGERPRINT: Final = zlib.crc32(
    ";".join(layout.description for layout in _LAYOUT_BY_TAG.values()).encode()
)
"""CRC-32 of every message layout: nodes with different message definitions refuse to talk."""


def _str16(text: str, *, size_max: int, what: str) -> bytes:
    data = text.encode()
    if len(data) > size_max:
        raise ValueError(f"{what} of {len(data)} bytes exceeds {size_max}")
    return _STR16.pack(len(data)) + data


class PeerEncoder:
    """Encodes this node's side of a peer stream: a handshake, then message frames."""

    def __init__(
        self, *, node_id: NodeId, cluster_id: str, frame_size_max: int = PEER_FRAME_SIZE_MAX
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._frame_size_max = frame_size_max
        self._cluster_id_field = _str16(cluster_id, size_max=CLUSTER_ID_SIZE_MAX, what="id")

    def encode_handshake(self) -> bytes:
        """The first frame to send on a new stream."""
        payload = (
            _HANDSHAKE.pack(
                _KIND_HANDSHAKE, PEER_PROTOCOL_VERSION, SCHEMA_FINGERPRINT, self.node_id
            )
            + self._cluster_id_field
        )
        return FRAME_SIZE.pack(len(payload)) + payload

    def encode_frame(self, items: Sequence[PeerItem]) -> bytes:
        """One frame carrying `items` in order. Raises FrameTooLarge if they do not fit."""
        if len(items) > PEER_FRAME_ITEMS_MAX:
            raise FrameTooLarge(f"{len(items)} items exceed {PEER_FRAME_ITEMS_MAX}")
        topic_indexes: dict[str, int] = {}
        parts: list[bytes] = [b""]  # replaced by the frame and message headers below
        for key, message in items:
            index = topic_indexes.get(key.topic)
            if index is None:
                index = topic_indexes[key.topic] = len(topic_indexes)
            _encode_item(parts, index, key.partition, message)
        topics = [
            _str16(topic, size_max=TOPIC_NAME_SIZE_MAX, what="topic") for topic in topic_indexes
        ]
        size = _MESSAGES.size + sum(map(len, topics)) + sum(map(len, parts))
        if size > self._frame_size_max:
            raise FrameTooLarge(f"frame of {size} bytes exceeds {self._frame_size_max}")
        parts[0] = (
            FRAME_SIZE.pack(size)
            + _MESSAGES.pack(_KIND_MESSAGES, len(topics), len(items))
            + b"".join(topics)
        )
        return b"".join(parts)


def _encode_item(parts: list[bytes], topic_index: int, partition: int, message: Any) -> None:
    layout = _LAYOUT_BY_CLASS[type(message)]
    scalars = layout.get_scalars(message)
    if layout.optional:
        values = list(scalars)
        for position, sentinel in layout.optional:
            if values[position] is None:
                values[position] = sentinel
            else:
                assert values[position] != sentinel
        scalars = tuple(values)
    if not layout.bytes_fields:
        parts.append(layout.item.pack(layout.tag, topic_index, partition, *scalars))
        return
    fields = [getattr(message, name) for name, _ in layout.bytes_fields]
    counts = [len(field) for field in fields]
    parts.append(layout.item.pack(layout.tag, topic_index, partition, *scalars, *counts))
    pack_size = _U32.pack
    for field in fields:  # (not `values`: that name holds the scalars above)
        for value in field:
            parts.append(pack_size(len(value)))
            parts.append(value)


class PeerDecoder:
    """Decodes the other side of a peer stream: its handshake, then message frames.

    `next_frame()` returns the Handshake first, then one list of (key, message) per frame,
    or NEED_DATA. Any malformed or unexpected frame raises ProtocolError and kills the
    stream.
    """

    def __init__(self, *, cluster_id: str, frame_size_max: int = PEER_FRAME_SIZE_MAX) -> None:
        self.cluster_id = cluster_id
        self.peer_node_id: NodeId | None = None
        self._frames = FrameBuffer(frame_size_max=frame_size_max, name="peer")

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._frames.receive_data(data)

    def next_frame(self) -> Handshake | list[PeerItem] | NeedData:
        try:
            if self.peer_node_id is None:
                handshake = self._frames.next_frame_with(self._decode_handshake)
                if handshake is None:
                    return NEED_DATA
                self.peer_node_id = handshake.node_id
                return handshake
            sender = self.peer_node_id
            items = self._frames.next_frame_with(lambda view: _decode_messages(view, sender))
            return NEED_DATA if items is None else items
        except _DECODE_ERRORS as error:
            self._frames.fail()
            raise ProtocolError(f"malformed peer frame: {error!r}") from error
        except ProtocolError:
            self._frames.fail()
            raise

    def _decode_handshake(self, payload: memoryview) -> Handshake:
        if payload[:1] != bytes([_KIND_HANDSHAKE]):
            start = bytes(payload[:_SHOWN_BYTES_MAX])
            raise ProtocolError(f"expected a handshake, got a frame starting {start!r}")
        _, version, fingerprint, node_id = _HANDSHAKE.unpack_from(payload, 0)
        if version != PEER_PROTOCOL_VERSION:
            raise ProtocolError(f"peer protocol v{version}, ours is v{PEER_PROTOCOL_VERSION}")
        if fingerprint != SCHEMA_FINGERPRINT:
            raise ProtocolError(f"peer message schema {fingerprint:#010x} differs from ours")
        cluster_id, end = _read_str16(payload, _HANDSHAKE.size)
        if end != len(payload):
            raise ProtocolError(f"{len(payload) - end} bytes after the handshake")
        if cluster_id != self.cluster_id:
            raise ProtocolError(f"peer is in cluster {cluster_id!r}, not {self.cluster_id!r}")
        return Handshake(NodeId(node_id), cluster_id, version)


def _read_str16(payload: memoryview, position: int) -> tuple[str, int]:
    (size,) = _STR16.unpack_from(payload, position)
    start = position + _STR16.size
    end = start + size
    if end > len(payload):
        raise ProtocolError(f"string of {size} bytes runs past the frame")
    return str(payload[start:end], "utf-8"), end


def _decode_messages(payload: memoryview, sender: NodeId) -> list[PeerItem]:
    kind, topic_count, item_count = _MESSAGES.unpack_from(payload, 0)
    if kind != _KIND_MESSAGES:
        raise ProtocolError(f"expected a message frame, got a frame of kind {kind}")
    if item_count > PEER_FRAME_ITEMS_MAX:
        raise ProtocolError(f"{item_count} items exceed {PEER_FRAME_ITEMS_MAX}")
    position = _MESSAGES.size
    topics: list[str] = []
    for _ in range(topic_count):
        topic, position = _read_str16(payload, position)
        topics.append(topic)
    keys: dict[tuple[int, int], PartitionKey] = {}
    items: list[PeerItem] = []
    for _ in range(item_count):
        layout = _LAYOUT_BY_TAG.get(payload[position])
        if layout is None:
            raise ProtocolError(f"unknown message tag {payload[position]}")
        values = layout.item.unpack_from(payload, position)
        position += layout.item.size
        key = keys.get((values[1], values[2]))
        if key is None:
            key = keys[(values[1], values[2])] = PartitionKey(topics[values[1]], values[2])
        arguments = list(values[3 : layout.scalars_end])
        for index, sentinel in layout.optional:
            if arguments[index] == sentinel:
                arguments[index] = None
        counts = values[layout.scalars_end :]
        for (_, index), count in zip(layout.bytes_fields, counts, strict=True):
            blobs, position = _read_batches(payload, position, count)
            arguments.insert(index, blobs)
        message = layout.cls(*arguments)
        if message.sender != sender:
            raise ProtocolError(f"message from node {message.sender} on node {sender}'s stream")
        items.append((key, message))
    if position != len(payload):
        raise ProtocolError(f"{len(payload) - position} bytes after the last item")
    return items


def _read_batches(payload: memoryview, position: int, count: int) -> tuple[tuple[bytes, ...], int]:
    batches: list[bytes] = []
    unpack_size = _U32.unpack_from
    end_of_frame = len(payload)
    for _ in range(count):
        (size,) = unpack_size(payload, position)
        position += _U32.size
        end = position + size
        if end > end_of_frame:
            raise ProtocolError(f"batch of {size} bytes runs past the frame")
        batches.append(bytes(payload[position:end]))
        position = end
    return tuple(batches), position
