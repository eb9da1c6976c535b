"""What a replica is handed when it is made: its fixed settings and its randomness.

Rules of this file:
- A `ReplicaConfig` that does not fit together raises ConfigError when made; a replica
  never holds one that cannot be (min.insync.replicas changes by `replace`, checked so).
- The lease is an election timeout less `LEASE_MARGIN_TICKS`: the nodes' clocks may tick
  apart by that much (rule 6 of core/replica.py).
- A replica reads node liveness only through the `Liveness` it is handed (core/liveness.py
  keeps it; `NO_LIVENESS` when none): never a clock of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from tidelog.core.membership import ReplicaKey, VoterSet
from tidelog.core.roles import Replication
from tidelog.errors import ConfigError, check_range
from tidelog.types import NO_DIRECTORY, DirectoryId, NodeId

LEASE_MARGIN_TICKS: Final = 2
"""How many ticks the lease stays short of an election timeout."""


class Rng(Protocol):
    """The randomness a replica is handed (random.Random fits)."""

    def randrange(self, start: int, stop: int, /) -> int: ...


class Liveness(Protocol):
    """This node's view of the others' liveness (core/liveness.py), which a quiesced
    partition rests on (core/quiesce.py)."""

    incarnation: int  # this node process's incarnation

    def incarnation_of(self, node: NodeId) -> int | None:
        """The incarnation of `node`'s process, from its latest node heartbeat taken."""
        ...

    def session(self, node: NodeId) -> int:
        """This node's session with `node`: it changes when this node starts again, and
        when it declares `node` dead (or finds `node` started again)."""
        ...

    def contact_sent_ms(self, node: NodeId, session: int) -> int | None:
        """When (this node's monotonic clock) it sent the latest node heartbeat that `node`
        answered in `session` (that node's session with this one); None when none was, or
        `node` answers in another session now."""
        ...

    def pings_taken(self, node: NodeId) -> int:
        """How many node heartbeats this node has taken from `node`: a count that only
        grows (a heartbeat taken after a moment is one more than was counted then)."""
        ...

    def is_live(self, node: NodeId) -> bool:
        """Whether `node` is not declared dead (a leader quiesces without the copies of
        dead nodes; node liveness wakes it when they are heard again)."""
        ...

    def is_dead(self, node: NodeId) -> bool:
        """Whether `node` was declared dead and not heard since (a node not heard yet at
        all is neither live nor dead): its copies leave the in-sync replicas at once."""
        ...


class _NoLiveness:
    """No node liveness: one session forever, and no contact ever."""

    incarnation = 0

    def incarnation_of(self, node: NodeId) -> int | None:
        del node
        return 0  # every node's, as every append names it

    def session(self, node: NodeId) -> int:
        del node
        return 0

    def contact_sent_ms(self, node: NodeId, session: int) -> int | None:
        del node, session
        return None

    def pings_taken(self, node: NodeId) -> int:
        del node
        return 0

    def is_live(self, node: NodeId) -> bool:
        del node
        return True

    def is_dead(self, node: NodeId) -> bool:
        del node
        return False


