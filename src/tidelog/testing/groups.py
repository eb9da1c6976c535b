"""Group coordinators over the simulator's replicated `__consumer_offsets` partition.

Each node of a `Cluster` runs the real coordinator (`tidelog.groups.coordinator`) beside its
real replica, as the broker's adapter runs it: after every step the coordinator follows its
replica's leadership, applies what committed, and ticks on the node's own clock; its
`Write`s are proposed to the replica with acks=all and their completions reported back.
The group scenarios (`group_scenario.py`) and the group simulator (`group_sim.py`) both
drive it.

Rules of this file:
- A coordinator's state is memory: a crash (or a new incarnation of the replica after a
  repair) loses it, and the node starts a new one that loads from the log.
- A paused node, or one busy persisting, does nothing: its coordinator neither ticks nor
  answers, and requests sent to it get no answer (the client times out).
- OffsetFetch is answered only under the leader's read lease, as the broker answers it.
- Everything is decided by the cluster's clock and random source: one seed, one run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from tidelog.core.messages import ProduceResult
from tidelog.core.replica import ACKS_ALL, Replica, Role
from tidelog.errors import NotLeader, OffsetNotAvailable, StorageError
from tidelog.groups.coordinator import Coordinator
from tidelog.groups.messages import (
    FetchOffsets,
    GroupConfig,
    Now,
    Reply,
    Request,
    Write,
    error_of_write,
)
from tidelog.node.driver import apply_committed
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.testing.cluster import Cluster
from tidelog.types import NodeId
from tidelog.wal.batches import producer_batch

# Propose ids of coordinator writes: far above the ids of the simulator's own producers.
WRITE_ID_BASE = 1 << 40
ReplyListener = Callable[[NodeId, Reply], None]
RecordListener = Callable[[int, "bytes | None", "bytes | None"], None]
WriteListener = Callable[[NodeId, Write], None]


@dataclass
class Hosted:
    """One node's coordinator and the incarnation of the replica it follows."""

    coordinator: Coordinator
    incarnation: int


