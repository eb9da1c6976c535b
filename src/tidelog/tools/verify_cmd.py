"""`tidelog verify-replicas TOPIC`: every replica's committed batches compared, as
kafka-replica-verification does, by a local Spark batch job (`tidelog.spark.replicas`).

Output, one line each (`--json`: one object instead); each partition's line as soon as that
partition is verified, the rest at the end:

    2026-01-02 03:04:05,678: max lag is 0 for partition orders-0 at offset 1234 among 3 replicas
    replica 2 of partition orders-1 could not be read: 127.0.0.1:9093, fetch offset 0: ...
    mismatch in partition orders-2 at offset 17: replica 1 (last offset 20, epoch 3, crc ...
    verified 42 batches in 3 partitions: 0 mismatches

Rules of this file:
- Exit 0 only when no batch mismatches and every replica was read; 1 otherwise. Expected
  failures (no broker, unknown topic, no Java, a Spark job that fails for a reason tidelog's
  code in its workers names) print `error: ...`, one line, on stderr and exit 1; click's
  usage errors exit 2.
- `--command-config` (`tools.client_options`) reaches a secure cluster: its properties
  are the job's `kafka.*` options, and every connection of the job (the driver's Metadata
  and ListOffsets, each replica's Fetch) is TLS and SASL as they say.
- The bootstrap address is probed before Spark starts, so a cluster that is down fails in
  seconds; pyspark is imported only when the command runs, so `tidelog --help` stays fast.
- The Spark session is left running: in a test it is shared, and a command's process ends
  with it anyway.
- Progress (Spark starting, then a bar over the partitions verified) is drawn on a terminal
  only, stdout's when stdout is one, else stderr's, and vanishes at the end; a pipe gets
  the lines alone, so the output a script parses is the same.
- `--spark-master` (or TIDELOG_SPARK_MASTER) runs the job on a Spark standalone master
  (`tidelog spark cluster up` prints one); without either it runs in local[2].
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from tidelog.errors import TidelogError
from tidelog.spark.standalone import MASTER_ENV
from tidelog.tools.client_kafka import ClientSettings, answering
from tidelog.tools.client_options import client_options, json_option

if TYPE_CHECKING:
    from tidelog.spark.replicas import Mismatch, PartitionCheck, ReplicaReport

APP_NAME: Final = "tidelog-verify-replicas"
EXIT_PROBLEMS: Final = 1
KAFKA_TIME_FORMAT: Final = "%Y-%m-%d %H:%M:%S,%f"  # kafka-replica-verification's, to the µs
MICROS_DROPPED: Final = 3  # it prints milliseconds


@click.command("verify-replicas")
@click.argument("topic")
@client_options
@json_option
@click.option(
    "--spark-master",
    envvar=MASTER_ENV,
    default=None,
    help=f"Run the job on this Spark master: spark://HOST:PORT (env {MASTER_ENV}); "
    "default local[2].",
)
def verify_replicas_command(
    topic: str, client: ClientSettings, as_json: bool, spark_master: str | None
) -> None:
    """Compare the committed batches of every replica of TOPIC (kafka-replica-verification).

    Each replica is read from its own broker (a follower too) up to its HWM, batch by batch;
    below the smallest HWM, every batch's offsets, leader epoch and CRC must agree on all
    replicas and its CRC-32C must check. Prints each partition's lag (max HWM - min HWM) as
    soon as that partition is verified, then each mismatch and each replica that could not
    be read; exits 1 if there is any. On a terminal, a progress bar shows the partitions done."""
    printer = LinePrinter(as_json=as_json)
    try:
        report = run_job(client, topic, spark_master, printer=printer)
    except TidelogError as error:
        printer.stop()  # the bar goes before the error is printed
        click.echo(f"error: {error}", err=True)
        raise SystemExit(EXIT_PROBLEMS) from error
    finally:
        printer.stop()
    now = datetime.now()
    if as_json:
        click.echo(json.dumps(report_json(report, now)))
    else:
        for line in closing_lines(report):
            click.echo(line)
    if not report.ok:
        raise SystemExit(EXIT_PROBLEMS)


class LinePrinter:
    """The command's output while the job runs: a progress bar over the partitions on the
    terminal (stderr's, or stdout's when stdout is one; never in a pipe), and each
    partition's lag line on stdout as soon as it is verified (not with --json)."""

    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json
        on_stdout = sys.stdout.isatty()
        console = Console(stderr=not on_stdout, highlight=False)
        self.progress: Progress | None = None
        self.line_console = console if on_stdout else None
        if console.is_terminal:
            self.progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
        self.task: TaskID | None = None

    def starting(self, master: str, partition_count: int) -> None:
        if self.progress is None:
            return
        self.progress.start()
        self.task = self.progress.add_task(f"starting Spark ({master})", total=partition_count)

    def verifying(self) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, description="partitions verified")

    def done(self, report: ReplicaReport) -> None:
        """A round of partitions is verified: their lines, the bar moved on."""
        if not self.as_json:
            stamp = kafka_time(datetime.now())
            for check in report.partitions:
                self.echo(lag_line(report.topic, check, stamp))
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task, len(report.partitions))

    def echo(self, line: str) -> None:
        if self.line_console is not None and self.progress is not None:
            self.line_console.print(line, markup=False, soft_wrap=True)  # above the bar
        else:
            click.echo(line)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def run_job(
    client: ClientSettings,
    topic: str,
    spark_master: str | None = None,
    *,
    printer: LinePrinter | None = None,
) -> ReplicaReport:
    """The report of one verification; TidelogError for what keeps it from running. The
    `printer` hears of the start and of each round of partitions done."""
    client = answering(client)
    # pyspark takes seconds to import, and its session starts a JVM: only now.
    from tidelog.spark.failures import known_failures  # noqa: PLC0415
    from tidelog.spark.replicas import plan_reads, verify_replicas  # noqa: PLC0415
    from tidelog.spark.session import master_of, spark_session  # noqa: PLC0415

    master = master_of(spark_master)  # a bad master is refused before the JVM starts
    # An unknown topic, or a login refused, fails here, before the JVM starts.
    reads = plan_reads(client.bootstrap, topic, client.security)
    if printer is not None:
        printer.starting(master, len({read.partition for read in reads}))
    spark = spark_session(APP_NAME, master)
    if printer is not None:
        printer.verifying()
    with known_failures():
        return verify_replicas(
            spark,
            client.bootstrap,
            topic,
            client.properties,
            on_partitions=None if printer is None else printer.done,
        )


