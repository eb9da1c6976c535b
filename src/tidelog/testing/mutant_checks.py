"""The checks of the mutation gate, run in a subprocess over one copy of the package.

    python -m tidelog.testing.mutant_checks --package DIR [--scenarios DIR] [--sim MODE:SEEDS]
                                            [--seed MODE:SEED] [--first MODE:SEED]

Rules of this file:
- It judges the package it is imported from: the gate puts a (mutated) copy first on
  PYTHONPATH, and this module refuses to run from anywhere else than `--package`.
- Checks run cheapest first and stop at the first that catches. The transcripts come first
  and all of them run (they take a second): a transcript catches when its output differs or
  it raises, and the catch names first one that reports a violation or raised. Then the
  simulator seeds, the modes interleaved seed by seed: a seed catches on its first
  violation or exception; then the single seeds of `--seed` (the gate's baseline of the
  seeds that caught a mutant). The seeds of `--first` run right after the transcripts,
  before the plan's (the seed that caught the mutant last time: found again at once).
  With `--seeds-too` a transcript's catch does not stop the
  run: the seeds go on until one catches too, so the gate learns whether the simulator
  alone guards the rule (`by_seed`).
- Each check (all the transcripts together, or one seed) has a time limit; one that runs
  past it is caught as a hang (a test suite with a hang fails too).
- Output is JSON lines on stdout: `{"check": LABEL}` as each check starts (so the gate
  knows where a killed run was), then one `{"caught_by": LABEL or null, "also": [LABEL],
  "detail": TEXT, "checks": N, "by_seed": LABEL or null, "seed_detail": TEXT}`.
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, ModuleType
from typing import NamedTuple

import tidelog
from tidelog.testing import group_sim, isr_model, membership_model, sim
from tidelog.testing.group_scenario import run_group_file
from tidelog.testing.scenario import run_file

CHECK_SECONDS_MAX = 60
SIM_TICKS = 400
DETAIL_CHARS_MAX = 300
VIOLATION = "VIOLATION"  # how a transcript's `check` reports a broken invariant
HANG = f"raised CheckTimedOut: still running after {CHECK_SECONDS_MAX} s (a hang)"
MODES = {
    "memory-3": (3, False),
    "memory-4": (4, False),  # an even count: a majority of 4 is 3
    "memory-5": (5, False),
    "disk-3": (3, True),
    "disk-5": (5, True),
}
# Quorum mode's replica sets changing under the faults (`sim --moves`, moves.py).
MOVES_MODES = {"moves-4": (4, False)}
# Quorum mode's idle partitions quiescing over node liveness (`sim --quiesce`, quiesce.py).
QUIESCE_MODES = {"quiesce-3": (3, False), "quiesce-5": (5, False)}
# ISR mode in the simulator (`sim --mode isr`, isr_sim.py): the real IsrReplica under a
# simulated controller, as the ISR sweeps of `make sim` run it.
ISR_SIM_MODES = {"isr-sim-3": (3, False)}
ISR_SIM_TICKS = 300
# The group simulator's modes (group_sim.py): coordinators over the replicated log.
GROUP_MODES = {"groups-3": (3, False)}
# ISR mode's abstract model (isr_model.py: core/isr.py under its random walk). Its walks
# take milliseconds, so one "seed" of this mode is a batch of WALKS_PER_SEED walks.
ISR_MODE = "isr"
ISR_STEPS = 300
WALKS_PER_SEED = 100  # the walks of one seed of a model's mode (they take milliseconds)
# The membership model (membership_model.py: core/membership.py's rules on an abstract Raft
# log whose voters change), walked as ISR mode's is: a seed is a batch of walks.
MEMBERSHIP_MODE = "membership"
MEMBERSHIP_STEPS = 300


class CheckTimedOut(BaseException):
    """A check ran past CHECK_SECONDS_MAX. A BaseException, so that no `except Exception`
    on its way out (the checks', or a mutant's) can swallow it."""


class Catch(NamedTuple):
    """What caught a mutant: the check (`by`), what it saw, and other checks that saw it."""

    by: str
    detail: str
    also: tuple[str, ...] = ()


GROUP_SCENARIOS = "group_scenarios"  # beside the transcripts
ISR_SCENARIOS = "isr"  # under them: ISR mode's transcripts (docs/isr.md)


@dataclass(frozen=True, slots=True)
class SeedCheck:
    mode: str
    seed: int

    @property
    def label(self) -> str:
        return f"sim {self.mode} seed {self.seed}"

    def run(self) -> str | None:
        """The first violation of this seed, or None."""
        if self.mode == ISR_MODE:
            return walks_violation(self.seed, isr_model, ISR_STEPS)
        if self.mode == MEMBERSHIP_MODE:
            return walks_violation(self.seed, membership_model, MEMBERSHIP_STEPS)
        if self.mode in ISR_SIM_MODES:
            replicas, disk = ISR_SIM_MODES[self.mode]
            return sim_violation(self.seed, sim.Mode(replicas, ISR_SIM_TICKS, disk, isr=True))
        if self.mode in GROUP_MODES:
            replicas, disk = GROUP_MODES[self.mode]
            violations = group_sim.run_seed(self.seed, replicas, SIM_TICKS, disk).violations
            if not violations:
                return None
            command = group_sim.reproduce_command(self.seed, replicas, SIM_TICKS, disk)
            return f"{violations[0]}  (reproduce: {command})"
        if self.mode in MOVES_MODES:
            replicas, disk = MOVES_MODES[self.mode]
            return sim_violation(self.seed, sim.Mode(replicas, SIM_TICKS, disk, moves=True))
        if self.mode in QUIESCE_MODES:
            replicas, disk = QUIESCE_MODES[self.mode]
            return sim_violation(self.seed, sim.Mode(replicas, SIM_TICKS, disk, quiesce=True))
        replicas, disk = MODES[self.mode]
        return sim_violation(self.seed, sim.Mode(replicas, SIM_TICKS, disk))


def walks_violation(seed: int, model: ModuleType, steps: int) -> str | None:
    """The first `Violation` among a model's walks of batch `seed` (WALKS_PER_SEED walks of
    `model.random_walk`), with the call that replays it."""
    name = model.__name__.rsplit(".", 1)[-1]
    first = (seed - 1) * WALKS_PER_SEED
    for walk in range(first, first + WALKS_PER_SEED):
        try:
            model.random_walk(walk, steps)
        except model.Violation as broken:
            return f"{broken}  (reproduce: {name}.random_walk({walk}, {steps}))"
    return None


def sim_violation(seed: int, mode: sim.Mode) -> str | None:
    """The first violation of a seed of the simulator, with the command that replays it."""
    found = sim.run_seed(seed, mode).violations
    if not found:
        return None
    return f"{found[0]}  (reproduce: {sim.reproduce_command(seed, mode)})"


@dataclass(frozen=True, slots=True)
class ScenarioCheck:
    """Every transcript of a directory and of ISR mode's under it (`isr/`), and of the
    group transcripts beside it (`group_scenarios/`). They are cheap, so all of them run;
    the catch names first a transcript that broke an invariant or raised, else the first
    that differs."""

    directory: Path

    @property
    def label(self) -> str:
        return "scenarios"

    def transcripts(self) -> list[tuple[Path, Callable[[Path], list[str]]]]:
        groups = self.directory.parent / GROUP_SCENARIOS
        isr = self.directory / ISR_SCENARIOS
        paths = sorted(self.directory.glob("*.txt")) + sorted(isr.glob("*.txt"))
        return [(path, run_file) for path in paths] + [
            (path, run_group_file) for path in sorted(groups.glob("*.txt"))
        ]

    def run(self) -> Catch | None:
        found: list[tuple[bool, str, str]] = []  # (a mere difference, file, detail)
        for path, runner in self.transcripts():
            try:
                detail = problem_of(functools.partial(first_difference, path, runner))
            except CheckTimedOut:
                found.append((False, path.name, HANG))
                break  # the time of the whole check is up
            if detail is not None:
                mere = not detail.startswith("raised") and VIOLATION not in detail
                found.append((mere, path.name, detail))
        if not found:
            return None
        found.sort(key=lambda item: item[0])  # stable: in file order within each kind
        names = tuple(name for _, name, _ in found)
        return Catch(f"scenario {names[0]}", found[0][2], names[1:])


def first_difference(path: Path, runner: Callable[[Path], list[str]] = run_file) -> str | None:
    """Where the transcript first reports a violation, else where it first differs."""
    differences = runner(path)
    for difference in differences:
        head, _, actual = difference.partition("--- actual\n")
        violations = [line for line in actual.splitlines() if VIOLATION in line]
        if violations:
            return f"{head.splitlines()[0]}: {violations[0]}"
    if differences:
        return f"{differences[0].splitlines()[0]}: output differs"
    return None


Check = ScenarioCheck | SeedCheck


def parse_sim(text: str) -> tuple[str, int]:
    """`MODE:SEEDS` (seeds 1..SEEDS, or the one seed of `--seed`) into (mode, number)."""
    mode, _, seeds = text.partition(":")
    modes = [
        *MODES,
        *MOVES_MODES,
        *QUIESCE_MODES,
        *ISR_SIM_MODES,
        *GROUP_MODES,
        ISR_MODE,
        MEMBERSHIP_MODE,
    ]
    if mode not in modes or not seeds.isdigit() or int(seeds) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected MODE:NUMBER, MODE in {modes}")
    return mode, int(seeds)


def seed_of(label: str | None) -> tuple[str, int] | None:
    """(mode, seed) of a `SeedCheck`'s label; None for any other check."""
    parts = (label or "").split(" ")
    if len(parts) == 4 and parts[0] == "sim" and parts[2] == "seed" and parts[3].isdigit():
        return parts[1], int(parts[3])
    return None


