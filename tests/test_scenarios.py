"""Every scenario of shared/docs/correctness.md as a scripted, deterministic transcript,
and ISR mode's (docs/isr.md) in tests/scenarios/isr/, numbered as its scenarios (isr-01..)
or, for a scenario of correctness.md played in ISR mode, as that one (07 and 12 there are
rules 7 and 12 of docs/isr.md).

Each file in tests/scenarios/ is named after its scenario. Regenerate the expected output
with `pytest tests/test_scenarios.py --rewrite` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.testing.scenario import run_file

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.txt"))
ISR_SCENARIOS = sorted((Path(__file__).parent / "scenarios" / "isr").glob("*.txt"))


def test_every_single_partition_scenario_has_a_script() -> None:
    numbers = {int(path.name.split("_")[0]) for path in SCENARIOS}
    assert numbers >= set(range(1, 16))


@pytest.mark.parametrize("path", SCENARIOS, ids=[path.stem for path in SCENARIOS])
def test_scenario(path: Path, rewrite: bool) -> None:
    differences = run_file(path, rewrite=rewrite)
    assert not differences, "\n\n".join(differences)
    if not rewrite:
        assert "VIOLATION" not in path.read_text()


def test_isr_mode_has_its_scenarios() -> None:
    numbers = {int(path.name.split("_")[0]) for path in ISR_SCENARIOS}
    assert numbers >= {1, 3}


@pytest.mark.parametrize("path", ISR_SCENARIOS, ids=[f"isr-{path.stem}" for path in ISR_SCENARIOS])
def test_isr_scenario(path: Path, rewrite: bool) -> None:
    differences = run_file(path, rewrite=rewrite)
    assert not differences, "\n\n".join(differences)
    if not rewrite:
        assert "VIOLATION" not in path.read_text()