def kafka_time(now: datetime) -> str:
    return now.strftime(KAFKA_TIME_FORMAT)[:-MICROS_DROPPED]


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 'es' if noun.endswith('ch') else 's'}"


def report_lines(report: ReplicaReport, now: datetime) -> list[str]:
    """The lines of the text output, in order: partitions, replica errors, mismatches,
    the verdict (the command prints the partitions' lines as they are done, each with
    its own time)."""
    stamp = kafka_time(now)
    lines = [lag_line(report.topic, check, stamp) for check in report.partitions]
    return [*lines, *closing_lines(report)]


def closing_lines(report: ReplicaReport) -> list[str]:
    """The lines after the partitions': replica errors, mismatches, the verdict."""
    lines = [
        f"replica {r.replica} of partition {report.topic}-{r.partition} could not be read: "
        f"{r.error}"
        for r in report.errors
    ]
    lines += [mismatch_line(report.topic, m) for m in report.mismatches]
    unlisted = report.mismatch_count - len(report.mismatches)
    if unlisted > 0:
        lines.append(f"... and {plural(unlisted, 'more mismatch')}")
    verdict = (
        f"verified {plural(report.batch_count, 'batch')} in "
        f"{plural(len(report.partitions), 'partition')}: "
        f"{plural(report.mismatch_count, 'mismatch')}"
    )
    if report.errors:
        verdict += f", {plural(len(report.errors), 'replica error')}"
    return [*lines, verdict]


def lag_line(topic: str, check: PartitionCheck, stamp: str) -> str:
    among = (
        f"{check.replica_count}"
        if check.answered_count == check.replica_count
        else f"{check.answered_count} of {check.replica_count}"
    )
    if check.lag is None:
        return f"{stamp}: no replica of partition {topic}-{check.partition} could be read"
    return (
        f"{stamp}: max lag is {check.lag} for partition {topic}-{check.partition} "
        f"at offset {check.end_offset} among {among} replicas"
    )


def mismatch_line(topic: str, mismatch: Mismatch) -> str:
    copies = [
        f"replica {c.replica} (last offset {c.last_offset}, epoch {c.epoch}, crc {c.crc:#010x}"
        + ("" if c.crc_ok else ", CRC-32C WRONG")
        + ")"
        for c in mismatch.copies
    ]
    copies += [f"replica {r} missing" for r in mismatch.missing]
    return (
        f"mismatch in partition {topic}-{mismatch.partition} at offset {mismatch.base_offset}: "
        + ", ".join(copies)
    )


def report_json(report: ReplicaReport, now: datetime) -> dict[str, Any]:
    """`--json`: {time, topic, ok, batch_count, mismatch_count, partitions: [...],
    replicas: [...], mismatches: [...]}, as the dataclasses of tidelog.spark.replicas."""
    return {
        "time": kafka_time(now),
        "topic": report.topic,
        "ok": report.ok,
        "batch_count": report.batch_count,
        "mismatch_count": report.mismatch_count,
        "partitions": [asdict(p) for p in report.partitions],
        "replicas": [asdict(r) for r in report.replicas],
        "mismatches": [asdict(m) for m in report.mismatches],
    }
