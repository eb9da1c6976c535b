"""What a leader's Ready says of a follower's log is true: checks as the leader hands
out its Ready, reporting to the checker.

- `TransferMonitor`: a leadership transfer's TimeoutNow leaves only once its target
  durably holds the leader's whole log (rule 10 of quorum mode). A target that lags
  campaigns without the leader's last records: it loses, and the partition waits an
  election for nothing, or, with votes to spare, it wins and the leader's uncommitted
  records are lost.
- `LostCopyMonitor`: a `LostCopy` the leader names (a follower's log ends below what it
  acknowledged, rule 7 of the replica) is a loss that happened: the follower's durable
  log ends below the match it names. Only an answer to a probe sent since the probe began
  proves it (scenarios 26, 27); an answer a later one overtook, or one to another
  request, does not, and forgetting a match the follower holds names a loss that did not
  happen.

Rules of this file:
- The follower's durable log is read up, or on its disk while down. A follower whose
  disk was replaced since the leader counted its match (the checker's `stale_matches`),
  one in a later epoch (a newer leader may have cut its suffix), or one setting damage
  aside (`repair_floor`) is not judged by `TransferMonitor`: the leader could not know.
- It reads replicas and storages and never changes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidelog.core.messages import LostCopy, Ready, TimeoutNow
from tidelog.core.replica import Replica
from tidelog.testing.checker import Checker
from tidelog.testing.cluster import Cluster
from tidelog.types import NodeId


@dataclass
class TransferMonitor:
    """Every TimeoutNow goes to a target durably holding the leader's whole log."""

    cluster: Cluster
    checker: Checker

    def __post_init__(self) -> None:
        self.cluster.on_ready.append(self.on_ready)

    def on_ready(self, node: NodeId, ready: object) -> None:
        if not isinstance(ready, Ready):
            return
        leader = self.cluster.nodes[node].replica
        if leader is None:
            return
        for msg in (*ready.messages, *ready.messages_after_persist):
            if isinstance(msg, TimeoutNow):
                self.check(node, leader, msg)

    def check(self, node: NodeId, leader: Replica, msg: TimeoutNow) -> None:
        target = msg.recipient
        stale = self.checker.stale_matches.get(target)
        if stale and (node, msg.epoch) in stale:
            return
        sim_node = self.cluster.nodes[target]
        replica = sim_node.replica
        # A target in a later epoch than the TimeoutNow's ignores it (rule 6 of the
        # replica); the leader itself may have moved on in the inputs of this same Ready.
        if replica is not None and (replica.epoch > msg.epoch or replica.repair_floor is not None):
            return
        # A target down after setting damage aside starts under repair, and a replica
        # under repair never campaigns (rule 10): the leader cannot know until it answers.
        if replica is None and sim_node.storage.load().repair_floor is not None:
            return
        held = durable_end(self.cluster, target)
        end = leader.log.log_end_offset
        if held < end:
            self.checker.fail(
                f"leader {node} (epoch {msg.epoch}) sends TimeoutNow to {target}, which "
                f"holds its log durably only up to {held}, below the leader's log end {end}"
            )


@dataclass
class LostCopyMonitor:
    """Every lost copy a leader names is lost: the follower's durable log ends below it,
    or fell below it after reaching it (an answer of the loss may arrive late, after the
    follower was sent its log again)."""

    cluster: Cluster
    checker: Checker
    # Each up node's durable log end, as it changed (sampled at every Ready of any node).
    ends: dict[NodeId, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cluster.on_ready.append(self.on_ready)

    def on_ready(self, node: NodeId, ready: object) -> None:
        self.sample()
        if isinstance(ready, Ready):
            for lost in ready.lost_copies:
                self.check(node, lost)

    def sample(self) -> None:
        for node, sim_node in self.cluster.nodes.items():
            if sim_node.replica is None:
                continue  # a down node's disk does not change; its first Ready samples it
            end = sim_node.replica.log.durable_end_offset
            seen = self.ends.setdefault(node, [])
            if not seen or seen[-1] != end:
                seen.append(end)

    def fell_below(self, follower: NodeId, acknowledged: int) -> bool:
        """Whether `follower`'s durable log end, once at `acknowledged` or past it, has
        since been below it."""
        seen = self.ends.get(follower, [])
        reached = next((i for i, end in enumerate(seen) if end >= acknowledged), None)
        return reached is not None and any(end < acknowledged for end in seen[reached + 1 :])

    def check(self, node: NodeId, lost: LostCopy) -> None:
        held = durable_end(self.cluster, lost.follower)
        if held >= lost.acknowledged and not self.fell_below(lost.follower, lost.acknowledged):
            self.checker.fail(
                f"leader {node} names node {lost.follower}'s copy lost (its log ends at "
                f"{lost.log_end}, below {lost.acknowledged}), but it holds its log durably "
                f"up to {held}"
            )


def durable_end(cluster: Cluster, node: NodeId) -> int:
    """How far a node's log is durable: its replica's, or its disk's while it is down."""
    sim_node = cluster.nodes[node]
    if sim_node.replica is not None:
        return sim_node.replica.log.durable_end_offset
    return sim_node.storage.load().log_end_offset
