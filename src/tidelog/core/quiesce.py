"""Quiescence: an idle partition costs nothing (CockroachDB's "Quiesce Ranges", 2016), in
either mode (`ReplicaConfig.quiesce`). A part of the replica (core/state.py). In ISR mode
the controller elects, so rules 3 and 4 (elections, the lease) are quorum mode's; an ISR
leader quiesces with no ISR proposal in flight, a committed record or an answer of the
controller wakes it, and once awake it dates its followers' catch-up from then
(mode/isr.py).

A leader whose followers all hold its whole log durably, with its HWM at its log end and
nothing in flight, sends each follower one last append marked `quiesce` and stops: no
heartbeats, no ticks (the caller stops ticking a replica whose `quiesced` is set). A
follower that takes that append holding the whole log quiesces too: no election timer.
Node liveness (core/liveness.py: one heartbeat per pair of nodes) stands in for the
partition's heartbeats.

Rules of this file:
1. A leader quiesces only with every member's copy verified at its log end (but the
   copies of nodes node liveness declared dead, which leave its in-sync replicas at once
   (mode/quorum.py; ISR mode's once the controller took them out): it wakes when they are
   heard again), its
   HWM there and past its epoch's start, its voter set committed with no change to make, no
   transfer, no produce waiting and nothing unpersisted. A follower quiesces only on a
   `quiesce` append it took whole, its log ending where the leader's does and its HWM
   there, that is the latest request of its leader's term it took (not an old one
   replayed or late), and whose leader's node process (the incarnation the append names)
   is the one its node liveness hears, not declared dead: else nothing would ever wake
   it (node liveness tells of a death, or a start, once).
2. Anything wakes a quiesced leader: a produce, a message (but an answer holding its whole
   log: the quiesce append's, or a heartbeat's that crossed it), a setting or membership
   change, a transfer, DeleteRecords, and node liveness saying a follower's node died
   (but see rule 5), started again or is heard again (`on_node_change`). Awake, it
   heartbeats at once, and counts a full election timeout before check-quorum. Any
   change of role wakes a replica (a follower that stands on a TimeoutNow that overtook
   its leader's wake-up).
   A follower that hears from no leader for an election timeout and may not campaign
   (under repair, an observer, ISR mode's) sends its peers a `WakeUp` (`wake_peers`):
   a replica started again on a repaired log needs its quiesced leader's appends.
3. A quiesced follower wakes on an append its leader sent after the quiesce append (one
   sent before, arriving late, leaves it asleep: its leader counts its promise; its lease
   runs from there, see below), on any message that moves its epoch, on a (pre-)vote
   request of its own leader for a later epoch or a `WakeUp` of its own leader (that
   leader leads no more: check-quorum deposed it, or its replica started again, under
   repair, in the same node process; nothing rests on the promise), and when node
   liveness declares its leader's node dead or started again in another session than the
   one it quiesced in (`on_node_change`). Then it grants votes at once (its promise rested
   on the leader's node being heard) if it took a node heartbeat of that node after the
   last append it took: the death was declared an election timeout after that heartbeat,
   past the lease of the append. Else (the append came after the last heartbeat, which
   the leader's lease may count) the lease of that append holds: an election timeout of
   its own ticks. The first voter of the partition's replicas after the leader campaigns
   within `NODE_LOSS_CAMPAIGN_TICKS` (an awake follower too, when node liveness declares
   its leader's node dead: its lease runs its course); the others leave it the election while node
   liveness hears its node and its (pre-)vote requests for a log as long as theirs keep
   coming, for at most `NODE_LOSS_DEFER_TIMEOUTS` election timeouts without one: the
   survivors of a node that led thousands of partitions do not split their votes, however
   late the busy nodes' messages (mode/quorum.py).
4. The read lease across quiescence rests on node liveness, never on a stale heartbeat: a
   quiesced leader counts a follower that answered its quiesce append in liveness session
   S as heard at the latest node heartbeat that follower's node answered in session S.
   That node grants no vote in the partition before it declares this node dead (an
   election timeout after the last ping it took), or starts again: both end session S,
   so such contact no longer counts. A follower still quiesced is in its leader's lease:
   it grants no vote (the promise the leader counts on), and no late append wakes it
   (rule 3). On waking, the leader folds the contact node liveness gave into each
   follower's own: it was answered while the follower was quiesced, and the follower's
   promise runs from the last contact it took.
5. Check-quorum sleeps with the partition: the leader's node liveness wakes it when a
   follower's node dies (in quorum mode only when the voters on nodes not declared dead,
   itself among them, are no majority any more: else its lease holds on theirs, rule 4,
   and a node's death does not wake the thousands of partitions it follows), and the
   partition's own check-quorum runs from then on,
   counting only the answers taken since it woke (those before it slept prove nothing
   of now). In quorum
   mode a leader sleeps again only once a majority of the voters (itself among them)
   answered a request it sent since it woke (`woken_seq`), and since its last
   check-quorum: one cut off from its followers stays awake, and its check-quorum steps
   it down.
"""

