"""What the demo's Spark pipeline is doing, shown while it runs, and the executor it kills.

`StreamProgress` is the pipeline's watcher (`tidelog.spark.balances.Watcher`): every
WATCH_INTERVAL_S the driver's thread hands it the running query, and it shows a bar of the
offsets read against the HWMs the source reported (the records committed in the topic), the
micro-batch running, the query's status and the running stages' tasks (Spark's status
tracker), and prints one line per finished micro-batch.

`ExecutorKiller` kills one executor JVM with SIGKILL in the middle of a micro-batch, at the
first moment every executor runs a task (each has one core), so a task is surely lost and
Spark must run it again.

Rules of this file:
- It reads the query's progress and Spark's status tracker only; it never waits (the
  watcher is called on the driver's thread between polls of the query).
- The bar is drawn on a terminal only, redrawn in place, and vanishes at the end; in a
  pipe nothing of it is printed, and the per-batch lines are the record.
- Only an executor of the recorded standalone cluster is killed: a process whose parent is
  a worker PID of `spark-cluster.json`, whose command line is an executor's, while that
  worker is still the daemon recorded (`standalone.executor_pids`). Once, at most.
"""

from __future__ import annotations

import json
import os
import signal
from types import TracebackType
from typing import Any, Final

from pyspark.core.status import SparkStageInfo, StatusTracker
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from tidelog.spark.balances import rows_emitted
from tidelog.spark.standalone import SparkCluster, executor_pids

MS_PER_S: Final = 1000


def offsets_sum(value: Any) -> int:
    """The sum of a tidelog source offset (`{"topic": {"0": 12, ...}}`, as JSON text or
    parsed; None for none reported)."""
    document = json.loads(value) if isinstance(value, str) else value or {}
    return sum(int(offset) for partitions in document.values() for offset in partitions.values())


def active_stages(tracker: StatusTracker) -> list[SparkStageInfo]:
    """The stages running now (the tracker may not know one it listed: skipped)."""
    infos = (tracker.getStageInfo(stage) for stage in tracker.getActiveStageIds())
    return [info for info in infos if info is not None]


def stage_text(info: SparkStageInfo) -> str:
    failed = f", {info.numFailedTasks} failed" if info.numFailedTasks else ""
    return (
        f"stage {info.stageId}: {info.numCompletedTasks}/{info.numTasks} tasks done, "
        f"{info.numActiveTasks} running{failed}"
    )


def batch_line(entry: dict[str, Any], read_in_all: int) -> str:
    """One finished micro-batch, from its progress entry."""
    source = entry["sources"][0] if entry.get("sources") else {}
    read_to, hwm = offsets_sum(source.get("endOffset")), offsets_sum(source.get("latestOffset"))
    seconds = entry.get("durationMs", {}).get("triggerExecution", 0) / MS_PER_S
    return (
        f"micro-batch {entry['batchId']}: {entry['numInputRows']} transfers read "
        f"({read_in_all} in all), offsets {read_to} of {hwm} committed, "
        f"{rows_emitted(entry)} balances written, {seconds:.1f} s"
    )


class ExecutorKiller:
    """Kills one executor of `cluster` with SIGKILL once every executor runs a task (module
    rules), then counts the task attempts that fail in the stages it sees: per stage
    attempt, the most the tracker reported (a stage Spark resubmits is a new attempt)."""

    def __init__(self, console: Console, cluster: SparkCluster) -> None:
        self.console = console
        self.cluster = cluster
        self.killed: int | None = None
        self.failed: dict[tuple[int, int], int] = {}  # (stage, attempt) -> failed tasks

    def maybe_kill(self, stages: list[SparkStageInfo], *, batch: int) -> bool:
        """Kill now if every executor runs a task; whether it killed."""
        if self.killed is not None:
            self.count_failures(stages)
            return False
        running = sum(info.numActiveTasks for info in stages)
        executors = [
            (worker.role, pid) for worker in self.cluster.workers for pid in executor_pids(worker)
        ]
        if not executors or running < len(executors):
            return False
        role, pid = executors[0]
        os.kill(pid, signal.SIGKILL)
        self.killed = pid
        self.count_failures(stages)
        self.console.print(
            f"kill -9 executor {pid} (a child of {role}) in micro-batch {batch}, "
            f"{running} tasks running on {len(executors)} executors",
            soft_wrap=True,
        )
        return True

    def count_failures(self, stages: list[SparkStageInfo]) -> None:
        for info in stages:
            key = (info.stageId, info.currentAttemptId)
            self.failed[key] = max(self.failed.get(key, 0), info.numFailedTasks)

    def summary(self, tracker: StatusTracker) -> str:
        if self.killed is None:
            return "no executor was killed: every executor never ran a task at once"
        seen = {stage for stage, _ in self.failed}
        self.count_failures([i for s in sorted(seen) if (i := tracker.getStageInfo(s))])
        resubmitted = sum(1 for _, attempt in self.failed if attempt > 0)
        return (
            f"executor {self.killed} was killed; the query went on: "
            f"{sum(self.failed.values())} task attempts failed with it and ran again, "
            f"{resubmitted} stage attempts resubmitted"
        )


class StreamProgress:
    """The watcher of the pipeline's streaming query (module docstring); a context manager
    that starts and ends the bar."""

    def __init__(
        self, console: Console, spark: SparkSession, killer: ExecutorKiller | None = None
    ) -> None:
        self.console = console
        self.tracker = spark.sparkContext.statusTracker()
        self.killer = killer
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("offsets"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task = self.progress.add_task("micro-batch 0: starting the query", total=None)
        self.last_batch = -1  # the last micro-batch given a line
        self.read_in_all = 0

    def __enter__(self) -> StreamProgress:
        if self.console.is_terminal:  # in a pipe even a transient bar leaves a blank line
            self.progress.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.console.is_terminal:  # Progress.stop prints a line where it is not
            self.progress.stop()

    def watch(self, query: StreamingQuery) -> None:
        for entry in query.recentProgress:
            if entry["batchId"] > self.last_batch:
                self.on_batch_done(entry)
        stages = active_stages(self.tracker)
        if self.killer is not None:
            self.killer.maybe_kill(stages, batch=self.last_batch + 1)
        doing = [str(query.status.get("message", "")), *map(stage_text, stages)]
        self.progress.update(
            self.task, description=f"micro-batch {self.last_batch + 1}: {'; '.join(doing)}"
        )

    def on_batch_done(self, entry: dict[str, Any]) -> None:
        self.last_batch = int(entry["batchId"])
        self.read_in_all += int(entry["numInputRows"])
        source = entry["sources"][0] if entry.get("sources") else {}
        self.progress.update(
            self.task,
            completed=offsets_sum(source.get("endOffset")),
            total=offsets_sum(source.get("latestOffset")) or None,
        )
        self.progress.console.print(batch_line(entry, self.read_in_all), soft_wrap=True)

    def summary(self) -> str | None:
        """The killer's account of the kill, if there is a killer."""
        return None if self.killer is None else self.killer.summary(self.tracker)
