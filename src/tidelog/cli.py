"""The `tidelog` command: one thin click command per tool; the logic lives in the layers."""

from __future__ import annotations

import click

from tidelog.errors import StorageError
from tidelog.tools.acls_cmd import acls
from tidelog.tools.broker_cmd import broker
from tidelog.tools.broker_configs_cmd import brokers
from tidelog.tools.certs_cmd import certs
from tidelog.tools.cluster_cmd import cluster
from tidelog.tools.demo import demo
from tidelog.tools.groups_cmd import groups
from tidelog.tools.leaders_cmd import leaders
from tidelog.tools.metadata_cmd import metadata
from tidelog.tools.perf import perf
from tidelog.tools.reassign_cmd import partitions
from tidelog.tools.rebalance_cmd import rebalance
from tidelog.tools.spark_cmd import spark
from tidelog.tools.storage_cmd import storage
from tidelog.tools.ui_cmd import ui
from tidelog.tools.users_cmd import users
from tidelog.tools.verify_cmd import verify_replicas_command
from tidelog.wal.dump import dump


@click.group()
def main() -> None:
    """tidelog: a replicated commit log that speaks the Kafka protocol."""


@main.command("dump-log")
@click.argument("path")
@click.option("--records", is_flag=True, help="Print each record under its batch.")
@click.option("--json", "as_json", is_flag=True, help="JSON Lines: one object per batch.")
def dump_log(path: str, records: bool, as_json: bool) -> None:
    """Print the record batches of a segment file or a partition directory."""
    try:
        for line in dump(path, records=records, as_json=as_json):
            click.echo(line)
    except StorageError as error:
        click.echo(f"error: {error}", err=True)
        raise SystemExit(1) from error


# The Kafka-style client commands: topics, produce, consume, get-offsets, delete-records.
from tidelog.tools.admin_cmd import TOPICS_COMMANDS  # noqa: E402
from tidelog.tools.client import register_client_commands, topics  # noqa: E402

register_client_commands(main)
for command in TOPICS_COMMANDS:
    topics.add_command(command)


main.add_command(acls)
main.add_command(broker)
main.add_command(brokers)
main.add_command(certs)
cluster.add_command(rebalance)
main.add_command(cluster)
main.add_command(demo)
main.add_command(groups)
main.add_command(leaders)
main.add_command(metadata)
main.add_command(partitions)
main.add_command(perf)
main.add_command(spark)
main.add_command(storage)
main.add_command(ui)
main.add_command(users)
main.add_command(verify_replicas_command)
