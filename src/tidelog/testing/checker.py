"""The invariants of shared/docs/correctness.md, checked after every simulated step.

The checker keeps the true committed history (TigerBeetle's StateChecker): whenever a
replica's HWM moves, the batches it newly calls committed are compared with the history,
or extend it. Everything else is checked against that history:
- at most one leader per epoch;
- committed-prefix agreement, and no committed batch ever lost or changed;
- every batch a client read passes its CRC and is at the same offset in the committed
  history;
- every acknowledged acks=all write is in the committed history (Jepsen's lost-write),
  and no batch is committed twice (Jepsen's duplicate: the idempotent producer retries),
  and no batch that had to be refused (`refused`: an idempotent batch with a sequence gap)
  is ever committed;
- HWM never decreases within a run of a replica, nor below what its storage made durable
  across a restart, except when that storage set damage aside (the replica starts with a
  repair floor, its HWM at most its shorter log's end: rule 8 of the replica);
  HWM <= log end offset, log start offset <= HWM, the log start never passes the
  committed history, and no replica's log ends below what it called committed;
- the HWM a leader tells clients never goes back on that node, across its restarts too,
  and, when leaders hold read leases (check-quorum), never across leader changes either;
- `compare_committed`: any two replicas hold the very same batches (every byte, stamp
  included) from the higher of their log starts to the lower of their HWMs;
- `check_matches`: a leader's match for a follower never goes back within its epoch
  (it may only forget it); what a leader counts for a follower (its match offset) the follower
  holds durably, while it follows that leader in that epoch: an acknowledgement the
  leader counts toward the HWM is never for records the follower has dropped since
  (unless a bit flip made it set them aside: then it repairs, rule 8 of the replica, and
  a leader leading then may count its old match until a probe it sent since ends; or its
  disk was replaced: then until the leader forgets that match, rule 7). A leader that
  ends such a probe has heard where the follower's log ends: a match it keeps above that
  is one it should have forgotten (a follower setting damage aside again while it
  repairs, scenario 16).
A batch is identified by its bytes from the CRC on: the leader's stamp (offset, epoch) lies
outside them, so the producer's batch and the stored one compare equal.

ISR mode with unclean election (docs/isr.md rule 10; isr_sim.py tells the checker): at an
unclean election the history is cut where the new leader's log departs from it (`cut`):
acknowledged writes at or past the cut are lost (counted), nothing below it ever is. Every
replica is then suspect (`suspects`) until its HWM has been checked against a leader of
that epoch or later: meanwhile its committed prefix neither extends nor is compared with
the history, and its HWM may go back; one not yet told of the election is held to the
history as it stood then (a `Timeline`, which its committed prefix extends). Every read is
judged all the same: a replica told of the election serves only the cut history (rule 10:
no reads before its HWM is checked); one not told, that history or its timeline's. A
replica checked again is held to every invariant, from its log start, until it starts
again: its give-up may not have been durable, so it is suspect once more (`cleared`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidelog.core.replica import Replica, Role
from tidelog.errors import CorruptBatch
from tidelog.records import check_batch, iter_batches, read_header
from tidelog.types import Epoch, NodeId, Offset

IDENTITY_START = 17  # the CRC field; everything from here on is the producer's
READ_BYTES_MAX = 1 << 30


def batch_identity(batch: bytes) -> bytes:
    return bytes(batch[IDENTITY_START:])


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    next_offset: Offset
    epoch: Epoch
    identity: bytes


@dataclass
class Timeline:
    """The committed history as the replicas not yet told of an unclean election see it:
    as it stood at the election, extended by their committed prefixes."""

    history: dict[int, CommittedBatch]
    end: int
    checked: dict[NodeId, int]


@dataclass
class Checker:
    """Collects violations; `violations` empty means every invariant held."""

    history: dict[int, CommittedBatch] = field(default_factory=dict)
    committed_end: int = 0
    checked: dict[NodeId, int] = field(default_factory=dict)
    hwm_seen: dict[NodeId, tuple[int, int]] = field(default_factory=dict)  # (incarnation, hwm)
    leaders: dict[Epoch, NodeId] = field(default_factory=dict)
    acked: dict[bytes, int] = field(default_factory=dict)
    unverified_acks: list[tuple[int, bytes]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    reads: int = 0
    committed_identities: dict[bytes, int] = field(default_factory=dict)  # -> first offset
    leader_hwm_max: int = 0
    node_hwm_max: dict[NodeId, int] = field(default_factory=dict)  # across restarts
    # Without check-quorum a deposed leader holds no lease and may answer an old HWM.
    leases: bool = True
    # follower -> the (leader, epoch) whose match for it predates its disk's replacement
    stale_matches: dict[NodeId, set[tuple[NodeId, Epoch]]] = field(default_factory=dict)
    # node -> its replica when last seen, to see it start again (with a repair floor?)
    incarnations: dict[NodeId, Replica] = field(default_factory=dict)
    # follower -> the last append seq of each (leader, epoch) leading when the follower
    # last started with a repair floor (it had just set damage aside, or restarted so)
    repair_seqs: dict[NodeId, dict[tuple[NodeId, Epoch], int]] = field(default_factory=dict)
    # (leader, its epoch, follower) -> the last match that leader counted for it
    matches_seen: dict[tuple[NodeId, Epoch, NodeId], Offset] = field(default_factory=dict)
    # identity -> why it must never be committed (odd_clients.py)
    refused: dict[bytes, str] = field(default_factory=dict)
    # ISR mode's unclean elections (see the module's docstring): node -> the unclean epoch
    # it has not caught up with; the history each unclean epoch cut; the lowest cut since
    # a node became suspect.
    suspects: dict[NodeId, Epoch] = field(default_factory=dict)
    timelines: dict[Epoch, Timeline] = field(default_factory=dict)
    suspect_floor: dict[NodeId, int] = field(default_factory=dict)
    told: dict[NodeId, Epoch] = field(default_factory=dict)  # see `known_unclean`
    # node -> (unclean epoch, floor) when it was last cleared: a restart may bring back a
    # log from before its give-up was durable, so it is suspect again (`check_replica`)
    cleared: dict[NodeId, tuple[Epoch, int]] = field(default_factory=dict)

    def fail(self, text: str) -> None:
        """Record a violation (once: the checks after every step would repeat it)."""
        if len(self.violations) < 20 and text not in self.violations:
            self.violations.append(text)

    # ------------------------------------------------------------ every step --------
    def check_replica(
        self,
        node: NodeId,
        replica: Replica,
        incarnation: int,
        *,
        durable_hwm_at_start: int = 0,
        repaired: bool = False,
    ) -> None:
        """Every invariant of one replica. `durable_hwm_at_start` is the HWM its storage
        held durably when this incarnation started; `repaired`, whether that storage had
        set damage aside (then, and only then, the HWM may have gone back)."""
        hwm = replica.hwm
        log = replica.log
        if replica.role is Role.LEADER:
            other = self.leaders.setdefault(replica.epoch, node)
            if other != node:
                self.fail(f"two leaders in epoch {replica.epoch}: {other} and {node}")
        if hwm > log.log_end_offset:
            self.fail(f"node {node}: HWM {hwm} above log end {log.log_end_offset}")
        if log.log_start_offset > hwm:
            self.fail(f"node {node}: log start {log.log_start_offset} above HWM {hwm}")
        seen = self.hwm_seen.get(node)
        restarted = seen is not None and seen[0] != incarnation
        if restarted and node in self.cleared and node not in self.suspects:
            # its give-up may not have been durable before it stopped
            self.suspects[node], self.suspect_floor[node] = self.cleared[node]
        if node in self.suspects and self.still_suspect(node, replica, incarnation):
            return
        seen_incarnation, seen_hwm = self.hwm_seen.get(node, (incarnation, 0))
        if seen_incarnation == incarnation and hwm < seen_hwm:
            self.fail(f"node {node}: HWM went back from {seen_hwm} to {hwm}")
        if seen_incarnation != incarnation:
            self.checked[node] = 0  # check the recovered log again from the start
            if hwm < durable_hwm_at_start and not repaired:
                self.fail(
                    f"node {node}: HWM {hwm} after a restart, below the {durable_hwm_at_start} "
                    "its storage had made durable, with no damage set aside"
                )
        self.hwm_seen[node] = (incarnation, hwm)
        checked = self.checked.get(node, 0)
        if log.log_end_offset < checked:
            self.fail(f"node {node}: log end {log.log_end_offset} below its HWM {checked}")
            return
        if hwm > checked:
            self.extend_history(node, replica, checked, hwm)
        if log.log_start_offset > self.committed_end:
            self.fail(
                f"node {node}: log start {log.log_start_offset} past the committed "
                f"history's end {self.committed_end}"
            )

    def extend_history(self, node: NodeId, replica: Replica, start: int, hwm: int) -> None:
        """Compare the replica's newly committed batches with the history, or extend it.

        Below the replica's log start its records are deleted: it is compared from there."""
        position = max(start, replica.log.log_start_offset)
        batches = replica.log.read(
            Offset(position), end_offset=Offset(hwm), max_bytes=READ_BYTES_MAX
        )
        for batch in batches:
            header = read_header(batch)
            if header.base_offset < position:  # holds the log start: compare, don't extend
                known = self.history.get(header.base_offset)
                if known is not None and known.identity != batch_identity(batch):
                    self.fail(f"node {node}: batch at {header.base_offset} differs")
                    return
                if known is None and header.base_offset == self.committed_end:
                    # DeleteRecords moved the log start into it before we saw it committed
                    position = header.base_offset
                else:
                    position = header.next_offset
                    continue
            if header.base_offset != position:
                self.fail(
                    f"node {node}: committed batch at {header.base_offset}, expected {position}"
                )
                return
            entry = CommittedBatch(header.next_offset, header.epoch, batch_identity(batch))
            known = self.history.get(position)
            if known is None and position == self.committed_end:
                self.history[position] = entry
                self.committed_end = entry.next_offset
                if not header.is_control:  # every leader's control batch looks alike
                    self.check_unique(position, entry.identity)
                if entry.identity in self.refused:
                    self.fail(f"{self.refused[entry.identity]} was committed at {position}")
            elif known is None:
                self.fail(f"node {node}: committed batch at {position} leaves a gap")
                return
            elif known != entry:
                self.fail(
                    f"node {node}: committed batch at {position} differs: epoch "
                    f"{header.epoch} vs {known.epoch} in the committed history"
                )
                return
            position = header.next_offset
        self.checked[node] = max(position, self.checked.get(node, 0))

    # ------------------------------------------------------------ unclean elections --
    def on_unclean_election(self, epoch: Epoch, nodes: tuple[NodeId, ...]) -> None:
        """An unclean election in `epoch`: every replica is suspect (the new leader too,
        until it leads); those not yet told hold to the history as it stands now."""
        self.timelines[epoch] = Timeline(dict(self.history), self.committed_end, dict(self.checked))
        for node in nodes:
            self.suspects[node] = epoch
            self.suspect_floor[node] = min(
                self.suspect_floor.get(node, self.committed_end), self.committed_end
            )

    def cut(self, cut: int) -> int:
        """Cut the history at `cut` (the new leader's log departs from it there): what was
        acknowledged at or past it is lost. Returns how many acknowledged writes were."""
        if cut >= self.committed_end:
            return 0
        for offset in [offset for offset in self.history if offset >= cut]:
            del self.history[offset]
        self.committed_end = cut
        lost = sum(1 for at in self.acked.values() if at >= cut)
        self.acked = {key: at for key, at in self.acked.items() if at < cut}
        self.unverified_acks = [(at, key) for at, key in self.unverified_acks if at < cut]
        self.committed_identities = {
            key: at for key, at in self.committed_identities.items() if at < cut
        }
        self.checked = {node: min(end, cut) for node, end in self.checked.items()}
        self.leader_hwm_max = min(self.leader_hwm_max, cut)
        self.node_hwm_max = {node: min(hwm, cut) for node, hwm in self.node_hwm_max.items()}
        self.suspect_floor = {node: min(at, cut) for node, at in self.suspect_floor.items()}
        return lost

    def still_suspect(self, node: NodeId, replica: Replica, incarnation: int) -> bool:
        """Whether `node` is still suspect (see the module's docstring); one not yet told
        extends its timeline. One checked again is held to every invariant from now on,
        from its log start (its HWM may have gone back, once)."""
        epoch = self.suspects[node]
        mode = replica.isr
        if mode is None:
            return True
        holds = None if mode.record is None else mode.record.unclean_epoch
        known = self.known_unclean(node, replica)
        if known is None or known < epoch:
            if known is None or (holds == known and mode.hwm_checked()):
                self.extend_timeline(node, replica, known)
            return True
        if holds is None or holds < epoch or not mode.hwm_checked():
            return True
        floor = self.suspect_floor.pop(node, self.committed_end)
        self.cleared[node] = (self.suspects.pop(node), floor)
        self.checked[node] = 0
        self.hwm_seen[node] = (incarnation, replica.hwm)
        return False

    def known_unclean(self, node: NodeId, replica: Replica) -> Epoch | None:
        """The last unclean epoch `node` was told of, in a record it holds or held before
        it started again (one that restarted holds no record until the next)."""
        record = None if replica.isr is None else replica.isr.record
        holds = None if record is None else record.unclean_epoch
        told = self.told.get(node)
        known = holds if told is None or (holds is not None and holds > told) else told
        if known is not None:
            self.told[node] = known
        return known

    def timeline_of(self, known: Epoch | None) -> Timeline | None:
        """The history of a replica told of unclean elections up to `known` only: as the
        first one it was not told of found it."""
        later = [epoch for epoch in self.timelines if known is None or epoch > known]
        return self.timelines[min(later)] if later else None

    def extend_timeline(self, node: NodeId, replica: Replica, known: Epoch | None) -> None:
        """A replica not told of an unclean election: its committed batches agree with its
        timeline, or extend it."""
        timeline = self.timeline_of(known)
        if timeline is None:
            return
        hwm = min(replica.hwm, replica.log.log_end_offset)
        checked = min(timeline.checked.get(node, 0), hwm)
        position = max(checked, replica.log.log_start_offset)
        if hwm <= position:
            timeline.checked[node] = checked
            return
        for batch in replica.log.read(
            Offset(position), end_offset=Offset(hwm), max_bytes=READ_BYTES_MAX
        ):
            header = read_header(batch)
            known_batch = timeline.history.get(header.base_offset)
            identity = batch_identity(batch)
            if known_batch is None and header.base_offset == timeline.end:
                entry = CommittedBatch(header.next_offset, header.epoch, identity)
                timeline.history[header.base_offset] = entry
                timeline.end = header.next_offset
            elif known_batch is not None and known_batch.identity != identity:
                self.fail(
                    f"node {node}, not told of the unclean election, committed a batch at "
                    f"{header.base_offset} that differs from what was committed before it"
                )
                return
        timeline.checked[node] = hwm

    def on_given_up(self, node: NodeId, start: int, end: int) -> None:
        """A replica gave up committed records [start, end): only a suspect one may, and
        only at or past the history's cut."""
        floor = self.suspect_floor.get(node)
        if node not in self.suspects or floor is None:
            self.fail(f"node {node} gave up committed offsets {start}..{end - 1} unsuspected")
        elif start < floor:
            self.fail(
                f"node {node} gave up committed offsets {start}..{end - 1}, below {floor}, "
                "where the unclean leader's log still held the committed history"
            )

    def check_unique(self, position: int, identity: bytes) -> None:
        first = self.committed_identities.setdefault(identity, position)
        if first != position:
            self.fail(f"batch committed twice, at offset {first} and again at {position}")

    # ------------------------------------------------------------ clients -----------
    def on_acked(self, base_offset: int, batch: bytes) -> None:
        """An acks=all produce was acknowledged at base_offset (checked after the step)."""
        identity = batch_identity(batch)
        self.acked[identity] = base_offset
        self.unverified_acks.append((base_offset, identity))

    def verify_acks(self) -> None:
        """Each acknowledgement is in the committed history, at its offset, once the
        history reaches that far (a leader may stop on a disk error in the very step it
        acknowledged, before the checker saw its HWM: then the history learns of the batch
        from the others; `check_final` asks for every acknowledged write in the end)."""
        pending = []
        for base_offset, identity in self.unverified_acks:
            known = self.history.get(base_offset)
            if known is None and base_offset >= self.committed_end:
                pending.append((base_offset, identity))
            elif known is None or known.identity != identity:
                self.fail(f"acks=all write at offset {base_offset} acknowledged but not committed")
        self.unverified_acks = pending

    def on_leader_hwm(self, node: NodeId, hwm: int) -> None:
        """A leader told a client its HWM: it never goes back on that node (across its
        restarts too) nor, with leases, across leader changes. One an unclean election
        deposed, not told yet, answers from history that is lost: not judged."""
        if node in self.suspects:
            return
        seen = self.node_hwm_max.get(node, 0)
        if hwm < seen:
            self.fail(f"leader {node} answered HWM {hwm} after it answered {seen}")
        self.node_hwm_max[node] = max(seen, hwm)
        if self.leases and hwm < self.leader_hwm_max:
            self.fail(f"leader {node} answered HWM {hwm} after clients saw {self.leader_hwm_max}")
        self.leader_hwm_max = max(self.leader_hwm_max, hwm)

    def on_read(
        self, node: NodeId, batches: tuple[bytes, ...], replica: Replica | None = None
    ) -> None:
        """A client read these batches from `node`: each must pass its CRC and be
        committed, in place (a replica not told of an unclean election: in its timeline)."""
        timeline = None
        if node in self.suspects and replica is not None and replica.isr is not None:
            timeline = self.timeline_of(self.known_unclean(node, replica))
        for batch in batches:
            header = read_header(batch)
            self.reads += 1
            try:
                check_batch(batch)
            except CorruptBatch as error:
                self.fail(f"node {node} served a corrupt batch at {header.base_offset}: {error}")
                continue
            known = self.history.get(header.base_offset)
            if timeline is not None and (known is None or known.identity != batch_identity(batch)):
                known = timeline.history.get(header.base_offset)
            if known is None or known.identity != batch_identity(batch):
                self.fail(
                    f"node {node} served offset {header.base_offset} (epoch {header.epoch}) "
                    "that is not in the committed history"
                )

    def check_matches(self, replicas: dict[NodeId, Replica]) -> None:
        """Every leader's match offset for a follower of its epoch is within the
        follower's durable log (see the module's docstring)."""
        self.note_repairs(replicas)
        for node, leader in replicas.items():
            if leader.role is not Role.LEADER:
                continue
            for peer, progress in leader.progress.items():
                follower = replicas.get(peer)
                match = progress.match_offset
                self.check_match_rises(node, leader.epoch, peer, match)
                stale = self.stale_matches.get(peer)
                if stale and (node, leader.epoch) in stale:
                    if match is None:  # forgotten: from now on it says what the follower holds
                        stale.discard((node, leader.epoch))
                    continue
                if follower is None or match is None or follower.epoch != leader.epoch:
                    continue
                if follower.repair_floor is not None and self.repair_untold(peer, node, leader):
                    continue  # damage set aside since the leader last heard from it (rule 8)
                if follower.leader_id == node and follower.log.durable_end_offset < match:
                    self.fail(
                        f"leader {node} counts node {peer}'s match {match}, but node {peer} "
                        f"holds its log durably only up to {follower.log.durable_end_offset}"
                    )

    def note_repairs(self, replicas: dict[NodeId, Replica]) -> None:
        """A replica that started again with a repair floor may have set damage aside just
        now: note how far each leader had sent its appends then."""
        for node, replica in replicas.items():
            if self.incarnations.get(node) is replica:
                continue
            self.incarnations[node] = replica
            if replica.repair_floor is not None:
                self.repair_seqs[node] = {
                    (leader, other.epoch): other.append_seq
                    for leader, other in replicas.items()
                    if other.role is Role.LEADER
                }

    def repair_untold(self, follower: NodeId, node: NodeId, leader: Replica) -> bool:
        """Whether `leader` may not know yet that `follower` set damage aside: it led when
        the follower last did, and has not ended a probe sent since (the answer to one says
        where the follower's log ends)."""
        seq = self.repair_seqs.get(follower, {}).get((node, leader.epoch))
        progress = leader.progress[follower]
        return seq is not None and (progress.probing or progress.probe_seq <= seq)

    def on_wipe(self, node: NodeId, replicas: dict[NodeId, Replica]) -> None:
        """`node` lost its disk: the matches its leaders counted for it name records it no
        longer holds, until they learn it (rule 7 of the replica, scenario 26)."""
        self.stale_matches.setdefault(node, set()).update(
            (leader, replica.epoch)
            for leader, replica in replicas.items()
            if replica.role is Role.LEADER
        )

    # ------------------------------------------------------------ any two replicas ---
    def compare_committed(self, replicas: dict[NodeId, Replica]) -> None:
        """Any two replicas' batches are identical, byte for byte, over [the higher log
        start, the lower HWM)."""
        prefixes = {
            node: committed_prefix(replica)
            for node, replica in replicas.items()
            if node not in self.suspects
        }
        nodes = sorted(prefixes)
        for index, a in enumerate(nodes):
            for b in nodes[index + 1 :]:
                difference = compare_prefixes((a, prefixes[a]), (b, prefixes[b]))
                if difference is not None:
                    self.fail(f"nodes {a} and {b}: {difference}")
                    return

    def check_match_rises(
        self, leader: NodeId, epoch: Epoch, peer: NodeId, match: Offset | None
    ) -> None:
        """A leader's match for a follower never goes back within its epoch: a follower
        drops nothing it acknowledged. The leader may only forget it (None: the follower
        set damage aside, proved its copy lost, or started again in ISR mode), and then
        counts again from what the follower answers."""
        key = (leader, epoch, peer)
        if match is None:
            self.matches_seen.pop(key, None)
            return
        seen = self.matches_seen.get(key)
        if seen is not None and match < seen:
            self.fail(
                f"leader {leader} (epoch {epoch}) took node {peer}'s match back from {seen} "
                f"to {match} without forgetting it"
            )
        self.matches_seen[key] = match

    # ------------------------------------------------------------ the end -----------
    def check_converged(self, replicas: dict[NodeId, Replica]) -> str | None:
        """None when every replica holds the same fully committed log; else why not.
        The logs end at one offset: a replica whose log ends below the others' log start
        (their records deleted while it was away) reads nothing from there, no more than
        a log emptied by deletion does, and it has not caught up yet."""
        start = Offset(max(r.log.log_start_offset for r in replicas.values()))
        ends = {node: replica.log.log_end_offset for node, replica in replicas.items()}
        if len(set(ends.values())) > 1:
            return f"the logs end at different offsets: {ends}"
        logs: dict[NodeId, list[bytes]] = {}
        for node, replica in replicas.items():
            end = ends[node]
            if replica.hwm != end:
                return f"node {node}: HWM {replica.hwm} != log end {end}"
            logs[node] = replica.log.read(start, end_offset=end, max_bytes=READ_BYTES_MAX)
        first = next(iter(logs.values()))
        for node, batches in logs.items():
            if batches != first:
                return f"node {node}: log differs from the others"
        return None

    def check_final(self, replicas: dict[NodeId, Replica]) -> None:
        """Every acknowledged write not deleted since is in every replica's final log;
        the committed prefixes agree."""
        self.compare_committed(replicas)
        for node, replica in replicas.items():
            start, end = replica.log.log_start_offset, replica.log.log_end_offset
            batches = replica.log.read(start, end_offset=end, max_bytes=READ_BYTES_MAX)
            present = {batch_identity(b): read_header(b).base_offset for b in batches}
            for identity, offset in self.acked.items():
                if offset >= start and present.get(identity) != offset:
                    self.fail(f"node {node}: acknowledged write at {offset} lost")
                    return
            joined = b"".join(batches)
            for _ in iter_batches(joined):  # every stored batch still passes its CRC
                pass


