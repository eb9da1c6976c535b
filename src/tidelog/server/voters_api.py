"""AddRaftVoter (v0), RemoveRaftVoter (v0) and UnregisterBroker (v0): the metadata quorum's
voters change one node at a time (KIP-853), and a broker leaves the cluster (Kafka's
UnregisterBroker), as Kafka 4.0 answers them.

Rules of this file:
- Any node takes them: the command (`add_voter`, `remove_voter`, `unregister_broker`,
  server/members.py) is checked here with Kafka's error, then committed to the metadata log
  (forwarded to the controller by a node that is not), where it is checked again as it is
  applied.
- A voter change names the voters this node's copy of the metadata log holds committed;
  while a change is not committed yet, another is refused REQUEST_TIMED_OUT, as Kafka's
  leader refuses one while a VotersRecord is uncommitted.
- AddRaftVoter and RemoveRaftVoter are answered once this node's copy of the log holds a
  committed voter set that shows the change: the leader moves the voter set toward the
  image's target, adding a node once its copy has caught up (core/mode/quorum.py), and
  REQUEST_TIMED_OUT answers a change not committed within the request's TimeoutMs (AddRaftVoter)
  or VOTER_CHANGE_TIMEOUT_S (RemoveRaftVoter, which has none); the target stays, and the
  leader goes on toward it. UnregisterBroker is answered once applied here.
- ALTER on the cluster when the authorizer is on, else CLUSTER_AUTHORIZATION_FAILED (as
  Kafka's controller authorizes them); a ClusterId that is not this cluster's is
  INCONSISTENT_CLUSTER_ID.
- A directory id is the uuid whose low 64 bits are the copy's id (all zero: any).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Final

from tidelog.errors import MetadataError
from tidelog.protocol.kafka import ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.acl import ALTER
from tidelog.server.answers import body_of, response
from tidelog.server.authorize import cluster_allowed
from tidelog.server.view import BrokerView

VOTER_CHANGE_TIMEOUT_S: Final = 30.0  # Kafka's default request timeout
VOTER_CHANGE_TIMEOUT_S_MAX: Final = 300.0
VOTER_POLL_S: Final = 0.05
DIRECTORY_BITS: Final = 63

Outcome = tuple[ErrorCode, str | None]


async def add_raft_voter(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    timeout_s = min(max(int(body.timeout_ms), 0) / 1000, VOTER_CHANGE_TIMEOUT_S_MAX)
    code, message = await change_voters(
        broker, "add_voter", body, timeout_s=timeout_s or VOTER_CHANGE_TIMEOUT_S
    )
    return answer(request, code, message)


async def remove_raft_voter(broker: BrokerView, request: KafkaRequest) -> Any:
    code, message = await change_voters(
        broker, "remove_voter", body_of(request), timeout_s=VOTER_CHANGE_TIMEOUT_S
    )
    return answer(request, code, message)


async def unregister_broker(broker: BrokerView, request: KafkaRequest) -> Any:
    if not cluster_allowed(broker, ALTER):
        return answer(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    node = int(body_of(request).broker_id)
    command = {"type": "unregister_broker", "node": node, "voters": committed_voters(broker)}
    code, message = await commit_checked(broker, command)
    if code is ErrorCode.NONE and node not in broker.image.membership.unregistered:
        code, message = ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker ID {node} is not registered."
    return answer(request, code, message)


def answer(request: KafkaRequest, code: ErrorCode, message: str | None) -> Any:
    return response(request, throttle_time_ms=0, error_code=int(code), error_message=message)


async def change_voters(broker: BrokerView, kind: str, body: Any, *, timeout_s: float) -> Outcome:
    """Check, commit and wait for one voter change (see the rules)."""
    if not cluster_allowed(broker, ALTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
    if body.cluster_id is not None and body.cluster_id != broker.config.cluster_id:
        return ErrorCode.INCONSISTENT_CLUSTER_ID, f"this is cluster {broker.config.cluster_id}"
    node, directory = int(body.voter_id), directory_of(body.voter_directory_id)
    if directory is None:
        return ErrorCode.INVALID_REQUEST, f"{body.voter_directory_id} is no tidelog directory id"
    status = broker.metadata.status()
    if not status.voters_committed:
        return (
            ErrorCode.REQUEST_TIMED_OUT,
            "Request timed out waiting for voters to commit the latest voter change",
        )
    command = {
        "type": kind,
        "node": node,
        "directory": directory,
        "voters": committed_voters(broker),
    }
    deadline = time.monotonic() + timeout_s
    code, message = await commit_checked(broker, command)
    if code is not ErrorCode.NONE:
        return code, message
    target = broker.image.membership.voter_target or ()
    if (node in target) != (kind == "add_voter"):  # refused as applied: taken by another
        return ErrorCode.INVALID_REQUEST, f"the voter change of node {node} was not applied"
    while time.monotonic() < deadline:
        status = broker.metadata.status()
        voting = {key.node for key in status.voters}
        if status.voters_committed and (node in voting) == (kind == "add_voter"):
            return ErrorCode.NONE, None
        await asyncio.sleep(VOTER_POLL_S)
    verb = "added to" if kind == "add_voter" else "removed from"
    return (
        ErrorCode.REQUEST_TIMED_OUT,
        f"node {node} was not {verb} the committed voter set in {timeout_s:g} s (the target "
        "stays: the leader goes on toward it)",
    )


async def commit_checked(broker: BrokerView, command: dict[str, Any]) -> Outcome:
    """The command checked against this node's image (Kafka's error), then committed."""
    try:
        broker.image.membership.check(command["type"], command, broker.image)
    except MetadataError as error:
        return ErrorCode[error.code], str(error)
    return await broker.commit_metadata(command)


def committed_voters(broker: BrokerView) -> list[int]:
    """The nodes of the voter set this node's copy of the metadata log holds."""
    return sorted({int(key.node) for key in broker.metadata.status().voters})


def directory_of(value: uuid.UUID | None) -> int | None:
    """A tidelog directory id (0: none named; kafka-python reads the all-zero uuid as
    None), or None for a uuid that is none."""
    number = 0 if value is None else value.int
    return number if number < 1 << DIRECTORY_BITS else None


VOTERS_HANDLERS = {
    ApiKey.ADD_RAFT_VOTER: add_raft_voter,
    ApiKey.REMOVE_RAFT_VOTER: remove_raft_voter,
    ApiKey.UNREGISTER_BROKER: unregister_broker,
}