def plan(
    scenarios: Path | None,
    modes: list[tuple[str, int]],
    single: Sequence[tuple[str, int]] = (),
    first: Sequence[tuple[str, int]] = (),
) -> Iterator[Check]:
    """The transcripts, then the `first` seeds, then seed 1 of each mode, seed 2 of each
    mode, and so on, then the `single` seeds."""
    if scenarios is not None:
        yield ScenarioCheck(scenarios)
    for mode, seed in first:
        yield SeedCheck(mode, seed)
    for seed in range(1, max((seeds for _, seeds in modes), default=0) + 1):
        for mode, seeds in modes:
            if seed <= seeds:
                yield SeedCheck(mode, seed)
    for mode, seed in single:
        yield SeedCheck(mode, seed)


def on_alarm(signum: int, frame: FrameType | None) -> None:
    del signum, frame
    raise CheckTimedOut


def problem_of(run: Callable[[], str | None]) -> str | None:
    """What `run` found, or the exception that stopped it (a mutant may break anything:
    that is a catch too)."""
    try:
        return run()
    except Exception as error:
        return f"raised {type(error).__name__}: {error}"


def run_check(check: Check) -> Catch | None:
    """The check's catch, within CHECK_SECONDS_MAX (a hang is a catch)."""
    signal.alarm(CHECK_SECONDS_MAX)
    try:
        if isinstance(check, ScenarioCheck):
            return check.run()  # it names the transcript that hung
        try:
            found = problem_of(check.run)
        except CheckTimedOut:
            found = HANG
        return None if found is None else Catch(check.label, found)
    finally:
        signal.alarm(0)


