"""Node liveness on a broker: the one heartbeat per pair of nodes that quiesced partitions
rest on (core/liveness.py keeps the view; core/quiesce.py says what rests on it).

Rules of this file:
- Every heartbeat interval (the partitions' own, `heartbeat_ticks`) the node pings each
  other broker over the peer link, the same stream as the partitions' messages, so a ping
  never overtakes what was sent before it; a ping is answered at once, in the event loop,
  never behind a partition's round or its fsync.
- Every tick it declares dead the brokers not heard from for `DEATH_TIMEOUTS` election
  timeouts, counted in ticks as the partitions' election timers are (a stall skips ticks:
  a node that stalled does not declare its peers dead for its own pause). More than one:
  a node busy with thousands of partitions ticks, and pings, late for a moment, and a
  death declared wakes and moves every partition it leads; any timeout of at least one
  election timeout keeps the read lease sound (core/quiesce.py rule 4). What
  changes its view (a death, a node started again, a peer's new session with us) goes to
  every partition here that shares a copy with that node (`NodeChange`): a quiesced
  leader wakes, the followers of a dead leader elect at once.
- The incarnation is drawn at random when the process starts: a node that starts again is
  a new incarnation, and its peers void what its old one promised.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from typing import Protocol

from tidelog.clock import monotonic_ms
from tidelog.core.liveness import NodeLiveness, NodePing, NodePong
from tidelog.protocol.peer import PartitionKey
from tidelog.server.partition import PartitionRunner
from tidelog.server.partition_inputs import NodeChange
from tidelog.types import NodeId

log = logging.getLogger(__name__)

INCARNATION_BITS = 40
DEATH_TIMEOUTS = 2
"""Election timeouts without a ping before a node is declared dead (see the rules)."""


class LivenessHost(Protocol):
    """What node liveness needs of the broker."""

    node_id: NodeId
    metadata_key: PartitionKey
    runners: dict[PartitionKey, PartitionRunner]

    @property
    def all_nodes(self) -> tuple[NodeId, ...]: ...


class Liveness:
    """The broker's node liveness (see the rules above)."""

    def __init__(
        self,
        host: LivenessHost,
        send: Callable[[PartitionKey, Iterable[NodePing | NodePong]], None],
        *,
        election_ticks: int,
        heartbeat_ticks: int,
    ) -> None:
        self.host = host
        self.send = send
        self.heartbeat_ticks = heartbeat_ticks
        incarnation = random.getrandbits(INCARNATION_BITS)
        self.view = NodeLiveness(host.node_id, incarnation, DEATH_TIMEOUTS * election_ticks)
        self.ticks = 0

    def tick(self) -> None:
        """One tick: ping every heartbeat interval; declare the silent dead."""
        self.ticks += 1
        nodes = set(self.host.all_nodes)
        nodes.discard(self.host.node_id)
        for node in nodes:
            self.view.watch(node, self.ticks)
        for node in [n for n in self.view.peers() if n not in nodes]:
            self.view.forget(node)
        if self.ticks % self.heartbeat_ticks == 0:
            self.send(self.host.metadata_key, self.view.pings(monotonic_ms()))
        for node in self.view.expire(self.ticks):
            timeout = self.view.timeout
            level = logging.WARNING if self.view.ever_heard(node) else logging.INFO
            log.log(level, "node %d not heard from for %d ticks: declared dead", node, timeout)
            self.changed(node)

    def on_message(self, peer: NodeId, msg: NodePing | NodePong) -> None:
        """A ping or an answer from `peer` (the link's node: the decoder checked it)."""
        if msg.recipient != self.host.node_id or msg.sender != peer:
            return
        if isinstance(msg, NodePing):
            was_live = self.view.is_live(peer)
            pong, changed = self.view.on_ping(msg, self.ticks)
            self.send(self.host.metadata_key, [pong])
            if changed:
                log.info("node %d started again", peer)
                self.changed(peer)
            elif not was_live:
                log.info("node %d heard from again", peer)
                self.changed(peer)  # its partitions' leaders catch its copies up
        elif self.view.on_pong(msg):
            self.changed(peer)

    def changed(self, node: NodeId) -> None:
        """Tell every partition here that shares a copy with `node`."""
        for runner in list(self.host.runners.values()):
            if runner.shares(node):
                runner.submit(NodeChange(node))