@dataclass(frozen=True, slots=True)
class Prefix:
    """A replica's committed batches by base offset, over [log start, HWM)."""

    start: int
    hwm: int
    batches: dict[int, bytes]


def committed_prefix(replica: Replica) -> Prefix:
    log = replica.log
    start, hwm = log.log_start_offset, Offset(min(replica.hwm, log.log_end_offset))
    batches = log.read(start, end_offset=hwm, max_bytes=READ_BYTES_MAX) if start < hwm else []
    return Prefix(start, hwm, {read_header(batch).base_offset: batch for batch in batches})


def compare_prefixes(a: tuple[NodeId, Prefix], b: tuple[NodeId, Prefix]) -> str | None:
    """Where two nodes' committed prefixes differ over their common range, or None."""
    (node_a, prefix_a), (node_b, prefix_b) = a, b
    start, end = max(prefix_a.start, prefix_b.start), min(prefix_a.hwm, prefix_b.hwm)
    if start >= end:
        return None
    common_a = overlapping(prefix_a.batches, start, end)
    common_b = overlapping(prefix_b.batches, start, end)
    for offset in sorted(common_a.keys() | common_b.keys()):
        batch_a, batch_b = common_a.get(offset), common_b.get(offset)
        if batch_a == batch_b:
            continue
        where = f"(committed on both: [{start}, {end}))"
        if batch_a is None or batch_b is None:
            missing = node_a if batch_a is None else node_b
            return f"the committed batch at {offset} is missing from node {missing}'s log {where}"
        return f"the committed batch at {offset} differs {where}"
    return None


def overlapping(batches: dict[int, bytes], start: int, end: int) -> dict[int, bytes]:
    """The batches holding an offset in [start, end)."""
    return {
        base: batch
        for base, batch in batches.items()
        if base < end and read_header(batch).next_offset > start
    }