NO_LIVENESS: Final[Liveness] = _NoLiveness()


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """The fixed settings of one replica. Raises ConfigError when they do not fit together."""

    node_id: NodeId
    replicas: tuple[NodeId, ...]
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    min_insync_replicas: int | None = None  # None: a majority of the voters
    inflight_appends_max: int = 8
    append_bytes_max: int = 1 << 20
    produce_timeout_ticks: int = 60
    pending_produces_max: int = 10_000
    pre_vote: bool = True
    check_quorum: bool = True
    tick_ms: int = 1  # how much the clock handed to `tick(now_ms=)` moves per tick
    # ISR mode (docs/isr.md, core/mode/isr.py) reads these; quorum mode ignores them.
    replication: Replication = Replication.QUORUM
    replica_lag_time_max_ms: int = 10_000
    # The directory of each replica's copy when the partition was made, in the order of
    # `replicas` (KIP-853, KIP-858): the partition's first voter set. Empty: not known, and
    # any copy of a replica votes until a voter set in the log names its directory.
    directories: tuple[DirectoryId, ...] = ()
    # Quorum mode: the leader names each voter's directory in the voter set once that copy
    # has answered it (a VOTERS batch; KIP-853's move to kraft.version 1), so that a node
    # back on an empty disk is no voter any more. Off: a set that names none stays so.
    name_directories: bool = False
    # The partition's replica set now, when it is not `replicas` (KIP-455: a reassignment's
    # target and the replicas it removes, and copies still leaving): the nodes a leader
    # replicates to. Empty: `replicas`. `replicas` stays the set the partition was made
    # with, its first voter set.
    members: tuple[NodeId, ...] = ()
    # Quorum mode: the nodes the voter set is to hold, among `members`. Empty: all of them.
    # The leader adds a caught-up copy of each, one change at a time, and once all are
    # voters removes the voters not among them (mode/quorum.py, `_next_voters`).
    target: tuple[NodeId, ...] = ()
    # Kafka's leader.replication.throttled.rate, for the copies that do not vote (a
    # reassignment's new replicas, a lost copy catching up): the leader sends them at most
    # this many bytes of batches a second, on average. None: no throttle.
    throttle_bytes_per_s: int | None = None
    # A leader whose followers hold its whole log, with nothing in flight,
    # quiesces the partition (core/quiesce.py): no heartbeats, no ticks, until something
    # wakes it. Its reads then rest on node liveness (the `Liveness` handed in).
    quiesce: bool = False

    def __post_init__(self) -> None:
        """ConfigError naming the first setting that does not fit (tidelog.errors)."""
        for name, nodes in (
            ("replicas", self.replicas),
            ("members", self.members),
            ("target", self.target),
        ):
            if len(set(nodes)) != len(nodes):
                raise ConfigError(f"ReplicaConfig.{name}: {nodes} name a node twice")
        if not self.replicas:
            raise ConfigError("ReplicaConfig.replicas: none")
        if self.node_id not in self.assigned:
            raise ConfigError(
                f"ReplicaConfig.node_id: {self.node_id} is not among the replicas {self.assigned}"
            )
        if not set(self.target) <= set(self.assigned):
            raise ConfigError(
                f"ReplicaConfig.target: {self.target} is not among the members {self.assigned}"
            )
        check_range("ReplicaConfig.heartbeat_ticks", self.heartbeat_ticks, 1)
        if self.election_ticks - LEASE_MARGIN_TICKS <= self.heartbeat_ticks:
            raise ConfigError(
                f"ReplicaConfig.election_ticks: {self.election_ticks} must exceed "
                f"heartbeat_ticks {self.heartbeat_ticks} by the lease margin {LEASE_MARGIN_TICKS}"
            )
        check_range("ReplicaConfig.tick_ms", self.tick_ms, 1)
        if self.min_insync_replicas is not None:
            check_range(
                "ReplicaConfig.min_insync_replicas (min.insync.replicas)",
                self.min_insync_replicas,
                1,
                len(self.assigned),
            )
        check_range("ReplicaConfig.inflight_appends_max", self.inflight_appends_max, 1)
        check_range("ReplicaConfig.append_bytes_max", self.append_bytes_max, 1)
        if self.throttle_bytes_per_s is not None:
            check_range("ReplicaConfig.throttle_bytes_per_s", self.throttle_bytes_per_s, 1)
        check_range("ReplicaConfig.produce_timeout_ticks", self.produce_timeout_ticks, 1)
        check_range("ReplicaConfig.pending_produces_max", self.pending_produces_max, 1)
        check_range("ReplicaConfig.replica_lag_time_max_ms", self.replica_lag_time_max_ms, 1)
        if self.directories and len(self.directories) != len(self.replicas):
            raise ConfigError(
                f"ReplicaConfig.directories: {len(self.directories)} directories for "
                f"{len(self.replicas)} replicas"
            )

    @property
    def assigned(self) -> tuple[NodeId, ...]:
        """The partition's replica set now: `members`, or `replicas` when none are given."""
        return self.members or self.replicas

    @property
    def voter_target(self) -> tuple[NodeId, ...]:
        """The nodes the voter set is to hold: `target`, or every member."""
        return self.target or self.assigned

    @property
    def first_voters(self) -> VoterSet:
        """The partition's first voter set: every replica, on its directory if known."""
        directories = self.directories or (NO_DIRECTORY,) * len(self.replicas)
        return VoterSet.of(
            ReplicaKey(node, directory)
            for node, directory in zip(self.replicas, directories, strict=True)
        )

    @property
    def lease_ms(self) -> int:
        """How long a majority's answer keeps a leader's reads safe: an election timeout
        less a margin for the nodes' clocks ticking apart, in the clock's units."""
        return (self.election_ticks - LEASE_MARGIN_TICKS) * self.tick_ms
