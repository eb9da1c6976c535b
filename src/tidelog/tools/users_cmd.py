"""`tidelog users add|list|remove`: SCRAM users of the cluster (Kafka's
`kafka-configs --alter --add-config 'SCRAM-SHA-512=[password=...]'`), through
kafka-python's admin client (Alter- and DescribeUserScramCredentials).

Rules of this file:
- A password is never a command-line argument (it would show in `ps`): it comes from
  stdin (`--password-stdin`) or is generated and printed once (`--generate`).
- The brokers store a salted credential (4096 iterations, 16 random bytes of salt), never
  the password. Any broker takes an alteration (one that does not lead the metadata log
  forwards it there); NOT_CONTROLLER means none is elected yet, and the command asks again.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

import click

from tidelog.tools.client_kafka import ClientError, ClientSettings, ask_admin
from tidelog.tools.client_options import client_options, json_option, reports_errors

MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# While no controller is elected (NOT_CONTROLLER), a command asks again for this long.
CONTROLLER_WAIT_S: Final = 15.0
CONTROLLER_RETRY_S: Final = 0.2
PASSWORD_BYTES: Final = 18
T = TypeVar("T")


def until_controller(ask: Callable[[], T], no_controller: Callable[[T], bool]) -> T:
    """`ask()`, asked again while its answer says no controller is elected yet, for up to
    CONTROLLER_WAIT_S; the last answer."""
    deadline = time.monotonic() + CONTROLLER_WAIT_S
    while True:
        answer = ask()
        if not no_controller(answer) or time.monotonic() >= deadline:
            return answer
        time.sleep(CONTROLLER_RETRY_S)


def alter(client: ClientSettings, alterations: list[Any]) -> dict[str, str | None]:
    """Send alterations to the cluster; {user: error message or None}."""

    def ask() -> dict[str, str | None]:
        answer = ask_admin(client, lambda admin: admin.alter_user_scram_credentials(alterations))
        return dict(answer)

    return until_controller(
        ask, lambda errors: any(error and "controller" in error for error in errors.values())
    )


@click.group()
def users() -> None:
    """SCRAM users: add (or change a password), list, remove."""


@users.command("add")
@click.argument("name")
@click.option(
    "--mechanism",
    type=click.Choice(MECHANISMS),
    multiple=True,
    help="Default: both SCRAM-SHA-256 and SCRAM-SHA-512.",
)
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin.")
@click.option("--generate", is_flag=True, help="Generate a password and print it once.")
@client_options
@reports_errors
def add(
    name: str,
    mechanism: tuple[str, ...],
    password_stdin: bool,
    generate: bool,
    client: ClientSettings,
) -> None:
    """Add user NAME, or set a new password for it."""
    from kafka.admin._users import ScramMechanism, UserScramCredentialUpsertion  # noqa: PLC0415

    if password_stdin == generate:
        raise ClientError("give exactly one of --password-stdin and --generate")
    password = secrets.token_urlsafe(PASSWORD_BYTES) if generate else sys.stdin.readline()
    password = password.rstrip("\n")
    if not password:
        raise ClientError("an empty password")
    mechanisms = mechanism or MECHANISMS
    alterations = [
        UserScramCredentialUpsertion(
            name, ScramMechanism[m.replace("-", "_")], password, salt=secrets.token_bytes(16)
        )
        for m in mechanisms
    ]
    errors = alter(client, alterations)
    if errors.get(name):
        raise ClientError(f"user {name}: {errors[name]}")
    click.echo(f"user {name}: {', '.join(mechanisms)}", err=True)
    if generate:
        click.echo(password)


@users.command("remove")
@click.argument("name")
@client_options
@reports_errors
def remove(name: str, client: ClientSettings) -> None:
    """Remove every SCRAM credential of user NAME."""
    from kafka.admin._users import ScramMechanism, UserScramCredentialDeletion  # noqa: PLC0415

    known = describe(client).get(name)
    if not known:
        raise ClientError(f"no user {name}")
    deletions = [
        UserScramCredentialDeletion(name, ScramMechanism[m.replace("-", "_")]) for m in known
    ]
    errors = alter(client, deletions)
    if errors.get(name):
        raise ClientError(f"user {name}: {errors[name]}")
    click.echo(f"user {name} removed", err=True)


def describe(client: ClientSettings) -> dict[str, list[str]]:
    """{user: [mechanism, ...]} of every SCRAM user."""
    described = ask_admin(client, lambda admin: admin.describe_user_scram_credentials())
    return {
        user: sorted(info["mechanism"].name.replace("_", "-") for info in entry["credential_infos"])
        for user, entry in sorted(described.items())
        if entry["error"] is None
    }


@users.command("list")
@client_options
@json_option
@reports_errors
def list_users(client: ClientSettings, as_json: bool) -> None:
    """The SCRAM users and their mechanisms (never a credential)."""
    known = describe(client)
    if as_json:
        click.echo(json.dumps(known))
        return
    for user, mechanisms in known.items():
        click.echo(f"{user}\t{','.join(mechanisms)}")
