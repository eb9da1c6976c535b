"""Partition reassignment (KIP-455) as the metadata image keeps it: one partition's
`Assignment` and its pure transitions. No IO; server/metadata.py applies them as it applies
the committed commands, so every node holds the same assignment at the same offset.

Rules of this file:
- `replicas` is Kafka's replica list, what Metadata and ListPartitionReassignments answer:
  while a move is on, the target and then the original replicas it removes (Kafka's
  PartitionReassignmentReplicas); otherwise the partition's replicas.
- A move keeps the replicas it started from (`original`, R0) however often its target is
  replaced (incremental submission, KIP-455): a new target replaces the old, and a cancel
  goes back to R0.
- Quorum mode (the voter set of core/mode/quorum.py). While a move is on, the copies are
  the target, R0 and the retiring ones (`members`), and the voter set's target is the
  target and R0 (`voter_target`): the leader only ADDS voters, so a cancel can always go
  back. The move completes once the partition's leader reports a committed voter set
  holding every target node (`on_voters`): replicas become the target and the voter
  target too, so the leader removes the others. A cancel is over at once: replicas and
  voter target are R0, and the leader removes any voter it added, which needs only a
  majority of the voters alive.
- A copy that is no replica any more may still be a voter: it stays, `retiring`, until the
  leader reports a committed voter set without it, and only a leader that holds the
  current assignment may say so (its report names the `version` its replica took: the
  metadata offset that last changed the assignment, so an assignment changed and changed
  back is not the same one): such a leader never adds a node outside its voter target.
  A node hosts the partition while it is in `members`; once out, it deletes its copy.
- ISR mode (docs/isr.md; the record's transitions are core/isr.py's): the copies are the
  record's replicas, target plus removing while moving; nothing retires. The move
  completes when the target is in the ISR (server/metadata.py asks core/isr.py at each
  record change), and a cancel reverts the record to R0.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Final

from tidelog.errors import MetadataError

REPLICAS_MAX: Final = 64  # nodes one reassignment target may name


def _unique(*groups: Iterable[int]) -> tuple[int, ...]:
    """The nodes of `groups` in order, each once."""
    return tuple(dict.fromkeys(node for group in groups for node in group))


def _without(nodes: Iterable[int], gone: Collection[int]) -> tuple[int, ...]:
    return tuple(node for node in nodes if node not in gone)


@dataclass(frozen=True, slots=True)
class Assignment:
    """One partition's replicas, and its move while one is on (see the rules)."""

    replicas: tuple[int, ...]  # Kafka's: target + removing while moving
    original: tuple[int, ...] = ()  # R0, while moving
    target: tuple[int, ...] = ()  # while moving; () when no move is on
    retiring: tuple[int, ...] = ()  # quorum mode: copies that stay until no voter
    version: int = 0  # the metadata offset of the command that last changed it

    def __post_init__(self) -> None:
        assert self.replicas
        assert bool(self.original) == bool(self.target)
        assert not set(self.retiring) & set(self.replicas)

    @property
    def moving(self) -> bool:
        return bool(self.target)

    @property
    def adding(self) -> tuple[int, ...]:
        """The target's nodes that were not replicas when the move started."""
        return _without(self.target, self.original)

    @property
    def removing(self) -> tuple[int, ...]:
        """The replicas the move started from that the target leaves out."""
        return _without(self.original, self.target)

    @property
    def members(self) -> tuple[int, ...]:
        """The nodes holding a copy: the replicas (R0 and the target while moving), then the
        retiring ones."""
        return _unique(self.replicas, self.retiring)

    @property
    def voter_target(self) -> tuple[int, ...]:
        """Quorum mode: the nodes the voter set is to hold (core/config.py's `target`)."""
        return _unique(self.target, self.original) if self.moving else self.replicas


def submit(assignment: Assignment, target: tuple[int, ...], *, version: int) -> Assignment:
    """A new target (AlterPartitionReassignments) at metadata offset `version`, replacing
    the one of a move already on (its R0 is kept). A target that is R0 in any order is no
    move: the replicas take its order and a move on is over, as a cancel. Every copy that
    is no member any more retires (quorum mode)."""
    original = assignment.original if assignment.moving else assignment.replicas
    if set(target) == set(original):
        return _settled(assignment, target, version)
    replicas = _unique(target, original)
    retiring = _without(_unique(assignment.retiring, assignment.members), replicas)
    return Assignment(replicas, original, target, retiring, version)


def cancel(assignment: Assignment, *, version: int) -> Assignment:
    """The move on is called off: back to R0 at once."""
    assert assignment.moving
    return _settled(assignment, assignment.original, version)


def complete(assignment: Assignment, *, version: int) -> Assignment:
    """The move is done: the target is the replicas; the others retire (quorum mode)."""
    assert assignment.moving
    return _settled(assignment, assignment.target, version)


def _settled(assignment: Assignment, replicas: tuple[int, ...], version: int) -> Assignment:
    retiring = _without(_unique(assignment.retiring, assignment.members), replicas)
    return Assignment(replicas, retiring=retiring, version=version)


def on_voters(
    assignment: Assignment, voters: Collection[int], reported_version: int | None, *, version: int
) -> Assignment:
    """Quorum mode: the partition's leader reports a committed voter set (`voters`, its
    nodes), its replica holding the assignment of `reported_version` (None: not known),
    in the command at metadata offset `version`. Retiring copies the set leaves out go
    when that is the current assignment; the move completes once every target node votes.
    The same assignment when nothing changes."""
    result = assignment
    if reported_version == assignment.version:
        staying = tuple(node for node in assignment.retiring if node in voters)
        if staying != assignment.retiring:
            result = replace(result, retiring=staying, version=version)
    if result.moving and set(result.target) <= set(voters):
        result = complete(result, version=version)
    return result


def is_done(assignment: Assignment, isr: Collection[int], min_insync: int) -> bool:
    """ISR mode: a move completes once its target is in the ISR and the ISR within the
    target holds min.insync.replicas (at most the target's size)."""
    within = set(isr) & set(assignment.target)
    return (
        assignment.moving
        and set(assignment.target) <= set(isr)
        and len(within) >= min(min_insync, len(assignment.target))
    )


def target_of(value: object, registered: Collection[int]) -> tuple[int, ...] | None:
    """A reassignment's target as a command or a request names it, checked as Kafka's
    ReplicationControlManager.validateManualPartitionAssignment does: None is a cancel;
    otherwise a non-empty list of distinct registered node ids. MetadataError
    INVALID_REPLICA_ASSIGNMENT when it is not one."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(
        isinstance(node, int) and not isinstance(node, bool) for node in value
    ):
        raise MetadataError("INVALID_REPLICA_ASSIGNMENT", "the target is a list of node ids")
    if not value:
        raise MetadataError(
            "INVALID_REPLICA_ASSIGNMENT",
            "The manual partition assignment includes an empty replica list.",
        )
    if len(value) > REPLICAS_MAX:
        raise MetadataError("INVALID_REPLICA_ASSIGNMENT", f"more than {REPLICAS_MAX} replicas")
    for node in sorted(value):
        if node not in registered:
            raise MetadataError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"The manual partition assignment includes broker {node}, but no such "
                "broker is registered.",
            )
    if len(set(value)) != len(value):
        twice = next(node for node in value if value.count(node) > 1)
        raise MetadataError(
            "INVALID_REPLICA_ASSIGNMENT",
            f"The manual partition assignment includes the broker {twice} more than once.",
        )
    return tuple(value)
