"""The mutation gate (`make mutants`): every mutant of the catalogue is caught, and caught
by a simulator seed (a transcript's catch alone is not enough).

The anchors are checked first, in a second, so a change to the core that moves one fails
fast and names the mutant to refit; then the whole gate runs (a few minutes on 2 cores).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidelog.testing import mutants
from tidelog.testing.mutant_checks import parse_sim, plan, seed_of
from tidelog.testing.mutants import (
    CATALOGUE,
    FIRST_SEEDS,
    PACKAGE,
    TRANSCRIPT_ONLY,
    AnchorError,
    Job,
    Mutant,
    Outcome,
    Report,
    checks_command,
    mutated_source,
    read_verdict,
    run_gate,
    seed_baseline_jobs,
    text_report,
)


def test_the_catalogue_names_at_least_twenty_distinct_mutants() -> None:
    names = [m.name for m in CATALOGUE]
    assert len(names) >= 20
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("mutant", CATALOGUE, ids=[m.name for m in CATALOGUE])
def test_each_anchor_occurs_exactly_once_and_the_mutant_compiles(mutant: Mutant) -> None:
    assert mutated_source(mutant, PACKAGE) != (PACKAGE / mutant.path).read_text()


def one_edit(path: str, old: str, new: str = "pass") -> Mutant:
    return Mutant("made-up", "a rule", path, old, new)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (one_edit("core/replica.py", "no such text anywhere"), "occurs 0 times in core/replica"),
        (one_edit("core/replica.py", "self.epoch"), "times in core/replica.py, not once"),
        (one_edit("testing/sim.py", "MICROS_PER_TICK = 10"), "outside"),
        (one_edit("core/config.py", "LEASE_MARGIN_TICKS: Final = 2", "LEASE_MARGIN ="), "compile"),
    ],
    ids=["missing", "ambiguous", "outside-core", "syntax"],
)
def test_a_mutant_that_does_not_apply_is_an_error_of_the_gate(edit: Mutant, message: str) -> None:
    with pytest.raises(AnchorError, match="made-up") as raised:
        mutated_source(edit, PACKAGE)
    assert message in str(raised.value)


def test_a_verdict_is_read_from_the_last_line() -> None:
    verdict = {"caught_by": "scenario x.txt", "also": ["y.txt"], "detail": "d", "checks": 1}
    stdout = "\n".join(json.dumps(line) for line in [{"check": "scenarios"}, verdict])
    outcome = read_verdict("m", stdout, "", "status 0", 1.0)
    assert outcome == Outcome("m", "scenario x.txt", "d", 1, 1.0, ("y.txt",))
    assert outcome.caught


def test_a_verdict_names_the_seed_that_caught_after_a_transcript() -> None:
    verdict = {
        "caught_by": "scenario x.txt",
        "also": [],
        "detail": "d",
        "checks": 7,
        "by_seed": "sim memory-4 seed 5",
        "seed_detail": "two leaders",
    }
    outcome = read_verdict("m", json.dumps(verdict), "", "status 0", 1.0)
    assert (outcome.by_seed, outcome.seed_detail) == ("sim memory-4 seed 5", "two leaders")
    assert outcome.caught and not outcome.transcripts_only


def test_a_run_that_died_is_caught_by_the_check_it_was_in() -> None:
    stdout = json.dumps({"check": "sim memory-3 seed 4"})
    outcome = read_verdict("m", stdout, "Segmentation fault", "status -11", 1.0)
    assert (outcome.caught_by, outcome.checks) == ("sim memory-3 seed 4", 1)
    assert outcome.by_seed == "sim memory-3 seed 4"
    assert "Segmentation fault" in outcome.detail
    in_transcripts = read_verdict("m", json.dumps({"check": "scenarios"}), "", "status -9", 1.0)
    assert in_transcripts.transcripts_only


def test_a_mutant_caught_by_transcripts_only_fails_the_gate() -> None:
    first, second = CATALOGUE[0], CATALOGUE[1]
    by_seed = Outcome(first.name, "scenario x.txt", "d", 9, 1.0, by_seed="sim memory-3 seed 2")
    by_transcript = Outcome(second.name, "scenario y.txt", "d", 9, 1.0)
    mutants_judged = [(first, by_seed), (second, by_transcript)]
    report = Report([Outcome("scenarios", None, "", 1, 1.0)], mutants_judged, 2, 2.0)
    assert report.caught == 2 and report.transcripts_only == [second.name]
    assert not report.passed
    text = text_report(report)
    assert f"caught by transcripts only: {second.name}" in text
    assert "2 of 2 mutants caught (1 by a simulator seed)" in text
    assert text.endswith("gate FAILED")
    weaker = Report(report.baseline, mutants_judged, 2, 2.0, seeds_required=False)
    assert weaker.passed


def test_the_excused_are_catalogued_and_exclude_the_blind_spots_closed() -> None:
    """TRANSCRIPT_ONLY names mutants of the catalogue, and none of those issue 41 gave a
    seed to: Figure 8, producers' sequences, even quorums, OffsetForLeaderEpoch, the group
    rules, repairing twice, ISR mode's restarts on an empty disk and rule 11."""
    assert {m.name for m in CATALOGUE} >= TRANSCRIPT_ONLY
    closed = {
        "figure-8",
        "out-of-order-sequence-accepted",
        "even-count-majority-too-small",
        "epoch-end-served-unchecked",
        "epoch-end-past-hwm",
        "delete-a-group-with-members",
        "static-member-unfenced",
        "repairing-twice-keeps-match",
        "isr-replica-counts-answers-from-before-a-restart",
        "isr-gives-up-without-unclean-election",
        "isr-unchecked-follower-serves-reads",
    }
    assert not closed & TRANSCRIPT_ONLY


