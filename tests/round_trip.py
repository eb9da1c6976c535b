"""A request through the Kafka codec to a handler and its answer back through the client,
for the tests that hand a handler a fake `BrokerView` (tests/test_group_api.py,
tests/test_reassignment.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import tidelog.protocol.kafka  # noqa: F401  (first: it imports kafka-python quietly)

# isort: split
from kafka.protocol.parser import KafkaProtocol

from tidelog.protocol.kafka import ApiKey, KafkaConnection, KafkaRequest


def round_trip(
    handlers: Mapping[ApiKey, Callable[[Any, KafkaRequest], Awaitable[Any]]],
    broker: Any,
    sent: Any,
) -> Any:
    """`sent` through the codec to its handler, and the answer back through the client."""
    client = KafkaProtocol(client_id="tidelog-test")
    client.send_request(sent)
    connection = KafkaConnection()
    connection.receive_data(client.send_bytes())
    request = connection.next_request()
    assert isinstance(request, KafkaRequest)
    answer = asyncio.run(handlers[request.api_key](broker, request))
    [(_, received)] = client.receive_bytes(connection.send_response(request, answer))
    return received
