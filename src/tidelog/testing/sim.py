"""The randomized simulator: real replicas, fake network, clocks and disk, one seed per run.

    python -m tidelog.testing.sim --seeds N [--first-seed S] [--replicas 3|4|5] [--ticks T]
                                  [--disk] [--jobs J] [--faults full|classic] [--trace]
                                  [--mode quorum|isr] [--naming] [--moves] [--quiesce]

Each seed first draws its settings (`faults.py`): min.insync.replicas (a majority, or above
it: 3 of 3, 4 of 5), pre-vote and check-quorum on or off, one batch per append or up to
2 KiB, each node's clock offset and rate, drops, duplicates, delays (a share of them longer
than an election timeout, a share of messages delivered once more that late), slow disks,
retention, steady or bursty writes. A safety phase follows, in stormy and calm windows:
crashes that lose unsynced writes, partitions symmetric and one-way, pauses, a minority
kept down for a while, DeleteRecords (at the HWM, below it, and past it: refused),
retention racing with resets and stale acknowledgements, and with `--disk` fsyncs failing
with EIO, writes failing with ENOSPC and bits flipping in a minority's committed batches.
Then a liveness phase: heal everything; within a bounded time a leader must exist, a new
acks=all write must commit, and all replicas must converge. `--faults classic` runs the
model from before scenarios 19-22 instead, so the seeds it found replay.

Four replicas are an even count: a majority is 3, so two halves of 2 never both decide.
In about half the seeds odd clients play besides (`odd_clients.py`, from a generator of
their own): the idempotent producer sends batches with a sequence gap (refused, never
committed), its last batch again (answered with its first offsets) and batches of a new
producer id not at sequence 0 (UnknownProducerId), and consumers ask leaders
OffsetForLeaderEpoch (never past the committed end, never a committed record reported
truncated). An acks=1 write is acknowledged only once the leader's copy is durable.

The checker (`checker.py`) sees every step; the monitors (`monitors.py`) watch leases,
check-quorum, the Figure-8 rule (a leader's HWM moves only past its own epoch's start),
probes and progress while a quorum is up and connected; in quorum mode those of
`vote_monitors.py` watch min.insync.replicas (at the HWM and at an acks=all produce), the
matches a leader counts, pre-votes, votes and their lease, and follower reads, and a
consumer names an epoch newer than any record (told LogDiverged). A node whose log is
found damaged (by its own read, a client's or the checker's) sets the damage aside and
starts again with a repair floor, as the broker does, and catches up from its leader.
A failing seed prints the command that reproduces it; `--trace` prints every event of a
seed. The last lines count the disk faults and say `N seeds, V violations`.

`--mode isr` runs ISR mode (docs/isr.md) instead of the majority quorum, the default (whose
seeds run as they did before ISR mode existed): every replica is in ISR mode, led by a
simulated controller (`isr_sim.py`) that holds the partition record and changes it only by
core/isr.py's transitions. Proposals, answers, records and heartbeats cross faulty links
(dropped, delayed, duplicated, late, replayed; links to the controller cut on their own);
the controller fences a node silent for a session timeout, elects from the ISR or ELR,
marks a node that comes back in a new incarnation as restarted, and fails over (proposals
in flight lost or kept, stale NOT_CONTROLLER answers carrying older records). Each seed
draws min.insync.replicas (1..RF), replica.lag.time.max.ms, the session timeout and the
failover rate besides the settings above; check-quorum is off (ISR mode has no lease),
and bits never flip (with an ISR of one, a damaged batch set aside is the last copy gone:
no fault model of a safe run). In memory a restart may come back with an empty log (a disk
replaced, as in quorum mode) while another member of the committed ISR and ELR holds the
acknowledged records; the checker excuses the wiped node until the controller registers
its new incarnation, then requires that no leader told of the restart counts a match the
node does not hold (rule 9). A crash spares the last good copy (the only member of the ISR
and ELR up in the incarnation the controller knows); a disk error stops it all the same,
and a partition whose ISR and ELR are empty is offline for good (counted, not a
violation). The checker adds ISR mode's invariants: every acknowledged acks=all record in
the durable log of every member of the committed ISR and ELR; the record's epochs never go
back; the HWM a consumer saw never goes back; the ISR and the ELR are never both empty
before some replica started again (rule 9); and the liveness phase asks the controller to
elect a leader that commits a new write.

A share of the ISR seeds, drawn from a generator of its own (the others run as before),
sets unclean.leader.election.enable (rule 10; without DeleteRecords or retention,
see isr_sim.py): any node may crash, with no ISR or ELR member live the controller elects
any live node, and no partition is offline for good. The checker cuts its history where
the new leader's log departs from it: acknowledged writes past the cut, or acknowledged by
a leader the election deposed, are lost (counted in the summary with the elections), and
nothing below it. Every replica is suspect until its HWM was checked against a leader of
that epoch or later, then held to every invariant again; consumers truncate to the cut,
take nothing from a suspect replica, and now and then read from one told of the election
(`read_told_followers`): whatever it serves past the cut is a violation (rule 10).

Quorum mode's voters are copies (core/membership.py): the first voter set names each
node's directory, or with `--naming` none, and the leaders name them once their copies
answered (as a broker's metadata log does). A node back on an empty disk is an observer
until its leader has replaced its key; a disk is replaced only while a quorum of settled
voters holds the committed history and no set knows a copy by node alone, and a run
converges only once every copy votes again.

`--moves` (quorum mode) adds a simulated controller that changes the replica set under the
faults (`moves.py`): new targets, moves, cancels and replication factors up and down,
learned by each node in order after a delay of its own; KRaft's membership invariants are
checked on every live log at every step, and a run converges only once the leader's voter
set is the last target, committed.

`--quiesce` (quorum mode) makes every replica quiesce its idle partition (core/quiesce.py)
over node liveness (core/liveness.py, an election timeout of the node's clock): each node
pings the others every heartbeat interval of its clock and declares dead, at every tick,
those it has not heard for that long. From a generator of its own, each seed draws writes
in bursts with idle stretches twice as long (partitions sleep and wake by the dozen),
DeleteRecords rarer and fault rates that leave the nodes all up and connected more often,
while every fault plays on: crashes, restarts, pauses, partitions one-way and two-way,
lost, late, duplicated and replayed messages, lost unsynced writes, disks with `--disk`.
Besides, faults aimed at a quiesced leader (a crash, a long pause, a cut both ways or one,
a transfer whose wake-up heartbeats are lost while its TimeoutNow goes out), slow wake-ups
(a share of the wakes lose or delay what the woken leader sends in its first heartbeats)
and lost quiesce appends (a partition half asleep). The invariants are the same; the
lease monitor counts the contact node liveness gives a quiesced leader, the vote monitor
counts a node's ticks (a quiesced replica counts none), and two liveness monitors join
(`monitors.py`): a partition quiesced under a leader whose node went down has a candidate
within QUIESCED_CAMPAIGN_TICKS_MAX and a leader within QUIESCED_LEADER_TICKS_MAX of a
majority that could elect one, and a quiesced follower wakes within SLEEPER_TICKS_MAX
while an awake leader of its epoch or a later one is connected to it. The summary counts
the quiesces, the wakes (the slow ones), the partitions stranded by their leader's node,
and how long they waited.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from tidelog.core.isr import NO_LEADER
from tidelog.core.messages import ProduceResult
from tidelog.core.replica import (
    ACKS_ALL,
    ACKS_LEADER,
    ACKS_NONE,
    Replica,
    ReplicaConfig,
    Replication,
    Role,
)
from tidelog.errors import (
    FencedEpoch,
    LogDiverged,
    NotLeader,
    OffsetOutOfRange,
    OutOfOrderSequence,
    StorageError,
    TidelogError,
    UnknownProducerId,
)
from tidelog.records import read_header
from tidelog.testing.checker import Checker
from tidelog.testing.cluster import Cluster, SimMemoryStorage, SimStorage
from tidelog.testing.disk import SimDiskStorage, wal_config
from tidelog.testing.faults import (
    LIVENESS_TIMEOUT,
    MICROS_PER_TICK,
    Faults,
    QuiesceSettings,
    Settings,
    Wakes,
    heal_disks,
    reflip_generator,
    replica_config,
)
from tidelog.testing.isr_sim import (
    HEARTBEAT_TICKS,
    IsrChecks,
    IsrSettings,
    SimController,
    draw_unclean,
)
from tidelog.testing.leader_claims import LostCopyMonitor, TransferMonitor
from tidelog.testing.monitors import (
    LeaseMonitor,
    OwnEpochMonitor,
    ProbeMonitor,
    ProgressMonitor,
    QuiescedLeaderMonitor,
    QuorumMonitor,
    SleeperMonitor,
)
from tidelog.testing.moves import MembershipMonitor, Moves
from tidelog.testing.odd_clients import OddClients
from tidelog.testing.producer_check import ProducerStateMonitor
from tidelog.testing.vote_monitors import AckMonitor, VoteMonitor, odd_fetch
from tidelog.types import NO_DIRECTORY, NO_EPOCH, DirectoryId, Epoch, NodeId, Offset
from tidelog.wal.batches import NO_PRODUCER, producer_batch

IDEMPOTENT_PRODUCER_ID = 1000
LIVENESS_TICKS_MAX = 1500  # catching a far-behind follower up one batch per append is slow
# While a quorum is up and connected, replication never stalls this many ticks, and no
# follower of the leader goes this many without taking anything (monitors.py).
PROGRESS_TICKS_MAX = 300
FOLLOWER_STUCK_TICKS_MAX = 100
# `--quiesce`: a partition quiesced under a leader whose node went down (or was cut off) has
# a candidate within this many ticks of a majority that could elect one, and a leader
# within the second (monitors.py).
QUIESCED_CAMPAIGN_TICKS_MAX = 60
QUIESCED_LEADER_TICKS_MAX = 250
# And a candidate within this many ticks of a voter of that majority declaring the
# leader's node dead (the first survivor stands at once, the others within an election
# timeout: core/quiesce.py rule 3).
DECLARED_CAMPAIGN_TICKS_MAX = 30
# `--quiesce`: a quiesced follower wakes within this many ticks while an awake leader of
# its epoch or a later one is up and connected to it both ways (monitors.py).
SLEEPER_TICKS_MAX = 20
# `--quiesce`: the writes' idle stretches last this many times as long as their bursts.
QUIESCE_IDLE_FACTOR = 2
PAIRS_EVERY_TICKS = 20  # how often any two replicas' committed prefixes are compared
CONTROLLER_CUT_SHARE = 0.5  # ISR mode: links to the controller are cut and healed this often
CONSUMERS = 3
TOLD_READ_RATE = 0.05  # per microtick: a read from a replica told of an unclean election
FETCH_BYTES_MAX = 16 * 1024


def build_batch(
    value: bytes,
    *,
    records: int = 1,
    timestamp_ms: int = 0,
    producer: tuple[int, int, int] = NO_PRODUCER,
) -> bytes:
    """A producer's batch of `records` copies of `value` (the leader stamps offsets)."""
    return producer_batch([value] * records, timestamp_ms=timestamp_ms, producer=producer)


