"""A Kafka protocol fuzzer: requests of every API and version tidelog serves, built from
kafka-python's schemas and then mutated, plus damaged framing.

Rules of this file:
- Everything is drawn from the `random.Random` handed in: one seed, one input.
- `request_frame` builds a request the schema allows at its version, each field drawn from
  values that matter to a broker (empty, huge, negative, null where the schema forbids it,
  names of real and internal topics, valid and damaged record batches); `raw_frame` damages
  the bytes of such a frame (flipped bytes, a wrong size prefix, a cut or an extension).
- A broker must answer each with a response or by closing that connection, and go on
  serving every other connection; `tidelog.protocol.kafka.decode_request` must raise
  nothing but ProtocolError.
"""

from __future__ import annotations

import dataclasses
import io
import random
import socket
import struct
import time
from collections import Counter
from typing import Any

from tidelog.protocol.kafka import SUPPORTED_VERSIONS, ApiKey, request_class, response_class
from tidelog.wal.batches import producer_batch

TOPICS = ("fuzz", "fuzz.a", "__consumer_offsets", "__cluster_metadata", "é", "", ".")
LARGE_STRING_CHARS = 1 << 16
INTEGER_LIMITS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
NULL_PROBABILITY = 0.05
ARRAY_LENGTH_MAX = 3


def served() -> list[tuple[ApiKey, int]]:
    """Every (api, version) the broker answers."""
    return [
        (ApiKey(key), version)
        for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
        for version in range(low, high + 1)
    ]


def request_frame(rng: random.Random, api_key: ApiKey, version: int) -> bytes:
    """One framed request of `api_key` at `version`, its fields drawn by `rng`. A field that
    kafka-python cannot encode as drawn (a null where none is allowed, say) is drawn again
    as its default, so every frame is well framed and only its contents are hostile."""
    cls = request_class(api_key)
    for _ in range(8):
        body = _struct_value(rng, cls._struct, version, cls)
        body.API_VERSION = version
        body.with_header(correlation_id=rng.randrange(2**31), client_id=_client_id(rng))
        try:
            return bytes(body.encode(header=True, framed=True))
        except (struct.error, ValueError, TypeError, AttributeError, OverflowError):
            continue
    return plain_request(api_key, version)


def plain_request(api_key: ApiKey, version: int, **overrides: Any) -> bytes:
    """A framed request of schema defaults (one element in each array of structs), with
    `overrides` of its top-level fields."""
    cls = request_class(api_key)
    body = _struct_value(random.Random(0), cls._struct, version, cls, plain=True)
    for name, value in overrides.items():
        setattr(body, name, value)
    body.API_VERSION = version
    body.with_header(correlation_id=1, client_id="fuzz")
    return bytes(body.encode(header=True, framed=True))


def fetch_request(
    topic: str,
    *,
    max_bytes: int,
    correlation_id: int = 1,
    offset: int = 0,
    max_wait_ms: int = 0,
) -> bytes:
    """A framed Fetch v11 of partition 0 of `topic` from `offset`, up to `max_bytes`: one
    that does not wait is the largest answer a client can ask for in one request; with
    `max_wait_ms`, it waits that long for a first byte (min_bytes 1)."""
    cls = request_class(ApiKey.FETCH)
    partition = cls.FetchTopic.FetchPartition(
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=offset,
        log_start_offset=-1,
        partition_max_bytes=max_bytes,
    )
    request = cls(
        version=11,
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1 if max_wait_ms else 0,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[cls.FetchTopic(topic=topic, partitions=[partition])],
        forgotten_topics_data=[],
        rack_id="",
    )
    request.with_header(correlation_id=correlation_id, client_id="fetch")
    return bytes(request.encode(header=True, framed=True))


def raw_frame(rng: random.Random, frame: bytes) -> bytes:
    """`frame` damaged: bytes flipped, its size prefix wrong, cut short or extended."""
    data = bytearray(frame)
    kind = rng.randrange(4)
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1:
        sizes = (-1, 0, 3, len(data), 2**31 - 1, rng.randrange(2**20))
        data[:4] = struct.pack(">i", rng.choice(sizes))
    elif kind == 2:
        del data[rng.randrange(4, len(data)) :]
        data[:4] = struct.pack(">i", len(data) - 4)
    else:
        data += rng.randbytes(rng.randint(1, 64))
        data[:4] = struct.pack(">i", len(data) - 4)
    return bytes(data)


def _client_id(rng: random.Random) -> str | None:
    return rng.choice((None, "", "fuzz", "x" * rng.randint(0, 300)))


def _struct_value(
    rng: random.Random, struct_field: Any, version: int, data_class: Any, *, plain: bool = False
) -> Any:
    values = {}
    for name, field in struct_field.fields.items():
        if not field.for_version_q(version):
            continue
        values[name] = _field_value(rng, field, version, plain=plain)
    return data_class(**values)


