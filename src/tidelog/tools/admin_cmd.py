"""Admin commands beside kafka-topics' basics, through kafka-python's admin client:
`tidelog topics add-partitions` (kafka-topics --alter --partitions), `topics
describe-configs` and `topics alter-config` (kafka-configs --describe / --alter
--add-config k=v --delete-config k, with IncrementalAlterConfigs).

Rules of this file:
- Each command asks the cluster (any broker: one that is not the controller forwards) and
  prints the broker's own error message when it refuses.
- `add-partitions` returns once every partition, new ones included, has a leader.
"""

from __future__ import annotations

import json
from typing import Any

import click

from tidelog.client_config import parse_properties
from tidelog.tools.client_kafka import (
    ClientError,
    ClientSettings,
    ask_admin,
    wait_for_leaders,
)
from tidelog.tools.client_options import client_options, json_option, reports_errors
from tidelog.tools.kafka_spellings import topic_argument


def add_partitions(client: ClientSettings, topic: str, count: int) -> None:
    """Grow `topic` to `count` partitions (CreatePartitions); ClientError with the broker's
    message when it refuses."""
    from kafka.errors import for_code  # noqa: PLC0415

    def ask(admin: Any) -> Any:
        return admin.create_partitions({topic: count}, raise_errors=False)

    answer = ask_admin(client, ask, needs="CreatePartitions")
    for result in answer.results:
        if result.error_code:
            raise ClientError(result.error_message or for_code(result.error_code).__name__)
    wait_for_leaders(client, topic)


@click.command("add-partitions")
@topic_argument(name="name")
@click.option("--partitions", type=click.IntRange(min=1), required=True, help="The new count.")
@client_options
@json_option
@reports_errors
def add_partitions_command(
    name: str, partitions: int, client: ClientSettings, as_json: bool
) -> None:
    """Grow topic TOPIC to --partitions partitions (kafka-topics --alter --partitions)."""
    add_partitions(client, name, partitions)
    if as_json:
        click.echo(f'{{"topic": "{name}", "partitions": {partitions}}}')
    else:
        click.echo(f"Topic {name} now has {partitions} partitions.")


def describe_configs(client: ClientSettings, topic: str) -> dict[str, dict[str, Any]]:
    """{config: {"value", "source"}} of every config of `topic` (DescribeConfigs)."""
    from kafka.admin import ConfigResource, ConfigResourceType  # noqa: PLC0415

    resource = ConfigResource(ConfigResourceType.TOPIC, topic)

    def ask(admin: Any) -> Any:
        return admin.describe_configs([resource], config_filter="all")

    found = ask_admin(client, ask, needs="DescribeConfigs")["topic"].get(topic, {})
    return {
        name: {"value": entry["value"], "source": entry["config_source"]}
        for name, entry in sorted(found.items())
    }


def alter_config(
    client: ClientSettings, topic: str, settings: dict[str, str], deletions: tuple[str, ...]
) -> None:
    """Set and delete single configs of `topic` (IncrementalAlterConfigs); ClientError with
    the broker's message when it refuses."""
    from kafka.admin import ConfigResource, ConfigResourceType  # noqa: PLC0415

    changes: dict[str, Any] = {key: ("SET", value) for key, value in settings.items()}
    changes |= {key: ("DELETE", None) for key in deletions}
    resource = ConfigResource(ConfigResourceType.TOPIC, topic, changes)

    def ask(admin: Any) -> Any:
        return admin.alter_configs([resource], raise_on_unknown=False, incremental=True)

    result = ask_admin(client, ask, needs="IncrementalAlterConfigs")
    # kafka-python answers each resource with None, or an error as "[Error N] Name: text".
    outcome: Any = result.get("topic", {}).get(topic) if isinstance(result, dict) else None
    if isinstance(outcome, str) and outcome.startswith("[Error"):
        raise ClientError(broker_message(outcome))
    if outcome is not None and int(getattr(outcome, "errno", None) or 0) != 0:
        raise ClientError(str(getattr(outcome, "message", None) or type(outcome).__name__))


def broker_message(outcome: str) -> str:
    """The broker's own message in kafka-python's "[Error N] Name: message", as `topics
    create` prints it for the same refusal; the error's name when the broker sent none."""
    name, _, message = outcome.split("] ", 1)[-1].partition(": ")
    return message if message and message != "None" else name


@click.command("describe-configs")
@topic_argument(name="name")
@client_options
@json_option
@reports_errors
def describe_configs_command(name: str, client: ClientSettings, as_json: bool) -> None:
    """Every config of topic TOPIC in force, and where it comes from (kafka-configs
    --describe --all): TOPIC (set for the topic) or DEFAULT."""
    configs = describe_configs(client, name)
    if as_json:
        click.echo(json.dumps(configs))
        return
    click.echo(f"All configs for topic {name} are:")
    for key, entry in configs.items():
        source = "TOPIC" if "TOPIC" in str(entry["source"]) else "DEFAULT"
        click.echo(f"  {key}={entry['value']} ({source})")


@click.command("alter-config")
@topic_argument(name="name")
@click.option("--set", "settings", multiple=True, metavar="K=V", help="Set a config.")
@click.option("--delete", "deletions", multiple=True, metavar="K", help="Back to the default.")
@client_options
@reports_errors
def alter_config_command(
    name: str, settings: tuple[str, ...], deletions: tuple[str, ...], client: ClientSettings
) -> None:
    """Change configs of topic TOPIC (kafka-configs --alter --add-config / --delete-config);
    the replicas follow at once (retention, segments, min.insync.replicas)."""
    if not settings and not deletions:
        raise ClientError("name what to change: --set K=V or --delete K")
    parsed = parse_properties(settings, "--set")
    alter_config(client, name, parsed, deletions)
    click.echo(f"Completed updating config for topic {name}.")


TOPICS_COMMANDS = (add_partitions_command, describe_configs_command, alter_config_command)
