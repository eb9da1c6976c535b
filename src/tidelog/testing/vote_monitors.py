"""Quorum mode's acknowledgement and election rules, watched from outside (monitors.py's kin).

Each monitor keeps its own record of what a replica stepped and sent (never the core's
counters, which a weakened rule would move with it), and is lenient where its record
cannot be exact: it counts every answer of its epoch a leader stepped as in sync or as a
copy, so it only ever sees fewer rule breaks than there are, never one that is not.

- `AckMonitor` (min.insync.replicas, set per seed): a leader moves its HWM only to an
  offset that `quorum_size` = max(majority, min.insync.replicas) copies hold: its own
  durable copy and the followers that reported a match at least that far; and it takes no
  acks=all write (its log does not grow) while fewer than min.insync.replicas replicas
  acknowledged within an election timeout of its own ticks (itself counted): such a write
  is refused with NotEnoughReplicas. And the match it keeps for a follower is one that
  follower answered in the leader's epoch, and so is the contact its lease counts: an
  answer of an older epoch is fenced (KIP-320).
- `VoteMonitor` (elections): with pre-vote on, a replica asks real votes for an epoch only
  after asking pre-votes for it (unless a transfer); a pre-vote is granted only to a
  candidate whose log (last epoch, end) is at least as up to date; a granted vote leaves
  only once durable (`messages_after_persist`); and, with check-quorum, a replica grants
  no vote (but a transfer's, or again to the candidate it voted for) within an election
  timeout of its own ticks of stepping an append from its leader, or of restarting; nor
  does it move to a vote request's later epoch then (the request is ignored). With
  `sim --quiesce` the ticks are the node's (each one it took, or missed while paused: a
  quiesced replica counts none), and the lease of a leader that leads that epoch no more
  (it crashed, started again or stepped down) holds no vote back: node liveness, or the
  old leader's own vote request, tells a sleeping follower so (core/quiesce.py rule 3).
- `VoteMonitor.on_served` (follower reads, KIP-392): a follower serves a read only once
  it stepped an append from its current leader since it last started (it verified its
  log against that leader).
- `odd_fetch` (KIP-320, the client side): a consumer that names as its last fetched epoch
  one newer than the replica's own (no record can have it) is told LogDiverged, never
  served records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidelog.core.membership import ReplicaKey
from tidelog.core.messages import (
    AppendRequest,
    AppendResponse,
    Message,
    Ready,
    VoteRequest,
    VoteResponse,
)
from tidelog.core.replica import ACKS_ALL, Replica, Role
from tidelog.testing.checker import Checker
from tidelog.testing.cluster import Cluster
from tidelog.testing.monitors import NEVER_MS, LeaderTerms
from tidelog.types import NO_EPOCH, Epoch, NodeId, Offset

# A life of one node: (node, incarnation).
Life = tuple[NodeId, int]
# One term of a leader: (node, incarnation, epoch).
Term = tuple[NodeId, int, Epoch]


def min_insync_of(replica: Replica) -> int:
    """min.insync.replicas as quorum mode reads it: the topic's, else a majority of the
    voter set (not of every replica: a lost copy being replaced is none)."""
    return replica.config.min_insync_replicas or len(replica.voters) // 2 + 1


@dataclass
class AckMonitor:
    """min.insync.replicas at the HWM and at an acks=all produce (quorum mode)."""

    cluster: Cluster
    checker: Checker
    # Per leader's term, per follower: the tick of its last success of the term the
    # leader stepped, and its best match.
    acked_tick: dict[Term, dict[NodeId, int]] = field(default_factory=dict)
    matched: dict[Term, dict[NodeId, Offset]] = field(default_factory=dict)
    # The same per copy of a follower (its node and directory: a new disk is a new copy).
    copy_matched: dict[Term, dict[ReplicaKey, Offset]] = field(default_factory=dict)
    # Per leader's term, per follower: the latest send time of a request it answered.
    answered_ms: dict[Term, dict[NodeId, int]] = field(default_factory=dict)
    # Per node: the replica leading there, its epoch, and its HWM when last checked.
    terms: LeaderTerms = field(default_factory=LeaderTerms)
    # `sim --quiesce`: a quiesced leader's node liveness answers count too (the contact a
    # waking leader folds into its followers' own: core/quiesce.py rule 4).
    liveness_contacts: bool = False

    def __post_init__(self) -> None:
        self.cluster.on_message.append(self.on_message)

    def term(self, node: NodeId, replica: Replica) -> Term:
        return node, self.cluster.nodes[node].incarnation, replica.epoch

    def on_message(self, node: NodeId, replica: Replica, msg: Message) -> None:
        if (
            not isinstance(msg, AppendResponse)
            or replica.role is not Role.LEADER
            or msg.epoch != replica.epoch
        ):
            return  # an answer of an older epoch is fenced (KIP-320): it counts for nothing
        term = self.term(node, replica)
        answered = self.answered_ms.setdefault(term, {})
        answered[msg.sender] = max(
            answered.get(msg.sender, msg.request_sent_ms), msg.request_sent_ms
        )
        if not msg.success:
            return
        self.acked_tick.setdefault(term, {})[msg.sender] = replica.tick_count
        matched = self.matched.setdefault(term, {})
        matched[msg.sender] = max(matched.get(msg.sender, Offset(0)), msg.match_offset)
        copies = self.copy_matched.setdefault(term, {})
        copy = ReplicaKey(msg.sender, msg.directory)
        copies[copy] = max(copies.get(copy, Offset(0)), msg.match_offset)

    def note_liveness_contacts(self, node: NodeId, replica: Replica) -> None:
        """A leader's followers answered node heartbeats, in the sessions they slept in or
        now: contact it may count quiesced (and fold into theirs as it wakes, maybe in the
        very step a heartbeat's answer woke it)."""
        liveness = self.cluster.nodes[node].liveness
        if liveness is None or replica.role is not Role.LEADER:
            return
        answered = self.answered_ms.setdefault(self.term(node, replica), {})
        for peer, progress in replica.progress.items():
            theirs = self.cluster.nodes[peer].liveness
            sessions = {progress.quiesce_session, None if theirs is None else theirs.session(node)}
            for session in sessions - {None}:
                assert session is not None
                contact = liveness.contact_sent_ms(peer, session)
                if contact is not None:
                    answered[peer] = max(answered.get(peer, contact), contact)

    def in_sync(self, node: NodeId, replica: Replica) -> int:
        """The leader and the followers it stepped a success from within an election
        timeout of its ticks (at least as many as it may count)."""
        recent = replica.tick_count - replica.config.election_ticks
        ticks = self.acked_tick.get(self.term(node, replica), {})
        return 1 + sum(1 for peer in replica.peers if ticks.get(peer, recent - 1) >= recent)

    def propose(
        self, node: NodeId, replica: Replica, request_id: int, batch: bytes, acks: int
    ) -> None:
        """`replica.propose`, checked: below min.insync.replicas acks=all is refused."""
        end = replica.log.log_end_offset
        short = (
            acks == ACKS_ALL
            and replica.role is Role.LEADER
            and self.in_sync(node, replica) < min_insync_of(replica)
        )
        replica.propose(request_id, batch, acks=acks)
        if short and replica.log.log_end_offset > end:
            self.checker.fail(
                f"leader {node} took an acks=all write with {self.in_sync(node, replica)} "
                f"replicas in sync, below min.insync.replicas {min_insync_of(replica)}"
            )

    def check(self, node: NodeId, replica: Replica) -> None:
        """Call after every step, for every live replica."""
        if self.liveness_contacts:
            self.note_liveness_contacts(node, replica)
        noted = self.terms.noted_hwm(node, replica)
        if noted is None:
            return
        matched = self.matched.get(self.term(node, replica), {})
        answered = self.answered_ms.get(self.term(node, replica), {})
        for peer, progress in replica.progress.items():
            match = progress.match_offset
            if match is not None and match > matched.get(peer, -1):
                self.checker.fail(
                    f"leader {node} (epoch {replica.epoch}) counts {peer}'s match at {match}, "
                    f"above any match it answered in this epoch ({matched.get(peer)})"
                )
            if progress.contact_sent_ms > answered.get(peer, NEVER_MS):
                self.checker.fail(
                    f"leader {node} (epoch {replica.epoch}) dates its contact with {peer} "
                    f"{progress.contact_sent_ms}, later than any request {peer} answered in "
                    "this epoch"
                )
        hwm = replica.hwm
        if hwm <= noted:
            return
        self.terms.note_hwm(node, replica, hwm)
        # Counted here, not by core/quorum.py's `quorum_size`: the rule under watch. Only
        # the copies the leader's voter set names count (a node known by node alone: any).
        voters = replica.voters
        copies_matched = self.copy_matched.get(self.term(node, replica), {})
        holders = {
            copy.node
            for copy, match in copies_matched.items()
            if match >= hwm and voters.voter_key(copy.node, copy.directory) is not None
        }
        if replica.log.durable_end_offset >= hwm and replica.is_voter():
            holders.add(node)
        copies = len(holders)
        size = len(voters)
        needed = max(size // 2 + 1, min(min_insync_of(replica), size))
        if copies < needed:
            self.checker.fail(
                f"leader {node} (epoch {replica.epoch}) moved its HWM to {hwm} with {copies} "
                f"voters' copies, below max(majority, min.insync.replicas) = {needed} of "
                f"{size} voters"
            )


@dataclass
class VoteMonitor:
    """Pre-votes, up-to-date pre-vote grants, durable votes, the lease on votes, and a
    majority of its voter set's copies behind each leader elected."""

    cluster: Cluster
    checker: Checker
    pre_voted: dict[Life, set[Epoch]] = field(default_factory=dict)
    # Per life: the tick it last stepped an append from its leader, or restarted.
    contact: dict[Life, int] = field(default_factory=dict)
    contact_from: dict[Life, tuple[NodeId, Epoch]] = field(default_factory=dict)  # its leader
    # Per (voter life, candidate, epoch): whether every request stepped since the voter's
    # last Ready came from a candidate with a staler log, and inside the voter's lease.
    requests: dict[tuple[Life, NodeId, Epoch], tuple[bool, bool]] = field(default_factory=dict)
    votes: dict[tuple[NodeId, Epoch], NodeId] = field(default_factory=dict)
    seen: set[Life] = field(default_factory=set)
    epochs: dict[Life, Epoch] = field(default_factory=dict)  # as last seen after a step
    heard: dict[Life, set[NodeId]] = field(default_factory=dict)  # whose appends it stepped
    # Per (candidate life, epoch): the copies whose real votes it stepped; the terms checked.
    grants: dict[tuple[Life, Epoch], set[ReplicaKey]] = field(default_factory=dict)
    elected: set[tuple[Life, Epoch]] = field(default_factory=set)
    # `sim --quiesce`: count a node's ticks (`SimNode.ticks`: the ticks it took, or
    # missed while paused), not its replica's `tick_count`, which stops while it is
    # quiesced (core/quiesce.py). It only ever counts more ticks than the replica did.
    node_ticks: bool = False

    def __post_init__(self) -> None:
        self.cluster.on_message.append(self.on_message)
        self.cluster.on_ready.append(self.on_ready)

    def life(self, node: NodeId) -> Life:
        return node, self.cluster.nodes[node].incarnation

    def ticks(self, node: NodeId, replica: Replica) -> int:
        """The node's ticks so far: its replica's, or its own (`node_ticks`)."""
        return self.cluster.nodes[node].ticks if self.node_ticks else replica.tick_count

    def check(self, node: NodeId, replica: Replica) -> None:
        """Call after every step: a restarted replica (epoch > 0) starts in a lease."""
        life = self.life(node)
        self.epochs[life] = replica.epoch
        self.check_elected(life, replica)
        if life in self.seen:
            return
        self.seen.add(life)
        if life[1] > 1 and replica.epoch > 0 and replica.tick_count == 0:
            self.contact[life] = self.ticks(node, replica)

    def check_elected(self, life: Life, replica: Replica) -> None:
        """A leader elected in its epoch holds the real votes of a majority of the copies
        its voter set names, its own among them (a lost copy's vote is no voter's)."""
        term = (life, replica.epoch)
        if replica.role is not Role.LEADER or term in self.elected:
            return
        self.elected.add(term)
        voters = replica.voters
        granted = {
            key.node
            for key in self.grants.pop(term, set())
            if voters.voter_key(key.node, key.directory) is not None
        }
        if replica.is_voter():
            granted.add(life[0])
        if len(granted) < voters.majority:
            self.checker.fail(
                f"node {life[0]} leads epoch {replica.epoch} with the votes of "
                f"{sorted(granted)}, no majority of its voters {sorted(map(str, voters))}"
            )

    def on_message(self, node: NodeId, replica: Replica, msg: Message) -> None:
        life = self.life(node)
        real_grant = isinstance(msg, VoteResponse) and msg.granted and not msg.pre_vote
        if real_grant and msg.epoch == replica.epoch:
            assert isinstance(msg, VoteResponse)
            self.grants.setdefault((life, msg.epoch), set()).add(
                ReplicaKey(msg.sender, msg.directory)
            )
        if isinstance(msg, AppendRequest):
            self.heard.setdefault(life, set()).add(msg.sender)
            if (
                replica.role is Role.FOLLOWER
                and replica.leader_id == msg.sender
                and replica.epoch == msg.epoch
            ):
                self.contact[life] = self.ticks(node, replica)
                self.contact_from[life] = (msg.sender, msg.epoch)
        elif isinstance(msg, VoteRequest):
            stale = (msg.last_epoch, msg.log_end_offset) < (
                replica.log.last_epoch,
                replica.log.log_end_offset,
            )
            contact = self.contact.get(life)
            leased = (
                replica.config.check_quorum
                and not msg.transfer
                and contact is not None
                and self.ticks(node, replica) - contact < replica.config.election_ticks
                and not self.leader_gone(life)
            )
            key = (life, msg.sender, msg.epoch)
            before = self.requests.get(key, (True, True))
            self.requests[key] = (before[0] and stale, before[1] and leased)
            self.check_ignored(life, replica, msg, leased)
        self.epochs[life] = replica.epoch

    def leader_gone(self, life: Life) -> bool:
        """`node_ticks` (`sim --quiesce`, whose node liveness tells a follower so): the
        leader its lease came from leads that epoch no more (it crashed, started again or
        stepped down): no read rests on that lease."""
        contact = self.contact_from.get(life)
        if not self.node_ticks or contact is None:
            return False
        leader = self.cluster.nodes[contact[0]].replica
        return leader is None or leader.role is not Role.LEADER or leader.epoch != contact[1]

    def check_ignored(self, life: Life, replica: Replica, msg: VoteRequest, leased: bool) -> None:
        """Inside its lease a replica ignores a vote of a later epoch: it stays in its own."""
        before = self.epochs.get(life)
        moved = before is not None and before < msg.epoch == replica.epoch
        if leased and not msg.pre_vote and moved:
            self.checker.fail(
                f"node {life[0]} moved from epoch {before} to {msg.epoch} on {msg.sender}'s "
                "vote request within an election timeout of hearing from its leader or restarting"
            )

    def on_ready(self, node: NodeId, ready: Ready) -> None:
        replica = self.cluster.nodes[node].replica
        if replica is None:
            return
        life = self.life(node)
        for msg in ready.messages + ready.messages_after_persist:
            if isinstance(msg, VoteRequest):
                self.on_vote_request_sent(life, replica, msg)
        for msg in ready.messages:
            if isinstance(msg, VoteResponse) and msg.granted:
                self.on_grant(life, replica, msg)
                if not msg.pre_vote:
                    self.checker.fail(
                        f"node {node} granted {msg.recipient} a vote in epoch {msg.epoch} "
                        "before the vote was durable"
                    )
        for msg in ready.messages_after_persist:
            if isinstance(msg, VoteResponse) and msg.granted:
                self.on_grant(life, replica, msg)
        for key in [key for key in self.requests if key[0] == life]:
            del self.requests[key]

    def on_vote_request_sent(self, life: Life, replica: Replica, msg: VoteRequest) -> None:
        asked = self.pre_voted.setdefault(life, set())
        if msg.pre_vote:
            asked.add(msg.epoch)
        elif replica.config.pre_vote and not msg.transfer and msg.epoch not in asked:
            self.checker.fail(
                f"node {life[0]} asked for votes in epoch {msg.epoch} without a pre-vote"
            )

    def on_grant(self, life: Life, replica: Replica, msg: VoteResponse) -> None:
        node = life[0]
        stale, leased = self.requests.get((life, msg.recipient, msg.epoch), (False, False))
        if msg.pre_vote:
            if stale:
                self.checker.fail(
                    f"node {node} granted {msg.recipient} a pre-vote for epoch {msg.epoch} "
                    "though its own log is more up to date"
                )
            return
        earlier = self.votes.get((node, msg.epoch))
        self.votes[(node, msg.epoch)] = msg.recipient
        if leased and earlier != msg.recipient:
            self.checker.fail(
                f"node {node} granted {msg.recipient} a vote in epoch {msg.epoch} within an "
                "election timeout of hearing from its leader or restarting (inside its lease)"
            )

    def on_served(self, node: NodeId, replica: Replica) -> None:
        """A fetch served: by a follower only once it heard from its leader (synced)."""
        leader = replica.leader_id
        if replica.role is not Role.FOLLOWER:
            return
        if leader is None or leader not in self.heard.get(self.life(node), set()):
            self.checker.fail(
                f"follower {node} served a read before it heard from its leader ({leader}) "
                "in this run of it"
            )


def odd_fetch(
    checker: Checker, node: NodeId, replica: Replica, position: Offset, now_ms: int
) -> None:
    """A consumer naming as its last fetched epoch one newer than any record here: told
    LogDiverged (KIP-320), never served."""
    if position <= 0 or replica.log.last_epoch == NO_EPOCH:
        return
    claimed = Epoch(replica.epoch + 1)
    result = replica.fetch(position, max_bytes=1024, last_fetched_epoch=claimed, now_ms=now_ms)
    if result.error is None and result.batches:
        checker.fail(
            f"node {node} served a fetch at {position} naming last epoch {claimed}, newer "
            "than any of its records (KIP-320: LogDiverged)"
        )
