"""The group coordinator on a real partition (one replica, its disk log, its runner), in one
process: the protocol's rules, the rebuild from the log, and offsets retention.

Each test runs its own event loop; the partition is real (a `PartitionRunner` over a
`DiskStorage`), so every write below is an acks=all append that is fsync'd before the
coordinator answers.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

from tidelog.core.replica import Replica, ReplicaConfig
from tidelog.groups.state import GroupState
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.peer import PartitionKey
from tidelog.server.disk_health import DiskHealth
from tidelog.server.groups import (
    OFFSETS_TOPIC,
    GroupConfig,
    GroupCoordinator,
    GroupError,
    group_partition,
)
from tidelog.server.partition import PartitionRunner
from tidelog.server.partition_inputs import Campaign, Tick
from tidelog.types import NodeId
from tidelog.wal import DiskStorage

T = TypeVar("T")
DEADLINE_S = 10.0
SESSION_MS = 6_000
PROTOCOLS = [("range", b"subscription-a")]


class Node:
    """One replica of a `__consumer_offsets` partition, its runner and its coordinator."""

    def __init__(self, directory: Path, config: GroupConfig, topics: set[str]) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1)
        self.storage = DiskStorage(str(directory), clock=lambda: int(time.time() * 1000))
        replica_config = ReplicaConfig(NodeId(1), (NodeId(1),), tick_ms=10)
        self.coordinator = GroupCoordinator(0, config, topic_exists=topics.__contains__)
        self.runner = PartitionRunner(
            PartitionKey(OFFSETS_TOPIC, 0),
            self.storage,
            open_replica=lambda storage: Replica(replica_config, storage, random.Random(1)),
            send=lambda key, messages: None,
            executor=self.executor,
            fatal=lambda error: None,
            disk=DiskHealth(),
            on_round=self.coordinator.on_round,
        )
        self.ticker: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.runner.submit(Campaign())
        self.ticker = asyncio.get_running_loop().create_task(self.tick_forever())
        await until(lambda: self.coordinator.loaded)

    async def tick_forever(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            now = int(time.monotonic() * 1000)
            self.runner.submit(Tick(now, now))
            self.coordinator.tick()

    async def stop(self) -> None:
        assert self.ticker is not None
        self.ticker.cancel()
        await self.runner.stop()
        self.executor.shutdown()


async def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def run_with_node(
    tmp_path: Path,
    body: Callable[[Node], Awaitable[T]],
    *,
    config: GroupConfig | None = None,
    topics: set[str] | None = None,
) -> T:
    async def main() -> T:
        node = Node(tmp_path, config or GroupConfig(), topics if topics is not None else {"t"})
        await node.start()
        try:
            return await body(node)
        finally:
            await node.stop()

    return asyncio.run(main())


async def join(
    coordinator: GroupCoordinator, member_id: str = "", reason: str | None = None, **kwargs: object
) -> object:
    return await coordinator.join(
        "g",
        member_id=member_id,
        group_instance_id=None,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=int(kwargs.get("session_timeout_ms", SESSION_MS)),  # type: ignore[call-overload]
        rebalance_timeout_ms=int(kwargs.get("rebalance_timeout_ms", 3_000)),  # type: ignore[call-overload]
        protocol_type="consumer",
        protocols=PROTOCOLS,
        reason=reason,
    )


def test_group_partition_matches_kafka() -> None:
    # Java's String.hashCode of short names, then Kafka's Utils.abs (n & 0x7fffffff).
    codes = {"": 0, "a": 97, "ab": 3105, "g": 103}
    for name, code in codes.items():
        assert group_partition(name, 1_000_003) == code % 1_000_003
    # A negative Java hash: "polygenelubricants".hashCode() == Integer.MIN_VALUE.
    assert group_partition("polygenelubricants", 7) == 0


def test_join_sync_heartbeat_commit_fetch(tmp_path: Path) -> None:
    async def body(node: Node) -> None:
        c = node.coordinator
        joined = await join(c)
        assert joined.generation == 1 and joined.leader == joined.member_id  # type: ignore[attr-defined]
        assert joined.members == [(joined.member_id, None, b"subscription-a")]  # type: ignore[attr-defined]
        member = joined.member_id  # type: ignore[attr-defined]
        _, protocol, assignment = await c.sync(
            "g", generation=1, member_id=member, assignments={member: b"all"}
        )
        assert (protocol, assignment) == ("range", b"all")
        assert c.groups["g"].state is GroupState.STABLE
        c.heartbeat("g", generation=1, member_id=member)
        codes = await c.commit(
            "g", generation=1, member_id=member, offsets={("t", 0): (42, 3, "meta")}
        )
        assert codes == {("t", 0): ErrorCode.NONE}
        fetched = c.fetch_offsets("g", [("t", 0), ("t", 1)], now_ms=int(time.monotonic() * 1000))
        assert fetched[("t", 1)] is None
        committed = fetched[("t", 0)]
        assert committed is not None and (committed.offset, committed.metadata) == (42, "meta")
        # A stale generation and an unknown member are fenced.
        with pytest.raises(GroupError) as stale:
            await c.commit("g", generation=0, member_id=member, offsets={("t", 0): (1, -1, "")})
        assert stale.value.code is ErrorCode.ILLEGAL_GENERATION
        with pytest.raises(GroupError) as unknown:
            c.heartbeat("g", generation=1, member_id="nobody")
        assert unknown.value.code is ErrorCode.UNKNOWN_MEMBER_ID
        # A standalone commit (generation -1, no member) is refused while the group is active.
        with pytest.raises(GroupError) as active:
            await c.commit("g", generation=-1, member_id="", offsets={("t", 0): (1, -1, "")})
        assert active.value.code is ErrorCode.UNKNOWN_MEMBER_ID
        # Unknown topics are refused per partition.
        codes = await c.commit("g", generation=1, member_id=member, offsets={("x", 0): (1, -1, "")})
        assert codes == {("x", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}

    run_with_node(tmp_path, body)


def test_second_member_triggers_rebalance_and_leave_rebalances_again(tmp_path: Path) -> None:
    async def body(node: Node) -> None:
        c = node.coordinator
        first = await join(c)
        one = first.member_id  # type: ignore[attr-defined]
        await c.sync("g", generation=1, member_id=one, assignments={one: b"p0,p1"})
        second = asyncio.ensure_future(join(c))
        await until(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE)
        with pytest.raises(GroupError) as rebalancing:  # the first member learns by heartbeat
            c.heartbeat("g", generation=1, member_id=one)
        assert rebalancing.value.code is ErrorCode.REBALANCE_IN_PROGRESS
        again = await join(c, one)
        joined = await second
        assert again.generation == joined.generation == 2  # type: ignore[attr-defined]
        two = joined.member_id  # type: ignore[attr-defined]
        assert sorted(m for m, _, _ in again.members) == sorted([one, two])  # type: ignore[attr-defined]
        follower = asyncio.ensure_future(c.sync("g", generation=2, member_id=two, assignments={}))
        await c.sync("g", generation=2, member_id=one, assignments={one: b"p0", two: b"p1"})
        assert (await follower)[2] == b"p1"
        assert c.leave("g", [two]) == [ErrorCode.NONE]
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        third = await join(c, one)
        assert third.generation == 3 and third.members == [(one, None, b"subscription-a")]  # type: ignore[attr-defined]

    run_with_node(tmp_path, body)


def test_sync_refuses_a_protocol_that_is_not_the_groups_and_reasons_are_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SyncGroup v5+ names the protocol type and protocol (KIP-559): either, when named,
    must be the group's; JoinGroup v8+ and LeaveGroup v5+ reasons are logged (KIP-800)."""
    caplog.set_level(logging.INFO, logger="tidelog.groups")

    async def body(node: Node) -> None:
        c = node.coordinator
        member = (await join(c, reason="starting up")).member_id  # type: ignore[attr-defined]
        for protocol_type, protocol in [("connect", "range"), ("consumer", "roundrobin")]:
            with pytest.raises(GroupError) as inconsistent:
                await c.sync(
                    "g",
                    generation=1,
                    member_id=member,
                    assignments={member: b"all"},
                    protocol_type=protocol_type,
                    protocol=protocol,
                )
            assert inconsistent.value.code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE  # nothing stored
        named = await c.sync(
            "g",
            generation=1,
            member_id=member,
            assignments={member: b"all"},
            protocol_type="consumer",
            protocol="range",
        )
        assert named == ("consumer", "range", b"all")
        unnamed = await c.sync("g", generation=1, member_id=member, assignments={})
        assert unnamed == ("consumer", "range", b"all")
        assert c.leave("g", [member], ("shutting down",)) == [ErrorCode.NONE]

    run_with_node(tmp_path, body)
    logged = caplog.text
    assert "joins (client reason: starting up)" in logged
    assert "leaves (client reason: shutting down)" in logged


