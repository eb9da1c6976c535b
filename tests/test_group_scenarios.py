"""The group coordinator's scenarios as transcripts: join, rebalance, session timeout,
coordinator failover with commits in flight, expiry (tests/group_scenarios/).

Each runs the real coordinator on every node of a replicated `__consumer_offsets`
partition of the simulator (`tidelog.testing.group_scenario`). Regenerate the expected
output with `pytest tests/test_group_scenarios.py --rewrite` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.testing.group_scenario import main, run_group_file

SCENARIOS = sorted((Path(__file__).parent / "group_scenarios").glob("*.txt"))


def test_the_five_group_scenarios_have_scripts() -> None:
    assert len(SCENARIOS) >= 5


@pytest.mark.parametrize("path", SCENARIOS, ids=[path.stem for path in SCENARIOS])
def test_group_scenario(path: Path, rewrite: bool) -> None:
    differences = run_group_file(path, rewrite=rewrite)
    assert not differences, "\n\n".join(differences)
    if not rewrite:
        assert "VIOLATION" not in path.read_text()


def test_the_command_line_prints_a_transcript(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(SCENARIOS[0])]) == 0
    assert "c1 <- 1: Join generation=1" in capsys.readouterr().out
