"""`tidelog brokers describe-configs` and `brokers alter-config`: broker configs as
kafka-configs shows and changes them (`--entity-type brokers --entity-name N` or
`--entity-default`, `--describe`, `--alter --add-config k=v --delete-config k`), through
kafka-python's admin client (DescribeConfigs, IncrementalAlterConfigs on BROKER
resources); and the throttle changes `partitions reassign` makes (`set_throttle`,
`clear_throttles`).

Rules of this file:
- `--node N` names one broker, `--default` the cluster's default (exactly one of them).
  Kafka's admin clients send a broker's configs to that broker; tidelog's brokers take
  any broker's (every node holds them all, and forwards a change to the controller), so
  each request goes to any broker: a broker that is down does not keep its throttle from
  being set or cleared. The requests are built here and sent on kafka-python's admin
  client's connections (its own config methods would send to the broker named, and take
  the default's name "" for no broker id).
- Broker configs are the replication throttles (docs/operations.md, Moving partitions).
  A refusal is printed with the broker's own message, and the command exits 1; answers a
  client may retry (a controller changing) are asked again until default.api.timeout.ms.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

import click
from kafka import errors as kafka_errors_module
from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

from tidelog.client_config import parse_properties
from tidelog.server.broker_configs import (
    CLUSTER_DEFAULT,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    FOLLOWER_RATE,
    LEADER_RATE,
)
from tidelog.tools.client_kafka import ClientError, ClientSettings, ask_admin
from tidelog.tools.client_options import client_options, json_option, reports_errors

BROKER: Final = 4  # Kafka's ConfigResourceType
SET, DELETE = 0, 1  # IncrementalAlterConfigs' operations
# What Kafka's kafka-reassign-partitions sets and clears (the third is a log directory's).
REASSIGN_THROTTLES: Final = (LEADER_RATE, FOLLOWER_RATE)
CLEARED_THROTTLES: Final = (*REASSIGN_THROTTLES, "replica.alter.log.dirs.io.max.bytes.per.second")
SOURCES: Final = {
    DYNAMIC_BROKER_CONFIG: "DYNAMIC_BROKER_CONFIG",
    DYNAMIC_DEFAULT_BROKER_CONFIG: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    DEFAULT_CONFIG: "DEFAULT_CONFIG",
}


def send(admin: Any, request: Any) -> Any:
    """One request to any broker, on the admin client's connections."""

    async def ask() -> Any:
        return await admin._manager.send(request)

    return admin._manager.run(ask)


def refused(code: int, message: str | None) -> None:
    """Raise the Kafka error of a resource's answer: kafka-python's own when the request
    may be asked again (`ask_admin` retries it), else ClientError with the broker's text."""
    if code == 0:
        return
    error = kafka_errors_module.for_code(code)
    if error.retriable:
        raise error(message)
    raise ClientError(message or error.__name__)


def describe_broker_configs(client: ClientSettings, node: int | None) -> dict[str, dict[str, str]]:
    """{config: {"value", "source"}} of broker `node`, or of the cluster default (None)."""
    name = CLUSTER_DEFAULT if node is None else str(node)
    request = DescribeConfigsRequest(resources=[(BROKER, name, None)], include_synonyms=False)

    def ask(admin: Any) -> Any:
        [result] = send(admin, request).results
        refused(result.error_code, result.error_message)
        return result

    result = ask_admin(client, ask, needs="DescribeConfigs")
    return {
        entry.name: {
            "value": entry.value,
            "source": SOURCES.get(entry.config_source, str(entry.config_source)),
        }
        for entry in sorted(result.configs, key=lambda entry: str(entry.name))
    }


Changes = dict[str, str | None]
"""A resource's changes: a config's new value, or None to delete it."""


