"""Live clusters for tests: real broker processes on 127.0.0.1, started as a user would,
and the one way tests wait (`poll`, `eventually`: polling with a deadline, never a bare
sleep).

`LiveCluster` runs `tidelog cluster up` on a free port range in a directory of its own and
`tidelog cluster down` at the end; it never signals a process it did not start. Its brokers
log in `log_format` (`cluster up --log-format`; None: the default, text), and serve
`GET /metrics` unless `metrics=False` (`cluster up --no-metrics`). A secure one
(`secure=True`) denies anonymous clients, so tests reach it as the user `admin` over SASL_SSL:
`sasl_bootstrap` and `sasl_settings` (kafka-python's keyword arguments, from its
`client-sasl.properties`).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import random
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.protocol.parser import KafkaProtocol
from prometheus_client.parser import text_string_to_metric_families

from tidelog.client_config import read_properties
from tidelog.status import AdminAccess, access_for, read_status

EPHEMERAL_PORT_MIN = 32_768
PORT_SPAN = 403  # base .. base+2 Kafka, +100.. peers, +200.. admin, +300.. SSL, +400.. SASL
DEADLINE_S = 60.0
POLL_S = 0.05
T = TypeVar("T")


def poll(
    attempt: Callable[[], T | None],
    what: str = "the condition",
    *,
    deadline_s: float = DEADLINE_S,
    interval_s: float = POLL_S,
) -> T:
    """The first result of `attempt` that is not None, trying every `interval_s` until
    `deadline_s` have passed (then AssertionError naming `what`)."""
    deadline = time.monotonic() + deadline_s
    while (result := attempt()) is None:
        assert time.monotonic() < deadline, f"{what}: not within {deadline_s} s"
        time.sleep(interval_s)
    return result


def eventually(
    condition: Callable[[], object],
    what: str | Callable[[], str] = "the condition",
    *,
    deadline_s: float = DEADLINE_S,
    interval_s: float = POLL_S,
) -> None:
    """Until `condition()` is true, within `deadline_s`; `what` may be computed when it
    is not (to say what was seen)."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() >= deadline:
            detail = what if isinstance(what, str) else what()
            raise AssertionError(f"{detail}: not within {deadline_s} s")
        time.sleep(interval_s)


def knows_before_joining(consumer: Any, topic: str) -> None:
    """Until a kafka-python consumer subscribed to `topic` that has not polled yet holds the
    topic's partitions in its metadata (a Metadata answer for every topic, as
    tidelog.tools.client_records' `metadata_before_joining` asks: else, as group leader, it
    may assign nothing and then drop its rejoin's assignment)."""
    eventually(lambda: topic in set(consumer.topics()), f"{topic} in the consumer's metadata")


