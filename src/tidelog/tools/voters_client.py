"""The client side of KIP-853's voter changes and of UnregisterBroker: AddRaftVoter,
RemoveRaftVoter and UnregisterBroker sent through kafka-python's admin client (its
connections, security and bootstrap), with request classes of tidelog's own
(tidelog.protocol.kafka_extra: kafka-python has none).

Rules of this file:
- Sent to any broker (it forwards the change to the controller). NOT_CONTROLLER and
  NOT_LEADER_OR_FOLLOWER (no controller for a moment) are asked again, as every client
  command's retriable errors are; any other error is the answer, as ClientError naming
  Kafka's error and the broker's message: a voter change is not sent twice, since a
  change that timed out stays the target (server/voters_api.py).
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from kafka import errors as kafka_errors_module

from tidelog.protocol.kafka import ApiKey, request_class
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.tools.client_kafka import ClientError, ClientSettings, ask_admin

VOTER_CHANGE_TIMEOUT_MS: Final = 60_000  # AddRaftVoter's TimeoutMs
RETRIED: Final = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.NOT_LEADER_OR_FOLLOWER})


def send(client: ClientSettings, request: Any, *, needs: str) -> None:
    """Send `request` to a broker; None once answered without an error (see the rules)."""

    def ask(admin: Any) -> None:
        manager = admin._manager  # kafka-python sends any request class it is given
        answer = manager.run(manager.send, request)
        code = int(answer.error_code)
        if code == 0:
            return
        known = ErrorCode(code) if code in ErrorCode._value2member_map_ else None
        if known in RETRIED:
            raise kafka_errors_module.for_code(code)(answer.error_message)
        name = known.name if known is not None else f"error {code}"
        message = getattr(answer, "error_message", None)
        raise ClientError(f"{name}: {message}" if message else name)

    ask_admin(client, ask, needs=needs)


def add_voter(client: ClientSettings, node: int, directory: uuid.UUID | None = None) -> None:
    """Make `node` a voter of the metadata quorum (AddRaftVoter): answered once the
    committed voter set holds it. `directory`: its copy's (None: the one it registered)."""
    request = request_class(ApiKey.ADD_RAFT_VOTER)[0](
        cluster_id=None,
        timeout_ms=VOTER_CHANGE_TIMEOUT_MS,
        voter_id=node,
        voter_directory_id=directory or uuid.UUID(int=0),
        listeners=[],
    )
    send(client, request, needs="AddRaftVoter")


def remove_voter(client: ClientSettings, node: int, directory: uuid.UUID | None = None) -> None:
    """Take `node` out of the metadata quorum's voters (RemoveRaftVoter)."""
    request = request_class(ApiKey.REMOVE_RAFT_VOTER)[0](
        cluster_id=None, voter_id=node, voter_directory_id=directory or uuid.UUID(int=0)
    )
    send(client, request, needs="RemoveRaftVoter")


def unregister_broker(client: ClientSettings, node: int) -> None:
    """Take `node` out of the cluster's brokers (UnregisterBroker): refused while it holds
    a partition's replica or votes in the metadata quorum."""
    send(
        client, request_class(ApiKey.UNREGISTER_BROKER)[0](broker_id=node), needs="UnregisterBroker"
    )
