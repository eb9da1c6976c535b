"""Kafka client properties in Kafka's names (`--producer-property K=V`, `--consumer-property
K=V`, the timing keys of `--command-config`), checked and mapped onto kafka-python's keyword
arguments: the one place that knows both names.

Rules of this file:
- A property is `name=value`; a name this file does not know, or a value its converter
  refuses, is a ClientConfigError naming the flag, the name and what is wanted, before
  anything connects. A later item with the same name wins, as in Kafka's tools.
- Each known name maps to one kafka-python argument through one converter (`PRODUCER` and
  `CONSUMER` below); `default.api.timeout.ms` has no kafka-python argument: it is the
  deadline tidelog's own retries of admin and consumer requests keep (`ClientTiming`).
- `ClientTiming` holds Kafka's defaults (request.timeout.ms 30000, retry.backoff.ms 100,
  retry.backoff.max.ms 1000, default.api.timeout.ms 60000); the timing keys of a
  `--command-config` file or of a command's properties replace them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from tidelog.client_config import ClientConfigError, parse_properties

REQUEST_TIMEOUT_MS_DEFAULT: Final = 30_000
"""Kafka's request.timeout.ms: how long one request to a broker may take."""
RETRY_BACKOFF_MS_DEFAULT: Final = 100
"""Kafka's retry.backoff.ms: the first wait before a retriable failure is retried."""
RETRY_BACKOFF_MAX_MS_DEFAULT: Final = 1_000
"""Kafka's retry.backoff.max.ms: the longest wait between retries (the wait doubles)."""
DEFAULT_API_TIMEOUT_MS_DEFAULT: Final = 60_000
"""Kafka's default.api.timeout.ms: how long an admin or consumer call may retry."""
DELIVERY_TIMEOUT_MS_DEFAULT: Final = 120_000
"""Kafka's delivery.timeout.ms: how long a record may take from send to acknowledged."""
MAX_BLOCK_MS_DEFAULT: Final = 60_000
"""Kafka's max.block.ms: how long a send may wait for the topic's metadata."""

Converter = Callable[[str, str], Any]
"""Checks one property's value (the value, and `flag name` for the error) and converts it."""


@dataclass(frozen=True, slots=True)
class ClientTiming:
    """How long a client command waits for one request and retries what fails retriably."""

    request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT
    retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT
    retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS_DEFAULT
    default_api_timeout_ms: int = DEFAULT_API_TIMEOUT_MS_DEFAULT

    def with_properties(self, properties: Mapping[str, str], where: str) -> ClientTiming:
        """These timings with the timing keys among `properties` (Kafka's names) applied;
        ClientConfigError naming `where` for a value that is no count of ms."""
        changed = {
            TIMING[name]: milliseconds(value, " ".join(filter(None, (where, name))))
            for name, value in properties.items()
            if name in TIMING
        }
        return replace(self, **changed)


DEFAULT_TIMING: Final = ClientTiming()
"""Kafka's defaults."""

TIMING: Final = {
    "request.timeout.ms": "request_timeout_ms",
    "retry.backoff.ms": "retry_backoff_ms",
    "retry.backoff.max.ms": "retry_backoff_max_ms",
    "default.api.timeout.ms": "default_api_timeout_ms",
}
"""The timing keys, by Kafka's name: ClientTiming's fields."""


def milliseconds(value: str, what: str) -> int:
    """A count of milliseconds (0 or more); ClientConfigError naming `what` otherwise."""
    return whole_number(value, what, minimum=0)


def whole_number(value: str, what: str, *, minimum: int) -> int:
    if not value.strip().isdigit() or int(value) < minimum:
        raise ClientConfigError(f"{what}={value}: want a whole number >= {minimum}")
    return int(value)


def one_of(*choices: str, mapped: Mapping[str, Any] | None = None) -> Converter:
    """A converter taking one of `choices` (any case), mapped through `mapped` if given."""

    def convert(value: str, what: str) -> Any:
        lowered = value.strip().lower()
        if lowered not in choices:
            raise ClientConfigError(f"{what}={value}: want one of {', '.join(choices)}")
        return (mapped or {}).get(lowered, lowered)

    return convert


