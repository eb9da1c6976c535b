"""The protocol fuzzer (tidelog.testing.fuzz) against the decoder and a live cluster:
nothing a client sends may stop a broker or trip it into a traceback (scenario 21)."""

from __future__ import annotations

import io
import random
import socket
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tidelog.protocol.framing import ProtocolError
from tidelog.protocol.kafka import ApiKey, ProduceResponse, decode_request, request_class
from tidelog.status import read_status
from tidelog.testing.fuzz import fuzz_broker, plain_request, raw_frame, request_frame, served
from tidelog.testing.live import DEADLINE_S, LiveCluster, create_topic

LIVE_INPUTS = 1500
LIVE_BUDGET_S = 60


@settings(max_examples=3000, deadline=None)
@given(seed=st.integers(0, 2**32), raw=st.booleans())
@example(seed=76086184, raw=True)  # a tagged-field section kafka-python's decoder asserts on
def test_the_decoder_raises_only_protocol_errors(seed: int, raw: bool) -> None:
    rng = random.Random(seed)
    api_key, version = rng.choice(served())
    frame = request_frame(rng, api_key, version)
    if raw:
        frame = raw_frame(rng, frame)
    try:
        request = decode_request(frame[4:])
    except ProtocolError:
        return
    # What decodes is the API and version its header names (a raw mutation may rename it:
    # bytes after a whole body are ignored, as Kafka ignores them).
    named = struct.unpack_from(">hh", frame, 4)
    assert (request.api_key, request.api_version) == named
    if not raw:
        assert (request.api_key, request.api_version) == (api_key, version)


@pytest.mark.parametrize(("api_key", "version"), served(), ids=str)
def test_a_null_where_the_schema_allows_none_is_refused(api_key: ApiKey, version: int) -> None:
    """Each served API and version: a null top-level string or array that the schema does
    not allow is a ProtocolError naming the field (or, for kafka-python's arrays, read as
    empty), never a null handed to a handler."""
    cls = request_class(api_key)
    fields = {
        name: field
        for name, field in cls._struct.fields.items()
        if field.for_version_q(version)
        and not field.tagged_field_q(version)
        and not field.nullable_for_version_q(version)
        and (field.is_array() or field.type_str in ("string", "bytes"))
    }
    if not fields:
        return  # nothing here can be null (e.g. ApiVersions v0, ListGroups v0)
    name = sorted(fields)[0]
    try:
        nulled = plain_request(api_key, version, **{name: None})
    except (TypeError, AttributeError, ValueError):
        return  # kafka-python cannot even write that null: no client can send it either
    try:
        request = decode_request(nulled[4:])
    except ProtocolError as error:
        assert f"{name} is null" in str(error)
        return
    assert getattr(request.body, name) is not None  # read as empty: no null reaches a handler


def status(node: dict[str, str]) -> dict[str, object]:
    answer = read_status(node["admin"], timeout_s=5)
    assert answer is not None, f"no /status from {node['admin']}"
    return answer


def test_a_live_cluster_survives_fuzzing(cluster: LiveCluster) -> None:
    """Every node takes fuzzed requests of every API; afterwards each still serves, holds no
    request bytes, logged no traceback and no failed handler, and a real client still
    produces and consumes."""
    create_topic(cluster.bootstrap, "fuzz", partitions=1)
    deadline = time.monotonic() + LIVE_BUDGET_S
    per_node = LIVE_INPUTS // len(cluster.record["nodes"])
    for index, node in enumerate(cluster.record["nodes"]):
        host, port = node["kafka"].rsplit(":", 1)
        first = index * per_node
        report = fuzz_broker(
            (host, int(port)), seeds=range(first, first + per_node), deadline=deadline
        )
        assert report.inputs > per_node // 10, report
        assert report.responses > 0 and report.closed > 0, report
    for node in cluster.record["nodes"]:
        end = time.monotonic() + DEADLINE_S
        while (state := status(node))["request_bytes_held"] != 0:
            assert time.monotonic() < end, state
            time.sleep(0.1)
        log = (Path(node["data_dir"]) / "broker.log").read_text()
        assert "Traceback" not in log
        assert " failed: " not in log
        assert max(len(line) for line in log.splitlines()) < 2000
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    create_topic(cluster.bootstrap, "after-fuzz", partitions=1)
    producer.produce("after-fuzz", b"still here")
    assert producer.flush(DEADLINE_S) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "after-fuzz",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["after-fuzz"])
    try:
        end = time.monotonic() + DEADLINE_S
        while (message := consumer.poll(0.5)) is None or message.error():
            assert time.monotonic() < end, "nothing consumed after the fuzzing"
        assert message.value() == b"still here"
    finally:
        consumer.close()


def test_produce_with_acks_other_than_0_1_all_is_refused(cluster: LiveCluster) -> None:
    """Found by the fuzzer: acks=5 reached the core. Kafka answers INVALID_REQUIRED_ACKS."""
    node = cluster.record["nodes"][0]
    host, port = node["kafka"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
        for acks in (5, -2, 32767):
            sock.sendall(plain_request(ApiKey.PRODUCE, 8, acks=acks))
            size = struct.unpack(">i", read_exactly(sock, 4))[0]
            answer = ProduceResponse.decode(io.BytesIO(read_exactly(sock, size)[4:]), version=8)
            codes = [p.error_code for t in answer.responses for p in t.partition_responses]
            assert codes == [21], (acks, codes)  # INVALID_REQUIRED_ACKS, same connection
    assert Path(f"/proc/{node['pid']}").exists()


def read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data
