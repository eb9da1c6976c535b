"""Metadata commands asked of any node: the controller commits them, another node forwards
them to it (as KRaft brokers forward admin requests) and answers once they are applied
there too.

Each of three nodes, asked directly over its own connection (no client library choosing
the node), creates a topic, adds a SCRAM credential and deletes the topic; the same
node's next Metadata or DescribeUserScramCredentials answer already shows the change.
Before forwarding, two nodes of three answered NOT_CONTROLLER, which Kafka's admin clients
do not retry for CreateAcls or AlterUserScramCredentials.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from tidelog.address import parse_address
from tidelog.protocol.kafka import _APIS, ApiKey
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.peer import ForwardRequest
from tidelog.server.broker import forwarded_command
from tidelog.testing.live import LiveCluster, RawConnection, poll
from tidelog.types import NodeId

SCRAM_SHA_256 = 1
CREATABLE = _APIS[ApiKey.CREATE_TOPICS].request_class.CreatableTopic


def request(key: ApiKey, version: int, **fields: Any) -> Any:
    return _APIS[key].request_class(version=version, **fields)


def until_answered(connection: RawConnection, make: Any, code_of: Any, what: str) -> Any:
    """Ask until the answer is not NOT_CONTROLLER (no controller elected yet), then return it."""

    def ask() -> Any:
        answer = connection.ask(make())
        return None if code_of(answer) == ErrorCode.NOT_CONTROLLER else answer

    return poll(ask, what)


def topic_names(connection: RawConnection) -> set[str]:
    answer = connection.ask(request(ApiKey.METADATA, 1, topics=None))
    return {topic.name for topic in answer.topics}


def test_every_node_takes_metadata_commands(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path / "cluster")
    try:
        controllers = set()
        for node in cluster.record["nodes"]:
            connection = RawConnection(parse_address(node["kafka"]))
            try:
                topic = f"made-at-{node['id']}"
                created = until_answered(
                    connection,
                    lambda t=topic: request(
                        ApiKey.CREATE_TOPICS,
                        4,
                        topics=[CREATABLE(t, 2, 3, [], [])],
                        timeout_ms=30_000,
                        validate_only=False,
                    ),
                    lambda answer: answer.topics[0].error_code,
                    f"node {node['id']} creates {topic}",
                )
                assert created.topics[0].error_code == ErrorCode.NONE, created
                assert topic in topic_names(connection)  # applied on this node already

                user = f"user-{node['id']}"
                cls = _APIS[ApiKey.ALTER_USER_SCRAM_CREDENTIALS].request_class
                upsertion = cls.ScramCredentialUpsertion(
                    user, SCRAM_SHA_256, 4096, secrets.token_bytes(16), secrets.token_bytes(32)
                )
                altered = until_answered(
                    connection,
                    lambda u=upsertion: request(
                        ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=[], upsertions=[u]
                    ),
                    lambda answer: answer.results[0].error_code,
                    f"node {node['id']} stores {user}'s credential",
                )
                assert altered.results[0].error_code == ErrorCode.NONE, altered
                described = connection.ask(
                    request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=None)
                )
                assert user in {result.user for result in described.results}

                deleted = until_answered(
                    connection,
                    lambda t=topic: request(
                        ApiKey.DELETE_TOPICS, 3, topic_names=[t], timeout_ms=30_000
                    ),
                    lambda answer: answer.responses[0].error_code,
                    f"node {node['id']} deletes {topic}",
                )
                assert deleted.responses[0].error_code == ErrorCode.NONE, deleted
                assert topic not in topic_names(connection)
                answer = connection.ask(request(ApiKey.METADATA, 1, topics=[]))
                controllers.add(answer.controller_id)
            finally:
                connection.close()
        assert len(controllers) == 1 and controllers != {-1}, controllers
        # Two of the three nodes forwarded what they were asked.
        forwarders = [n for n in cluster.record["nodes"] if n["id"] not in controllers]
        assert len(forwarders) == 2
    finally:
        cluster.down()


def forward(*commands: bytes) -> ForwardRequest:
    return ForwardRequest(NodeId(2), NodeId(1), 7, commands)


@pytest.mark.parametrize(
    "commands",
    [
        (),
        (b"{}", b"{}"),
        (b"not json",),
        (b"[1, 2]",),
        (json.dumps({"type": "drop_everything"}).encode(),),
        (json.dumps({"no": "type"}).encode(),),
        (b" " * (1024 * 1024 + 1),),
    ],
)
def test_a_forwarded_command_that_cannot_be_right_is_refused(commands: tuple[bytes, ...]) -> None:
    assert forwarded_command(forward(*commands)) is None


def test_a_forwarded_command_of_a_known_type_is_taken() -> None:
    command = {"type": "delete_topic", "name": "t"}
    assert forwarded_command(forward(json.dumps(command).encode())) == command
