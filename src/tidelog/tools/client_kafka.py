"""What the client commands ask a Kafka cluster, through kafka-python only.

Every function here opens kafka-python clients, asks, closes them, and returns plain values;
printing belongs to `tools/client.py`. Rules:

- Expected failures leave as a `ClientError` whose message is meant for the user: no broker
  at the bootstrap address, an unknown topic, a broker's error code. kafka-python's own
  exceptions never escape (`kafka_errors()` translates them).
- Where and how to connect is one value, `ClientSettings` (the bootstrap and the security
  settings of `tidelog.client_config`); every function here takes it first.
- Before any kafka-python client is built, `probe_bootstrap` opens one TCP connection to the
  bootstrap addresses: kafka-python would otherwise retry for its whole bootstrap timeout.
- Every wait has a named maximum (`*_MS` below), so no command can hang forever.

    TidelogError
    └── ClientError         a client command failed in an expected way; message for the user
        ├── NoBroker        nothing listens at any bootstrap address
        └── UnknownTopic    the cluster does not know the topic (or partition)
"""

from __future__ import annotations

import socket
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Final

from tidelog.address import parse_address
from tidelog.client_config import PLAINTEXT, ClientSecurity, security_of
from tidelog.errors import TidelogError

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
    from kafka.protocol.consumer.offsets import OffsetSpec

PROBE_TIMEOUT_MS: Final = 2_000
"""How long the TCP probe of one bootstrap address may take."""
BOOTSTRAP_TIMEOUT_MS: Final = 10_000
"""How long a kafka-python client may take to fetch its first metadata."""
REQUEST_TIMEOUT_MS: Final = 15_000
"""How long one request to a broker may take."""
DEFAULT_PORT: Final = 9092

KAFKA_CLIENT_ID: Final = "tidelog-cli"

# kafka-python's clients, imported once above (quietly) for `client_records`.
__all__ = ["KafkaConsumer", "KafkaProducer", "OffsetAndMetadata", "OffsetSpec", "TopicPartition"]


class ClientError(TidelogError):
    """A client command failed in an expected way; `str(error)` is for the user."""


class NoBroker(ClientError):
    """No broker listens at any of the bootstrap addresses."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(f"no broker at {bootstrap} (is the cluster up? tidelog cluster up ...)")
        self.bootstrap = bootstrap


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

    @classmethod
    def of(cls, bootstrap: str, properties: Mapping[str, str]) -> ClientSettings:
        """Settings of client properties (without bootstrap.servers); ClientConfigError when
        their security settings are wrong."""
        return cls(bootstrap, dict(properties), security_of(properties))

    def at(self, bootstrap: str) -> ClientSettings:
        """The same settings for other brokers (the controller, say)."""
        return replace(self, bootstrap=bootstrap)

    @property
    def kafka_python(self) -> dict[str, Any]:
        """kafka-python's keyword arguments: bootstrap_servers and the security ones."""
        return {"bootstrap_servers": self.bootstrap, **self.security.kafka_python()}


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


def probe_bootstrap(bootstrap: str) -> None:
    """Return once one bootstrap address accepts a TCP connection; else raise NoBroker."""
    for host, port in split_bootstrap(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_MS / 1000):
                return
        except OSError:
            continue
    raise NoBroker(bootstrap)


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
    """A connected KafkaAdminClient, closed on exit; kafka-python errors become ClientError."""
    probe_bootstrap(client.bootstrap)
    with kafka_errors(client):
        admin = KafkaAdminClient(
            **client.kafka_python,
            client_id=KAFKA_CLIENT_ID,
            bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )
        try:
            yield admin
        finally:
            admin.close()


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
    with admin_client(client) as admin:
        result = admin.create_topics({name: {**spec, "configs": configs}}, raise_errors=False)
    for topic in result["topics"]:
        if topic["error_code"] != 0:
            error = kafka_errors_module.for_code(topic["error_code"])
            raise ClientError(topic["error_message"] or error.__name__)


def list_topics(client: ClientSettings) -> list[str]:
    """The names of all topics, sorted (Metadata for all topics)."""
    with admin_client(client) as admin:
        return sorted(str(name) for name in admin.list_topics())


def delete_topic(client: ClientSettings, name: str) -> None:
    """Delete one topic (DeleteTopics). Raises UnknownTopic."""
    with admin_client(client) as admin:
        try:
            admin.delete_topics([name])
        except kafka_errors_module.UnknownTopicOrPartitionError as error:
            raise UnknownTopic(name) from error


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
    """`describe_partitions` on a fresh admin client."""
    with admin_client(client) as admin:
        return describe_partitions(admin, topics)


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
    with admin_client(client) as admin:
        numbers = topic_partitions(admin, topic, partition)
        spec = OffsetSpec(timestamp) if timestamp < 0 else timestamp
        found = admin.list_partition_offsets({TopicPartition(topic, n): spec for n in numbers})
    return sorted((tp.partition, int(info.offset)) for tp, info in found.items())


def delete_records(client: ClientSettings, topic: str, *, partition: int, offset: int) -> int:
    """Delete the records of one partition below `offset` (-1: the HWM); the new log start.

    DeleteRecords moves the log start offset ("low watermark"), never past the HWM.
    """
    with admin_client(client) as admin, kafka_errors(client, needs="DeleteRecords"):
        topic_partitions(admin, topic, partition)
        key = TopicPartition(topic, partition)
        result = admin.delete_records({key: offset})
    return int(result[key]["low_watermark"])
