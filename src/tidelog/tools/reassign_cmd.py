"""`tidelog partitions reassign`: kafka-reassign-partitions, through kafka-python's admin
client (AlterPartitionReassignments, ListPartitionReassignments, Metadata, DescribeLogDirs).

Rules of this file:
- Exactly one action: `--generate` (with `--topics-to-move-json-file` and `--broker-list`:
  prints the current assignment and a proposal, as Kafka's JSON), `--execute` (with
  `--reassignment-json-file`: prints the current assignment to roll back to, then starts
  the moves), `--verify` (each partition of the file: completed, still in progress, or
  not as the file says), `--cancel` (the moves of the file's partitions still in
  progress), `--list` (every move in progress, Kafka's lines), `--status` (`--list` with
  progress: for each replica being added, how far it is behind the leader in offsets, from
  a local cluster's `/status`, and in bytes, from DescribeLogDirs; "-" when not known),
  and an ETA: the bytes behind over how fast the copy grew in RATE_SAMPLE_S (none when
  it did not grow).
  Anything else, and a bad file, is one `error: ...` line and exit 1 (reassign_json.py).
- A partition the cluster refuses is named with its Kafka error and that error's
  description (kafka-python's admin client keeps no more of the answer), and the command
  exits 1 after the others were started.
- `--execute --throttle BYTES` sets, as Kafka's does, leader.replication.throttled.rate and
  follower.replication.throttled.rate to BYTES a second on every broker the moves involve
  (the replicas each partition has and those it gains) before it starts them, and warns
  that `--verify` must be run until the moves are done: `--verify`, and `--cancel`, clear
  the broker throttles of every broker once no move is left in the cluster (unless
  `--preserve-throttles`). `--replica-alter-log-dirs-throttle` is refused: a node has one
  log directory.
- `--json` prints one object: the action's facts (the assignments, each partition's
  outcome, the moves in progress with their progress).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final, TypeVar

import click

from tidelog.status import access_for
from tidelog.tools.broker_configs_cmd import clear_throttles, set_throttle
from tidelog.tools.client_kafka import ClientError, ClientSettings, ask_admin, describe_topics
from tidelog.tools.client_options import client_options, json_option, reports_errors
from tidelog.tools.client_status import (
    admin_addresses,
    find_local_cluster,
    local_bootstraps,
    local_cluster_directory,
    replica_statuses,
)
from tidelog.tools.reassign_json import (
    Assignment,
    assignment_json,
    parse_broker_list,
    parse_reassignment,
    parse_topics_to_move,
    propose,
)

F = TypeVar("F", bound=Callable[..., Any])
ACTIONS: Final = ("generate", "execute", "verify", "cancel", "list", "status")
NOT_KNOWN: Final = "-"
RATE_SAMPLE_S: Final = 1.0  # --status looks at each new copy twice, this far apart (its ETA)
VERIFY_WARNING: Final = (
    "Warning: You must run --verify periodically, until the reassignment completes, to "
    "ensure the throttle is removed."
)


def read_file(path: Path | None, option: str) -> str:
    if path is None:
        raise ClientError(f"{option} FILE is needed for this action")
    try:
        return path.read_text()
    except OSError as error:
        raise ClientError(f"{option} {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ClientError(f"{option} {path}: not UTF-8 text") from None


def current_assignment(client: ClientSettings, topics: list[str]) -> Assignment:
    return {(p.topic, p.partition): p.replicas for p in describe_topics(client, topics)}


def brokers_of(client: ClientSettings) -> set[int]:
    answer = ask_admin(client, lambda admin: admin.describe_cluster(), needs="DescribeCluster")
    return {int(broker["broker_id"]) for broker in answer["brokers"]}


Moves = dict[tuple[str, int], tuple[int, ...] | None]
Outcomes = dict[tuple[str, int], str | None]


def alter(client: ClientSettings, moves: Moves) -> Outcomes:
    """Each partition's outcome of AlterPartitionReassignments: None, or the refusal."""
    from kafka import TopicPartition  # noqa: PLC0415

    asked = {
        TopicPartition(topic, partition): target for (topic, partition), target in moves.items()
    }
    answer = ask_admin(
        client,
        lambda admin: admin.alter_partition_reassignments(asked),
        needs="AlterPartitionReassignments",
    )
    outcomes: Outcomes = {}
    for tp, error in answer.items():
        outcomes[(tp.topic, tp.partition)] = None if error is None else refusal_of(error)
    return outcomes


def refusal_of(error: Any) -> str:
    """kafka-python's error class of a partition: its name and Kafka's description."""
    description = getattr(error, "description", "")
    return f"{error.__name__}: {description}" if description else str(error.__name__)