def alter_broker_configs(client: ClientSettings, changes: Mapping[int | None, Changes]) -> None:
    """Set and delete single configs of each broker named (None: the cluster default), in
    one IncrementalAlterConfigs; ClientError with a broker's message when it refuses one."""
    resources = [
        (
            BROKER,
            CLUSTER_DEFAULT if node is None else str(node),
            [(key, SET if value is not None else DELETE, value) for key, value in wanted.items()],
        )
        for node, wanted in changes.items()
    ]
    request = IncrementalAlterConfigsRequest(resources=resources, validate_only=False)

    def ask(admin: Any) -> None:
        for answer in send(admin, request).responses:
            refused(answer.error_code, answer.error_message)

    ask_admin(client, ask, needs="IncrementalAlterConfigs")


def set_throttle(client: ClientSettings, brokers: Iterable[int], rate: int) -> None:
    """kafka-reassign-partitions' --throttle: both rates on each broker named."""
    wanted: Changes = dict.fromkeys(REASSIGN_THROTTLES, str(rate))
    alter_broker_configs(client, dict.fromkeys(sorted(set(brokers)), wanted))


def clear_throttles(client: ClientSettings, brokers: Iterable[int]) -> None:
    """What kafka-reassign-partitions' --verify clears once no move is left: the broker
    throttle rates of each broker named."""
    wanted: Changes = dict.fromkeys(CLEARED_THROTTLES)
    alter_broker_configs(client, dict.fromkeys(sorted(set(brokers)), wanted))


# ------------------------------------------------------------------------ commands ------
def node_option(command: Any) -> Any:
    command = click.option("--node", type=click.IntRange(min=0), help="One broker, by id.")(command)
    return click.option(
        "--default", "cluster_default", is_flag=True, help="The cluster-wide default."
    )(command)


def chosen(node: int | None, cluster_default: bool) -> int | None:
    if (node is None) == (not cluster_default):
        raise ClientError("name one broker with --node N, or the cluster default with --default")
    return node


@click.group()
def brokers() -> None:
    """Broker configs: the replication throttles (kafka-configs --entity-type brokers)."""


@brokers.command("describe-configs")
@node_option
@client_options
@json_option
@reports_errors
def describe_configs_command(
    node: int | None, cluster_default: bool, client: ClientSettings, as_json: bool
) -> None:
    """The configs of broker --node in force and where each comes from, or those set as the
    cluster's --default (kafka-configs --describe --all)."""
    target = chosen(node, cluster_default)
    configs = describe_broker_configs(client, target)
    if as_json:
        click.echo(json.dumps(configs))
        return
    if target is None:
        click.echo("Default configs for brokers in the cluster are:")
    else:
        click.echo(f"All configs for broker {target} are:")
    for key, entry in configs.items():
        click.echo(f"  {key}={entry['value']} ({entry['source']})")


@brokers.command("alter-config")
@node_option
@click.option("--set", "settings", multiple=True, metavar="K=V", help="Set a config.")
@click.option("--delete", "deletions", multiple=True, metavar="K", help="Back to the default.")
@client_options
@reports_errors
def alter_config_command(
    node: int | None,
    cluster_default: bool,
    settings: tuple[str, ...],
    deletions: tuple[str, ...],
    client: ClientSettings,
) -> None:
    """Change configs of broker --node, or the cluster's --default (kafka-configs --alter
    --add-config / --delete-config); every broker applies its throttle at once."""
    target = chosen(node, cluster_default)
    if not settings and not deletions:
        raise ClientError("name what to change: --set K=V or --delete K")
    parsed = parse_properties(settings, "--set")
    both = sorted(set(parsed) & set(deletions))
    if both:
        raise ClientError(f"--set and --delete both name {', '.join(both)}")
    wanted: Changes = {**parsed, **dict.fromkeys(deletions)}
    alter_broker_configs(client, {target: wanted})
    if target is None:
        click.echo("Completed updating default config for brokers in the cluster.")
    else:
        click.echo(f"Completed updating config for broker {target}.")
