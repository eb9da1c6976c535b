"""The Kafka-style client commands of `tidelog`: topics, produce, consume, get-offsets,
delete-records.

Names, flags and output lines follow Kafka's own tools (kafka-topics, kafka-console-producer,
kafka-console-consumer, kafka-get-offsets, kafka-delete-records), so scripts written for
them read ours. Rules:

- Every command takes `--bootstrap-server` and `--command-config FILE` (Kafka's client
  properties; also `$TIDELOG_COMMAND_CONFIG`), resolved by `client_options` into one
  `ClientSettings`; the defaults are a running local cluster's (a secure one's SASL_SSL
  listeners and `client-sasl.properties`), else 127.0.0.1:9092.
- Every command takes `--json`: machine-readable output on stdout, its shape in the help.
- The Kafka-format lines are plain text, byte for byte; rich is used only for `--table`.
- Expected failures (`ClientError`) print `error: ...` on stderr and exit 1, never a
  traceback; click's own usage errors exit 2.
- This module prints; `client_kafka`, `client_records` and `client_status` do the asking.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any, Final

import click
from rich.console import Console
from rich.table import Table

from tidelog.client_config import parse_properties
from tidelog.status import access_for
from tidelog.tools.client_kafka import (
    ClientError,
    ClientSettings,
    PartitionMetadata,
    create_topic,
    delete_records,
    delete_topic,
    describe_topics,
    list_offsets,
    list_topics,
    min_insync_of,
    parse_offset_time,
)
from tidelog.tools.client_options import client_options, json_option, reports_errors
from tidelog.tools.client_records import (
    ConsumedRecord,
    ConsumeOptions,
    consume_records,
    produce_lines,
)
from tidelog.tools.client_status import (
    ReplicaStatus,
    admin_addresses,
    find_local_cluster,
    local_bootstraps,
    local_cluster_directory,
    replica_statuses,
)

__all__ = [
    "consume",
    "delete_records_command",
    "find_local_cluster",
    "get_offsets",
    "produce",
    "register_client_commands",
    "topics",
]

LINES_MAX_BYTES: Final = 1024 * 1024
"""The longest stdin line `produce` accepts as one record."""

TABLE_WIDTH_PIPED: Final = 200
"""The width of a `--table` written to a pipe or file."""


def echo_json(value: object) -> None:
    click.echo(json.dumps(value, sort_keys=False))


# topics


@click.group()
def topics() -> None:
    """Create, list, describe and delete topics (kafka-topics)."""


@topics.command("create")
@click.argument("name")
@click.option("--partitions", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--replication-factor", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--config", "configs", multiple=True, metavar="K=V", help="Topic config; repeat.")
@client_options
@json_option
@reports_errors
def topics_create(
    *,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: tuple[str, ...],
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Create topic NAME. Prints `Created topic NAME.`

    --json: {"topic": NAME, "partitions": P, "replication_factor": R, "configs": {k: v}}
    """
    parsed = parse_properties(configs, "--config")
    create_topic(
        client,
        name,
        partitions=partitions,
        replication_factor=replication_factor,
        configs=parsed,
    )
    if as_json:
        echo_json(
            {
                "topic": name,
                "partitions": partitions,
                "replication_factor": replication_factor,
                "configs": parsed,
            }
        )
    else:
        click.echo(f"Created topic {name}.")


@topics.command("list")
@client_options
@json_option
@reports_errors
def topics_list(client: ClientSettings, as_json: bool) -> None:
    """Print the name of every topic, one a line, sorted.

    --json: {"topics": [NAME, ...]}
    """
    names = list_topics(client)
    if as_json:
        echo_json({"topics": names})
        return
    for name in names:
        click.echo(name)


@topics.command("delete")
@click.argument("name")
@client_options
@json_option
@reports_errors
def topics_delete(name: str, client: ClientSettings, as_json: bool) -> None:
    """Delete topic NAME. Prints `Deleted topic NAME.`

    --json: {"topic": NAME, "deleted": true}
    """
    delete_topic(client, name)
    if as_json:
        echo_json({"topic": name, "deleted": True})
    else:
        click.echo(f"Deleted topic {name}.")


def kafka_partition_line(p: PartitionMetadata) -> str:
    """kafka-topics --describe's partition line (with its leading tab)."""
    replicas = ",".join(map(str, p.replicas))
    isr = ",".join(map(str, p.isr))
    return f"\tTopic: {p.topic}\tPartition: {p.partition}\tLeader: {p.leader}\t" + (
        f"Replicas: {replicas}\tIsr: {isr}"
    )