def ongoing(client: ClientSettings) -> dict[tuple[str, int], dict[str, list[int]]]:
    """Every move in progress: replicas, adding_replicas, removing_replicas."""
    answer = ask_admin(
        client,
        lambda admin: admin.list_partition_reassignments(),
        needs="ListPartitionReassignments",
    )
    return {(tp.topic, tp.partition): state for tp, state in answer.items()}


def refused(outcomes: Outcomes) -> None:
    failures = [f"{t}-{p}: {why}" for (t, p), why in sorted(outcomes.items()) if why]
    if failures:
        raise ClientError("refused: " + "; ".join(failures))


def named(keys: Iterable[tuple[str, int]]) -> str:
    return ",".join(f"{topic}-{partition}" for topic, partition in sorted(keys))


# ------------------------------------------------------------------------ progress ------
def progress(
    client: ClientSettings, moves: dict[tuple[str, int], dict[str, list[int]]]
) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """For each move, each adding replica's lag behind the leader: offsets (a local
    cluster's /status) and bytes (DescribeLogDirs); None when not known."""
    if not moves:
        return {}
    leaders = {(p.topic, p.partition): p.leader for p in describe_topics(client, None)}
    ends = log_ends(client)
    sizes = partition_sizes(client, moves)
    sampled = time.monotonic()
    time.sleep(RATE_SAMPLE_S)  # a second look: how fast each new copy grows, for the ETA
    later = partition_sizes(client, moves)
    elapsed = time.monotonic() - sampled
    found: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for key, state in sorted(moves.items()):
        leader = leaders.get(key, -1)
        rows = []
        for node in state["adding_replicas"]:
            lag_offsets = lag_bytes = None
            if (key[0], key[1], leader) in ends and (key[0], key[1], node) in ends:
                lag_offsets = max(0, ends[(*key, leader)] - ends[(*key, node)])
            eta_s = None
            if (*key, leader) in sizes:
                lag_bytes = max(0, sizes[(*key, leader)] - sizes.get((*key, node), 0))
                grown = later.get((*key, node), 0) - sizes.get((*key, node), 0)
                if grown > 0:
                    eta_s = round(lag_bytes / (grown / elapsed), 1)
            rows.append(
                {
                    "node": node,
                    "leader": leader,
                    "lag_offsets": lag_offsets,
                    "lag_bytes": lag_bytes,
                    "eta_s": eta_s,
                }
            )
        found[key] = rows
    return found


def log_ends(client: ClientSettings) -> dict[tuple[str, int, int], int]:
    """Each copy's log end offset, when the cluster asked is the local one."""
    cluster = find_local_cluster()
    if cluster is None or client.bootstrap not in local_bootstraps(cluster):
        return {}
    statuses = replica_statuses(admin_addresses(cluster), access_for(local_cluster_directory()))
    return {key: status.log_end_offset for key, status in statuses.items()}


def partition_sizes(
    client: ClientSettings, moves: dict[tuple[str, int], dict[str, list[int]]]
) -> dict[tuple[str, int, int], int]:
    """Each copy's size in bytes on its node (DescribeLogDirs of every broker)."""
    wanted: dict[str, list[int]] = {}
    for topic, partition in moves:
        wanted.setdefault(topic, []).append(partition)
    try:
        answer = ask_admin(
            client,
            lambda admin: admin.describe_log_dirs(topic_partitions=wanted),
            needs="DescribeLogDirs",
        )
    except ClientError:
        return {}  # progress in bytes is best effort
    sizes: dict[tuple[str, int, int], int] = {}
    for broker in answer:
        for log_dir in broker.get("log_dirs", []):
            for topic in log_dir.get("topics", []):
                for part in topic.get("partitions", []):
                    key = (str(topic["name"]), int(part["partition_index"]), int(broker["broker"]))
                    sizes[key] = int(part["partition_size"])
    return sizes


def shown(value: int | None) -> str:
    return NOT_KNOWN if value is None else str(value)


def list_lines(
    moves: dict[tuple[str, int], dict[str, list[int]]],
    lags: dict[tuple[str, int], list[dict[str, Any]]] | None = None,
) -> list[str]:
    """Kafka's --list lines, and with `lags` each adding replica's progress."""
    if not moves:
        return ["No partition reassignments found."]
    lines = ["Current partition reassignments:"]
    for (topic, partition), state in sorted(moves.items()):
        joined = {name: ",".join(map(str, nodes)) for name, nodes in state.items()}
        lines.append(
            f"{topic}-{partition}: replicas: {joined['replicas']}. adding: "
            f"{joined['adding_replicas']}. removing: {joined['removing_replicas']}."
        )
        for row in (lags or {}).get((topic, partition), []):
            eta = "" if row.get("eta_s") is None else f", about {row['eta_s']:g} s to go"
            lines.append(
                f"  node {row['node']}: {shown(row['lag_offsets'])} offsets and "
                f"{shown(row['lag_bytes'])} bytes behind the leader (node {row['leader']}){eta}"
            )
    return lines


