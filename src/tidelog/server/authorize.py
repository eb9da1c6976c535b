"""The one question handlers ask before they act: may this connection's principal, from
its host, do this operation to this resource (`server/acl.py` decides)?"""

from __future__ import annotations

from tidelog.server.acl import CLUSTER, CLUSTER_NAME
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
