"""Quorum mode (rules 2, 3, 6, 8, 10 of core/replica.py): a majority elects its own leader.

The decisions of `Mode` (core/roles.py) for a partition that commits by a majority quorum
and elects its leaders itself (Raft): elections with pre-vote, the leader lease,
check-quorum, leadership transfer, and Raft's Figure-8 commit rule. The quorum arithmetic
is core/quorum.py's.

Rules of this file:
- A replica whose election timer fires (randomized, `election_ticks` to twice that)
  campaigns: first a pre-vote that changes no epoch (Raft thesis §9.6), then a real vote
  once a majority would grant it; a replica under repair never campaigns (rule 8).
- A candidate counts its own vote only once it is durable (`after_advance`, rule 2); a
  vote leaves only once durable too (`messages_after_persist`, ZOOKEEPER-4646).
- A vote or pre-vote goes only to a candidate whose log is at least as up to date
  (Raft §5.4.1), and as the repair floor if under repair (KIP-966); a replica that heard
  from a leader within an election timeout grants none (the lease), in its own epoch too,
  unless the campaign is a transfer its leader asked for. A restarted replica grants no
  vote for an election timeout: it may have acked a leader just before it went down.
- The HWM moves only to an offset that `quorum_size` durable copies hold and that lies
  inside the leader's own epoch (Raft Figure 8).
- A leader that has not heard from a majority for an election timeout steps down
  (check-quorum); it serves reads only while a majority answered a request sent less
  than `lease_ms` ago (Raft §8), and never once its TimeoutNow left (rule 10).
- acks=all is refused with NotEnoughReplicas below min.insync.replicas live replicas.
- Only voters count (rule 11): a majority is one of the voter set, votes and answers count
  only from the copies it names, and an observer never campaigns nor takes a transfer
  (but for a voter removed by a change not committed: membership rule 6).
- A leader keeps its voter set on the copies that answer it (`_next_voters`), one change
  at a time, each only after the last one and a record of its own epoch are committed
  (membership rule 3): it removes a voter whose node answers from another copy (an empty
  disk), and adds the copy of a replica that is no voter once that copy holds everything
  committed and answered within an election timeout (a learner promoted), if it is one
  of `config.target` (KIP-455's target
  replicas; every member when none is given). Once every target node votes, it removes the
  voters that are none, one at a time, the silent ones first, and only while the voters
  left that are in sync still make a quorum (a removal never leaves a set that cannot
  commit for want of a voter that was up); itself never: it hands leadership to the
  target voter furthest along, whose epoch removes it. A voter known by node alone
  (no directory named) is never replaced: any copy of its node is it; with
  `name_directories` the leader first names the directories of the copies that answered
  it, in one change (membership rule 3's `names_directories`).
- The quorum is a majority of the voter set, raised to min.insync.replicas but never past
  the voter set's size: while a lost copy is replaced, the others can still commit.
"""

from __future__ import annotations