def free_base_port(nodes: int = 3) -> int:
    rng = random.Random()
    for _ in range(50):
        # Below Linux's ephemeral range (32768-60999): a client's own port, taken while a
        # test node is down, must never be one of that node's ports when it restarts.
        base = rng.randrange(20_000, EPHEMERAL_PORT_MIN - PORT_SPAN - 1)
        offsets = (0, 100, 200, 300, 400)
        if all(port_free(base + offset + i) for offset in offsets for i in range(nodes)):
            return base
    raise RuntimeError("no free port range on 127.0.0.1")


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def tidelog(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidelog", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class LiveCluster:
    def __init__(
        self,
        directory: Path,
        *,
        secure: bool = False,
        nodes: int = 3,
        log_format: str | None = None,
        metrics: bool = True,
    ) -> None:
        self.directory = directory
        self.nodes = tuple(range(1, nodes + 1))
        up = tidelog(
            "cluster",
            "up",
            "--nodes",
            str(nodes),
            "--data-dir",
            str(directory),
            "--base-port",
            str(free_base_port(nodes)),
            *(["--secure"] if secure else []),
            *([] if log_format is None else ["--log-format", log_format]),
            *([] if metrics else ["--no-metrics"]),
        )
        if up.returncode != 0:  # it may have started nodes before it failed: end them
            tidelog("cluster", "down", "--data-dir", str(directory))
        assert up.returncode == 0, up.stdout + up.stderr
        self.up_messages = up.stderr  # what `cluster up` told its user
        self.record = json.loads((directory / "cluster.json").read_text())
        self.bootstrap: str = self.record["bootstrap"]
        self.sasl_properties: dict[str, str] = {}
        self.sasl_settings: dict[str, Any] = {}
        if secure:
            self.sasl_properties = read_properties(self.sasl_properties_path)
            self.sasl_settings = {
                "security_protocol": "SASL_SSL",
                "ssl_cafile": self.sasl_properties["ssl.ca.location"],
                "ssl_check_hostname": True,
                "sasl_mechanism": self.sasl_properties["sasl.mechanism"],
                "sasl_plain_username": self.sasl_properties["sasl.username"],
                "sasl_plain_password": self.sasl_properties["sasl.password"],
            }

    @property
    def sasl_properties_path(self) -> Path:
        """A secure cluster's client-sasl.properties (the user admin, SASL_SSL)."""
        return self.directory / "client-sasl.properties"

    @property
    def sasl_bootstrap(self) -> str:
        """A secure cluster's SASL_SSL listeners."""
        return self.sasl_properties["bootstrap.servers"]

    def log_of(self, node: int) -> str:
        """What node `node`'s broker has logged so far."""
        return (self.directory / f"node-{node}" / "broker.log").read_text(errors="replace")

    def down(self) -> None:
        result = tidelog("cluster", "down", "--data-dir", str(self.directory))
        assert result.returncode == 0, result.stderr

    def hosted_everywhere(self, topic: str, partitions: int) -> bool:
        """Whether every node's admin /status lists every partition of `topic` with a
        leader, and each leader counts all its replicas in sync: every node has applied
        the topic, so a client may bootstrap from any of them."""
        for node in self.record["nodes"]:
            status = read_status(node["admin"], access=access_for(self.directory))
            if status is None:
                return False
            hosted = [p for p in status["partitions"] if p["topic"] == topic]
            if len(hosted) != partitions or any(p["leader"] is None for p in hosted):
                return False
            leaders = [p for p in hosted if p["role"] == "leader"]
            if any(len(p["isr"]) != len(p["replicas"]) for p in leaders):
                return False
        return True

    def wait_hosted_everywhere(self, topic: str, partitions: int) -> None:
        eventually(lambda: self.hosted_everywhere(topic, partitions), f"{topic} on every node")

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """The node that says it leads the partition (`cluster status`)."""
        for node in self.nodes:
            leads = self.node_status(node).get("leads", [])
            if f"{topic}-{partition}" in leads:  # type: ignore[operator]
                return node
        raise AssertionError(f"no leader of {topic}-{partition}")

    def copies(self, topic: str, partition: int = 0) -> dict[int, dict[str, Any]]:
        """Each node's /status row of the partition, by node id (the nodes hosting it)."""
        found = {}
        for node in self.record["nodes"]:
            for row in (read_status(node["admin"]) or {}).get("partitions", []):
                if (row["topic"], row["partition"]) == (topic, partition):
                    found[int(node["id"])] = row
        return found

    def node_status(self, node: int) -> dict[str, object]:
        result = tidelog("cluster", "status", "--data-dir", str(self.directory), "--json")
        # Exit 1 says a node is down or a partition under-replicated: the JSON is still there.
        assert result.returncode in (0, 1) and result.stdout, result.stderr
        states = json.loads(result.stdout)
        return next(state for state in states["nodes"] if state["id"] == node)


def first_picture(admin: str, access: AdminAccess | None = None) -> dict[str, Any]:
    """The first picture the live page gets from `admin` (GET /events); over HTTPS, with
    the bearer token, when `access` names the cluster's CA."""
    host, port = admin.rsplit(":", 1)
    access = access or AdminAccess()
    head = b"GET /events HTTP/1.0\r\n"
    if access.token is not None:
        head += f"Authorization: Bearer {access.token}\r\n".encode()
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection((host, int(port)), DEADLINE_S))
        if access.ca is not None:
            context = ssl.create_default_context(cafile=str(access.ca))
            sock = stack.enter_context(context.wrap_socket(sock, server_hostname=host))
        sock.sendall(head + b"\r\n")
        data = b""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            assert time.monotonic() < deadline, "no picture from /events"
            chunk = sock.recv(1 << 16)
            assert chunk, "the stream ended"
            data += chunk
            *events, _ = data.partition(b"\r\n\r\n")[2].split(b"\n\n")
            for event in events:
                if event.startswith(b"data: "):
                    picture: dict[str, Any] = json.loads(event[len(b"data: ") :])
                    return picture


@contextlib.contextmanager
def running_cluster(directory: Path, **settings: Any) -> Iterator[LiveCluster]:
    """A LiveCluster in `directory` (`settings` as LiveCluster takes them), brought down on
    exit by the PIDs of its cluster.json."""
    live = LiveCluster(directory, **settings)
    try:
        yield live
    finally:
        live.down()


