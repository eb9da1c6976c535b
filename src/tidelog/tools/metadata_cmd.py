"""`tidelog metadata quorum describe|add-voter|remove-voter` and `tidelog metadata
unregister`: the metadata log's quorum
(Kafka's kafka-metadata-quorum.sh `describe --status` and `--replication`, through
kafka-python's admin client, DescribeQuorum), and its voters changed one at a time
(kafka-metadata-quorum's add-controller and remove-controller: KIP-853's AddRaftVoter and
RemoveRaftVoter, tools/voters_client.py), and a broker taken out of the cluster
(kafka-cluster's `unregister`: UnregisterBroker).

Rules of this file:
- Both views by default; `--status` or `--replication` picks one, `--json` prints the facts
  of both as one object.
- `--status` is Kafka's: the leader, its epoch, the HWM, the largest lag of a voter behind
  the leader's log end (in offsets, and in ms of LastCaughtUpTimestamp), the voters and the
  observers. A lag or time the leader does not know is shown as "-" and counts for no max.
- `--replication` is one row per copy: LogEndOffset, Lag, LastFetchTimestamp,
  LastCaughtUpTimestamp (wall-clock ms, as the leader reports them) and its status
  (Leader, Follower or Observer).
- A leader that cannot be reached yet (NOT_LEADER_OR_FOLLOWER) is asked again, as other
  retriable errors are, until default.api.timeout.ms.
- `add-voter --node N` returns once the committed voter set holds N (a registered broker
  whose copy has caught up), `remove-voter --node N` once it holds N no more; each prints
  the voters then. `--directory` names the copy (a uuid, as `describe` shows it); without
  it, the directory the node registered.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Final

import click
from kafka import errors as kafka_errors_module
from rich.console import Console
from rich.table import Table

from tidelog.tools.client_kafka import ClientError, ClientSettings, ask_admin
from tidelog.tools.client_options import client_options, json_option, reports_errors
from tidelog.tools.voters_client import add_voter, remove_voter, unregister_broker

UNKNOWN: Final = -1
TABLE_WIDTH_PIPED: Final = 200


@dataclass(frozen=True, slots=True)
class QuorumCopy:
    """One row of `--replication`."""

    node_id: int
    directory_id: str | None  # a uuid; None: not known (Kafka's all-zero uuid)
    log_end_offset: int
    lag: int | None
    last_fetch_timestamp: int
    last_caught_up_timestamp: int
    status: str


@dataclass(frozen=True, slots=True)
class QuorumView:
    """What `describe` shows, from one DescribeQuorum answer."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    max_follower_lag: int | None
    max_follower_lag_time_ms: int | None
    current_voters: list[int]
    current_observers: list[int]
    replicas: list[QuorumCopy]


def describe_quorum(client: ClientSettings) -> dict[str, Any]:
    """The metadata log's partition as kafka-python's describe_metadata_quorum() returns it,
    asked again while no leader answers."""

    def ask(admin: Any) -> dict[str, Any]:
        answer = admin.describe_metadata_quorum()
        partition: dict[str, Any] = answer["topics"][0]["partitions"][0]
        if partition["error"] is not None:
            raise kafka_errors_module.NotLeaderForPartitionError(partition["error"])
        return partition

    return ask_admin(client, ask, needs="DescribeQuorum")


def view_of(partition: dict[str, Any]) -> QuorumView:
    leader = next(
        (v for v in partition["current_voters"] if v["replica_id"] == partition["leader_id"]),
        None,
    )
    if leader is None:
        raise ClientError(f"the leader {partition['leader_id']} is not among the voters")
    leader_end = int(leader["log_end_offset"])

    def copy_of(state: dict[str, Any], status: str) -> QuorumCopy:
        end = int(state["log_end_offset"])
        return QuorumCopy(
            node_id=int(state["replica_id"]),
            directory_id=directory_of(state.get("replica_directory_id")),
            log_end_offset=end,
            lag=None if end == UNKNOWN else max(0, leader_end - end),
            last_fetch_timestamp=int(state.get("last_fetch_timestamp", UNKNOWN)),
            last_caught_up_timestamp=int(state.get("last_caught_up_timestamp", UNKNOWN)),
            status=status,
        )

    voters = [
        copy_of(v, "Leader" if v is leader else "Follower") for v in partition["current_voters"]
    ]
    observers = [copy_of(o, "Observer") for o in partition["observers"]]
    lags = [v.lag for v in voters if v.lag is not None]
    caught_up = [v.last_caught_up_timestamp for v in voters if v.last_caught_up_timestamp >= 0]
    leader_caught_up = int(leader.get("last_caught_up_timestamp", UNKNOWN))
    return QuorumView(
        leader_id=int(partition["leader_id"]),
        leader_epoch=int(partition["leader_epoch"]),
        high_watermark=int(partition["high_watermark"]),
        max_follower_lag=max(lags) if lags else None,
        max_follower_lag_time_ms=(
            max(0, leader_caught_up - min(caught_up))
            if caught_up and leader_caught_up >= 0
            else None
        ),
        current_voters=[v.node_id for v in voters],
        current_observers=[o.node_id for o in observers],
        replicas=[*sorted(voters, key=lambda v: v.status != "Leader"), *observers],
    )


