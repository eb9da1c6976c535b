"""`tidelog cluster rebalance`: replicas, then leaders, spread evenly over the nodes
(tools/rebalance.py plans it), through kafka-python's admin client.

Rules of this file:
- It always shows its plan first: a table of each node's replicas, leaderships and bytes
  before and after, and the moves. Without `--execute` it moves nothing.
- `--execute` starts the moves (AlterPartitionReassignments, the partitions whose replicas
  or their order change); with `--wait` it moves `--batch` partitions at a time, each
  batch once the last is done (thousands of new copies at once crowd a small machine),
  then asks for preferred-leader elections of every partition, so leaders follow the new
  order. A drain (`drain`, `cluster remove-node`) moves in batches too.
- `--exclude N` (repeatable) leaves node N out: everything it holds moves to the others
  (a drain before `cluster remove-node`).
- Sizes are each partition's largest copy (DescribeLogDirs); when the cluster does not
  answer them the plan balances by count alone.
- `--json` prints the plan (and what was started) as one object.
"""

from __future__ import annotations

import json
import time
from typing import Any, Final

import click
from rich.console import Console
from rich.table import Table

from tidelog.tools.client_kafka import ClientError, ClientSettings, describe_topics
from tidelog.tools.client_options import client_options, json_option, reports_errors
from tidelog.tools.leaders_cmd import elect_preferred
from tidelog.tools.reassign_cmd import alter, brokers_of, ongoing, partition_sizes, refused
from tidelog.tools.rebalance import Partition, Plan, PlanError, plan

WAIT_POLL_S: Final = 0.5
BATCH_DEFAULT: Final = 100  # partitions moved at a time by --wait and by a drain


def current_plan(client: ClientSettings, excluded: set[int], *, spread: bool = True) -> Plan:
    placement: dict[Partition, tuple[int, ...]] = {
        (p.topic, p.partition): tuple(p.replicas) for p in describe_topics(client, None)
    }
    nodes = sorted(brokers_of(client) - excluded)
    copies = partition_sizes(client, {key: {} for key in placement})
    sizes: dict[Partition, int] = {}
    for (topic, partition, _node), size in copies.items():
        sizes[(topic, partition)] = max(size, sizes.get((topic, partition), 0))
    try:
        return plan(placement, nodes, sizes, spread=spread)
    except PlanError as error:
        raise ClientError(str(error)) from None


def show(found: Plan) -> None:
    table = Table(title="rebalance plan")
    for column in ("node", "replicas", "leaders", "bytes"):
        table.add_column(column, justify="right")
    for node in sorted(set(found.replicas_before) | set(found.replicas_after)):

        def change(before: dict[int, int], after: dict[int, int], node: int = node) -> str:
            return f"{before.get(node, 0)} -> {after.get(node, 0)}"

        table.add_row(
            str(node),
            change(found.replicas_before, found.replicas_after),
            change(found.leaders_before, found.leaders_after),
            change(found.bytes_before, found.bytes_after),
        )
    console = Console()
    console.print(table)
    moved = len(found.moves)
    console.print(f"{moved} partition(s) change their replicas or their order")


def wait_until_done(client: ClientSettings, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while ongoing(client):
        if time.monotonic() > deadline:
            raise ClientError(f"moves still in progress after {timeout_s:g} s")
        time.sleep(WAIT_POLL_S)


def move_in_batches(
    client: ClientSettings, moves: dict[Partition, tuple[int, ...]], batch: int, timeout_s: float
) -> None:
    """Start the moves `batch` partitions at a time, each batch once the last is done
    (thousands of new copies at once would crowd a small machine), and wait for the last."""
    items = sorted(moves.items())
    for first in range(0, len(items), batch):
        refused(alter(client, dict(items[first : first + batch])))
        wait_until_done(client, timeout_s)


def drain(client: ClientSettings, node: int, timeout_s: float, batch: int = BATCH_DEFAULT) -> int:
    """Move every replica off `node` (only those: `plan(spread=False)`), `batch` partitions
    at a time, and wait until no move is in progress; how many partitions moved."""
    found = current_plan(client, {node}, spread=False)
    move_in_batches(client, dict(found.moves), batch, timeout_s)
    return len(found.moves)


@click.command("rebalance")
@click.option("--execute", is_flag=True, help="Start the moves (else only show the plan).")
@click.option("--wait", is_flag=True, help="--execute: wait for the moves, then elect leaders.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0), default=600.0)
@click.option("--exclude", type=int, multiple=True, metavar="NODE", help="Move all off NODE.")
@click.option("--batch", type=click.IntRange(min=1), default=BATCH_DEFAULT, show_default=True,
              help="--wait: partitions moved at a time.")  # fmt: skip
@client_options
@json_option
@reports_errors
def rebalance(
    *,
    execute: bool,
    wait: bool,
    timeout_s: float,
    exclude: tuple[int, ...],
    batch: int,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """Spread replicas, then leaders, evenly over the nodes (shows the plan first)."""
    if wait and not execute:
        raise ClientError("--wait goes with --execute")
    found = current_plan(client, set(exclude))
    facts: dict[str, Any] = {
        "replicas": {"before": found.replicas_before, "after": found.replicas_after},
        "leaders": {"before": found.leaders_before, "after": found.leaders_after},
        "bytes": {"before": found.bytes_before, "after": found.bytes_after},
        "reassignment": found.reassignment_json(),
        "executed": False,
    }
    if not as_json:
        show(found)
    if execute and found.moves:
        facts["executed"] = True
        if not wait:
            refused(alter(client, dict(found.moves)))
            if not as_json:
                click.echo("moves started: `tidelog partitions reassign --status` shows them")
        else:
            move_in_batches(client, dict(found.moves), batch, timeout_s)
            elected = elect_preferred(client, None)
            facts["elected"] = len(elected["elected"])
            if not as_json:
                click.echo(f"moves done; {len(elected['elected'])} leader(s) moved")
    elif not as_json:
        click.echo("nothing to move" if not found.moves else "run with --execute to move")
    if as_json:
        click.echo(json.dumps(facts))