def emit(line: dict[str, object]) -> None:
    print(json.dumps(line), flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tidelog.testing.mutant_checks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--package", type=Path, required=True, help="the copy to judge")
    parser.add_argument("--scenarios", type=Path, help="a directory of scenario transcripts")
    parser.add_argument(
        "--sim", type=parse_sim, action="append", default=[], help="MODE:SEEDS, repeatable"
    )
    parser.add_argument(
        "--seed", type=parse_sim, action="append", default=[], help="MODE:SEED, repeatable"
    )
    parser.add_argument(
        "--first", type=parse_sim, action="append", default=[], help="MODE:SEED, repeatable"
    )
    parser.add_argument(
        "--seeds-too",
        action="store_true",
        help="after a transcript catches, run the seeds on until one catches too",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    here = Path(tidelog.__file__).resolve().parent
    if here != args.package.resolve():
        print(f"tidelog imported from {here}, not from {args.package}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGALRM, on_alarm)
    count = 0
    first: Catch | None = None
    for check in plan(args.scenarios, args.sim, args.seed, args.first):
        count += 1
        emit({"check": check.label})
        caught = run_check(check)
        if caught is None:
            continue
        first = first or caught
        if isinstance(check, SeedCheck) or not args.seeds_too:
            emit_verdict(first, caught if isinstance(check, SeedCheck) else None, count)
            return 0
    emit_verdict(first, None, count)
    return 0


def emit_verdict(first: Catch | None, by_seed: Catch | None, count: int) -> None:
    """The last line: the first check that caught (None: none did), and the seed that
    caught (None: no seed did, or none ran)."""
    emit(
        {
            "caught_by": None if first is None else first.by,
            "also": [] if first is None else first.also,
            "detail": "" if first is None else first.detail[:DETAIL_CHARS_MAX],
            "checks": count,
            "by_seed": None if by_seed is None else by_seed.by,
            "seed_detail": "" if by_seed is None else by_seed.detail[:DETAIL_CHARS_MAX],
        }
    )


if __name__ == "__main__":
    sys.exit(main())
