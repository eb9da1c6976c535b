"""`tidelog verify-replicas TOPIC`: every replica's committed batches compared, as
kafka-replica-verification does, by a local Spark batch job (`tidelog.spark.replicas`).

Output, one line each (`--json`: one object instead):

    2026-01-02 03:04:05,678: max lag is 0 for partition orders-0 at offset 1234 among 3 replicas
    replica 2 of partition orders-1 could not be read: 127.0.0.1:9093, fetch offset 0: ...
    mismatch in partition orders-2 at offset 17: replica 1 (last offset 20, epoch 3, crc ...
    verified 42 batches in 3 partitions: 0 mismatches

Rules of this file:
- Exit 0 only when no batch mismatches and every replica was read; 1 otherwise. Expected
  failures (no broker, unknown topic, no Java) print `error: ...` on stderr and exit 1;
  click's usage errors exit 2.
- `--command-config` (`tools.client_options`) reaches a secure cluster: its properties
  are the job's `kafka.*` options, and every connection of the job (the driver's Metadata
  and ListOffsets, each replica's Fetch) is TLS and SASL as they say.
- The bootstrap address is probed before Spark starts, so a cluster that is down fails in
  seconds; pyspark is imported only when the command runs, so `tidelog --help` stays fast.
- The Spark session is left running: in a test it is shared, and a command's process ends
  with it anyway.
- `--spark-master` (or TIDELOG_SPARK_MASTER) runs the job on a Spark standalone master
  (`tidelog spark cluster up` prints one); without either it runs in local[2].
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import click

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
    replicas and its CRC-32C must check. Prints each partition's lag (max HWM - min HWM),
    each mismatch and each replica that could not be read; exits 1 if there is any."""
    try:
        report = run_job(client, topic, spark_master)
    except TidelogError as error:
        click.echo(f"error: {error}", err=True)
        raise SystemExit(EXIT_PROBLEMS) from error
    now = datetime.now()
    if as_json:
        click.echo(json.dumps(report_json(report, now)))
    else:
        for line in report_lines(report, now):
            click.echo(line)
    if not report.ok:
        raise SystemExit(EXIT_PROBLEMS)


def run_job(client: ClientSettings, topic: str, spark_master: str | None = None) -> ReplicaReport:
    """The report of one verification; TidelogError for what keeps it from running."""
    client = answering(client)
    # pyspark takes seconds to import, and its session starts a JVM: only now.
    from tidelog.spark.replicas import plan_reads, verify_replicas  # noqa: PLC0415
    from tidelog.spark.session import master_of, spark_session  # noqa: PLC0415

    master = master_of(spark_master)  # a bad master is refused before the JVM starts
    # An unknown topic, or a login refused, fails here, before the JVM starts.
    plan_reads(client.bootstrap, topic, client.security)
    spark = spark_session(APP_NAME, master)
    return verify_replicas(spark, client.bootstrap, topic, client.properties)


def kafka_time(now: datetime) -> str:
    return now.strftime(KAFKA_TIME_FORMAT)[:-MICROS_DROPPED]


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 'es' if noun.endswith('ch') else 's'}"


def report_lines(report: ReplicaReport, now: datetime) -> list[str]:
    """The lines of the text output, in order: partitions, replica errors, mismatches,
    the verdict."""
    stamp = kafka_time(now)
    lines = [lag_line(report.topic, check, stamp) for check in report.partitions]
    lines += [
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