def test_session_timeout_removes_a_silent_member(tmp_path: Path) -> None:
    config = GroupConfig(session_timeout_ms_min=100)

    async def body(node: Node) -> None:
        c = node.coordinator
        joined = await join(c, session_timeout_ms=200)
        member = joined.member_id  # type: ignore[attr-defined]
        await c.sync("g", generation=1, member_id=member, assignments={member: b"x"})
        await until(lambda: c.groups["g"].state is GroupState.EMPTY)
        assert c.groups["g"].generation == 2 and not c.groups["g"].members

    run_with_node(tmp_path, body, config=config)


def test_invalid_requests_are_refused(tmp_path: Path) -> None:
    async def body(node: Node) -> None:
        c = node.coordinator
        with pytest.raises(GroupError) as timeout:
            await join(c, session_timeout_ms=10)
        assert timeout.value.code is ErrorCode.INVALID_SESSION_TIMEOUT
        with pytest.raises(GroupError) as unknown:
            await join(c, "made-up-member")
        assert unknown.value.code is ErrorCode.UNKNOWN_MEMBER_ID
        await join(c)
        with pytest.raises(GroupError) as inconsistent:
            await c.join(
                "g",
                member_id="",
                group_instance_id=None,
                client_id="c",
                client_host="",
                session_timeout_ms=SESSION_MS,
                rebalance_timeout_ms=1000,
                protocol_type="consumer",
                protocols=[("other", b"")],
            )
        assert inconsistent.value.code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL

    run_with_node(tmp_path, body)


