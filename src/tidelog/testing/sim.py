"""The randomized simulator: real replicas, fake network, clock and disk, one seed per run.

    python -m tidelog.testing.sim --seeds N [--first-seed S] [--replicas 3|5] [--ticks T]

A run has a safety phase (crashes that lose unsynced writes, partitions symmetric and
asymmetric, drops, duplicates, reordering delays, slow disks; on disk, a bit flipped in a
crashed node's committed data while no other node is repairing) and then a liveness phase
(heal everything; within a bounded time a leader must exist, a new acks=all write must
commit, and all replicas must converge). The checker sees every step. A failing seed
prints the command that reproduces it; the last line is `N seeds, V violations`.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from tidelog.core.messages import ProduceResult
from tidelog.core.replica import ACKS_ALL, ACKS_LEADER, ACKS_NONE, Replica, ReplicaConfig, Role
from tidelog.errors import LogDiverged, OffsetOutOfRange, TidelogError
from tidelog.records import read_header
from tidelog.testing.checker import Checker
from tidelog.testing.cluster import Cluster, StorageFactory, memory_storage
from tidelog.testing.disk import SimDiskStorage, disk_storage
from tidelog.types import NO_EPOCH, Epoch, NodeId, Offset
from tidelog.wal.batches import NO_PRODUCER, producer_batch

MICROS_PER_TICK = 10
PAUSE_TICKS_MIN = 5
PAUSE_TICKS_MAX = 40
IDEMPOTENT_PRODUCER_ID = 1000
LIVENESS_TICKS_MAX = 400
CONSUMERS = 3
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
    # The idempotent producer: one batch in flight, retried as is until acknowledged.
    idempotent_batch: bytes | None = None
    idempotent_request: int | None = None
    idempotent_sequence: int = 0
    consumers: list[Consumer] = field(
        default_factory=lambda: [Consumer() for _ in range(CONSUMERS)]
    )

    def __post_init__(self) -> None:
        self.cluster.listeners.append(self.on_completion)

    def produce_idempotent(self) -> None:
        """Send (or send again) the idempotent producer's batch to the believed leader."""
        if self.idempotent_request is not None:
            return
        if self.idempotent_batch is None:
            self.produced += 1
            value = f"{self.seed}:idem:{self.idempotent_sequence}".encode()
            count = self.rng.choice((1, 3))
            producer = (IDEMPOTENT_PRODUCER_ID, 0, self.idempotent_sequence)
            self.idempotent_batch = build_batch(value, records=count, producer=producer)
        self.produced += 1
        request_id = self.produced
        batch = self.idempotent_batch
        self.idempotent_request = request_id
        self.in_flight[request_id] = (batch, ACKS_ALL)
        node = self.pick_node()
        if not self.cluster.input(
            node, lambda replica: replica.propose(request_id, batch, acks=ACKS_ALL)
        ):
            self.in_flight.pop(request_id)
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
        self.cluster.input(node, lambda replica: replica.propose(request_id, batch, acks=acks))

    def pick_node(self) -> NodeId:
        if self.leader_hint is not None and self.rng.random() < 0.9:
            return self.leader_hint
        return self.rng.choice(self.cluster.ids)

    def delete_records(self) -> None:
        """DeleteRecords on a leader, up to a random offset within its HWM."""
        leaders = [n for n, r in self.cluster.live_replicas() if r.role is Role.LEADER]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        replica = self.cluster.replica(node)
        low, high = replica.log.log_start_offset, min(replica.hwm, replica.log.log_end_offset)
        offset = Offset(self.rng.randint(low, high))

        def delete(replica: Replica) -> None:
            # Deposed, or the HWM is behind: DeleteRecords fails, as it should.
            with contextlib.suppress(TidelogError):
                replica.delete_records(offset)

        self.cluster.input(node, delete)

    def on_completion(self, node: NodeId, result: ProduceResult) -> None:
        batch, acks = self.in_flight.pop(result.request_id, (b"", ACKS_NONE))
        if result.request_id == self.idempotent_request:
            self.idempotent_request = None
            if result.error is None:
                header = read_header(batch)
                self.idempotent_sequence += header.last_offset_delta + 1
                self.idempotent_batch = None
        if result.error is None:
            self.leader_hint = node
            if acks == ACKS_ALL and result.base_offset is not None:
                self.acked_all += 1
                self.checker.on_acked(result.base_offset, batch)
            return
        hint = getattr(result.error, "leader_hint", None)
        self.leader_hint = hint if hint is not None else self.rng.choice(self.cluster.ids)

    def consume(self, node: NodeId | None = None) -> None:
        consumer = self.rng.choice(self.consumers)
        node = self.rng.choice(self.cluster.ids) if node is None else node
        replica = self.cluster.nodes[node].replica
        busy = self.cluster.nodes[node].persisting is not None or self.cluster.is_paused(node)
        if replica is None or busy:
            return
        known = consumer.position > 0 and consumer.last_epoch != NO_EPOCH
        last_epoch = consumer.last_epoch if known else None
        result = replica.fetch(
            consumer.position,
            max_bytes=FETCH_BYTES_MAX,
            last_fetched_epoch=last_epoch,
            now_ms=self.cluster.now,
        )
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
        if replica.role is Role.LEADER:
            self.checker.on_leader_hwm(node, result.hwm)
        self.checker.on_read(node, result.batches)
        for batch in result.batches:
            header = read_header(batch)
            if header.next_offset > consumer.position:
                consumer.position = header.next_offset
                consumer.last_epoch = header.epoch


