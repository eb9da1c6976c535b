"""The Kafka listener's bounds, on a real one-node broker with small limits: idle
connections and partial frames time out, request bytes held are capped and given back, and
a client that stops reading holds nothing once it is gone."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tidelog.status import read_status
from tidelog.testing.fuzz import fetch_request
from tidelog.testing.live import DEADLINE_S, eventually, free_base_port

IDLE_MS = 1500
BUDGET_BYTES = 8 << 20


@dataclass
class Broker:
    process: subprocess.Popen[bytes]
    kafka: tuple[str, int]
    admin: str
    log: Path

    def status(self) -> dict[str, object]:
        answer = read_status(self.admin, timeout_s=5)
        assert answer is not None, f"no /status from {self.admin}"
        return answer

    @property
    def bootstrap(self) -> str:
        return f"{self.kafka[0]}:{self.kafka[1]}"

    def create_topic(self, name: str) -> None:
        """A topic of one partition (the node's only replica)."""
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=20_000)
        try:
            admin.create_topics([NewTopic(name, 1, 1)])
        finally:
            admin.close()


def answers(broker: Broker) -> bool:
    status = read_status(broker.admin)
    return status is not None and bool(status["ready"])


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One node (replication factor 1) with a 1.5 s idle limit and an 8 MiB budget."""
    directory = tmp_path_factory.mktemp("listener")
    base = free_base_port()
    config = directory / "broker.toml"
    config.write_text(
        f"connections_max_idle_ms = {IDLE_MS}\nqueued_max_request_bytes = {BUDGET_BYTES}\n"
    )
    log = directory / "broker.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "tidelog", "broker", "--node-id", "1",
                "--data-dir", str(directory / "data"), "--listen", f"127.0.0.1:{base}",
                "--peers", f"1@127.0.0.1:{base + 100}", "--admin-listen",
                f"127.0.0.1:{base + 200}", "--config", str(config),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    running = Broker(process, ("127.0.0.1", base), f"127.0.0.1:{base + 200}", log)
    try:
        eventually(lambda: answers(running), "the broker did not become ready")
        yield running
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def closed_by_broker(sock: socket.socket) -> bool:
    """Whether the broker closed `sock` (EOF or reset) before the deadline."""
    sock.settimeout(DEADLINE_S)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_an_idle_connection_is_closed(broker: Broker) -> None:
    started = time.monotonic()
    with socket.create_connection(broker.kafka) as sock:
        assert closed_by_broker(sock)
    assert time.monotonic() - started >= IDLE_MS / 1000 * 0.9


def test_a_request_answered_after_the_idle_limit_keeps_its_connection(broker: Broker) -> None:
    """A long-polling Fetch that waits longer than the idle limit: the connection is not
    idle while it waits (its answer arrives), and is closed once idle after it."""
    bootstrap = broker.bootstrap
    broker.create_topic("long-poll")
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        end = consumer.end_offsets([TopicPartition("long-poll", 0)])[TopicPartition("long-poll", 0)]
    finally:
        consumer.close()
    wait_ms = 2 * IDLE_MS
    request = fetch_request("long-poll", max_bytes=1 << 20, offset=end, max_wait_ms=wait_ms)
    with socket.create_connection(broker.kafka) as sock:
        sock.sendall(request)
        started = time.monotonic()
        sock.settimeout(DEADLINE_S)
        head = sock.recv(4, socket.MSG_WAITALL)
        answered = time.monotonic() - started
        assert len(head) == 4, "closed before the answer"
        (size,) = struct.unpack(">i", head)
        assert len(sock.recv(size, socket.MSG_WAITALL)) == size
        assert answered >= wait_ms / 1000 * 0.9  # it waited past the idle limit
        assert closed_by_broker(sock)
    assert "idle" in broker.log.read_text()


def test_a_partial_frame_times_out(broker: Broker) -> None:
    with socket.create_connection(broker.kafka) as sock:
        sock.sendall(struct.pack(">i", 1 << 20) + b"\x00" * 100)  # 1 MiB announced
        assert closed_by_broker(sock)
    eventually(lambda: broker.status()["request_bytes_held"] == 0, "bytes still held")


def test_partial_frames_beyond_the_budget_wait_and_are_given_back(broker: Broker) -> None:
    """Six clients each announce 6 MiB and send a little: at most one fits the 8 MiB
    budget, the others wait (nothing read); when they leave, nothing is held."""
    socks = [socket.create_connection(broker.kafka) for _ in range(6)]
    try:
        for sock in socks:
            sock.sendall(struct.pack(">i", 6 << 20) + b"\x00" * 1000)
        eventually(lambda: broker.status()["kafka_connections"] == 6, "not all connected")
        assert 0 < int(broker.status()["request_bytes_held"]) <= BUDGET_BYTES  # type: ignore[call-overload]
    finally:
        for sock in socks:
            sock.close()
    eventually(lambda: broker.status()["kafka_connections"] == 0, "connections left")
    eventually(lambda: broker.status()["request_bytes_held"] == 0, "bytes still held")


def test_a_client_that_stops_reading_holds_nothing_once_gone(broker: Broker) -> None:
    """Fetches of 4 MiB pipelined and never read: at most one response is held, and when
    the client leaves, its requests are cancelled and their answers dropped."""
    bootstrap = broker.bootstrap
    broker.create_topic("unread")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        for _ in range(4000):
            producer.send("unread", b"v" * 1000)
        producer.flush(timeout=DEADLINE_S)
    finally:
        producer.close()
    fetch = fetch_request("unread", max_bytes=50 << 20)
    with socket.create_connection(broker.kafka) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for _ in range(50):
            sock.sendall(fetch)
        eventually(lambda: broker.status()["kafka_connections"] >= 1, "not connected")
    eventually(lambda: broker.status()["kafka_connections"] == 0, "connection left open")
    eventually(lambda: broker.status()["request_bytes_held"] == 0, "bytes still held")
    assert "Traceback" not in broker.log.read_text()
