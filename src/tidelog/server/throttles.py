"""The replication throttles on this node: Kafka's leader.replication.throttled.rate and
follower.replication.throttled.rate (server/broker_configs.py) turned into the rate each
partition runner here holds (`SetThrottle`): what its leader may send, in bytes a second,
to the copies that do not vote (core/replicate.py: a reassignment's new replicas, a copy
catching up after it lost its log; voters are never held back).

Rules of this file:
- Kafka's rates are a broker's, for all its partitions together; the core throttles one
  partition. So the leader rate in force for this node (its own, else the cluster
  default) is shared equally among the partitions it leads that have copies that do not
  vote. A partition it does not lead, or that has no such copy, holds the share it would
  get as one more, in case it comes to lead one before the next refresh.
- tidelog's followers do not fetch: leaders push. So a node's follower rate bounds what
  every leader pushes to its copies that do not vote, held back on the leaders' side. It
  is shared among the partitions the metadata image moves onto that node (every leader
  counts the same ones), or, when there are more, among those this node leads with such a
  copy there (a copy that lost its log). A partition takes the least of its shares
  (`partition_rates`, pure).
- An ISR-mode partition is throttled only while it moves: a replica a move added stays
  outside its copies' voter set for good (the ISR is the controller's), and Kafka
  throttles only the replicas a reassignment names. The metadata log is never throttled.
- A runner is handed its rate when that changes: after each batch of metadata commands
  that changed broker configs or made or moved partitions (`flush`, once the copies are
  open), and every few ticks (`refresh`: leaderships and voter sets change with no
  command). A replica started again on its log keeps the rate (server/partition.py).
  With no rate set anywhere and none handed, both do nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import NamedTuple, Protocol

from tidelog.core.replica import ReplicaStatus, Role
from tidelog.protocol.peer import PartitionKey
from tidelog.server.broker_configs import FOLLOWER_RATE, LEADER_RATE
from tidelog.server.metadata import Change, MetadataImage
from tidelog.server.partition import PartitionRunner
from tidelog.server.partition_inputs import SetThrottle
from tidelog.types import NodeId


class Host(Protocol):
    """What this module needs of its node (tidelog.server.broker.Broker)."""

    node_id: NodeId
    image: MetadataImage
    runners: dict[PartitionKey, PartitionRunner]
    metadata_key: PartitionKey


class Copy(NamedTuple):
    """What the throttle of one partition's copy here depends on."""

    leads: bool  # this node leads the partition
    learners: frozenset[int]  # the nodes of its copies that do not vote


def learners_of(status: ReplicaStatus) -> frozenset[int]:
    """The nodes of a partition's copies that do not vote, as this copy knows them: a
    leader's followers that do not count, else the members outside the voter set."""
    if status.role is Role.LEADER:
        return frozenset(f.node for f in status.followers if not f.voter)
    voters = {key.node for key in status.voters}
    return frozenset(set(status.replicas) - voters - {status.node_id})


def partition_rates(
    copies: Mapping[PartitionKey, Copy | None],
    *,
    leader_rate: int | None,
    follower_rate: Callable[[int], int | None],
    moving_onto: Mapping[int, int],
) -> dict[PartitionKey, int | None]:
    """Each copy's throttle (None: none) from this node's leader rate, each node's follower
    rate and how many partitions the image moves onto each node (see the rules). A copy
    given as None is never throttled."""
    held = [copy for copy in copies.values() if copy is not None]
    led = sum(1 for copy in held if copy.leads and copy.learners)
    led_onto = Counter(node for copy in held if copy.leads for node in copy.learners)
    rates: dict[PartitionKey, int | None] = {}
    for key, copy in copies.items():
        if copy is None:
            rates[key] = None
            continue
        counted = copy.leads and bool(copy.learners)  # among those sharing the rates
        shares = [] if leader_rate is None else [leader_rate // (led + (not counted))]
        for node in copy.learners:
            rate = follower_rate(node)
            if rate is not None:
                sharing = max(moving_onto.get(node, 0), led_onto[node] + (not copy.leads))
                shares.append(rate // max(1, sharing))
        rates[key] = max(1, min(shares)) if shares else None
    return rates


class ReplicationThrottles:
    """This node's runners' throttles (see the rules)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.handed: dict[PartitionKey, tuple[PartitionRunner, int | None]] = {}
        self.dirty = False

    def on_change(self, change: Change) -> None:
        if change.brokers or change.created or change.moved:
            self.dirty = True

    def flush(self) -> None:
        """After a batch of metadata commands: hand the rates again if they may differ."""
        if self.dirty:
            self.dirty = False
            self.refresh()

    def refresh(self) -> None:
        """Hand each runner here its rate, when it is not the one it holds."""
        host = self.host
        configs = host.image.broker_configs
        if not configs.held and all(rate is None for _, rate in self.handed.values()):
            self.handed.clear()
            return
        node = int(host.node_id)
        rates = partition_rates(
            self.copies(),
            leader_rate=configs.rate_of(node, LEADER_RATE),
            follower_rate=lambda other: configs.rate_of(other, FOLLOWER_RATE),
            moving_onto=self.moving_onto(),
        )
        for key in [key for key in self.handed if key not in rates]:
            del self.handed[key]
        for key, rate in rates.items():
            runner = host.runners[key]
            if self.handed.get(key) != (runner, rate):
                runner.submit(SetThrottle(rate))
                self.handed[key] = (runner, rate)

    def copies(self) -> dict[PartitionKey, Copy | None]:
        """Each data partition hosted here; None for an ISR-mode one that is not moving."""
        image = self.host.image
        found: dict[PartitionKey, Copy | None] = {}
        for key, runner in list(self.host.runners.items()):
            if key == self.host.metadata_key:
                continue
            info = image.topics.get(key.topic)
            moved = image.assignments.get((key.topic, key.partition))
            if info is not None and info.config.isr_mode and not (moved and moved.moving):
                found[key] = None
                continue
            status = runner.status()
            found[key] = Copy(status.role is Role.LEADER, learners_of(status))
        return found

    def moving_onto(self) -> Counter[int]:
        """How many partitions the image moves onto each node now."""
        return Counter(
            node
            for assignment in self.host.image.assignments.values()
            for node in assignment.adding
        )
