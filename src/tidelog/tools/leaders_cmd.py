"""`tidelog leaders elect`: preferred-leader elections (Kafka's kafka-leader-election.sh),
through kafka-python's admin client (ElectLeaders).

Rules of this file:
- Only PREFERRED elections: each partition asked for goes back to its first replica when
  that replica is in sync. tidelog has no unclean election (it would lose acknowledged
  records), so there is no flag for one.
- `--all` asks for every partition of every topic; else `--topic` (and `--partition`).
- The output is Kafka's: the partitions elected, those whose preferred replica leads
  already, and each failure; the command exits 1 when any partition failed.
"""

from __future__ import annotations

import json
from typing import Any, Final

import click

from tidelog.tools.client_kafka import (
    ClientError,
    ClientSettings,
    ask_admin,
    topic_partitions,
)
from tidelog.tools.client_options import client_options, json_option, reports_errors

PREFERRED: Final = 0
ELECTION_NOT_NEEDED: Final = 84
ELECTION_TIMEOUT_MS: Final = 30_000


def elect_preferred(
    client: ClientSettings, partitions: dict[str, list[int]] | None
) -> dict[str, list[tuple[str, int, str | None]]]:
    """Ask for preferred elections (None: every partition); {"elected": [...],
    "not_needed": [...], "failed": [...]}, each a list of (topic, partition, message)."""
    answer = ask_admin(
        client,
        lambda admin: admin.elect_leaders(
            PREFERRED, partitions, timeout_ms=ELECTION_TIMEOUT_MS, raise_errors=False
        ),
        needs="ElectLeaders",
    )
    from kafka.errors import for_code  # noqa: PLC0415

    outcome: dict[str, list[tuple[str, int, str | None]]] = {
        "elected": [],
        "not_needed": [],
        "failed": [],
    }
    if getattr(answer, "error_code", 0):
        raise ClientError(f"ElectLeaders: {for_code(answer.error_code).__name__}")
    for result in answer.replica_election_results:
        for part in result.partition_result:
            entry = (str(result.topic), int(part.partition_id), part.error_message)
            if part.error_code == 0:
                outcome["elected"].append(entry)
            elif part.error_code == ELECTION_NOT_NEEDED:
                outcome["not_needed"].append(entry)
            else:
                name = for_code(part.error_code).__name__
                message = f"{name}: {part.error_message}" if part.error_message else name
                outcome["failed"].append((entry[0], entry[1], message))
    return outcome


def names(entries: list[tuple[str, int, Any]]) -> str:
    return ", ".join(f"{topic}-{partition}" for topic, partition, _ in sorted(entries))


@click.group()
def leaders() -> None:
    """Partition leadership: preferred-leader elections (kafka-leader-election)."""


@leaders.command("elect")
@click.option(
    "--preferred",
    is_flag=True,
    default=True,
    help="Elect each partition's first replica (the only kind; the default).",
)
@click.option("--all", "all_partitions", is_flag=True, help="Every partition of every topic.")
@click.option("--topic", help="The topic's partitions (all of them, or --partition).")
@click.option("--partition", type=int, help="One partition of --topic.")
@client_options
@json_option
@reports_errors
def elect(
    *,
    preferred: bool,
    all_partitions: bool,
    topic: str | None,
    partition: int | None,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Give partitions back to their preferred (first) replica, when it is in sync."""
    del preferred
    if all_partitions == (topic is not None):
        raise ClientError("name --topic (and maybe --partition), or --all")
    if partition is not None and topic is None:
        raise ClientError("--partition needs --topic")
    partitions: dict[str, list[int]] | None = None
    if topic is not None:
        named = topic
        partitions = {named: ask_admin(client, lambda a: topic_partitions(a, named, partition))}
    outcome = elect_preferred(client, partitions)
    if as_json:
        click.echo(
            json.dumps(
                {
                    kind: [
                        {"topic": t, "partition": p, **({"error": m} if kind == "failed" else {})}
                        for t, p, m in sorted(entries)
                    ]
                    for kind, entries in outcome.items()
                }
            )
        )
    else:
        if outcome["elected"]:
            click.echo(
                "Successfully completed leader election (PREFERRED) for partitions "
                + names(outcome["elected"])
            )
        if outcome["not_needed"]:
            click.echo(
                "Valid replica already elected for partitions " + names(outcome["not_needed"])
            )
        for t, p, message in sorted(outcome["failed"]):
            click.echo(f"Error completing leader election (PREFERRED) for {t}-{p}: {message}")
    if outcome["failed"]:
        raise SystemExit(1)
