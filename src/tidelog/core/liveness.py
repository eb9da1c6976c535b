"""Node liveness, sans-IO: one heartbeat per pair of nodes, which quiesced partitions rest on
(core/quiesce.py; CockroachDB's node liveness, Redpanda's heartbeat_manager).

Every node pings every other node each heartbeat interval; the other answers at once with
its session with the pinger. A node's *session* with a peer is a number that changes when
the node starts again (a new `incarnation`) and whenever it declares that peer dead, or
finds it started again; the caller hands in the clock (`now_ms`, monotonic) and carries the
pings and answers. Two clocks: `now_ms` dates pings (the lease counts them, so it must be
the monotonic clock the replicas' `tick(now_ms=)` reads), and `now`, in any unit that never
runs faster than real time, times deaths (a broker counts ticks, which a stall skips: a
node that stalled does not declare its peers dead for its own pause).

Rules of this file:
1. A peer is declared dead when no ping of it was taken for `timeout` (an election
   timeout, in the units of `now`) since the last one, or since it was watched: the
   session with it changes at that moment, and the caller wakes the partitions it shares
   with it. A ping from it again makes it live, in the new session.
2. A ping from a peer in another incarnation than the last one means it started again: it
   is declared dead and live again at once (the session changes), since its partitions
   forgot what they promised.
3. An answer dates contact: the time the answered ping was sent, in the session the
   answer names. A contact counts only in the session it was made in
   (`contact_sent_ms(node, session)`): a peer that declared us dead, or started again,
   answers in a new session, and what its old session promised is void.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.types import NodeId


@dataclass(frozen=True, slots=True)
class NodePing:
    """A node's heartbeat to another: its `incarnation` (rule 2), and its clock then."""

    sender: NodeId
    recipient: NodeId
    incarnation: int
    sent_ms: int


@dataclass(frozen=True, slots=True)
class NodePong:
    """The answer to a `NodePing`: the answering node's session with the pinger (rule 3),
    and the ping's `sent_ms`."""

    sender: NodeId
    recipient: NodeId
    session: int
    ping_sent_ms: int


LivenessMessage = NodePing | NodePong

SESSION_DEATH_BITS = 20
"""The low bits of a session count the deaths declared; the high bits are the incarnation."""


@dataclass(slots=True)
class _Peer:
    heard: int  # when (`now`) we last took a ping from it, or began to watch it
    incarnation: int | None = None  # its incarnation, from its pings
    deaths: int = 0  # how often we declared it dead (our session with it)
    dead: bool = False
    their_session: int | None = None  # its session with us, from its latest answer
    contact_sent_ms: int | None = None  # the latest ping it answered in that session
    pings: int = 0  # the pings we took from it


class NodeLiveness:
    """One node's view of the others (see the rules above)."""

    def __init__(self, node_id: NodeId, incarnation: int, timeout: int) -> None:
        assert incarnation >= 0 and timeout > 0
        self.node_id = node_id
        self.incarnation = incarnation
        self.timeout = timeout
        self._peers: dict[NodeId, _Peer] = {}

    # ---------------------------------------------------------------- the Liveness view
    def session(self, node: NodeId) -> int:
        peer = self._peers.get(node)
        deaths = 0 if peer is None else peer.deaths
        return (self.incarnation << SESSION_DEATH_BITS) | (deaths % (1 << SESSION_DEATH_BITS))

    def contact_sent_ms(self, node: NodeId, session: int) -> int | None:
        peer = self._peers.get(node)
        if peer is None or peer.their_session != session:
            return None
        return peer.contact_sent_ms

    def incarnation_of(self, node: NodeId) -> int | None:
        peer = self._peers.get(node)
        return None if peer is None else peer.incarnation

    def pings_taken(self, node: NodeId) -> int:
        peer = self._peers.get(node)
        return 0 if peer is None else peer.pings

    def is_live(self, node: NodeId) -> bool:
        """Whether `node` is watched and not declared dead."""
        peer = self._peers.get(node)
        return peer is not None and not peer.dead

    def is_dead(self, node: NodeId) -> bool:
        """Whether `node` is watched and declared dead (not heard from since)."""
        peer = self._peers.get(node)
        return peer is not None and peer.dead

    def ever_heard(self, node: NodeId) -> bool:
        """Whether a ping of `node` was ever taken (by this incarnation)."""
        peer = self._peers.get(node)
        return peer is not None and peer.incarnation is not None

    def peers(self) -> tuple[NodeId, ...]:
        return tuple(self._peers)

    # ---------------------------------------------------------------- inputs ----------
    def watch(self, node: NodeId, now: int) -> None:
        """Expect pings from `node` from now on (rule 1)."""
        if node != self.node_id and node not in self._peers:
            self._peers[node] = _Peer(heard=now)

    def forget(self, node: NodeId) -> None:
        """`node` left the cluster: no more expected."""
        self._peers.pop(node, None)

    def pings(self, now_ms: int) -> list[NodePing]:
        """A ping to every watched peer, sent now."""
        return [NodePing(self.node_id, node, self.incarnation, now_ms) for node in self._peers]

    def on_ping(self, ping: NodePing, now: int) -> tuple[NodePong, bool]:
        """A ping taken now: the answer, and whether our session with its sender just
        changed (it started again: rule 2)."""
        node = ping.sender
        self.watch(node, now)
        peer = self._peers[node]
        changed = peer.incarnation is not None and peer.incarnation != ping.incarnation
        if changed:
            peer.deaths += 1
        peer.incarnation = ping.incarnation
        peer.heard = now
        peer.dead = False
        peer.pings += 1
        return NodePong(self.node_id, node, self.session(node), ping.sent_ms), changed

    def on_pong(self, pong: NodePong) -> bool:
        """An answer to our ping: whether its sender's session with us changed (it
        declared us dead, or started again)."""
        peer = self._peers.get(pong.sender)
        if peer is None:
            return False
        changed = peer.their_session is not None and peer.their_session != pong.session
        if changed or peer.their_session is None:
            peer.their_session = pong.session
            peer.contact_sent_ms = pong.ping_sent_ms
        elif peer.contact_sent_ms is None or pong.ping_sent_ms > peer.contact_sent_ms:
            peer.contact_sent_ms = pong.ping_sent_ms
        return changed

    def expire(self, now: int) -> list[NodeId]:
        """Declare dead the peers not heard from for `timeout` (rule 1); returns them."""
        dead = []
        for node, peer in self._peers.items():
            if not peer.dead and now - peer.heard >= self.timeout:
                peer.dead = True
                peer.deaths += 1
                dead.append(node)
        return dead
