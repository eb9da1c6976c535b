"""A node's data directory id (KIP-858, server/data_dir.py) and the directories a partition
names at birth (server/metadata.py): each replica's copy as its node last registered it.
What the leaders do with a copy on a new directory is tested live
(test_repair_live.py's whole-data-directory test) and in core (scenarios 26-31)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tidelog.errors import StorageError
from tidelog.server.data_dir import CopiesHeld, node_directory_id
from tidelog.server.metadata import MetadataImage, encode_command
from tidelog.types import NO_DIRECTORY


class Log:
    def __init__(self) -> None:
        self.image = MetadataImage()
        self.offset = 0

    def apply(self, **fields: Any) -> None:
        self.image.apply(self.offset, encode_command(fields))
        self.offset += 1

    def register(self, node: int, directory: int | None, incarnation: str) -> None:
        fields: dict[str, Any] = {"node": node, "clean": False, "incarnation": incarnation}
        if directory is not None:
            fields["directory"] = directory
        self.apply(type="register_broker", **fields)


def test_the_data_directory_keeps_its_id_and_a_new_disk_gets_a_new_one(tmp_path: Path) -> None:
    data_dir = tmp_path / "node-1"
    first = node_directory_id(data_dir)
    assert first != NO_DIRECTORY and 0 < first < 1 << 63
    assert node_directory_id(data_dir) == first  # kept by every start
    shutil.rmtree(data_dir)
    data_dir.mkdir()
    assert node_directory_id(data_dir) not in (first, NO_DIRECTORY)


def test_an_unreadable_directory_id_stops_the_node(tmp_path: Path) -> None:
    (tmp_path / "directory-id").write_text("0\nnot a number\n")
    with pytest.raises(StorageError, match="malformed"):
        node_directory_id(tmp_path)


def test_a_partition_names_the_directories_registered_when_it_was_made() -> None:
    log = Log()
    log.register(1, 11, "a")
    log.register(2, 22, "a")
    log.apply(type="create_topic", name="t", replicas=[[1, 2, 3], [2, 3, 1]])
    info = log.image.topics["t"]
    # Node 3 had not registered: its copies are named by the leader later (naming).
    assert info.directories == ((11, 22, NO_DIRECTORY), (22, NO_DIRECTORY, 11))

    log.register(3, 33, "a")
    log.register(1, 111, "b")  # node 1 came back on a new disk
    log.apply(type="create_partitions", name="t", replicas=[[3, 1, 2]])
    info = log.image.topics["t"]
    assert info.directories[:2] == ((11, 22, NO_DIRECTORY), (22, NO_DIRECTORY, 11))
    assert info.directories[2] == (33, 111, 22)  # the partitions made before keep theirs


def test_a_registration_without_a_directory_keeps_the_one_known() -> None:
    log = Log()
    log.register(1, 11, "a")
    log.register(1, None, "b")  # a node of a build before the directory ids
    log.apply(type="create_topic", name="t", replicas=[[1]])
    assert log.image.topics["t"].directories == ((11,),)


@pytest.mark.parametrize("directory", [0, -1, 1 << 63, True, "11", 1.5])
def test_a_registration_with_an_impossible_directory_changes_nothing(directory: Any) -> None:
    log = Log()
    log.register(1, 11, "a")
    log.apply(type="register_broker", node=1, clean=False, incarnation="b", directory=directory)
    assert log.image.directories == {1: 11}
    assert log.image.incarnations == {1: "a"}


def test_a_copy_made_again_is_not_the_first_one(tmp_path: Path) -> None:
    """The partitions a data directory held are kept across starts: a copy of one it held
    before is a new copy (a random id), never the one its first voter set names."""
    held = CopiesHeld(tmp_path)
    assert held.claim("a1", 0) and held.claim("a1", 1) and held.claim("b2", 0)
    assert not held.claim("a1", 0)
    again = CopiesHeld(tmp_path)
    assert not again.claim("a1", 1) and not again.claim("b2", 0)
    assert again.claim("b2", 1)
    with (tmp_path / "copies-held").open("a") as file:
        file.write("c3 ")  # a claim torn by a crash: it never made the copy
    assert CopiesHeld(tmp_path).claim("c3", 0)
    assert not CopiesHeld(tmp_path).claim("c3", 0)


def test_copies_claimed_together_take_one_sync_and_each_is_fresh_once(tmp_path: Path) -> None:
    """A chunk of a new topic's copies is claimed with one sync (`claim_all`): each one's
    next `claim` says it is fresh (the first copy), the one after that says it is not,
    and a start after reads them all back as held."""
    held = CopiesHeld(tmp_path)
    assert held.claim("a1", 0)
    assert held.claim_all([("a1", 0), ("a1", 1), ("a1", 2)]) == {("a1", 1), ("a1", 2)}
    assert held.claim("a1", 1) and held.claim("a1", 2)
    assert not held.claim("a1", 1) and not held.claim("a1", 0)
    again = CopiesHeld(tmp_path)
    assert not any(again.claim("a1", partition) for partition in range(3))
