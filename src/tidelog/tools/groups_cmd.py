"""`tidelog groups list|describe|reset-offsets`: consumer groups, their offsets and lag, as
`kafka-consumer-groups` shows them, through kafka-python's admin client only.

Rules of this file:
- LOG-END-OFFSET is the HWM (what `kafka-consumer-groups` calls it), and
  LAG = DATA-END - max(committed, log start offset), never negative, where DATA-END is the
  offset after the last data record below the HWM: the control batches at the top of the
  log (a new leader appends one at the start of its epoch) do not count, so a group that
  read every data record has lag 0, even after failovers that came after it stopped.
  Control batches between data records count, as in Kafka. `-` where no offset is
  committed (or no member holds the partition). The same lag as the broker's metrics and
  live page (`server/snapshot.py`).
- DATA-END is found by reading the top of each partition the group is behind the HWM in:
  the last LAG_READ_MAX offsets below the HWM at most, from where the group is, by one
  consumer (no group; it skips control batches, its position going past them) for at most
  LAG_READ_TIMEOUT_S. DATA-END is after the last record it found below the HWM; without
  one, where it started reading (where the group is: lag 0; else what lies below counts).
  A partition not read to its HWM in time counts to the HWM (control batches too), and so
  does every partition when the read fails (a user that may describe the group but not
  read the topic, say).
- reset-offsets is a dry run unless `--execute`, and is refused while the group has active
  members (the coordinator would refuse the commit too). New offsets are clamped to
  [log start offset, HWM], as Kafka clamps them.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from typing import Any, Final

import click
from kafka import KafkaConsumer
from kafka.errors import KafkaError, for_code

from tidelog.server.snapshot import group_lag
from tidelog.tools.client_kafka import (
    KAFKA_CLIENT_ID,
    ClientError,
    ClientSettings,
    OffsetAndMetadata,
    OffsetSpec,
    TopicPartition,
    ask_admin,
    topic_partitions,
)
from tidelog.tools.client_options import client_options, json_option, reports_errors
from tidelog.tools.kafka_spellings import (
    GROUPS_VERBS,
    KafkaGroupsGroup,
    group_argument,
    verbs_epilog,
)

INACTIVE_STATES = ("Empty", "Dead")
ERROR_TEXT: Final = re.compile(r"\[Error (-?\d+)\]")
"""How kafka-python 3 writes a group's error code in the text it gives instead of the error."""
LAG_READ_MAX: Final = 64
"""The most offsets below the HWM `groups describe` reads of a partition to find its last
data record (see the rules)."""
LAG_READ_FETCH_BYTES: Final = 64 * 1024
"""What one fetch of that read asks of a partition (a larger batch still comes whole)."""
LAG_READ_TIMEOUT_S: Final = 2.0
"""How long `groups describe` reads those partitions at most."""
LAG_READ_POLL_MS: Final = 100
"""One poll of that read, and the longest a fetch of it waits at the HWM."""

Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...]
    group_instance_id: str | None = None  # a static member's (KIP-345)


@dataclass(frozen=True, slots=True)
class OffsetRow:
    group: str
    topic: str
    partition: int
    current_offset: int | None
    log_start_offset: int
    log_end_offset: int
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None


@dataclass(frozen=True, slots=True)
class GroupInfo:
    group: str
    state: str
    protocol_type: str
    assignment_strategy: str
    coordinator: int
    members: tuple[Member, ...]


def lag_of(committed: int | None, log_start: int, data_end: int) -> int | None:
    """data_end - max(committed, log start), never negative; None when nothing is
    committed. `data_end` is the offset after the last data record below the HWM (the
    HWM itself when that is not known)."""
    if committed is None:
        return None
    return group_lag(committed, log_start_offset=log_start, data_end=data_end)


def to_read(committed: int | None, log_start: int, hwm: int) -> tuple[int, int] | None:
    """[start, HWM) to read to find the last data record below the HWM: at most the last
    LAG_READ_MAX offsets, from where the group is (max(committed, log start)) on; None
    when there is nothing to read (no offset committed, or the group is at the HWM)."""
    if committed is None:
        return None
    start = max(committed, log_start, hwm - LAG_READ_MAX)
    return (start, hwm) if start < hwm else None


