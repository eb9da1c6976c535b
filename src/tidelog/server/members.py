"""Who belongs to the cluster, as the metadata log says: the registered brokers' peer
addresses, the brokers unregistered, and the metadata quorum's voter target (KIP-853).

Rules of this file:
- Pure, like the rest of the image (server/metadata.py): `Membership.apply` takes one
  committed command and changes the image the same way on every node; a command that
  cannot be applied raises MetadataError (the image logs it, at its offset, and changes
  nothing). `check` is the same check at the door, with Kafka's error.
- A node registers (`register_broker`) with its data directory and its peer address, where
  the others dial it (`peer`, HOST:PORT): every node adds a link to it and counts it a
  broker. `unregister_broker` (Kafka's UnregisterBroker) takes it out again, and is refused
  while it still holds a partition's replica or is one of the metadata quorum's voters.
  A node unregistered that registers again is a broker again.
- The metadata quorum's voter target (`voter_target`): the nodes its voter set is to hold.
  None until the first controller with a committed voter set writes that set down
  (`voter_target`, once: later ones change nothing) or a change is made; until then it is
  the metadata log's first voter set, the one every node of the cluster was born with. A
  change names the voters as its proposer saw them committed (`voters`), which stand for
  the target while it is None, so that every node replays the same target from the same
  log, a node back on an empty disk too (which knows no first voter set of its own). One node is
  added or removed per command (the leader then moves its voter set one change at a time,
  core/mode/quorum.py); the target never becomes empty, and a node added is a registered
  broker on the directory it registered (KIP-853's ReplicaKey).
- The metadata partition's members, the nodes its leader replicates to
  (`metadata_members`): every registered broker, every voter and every node of the target,
  this node, and the nodes it has a link to (a node joining, heard from before it is
  registered: it fetches the log as an observer; a node unregistered that still runs, until
  it falls silent: it learns there that it was unregistered), less the brokers unregistered
  that are no voter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from tidelog.address import Address, format_address, parse_address
from tidelog.errors import MetadataError
from tidelog.types import NO_DIRECTORY, DirectoryId, NodeId

MEMBERSHIP_COMMANDS: Final = frozenset(
    {"add_voter", "remove_voter", "unregister_broker", "voter_target"}
)
VOTERS_MAX: Final = 1000
PEER_ADDRESS_BYTES_MAX: Final = 300
WILDCARD_HOSTS: Final = ("0.0.0.0", "::")


class HasReplicas(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def replicas(self) -> tuple[tuple[int, ...], ...]: ...


class Registry(Protocol):
    """What `Membership` reads and changes of the rest of the image (server/metadata.py)."""

    incarnations: dict[int, str | None]
    directories: dict[int, DirectoryId]
    fenced: set[int]

    @property
    def topics(self) -> Mapping[str, HasReplicas]: ...

    def members(self, key: tuple[str, int]) -> tuple[int, ...]: ...


@dataclass(slots=True)
class Membership:
    """The image's part that says who belongs (see the rules)."""

    peers: dict[int, Address] = field(default_factory=dict)  # register_broker's `peer`
    unregistered: set[int] = field(default_factory=set)
    voter_target: tuple[int, ...] | None = None  # None: the first voter set

    # ---------------------------------------------------------------- commands ---------
    def registered(self, node: int, peer: Address | None) -> None:
        """A node's registration was applied (server/metadata.py's `_register`)."""
        self.unregistered.discard(node)
        if peer is not None:
            self.peers[node] = peer

    def apply(self, kind: str, command: dict[str, Any], image: Registry) -> None:
        """Apply one committed membership command; MetadataError when it cannot be."""
        if kind == "voter_target":
            voters = voters_of(command)
            self.voter_target = self.target_or(voters)  # the first one written holds
            return
        node = node_of(command.get("node"))
        self.check(kind, command, image)
        if kind == "unregister_broker":
            image.incarnations.pop(node, None)
            image.directories.pop(node, None)
            image.fenced.discard(node)
            self.peers.pop(node, None)
            self.unregistered.add(node)
            return
        base = self.target_or(voters_of(command))
        if kind == "add_voter":
            self.voter_target = tuple(sorted({*base, node}))
        else:
            self.voter_target = tuple(n for n in base if n != node)

    def check(self, kind: str, command: dict[str, Any], image: Registry) -> None:
        """MetadataError, with Kafka's error, when the command cannot be applied now."""
        node = node_of(command.get("node"))
        base = self.target_or(voters_of(command))
        if kind == "unregister_broker":
            if node not in image.incarnations:
                raise MetadataError(
                    "BROKER_ID_NOT_REGISTERED", f"Broker ID {node} is not registered."
                )
            if node in base:
                raise MetadataError(
                    "INVALID_REQUEST",
                    f"node {node} is a voter of the metadata quorum: remove it first "
                    "(RemoveRaftVoter, `tidelog metadata quorum remove-voter`)",
                )
            held = replicas_held(node, image)
            if held:
                raise MetadataError(
                    "INVALID_REQUEST",
                    f"node {node} still holds {held} partition replica(s): move them off "
                    "first (a reassignment)",
                )
            return
        directory = directory_of(command.get("directory"))
        if kind == "add_voter":
            check_add(node, directory, base, image)
            return
        if node not in base:
            raise MetadataError(
                "VOTER_NOT_FOUND",
                f"Cannot remove voter {node} from the set of voters {list(base)}",
            )
        if len(base) == 1:
            raise MetadataError(
                "INVALID_REQUEST", f"node {node} is the last voter: the quorum cannot be empty"
            )
        if directory not in (NO_DIRECTORY, image.directories.get(node, NO_DIRECTORY)):
            raise MetadataError(
                "VOTER_NOT_FOUND", f"voter {node} is on another directory than {directory}"
            )

    def target_or(self, voters: tuple[int, ...]) -> tuple[int, ...]:
        """The voter target, or `voters` while none was ever set."""
        return voters if self.voter_target is None else self.voter_target

    # ---------------------------------------------------------------- views ------------
    def brokers(self, registry: Registry, static: Iterable[int]) -> tuple[NodeId, ...]:
        """The cluster's brokers: registered, or in this node's --peers (before they have
        registered), less those unregistered."""
        nodes = (set(registry.incarnations) | set(static)) - self.unregistered
        return tuple(NodeId(node) for node in sorted(nodes))