@dataclass
class Faults:
    """The fault schedule of one seed, drawn from its rng."""

    crash_rate: float
    partition_rate: float
    heal_rate: float
    restart_rate: float
    pause_rate: float
    rot_rate: float = 0.0

    @classmethod
    def draw(cls, rng: random.Random, *, rot: bool = False) -> Faults:
        return cls(
            crash_rate=rng.uniform(0.0005, 0.004),
            partition_rate=rng.uniform(0.0005, 0.004),
            heal_rate=rng.uniform(0.002, 0.01),
            restart_rate=rng.uniform(0.002, 0.02),
            pause_rate=rng.uniform(0.0005, 0.003),
            rot_rate=rng.uniform(0.0005, 0.003) if rot else 0.0,
        )

    def maybe_inject(self, cluster: Cluster, rng: random.Random) -> None:
        roll = rng.random()
        if roll < self.crash_rate:
            # Half the crashes hit a node mid-sync: the moment unsynced state is lost.
            syncing = [node for node, n in cluster.nodes.items() if n.persisting is not None]
            pool = syncing if syncing and rng.random() < 0.5 else list(cluster.ids)
            cluster.crash(rng.choice(pool))
            return
        roll -= self.crash_rate
        if roll < self.partition_rate:
            inject_partition(cluster, rng)
            return
        roll -= self.partition_rate
        if roll < self.heal_rate:
            cluster.heal()
            return
        roll -= self.heal_rate
        if roll < self.restart_rate:
            down = [node for node in cluster.ids if not cluster.nodes[node].alive]
            if down:
                cluster.restart(rng.choice(down))
            return
        roll -= self.restart_rate
        if roll < self.pause_rate:
            leaders = [n for n, replica in cluster.live_replicas() if replica.role is Role.LEADER]
            node = (
                rng.choice(leaders) if leaders and rng.random() < 0.7 else rng.choice(cluster.ids)
            )
            cluster.pause(node, rng.randint(PAUSE_TICKS_MIN, PAUSE_TICKS_MAX) * MICROS_PER_TICK)
            return
        roll -= self.pause_rate
        if roll < self.rot_rate:
            rot(cluster, rng)


def rot(cluster: Cluster, rng: random.Random) -> None:
    """Flip a bit in the committed data of a crashed node, unless a node is damaged already
    (rotten and not restarted, or still repairing): damage stays within one node at a time,
    so a good copy of everything committed survives on a majority less one."""
    storages: dict[NodeId, SimDiskStorage] = {}
    for node in cluster.ids:
        storage = cluster.nodes[node].storage
        assert isinstance(storage, SimDiskStorage)
        storages[node] = storage
        replica = cluster.nodes[node].replica
        if replica is not None and replica.repair_floor is None:
            storage.rotten = False  # started since, and repaired
    down = [node for node in cluster.ids if not cluster.nodes[node].alive]
    if down and not any(storage.rotten for storage in storages.values()):
        storage = storages[rng.choice(down)]
        storage.rotten = storage.corrupt_committed_batch()


def inject_partition(cluster: Cluster, rng: random.Random) -> None:
    kind = rng.randrange(3)
    leaders = [node for node, replica in cluster.live_replicas() if replica.role is Role.LEADER]
    node = rng.choice(leaders) if leaders and rng.random() < 0.6 else rng.choice(cluster.ids)
    if kind == 0:
        cluster.isolate(node)
    elif kind == 1:
        cluster.isolate(node, inbound=rng.random() < 0.5, outbound=rng.random() < 0.5)
    else:
        shuffled = list(cluster.ids)
        rng.shuffle(shuffled)
        cut = rng.randrange(1, len(shuffled))
        cluster.partition(shuffled[:cut], shuffled[cut:])


def sim_config(node: NodeId, members: tuple[NodeId, ...]) -> ReplicaConfig:
    return ReplicaConfig(
        node,
        members,
        election_ticks=10,
        heartbeat_ticks=2,
        inflight_appends_max=4,
        tick_ms=MICROS_PER_TICK,
        append_bytes_max=2048,
        produce_timeout_ticks=40,
    )


