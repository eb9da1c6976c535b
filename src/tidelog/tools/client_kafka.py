"""What the client commands ask a Kafka cluster, through kafka-python only.

Every function here opens kafka-python clients, asks, closes them, and returns plain values;
printing belongs to `tools/client.py`. Rules:

- Expected failures leave as a `ClientError` whose message is meant for the user: no broker
  at the bootstrap address, an unknown topic, a broker's error code. kafka-python's own
  exceptions never escape (`kafka_errors()` translates them).
- Where and how to connect is one value, `ClientSettings` (the bootstrap and the security
  settings of `tidelog.client_config`); every function here takes it first.
- Before any kafka-python client is built, `answering` asks every bootstrap address for
  its ApiVersions at once (TLS too when the settings want it) and keeps those that answer
  within PROBE_TIMEOUT_MS: a broker that is down or paused costs at most that, never
  kafka-python's whole bootstrap or request timeout. When none answers, NoBroker names
  every address tried and why.
- A broker that did not answer the probe stays known as unresponsive: every kafka-python
  client built here (`ClientSettings.kafka_python`) sends the requests any broker may answer
  (Metadata, InitProducerId, FindCoordinator, ...) to the others while any of them is
  listed (`SteeredManager`). A paused broker stays in Metadata until the controller fences
  it; without this, kafka-python picks it at random and waits out the connection's setup.
- An admin request that fails retriably (a leader or controller changing, a connection
  lost, a request timed out: kafka-python's `retriable` errors) is asked again on a fresh
  client, with backoff from retry.backoff.ms doubling up to retry.backoff.max.ms, until
  default.api.timeout.ms (`ask_admin`, Kafka's AdminClient defaults in `ClientTiming`);
  then it fails with one line naming the error and that timeout (`GaveUp`).
- `create_topic` returns once every partition has a leader (TOPIC_READY_TIMEOUT_S at
  most), so a produce right after it finds one.
- Every wait has a named maximum (`*_MS` below), so no command can hang forever.

    TidelogError
    └── ClientError         a client command failed in an expected way; message for the user
        ├── NoBroker        no broker answers at any bootstrap address
        ├── GaveUp          a request kept failing retriably until its timeout
        └── UnknownTopic    the cluster does not know the topic (or partition)
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Final, TypeVar

from tidelog.address import format_address, parse_address
from tidelog.client_config import PLAINTEXT, ClientSecurity, security_of
from tidelog.errors import TidelogError
from tidelog.tools.client_properties import DEFAULT_TIMING, ClientTiming

# kafka-python 3.0.12 loads its JSON schemas with a deprecated importlib call at import time.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.errors as kafka_errors_module
    from kafka import (
        KafkaAdminClient,
        KafkaConsumer,
        KafkaProducer,
        OffsetAndMetadata,
        TopicPartition,
    )
    from kafka.net.compat import KafkaNetClient
    from kafka.net.manager import KafkaConnectionManager
    from kafka.net.selector import NetworkSelector
    from kafka.protocol.consumer.offsets import OffsetSpec

PROBE_TIMEOUT_MS: Final = 2_000
"""How long the probe of one bootstrap address (connect, ApiVersions) may take."""
TOPIC_READY_TIMEOUT_S: Final = 30.0
TOPIC_READY_POLL_S: Final = 0.1
BOOTSTRAP_TIMEOUT_MS: Final = 10_000
"""How long a kafka-python client may take to fetch its first metadata (from brokers that
answered the probe)."""
DEFAULT_PORT: Final = 9092

KAFKA_CLIENT_ID: Final = "tidelog-cli"
API_VERSIONS: Final = 18  # the Kafka API key the probe asks
T = TypeVar("T")

KafkaTimeoutError: Final = kafka_errors_module.KafkaTimeoutError

# kafka-python's clients, imported once above (quietly) for `client_records`.
__all__ = [
    "KafkaConsumer",
    "KafkaProducer",
    "KafkaTimeoutError",
    "OffsetAndMetadata",
    "OffsetSpec",
    "TopicPartition",
]


class ClientError(TidelogError):
    """A client command failed in an expected way; `str(error)` is for the user."""


class NoBroker(ClientError):
    """No broker answers at any of the bootstrap addresses."""

    def __init__(self, bootstrap: str, tried: dict[str, str] | None = None) -> None:
        where = (
            ", ".join(f"{address} ({why})" for address, why in tried.items())
            if tried
            else bootstrap
        )
        super().__init__(f"no broker at {where} (is the cluster up? tidelog cluster up ...)")
        self.bootstrap = bootstrap


class GaveUp(ClientError):
    """A request failed retriably on every attempt until the timeout that bounds it."""

    def __init__(self, error: BaseException, *, timeout_name: str, timeout_ms: int) -> None:
        cause = error.__cause__ if isinstance(error, ClientError) and error.__cause__ else error
        super().__init__(
            f"{describe_kafka_error(cause)} (still failing after {timeout_name}={timeout_ms})"
        )


class UnknownTopic(ClientError):
    """The cluster does not know the topic, or the topic has no such partition."""

    def __init__(self, topic: str, partition: int | None = None) -> None:
        where = f"topic '{topic}'" if partition is None else f"partition {partition} of '{topic}'"
        super().__init__(f"unknown {where}")
        self.topic = topic
        self.partition = partition


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """Where a client connects and how: the bootstrap, the client properties as given
    (librdkafka's names, for confluent-kafka and Spark), and their security, checked."""

    bootstrap: str
    properties: Mapping[str, str] = field(default_factory=dict)
    security: ClientSecurity = PLAINTEXT
    timing: ClientTiming = DEFAULT_TIMING
    unresponsive: frozenset[tuple[str, int]] = frozenset()
    """Broker addresses that did not answer the probe: asked only when no other can be."""

    @classmethod
    def of(cls, bootstrap: str, properties: Mapping[str, str]) -> ClientSettings:
        """Settings of client properties (without bootstrap.servers); ClientConfigError when
        their security or timing settings are wrong."""
        timing = DEFAULT_TIMING.with_properties(properties, "")
        return cls(bootstrap, dict(properties), security_of(properties), timing)

    def at(self, bootstrap: str) -> ClientSettings:
        """The same settings for other brokers (the controller, say)."""
        return replace(self, bootstrap=bootstrap)

    def timed(self, timing: ClientTiming) -> ClientSettings:
        return replace(self, timing=timing)

    @property
    def kafka_python(self) -> dict[str, Any]:
        """kafka-python's keyword arguments: bootstrap_servers, the security ones, the
        request timeout and retry backoff, and the client that steers around the
        unresponsive brokers."""
        return {
            "bootstrap_servers": self.bootstrap,
            **self.security.kafka_python(),
            "request_timeout_ms": self.timing.request_timeout_ms,
            "retry_backoff_ms": self.timing.retry_backoff_ms,
            "kafka_client": partial(steered_client, unresponsive=self.unresponsive),
        }


class SteeredManager(KafkaConnectionManager):  # type: ignore[misc]
    """kafka-python's connection manager, but the node it picks for a request any broker
    may answer is one not known as unresponsive, while such a node is listed."""

    def __init__(self, net: Any, *, unresponsive: frozenset[tuple[str, int]], **configs: Any):
        super().__init__(net, **configs)
        self.unresponsive = unresponsive

    def least_loaded_node(self) -> Any:
        chosen = super().least_loaded_node()
        if chosen is None or not self.is_unresponsive(chosen):
            return chosen
        # Every other listed node, in kafka-python's order of preference: connected and
        # idle, else not in reconnect backoff with the fewest requests in flight.
        others = [
            broker.node_id
            for broker in self.cluster.brokers()
            if not self.is_unresponsive(broker.node_id)
            and self.connection_delay(broker.node_id) <= 0
        ]
        if not others:
            return chosen
        return min(others, key=self.in_flight_count)

    def is_unresponsive(self, node_id: Any) -> bool:
        broker = self.cluster.broker_metadata(node_id)
        return broker is not None and (broker.host, broker.port) in self.unresponsive

    def in_flight_count(self, node_id: Any) -> int:
        conn = self._conns.get(node_id)
        return 0 if conn is None else len(conn.in_flight_requests)


def steered_client(*, unresponsive: frozenset[tuple[str, int]], **configs: Any) -> Any:
    """kafka-python's client (its `kafka_client` setting) with a SteeredManager."""
    net = NetworkSelector(**configs)
    manager = SteeredManager(net, unresponsive=unresponsive, **configs)
    return KafkaNetClient(net=net, manager=manager, **configs)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition as the Metadata API describes it."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int


def split_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """("host", port) pairs of a comma-separated bootstrap list. Raises ClientError."""
    addresses: list[tuple[str, int]] = []
    for item in bootstrap.split(","):
        try:
            addresses.append(parse_address(item, default_port=DEFAULT_PORT))
        except ValueError as error:
            raise ClientError(f"bad bootstrap address: {error} (want host:port)") from None
    return addresses


def api_versions_request() -> bytes:
    """A size-prefixed ApiVersions v0 request (correlation id 1)."""
    client_id = KAFKA_CLIENT_ID.encode()
    body = struct.pack(">hhih", API_VERSIONS, 0, 1, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def probe(address: tuple[str, int], context: ssl.SSLContext | None) -> str | None:
    """None when the broker at `address` answers ApiVersions within PROBE_TIMEOUT_MS;
    else why not, in a few words."""
    timeout_s = PROBE_TIMEOUT_MS / 1000
    try:
        with socket.create_connection(address, timeout=timeout_s) as raw:
            raw.settimeout(timeout_s)
            stream = (
                raw if context is None else context.wrap_socket(raw, server_hostname=address[0])
            )
            with stream:
                stream.sendall(api_versions_request())
                if len(stream.recv(4)) < 4:
                    return "closed the connection"
    except TimeoutError:
        return f"no answer in {timeout_s:g} s"
    except ConnectionRefusedError:
        return "connection refused"
    except ssl.SSLError as error:
        return f"TLS: {error.reason or error}"
    except OSError as error:
        return error.strerror or type(error).__name__
    return None


def answering(client: ClientSettings) -> ClientSettings:
    """`client` bootstrapped at those of its bootstrap brokers that answer (asked at once,
    in parallel), in their order; NoBroker naming each address tried and why otherwise."""
    addresses = split_bootstrap(client.bootstrap)
    context = client.security.ssl_context()
    with ThreadPoolExecutor(max_workers=len(addresses)) as pool:
        outcomes = list(pool.map(lambda address: probe(address, context), addresses))
    named = [format_address(address) for address in addresses]
    alive = [name for name, why in zip(named, outcomes, strict=True) if why is None]
    if not alive:
        tried = {name: str(why) for name, why in zip(named, outcomes, strict=True)}
        raise NoBroker(client.bootstrap, tried)
    silent = {address for address, why in zip(addresses, outcomes, strict=True) if why}
    return replace(client.at(",".join(alive)), unresponsive=client.unresponsive | silent)


def describe_kafka_error(error: BaseException) -> str:
    """One line for the user: a broker error's name and Kafka's description of it.

    kafka-python's own message of a broker error repeats the whole request and response.
    """
    name = type(error).__name__
    if isinstance(error, kafka_errors_module.BrokerResponseError):
        return f"{name}: {error.description}" if error.description else name
    text = str(error)
    return text if name in text else f"{name}: {text}" if text else name


@contextmanager
def kafka_errors(client: ClientSettings, *, needs: str = "this request") -> Iterator[None]:
    """Turn kafka-python's exceptions raised inside the block into ClientError.

    `needs` names the Kafka API the block depends on, for when the broker lacks it.
    """
    try:
        yield
    except kafka_errors_module.UnsupportedVersionError as error:
        raise ClientError(f"the broker does not support {needs} yet") from error
    except kafka_errors_module.KafkaTimeoutError as error:
        if "bootstrap" not in str(error):
            raise ClientError(describe_kafka_error(error)) from error
        if client.security.protocol == PLAINTEXT.protocol:
            raise NoBroker(client.bootstrap) from error
        # Something listens (the probe connected): the handshake or the login failed.
        raise ClientError(
            f"no broker at {client.bootstrap} let this client in over "
            f"{client.security.protocol} (check the --command-config settings: the "
            "listener, CA, user and password)"
        ) from error
    except kafka_errors_module.UnknownTopicOrPartitionError as error:
        raise ClientError(f"unknown topic or partition ({describe_kafka_error(error)})") from error
    except (kafka_errors_module.KafkaError, ValueError) as error:
        raise ClientError(describe_kafka_error(error)) from error


@contextmanager
def admin_client(client: ClientSettings) -> Iterator[Any]:
    """A connected KafkaAdminClient (at the bootstrap brokers that answer), closed on exit;
    kafka-python errors become ClientError."""
    client = answering(client)
    with kafka_errors(client):
        admin = KafkaAdminClient(
            **client.kafka_python,
            client_id=KAFKA_CLIENT_ID,
            bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
        )
        try:
            yield admin
        finally:
            admin.close()


def is_retriable(error: BaseException) -> bool:
    """A kafka-python error the same request may not meet again (a leader or controller
    changing, a connection lost), possibly as the cause of a ClientError."""
    cause = error if isinstance(error, kafka_errors_module.KafkaError) else error.__cause__
    if isinstance(cause, kafka_errors_module.KafkaTimeoutError) and "bootstrap" in str(cause):
        return False  # kafka_errors said who did not let the client in
    if isinstance(cause, kafka_errors_module.UnknownTopicOrPartitionError):
        return False  # a final answer for a named topic, as Kafka's AdminClient takes it
    # UnknownBrokerIdError: kafka-python's word for a partition whose leader is -1 (being
    # elected, as right after a topic is created).
    return bool(getattr(cause, "retriable", False)) or isinstance(
        cause,
        kafka_errors_module.KafkaConnectionError
        | kafka_errors_module.NodeNotReadyError
        | kafka_errors_module.UnknownBrokerIdError,
    )


def retrying(client: ClientSettings, attempt: Callable[[], T]) -> T:
    """`attempt()`, tried again after a retriable ClientError with backoff (retry.backoff.ms
    doubling up to retry.backoff.max.ms) until default.api.timeout.ms; its answer, the
    first error that is not retriable, or GaveUp naming the last error and the timeout."""
    timing = client.timing
    deadline = time.monotonic() + timing.default_api_timeout_ms / 1000
    wait_s = timing.retry_backoff_ms / 1000
    while True:
        try:
            return attempt()
        except ClientError as error:
            if not is_retriable(error):
                raise
            if time.monotonic() + wait_s >= deadline:
                raise GaveUp(
                    error,
                    timeout_name="default.api.timeout.ms",
                    timeout_ms=timing.default_api_timeout_ms,
                ) from (error.__cause__ or error)
        time.sleep(wait_s)
        wait_s = min(wait_s * 2, max(timing.retry_backoff_max_ms, timing.retry_backoff_ms) / 1000)


def ask_admin(client: ClientSettings, ask: Callable[[Any], T], *, needs: str = "this request") -> T:
    """`ask(admin)` on a fresh admin client, asked again while it fails retriably
    (`retrying`); its answer, or the error."""

    def attempt() -> T:
        with admin_client(client) as admin, kafka_errors(client, needs=needs):
            return ask(admin)

    return retrying(client, attempt)


def create_topic(
    client: ClientSettings,
    name: str,
    *,
    partitions: int,
    replication_factor: int,
    configs: dict[str, str],
) -> None:
    """Create one topic (CreateTopics). Raises ClientError with the broker's message, e.g.
    when it exists or a config is invalid."""
    spec = {"num_partitions": partitions, "replication_factor": replication_factor}

    def create(admin: Any) -> Any:
        result = admin.create_topics({name: {**spec, "configs": configs}}, raise_errors=False)
        for topic in result["topics"]:
            code = topic["error_code"]
            error = kafka_errors_module.for_code(code)
            if code != 0 and error.retriable:
                raise error(topic["error_message"])  # asked again (a controller changing)
        return result

    result = ask_admin(client, create)
    for topic in result["topics"]:
        if topic["error_code"] != 0:
            error = kafka_errors_module.for_code(topic["error_code"])
            raise ClientError(topic["error_message"] or error.__name__)
    wait_for_leaders(client, name)


def wait_for_leaders(client: ClientSettings, topic: str) -> None:
    """Return once every partition of `topic` has a leader; ClientError naming those that
    have none after TOPIC_READY_TIMEOUT_S."""
    deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
    leaderless: list[int] = []
    while time.monotonic() < deadline:
        try:
            partitions = describe_topics(client, [topic])
        except UnknownTopic:
            partitions = []  # not applied on the broker asked yet
        leaderless = [p.partition for p in partitions if p.leader < 0]
        if partitions and not leaderless:
            return
        time.sleep(TOPIC_READY_POLL_S)
    raise ClientError(
        f"topic '{topic}' was created, but partitions {leaderless or 'all'} have no leader "
        f"after {TOPIC_READY_TIMEOUT_S:g} s"
    )


def list_topics(client: ClientSettings) -> list[str]:
    """The names of all topics, sorted (Metadata for all topics)."""
    return ask_admin(client, lambda admin: sorted(str(name) for name in admin.list_topics()))


def delete_topic(client: ClientSettings, name: str) -> None:
    """Delete one topic (DeleteTopics). Raises UnknownTopic."""
    try:
        ask_admin(client, lambda admin: admin.delete_topics([name]))
    except ClientError as error:
        if isinstance(error.__cause__, kafka_errors_module.UnknownTopicOrPartitionError):
            raise UnknownTopic(name) from error
        raise


def describe_partitions(admin: Any, topics: list[str] | None) -> list[PartitionMetadata]:
    """Every partition of `topics` (all topics when None), by topic then partition.

    Raises UnknownTopic for a named topic the cluster does not know.
    """
    found: list[PartitionMetadata] = []
    for topic in admin.describe_topics(topics):
        name = str(topic["name"])
        if topic["error_code"] == kafka_errors_module.UnknownTopicOrPartitionError.errno:
            raise UnknownTopic(name)
        if topic["error_code"] != 0:
            error = kafka_errors_module.for_code(topic["error_code"])
            raise ClientError(f"topic '{name}': {error.__name__}")
        found.extend(
            PartitionMetadata(
                topic=name,
                partition=int(p["partition_index"]),
                leader=int(p["leader_id"]),
                replicas=tuple(int(r) for r in p["replica_nodes"]),
                isr=tuple(int(r) for r in p["isr_nodes"]),
                error_code=int(p["error_code"]),
            )
            for p in topic["partitions"]
        )
    return sorted(found, key=lambda p: (p.topic, p.partition))


def describe_topics(client: ClientSettings, topics: list[str] | None) -> list[PartitionMetadata]:
    """`describe_partitions` on a fresh admin client (asked again while it fails
    retriably)."""
    return ask_admin(client, lambda admin: describe_partitions(admin, topics))


def topic_configs_of(
    client: ClientSettings, topics: list[str], names: list[str]
) -> dict[str, dict[str, str]]:
    """Each topic's configs `names` in force (DescribeConfigs): topic -> name -> value."""
    from kafka.admin import ConfigResource, ConfigResourceType  # noqa: PLC0415

    if not topics:
        return {}
    resources = [ConfigResource(ConfigResourceType.TOPIC, topic, names) for topic in topics]

    def ask(admin: Any) -> Any:
        return admin.describe_configs(resources, config_filter="all")

    found = ask_admin(client, ask, needs="DescribeConfigs")["topic"]
    return {
        topic: {name: str(configs[name]["value"]) for name in names if name in configs}
        for topic, configs in found.items()
    }


def min_insync_of(client: ClientSettings, topics: list[str]) -> dict[str, int]:
    """Each topic's min.insync.replicas in force (DescribeConfigs)."""
    found = topic_configs_of(client, topics, ["min.insync.replicas"])
    return {
        topic: int(configs["min.insync.replicas"])
        for topic, configs in found.items()
        if "min.insync.replicas" in configs
    }


def topic_partitions(admin: Any, topic: str, partition: int | None) -> list[int]:
    """The partition numbers of `topic`, or just `partition` after checking it exists."""
    numbers = [p.partition for p in describe_partitions(admin, [topic])]
    if partition is None:
        return numbers
    if partition not in numbers:
        raise UnknownTopic(topic, partition)
    return [partition]


def parse_offset_time(text: str) -> int:
    """The ListOffsets timestamp of `--time`: earliest (-2), latest (-1) or milliseconds."""
    named = {"earliest": int(OffsetSpec.EARLIEST), "latest": int(OffsetSpec.LATEST)}
    if text.lower() in named:
        return named[text.lower()]
    if text.isdigit():
        return int(text)
    raise ClientError(f"bad --time {text!r} (want earliest, latest or a timestamp in ms)")


def list_offsets(
    client: ClientSettings, topic: str, *, timestamp: int, partition: int | None = None
) -> list[tuple[int, int]]:
    """(partition, offset) per partition of `topic` for a ListOffsets timestamp.

    Latest (-1) is the HWM, earliest (-2) the log start offset, a time the first offset
    whose timestamp is at least that; -1 when no record is that recent.
    """

    def ask(admin: Any) -> Any:
        numbers = topic_partitions(admin, topic, partition)
        spec = OffsetSpec(timestamp) if timestamp < 0 else timestamp
        return admin.list_partition_offsets({TopicPartition(topic, n): spec for n in numbers})

    found = ask_admin(client, ask)
    return sorted((tp.partition, int(info.offset)) for tp, info in found.items())


def delete_records(client: ClientSettings, topic: str, *, partition: int, offset: int) -> int:
    """Delete the records of one partition below `offset` (-1: the HWM); the new log start.

    DeleteRecords moves the log start offset ("low watermark"), never past the HWM.
    """
    key = TopicPartition(topic, partition)

    def ask(admin: Any) -> Any:
        topic_partitions(admin, topic, partition)
        return admin.delete_records({key: offset})

    result = ask_admin(client, ask, needs="DeleteRecords")
    return int(result[key]["low_watermark"])
