"""The live page's picture (`server/cluster_view.py`): nodes' statuses in, one value out;
and the door a peer's answer passes (`checked_status`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidelog.server.cluster_view import DOWN_AFTER_MS, Heard, checked_status, picture
from tidelog.status import AdminAccess
from tidelog.tools.cluster import page_url


def replica(node: int, *, role: str, epoch: int, hwm: int, log_end: int) -> dict[str, Any]:
    return {
        "topic": "t",
        "partition": 0,
        "role": role,
        "leader": 1 if role == "leader" else None,
        "epoch": epoch,
        "hwm": hwm,
        "log_start_offset": 2,
        "log_end_offset": log_end,
        "replicas": [1, 2, 3],
        "isr": [1, 2, 3] if role == "leader" else [],
    }


def status(node: int, *partitions: dict[str, Any], groups: Any = ()) -> dict[str, Any]:
    return {"node_id": node, "ready": True, "partitions": list(partitions), "groups": list(groups)}


def committed(group: str, offset: int) -> dict[str, Any]:
    return {"group": group, "topic": "t", "partition": 0, "committed_offset": offset}


NODES = {1: "127.0.0.1:1", 2: "127.0.0.1:2", 3: None}


def test_the_leader_says_the_hwm_and_a_silent_node_is_down_with_its_last_values() -> None:
    heard = {
        1: Heard(status(1, replica(1, role="leader", epoch=4, hwm=10, log_end=12)), 5_000),
        2: Heard(status(2, replica(2, role="follower", epoch=4, hwm=9, log_end=11)), 5_000),
        # Node 3 last answered long ago, as a follower that had 7 records.
        3: Heard(status(3, replica(3, role="follower", epoch=3, hwm=7, log_end=7)), 1_000),
    }
    value = picture(node_id=1, nodes=NODES, heard=heard, now_ms=5_000, at_wall_ms=0)
    assert [(n["node_id"], n["up"]) for n in value["nodes"]] == [(1, True), (2, True), (3, False)]
    [topic] = value["topics"]
    [row] = topic["partitions"]
    assert (row["leader"], row["epoch"], row["hwm"], row["isr"]) == (1, 4, 10, [1, 2, 3])
    shown = {r["node_id"]: (r["up"], r["log_end_offset"]) for r in row["replicas"]}
    assert shown == {1: (True, 12), 2: (True, 11), 3: (False, 7)}


def test_without_an_up_leader_no_leader_and_the_largest_hwm_of_the_up_replicas() -> None:
    heard = {
        1: Heard(status(1, replica(1, role="leader", epoch=4, hwm=30, log_end=30)), 0),
        2: Heard(status(2, replica(2, role="candidate", epoch=5, hwm=20, log_end=25)), 9_000),
    }
    value = picture(node_id=2, nodes=NODES, heard=heard, now_ms=9_000, at_wall_ms=0)
    [row] = value["topics"][0]["partitions"]
    assert (row["leader"], row["epoch"], row["hwm"], row["isr"]) == (None, None, 20, None)
    # Node 3 never answered: its replica is drawn as unknown.
    assert [(r["node_id"], r["known"]) for r in row["replicas"]] == [
        (1, True),
        (2, True),
        (3, False),
    ]


def test_a_groups_lag_is_that_of_groups_describe_from_the_up_coordinators() -> None:
    leader = replica(1, role="leader", epoch=1, hwm=10, log_end=10)
    heard = {
        # Node 1 coordinates now; node 2 did before (its report is older, smaller).
        1: Heard(status(1, leader, groups=[committed("a", 4), committed("b", 0)]), 100),
        2: Heard(status(2, groups=[committed("a", 3), committed("c", 1)]), 100),
        3: Heard(status(3, groups=[committed("gone", 1)]), 100 - DOWN_AFTER_MS),
    }
    value = picture(node_id=1, nodes=NODES, heard=heard, now_ms=100, at_wall_ms=0)
    [row] = value["topics"][0]["partitions"]
    # lag = HWM - max(committed, log start); the down node's groups are not shown.
    assert row["groups"] == [
        {"group": "a", "committed_offset": 4, "lag": 6},
        {"group": "b", "committed_offset": 0, "lag": 8},
        {"group": "c", "committed_offset": 1, "lag": 8},
    ]


def test_a_groups_lag_ends_at_the_leaders_data_end_not_its_control_batches() -> None:
    """lag = data end - max(committed, log start): the control batches the leaders of
    epochs 2 and 3 appended after the group stopped at 8 do not count; a node of an older
    version (no data_end) counts to its HWM."""
    leader = dict(replica(1, role="leader", epoch=3, hwm=10, log_end=10), data_end=8)
    follower = dict(replica(2, role="follower", epoch=3, hwm=10, log_end=10), data_end=8)
    groups = [committed("done", 8), committed("behind", 5), committed("ahead", 9)]
    heard = {1: Heard(status(1, leader, groups=groups), 100), 2: Heard(status(2, follower), 100)}
    value = picture(node_id=1, nodes=NODES, heard=heard, now_ms=100, at_wall_ms=0)
    [row] = value["topics"][0]["partitions"]
    assert (row["hwm"], row["data_end"]) == (10, 8)
    assert {g["group"]: g["lag"] for g in row["groups"]} == {"done": 0, "behind": 3, "ahead": 0}

    # Without an up leader: the data end of the replica whose HWM is shown.
    del heard[1]
    value = picture(node_id=2, nodes=NODES, heard=heard, now_ms=100, at_wall_ms=0)
    [row] = value["topics"][0]["partitions"]
    assert (row["leader"], row["hwm"], row["data_end"]) == (None, 10, 8)

    older = replica(1, role="leader", epoch=3, hwm=10, log_end=10)  # no data_end
    heard = {1: Heard(status(1, older, groups=groups), 100)}
    value = picture(node_id=1, nodes=NODES, heard=heard, now_ms=100, at_wall_ms=0)
    [row] = value["topics"][0]["partitions"]
    assert {g["group"]: g["lag"] for g in row["groups"]} == {"done": 2, "behind": 5, "ahead": 1}


def test_internal_topics_come_last() -> None:
    rows = [
        dict(replica(1, role="leader", epoch=1, hwm=0, log_end=0), topic=name)
        for name in ("zeta", "__consumer_offsets", "alpha")
    ]
    heard = {1: Heard(status(1, *rows), 0)}
    value = picture(node_id=1, nodes={1: None}, heard=heard, now_ms=0, at_wall_ms=0)
    assert [t["topic"] for t in value["topics"]] == ["alpha", "zeta", "__consumer_offsets"]


GOOD = status(2, replica(2, role="leader", epoch=1, hwm=1, log_end=1), groups=[committed("g", 0)])


@pytest.mark.parametrize(
    "answer",
    [
        None,
        [],
        "status",
        dict(GOOD, node_id=3),  # another node's status
        dict(GOOD, partitions={}),
        dict(GOOD, partitions=[dict(GOOD["partitions"][0], hwm="1")]),
        dict(GOOD, partitions=[dict(GOOD["partitions"][0], hwm=True)]),
        dict(GOOD, partitions=[dict(GOOD["partitions"][0], replicas=[1, "2"])]),
        dict(GOOD, partitions=[{"topic": "t"}]),
        dict(GOOD, partitions=[dict(GOOD["partitions"][0], data_end="1")]),
        dict(GOOD, partitions=[dict(GOOD["partitions"][0], data_end=False)]),
        dict(GOOD, partitions=[dict(GOOD["partitions"][0], data_end=2)]),  # past the HWM
        dict(GOOD, groups=[{"group": "g"}]),
        dict(GOOD, groups=None),
    ],
)
def test_a_peer_answer_that_is_no_status_of_that_node_counts_as_none(answer: object) -> None:
    assert checked_status(GOOD, 2) is GOOD
    with_data_end = dict(GOOD, partitions=[dict(GOOD["partitions"][0], data_end=0)])
    assert checked_status(with_data_end, 2) is with_data_end
    assert checked_status(answer, 2) is None


def test_the_url_of_a_secure_cluster_carries_its_token_in_the_fragment() -> None:
    assert page_url("127.0.0.1:9292", AdminAccess()) == "http://127.0.0.1:9292/"
    secure = AdminAccess(ca=None, token="s3cret/+")
    assert page_url("h:1", secure) == "http://h:1/#token=s3cret%2F%2B"
    assert page_url("h:1", AdminAccess(ca=Path("ca.crt"), token="t")).startswith("https://")
