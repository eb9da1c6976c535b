"""The randomized simulator inside the test suite: seeds of 3 and 5 replicas, 0 violations."""

from __future__ import annotations

import pytest

from tidelog.testing import sim

SEEDS_3 = 150
SEEDS_5 = 60
DISK_SEEDS_3 = 50
DISK_SEEDS_5 = 20


@pytest.mark.parametrize(
    ("replicas", "seeds", "disk"),
    [(3, SEEDS_3, False), (5, SEEDS_5, False), (3, DISK_SEEDS_3, True), (5, DISK_SEEDS_5, True)],
    ids=["memory-3", "memory-5", "disk-3", "disk-5"],
)
def test_simulator_finds_no_violation(replicas: int, seeds: int, disk: bool) -> None:
    """With `disk`, every log is the real disk log on a file system that loses unsynced
    bytes and tears writes in crashes."""
    failures = {
        seed: found
        for seed in range(1, seeds + 1)
        if (found := sim.run_seed(seed, replicas, 400, disk))
    }
    assert failures == {}


def test_a_run_is_decided_by_its_seed() -> None:
    first = sim.Run(42, 3, 200)
    second = sim.Run(42, 3, 200)
    assert first.run() == second.run() == []
    assert first.checker.committed_end == second.checker.committed_end > 0
    assert first.workload.acked_all == second.workload.acked_all > 0


def test_the_command_line_ends_with_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim.main(["--seeds", "3", "--ticks", "100"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 seeds, 0 violations"


def test_a_violation_prints_the_command_that_reproduces_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sim, "run_seed", lambda seed, replicas, ticks, disk: ["made up"])
    assert sim.main(["--seeds", "1", "--first-seed", "9", "--jobs", "1"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "seed 9: made up  (reproduce: python -m tidelog.testing.sim --seeds 1 "
        "--first-seed 9 --replicas 3 --ticks 400)"
    )
    assert out[-1] == "1 seeds, 1 violations"


@pytest.mark.parametrize("argv", [["--seeds", "0"], ["--replicas", "4"], ["--ticks", "-1"]])
def test_bad_flags_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        sim.main(argv)
    assert exit_info.value.code == 2
