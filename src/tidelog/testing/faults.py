"""What one seed draws: the replicas' settings, the clocks, the network, and the faults.

Rules of this file:
- Everything is drawn from the seed's `random.Random`, in a fixed order: one seed, one run.
- Two fault models. `full` (the default) draws everything below. `classic` is the model
  the simulator had before scenarios 19-22 (fixed settings, no clock drift, no long or
  late messages, retention, outages, calm windows, disk faults or leadership transfers),
  drawn in its order,
  so a seed found with it (bug C's 3000308) replays exactly.
- Faults are placed so that a failure means a bug (TigerBeetle): a quorum's durable copy
  of every committed batch survives. Crashes lose only what was not synced; bits flip only
  in committed batches of at most replicas - quorum_size nodes (each then repairs once its
  log finds the damage). In REFLIP_SHARE of the disk seeds (a generator of their own,
  `reflip_rng`; the other seeds run as before) bits also flip in pairs, among the same
  nodes: one in a follower, which a read finds at once, and, while that node repairs
  (its damage set aside, its log not yet as far as before) and a leader that knows so
  counts a match for it again, a second one, found at once too: the node sets damage
  aside again, below that match, while still repairing (scenario 16, repaired twice). A
  failed fsync or a full disk stops the node, which loses what it had not synced, as a
  crash does. Some seeds keep a minority (all but a quorum) down for a long stretch (an
  outage): the others must make progress alone. In memory, a restart may come back with
  an empty log (WIPE_SHARE, a generator of its own; its vote kept), in quorum mode only
  while a quorum of the other nodes, up, hold the committed history durably
  (`Cluster.wipe`): it must catch up from nothing (scenario 26); in ISR mode while
  another member of the committed ISR and ELR holds every acknowledged record
  (isr_sim.py).
- The safety phase is cut into windows of WINDOW_TICKS; a window is calm (no new crash,
  partition, heal, restart, pause or disk fault: what is down or cut stays so; clients
  carry on, DeleteRecords too) with the seed's `calm_share`. A calm window outlasts
  the progress bound, so a replication that stalls for good (a stuck follower, scenario 20)
  shows there, not only after the heal.
- Clocks: each node's clock has its own offset and runs at its own rate, within
  ±CLOCK_DRIFT_PPM of real time. The bound the core promises: a leader's read lease lasts
  (E - M) ticks of its own clock from the moment it sent the request a voter answered (E =
  election_ticks, M = LEASE_MARGIN_TICKS), while the voter refuses votes until its own E-th
  tick after receiving it, which may come as early as (E - 1) ticks of its clock later (its
  first tick may fall right after the receipt). The lease is sound while (E - M) /
  rate_leader <= (E - 1) / rate_voter, i.e. rate_max / rate_min <= (E - 1) / (E - M): 9/8
  with E = 10 and M = 2, so every rate within 1 ± 1/17 (±5.9 %). The drift drawn, ±5 %,
  stays inside it (1.05 / 0.95 = 1.105 < 1.125).
- Quiescence (`sim --quiesce`, core/quiesce.py), drawn from a generator of its own
  (`QuiesceSettings.draw`): every replica quiesces its idle partition, over node liveness
  that times out after an election timeout; the writes come in bursts with idle stretches
  between them (so partitions sleep often) and every fault above plays on, while they
  sleep too. A share of the wake-ups is slow (`Wakes`): what a leader sends within a tick
  of waking is lost, or delayed up to three election timeouts, message by message.
  Node liveness leans on the clocks as the lease does: a follower's node declares its
  leader's dead an election timeout of its own clock after the last ping it took, while
  the leader's lease from that ping lasts (E - M) ticks of its clock: the same bound.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Final

from tidelog.core.messages import AppendRequest
from tidelog.core.replica import Replica, ReplicaConfig, Role
from tidelog.testing.cluster import (
    LOSE,
    PPM,
    READ_ALL_BYTES,
    Cluster,
    NodeClock,
    SimStorage,
    Wire,
)
from tidelog.testing.disk import SimDiskStorage
from tidelog.types import NodeId, Offset

MICROS_PER_TICK = 10
ELECTION_TICKS = 10
CLOCK_DRIFT_PPM = 50_000
CLOCK_OFFSET_MAX = 1_000_000
PAUSE_TICKS_MIN = 5
PAUSE_TICKS_MAX = 40
# A long delay outlasts an election timeout: from just over one to three.
LONG_DELAY_RANGE = ((ELECTION_TICKS + 1) * MICROS_PER_TICK, 3 * ELECTION_TICKS * MICROS_PER_TICK)
WINDOW_TICKS = 200
OUTAGE_SHARE = 0.3  # of the seeds, how many keep a minority down for a while
OUTAGE_TICKS = (100, 300)
CLASSIC_APPEND_BYTES_MAX = 2048
# Retention keeps about this much of each log (memory: batches; disk: 2 KiB segments).
RETENTION_BYTES_CHOICES = (None, 2048, 8192)
WIPE_SHARE = 0.2  # of the restarts, how many come back with an empty log (when allowed)
REFLIP_SHARE: Final = 0.5
"""Of the disk seeds, how many flip a bit again in a node that repairs."""
FIRST_FLIP_RATE: Final = 0.003
"""In those seeds, per microtick of a stormy window, the chance of a first flip (no node
repairs)."""
REFLIP_RATE: Final = 0.05
"""In those seeds, per microtick of a stormy window, the chance of a second flip while a
node repairs and a leader that knows it counts a match for it again."""
# Quiescence (`sim --quiesce`): node liveness times out after an election timeout; the
# writes come in bursts this long on average (in ticks), with idle stretches as long.
LIVENESS_TIMEOUT: Final = ELECTION_TICKS * MICROS_PER_TICK
QUIESCE_BURST_TICKS: Final = (15, 30, 60)
SLOW_WAKE_SHARES: Final = (0.0, 0.3, 0.7)
SLOW_WAKE_WINDOW: Final = 3 * MICROS_PER_TICK  # its first two heartbeats
SLOW_WAKE_DELAY: Final = (ELECTION_TICKS * MICROS_PER_TICK // 2, 3 * LIVENESS_TIMEOUT)
SLEEPER_RATES: Final = (0.002, 0.005, 0.01)  # per microtick of a stormy window
SLEEPER_FAULTS: Final = ("crash", "pause", "isolate", "deaf", "mute", "transfer")
SLEEPER_FAULT_WEIGHTS: Final = (3, 3, 1, 1, 1, 3)
# A quiesced leader's node stalls longer than a pause of `Faults.draw`'s: long enough for
# the others to elect a leader that commits while it sleeps on (its lease must not hold).
SLEEPER_PAUSE_TICKS: Final = (20, 60)
SLEEPER_DOWN_TICKS: Final = (80, 200)  # a quiesced leader's node that crashes stays down
LOST_QUIESCE_SHARES: Final = (0.0, 0.1, 0.3)


def log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


@dataclass(frozen=True, slots=True)
class Settings:
    """What a seed draws before it starts."""

    replicas: int
    min_insync_replicas: int | None  # None: a majority
    pre_vote: bool
    check_quorum: bool
    append_bytes_max: int  # 1: one batch per append (a new leader's batch travels alone)
    clocks: tuple[NodeClock, ...]
    drop_rate: float
    duplicate_rate: float
    delay_max: int
    long_delay_rate: float
    replay_rate: float
    persist_delay_max: int
    retention_bytes: int | None
    produce_rate: float
    burst_ticks: int | None  # None: steady writes; else on and off by turns, this long on average
    consume_rate: float
    delete_rate: float
    # DeleteRecords asks for the HWM itself this often, past it this often, else below it.
    delete_at_hwm_share: float
    delete_past_hwm_share: float
    retention_rate: float

    def for_offsets_log(self) -> Settings:
        """The same seed for a `__consumer_offsets` partition: only its coordinators write
        it, nothing deletes from it (no retention, no DeleteRecords), and check-quorum is on,
        as on every broker: OffsetFetch names no leader epoch, so only the read lease keeps
        a deposed coordinator from answering offsets a newer one has moved."""
        return dataclasses.replace(
            self,
            check_quorum=True,
            retention_bytes=None,
            produce_rate=0.0,
            delete_rate=0.0,
            retention_rate=0.0,
        )

    @classmethod
    def draw(cls, rng: random.Random, replicas: int) -> Settings:
        above_majority = replicas // 2 + 2  # 3 of 3, 4 of 5
        return cls(
            replicas=replicas,
            min_insync_replicas=rng.choice((None, None, above_majority)),
            pre_vote=rng.random() < 0.75,
            check_quorum=rng.random() < 0.75,
            append_bytes_max=rng.choice((2048, 2048, 1)),
            clocks=tuple(
                NodeClock(
                    offset=rng.randrange(CLOCK_OFFSET_MAX),
                    rate_ppm=rng.randint(PPM - CLOCK_DRIFT_PPM, PPM + CLOCK_DRIFT_PPM),
                )
                for _ in range(replicas)
            ),
            drop_rate=rng.choice((0.0, 0.01, 0.05, 0.1)),
            duplicate_rate=rng.choice((0.0, 0.01, 0.05)),
            delay_max=rng.choice((3, 8, 20, 40)),
            long_delay_rate=rng.choice((0.0, 0.005, 0.02)),
            replay_rate=rng.choice((0.0, 0.005, 0.02)),
            persist_delay_max=rng.choice((1, 5, 15, 40)),
            retention_bytes=rng.choice(RETENTION_BYTES_CHOICES),
            produce_rate=rng.uniform(0.02, 0.2),
            burst_ticks=rng.choice((None, 20, 60)),
            consume_rate=rng.uniform(0.02, 0.2),
            delete_rate=rng.choice((0.001, 0.004, 0.01, 0.02)),
            delete_at_hwm_share=0.5,
            delete_past_hwm_share=0.1,
            retention_rate=rng.choice((0.001, 0.005)),
        )

    @classmethod
    def draw_classic(cls, rng: random.Random, replicas: int) -> Settings:
        """The classic model's settings, drawn in its order (after the cluster drew its
        nodes' generators): each node ticks at its own phase of real time."""
        phases = [rng.randrange(MICROS_PER_TICK) for _ in range(replicas)]
        return cls(
            replicas=replicas,
            min_insync_replicas=None,
            pre_vote=True,
            check_quorum=True,
            append_bytes_max=CLASSIC_APPEND_BYTES_MAX,
            clocks=tuple(NodeClock(offset=-phase % MICROS_PER_TICK) for phase in phases),
            drop_rate=rng.choice((0.0, 0.01, 0.05, 0.1)),
            duplicate_rate=rng.choice((0.0, 0.01, 0.05)),
            delay_max=rng.choice((3, 8, 20, 40)),
            long_delay_rate=0.0,
            replay_rate=0.0,
            persist_delay_max=rng.choice((1, 5, 15, 40)),
            retention_bytes=None,
            produce_rate=rng.uniform(0.02, 0.2),
            burst_ticks=None,
            consume_rate=rng.uniform(0.02, 0.2),
            delete_rate=rng.choice((0.0, 0.001, 0.004)),
            delete_at_hwm_share=0.0,
            delete_past_hwm_share=0.0,
            retention_rate=0.0,
        )

    def replica_config(self, node: NodeId, members: tuple[NodeId, ...]) -> ReplicaConfig:
        return replica_config(
            node,
            members,
            min_insync_replicas=self.min_insync_replicas,
            pre_vote=self.pre_vote,
            check_quorum=self.check_quorum,
            append_bytes_max=self.append_bytes_max,
        )

    @property
    def quorum_size(self) -> int:
        majority = self.replicas // 2 + 1
        return max(majority, self.min_insync_replicas or majority)

    def apply_network(self, cluster: Cluster) -> None:
        cluster.drop_rate = self.drop_rate
        cluster.duplicate_rate = self.duplicate_rate
        cluster.delay_range = (1, self.delay_max)
        cluster.long_delay_rate = self.long_delay_rate
        cluster.replay_rate = self.replay_rate
        cluster.long_delay_range = LONG_DELAY_RANGE
        cluster.persist_delay_range = (1, self.persist_delay_max)


