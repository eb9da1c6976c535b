"""`tidelog broker`: run one broker in the foreground.

Rules of this file:
- The command only turns flags into a `BrokerConfig` (`tidelog.server.config`) and hands
  it to `tidelog.server.app.run`. A bad value prints `error: ...` and exits 2, before
  anything listens or touches the data directory.
- The broker module is imported when the command runs, not when the CLI loads, so every
  other command works (and starts fast) without it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import cast

import click

from tidelog.errors import ConfigError
from tidelog.server.config import LOG_LEVELS, BrokerConfig, load_config
from tidelog.server.logs import LOG_FORMATS, configure_logging

EXIT_CONFIG_ERROR = 2
EXIT_NO_BROKER = 1
BROKER_MODULE = "tidelog.server.app"


@click.command("broker")
@click.option("--node-id", type=int, help="This node's id; must appear in --peers.")
@click.option("--data-dir", help="Directory of this node's logs and state.")
@click.option(
    "--listen",
    help="Kafka listeners: HOST:PORT, or PROTOCOL://HOST:PORT,... with PROTOCOL one of "
    "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL.",
)
@click.option(
    "--advertised-listen",
    help="Where clients are told to reach each listener (Kafka's advertised.listeners), in "
    "--listen's form; needed for a listener on 0.0.0.0 or :: (default: --listen).",
)
@click.option("--peer-listen", help="HOST:PORT for other nodes (default: its --peers entry).")
@click.option("--peers", help="Every node's peer address: 1@host:port,2@host:port,...")
@click.option(
    "--join/--no-join",
    default=None,
    help="Join a running cluster: --peers names some of its nodes (a bootstrap) and this one; "
    "the node registers and follows the metadata log as an observer (default: off, one of "
    "the cluster's first nodes).",
)
@click.option("--admin-listen", help="HOST:PORT of the HTTP status endpoint (GET /status).")
@click.option(
    "--admin-token-file",
    help="A file holding the bearer token GET /status wants (HTTPS too with --ssl-*).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML file; keys are the flag names with underscores. Flags override it.",
)
@click.option("--tick-ms", type=int, help="Milliseconds per tick (default 50).")
@click.option("--election-ticks", type=int, help="Ticks without a leader before an election.")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False))
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS, case_sensitive=False),
    help="text (the default), or json: one JSON object per line, with topic, partition "
    "and epoch fields on a partition's lines.",
)
@click.option("--ssl-ca", help="The cluster's CA certificate (PEM): peer links become mutual TLS.")
@click.option("--ssl-cert", help="This node's certificate (PEM), naming its node id.")
@click.option("--ssl-key", help="This node's private key (PEM).")
@click.option(
    "--authorizer/--no-authorizer",
    default=None,
    help="Authorize every request by the ACLs (default: off, everything allowed).",
)
@click.option(
    "--super-users",
    metavar="User:A;User:B",
    help="Principals allowed everything when the authorizer is on.",
)
@click.option(
    "--ssl-client-auth",
    type=click.Choice(("none", "requested", "required")),
    help="Client certificates on SSL listeners (default none).",
)
@click.option(
    "--controlled-shutdown-timeout-ms",
    type=int,
    help="On SIGTERM, hand every leadership over first, for at most this long (default "
    "30000; 0: exit at once).",
)
@click.option(
    "--auto-leader-rebalance/--no-auto-leader-rebalance",
    default=None,
    help="Hand partitions back to their preferred replica when leadership is unbalanced "
    "(default: on).",
)
@click.option(
    "--quiesce/--no-quiesce",
    default=None,
    help="Let idle partitions quiesce: no heartbeats or ticks until a write, a "
    "message or a node's death wakes them; node liveness (one heartbeat per pair of nodes) "
    "stands in (default: on).",
)
@click.option(
    "--metrics/--no-metrics",
    default=None,
    help="Count requests, fsyncs, commits and elections for GET /metrics on the admin "
    "address (default: on).",
)
@click.option(
    "--leader-imbalance-check-interval-ms",
    type=int,
    help="How often the leader rebalance checks (default 300000).",
)
@click.option(
    "--leader-imbalance-per-broker-percentage",
    type=int,
    help="A broker's share of preferred partitions it does not lead that starts a "
    "rebalance (default 10).",
)
@click.option(
    "--replica-lag-time-max-ms",
    type=int,
    help="A follower out of sync this long leaves the reported ISR (default 10000).",
)
@click.option(
    "--broker-session-timeout-ms",
    type=int,
    help="A broker not heard from this long is fenced: out of Metadata (default 9000).",
)
@click.option(
    "--auto-create-topics-enable/--no-auto-create-topics-enable",
    default=None,
    help="Create an unknown topic a client's Metadata request names and allows creating, "
    "with --num-partitions and --default-replication-factor (Kafka's "
    "auto.create.topics.enable; default: off).",
)
@click.option(
    "--num-partitions",
    type=int,
    help="Partitions of a topic created without a count (Kafka's num.partitions; default 1).",
)
@click.option(
    "--default-replication-factor",
    type=int,
    help="Replicas of a topic created without a factor (default: min(3, nodes)).",
)
def broker(config_file: Path | None, **flags: object) -> None:
    """Run one broker in the foreground until SIGTERM; logs go to stderr."""
    try:
        config = load_config(flags, config_file)
    except ConfigError as error:
        click.echo(f"error: {error}", err=True)
        raise SystemExit(EXIT_CONFIG_ERROR) from error
    # Before the broker module is imported: whatever it logs on import is formatted too.
    configure_logging(
        log_level=config.log_level, log_format=config.log_format, node_id=config.node_id
    )
    raise SystemExit(load_broker_run()(config))


def load_broker_run() -> Callable[[BrokerConfig], int]:
    """`tidelog.server.app.run`, imported now; exits 1 if the broker is not installed."""
    try:
        module = importlib.import_module(BROKER_MODULE)
    except ModuleNotFoundError as error:
        if error.name != BROKER_MODULE:
            raise
        click.echo(f"error: this build has no broker ({BROKER_MODULE} is missing)", err=True)
        raise SystemExit(EXIT_NO_BROKER) from error
    return cast(Callable[[BrokerConfig], int], module.run)
