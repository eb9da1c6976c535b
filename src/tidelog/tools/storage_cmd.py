"""`tidelog storage`: a data directory made ready before its broker first starts (Kafka's
`kafka-storage random-uuid` and `format --initial-controllers`).

Rules of this file:
- `directory-id --data-dir DIR` prints the data directory's id (server/data_dir.py), made
  (and the directory with it) when it has none yet; it is the id the node registers.
- `format --data-dir DIR --initial-voters ID@DIRID,...` keeps on DIR the metadata log's
  first voter set with each voter's data directory id (server/joining.py's
  `write_first_voters`): a node on another disk is then never one of them, not even before
  the first leader names them. Refused (one `error:` line, exit 1) when DIR already keeps a
  first voter set or its id is not the one given for any voter, or the list is malformed.
- `tidelog cluster up` formats its own nodes so; machines set up by hand run these two on
  every node before the first start (docs/deploy.md).
"""

from __future__ import annotations

from pathlib import Path

import click

from tidelog.errors import TidelogError
from tidelog.server.data_dir import node_directory_id
from tidelog.server.joining import FIRST_VOTERS_FILE, write_first_voters

VOTERS_MAX = 1000


@click.group()
def storage() -> None:
    """A data directory before its broker first starts (directory id, first voters)."""


def fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(1)


def parse_voters(text: str) -> list[tuple[int, int]]:
    """`ID@DIRID,...` as (node, directory id) pairs; ValueError naming what is wrong."""
    voters = []
    for part in (p.strip() for p in text.split(",")):
        node, at, directory = part.partition("@")
        if not at or not node.isdigit() or not directory.isdigit():
            raise ValueError(f"--initial-voters: {part!r} is not ID@DIRID")
        if not 0 < int(directory) < 1 << 63:
            raise ValueError(f"--initial-voters: {directory} is no directory id")
        voters.append((int(node), int(directory)))
    nodes = [node for node, _ in voters]
    if len(set(nodes)) != len(nodes) or not 0 < len(nodes) <= VOTERS_MAX:
        raise ValueError("--initial-voters: each node once, 1 to 1000 of them")
    return sorted(voters)


@storage.command("directory-id")
@click.option("--data-dir", type=Path, required=True, help="The broker's data directory.")
def directory_id(data_dir: Path) -> None:
    """Print the data directory's id, made when it has none yet."""
    try:
        click.echo(node_directory_id(data_dir))
    except (OSError, TidelogError) as error:
        fail(f"--data-dir {data_dir}: {error}")


@storage.command("format")
@click.option("--data-dir", type=Path, required=True, help="The broker's data directory.")
@click.option("--initial-voters", required=True, metavar="ID@DIRID,...",
              help="The metadata quorum's first voters and their data directory ids.")  # fmt: skip
def format_(data_dir: Path, initial_voters: str) -> None:
    """Keep the metadata log's first voter set, with directory ids, on a data directory."""
    try:
        voters = parse_voters(initial_voters)
    except ValueError as error:
        fail(str(error))
    if (data_dir / FIRST_VOTERS_FILE).exists():
        fail(f"--data-dir {data_dir} keeps a first voter set already (it started before)")
    try:
        own = node_directory_id(data_dir)
        if own not in {directory for _, directory in voters}:
            fail(f"--data-dir {data_dir} has id {own}, which no voter of --initial-voters names")
        write_first_voters(data_dir, [n for n, _ in voters], [d for _, d in voters])
    except (OSError, TidelogError) as error:
        fail(f"--data-dir {data_dir}: {error}")
    click.echo(f"formatted {data_dir}: first voters {', '.join(f'{n}@{d}' for n, d in voters)}")
