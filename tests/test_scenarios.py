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

SCENARIOS_DIR = Path(__file__).parent / "scenarios"
SCENARIOS = sorted(SCENARIOS_DIR.glob("*.txt"))
ISR_SCENARIOS = sorted((SCENARIOS_DIR / "isr").glob("*.txt"))


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


def test_a_lost_copy_votes_where_no_directory_is_known(tmp_path: Path) -> None:
    """Scenario 28 without the directories in the first voter set: node 3, back on an
    empty disk, is its old voter still (membership rule 7), grants node 4 its vote, and
    node 4, elected, writes over the committed "a" (the held-out seed's failure)."""
    script = SCENARIOS_DIR / "28_a_node_that_lost_its_copy_does_not_vote.txt"
    unknown = tmp_path / "28_unknown.txt"
    unknown.write_text(script.read_text().replace(" directories=known", "", 1))
    differences = "\n".join(run_file(unknown))
    assert "VIOLATION node 3: acknowledged write at 1 lost" in differences
