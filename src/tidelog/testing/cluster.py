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
- A read that finds a damaged batch (StorageError, the storage marked for repair) restarts
  that node's replica, between Readys, on what its storage keeps once it set the damage
  aside (`open_replica`), as the broker's partition runner does: a new incarnation, with a
  repair floor and an HWM that may have gone back (the one case the checker accepts).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from tidelog.core.messages import Message, ProduceResult, Ready
from tidelog.core.replica import Replica, ReplicaConfig
from tidelog.core.storage import MemoryStorage
from tidelog.errors import StorageError
from tidelog.node.driver import RepairableStorage, open_replica, write_ready
from tidelog.types import NodeId

Input = Callable[[Replica], None]


class SimStorage(RepairableStorage, Protocol):
    """What the cluster needs from a node's storage beyond LogStorage: losing unsynced data,
    and setting damage aside."""

    def crash(self) -> None: ...


StorageFactory = Callable[[NodeId, random.Random], SimStorage]


def memory_storage(node: NodeId, rng: random.Random) -> SimStorage:
    del node, rng
    return MemoryStorage()


@dataclass(slots=True)
class Envelope:
    deliver_at: int
    seq: int
    msg: Message


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
    paused_until: int = 0  # a paused process takes no input and its clock stands still
    durable_hwm: int = 0  # the HWM its storage holds durably (as far as the driver knows)
    hwm_before_start: int = 0  # durable_hwm when the replica last started
    repaired: bool = False  # its last start found a repair floor

    @property
    def alive(self) -> bool:
        return self.replica is not None

    def start(self) -> Replica:
        self.hwm_before_start = self.durable_hwm
        replica = open_replica(self.config, self.storage, self.rng)
        self.replica = replica
        self.repaired = replica.repair_floor is not None
        self.durable_hwm = replica.hwm
        self.incarnation += 1
        return replica


Listener = Callable[[NodeId, ProduceResult], None]


class Cluster:
    """N replicas of one partition, a network between them, and simulated time."""

    def __init__(
        self,
        *,
        replicas: int,
        rng: random.Random,
        config: Callable[[NodeId, tuple[NodeId, ...]], ReplicaConfig] | None = None,
        storage: StorageFactory = memory_storage,
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
        self.now = 0
        self.in_flight: list[Envelope] = []
        self.seq = 0
        self.cut: set[tuple[NodeId, NodeId]] = set()  # directed links that drop messages
        self.drop_rate = 0.0
        self.duplicate_rate = 0.0
        self.delay_range = (1, 1)
        self.persist_delay_range = (0, 0)
        self.persist_due: dict[NodeId, int] = {}
        self.listeners: list[Listener] = []
        self.on_step: list[Callable[[], None]] = []
        for sim_node in self.nodes.values():
            sim_node.start()

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
        sim_node.storage.quarantine()
        sim_node.start()

    def tick(self, node: NodeId) -> None:
        if not self.is_paused(node):  # a stopped process misses its timers
            self.input(node, lambda replica: replica.tick(now_ms=self.now))

    def is_paused(self, node: NodeId) -> bool:
        return self.now < self.nodes[node].paused_until

    def pause(self, node: NodeId, duration: int) -> None:
        """SIGSTOP: the node does nothing until now + duration, then catches up."""
        self.nodes[node].paused_until = self.now + duration

    def resume_due(self) -> list[NodeId]:
        """The nodes whose pause is over; each must then be `release`d."""
        resumed = []
        for node, sim_node in self.nodes.items():
            if sim_node.paused_until and not self.is_paused(node):
                sim_node.paused_until = 0
                resumed.append(node)
        return resumed

    def release(self, node: NodeId) -> None:
        """A resumed node takes every input that waited (its late ticks come after)."""
        sim_node = self.nodes[node]
        replica = sim_node.replica
        if replica is not None and sim_node.persisting is None:
            while sim_node.backlog:
                self.apply(sim_node, sim_node.backlog.popleft())
            self.drain(node)

    def deliver(self, envelope: Envelope) -> None:
        self.in_flight.remove(envelope)
        self.input(envelope.msg.recipient, lambda replica: replica.step(envelope.msg))

    # ---------------------------------------------------------------- the driver ---------
    def drain(self, node: NodeId) -> None:
        """Carry out Readys until the node is quiet or waits for its disk."""
        sim_node = self.nodes[node]
        while True:
            replica = sim_node.replica
            if replica is None or sim_node.persisting is not None:
                return
            if sim_node.storage.needs_repair is not None:
                self.repair(sim_node)  # a client's read found damage
                continue
            if not replica.has_ready():
                return
            try:
                ready = replica.ready()  # a leader reads what its followers lack
            except StorageError:
                if sim_node.storage.needs_repair is None:
                    raise
                self.repair(sim_node)
                continue
            write_ready(sim_node.storage, ready)
            self.send(ready.messages)
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
        self.send(ready.messages_after_persist)
        sim_node.persisting = None
        replica.advance(ready)
        while sim_node.backlog:
            self.apply(sim_node, sim_node.backlog.popleft())

    def finish_persist(self, node: NodeId) -> None:
        """The node's disk finished its sync."""
        self.settle(self.nodes[node])
        self.drain(node)

    def send(self, messages: Iterable[Message]) -> None:
        for msg in messages:
            if (msg.sender, msg.recipient) in self.cut or self.rng.random() < self.drop_rate:
                continue
            copies = 2 if self.rng.random() < self.duplicate_rate else 1
            for _ in range(copies):
                low, high = self.delay_range
                self.seq += 1
                self.in_flight.append(
                    Envelope(self.now + self.rng.randint(low, high), self.seq, msg)
                )

    def complete(self, node: NodeId, completions: Iterable[ProduceResult]) -> None:
        for result in completions:
            for listener in self.listeners:
                listener(node, result)

    # ---------------------------------------------------------------- faults -------------
    def crash(self, node: NodeId) -> None:
        """Power cut: everything not synced is lost, in memory and on disk."""
        sim_node = self.nodes[node]
        if sim_node.replica is None:
            return
        sim_node.replica = None
        sim_node.persisting = None
        sim_node.backlog.clear()
        self.persist_due.pop(node, None)
        sim_node.storage.crash()

    def restart(self, node: NodeId) -> None:
        sim_node = self.nodes[node]
        if sim_node.replica is None:
            sim_node.manual_persist = False  # a restarted node's disk syncs normally
            sim_node.start()

    def isolate(self, node: NodeId, *, inbound: bool = True, outbound: bool = True) -> None:
        for other in self.ids:
            if other == node:
                continue
            if outbound:
                self.cut.add((node, other))
            if inbound:
                self.cut.add((other, node))

    def partition(self, *groups: Iterable[NodeId]) -> None:
        """Cut every link between different groups (symmetric)."""
        group_of = {node: index for index, group in enumerate(groups) for node in group}
        for a in self.ids:
            for b in self.ids:
                if a != b and group_of.get(a, -1) != group_of.get(b, -2):
                    self.cut.add((a, b))

    def heal(self) -> None:
        self.cut.clear()
