"""A cluster of real replicas over a fake network, clock and disk, in one process.

This is the one fixture behind both the randomized simulator (`sim.py`) and the scripted
scenario tests (`scenario.py`). It runs the unchanged core: every node carries out its
`Ready` exactly as the node driver does (write, then sync, then send the acks, then
`advance`), only here the sync takes simulated time and a crash loses what was not synced.

Rules of this file:
- Everything is decided by the `random.Random` handed in: one seed, one run.
- A node that is persisting takes no input; inputs wait in its backlog, and are stepped
  together before the next `Ready`, which is how group commit behaves in the real driver.
- The checker (`checker.py`) sees every step.
- Each node reads its own clock (`NodeClock`: its own offset and rate); `now` is real time.
- A write or fsync that fails (OSError EIO or ENOSPC from the faulty file system) stops the
  node as the broker stops it (fail-stop): a crash that loses everything unsynced, never a
  retry.
- A read that finds a damaged batch (StorageError, the storage marked for repair) restarts
  that node's replica, between Readys, on what its storage keeps once it set the damage
  aside (`open_replica`), as the broker's partition runner does: a new incarnation, with a
  repair floor and an HWM that may have gone back (a case the checker accepts).
- Node liveness (core/liveness.py), when the cluster is made with `liveness_timeout_ms`:
  each node process has one (a new incarnation each start, not each repair); its pings
  and answers travel the same faulty network as the replicas' messages, and are taken by
  the node even while its replica persists; what changes its view goes to the replica
  as an input (`Replica.on_node_change`). A new cluster's processes heard each other
  once as they formed it (`introduce`): each knows the others' first incarnations.
- A caller may put faults of its own on messages as they are sent (`send_fault`: lost, or
  delayed by a range of its own); `sim --quiesce` slows wake-ups so.
- ISR mode, after an unclean election: a Ready that gives up committed records lowers the
  storage's HWM to their start as it is written (`SimNode.durable_hwm` with it, durable or
  not yet), so a restart may come back with that HWM (docs/isr.md rule 10).
"""

from __future__ import annotations

import contextlib
import errno
import random
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from tidelog.core.liveness import LivenessMessage, NodeLiveness, NodePing, NodePong
from tidelog.core.messages import Message, ProduceResult, Ready
from tidelog.core.producers import ProducerEntry
from tidelog.core.replica import NO_LIVENESS, Replica, ReplicaConfig
from tidelog.core.storage import FIRST_DIRECTORY, MemoryStorage
from tidelog.errors import StorageError
from tidelog.node.driver import RepairableStorage, begin_round, finish_round, open_replica
from tidelog.records import read_header
from tidelog.testing.trace import describe_message
from tidelog.types import DirectoryId, NodeId, Offset

Input = Callable[[Replica], None]
Wire = Message | LivenessMessage
LOSE = "lose"
# A fault the caller puts on one message as it is sent (`Cluster.send_fault`): LOSE, a
# delay range of its own, or None (only the network's faults).
SendFault = Callable[[Wire], str | tuple[int, int] | None]
PPM = 1_000_000
# The errors of a failing disk: the node stops on them (anything else is a bug).
DISK_ERRNOS = (errno.EIO, errno.ENOSPC)
READ_ALL_BYTES = 1 << 30


class SimStorage(RepairableStorage, Protocol):
    """What the cluster needs from a node's storage beyond LogStorage and repair."""

    def crash(self) -> None:
        """Lose everything not synced, as a power cut would."""
        ...

    def retain(self, snapshot: Callable[[Offset], tuple[ProducerEntry, ...]]) -> Offset | None:
        """Retention: delete whole batches (or segments) below the saved HWM beyond the
        configured size; the new log start, or None when nothing was deleted. The producer
        snapshot at a log start is `snapshot(start)` (the replica's)."""
        ...


StorageFactory = Callable[[NodeId, random.Random], SimStorage]


