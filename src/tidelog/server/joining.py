"""A node's place in a cluster that grows and shrinks: its first voter set, the notices it
sends, the links it adds, and the metadata partition's members and voter target.

Rules of this file:
- The metadata log's first voter set (`ReplicaConfig.replicas` of `__cluster_metadata`) is
  decided once, at the node's first start on its data directory, and kept there
  (FIRST_VOTERS_FILE): every `--peers` node for a node born with the cluster, the others it
  names for a node started with `--join` (a bootstrap, KIP-853's
  controller.quorum.bootstrap.servers), never itself: a joining node starts as an observer
  and never campaigns on an empty log. A later start takes the kept set whatever its flags
  say, so `--peers` may grow (a roll after `cluster add-node`) and `--join` may stay.
- Every `BROKER_NOTICE_EVERY`-th NOTICE round (each one while it stops) a node tells every
  broker and every node it has a link to its advertised listeners, admin port and peer
  address (BrokerNotice): node liveness's pings are the heartbeats; every round the
  leaders tell the nodes that do not host their partitions who leads (LeaderNotice), a
  quiesced partition's leader only when a pass looks at it (server/settled.py).
- A node learns the peer addresses of the others from its `--peers`, from the metadata
  image (each registration names its node's, server/members.py) and from their notices,
  and adds a link to each (`PeerTransport.add_link`). A node that announces itself and is
  no registered broker here (one joining) is told every peer address known here and the
  controller this node knows (PeersNotice), so it dials them, announces itself to them,
  and forwards its registration to the controller; the controller it was told stands for
  the metadata log's leader until its own replica hears from one.
- The metadata partition's members and voter target are those of the image
  (`members.metadata_members`; the target is the image's, or the first voter set), handed
  to its runner (SetMembers) whenever they change: whichever node leads moves the voter set
  toward the same target, one change at a time (core/mode/quorum.py). The first controller
  whose voter set is committed writes that set down as the target (`voter_target`), so
  that no node's own idea of the first set (kept on its disk, or lost with it) ever decides.
- A node unregistered keeps its link while it announces itself (it follows the metadata
  log until it has applied its own unregistration, and answers the client that asked it),
  and loses it once silent for UNREGISTERED_SILENT_S; a notice from it links it again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, Protocol

from tidelog.address import Address, format_address
from tidelog.core.replica import Role
from tidelog.errors import StorageError
from tidelog.protocol.peer import BrokerNotice, LeaderNotice, PartitionKey, PeersNotice
from tidelog.server.config import BrokerConfig
from tidelog.server.members import metadata_members
from tidelog.server.metadata import MetadataImage
from tidelog.server.partition import PartitionRunner
from tidelog.server.partition_inputs import SetMembers
from tidelog.server.peers import PeerTransport
from tidelog.types import DirectoryId, Epoch, NodeId

log = logging.getLogger("tidelog.joining")

FIRST_VOTERS_FILE: Final = "metadata-first-voters.json"
FIRST_VOTERS_MAX: Final = 1000
UNREGISTERED_SILENT_S: Final = 3.0  # an unregistered node not heard from this long: unlinked
BROKER_NOTICE_EVERY: Final = 4  # NOTICE rounds between two BrokerNotices (a second)


class JoinView(Protocol):
    """What joining reads and asks of a node (server/broker.py's Broker)."""

    config: BrokerConfig
    node_id: NodeId
    image: MetadataImage
    transport: PeerTransport
    metadata_key: PartitionKey
    listener_addresses: dict[str, dict[NodeId, Address]]
    admin_ports: dict[NodeId, int]
    stopping_nodes: set[NodeId]
    noticed: list[PartitionRunner]  # this NOTICE round's partitions (server/settled.py)

    @property
    def all_nodes(self) -> tuple[NodeId, ...]: ...

    def hosting(self, key: PartitionKey) -> PartitionRunner | None: ...

    def hosted(self) -> list[PartitionRunner]: ...

    def controller_id(self) -> int: ...

    async def commit_metadata(self, command: dict[str, Any]) -> tuple[Any, str | None]: ...


def write_first_voters(
    data_dir: Path, voters: Iterable[int], directories: Iterable[int], *, joined: bool = False
) -> None:
    """Keep the metadata log's first voter set on a data directory before its node first
    starts (`tidelog cluster up` formats each node so, KRaft's `--initial-controllers`):
    with each voter's data directory id, so that a node back on another disk is never
    one of them, not even before the first leader named them."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / FIRST_VOTERS_FILE
    temporary = path.with_suffix(".tmp")
    kept = {"voters": list(voters), "joined": joined, "directories": list(directories)}
    with temporary.open("w") as file:
        json.dump(kept, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def first_directories(config: BrokerConfig) -> tuple[DirectoryId, ...]:
    """The data directory ids of the kept first voter set, in its order; () when it names
    none (a node started without being formatted)."""
    path = config.data_dir / FIRST_VOTERS_FILE
    if not path.exists():
        return ()
    try:
        directories = json.loads(path.read_text()).get("directories", [])
    except (OSError, ValueError, AttributeError) as error:
        raise StorageError(f"{path} cannot be read: {error}") from None
    voters, _ = read_first_voters(path)
    if directories and (
        len(directories) != len(voters)
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in directories)
    ):
        raise StorageError(f"{path}: directories {directories!r} do not fit its voters")
    return tuple(DirectoryId(d) for d in directories)


def first_voters(config: BrokerConfig) -> tuple[tuple[NodeId, ...], bool]:
    """The metadata log's first voter set on this data directory (see the rules), made
    and kept at the first start, and whether this node joined the cluster after it was
    born. StorageError when the kept one cannot be read."""
    path = config.data_dir / FIRST_VOTERS_FILE
    if path.exists():
        return read_first_voters(path)
    others = sorted(node for node in config.peers if node != config.node_id)
    nodes = tuple(NodeId(node) for node in (others if config.join else sorted(config.peers)))
    write_first_voters(config.data_dir, nodes, (), joined=config.join)
    return nodes, config.join


def read_first_voters(path: Path) -> tuple[tuple[NodeId, ...], bool]:
    try:
        kept = json.loads(path.read_text())
        voters, joined = kept["voters"], kept["joined"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise StorageError(f"{path} cannot be read: {error}") from None
    if not isinstance(joined, bool):
        raise StorageError(f"{path}: joined is {joined!r}, not true or false")
    if (
        not isinstance(voters, list)
        or not 1 <= len(voters) <= FIRST_VOTERS_MAX
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in voters)
    ):
        raise StorageError(f"{path} names no voter set: {voters!r}")
    return tuple(NodeId(node) for node in voters), joined


class Joining:
    """One node's notices, links and metadata members (see the rules)."""

    def __init__(self, node: JoinView) -> None:
        self.node = node
        self.first_voters, self.joined = first_voters(node.config)
        self.first_directories = first_directories(node.config)
        self.told_controller: NodeId | None = None  # a PeersNotice's, while joining
        self.handed: tuple[tuple[NodeId, ...], tuple[NodeId, ...]] | None = None
        self.heard_at: dict[NodeId, float] = {}  # each node's last notice (monotonic s)
        self.writing_target = False  # a `voter_target` command in flight
        self.rounds = 0  # NOTICE rounds

    # ---------------------------------------------------------------- the shape --------
    def metadata_shape(self) -> tuple[tuple[NodeId, ...], tuple[NodeId, ...], tuple[NodeId, ...]]:
        """The metadata partition's first voters, members and voter target now."""
        node = self.node
        runner = node.hosting(node.metadata_key)
        voters: Iterable[int] = self.first_voters
        if runner is not None:
            voters = [key.node for key in runner.status().voters]
        # No change asked yet: the first voter set, which a node that joined later knows
        # only from the log (a target matters only where it leads: it is then a voter).
        born = list(voters) if self.joined else self.first_voters
        target = node.image.membership.voter_target or born
        members = metadata_members(
            node_id=node.node_id,
            brokers=node.all_nodes,
            voters=voters,
            target=target,
            linked=node.transport.links,
            unregistered=node.image.membership.unregistered,
        )
        return self.first_voters, members, tuple(NodeId(n) for n in target)

    def hand_members(self) -> None:
        """The metadata runner takes the members and target of now, when they changed."""
        runner = self.node.hosting(self.node.metadata_key)
        if runner is None:
            return
        _, members, target = self.metadata_shape()
        if self.handed != (members, target):
            if self.handed is not None:
                log.info("metadata quorum: members %s, voter target %s", members, target)
            self.handed = (members, target)
            runner.submit(SetMembers(members, target))

    def controller_told(self) -> int:
        """The controller a PeersNotice named, while this node's replica knows none."""
        return -1 if self.told_controller is None else int(self.told_controller)

    # ---------------------------------------------------------------- each round -------
    def step(self) -> None:
        """Learn links, hand the members over, then send this round's notices."""
        self.learn_links()
        self.hand_members()
        self.send_notices()
        self.write_target()

    def write_target(self) -> None:
        """The controller writes its committed voter set down as the target, once."""
        node = self.node
        runner = node.hosting(node.metadata_key)
        if runner is None:
            return
        status = runner.status()
        if (
            self.writing_target
            or node.image.membership.voter_target is not None
            or status.role is not Role.LEADER
            or not status.voters_committed
        ):
            return
        voters = sorted({int(key.node) for key in status.voters})
        self.writing_target = True

        async def write() -> None:
            try:
                await node.commit_metadata({"type": "voter_target", "voters": voters})
            finally:
                self.writing_target = False

        asyncio.get_running_loop().create_task(write())

    def learn_links(self) -> None:
        node = self.node
        transport = node.transport
        now = time.monotonic()
        unregistered = node.image.membership.unregistered
        for peer in [peer for peer in transport.links if peer in unregistered]:
            if now - self.heard_at.get(peer, 0.0) > UNREGISTERED_SILENT_S:
                log.info("node %d is unregistered and silent: no more link to it", peer)
                transport.remove_link(peer)
        for peer, address in self.peer_addresses().items():
            if peer not in transport.links and peer != node.node_id:
                log.info("learned node %d at %s", peer, format_address(address))
                transport.add_link(peer, address)

    def peer_addresses(self) -> dict[NodeId, Address]:
        """Each broker's peer address: its registration's, else this node's --peers'."""
        image = self.node.image
        addresses = {NodeId(n): a for n, a in self.node.config.peers.items()}
        addresses.update({NodeId(n): a for n, a in image.membership.peers.items()})
        return {
            n: a
            for n, a in addresses.items()
            if n not in image.membership.unregistered or n == self.node.node_id
        }

    def notice_to(self, peer: NodeId) -> BrokerNotice:
        """Our advertised Kafka listeners, our admin port, and where we are dialled."""
        config = self.node.config
        admin = config.admin_listen
        return BrokerNotice(
            self.node.node_id,
            peer,
            Epoch(0),
            stopping=self.node.node_id in self.node.stopping_nodes,
            admin_port=0 if admin is None else admin[1],
            listeners=tuple(str(each).encode() for each in config.advertised_listeners),
            peer=(format_address(config.peers[config.node_id]).encode(),),
        )

    def send_notices(self) -> None:
        node = self.node
        self.rounds += 1
        if self.rounds % BROKER_NOTICE_EVERY == 1 or node.node_id in node.stopping_nodes:
            others = sorted({*node.all_nodes, *node.transport.links} - {node.node_id})
            node.transport.send(node.metadata_key, [self.notice_to(peer) for peer in others])
        brokers = node.all_nodes
        for runner in node.noticed:  # the partitions awake, and those that fell asleep
            if not runner.leading:
                continue
            status = runner.status()
            told = [n for n in brokers if n not in status.replicas]
            if told:
                node.transport.send(
                    runner.key, [LeaderNotice(node.node_id, n, status.epoch) for n in told]
                )

    # ---------------------------------------------------------------- peer messages ----
    def on_notice(self, peer: NodeId, msg: BrokerNotice) -> None:
        """A node's notice: its listeners, admin port and stopping; its link, if new; and
        the peers known here, if it is no registered broker (it joins)."""
        node = self.node
        self.heard_at[peer] = time.monotonic()
        for protocol, address in msg.addresses().items():
            node.listener_addresses.setdefault(protocol, {})[peer] = address
        if msg.admin_port:
            node.admin_ports[peer] = msg.admin_port
        else:
            node.admin_ports.pop(peer, None)
        if msg.stopping:
            node.stopping_nodes.add(peer)
        else:
            node.stopping_nodes.discard(peer)
        dialled = msg.peer_address()
        if dialled is not None and peer not in node.transport.links:
            log.info("node %d announced itself at %s", peer, format_address(dialled))
            node.transport.add_link(peer, dialled)
            self.hand_members()
        if peer not in node.image.incarnations:
            self.tell_peers(peer)

    def tell_peers(self, peer: NodeId) -> None:
        controller = self.node.controller_id()
        entries = tuple(
            f"{n}@{format_address(a)}".encode() for n, a in sorted(self.peer_addresses().items())
        )
        notice = PeersNotice(
            self.node.node_id,
            peer,
            NodeId(controller) if controller >= 0 else None,
            entries,
        )
        self.node.transport.send(self.node.metadata_key, [notice])

    def on_peers_notice(self, msg: PeersNotice) -> None:
        """The peers a node knows: links to those unknown here, and its controller."""
        transport = self.node.transport
        for peer, address in msg.addresses().items():
            if peer not in transport.links and peer != self.node.node_id:
                log.info("told of node %d at %s", peer, format_address(address))
                transport.add_link(peer, address)
        if msg.controller is not None:
            self.told_controller = msg.controller
        self.hand_members()
