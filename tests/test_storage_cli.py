"""`tidelog storage directory-id|format` (tools/storage_cmd.py): a hand-made cluster's
nodes keep their metadata log's first voter set with directory ids, as `cluster up` does."""

from __future__ import annotations

import json
from pathlib import Path

from tidelog.server.joining import FIRST_VOTERS_FILE
from tidelog.testing.live import tidelog


def test_each_node_formats_with_every_voters_directory(tmp_path: Path) -> None:
    dirs = [tmp_path / f"node-{n}" for n in (1, 2, 3)]
    ids = []
    for data_dir in dirs:
        done = tidelog("storage", "directory-id", "--data-dir", str(data_dir))
        assert done.returncode == 0, done.stderr
        ids.append(int(done.stdout))
    assert len(set(ids)) == 3
    again = tidelog("storage", "directory-id", "--data-dir", str(dirs[0]))
    assert int(again.stdout) == ids[0]  # kept
    voters = ",".join(f"{n}@{d}" for n, d in zip((1, 2, 3), ids, strict=True))
    for data_dir in dirs:
        done = tidelog("storage", "format", "--data-dir", str(data_dir), "--initial-voters", voters)
        assert done.returncode == 0, done.stderr
        kept = json.loads((data_dir / FIRST_VOTERS_FILE).read_text())
        assert kept == {"voters": [1, 2, 3], "joined": False, "directories": ids}


def test_a_bad_format_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "node-1"
    own = int(tidelog("storage", "directory-id", "--data-dir", str(data_dir)).stdout)
    for voters, message in (
        ("1@x", "is not ID@DIRID"),
        ("1@0", "is no directory id"),
        (f"1@{own},1@{own + 1}", "each node once"),
        (f"1@{own + 1}", "which no voter of --initial-voters names"),
    ):
        done = tidelog("storage", "format", "--data-dir", str(data_dir), "--initial-voters", voters)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert message in done.stderr and done.stderr.startswith("error: ")
        assert not (data_dir / FIRST_VOTERS_FILE).exists()
    ok = tidelog("storage", "format", "--data-dir", str(data_dir), "--initial-voters", f"1@{own}")
    assert ok.returncode == 0, ok.stderr
    twice = tidelog(
        "storage", "format", "--data-dir", str(data_dir), "--initial-voters", f"1@{own}"
    )
    assert twice.returncode == 1 and "already" in twice.stderr
