"""`tidelog ui`: the live page of a running cluster (each broker serves it on its admin
endpoint: `server/live_page.py`), its URL printed and opened in a browser.

Rules of this file:
- The page is that of the first node of the local cluster (`--data-dir`, else
  $TIDELOG_DATA_DIR, else ./data) whose admin endpoint answers `/status`; or that of
  `--admin HOST:PORT`. A node that does not answer is never named.
- A secure cluster's endpoints are HTTPS with its CA, and want its token: the URL carries
  the token in its fragment (`#token=...`), which the page reads and no request sends; a
  browser does not know the cluster's CA, and asks once whether to trust the certificate.
- `--no-open` only prints the URL (scripts, tests, a machine without a browser).
"""

from __future__ import annotations

import webbrowser
from pathlib import Path

import click

from tidelog.address import format_address, parse_address
from tidelog.status import AdminAccess, access_for, read_status
from tidelog.tools.client_status import CLUSTER_FILE, DATA_DIR_ENV, DEFAULT_DATA_DIR
from tidelog.tools.cluster import ClusterError, fail, page_url, read_cluster


def answering_admin(directory: Path, access: AdminAccess) -> str:
    """The admin endpoint of the first node of the cluster in `directory` that answers."""
    record = read_cluster(directory)
    for node in record.nodes:
        if read_status(node.admin, access=access) is not None:
            return node.admin
    raise ClusterError(f"no node of the cluster in {directory} answers at its admin endpoint")


@click.command("ui")
@click.option(
    "--data-dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    envvar=DATA_DIR_ENV,
    default=DEFAULT_DATA_DIR,
    show_default=True,
    help=f"The local cluster's directory (holds {CLUSTER_FILE}; default: ${DATA_DIR_ENV}).",
)
@click.option("--admin", help="A broker's admin endpoint, HOST:PORT, instead of --data-dir's.")
@click.option("--no-open", is_flag=True, help="Print the URL only; open no browser.")
def ui(directory: Path, admin: str | None, no_open: bool) -> None:
    """Print the URL of the cluster's live page and open it in a browser: every partition's
    replicas, HWM, leader, ISR and consumer groups' lag, as they change."""
    access = access_for(directory)
    if admin is None:
        try:
            admin = answering_admin(directory, access)
        except ClusterError as error:
            fail(error)
    else:
        try:
            admin = format_address(parse_address(admin))
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--admin") from None
    url = page_url(admin, access)
    click.echo(url)
    if not no_open:
        webbrowser.open(url)