from tidelog.core.config import Rng
from tidelog.core.membership import ReplicaKey, VoterSet, change_refusal
from tidelog.core.messages import (
    AppendResponse,
    Message,
    Ready,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tidelog.core.quiesce import NODE_LOSS_CAMPAIGN_TICKS, NODE_LOSS_DEFER_TIMEOUTS, Quiescence
from tidelog.core.quorum import (
    VoteResult,
    committed_offset,
    has_quorum,
    quorum_size,
    vote_result,
)
from tidelog.core.roles import ElectionMessage, Role
from tidelog.core.state import ACKS_ALL
from tidelog.errors import NotEnoughReplicas, NotLeader, TidelogError
from tidelog.records import BatchHeader
from tidelog.types import NO_DIRECTORY, Epoch, NodeId, Offset


class QuorumMode:
    """The quorum decisions of one replica, and its election, lease and transfer state."""

    leads_from = Role.CANDIDATE

    def __init__(self, replica: Quiescence, rng: Rng) -> None:
        self.r = replica
        self.rng = rng
        config = replica.config
        self.election_elapsed = 0
        self.election_timeout = self._random_election_timeout()
        # A restarted replica may have acked a leader just before it went down: it grants
        # no vote for one election timeout, so that leader's read lease stays sound. A new
        # replica (epoch 0) never acked anyone and holds no such lease.
        restarted = replica.epoch > 0
        self.leader_contact_elapsed = 0 if restarted else config.election_ticks
        self.votes: dict[NodeId, bool] = {}
        # A leadership transfer in progress (rule 10): its target, the ticks it has taken,
        # and whether TimeoutNow has left (then this leader serves no more reads).
        self.transfer_target: NodeId | None = None
        self.transfer_elapsed = 0
        self.timeout_now_sent = False
        # After a node's death (core/quiesce.py rule 3): the survivor left to campaign,
        # and the ticks since its last vote request.
        self.defer_to: NodeId | None = None
        self.defer_elapsed = 0

    # ================================================================== inputs ==========
    def tick(self, now_ms: int | None) -> None:
        del now_ms  # the replica keeps the clock
        if self.r.quiesced:
            return  # asleep: no election timer, no heartbeat (core/quiesce.py)
        self.leader_contact_elapsed += 1
        if self.r.role is Role.LEADER:
            self._tick_leader()
        else:
            self._tick_election()

    def campaign(self) -> None:
        """Start an election now, as if the election timer fired (etcd-io/raft's MsgHup).
        A replica under repair never does (rule 8)."""
        if self.r.role is Role.LEADER:
            return
        self.defer_to = None
        if self.r.repair_floor is not None or not self.r.may_stand():
            self._reset_election_timer()  # under repair, or an observer: never campaigns
            self.r.wake_peers()  # but a quiesced leader may be waited for (core/quiesce.py)
            return
        if self.r.config.pre_vote:
            self.become_pre_candidate()
        else:
            self.become_candidate()

    def transfer_leadership(self, target: NodeId) -> str | None:
        """Rule 10: None when the transfer began (or goes on already), else why not."""
        if self.r.role is not Role.LEADER:
            return "not the leader"
        if target not in self.r.peers:
            return f"node {target} is no other replica of this partition"
        directory = self.r.progress[target].directory
        if directory is not None and not self.r.counts(target, directory):
            return f"node {target} answers from a copy that is no voter"
        if self.transfer_target is not None:
            return None if self.transfer_target == target else "a transfer is under way"
        self.transfer_target = target
        self.transfer_elapsed = 0
        self._maybe_send_timeout_now()
        return None

    def refusal(self, msg: Message) -> str | None:
        del msg  # the shared door (rule 9) is the whole of quorum mode's
        return None

    def on_higher_epoch_vote(self, msg: VoteRequest | VoteResponse) -> bool:
        if isinstance(msg, VoteRequest):
            if msg.pre_vote:
                return True  # a pre-vote changes nothing here
            if self._in_lease() and not msg.transfer:
                return False  # a healthy leader exists: ignore the vote (leader lease)
            self.r.become_follower(msg.epoch, None)
            return True
        if msg.pre_vote and msg.granted:
            return True  # a granted pre-vote carries the epoch we would campaign in
        self.r.become_follower(msg.epoch, None)
        return True

    def step_election(self, msg: ElectionMessage) -> None:
        if isinstance(msg, VoteRequest):
            self.on_vote_request(msg)
        elif isinstance(msg, VoteResponse):
            self.on_vote_response(msg)
        else:
            self.on_timeout_now(msg)

    def on_leader_contact(self) -> None:
        self.election_elapsed = 0
        self.leader_contact_elapsed = 0

    def on_leader_lost(
        self, *, first: bool, lease_over: bool = True, designated: NodeId | None = None
    ) -> None:
        """core/quiesce.py rule 3: the released promise ends the lease at once, unless the
        lease of the last append taken outlives it (`lease_over` False); the first
        survivor campaigns soon, the others leave it the election (`_defers`)."""
        if lease_over:
            self.leader_contact_elapsed = self.r.config.election_ticks
        self._reset_election_timer()
        self.defer_to, self.defer_elapsed = (None if first else designated), 0
        if first:
            self.election_timeout = min(
                self.election_timeout, self.election_elapsed + NODE_LOSS_CAMPAIGN_TICKS
            )

    def may_quiesce(self) -> bool:
        """No transfer, and no voter change to make (`_next_voters` may begin a transfer)."""
        return (
            self.transfer_target is None
            and self._next_voters() is None
            and self.transfer_target is None
        )

    def on_wake(self) -> None:
        self.election_elapsed = 0  # a full election timeout before check-quorum

    # ================================================================== the leader ======
    def on_append_answered(self, msg: AppendResponse) -> None:
        if msg.success:
            self._maybe_send_timeout_now()

    def hwm_candidate(self) -> Offset | None:
        """What quorum_size durable copies hold (rule 3), counting our own copy only once
        durable."""
        r = self.r
        matches = [r.log.durable_end_offset] if r.is_voter() else []
        matches += [p.match_offset for p in r.counted_progress() if p.match_offset is not None]
        candidate = committed_offset(matches, self._quorum_size())
        # Raft Figure 8: count replicas only for an offset of our own epoch.
        if candidate is None or candidate <= r.epoch_start_offset:
            return None
        return candidate

    def produce_error(self, acks: int) -> TidelogError | None:
        r = self.r
        if r.role is not Role.LEADER:
            return NotLeader(r.leader_id)
        if self.transfer_target is not None:
            return NotLeader(self.transfer_target)  # handing over (rule 10)
        full = r._queue_full_error()
        if full is not None:
            return full
        if acks == ACKS_ALL:
            in_sync = len(self.in_sync_replicas())
            needed = r.config.min_insync_replicas or r.voters.majority
            if in_sync < needed:
                return NotEnoughReplicas(in_sync, needed)
        return None

    def has_read_lease(self, now_ms: int | None) -> bool:
        """A majority answered a request we sent less than `lease_ms` ago (Raft §8).

        Those voters grant no vote for an election timeout after hearing from us, so no
        other leader can exist yet: reads cannot be stale (Jepsen etcd 0.4.1). The lease is
        measured on the caller's clock now, not in ticks: a leader whose ticks ran late
        (a pause, a stall) must not believe its lease lasted longer than it did."""
        r = self.r
        if self.timeout_now_sent:
            return False  # a transfer's target may be elected inside the lease (rule 10)
        if not r.config.check_quorum:
            return True
        now = r.now_ms if now_ms is None else now_ms
        since = now - r.config.lease_ms
        # Quiesced, node liveness dates the followers' promises (core/quiesce.py rule 4).
        answered = (contact > since for contact in r.lease_contacts())
        return has_quorum(answered, len(r.voters))

    def in_sync_replicas(self) -> tuple[NodeId, ...]:
        """Live in-sync replicas: the leader and the followers that acked within an election
        timeout and are not repairing (rule 8), but those on a node that node liveness
        declared dead (a quiesced leader's ticks do not run: core/quiesce.py rule 5)."""
        r = self.r
        recent = r.tick_count - r.config.election_ticks
        followers = (
            peer
            for peer, progress in r.progress.items()
            if progress.in_sync(recent)
            and r.counts(peer, progress.directory)
            and not r.liveness.is_dead(peer)
        )
        return (r.id, *followers)

    def _quorum_size(self) -> int:
        """How many voters' durable copies commit: a majority of the voter set, at least
        min.insync.replicas."""
        voters = len(self.r.voters)
        return min(quorum_size(voters, self.r.config.min_insync_replicas), voters)

    def on_config_changed(self) -> None:
        """The quorum follows `config.min_insync_replicas` (`_quorum_size`): nothing to redo."""

    # ================================================================== the follower ====
    def serving_error(self) -> TidelogError | None:
        return None

    def gives_up(self, header: BatchHeader) -> bool:
        del header
        return False  # a committed record is never cut (rule 4)

    def on_follower_appended(self, end: Offset) -> None:
        del end

    def on_become_follower(self) -> None:
        self.transfer_target = None
        self.timeout_now_sent = False
        self.votes.clear()
        self._reset_election_timer()

    # ================================================================== output ==========
    def has_output(self) -> bool:
        return False

    def take_output(self, ready: Ready) -> Ready:
        return ready

    def after_advance(self) -> None:
        r = self.r
        if r.role is Role.CANDIDATE and r.persisted_hard_state == r._hard_state() and r.is_voter():
            # The candidate's vote for itself is durable now: count it (rule 2).
            self.votes[r.id] = True
            self._maybe_finish_election(pre_vote=False)

    # ================================================================== elections =======
    def become_pre_candidate(self) -> None:
        r = self.r
        r._set_role(Role.PRE_CANDIDATE)
        r.leader_id = None
        r.follower_synced = False
        self.votes = {r.id: True}
        self._reset_election_timer()
        self._request_votes(Epoch(r.epoch + 1), pre_vote=True)
        self._maybe_finish_election(pre_vote=True)

    def become_candidate(self, *, transfer: bool = False) -> None:
        r = self.r
        r.epoch = Epoch(r.epoch + 1)
        r.voted_for = r.id
        r._set_role(Role.CANDIDATE)
        r.leader_id = None
        r.follower_synced = False
        self.votes = {}  # our own vote counts once it is durable (advance)
        self._reset_election_timer()
        self._request_votes(r.epoch, pre_vote=False, transfer=transfer)

    def _become_leader(self) -> None:
        """Won: start the epoch with the voters that granted it (KIP-207)."""
        self.leader_contact_elapsed = 0
        self.election_elapsed = 0
        granting = tuple(sorted(node for node, granted in self.votes.items() if granted))
        self.r.become_leader(granting)

    def _tick_election(self) -> None:
        self.election_elapsed += 1
        defers = self._defers()
        if self.election_elapsed >= self.election_timeout and not defers:
            self.campaign()

    def _defers(self) -> bool:
        """core/quiesce.py rule 3: whether we leave the election to the survivor after a
        dead leader still: its node is live, and its last (pre-)vote request for a log as
        long as ours came less than NODE_LOSS_DEFER_TIMEOUTS election timeouts ago (or
        our release did). Our own timer fires as it would; we campaign once this ends."""
        target = self.defer_to
        if target is None:
            return False
        self.defer_elapsed += 1
        limit = NODE_LOSS_DEFER_TIMEOUTS * self.r.config.election_ticks
        if self.defer_elapsed >= limit or not self.r.liveness.is_live(target):
            self.defer_to = None
            return False
        return True

    def _request_votes(self, epoch: Epoch, *, pre_vote: bool, transfer: bool = False) -> None:
        r = self.r
        last_epoch, end = r.log.last_epoch, r.log.log_end_offset
        for peer in r.peers:
            r.msgs.append(
                VoteRequest(r.id, peer, epoch, last_epoch, end, pre_vote, transfer, r.key.directory)
            )

    def on_vote_request(self, msg: VoteRequest) -> None:
        r = self.r
        # Under repair, also as if we still held the log we lost (rule 8, KIP-966).
        up_to_date = (msg.last_epoch, msg.log_end_offset) >= (
            r.log.last_epoch,
            r.log.log_end_offset,
        ) and (
            r.repair_floor is None or r.repair_floor.reached_by(msg.last_epoch, msg.log_end_offset)
        )
        if msg.sender == self.defer_to:  # the survivor we leave the election to (_defers)
            self.defer_elapsed = 0
            if not up_to_date:
                self.defer_to = None  # it cannot win our vote: we campaign ourselves
        if msg.pre_vote:
            granted = msg.epoch > r.epoch and up_to_date and not self._in_lease()
            epoch = msg.epoch if granted else r.epoch
            r.msgs.append(VoteResponse(r.id, msg.sender, epoch, granted, True, r.key.directory))
            return
        free = r.voted_for in (None, msg.sender) and r.role is not Role.LEADER
        # The lease holds in our own epoch too: a refused pre-vote may have moved us to
        # the candidate's epoch while a leader we heard from moments ago still serves.
        # A transfer's campaign was asked for by the leader, which gave its lease up.
        promised = self._in_lease() and r.voted_for != msg.sender and not msg.transfer
        granted = free and up_to_date and not promised
        if granted:
            r.voted_for = msg.sender
            self._reset_election_timer()
        # The vote must be durable before the candidate hears of it (rule 2).
        r.msgs_after_persist.append(
            VoteResponse(r.id, msg.sender, r.epoch, granted, False, r.key.directory)
        )

    def on_vote_response(self, msg: VoteResponse) -> None:
        r = self.r
        if not r.counts(msg.sender, msg.directory):
            return  # an observer's answer, or a lost copy's (membership rule 6)
        if msg.pre_vote and r.role is Role.PRE_CANDIDATE:
            # A grant names the epoch we would campaign in; a refusal names the voter's.
            if msg.epoch == r.epoch + (1 if msg.granted else 0):
                self.votes[msg.sender] = msg.granted
                self._maybe_finish_election(pre_vote=True)
        elif not msg.pre_vote and r.role is Role.CANDIDATE:
            self.votes[msg.sender] = msg.granted
            self._maybe_finish_election(pre_vote=False)

    def _maybe_finish_election(self, *, pre_vote: bool) -> None:
        result = vote_result(self.votes, len(self.r.voters))
        if result is VoteResult.WON:
            if pre_vote:
                self.become_candidate()
            else:
                self._become_leader()
        elif result is VoteResult.LOST:
            self.r.become_follower(self.r.epoch, None)

    def on_timeout_now(self, msg: TimeoutNow) -> None:
        """Our leader hands us its leadership (rule 10; the door checked it is our
        leader): campaign now, without a pre-vote, unless we are under repair (rule 8)."""
        del msg
        if self.r.role is Role.FOLLOWER and self.r.repair_floor is None and self.r.is_voter():
            self.become_candidate(transfer=True)

    def _in_lease(self) -> bool:
        config = self.r.config
        if self.r.quiesced:
            return config.check_quorum  # promised while asleep (core/quiesce.py rule 4)
        return config.check_quorum and self.leader_contact_elapsed < config.election_ticks

    def _random_election_timeout(self) -> int:
        ticks = self.r.config.election_ticks
        return ticks + self.rng.randrange(0, ticks)

    def _reset_election_timer(self) -> None:
        self.election_elapsed = 0
        self.election_timeout = self._random_election_timeout()

    # ================================================================== the leader's tick
    def _tick_leader(self) -> None:
        r = self.r
        if self.transfer_target is not None:
            self.transfer_elapsed += 1
            if self.transfer_elapsed >= r.config.election_ticks:
                if self.timeout_now_sent:  # no lease any more (rule 10): step down
                    r.become_follower(r.epoch, None)
                    return
                self.transfer_target = None  # the target did not catch up: lead on
        r.heartbeat_elapsed += 1
        if r.heartbeat_elapsed >= r.config.heartbeat_ticks:
            r.heartbeat_elapsed = 0
            if r.maybe_quiesce():
                return  # the quiesce appends are this heartbeat (core/quiesce.py)
            r._heartbeat()
            self._maintain_voters()
        self.election_elapsed += 1
        if self.election_elapsed >= r.config.election_ticks:
            self.election_elapsed = 0
            if not self._check_quorum():
                return
        r._expire_produces()

    def _check_quorum(self) -> bool:
        """Step down unless a majority was heard from in the last election timeout."""
        r = self.r
        heard = [progress.recent_active for progress in r.counted_progress()]
        for progress in r.progress.values():
            progress.recent_active = False
        if r.config.check_quorum and not has_quorum(heard, len(r.voters)):
            r.become_follower(r.epoch, None)
            return False
        self.leader_contact_elapsed = 0
        return True

    def _maintain_voters(self) -> None:
        """Append the next change `_next_voters` asks for, once membership rule 3 allows."""
        r = self.r
        if self.transfer_target is not None:
            return  # handing over: the log grows no more (rule 10)
        if not r.is_voter():  # elected to commit the change that removed us: it is
            if not r.log.voters.uncommitted(r.hwm):
                self._hand_over_to(set(r.voters.nodes))  # committed, a voter leads on
            return
        proposed = self._next_voters()
        if proposed is None:
            return
        refusal = change_refusal(
            r.log.voters, proposed, hwm=r.hwm, epoch_start_offset=r.epoch_start_offset
        )
        if refusal is None:
            r.append_voters(proposed)

    def _next_voters(self) -> VoterSet | None:
        """The voter set the copies that answer us call for (see the rules), or None."""
        r = self.r
        current = r.voters
        copies = {peer: p.directory for peer, p in r.progress.items() if p.directory is not None}
        if r.config.name_directories:
            copies[r.id] = r.key.directory
            named = [
                ReplicaKey(key.node, copies.get(key.node, NO_DIRECTORY))
                if key.directory == NO_DIRECTORY
                else key
                for key in current
            ]
            if set(named) != set(current):
                return VoterSet.of(named)
        for key in current:
            copy = copies.get(key.node)
            if copy is not None and key.directory not in (NO_DIRECTORY, copy) and key.node != r.id:
                return current.remove(key)  # its copy is lost: it comes back as a learner
        target = set(r.config.voter_target)
        recent = r.tick_count - r.config.election_ticks
        for peer, progress in sorted(r.progress.items()):
            if (
                peer not in current.nodes
                and peer in target
                and progress.directory not in (None, NO_DIRECTORY)
                and progress.match_offset is not None
                and progress.match_offset >= r.hwm
                and progress.in_sync(recent)
            ):
                assert progress.directory is not None
                return current.add(ReplicaKey(peer, progress.directory))
        if not target <= current.nodes:
            return None  # a move adds every target copy before it removes one (KIP-455)
        live = set(self.in_sync_replicas())
        leaving = sorted(
            (key for key in current if key.node not in target),
            key=lambda key: (key.node in live, key.node, key.directory),  # the silent first
        )
        for key in leaving:
            if key.node == r.id:
                continue
            after = current.remove(key)
            in_sync = sum(1 for voter in after if voter.node in live)
            if in_sync >= min(quorum_size(len(after), r.config.min_insync_replicas), len(after)):
                return after  # the voters left and in sync can still commit
        if leaving and all(key.node == r.id for key in leaving):
            self._hand_over_to(target)  # it hands over first; its successor removes it
        return None

    def _hand_over_to(self, target: set[NodeId]) -> None:
        """Start a transfer to the voter of `target` furthest along (rule 10)."""
        r = self.r
        candidates = [
            (progress.match_offset, peer)
            for peer, progress in r.progress.items()
            if peer in target
            and progress.match_offset is not None
            and r.counts(peer, progress.directory)
        ]
        if candidates:
            self.transfer_leadership(max(candidates)[1])

    def _maybe_send_timeout_now(self) -> None:
        """The transfer's target durably holds our whole log: it may campaign (rule 10).
        From now on we serve no reads (`has_read_lease`)."""
        r = self.r
        target = self.transfer_target
        if target is None or self.timeout_now_sent:
            return
        progress = r.progress[target]
        if progress.repairing or progress.match_offset != r.log.log_end_offset:
            return
        if not r.counts(target, progress.directory):
            return  # an observer's copy: it may not campaign (membership rule 6)
        self.timeout_now_sent = True
        r.msgs.append(TimeoutNow(r.id, target, r.epoch))
