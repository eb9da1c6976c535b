"""The invariants of shared/docs/correctness.md, checked after every simulated step.

The checker keeps the true committed history (TigerBeetle's StateChecker): whenever a
replica's HWM moves, the batches it newly calls committed are compared with the history,
or extend it. Everything else is checked against that history:
- at most one leader per epoch;
- committed-prefix agreement, and no committed batch ever lost or changed;
- every batch a client read is at the same offset in the committed history;
- every acknowledged acks=all write is in the committed history (Jepsen's lost-write),
  and no batch is committed twice (Jepsen's duplicate: the idempotent producer retries);
- HWM never decreases within a run of a replica, nor below what its storage made durable
  across a restart, except when that storage set damage aside (the replica starts with a
  repair floor, its HWM at most its shorter log's end: rule 8 of the replica);
  HWM <= log end offset, log start offset <= HWM, and no replica's log ends below what it
  called committed.
A batch is identified by its bytes from the CRC on: the leader's stamp (offset, epoch) lies
outside them, so the producer's batch and the stored one compare equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidelog.core.replica import Replica, Role
from tidelog.records import iter_batches, read_header
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
    committed_identities: set[bytes] = field(default_factory=set)
    leader_hwm_max: int = 0

    def fail(self, text: str) -> None:
        if len(self.violations) < 20:
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

    def check_unique(self, position: int, identity: bytes) -> None:
        if identity in self.committed_identities:
            self.fail(f"batch committed twice, again at offset {position} (duplicate)")
        self.committed_identities.add(identity)

    # ------------------------------------------------------------ clients -----------
    def on_acked(self, base_offset: int, batch: bytes) -> None:
        """An acks=all produce was acknowledged at base_offset (checked after the step)."""
        identity = batch_identity(batch)
        self.acked[identity] = base_offset
        self.unverified_acks.append((base_offset, identity))

    def verify_acks(self) -> None:
        """Each acknowledgement of the step is in the committed history, at its offset."""
        for base_offset, identity in self.unverified_acks:
            known = self.history.get(base_offset)
            if known is None or known.identity != identity:
                self.fail(f"acks=all write at offset {base_offset} acknowledged but not committed")
        self.unverified_acks.clear()

    def on_leader_hwm(self, node: NodeId, hwm: int) -> None:
        """A leader told a client its HWM: it never goes back across leader changes."""
        if hwm < self.leader_hwm_max:
            self.fail(f"leader {node} answered HWM {hwm} after clients saw {self.leader_hwm_max}")
        self.leader_hwm_max = max(self.leader_hwm_max, hwm)

    def on_read(self, node: NodeId, batches: tuple[bytes, ...]) -> None:
        """A client read these batches from `node`: each must be committed, in place."""
        for batch in batches:
            header = read_header(batch)
            self.reads += 1
            known = self.history.get(header.base_offset)
            if known is None or known.identity != batch_identity(batch):
                self.fail(
                    f"node {node} served offset {header.base_offset} (epoch {header.epoch}) "
                    "that is not in the committed history"
                )

    # ------------------------------------------------------------ the end -----------
    def check_converged(self, replicas: dict[NodeId, Replica]) -> str | None:
        """None when every replica holds the same fully committed log; else why not."""
        start = Offset(max(r.log.log_start_offset for r in replicas.values()))
        logs: dict[NodeId, list[bytes]] = {}
        for node, replica in replicas.items():
            end = replica.log.log_end_offset
            if replica.hwm != end:
                return f"node {node}: HWM {replica.hwm} != log end {end}"
            logs[node] = replica.log.read(start, end_offset=end, max_bytes=READ_BYTES_MAX)
        first = next(iter(logs.values()))
        for node, batches in logs.items():
            if batches != first:
                return f"node {node}: log differs from the others"
        return None

    def check_final(self, replicas: dict[NodeId, Replica]) -> None:
        """Every acknowledged write not deleted since is in every replica's final log."""
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
