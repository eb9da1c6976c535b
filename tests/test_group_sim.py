"""The group simulator: consumers against the real coordinator on every node of a
replicated `__consumer_offsets` partition, under the replication simulator's faults.

A bounded sweep here, on two worker processes (the mutation gate shows that its checks
catch a coordinator that serves before it has loaded, forgets generations, lets a stale
generation commit, deletes a group with members or answers a static member's zombie as
merely unknown); `make sim` runs thousands.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

import pytest

from tidelog.testing import group_sim


@pytest.mark.parametrize(
    ("replicas", "disk", "seeds"),
    [(3, False, range(1, 41)), (5, False, range(1, 16)), (3, True, range(1, 16))],
)
def test_no_seed_breaks_a_group_invariant(
    replicas: int, disk: bool, seeds: range, workers: ProcessPoolExecutor
) -> None:
    totals = {
        "commits acknowledged": 0,
        "fetches checked": 0,
        "assignments checked": 0,
        "member ids given first": 0,  # KIP-394's round trip, under the faults too
    }
    fenced = 0  # zombie commits of restarted static members, refused FENCED_INSTANCE_ID
    full = 0  # joins refused GROUP_MAX_SIZE_REACHED, in the seeds that cap the group
    non_empty = 0  # DeleteGroups refused NON_EMPTY_GROUP, in the seeds with an admin
    n = len(seeds)
    results = workers.map(group_sim.run_seed, seeds, [replicas] * n, [400] * n, [disk] * n)
    for seed, result in zip(seeds, results, strict=True):
        command = group_sim.reproduce_command(seed, replicas, 400, disk)
        assert result.violations == [], f"{result.violations[0]}  (reproduce: {command})"
        for key in totals:
            totals[key] += result.stops[key]
        fenced += result.stops["zombies fenced"]
        full += result.stops["refused at group.max.size"]
        non_empty += result.stops["deletes refused (members)"]
    # The sweep did what it claims: commits were acknowledged, read back, assignments
    # given, member ids given before the joins of consumers joining as at v4+.
    assert all(count > len(seeds) for count in totals.values()), totals
    assert fenced > 0, "no static member restarted and met its zombie"
    assert full > 0, "no seed capped the group below its consumers"
    assert non_empty > 0, "no admin asked to delete the group while it had members"


def test_a_group_found_empty_is_deleted_though_its_empty_generation_was_not_written() -> None:
    """Seed 1640: coordinator 3, paused, woke to find every member's session expired and
    wrote the empty generation, which failed (min.insync.replicas 3, one replica cut
    off); the group stayed empty, so a DeleteGroups was right to go on (as Kafka's does),
    though the last generation committed still named 3 members."""
    result = group_sim.run_seed(1640, 3, 400, False)
    assert result.violations == []
    assert result.stops["groups deleted"] == 1


def test_a_transfer_to_a_node_down_under_repair_is_no_violation() -> None:
    """Disk seed 234: node 2 set a damaged batch aside and stopped (ENOSPC) before it
    could tell leader 1, which still counted its whole log and sent it TimeoutNow. A
    replica that starts under repair never campaigns: the TimeoutNow changes nothing."""
    assert group_sim.run_seed(234, 3, 400, True).violations == []


def test_the_command_line_sums_up_the_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    assert group_sim.main(["--seeds", "3", "--first-seed", "7"]) == 0
    out = capsys.readouterr().out
    assert "3 seeds, 0 violations" in out
    assert "commits acknowledged" in out


def test_a_bad_flag_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        group_sim.main(["--seeds", "0"])
    assert stopped.value.code == 2
    assert "must be positive" in capsys.readouterr().err
