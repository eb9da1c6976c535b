"""Who belongs to the cluster, in the metadata image (server/members.py), and the join
rules of a node (server/joining.py, server/config.py): each node applies the same log, so
each test applies commands and reads the image; the broker's part is tested live
(tests/test_join_live.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tidelog.errors import ConfigError, MetadataError, StorageError
from tidelog.protocol.peer import (
    BrokerNotice,
    PartitionKey,
    PeerDecoder,
    PeerEncoder,
    PeersNotice,
)
from tidelog.server.config import load_config
from tidelog.server.joining import FIRST_VOTERS_FILE, first_voters
from tidelog.server.members import metadata_members
from tidelog.server.metadata import MetadataImage, encode_command
from tidelog.types import Epoch, NodeId

FIRST = [1, 2, 3]  # the voters every command names as committed, while no target is set


class Log:
    """A metadata image fed commands at increasing offsets; nodes 1-3 registered, each at
    127.0.0.1:920N, and topic t on them."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.offset = 0
        for node in (1, 2, 3):
            self.register(node)
        self.apply(type="create_topic", name="t", replicas=[[1, 2, 3]])

    def apply(self, **fields: Any) -> None:
        self.image.apply(self.offset, encode_command(fields))
        self.offset += 1

    def register(self, node: int, **fields: Any) -> None:
        given = {"peer": f"127.0.0.1:{9200 + node}", **fields}
        self.apply(
            type="register_broker",
            node=node,
            clean=True,
            incarnation=f"i{node}-{self.offset}",
            directory=100 + node,
            **given,
        )

    def check(self, kind: str, **fields: Any) -> str | None:
        """The Kafka error name the door answers `kind` with, or None."""
        try:
            self.image.membership.check(kind, {"type": kind, **fields}, self.image)
        except MetadataError as error:
            return error.code
        return None

    @property
    def target(self) -> tuple[int, ...] | None:
        return self.image.membership.voter_target


def test_registrations_name_each_broker_and_its_peer_address() -> None:
    log = Log()
    log.register(4)
    members = log.image.membership
    assert members.peers == {n: ("127.0.0.1", 9200 + n) for n in (1, 2, 3, 4)}
    assert members.brokers(log.image, static=[1, 2, 3]) == (1, 2, 3, 4)
    assert members.brokers(log.image, static=[1, 2, 3, 5]) == (1, 2, 3, 4, 5)


def test_a_registration_naming_no_host_to_dial_changes_nothing() -> None:
    log = Log()
    for peer in ("0.0.0.0:9300", "nowhere", 7):
        log.register(5, peer=peer)  # type: ignore[arg-type]
    assert 5 not in log.image.incarnations
    assert 5 not in log.image.membership.peers


def test_voters_move_one_node_at_a_time_from_the_first_set() -> None:
    log = Log()
    log.register(4)
    assert log.target is None  # the first voter set, as long as nobody changed it
    log.apply(type="add_voter", node=4, directory=104, voters=FIRST)
    assert log.target == (1, 2, 3, 4)
    # A later command's `voters` (what its proposer saw committed) no longer counts.
    log.apply(type="remove_voter", node=1, directory=0, voters=[2, 3])
    assert log.target == (2, 3, 4)
    log.apply(type="remove_voter", node=2, voters=[2, 3, 4])
    log.apply(type="remove_voter", node=3, voters=[3, 4])
    assert log.target == (4,)
    log.apply(type="remove_voter", node=4, voters=[4])  # the last voter: not applied
    assert log.target == (4,)


def test_the_first_controller_writes_its_voters_down_once() -> None:
    log = Log()
    log.apply(type="voter_target", voters=[1, 2, 3])
    assert log.target == (1, 2, 3)
    log.apply(type="voter_target", voters=[1, 2])  # a later controller's: changes nothing
    assert log.target == (1, 2, 3)
    log.apply(type="voter_target", voters=[])  # no voter set: not applied
    assert log.target == (1, 2, 3)


def test_voter_changes_get_kafkas_errors_at_the_door() -> None:
    log = Log()
    log.register(4)
    assert log.check("add_voter", node=3, voters=FIRST) == "DUPLICATE_VOTER"
    assert log.check("add_voter", node=9, voters=FIRST) == "INVALID_REQUEST"  # unregistered
    assert log.check("add_voter", node=4, directory=7, voters=FIRST) == "INVALID_REQUEST"
    assert log.check("add_voter", node=4, directory=104, voters=FIRST) is None
    assert log.check("add_voter", node=4, voters=FIRST) is None  # its registered directory
    assert log.check("remove_voter", node=4, voters=FIRST) == "VOTER_NOT_FOUND"
    assert log.check("remove_voter", node=2, directory=7, voters=FIRST) == "VOTER_NOT_FOUND"
    assert log.check("remove_voter", node=2, directory=102, voters=FIRST) is None
    assert log.check("remove_voter", node=1, voters=[1]) == "INVALID_REQUEST"  # the last
    for bad in ({"node": -1}, {"node": True}, {"voters": []}, {"voters": [1, 1]}):
        assert log.check("add_voter", **{"node": 4, "voters": FIRST, **bad}) == "INVALID_REQUEST"


