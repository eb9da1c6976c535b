"""`tidelog acls add|list|remove`: the cluster's ACLs (Kafka's `kafka-acls`), through
kafka-python's admin client (CreateAcls, DescribeAcls, DeleteAcls); any broker takes them.

    tidelog acls add --allow User:alice --operation READ --topic orders [--prefixed]
    tidelog acls add --deny User:mallory --operation ALL --group billing
    tidelog acls list [--topic T | --group G | --cluster] [--json]
    tidelog acls remove --allow User:alice --operation READ --topic orders
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

import click

from tidelog.tools.client_kafka import ClientError, ClientSettings, ask_admin
from tidelog.tools.client_options import client_options, json_option, reports_errors
from tidelog.tools.users_cmd import until_controller

OPERATIONS: Final = (
    "ALL",
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
)


def resource_options(command: Any) -> Any:
    for option in reversed(
        (
            click.option("--topic", help="A topic (or topics, with --prefixed)."),
            click.option("--group", help="A consumer group (or groups, with --prefixed)."),
            click.option("--cluster", is_flag=True, help="The cluster itself."),
            click.option("--prefixed", is_flag=True, help="Every name that starts so."),
        )
    ):
        command = option(command)
    return command


def resource_of(topic: str | None, group: str | None, cluster: bool, prefixed: bool) -> Any:
    from kafka.admin import ACLResourcePatternType, ResourcePattern, ResourceType  # noqa: PLC0415

    chosen = [(t, n) for t, n in (("TOPIC", topic), ("GROUP", group)) if n] + (
        [("CLUSTER", "kafka-cluster")] if cluster else []
    )
    if len(chosen) != 1:
        raise ClientError("name exactly one of --topic, --group and --cluster")
    kind, name = chosen[0]
    pattern = ACLResourcePatternType.PREFIXED if prefixed else ACLResourcePatternType.LITERAL
    return ResourcePattern(ResourceType[kind], name, pattern)


def acl_of(allow: str | None, deny: str | None, operation: str, host: str, pattern: Any) -> Any:
    from kafka.admin import ACL, ACLOperation, ACLPermissionType  # noqa: PLC0415

    if (allow is None) == (deny is None):
        raise ClientError("give exactly one of --allow PRINCIPAL and --deny PRINCIPAL")
    permission = ACLPermissionType.ALLOW if allow else ACLPermissionType.DENY
    principal = allow or deny
    if not str(principal).startswith("User:"):
        raise ClientError(f"{principal!r} is not User:NAME")
    return ACL(principal, host, ACLOperation[operation], permission, pattern)


def rule_options(command: Any) -> Any:
    for option in reversed(
        (
            click.option("--allow", metavar="User:NAME", help="Allow this principal."),
            click.option("--deny", metavar="User:NAME", help="Deny this principal."),
            click.option("--operation", type=click.Choice(OPERATIONS), required=True),
            click.option("--host", default="*", show_default=True, help="The client's address."),
        )
    ):
        command = option(command)
    return command


def ask_controller(client: ClientSettings, ask: Callable[[Any], Any]) -> Any:
    """`ask(admin)` of an admin client (any broker forwards an ACL change to the
    controller), asked again while no controller is elected yet (NOT_CONTROLLER)."""
    from kafka.errors import NotControllerError  # noqa: PLC0415

    return until_controller(
        lambda: ask_admin(client, ask), lambda answer: NotControllerError in errors_of(answer)
    )


def described(error: Any) -> str:
    """A Kafka error class as the user reads it."""
    name = getattr(error, "__name__", str(error))
    if name == "SecurityDisabledError":
        return f"{name} (the brokers run without --authorizer)"
    return str(name)


def errors_of(answer: Any) -> list[Any]:
    """The error classes in a create_acls or delete_acls answer."""
    if isinstance(answer, dict):  # create_acls: {"succeeded": [...], "failed": [errors]}
        return list(answer.get("failed", []))
    return [error for _, _, error in answer]  # delete_acls: [(filter, matched, error)]


@click.group()
def acls() -> None:
    """ACLs (the broker's authorizer must be on): add, list, remove."""


@acls.command("add")
@rule_options
@resource_options
@client_options
@reports_errors
def add(
    *,
    allow: str | None,
    deny: str | None,
    operation: str,
    host: str,
    topic: str | None,
    group: str | None,
    cluster: bool,
    prefixed: bool,
    client: ClientSettings,
) -> None:
    """Add one ACL."""
    rule = acl_of(allow, deny, operation, host, resource_of(topic, group, cluster, prefixed))
    result = ask_controller(client, lambda admin: admin.create_acls([rule]))
    if result["failed"]:
        raise ClientError(f"not added: {described(result['failed'][0])}")
    click.echo("added", err=True)


@acls.command("remove")
@rule_options
@resource_options
@client_options
@reports_errors
def remove(
    *,
    allow: str | None,
    deny: str | None,
    operation: str,
    host: str,
    topic: str | None,
    group: str | None,
    cluster: bool,
    prefixed: bool,
    client: ClientSettings,
) -> None:
    """Remove the ACL that matches exactly."""
    rule = acl_of(allow, deny, operation, host, resource_of(topic, group, cluster, prefixed))
    results = ask_controller(client, lambda admin: admin.delete_acls([rule]))
    _, matched, error = results[0]
    if error.errno != 0:
        raise ClientError(f"not removed: {described(error)}")
    if not matched:
        raise ClientError("no such ACL")
    click.echo(f"removed {len(matched)}", err=True)


@acls.command("list")
@click.option("--topic")
@click.option("--group")
@click.option("--cluster", is_flag=True)
@client_options
@json_option
@reports_errors
def list_acls(
    topic: str | None, group: str | None, cluster: bool, client: ClientSettings, as_json: bool
) -> None:
    """Every ACL, or those of one resource."""
    from kafka.admin import (  # noqa: PLC0415
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )

    kind, name = ("ANY", None)
    if topic:
        kind, name = "TOPIC", topic
    elif group:
        kind, name = "GROUP", group
    elif cluster:
        kind, name = "CLUSTER", "kafka-cluster"
    wanted = ACLFilter(
        principal=None,
        host=None,
        operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(
            ResourceType[kind], name, ACLResourcePatternType.ANY
        ),
    )
    found, _ = ask_admin(client, lambda admin: admin.describe_acls(wanted))
    rows = [
        {
            "permission": acl.permission_type.name,
            "principal": acl.principal,
            "host": acl.host,
            "operation": acl.operation.name,
            "resource": acl.resource_pattern.resource_type.name,
            "pattern": acl.resource_pattern.pattern_type.name,
            "name": acl.resource_pattern.resource_name,
        }
        for acl in found
    ]
    if as_json:
        click.echo(json.dumps(rows))
        return
    for row in rows:
        click.echo("\t".join(row.values()))