def text(value: str, what: str) -> str:
    if not value:
        raise ClientConfigError(f"{what}=: want a non-empty value")
    return value


@dataclass(frozen=True, slots=True)
class Property:
    """One known property: its kafka-python argument (None: tidelog's own) and converter."""

    kafka_python: str | None
    convert: Converter


def ms(kafka_python: str | None) -> Property:
    return Property(kafka_python, milliseconds)


def count(kafka_python: str, minimum: int) -> Property:
    return Property(kafka_python, lambda value, what: whole_number(value, what, minimum=minimum))


ACKS: Final = one_of("all", "-1", "1", "0", mapped={"all": "all", "-1": "all", "1": 1, "0": 0})
BOOLEAN: Final = one_of("true", "false", mapped={"true": True, "false": False})
COMPRESSION: Final = one_of("none", "gzip", "snappy", "lz4", "zstd", mapped={"none": None})

COMMON: Final = {
    "request.timeout.ms": ms("request_timeout_ms"),
    "retry.backoff.ms": ms("retry_backoff_ms"),
    "retry.backoff.max.ms": ms(None),
    "client.id": Property("client_id", text),
}
PRODUCER: Final[dict[str, Property]] = {
    **COMMON,
    "delivery.timeout.ms": ms("delivery_timeout_ms"),
    "acks": Property("acks", ACKS),
    "linger.ms": ms("linger_ms"),
    "batch.size": count("batch_size", 0),
    "compression.type": Property("compression_type", COMPRESSION),
    "enable.idempotence": Property("enable_idempotence", BOOLEAN),
    "max.block.ms": ms("max_block_ms"),
    "retries": count("retries", 0),
}
"""The properties `produce --producer-property` takes, as kafka-console-producer does."""
CONSUMER: Final[dict[str, Property]] = {
    **COMMON,
    "default.api.timeout.ms": ms(None),
    "fetch.max.wait.ms": ms("fetch_max_wait_ms"),
    "max.poll.records": count("max_poll_records", 1),
    "group.id": Property("group_id", text),
    "auto.offset.reset": Property("auto_offset_reset", one_of("earliest", "latest")),
    "isolation.level": Property("isolation_level", one_of("read_uncommitted", "read_committed")),
}
"""The properties `consume --consumer-property` takes, as kafka-console-consumer does."""


@dataclass(frozen=True, slots=True)
class ClientProperties:
    """Properties given to one command, checked: as given (Kafka's names) and as
    kafka-python's keyword arguments."""

    given: Mapping[str, str]
    kafka_python: Mapping[str, Any]

    def timing(self, base: ClientTiming, where: str) -> ClientTiming:
        return base.with_properties(self.given, where)


NONE: Final = ClientProperties({}, {})


def client_properties(
    items: Iterable[str], *, flag: str, known: Mapping[str, Property]
) -> ClientProperties:
    """`name=value` items checked against `known`; ClientConfigError naming `flag` and the
    first unknown name or bad value."""
    given = parse_properties(items, flag)
    arguments: dict[str, Any] = {}
    for name, value in given.items():
        found = known.get(name)
        if found is None:
            raise ClientConfigError(
                f"{flag} {name}: unknown property (known: {', '.join(sorted(known))})"
            )
        converted = found.convert(value, f"{flag} {name}")
        if found.kafka_python is not None:
            arguments[found.kafka_python] = converted
    return ClientProperties(given, arguments)


def producer_client_properties(items: Iterable[str]) -> ClientProperties:
    """`--producer-property` items, checked (this module's rules)."""
    return client_properties(items, flag="--producer-property", known=PRODUCER)


def consumer_client_properties(items: Iterable[str]) -> ClientProperties:
    """`--consumer-property` items, checked (this module's rules)."""
    return client_properties(items, flag="--consumer-property", known=CONSUMER)
