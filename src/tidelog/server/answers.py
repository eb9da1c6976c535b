"""Small pieces every Kafka handler module shares: building a response, reading a body,
naming a node's host, and the address of the client a request came from."""

from __future__ import annotations

import contextvars
from typing import Any

from tidelog.protocol.kafka import KafkaRequest
from tidelog.server.view import BrokerView
from tidelog.types import NodeId

client_host: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")
"""The connection's peer host, set by the listener for the tasks of that connection."""


def response(request: KafkaRequest, **fields: Any) -> Any:
    return request.response_class(version=request.response_version, **fields)


def body_of(request: KafkaRequest) -> Any:
    """The decoded request body (only an unsupported ApiVersions request has none)."""
    assert request.body is not None
    return request.body


def host_of(broker: BrokerView, node: int) -> str:
    """The advertised host of `node` (one of `broker.kafka_ports`) on this request's
    listener: never a bind address, which may be 0.0.0.0 or a host's private one."""
    return broker.kafka_hosts[NodeId(node)]