from __future__ import annotations

from typing import Final

from tidelog.core.messages import AppendResponse, Message, VoteRequest, WakeUp
from tidelog.core.replicate import LeaderPipeline
from tidelog.core.roles import Replication, Role
from tidelog.types import NodeId

NODE_LOSS_CAMPAIGN_TICKS: Final = 2
"""How soon the first follower campaigns after node liveness declared its leader's node
dead (rule 3): the other survivors' liveness declares it dead within about as long."""
NODE_LOSS_DEFER_TIMEOUTS: Final = 2
"""How many election timeouts without a vote request from the first survivor the others
wait before they campaign themselves (rule 3)."""


class Quiescence(LeaderPipeline):
    """Quiescence, its wake-ups and its lease (see the rules above)."""

    # ================================================================== the leader ======
    def maybe_quiesce(self) -> bool:
        """Quiesce now if rule 1 allows: send every follower a `quiesce` append."""
        if not self._may_quiesce():
            return False
        self.quiesced = True
        self.quiesce_seq = self.append_seq + 1
        end = self.log.log_end_offset
        for peer, progress in self.progress.items():
            progress.quiesce_session = None
            self._send_append(peer, end, (), quiesce=True)
        return True

    def _may_quiesce(self) -> bool:
        end = self.log.log_end_offset
        if not (
            self.config.quiesce
            and self.role is Role.LEADER
            and not self.quiesced
            and self.hwm == end == self.log.durable_end_offset
            and self.hwm > self.epoch_start_offset
            and not self.pending
            and not self.log.has_unpersisted
            and not self.log.voters.uncommitted(self.hwm)
            and self.mode.may_quiesce()
        ):
            return False
        members = set(self.config.assigned) | set(self.voters.nodes)
        members.discard(self.id)
        if set(self.progress) != members:
            return False
        # A dead node's copy may lag, once out of the in-sync replicas (an election
        # timeout awake): the ISR reported leaves it behind before the leader sleeps.
        in_sync = set(self.in_sync_replicas())
        for peer, p in self.progress.items():
            if not self.liveness.is_live(peer):
                if peer in in_sync:
                    return False
            elif p.probing or p.inflight or p.repairing or p.match_offset != end:
                return False
        if self.config.replication is Replication.ISR:
            return True  # its ISR members all live and caught up (mode/isr.py)
        # A majority of the voters, this one too, answered since it last woke, and since
        # its last check-quorum (rule 5: what they said an election timeout ago is old).
        heard = sum(
            1
            for peer, p in self.progress.items()
            if self.counts(peer, p.directory)
            and p.answered_seq >= self.woken_seq
            and p.recent_active
            and p.match_offset == end
            and self.liveness.is_live(peer)
        )
        return heard + (1 if self.is_voter() else 0) >= self.voters.majority

    def is_idle_answer(self, msg: Message) -> bool:
        """Whether `msg` is an answer that brings a quiesced leader no news: a follower of
        this epoch holds our whole log (our quiesce append's answer, or a heartbeat's
        that crossed it). It wakes nothing (rule 2)."""
        return (
            isinstance(msg, AppendResponse)
            and self.role is Role.LEADER
            and msg.epoch == self.epoch
            and msg.success
            and not msg.repairing
            and msg.match_offset == self.log.log_end_offset
        )

    def take_quiesce_answer(self, msg: AppendResponse) -> None:
        """Rule 4: the follower quiesced in liveness session `msg.session`."""
        progress = self.progress.get(msg.sender)
        if (
            self.quiesced
            and msg.seq >= self.quiesce_seq
            and progress is not None
            and progress.directory == msg.directory
        ):
            progress.quiesce_session = msg.session

    def wake(self) -> None:
        """Wake a quiesced leader (rules 2 and 4); nothing for a replica awake, or a
        follower: only rule 3 wakes one."""
        if not self.quiesced or self.role is not Role.LEADER:
            return
        for peer, progress in self.progress.items():
            contact = self._liveness_contact(peer)  # while still quiesced
            if contact is not None:
                progress.contact_sent_ms = max(progress.contact_sent_ms, contact)
            progress.quiesce_session = None
            progress.recent_active = False  # check-quorum counts answers from now on (rule 5)
        self.quiesced = False
        self.woken_seq = self.append_seq + 1
        self.heartbeat_elapsed = 0
        self._heartbeat()
        self.mode.on_wake()

    def _liveness_contact(self, peer: NodeId) -> int | None:
        """Rule 4: when node liveness last heard `peer` in the session it quiesced in."""
        progress = self.progress.get(peer)
        if not self.quiesced or progress is None or progress.quiesce_session is None:
            return None
        return self.liveness.contact_sent_ms(peer, progress.quiesce_session)

    def lease_contacts(self) -> list[int]:
        """When each counted follower was last heard, by its own answers or, quiesced, by
        node liveness (rule 4): the read lease counts these."""
        contacts = []
        for peer, progress in self.progress.items():
            if not self.counts(peer, progress.directory):
                continue
            contact = self._liveness_contact(peer)
            own = progress.contact_sent_ms
            contacts.append(own if contact is None else max(contact, own))
        return contacts

    def wake_peers(self) -> None:
        """A follower that hears from no leader and may not campaign asks its peers to
        wake the quiesced leader among them (rule 2): `WakeUp`, with quiescence on."""
        if self.config.quiesce and self.role is not Role.LEADER:
            for peer in self.peers:
                self.msgs.append(WakeUp(self.id, peer, self.epoch))

    # ================================================================== the follower ====
    def on_leader_standing(self, msg: Message) -> None:
        """Rule 3: our own leader asks (pre-)votes for a later epoch, or to be woken: it
        leads no more (check-quorum deposed it, or its replica started again), so nothing
        rests on our promise: wake, and vote."""
        if not self.quiesced or self.role is not Role.FOLLOWER or msg.sender != self.leader_id:
            return
        if (isinstance(msg, VoteRequest) and msg.epoch > self.epoch) or (
            isinstance(msg, WakeUp) and msg.epoch >= self.epoch
        ):
            self.quiesced = False
            self.mode.on_leader_lost(first=False)

    # ================================================================== node liveness ===
    def _sleeps_through(self, node: NodeId) -> bool:
        """Rule 5: a quorum-mode leader sleeps on when a follower's node is declared dead
        and the voters whose nodes are not dead (itself among them) are a majority."""
        if self.config.replication is Replication.ISR or not self.liveness.is_dead(node):
            return False
        live = sum(1 for voter in self.voters.nodes if not self.liveness.is_dead(voter))
        return live >= self.voters.majority

    def on_node_change(self, node: NodeId) -> None:
        """Node liveness declared `node` dead, or found it started again (rules 2, 3)."""
        if self.role is Role.LEADER:
            if self.quiesced and node in self.progress and not self._sleeps_through(node):
                self.wake()
            return
        if self.leader_id != node or self.role is not Role.FOLLOWER:
            return
        first = next(
            (n for n in self.config.assigned if n != node and n in self.voters.nodes), None
        )
        if not self.quiesced:
            # Awake, its own election timer watches its leader, and the lease of the last
            # append runs its course; the survivors still campaign in rule 3's order.
            if self.liveness.is_dead(node):
                self.mode.on_leader_lost(first=first == self.id, lease_over=False, designated=first)
            return
        if self.quiesce_session == self.liveness.session(node):
            return  # it quiesced after the change: its promise is of the new session
        self.quiesced = False
        # The quiesce append came after the last node heartbeat taken: the lease of that
        # append (an election timeout of ticks) outlives the promise (rule 3).
        lease_over = self.liveness.pings_taken(node) > self.quiesce_pings
        self.mode.on_leader_lost(first=first == self.id, lease_over=lease_over, designated=first)