# ------------------------------------------------------------------------ actions -------
def proposal(
    client: ClientSettings, topics_file: Path | None, broker_list: str | None
) -> dict[str, Assignment]:
    topics = parse_topics_to_move(read_file(topics_file, "--topics-to-move-json-file"))
    if broker_list is None:
        raise ClientError("--generate needs --broker-list (the nodes to move the topics to)")
    brokers = parse_broker_list(broker_list)
    unknown = sorted(set(brokers) - brokers_of(client))
    if unknown:
        raise ClientError(f"The proposed assignment contains non-existent brokerIDs: {unknown}")
    current = current_assignment(client, topics)
    return {"current": current, "proposed": propose(current, brokers)}


def verify_lines(client: ClientSettings, targets: Assignment) -> tuple[list[str], bool]:
    moves = ongoing(client)
    current = current_assignment(client, sorted({topic for topic, _ in targets}))
    lines, done = ["Status of partition reassignment:"], True
    for (topic, partition), target in sorted(targets.items()):
        name = f"{topic}-{partition}"
        if (topic, partition) in moves:
            lines.append(f"Reassignment of partition {name} is still in progress.")
            done = False
        elif current.get((topic, partition)) == target:
            lines.append(f"Reassignment of partition {name} is completed.")
        else:
            now = ",".join(map(str, current.get((topic, partition), ())))
            wanted = ",".join(map(str, target))
            lines.append(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{now} rather than {wanted}."
            )
            done = False
    return lines, done


def rate_option(flag: str, name: str, help_text: str) -> Callable[[F], F]:
    """A rate in bytes a second, as Kafka's tool takes it (-1, the default: none)."""
    return click.option(
        flag, name, type=click.IntRange(min=-1), default=-1, metavar="BYTES", help=help_text
    )


@click.group()
def partitions() -> None:
    """Partitions of topics: move them between nodes (kafka-reassign-partitions)."""


