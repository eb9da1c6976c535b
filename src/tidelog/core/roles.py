"""The roles a replica moves between, and what a replication mode decides (`Mode`).

A replica (core/replica.py) is one class in either mode. It holds one `Mode` object
(quorum: mode/quorum.py, ISR: mode/isr.py) and asks it at the decision points below, and
nowhere else: the log, the follower's path, the replication pipeline, the produce queue
and the reads are shared (core/follow.py, core/replicate.py, core/requests.py).

Rules of this file:
- A role changes only through `ReplicaState._set_role`, along `ROLE_TRANSITIONS`; LEADER
  is entered only through `ReplicaState.become_leader`, from the role the mode leads from
  (`Mode.leads_from`: a quorum candidate that won its election, an ISR follower the
  controller's record named).
- A mode decides; it never bypasses the shared paths: it changes roles, the HWM and the
  produce queue only through the replica's own functions.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, Protocol

from tidelog.core.messages import (
    AppendResponse,
    Message,
    Ready,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tidelog.errors import TidelogError
from tidelog.records import BatchHeader
from tidelog.types import NodeId, Offset


class Replication(enum.Enum):
    """How a partition commits (docs/isr.md): a majority quorum that elects its own leaders
    (mode/quorum.py), or Kafka's ISR, led by whom the controller's record names
    (mode/isr.py)."""

    QUORUM = "quorum"
    ISR = "isr"


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


ROLE_TRANSITIONS: Final[Mapping[Role, frozenset[Role]]] = {
    Role.FOLLOWER: frozenset(Role),  # LEADER: only an ISR replica the record names
    Role.PRE_CANDIDATE: frozenset({Role.FOLLOWER, Role.PRE_CANDIDATE, Role.CANDIDATE}),
    Role.CANDIDATE: frozenset(Role),  # LEADER: a quorum candidate that won
    Role.LEADER: frozenset({Role.FOLLOWER}),
}
"""The roles a replica may move to from each role; anything else is our bug."""

ElectionMessage = VoteRequest | VoteResponse | TimeoutNow


class Mode(Protocol):
    """The decision points where the two replication modes differ. Every method is called
    by the replica that owns the mode, on its own state, between two `Ready`s."""

    leads_from: Role  # the role `become_leader` is entered from

    # ---------------------------------------------------------------- time and inputs --
    def tick(self, now_ms: int | None) -> None:
        """One tick passed (the replica counted it): elections, heartbeats, deadlines."""

    def campaign(self) -> None:
        """Start an election now, if this mode holds elections."""

    def transfer_leadership(self, target: NodeId) -> str | None:
        """Hand leadership to `target`: None when begun, else why not."""

    def refusal(self, msg: Message) -> str | None:
        """Why `msg` cannot be right in this mode (after the shared door), or None."""

    def on_higher_epoch_vote(self, msg: VoteRequest | VoteResponse) -> bool:
        """A vote message of a later epoch: whether it is taken (the mode moves epochs)."""

    def step_election(self, msg: ElectionMessage) -> None:
        """A vote request or answer, or a TimeoutNow, of the current epoch."""

    def on_leader_contact(self) -> None:
        """The leader of our epoch sent us an append."""

    def on_leader_lost(
        self, *, first: bool, lease_over: bool = True, designated: NodeId | None = None
    ) -> None:
        """Node liveness declared our leader's node dead while we were quiesced, and our
        promise to that leader ended with its node's session (core/quiesce.py rule 3):
        `first`, we are the survivor to campaign first (else `designated` is, if known);
        `lease_over`, the lease of the last append we took is over too (else it runs its
        course)."""

    def may_quiesce(self) -> bool:
        """Whether a leader of this mode may quiesce now, as far as the mode goes."""

    def on_wake(self) -> None:
        """A quiesced leader woke (core/quiesce.py rule 2)."""

    # ---------------------------------------------------------------- the leader -------
    def on_append_answered(self, msg: AppendResponse) -> None:
        """A follower's answer was taken by the shared pipeline (any outcome)."""

    def hwm_candidate(self) -> Offset | None:
        """The offset the leader's HWM may move to now (it never goes back), or None."""

    def produce_error(self, acks: int) -> TidelogError | None:
        """Why this replica takes no produce now, or None."""

    def has_read_lease(self, now_ms: int | None) -> bool:
        """Whether the leader may serve reads now."""

    def in_sync_replicas(self) -> tuple[NodeId, ...]:
        """The in-sync replicas as the leader sees them."""

    def on_config_changed(self) -> None:
        """min.insync.replicas changed (the replica took it)."""

    # ---------------------------------------------------------------- the follower -----
    def serving_error(self) -> TidelogError | None:
        """Why this replica serves no reads in this mode, before the shared checks."""

    def gives_up(self, header: BatchHeader) -> bool:
        """Whether the leader's batch `header`, conflicting with one committed here, is
        taken, giving up what we committed from its base on (ISR's unclean recovery)."""

    def on_follower_appended(self, end: Offset) -> None:
        """An append from the leader was taken; our log matches its up to `end`."""

    def on_become_follower(self) -> None:
        """The replica became a follower (from any role)."""

    # ---------------------------------------------------------------- output -----------
    def has_output(self) -> bool:
        """Whether the mode has something for the next `Ready`."""

    def take_output(self, ready: Ready) -> Ready:
        """`ready` with the mode's own output added."""

    def after_advance(self) -> None:
        """The caller persisted a `Ready`: what waited for durability may go on."""
