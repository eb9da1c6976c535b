"""The broker's configuration: what one node needs to know before it opens a socket.

Rules of this file:
- `BrokerConfig` is immutable and valid by construction: `__post_init__` checks every
  value and every relation between values, and raises `ConfigError` with a message that
  names the flag (`--peers: node 4 is not listed`). A broker never starts half-configured.
  `ConfigError` is tidelog.errors' (every layer's configs raise it).
- `join` (`--join`): this node is not one of the cluster's first nodes; `peers` lists some
  of its nodes and this one (server/joining.py).
- `load_config` merges two sources: a TOML file (keys are the flag names with underscores,
  `peer_listen = "127.0.0.1:9201"`) and command-line flags. A flag overrides the file. A
  value from the file is named after its key and file in messages (`listen in c.toml: ...`).
  A key may also go by Kafka's name (`KEY_ALIASES`: `num_partitions` is `default_partitions`),
  never both in one source.
- Addresses are `HOST:PORT` (`[::1]:9092` for IPv6); the peer list is
  `1@host:port,2@host:port` or, in TOML only, a table `[peers]` of `"1" = "host:port"`.
- `listen` is Kafka's `listeners`: `HOST:PORT` (PLAINTEXT), or a comma-separated list of
  `PROTOCOL://HOST:PORT` with PROTOCOL one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, each
  at most once. SSL and SASL_SSL need the node's certificate (`ssl_ca`, `ssl_cert`,
  `ssl_key`); `config.listen` is the first listener's address.
- `advertised_listen` is Kafka's `advertised.listeners`: where clients are told to reach
  each listener (Metadata, FindCoordinator, DescribeCluster name it), in the same form,
  one entry per listener protocol at most. A listener it does not name is advertised at
  its own address. A wildcard host (0.0.0.0, ::) binds every address but names none: it
  may be listened on (`listen`, `peer_listen`, `admin_listen`), never advertised, so a
  wildcard listener needs its `advertised_listen` entry, and a `peers` entry (where the
  others dial) may not be one. A wildcard `peer_listen` takes its `peers` entry's port.
- No IO here beyond reading the config file, and no defaults that depend on the machine.

Durability: `fsync = true` (the default) fsyncs before a write is acknowledged, so an
acknowledged `acks=all` write survives a power loss of a minority. `fsync = false` is the
documented weaker mode: data reaches the OS at once and the disk every `flush_interval_ms`
(or whenever the OS decides, when unset), so a simultaneous power loss of a majority can
lose acknowledged writes. Process crashes lose nothing in either mode.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import NamedTuple, TypeVar

from tidelog.address import format_address
from tidelog.address import parse_address as parse_host_port
from tidelog.client_config import PROTOCOLS
from tidelog.errors import ConfigError
from tidelog.errors import check_range as check_setting_range
from tidelog.server.logs import LOG_FORMATS
from tidelog.server.tls import TlsError, TlsFiles, peer_contexts

NODE_ID_MAX = 2**31 - 1
TICK_MS_MAX = 10_000
ELECTION_TICKS_MAX = 10_000
PARTITIONS_MAX = 10_000
FLUSH_INTERVAL_MS_MAX = 3_600_000
DURATION_MS_MAX = 10 * 365 * 24 * 3600 * 1000
CLUSTER_ID_LENGTH_MAX = 64
QUEUED_BYTES_MAX = 2**40
REPLICATION_FACTOR_MAX = 3
LOG_LEVELS = ("debug", "info", "warning", "error")
# A replication factor of 0 asks `BrokerConfig` to derive it: min(3, number of nodes).
DERIVE_REPLICATION_FACTOR = 0

_CLUSTER_ID = re.compile(r"[A-Za-z0-9._-]+")

Address = tuple[str, int]
T = TypeVar("T")
CLIENT_AUTH = ("none", "requested", "required")


class Listener(NamedTuple):
    """A Kafka listener: its security protocol (Kafka's names) and address."""

    protocol: str
    address: Address

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def __str__(self) -> str:
        return f"{self.protocol}://{format_address(self.address)}"


def flag(key: str) -> str:
    """The command-line spelling of a config key: `peer_listen` -> `--peer-listen`."""
    return "--" + key.replace("_", "-")


def parse_listeners(text: str, *, name: str) -> tuple[Listener, ...]:
    """`HOST:PORT` (PLAINTEXT) or `PROTOCOL://HOST:PORT,...` (Kafka's `listeners`)."""
    listeners = []
    for part in text.split(","):
        protocol, sep, address = part.strip().rpartition("://")
        protocol = protocol.upper() if sep else "PLAINTEXT"
        if protocol not in PROTOCOLS:
            raise ConfigError(f"{name}: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
        listeners.append(Listener(protocol, parse_address(address, name=name)))
    return tuple(listeners)


WILDCARD_HOSTS = ("0.0.0.0", "::")
"""Hosts that bind every address of a machine and name none of them."""


def is_wildcard(host: str) -> bool:
    return host in WILDCARD_HOSTS


def parse_address(text: str, *, name: str) -> Address:
    """`HOST:PORT` (or `[V6HOST]:PORT`) as a (host, port) pair; ConfigError names `name`."""
    try:
        return parse_host_port(text)
    except ValueError as error:
        raise ConfigError(f"{name}: {error}") from None


def parse_node_id(text: str, *, name: str) -> int:
    """A node id: a non-negative integer."""
    if not text.strip().isdigit():
        raise ConfigError(f"{name}: node id {text.strip()!r} is not a non-negative integer")
    return int(text)


def parse_peers(text: str, *, name: str) -> dict[int, Address]:
    """`1@host:port,2@host:port` as {1: (host, port), 2: ...}; each id once."""
    peers: dict[int, Address] = {}
    for item in text.split(","):
        node_text, sep, address_text = item.strip().partition("@")
        if not sep:
            raise ConfigError(f"{name}: {item.strip()!r} is not ID@HOST:PORT")
        node_id = parse_node_id(node_text, name=name)
        if node_id in peers:
            raise ConfigError(f"{name}: node {node_id} is listed twice")
        peers[node_id] = parse_address(address_text, name=name)
    return peers


def format_peers(peers: dict[int, Address]) -> str:
    """The inverse of `parse_peers`."""
    return ",".join(f"{node}@{format_address(peers[node])}" for node in sorted(peers))


@dataclass(frozen=True)
class BrokerConfig:
    """Everything one broker needs; checked on construction (see the module rules).

    `peers` maps every node id of the cluster, this one included, to its peer-listen
    address. `listen` is where Kafka clients connect, `admin_listen` the HTTP status
    endpoint (`GET /status`), or None for none.
    """

    node_id: int
    data_dir: Path
    listen: Address
    peer_listen: Address
    peers: dict[int, Address]
    admin_listen: Address | None = None
    # Kafka's advertised.listeners: what clients are told per listener protocol (see the
    # module rules); `advertised_listeners` is every listener as advertised.
    advertised_listen: tuple[Listener, ...] = ()
    # Not one of the cluster's first nodes: `peers` names some of its nodes (a bootstrap)
    # and this one; it joins as an observer of the metadata log (server/joining.py).
    join: bool = False
    cluster_id: str = "tidelog"
    tick_ms: int = 50
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    # A topic created without a partition count or replication factor gets these (Kafka's
    # num.partitions, also accepted as `num_partitions`, and default.replication.factor).
    default_partitions: int = 1
    default_replication_factor: int = DERIVE_REPLICATION_FACTOR
    # Kafka's auto.create.topics.enable: a Metadata request that allows it creates an
    # unknown topic it names, with the defaults above (server/handlers.py). Off, as Redpanda.
    auto_create_topics_enable: bool = False
    fsync: bool = True
    flush_interval_ms: int | None = None
    log_level: str = "info"
    log_format: str = "text"  # one of LOG_FORMATS (server/logs.py): text, or JSON lines
    offsets_topic_partitions: int = 4
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    group_initial_rebalance_delay_ms: int = 0
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2**31 - 1
    connections_max_idle_ms: int = 600_000
    # Leadership (server/leadership.py): SIGTERM hands every leadership over first, for at
    # most this long (0: not at all); a leader hands a partition to its preferred replica
    # when that broker's share of preferred partitions it does not lead exceeds the
    # percentage, checked every interval (Kafka's auto.leader.rebalance.enable,
    # leader.imbalance.check.interval.seconds, leader.imbalance.per.broker.percentage).
    controlled_shutdown_timeout_ms: int = 30_000
    # Cluster truth (server/truth.py): a follower out of sync this long leaves the reported
    # ISR (Kafka's replica.lag.time.max.ms); a broker not heard from this long is fenced,
    # out of Metadata's broker list (Kafka's broker.session.timeout.ms).
    replica_lag_time_max_ms: int = 10_000
    broker_session_timeout_ms: int = 9_000
    auto_leader_rebalance: bool = True
    # Prometheus metrics at the admin address's /metrics (server/metrics.py).
    metrics: bool = True
    # Idle partitions quiesce (core/quiesce.py) over node liveness (server/liveness.py): no
    # heartbeats, no ticks.
    quiesce: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    leader_imbalance_per_broker_percentage: int = 10
    queued_max_request_bytes: int = 256 * 1024 * 1024
    # A secured cluster: its CA, and this node's certificate (naming its node id) and key.
    # With them, peer links are mutual TLS; without, plaintext.
    ssl_ca: Path | None = None
    ssl_cert: Path | None = None
    ssl_key: Path | None = None
    ssl_client_auth: str = "none"  # client certificates on SSL listeners (Kafka's setting)
    # Authorization by ACLs (server/acl.py); super users may do anything. Kafka's
    # authorizer.class.name and super.users (principals separated by ';').
    authorizer: bool = False
    super_users: str = ""
    # The admin endpoint's bearer token (a file holding it); with the node's certificate
    # (ssl_*) the endpoint is HTTPS.
    admin_token_file: Path | None = None

    @property
    def admin_token(self) -> str | None:
        if self.admin_token_file is None:
            return None
        return self.admin_token_file.read_text().strip()

    listeners: tuple[Listener, ...] = ()  # from `listen`; () means PLAINTEXT on `listen`

    @property
    def advertised_listeners(self) -> tuple[Listener, ...]:
        """Each listener as clients reach it: its `advertised_listen` entry, else itself."""
        named = {listener.protocol: listener for listener in self.advertised_listen}
        return tuple(named.get(listener.protocol, listener) for listener in self.listeners)

    @property
    def tls(self) -> TlsFiles | None:
        if self.ssl_ca is None or self.ssl_cert is None or self.ssl_key is None:
            return None
        return TlsFiles(self.ssl_ca, self.ssl_cert, self.ssl_key)

    def __post_init__(self) -> None:
        if not self.listeners:
            object.__setattr__(self, "listeners", (Listener("PLAINTEXT", self.listen),))
        if self.default_replication_factor == DERIVE_REPLICATION_FACTOR:
            derived = min(REPLICATION_FACTOR_MAX, len(self.peers))
            object.__setattr__(self, "default_replication_factor", derived)
        check_values(self)
        check_relations(self)


def check_range(key: str, value: int, low: int, high: int) -> None:
    """ConfigError naming the flag of `key` unless low <= value <= high."""
    check_setting_range(flag(key), value, low, high)


def check_values(config: BrokerConfig) -> None:
    """Each value on its own (types are checked while loading)."""
    check_range("node_id", config.node_id, 0, NODE_ID_MAX)
    if not config.peers:
        raise ConfigError("--peers: no nodes listed")
    if config.data_dir.exists() and not config.data_dir.is_dir():
        raise ConfigError(f"--data-dir: {config.data_dir} exists and is not a directory")
    if (
        not _CLUSTER_ID.fullmatch(config.cluster_id)
        or len(config.cluster_id) > CLUSTER_ID_LENGTH_MAX
    ):
        raise ConfigError(
            f"--cluster-id: {config.cluster_id!r} must be 1-{CLUSTER_ID_LENGTH_MAX} "
            "letters, digits, '.', '_' or '-'"
        )
    check_range("tick_ms", config.tick_ms, 1, TICK_MS_MAX)
    check_range("election_ticks", config.election_ticks, 2, ELECTION_TICKS_MAX)
    check_range("heartbeat_ticks", config.heartbeat_ticks, 1, ELECTION_TICKS_MAX)
    check_range("default_partitions", config.default_partitions, 1, PARTITIONS_MAX)
    if config.flush_interval_ms is not None:
        check_range("flush_interval_ms", config.flush_interval_ms, 1, FLUSH_INTERVAL_MS_MAX)
    check_range("offsets_topic_partitions", config.offsets_topic_partitions, 1, PARTITIONS_MAX)
    check_range("offsets_retention_ms", config.offsets_retention_ms, 1, DURATION_MS_MAX)
    check_range(
        "offsets_retention_check_interval_ms",
        config.offsets_retention_check_interval_ms,
        1,
        DURATION_MS_MAX,
    )
    check_range(
        "group_initial_rebalance_delay_ms", config.group_initial_rebalance_delay_ms, 0, 300_000
    )
    check_range("group_min_session_timeout_ms", config.group_min_session_timeout_ms, 1, 3_600_000)
    check_range(
        "group_max_session_timeout_ms",
        config.group_max_session_timeout_ms,
        config.group_min_session_timeout_ms,
        3_600_000,
    )
    check_range("group_max_size", config.group_max_size, 1, 2**31 - 1)
    check_range("connections_max_idle_ms", config.connections_max_idle_ms, 100, DURATION_MS_MAX)
    check_range(
        "controlled_shutdown_timeout_ms", config.controlled_shutdown_timeout_ms, 0, 3_600_000
    )
    check_range("replica_lag_time_max_ms", config.replica_lag_time_max_ms, 0, DURATION_MS_MAX)
    check_range(
        "broker_session_timeout_ms", config.broker_session_timeout_ms, 1_000, DURATION_MS_MAX
    )
    check_range(
        "leader_imbalance_check_interval_ms",
        config.leader_imbalance_check_interval_ms,
        config.tick_ms,
        DURATION_MS_MAX,
    )
    check_range(
        "leader_imbalance_per_broker_percentage",
        config.leader_imbalance_per_broker_percentage,
        0,
        100,
    )
    check_range(
        "queued_max_request_bytes", config.queued_max_request_bytes, 1 << 20, QUEUED_BYTES_MAX
    )
    if config.log_level not in LOG_LEVELS:
        raise ConfigError(f"--log-level: {config.log_level!r} is not one of {LOG_LEVELS}")
    if config.log_format not in LOG_FORMATS:
        raise ConfigError(f"--log-format: {config.log_format!r} is not one of {LOG_FORMATS}")


def not_listed(node_id: object, peers: dict[int, Address]) -> ConfigError:
    known = ", ".join(str(node) for node in sorted(peers))
    return ConfigError(f"--peers: node {node_id} is not listed (nodes: {known})")


def check_peers(config: BrokerConfig) -> None:
    """This node in the peer list at its `peer_listen` (or a wildcard on its port), every
    entry an address others can dial, no two nodes at one."""
    if config.node_id not in config.peers:
        raise not_listed(config.node_id, config.peers)
    if config.join and len(config.peers) < 2:
        raise ConfigError(
            "--join: --peers names no node of the cluster to join through (give ID@HOST:PORT "
            "of one or more of its nodes, and this node's own)"
        )
    entry = config.peers[config.node_id]
    wildcard = is_wildcard(config.peer_listen[0]) and config.peer_listen[1] == entry[1]
    if config.peer_listen != entry and not wildcard:
        raise ConfigError(
            f"--node-id {config.node_id} but --peer-listen {format_address(config.peer_listen)}"
            f" differs from its --peers entry {format_address(entry)}"
        )
    owners: dict[Address, int] = {}
    for node, address in sorted(config.peers.items()):
        if is_wildcard(address[0]):
            raise ConfigError(
                f"--peers: node {node} at {format_address(address)}: {address[0]} names no "
                "host another node can dial"
            )
        if address in owners:
            raise ConfigError(
                f"--peers: nodes {owners[address]} and {node} share {format_address(address)}"
            )
        owners[address] = node


def check_relations(config: BrokerConfig) -> None:
    """The values against each other: this node in the peer list, distinct sockets."""
    check_peers(config)
    sockets = [
        (f"{flag('listen')} {listener.protocol}", listener.address) for listener in config.listeners
    ]
    sockets.append((flag("peer_listen"), config.peer_listen))
    if config.admin_listen is not None:
        sockets.append((flag("admin_listen"), config.admin_listen))
    seen: dict[Address, str] = {}
    for name, address in sockets:
        if address in seen:
            raise ConfigError(f"{name} {format_address(address)} is also {seen[address]}")
        seen[address] = name
    protocols = [listener.protocol for listener in config.listeners]
    for protocol in protocols:
        if protocols.count(protocol) > 1:
            raise ConfigError(f"--listen: {protocol} is listed twice (one listener each)")
    check_advertised(config)
    if config.heartbeat_ticks >= config.election_ticks:
        raise ConfigError(
            f"--heartbeat-ticks {config.heartbeat_ticks} must be less than "
            f"--election-ticks {config.election_ticks}"
        )
    check_range(
        "default_replication_factor", config.default_replication_factor, 1, len(config.peers)
    )
    if config.fsync and config.flush_interval_ms is not None:
        raise ConfigError("--flush-interval-ms applies only with fsync = false")
    given = [key for key in SSL_KEYS if getattr(config, key) is not None]
    if given and len(given) != len(SSL_KEYS):
        missing = ", ".join(flag(key) for key in SSL_KEYS if key not in given)
        raise ConfigError(f"{flag(given[0])} needs {missing} too")
    if config.admin_token_file is not None:
        try:
            token = config.admin_token_file.read_text().strip()
        except OSError as error:
            raise ConfigError(f"--admin-token-file: {error.strerror}") from None
        if len(token) < ADMIN_TOKEN_LENGTH_MIN:
            raise ConfigError(
                f"--admin-token-file: a token of {ADMIN_TOKEN_LENGTH_MIN}+ characters"
            )
    if config.ssl_client_auth not in CLIENT_AUTH:
        raise ConfigError(
            f"--ssl-client-auth: {config.ssl_client_auth!r} is not one of {CLIENT_AUTH}"
        )
    secured = [str(listener) for listener in config.listeners if listener.tls]
    if secured and config.tls is None:
        raise ConfigError(f"--listen {secured[0]} needs --ssl-ca, --ssl-cert and --ssl-key")
    if config.tls is not None:
        try:
            peer_contexts(config.tls)
        except TlsError as error:
            raise ConfigError(f"--ssl-*: {error}") from None


def check_advertised(config: BrokerConfig) -> None:
    """`advertised_listen` against `listen`: one entry per listener at most, no wildcard
    advertised, and a wildcard listener advertised (Kafka refuses 0.0.0.0 there too)."""
    name = flag("advertised_listen")
    bound = {listener.protocol for listener in config.listeners}
    seen: set[str] = set()
    for listener in config.advertised_listen:
        if listener.protocol not in bound:
            raise ConfigError(f"{name} {listener}: --listen has no {listener.protocol} listener")
        if listener.protocol in seen:
            raise ConfigError(f"{name}: {listener.protocol} is listed twice (one entry each)")
        seen.add(listener.protocol)
        if is_wildcard(listener.address[0]):
            raise ConfigError(
                f"{name} {listener}: {listener.address[0]} names no host a client can reach"
            )
    for listener in config.advertised_listeners:
        if is_wildcard(listener.address[0]):
            raise ConfigError(
                f"--listen {listener} binds every address: name the one clients reach in "
                f"{name} {listener.protocol}://HOST:PORT"
            )


SSL_KEYS = ("ssl_ca", "ssl_cert", "ssl_key")
ADMIN_TOKEN_LENGTH_MIN = 16


# `listeners` is derived from `listen`: not a key of its own.
CONFIG_KEYS = tuple(field.name for field in fields(BrokerConfig) if field.name != "listeners")
KEY_ALIASES = {"num_partitions": "default_partitions"}
"""Kafka's name for a key, accepted in a TOML file and as a flag: {alias: key}."""
REQUIRED_KEYS = ("node_id", "data_dir", "listen", "peers")


def load_config(cli_values: dict[str, object], config_file: Path | None) -> BrokerConfig:
    """The broker's configuration from flags (`cli_values`) over a TOML file.

    `cli_values` maps config keys (underscores) to flag values; None means "not given".
    `--peer-listen` defaults to this node's `--peers` entry. Raises ConfigError.
    """
    unknown = sorted(set(cli_values) - set(CONFIG_KEYS) - set(KEY_ALIASES))
    assert not unknown, f"not config keys: {unknown}"
    raw: dict[str, tuple[object, str]] = {}
    if config_file is not None:
        given = read_config_file(config_file)
        for key, value in given.items():
            raw[KEY_ALIASES.get(key, key)] = (value, f"{key} in {config_file}")
        check_aliases(given, where=f"in {config_file}")
    flags = {key: value for key, value in cli_values.items() if value is not None}
    check_aliases(flags, where="as flags")
    for key, value in flags.items():
        raw[KEY_ALIASES.get(key, key)] = (value, flag(key))
    for key in REQUIRED_KEYS:
        if key not in raw:
            raise ConfigError(f"{flag(key)} is required (a flag, or `{key}` in --config)")
    values = {key: convert(key, value, name=name) for key, (value, name) in raw.items()}
    listeners = values.pop("listen")
    assert isinstance(listeners, tuple)
    values["listen"], values["listeners"] = listeners[0].address, listeners
    peers = values["peers"]
    assert isinstance(peers, dict)
    if "peer_listen" not in values and values["node_id"] in peers:
        values["peer_listen"] = peers[values["node_id"]]
    if "peer_listen" not in values:
        raise not_listed(values["node_id"], peers)
    return BrokerConfig(**values)  # type: ignore[arg-type]


def check_aliases(given: dict[str, object], *, where: str) -> None:
    """ConfigError when a key and its alias are both given in one source."""
    for alias, key in KEY_ALIASES.items():
        if alias in given and key in given:
            raise ConfigError(f"{key} and {alias} are the same setting: give one {where}")


def read_config_file(path: Path) -> dict[str, object]:
    """The keys of a TOML config file; unknown keys are an error (typos must not pass)."""
    try:
        with path.open("rb") as file:
            table = tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError(f"--config: {path}: no such file") from None
    except OSError as error:
        raise ConfigError(f"--config: {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"--config: {path} is not valid TOML: {error}") from None
    for key in table:
        if key not in CONFIG_KEYS and key not in KEY_ALIASES:
            raise ConfigError(f"unknown key {key!r} in {path}")
    return table


def convert(key: str, value: object, *, name: str) -> object:
    """One raw value (a flag's string or int, a TOML value) as the field's type."""
    if key in ("listen", "advertised_listen"):
        return parse_listeners(expect(str, value, name=name), name=name)
    if key in ("peer_listen", "admin_listen"):
        return parse_address(expect(str, value, name=name), name=name)
    if key == "peers":
        if isinstance(value, dict):
            return {
                parse_node_id(str(node), name=name): parse_address(
                    expect(str, address, name=name), name=name
                )
                for node, address in value.items()
            }
        return parse_peers(expect(str, value, name=name), name=name)
    if key in ("data_dir", "admin_token_file", *SSL_KEYS):
        return Path(expect(str, value, name=name))
    if key in ("cluster_id", "log_level", "log_format", "ssl_client_auth"):
        text = expect(str, value, name=name)
        return text.lower() if key in ("log_level", "log_format") else text
    if key in ("fsync", "authorizer", "metrics", "quiesce", "auto_create_topics_enable", "join"):
        return expect(bool, value, name=name)
    if key == "super_users":
        text = expect(str, value, name=name)
        for principal in filter(None, (p.strip() for p in text.split(";"))):
            if not principal.startswith("User:") or principal == "User:":
                raise ConfigError(f"{name}: {principal!r} is not User:NAME")
        return text
    return expect(int, value, name=name)


def expect(kind: type[T], value: object, *, name: str) -> T:
    """`value` if it is a `kind` (a bool is not an int here), else ConfigError."""
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"{name}: expected {kind.__name__}, got {type(value).__name__} {value!r}")
