"""Kafka requests kafka-python has no classes for: KIP-853's AddRaftVoter (80) and
RemoveRaftVoter (81), and UnregisterBroker (64), at Kafka 4.0's versions (v0 each).

Rules of this file:
- Each class is kafka-python's `ApiMessage` over a schema of `tidelog.protocol.schemas`,
  in the JSON form of Kafka's own message definitions, named as its schema file, so the
  codec, the version table and the handlers treat them as any kafka-python class
  (tidelog.protocol.kafka).
"""

from __future__ import annotations

import warnings
from typing import Any

from tidelog.protocol import schemas

# kafka-python reads a schema with importlib.resources.read_text, deprecated since 3.11.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.api_message import ApiMessage


def message_class(name: str) -> Any:
    """The kafka-python class of the schema `name` (a request or a response)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return type(ApiMessage)(name, (ApiMessage,), {"__module__": __name__}, load_json=schemas)


AddRaftVoterRequest = message_class("AddRaftVoterRequest")
AddRaftVoterResponse = message_class("AddRaftVoterResponse")
RemoveRaftVoterRequest = message_class("RemoveRaftVoterRequest")
RemoveRaftVoterResponse = message_class("RemoveRaftVoterResponse")
UnregisterBrokerRequest = message_class("UnregisterBrokerRequest")
UnregisterBrokerResponse = message_class("UnregisterBrokerResponse")
