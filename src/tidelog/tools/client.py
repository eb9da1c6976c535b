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
- Kafka's tools' spellings work too (tools/kafka_spellings.py): `--topic` for the TOPIC
  argument, `--property KEY=VALUE` for the console tools' flags, and `topics --create`,
  `--describe`, `--alter`, `--list`, `--delete` for the topics commands.
- The Kafka-format lines are plain text, byte for byte; rich is used only for `--table`.
- Expected failures (`ClientError`) print `error: ...` on stderr and exit 1, never a
  traceback; click's own usage errors exit 2.
- `consume` follows the log as kafka-console-consumer does; SIGINT and SIGTERM (caught only
  while it runs) end it as --max-messages and --timeout-ms do: commit, `Processed a total
  of N messages` on stderr, exit 0.
- This module prints; `client_kafka`, `client_records` and `client_status` do the asking.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, fields
from types import FrameType
from typing import Any, BinaryIO, Final

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
    topic_configs_of,
)
from tidelog.tools.client_options import (
    client_options,
    consumer_property_option,
    json_option,
    producer_property_option,
    reports_errors,
)
from tidelog.tools.client_properties import ClientProperties
from tidelog.tools.client_records import (
    NO_TIMESTAMP_TYPE,
    ConsumedRecord,
    ConsumeOptions,
    Header,
    HeaderFormat,
    ProduceOptions,
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
from tidelog.tools.kafka_spellings import (
    TOPICS_VERBS,
    KafkaTopicsGroup,
    ProducerProperties,
    consumer_layout,
    producer_properties,
    property_option,
    topic_argument,
    verbs_epilog,
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

LINE_BYTES_MAX_DEFAULT: Final = 1024 * 1024
"""The longest stdin line `produce` sends as one record, unless --max-line-bytes."""
LINE_BYTES_MAX: Final = 2**31 - 1
"""The largest --max-line-bytes: a record's size is an INT32 in Kafka's protocol."""
SKIPPED_CHUNK_BYTES: Final = 64 * 1024
"""How much of a refused long line is read at a time to skip it."""
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
"""The signals that end `consume` cleanly (commit, count, exit 0)."""

TABLE_WIDTH_PIPED: Final = 200
"""The width of a `--table` written to a pipe or file."""


def echo_json(value: object) -> None:
    click.echo(json.dumps(value, sort_keys=False))


# topics


@click.group(
    cls=KafkaTopicsGroup,
    epilog=verbs_epilog(
        "kafka-topics",
        TOPICS_VERBS,
        "tidelog topics --create --topic t --partitions 3 --replication-factor 3",
    ),
)
def topics() -> None:
    """Create, list, describe and delete topics (kafka-topics)."""


@topics.command("create")
@topic_argument(name="name")
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
    """Create topic TOPIC. Prints `Created topic TOPIC.`

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
@topic_argument(name="name")
@client_options
@json_option
@reports_errors
def topics_delete(name: str, client: ClientSettings, as_json: bool) -> None:
    """Delete topic TOPIC. Prints `Deleted topic TOPIC.`

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
    modes: dict[str, str] | None = None,
) -> Iterator[str]:
    """kafka-topics --describe's lines, with each topic's replication mode when known; per
    replica lines when `statuses` is not None."""
    by_topic: dict[str, list[PartitionMetadata]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(p)
    for topic, members in by_topic.items():
        factor = len(members[0].replicas) if members else 0
        mode = (modes or {}).get(topic)
        yield f"Topic: {topic}\tPartitionCount: {len(members)}\tReplicationFactor: {factor}" + (
            "" if mode is None else f"\tReplicationMode: {mode}"
        )
        for p in members:
            yield kafka_partition_line(p)
            if statuses is None:
                continue
            for node_id in p.replicas:
                yield replica_line(node_id, statuses.get((p.topic, p.partition, node_id)))


def describe_json(
    partitions: list[PartitionMetadata],
    statuses: dict[tuple[str, int, int], ReplicaStatus] | None,
    modes: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in partitions:
        row: dict[str, Any] = {
            "topic": p.topic,
            "partition": p.partition,
            "replication_mode": (modes or {}).get(p.topic),
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
@topic_argument(name="name", required=False)
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
    """Describe topic TOPIC (or every topic), one line per partition as kafka-topics does:

    \b
    Topic: t	PartitionCount: 1	ReplicationFactor: 3	ReplicationMode: quorum
        Topic: t	Partition: 0	Leader: 1	Replicas: 1,2,3	Isr: 1,2,3

    ReplicationMode is the topic's replication.mode: quorum (the HWM is what a majority
    holds) or isr (the minimum log end over the in-sync replicas the controller committed;
    Isr is that committed ISR).

    With a running local cluster (--data-dir, $TIDELOG_DATA_DIR or ./data), each
    partition line is followed by one line per replica from its broker's admin /status:
    Role, Epoch, LogStartOffset, HighWatermark, LogEndOffset (`Status: unknown` when that
    broker does not answer). --under-replicated-partitions, --unavailable-partitions and
    --under-min-isr-partitions keep only such partitions, as kafka-topics does.

    --json: [{"topic", "partition", "replication_mode", "leader", "replicas": [..], "isr": [..],
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
    modes = replication_modes(client, sorted({p.topic for p in partitions}))
    if as_json:
        echo_json(describe_json(partitions, statuses, modes))
    elif table:
        render_table(partitions, statuses)
    else:
        for line in describe_lines(partitions, statuses, modes):
            click.echo(line)


def replication_modes(client: ClientSettings, topics: list[str]) -> dict[str, str]:
    """Each topic's replication.mode (quorum or isr); {} when DescribeConfigs is refused."""
    try:
        found = topic_configs_of(client, topics, ["replication.mode"])
    except ClientError:
        return {}
    return {topic: configs["replication.mode"] for topic, configs in found.items() if configs}


# produce and consume


def parse_header(text: str) -> Header:
    """(key, value) of one `--header KEY=VALUE`, split at the first "="; ClientError when
    there is no "=" or no key. The value keeps the bytes given on the command line."""
    key, found, value = text.partition("=")
    if not found or not key:
        raise ClientError(f"bad --header {text!r} (want KEY=VALUE, with a KEY)")
    try:
        key.encode()
    except UnicodeEncodeError:
        raise ClientError(f"bad --header {text!r}: its key is not UTF-8 text") from None
    return key, utf8(value)


def read_lines(stream: BinaryIO, *, line_bytes_max: int) -> Iterator[bytes | ClientError]:
    """Lines of a binary stream without their line ending ("\n" or "\r\n"). A line longer
    than `line_bytes_max` comes as the error that refuses it, and is skipped without ever
    being held whole."""
    # Room for the longest line and its "\r\n": anything longer is refused.
    while line := stream.readline(line_bytes_max + 2):
        text = line.removesuffix(b"\n").removesuffix(b"\r")
        if len(text) <= line_bytes_max:
            yield text
            continue
        while not line.endswith(b"\n") and (line := stream.readline(SKIPPED_CHUNK_BYTES)):
            pass  # the rest of the long line
        yield ClientError(
            f"longer than --max-line-bytes ({line_bytes_max} bytes); raise --max-line-bytes "
            "to send it"
        )


@click.command()
@topic_argument()
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
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="KEY=VALUE",
    help="A header on every record; repeat for more (kcat's -H).",
)
@click.option(
    "--timestamp",
    "timestamp_ms",
    type=click.IntRange(min=0),
    default=None,
    metavar="MS",
    help="The records' CreateTime, in ms since the epoch (default: now, at each send).",
)
@click.option(
    "--max-line-bytes",
    "line_bytes_max",
    metavar="N",
    type=click.IntRange(min=1, max=LINE_BYTES_MAX),
    default=LINE_BYTES_MAX_DEFAULT,
    show_default=True,
    help="The longest line sent as a record; a longer one fails (the topic's "
    "max.message.bytes still applies).",
)
@property_option
@producer_property_option
@client_options
@json_option
@reports_errors
def produce(
    *,
    topic: str,
    acks: str,
    key_separator: str | None,
    partition: int | None,
    headers: tuple[str, ...],
    timestamp_ms: int | None,
    line_bytes_max: int,
    properties: tuple[str, ...],
    producer_config: ClientProperties,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Produce each line of stdin as one record of TOPIC (kafka-console-producer).

    Every record carries the --header headers and the --timestamp. Prints `N records
    produced` on stderr, and each failed line's or send's error; exits 1 if any record
    failed (the others are sent).

    \b
    --property KEY=VALUE, kafka-console-producer's (true/false or text):
    parse.key=true        each line is KEY<key.separator>VALUE (--key-separator S is
                          parse.key=true with key.separator=S)
    key.separator=S       default a tab; only with parse.key=true, as in Kafka
    parse.headers=true    each line starts with H1:V1,H2:V2<headers.delimiter>
    headers.delimiter=S   default a tab
    headers.separator=S   default ","
    headers.key.separator=S  default ":"
    ignore.error=true     a line without a separator is sent anyway: no key (or no
                          headers), the rest of the line the value

    --json (stdout): {"topic", "produced": N, "failed": N, "errors": [..],
    "last_offsets": {"PARTITION": OFFSET}}
    """
    if key_separator == "":
        raise ClientError("--key-separator must not be empty")
    given = producer_properties(properties)
    options = ProduceOptions(
        topic=topic,
        acks=acks,
        key_separator=line_key_separator(key_separator, given),
        partition=partition,
        headers=tuple(parse_header(text) for text in headers),
        timestamp_ms=timestamp_ms,
        line_bytes_max=line_bytes_max,
        header_format=header_format(given),
        ignore_error=given.ignore_error,
        properties=producer_config,
    )
    lines = read_lines(sys.stdin.buffer, line_bytes_max=line_bytes_max)
    summary = produce_lines(client, options, lines)
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


def line_key_separator(flag: str | None, given: ProducerProperties) -> bytes | None:
    """The separator of each line's key, from --key-separator or parse.key/key.separator;
    None: lines have no key. ClientError when the two spellings disagree."""
    if flag is None:
        return given.key_separator if given.parse_key else None
    if given.parse_key is False:
        raise ClientError("--key-separator and --property parse.key=false exclude each other")
    if given.key_separator_given and given.key_separator != utf8(flag):
        raise ClientError("--key-separator and --property key.separator differ: give one")
    return utf8(flag)


def header_format(given: ProducerProperties) -> HeaderFormat | None:
    """How each line's own headers are laid out (parse.headers=true), else None."""
    if not given.parse_headers:
        return None
    return HeaderFormat(
        given.headers_delimiter, given.headers_separator, given.headers_key_separator
    )


def null_or(data: bytes | None, null: bytes = b"null") -> bytes:
    """`data`, or kafka-console-consumer's null.literal for a missing key, value or header
    value."""
    return null if data is None else data


def joined_headers(
    headers: tuple[Header, ...], *, pair: bytes, null: bytes, separator: bytes = b","
) -> bytes:
    """KEY<pair>VALUE for each header, joined by `separator`; `null` for a null value."""
    return separator.join(key.encode() + pair + null_or(value, null) for key, value in headers)


def timestamp_text(record: ConsumedRecord) -> bytes:
    """kafka-console-consumer's print.timestamp field: `CreateTime:MS`."""
    if record.timestamp_type == NO_TIMESTAMP_TYPE:
        return b"NO_TIMESTAMP"
    return f"{record.timestamp_type}:{record.timestamp}".encode()


@dataclass(frozen=True, slots=True)
class TextLayout:
    """What `record_text` prints: the --print-* flags, and kafka-console-consumer's
    --property settings (print.value, key.separator, headers.separator,
    headers.key.separator, null.literal), its defaults where not given."""

    print_offset: bool = False
    print_key: bool = False
    print_timestamp: bool = False
    print_headers: bool = False
    print_partition: bool = False
    print_value: bool = True
    separator: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_literal: bytes = b"null"

    def flags(self) -> list[str]:
        """The --print-* flags that are on, and --property when a setting differs from the
        default (what --format excludes)."""
        default = TextLayout()
        changed = [
            f.name for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)
        ]
        named = [name for name in changed if name.startswith("print_") and name != "print_value"]
        rest = ["--property"] if len(named) < len(changed) else []
        return [f"--{name.replace('_', '-')}" for name in named] + rest


def record_text(record: ConsumedRecord, layout: TextLayout) -> bytes:
    """One record as kafka-console-consumer 3.x's DefaultMessageFormatter lays it out: its
    fields in its order (CreateTime:MS, Partition:P, Offset:O, headers, key, value) joined
    by key.separator (a tab), null.literal for a missing key, value or header value,
    NO_HEADERS for none."""
    fields: list[bytes] = []
    if layout.print_timestamp:
        fields.append(timestamp_text(record))
    if layout.print_partition:
        fields.append(f"Partition:{record.partition}".encode())
    if layout.print_offset:
        fields.append(f"Offset:{record.offset}".encode())
    if layout.print_headers:
        shown = joined_headers(
            record.headers,
            pair=layout.headers_key_separator,
            null=layout.null_literal,
            separator=layout.headers_separator,
        )
        fields.append(shown if record.headers else b"NO_HEADERS")
    if layout.print_key:
        fields.append(null_or(record.key, layout.null_literal))
    if layout.print_value:
        fields.append(null_or(record.value, layout.null_literal))
    return layout.separator.join(fields)


def record_json(record: ConsumedRecord) -> str:
    def text(data: bytes | None) -> str | None:
        return None if data is None else data.decode("utf-8", errors="replace")

    return json.dumps(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
            "timestamp_type": record.timestamp_type,
            "headers": [[key, text(value)] for key, value in record.headers],
            "key": text(record.key),
            "value": text(record.value),
        }
    )


def utf8(text: str) -> bytes:
    """Text from the command line as bytes: UTF-8, undecodable bytes as they were given."""
    return text.encode(errors="surrogateescape")


def size_text(data: bytes | None) -> bytes:
    """kcat's %K and %S: the size in bytes, -1 for null."""
    return str(-1 if data is None else len(data)).encode()


FORMAT_DIRECTIVES: Final[dict[str, Callable[[ConsumedRecord], bytes]]] = {
    "t": lambda r: r.topic.encode(),
    "p": lambda r: str(r.partition).encode(),
    "o": lambda r: str(r.offset).encode(),
    "k": lambda r: r.key or b"",
    "s": lambda r: r.value or b"",
    "K": lambda r: size_text(r.key),
    "S": lambda r: size_text(r.value),
    "T": lambda r: str(r.timestamp).encode(),
    "h": lambda r: joined_headers(r.headers, pair=b"=", null=b""),
}
"""kcat's -f directives, each a record's field as bytes; null keys and values print empty."""
FORMAT_ESCAPES: Final = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\"}


@dataclass(frozen=True, slots=True)
class RecordFormat:
    """A `--format` string, parsed once: literal bytes and directives, in order."""

    parts: tuple[bytes | Callable[[ConsumedRecord], bytes], ...]

    @classmethod
    def parse(cls, text: str) -> RecordFormat:
        """As kcat parses -f: %X directives, %% a "%", \\n \\t \\r \\\\ escapes (another
        escaped character stands for itself); ClientError naming an unknown directive."""
        parts: list[bytes | Callable[[ConsumedRecord], bytes]] = []
        literal = bytearray()
        chars = iter(text)
        for char in chars:
            following = next(chars, None) if char in "%\\" else None
            if char == "%" and following in FORMAT_DIRECTIVES:
                parts.extend([bytes(literal)] if literal else [])
                parts.append(FORMAT_DIRECTIVES[following])
                literal.clear()
            elif char == "%" and following != "%":
                known = " ".join(f"%{name}" for name in FORMAT_DIRECTIVES)
                what = "a lone % at its end" if following is None else f"unknown %{following}"
                raise ClientError(f"bad --format {text!r}: {what} (known: {known} %%)")
            elif char == "\\" and following is not None:
                literal += FORMAT_ESCAPES.get(following) or utf8(following)
            else:  # a plain character, "%%", or a "\\" at the end
                literal += utf8(char)
        parts.extend([bytes(literal)] if literal else [])
        return cls(tuple(parts))

    def render(self, record: ConsumedRecord) -> bytes:
        return b"".join(part if isinstance(part, bytes) else part(record) for part in self.parts)


def record_renderer(
    format_text: str | None, *, as_json: bool, layout: TextLayout
) -> Callable[[ConsumedRecord], bytes]:
    """What `consume` prints of each record (with its line ending); ClientError when
    --format is given with --json or a --print-* flag."""
    if format_text is not None:
        given = ["--json"] * as_json + layout.flags()
        if given:
            raise ClientError(f"--format and {given[0]} exclude each other (the format says all)")
        return RecordFormat.parse(format_text).render
    if as_json:
        return lambda record: record_json(record).encode() + b"\n"
    if not any(getattr(layout, f.name) for f in fields(layout) if f.name.startswith("print_")):
        return lambda record: b""  # no field at all: Kafka's formatter prints nothing
    return lambda record: record_text(record, layout) + b"\n"


def text_layout(flags: dict[str, bool], properties: tuple[str, ...]) -> TextLayout:
    """The layout of the --print-* `flags` that are on and the --property settings;
    ClientError when a flag is on that a property turns off."""
    settings = consumer_layout(properties)
    for name, on in flags.items():
        if on and settings.get(name) is False:
            flag = "--" + name.replace("_", "-")
            raise ClientError(f"{flag} and --property {name.replace('_', '.')}=false disagree")
        if on:
            settings[name] = True
    return TextLayout(**settings)


def start_offset(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> int | str | None:
    """--offset as kafka-console-consumer takes it: a number, earliest or latest."""
    if value is None or value in ("earliest", "latest"):
        return value
    if value.isdigit():
        return int(value)
    raise click.BadParameter(f"{value!r} is not a number (0 or more), earliest or latest")


def check_start(*, offset: int | str | None, partition: int | None, from_beginning: bool) -> None:
    """ClientError when --offset comes without --partition, or with --from-beginning."""
    if offset is not None and partition is None:
        raise ClientError("--offset needs --partition")
    if offset is not None and from_beginning:
        raise ClientError("--offset and --from-beginning exclude each other")


@contextmanager
def stopped_by_signals() -> Iterator[threading.Event]:
    """An event the first SIGINT or SIGTERM sets instead of ending the process, while the
    block runs; a second one acts as it would have without (Ctrl-C twice aborts at once).
    Outside the main thread, where Python cannot catch signals, the event is never set."""
    stopping = threading.Event()
    previous: dict[int, Any] = {}

    def on_signal(number: int, _frame: FrameType | None) -> None:
        stopping.set()
        signal.signal(number, previous[number])

    if threading.current_thread() is threading.main_thread():
        for stop_signal in STOP_SIGNALS:
            previous[stop_signal] = signal.getsignal(stop_signal) or signal.SIG_DFL
            signal.signal(stop_signal, on_signal)
    try:
        yield stopping
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def processed_line(count: int) -> str:
    return f"Processed a total of {count} messages"


def print_records(
    records: Generator[ConsumedRecord, None, None], render: Callable[[ConsumedRecord], bytes]
) -> int:
    """Print each record as `render` makes it; how many were printed. The generator is
    closed on the way out whatever happens, so a group commits what was printed. A failure
    after some records were printed says how many first, as Kafka's console consumer does."""
    count = 0
    try:
        with closing(records):
            for record in records:
                click.echo(render(record), nl=False)
                count += 1
    except BrokenPipeError:  # a reader that went away: click's main exits 1 quietly
        click.echo("Unable to write to standard out, closing consumer.", err=True)
        click.echo(processed_line(count), err=True)
        raise
    except ClientError:
        if count:
            click.echo(processed_line(count), err=True)
        raise
    return count


@click.command()
@topic_argument()
@click.option("--from-beginning", is_flag=True, help="Start at the log start offset.")
@click.option(
    "--offset",
    default=None,
    callback=start_offset,
    metavar="N|earliest|latest",
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
    default=None,
    help="Exit when no record arrives for this long (default: follow until Ctrl-C).",
)
@click.option("--print-partition", is_flag=True, help="Print Partition:P<TAB> before the offset.")
@click.option("--print-offset", is_flag=True, help="Print Offset:O<TAB> before the headers.")
@click.option("--print-key", is_flag=True, help="Print KEY<TAB>VALUE.")
@click.option("--print-timestamp", is_flag=True, help="Print CreateTime:MS<TAB> first.")
@click.option(
    "--print-headers", is_flag=True, help="Print K1:V1,K2:V2<TAB> (or NO_HEADERS) before the key."
)
@click.option(
    "--format",
    "format_text",
    default=None,
    metavar="FMT",
    help="Print each record as kcat -f does (see below); excludes --json and --print-*.",
)
@click.option("--group", default=None, help="Join this consumer group and commit offsets.")
@property_option
@consumer_property_option
@client_options
@json_option
@reports_errors
def consume(
    *,
    topic: str,
    from_beginning: bool,
    offset: int | str | None,
    partition: int | None,
    max_messages: int | None,
    timeout_ms: int | None,
    print_partition: bool,
    print_offset: bool,
    print_key: bool,
    print_timestamp: bool,
    print_headers: bool,
    format_text: str | None,
    group: str | None,
    properties: tuple[str, ...],
    consumer_config: ClientProperties,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Print the records of TOPIC, one value a line, and follow it (kafka-console-consumer).

    Starts at the end unless --from-beginning or --offset; without --group it reads every
    partition (or --partition) itself, with --group it joins the group, which assigns the
    partitions, and commits what it printed. Runs until Ctrl-C (SIGINT) or SIGTERM,
    --max-messages or --timeout-ms, then prints `Processed a total of N messages` on stderr
    and exits 0. An --offset below the log start or past the end is warned about on stderr
    (with the partition's earliest and latest offsets) and replaced by the latest, as
    kafka-console-consumer's auto.offset.reset=latest does.

    \b
    The --print-* fields come in kafka-console-consumer's order:
    CreateTime:MS<TAB>Partition:P<TAB>Offset:O<TAB>K1:V1,K2:V2<TAB>KEY<TAB>VALUE

    \b
    --property KEY=VALUE, kafka-console-consumer's: print.timestamp, print.partition,
    print.offset, print.headers, print.key, print.value (true/false; print.value is true
    unless turned off), key.separator (between fields, default a tab), headers.separator
    (","), headers.key.separator (":"), null.literal ("null").

    \b
    --format FMT (kcat's -f), nothing added at the end:
    %t topic  %p partition  %o offset  %k key  %s value  %T timestamp (ms)
    %h headers (k1=v1,k2=v2)  %K key size  %S value size (-1: null)  %% a %
    \\n \\t \\r escapes; a null key or value prints nothing.
    E.g. --format '%t [%p] @%o: %k=%s\\n'

    --json (stdout): JSON Lines, one {"topic", "partition", "offset", "timestamp",
    "timestamp_type", "headers": [[KEY, VALUE], ..], "key", "value"} per record; key, value
    and header values as UTF-8 text (invalid bytes replaced by U+FFFD) or null.
    """
    flags = {
        "print_partition": print_partition,
        "print_offset": print_offset,
        "print_key": print_key,
        "print_timestamp": print_timestamp,
        "print_headers": print_headers,
    }
    layout = text_layout(flags, properties)
    render = record_renderer(format_text, as_json=as_json, layout=layout)
    check_start(offset=offset, partition=partition, from_beginning=from_beginning)
    options = ConsumeOptions(
        topic=topic,
        partition=partition,
        from_beginning=from_beginning or offset == "earliest",
        offset=offset if isinstance(offset, int) else None,
        max_messages=max_messages,
        idle_timeout_ms=timeout_ms,
        group=group,
        properties=consumer_config,
    )
    with stopped_by_signals() as stopping:
        records = consume_records(client, options, stop=stopping.is_set, warn=echo_warning)
        count = print_records(records, render)
    click.echo(processed_line(count), err=True)


def echo_warning(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


# offsets


@click.command("get-offsets")
@topic_argument()
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
@topic_argument()
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
