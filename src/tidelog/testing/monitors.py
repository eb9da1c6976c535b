"""Checks over time, beside the per-step invariants of `checker.py`; each reports to it.

- `LeaseMonitor` (with check-quorum): no replica grants a vote in a later epoch while a
  live leader counts that replica's answer in its read lease. A replica that heard from a
  leader, or restarted, refuses votes for an election timeout of its own ticks; the
  leader's lease is shorter by LEASE_MARGIN_TICKS, measured on its own clock, so this
  holds while the clocks' rates stay within the bound `faults.py` draws from.
- `QuorumMonitor` (with check-quorum): a leader that has not heard from a majority for two
  election timeouts of its own ticks is no longer leader. Its check-quorum runs every
  election timeout: the first check after the last answers may still count them, the
  next one cannot.
- `OwnEpochMonitor` (quorum mode): a leader moves its HWM only to an offset past the start
  of its own epoch (Raft's Figure 8, KIP-207's control batch): an older epoch's records
  become committed only under one of its own. Counting the copies of an old record is how
  Figure 8 loses a commit; this sees the count itself, before a later leader has to
  overwrite the record for the checker to see the loss.
- `ProbeMonitor` (liveness): a leader that steps the very same rejection (same probe, same
  answer) from a follower PROBE_REJECTIONS_MAX times in a row within one term, each to a
  probe it sent after stepping the one before, with no acceptance between, is in a probe
  loop: a rejection must move the probe back (KIP-279, Raft's nextIndex), so it never
  sends the probe that was rejected again (scenario 20: "no probe loops"). Answers to
  probes sent before (a backlog answered at once, duplicates) do not count, nor answers
  the leader discards (to requests before the follower's `seq_min`: they predate a
  restart or a repair it learned of since, ISR mode's rule 9).
- `ProgressMonitor` (liveness): while a quorum of replicas (a majority, or
  min.insync.replicas when larger) is up, not paused and connected both ways, and no other
  replica can disturb it, replication never stalls for `bound` microticks: within `bound`
  of that state beginning, and again within `bound` of each step forward, an acks=all write
  commits, a member's HWM moves, or a follower holds more of the log than before, unless
  there is nothing to do (every member holds the leader's whole log, committed: no client
  is writing). A group that elects nobody stalls. And each follower of the group's leader
  holds the leader's log, or its log changes within `follower_bound`: a follower far
  behind takes its time to catch up, but one that takes nothing (a lost reset answered by
  rejections, scenario 20) is stuck, even while the others commit. The group's bound is
  the longer: an election waits an election timeout between tries and each try may lose
  a message, while a follower hears from its leader every heartbeat. Without check-quorum a replica
  outside the group that can still send to it can disturb it (a deposed leader's
  heartbeats, or votes that depose the group's leader), so then every link from outside
  into the group must be cut.
- `QuiescedLeaderMonitor` (`sim --quiesce`, liveness): a partition quiesced under a leader
  whose node went down (a live follower sleeps under it while it is crashed, started
  again, deposed, paused, or in no group that could elect) must have a candidate within
  `campaign_bound` and a leader (of a later epoch, or that leader back) within `bound`
  of a group that could elect one: a majority of voters up, connected both ways, and,
  without check-quorum, undisturbed from outside (as above, but a majority is enough: an
  election needs no more). The candidate's bound is quiescence's own (node liveness
  declares the leader dead within an election timeout, and the first survivor stands at
  once); the leader's is looser, as randomized elections under long delays may split
  their votes for a while. A group that changes (but for one that grows) starts both
  clocks again.
- `SleeperMonitor` (`sim --quiesce`, liveness): a quiesced follower wakes within `bound`
  while a leader of its epoch or a later one is awake, up, and connected to it both ways:
  that leader's heartbeats (or a new leader's appends) must wake it, a slow wake-up
  being only late, never lost for good.
- `LeaseMonitor` counts, for a quiesced leader, the contact node liveness gave of a
  follower in the session it slept in (core/quiesce.py rule 4), as the lease does.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

from tidelog.core.membership import ReplicaKey
from tidelog.core.messages import AppendResponse, Message, Ready, VoteResponse
from tidelog.core.replica import Replica, Role
from tidelog.core.tracker import Progress
from tidelog.testing.checker import Checker
from tidelog.testing.cluster import Cluster
from tidelog.types import Epoch, NodeId, Offset

# A leader's contact with a follower before any answer (core/tracker.py's Progress).
NEVER_MS: Final = Progress(next_offset=Offset(0)).contact_sent_ms
# How many of a leader's last election timeouts may pass without a majority answering.
QUORUM_TIMEOUTS_MAX = 2
# How many identical rejections in a row, each to a probe sent after the last, make a loop.
PROBE_REJECTIONS_MAX = 3


@dataclass
class LeaseMonitor:
    cluster: Cluster
    checker: Checker

    def __post_init__(self) -> None:
        self.cluster.on_ready.append(self.on_ready)

    def on_ready(self, voter: NodeId, ready: Ready) -> None:
        for msg in ready.messages_after_persist:
            if isinstance(msg, VoteResponse) and msg.granted and not msg.pre_vote:
                self.check_vote(voter, msg.epoch)

    def check_vote(self, voter: NodeId, epoch: Epoch) -> None:
        for node, leader in self.cluster.live_replicas():
            if leader.role is not Role.LEADER or leader.epoch >= epoch:
                continue
            now_ms = self.cluster.clock_ms(node)
            if not leader.has_read_lease(now_ms):
                continue
            progress = leader.progress.get(voter)
            if progress is None:
                continue
            contact = max(progress.contact_sent_ms, self.liveness_contact(node, leader, voter))
            if contact > now_ms - leader.config.lease_ms:
                self.checker.fail(
                    f"node {voter} granted a vote in epoch {epoch} inside leader {node}'s "
                    f"read lease (epoch {leader.epoch})"
                )

    def liveness_contact(self, node: NodeId, leader: Replica, voter: NodeId) -> int:
        """When node liveness last heard `voter` for a quiesced `leader` on `node`: the
        send time of the latest node heartbeat the voter's node answered in the session its
        copy quiesced in (core/quiesce.py rule 4); NEVER_MS when that counts for nothing."""
        liveness = self.cluster.nodes[node].liveness
        progress = leader.progress.get(voter)
        if liveness is None or not leader.quiesced or progress is None:
            return NEVER_MS
        session = progress.quiesce_session
        contact = None if session is None else liveness.contact_sent_ms(voter, session)
        return NEVER_MS if contact is None else contact


@dataclass
class LeaderTerms:
    """Which replica object leads on each node, in which epoch, and an HWM noted in that
    term (the one it had when first seen leading, unless its owner notes another)."""

    held: dict[NodeId, tuple[Replica, Epoch, int]] = field(default_factory=dict)

    def noted_hwm(self, node: NodeId, replica: Replica) -> int | None:
        """The HWM noted in `node`'s term; None when `replica` leads no term, or when this
        step began one (its HWM now is noted)."""
        if replica.role is not Role.LEADER:
            self.held.pop(node, None)
            return None
        term = self.held.get(node)
        if term is None or term[0] is not replica or term[1] != replica.epoch:
            self.held[node] = (replica, replica.epoch, replica.hwm)
            return None
        return term[2]

    def note_hwm(self, node: NodeId, replica: Replica, hwm: int) -> None:
        self.held[node] = (replica, replica.epoch, hwm)


@dataclass
class OwnEpochMonitor:
    checker: Checker
    terms: LeaderTerms = field(default_factory=LeaderTerms)

    def check(self, node: NodeId, replica: Replica) -> None:
        first = self.terms.noted_hwm(node, replica)
        if first is None:
            return
        start = replica.log.epoch_start_offset(replica.epoch)
        if replica.hwm > first and start is not None and replica.hwm <= start:
            self.checker.fail(
                f"leader {node} (epoch {replica.epoch}) moved its HWM from {first} to "
                f"{replica.hwm}, not past its own epoch's start {start} (Raft Figure 8)"
            )


@dataclass
class _Term:
    """What the monitor knows of one leader's term: when it began, and when it last heard
    from each copy of a peer (a node on a new disk is another copy)."""

    incarnation: int
    epoch: Epoch
    start_tick: int
    heard_tick: dict[ReplicaKey, int]
    # When each voter became one in this term (a voter added by a change counts from then).
    voter_since: dict[ReplicaKey, int] = field(default_factory=dict)


@dataclass
class QuorumMonitor:
    cluster: Cluster
    checker: Checker
    terms: dict[NodeId, _Term] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cluster.on_message.append(self.on_message)

    def term(self, node: NodeId, replica: Replica) -> _Term:
        incarnation = self.cluster.nodes[node].incarnation
        term = self.terms.get(node)
        if term is None or (term.incarnation, term.epoch) != (incarnation, replica.epoch):
            term = self.terms[node] = _Term(incarnation, replica.epoch, replica.tick_count, {})
        return term

    def on_message(self, node: NodeId, replica: Replica, msg: Message) -> None:
        if (
            isinstance(msg, AppendResponse)
            and replica.role is Role.LEADER
            and msg.epoch == replica.epoch
        ):
            copy = ReplicaKey(msg.sender, msg.directory)
            self.term(node, replica).heard_tick[copy] = replica.tick_count

    def check(self, node: NodeId, replica: Replica) -> None:
        """Call after every step, for every live replica."""
        if replica.role is not Role.LEADER:
            return
        term = self.term(node, replica)
        voters = replica.voters  # a majority of the voter set, the leader among them
        for key in set(term.voter_since) - set(voters):
            del term.voter_since[key]  # removed: counted afresh if it is added again
        for key in voters:
            term.voter_since.setdefault(key, replica.tick_count)
        peers_needed = voters.majority - 1
        ticks = [
            max(
                [
                    term.voter_since[key],
                    *(
                        tick
                        for copy, tick in term.heard_tick.items()
                        if voters.voter_key(copy.node, copy.directory) == key
                    ),
                ]
            )
            for key in voters
            if key.node != node
        ]
        if peers_needed <= 0 or len(ticks) < peers_needed:
            return
        heard = sorted(ticks, reverse=True)[peers_needed - 1]
        limit = QUORUM_TIMEOUTS_MAX * replica.config.election_ticks
        if replica.tick_count - heard >= limit:
            self.checker.fail(
                f"leader {node} (epoch {replica.epoch}) still leads {replica.tick_count - heard} "
                f"of its ticks after it last heard from a majority"
            )


@dataclass
class ProbeMonitor:
    cluster: Cluster
    checker: Checker
    # Per (leader, follower): the last rejection stepped, how many times in a row, and
    # the leader's clock when it stepped the last one.
    streaks: dict[tuple[NodeId, NodeId], tuple[tuple[int, ...], int, int]] = field(
        default_factory=dict
    )

    def __post_init__(self) -> None:
        self.cluster.on_message.append(self.on_message)

    def on_message(self, node: NodeId, replica: Replica, msg: Message) -> None:
        if not isinstance(msg, AppendResponse) or replica.role is not Role.LEADER:
            return
        link = (node, msg.sender)
        if msg.success or msg.epoch != replica.epoch:
            self.streaks.pop(link, None)
            return
        progress = replica.progress.get(msg.sender)
        if progress is not None and msg.seq < progress.seq_min:
            return  # discarded: it answers a request from before a restart or a repair
        incarnation = self.cluster.nodes[node].incarnation
        answer = (incarnation, msg.epoch, msg.prev_offset, msg.match_offset, msg.hint_epoch)
        last = self.streaks.get(link)
        if last is None or last[0] != answer:
            self.streaks[link] = (answer, 1, replica.now_ms)
            return
        if msg.request_sent_ms <= last[2]:
            return  # it answers a probe sent before the leader knew the answer
        count = last[1] + 1
        self.streaks[link] = (answer, count, replica.now_ms)
        if count >= PROBE_REJECTIONS_MAX:
            self.checker.fail(
                f"liveness: leader {node} stepped node {msg.sender}'s rejection of its probe "
                f"at {msg.prev_offset} (hint {msg.match_offset}/e{msg.hint_epoch}) {count} "
                f"times in a row: a probe loop"
            )


@dataclass
class ProgressMonitor:
    cluster: Cluster
    checker: Checker
    voter: Callable[[NodeId], bool]  # whether a node's copy votes (an empty disk: no)
    quorum_size: int
    check_quorum: bool
    bound: int  # a stalled group (elections that never end)
    follower_bound: int  # a stuck follower (it hears from the leader every heartbeat)
    group: frozenset[NodeId] | None = None
    last_progress: int = 0
    topology_seen: int = -1
    # Per member, the highest HWM and (as a follower) the longest log seen in this group.
    hwm_reached: dict[NodeId, int] = field(default_factory=dict)
    log_reached: dict[NodeId, int] = field(default_factory=dict)
    # The group's leader, and per follower of it: its log end, and since when.
    leader_seen: tuple[NodeId, Epoch] | None = None
    follower_held: dict[NodeId, tuple[int, int]] = field(default_factory=dict)

    def on_commit(self) -> None:
        """An acks=all write was acknowledged."""
        self.last_progress = self.cluster.now

    def check(self) -> None:
        """Call once per microtick."""
        cluster = self.cluster
        if self.topology_seen != cluster.topology_version:
            self.topology_seen = cluster.topology_version
            self.regroup(self.healthy_group())
        if self.group is None:
            return
        if self.replicated() or self.idle():
            self.last_progress = cluster.now
        waited = cluster.now - self.last_progress
        if waited > self.bound:
            self.checker.fail(
                f"liveness: replicas {sorted(self.group)} up and connected, and for {waited} "
                f"microticks no acks=all write committed, no HWM moved, no follower caught up"
            )
        self.check_followers()

    def check_followers(self) -> None:
        """Each follower of the group's leader holds the leader's log, or its log changes
        within `follower_bound` (a follower that takes nothing for that long is stuck)."""
        leader = self.group_leader()
        if leader != self.leader_seen:
            self.leader_seen = leader
            self.follower_held = {}
        if leader is None:
            return
        now = self.cluster.now
        target = self.cluster.replica(leader[0]).log.log_end_offset
        for node in sorted(self.group or ()):
            replica = self.cluster.nodes[node].replica
            if node == leader[0] or replica is None:
                continue
            held = replica.log.log_end_offset
            seen = self.follower_held.get(node)
            if held == target or seen is None or seen[0] != held:
                self.follower_held[node] = (held, now)
            elif now - seen[1] > self.follower_bound:
                self.checker.fail(
                    f"liveness: node {node} follows leader {leader[0]} (log end {target}) "
                    f"up and connected, but has held its log at {held} for "
                    f"{now - seen[1]} microticks"
                )
                return

    def group_leader(self) -> tuple[NodeId, Epoch] | None:
        """The group's leader of the latest epoch, if any."""
        leaders = [
            (replica.epoch, node)
            for node in self.group or ()
            if (replica := self.cluster.nodes[node].replica) is not None
            and replica.role is Role.LEADER
        ]
        if not leaders:
            return None
        epoch, node = max(leaders)
        return node, epoch

    def regroup(self, group: frozenset[NodeId] | None) -> None:
        """A new healthy group starts its clock; one that only grew keeps it (and judges
        its new members from where they stand now)."""
        old = self.group
        if group is None or old is None or not old <= group:
            self.last_progress = self.cluster.now
            old = frozenset()
        for node in self.cluster.ids:
            if node not in old:
                self.hwm_reached.pop(node, None)
                self.log_reached.pop(node, None)
                self.follower_held.pop(node, None)
        self.group = group

    def replicated(self) -> bool:
        """True when a member's HWM passed the highest seen in this group, or a follower
        holds more of the log than it ever did in it (a leader's own log growing is no
        progress: it may take acks=1 writes it can never commit)."""
        assert self.group is not None
        moved = False
        for node in self.group:
            replica = self.cluster.nodes[node].replica
            if replica is None:
                continue
            moved |= raise_mark(self.hwm_reached, node, replica.hwm)
            if replica.role is not Role.LEADER:
                moved |= raise_mark(self.log_reached, node, replica.log.log_end_offset)
        return moved

    def idle(self) -> bool:
        """Nothing to do: the group has a leader, and every member holds its whole log,
        all of it committed (no client is writing)."""
        assert self.group is not None
        members = [self.cluster.nodes[node].replica for node in self.group]
        leaders = [r for r in members if r is not None and r.role is Role.LEADER]
        if not leaders:
            return False
        end = max(leaders, key=lambda leader: leader.epoch).log.log_end_offset
        return all(r is not None and r.log.log_end_offset == end and r.hwm == end for r in members)

    def healthy_group(self) -> frozenset[NodeId] | None:
        """The largest group of up replicas connected both ways, a quorum of voters among
        them, that nobody outside can disturb (see the module's docstring); None if there
        is none."""
        groups = healthy_groups(self.cluster, self.voter, self.quorum_size, self.check_quorum)
        return next(groups, None)


