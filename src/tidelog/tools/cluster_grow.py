"""`tidelog cluster add-node|remove-node`: a local cluster grows and shrinks while it runs.

Rules of this file:
- `add-node` starts the next node id (one past the largest) with `--join`, its `--peers`
  every node of the cluster and itself (server/joining.py), on the ports of the cluster's
  scheme for that id (tools/cluster.py: base port + id - 1, + 100, + 200, ...) when they are
  free, else on free ports of the machine; it is in `cluster.json` from then on (`status`,
  `roll`, `down` and `restart` include it), ready once it has registered and knows every
  broker, and with `--voter` a voter of the metadata quorum (AddRaftVoter) before the
  command returns. It prints the node's id on stdout.
- `remove-node --node N` first drains N: every partition replica it holds moves to the
  other nodes (a reassignment of those partitions alone, each replica to the node holding
  fewest: `cluster rebalance --exclude N`'s evacuation without the spreading), and the
  command waits until the moves are done and N's copies are deleted (its `/status` lists
  no partition); with `--no-drain` it is refused while N holds any, saying which. Then: N
  stops voting in the
  metadata quorum if it did (RemoveRaftVoter: a leader hands over before it leaves), N is
  unregistered (UnregisterBroker), stopped by its PID (SIGTERM, its controlled shutdown
  hands over what it still leads), and dropped from `cluster.json`; its data directory
  stays. The last node of a cluster is never removed.
- Every error is one line (`error: ...`) and exit 1, as every `cluster` command's.
"""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path
from typing import Final

import click

from tidelog.address import PORT_MAX, parse_address
from tidelog.errors import TidelogError
from tidelog.status import access_for, read_status
from tidelog.tools.client_kafka import describe_topics
from tidelog.tools.cluster import (
    HOST,
    NODES_MAX,
    ClusterError,
    ClusterRecord,
    NodeRecord,
    client_of,
    directory_option,
    fail,
    make_certificates,
    node_at,
    node_option,
    ports_in_use,
    read_cluster,
    scheme_ports,
    start_node,
    stop_nodes,
    timeout_option,
    wait_ready,
    wait_until,
    write_cluster,
)
from tidelog.tools.metadata_cmd import describe_quorum, view_of
from tidelog.tools.rebalance_cmd import drain
from tidelog.tools.voters_client import add_voter, remove_voter, unregister_broker

DRAIN_TIMEOUT_S: Final = 600.0
SHOWN_PARTITIONS_MAX: Final = 5  # of the replicas a node holds, in remove-node's refusal


def port_of(address: str) -> int:
    return parse_address(address)[1]


def free_port() -> int:
    """A port nothing listens on now (the kernel's choice)."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def plan_node(directory: Path, record: ClusterRecord) -> NodeRecord:
    """The record of the next node (pid 0: not started): the scheme's ports when free."""
    node_id = max(node.id for node in record.nodes) + 1
    first = record.nodes[0]
    base = port_of(first.kafka) - (first.id - 1)
    ports = scheme_ports(base, node_id, secure=record.secure)
    planned = node_at(directory, node_id, ports, join=True)
    taken = {a for n in record.nodes for a in (n.kafka, n.peer, n.admin, n.ssl, n.sasl) if a}
    addresses = {planned.kafka, planned.peer, planned.admin, planned.ssl, planned.sasl} - {""}
    in_scheme = node_id <= NODES_MAX and max(ports.values()) <= PORT_MAX
    if in_scheme and not addresses & taken and not ports_in_use([planned]):
        return planned
    return node_at(directory, node_id, {name: free_port() for name in ports}, join=True)


@click.command("add-node")
@directory_option
@click.option(
    "--voter", is_flag=True, help="Make it a voter of the metadata quorum too (AddRaftVoter)."
)
@timeout_option
def add_node(directory: Path, voter: bool, timeout_s: float) -> None:
    """Start one more node in a running cluster (the next id, free ports); it joins, and
    registers: print its id."""
    try:
        record = read_cluster(directory)
        node = plan_node(directory, record)
        nodes = (*record.nodes, node)
        record = replace(record, nodes=nodes, bootstrap=",".join(n.kafka for n in nodes))
        if record.secure:
            make_certificates(directory, record)  # the new node's certificate
        write_cluster(directory, record)
        record = record.with_pid(node.id, start_node(record, node))
        write_cluster(directory, record)
        wait_ready([record.node(node.id)], timeout_s=timeout_s)
        if voter:
            add_voter(client_of(directory, record), node.id)
    except TidelogError as error:
        fail(error)
    role = "a voter of the metadata quorum" if voter else "an observer of the metadata log"
    click.echo(f"node {node.id} joined ({node.kafka}), {role}", err=True)
    click.echo(node.id)


def replicas_held(directory: Path, record: ClusterRecord, node_id: int) -> list[str]:
    """The partitions whose replicas (as Metadata names them) include the node."""
    partitions = describe_topics(client_of(directory, record), None)
    return [f"{p.topic}-{p.partition}" for p in partitions if node_id in p.replicas]


def copies_gone(directory: Path, node: NodeRecord) -> bool:
    """Whether the node's /status lists no partition (every copy it held deleted)."""
    status = read_status(node.admin, access=access_for(directory))
    return status is not None and not status["partitions"]


@click.command("remove-node")
@directory_option
@node_option
@click.option("--no-drain", is_flag=True, help="Refuse if the node holds replicas.")
@click.option("--timeout", "timeout_s", type=float, default=DRAIN_TIMEOUT_S, show_default=True,
              help="Seconds to wait for the drain.")  # fmt: skip
def remove_node(directory: Path, node_id: int, no_drain: bool, timeout_s: float) -> None:
    """Take a node out of the cluster: its replicas moved off (drained), out of the
    metadata quorum's voters, unregistered, stopped, out of cluster.json."""
    try:
        record = read_cluster(directory)
        node = record.node(node_id)
        if len(record.nodes) == 1:
            raise ClusterError(f"node {node_id} is the cluster's last node")
        rest = replace(record, nodes=tuple(n for n in record.nodes if n.id != node_id))
        client = client_of(directory, rest)
        held = replicas_held(directory, rest, node_id)
        if held and not no_drain:
            moved = drain(client, node_id, timeout_s)
            click.echo(f"node {node_id}: drained ({moved} partition(s) moved off)", err=True)
            if not wait_until(lambda: copies_gone(directory, node), timeout_s=timeout_s):
                raise ClusterError(f"node {node_id} still holds copies after {timeout_s:g} s")
            held = replicas_held(directory, rest, node_id)
        if held:
            shown = ", ".join(held[:SHOWN_PARTITIONS_MAX])
            more = f" and {len(held) - SHOWN_PARTITIONS_MAX} more" if len(held) > 5 else ""
            raise ClusterError(
                f"node {node_id} still holds {len(held)} partition replica(s) ({shown}{more}): "
                "move them off first (a reassignment), then remove it"
            )
        if node_id in view_of(describe_quorum(client)).current_voters:
            remove_voter(client, node_id)
            click.echo(f"node {node_id}: no longer a voter of the metadata quorum", err=True)
        unregister_broker(client, node_id)
        stop_nodes([node])
        rest = replace(rest, bootstrap=",".join(n.kafka for n in rest.nodes))
        write_cluster(directory, rest)
    except TidelogError as error:
        fail(error)
    click.echo(
        f"node {node_id}: removed (unregistered and stopped; its data stays in {node.data_dir})"
    )