@dataclass
class Consumer:
    position: Offset = field(default_factory=lambda: Offset(0))
    last_epoch: Epoch = NO_EPOCH
    leader_epoch: Epoch = NO_EPOCH  # the newest leader epoch it knows of (KIP-320)
    hwm_seen: int = 0  # the highest HWM a leader answered it with


@dataclass
class Workload:
    """Producers that remember what was acknowledged; consumers that remember what they read."""

    cluster: Cluster
    checker: Checker
    rng: random.Random
    seed: int
    produced: int = 0
    leader_hint: NodeId | None = None
    in_flight: dict[int, tuple[bytes, int]] = field(default_factory=dict)
    acked_all: int = 0
    on_acked_all: list[Callable[[], None]] = field(default_factory=list)
    # The idempotent producer: one batch in flight, retried as is until acknowledged.
    idempotent_batch: bytes | None = None
    idempotent_request: int | None = None
    idempotent_sequence: int = 0
    idempotent_epoch: int = 0
    consumers: list[Consumer] = field(
        default_factory=lambda: [Consumer() for _ in range(CONSUMERS)]
    )
    # Without check-quorum a deposed leader holds no lease and serves: consumers then name
    # the leader epoch they know, which fences it (KIP-320). With it, the lease alone must
    # keep every leader's answers fresh.
    send_leader_epoch: bool = False
    # ISR mode: the HWM a client saw never goes back, for that client, across leader changes.
    client_hwm_check: bool = False
    on_acked: list[Callable[[int, bytes], None]] = field(default_factory=list)
    # Odd batches of the idempotent producer and OffsetForLeaderEpoch (odd_clients.py).
    odd: OddClients | None = None
    # AckMonitor.propose (vote_monitors.py): quorum mode's min.insync.replicas at produce.
    checked_propose: Callable[[NodeId, Replica, int, bytes, int], None] | None = None
    odd_fetch: bool = False  # a fetch naming an epoch newer than any record (KIP-320)
    on_served: list[Callable[[NodeId, Replica], None]] = field(default_factory=list)
    # ISR mode: an acks=all write acknowledged by a leader deposed uncleanly (`lost_ack`)
    on_lost: list[Callable[[bytes], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cluster.listeners.append(self.on_completion)

    def produce_idempotent(self) -> None:
        """Send (or send again) the idempotent producer's batch to the believed leader."""
        if self.idempotent_request is not None:
            return
        kind = self.odd.pick() if self.odd is not None and self.idempotent_batch is None else None
        if kind is not None:
            self.produce_odd(kind)
            return
        if self.idempotent_batch is None:
            self.produced += 1
            epoch, sequence = self.idempotent_epoch, self.idempotent_sequence
            value = f"{self.seed}:idem:{epoch}:{sequence}".encode()
            count = self.rng.choice((1, 3))
            producer = (IDEMPOTENT_PRODUCER_ID, epoch, sequence)
            self.idempotent_batch = build_batch(value, records=count, producer=producer)
        self.produced += 1
        request_id = self.produced
        batch = self.idempotent_batch
        self.idempotent_request = request_id
        self.in_flight[request_id] = (batch, ACKS_ALL)
        node = self.pick_node()
        self.cluster.note(f"produce #{request_id} to {node} (idempotent)")
        if not self.cluster.input(node, self.proposal(node, request_id, batch, ACKS_ALL)):
            self.in_flight.pop(request_id)
            self.idempotent_request = None

    def produce_odd(self, kind: str) -> None:
        """Send, in the idempotent producer's slot, a batch with a sequence gap or its last
        acknowledged batch again (odd_clients.py)."""
        assert self.odd is not None
        if kind == "gap":
            epoch = self.idempotent_epoch
            sequence = self.odd.gap_sequence(self.idempotent_sequence)
            value = f"{self.seed}:gap:{epoch}:{sequence}".encode()
            batch = build_batch(value, producer=(IDEMPOTENT_PRODUCER_ID, epoch, sequence))
        elif kind == "unknown":
            producer = self.odd.unknown_producer()
            batch = build_batch(f"{self.seed}:unknown:{producer}".encode(), producer=producer)
        else:
            assert self.odd.last_acked is not None
            batch = self.odd.last_acked[0]
        self.produced += 1
        request_id = self.produced
        self.idempotent_request = request_id
        self.in_flight[request_id] = (batch, ACKS_ALL)
        self.odd.sent(request_id, kind, batch)
        node = self.pick_node()
        self.cluster.note(f"produce #{request_id} to {node} (idempotent, {kind})")
        if not self.cluster.input(node, self.proposal(node, request_id, batch, ACKS_ALL)):
            self.in_flight.pop(request_id)
            self.odd.in_flight.pop(request_id, None)
            self.idempotent_request = None

    def produce(self, acks: int | None = None) -> None:
        if self.rng.random() < 0.3:
            self.produce_idempotent()
            return
        if acks is None:
            acks = self.rng.choice((ACKS_ALL, ACKS_ALL, ACKS_ALL, ACKS_LEADER, ACKS_NONE))
        node = self.pick_node()
        self.produced += 1
        count = self.rng.choice((1, 1, 2, 5))
        batch = build_batch(f"{self.seed}:{self.produced}".encode(), records=count)
        self.in_flight[self.produced] = (batch, acks)
        request_id = self.produced
        self.cluster.note(f"produce #{request_id} to {node} (acks={acks}, {count} records)")
        self.cluster.input(node, self.proposal(node, request_id, batch, acks))

    def proposal(
        self, node: NodeId, request_id: int, batch: bytes, acks: int
    ) -> Callable[[Replica], None]:
        """The input that proposes a batch (through the min.insync check, if any)."""
        checked = self.checked_propose
        if checked is None:
            return lambda replica: replica.propose(request_id, batch, acks=acks)
        return lambda replica: checked(node, replica, request_id, batch, acks)

    def check_durable_at_leader(self, node: NodeId, result: ProduceResult) -> None:
        """An acks=1 write is acknowledged once the leader's copy is durable. Judged while
        the node still leads: one that stepped down in the same round may have dropped the
        write since (an acks=1 write may be lost with its leader; ISR seed 252)."""
        replica = self.cluster.nodes[node].replica
        end = result.next_offset
        if replica is None or replica.role is not Role.LEADER:
            return
        if end is not None and replica.log.durable_end_offset < end:
            self.checker.fail(
                f"node {node} acknowledged an acks=1 write ending at {end}, its durable log "
                f"ending at {replica.log.durable_end_offset}"
            )

    def pick_node(self) -> NodeId:
        if self.leader_hint is not None and self.rng.random() < 0.9:
            return self.leader_hint
        return self.rng.choice(self.cluster.ids)

    def delete_records(self, at_hwm_share: float, past_hwm_share: float) -> None:
        """DeleteRecords on a leader: at its HWM (`at_hwm_share` of the time), past it
        (`past_hwm_share`: it must be refused), else up to it."""
        leaders = [n for n, r in self.cluster.live_replicas() if r.role is Role.LEADER]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        replica = self.cluster.replica(node)
        low, high = replica.log.log_start_offset, min(replica.hwm, replica.log.log_end_offset)
        roll = self.rng.random() if at_hwm_share or past_hwm_share else 1.0
        if roll < past_hwm_share:
            offset = Offset(high + self.rng.randint(1, 3))
        elif roll < past_hwm_share + at_hwm_share:
            offset = Offset(high)
        else:
            offset = Offset(self.rng.randint(low, high))
        self.cluster.note(f"DeleteRecords({offset}) on {node}")
        self.cluster.input(node, lambda replica: self.delete_on(node, replica, offset))

    def delete_on(self, node: NodeId, replica: Replica, offset: Offset) -> None:
        """DeleteRecords as the replica takes it (maybe later: it was busy or paused)."""
        readable_end = min(replica.hwm, replica.log.log_end_offset)
        try:
            low_watermark = replica.delete_records(offset)
        except (NotLeader, OffsetOutOfRange):
            return  # deposed meanwhile, or past the HWM: refused, as it must be
        if offset > readable_end:
            self.checker.fail(
                f"node {node}: DeleteRecords({offset}) past the HWM {readable_end} was executed"
            )
        self.cluster.note(f"DeleteRecords({offset}) on {node}: log start {low_watermark}")

    def on_completion(self, node: NodeId, result: ProduceResult) -> None:
        batch, acks = self.in_flight.pop(result.request_id, (b"", ACKS_NONE))
        if self.cluster.trace is not None:
            outcome = result.error or f"at {result.base_offset}"
            self.cluster.note(f"produce #{result.request_id} answered by {node}: {outcome}")
        if result.request_id == self.idempotent_request:
            self.idempotent_request = None
            if self.odd is not None and self.odd.answered(node, result):
                self.leader_hint = node if result.error is None else self.leader_hint
                return
            if result.error is None:
                header = read_header(batch)
                self.idempotent_sequence += header.last_offset_delta + 1
                self.idempotent_batch = None
                if self.odd is not None and result.base_offset is not None:
                    # one from a leader an unclean election deposed may be lost: no retry
                    lost = node in self.checker.suspects
                    self.odd.acked(batch, result.base_offset, lost=lost)
            elif isinstance(result.error, (UnknownProducerId, OutOfOrderSequence)):
                # Its state is gone (deleted with the records, or a batch was lost): the
                # batch fails, and the producer goes on in a new epoch from sequence 0, as
                # Kafka's idempotent producer does. Never a duplicate: the new batch is new.
                self.idempotent_epoch += 1
                self.idempotent_sequence = 0
                self.idempotent_batch = None
                if self.odd is not None:
                    self.odd.new_producer_epoch()
        if result.error is None:
            self.leader_hint = node
            if acks == ACKS_LEADER:
                self.check_durable_at_leader(node, result)
            if acks == ACKS_ALL and result.base_offset is not None:
                if node in self.checker.suspects:
                    self.lost_ack(node, result.base_offset, batch)
                    return
                self.acked_all += 1
                self.checker.on_acked(result.base_offset, batch)
                for acked in self.on_acked:
                    acked(result.base_offset, batch)
                for listener in self.on_acked_all:
                    listener()
            return
        hint = getattr(result.error, "leader_hint", None)
        self.leader_hint = hint if hint is not None else self.rng.choice(self.cluster.ids)

    def lost_ack(self, node: NodeId, base_offset: int, batch: bytes) -> None:
        """ISR mode: an acks=all write acknowledged by a leader an unclean election
        deposed, not told yet (rule 10): lost, unless the new leader happens to hold it."""
        self.cluster.note(f"acks=all write at {base_offset} by {node}, deposed uncleanly: lost")
        self.cluster.stops["lost"] += 1
        for lost in self.on_lost:
            lost(batch)

    def on_cut(self, cut: int) -> None:
        """ISR mode: an unclean election cut the committed history at `cut` (rule 10): a
        consumer that read past it truncates to it (KIP-320), and the HWM it saw may go
        back to it, once."""
        epoch = next(
            (b.epoch for b in self.checker.history.values() if b.next_offset == cut), NO_EPOCH
        )
        for consumer in self.consumers:
            if consumer.position > cut:
                consumer.position = Offset(cut)
                consumer.last_epoch = epoch
            consumer.hwm_seen = min(consumer.hwm_seen, cut)

    def consume(self, node: NodeId | None = None) -> None:
        """One fetch by a consumer (and from a leader a ListOffsets "latest" too), checked.
        A log found damaged by the read repairs its node (the batch is never served)."""
        consumer = self.rng.choice(self.consumers)
        node = self.rng.choice(self.cluster.ids) if node is None else node
        replica = self.cluster.nodes[node].replica
        busy = self.cluster.nodes[node].persisting is not None or self.cluster.is_paused(node)
        if replica is None or busy:
            return
        with self.cluster.stopping_on_disk_errors(node):
            self.fetch(node, replica, consumer)
            self.ask_latest(node, replica)
            if self.odd_fetch:
                odd_fetch(
                    self.checker, node, replica, consumer.position, self.cluster.clock_ms(node)
                )
            if self.odd is not None and node not in self.checker.suspects:
                read = (consumer.position, consumer.last_epoch)
                self.odd.ask_epoch_end(node, replica, read, name_epoch=self.send_leader_epoch)

    def fetch(self, node: NodeId, replica: Replica, consumer: Consumer) -> None:
        known = consumer.position > 0 and consumer.last_epoch != NO_EPOCH
        last_epoch = consumer.last_epoch if known else None
        named = self.send_leader_epoch and consumer.leader_epoch != NO_EPOCH
        result = replica.fetch(
            consumer.position,
            max_bytes=FETCH_BYTES_MAX,
            last_fetched_epoch=last_epoch,
            current_leader_epoch=consumer.leader_epoch if named else None,
            now_ms=self.cluster.clock_ms(node),
        )
        if isinstance(result.error, FencedEpoch) or replica.role is Role.LEADER:
            # A metadata refresh tells it the epoch of the leader it asks.
            consumer.leader_epoch = max(consumer.leader_epoch, replica.epoch)
        if isinstance(result.error, FencedEpoch):
            return
        if node in self.checker.suspects:
            # ISR mode, after an unclean election: what it serves is judged, but it may
            # be given up, so the consumer takes nothing from it (rule 10)
            if result.error is None:
                self.checker.on_read(node, result.batches, replica)
            return
        if (
            isinstance(result.error, OffsetOutOfRange)
            and consumer.position < result.log_start_offset
        ):
            consumer.position = result.log_start_offset  # deleted (DeleteRecords): move on
            consumer.last_epoch = NO_EPOCH
            return
        if isinstance(result.error, (LogDiverged, OffsetOutOfRange)):
            self.checker.fail(f"node {node}: consumer at {consumer.position} got {result.error!r}")
            return
        if result.error is not None:
            return
        for served in self.on_served:
            served(node, replica)
        if replica.role is Role.LEADER:
            self.checker.on_leader_hwm(node, result.hwm)
            if self.client_hwm_check:
                self.check_client_hwm(node, consumer, result.hwm)
        self.checker.on_read(node, result.batches, replica)
        for batch in result.batches:
            header = read_header(batch)
            if header.next_offset > consumer.position:
                consumer.position = header.next_offset
                consumer.last_epoch = header.epoch
            consumer.leader_epoch = max(consumer.leader_epoch, header.epoch)

    def check_client_hwm(self, node: NodeId, consumer: Consumer, hwm: int) -> None:
        if hwm < consumer.hwm_seen:
            self.checker.fail(
                f"leader {node} answered a consumer HWM {hwm} after it saw {consumer.hwm_seen}"
            )
        consumer.hwm_seen = max(consumer.hwm_seen, hwm)

    def ask_latest(self, node: NodeId, replica: Replica) -> None:
        """ListOffsets "latest" (the HWM) from a leader: it never goes back either."""
        if replica.role is not Role.LEADER:
            return
        try:
            latest = replica.latest_offset(now_ms=self.cluster.clock_ms(node))
        except TidelogError:
            return  # no lease, or a new leader's HWM below its epoch: retriable
        self.checker.on_leader_hwm(node, latest)


@dataclass(frozen=True, slots=True)
class SeedResult:
    """What one seed found, and the fail-stops and repairs it caused (EIO, ENOSPC, repair)."""

    violations: list[str]
    stops: dict[str, int]


def with_directories(
    config: Callable[[NodeId, tuple[NodeId, ...]], ReplicaConfig], *, naming: bool
) -> Callable[[NodeId, tuple[NodeId, ...]], ReplicaConfig]:
    """`config`, its first voter set naming each replica's directory (node N's first copy
    is directory N), or (`naming`, `sim --naming`) none, its leaders naming them as a
    broker's metadata log does: a node that comes back on an empty disk is a new copy, no
    voter."""

    def bound(node: NodeId, members: tuple[NodeId, ...]) -> ReplicaConfig:
        if naming:
            return replace(config(node, members), name_directories=True)
        directories = tuple(DirectoryId(member) for member in members)
        return replace(config(node, members), directories=directories)

    return bound


@dataclass
class Run:
    """One seed: its settings, the cluster, its workload, checker and monitors, the clock."""

    seed: int
    replicas: int
    ticks: int
    disk: bool = False
    trace: Callable[[str], None] | None = None
    classic: bool = False  # the classic fault model (faults.py), so old seeds replay
    offsets_log: bool = False  # a log of group coordinators (group_sim.py): they write it
    isr: bool = False  # ISR mode (isr_sim.py): replicas in ISR mode led by a simulated controller
    naming: bool = False  # quorum mode: the first voter set names no directory; leaders do
    moves: bool = False  # quorum mode: a controller changes the replica set (testing/moves.py)
    quiesce: bool = False  # quorum mode: idle partitions quiesce (core/quiesce.py)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.controller: SimController | None = None
        self.isr_checks: IsrChecks | None = None
        self.unclean_rng: random.Random | None = None  # ISR mode, unclean elections on
        if self.isr:
            settings = self.init_isr()
        elif self.classic:
            self.retention_bytes: int | None = None
            self.cluster = self.new_cluster(replica_config)
            self.settings = settings = Settings.draw_classic(self.rng, self.replicas)
            self.faults = Faults.draw_classic(self.rng)
        else:
            settings = Settings.draw(self.rng, self.replicas)
            if self.offsets_log:
                settings = settings.for_offsets_log()
            config: Callable[[NodeId, tuple[NodeId, ...]], ReplicaConfig] = settings.replica_config
            if self.quiesce:
                settings, config = self.init_quiesce(settings)
            self.settings = settings
            self.retention_bytes = settings.retention_bytes
            if not self.offsets_log:
                config = with_directories(config, naming=self.naming)  # empty disk: no voter
            self.cluster = self.new_cluster(config, settings)
            self.faults = Faults.draw(self.rng, settings, disk=self.disk, ticks=self.ticks)
            if self.disk:
                self.faults.reflip_rng = reflip_generator(self.seed)
            if not self.disk and not self.offsets_log:
                self.faults.wipe_rng = random.Random(f"wipe {self.seed}")
                self.cluster.wipe_allowed = self.wipe_allowed
                # Every set names directories before any wipe: a new copy never votes, so its
                # lost vote cannot be given twice; the disk loses it too.
                self.cluster.wipes_keep_votes = False
                self.cluster.on_wipe.append(self.on_wipe)
        for sim_node, clock in zip(self.cluster.nodes.values(), settings.clocks, strict=True):
            sim_node.clock = clock
        settings.apply_network(self.cluster)
        self.checker = Checker(leases=settings.check_quorum)
        self.mover: Moves | None = None
        self.membership: MembershipMonitor | None = None
        if not self.isr and not self.classic and not self.offsets_log:
            self.membership = MembershipMonitor(self.checker)
            if self.moves:
                # A voter set of one commits in `advance`: the checker sees it before the
                # inputs that waited (a DeleteRecords past it), as in ISR mode.
                self.cluster.on_advance.append(self.check)
                self.mover = Moves(
                    self.cluster,
                    random.Random(f"moves {self.seed}"),
                    min_size=settings.min_insync_replicas or 1,
                )
        self.workload = Workload(self.cluster, self.checker, self.rng, self.seed)
        self.workload.send_leader_epoch = not settings.check_quorum
        self.progress = ProgressMonitor(
            self.cluster,
            self.checker,
            voter=self.settled_voter,
            quorum_size=settings.quorum_size,
            check_quorum=settings.check_quorum,
            bound=PROGRESS_TICKS_MAX * MICROS_PER_TICK,
            follower_bound=FOLLOWER_STUCK_TICKS_MAX * MICROS_PER_TICK,
        )
        self.workload.on_acked_all.append(self.progress.on_commit)
        self.cluster.on_step.append(self.check)
        self.quorum = QuorumMonitor(self.cluster, self.checker) if settings.check_quorum else None
        self.own_epoch = None if self.isr else OwnEpochMonitor(self.checker)
        if not self.classic and not self.offsets_log:
            self.workload.odd = OddClients.draw(self.seed, self.cluster, self.checker)
        if settings.check_quorum:
            LeaseMonitor(self.cluster, self.checker)
        ProbeMonitor(self.cluster, self.checker)
        self.producer_state = ProducerStateMonitor(self.cluster, self.checker)
        self.workload.on_acked.append(self.producer_state.on_acked)
        TransferMonitor(self.cluster, self.checker)
        LostCopyMonitor(self.cluster, self.checker)
        self.acks = self.votes = None
        if not self.isr:
            self.acks = AckMonitor(self.cluster, self.checker, liveness_contacts=self.quiesce)
            # Quiesced, a replica takes no ticks: the lease on votes counts the node's.
            self.votes = VoteMonitor(self.cluster, self.checker, node_ticks=self.quiesce)
            self.workload.checked_propose = self.acks.propose
            self.workload.on_served.append(self.votes.on_served)
            self.workload.odd_fetch = not self.classic
        self.states: dict[NodeId, str] = {}
        self.produce_rate = settings.produce_rate  # none in the liveness phase
        self.producing = True  # bursty writes (settings.burst_ticks) pause by turns
        self.idle_factor = QUIESCE_IDLE_FACTOR if self.quiesce else 1
        self.note(f"settings {settings}")
        self.wakes: Wakes | None = None
        self.quiesced_leader: QuiescedLeaderMonitor | None = None
        self.sleepers: SleeperMonitor | None = None
        if self.quiesce:
            self.start_quiescence()
        if self.isr:
            self.start_controller()

    def init_quiesce(
        self, settings: Settings
    ) -> tuple[Settings, Callable[[NodeId, tuple[NodeId, ...]], ReplicaConfig]]:
        """`--quiesce`: the seed's own draws (a generator of their own), writes in bursts
        with idle stretches between them, and every replica quiescing."""
        self.quiesce_rng = random.Random(f"quiesce {self.seed}")
        self.quiesce_settings = QuiesceSettings.draw(self.quiesce_rng)
        settings = self.quiesce_settings.apply(settings)
        config = settings.replica_config

        def quiescing(node: NodeId, members: tuple[NodeId, ...]) -> ReplicaConfig:
            return replace(config(node, members), quiesce=True)

        return settings, quiescing

    def start_quiescence(self) -> None:
        """`--quiesce`: slow wake-ups, and the monitor of quiesced partitions whose leader
        went down."""
        self.note(f"quiesce settings {self.quiesce_settings}")
        self.quiesce_settings.apply_faults(self.faults, random.Random(f"sleepers {self.seed}"))
        quiesce = self.quiesce_settings
        self.wakes = Wakes(
            self.cluster, self.quiesce_rng, quiesce.slow_wake_share, quiesce.lost_quiesce_share
        )
        self.cluster.send_fault = self.wakes.fault
        self.faults.on_sleeper_transfer = self.wakes.lose_next_wake
        self.quiesced_leader = QuiescedLeaderMonitor(
            self.cluster,
            self.checker,
            voter=self.settled_voter,
            majority=self.replicas // 2 + 1,
            check_quorum=self.settings.check_quorum,
            campaign_bound=QUIESCED_CAMPAIGN_TICKS_MAX * MICROS_PER_TICK,
            declared_bound=DECLARED_CAMPAIGN_TICKS_MAX * MICROS_PER_TICK,
            bound=QUIESCED_LEADER_TICKS_MAX * MICROS_PER_TICK,
        )
        self.sleepers = SleeperMonitor(
            self.cluster, self.checker, bound=SLEEPER_TICKS_MAX * MICROS_PER_TICK
        )

    def init_isr(self) -> Settings:
        """ISR mode's settings and cluster: the quorum settings drawn as in quorum mode,
        then ISR mode's own from a generator of their own; no check-quorum (ISR mode has no
        lease), min.insync.replicas anything from 1 to the replication factor, and no bit
        flips (a damaged log set aside loses acknowledged records when it held the last
        copy, which ISR mode with a small ISR allows: no fault model of a safe run)."""
        drawn = Settings.draw(self.rng, self.replicas)
        self.isr_rng = random.Random(self.rng.getrandbits(64))
        isr = IsrSettings.draw(self.isr_rng, self.replicas, MICROS_PER_TICK)
        isr = dataclasses.replace(isr, unclean=draw_unclean(self.seed))
        self.isr_settings = isr
        self.settings = settings = dataclasses.replace(
            drawn, check_quorum=False, min_insync_replicas=isr.min_insync
        )
        if isr.unclean:
            self.unclean_rng = random.Random(f"unclean reads {self.seed}")
            self.settings = settings = dataclasses.replace(
                settings, delete_rate=0.0, retention_rate=0.0, retention_bytes=None
            )
        self.retention_bytes = settings.retention_bytes

        def config(node: NodeId, members: tuple[NodeId, ...]) -> ReplicaConfig:
            return dataclasses.replace(
                settings.replica_config(node, members),
                replication=Replication.ISR,
                replica_lag_time_max_ms=isr.replica_lag_time_max_ms,
            )

        self.cluster = self.new_cluster(config)
        self.faults = Faults.draw(self.rng, settings, disk=self.disk, ticks=self.ticks)
        self.faults.corruption_rate = 0.0
        return settings

    def start_controller(self) -> None:
        self.note(f"ISR settings {self.isr_settings}")
        self.workload.client_hwm_check = True
        self.cluster.on_advance.append(self.check)
        controller = SimController(self.cluster, self.isr_settings, self.isr_rng)
        self.controller = controller
        self.isr_checks = IsrChecks(self.cluster, controller, self.checker)
        self.workload.on_acked.append(self.isr_checks.on_acked)
        if not self.disk:
            self.allow_isr_wipes(self.isr_checks)
        if self.isr_settings.unclean:
            self.isr_checks.on_cut.append(self.workload.on_cut)
            self.isr_checks.on_cut.append(self.producer_state.on_cut)
            self.workload.on_lost.append(self.producer_state.on_lost)
            if self.workload.odd is not None:
                self.isr_checks.on_cut.append(self.workload.odd.on_cut)

    def allow_isr_wipes(self, checks: IsrChecks) -> None:
        """ISR mode in memory: a restart may come back with an empty log, as in quorum
        mode, while another ISR/ELR member holds the acknowledged records (rule 9)."""
        self.faults.wipe_rng = random.Random(f"isr wipe {self.seed}")
        self.cluster.wipe_allowed = checks.wipe_allowed
        self.cluster.on_wipe.append(checks.on_wipe)
        self.cluster.on_wipe.append(self.on_wipe)

    def new_cluster(
        self,
        config: Callable[[NodeId, tuple[NodeId, ...]], ReplicaConfig],
        settings: Settings | None = None,
    ) -> Cluster:
        """The seed's cluster; with `--quiesce` its nodes keep node liveness, over their
        own clocks from the start (`settings.clocks`)."""
        liveness = self.quiesce and settings is not None
        cluster = Cluster(
            replicas=self.replicas,
            rng=self.rng,
            config=config,
            storage=self.storage,
            clocks=settings.clocks if liveness and settings is not None else (),
            liveness_timeout_ms=LIVENESS_TIMEOUT if liveness else None,
        )
        cluster.trace = self.trace
        return cluster

    def storage(self, node: NodeId, rng: random.Random) -> SimStorage:
        if self.disk:
            return SimDiskStorage(node, rng, wal_config(retention_bytes=self.retention_bytes))
        return SimMemoryStorage(self.retention_bytes, DirectoryId(node))

    def note(self, text: str) -> None:
        self.cluster.note(text)

    def step(self, faults: Faults | None) -> None:
        """One microtick: due deliveries, disk completions, clock ticks, clients, faults."""
        cluster = self.cluster
        cluster.now += 1
        now = cluster.now
        for node in cluster.resume_due():
            # A client's read may be served before the messages that queued during the
            # pause (the new epoch among them): the read lease must hold by the clock.
            self.workload.consume(node)
            cluster.release(node)
            self.check()
        due = sorted(
            (e for e in cluster.in_flight if e.deliver_at <= now),
            key=lambda e: (e.deliver_at, e.seq),
        )
        for envelope in due:
            cluster.deliver(envelope)
            self.check()
        for node, at in sorted(cluster.persist_due.items()):
            paused = cluster.is_paused(node)
            if at <= now and cluster.nodes[node].persisting is not None and not paused:
                cluster.finish_persist(node)
                self.check()
        for node in cluster.ids:
            if cluster.nodes[node].clock.ticks_at(now, MICROS_PER_TICK):
                cluster.tick(node)
                self.check()
                self.maybe_heartbeat(node)
        if self.controller is not None:
            self.controller.tick(faults=faults is not None)
            self.check()
            self.check_offline_cause()
        burst = self.settings.burst_ticks
        if burst and not self.producing:
            burst *= self.idle_factor  # `--quiesce`: idle stretches longer than bursts
        if burst and self.rng.random() < 1 / (burst * MICROS_PER_TICK):
            self.producing = not self.producing
        if self.producing and self.rng.random() < self.produce_rate:
            self.workload.produce()
            self.check()
        if self.rng.random() < self.settings.consume_rate:
            self.workload.consume()
        if self.unclean_rng is not None:
            self.read_told_followers(self.unclean_rng)
        if faults is not None:
            self.step_faults(faults)
        if self.mover is not None:
            self.mover.step(safety=faults is not None)
        if self.controller is None:  # its bound assumes elections among the replicas
            self.progress.check()
        if self.quiesced_leader is not None:
            self.quiesced_leader.check()
        if self.sleepers is not None:
            self.sleepers.check()
        if now % (PAIRS_EVERY_TICKS * MICROS_PER_TICK) == 0:
            self.compare_committed()
            if self.isr_checks is not None:
                self.isr_checks.check_batches()

    def read_told_followers(self, rng: random.Random) -> None:
        """ISR mode with unclean elections: a consumer reads now and then from a replica
        told of the last one whose HWM was not checked since (rule 10: it serves nothing
        then, or only what the new leader's log holds). Drawn from the seed's unclean
        generator, so a seed without unclean elections runs as before."""
        for node, epoch in sorted(self.checker.suspects.items()):
            replica = self.cluster.nodes[node].replica
            record = None if replica is None or replica.isr is None else replica.isr.record
            known = None if record is None else record.unclean_epoch
            if known is not None and known >= epoch and rng.random() < TOLD_READ_RATE:
                self.workload.consume(node)

    def check_offline_cause(self) -> None:
        """ISR mode: the ISR and the ELR are both empty only once a replica has started
        again (rule 9: a restart after an unclean stop leaves them; a first registration
        changes nothing, and a fenced node goes to the ELR)."""
        controller = self.controller
        if controller is None or not controller.available:
            return
        record = controller.record
        if record.isr or record.elr:
            return
        if all(sim_node.incarnation <= 1 for sim_node in self.cluster.nodes.values()):
            self.checker.fail(
                f"the ISR and the ELR are empty (record epoch {record.leader_epoch}) and no "
                "replica ever started again"
            )

    def maybe_heartbeat(self, node: NodeId) -> None:
        """ISR mode: a node heartbeats to the controller every HEARTBEAT_TICKS of its clock.
        `--quiesce`: it pings the other nodes every heartbeat interval of its clock, and
        declares dead those it has not heard for a timeout at every tick (node liveness)."""
        tick = self.cluster.clock_ms(node) // MICROS_PER_TICK
        if self.controller is not None and tick % HEARTBEAT_TICKS == 0:
            self.controller.heartbeat(node)
        if self.quiesce:
            if tick % self.cluster.nodes[node].config.heartbeat_ticks == 0:
                self.cluster.ping(node)
            if self.cluster.expire(node):
                self.check()

    def step_faults(self, faults: Faults) -> None:
        """The safety phase's extras: DeleteRecords, retention, faults."""
        settings = self.settings
        if self.rng.random() < settings.delete_rate:
            self.workload.delete_records(
                settings.delete_at_hwm_share, settings.delete_past_hwm_share
            )
            self.check()
        if settings.retention_rate and self.rng.random() < settings.retention_rate:
            self.retain(self.rng.choice(self.cluster.ids))
            self.check()
        faults.maybe_inject(self.cluster, self.rng)
        self.check()
        controller = self.controller
        if controller is not None:
            roll = controller.rng.random()
            if roll < faults.partition_rate * CONTROLLER_CUT_SHARE:
                controller.cut_link()
            elif roll < faults.partition_rate * CONTROLLER_CUT_SHARE + faults.heal_rate:
                controller.heal()

    def wipe_allowed(self, node: NodeId) -> bool:
        """A disk replaced stays inside the fault model: a quorum of the other voters, up,
        hold the whole committed history (HWM and durable log at its end at least). A
        node on an empty disk is no voter until its leader has replaced its old key by its
        new one (core/membership.py), so only settled voters count (`settled_voter`), and
        none while a voter set knows a copy by node alone (it would vote on). Without
        pre-vote, a spare voter too: when every voter left must elect, candidates whose
        logs cannot win raise the epoch under the one that can, round after round."""
        if any(k.directory == NO_DIRECTORY for r in self.live().values() for k in r.voters):
            return False
        voters = [
            other for other in self.cluster.ids if other != node and self.settled_voter(other)
        ]
        if len(voters) == self.settings.quorum_size and not self.settings.pre_vote:
            return False
        end = self.checker.committed_end
        holders = [
            other
            for other, replica in self.live().items()
            if other != node
            and self.settled_voter(other)
            and min(replica.hwm, replica.log.durable_end_offset) >= end
        ]
        return len(holders) >= self.settings.quorum_size

    def settled_voter(self, node: NodeId) -> bool:
        """Whether `node`'s copy (its node and its storage's directory) is a voter in the
        voter set of every live replica's log (a change under way settles neither way)."""
        key = self.cluster.nodes[node].storage.load().directory_id
        return all(
            replica.voters.voter_key(node, key) is not None for replica in self.live().values()
        )

    def on_wipe(self, node: NodeId) -> None:
        self.checker.on_wipe(node, self.live())

    def retain(self, node: NodeId) -> None:
        """Retention on one node: its storage deletes below the saved HWM, then the
        replica learns where its log starts (as the broker's partition runner does)."""
        storage = self.cluster.nodes[node].storage

        def retain(replica: Replica) -> None:
            start = storage.retain(replica.producer_snapshot)
            if start is not None:
                self.note(f"retention on {node}: log start {start}")
                replica.note_log_start(start)

        self.cluster.input(node, retain)

    def check(self) -> None:
        """The checker's invariants and the check-quorum monitor, over every live node.
        A log the checker finds damaged as it reads is repaired (see `Cluster`)."""
        if self.isr_checks is not None:
            self.isr_checks.check_unclean_leader()
        for node, sim_node in self.cluster.nodes.items():
            replica = sim_node.replica
            if replica is None:
                continue
            try:
                self.checker.check_replica(
                    node,
                    replica,
                    sim_node.incarnation,
                    durable_hwm_at_start=sim_node.hwm_before_start,
                    repaired=sim_node.repaired,
                )
            except StorageError as error:
                self.repair_damaged(error)
                continue
            if self.quorum is not None:
                self.quorum.check(node, replica)
            if self.own_epoch is not None:
                self.own_epoch.check(node, replica)
            if self.membership is not None:
                self.membership.check(node, replica)
            if self.acks is not None and self.votes is not None:
                self.acks.check(node, replica)
                self.votes.check(node, replica)
            if self.wakes is not None:
                self.wakes.observe(node, replica)
            if self.trace is not None:
                self.trace_state(node, replica)
        self.checker.check_matches(self.live())
        self.checker.verify_acks()
        if self.isr_checks is not None:
            self.isr_checks.check_ends()
            self.isr_checks.check_told_matches()

    def repair_damaged(self, error: StorageError) -> None:
        """A read found a damaged log: its node repairs (a StorageError with no log
        marked for repair is a bug)."""
        if not self.cluster.repair_damaged_nodes():
            raise error

    def compare_committed(self) -> None:
        try:
            self.checker.compare_committed(self.live())
        except StorageError as error:
            self.repair_damaged(error)

    def trace_state(self, node: NodeId, replica: Replica) -> None:
        """Trace a node's role, epoch and offsets whenever they change."""
        log = replica.log
        state = (
            f"node {node}: {replica.role.value} e{replica.epoch} hwm={replica.hwm} "
            f"start={log.log_start_offset} end={log.log_end_offset} "
            f"durable={log.durable_end_offset}" + (" quiesced" if replica.quiesced else "")
        )
        if self.states.get(node) != state:
            self.states[node] = state
            self.note(state)

    def run(self) -> SeedResult:
        try:
            self.run_phases()
        except AssertionError as error:
            self.checker.fail(f"assertion failed at t={self.cluster.now}: {error}")
        except TidelogError as error:  # e.g. a log that needs repair: never expected here
            self.checker.fail(f"{type(error).__name__} at t={self.cluster.now}: {error}")
        except OSError as error:  # a disk error that escaped the fail-stop: a bug
            self.checker.fail(f"unexpected {error!r} at t={self.cluster.now}")
        for violation in self.checker.violations:
            self.note(f"VIOLATION {violation}")
        stops = Counter(self.cluster.stops)
        if self.faults.flips:
            stops["bit flips"] = self.faults.flips
        if self.faults.wipes:
            stops["wipes"] = self.faults.wipes
        stops.update(self.quiesce_counts())
        return SeedResult(self.checker.violations, dict(stops))

    def quiesce_counts(self) -> dict[str, int]:
        """`--quiesce`: how often leaders quiesced and woke (slowly), how many quiesced
        partitions lost their leader's node, how many of those elected a new leader, and
        the microticks they took from a group that could (in all, and the longest)."""
        wakes, monitor = self.wakes, self.quiesced_leader
        if wakes is None or monitor is None:
            return {}
        return {
            "quiesces": wakes.quiesces,
            "wakes": wakes.wakes,
            "slow wakes": wakes.slow,
            "stranded": monitor.episodes,
            "re-elected": monitor.elections,
            "stranded waited": monitor.waited,
            LONGEST: monitor.longest,
            LONGEST_CAMPAIGN: monitor.longest_campaign,
        }

    def run_phases(self) -> None:
        for _ in range(self.ticks * MICROS_PER_TICK):
            self.step(self.faults)
            if self.checker.violations:
                return
        self.heal_all()
        self.run_liveness()

    def heal_all(self) -> None:
        """Heal the network (no partitions, drops, duplicates, late or reordered
        messages) and the disks (no failure armed), and restart every node."""
        cluster = self.cluster
        self.note("heal everything")
        cluster.heal()
        cluster.drop_rate = 0.0
        cluster.duplicate_rate = 0.0
        cluster.long_delay_rate = 0.0
        cluster.replay_rate = 0.0
        cluster.in_order = True
        heal_disks(cluster)
        if self.wakes is not None:
            self.wakes.stop()
        if self.controller is not None:
            self.controller.heal(for_good=True)
        for node in cluster.ids:
            cluster.restart(node)

    def run_liveness(self) -> None:
        """Within LIVENESS_TICKS_MAX a leader, a committed acks=all write, convergence."""
        acked_before = self.workload.acked_all
        deadline = self.cluster.now + LIVENESS_TICKS_MAX * MICROS_PER_TICK
        self.produce_rate = 0.0
        next_produce = self.cluster.now
        while self.cluster.now < deadline:
            if self.cluster.now >= next_produce and self.workload.acked_all == acked_before:
                self.workload.produce(ACKS_ALL)
                next_produce = self.cluster.now + 5 * MICROS_PER_TICK
            self.step(None)
            if self.checker.violations:
                return
            # Comparing whole logs is dear: once a tick is enough.
            ticked = self.cluster.now % MICROS_PER_TICK == 0
            if ticked and self.workload.acked_all > acked_before and self.converged() is None:
                self.check_final()
                return
            if ticked and self.offline_for_good():
                return
        reason = self.converged() or "no acks=all write committed"
        self.checker.fail(f"liveness: not converged after {LIVENESS_TICKS_MAX} ticks: {reason}")

    def offline_for_good(self) -> bool:
        """ISR mode: the committed ISR and ELR are empty (every replica that held the
        acknowledged records restarted): with unclean election off nobody may lead again
        (docs/isr.md, isr-06). Counted, not a violation; no acks=all write may commit."""
        controller = self.controller
        if controller is None or not controller.available or controller.settings.unclean:
            return False  # with unclean election on, any live node may lead again
        record = controller.record
        if record.isr or record.elr or record.leader != NO_LEADER:
            return False
        self.note("offline for good: no ISR, no ELR, unclean election off")
        self.cluster.stops["offline"] += 1
        return True

    def check_final(self) -> None:
        try:
            self.checker.check_final(self.live())
        except StorageError as error:
            self.repair_damaged(error)

    def live(self) -> dict[NodeId, Replica]:
        return dict(self.cluster.live_replicas())

    def converged(self) -> str | None:
        replicas = self.live()
        if not any(r.role is Role.LEADER for r in replicas.values()):
            return "no leader"
        try:
            reason = self.checker.check_converged(replicas)
        except StorageError as error:
            self.repair_damaged(error)
            return "a log was found damaged"
        if reason is not None:
            return reason
        return voters_settled(replicas) if self.mover is None else self.mover.settled(replicas)


def voters_settled(replicas: dict[NodeId, Replica]) -> str | None:
    """Why the leader's voter set does not yet name every replica's copy (a lost copy not
    replaced yet), or a change of it is not committed; None once it does and is."""
    leader = max((r for r in replicas.values() if r.role is Role.LEADER), key=lambda r: r.epoch)
    for node, replica in sorted(replicas.items()):
        if leader.voters.voter_key(node, replica.key.directory) is None:
            return f"node {node}'s copy {replica.key} is no voter of leader {leader.id}"
    if leader.log.voters.uncommitted(leader.hwm):
        return f"leader {leader.id}'s last voter change is not committed"
    return None


class Mode(NamedTuple):
    """What every seed of a sweep runs with."""

    replicas: int
    ticks: int
    disk: bool = False
    classic: bool = False
    isr: bool = False
    naming: bool = False
    moves: bool = False
    quiesce: bool = False


def run_seed(seed: int, mode: Mode, trace: bool = False) -> SeedResult:
    run = Run(
        seed,
        mode.replicas,
        mode.ticks,
        mode.disk,
        print if trace else None,
        mode.classic,
        isr=mode.isr,
        naming=mode.naming,
        moves=mode.moves,
        quiesce=mode.quiesce,
    )
    return run.run()


def reproduce_command(seed: int, mode: Mode) -> str:
    return (
        f"python -m tidelog.testing.sim --seeds 1 --first-seed {seed} "
        f"--replicas {mode.replicas} --ticks {mode.ticks}"
        + (" --disk" if mode.disk else "")
        + (" --faults classic" if mode.classic else "")
        + (" --mode isr" if mode.isr else "")
        + (" --naming" if mode.naming else "")
        + (" --moves" if mode.moves else "")
        + (" --quiesce" if mode.quiesce else "")
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tidelog.testing.sim", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--first-seed", type=int, default=1, help="the first seed")
    parser.add_argument("--replicas", type=int, choices=(3, 4, 5), default=3)
    parser.add_argument("--ticks", type=int, default=400, help="ticks of the safety phase")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--disk",
        action="store_true",
        help="keep each log in the real disk log on a fault-injecting file system",
    )
    parser.add_argument(
        "--faults",
        choices=("full", "classic"),
        default="full",
        help="the fault model; classic replays seeds found before scenarios 19-22",
    )
    parser.add_argument(
        "--mode",
        choices=("quorum", "isr"),
        default="quorum",
        help="how the partition commits: a majority quorum, or Kafka's ISR with a controller",
    )
    parser.add_argument(
        "--naming",
        action="store_true",
        help="quorum mode: the first voter set names no directory and leaders name them "
        "(as a broker's metadata log does); else it names every directory from the start",
    )
    parser.add_argument(
        "--moves",
        action="store_true",
        help="quorum mode: a controller changes the replica set under the faults "
        "(reassignments, cancels, replication factors; testing/moves.py)",
    )
    parser.add_argument(
        "--quiesce",
        action="store_true",
        help="quorum mode: idle partitions quiesce over node liveness (core/quiesce.py), "
        "with slow wake-ups among the faults and a bound on re-electing a dead leader's",
    )
    parser.add_argument(
        "--trace", action="store_true", help="print every event of the seed (with --seeds 1)"
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.ticks < 1 or args.jobs < 1:
        parser.error("--seeds, --ticks and --jobs must be positive")
    if args.mode == "isr" and args.faults == "classic":
        parser.error("--faults classic replays quorum-mode seeds: not with --mode isr")
    if args.naming and (args.mode == "isr" or args.faults == "classic"):
        parser.error("--naming is of quorum mode's full fault model")
    if args.moves and (args.mode == "isr" or args.faults == "classic"):
        parser.error("--moves is of quorum mode's full fault model")
    if args.quiesce and (args.mode == "isr" or args.faults == "classic"):
        parser.error("--quiesce is of quorum mode's full fault model")
    if args.quiesce and (args.naming or args.moves):
        parser.error("--quiesce runs with the first voter set named, and no moves")
    if args.trace and args.seeds != 1:
        parser.error("--trace prints the events of one seed: use it with --seeds 1")
    return args


# `--quiesce`: a seed's longest wait for a dead leader's successor, and for a candidate.
LONGEST = "stranded longest"
LONGEST_CAMPAIGN = "stranded longest campaign"
MAXIMA = (LONGEST, LONGEST_CAMPAIGN)
# How the summary names the fail-stops (Cluster.stops), the bit flips and the wipes.
STOP_LABELS = {
    "EIO": "nodes stopped by a failed fsync (EIO)",
    "ENOSPC": "by a full disk (ENOSPC)",
    "bit flips": "bits flipped in committed batches",
    "repair": "repairs (a damaged batch set aside, the replica restarted)",
    "wipes": "restarts with an empty log",
}
# ISR mode's too: partitions left offline for good (no ISR, no ELR; unclean election off).
# With unclean election on: the elections, and the acknowledged writes they lost.
ISR_STOP_LABELS = {
    **STOP_LABELS,
    "offline": "offline for good",
    "unclean": "unclean elections",
    "lost": "acknowledged writes lost to them",
}


def quiesce_summary(stops: Counter[str]) -> str:
    """`--quiesce`: the quiesces and wakes, and the quiesced partitions whose leader went
    down: how many, how many a new leader ended, and how long a group that could elect
    waited for one (microticks; the bound is QUIESCED_LEADER_TICKS_MAX ticks)."""
    stranded = stops["stranded"]
    mean = stops["stranded waited"] / stranded if stranded else 0.0
    return (
        f"# leaders quiesced: {stops['quiesces']}, woken: {stops['wakes']} "
        f"({stops['slow wakes']} slowly); quiesced under a leader gone down: {stranded} "
        f"({stops['re-elected']} led again in a later epoch), waited {mean:.0f} microticks "
        f"on average for a leader, {stops[LONGEST]} at most (bound "
        f"{QUIESCED_LEADER_TICKS_MAX * MICROS_PER_TICK}), {stops[LONGEST_CAMPAIGN]} at most "
        f"for a candidate (bound {QUIESCED_CAMPAIGN_TICKS_MAX * MICROS_PER_TICK})"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    started = time.monotonic()
    violations = 0
    stops: Counter[str] = Counter()
    mode = Mode(
        args.replicas,
        args.ticks,
        args.disk,
        args.faults == "classic",
        args.mode == "isr",
        args.naming,
        args.moves,
        args.quiesce,
    )
    modes, traces = [mode] * len(seeds), [args.trace] * len(seeds)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        parallel = args.jobs > 1 and not args.trace
        results = (
            pool.map(run_seed, seeds, modes, traces)
            if parallel
            else map(run_seed, seeds, modes, traces)
        )
        for seed, result in zip(seeds, results, strict=True):
            longest = {key: max(stops[key], result.stops.get(key, 0)) for key in MAXIMA}
            stops.update(result.stops)
            for key, value in longest.items():
                stops[key] = value  # the longest of all, not their sum
            if result.violations:
                violations += len(result.violations)
                command = reproduce_command(seed, mode)
                print(f"seed {seed}: {result.violations[0]}  (reproduce: {command})")
    elapsed = time.monotonic() - started
    print(f"# {args.seeds / elapsed * 60:.0f} seeds per minute ({elapsed:.1f} s)", file=sys.stderr)
    labels = ISR_STOP_LABELS if mode.isr else STOP_LABELS
    if any(stops[key] for key in labels):
        print("# " + ", ".join(f"{label}: {stops[key]}" for key, label in labels.items()))
    if mode.quiesce:
        print(quiesce_summary(stops))
    print(f"{args.seeds} seeds, {violations} violations")
    return 0 if violations == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
