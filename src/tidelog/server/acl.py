"""Authorization with Kafka's ACL model: who (principal, host) may do what (operation) to
which resource (topic, group, cluster, transactional id; by literal or prefixed name), by
allow and deny rules stored in the metadata log.

Rules of this file:
- With the authorizer off (the default) everything is allowed, as Kafka without an
  authorizer; the ACL APIs then answer SECURITY_DISABLED.
- With it on: a super user (`super_users`) may do anything; otherwise a request is allowed
  only when an ALLOW rule matches and no DENY rule does (deny wins). Nothing matching means
  denied. Rules match a principal or `User:*`, a host or `*`, the operation or ALL, and
  DESCRIBE is implied by READ, WRITE, DELETE and ALTER, DESCRIBE_CONFIGS by ALTER_CONFIGS.
- A rule is validated at the door (`acl_of`) and again when its metadata command is
  applied; an invalid one changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidelog.errors import MetadataError

# Kafka's numbers (ResourceType, PatternType, AclOperation, AclPermissionType).
ANY, MATCH = 1, 2
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
RESOURCE_TYPES = {
    TOPIC: "TOPIC",
    GROUP: "GROUP",
    CLUSTER: "CLUSTER",
    TRANSACTIONAL_ID: "TRANSACTIONAL_ID",
}
LITERAL, PREFIXED = 3, 4
PATTERNS = {LITERAL: "LITERAL", PREFIXED: "PREFIXED"}
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
OPERATIONS = {
    ALL: "ALL",
    READ: "READ",
    WRITE: "WRITE",
    CREATE: "CREATE",
    DELETE: "DELETE",
    ALTER: "ALTER",
    DESCRIBE: "DESCRIBE",
    CLUSTER_ACTION: "CLUSTER_ACTION",
    DESCRIBE_CONFIGS: "DESCRIBE_CONFIGS",
    ALTER_CONFIGS: "ALTER_CONFIGS",
    IDEMPOTENT_WRITE: "IDEMPOTENT_WRITE",
}
DENY, ALLOW = 2, 3
PERMISSIONS = {DENY: "DENY", ALLOW: "ALLOW"}
IMPLIED_BY = {DESCRIBE: {READ, WRITE, DELETE, ALTER}, DESCRIBE_CONFIGS: {ALTER_CONFIGS}}
CLUSTER_NAME = "kafka-cluster"  # the one cluster resource's name
NAME_MAX = 1024


@dataclass(frozen=True, slots=True)
class Acl:
    """One rule: `principal` from `host` is `permission`ed `operation` on the resource."""

    resource_type: int
    name: str
    pattern: int
    principal: str
    host: str
    operation: int
    permission: int

    def to_json(self) -> dict[str, Any]:
        return {
            "resource_type": self.resource_type,
            "name": self.name,
            "pattern": self.pattern,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation,
            "permission": self.permission,
        }

    def applies_to(self, resource_type: int, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern == PREFIXED:
            return name.startswith(self.name)
        return self.name in (name, "*")

    def covers(self, principal: str, host: str, operation: int) -> bool:
        return (
            self.principal in (principal, "User:*")
            and self.host in (host, "*")
            and (
                self.operation in (operation, ALL)
                or self.operation in IMPLIED_BY.get(operation, set())
            )
        )

    def describe(self) -> str:
        return (
            f"{PERMISSIONS[self.permission]} {self.principal} from {self.host} "
            f"{OPERATIONS[self.operation]} on {RESOURCE_TYPES[self.resource_type]} "
            f"{PATTERNS[self.pattern]} {self.name!r}"
        )


def acl_of(fields: dict[str, Any]) -> Acl:
    """A rule from a request's or a command's fields; MetadataError when it is not one."""
    try:
        acl = Acl(
            resource_type=int(fields["resource_type"]),
            name=str(fields["name"]),
            pattern=int(fields["pattern"]),
            principal=str(fields["principal"]),
            host=str(fields["host"]),
            operation=int(fields["operation"]),
            permission=int(fields["permission"]),
        )
    except (KeyError, TypeError, ValueError):
        raise MetadataError("INVALID_REQUEST", "an ACL with missing or bad fields") from None
    if acl.resource_type not in RESOURCE_TYPES:
        raise MetadataError("INVALID_REQUEST", f"resource type {acl.resource_type}")
    if acl.pattern not in PATTERNS:
        raise MetadataError("INVALID_REQUEST", f"pattern type {acl.pattern}")
    if acl.operation not in OPERATIONS or acl.permission not in PERMISSIONS:
        raise MetadataError("INVALID_REQUEST", "an unknown operation or permission")
    if not acl.name or len(acl.name) > NAME_MAX:
        raise MetadataError("INVALID_REQUEST", "a resource name of 1-1024 characters")
    if acl.resource_type == CLUSTER and acl.name != CLUSTER_NAME:
        raise MetadataError("INVALID_REQUEST", f"the cluster resource is named {CLUSTER_NAME}")
    kind, _, name = acl.principal.partition(":")
    if kind != "User" or not name:
        raise MetadataError(
            "INVALID_REQUEST", f"principal {acl.principal[:100]!r} is not User:NAME"
        )
    if not acl.host:
        raise MetadataError("INVALID_REQUEST", "an empty host (use *)")
    return acl


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls' and DeleteAcls' filter: None (ANY) matches every value."""

    resource_type: int | None
    name: str | None
    pattern: int | None  # None: any; MATCH: rules that would apply to `name`
    principal: str | None
    host: str | None
    operation: int | None
    permission: int | None

    def matches(self, acl: Acl) -> bool:
        if self.resource_type is not None and acl.resource_type != self.resource_type:
            return False
        if self.pattern == MATCH:
            if self.name is not None and not acl.applies_to(acl.resource_type, self.name):
                return False
        else:
            if self.pattern is not None and acl.pattern != self.pattern:
                return False
            if self.name is not None and acl.name != self.name:
                return False
        return (
            (self.principal is None or acl.principal == self.principal)
            and (self.host is None or acl.host == self.host)
            and (self.operation is None or acl.operation == self.operation)
            and (self.permission is None or acl.permission == self.permission)
        )


def filter_of(
    *,
    resource_type: int,
    name: str | None,
    pattern: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission: int,
) -> AclFilter:
    """A filter from a request's fields (Kafka's ANY = 1 is "no condition")."""
    return AclFilter(
        resource_type=None if resource_type == ANY else resource_type,
        name=name,
        pattern=None if pattern == ANY else pattern,
        principal=principal,
        host=host,
        operation=None if operation == ANY else operation,
        permission=None if permission == ANY else permission,
    )


@dataclass(frozen=True, slots=True)
class Authorizer:
    enabled: bool
    super_users: frozenset[str]

    def allowed(
        self,
        acls: frozenset[Acl] | set[Acl],
        *,
        principal: str,
        host: str,
        operation: int,
        resource_type: int,
        name: str,
    ) -> bool:
        """Whether `principal` at `host` may do `operation` on the resource."""
        if not self.enabled or principal in self.super_users:
            return True
        matching = [
            acl
            for acl in acls
            if acl.applies_to(resource_type, name) and acl.covers(principal, host, operation)
        ]
        if any(acl.permission == DENY for acl in matching):
            return False
        return any(acl.permission == ALLOW for acl in matching)
