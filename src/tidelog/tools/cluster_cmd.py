"""`tidelog cluster up|down|status|kill|pause|resume|restart|roll`: the commands of a local
cluster of brokers (`add-node` and `remove-node` are tools/cluster_grow.py's).

Rules of this file:
- The cluster's directory, its `cluster.json`, its processes and its certificates are
  tools/cluster.py's, whose rules hold here: only recorded processes are signalled, every
  wait polls with a deadline, and an error is one line (`error: ...`) and a non-zero exit.
"""

from __future__ import annotations

import functools
import json
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from tidelog.client_config import ClientConfigError
from tidelog.errors import TidelogError
from tidelog.server.logs import LOG_FORMATS
from tidelog.tools.client_kafka import ClientError
from tidelog.tools.client_options import COMMAND_CONFIG_ENV
from tidelog.tools.client_status import DATA_DIR_ENV
from tidelog.tools.cluster import (
    ADMIN_USER,
    BASE_PORT_DEFAULT,
    CLUSTER_FILE,
    EXIT_ERROR,
    LOG_NAME,
    ClusterError,
    ClusterRecord,
    NodeRecord,
    admin_client_principal,
    client_of,
    directory_option,
    fail,
    fully_in_sync,
    is_our_broker,
    is_paused,
    last_error_line,
    live_page_url,
    make_certificates,
    node_option,
    node_status,
    plan_cluster,
    read_cluster,
    restart_node,
    signal_node,
    start_stopped,
    stop_nodes,
    timeout_option,
    wait_until,
    wait_user_known,
    write_admin_user,
    write_client_properties,
    write_cluster,
)
from tidelog.tools.cluster_grow import add_node, remove_node
from tidelog.tools.leaders_cmd import elect_preferred

ROLL_SYNC_WAIT_S = 10.0
"""How long `roll` waits for the cluster to be fully in sync before it refuses to start."""


@click.group("cluster")
def cluster() -> None:
    """Run a local cluster of brokers on 127.0.0.1."""


@cluster.command("up")
@click.option("--nodes", type=int, help="How many brokers (a new cluster only).")
@directory_option
@click.option("--base-port", type=int, default=BASE_PORT_DEFAULT, show_default=True)
@click.option(
    "--secure",
    is_flag=True,
    help="A new cluster, locked down: mutual TLS between its nodes (a CA and certificates "
    "in DIR/certs), SSL and SASL_SSL listeners, the authorizer on (anonymous clients "
    "denied), the SCRAM user admin; client settings in DIR/client-sasl.properties and "
    "DIR/client-ssl.properties, for --command-config.",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS, case_sensitive=False),
    help="The brokers' log format: text (a new cluster's default), or json lines. Kept in "
    "cluster.json for the nodes started and restarted later.",
)
@click.option(
    "--metrics/--no-metrics",
    default=None,
    help="Whether the brokers serve GET /metrics (a new cluster's default: on). Kept in "
    "cluster.json for the nodes started and restarted later.",
)
@click.option(
    "--auto-create-topics-enable/--no-auto-create-topics-enable",
    "auto_create",
    default=None,
    help="Whether the brokers create a topic a client's Metadata request names and asks "
    "them to create (Kafka's auto.create.topics.enable; a new cluster's default: off). Kept "
    "in cluster.json for the nodes started and restarted later.",
)
@timeout_option
def up(
    *,
    nodes: int | None,
    directory: Path,
    base_port: int,
    secure: bool,
    log_format: str | None,
    metrics: bool | None,
    auto_create: bool | None,
    timeout_s: float,
) -> None:
    """Start a cluster, or restart the stopped nodes of an existing one; print bootstrap."""
    try:
        if (directory / CLUSTER_FILE).exists():
            record = read_cluster(directory)
            if nodes is not None and nodes != len(record.nodes):
                raise ClusterError(
                    f"--nodes {nodes}, but {directory} holds a cluster of {len(record.nodes)}: "
                    f"add a node to it with `tidelog cluster add-node --data-dir {directory}`"
                    f", take one out with `tidelog cluster remove-node --data-dir {directory} "
                    "--node N`"
                )
            if secure and not record.secure:
                raise ClusterError(f"--secure, but {directory} holds a plaintext cluster")
        elif nodes is None:
            raise ClusterError(f"--nodes is required: {directory} holds no cluster yet")
        else:
            record = plan_cluster(directory, nodes=nodes, base_port=base_port, secure=secure)
            directory.mkdir(parents=True, exist_ok=True)
        kept: dict[str, Any] = {  # the brokers' settings given to `up`, kept for restarts
            "log_format": None if log_format is None else log_format.lower(),
            "metrics": metrics,
            "auto_create_topics_enable": auto_create,
        }
        changed = {k: v for k, v in kept.items() if v is not None and v != getattr(record, k)}
        if changed:
            record = replace(record, **changed)
            write_cluster(directory, record)
        if record.secure:
            make_certificates(directory, record)
        record = start_stopped(directory, record, timeout_s=timeout_s)
    except TidelogError as error:  # ClusterError, or a certificate not made
        fail(error)
    click.echo(f"cluster of {len(record.nodes)} nodes ready in {directory}", err=True)
    click.echo(f"watch it live: {live_page_url(directory, record)}", err=True)
    if record.secure:
        try:
            properties = write_client_properties(directory, record)
            users = write_admin_user(directory, record)
            wait_user_known(record.nodes, ADMIN_USER, timeout_s=timeout_s)
            usage = secure_usage(directory, record, ssl=properties, sasl=users)
        except TidelogError as error:
            fail(error)
        for line in usage:
            click.echo(line, err=True)
    click.echo(record.bootstrap)


