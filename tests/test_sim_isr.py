"""The randomized simulator in ISR mode (testing/isr_sim.py): replicas in ISR mode, led by a
simulated controller over faulty links, under every fault of the simulator; 0 violations."""

from __future__ import annotations

import itertools
from concurrent.futures import ProcessPoolExecutor

import pytest

from tidelog.testing import isr_sim, sim

MEMORY_SEEDS = 20
DISK_SEEDS = 8


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("replicas", "seeds", "disk"),
    [(3, MEMORY_SEEDS, False), (5, MEMORY_SEEDS // 2, False), (3, DISK_SEEDS, True)],
    ids=["memory-3", "memory-5", "disk-3"],
)
def test_isr_mode_finds_no_violation(
    replicas: int, seeds: int, disk: bool, workers: ProcessPoolExecutor
) -> None:
    numbers = range(1, seeds + 1)
    mode = sim.Mode(replicas, 300, disk, isr=True)
    results = list(workers.map(sim.run_seed, numbers, itertools.repeat(mode)))
    failures = {
        seed: result.violations
        for seed, result in zip(numbers, results, strict=True)
        if result.violations
    }
    assert failures == {}
    # The record exists before any node registered: a first registration taken for a
    # restart (rule 9) would empty the ISR of every seed. Without disk faults a partition
    # ends offline for good only when its last ISR and ELR members all restarted.
    offline = [
        seed for seed, result in zip(numbers, results, strict=True) if "offline" in result.stops
    ]
    assert disk or len(offline) <= seeds // 4, offline


def test_a_consumer_naming_the_record_s_epoch_is_fenced_from_a_deposed_leader() -> None:
    """Disk seed 4907: node 1, paused while it led epoch 1, still leads in its own eyes;
    the controller's record is at epoch 3, whose leader crashed. A consumer names the
    record's epoch (ISR followers hold it), so the deposed leader fences its
    OffsetForLeaderEpoch instead of telling it to truncate."""
    assert sim.run_seed(4907, sim.Mode(3, 400, True, isr=True)).violations == []


def test_a_leader_told_of_a_restart_on_a_replaced_disk_forgets_its_match() -> None:
    """Memory seed 51: node 2 restarts on an empty disk while 3 leads epoch 5. Once 3's
    record counts the restart it counts 2 only on answers to requests sent since (rule 9);
    keeping the match 2's previous incarnation reported (154) fails the seed."""
    result = sim.run_seed(51, sim.Mode(3, 400, isr=True))
    assert result.violations == []
    assert result.stops.get("wipes", 0) > 0


def test_a_replica_that_stops_before_its_give_up_is_durable_is_suspect_again() -> None:
    """Memory seed 1430: node 3 gave up its committed log to the unclean leader of epoch 9
    and took its first batch, then crashed before syncing: it came back with its old log
    and HWM. It serves nothing until it gives up again, and the checker, which had cleared
    it, holds it suspect once more."""
    assert sim.run_seed(1430, sim.Mode(3, 400, isr=True)).violations == []


def test_an_isr_run_is_decided_by_its_seed() -> None:
    first: list[str] = []
    second: list[str] = []
    sim.Run(42, 3, 150, trace=first.append, isr=True).run()
    sim.Run(42, 3, 150, trace=second.append, isr=True).run()
    assert first == second
    assert any("controller: elect" in line or "controller: alter" in line for line in first)


def test_isr_mode_draws_its_own_settings() -> None:
    """min.insync.replicas anywhere in 1..RF, no check-quorum, no bit flips."""
    drawn = {sim.Run(seed, 3, 100, isr=True).settings.min_insync_replicas for seed in range(40)}
    assert drawn == {1, 2, 3}
    run = sim.Run(5, 3, 100, disk=True, isr=True)
    assert not run.settings.check_quorum
    assert run.faults.corruption_rate == 0


def test_the_command_line_runs_isr_mode(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim.main(["--seeds", "2", "--ticks", "100", "--mode", "isr"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 seeds, 0 violations"


def test_a_replica_behind_the_leaders_log_start_has_not_converged() -> None:
    """Seed 7400781: the leader deleted every record (DeleteRecords) while node 2 was down;
    node 2 came back holding 185..208, which read from the leader's log start (488) is as
    empty as the leader's log. Taken for converged, the final check found the write at 208
    missing from node 2; the run goes on until node 2 has taken the leader's log start."""
    lines: list[str] = []
    result = sim.Run(7400781, 3, 400, trace=lines.append, isr=True).run()
    assert result.violations == []
    caught_up = next(i for i, line in enumerate(lines) if "node 2: follower e5 hwm=488" in line)
    assert any("DeleteRecords(488) on 1: log start 488" in line for line in lines[:caught_up])


def test_unclean_election_is_drawn_from_a_generator_of_its_own() -> None:
    """A share of the seeds allows unclean elections (rule 10), drawn apart from every
    other draw, so a seed that does not draw it runs as before; in memory and on disk
    alike. Those that do run no DeleteRecords and no retention (isr_sim.py)."""
    drawn = [seed for seed in range(1, 201) if isr_sim.draw_unclean(seed)]
    assert 30 <= len(drawn) <= 90
    unclean = sim.Run(drawn[0], 3, 100, isr=True)
    assert unclean.isr_settings.unclean
    assert unclean.settings.delete_rate == 0 and unclean.settings.retention_rate == 0
    assert sim.Run(drawn[0], 3, 100, disk=True, isr=True).isr_settings.unclean
    clean = next(seed for seed in range(1, 201) if seed not in drawn)
    assert not sim.Run(clean, 3, 100, isr=True).isr_settings.unclean


def test_a_seed_with_unclean_elections_runs_clean() -> None:
    """Memory seed 2 (3 replicas): two unclean elections; the second (node 1, epoch 9, on
    an empty log) loses committed offsets 0..79 and 27 acknowledged writes. Node 2, told
    of it with its HWM still at 80, must serve no read until a leader of epoch 9 checked
    its HWM (isr-unchecked-follower-serves-reads serves offset 0 of epoch 7 here); every
    replica is checked again afterwards, and the run converges after the heal."""
    lines: list[str] = []
    result = sim.Run(2, 3, 300, trace=lines.append, isr=True).run()
    assert result.violations == []
    assert result.stops.get("unclean") == 2
    assert result.stops.get("lost", 0) >= 27
    assert any("unclean election of 1: committed offsets 0..79 lost" in line for line in lines)
