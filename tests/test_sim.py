"""The randomized simulator inside the test suite: seeds of 3, 4 and 5 replicas, 0 violations."""

from __future__ import annotations

import itertools
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

import pytest

from tidelog.core.quiesce import Quiescence
from tidelog.core.replica import Role
from tidelog.testing import sim
from tidelog.types import NO_DIRECTORY

SEEDS_3 = 150
SEEDS_4 = 40
SEEDS_5 = 60
DISK_SEEDS_3 = 50
DISK_SEEDS_5 = 20


@pytest.mark.parametrize(
    ("replicas", "seeds", "disk"),
    [
        (3, SEEDS_3, False),
        (4, SEEDS_4, False),
        (5, SEEDS_5, False),
        (3, DISK_SEEDS_3, True),
        (5, DISK_SEEDS_5, True),
    ],
    ids=["memory-3", "memory-4", "memory-5", "disk-3", "disk-5"],
)
def test_simulator_finds_no_violation(
    replicas: int, seeds: int, disk: bool, workers: ProcessPoolExecutor
) -> None:
    """With `disk`, every log is the real disk log on a file system that loses unsynced
    bytes, tears writes, fails fsyncs and writes, and flips bits in committed batches."""
    numbers = range(1, seeds + 1)
    results = workers.map(sim.run_seed, numbers, itertools.repeat(sim.Mode(replicas, 400, disk)))
    failures = {
        seed: result.violations
        for seed, result in zip(numbers, results, strict=True)
        if result.violations
    }
    assert failures == {}


def test_a_new_leader_ignores_answers_to_requests_of_an_earlier_term() -> None:
    """Disk seed 5007: node 3 led epoch 1, restarted (its request seqs begin again at 0),
    and leads epoch 2; an answer to one of its epoch-1 requests, delayed 230 ticks and
    stamped with the follower's epoch 2, carried a seq above its new probe's. Taken as the
    probe's answer, it named a loss the follower had long made good (LostCopyMonitor)."""
    assert sim.run_seed(5007, sim.Mode(3, 400, True)).violations == []


def test_a_follower_that_sets_damage_aside_again_while_repairing_is_forgotten_again() -> None:
    """Disk seed 3 flips a bit in node 3, which sets damage aside and repairs; while its
    leader, knowing so, counts a match for it again, a second bit flips below that match
    (scenario 16, repaired twice). The leader's probe hears the shorter log and forgets
    the match again: a leader that kept it would count records node 3 no longer holds
    (`Checker.check_matches`)."""
    run = sim.Run(3, 3, 400, disk=True)
    assert run.run().violations == []
    assert run.faults.reflips >= 1


def test_a_consumer_names_at_least_the_epoch_it_read() -> None:
    """Seed 674: a consumer read epoch 2 from node 1; node 1 crashed, and the only live
    node calling itself leader was node 3, deposed in epoch 1 and never told (no
    check-quorum). A consumer's leader epoch never goes back (KIP-320): it names epoch 2,
    and node 3 fences it, rather than answering that epoch 2 ends where its own log does."""
    assert sim.run_seed(674, sim.Mode(3, 400)).violations == []


def test_a_timeout_now_is_judged_in_its_own_epoch() -> None:
    """Seed 1904 (5 replicas): node 1, leading epoch 5, was paused with a transfer to 3
    waiting; on waking it sent TimeoutNow (3's answers said it held the whole log) and, in
    the same inputs, learnt of epoch 6, in which 3 had already truncated that tail. The
    TimeoutNow of epoch 5 reaches a replica of epoch 6, which ignores it: no violation."""
    assert sim.run_seed(1904, sim.Mode(5, 400)).violations == []


@pytest.mark.parametrize("classic", [False, True], ids=["full", "classic"])
def test_a_run_is_decided_by_its_seed(classic: bool) -> None:
    """Every event, in order, and what was found: the same twice."""
    first_events: list[str] = []
    second_events: list[str] = []
    first = sim.Run(42, 3, 200, trace=first_events.append, classic=classic)
    second = sim.Run(42, 3, 200, trace=second_events.append, classic=classic)
    assert first.run() == second.run()
    assert first_events == second_events
    assert first.checker.committed_end == second.checker.committed_end > 0
    assert first.workload.acked_all == second.workload.acked_all > 0