@dataclass
class QuiescedLeaderMonitor:
    """`sim --quiesce` (liveness): a quiesced partition whose leader's node is down has a
    candidate within `campaign_bound` of a group that could elect one, and within
    `declared_bound` of a voter of that group (not under repair) declaring the leader's
    node dead; and a leader within `bound` (see the module's docstring)."""

    cluster: Cluster
    checker: Checker
    voter: Callable[[NodeId], bool]  # whether a node's copy votes (an empty disk: no)
    majority: int  # the voters an election needs
    check_quorum: bool
    campaign_bound: int  # microticks
    declared_bound: int  # microticks
    bound: int  # microticks
    stranded: tuple[NodeId, Epoch] | None = None  # the leader and epoch a follower slept in
    since: int | None = None  # since when a group could elect (the bounds' clock)
    campaigned: bool = False  # whether one of that group campaigned since
    campaign_waited: int = 0  # and when
    declared: tuple[NodeId, int] | None = None  # who of that group declared it dead, when
    group: frozenset[NodeId] | None = None  # the largest group that could
    groups: list[frozenset[NodeId]] = field(default_factory=list)
    topology_seen: int = -1
    episodes: int = 0  # quiesced partitions found with their leader down
    elections: int = 0  # of those, ended by a leader of a later epoch
    waited: int = 0  # microticks from a group that could elect to a leader, summed
    longest: int = 0  # and the longest
    longest_campaign: int = 0  # the longest wait for a candidate
    waits: list[tuple[int, int]] = field(default_factory=list)  # (for a candidate, a leader)

    def check(self) -> None:
        """Call once per microtick."""
        cluster = self.cluster
        if self.topology_seen != cluster.topology_version:
            self.topology_seen = cluster.topology_version
            self.groups = list(
                healthy_groups(cluster, self.voter, self.majority, self.check_quorum)
            )
            self.regroup(self.groups[0] if self.groups else None)
        if self.stranded is None:
            self.stranded = self.find_stranded()
            if self.stranded is None:
                return
            self.episodes += 1
            self.since = None if self.group is None else cluster.now
            self.campaigned = False
            self.declared = None
            leader, epoch = self.stranded
            cluster.note(f"quiesced under leader {leader} (epoch {epoch}), whose node is down")
        leader, epoch = self.stranded
        if self.group is None or self.repairing(self.group):
            self.since = self.declared = None  # replicas under repair may block them
        elif self.since is None:
            self.since, self.campaigned, self.declared = cluster.now, False, None
        waited = 0 if self.since is None else cluster.now - self.since
        ended = self.ended(leader, epoch)
        if ended is not None:
            self.elections += ended
            self.waited += waited
            self.longest = max(self.longest, waited)
            if ended and self.campaigned:
                self.waits.append((self.campaign_waited, waited))
            self.stranded = None
            return
        if not self.campaigned and self.campaigning(epoch):
            self.campaigned = True
            self.campaign_waited = waited
            self.longest_campaign = max(self.longest_campaign, waited)
        if not self.campaigned and self.since is not None and self.declared is None:
            self.declared = self.declaring(leader)
        declared = self.declared if self.since is not None else None
        since_declared = 0 if declared is None else cluster.now - declared[1]
        late = waited > self.bound or (
            not self.campaigned
            and (waited > self.campaign_bound or since_declared > self.declared_bound)
        )
        if late:
            said = (
                ""
                if declared is None
                else f" ({declared[0]} declared it dead {since_declared} microticks ago)"
            )
            self.checker.fail(
                f"liveness: a partition quiesced under leader {leader} (epoch {epoch}), whose "
                f"node is down or cut off; replicas {sorted(self.group or ())} could elect "
                f"for {waited} microticks{said}, and "
                + ("none leads" if self.campaigned else "none campaigned")
            )
            self.stranded = None

    def declaring(self, leader: NodeId) -> tuple[NodeId, int] | None:
        """A voter of the group, not under repair, whose node liveness declared `leader`'s
        node dead (it stands within an election timeout: core/quiesce.py rule 3), and now."""
        for node in sorted(self.group or ()):
            sim_node = self.cluster.nodes[node]
            replica, liveness = sim_node.replica, sim_node.liveness
            if (
                replica is not None
                and liveness is not None
                and replica.repair_floor is None
                and self.voter(node)
                and not liveness.is_live(leader)
            ):
                return node, self.cluster.now
        return None

    def repairing(self, group: frozenset[NodeId]) -> bool:
        """Whether the voters of `group` not under repair fall short of a majority: one
        under repair never stands, and refuses a candidate short of its repair floor
        (rule 8 of the replica), so such a group may not elect until it is repaired."""
        standing = sum(
            1
            for node in group
            if self.voter(node)
            and (replica := self.cluster.nodes[node].replica) is not None
            and replica.repair_floor is None
        )
        return standing < self.majority

    def campaigning(self, epoch: Epoch) -> bool:
        """Whether a member of the group stands (pre-vote or vote) or left `epoch`."""
        for node in self.group or ():
            replica = self.cluster.nodes[node].replica
            if replica is not None and (
                replica.epoch > epoch or replica.role in (Role.PRE_CANDIDATE, Role.CANDIDATE)
            ):
                return True
        return False

    def regroup(self, group: frozenset[NodeId] | None) -> None:
        """A new group starts the clock; one that only grew keeps it."""
        old = self.group
        if group is None:
            self.since = None
            self.declared = None
        elif old is None or not old <= group or self.since is None:
            self.since = self.cluster.now
            self.campaigned = False
            self.declared = None
        self.group = group

    def find_stranded(self) -> tuple[NodeId, Epoch] | None:
        """A live follower quiesced under a leader that does not lead its epoch (crashed,
        started again, deposed), is paused, or is in no group that could elect, while no
        replica leads a later epoch (one that does is the `SleeperMonitor`'s to judge)."""
        newest = max(
            (r.epoch for _, r in self.cluster.live_replicas() if r.role is Role.LEADER),
            default=None,
        )
        for node in self.cluster.ids:
            replica = self.cluster.nodes[node].replica
            if (
                replica is not None
                and replica.role is Role.FOLLOWER
                and replica.quiesced
                and replica.leader_id is not None
                and (newest is None or newest <= replica.epoch)
                and not self.leads(replica.leader_id, replica.epoch)
            ):
                return replica.leader_id, replica.epoch
        return None

    def leads(self, node: NodeId, epoch: Epoch) -> bool:
        """Whether `node` is up, leads `epoch`, and is in a group that could elect."""
        replica = self.cluster.nodes[node].replica
        return (
            replica is not None
            and self.cluster.up(node)
            and replica.role is Role.LEADER
            and replica.epoch == epoch
            and any(node in group for group in self.groups)
        )

    def ended(self, leader: NodeId, epoch: Epoch) -> bool | None:
        """True when some replica leads a later epoch; False when the leader is back (it
        leads its epoch in a group that could elect); None while neither."""
        for _, replica in self.cluster.live_replicas():
            if replica.role is Role.LEADER and replica.epoch > epoch:
                return True
        return False if self.leads(leader, epoch) else None