def test_an_excused_mutant_a_seed_catches_must_come_off_the_list() -> None:
    """The list is empty since issue 41; the rule still holds for any name on it."""
    assert not TRANSCRIPT_ONLY
    excused = CATALOGUE[0]
    names = frozenset({excused.name})
    outcome = Outcome(
        excused.name, "sim memory-3 seed 1", "d", 2, 1.0, by_seed="sim memory-3 seed 1"
    )
    baseline = [Outcome("scenarios", None, "", 1, 1.0)]
    report = Report(baseline, [(excused, outcome)], 1, 1.0, excused=names)
    assert report.excused_caught_by_seed == [excused.name] and not report.passed
    assert f"take off TRANSCRIPT_ONLY: {excused.name}" in text_report(report)
    only_transcript = Outcome(excused.name, "scenario x.txt", "d", 1, 1.0)
    assert Report(baseline, [(excused, only_transcript)], 1, 1.0, excused=names).passed
    assert not Report(baseline, [(excused, only_transcript)], 1, 1.0).passed


def test_the_first_seeds_name_catalogued_mutants_and_run_before_the_plan() -> None:
    names = {m.name for m in CATALOGUE}
    assert set(FIRST_SEEDS) <= names - TRANSCRIPT_ONLY
    assert all(parse_sim(f"{mode}:{seed}") == (mode, seed) for mode, seed in FIRST_SEEDS.values())
    job = Job("m", None, None, (("memory-3", 2),), first=(("memory-5", 91),))
    assert checks_command(Path("copy"), job)[-4:] == [
        "--sim",
        "memory-3:2",
        "--first",
        "memory-5:91",
    ]
    labels = [check.label for check in plan(None, [("memory-3", 2)], first=[("memory-5", 91)])]
    assert labels == ["sim memory-5 seed 91", "sim memory-3 seed 1", "sim memory-3 seed 2"]


def test_the_seeds_run_on_after_a_transcript_caught() -> None:
    mutant = CATALOGUE[0]
    job = Job(mutant.name, mutant, Path("scenarios"), (("memory-3", 2),), seeds_too=True)
    assert checks_command(Path("copy"), job)[-3:] == ["--sim", "memory-3:2", "--seeds-too"]


def test_the_seeds_that_caught_a_mutant_are_the_baseline_s_seeds() -> None:
    assert seed_of("sim memory-5 seed 41") == ("memory-5", 41)
    assert seed_of("scenario 04_failover.txt") is None
    assert seed_of(None) is None
    outcomes = [
        Outcome("a", "sim memory-5 seed 41", "d", 9, 1.0),
        Outcome("b", "sim memory-5 seed 41", "d", 9, 1.0),
        Outcome("c", "sim groups-3 seed 11", "d", 9, 1.0),
        Outcome("d", "scenario x.txt", "d", 1, 1.0),
        Outcome("e", None, "", 99, 1.0),  # survived: no check of its to prove
        Outcome("f", "scenario x.txt", "d", 9, 1.0, by_seed="sim isr-sim-3 seed 3"),
    ]
    jobs = seed_baseline_jobs(outcomes)
    assert [(job.name, job.mutant, job.seeds) for job in jobs] == [
        ("sim groups-3 seed 11", None, (("groups-3", 11),)),
        ("sim isr-sim-3 seed 3", None, (("isr-sim-3", 3),)),
        ("sim memory-5 seed 41", None, (("memory-5", 41),)),
    ]
    assert checks_command(Path("copy"), jobs[2])[-2:] == ["--seed", "memory-5:41"]


def test_a_seed_that_fails_unmutated_fails_the_gate_it_caught_for() -> None:
    mutant = CATALOGUE[0]
    caught = Outcome(mutant.name, "sim memory-5 seed 41", "a violation", 9, 1.0, by_seed="s")
    failing = Outcome("sim memory-5 seed 41", "sim memory-5 seed 41", "the same one", 1, 1.0)
    report = Report([Outcome("scenarios", None, "", 1, 1.0), failing], [(mutant, caught)], 1, 2.0)
    assert report.caught == 1 and not report.passed
    text = text_report(report)
    assert "FAILS: sim memory-5 seed 41" in text
    assert "the unmutated code fails a check: no mutant it caught is judged" in text
    assert text.endswith("gate FAILED")


def test_an_unknown_mutant_stops_the_gate(capsys: pytest.CaptureFixture[str]) -> None:
    assert mutants.main(["--only", "no-such-mutant"]) == 2
    assert "no such mutant: no-such-mutant" in capsys.readouterr().err


def test_the_list_names_every_mutant(capsys: pytest.CaptureFixture[str]) -> None:
    assert mutants.main(["--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == [m.name for m in CATALOGUE]


def test_the_default_scenarios_are_this_repository_s() -> None:
    assert Path(__file__).resolve().parent / "scenarios" == mutants.DEFAULT_SCENARIOS


@pytest.mark.slow
@pytest.mark.timeout(900)  # every mutant against the transcripts and its seeds
def test_the_baseline_passes_and_every_mutant_is_caught_by_a_seed() -> None:
    report = run_gate(list(CATALOGUE), mutants.DEFAULT_SCENARIOS, workers=2)
    assert report.passed, text_report(report)