DIRECTORY_STEP = 100
"""How far a node's directory id moves with each empty disk (`SimMemoryStorage.emptied`)."""


class SimMemoryStorage(MemoryStorage):
    """MemoryStorage with retention by size; its bytes never rot. Node N's first copy is
    directory N; each empty disk it is given adds DIRECTORY_STEP (`emptied`)."""

    def __init__(
        self, retention_bytes: int | None = None, directory_id: DirectoryId = FIRST_DIRECTORY
    ) -> None:
        super().__init__(directory_id)
        self.retention_bytes = retention_bytes

    def emptied(self) -> SimMemoryStorage:
        """An empty disk in place of this one: nothing of it, and a new directory id."""
        return SimMemoryStorage(
            self.retention_bytes, DirectoryId(self.directory_id + DIRECTORY_STEP)
        )

    def retain(self, snapshot: Callable[[Offset], tuple[ProducerEntry, ...]]) -> Offset | None:
        if self.retention_bytes is None:
            return None
        state = self.load()
        batches = self.read(state.log_start_offset, end_offset=state.hwm, max_bytes=READ_ALL_BYTES)
        total = sum(len(batch) for batch in batches)
        start = state.log_start_offset
        for batch in batches:
            if total - len(batch) < self.retention_bytes:
                break
            total -= len(batch)
            start = read_header(batch).next_offset
        if start <= state.log_start_offset:
            return None
        self.advance_log_start(start, producers=snapshot(start))
        return start


def memory_storage(node: NodeId, rng: random.Random) -> SimStorage:
    del rng
    return SimMemoryStorage(directory_id=DirectoryId(node))


@dataclass(frozen=True, slots=True)
class NodeClock:
    """A node's monotonic clock: `offset + now * rate_ppm / 10**6` at real time `now`."""

    offset: int = 0
    rate_ppm: int = PPM

    def read(self, now: int) -> int:
        return self.offset + now * self.rate_ppm // PPM

    def ticks_at(self, now: int, tick: int) -> bool:
        """True when the clock passes a multiple of `tick` between now - 1 and now."""
        return self.read(now) // tick != self.read(now - 1) // tick


@dataclass(slots=True)
class Envelope:
    deliver_at: int
    seq: int
    msg: Wire


@dataclass
class SimNode:
    """One node: a replica (None while crashed), its storage, and its pending persist."""

    id: NodeId
    config: ReplicaConfig
    storage: SimStorage
    rng: random.Random
    replica: Replica | None = None
    persisting: Ready | None = None
    backlog: deque[Input] = field(default_factory=deque)
    incarnation: int = 0
    manual_persist: bool = False
    paused_until: int = 0  # a paused process takes no input and misses its timers
    clock: NodeClock = field(default_factory=NodeClock)
    durable_hwm: int = 0  # the HWM its storage holds durably (as far as the driver knows)
    hwm_before_start: int = 0  # durable_hwm when the replica last started
    repaired: bool = False  # its last start found a repair floor
    liveness: NodeLiveness | None = None  # its process's node liveness, if the cluster has it
    # Its ticks: each one its replica took (quiesced or not: a quiesced replica counts
    # none), or missed while the node was paused.
    ticks: int = 0

    @property
    def alive(self) -> bool:
        return self.replica is not None

    def start(self) -> Replica:
        self.hwm_before_start = self.durable_hwm
        replica = open_replica(self.config, self.storage, self.rng, self.liveness or NO_LIVENESS)
        self.replica = replica
        self.repaired = replica.repair_floor is not None
        self.durable_hwm = replica.hwm
        self.incarnation += 1
        return replica


Listener = Callable[[NodeId, ProduceResult], None]
MessageListener = Callable[[NodeId, Replica, Message], None]