@dataclass
class SleeperMonitor:
    """`sim --quiesce` (liveness): a quiesced follower wakes within `bound` while a leader
    of its epoch or a later one is awake and up, and the links between them are up both
    ways (its leader's heartbeats, or the new leader's appends, must wake it)."""

    cluster: Cluster
    checker: Checker
    bound: int  # microticks
    since: dict[tuple[NodeId, Replica], int] = field(default_factory=dict)

    def check(self) -> None:
        """Call once per microtick."""
        cluster = self.cluster
        awake = [
            (node, replica)
            for node, replica in cluster.live_replicas()
            if replica.role is Role.LEADER and not replica.quiesced and cluster.up(node)
        ]
        waiting: dict[tuple[NodeId, Replica], int] = {}
        for node, replica in cluster.live_replicas():
            if replica.role is not Role.FOLLOWER or not replica.quiesced or not cluster.up(node):
                continue
            leaders = [
                leader
                for leader, led in awake
                if led.epoch >= replica.epoch
                and (leader, node) not in cluster.cut
                and (node, leader) not in cluster.cut
            ]
            if not leaders:
                continue
            key = (node, replica)
            waiting[key] = self.since.get(key, cluster.now)
            if cluster.now - waiting[key] > self.bound:
                self.checker.fail(
                    f"liveness: node {node} sleeps (quiesced, epoch {replica.epoch}) while "
                    f"leader {min(leaders)} is awake and connected, for "
                    f"{cluster.now - waiting[key]} microticks"
                )
                waiting.pop(key)
        self.since = waiting