def replica_line(node_id: int, status: ReplicaStatus | None) -> str:
    """One replica's state from its broker's /status, under its partition line."""
    if status is None:
        return f"\t\tReplica: {node_id}\tStatus: unknown"
    return (
        f"\t\tReplica: {node_id}\tRole: {status.role}\tEpoch: {status.epoch}\t"
        f"LogStartOffset: {status.log_start_offset}\tHighWatermark: {status.hwm}\t"
        f"LogEndOffset: {status.log_end_offset}"
    )


def describe_lines(
    partitions: list[PartitionMetadata],
    statuses: dict[tuple[str, int, int], ReplicaStatus] | None,
) -> Iterator[str]:
    """kafka-topics --describe's lines; per replica lines when `statuses` is not None."""
    by_topic: dict[str, list[PartitionMetadata]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(p)
    for topic, members in by_topic.items():
        factor = len(members[0].replicas) if members else 0
        yield f"Topic: {topic}\tPartitionCount: {len(members)}\tReplicationFactor: {factor}"
        for p in members:
            yield kafka_partition_line(p)
            if statuses is None:
                continue
            for node_id in p.replicas:
                yield replica_line(node_id, statuses.get((p.topic, p.partition, node_id)))


def describe_json(
    partitions: list[PartitionMetadata],
    statuses: dict[tuple[str, int, int], ReplicaStatus] | None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in partitions:
        row: dict[str, Any] = {
            "topic": p.topic,
            "partition": p.partition,
            "leader": p.leader,
            "replicas": list(p.replicas),
            "isr": list(p.isr),
        }
        if statuses is not None:
            found = (statuses.get((p.topic, p.partition, n)) for n in p.replicas)
            row["replica_status"] = [s.to_json() if s else None for s in found]
        rows.append(row)
    return rows


def render_table(
    partitions: list[PartitionMetadata], statuses: dict[tuple[str, int, int], ReplicaStatus] | None
) -> None:
    """The same facts as a rich table, one row per replica."""
    table = Table(
        "TOPIC",
        "PARTITION",
        "LEADER",
        "REPLICA",
        "IN-ISR",
        "ROLE",
        "EPOCH",
        "LOG-START-OFFSET",
        "HIGH-WATERMARK",
        "LOG-END-OFFSET",
    )
    for p in partitions:
        for node_id in p.replicas:
            s = None if statuses is None else statuses.get((p.topic, p.partition, node_id))
            facts = (
                ["-"] * 5
                if s is None
                else [
                    s.role,
                    str(s.epoch),
                    str(s.log_start_offset),
                    str(s.hwm),
                    str(s.log_end_offset),
                ]
            )
            table.add_row(
                p.topic,
                str(p.partition),
                str(p.leader),
                str(node_id),
                "yes" if node_id in p.isr else "no",
                *facts,
            )
    console = Console()
    if not console.is_terminal:
        # Piped output has no width to respect: never truncate a column.
        console = Console(width=TABLE_WIDTH_PIPED)
    console.print(table)


@topics.command("describe")
@click.argument("name", required=False)
@click.option("--table", is_flag=True, help="A table, one row per replica (rich).")
@click.option(
    "--under-replicated-partitions",
    "under_replicated",
    is_flag=True,
    help="Only partitions with fewer in-sync replicas than replicas.",
)
@click.option(
    "--unavailable-partitions", "unavailable", is_flag=True, help="Only partitions with no leader."
)
@click.option(
    "--under-min-isr-partitions",
    "under_min_isr",
    is_flag=True,
    help="Only partitions with fewer in-sync replicas than min.insync.replicas.",
)
@client_options
@json_option
@reports_errors
def topics_describe(
    name: str | None,
    *,
    table: bool,
    under_replicated: bool,
    unavailable: bool,
    under_min_isr: bool,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Describe topic NAME (or every topic), one line per partition as kafka-topics does:

    \b
    Topic: t	PartitionCount: 1	ReplicationFactor: 3
        Topic: t	Partition: 0	Leader: 1	Replicas: 1,2,3	Isr: 1,2,3

    With a running local cluster (--data-dir, $TIDELOG_DATA_DIR or ./data), each
    partition line is followed by one line per replica from its broker's admin /status:
    Role, Epoch, LogStartOffset, HighWatermark, LogEndOffset (`Status: unknown` when that
    broker does not answer). --under-replicated-partitions, --unavailable-partitions and
    --under-min-isr-partitions keep only such partitions, as kafka-topics does.

    --json: [{"topic", "partition", "leader", "replicas": [..], "isr": [..],
    "replica_status": [{"node_id", "role", "epoch", "log_start_offset", "hwm",
    "log_end_offset"} or null, one per replica]}]; replica_status only with a local cluster.
    """
    cluster = find_local_cluster()
    partitions = describe_topics(client, None if name is None else [name])
    if under_replicated or unavailable or under_min_isr:
        topics = sorted({p.topic for p in partitions})
        minimum = min_insync_of(client, topics) if under_min_isr else {}
        partitions = [
            p
            for p in partitions
            if (under_replicated and len(p.isr) < len(p.replicas))
            or (unavailable and p.leader < 0)
            or (under_min_isr and len(p.isr) < minimum.get(p.topic, 1))
        ]
    # Replica states come from the local cluster's brokers: only when it is the one asked.
    statuses = None
    if cluster is not None and client.bootstrap in local_bootstraps(cluster):
        access = access_for(local_cluster_directory())
        statuses = replica_statuses(admin_addresses(cluster), access)
    if as_json:
        echo_json(describe_json(partitions, statuses))
    elif table:
        render_table(partitions, statuses)
    else:
        for line in describe_lines(partitions, statuses):
            click.echo(line)


# produce and consume


def read_lines(stream: Any) -> Iterator[bytes]:
    """Lines of a binary stream without their line ending ("\n" or "\r\n")."""
    for line in stream:
        if len(line) > LINES_MAX_BYTES:
            raise ClientError(f"a line is longer than {LINES_MAX_BYTES} bytes")
        yield line.removesuffix(b"\n").removesuffix(b"\r")


@click.command()
@click.argument("topic")
@click.option(
    "--acks",
    type=click.Choice(["all", "-1", "1", "0"]),
    default="all",
    show_default=True,
    help="all turns on the idempotent producer.",
)
@click.option(
    "--key-separator",
    default=None,
    metavar="S",
    help="Each line is KEY S VALUE (split at the first S).",
)
@click.option(
    "--partition",
    type=click.IntRange(min=0),
    default=None,
    help="Send every record to this partition (default: the partitioner's choice).",
)
@client_options
@json_option
@reports_errors
def produce(
    *,
    topic: str,
    acks: str,
    key_separator: str | None,
    partition: int | None,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Produce each line of stdin as one record of TOPIC (kafka-console-producer).

    Prints `N records produced` on stderr, and each failed send's error; exits 1 if any
    record failed.

    --json (stdout): {"topic", "produced": N, "failed": N, "errors": [..],
    "last_offsets": {"PARTITION": OFFSET}}
    """
    if key_separator == "":
        raise ClientError("--key-separator must not be empty")
    separator = None if key_separator is None else key_separator.encode()
    summary = produce_lines(
        client,
        topic,
        read_lines(sys.stdin.buffer),
        acks=acks,
        key_separator=separator,
        partition=partition,
    )
    for message in summary.errors:
        click.echo(f"error: {message}", err=True)
    if as_json:
        echo_json(
            {
                "topic": topic,
                "produced": summary.produced,
                "failed": summary.failed,
                "errors": summary.errors,
                "last_offsets": {str(k): v for k, v in sorted(summary.last_offsets.items())},
            }
        )
    click.echo(f"{summary.produced} records produced", err=True)
    if summary.failed:
        click.echo(f"{summary.failed} records failed", err=True)
        raise SystemExit(1)


def record_text(record: ConsumedRecord, *, print_offset: bool, print_key: bool) -> bytes:
    """One record as kafka-console-consumer prints it: `null` for a missing key or value."""
    value = b"null" if record.value is None else record.value
    if print_key:
        value = (b"null" if record.key is None else record.key) + b"\t" + value
    if print_offset:
        value = f"{record.partition}:{record.offset}:".encode() + value
    return value


def record_json(record: ConsumedRecord) -> str:
    def text(data: bytes | None) -> str | None:
        return None if data is None else data.decode("utf-8", errors="replace")

    return json.dumps(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
            "key": text(record.key),
            "value": text(record.value),
        }
    )


@click.command()
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the log start offset.")
@click.option(
    "--offset",
    type=click.IntRange(min=0),
    default=None,
    help="Start at this offset (needs --partition).",
)
@click.option(
    "--partition", type=click.IntRange(min=0), default=None, help="Read only this partition."
)
@click.option(
    "--max-messages", type=click.IntRange(min=1), default=None, help="Exit after this many records."
)
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="Exit when no record arrives for this long.",
)
@click.option("--print-offset", is_flag=True, help="Print PARTITION:OFFSET:VALUE.")
@click.option("--print-key", is_flag=True, help="Print KEY<TAB>VALUE.")
@click.option("--group", default=None, help="Join this consumer group and commit offsets.")
@client_options
@json_option
@reports_errors
def consume(
    *,
    topic: str,
    from_beginning: bool,
    offset: int | None,
    partition: int | None,
    max_messages: int | None,
    timeout_ms: int,
    print_offset: bool,
    print_key: bool,
    group: str | None,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Print the records of TOPIC, one value a line (kafka-console-consumer).

    Starts at the end unless --from-beginning or --offset; without --group it reads every
    partition (or --partition) itself, with --group it joins the group, which assigns the
    partitions, and commits what it printed. Prints `Processed a total of N messages` on
    stderr.

    --json (stdout): JSON Lines, one {"topic", "partition", "offset", "timestamp", "key",
    "value"} per record; key and value as UTF-8 text (invalid bytes replaced) or null.
    """
    if offset is not None and partition is None:
        raise ClientError("--offset needs --partition")
    if offset is not None and from_beginning:
        raise ClientError("--offset and --from-beginning exclude each other")
    options = ConsumeOptions(
        topic=topic,
        partition=partition,
        from_beginning=from_beginning,
        offset=offset,
        max_messages=max_messages,
        idle_timeout_ms=timeout_ms,
        group=group,
    )
    count = 0
    for record in consume_records(client, options):
        count += 1
        if as_json:
            click.echo(record_json(record))
        else:
            click.echo(record_text(record, print_offset=print_offset, print_key=print_key))
    click.echo(f"Processed a total of {count} messages", err=True)


# offsets


@click.command("get-offsets")
@click.argument("topic")
@click.option(
    "--time",
    "time_spec",
    default="latest",
    show_default=True,
    metavar="earliest|latest|MS",
    help="latest: the HWM; earliest: the log start offset; MS: the first offset "
    "with a timestamp >= MS (-1 if none).",
)
@click.option("--partition", type=click.IntRange(min=0), default=None)
@client_options
@json_option
@reports_errors
def get_offsets(
    topic: str, time_spec: str, partition: int | None, client: ClientSettings, as_json: bool
) -> None:
    """Print `topic:partition:offset` per partition of TOPIC (kafka-get-offsets).

    --json: [{"topic", "partition", "offset"}]
    """
    timestamp = parse_offset_time(time_spec)
    found = list_offsets(client, topic, timestamp=timestamp, partition=partition)
    if as_json:
        echo_json([{"topic": topic, "partition": p, "offset": o} for p, o in found])
        return
    for number, offset in found:
        click.echo(f"{topic}:{number}:{offset}")


@click.command("delete-records")
@click.argument("topic")
@click.option("--partition", type=click.IntRange(min=0), required=True)
@click.option(
    "--offset",
    type=click.IntRange(min=-1),
    required=True,
    help="Delete the records below this offset; -1: below the HWM.",
)
@client_options
@json_option
@reports_errors
def delete_records_command(
    topic: str, partition: int, offset: int, client: ClientSettings, as_json: bool
) -> None:
    """Move the log start offset of one partition (kafka-delete-records).

    Prints `partition: TOPIC-PARTITION\tlow_watermark: N`, N the new log start offset.

    --json: {"topic", "partition", "low_watermark"}
    """
    low = delete_records(client, topic, partition=partition, offset=offset)
    if as_json:
        echo_json({"topic": topic, "partition": partition, "low_watermark": low})
    else:
        click.echo(f"partition: {topic}-{partition}\tlow_watermark: {low}")


def register_client_commands(group: click.Group) -> None:
    """Add topics, produce, consume, get-offsets and delete-records to `group`."""
    for command in (topics, produce, consume, get_offsets, delete_records_command):
        group.add_command(command)
