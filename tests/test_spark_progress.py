"""What the demo's pipeline and verify-replicas show while Spark works, without a JVM: the
line of a finished micro-batch from its progress entry, the pipeline's verdict with the
sink's duplicates counted, verify-replicas' rounds of partitions and their joined report,
and the demo's Spark options refused before anything starts."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from click.testing import CliRunner

from tidelog.cli import main
from tidelog.spark.balances import rows_emitted
from tidelog.spark.replicas import (
    ROUNDS_MAX,
    BatchCopy,
    Mismatch,
    PartitionCheck,
    ReplicaRead,
    ReplicaReport,
    ReplicaState,
    joined_reports,
    partition_rounds,
)
from tidelog.tools.demo_pipeline import judge_balances
from tidelog.tools.spark_progress import batch_line, offsets_sum

PROGRESS = {
    "batchId": 2,
    "numInputRows": 5000,
    "durationMs": {"triggerExecution": 3250},
    "sources": [
        {
            "endOffset": json.dumps({"transfers": {"0": 5001, "1": 5000, "2": 4999}}),
            "latestOffset": json.dumps({"transfers": {"0": 6668, "1": 6667, "2": 6667}}),
        }
    ],
    "sink": {"numOutputRows": -1},
    "stateOperators": [{"numRowsTotal": 100, "numRowsUpdated": 100}],
}


def test_a_finished_micro_batch_is_one_line() -> None:
    assert offsets_sum(PROGRESS["sources"][0]["endOffset"]) == 15000  # type: ignore[index]
    assert offsets_sum(None) == 0
    assert rows_emitted(PROGRESS) == 100  # complete mode: the whole aggregate
    assert rows_emitted({**PROGRESS, "sink": {"numOutputRows": 7}}) == 7
    assert batch_line(PROGRESS, 15000) == (
        "micro-batch 2: 5000 transfers read (15000 in all), offsets 15000 of 20002 committed, "
        "100 balances written, 3.2 s"
    )


def test_the_pipeline_verdict_counts_the_sinks_duplicates() -> None:
    balances = {"acct-000": -5, "acct-001": 5}

    def verdict(duplicates: int) -> str:
        judged = judge_balances(
            balances, balances, acknowledged=2, read=2, malformed=0, sink_duplicates=duplicates
        )
        return judged.line()

    assert verdict(0) == (
        "pipeline verdict: OK — 2 balances from 2 transfers read, 2 acknowledged, every "
        "balance exact to the cent; sink duplicates (at-least-once): 0"
    )
    assert verdict(25).endswith("exact to the cent; sink duplicates (at-least-once): 25")
    assert verdict(-3) == (
        "pipeline verdict: FAILED — 2 balances from 2 transfers read, 2 acknowledged, 3 "
        "balance records missing in topic balances; sink duplicates (at-least-once): 0"
    )


def reads_of(partitions: int, replicas: int = 3) -> list[ReplicaRead]:
    return [
        ReplicaRead("t", p, r, f"h:{r}", 0)
        for p in range(partitions)
        for r in range(1, replicas + 1)
    ]


def test_partitions_are_verified_in_a_bounded_number_of_rounds() -> None:
    rounds = partition_rounds(reads_of(3))
    assert [sorted({r.partition for r in reads}) for reads in rounds] == [[0], [1], [2]]
    assert [len(reads) for reads in rounds] == [3, 3, 3]
    many = partition_rounds(reads_of(50))
    assert len(many) <= ROUNDS_MAX
    assert [r for reads in many for r in reads] == reads_of(50)  # whole, in order
    assert all(
        max(a.partition for a in first) < min(b.partition for b in second)
        for first, second in itertools.pairwise(many)
    )


def report_of(partition: int, mismatches: int) -> ReplicaReport:
    copy = BatchCopy(1, 0, 1, 0xA, True)
    return ReplicaReport(
        topic="t",
        partitions=(PartitionCheck(partition, 3, 3, 0, 5, 5, 0, 2, mismatches),),
        replicas=tuple(ReplicaState(partition, r, f"h:{r}", 5, 0, 2, None) for r in (1, 2, 3)),
        mismatches=tuple(Mismatch(partition, o, (copy,), (2,)) for o in range(mismatches)),
        mismatch_count=mismatches,
    )


def test_the_rounds_reports_join_into_one() -> None:
    joined = joined_reports("t", [report_of(0, 1), report_of(1, 0), report_of(2, 2)])
    assert [p.partition for p in joined.partitions] == [0, 1, 2]
    assert [(r.partition, r.replica) for r in joined.replicas] == [
        (p, r) for p in range(3) for r in (1, 2, 3)
    ]
    assert [(m.partition, m.base_offset) for m in joined.mismatches] == [(0, 0), (2, 0), (2, 1)]
    assert (joined.mismatch_count, joined.batch_count, joined.ok) == (3, 6, False)


def test_the_demos_spark_options_are_checked_before_anything_starts(tmp_path: Path) -> None:
    runner = CliRunner()
    data = ["demo", "--data-dir", str(tmp_path / "demo")]
    alone = runner.invoke(main, [*data, "--kill-executor"])
    assert alone.exit_code == 2
    assert "--kill-executor needs --spark-cluster DIR" in alone.output
    empty = runner.invoke(main, [*data, "--spark-cluster", str(tmp_path), "--kill-executor"])
    assert empty.exit_code == 2
    assert "no Spark cluster in" in empty.output
    assert not (tmp_path / "demo").exists()