@partitions.command("reassign")
@click.option("--generate", is_flag=True, help="Propose a reassignment.")
@click.option("--execute", is_flag=True, help="Start the file's moves.")
@click.option("--verify", is_flag=True, help="Whether the file's moves are done.")
@click.option("--cancel", "cancel_", is_flag=True, help="Call the file's moves off.")
@click.option("--list", "list_", is_flag=True, help="The moves in progress.")
@click.option("--status", is_flag=True, help="--list with each adding copy's progress.")
@click.option("--topics-to-move-json-file", "topics_file", type=Path, metavar="FILE")
@click.option("--reassignment-json-file", "reassignment_file", type=Path, metavar="FILE")
@click.option("--broker-list", metavar="ID,ID,...", help="--generate: the nodes to move onto.")
@rate_option("--throttle", "throttle", "--execute: the moves' throttle, bytes a second.")
@rate_option("--replica-alter-log-dirs-throttle", "dirs_throttle", "Not supported.")
@click.option(
    "--preserve-throttles", is_flag=True, help="--verify, --cancel: leave the throttles set."
)
@client_options
@json_option
@reports_errors
def reassign(
    *,
    generate: bool,
    execute: bool,
    verify: bool,
    cancel_: bool,
    list_: bool,
    status: bool,
    topics_file: Path | None,
    reassignment_file: Path | None,
    broker_list: str | None,
    throttle: int,
    dirs_throttle: int,
    preserve_throttles: bool,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Move partitions between nodes, with kafka-reassign-partitions' JSON files."""
    flags = (generate, execute, verify, cancel_, list_, status)
    chosen = [name for name, given in zip(ACTIONS, flags, strict=True) if given]
    if len(chosen) != 1:
        raise ClientError("name exactly one action: --" + ", --".join(ACTIONS))
    action = chosen[0]
    if dirs_throttle >= 0:
        raise ClientError(
            "--replica-alter-log-dirs-throttle is not supported: a tidelog node has one log "
            "directory"
        )
    if action == "generate":
        found = proposal(client, topics_file, broker_list)
        if as_json:
            click.echo(json.dumps({k: as_json_of(v) for k, v in found.items()}))
            return
        click.echo(f"Current partition replica assignment\n{assignment_json(found['current'])}\n")
        click.echo(
            f"Proposed partition reassignment configuration\n{assignment_json(found['proposed'])}"
        )
        return
    if action in ("list", "status"):
        moves = ongoing(client)
        lags = progress(client, moves) if action == "status" else None
        if as_json:
            click.echo(json.dumps(moves_json(moves, lags)))
        else:
            click.echo("\n".join(list_lines(moves, lags)))
        return
    targets = parse_reassignment(read_file(reassignment_file, "--reassignment-json-file"))
    if action == "execute":
        start_moves(client, targets, throttle=throttle, as_json=as_json)
    elif action == "verify":
        lines, done = verify_lines(client, targets)
        cleared = None if preserve_throttles else lift_throttles(client, targets)
        if as_json:
            click.echo(json.dumps({"done": done, "lines": lines, "throttles_cleared": cleared}))
        else:
            click.echo("\n".join(lines + throttle_lines(cleared)))
    else:
        cancel_moves(client, targets, preserve_throttles=preserve_throttles, as_json=as_json)


def as_json_of(assignment: Assignment) -> Any:
    return json.loads(assignment_json(assignment))


def moves_json(
    moves: dict[tuple[str, int], dict[str, list[int]]],
    lags: dict[tuple[str, int], list[dict[str, Any]]] | None,
) -> list[dict[str, Any]]:
    return [
        {
            "topic": topic,
            "partition": partition,
            **state,
            "progress": (lags or {}).get((topic, partition)),
        }
        for (topic, partition), state in sorted(moves.items())
    ]


def lift_throttles(
    client: ClientSettings, targets: Assignment, *, when_done: bool = True
) -> list[int] | None:
    """Kafka's --verify (once no move is left in the cluster: `when_done`) and --cancel:
    clear the broker throttles of every broker, and of each the file names; the brokers
    cleared, or None while a move is left."""
    if when_done and ongoing(client):
        return None
    brokers = brokers_of(client) | {node for replicas in targets.values() for node in replicas}
    clear_throttles(client, brokers)
    return sorted(brokers)


def throttle_lines(cleared: list[int] | None) -> list[str]:
    if cleared is None:
        return []
    plural = "" if len(cleared) == 1 else "s"
    return ["", f"Clearing broker-level throttles on broker{plural} {','.join(map(str, cleared))}"]


def moving_brokers(current: Assignment, targets: Assignment) -> set[int]:
    """Every broker the moves involve: each partition's replicas now, and its target's."""
    return {node for key, target in targets.items() for node in (*current[key], *target)}


def start_moves(
    client: ClientSettings, targets: Assignment, *, throttle: int, as_json: bool
) -> None:
    current = current_assignment(client, sorted({topic for topic, _ in targets}))
    missing = sorted(set(targets) - set(current))
    if missing:
        raise ClientError(f"unknown partitions: {named(missing)}")
    rollback = {key: current[key] for key in targets}
    if not as_json:
        click.echo(f"Current partition replica assignment\n\n{assignment_json(rollback)}\n")
        click.echo("Save this to use as the --reassignment-json-file option during rollback")
    if throttle >= 0:
        set_throttle(client, moving_brokers(current, targets), throttle)
        if not as_json:
            click.echo(VERIFY_WARNING)
            click.echo(f"The inter-broker throttle limit was set to {throttle} B/s")
    outcomes = alter(client, dict(targets))
    if as_json:
        facts = {"current": as_json_of(rollback), "refused": refused_json(outcomes)}
        click.echo(json.dumps({**facts, "throttle": throttle if throttle >= 0 else None}))
    refused(outcomes)
    if not as_json:
        click.echo(f"Successfully started partition reassignments for {named(targets)}")


def cancel_moves(
    client: ClientSettings, targets: Assignment, *, preserve_throttles: bool, as_json: bool
) -> None:
    moving = [key for key in ongoing(client) if key in targets]
    outcomes = alter(client, dict.fromkeys(moving)) if moving else {}
    keep = preserve_throttles or any(outcomes.values())  # Kafka clears after a clean cancel
    cleared = None if keep else lift_throttles(client, targets, when_done=False)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "cancelled": [f"{t}-{p}" for t, p in sorted(moving)],
                    "refused": refused_json(outcomes),
                    "throttles_cleared": cleared,
                }
            )
        )
    refused(outcomes)
    if not as_json:
        click.echo(f"Successfully cancelled partition reassignments for: {named(moving) or 'none'}")
        for line in throttle_lines(cleared)[1:]:
            click.echo(line)


def refused_json(outcomes: Outcomes) -> dict[str, str]:
    return {f"{t}-{p}": why for (t, p), why in sorted(outcomes.items()) if why}
