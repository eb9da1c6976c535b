"""The replication throttle (core/replicate.py; Kafka's leader.replication.throttled.rate):
a leader sends a copy that does not vote (a reassignment's new replica) at most the rate's
bytes of batches a second, on average, while its voters get everything at once; lifted,
the learner catches up and is added to the voter set."""

from __future__ import annotations

import random

from tidelog.core.messages import AppendRequest, Message
from tidelog.core.replica import ACKS_LEADER, Replica, ReplicaConfig
from tidelog.core.storage import MemoryStorage
from tidelog.node.driver import open_replica
from tidelog.protocol.peer import PartitionKey
from tidelog.server.partition_inputs import carry_settings
from tidelog.testing.cluster import Cluster
from tidelog.types import DirectoryId, NodeId
from tidelog.wal.batches import producer_batch

TICK_MS = 10  # each tick is 10 ms of the throttle's clock
RATE = 20_000  # bytes a second: 200 bytes a tick
BATCHES = 200
VALUE = b"x" * 400  # each batch a little over 400 bytes


def make_cluster(rate: int | None) -> Cluster:
    """Nodes 1-3 vote; node 4 is a member that does not (a reassignment's new replica)."""

    def config(node: NodeId, members: tuple[NodeId, ...]) -> ReplicaConfig:
        born = members[:3]
        return ReplicaConfig(
            node,
            born,
            members=members,
            target=born,
            tick_ms=TICK_MS,
            throttle_bytes_per_s=rate,
            directories=tuple(DirectoryId(n) for n in born),
        )

    return Cluster(replicas=4, rng=random.Random(0), config=config)


def settle(cluster: Cluster) -> None:
    for _ in range(100_000):
        if not cluster.in_flight:
            return
        cluster.deliver(min(cluster.in_flight, key=lambda e: e.seq))
    raise AssertionError("the cluster did not settle")


def tick_all(cluster: Cluster, ticks: int) -> None:
    for _ in range(ticks):
        cluster.now += TICK_MS
        for node in cluster.ids:
            cluster.tick(node)
        settle(cluster)


def bytes_sent(cluster: Cluster) -> dict[NodeId, int]:
    """Batch bytes each node receives in append requests, from now on."""
    received: dict[NodeId, int] = {}

    def count(node: NodeId, replica: Replica, msg: Message) -> None:
        del replica
        if isinstance(msg, AppendRequest):
            received[node] = received.get(node, 0) + sum(len(b) for b in msg.batches)

    cluster.on_message.append(count)
    return received


def lead_and_write(cluster: Cluster) -> None:
    cluster.input(NodeId(1), lambda replica: replica.campaign())
    settle(cluster)
    tick_all(cluster, 3)
    for request in range(BATCHES):
        batch = producer_batch([VALUE])
        cluster.input(NodeId(1), lambda r, i=request, b=batch: r.propose(i, b, acks=ACKS_LEADER))
    settle(cluster)


def test_a_learner_gets_the_throttles_rate_and_the_voters_everything() -> None:
    cluster = make_cluster(RATE)
    received = bytes_sent(cluster)
    lead_and_write(cluster)
    written = BATCHES * len(producer_batch([VALUE]))
    assert received[NodeId(2)] >= written and received[NodeId(3)] >= written
    ticks = 50  # half a second
    before = received.get(NodeId(4), 0)
    tick_all(cluster, ticks)
    sent = received.get(NodeId(4), 0) - before
    allowed = RATE * ticks * TICK_MS / 1000 + len(producer_batch([VALUE]))  # and one batch
    assert RATE * ticks * TICK_MS / 1000 / 2 <= sent <= allowed
    learner = cluster.replica(NodeId(4))
    assert learner.log.log_end_offset < cluster.replica(NodeId(1)).log.log_end_offset
    assert not learner.is_voter()


def test_lifting_the_throttle_lets_the_learner_catch_up_and_join() -> None:
    cluster = make_cluster(RATE)
    lead_and_write(cluster)
    tick_all(cluster, 5)
    leader = cluster.replica(NodeId(1))
    assert cluster.replica(NodeId(4)).log.log_end_offset < leader.log.log_end_offset
    for node in cluster.ids:
        cluster.input(node, lambda r: r.set_throttle(None))
        cluster.input(node, lambda r: r.set_members(cluster.ids, (NodeId(1), NodeId(2), NodeId(4))))
    tick_all(cluster, 40)
    assert cluster.replica(NodeId(4)).log.log_end_offset == leader.log.log_end_offset
    assert sorted(leader.voters.nodes) == [1, 2, 4]


def test_a_replica_started_again_takes_the_settings_given_since() -> None:
    """A repair or a disk outage starts the replica again from the partition's first
    config; the runner hands it what its predecessor was given since (carry_settings)."""
    config = ReplicaConfig(NodeId(1), (NodeId(1), NodeId(2), NodeId(3)))
    storage = MemoryStorage(directory_id=DirectoryId(1))
    first = open_replica(config, storage, random.Random(0))
    members = (NodeId(1), NodeId(2), NodeId(3), NodeId(4))
    assert first.set_members(members, (NodeId(1), NodeId(2), NodeId(4))) is None
    assert first.set_throttle(RATE) is None
    assert first.set_min_insync_replicas(2) is None
    again = open_replica(config, storage, random.Random(0))
    carry_settings(PartitionKey("t", 0), again, first.status())
    status = again.status()
    assert status.replicas == members and status.target == (1, 2, 4)
    assert status.throttle_bytes_per_s == RATE and status.min_insync_replicas == 2
