"""The one question handlers ask before they act: may this connection's principal, from
its host, do this operation to this resource (`server/acl.py` decides)?"""

from __future__ import annotations

from typing import Final

from tidelog.server.acl import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER,
    CLUSTER_ACTION,
    CLUSTER_NAME,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    IDEMPOTENT_WRITE,
    READ,
    TOPIC,
    WRITE,
)
from tidelog.server.session import session
from tidelog.server.view import BrokerView


def allowed(broker: BrokerView, operation: int, resource_type: int, name: str) -> bool:
    state = session()
    return broker.authorizer.allowed(
        broker.image.acls,
        principal=state.principal,
        host=state.host,
        operation=operation,
        resource_type=resource_type,
        name=name,
    )


def cluster_allowed(broker: BrokerView, operation: int) -> bool:
    return allowed(broker, operation, CLUSTER, CLUSTER_NAME)


# The operations Kafka reports as authorized on each resource type (KIP-430).
OPERATIONS_OF: Final[dict[int, tuple[int, ...]]] = {
    TOPIC: (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (READ, DELETE, DESCRIBE),
    CLUSTER: (
        CREATE,
        ALTER,
        DESCRIBE,
        CLUSTER_ACTION,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
        IDEMPOTENT_WRITE,
    ),
}


def authorized_operations(broker: BrokerView, resource_type: int, name: str) -> set[int]:
    """The operations (Kafka's AclOperation codes, the bits of an `authorized_operations`
    field) this session's principal may perform on one resource."""
    return {
        operation
        for operation in OPERATIONS_OF[resource_type]
        if allowed(broker, operation, resource_type, name)
    }
