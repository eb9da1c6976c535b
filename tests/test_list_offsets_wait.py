"""ListOffsets on a leader that cannot answer yet (its new epoch's HWM not reached, or its
read lease lapsed for a moment on a loaded machine) waits up to SERVING_WAIT_S for it,
as a fetch long-polls, instead of answering an error some clients do not retry; past
that wait, or when the node stops leading, the retriable error is the answer."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from tidelog.core.replica import Role
from tidelog.errors import NotLeader, OffsetNotAvailable, TidelogError
from tidelog.protocol.kafka import _APIS, ApiKey
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server import offsets_api
from tidelog.server.acl import Authorizer
from tidelog.server.metadata import MetadataImage

LATEST = -1
RESPONSE = _APIS[ApiKey.LIST_OFFSETS].response_class.ListOffsetsTopicResponse


class Leader:
    """A leader's partition runner whose latest offset raises `errors` first (one per call),
    then is 42."""

    def __init__(self, errors: list[TidelogError], role: Role = Role.LEADER) -> None:
        self.errors = errors
        self.repairing = False
        self.role = role
        self.calls = 0

    def status(self) -> Any:
        return SimpleNamespace(role=self.role, epoch=3, log_start_offset=0)

    def latest_offset(self, *, now_ms: int) -> int:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return 42


def ask(replica: Leader) -> Any:
    runner = replica  # what ListOffsets asks of a partition's runner
    broker = SimpleNamespace(
        authorizer=Authorizer(False, frozenset()),
        image=MetadataImage(),
        runner=lambda topic, partition: runner,
    )
    return asyncio.run(offsets_api.list_partition(broker, RESPONSE, "t", 0, LATEST, version=5))  # type: ignore[arg-type]


def test_a_leader_not_ready_yet_is_waited_for() -> None:
    replica = Leader([OffsetNotAvailable("new epoch"), NotLeader(None), NotLeader(None)])
    answer = ask(replica)
    assert (answer.error_code, answer.offset, answer.leader_epoch) == (ErrorCode.NONE, 42, 3)
    assert replica.calls == 4


def test_past_the_wait_the_retriable_error_is_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offsets_api, "SERVING_WAIT_S", 0.1)
    replica = Leader([NotLeader(None)] * 1000)
    answer = ask(replica)
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert 1 < replica.calls < 1000


def test_a_node_that_stops_leading_answers_at_once() -> None:
    replica = Leader([NotLeader(None)] * 1000)
    answer = ask_after_role_check(replica)  # it lost the lead after the handler looked
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert replica.calls == 1


def ask_after_role_check(replica: Leader) -> Any:
    """As `ask`, with the replica a leader at the handler's first look only."""
    looks = iter([Role.LEADER])
    original = replica.status

    def status() -> Any:
        return SimpleNamespace(**{**vars(original()), "role": next(looks, Role.FOLLOWER)})

    replica.status = status  # type: ignore[method-assign]
    return ask(replica)
