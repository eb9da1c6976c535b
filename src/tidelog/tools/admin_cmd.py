"""Admin commands beside kafka-topics' basics, through kafka-python's admin client:
`tidelog topics add-partitions` (kafka-topics --alter --partitions).

Rules of this file:
- Each command asks the cluster (any broker: one that is not the controller forwards) and
  prints the broker's own error message when it refuses.
- `add-partitions` returns once every partition, new ones included, has a leader.
"""

from __future__ import annotations

from typing import Any

import click

from tidelog.tools.client_kafka import (
    ClientError,
    ClientSettings,
    ask_admin,
    wait_for_leaders,
)
from tidelog.tools.client_options import client_options, json_option, reports_errors


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
@click.argument("name")
@click.option("--partitions", type=click.IntRange(min=1), required=True, help="The new count.")
@client_options
@json_option
@reports_errors
def add_partitions_command(
    name: str, partitions: int, client: ClientSettings, as_json: bool
) -> None:
    """Grow topic NAME to --partitions partitions (kafka-topics --alter --partitions)."""
    add_partitions(client, name, partitions)
    if as_json:
        click.echo(f'{{"topic": "{name}", "partitions": {partitions}}}')
    else:
        click.echo(f"Topic {name} now has {partitions} partitions.")


TOPICS_COMMANDS = (add_partitions_command,)
