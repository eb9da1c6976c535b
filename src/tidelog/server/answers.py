"""Small pieces every Kafka handler module shares: building a response, reading a body,
naming a node's host, and the address of the client a request came from."""

from __future__ import annotations

import contextvars
import time
from typing import Any

from tidelog.errors import RequestTimedOut
from tidelog.protocol.kafka import KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode, error_code_for
from tidelog.server.view import BrokerView

METADATA_APPLY_WAIT_S = 10.0

client_host: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")
"""The connection's peer host, set by the listener for the tasks of that connection."""


def response(request: KafkaRequest, **fields: Any) -> Any:
    return request.response_class(version=request.response_version, **fields)


def body_of(request: KafkaRequest) -> Any:
    """The decoded request body (only an unsupported ApiVersions request has none)."""
    assert request.body is not None
    return request.body


def host_of(broker: BrokerView, node: int) -> str:
    if node == broker.node_id:
        return broker.listener_host
    return broker.config.peers[node][0]


async def commit_command(
    broker: BrokerView, command: dict[str, Any]
) -> tuple[ErrorCode, str | None]:
    """Write a command to the metadata log with acks=all; return once applied here."""
    result = await broker.propose_metadata(command)
    if result.error is not None or result.next_offset is None:
        return error_code_for(result.error), str(result.error)
    deadline = time.monotonic() + METADATA_APPLY_WAIT_S
    while broker.image.applied_offset < result.next_offset:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return error_code_for(RequestTimedOut("metadata not applied in time")), None
        await broker.metadata.wait_for_hwm(broker.metadata.replica.status().hwm, remaining)
    return ErrorCode.NONE, None
