"""Broker configs that Kafka changes at run time (KIP-226), those tidelog takes: the
replication throttles `leader.replication.throttled.rate` and
`follower.replication.throttled.rate`, in bytes a second (Kafka's default, Long.MAX_VALUE,
is no throttle), for the whole cluster (the BROKER resource named "") and per broker (the
resource named by its id). Pure: no IO.

Rules of this file:
- The configs live in the metadata log (`alter_broker_configs`: one resource's whole set,
  as AlterConfigs leaves it), so every node holds the same ones at the same offset
  (`BrokerConfigs`, a part of the metadata image). A command is checked at the door
  (`check_command`, before it is proposed) and again when it is applied: one that cannot
  be applied raises MetadataError, which the image logs, and changes nothing.
- Names and values are checked as Kafka's brokers check them (ConfigAdminManager,
  DynamicBrokerConfig, ControllerConfigurationValidator): a resource name is "" or a
  broker id (a base 10 number, not negative); a value is a LONG of at least 0. Kafka
  answers a broker config it cannot take with INVALID_REQUEST (KAFKA-13609), and so does
  tidelog, with Kafka's messages. Only the two rates are taken: any other broker config
  is refused, as Kafka refuses one that cannot be changed at run time. Deleting a config
  that is not set changes nothing, as in Kafka.
- A broker's value in force (`in_force`) is its own, else the cluster default, else
  Kafka's default (DescribeConfigs' sources DYNAMIC_BROKER_CONFIG,
  DYNAMIC_DEFAULT_BROKER_CONFIG, DEFAULT_CONFIG). `rate_of` is that value as a throttle:
  None for Long.MAX_VALUE (no throttle), else at least 1 byte a second (the core takes no
  0: a rate of 0 lets one batch through, then holds everything back).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from tidelog.errors import MetadataError
from tidelog.server.topic_config import INT_MAX, LONG_MAX, parse_number

LEADER_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_RATE: Final = "follower.replication.throttled.rate"
BROKER_CONFIG_NAMES: Final = (LEADER_RATE, FOLLOWER_RATE)
CLUSTER_DEFAULT: Final = ""  # the resource name of the cluster-wide defaults
NO_THROTTLE: Final = LONG_MAX  # Kafka's default of both rates
# DescribeConfigs' ConfigSource, as Kafka numbers them.
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, DEFAULT_CONFIG = 2, 3, 5
LONG: Final = 5  # DescribeConfigs' ConfigType (v3+)
BROKER_CONFIG_DOCS: Final = {
    LEADER_RATE: "The most bytes a second the partition leaders on this broker send, in "
    "all, to copies that do not vote yet (a reassignment's new replicas, a copy catching "
    "up after it lost its log). tidelog applies it to every partition this broker leads, "
    "shared among those that have such copies.",
    FOLLOWER_RATE: "The most bytes a second the copies on this broker that do not vote yet "
    "take from their leaders, in all. tidelog's leaders push to their followers, so each "
    "leader holds back what it sends to such a copy.",
}
_BROKER_ID = re.compile(r"[+-]?[0-9]+")  # what Java's Integer.valueOf takes


def broker_of(name: str) -> int | None:
    """The broker a BROKER resource names: None for the cluster default (""), else its id;
    MetadataError (INVALID_REQUEST, Kafka's message) when it names neither."""
    if name == CLUSTER_DEFAULT:
        return None
    if not _BROKER_ID.fullmatch(name) or int(name) > INT_MAX or int(name) < -INT_MAX - 1:
        raise MetadataError("INVALID_REQUEST", "Unable to parse broker name as a base 10 number.")
    if int(name) < 0:
        raise MetadataError("INVALID_REQUEST", "Invalid negative broker ID.")
    return int(name)


def resource_name(name: str) -> str:
    """The name the configs of a BROKER resource are kept under: "" or the broker's id
    written plainly ("+01" is broker 1); MetadataError when it names no broker."""
    broker = broker_of(name)
    return CLUSTER_DEFAULT if broker is None else str(broker)


def parse_rates(configs: Mapping[str, object]) -> dict[str, int]:
    """Each config of one BROKER resource, parsed; MetadataError (INVALID_REQUEST, with
    Kafka's message) naming the first one tidelog does not take or whose value is bad."""
    values = {}
    for name, text in sorted(configs.items()):
        if name not in BROKER_CONFIG_NAMES:
            raise MetadataError(
                "INVALID_REQUEST",
                f"Cannot update these configs dynamically: Set({name}) (tidelog takes "
                f"{LEADER_RATE} and {FOLLOWER_RATE})",
            )
        if not isinstance(text, str):
            raise MetadataError("INVALID_REQUEST", f"Null value not supported for : {name}")
        try:
            values[name] = parse_number(name, text, kind="LONG", low=0, high=LONG_MAX)
        except MetadataError as error:  # Kafka's broker path answers INVALID_REQUEST
            raise MetadataError("INVALID_REQUEST", str(error)) from None
    return values


def check_command(name: str, configs: Mapping[str, object]) -> dict[str, Any]:
    """The metadata command that sets the whole set of configs of the BROKER resource
    `name` to `configs`; MetadataError (INVALID_REQUEST) when it cannot be done."""
    parse_rates(configs)
    return {"type": "alter_broker_configs", "broker": resource_name(name), "configs": configs}


class Synonym(NamedTuple):
    """One level a broker config's value may come from (DescribeConfigs' synonyms)."""

    value: str
    source: int


class BrokerConfigEntry(NamedTuple):
    """One broker config as DescribeConfigs answers it: the value in force first."""

    name: str
    synonyms: tuple[Synonym, ...]  # the value in force, then the levels beneath it

    @property
    def value(self) -> str:
        return self.synonyms[0].value

    @property
    def source(self) -> int:
        return self.synonyms[0].source


@dataclass(slots=True)
class BrokerConfigs:
    """The broker configs set, by resource name ("" or a broker id): what the applied
    `alter_broker_configs` commands left."""

    held: dict[str, dict[str, str]] = field(default_factory=dict)
    version: int = 0  # counts the commands applied (the throttles follow it)

    def apply(self, command: Mapping[str, Any]) -> None:
        """Apply one committed `alter_broker_configs`; MetadataError when it is not one
        that could have been proposed (it changes nothing then)."""
        name, configs = command.get("broker"), command.get("configs")
        if not isinstance(name, str) or not isinstance(configs, dict):
            raise MetadataError("INVALID_REQUEST", "broker is a string, configs a map")
        parse_rates(configs)
        name = resource_name(name)
        if configs:
            self.held[name] = dict(configs)
        else:
            self.held.pop(name, None)
        self.version += 1

    def configs_of(self, name: str) -> dict[str, str]:
        """The configs set on the BROKER resource `name` ("" or a broker id)."""
        return dict(self.held.get(resource_name(name), {}))

    def levels(self, node: int, key: str) -> tuple[Synonym, ...]:
        """Where broker `node`'s `key` may come from, the one in force first: its own
        value, the cluster default, Kafka's default."""
        found = []
        own = self.held.get(str(node), {})
        if key in own:
            found.append(Synonym(own[key], DYNAMIC_BROKER_CONFIG))
        default = self.held.get(CLUSTER_DEFAULT, {})
        if key in default:
            found.append(Synonym(default[key], DYNAMIC_DEFAULT_BROKER_CONFIG))
        found.append(Synonym(str(NO_THROTTLE), DEFAULT_CONFIG))
        return tuple(found)

    def in_force(self, node: int, key: str) -> Synonym:
        return self.levels(node, key)[0]

    def rate_of(self, node: int, key: str) -> int | None:
        """Broker `node`'s rate `key` as a throttle: bytes a second, None for none."""
        value = int(self.in_force(node, key).value.strip())
        return None if value >= NO_THROTTLE else max(1, value)

    def entries(self, name: str, wanted: Iterable[str] | None) -> list[BrokerConfigEntry]:
        """DescribeConfigs of the BROKER resource `name` (MetadataError when it names no
        broker): for a broker, every config tidelog takes with the value in force; for
        the cluster default, those set, as Kafka answers. `wanted` (None or empty: all)
        keeps the names it lists."""
        keys = [key for key in BROKER_CONFIG_NAMES if not wanted or key in set(wanted)]
        node = broker_of(name)
        if node is not None:
            return [BrokerConfigEntry(key, self.levels(node, key)) for key in keys]
        default = self.held.get(CLUSTER_DEFAULT, {})
        return [
            BrokerConfigEntry(key, (Synonym(default[key], DYNAMIC_DEFAULT_BROKER_CONFIG),))
            for key in keys
            if key in default
        ]
