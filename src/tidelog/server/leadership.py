"""Where leadership goes: controlled shutdown, preferred-leader elections (ElectLeaders)
and the automatic leader rebalance, all by the core's leadership transfer (rule 10 of
`core/replica.py`: the leader takes no produce, brings the target's durable log up to its
own, then tells it to campaign at once).

Rules of this file:
- A leader hands over only to a replica it counts in sync; the core sends TimeoutNow only
  once that replica holds the whole log durably, so a handover loses nothing and elects
  no replica that could not win an ordinary election.
- The preferred replica of a partition is the first of its replicas (Kafka's).
- Controlled shutdown (SIGTERM, before the listeners close): every partition this node
  leads is handed over, to its preferred replica when that one is in sync, else to the
  next in-sync replica in the partition's order; transfers that ended are asked again until
  the node leads nothing or `controlled_shutdown_timeout_ms` has passed.
- ElectLeaders (PREFERRED), at any node: the leader, here or told by a peer message
  (ElectPreferred), hands over to the preferred replica; the answer comes once that replica
  leads, or says why not: ELECTION_NOT_NEEDED when it leads already,
  PREFERRED_LEADER_NOT_AVAILABLE when it is not in sync or did not take over in time.
  UNCLEAN elections are refused: a replica out of sync would lose acknowledged records.
- ISR mode (docs/isr.md): the controller moves leaderships, not the leaders: controlled
  shutdown asks it first (server/isr_control.py), and a preferred-leader election is its
  `elect_preferred` command.
- A new partition (quorum mode) is led by its preferred replica, as Kafka's controller
  makes it: that replica campaigns as soon as it hosts the partition, and again at each
  tick while no one leads epoch 0, for one election timeout. Its peers may host the
  partition a heartbeat later than it (they learn the metadata log's HWM then) and drop
  its first requests; a campaign here is a pre-vote, so one that fails disturbs no one,
  and the others' election timers, started when they host it, fire an election timeout
  later at the soonest. Without this a random one of the three often won, and the
  rebalance moved the leadership again minutes later.
- The automatic rebalance (Kafka's auto.leader.rebalance.enable), every
  `leader_imbalance_check_interval_ms`: a leader hands a partition over to its preferred
  replica when that replica is in sync and the share of the partitions it prefers but does
  not lead is above `leader_imbalance_per_broker_percentage`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any, Final

from tidelog.core.replica import ReplicaStatus, Role
from tidelog.protocol.kafka import ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.peer import PartitionKey
from tidelog.server.acl import ALTER
from tidelog.server.answers import body_of, response
from tidelog.server.authorize import cluster_allowed
from tidelog.server.partition import PartitionRunner
from tidelog.server.partition_inputs import Transfer, successor
from tidelog.server.view import BrokerView
from tidelog.types import NodeId

log = logging.getLogger("tidelog.leadership")

HANDOVER_POLL_S: Final = 0.05
ELECTION_WAIT_S_MAX: Final = 30.0
PREFERRED, UNCLEAN = 0, 1


def preferred_of(status: ReplicaStatus) -> NodeId:
    return status.replicas[0]


def hand_over(
    runner: PartitionRunner, target: NodeId | None = None, avoid: frozenset[NodeId] = frozenset()
) -> None:
    """Ask the partition's leader here to hand over, to `target` or to its successor
    (`partition_inputs.successor`), in its next round; only to an in-sync replica."""
    runner.submit(Transfer(target, avoid))


def led(runners: Iterable[PartitionRunner]) -> list[PartitionRunner]:
    """The partitions led here whose leader hands over (quorum mode; in ISR mode the
    controller moves leaderships: server/isr_control.py)."""
    return [
        runner for runner in runners if runner.status().role is Role.LEADER and not runner.isr_mode
    ]


async def controlled_shutdown(broker: BrokerView, timeout_s: float) -> int:
    """Hand every leadership of this node over (see the rules); how many partitions it
    still leads when done: those with no in-sync replica to take them (all replicas
    shutting down, as in `cluster down`), or not taken in time."""
    deadline = time.monotonic() + timeout_s
    leading = led(broker.hosted())
    if leading:
        log.info("controlled shutdown: handing over %d leaderships", len(leading))
    while time.monotonic() < deadline:
        avoid = frozenset(broker.stopping_nodes)
        movable = [r for r in leading if successor(r.status(), avoid) is not None]
        if not movable:
            break
        for runner in movable:
            hand_over(runner, avoid=avoid)
        await asyncio.sleep(HANDOVER_POLL_S)
        leading = led(broker.hosted())
    if leading:
        names = ", ".join(f"{r.key.topic}-{r.key.partition}" for r in leading[:10])
        timed_out = time.monotonic() >= deadline
        log.log(
            logging.WARNING if timed_out else logging.INFO,
            "controlled shutdown: still leading %d partitions (%s): %s",
            len(leading),
            names,
            "not taken over in time" if timed_out else "no other in-sync replica is running",
        )
    return len(leading)


def preferred_shares(broker: BrokerView) -> dict[NodeId, float]:
    """For each node, the share of the partitions it is preferred for that it does not lead
    (Kafka's leader imbalance ratio), as this node knows the leaders."""
    preferred: dict[NodeId, int] = {}
    not_led: dict[NodeId, int] = {}
    for key, replicas in partitions_of(broker):
        node = NodeId(replicas[0])
        preferred[node] = preferred.get(node, 0) + 1
        if broker.leader_of(key)[0] != node:
            not_led[node] = not_led.get(node, 0) + 1
    return {node: not_led.get(node, 0) / count for node, count in preferred.items()}


def partitions_of(broker: BrokerView) -> Iterator[tuple[PartitionKey, tuple[int, ...]]]:
    """Every partition of the cluster with its replicas, the metadata log's included."""
    voters = sorted({key.node for key in broker.metadata.status().voters})
    yield broker.metadata.key, tuple(voters or broker.all_nodes)  # its voters may lead it
    for topic in broker.image.topics.values():
        for partition, replicas in enumerate(topic.replicas):
            yield PartitionKey(topic.name, partition), replicas


def rebalance(broker: BrokerView, threshold_percent: int) -> int:
    """The automatic rebalance's check (see the rules); how many handovers it asked for."""
    shares = preferred_shares(broker)
    asked = 0
    for runner in broker.hosted():
        status = runner.status()
        if status.role is not Role.LEADER:
            continue
        preferred = preferred_of(status)
        if preferred == broker.node_id or preferred not in status.in_sync_replicas:
            continue
        if preferred in broker.stopping_nodes:
            continue
        if shares.get(preferred, 0.0) * 100 > threshold_percent:
            broker.elect_preferred(runner.key, broker.node_id, int(status.epoch))
            asked += 1
    if asked:
        log.info("leader rebalance: handing %d partitions to their preferred replicas", asked)
    return asked


async def elect_leaders(broker: BrokerView, request: KafkaRequest) -> Any:
    """ElectLeaders (Kafka's preferred-replica election)."""
    body = body_of(request)
    cls = request.response_class.ReplicaElectionResult
    election = getattr(body, "election_type", PREFERRED)
    if not cluster_allowed(broker, ALTER):
        return response(
            request,
            throttle_time_ms=0,
            error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
            replica_election_results=[],
        )
    known = dict(partitions_of(broker))
    if body.topic_partitions is None:
        asked = sorted(key for key in known if key != broker.metadata.key)
    else:
        asked = [
            PartitionKey(str(topic.topic), int(partition))
            for topic in body.topic_partitions
            for partition in topic.partitions
        ]
    wait_s = min(max(body.timeout_ms, 0) / 1000, ELECTION_WAIT_S_MAX)
    outcomes = await asyncio.gather(
        *(elect_one(broker, key, known.get(key), election, wait_s) for key in asked)
    )
    by_topic: dict[str, list[Any]] = {}
    for key, (code, message) in zip(asked, outcomes, strict=True):
        by_topic.setdefault(key.topic, []).append(
            cls.PartitionResult(
                partition_id=key.partition, error_code=int(code), error_message=message
            )
        )
    results = [cls(topic=topic, partition_result=parts) for topic, parts in by_topic.items()]
    return response(request, throttle_time_ms=0, error_code=0, replica_election_results=results)


async def elect_one(
    broker: BrokerView,
    key: PartitionKey,
    replicas: tuple[int, ...] | None,
    election: int,
    wait_s: float,
) -> tuple[ErrorCode, str | None]:
    if replicas is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if election != PREFERRED:
        return ErrorCode.INVALID_REQUEST, "unclean elections would lose acknowledged records"
    preferred = NodeId(replicas[0])
    deadline = time.monotonic() + wait_s
    asked: tuple[int, int] | None = None  # the (leader, epoch) asked last
    while True:
        leader, epoch = broker.leader_of(key)
        if leader == preferred:
            done = ErrorCode.NONE if asked is not None else ErrorCode.ELECTION_NOT_NEEDED
            return done, None
        if preferred in broker.stopping_nodes:
            return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, f"node {preferred} is shutting down"
        if leader >= 0 and asked != (leader, epoch):
            broker.elect_preferred(key, NodeId(leader), epoch)
            asked = (leader, epoch)
        if time.monotonic() >= deadline:
            return (
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                f"node {preferred} did not take over in time (is it in sync?)",
            )
        await asyncio.sleep(HANDOVER_POLL_S)


LEADERSHIP_HANDLERS = {ApiKey.ELECT_LEADERS: elect_leaders}