def test_a_new_coordinator_rebuilds_offsets_and_generation_from_the_log(tmp_path: Path) -> None:
    async def first_life(node: Node) -> tuple[str, int]:
        c = node.coordinator
        joined = await join(c)
        member = joined.member_id  # type: ignore[attr-defined]
        await c.sync("g", generation=1, member_id=member, assignments={member: b"mine"})
        for offset in (5, 9):
            await c.commit(
                "g", generation=1, member_id=member, offsets={("t", 0): (offset, -1, "")}
            )
        codes = await c.commit("solo", generation=-1, member_id="", offsets={("t", 1): (7, -1, "")})
        assert codes == {("t", 1): ErrorCode.NONE}
        return member, node.runner.replica.epoch

    async def second_life(node: Node) -> None:
        c = node.coordinator
        group = c.groups["g"]
        assert group.state is GroupState.STABLE and group.generation == 1
        assert list(group.members) == [member] and group.members[member].assignment == b"mine"
        now_ms = int(time.monotonic() * 1000)
        assert c.fetch_offsets("g", None, now_ms=now_ms)[("t", 0)].offset == 9  # type: ignore[union-attr]
        assert c.fetch_offsets("solo", None, now_ms=now_ms)[("t", 1)].offset == 7  # type: ignore[union-attr]
        c.heartbeat("g", generation=1, member_id=member)  # the member carries on
        assert node.runner.replica.epoch > epoch

    member, epoch = run_with_node(tmp_path, first_life)
    run_with_node(tmp_path, second_life)


def test_offsets_of_deleted_topics_and_long_empty_groups_expire(tmp_path: Path) -> None:
    topics = {"t", "gone"}
    config = GroupConfig(offsets_retention_ms=300, offsets_retention_check_interval_ms=50)

    async def body(node: Node) -> None:
        c = node.coordinator
        await c.commit("g", generation=-1, member_id="", offsets={("gone", 0): (3, -1, "")})
        topics.discard("gone")
        c.expire_now()
        await until(lambda: "g" not in c.groups)  # its only offset expired with its topic
        joined = await join(c)
        member = joined.member_id  # type: ignore[attr-defined]
        await c.sync("g", generation=1, member_id=member, assignments={})
        await c.commit("g", generation=1, member_id=member, offsets={("t", 0): (4, -1, "")})
        await asyncio.sleep(0.4)  # longer than the retention: kept while the group is active
        assert ("t", 0) in c.groups["g"].offsets
        c.leave("g", [member])
        await until(lambda: "g" not in c.groups)  # empty for longer than the retention

    run_with_node(tmp_path, body, config=config, topics=topics)

    async def reloaded(node: Node) -> None:
        assert "g" not in node.coordinator.groups  # the tombstones are in the log

    run_with_node(tmp_path, reloaded, config=config, topics=topics)