def secure_usage(directory: Path, record: ClusterRecord, *, ssl: Path, sasl: Path) -> list[str]:
    """How to use a secure cluster, for `up` to print."""
    return [
        f"SSL clients (the admin client certificate): bootstrap {record.ssl_bootstrap}, "
        f"settings in {ssl}",
        f"SASL_SSL clients (user {ADMIN_USER}, SCRAM-SHA-512): bootstrap "
        f"{record.sasl_bootstrap}, settings in {sasl}",
        f"the authorizer is on: anonymous clients (PLAINTEXT {record.bootstrap}) are denied; "
        f"super users: User:{ADMIN_USER}, {admin_client_principal(directory)}",
        f"tidelog commands: --command-config {sasl}, or export {COMMAND_CONFIG_ENV}={sasl}",
        f"  (with {DATA_DIR_ENV}={directory} they use it by default), e.g.",
        f"  tidelog topics list --command-config {sasl}",
    ]


@cluster.command("down")
@directory_option
def down(directory: Path) -> None:
    """Stop every node (SIGTERM, then SIGKILL after 30 s); the data stays."""
    try:
        record = read_cluster(directory)
    except ClusterError as error:
        fail(error)
    stopped = stop_nodes(list(record.nodes))
    for node in record.nodes:
        click.echo(f"node {node.id}: {'stopped' if node.id in stopped else 'was not running'}")


@cluster.command("status")
@directory_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def status(directory: Path, as_json: bool) -> None:
    """Each node: up, paused or down, fenced, ready, how many partitions it leads and how
    many of those are under-replicated; a node that is down, its log and last error. Exits
    1 when a node is not up or a partition is under-replicated or has no leader."""
    try:
        record = read_cluster(directory)
    except ClusterError as error:
        fail(error)
    states = [observe(node) for node in record.nodes]
    health = cluster_health(states)
    if as_json:
        click.echo(
            json.dumps({"bootstrap": record.bootstrap, "health": health, "nodes": states}, indent=2)
        )
    else:
        print_status_table(states)
        click.echo(health_line(health))
    if not health["healthy"]:
        raise SystemExit(EXIT_ERROR)


def observe(node: NodeRecord) -> dict[str, Any]:
    """What `status` reports of one node."""
    alive = is_our_broker(node)
    paused = alive and is_paused(node.pid)
    # A paused broker cannot answer; do not wait on it.
    report = node_status(node) if alive and not paused else None
    if not alive:
        state = "down"
    elif paused:
        state = "paused"
    else:
        state = "up" if report is not None else "unreachable"
    partitions = report.get("partitions", []) if report is not None else []
    led = [p for p in partitions if p.get("role") == "leader"]
    under = [
        p
        for p in led
        if len(p.get("reported_isr") or p.get("isr") or []) < len(p.get("replicas", []))
    ]
    return {
        "id": node.id,
        "pid": node.pid,
        "state": state,
        "ready": report.get("ready") if report is not None else None,
        "fenced": report.get("fenced", []) if report is not None else None,
        "metadata_leader": report.get("metadata_leader") if report is not None else None,
        "leads": [f"{p['topic']}-{p['partition']}" for p in led],
        "under_replicated": [f"{p['topic']}-{p['partition']}" for p in under],
        "leaderless": [
            f"{p['topic']}-{p['partition']}" for p in partitions if p.get("leader") is None
        ],
        "kafka": node.kafka,
        "admin": node.admin,
        "log": str(Path(node.data_dir) / LOG_NAME),
        "last_error": last_error_line(node) if state != "up" else None,
        "status": report,
    }


def cluster_health(states: list[dict[str, Any]]) -> dict[str, Any]:
    """The cluster at a glance, from what the nodes that answered say."""
    answered = [s for s in states if s["status"] is not None]
    fenced = sorted({n for s in answered for n in s["fenced"] or []})
    for state in states:  # each node's fencing, as the answering nodes know it
        state["is_fenced"] = state["id"] in fenced
    under = sorted({p for s in answered for p in s["under_replicated"]})
    # Leaderless as every answering node that hosts it sees it (a leader elsewhere counts).
    led = {p for s in answered for p in s["leads"]}
    leaderless = sorted({p for s in answered for p in s["leaderless"]} - led)
    down = [s["id"] for s in states if s["state"] != "up"]
    return {
        "healthy": not down and not under and not leaderless,
        "nodes_not_up": down,
        "fenced": fenced,
        "under_replicated": under,
        "leaderless": leaderless,
    }