class RawConnection:
    """One plaintext connection to one broker (not to the cluster: no client library
    picks the node); each request waits for its response."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=DEADLINE_S)
        self.protocol = KafkaProtocol(client_id="tidelog-test")

    def ask(self, request: Any) -> Any:
        self.protocol.send_request(request)
        self.sock.sendall(self.protocol.send_bytes())
        while True:
            data = self.sock.recv(1 << 16)
            assert data, "the broker closed the connection"
            answers = self.protocol.receive_bytes(data)
            if answers:
                return answers[0][1]

    def close(self) -> None:
        self.sock.close()


def ask_once(address: tuple[str, int], request: Any) -> Any:
    """One broker's answer to one request, on a connection of its own."""
    connection = RawConnection(address)
    try:
        return connection.ask(request)
    finally:
        connection.close()


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 3,
    configs: dict[str, str] | None = None,
    **settings: Any,
) -> None:
    """Create a topic of replication factor 3 (with Kafka topic `configs`) and wait until
    every partition has a leader; `settings` are kafka-python's (a secure cluster's
    `sasl_settings`)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000, **settings)
    try:
        admin.create_topics([NewTopic(name, partitions, 3, topic_configs=configs or {})])

        def led() -> bool:
            partitions = admin.describe_topics([name])[0]["partitions"]
            return bool(partitions) and all(p["leader_id"] >= 0 for p in partitions)

        eventually(led, f"a leader for every partition of {name}")
    finally:
        admin.close()


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
"""A scrape: {(sample name, its labels): value}."""


def metrics_text(admin: str) -> str:
    """A plaintext node's `GET /metrics`, as Prometheus' text format."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{admin}/metrics", timeout=DEADLINE_S) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return str(reply.read().decode())


def scrape(admin: str) -> Samples:
    """A plaintext node's `GET /metrics`, read by prometheus-client's own parser."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(metrics_text(admin))
        for sample in family.samples
    }


def sample(samples: Samples, name: str, **labels: str | int) -> float | None:
    """The value of one sample of a scrape, or None when it has none."""
    return samples.get((name, frozenset((key, str(value)) for key, value in labels.items())))


def collect_leaked_sockets() -> None:
    """Finalize the sockets kafka-python leaks on failed connection attempts, now, with
    their ResourceWarning ignored (else they surface later, in unrelated tests)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@contextlib.contextmanager
def one_broker(directory: Path, base: int, listen: str, *flags: str) -> Iterator[Any]:
    """A one-node broker (node 1, peer port base + 100, its data and `broker.log` in
    `directory`) listening on `listen`, with `flags`; ended (SIGTERM) on exit, by its PID."""
    command = [
        sys.executable, "-m", "tidelog", "broker", "--node-id", "1",
        "--data-dir", str(directory / "data"), "--listen", listen,
        "--peers", f"1@127.0.0.1:{base + 100}", *flags,
    ]  # fmt: skip
    with (directory / "broker.log").open("w") as log:
        broker = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield broker
        finally:
            broker.terminate()
            broker.wait(timeout=30)


class ProducerLoad(threading.Thread):
    """Numbered records to `partition` (None: the producer's partitioner) at a bounded
    rate, by an idempotent acks=all confluent-kafka producer, until `records` are sent,
    `stop()` or `deadline_s`; keeps what was acknowledged (value -> offset) and when
    (monotonic seconds), and what failed. `config` adds to or overrides the producer's."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        records: int = 10_000,
        rate_per_s: float = 200.0,
        deadline_s: float = 120.0,
        partition: int | None = 0,
        **config: Any,
    ) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.partition = partition
        self.records = records
        self.rate_per_s = rate_per_s
        self.deadline_s = deadline_s
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 60_000,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 1000,
                **config,
            }
        )
        self.acked: dict[bytes, int] = {}
        self.acked_at: list[float] = []  # in acknowledgement order
        self.failed: list[str] = []
        self.stopping = threading.Event()

    def delivered(self, error: object, message: Any) -> None:
        if error is not None:
            self.failed.append(str(error))
            return
        self.acked[message.value()] = message.offset()
        self.acked_at.append(time.monotonic())

    def acked_since(self, moment: float) -> int:
        """How many acknowledgements came after `moment` (monotonic seconds)."""
        return sum(1 for at in self.acked_at if at > moment)

    def longest_stall_s(self) -> float:
        """The longest time between two acknowledgements."""
        times = sorted(self.acked_at)
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        started = time.monotonic()
        for number in range(self.records):
            while number > (time.monotonic() - started) * self.rate_per_s:
                self.producer.poll(0.005)
            if self.stopping.is_set() or time.monotonic() - started > self.deadline_s:
                break
            value = f"r{number:07d}".encode()
            if self.partition is None:
                self.producer.produce(self.topic, value=value, on_delivery=self.delivered)
            else:
                self.producer.produce(
                    self.topic, value=value, partition=self.partition, on_delivery=self.delivered
                )
            self.producer.poll(0)
        self.producer.flush(60)


def dump_log(directory: Path) -> list[dict[str, Any]]:
    """A partition directory's batches as `tidelog dump-log --json` prints them."""
    out = subprocess.run(
        [sys.executable, "-m", "tidelog", "dump-log", "--json", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines()]