def healthy_groups(
    cluster: Cluster, voter: Callable[[NodeId], bool], quorum_size: int, check_quorum: bool
) -> Iterator[frozenset[NodeId]]:
    """Every group of up replicas connected both ways, `quorum_size` voters among them,
    that nobody outside can disturb (without check-quorum: every link from outside into
    it cut), the largest first."""
    up = [node for node in cluster.ids if cluster.up(node)]
    for size in range(len(up), quorum_size - 1, -1):
        for group in itertools.combinations(up, size):
            voters = sum(1 for node in group if voter(node))
            if (
                voters >= quorum_size
                and connected(cluster, group)
                and (check_quorum or undisturbed(cluster, group))
            ):
                yield frozenset(group)


def connected(cluster: Cluster, group: tuple[NodeId, ...]) -> bool:
    return not any((a, b) in cluster.cut for a in group for b in group if a != b)


def undisturbed(cluster: Cluster, group: tuple[NodeId, ...]) -> bool:
    outside = [n for n in cluster.ids if n not in group and cluster.nodes[n].alive]
    return all((n, member) in cluster.cut for n in outside for member in group)


def raise_mark(marks: dict[NodeId, int], node: NodeId, value: int) -> bool:
    """Keep the highest value seen for `node`; True when `value` passes an earlier one."""
    previous = marks.get(node)
    marks[node] = value if previous is None else max(previous, value)
    return previous is not None and value > previous