def directory_of(value: object) -> str | None:
    """kafka-python's uuid of a copy's directory (v2; None for the all-zero uuid)."""
    return None if value is None else str(value)


def shown(value: int | None) -> str:
    return "-" if value is None or value == UNKNOWN else str(value)


def print_status(view: QuorumView) -> None:
    lines = {
        "LeaderId": str(view.leader_id),
        "LeaderEpoch": str(view.leader_epoch),
        "HighWatermark": str(view.high_watermark),
        "MaxFollowerLag": shown(view.max_follower_lag),
        "MaxFollowerLagTimeMs": shown(view.max_follower_lag_time_ms),
        "CurrentVoters": json.dumps(view.current_voters, separators=(",", ":")),
        "CurrentObservers": json.dumps(view.current_observers, separators=(",", ":")),
    }
    for name, value in lines.items():
        click.echo(f"{name + ':':<24}{value}")


def print_replication(view: QuorumView) -> None:
    table = Table(
        "NodeId",
        "DirectoryId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
        box=None,
    )
    for copy in view.replicas:
        table.add_row(
            str(copy.node_id),
            copy.directory_id or "-",
            shown(copy.log_end_offset),
            shown(copy.lag),
            shown(copy.last_fetch_timestamp),
            shown(copy.last_caught_up_timestamp),
            copy.status,
        )
    console = Console(highlight=False)
    if not console.is_terminal:
        # Piped output has no width to respect: never truncate a column.
        console = Console(highlight=False, width=TABLE_WIDTH_PIPED)
    console.print(table)


@click.group()
def metadata() -> None:
    """The cluster's metadata log (kafka-metadata-quorum)."""


@metadata.group()
def quorum() -> None:
    """The metadata log's quorum: its leader, voters and observers."""


@quorum.command("describe")
@click.option("--status", "status_only", is_flag=True, help="Only the leader, HWM and lag.")
@click.option("--replication", "replication_only", is_flag=True, help="Only the per-copy table.")
@client_options
@json_option
@reports_errors
def describe(
    *, status_only: bool, replication_only: bool, client: ClientSettings, as_json: bool
) -> None:
    """Describe the metadata log's quorum (DescribeQuorum), as kafka-metadata-quorum does."""
    if status_only and replication_only:
        raise ClientError("name --status or --replication, not both")
    view = view_of(describe_quorum(client))
    if as_json:
        click.echo(json.dumps(asdict(view)))
        return
    if not replication_only:
        print_status(view)
    if not status_only:
        if not replication_only:
            click.echo()
        print_replication(view)


def directory_uuid(text: str | None) -> uuid.UUID | None:
    """`--directory`: a copy's directory id as `describe` shows it (a uuid)."""
    if text is None:
        return None
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ClientError(f"--directory: {text!r} is not a uuid") from None


def voter_change(client: ClientSettings, node: int, directory: str | None, *, add: bool) -> None:
    """One voter change, then the voters as they are (`describe`'s CurrentVoters)."""
    if node < 0:
        raise ClientError(f"--node: {node} is no node id")
    change = add_voter if add else remove_voter
    change(client, node, directory_uuid(directory))
    view = view_of(describe_quorum(client))
    click.echo(f"{'added' if add else 'removed'} voter {node}; voters now {view.current_voters}")


node_option = click.option("--node", "node_id", type=int, required=True, help="The node id.")
directory_option = click.option(
    "--directory", help="Its copy's directory id (a uuid; default: the one it registered)."
)


@quorum.command("add-voter")
@node_option
@directory_option
@client_options
@reports_errors
def add_voter_command(*, node_id: int, directory: str | None, client: ClientSettings) -> None:
    """Make a registered broker a voter of the metadata quorum (AddRaftVoter; Kafka's
    add-controller): returns once the committed voter set holds it."""
    voter_change(client, node_id, directory, add=True)


@quorum.command("remove-voter")
@node_option
@directory_option
@client_options
@reports_errors
def remove_voter_command(*, node_id: int, directory: str | None, client: ClientSettings) -> None:
    """Take a node out of the metadata quorum's voters (RemoveRaftVoter; Kafka's
    remove-controller): returns once the committed voter set holds it no more."""
    voter_change(client, node_id, directory, add=False)


@metadata.command("unregister")
@node_option
@client_options
@reports_errors
def unregister_command(*, node_id: int, client: ClientSettings) -> None:
    """Take a broker out of the cluster (UnregisterBroker; kafka-cluster's unregister):
    refused while it holds a partition's replica or votes in the metadata quorum."""
    if node_id < 0:
        raise ClientError(f"--node: {node_id} is no node id")
    unregister_broker(client, node_id)
    click.echo(f"unregistered broker {node_id}")