def replica_config(
    node: NodeId,
    members: tuple[NodeId, ...],
    *,
    min_insync_replicas: int | None = None,
    pre_vote: bool = True,
    check_quorum: bool = True,
    append_bytes_max: int = CLASSIC_APPEND_BYTES_MAX,
) -> ReplicaConfig:
    """A simulated replica's settings (the defaults are the classic model's)."""
    return ReplicaConfig(
        node,
        members,
        election_ticks=ELECTION_TICKS,
        heartbeat_ticks=2,
        min_insync_replicas=min_insync_replicas,
        inflight_appends_max=4,
        tick_ms=MICROS_PER_TICK,
        append_bytes_max=append_bytes_max,
        produce_timeout_ticks=40,
        pre_vote=pre_vote,
        check_quorum=check_quorum,
    )


@dataclass
class Faults:
    """The fault schedule of one seed: a rate per microtick for each kind of fault."""

    crash_rate: float
    partition_rate: float
    heal_rate: float
    restart_rate: float
    pause_rate: float
    sync_error_rate: float  # disk only: the next fsync fails (EIO)
    full_disk_rate: float  # disk only: the next write fails (ENOSPC)
    corruption_rate: float  # disk only: a bit flips in a committed batch
    transfer_rate: float  # a leader is asked to hand its leadership to a replica (rule 10)
    corruptible: int  # how many nodes may ever hold a flipped bit
    outage: tuple[NodeId, ...]  # a minority kept down over [outage_start, outage_end)
    outage_start: int
    outage_end: int
    calm_share: float
    calm: bool = False
    corrupted: set[NodeId] = field(default_factory=set)
    flips: int = 0
    # Restarts with an empty log (a copy lost), drawn from a generator of their own so
    # that a seed with none runs as it did before there were any; None: never.
    wipe_rng: random.Random | None = None
    wipes: int = 0
    # Second flips in a node that repairs, from a generator of their own (`reflip_rng`):
    # a seed without them draws as it did before there were any; None: never.
    reflip_rng: random.Random | None = None
    reflips: int = 0
    # `sim --quiesce`: faults aimed at a quiesced leader, from a generator of their own
    # (`hit_sleeper`); None: never.
    sleeper_rng: random.Random | None = None
    sleeper_rate: float = 0.0
    sleeper_hits: int = 0
    # Told of a transfer asked of a quiesced leader, before it is (`Wakes.lose_next_wake`).
    on_sleeper_transfer: Callable[[NodeId], None] | None = None
    held_down: dict[NodeId, int] = field(default_factory=dict)  # until when

    @classmethod
    def draw(cls, rng: random.Random, settings: Settings, *, disk: bool, ticks: int) -> Faults:
        disk_rate = rng.choice((0.0, 0.0002, 0.0005)) if disk else 0.0
        minority = settings.replicas - settings.quorum_size
        members = [NodeId(node) for node in range(1, settings.replicas + 1)]
        outage = tuple(rng.sample(members, minority)) if rng.random() < OUTAGE_SHARE else ()
        outage_start = rng.randrange(ticks // 2 + 1) * MICROS_PER_TICK
        outage_end = outage_start + rng.randint(*OUTAGE_TICKS) * MICROS_PER_TICK
        return cls(
            crash_rate=rng.uniform(0.0005, 0.004),
            partition_rate=rng.uniform(0.0005, 0.004),
            heal_rate=log_uniform(rng, 0.0005, 0.01),
            restart_rate=log_uniform(rng, 0.0003, 0.02),
            pause_rate=rng.uniform(0.0005, 0.003),
            sync_error_rate=disk_rate,
            full_disk_rate=disk_rate,
            corruption_rate=disk_rate,
            transfer_rate=rng.uniform(0.0005, 0.003),
            corruptible=minority,
            outage=outage,
            outage_start=outage_start,
            outage_end=outage_end,
            calm_share=rng.choice((0.25, 0.5, 0.75)),
        )

    @classmethod
    def draw_classic(cls, rng: random.Random) -> Faults:
        """The classic model's schedule: crashes, partitions, heals, restarts, pauses."""
        return cls(
            crash_rate=rng.uniform(0.0005, 0.004),
            partition_rate=rng.uniform(0.0005, 0.004),
            heal_rate=rng.uniform(0.002, 0.01),
            restart_rate=rng.uniform(0.002, 0.02),
            pause_rate=rng.uniform(0.0005, 0.003),
            sync_error_rate=0.0,
            full_disk_rate=0.0,
            corruption_rate=0.0,
            transfer_rate=0.0,
            corruptible=0,
            outage=(),
            outage_start=-1,
            outage_end=-1,
            calm_share=0.0,
        )

    def maybe_inject(self, cluster: Cluster, rng: random.Random) -> None:
        self.step_outage(cluster)
        if self.calm_share and cluster.now % (WINDOW_TICKS * MICROS_PER_TICK) == 1:
            self.calm = rng.random() < self.calm_share
            cluster.note("a calm window begins" if self.calm else "a stormy window begins")
        if self.calm:
            return
        self.maybe_flip_twice(cluster)
        self.maybe_hit_sleeper(cluster)
        roll = rng.random()
        for rate, inject in (
            (self.crash_rate, inject_crash),
            (self.partition_rate, inject_partition),
            (self.heal_rate, inject_heal),
            (self.restart_rate, self.inject_restart),
            (self.pause_rate, inject_pause),
            (self.sync_error_rate, inject_sync_error),
            (self.full_disk_rate, inject_full_disk),
            (self.corruption_rate, self.inject_corruption),
            (self.transfer_rate, inject_transfer),
        ):
            if roll < rate:
                inject(cluster, rng)
                return
            roll -= rate

    def maybe_hit_sleeper(self, cluster: Cluster) -> None:
        """`sim --quiesce`: now and then a fault hits a quiesced leader's node: it crashes,
        pauses, is cut off (both ways, or one), is asked to hand its leadership over, or
        (on disk, within the nodes bits may flip in) a bit flips in a committed batch of
        its log and a read finds it at once: its replica starts again to set it aside."""
        rng = self.sleeper_rng
        if rng is None or rng.random() >= self.sleeper_rate:
            return
        sleepers = [
            node
            for node, replica in cluster.live_replicas()
            if replica.role is Role.LEADER and replica.quiesced and not cluster.is_paused(node)
        ]
        if not sleepers:
            return
        node = rng.choice(sleepers)
        self.sleeper_hits += 1
        cluster.note(f"a fault hits {node}, a quiesced leader")
        flips = isinstance(cluster.nodes[node].storage, SimDiskStorage) and (
            node in self.flip_pool(cluster)
        )
        kinds = SLEEPER_FAULTS + (("flip",) if flips else ())
        kind = rng.choices(kinds, SLEEPER_FAULT_WEIGHTS + ((1,) if flips else ()))[0]
        if kind == "flip":
            self.flip_and_read(cluster, node, rng, again=False)
        elif kind == "crash":
            cluster.crash(node)  # and it stays down a while: the others must elect
            self.held_down[node] = cluster.now + rng.randint(*SLEEPER_DOWN_TICKS) * MICROS_PER_TICK
        elif kind == "pause":
            cluster.pause(node, rng.randint(*SLEEPER_PAUSE_TICKS) * MICROS_PER_TICK)
        elif kind == "isolate":
            cluster.isolate(node)
        elif kind == "deaf":
            cluster.isolate(node, outbound=False)  # it hears nobody; the others hear it
        elif kind == "mute":
            cluster.isolate(node, inbound=False)  # nobody hears it; it hears the others
        else:
            target = rng.choice([peer for peer in cluster.ids if peer != node])
            cluster.note(f"{node} hands its leadership to {target}")
            if self.on_sleeper_transfer is not None:
                self.on_sleeper_transfer(node)
            cluster.input(node, partial(transfer_to, target=target))

    def step_outage(self, cluster: Cluster) -> None:
        """Take the outage's nodes down at its start; bring them back at its end."""
        if cluster.now == self.outage_start and self.outage:
            cluster.note(f"outage of {', '.join(map(str, self.outage))} begins")
            for node in self.outage:
                cluster.crash(node)
        elif cluster.now == self.outage_end:
            for node in self.outage:
                cluster.restart(node)

    def inject_restart(self, cluster: Cluster, rng: random.Random) -> None:
        """Restart a node that is down (not one the outage keeps down, nor a quiesced
        leader's node a fault keeps down: `maybe_hit_sleeper`)."""
        held = self.outage if self.outage_start <= cluster.now < self.outage_end else ()
        held = (*held, *(n for n, until in self.held_down.items() if cluster.now < until))
        down = [n for n in cluster.ids if not cluster.nodes[n].alive and n not in held]
        if down:
            node = rng.choice(down)
            if (
                self.wipe_rng is not None
                and self.wipe_rng.random() < WIPE_SHARE
                and cluster.wipe(node)
            ):
                self.wipes += 1
            cluster.restart(node)

    def inject_corruption(self, cluster: Cluster, rng: random.Random) -> None:
        """Flip a bit in a committed batch of a node among at most `corruptible`."""
        pool = self.flip_pool(cluster)
        if not pool:
            return
        node = rng.choice(pool)
        storage = disk_of(cluster.nodes[node].storage)
        if storage.corrupt_committed_batch():
            self.corrupted.add(node)
            self.flips += 1
            cluster.note(f"flip a bit in a committed batch of {node}")

    def flip_pool(self, cluster: Cluster) -> list[NodeId]:
        """The nodes a bit may flip in: those flipped before once `corruptible` are."""
        return (
            sorted(self.corrupted) if len(self.corrupted) >= self.corruptible else list(cluster.ids)
        )

    def maybe_flip_twice(self, cluster: Cluster) -> None:
        """The seed's own pairs of flips (`reflip_rng`, see the rules of this file): while
        no node of the pool repairs, now and then flip a bit in a running follower of the
        pool; while one repairs and a leader counts a match for it again, flip one again
        in it."""
        rng = self.reflip_rng
        if rng is None:
            return
        repairing = [
            node
            for node in sorted(self.corrupted)
            if (replica := cluster.nodes[node].replica) is not None
            and replica.repair_floor is not None
        ]
        if repairing:
            counted = [node for node in repairing if counted_while_repairing(cluster, node)]
            if counted and rng.random() < REFLIP_RATE:
                self.flip_and_read(cluster, rng.choice(counted), rng, again=True)
        elif rng.random() < FIRST_FLIP_RATE:
            pool = [
                node
                for node in self.flip_pool(cluster)
                if (replica := cluster.nodes[node].replica) is not None
                and replica.role is not Role.LEADER
            ]
            if pool:
                self.flip_and_read(cluster, rng.choice(pool), rng, again=False)

    def flip_and_read(
        self, cluster: Cluster, node: NodeId, rng: random.Random, *, again: bool
    ) -> None:
        """Flip a bit in a committed batch of `node` (none yet: nothing), then read its
        committed batches at once, as a consumer's fetch would: the read finds the damage,
        and the node repairs (`Cluster.repair`; once between Readys when it is busy)."""
        if not disk_of(cluster.nodes[node].storage).corrupt_committed_batch(rng):
            return
        self.corrupted.add(node)
        self.flips += 1
        self.reflips += again
        cluster.note(f"flip a bit {'again ' if again else ''}in a committed batch of {node}")
        cluster.input(node, read_committed)


def counted_while_repairing(cluster: Cluster, node: NodeId) -> bool:
    """Whether a leader knows that `node` repairs and counts a match for it again (it
    heard so, forgot its match and took one since): the moment a second loss tests it."""
    return any(
        replica.role is Role.LEADER
        and (progress := replica.progress.get(node)) is not None
        and progress.repairing
        and progress.match_offset is not None
        for _, replica in cluster.live_replicas()
    )


def reflip_generator(seed: int) -> random.Random | None:
    """The generator of a disk seed's second flips (`Faults.reflip_rng`), or None for the
    seeds that have none (1 - REFLIP_SHARE of them)."""
    rng = random.Random(f"reflip {seed}")
    return rng if rng.random() < REFLIP_SHARE else None


def read_committed(replica: Replica) -> None:
    """Read a replica's committed batches, as a consumer would (a damaged one raises
    StorageError, and the cluster repairs the node)."""
    log = replica.log
    start, end = log.log_start_offset, min(replica.hwm, log.log_end_offset)
    if start < end:
        log.read(start, end_offset=Offset(end), max_bytes=READ_ALL_BYTES)


def heal_disks(cluster: Cluster) -> None:
    """Disarm every disk failure armed and not fired yet (the liveness phase's heal)."""
    for sim_node in cluster.nodes.values():
        if isinstance(sim_node.storage, SimDiskStorage):
            sim_node.storage.fs.heal()


def disk_of(storage: SimStorage) -> SimDiskStorage:
    assert isinstance(storage, SimDiskStorage), "disk faults need the disk log"
    return storage


def inject_crash(cluster: Cluster, rng: random.Random) -> None:
    # Half the crashes hit a node mid-sync: the moment unsynced state is lost.
    syncing = [node for node, n in cluster.nodes.items() if n.persisting is not None]
    pool = syncing if syncing and rng.random() < 0.5 else list(cluster.ids)
    cluster.crash(rng.choice(pool))


def inject_partition(cluster: Cluster, rng: random.Random) -> None:
    kind = rng.randrange(3)
    node = pick_leader_mostly(cluster, rng, 0.6)
    if kind == 0:
        cluster.isolate(node)
    elif kind == 1:
        cluster.isolate(node, inbound=rng.random() < 0.5, outbound=rng.random() < 0.5)
    else:
        shuffled = list(cluster.ids)
        rng.shuffle(shuffled)
        cut = rng.randrange(1, len(shuffled))
        cluster.partition(shuffled[:cut], shuffled[cut:])


def inject_heal(cluster: Cluster, rng: random.Random) -> None:
    del rng
    cluster.heal()


def inject_pause(cluster: Cluster, rng: random.Random) -> None:
    node = pick_leader_mostly(cluster, rng, 0.7)
    cluster.pause(node, rng.randint(PAUSE_TICKS_MIN, PAUSE_TICKS_MAX) * MICROS_PER_TICK)


def transfer_to(replica: Replica, target: NodeId) -> None:
    replica.transfer_leadership(target)  # refused when no longer leader: nothing to do


def inject_transfer(cluster: Cluster, rng: random.Random) -> None:
    """A leader is asked to hand its leadership to another replica (a controlled shutdown,
    a preferred-leader election): whatever the faults around it, no rule may break."""
    leaders = [node for node, replica in cluster.live_replicas() if replica.role is Role.LEADER]
    if not leaders:
        return
    node = rng.choice(leaders)
    target = rng.choice([peer for peer in cluster.ids if peer != node])
    cluster.note(f"{node} hands its leadership to {target}")

    def transfer(replica: Replica) -> None:
        replica.transfer_leadership(target)  # refused when no longer leader: nothing to do

    cluster.input(node, transfer)


def inject_sync_error(cluster: Cluster, rng: random.Random) -> None:
    node = rng.choice(cluster.ids)
    if cluster.nodes[node].alive:
        disk_of(cluster.nodes[node].storage).fail_next_sync()


def inject_full_disk(cluster: Cluster, rng: random.Random) -> None:
    node = rng.choice(cluster.ids)
    if cluster.nodes[node].alive:
        disk_of(cluster.nodes[node].storage).fill_up()


def pick_leader_mostly(cluster: Cluster, rng: random.Random, share: float) -> NodeId:
    """A leader with probability `share` (when there is one), else any node."""
    leaders = [node for node, replica in cluster.live_replicas() if replica.role is Role.LEADER]
    return rng.choice(leaders) if leaders and rng.random() < share else rng.choice(cluster.ids)


@dataclass(frozen=True, slots=True)
class QuiesceSettings:
    """What a `sim --quiesce` seed draws besides its settings, from a generator of its own."""

    burst_ticks: int  # the writes' bursts and idle stretches, on average
    slow_wake_share: float  # of the wakes, how many are slow (`Wakes`)
    lost_quiesce_share: float  # of the quiesce appends, how many are lost (`Wakes`)
    sleeper_rate: float  # faults aimed at a quiesced leader (`Faults.maybe_hit_sleeper`)
    # The seed's own fault rates in place of `Faults.draw`'s, so that its nodes are more
    # often all up and connected (a partition quiesces only then), and DeleteRecords
    # (which wakes a leader) rarer.
    crash_rate: float
    partition_rate: float
    restart_rate: float
    heal_rate: float
    delete_rate: float

    @classmethod
    def draw(cls, rng: random.Random) -> QuiesceSettings:
        return cls(
            burst_ticks=rng.choice(QUIESCE_BURST_TICKS),
            slow_wake_share=rng.choice(SLOW_WAKE_SHARES),
            lost_quiesce_share=rng.choice(LOST_QUIESCE_SHARES),
            sleeper_rate=rng.choice(SLEEPER_RATES),
            crash_rate=rng.uniform(0.0003, 0.0015),
            partition_rate=rng.uniform(0.0003, 0.0015),
            restart_rate=log_uniform(rng, 0.003, 0.02),
            heal_rate=log_uniform(rng, 0.002, 0.01),
            delete_rate=rng.choice((0.0005, 0.001, 0.002)),
        )

    def apply(self, settings: Settings) -> Settings:
        """The seed's settings with quiescence's own writes and DeleteRecords."""
        return dataclasses.replace(
            settings, burst_ticks=self.burst_ticks, delete_rate=self.delete_rate
        )

    def apply_faults(self, faults: Faults, rng: random.Random) -> None:
        """The seed's faults with quiescence's own rates, and faults aimed at quiesced
        leaders (from `rng`, a generator of their own)."""
        faults.crash_rate = self.crash_rate
        faults.partition_rate = self.partition_rate
        faults.restart_rate = self.restart_rate
        faults.heal_rate = self.heal_rate
        faults.sleeper_rng = rng
        faults.sleeper_rate = self.sleeper_rate


@dataclass
class Wakes:
    """`sim --quiesce`: counts the leaders that quiesce and wake, and makes a share of the
    wakes slow: what the woken leader sends within SLOW_WAKE_WINDOW (its first heartbeats,
    the appends of the produce that woke it) is lost or delayed, each message by a draw of
    its own; and loses `lost_quiesce_share` of the quiesce appends (a partition half
    asleep: its leader sleeps, a follower does not). Hand `fault` to `Cluster.send_fault`;
    `observe` every live node after each step (a wake is seen there, or as the woken
    leader sends)."""

    cluster: Cluster
    rng: random.Random
    share: float
    lost_quiesce_share: float = 0.0
    asleep: dict[NodeId, Replica] = field(default_factory=dict)  # quiesced leaders seen
    slow_until: dict[NodeId, tuple[int, bool]] = field(default_factory=dict)  # (until, all)
    lose_next: set[NodeId] = field(default_factory=set)  # their next wake loses everything
    quiesces: int = 0
    wakes: int = 0
    slow: int = 0

    def observe(self, node: NodeId, replica: Replica | None) -> None:
        if replica is not None and replica.role is Role.LEADER and replica.quiesced:
            if self.asleep.get(node) is not replica:
                self.quiesces += 1
                self.asleep[node] = replica
            return
        was = self.asleep.pop(node, None)
        if was is None or was is not replica or replica.role is not Role.LEADER:
            return
        self.wakes += 1
        lose_all = node in self.lose_next
        self.lose_next.discard(node)
        if lose_all or (self.share and self.rng.random() < self.share):
            self.slow += 1
            self.slow_until[node] = (self.cluster.now + SLOW_WAKE_WINDOW, lose_all)
            self.cluster.note(f"leader {node} wakes slowly")

    def lose_next_wake(self, node: NodeId) -> None:
        """What `node` sends as it next wakes (within the window) is lost, every message:
        a quiesced leader asked to hand its leadership over, whose TimeoutNow (no append)
        goes out while the heartbeats of its wake-up are lost (`Faults.maybe_hit_sleeper`)."""
        self.lose_next.add(node)

    def fault(self, msg: Wire) -> str | tuple[int, int] | None:
        """LOSE, a long delay, or None for a message as it is sent."""
        if not isinstance(msg, AppendRequest):
            return None
        if msg.quiesce and self.lost_quiesce_share:
            return LOSE if self.rng.random() < self.lost_quiesce_share else None
        self.observe(msg.sender, self.cluster.nodes[msg.sender].replica)
        slow = self.slow_until.get(msg.sender)
        if slow is None or self.cluster.now > slow[0]:
            self.slow_until.pop(msg.sender, None)
            return None
        if slow[1]:
            return LOSE
        return LOSE if self.rng.random() < 0.5 else SLOW_WAKE_DELAY

    def stop(self) -> None:
        """No more slow wakes (the liveness phase heals every fault)."""
        self.share = self.lost_quiesce_share = 0.0
        self.slow_until.clear()
        self.lose_next.clear()