def check_add(node: int, directory: DirectoryId, base: tuple[int, ...], image: Registry) -> None:
    """AddRaftVoter's checks: a registered broker on its directory, not a voter yet."""
    if node in base:
        raise MetadataError(
            "DUPLICATE_VOTER",
            f"The voter id for node {node} is already part of the set of voters {list(base)}.",
        )
    if node not in image.incarnations:
        raise MetadataError("INVALID_REQUEST", f"node {node} is not a registered broker")
    registered = image.directories.get(node, NO_DIRECTORY)
    if directory not in (NO_DIRECTORY, registered):
        raise MetadataError(
            "INVALID_REQUEST",
            f"node {node} registered directory {registered}, not {directory}",
        )
    if len(base) >= VOTERS_MAX:
        raise MetadataError("INVALID_REQUEST", f"more than {VOTERS_MAX} voters")


def metadata_members(
    *,
    node_id: NodeId,
    brokers: Iterable[int],
    voters: Iterable[int],
    target: Iterable[int],
    linked: Iterable[int],
    unregistered: set[int],
) -> tuple[NodeId, ...]:
    """The metadata partition's members on this node (see the rules)."""
    voting = {*voters, *target}
    brokers_now = {node for node in brokers if node not in unregistered}
    return tuple(NodeId(node) for node in sorted(brokers_now | set(linked) | voting | {node_id}))


def replicas_held(node: int, image: Registry) -> int:
    """How many partitions `node` holds a copy of: a replica, or a copy a move removed and
    still keeps (retiring, until its leader has committed a voter set without it)."""
    return sum(
        1
        for topic in image.topics.values()
        for partition, replicas in enumerate(topic.replicas)
        if node in replicas or node in image.members((topic.name, partition))
    )


def node_of(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
        raise MetadataError("INVALID_REQUEST", f"{value!r} is no node id")
    return value


def directory_of(value: object) -> DirectoryId:
    """A directory id (absent: not named, NO_DIRECTORY)."""
    if value is None:
        return NO_DIRECTORY
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 63:
        raise MetadataError("INVALID_REQUEST", f"directory {value!r} is no directory id")
    return DirectoryId(value)


def voters_of(command: dict[str, Any]) -> tuple[int, ...]:
    """The committed voters a command's proposer saw: 1..VOTERS_MAX distinct node ids."""
    value = command.get("voters")
    if not isinstance(value, list) or not 1 <= len(value) <= VOTERS_MAX:
        raise MetadataError("INVALID_REQUEST", "voters: a list of node ids")
    nodes = tuple(sorted({node_of(node) for node in value}))
    if len(nodes) != len(value):
        raise MetadataError("INVALID_REQUEST", "voters: a node named twice")
    return nodes


def peer_of(command: dict[str, Any]) -> Address | None:
    """A registration's peer address (absent: not said); MetadataError when it is none a
    node could dial."""
    value = command.get("peer")
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > PEER_ADDRESS_BYTES_MAX:
        raise MetadataError("INVALID_REQUEST", "peer is not HOST:PORT")
    try:
        address = parse_address(value)
    except ValueError as error:
        raise MetadataError("INVALID_REQUEST", f"peer: {error}") from None
    if address[0] in WILDCARD_HOSTS:
        raise MetadataError("INVALID_REQUEST", f"peer {format_address(address)} names no host")
    return address
