"""The driver programs of tests/test_spark_standalone.py: Spark jobs on a standalone master,
each run as its own process (`python tests/standalone_driver.py JOB ...`), as a user's job is.

A process holds one SparkContext, and the test run's shared `spark` fixture is a local[2]
one: so a job on `spark://` runs here, in a child process the test starts and waits for.
Each job prints one JSON object as its last line on stdout (Spark logs go to stderr).

Jobs:
- `roundtrip`: the source's batch read of a topic, a Trigger.AvailableNow stream of it to
  Parquet (several micro-batches), and the sink's write of those records to another topic,
  read back by the source.
- `slow-copy`: a Trigger.AvailableNow stream from one topic to another through the sink, each
  task held for `--task-s` seconds by a function that marks, in `--markers`, when a task
  attempt starts and ends and in which executor JVM (its PID): the test kills one mid-task.
- `demo`: `tidelog demo --spark-cluster DIR --kill-executor`, run by this process on this
  same application (`spark_session` hands the demo the running session, and the demo stops
  it at its end), so the demo starts no driver or executor JVMs of its own. Its stdout goes
  to `work/demo.out`; its exit status is the result.

This file runs as __main__, so cloudpickle ships its functions to the executors by value;
what they import from tidelog, the executors import from their PYTHONPATH.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

QUERY_TIMEOUT_S = 240
GO_TIMEOUT_S = 120
GO_FILE = "go"
ANCESTORS_MAX = 8  # python worker -> pyspark daemon -> executor JVM, with room to spare
HOLD_STEP_S = 0.05


def source(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    reader = spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
    return reader.option("subscribe", topic).options(**options).load()


def records_of(frame: Any) -> list[list[Any]]:
    rows = frame.select("partition", "offset", "key", "value").collect()
    return sorted(
        [r.partition, r.offset, r.key.decode() if r.key else None, r.value.decode()] for r in rows
    )


def roundtrip(spark: Any, arguments: argparse.Namespace) -> dict[str, Any]:
    bootstrap, topic = arguments.bootstrap, arguments.topic
    batch = records_of(source(spark, bootstrap, topic))
    work = arguments.work / "roundtrip"
    stream = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
        .select("partition", "offset", "key", "value")
        .writeStream.format("parquet")
        .option("path", str(work / "data"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    if not stream.awaitTermination(QUERY_TIMEOUT_S):
        raise SystemExit("the stream to Parquet did not finish")
    streamed = records_of(spark.read.parquet(str(work / "data")))
    (
        source(spark, bootstrap, topic)
        .select("key", "value")
        .write.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", arguments.sink_topic)
        .mode("append")
        .save()
    )
    back = source(spark, bootstrap, arguments.sink_topic).collect()
    return {
        "batch": batch,
        "stream": streamed,
        "stream_batches": sum(1 for p in stream.recentProgress if p["numInputRows"]),
        "sink_back": sorted([r.key.decode(), r.value.decode()] for r in back),
    }


def executor_pid() -> int:
    """The PID of the executor JVM this Python worker serves (an ancestor process)."""
    from tidelog.spark.standalone import EXECUTOR_CLASS, command_line, parent_of  # noqa: PLC0415

    pid: int | None = os.getpid()
    for _ in range(ANCESTORS_MAX):
        if pid is None or pid <= 1:
            break
        if EXECUTOR_CLASS in command_line(pid):
            return pid
        pid = parent_of(pid)
    raise RuntimeError("no executor JVM among this process's ancestors")


def held(markers: str, task_s: float) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """mapInArrow's function: marks `PID-sSTAGE-pPARTITION-aATTEMPT.start`, holds the task
    for half of `task_s`, passes the batches on, holds the other half, marks `.done`."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext  # noqa: PLC0415

        context = TaskContext.get()
        assert context is not None
        name = (
            f"{executor_pid()}-s{context.stageId()}-p{context.partitionId()}"
            f"-a{context.attemptNumber()}"
        )
        Path(markers, f"{name}.start").touch()
        hold(task_s / 2)
        yield from batches
        hold(task_s / 2)
        Path(markers, f"{name}.done").touch()

    return run


def hold(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(HOLD_STEP_S)


def slow_copy(spark: Any, arguments: argparse.Namespace) -> dict[str, Any]:
    markers = arguments.work / "markers"
    markers.mkdir(exist_ok=True)
    frame = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", arguments.bootstrap)
        .option("subscribe", arguments.slow_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(arguments.max_per_trigger))
        .load()
        .select("key", "value")
    )
    query = (
        frame.mapInArrow(held(str(markers), arguments.task_s), frame.schema)
        .writeStream.format("tidelog")
        .option("kafka.bootstrap.servers", arguments.bootstrap)
        .option("topic", arguments.slow_sink_topic)
        .option("checkpointLocation", str(arguments.work / "slow-copy"))
        .trigger(availableNow=True)
        .start()
    )
    if not query.awaitTermination(QUERY_TIMEOUT_S):
        raise SystemExit("the slow copy did not finish")
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    return {
        "batches": len(progress),
        "input_rows": sum(p["numInputRows"] for p in progress),
        "end_offset": json.loads(progress[-1]["sources"][0]["endOffset"]) if progress else None,
    }


def demo(arguments: argparse.Namespace) -> dict[str, Any]:
    """`tidelog demo` on this process's session, as the command line runs it; its status."""
    from tidelog.cli import main as tidelog_main  # noqa: PLC0415

    argv = [
        "demo", "--records", str(arguments.demo_records),
        "--data-dir", str(arguments.demo_dir), "--base-port", str(arguments.demo_base_port),
        "--spark-cluster", str(arguments.spark_cluster), "--kill-executor",
    ]  # fmt: skip
    with (arguments.work / "demo.out").open("w") as out, contextlib.redirect_stdout(out):
        try:
            tidelog_main(argv)
        except SystemExit as exit_:
            return {"status": exit_.code or 0}
    return {"status": 0}


def write_result(work: Path, name: str, result: dict[str, Any]) -> None:
    """`work/NAME.json`, written whole (a temporary file renamed): the test polls for it."""
    temporary = work / f".{name}.json.tmp"
    temporary.write_text(json.dumps(result))
    os.replace(temporary, work / f"{name}.json")


def wait_for_go(work: Path) -> None:
    deadline = time.monotonic() + GO_TIMEOUT_S
    while not (work / GO_FILE).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no {GO_FILE} within {GO_TIMEOUT_S} s")
        time.sleep(HOLD_STEP_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--sink-topic", required=True)
    parser.add_argument("--slow-topic", required=True)
    parser.add_argument("--slow-sink-topic", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--task-s", type=float, default=2.0)
    parser.add_argument("--max-per-trigger", type=int, default=200)
    parser.add_argument("--demo-dir", type=Path, required=True)
    parser.add_argument("--demo-base-port", type=int, required=True)
    parser.add_argument("--demo-records", type=int, required=True)
    parser.add_argument("--spark-cluster", type=Path, required=True)
    arguments = parser.parse_args()
    from tidelog.spark.session import spark_session  # noqa: PLC0415 - starts a JVM

    spark = spark_session("tidelog-test-standalone")  # on TIDELOG_SPARK_MASTER
    try:
        write_result(arguments.work, "roundtrip", roundtrip(spark, arguments))
        wait_for_go(arguments.work)
        write_result(arguments.work, "slow-copy", slow_copy(spark, arguments))
        write_result(arguments.work, "demo", demo(arguments))
    finally:
        spark.stop()  # a no-op when the demo has stopped it


if __name__ == "__main__":
    main()