def health_line(health: dict[str, Any]) -> str:
    if health["healthy"]:
        return "healthy: every node up, every partition led and fully in sync"
    parts = []
    if health["nodes_not_up"]:
        parts.append("node(s) not up: " + ", ".join(map(str, health["nodes_not_up"])))
    if health["fenced"]:
        parts.append("fenced: " + ", ".join(map(str, health["fenced"])))
    if health["under_replicated"]:
        parts.append("under-replicated: " + ", ".join(health["under_replicated"]))
    if health["leaderless"]:
        parts.append("no leader: " + ", ".join(health["leaderless"]))
    return "unhealthy: " + "; ".join(parts)


def print_status_table(states: list[dict[str, Any]]) -> None:
    from rich.console import Console  # noqa: PLC0415 - only the table needs rich
    from rich.table import Table  # noqa: PLC0415

    table = Table(box=None)
    for column in ("node", "pid", "state", "fenced", "ready", "leads", "under-repl.", "kafka"):
        table.add_column(column)
    for node in states:
        ready = "-" if node["ready"] is None else ("yes" if node["ready"] else "no")
        table.add_row(
            str(node["id"]),
            str(node["pid"]),
            node["state"],
            "yes" if node.get("is_fenced") else "no",
            ready,
            str(len(node["leads"])),
            str(len(node["under_replicated"])),
            node["kafka"],
        )
    console = Console(soft_wrap=True)
    console.print(table)
    for node in states:
        if node["state"] != "up":
            console.print(f"node {node['id']} is {node['state']}: see {node['log']}", markup=False)
            if node["last_error"]:
                console.print(f"  {node['last_error']}", markup=False)


def signal_command(name: str, signum: signal.Signals, verb: str, summary: str) -> None:
    """Register `cluster NAME --node N`: send `signum` to one node; `summary` is its help
    (imperative, as every command's), `verb` what it prints it did."""

    @cluster.command(name, help=f"{summary} ({signum.name}).")
    @directory_option
    @node_option
    def command(directory: Path, node_id: int) -> None:
        try:
            node = read_cluster(directory).node(node_id)
            if not signal_node(node, signum):
                raise ClusterError(f"node {node_id} is not running")
        except ClusterError as error:
            fail(error)
        click.echo(f"node {node_id}: {verb} (pid {node.pid})")


signal_command("kill", signal.SIGKILL, "killed", "Kill one node at once, as a crash would")
signal_command("pause", signal.SIGSTOP, "paused", "Pause one node: it answers nothing till resumed")
signal_command("resume", signal.SIGCONT, "resumed", "Resume a paused node")


@cluster.command("restart")
@directory_option
@node_option
@timeout_option
def restart(directory: Path, node_id: int, timeout_s: float) -> None:
    """Stop one node (if running), start it again with the same flags, wait until ready."""
    try:
        record = restart_node(directory, read_cluster(directory), node_id, timeout_s=timeout_s)
    except ClusterError as error:
        fail(error)
    click.echo(f"node {node_id}: restarted (pid {record.node(node_id).pid})")


@cluster.command("roll")
@directory_option
@timeout_option
def roll(directory: Path, timeout_s: float) -> None:
    """Restart every node in turn, as a rolling upgrade does: each hands its leaderships
    over (controlled shutdown), starts again and catches up (every partition fully in
    sync) before the next; then every partition goes back to its preferred replica."""
    try:
        record = read_cluster(directory)
        # A node just back catches up within moments (its leaders wake on its first ping).
        in_sync = functools.partial(fully_in_sync, directory, record)
        if not wait_until(in_sync, timeout_s=min(timeout_s, ROLL_SYNC_WAIT_S)):
            raise ClusterError("the cluster is not fully in sync: a roll would stall it")
        for node in record.nodes:
            started = time.monotonic()
            record = restart_node(directory, record, node.id, timeout_s=timeout_s)
            caught_up = functools.partial(fully_in_sync, directory, record)
            if not wait_until(caught_up, timeout_s=timeout_s):
                raise ClusterError(f"node {node.id} did not catch up in {timeout_s:g} s")
            took = time.monotonic() - started
            click.echo(f"node {node.id}: restarted and in sync in {took:.1f} s")
        outcome = elect_preferred(client_of(directory, record), None)
    except (ClusterError, ClientError, ClientConfigError) as error:
        fail(error)
    elected = len(outcome["elected"]) + len(outcome["not_needed"])
    click.echo(f"preferred leaders: {elected} partitions led by their first replica")
    for topic, partition, message in outcome["failed"]:
        click.echo(f"  {topic}-{partition}: {message}")
    if outcome["failed"]:
        raise SystemExit(EXIT_ERROR)


cluster.add_command(add_node)
cluster.add_command(remove_node)