def test_the_classic_model_draws_the_classic_settings() -> None:
    """No drift, no late messages, no retention: the settings of the model before."""
    settings = sim.Run(3000308, 3, 400, classic=True).settings
    assert (settings.pre_vote, settings.check_quorum, settings.min_insync_replicas) == (
        True,
        True,
        None,
    )
    assert {clock.rate_ppm for clock in settings.clocks} == {1_000_000}
    assert settings.long_delay_rate == settings.replay_rate == settings.retention_rate == 0


def test_a_disk_run_is_decided_by_its_seed() -> None:
    first: list[str] = []
    second: list[str] = []
    sim.Run(7, 5, 150, disk=True, trace=first.append).run()
    sim.Run(7, 5, 150, disk=True, trace=second.append).run()
    assert first == second


def test_the_command_line_ends_with_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim.main(["--seeds", "3", "--ticks", "100"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 seeds, 0 violations"


def test_trace_prints_the_events_of_a_seed(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim.main(["--seeds", "1", "--first-seed", "2", "--ticks", "60", "--trace"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("t=0 settings Settings(replicas=3, ")
    assert any(" deliver AppendRequest " in line for line in lines)
    assert any(" leader e1 " in line for line in lines)
    assert lines[-1] == "1 seeds, 0 violations"


def test_a_violation_prints_the_command_that_reproduces_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def made_up(seed: int, mode: sim.Mode, trace: bool) -> sim.SeedResult:
        del seed, trace
        return sim.SeedResult(["made up"], {"EIO": 1} if mode.disk else {})

    monkeypatch.setattr(sim, "run_seed", made_up)
    argv = ["--seeds", "1", "--first-seed", "9", "--jobs", "1", "--disk", "--faults", "classic"]
    assert sim.main(argv) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "seed 9: made up  (reproduce: python -m tidelog.testing.sim --seeds 1 "
        "--first-seed 9 --replicas 3 --ticks 400 --disk --faults classic)"
    )
    assert out[1].startswith("# nodes stopped by a failed fsync (EIO): 1, ")
    assert out[-1] == "1 seeds, 1 violations"


@pytest.mark.parametrize(
    "argv",
    [
        ["--seeds", "0"],
        ["--replicas", "6"],
        ["--ticks", "-1"],
        ["--seeds", "2", "--trace"],
        ["--faults", "some"],
        ["--quiesce", "--mode", "isr"],
        ["--quiesce", "--faults", "classic"],
        ["--quiesce", "--moves"],
    ],
)
def test_bad_flags_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        sim.main(argv)
    assert exit_info.value.code == 2


def test_four_replicas_need_three_for_a_majority() -> None:
    """An even count: the seed's quorum is 3 of 4 (or min.insync.replicas 4 of 4)."""
    quorums = {sim.Run(seed, 4, 100).settings.quorum_size for seed in range(20)}
    assert quorums == {3, 4}
    assert sim.main(["--seeds", "2", "--replicas", "4", "--ticks", "100"]) == 0


def test_the_odd_clients_play_in_some_seeds_and_are_refused() -> None:
    """Sequence gaps, duplicates and OffsetForLeaderEpoch are asked in about half the
    seeds (odd_clients.py); in the others, and in the classic model, no odd client plays."""
    runs = [sim.Run(seed, 3, 400) for seed in range(1, 13)]
    results = [run.run() for run in runs]
    assert all(not result.violations for result in results)
    odd = [run.workload.odd for run in runs if run.workload.odd is not None]
    assert 0 < len(odd) < len(runs)
    assert sum(clients.gaps for clients in odd) > 0
    assert sum(clients.duplicates for clients in odd) > 0
    assert sum(clients.epoch_ends for clients in odd) > 0
    assert sim.Run(3000308, 3, 100, classic=True).workload.odd is None


NAMING_SEEDS = 100


def test_leaders_name_their_voters_directories_and_replace_lost_copies(
    workers: ProcessPoolExecutor,
) -> None:
    """`sim --naming`: the first voter set names no directory; the leaders name them, then
    replace every copy lost with a disk, and no seed finds a violation."""
    numbers = range(1, NAMING_SEEDS + 1)
    mode = sim.Mode(3, 400, naming=True)
    results = list(workers.map(sim.run_seed, numbers, itertools.repeat(mode)))
    assert {s: r.violations for s, r in zip(numbers, results, strict=True) if r.violations} == {}
    assert sum(result.stops.get("wipes", 0) for result in results) > 0


def test_a_named_run_ends_with_every_copy_a_named_voter() -> None:
    run = sim.Run(3, 3, 400, naming=True)
    assert run.run().violations == []
    for replica in run.live().values():
        assert all(key.directory != NO_DIRECTORY for key in replica.voters)
        assert replica.is_voter()


MOVES_SEEDS = 60


@pytest.mark.parametrize("replicas", [3, 4])
def test_replica_sets_change_under_the_faults(workers: ProcessPoolExecutor, replicas: int) -> None:
    """`sim --moves`: a simulated controller moves the partition (new targets learned by
    each node on its own time: moves, cancels, replication factors up and down) while the
    faults play; KRaft's membership invariants hold at every step, no seed finds a
    violation, and every run ends with the leader's voters the last target."""
    numbers = range(1, MOVES_SEEDS + 1)
    mode = sim.Mode(replicas, 400, moves=True)
    results = list(workers.map(sim.run_seed, numbers, itertools.repeat(mode)))
    assert {s: r.violations for s, r in zip(numbers, results, strict=True) if r.violations} == {}


def test_a_moved_run_ends_on_its_last_target() -> None:
    run = sim.Run(5, 4, 400, moves=True)
    assert run.run().violations == []
    mover = run.mover
    assert mover is not None and mover.changes > 0
    leader = next(r for r in run.live().values() if r.role is Role.LEADER)
    assert sorted(leader.voters.nodes) == sorted(mover.target)
    assert all(not r.config.target or r.config.target == mover.target for r in run.live().values())


QUIESCE_SEEDS = 40
DEAD_LEADER_SEED = 5


@pytest.mark.parametrize(("replicas", "seeds"), [(3, QUIESCE_SEEDS), (5, QUIESCE_SEEDS // 2)])
def test_idle_partitions_quiesce_and_wake_under_the_faults(
    workers: ProcessPoolExecutor, replicas: int, seeds: int
) -> None:
    """`sim --quiesce`: every replica quiesces its idle partition over node liveness, under
    every fault and those aimed at quiesced leaders; no seed finds a violation, and the
    partitions did sleep and wake (some slowly), lose their leader's node while asleep,
    and elect a leader again."""
    numbers = range(1, seeds + 1)
    mode = sim.Mode(replicas, 400, quiesce=True)
    results = list(workers.map(sim.run_seed, numbers, itertools.repeat(mode)))
    assert {s: r.violations for s, r in zip(numbers, results, strict=True) if r.violations} == {}
    counts: Counter[str] = Counter()
    for result in results:
        counts.update(result.stops)
    assert counts["quiesces"] > 5 * seeds
    assert counts["wakes"] > 5 * seeds and counts["slow wakes"] > 0
    assert counts["stranded"] > 0 and counts["re-elected"] > 0


def test_a_quiesced_run_is_decided_by_its_seed() -> None:
    first: list[str] = []
    second: list[str] = []
    one = sim.Run(3, 3, 200, quiesce=True, trace=first.append)
    other = sim.Run(3, 3, 200, quiesce=True, trace=second.append)
    assert one.run() == other.run()
    assert first == second
    assert any(line.endswith(" quiesced") for line in first)
    assert any(line.endswith(" wakes slowly") for line in first)
    assert any(", a quiesced leader" in line for line in first)


def test_the_quiesce_summary_counts_sleeps_wakes_and_stranded_partitions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert sim.main(["--seeds", "2", "--ticks", "200", "--quiesce"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith("# leaders quiesced: ")
    assert "quiesced under a leader gone down: " in out[-2]
    assert out[-1] == "2 seeds, 0 violations"


def test_a_dead_leader_s_sleeping_followers_never_woken_fail_their_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The liveness bound (`QuiescedLeaderMonitor`): when node liveness's word is lost (a
    dead node's partitions are never woken, the mutant `dead-node-partitions-never-woken`),
    seed DEAD_LEADER_SEED strands a quiesced partition, and fails on it."""
    monkeypatch.setattr(Quiescence, "on_node_change", lambda self, node: None)
    violations = sim.Run(DEAD_LEADER_SEED, 3, 400, quiesce=True).run().violations
    assert any("none campaigned" in v or "none leads" in v for v in violations), violations