def _field_value(rng: random.Random, field: Any, version: int, *, plain: bool) -> Any:
    if not plain and rng.random() < NULL_PROBABILITY:
        return None
    if field.is_struct_array():
        count = 1 if plain else rng.randint(0, ARRAY_LENGTH_MAX)
        inner = field.array_of
        return [
            _struct_value(rng, inner, version, inner.data_class, plain=plain) for _ in range(count)
        ]
    if field.is_struct():
        return _struct_value(rng, field, version, field.data_class, plain=plain)
    if field.is_array():
        count = 0 if plain else rng.randint(0, ARRAY_LENGTH_MAX)
        inner = field.array_of
        return [_scalar(rng, inner.type_str, inner, plain=plain) for _ in range(count)]
    return _scalar(rng, field.type_str, field, plain=plain)


def _scalar(rng: random.Random, type_str: str, field: Any, *, plain: bool) -> Any:
    if plain:
        return field.default
    if type_str in INTEGER_LIMITS:
        low, high = INTEGER_LIMITS[type_str]
        return rng.choice((0, 1, -1, 3, low, high, rng.randint(low, high)))
    if type_str == "bool":
        return rng.random() < 0.5
    if type_str == "string":
        return rng.choice(
            (*TOPICS, "fuzz-group", "range", "x" * rng.randint(0, LARGE_STRING_CHARS))
        )
    if type_str in ("bytes", "records"):
        return _bytes(rng)
    return field.default


def _bytes(rng: random.Random) -> bytes:
    batch = producer_batch([rng.randbytes(rng.randint(0, 100))] * rng.randint(1, 3), timestamp_ms=0)
    choice = rng.randrange(4)
    if choice == 0:
        return batch
    if choice == 1:
        damaged = bytearray(batch)
        damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        return bytes(damaged)
    if choice == 2:
        return b""
    return rng.randbytes(rng.randint(1, 200))


@dataclasses.dataclass
class FuzzReport:
    """What a broker did with the inputs: answered, closed the connection, or neither."""

    inputs: int = 0
    responses: int = 0
    error_responses: int = 0
    closed: int = 0
    unanswered: int = 0  # neither within the wait (a long poll, or acks=0)
    by_api: Counter[str] = dataclasses.field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        return {
            "inputs": self.inputs,
            "responses": self.responses,
            "error_responses": self.error_responses,
            "closed_connections": self.closed,
            "unanswered": self.unanswered,
        }


def fuzz_broker(
    address: tuple[str, int],
    *,
    seeds: range,
    raw_share: float = 0.3,
    wait_s: float = 0.05,
    deadline: float | None = None,
) -> FuzzReport:
    """Send one input per seed to the broker at `address`, each on a connection that is
    reused until the broker closes it; read its answer (or the close) within `wait_s`.
    Stops early at `deadline` (time.monotonic())."""
    report = FuzzReport()
    sock: socket.socket | None = None
    apis = served()
    try:
        for seed in seeds:
            if deadline is not None and time.monotonic() > deadline:
                break
            rng = random.Random(seed)
            api_key, version = rng.choice(apis)
            frame = request_frame(rng, api_key, version)
            if rng.random() < raw_share:
                frame = raw_frame(rng, frame)
            if sock is None:
                sock = socket.create_connection(address, timeout=wait_s)
            report.inputs += 1
            report.by_api[api_key.name] += 1
            outcome = _exchange(sock, frame)
            if isinstance(outcome, bytes):
                report.responses += 1
                report.error_responses += _is_error(api_key, version, outcome)
            elif outcome == "closed":
                report.closed += 1
                sock.close()
                sock = None
            else:
                report.unanswered += 1
                sock.close()  # answers may still come: start afresh
                sock = None
    finally:
        if sock is not None:
            sock.close()
    return report


def _exchange(sock: socket.socket, frame: bytes) -> bytes | str:
    """Send `frame`; the answer's body, or "closed" or "silent"."""
    try:
        sock.sendall(frame)
        head = _read_exactly(sock, 4)
        if head is None:
            return "closed"
        (size,) = struct.unpack(">i", head)
        body = _read_exactly(sock, size)
    except TimeoutError:
        return "silent"
    except OSError:
        return "closed"
    return "closed" if body is None else body


def _is_error(api_key: ApiKey, version: int, body: bytes) -> bool:
    """Whether an answer names an error anywhere (any error_code that is not 0)."""
    cls = response_class(api_key)
    flexible = bool(cls.flexible_version_q(version)) and api_key is not ApiKey.API_VERSIONS
    try:
        stream = io.BytesIO(body[4 + flexible :])  # correlation id (and tagged fields)
        decoded = cls.decode(stream, version=version).to_dict()
    except Exception:
        return True
    return _names_error(decoded)


def _names_error(value: object) -> bool:
    if isinstance(value, dict):
        return any(
            (key == "error_code" and item != 0) or _names_error(item) for key, item in value.items()
        )
    if isinstance(value, list):
        return any(_names_error(item) for item in value)
    return False


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)
