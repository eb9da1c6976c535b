"""A leadership transfer's TimeoutNow leaves only once its target durably holds the
leader's whole log (rule 10 of quorum mode): a check as the leader hands out its Ready,
reporting to the checker.

`TransferMonitor` looks at every TimeoutNow a leader sends: the target's durable log (up,
or on its disk while down) must reach the leader's log end. A target that lags campaigns
without the leader's last records: it loses, and the partition waits an election for
nothing, or, with votes to spare, it wins and the leader's uncommitted records are lost.

Rules of this file:
- A target whose disk was replaced since the leader counted its match (the checker's
  `stale_matches`), one in a later epoch (a newer leader may have cut its suffix), or one
  setting damage aside (`repair_floor`) is not judged: the leader could not know.
- It reads replicas and storages and never changes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.core.messages import Ready, TimeoutNow
from tidelog.core.replica import Replica
from tidelog.testing.checker import Checker
from tidelog.testing.cluster import Cluster
from tidelog.types import NodeId


@dataclass
class TransferMonitor:
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
        if stale and (node, leader.epoch) in stale:
            return
        sim_target = self.cluster.nodes[target]
        replica = sim_target.replica
        if replica is not None:
            if replica.epoch > leader.epoch or replica.repair_floor is not None:
                return
            held = replica.log.durable_end_offset
        else:
            held = sim_target.storage.load().log_end_offset
        end = leader.log.log_end_offset
        if held < end:
            self.checker.fail(
                f"leader {node} (epoch {leader.epoch}) sends TimeoutNow to {target}, which "
                f"holds its log durably only up to {held}, below the leader's log end {end}"
            )