def reader_settings(admin: Any) -> dict[str, Any]:
    """The admin client's bootstrap and security settings, for a consumer that reads from
    the same brokers the same way (kafka-python keeps them in its `config`)."""
    config: dict[str, Any] = admin.config
    return {
        key: value
        for key, value in config.items()
        if key in KafkaConsumer.DEFAULT_CONFIG
        and (key in ("bootstrap_servers", "security_protocol") or key.startswith(("ssl_", "sasl_")))
    }


def data_ends(admin: Any, spans: dict[Key, tuple[int, int]]) -> dict[Key, int]:
    """For each partition of `spans` ({key: (start, HWM)}), the offset after the last data
    record in [start, HWM), `start` when there is none; the HWM when it was not read to
    the HWM within LAG_READ_TIMEOUT_S. One consumer reads them all (no group, nothing
    committed); it skips control batches, its position going past them."""
    if not spans:
        return {}
    partitions = {TopicPartition(topic, p): (topic, p) for topic, p in spans}
    consumer = KafkaConsumer(
        **reader_settings(admin),
        client_id=KAFKA_CLIENT_ID,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=LAG_READ_POLL_MS,
        max_partition_fetch_bytes=LAG_READ_FETCH_BYTES,
        allow_auto_create_topics=False,
    )
    try:
        consumer.assign(list(partitions))
        for tp, key in partitions.items():
            consumer.seek(tp, spans[key][0])
        return read_data_ends(consumer, partitions, spans)
    except KafkaError:  # not allowed to read, say: what it did not read counts
        return {key: hwm for key, (_, hwm) in spans.items()}
    finally:
        consumer.close()


def read_data_ends(
    consumer: Any, partitions: dict[Any, Key], spans: dict[Key, tuple[int, int]]
) -> dict[Key, int]:
    """`data_ends`' reading: poll until every partition's position reached its HWM, or the
    time is up."""
    ends = {key: start for key, (start, _) in spans.items()}
    pending = set(partitions)
    deadline = time.monotonic() + LAG_READ_TIMEOUT_S
    while pending and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=LAG_READ_POLL_MS).items():
            key = partitions[tp]
            below = [record.offset for record in records if record.offset < spans[key][1]]
            if below:
                ends[key] = max(ends[key], max(below) + 1)
        pending = {tp for tp in pending if consumer.position(tp) < spans[partitions[tp]][1]}
    for tp in pending:  # not read to its HWM in time: what it did not read counts
        ends[partitions[tp]] = spans[partitions[tp]][1]
    return ends


