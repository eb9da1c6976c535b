"""`tidelog dump-log`: text, records and JSON Lines output, corrupt batches, bad paths."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tidelog.cli import main
from tidelog.types import Epoch
from tidelog.wal import DiskStorage, WalConfig
from tidelog.wal.batches import build_batches

CONFIG = WalConfig(segment_bytes=1000, hwm_checkpoint_interval_ms=0)


def write_log(directory: Path) -> list[str]:
    with DiskStorage(str(directory), clock=lambda: 0, config=CONFIG) as storage:
        storage.append(
            build_batches([10, 1, 2, 3], epochs=[Epoch(1), Epoch(1), Epoch(2), Epoch(2)])
        )
        return storage.segment_paths()


def test_dump_a_segment_like_kafka_dump_log(tmp_path: Path) -> None:
    paths = write_log(tmp_path)
    result = CliRunner().invoke(main, ["dump-log", paths[0]])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0] == f"Dumping {paths[0]}"
    assert lines[1].startswith("baseOffset: 0 lastOffset: 9 count: 10 ")
    assert "partitionLeaderEpoch: 1" in lines[1]
    assert "isValid: true" in lines[1]


def test_dump_a_directory_with_records(tmp_path: Path) -> None:
    paths = write_log(tmp_path)
    result = CliRunner().invoke(main, ["dump-log", "--records", str(tmp_path)])
    assert result.exit_code == 0
    assert sum(line.startswith("Dumping ") for line in result.output.splitlines()) == len(paths)
    records = [line for line in result.output.splitlines() if line.startswith("| offset:")]
    assert len(records) == 16
    assert records[0].startswith("| offset: 0 CreateTime: 0 keySize: -1 valueSize: 100 ")


def test_dump_json_lines_flags_a_corrupt_batch(tmp_path: Path) -> None:
    paths = write_log(tmp_path)
    data = bytearray(Path(paths[0]).read_bytes())
    data[100] ^= 0x01
    Path(paths[0]).write_bytes(bytes(data))
    result = CliRunner().invoke(main, ["dump-log", "--json", "--records", str(tmp_path)])
    assert result.exit_code == 0
    batches = [json.loads(line) for line in result.output.splitlines()]
    assert [batch["baseOffset"] for batch in batches] == [0, 10, 11, 13]
    assert batches[0]["isValid"] is False
    assert "records" not in batches[0]
    assert all(batch["isValid"] for batch in batches[1:])
    assert batches[3]["records"][2]["offset"] == 15


def test_dump_reports_broken_framing(tmp_path: Path) -> None:
    paths = write_log(tmp_path)
    with open(paths[-1], "ab") as file:
        file.write(b"\x00" * 20)
    result = CliRunner().invoke(main, ["dump-log", paths[-1]])
    assert result.exit_code == 0
    assert result.output.splitlines()[-1].startswith("error at position ")


def test_bad_paths_fail_with_a_clear_message(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    result = CliRunner().invoke(main, ["dump-log", str(missing)])
    assert result.exit_code == 1
    assert f"{missing}: no such file or directory" in result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["dump-log", str(empty)])
    assert result.exit_code == 1
    assert "no segment (.log) files" in result.stderr