@dataclass
class Run:
    """One seed: the cluster, its workload and checker, and the simulated clock."""

    seed: int
    replicas: int
    ticks: int
    storage: StorageFactory = memory_storage
    config: Callable[[NodeId, tuple[NodeId, ...]], ReplicaConfig] = sim_config

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.cluster = Cluster(
            replicas=self.replicas, rng=self.rng, config=self.config, storage=self.storage
        )
        self.checker = Checker()
        self.workload = Workload(self.cluster, self.checker, self.rng, self.seed)
        self.phase = {node: self.rng.randrange(MICROS_PER_TICK) for node in self.cluster.ids}
        self.cluster.drop_rate = self.rng.choice((0.0, 0.01, 0.05, 0.1))
        self.cluster.duplicate_rate = self.rng.choice((0.0, 0.01, 0.05))
        self.cluster.delay_range = (1, self.rng.choice((3, 8, 20, 40)))
        self.cluster.persist_delay_range = (1, self.rng.choice((1, 5, 15, 40)))
        self.produce_rate = self.rng.uniform(0.02, 0.2)
        self.consume_rate = self.rng.uniform(0.02, 0.2)
        self.delete_rate = self.rng.choice((0.0, 0.001, 0.004))

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
            if now % MICROS_PER_TICK == self.phase[node]:
                cluster.tick(node)
                self.check()
        if self.rng.random() < self.produce_rate:
            self.workload.produce()
            self.check()
        if self.rng.random() < self.consume_rate:
            self.workload.consume()
        if faults is not None and self.rng.random() < self.delete_rate:
            self.workload.delete_records()
            self.check()
        if faults is not None:
            faults.maybe_inject(cluster, self.rng)
            self.check()

    def check(self) -> None:
        for node, sim_node in self.cluster.nodes.items():
            if sim_node.replica is not None:
                self.checker.check_replica(
                    node,
                    sim_node.replica,
                    sim_node.incarnation,
                    durable_hwm_at_start=sim_node.hwm_before_start,
                    repaired=sim_node.repaired,
                )
        self.checker.verify_acks()

    def run(self) -> list[str]:
        try:
            self.run_phases()
        except AssertionError as error:
            self.checker.fail(f"assertion failed at t={self.cluster.now}: {error}")
        except TidelogError as error:  # e.g. a log that needs repair: never expected here
            self.checker.fail(f"{type(error).__name__} at t={self.cluster.now}: {error}")
        return self.checker.violations

    def run_phases(self) -> None:
        faults = Faults.draw(self.rng, rot=self.storage is disk_storage)
        for _ in range(self.ticks * MICROS_PER_TICK):
            self.step(faults)
            if self.checker.violations:
                return
        self.heal_all()
        self.run_liveness()

    def heal_all(self) -> None:
        cluster = self.cluster
        cluster.heal()
        cluster.drop_rate = 0.0
        cluster.duplicate_rate = 0.0
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
            if self.workload.acked_all > acked_before and self.converged() is None:
                self.checker.check_final(self.live())
                return
        reason = self.converged() or "no acks=all write committed"
        self.checker.fail(f"liveness: not converged after {LIVENESS_TICKS_MAX} ticks: {reason}")

    def live(self) -> dict[NodeId, Replica]:
        return dict(self.cluster.live_replicas())

    def converged(self) -> str | None:
        replicas = self.live()
        if not any(r.role is Role.LEADER for r in replicas.values()):
            return "no leader"
        return self.checker.check_converged(replicas)


def run_seed(seed: int, replicas: int, ticks: int, disk: bool = False) -> list[str]:
    return Run(seed, replicas, ticks, storage=disk_storage if disk else memory_storage).run()


def reproduce_command(seed: int, replicas: int, ticks: int, disk: bool = False) -> str:
    return (
        f"python -m tidelog.testing.sim --seeds 1 --first-seed {seed} "
        f"--replicas {replicas} --ticks {ticks}" + (" --disk" if disk else "")
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tidelog.testing.sim", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--first-seed", type=int, default=1, help="the first seed")
    parser.add_argument("--replicas", type=int, choices=(3, 5), default=3)
    parser.add_argument("--ticks", type=int, default=400, help="ticks of the safety phase")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--disk",
        action="store_true",
        help="keep each log in the real disk log on a fault-injecting file system",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.ticks < 1 or args.jobs < 1:
        parser.error("--seeds, --ticks and --jobs must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    started = time.monotonic()
    violations = 0
    counts = [args.replicas] * len(seeds), [args.ticks] * len(seeds), [args.disk] * len(seeds)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = (
            pool.map(run_seed, seeds, *counts) if args.jobs > 1 else map(run_seed, seeds, *counts)
        )
        for seed, found in zip(seeds, results, strict=True):
            if found:
                violations += len(found)
                command = reproduce_command(seed, args.replicas, args.ticks, args.disk)
                print(f"seed {seed}: {found[0]}  (reproduce: {command})")
    elapsed = time.monotonic() - started
    print(f"# {args.seeds / elapsed * 60:.0f} seeds per minute ({elapsed:.1f} s)", file=sys.stderr)
    print(f"{args.seeds} seeds, {violations} violations")
    return 0 if violations == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