def assigned_partitions(member: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    assignment = member.get("member_assignment")
    if not assignment or not isinstance(assignment, dict):
        return ()
    pairs = [
        (str(topic["topic"]) if isinstance(topic, dict) else str(topic[0]), int(p))
        for topic in assignment.get("assigned_partitions") or assignment.get("assignment") or []
        for p in (topic["partitions"] if isinstance(topic, dict) else topic[1])
    ]
    return tuple(sorted(pairs))


def describe_group(admin: Any, group: str) -> GroupInfo:
    found = admin.describe_groups([group])[group]
    error = found.get("error")
    # kafka-python 3 gives a group's error as its text ("[Error 16] NotCoordinatorError:
    # ..."); a group that does not exist (GROUP_ID_NOT_FOUND, DescribeGroups v6+) is
    # described as Dead, as before v6, and said so by the caller.
    if isinstance(error, str) and error and "GroupIdNotFoundError" not in error:
        # Raised from the error it names, so a retriable one (NOT_COORDINATOR while a new
        # coordinator is elected, COORDINATOR_LOAD_IN_PROGRESS) is asked again (ask_admin).
        raise ClientError(f"group '{group}': {error}") from error_of_text(error)
    if is_error(error):
        raise ClientError(f"group '{group}': {type(error).__name__}") from error
    members = tuple(
        Member(
            member_id=str(m["member_id"]),
            client_id=str(m["client_id"]),
            host=str(m["client_host"]),
            partitions=assigned_partitions(m),
            group_instance_id=m.get("group_instance_id"),
        )
        for m in found.get("members", [])
    )
    return GroupInfo(
        group=group,
        state=str(found["group_state"]),
        protocol_type=str(found.get("protocol_type", "")),
        assignment_strategy=str(found.get("protocol_data", "")),
        coordinator=coordinator_of(admin, group),
        members=members,
    )


def coordinator_of(admin: Any, group: str) -> int:
    """The coordinator's node id, as kafka-python cached it while describing the group
    (its admin client has no public call for it); -1 when unknown."""
    cluster = getattr(getattr(admin, "_manager", None), "cluster", None)
    found = cluster.get_coordinator(group) if cluster is not None else None
    return -1 if found is None else int(found)


def error_of_text(text: str) -> Exception | None:
    """The kafka-python error that kafka-python's text of it (`[Error 16] NotCoordinatorError:
    ...`) names, or None."""
    found = ERROR_TEXT.match(text)
    return None if found is None else for_code(int(found.group(1)))()


def committed_offsets(admin: Any, group: str) -> dict[tuple[str, int], int]:
    found = admin.list_group_offsets({group: None})
    offsets = found.get(group, found) if isinstance(found, dict) else {}
    return {
        (tp.topic, tp.partition): int(meta.offset)
        for tp, meta in offsets.items()
        if int(meta.offset) >= 0
    }


def watermarks(admin: Any, keys: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    """(log start offset, HWM) of each partition."""
    if not keys:
        return {}
    tps = [TopicPartition(topic, p) for topic, p in keys]
    earliest = admin.list_partition_offsets(dict.fromkeys(tps, OffsetSpec.EARLIEST))
    latest = admin.list_partition_offsets(dict.fromkeys(tps, OffsetSpec.LATEST))
    return {
        (tp.topic, tp.partition): (int(earliest[tp].offset), int(latest[tp].offset)) for tp in tps
    }


def offset_rows(admin: Any, info: GroupInfo) -> list[OffsetRow]:
    committed = committed_offsets(admin, info.group)
    holders = {key: m for m in info.members for key in m.partitions}
    keys = sorted(set(committed) | set(holders))
    marks = watermarks(admin, keys)
    spans = {}
    for key in keys:
        span = to_read(committed.get(key), *marks[key])
        if span is not None:
            spans[key] = span
    ends = data_ends(admin, spans)
    rows = []
    for key in keys:
        start, hwm = marks[key]
        member = holders.get(key)
        current = committed.get(key)
        rows.append(
            OffsetRow(
                group=info.group,
                topic=key[0],
                partition=key[1],
                current_offset=current,
                log_start_offset=start,
                log_end_offset=hwm,
                lag=lag_of(current, start, ends.get(key, hwm)),
                consumer_id=member.member_id if member else None,
                host=member.host if member else None,
                client_id=member.client_id if member else None,
            )
        )
    return rows


def print_columns(header: list[str], rows: list[list[object]]) -> None:
    """Space-aligned columns, `-` for a missing value (kafka-consumer-groups' layout)."""
    cells = [header] + [["-" if value is None else str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        click.echo(
            " ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


OFFSET_COLUMNS: Final = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-START-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
]
"""`groups describe`'s columns: kafka-consumer-groups' and rpk's LOG-START-OFFSET."""


def print_offset_rows(rows: list[OffsetRow]) -> None:
    print_columns(OFFSET_COLUMNS, [list(asdict(row).values()) for row in rows])


@click.group(
    cls=KafkaGroupsGroup,
    epilog=verbs_epilog(
        "kafka-consumer-groups", GROUPS_VERBS, "tidelog groups --describe --group billing"
    ),
)
def groups() -> None:
    """Consumer groups: list, describe (offsets and lag), reset offsets."""


@groups.command("list")
@client_options
@json_option
@reports_errors
def groups_list(client: ClientSettings, as_json: bool) -> None:
    """Print every consumer group's id (--json: [{"group", "protocol_type", "state"}])."""
    listed = ask_admin(client, lambda admin: admin.list_groups(), needs="consumer groups")
    found = sorted(
        (str(g["group_id"]), str(g.get("protocol_type", "")), str(g.get("group_state", "")))
        for g in listed
    )
    if as_json:
        click.echo(json.dumps([{"group": g, "protocol_type": t, "state": s} for g, t, s in found]))
        return
    for group, _, _ in found:
        click.echo(group)


@groups.command("describe")
@group_argument()
@click.option("--members", "view", flag_value="members", help="One line per member.")
@click.option("--state", "view", flag_value="state", help="The group's state and coordinator.")
@client_options
@json_option
@reports_errors
def groups_describe(group: str, view: str | None, client: ClientSettings, as_json: bool) -> None:
    """Committed offsets, log start, HWM (LOG-END-OFFSET) and lag per partition of GROUP."""

    def ask(admin: Any) -> tuple[GroupInfo, list[OffsetRow]]:
        info = describe_group(admin, group)
        return info, offset_rows(admin, info) if view is None else []

    info, rows = ask_admin(client, ask, needs="consumer groups")
    if info.state == "Dead" and not rows:
        raise ClientError(f"consumer group '{group}' does not exist")
    if as_json:
        click.echo(json.dumps(describe_json(info, rows, view)))
        return
    if not info.members and view != "state":
        click.echo(f"Consumer group '{group}' has no active members.", err=True)
    if view == "state":
        print_columns(
            ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
            [
                [
                    group,
                    f"({info.coordinator})",
                    info.assignment_strategy or None,
                    info.state,
                    len(info.members),
                ]
            ],
        )
    elif view == "members":
        print_columns(
            ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
            [
                [group, m.member_id, m.group_instance_id, m.host, m.client_id, len(m.partitions)]
                for m in info.members
            ],
        )
    else:
        print_offset_rows(rows)


def describe_json(info: GroupInfo, rows: list[OffsetRow], view: str | None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "group": info.group,
        "state": info.state,
        "protocol_type": info.protocol_type,
        "assignment_strategy": info.assignment_strategy,
        "coordinator": info.coordinator,
        "members": [
            {**asdict(m), "partitions": [list(p) for p in m.partitions]} for m in info.members
        ],
    }
    if view is None:
        result["offsets"] = [asdict(row) for row in rows]
    return result


@groups.command("reset-offsets")
@group_argument()
@click.option("--topic", required=True, help="TOPIC or TOPIC:P,P,... (the partitions to reset).")
@click.option("--to-earliest", is_flag=True, help="To the log start offset.")
@click.option("--to-latest", is_flag=True, help="To the HWM.")
@click.option("--to-offset", type=click.IntRange(min=0), default=None, help="To offset N.")
@click.option("--shift-by", type=int, default=None, help="Move the committed offset by N.")
@click.option("--execute", is_flag=True, help="Commit the new offsets (default: a dry run).")
@client_options
@json_option
@reports_errors
def groups_reset_offsets(
    group: str,
    *,
    topic: str,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    shift_by: int | None,
    execute: bool,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Plan (and with --execute, commit) new offsets for GROUP on TOPIC."""
    chosen = [to_earliest, to_latest, to_offset is not None, shift_by is not None]
    if sum(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-offset, --shift-by"
        )
    name, _, listed = topic.partition(":")

    def plan(admin: Any) -> dict[tuple[str, int], int]:
        info = describe_group(admin, group)
        if info.state not in INACTIVE_STATES:
            raise ClientError(
                f"assignments can only be reset if the group '{group}' is inactive, "
                f"but the current state is {info.state}"
            )
        numbers = parse_partitions(admin, name, listed)
        keys = [(name, p) for p in numbers]
        marks = watermarks(admin, keys)
        committed = committed_offsets(admin, group)
        planned = {}
        for key in keys:
            start, hwm = marks[key]
            if to_earliest:
                target = start
            elif to_latest:
                target = hwm
            elif to_offset is not None:
                target = to_offset
            else:
                assert shift_by is not None
                target = committed.get(key, start) + shift_by
            planned[key] = min(max(target, start), hwm)
        return planned

    # Planned once, committed as absolute offsets: a retried commit cannot shift twice.
    planned = ask_admin(client, plan, needs="consumer groups")
    if execute:
        offsets = {
            TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in planned.items()
        }
        ask_admin(
            client,
            lambda admin: check_altered(admin.alter_group_offsets(group, offsets)),
            needs="consumer groups",
        )
    if as_json:
        click.echo(
            json.dumps(
                {
                    "group": group,
                    "executed": execute,
                    "offsets": [
                        {"topic": t, "partition": p, "new_offset": o}
                        for (t, p), o in planned.items()
                    ],
                }
            )
        )
        return
    print_columns(
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        [[group, t, p, o] for (t, p), o in planned.items()],
    )
    if not execute:
        click.echo("(dry run: nothing committed; add --execute to commit)", err=True)


@groups.command("delete")
@click.argument("group_ids", nargs=-1, metavar="GROUP...")
@click.option(
    "--group",
    "group_options",
    multiple=True,
    metavar="GROUP",
    help="A group to delete (Kafka's spelling of GROUP); repeat for more.",
)
@client_options
@json_option
@reports_errors
def groups_delete(
    group_ids: tuple[str, ...],
    group_options: tuple[str, ...],
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Delete empty groups and their committed offsets (kafka-consumer-groups --delete)."""
    group_ids = (*group_ids, *group_options)
    if not group_ids:
        raise click.UsageError("name the groups: GROUP... or --group GROUP (repeatable)")
    results = ask_admin(
        client, lambda admin: admin.delete_groups(list(group_ids)), needs="DeleteGroups"
    )
    pairs = results.items() if isinstance(results, dict) else results  # kafka-python's shapes
    outcome = {group: error_name(error) for group, error in pairs}
    if as_json:
        click.echo(json.dumps(outcome))
    else:
        for group, error in outcome.items():
            if error is None:
                click.echo(f"Deletion of group '{group}' was successful.")
            else:
                click.echo(f"Deletion of group '{group}' failed: {error}", err=True)
    if any(outcome.values()):
        raise SystemExit(1)


@groups.command("delete-offsets")
@group_argument()
@click.option("--topic", required=True, help="TOPIC or TOPIC:P,P,... (the offsets to delete).")
@client_options
@json_option
@reports_errors
def groups_delete_offsets(group: str, topic: str, client: ClientSettings, as_json: bool) -> None:
    """Delete GROUP's committed offsets of TOPIC's partitions; the group must have no
    members (kafka-consumer-groups --delete-offsets)."""
    name, _, listed = topic.partition(":")

    def ask(admin: Any) -> Any:
        numbers = parse_partitions(admin, name, listed)
        return admin.delete_group_offsets(group, [TopicPartition(name, p) for p in numbers])

    results = ask_admin(client, ask, needs="OffsetDelete")
    outcome = {
        (tp.topic, tp.partition): error_name(error)
        for tp, error in sorted(results.items(), key=lambda item: tuple(item[0]))
    }
    if as_json:
        click.echo(
            json.dumps([{"topic": t, "partition": p, "error": e} for (t, p), e in outcome.items()])
        )
    else:
        print_columns(
            ["TOPIC", "PARTITION", "STATUS"],
            [[t, p, e or "Successful"] for (t, p), e in outcome.items()],
        )
    if any(outcome.values()):
        raise SystemExit(1)


def parse_partitions(admin: Any, topic: str, listed: str) -> list[int]:
    if not listed:
        return topic_partitions(admin, topic, None)
    try:
        numbers = sorted({int(item) for item in listed.split(",")})
    except ValueError:
        raise ClientError(f"bad --topic {topic}:{listed} (want TOPIC or TOPIC:0,1,...)") from None
    for number in numbers:
        topic_partitions(admin, topic, number)
    return numbers


def error_name(error: object) -> str | None:
    """The name of kafka-python's per-item error (an error, or already its name), or None
    when the item succeeded."""
    if isinstance(error, str):
        return None if error in ("", "OK", "NoError") else error
    return type(error).__name__ if is_error(error) else None


def is_error(error: object) -> bool:
    """Whether kafka-python's per-item result is a broker error (not None, not NoError)."""
    errno: object = getattr(error, "errno", None)
    return error is not None and bool(errno)


def check_altered(result: Any) -> None:
    """Raise ClientError naming the partitions the coordinator refused."""
    failed = []
    for tp, error in (result or {}).items():
        if is_error(error):
            failed.append(f"{tp.topic}-{tp.partition}: {type(error).__name__}")
    if failed:
        raise ClientError("offsets not committed: " + ", ".join(failed))
