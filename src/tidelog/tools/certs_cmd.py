"""`tidelog certs ca|node|client|token`: the certificates of a cluster whose brokers run on
machines of their own (docs/deploy.md), made as `tidelog cluster up --secure` makes a local
cluster's (`tidelog.tools.certs`: ECDSA P-256, the CA of the cluster, one certificate per
node naming its node id).

Rules of this file:
- Everything goes into `--dir` (made when missing); keys and the token are mode 0600, and
  no file is ever overwritten: one that exists is `error: ...` and exit 1.
- A node's certificate names its node id (what the peers check) and each `--host`, a DNS
  name or an IP address: every name clients and the other nodes' live pages reach it by
  (its `peers` entry's host, its advertised hosts).
- Each command prints the files it wrote, one a line; `client` also prints the principal a
  broker gives its certificate (for `super_users` or an ACL).
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec

import click

from tidelog.status import TOKEN_FILE
from tidelog.tools.certs import (
    CA_NAME,
    DAYS_DEFAULT,
    CertError,
    Issued,
    issue,
    issue_node,
    make_ca,
    principal_of_file,
    write_private,
)
from tidelog.tools.cluster import CA_NAME_CHARACTERS

EXIT_ERROR = 1
P = ParamSpec("P")
TOKEN_BYTES = 24  # 32 characters once encoded: above the brokers' minimum of 16

directory_option = click.option(
    "--dir",
    "directory",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the CA is, and where the files go.",
)
days_option = click.option(
    "--days", type=click.IntRange(1, 36_500), default=DAYS_DEFAULT, show_default=True
)


def report(*paths: Path) -> None:
    for path in paths:
        click.echo(str(path))


def ca_needed(directory: Path) -> None:
    """CertError unless `directory` holds a CA (`certs ca` makes one)."""
    for suffix in ("crt", "key"):
        if not (directory / f"{CA_NAME}.{suffix}").is_file():
            raise CertError(f"{directory} holds no {CA_NAME}.{suffix}: make it with `certs ca`")


def fails_cleanly(command: Callable[P, None]) -> Callable[P, None]:
    """`command`, with a CertError or OSError printed as `error: ...` and exit 1."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            command(*args, **kwargs)
        except CertError as error:
            click.echo(f"error: {error}", err=True)
            raise SystemExit(EXIT_ERROR) from error
        except OSError as error:
            click.echo(f"error: {error.filename}: {error.strerror}", err=True)
            raise SystemExit(EXIT_ERROR) from error

    return wrapper


@click.group()
def certs() -> None:
    """Certificates of a cluster on machines of its own: its CA, nodes, clients, token."""


@certs.command("ca")
@directory_option
@click.option(
    "--cluster",
    "cluster_name",
    default="tidelog",
    show_default=True,
    help="The cluster's name in every certificate (O=tidelog cluster NAME).",
)
@days_option
@fails_cleanly
def ca(directory: Path, cluster_name: str, days: int) -> None:
    """The cluster's CA: DIR/ca.crt (every node and client trusts it) and DIR/ca.key."""
    if not cluster_name or not set(cluster_name) <= CA_NAME_CHARACTERS:
        raise CertError(f"--cluster: {cluster_name!r} is not letters, digits, '.', '_' or '-'")
    issued = make_ca(directory, cluster_name, days=days)
    report(issued.cert, issued.key)


@certs.command("node")
@directory_option
@click.option("--node-id", type=click.IntRange(0, 2**31 - 1), required=True)
@click.option(
    "--host",
    "hosts",
    multiple=True,
    required=True,
    help="A DNS name or IP address the node is reached by (repeat for each).",
)
@days_option
@fails_cleanly
def node(directory: Path, node_id: int, hosts: tuple[str, ...], days: int) -> None:
    """DIR/node-N.crt and .key: node N's certificate, for its peer links, its SSL and
    SASL_SSL listeners and its HTTPS admin endpoint."""
    ca_needed(directory)
    issued: Issued = issue_node(directory, node_id, hosts=hosts, days=days)
    report(issued.cert, issued.key)


@certs.command("client")
@directory_option
@click.option("--name", required=True, help="The files' name: DIR/NAME.crt and DIR/NAME.key.")
@click.option("--common-name", help="Its CN (default: --name).")
@days_option
@fails_cleanly
def client(directory: Path, name: str, common_name: str | None, days: int) -> None:
    """DIR/NAME.crt and .key: a client certificate (SSL listeners that ask for one); prints
    its principal too."""
    ca_needed(directory)
    issued = issue(directory, name, common_name=common_name or name, hosts=(), days=days)
    report(issued.cert, issued.key)
    click.echo(f"principal: {principal_of_file(issued.cert)}")


@certs.command("token")
@directory_option
@fails_cleanly
def token(directory: Path) -> None:
    """DIR/admin.token: a bearer token for every node's admin endpoint (admin_token_file)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / TOKEN_FILE
    write_private(path, secrets.token_urlsafe(TOKEN_BYTES).encode() + b"\n")
    report(path)