@dataclass(frozen=True)
class Delivery:
    """The input that steps a delivered message (it names its sender: `Cluster.wipe`)."""

    msg: Message
    listeners: list[MessageListener]

    def __call__(self, replica: Replica) -> None:
        replica.step(self.msg)
        for listener in self.listeners:
            listener(self.msg.recipient, replica, self.msg)


ReadyListener = Callable[[NodeId, Ready], None]


class Cluster:
    """N replicas of one partition, a network between them, and simulated time."""

    def __init__(
        self,
        *,
        replicas: int,
        rng: random.Random,
        config: Callable[[NodeId, tuple[NodeId, ...]], ReplicaConfig] | None = None,
        storage: StorageFactory = memory_storage,
        clocks: Iterable[NodeClock] = (),
        liveness_timeout_ms: int | None = None,
    ) -> None:
        ids = tuple(NodeId(i) for i in range(1, replicas + 1))
        make_config = config or ReplicaConfig
        self.rng = rng
        self.ids = ids
        self.nodes: dict[NodeId, SimNode] = {}
        for node in ids:
            node_rng = random.Random(rng.getrandbits(64))
            self.nodes[node] = SimNode(
                node, make_config(node, ids), storage(node, node_rng), node_rng
            )
        for sim_node, clock in zip(self.nodes.values(), clocks, strict=False):
            sim_node.clock = clock
        self.now = 0
        self.in_flight: list[Envelope] = []
        self.seq = 0
        self.cut: set[tuple[NodeId, NodeId]] = set()  # directed links that drop messages
        self.drop_rate = 0.0
        self.duplicate_rate = 0.0
        self.delay_range = (1, 1)
        # A share of the messages takes long_delay_range instead (longer than an election
        # timeout); a share is delivered once more, that late (a stale duplicate).
        self.long_delay_rate = 0.0
        self.replay_rate = 0.0
        self.long_delay_range = (1, 1)
        self.in_order = False  # True: each link delivers in the order it was sent
        self.link_clear: dict[tuple[NodeId, NodeId], int] = {}  # a link's last delivery
        self.persist_delay_range = (0, 0)
        self.persist_due: dict[NodeId, int] = {}
        self.listeners: list[Listener] = []
        self.on_step: list[Callable[[], None]] = []  # after each input taken from a backlog
        self.on_message: list[MessageListener] = []  # after a replica stepped a message
        self.on_ready: list[ReadyListener] = []  # as a replica hands out a Ready
        # After a replica advanced, before its backlog (ISR mode: a leader alone in its ISR
        # commits in `advance`, and the checker must see that before what waited).
        self.on_advance: list[Callable[[], None]] = []
        self.stops: Counter[str] = Counter()  # fail-stops by cause: EIO, ENOSPC, corrupt
        self.topology_version = 0  # changes whenever a node or a link goes up or down
        # Whether a fault may crash a node now (ISR mode keeps the last good copy up);
        # None: any node. A disk error stops a node all the same.
        self.crash_allowed: Callable[[NodeId], bool] | None = None
        # Whether a down node's disk may be replaced (`wipe`): None, never.
        self.wipe_allowed: Callable[[NodeId], bool] | None = None
        # Whether a replaced disk keeps its epoch and vote (a copy named by node alone
        # would vote again: see `wipe`); False where every voter set names directories.
        self.wipes_keep_votes = True
        self.on_wipe: list[Callable[[NodeId], None]] = []
        self.trace: Callable[[str], None] | None = None
        # The caller's own faults on what a node sends (`sim --quiesce`: slow wake-ups).
        self.send_fault: SendFault | None = None
        self.liveness_timeout_ms = liveness_timeout_ms
        self.processes = 0  # node processes started: each one's liveness incarnation
        for sim_node in self.nodes.values():
            self.new_process(sim_node)
            sim_node.start()
        self.introduce()

    # ---------------------------------------------------------------- inputs ------------
    def replica(self, node: NodeId) -> Replica:
        replica = self.nodes[node].replica
        assert replica is not None, f"node {node} is down"
        return replica

    def live_replicas(self) -> Iterable[tuple[NodeId, Replica]]:
        for node, sim_node in self.nodes.items():
            if sim_node.replica is not None:
                yield node, sim_node.replica

    def input(self, node: NodeId, action: Input) -> bool:
        """Give a node one input; False when the node is down."""
        sim_node = self.nodes[node]
        if sim_node.replica is None:
            return False
        if sim_node.persisting is not None or self.is_paused(node):
            sim_node.backlog.append(action)
            return True
        with self.stopping_on_disk_errors(node):
            self.apply(sim_node, action)
            self.drain(node)
        return True

    def apply(self, sim_node: SimNode, action: Input) -> None:
        """Step one input; a read that finds damage restarts the replica (`repair`)."""
        assert sim_node.replica is not None
        try:
            action(sim_node.replica)
        except StorageError:
            if sim_node.storage.needs_repair is None:
                raise
            self.repair(sim_node)

    def repair(self, sim_node: SimNode) -> None:
        """Its storage sets the damage a read found aside; the replica starts again on what
        is left (between Readys: nothing unsynced is lost)."""
        assert sim_node.persisting is None
        self.note(f"repair {sim_node.id}: damage at {sim_node.storage.needs_repair} set aside")
        self.stops["repair"] += 1
        sim_node.storage.quarantine()
        sim_node.start()
        self.topology_version += 1

    def clock_ms(self, node: NodeId) -> int:
        """What the node's own clock reads now."""
        return self.nodes[node].clock.read(self.now)

    def tick(self, node: NodeId) -> None:
        sim_node = self.nodes[node]
        if self.is_paused(node):  # a stopped process misses its timers
            sim_node.ticks += 1
            return
        now_ms = self.clock_ms(node)

        def tick(replica: Replica) -> None:
            sim_node.ticks += 1
            replica.tick(now_ms=now_ms)

        self.input(node, tick)

    def is_paused(self, node: NodeId) -> bool:
        return self.now < self.nodes[node].paused_until

    def pause(self, node: NodeId, duration: int) -> None:
        """SIGSTOP: the node does nothing until now + duration, then catches up."""
        self.nodes[node].paused_until = self.now + duration
        self.topology_version += 1
        self.note(f"pause {node} for {duration}")

    def resume_due(self) -> list[NodeId]:
        """The nodes whose pause is over; each must then be `release`d."""
        resumed = []
        for node, sim_node in self.nodes.items():
            if sim_node.paused_until and not self.is_paused(node):
                sim_node.paused_until = 0
                resumed.append(node)
                self.topology_version += 1
        return resumed

    def release(self, node: NodeId) -> None:
        """A resumed node takes every input that waited (its late ticks come after)."""
        sim_node = self.nodes[node]
        replica = sim_node.replica
        if replica is not None and sim_node.persisting is None:
            with self.stopping_on_disk_errors(node):
                self.step_backlog(sim_node, replica)
                self.drain(node)

    def deliver(self, envelope: Envelope) -> None:
        self.in_flight.remove(envelope)
        msg = envelope.msg
        if self.trace is not None:
            self.note(f"deliver {describe_message(msg)}")
        if isinstance(msg, NodePing | NodePong):
            self.take_liveness(envelope, msg)
            return
        self.input(msg.recipient, Delivery(msg, self.on_message))

    # ---------------------------------------------------------------- node liveness -----
    def new_process(self, sim_node: SimNode) -> None:
        """A node process starts: node liveness in a new incarnation, watching the others."""
        self.processes += 1
        if self.liveness_timeout_ms is None:
            return
        liveness = NodeLiveness(sim_node.id, self.processes, self.liveness_timeout_ms)
        for other in self.ids:
            liveness.watch(other, sim_node.clock.read(self.now))
        sim_node.liveness = liveness

    def introduce(self) -> None:
        """A new cluster's node processes heard each other once, as they formed it: each
        one's node liveness knows the others' first incarnations (a quiesce append names
        its leader's, core/quiesce.py)."""
        for sim_node in self.nodes.values():
            liveness = sim_node.liveness
            if liveness is None:
                continue
            now_ms = sim_node.clock.read(self.now)
            for other in self.nodes.values():
                if other.liveness is not None and other is not sim_node:
                    ping = NodePing(other.id, sim_node.id, other.liveness.incarnation, now_ms)
                    liveness.on_ping(ping, now_ms)

    def ping(self, node: NodeId) -> None:
        """The node pings every other node (a node heartbeat), if it runs."""
        liveness = self.nodes[node].liveness
        if liveness is not None and self.up(node):
            self.send(liveness.pings(self.clock_ms(node)))

    def expire(self, node: NodeId) -> list[NodeId]:
        """The node declares dead the nodes it has not heard for a timeout; its replica
        hears of each. Returns them."""
        liveness = self.nodes[node].liveness
        if liveness is None or not self.up(node):
            return []
        dead = liveness.expire(self.clock_ms(node))
        for other in dead:
            self.note(f"{node} declares {other} dead")
            self.input(node, partial(Replica.on_node_change, node=other))
        return dead

    def take_liveness(self, envelope: Envelope, msg: LivenessMessage) -> None:
        """A ping or its answer reaches its node: lost if it is down, held while it is
        paused, else taken by its liveness at once (not behind its replica's sync)."""
        sim_node = self.nodes[msg.recipient]
        liveness = sim_node.liveness
        if liveness is None or sim_node.replica is None:
            return
        if self.is_paused(msg.recipient):
            envelope.deliver_at = sim_node.paused_until
            self.in_flight.append(envelope)
            return
        if isinstance(msg, NodePing):
            heard_again = not liveness.is_live(msg.sender)
            pong, changed = liveness.on_ping(msg, self.clock_ms(msg.recipient))
            changed = changed or heard_again  # its partitions' leaders catch it up
            self.send([pong])
        else:
            changed = liveness.on_pong(msg)
        if changed:
            self.note(
                f"{msg.recipient}: node {msg.sender} is back, started again or in a new session"
            )
            self.input(msg.recipient, partial(Replica.on_node_change, node=msg.sender))

    # ---------------------------------------------------------------- the driver ---------
    def drain(self, node: NodeId) -> None:
        """Carry out Readys until the node is quiet or waits for its disk."""
        sim_node = self.nodes[node]
        while True:
            replica = sim_node.replica
            if replica is None or sim_node.persisting is not None:
                return
            if sim_node.storage.needs_repair is not None:
                self.repair(sim_node)  # a client's (or the checker's) read found damage
                continue
            try:
                # A leader's Ready reads what its followers lack: it may find damage.
                ready = begin_round(replica, sim_node.storage, self.send)
            except StorageError:
                if sim_node.storage.needs_repair is None:
                    raise
                self.repair(sim_node)
                continue
            if ready is None:
                return
            for lost in ready.given_up:  # ISR mode: storage lowered its HWM, maybe durably
                sim_node.durable_hwm = min(sim_node.durable_hwm, lost.start_offset)
            for listener in self.on_ready:
                listener(node, ready)
            self.complete(node, ready.completions)
            sim_node.persisting = ready
            if ready.must_sync and sim_node.manual_persist:
                return
            if ready.must_sync and self.persist_delay_range[1] > 0:
                low, high = self.persist_delay_range
                self.persist_due[node] = self.now + self.rng.randint(low, high)
                return
            self.settle(sim_node)

    def settle(self, sim_node: SimNode) -> None:
        """Sync, send the acks, advance, then step what waited in the backlog."""
        ready = sim_node.persisting
        replica = sim_node.replica
        assert ready is not None and replica is not None
        self.persist_due.pop(sim_node.id, None)
        sim_node.storage.sync()
        if ready.hwm is not None:
            sim_node.durable_hwm = ready.hwm
        sim_node.persisting = None
        finish_round(replica, ready, self.send)
        for hook in self.on_advance:
            hook()
        self.step_backlog(sim_node, replica)

    def step_backlog(self, sim_node: SimNode, replica: Replica) -> None:
        """Step every input that waited, each seen by the `on_step` hooks (the checker)."""
        while sim_node.backlog and sim_node.replica is replica:
            self.apply(sim_node, sim_node.backlog.popleft())
            for hook in self.on_step:
                hook()

    def finish_persist(self, node: NodeId) -> None:
        """The node's disk finished its sync."""
        with self.stopping_on_disk_errors(node):
            self.settle(self.nodes[node])
            self.drain(node)

    def send(self, messages: Iterable[Wire]) -> None:
        for msg in messages:
            fault = None if self.send_fault is None else self.send_fault(msg)
            if (
                fault == LOSE
                or (msg.sender, msg.recipient) in self.cut
                or self.rng.random() < self.drop_rate
            ):
                if self.trace is not None:
                    self.note(f"lose {describe_message(msg)}")
                continue
            copies = 2 if self.rng.random() < self.duplicate_rate else 1
            for _ in range(copies):
                long = self.long_delay_rate and self.rng.random() < self.long_delay_rate
                delay = self.long_delay_range if long else self.delay_range
                self.schedule(msg, fault if isinstance(fault, tuple) else delay)
            if self.replay_rate and self.rng.random() < self.replay_rate:
                self.schedule(msg, self.long_delay_range)

    def schedule(self, msg: Wire, delay_range: tuple[int, int]) -> None:
        """Deliver `msg` after a delay drawn from `delay_range`; with `in_order`, never
        before a message sent earlier on the same link (a healthy TCP connection)."""
        low, high = delay_range
        delay = self.rng.randint(low, high)
        if delay > self.delay_range[1] and self.trace is not None:
            self.note(f"delay {delay}: {describe_message(msg)}")
        deliver_at = self.now + delay
        if self.in_order:
            link = (msg.sender, msg.recipient)
            deliver_at = max(deliver_at, self.link_clear.get(link, 0))
            self.link_clear[link] = deliver_at
        self.seq += 1
        self.in_flight.append(Envelope(deliver_at, self.seq, msg))

    def complete(self, node: NodeId, completions: Iterable[ProduceResult]) -> None:
        for result in completions:
            for listener in self.listeners:
                listener(node, result)

    # ---------------------------------------------------------------- faults -------------
    def crash(self, node: NodeId, *, fail_stop: bool = False) -> None:
        """Power cut: everything not synced is lost, in memory and on disk. A fault's crash
        may be vetoed (`crash_allowed`); a fail-stop's never is."""
        sim_node = self.nodes[node]
        if sim_node.replica is None:
            return
        if not fail_stop and self.crash_allowed is not None and not self.crash_allowed(node):
            self.note(f"crash {node} spared: it holds the last good copy")
            return
        self.note(f"crash {node}")
        sim_node.replica = None
        sim_node.persisting = None
        sim_node.backlog.clear()
        self.persist_due.pop(node, None)
        self.topology_version += 1
        sim_node.storage.crash()

    def wipe(self, node: NodeId) -> bool:
        """A down node's copy of the log lost: it starts again with an empty log, nothing
        that says what it held, and what it sent before is lost with it (a new process, new
        connections). Its epoch and vote go too unless `wipes_keep_votes`: a vote lost with a
        disk may elect two leaders in one epoch (Raft's stable storage) where a copy is
        known by its node alone; where every voter set names directories the new copy is
        no voter, and what it grants counts for nothing. Only when `wipe_allowed` says so;
        whether it was done."""
        sim_node = self.nodes[node]
        storage = sim_node.storage
        if (
            sim_node.alive
            or not isinstance(storage, SimMemoryStorage)
            or self.wipe_allowed is None
            or not self.wipe_allowed(node)
        ):
            return False
        self.note(f"wipe {node}")
        replaced = storage.emptied()
        if self.wipes_keep_votes:
            replaced.save_hard_state(storage.load().hard_state)
        replaced.sync()
        sim_node.storage = replaced
        sim_node.durable_hwm = 0
        self.in_flight = [e for e in self.in_flight if e.msg.sender != node]
        for other in self.nodes.values():  # a paused or busy node's inputs waiting too
            other.backlog = deque(
                i for i in other.backlog if not (isinstance(i, Delivery) and i.msg.sender == node)
            )
        for listener in self.on_wipe:
            listener(node)
        return True

    def restart(self, node: NodeId) -> None:
        sim_node = self.nodes[node]
        if sim_node.replica is None:
            sim_node.manual_persist = False  # a restarted node's disk syncs normally
            self.note(f"restart {node}")
            self.topology_version += 1
            self.new_process(sim_node)
            with self.stopping_on_disk_errors(node):
                sim_node.start()

    @contextlib.contextmanager
    def stopping_on_disk_errors(self, node: NodeId) -> Iterator[None]:
        """Stop the node on a failed write or fsync; a read that found damage repairs the
        node as soon as it is between Readys (see the rules of this file); any other error
        goes on up."""
        try:
            yield
        except OSError as error:
            if error.errno not in DISK_ERRNOS:
                raise
            self.fail_stop(node, errno.errorcode[error.errno])
        except StorageError:
            if self.nodes[node].storage.needs_repair is None:
                raise
            self.repair_damaged_nodes()

    def fail_stop(self, node: NodeId, cause: str) -> None:
        """The node stops on a disk error: a crash, never a retry."""
        self.note(f"fail-stop {node}: {cause}")
        self.stops[cause] += 1
        self.crash(node, fail_stop=True)
        self.topology_version += 1

    def repair_damaged_nodes(self) -> bool:
        """Repair every running node whose log a read (a client's, or the checker's) found
        damaged; a node that is syncing or paused repairs once it is between Readys again.
        False when no node's log was found damaged."""
        damaged = [
            node
            for node, n in self.nodes.items()
            if n.replica is not None and n.storage.needs_repair is not None
        ]
        for node in damaged:
            if self.nodes[node].persisting is None and not self.is_paused(node):
                with self.stopping_on_disk_errors(node):  # setting aside writes too
                    self.repair(self.nodes[node])
        return bool(damaged)

    def up(self, node: NodeId) -> bool:
        """Running and taking input: started, not paused."""
        return self.nodes[node].replica is not None and not self.is_paused(node)

    def isolate(self, node: NodeId, *, inbound: bool = True, outbound: bool = True) -> None:
        for other in self.ids:
            if other == node:
                continue
            if outbound:
                self.cut.add((node, other))
            if inbound:
                self.cut.add((other, node))
        self.topology_version += 1
        self.note(f"isolate {node} (inbound {inbound}, outbound {outbound})")

    def partition(self, *groups: Iterable[NodeId]) -> None:
        """Cut every link between different groups (symmetric)."""
        listed = [sorted(group) for group in groups]
        group_of = {node: index for index, group in enumerate(listed) for node in group}
        for a in self.ids:
            for b in self.ids:
                if a != b and group_of.get(a, -1) != group_of.get(b, -2):
                    self.cut.add((a, b))
        self.topology_version += 1
        self.note("partition " + " | ".join(",".join(map(str, group)) for group in listed))

    def heal(self) -> None:
        if self.cut:
            self.note("heal")
            self.topology_version += 1
        self.cut.clear()

    def note(self, text: str) -> None:
        """One line of the trace (`sim --trace`), when tracing."""
        if self.trace is not None:
            self.trace(f"t={self.now} {text}")
