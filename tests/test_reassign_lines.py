"""`tidelog partitions reassign --list/--status`'s lines (tools/reassign_cmd.py): Kafka's,
and for each new copy how far behind it is and, once it grew, about how long it has to go."""

from __future__ import annotations

from tidelog.tools.reassign_cmd import list_lines

MOVES = {("t", 0): {"replicas": [2, 3, 4, 1], "adding_replicas": [4], "removing_replicas": [1]}}


def test_the_lines_name_each_moves_replicas_and_each_new_copys_progress() -> None:
    lags = {
        ("t", 0): [
            {"node": 4, "leader": 2, "lag_offsets": 120, "lag_bytes": 8213, "eta_s": 4.1},
        ]
    }
    assert list_lines(MOVES, lags) == [
        "Current partition reassignments:",
        "t-0: replicas: 2,3,4,1. adding: 4. removing: 1.",
        "  node 4: 120 offsets and 8213 bytes behind the leader (node 2), about 4.1 s to go",
    ]


def test_what_is_not_known_is_a_dash_and_no_eta() -> None:
    lags = {("t", 0): [{"node": 4, "leader": 2, "lag_offsets": None, "lag_bytes": 10}]}
    assert list_lines(MOVES, lags)[-1] == (
        "  node 4: - offsets and 10 bytes behind the leader (node 2)"
    )
    assert list_lines({}) == ["No partition reassignments found."]