@dataclass
class GroupNodes:
    """A coordinator on every node of `cluster`, for partition 0 of `__consumer_offsets`."""

    cluster: Cluster
    config: GroupConfig
    topics: set[str]
    hosted: dict[NodeId, Hosted] = field(default_factory=dict)
    writes: dict[int, tuple[NodeId, Coordinator, int]] = field(default_factory=dict)
    listeners: list[ReplyListener] = field(default_factory=list)
    # Each committed record as a coordinator applies it (any node's, so more than once).
    record_listeners: list[RecordListener] = field(default_factory=list)
    # Each write a coordinator proposes, committed or not.
    write_listeners: list[WriteListener] = field(default_factory=list)
    member_ids: int = 0
    write_ids: int = WRITE_ID_BASE

    def __post_init__(self) -> None:
        self.cluster.listeners.append(self.on_completion)

    def now(self, node: NodeId) -> Now:
        """The node's own clock (both clocks: the simulator has no time of day)."""
        clock = self.cluster.clock_ms(node)
        return Now(clock, clock)

    def new_member_id(self, client_id: str) -> str:
        self.member_ids += 1
        return f"{client_id}-{self.member_ids}"

    def coordinator(self, node: NodeId) -> Coordinator | None:
        """The node's running coordinator (a new one after a crash or a repair); None
        while the node is down."""
        sim_node = self.cluster.nodes[node]
        if sim_node.replica is None:
            self.hosted.pop(node, None)
            return None
        hosted = self.hosted.get(node)
        if hosted is None or hosted.incarnation != sim_node.incarnation:
            coordinator = Coordinator(
                0,
                self.config,
                topic_exists=self.topics.__contains__,
                new_member_id=self.new_member_id,
            )
            hosted = self.hosted[node] = Hosted(coordinator, sim_node.incarnation)
        return hosted.coordinator

    def busy(self, node: NodeId) -> bool:
        sim_node = self.cluster.nodes[node]
        return (
            sim_node.replica is None
            or sim_node.persisting is not None
            or self.cluster.is_paused(node)
        )

    # ---------------------------------------------------------------- rounds ----------
    def step(self) -> None:
        """Every idle node's coordinator follows its replica and ticks."""
        for node in self.cluster.ids:
            if not self.busy(node):
                self.follow(node)

    def follow(self, node: NodeId) -> None:
        coordinator = self.coordinator(node)
        replica = self.cluster.nodes[node].replica
        if coordinator is None or replica is None:
            return
        now = self.now(node)
        state = replica.status()
        if state.role is not Role.LEADER:
            coordinator.resign("no longer the leader")
        else:
            coordinator.lead(int(state.epoch), int(state.log_start_offset))
            with self.cluster.stopping_on_disk_errors(node):
                applied = apply_committed(
                    replica, coordinator.applied_offset, partial(self.apply, coordinator)
                )
                coordinator.applied(applied, now, caught_up=state.hwm > state.epoch_start_offset)
        coordinator.tick(now)
        self.carry_out(node, coordinator)

    def apply(
        self, coordinator: Coordinator, offset: int, key: bytes | None, value: bytes | None
    ) -> None:
        coordinator.apply(offset, key, value)
        for listener in self.record_listeners:
            listener(offset, key, value)

    def carry_out(self, node: NodeId, coordinator: Coordinator) -> None:
        for effect in coordinator.take():
            if isinstance(effect, Reply):
                for listener in self.listeners:
                    listener(node, effect)
            else:
                self.propose(node, coordinator, effect)

    def propose(self, node: NodeId, coordinator: Coordinator, write: Write) -> None:
        self.write_ids += 1
        request_id = self.write_ids
        self.writes[request_id] = (node, coordinator, write.write)
        batch = producer_batch(
            list(write.values), keys=list(write.keys), timestamp_ms=write.wall_ms
        )
        self.cluster.note(f"coordinator {node}: write #{write.write} ({len(write.keys)} records)")
        for listener in self.write_listeners:
            listener(node, write)

        def propose(replica: Replica) -> None:
            replica.propose(request_id, batch, acks=ACKS_ALL)

        self.cluster.input(node, propose)

    def on_completion(self, node: NodeId, result: ProduceResult) -> None:
        entry = self.writes.pop(result.request_id, None)
        if entry is None:
            return
        _, coordinator, write = entry
        if self.coordinator(node) is not coordinator:
            return  # a crash lost the coordinator that asked
        code = error_of_write(result.error)
        # Mid-round (the replica hands out its completions): its effects wait for `step`.
        coordinator.written(write, code, result.next_offset, self.now(node))

    # ---------------------------------------------------------------- requests --------
    def request(self, node: NodeId, request: int, body: Request) -> bool:
        """Hand `body` to the node's coordinator; False when the node cannot take it now
        (down, paused or syncing: no answer will come)."""
        if self.busy(node):
            return False
        coordinator = self.coordinator(node)
        replica = self.cluster.nodes[node].replica
        if coordinator is None or replica is None:
            return False
        now = self.now(node)
        if isinstance(body, FetchOffsets) and coordinator.loaded:
            code = self.read_lease(replica, now.mono_ms)
            if code is not ErrorCode.NONE:
                for listener in self.listeners:
                    listener(node, Reply(request, error=code))
                return True
        coordinator.handle(request, body, now)
        self.carry_out(node, coordinator)
        return True

    @staticmethod
    def read_lease(replica: Replica, now_ms: int) -> ErrorCode:
        """As the broker: committed offsets are read only under the leader's lease."""
        try:
            replica.latest_offset(now_ms=now_ms)
        except OffsetNotAvailable:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        except NotLeader:
            return ErrorCode.NOT_COORDINATOR
        except StorageError:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE
