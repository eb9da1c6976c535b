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
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from tidelog.core.membership import ReplicaKey
from tidelog.core.messages import AppendResponse, Message, Ready, VoteResponse
from tidelog.core.replica import Replica, Role
from tidelog.testing.checker import Checker
from tidelog.testing.cluster import Cluster
from tidelog.types import Epoch, NodeId

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
            if progress is not None and progress.contact_sent_ms > now_ms - leader.config.lease_ms:
                self.checker.fail(
                    f"node {voter} granted a vote in epoch {epoch} inside leader {node}'s "
                    f"read lease (epoch {leader.epoch})"
                )


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
        cluster = self.cluster
        up = [node for node in cluster.ids if cluster.up(node)]
        for size in range(len(up), self.quorum_size - 1, -1):
            for group in itertools.combinations(up, size):
                voters = sum(1 for node in group if self.voter(node))
                if voters >= self.quorum_size and self.connected(group) and self.undisturbed(group):
                    return frozenset(group)
        return None

    def connected(self, group: tuple[NodeId, ...]) -> bool:
        return not any((a, b) in self.cluster.cut for a in group for b in group if a != b)

    def undisturbed(self, group: tuple[NodeId, ...]) -> bool:
        if self.check_quorum:
            return True
        cluster = self.cluster
        outside = [n for n in cluster.ids if n not in group and cluster.nodes[n].alive]
        return all((n, member) in cluster.cut for n in outside for member in group)


def raise_mark(marks: dict[NodeId, int], node: NodeId, value: int) -> bool:
    """Keep the highest value seen for `node`; True when `value` passes an earlier one."""
    previous = marks.get(node)
    marks[node] = value if previous is None else max(previous, value)
    return previous is not None and value > previous