def test_unregistering_is_refused_for_a_voter_or_a_node_holding_replicas() -> None:
    log = Log()
    log.register(4)
    assert log.check("unregister_broker", node=2, voters=FIRST) == "INVALID_REQUEST"  # replicas
    log.apply(type="delete_topic", name="t")
    assert log.check("unregister_broker", node=2, voters=FIRST) == "INVALID_REQUEST"  # voter
    assert log.check("unregister_broker", node=9, voters=FIRST) == "BROKER_ID_NOT_REGISTERED"
    log.apply(type="fence_broker", node=4)
    log.apply(type="unregister_broker", node=4, voters=FIRST)
    image = log.image
    assert 4 not in image.incarnations and 4 not in image.directories
    assert 4 not in image.fenced and 4 not in image.membership.peers
    assert image.membership.brokers(image, static=[1, 2, 3, 4]) == (1, 2, 3)
    log.register(4)  # it comes back: a broker again
    assert image.membership.brokers(image, static=[1, 2, 3]) == (1, 2, 3, 4)


def test_metadata_members_hold_brokers_voters_and_linked_never_the_unregistered() -> None:
    members = metadata_members(
        node_id=NodeId(5),
        brokers=[1, 2, 3],
        voters=[1, 2, 6],
        target=[1, 2, 7],
        linked=[1, 4, 8],
        unregistered={4, 6},
    )
    assert members == (1, 2, 3, 4, 5, 6, 7, 8)  # 6 votes still; 4 left but runs; 8 joins
    unlinked = metadata_members(
        node_id=NodeId(5), brokers=[1, 2, 3, 4], voters=[1], target=[1], linked=[], unregistered={4}
    )
    assert unlinked == (1, 2, 3, 5)  # 4 left, and fell silent


def config(tmp_path: Path, peers: str, **flags: object) -> Any:
    given = {"node_id": 4, "data_dir": str(tmp_path), "listen": "127.0.0.1:9095", "peers": peers}
    return load_config({**given, **flags}, None)


def test_a_joining_node_is_born_an_observer_and_keeps_its_first_voters(tmp_path: Path) -> None:
    joined = config(tmp_path, "2@127.0.0.1:9202,4@127.0.0.1:9204", join=True)
    assert first_voters(joined) == ((2,), True)  # never itself
    # Started again with every node in --peers and no --join: the kept set holds.
    later = config(tmp_path, "1@h:1,2@h:2,3@h:3,4@127.0.0.1:9204")
    assert first_voters(later) == ((2,), True)
    (tmp_path / FIRST_VOTERS_FILE).write_text(json.dumps({"voters": [], "joined": False}))
    with pytest.raises(StorageError, match="names no voter set"):
        first_voters(later)


def test_a_first_node_is_born_a_voter_among_all_its_peers(tmp_path: Path) -> None:
    born = config(tmp_path, "1@h:1,2@h:2,3@h:3,4@127.0.0.1:9204")
    assert first_voters(born) == ((1, 2, 3, 4), False)


def test_join_needs_another_node_to_join_through(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--join: --peers names no node of the cluster"):
        config(tmp_path, "4@127.0.0.1:9204", join=True)


def test_notices_carry_the_peer_address_and_the_peers_known() -> None:
    notice = BrokerNotice(NodeId(4), NodeId(1), Epoch(0), peer=(b"10.0.0.4:9192",))
    peers = PeersNotice(NodeId(1), NodeId(4), NodeId(2), (b"1@10.0.0.1:9192", b"2@h2:9192"))
    frame = PeerEncoder(node_id=NodeId(1), cluster_id="c").encode_frame(
        [(PartitionKey("__cluster_metadata", 0), peers)]
    )
    decoder = PeerDecoder(cluster_id="c")
    decoder.receive_data(PeerEncoder(node_id=NodeId(1), cluster_id="c").encode_handshake())
    decoder.receive_data(frame)
    decoder.next_frame()  # the handshake
    [(_, decoded)] = decoder.next_frame()  # type: ignore[misc]
    assert decoded == peers
    assert notice.peer_address() == ("10.0.0.4", 9192)
    assert peers.addresses() == {1: ("10.0.0.1", 9192), 2: ("h2", 9192)}
    for bad in ((b"nowhere",), (b"h:1", b"h:2")):
        with pytest.raises(ValueError):
            BrokerNotice(NodeId(4), NodeId(1), Epoch(0), peer=bad)
    with pytest.raises(ValueError):
        PeersNotice(NodeId(1), NodeId(4), None, (b"x@h:1",))
