"""The Spark source's read rate beside one confluent-kafka consumer (a measurement, not a test).

    .venv/bin/python bench/spark_read.py [--records 5000000] [--record-size 100]
        [--partitions 3] [--runs 3] [--min-partitions N] [--cores 2] [--conf k=v ...]
        [--master spark://HOST:PORT | --standalone-workers N] [--bootstrap HOST:PORT] [--json]

A fresh 3-node cluster on 127.0.0.1 (free ports, a temporary directory; `fresh_cluster` of
bench/failover.py), unless `--bootstrap` names a running one. One topic (`--partitions`,
replication factor 3) is filled once by `tidelog perf produce`'s producer (acks=all, big
linger and batches) with `--records` values of `--record-size` bytes and no keys. Each run
then reads the whole topic twice:

- `consumer`: one confluent-kafka consumer in this process, every partition assigned from
  the beginning, counting records until it has them all (`tidelog perf consume`'s loop);
- `spark source`: `spark.read.format("tidelog")` in local[`--cores`] (or on `--master`, a
  Spark standalone master, or on a standalone cluster of `--standalone-workers` workers of one
  core each that the script starts itself in a temporary directory: `tidelog spark cluster
  up`'s code, and stops after), and one action that
  takes every row through the Python data source (count of rows, sum of the value lengths),
  timed from the action's start to its end; both sums must equal what was produced.

Spark's session start-up, and a first untimed action over the first WARM_UP_RECORDS offsets
of each partition (it starts Spark's Python workers and warms the JVM), are excluded from
the runs and printed on their own. `--min-partitions` passes the source's minPartitions
(more, smaller tasks than partitions) and `--conf` Spark settings. Prints each run,
then the medians of records/s and MB/s (value bytes, 10^6 bytes), the ratio source/consumer
and the goal check (the source reaches at least GOAL_RATIO of the consumer's rate and at
least GOAL_RECORDS_PER_S). `--json` prints one JSON object instead. Every wait is bounded;
the script stops only the cluster it started (and deletes its topic on a `--bootstrap`
cluster).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from client_rates import count_of
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentPartition
from failover import fresh_cluster

from tidelog.spark.standalone import (
    STATE_FILE,
    plan_cluster,
    read_cluster,
    start_stopped,
    stop_daemons,
)
from tidelog.tools.client_kafka import ClientSettings, create_topic, delete_topic
from tidelog.tools.perf import THROUGHPUT_PRODUCER_PROPS, run_consume, run_produce

RECORDS_DEFAULT = 5_000_000
RECORDS_MAX = 100_000_000
RECORD_SIZE_DEFAULT = 100
RECORD_SIZE_MAX = 1 << 20
PARTITIONS_DEFAULT = 3
RUNS_DEFAULT = 3
CORES_DEFAULT = 2
PRODUCE_TIMEOUT_S = 900.0
CONSUME_IDLE_TIMEOUT_S = 30.0
WARM_UP_RECORDS = 100_000
METADATA_TIMEOUT_S = 10.0
STANDALONE_WORKER_MEMORY = "1g"
STANDALONE_READY_TIMEOUT_S = 180.0
GOAL_RATIO = 1.0  # issue 19: at least one confluent-kafka consumer's rate
GOAL_RECORDS_PER_S = 200_000
MB = 1_000_000


class BenchError(Exception):
    """A run did not complete or read a different number of records than were produced."""


@dataclass
class Reader:
    """One way of reading the topic: the seconds each run took for `records` records."""

    name: str
    records: int
    record_size: int
    seconds: list[float] = field(default_factory=list)

    def rates(self) -> list[float]:
        return [self.records / s for s in self.seconds]

    def median(self) -> float:
        return statistics.median(self.rates())

    def mb_per_s(self) -> float:
        return self.median() * self.record_size / MB

    def line(self) -> str:
        runs = "  ".join(f"{r:>9.0f}" for r in self.rates())
        return f"{self.name:<14} {self.median():>12.0f} {self.mb_per_s():>8.1f}   runs: {runs}"


@dataclass(frozen=True)
class Setup:
    bootstrap: str
    topic: str
    records: int
    record_size: int
    partitions: int
    min_partitions: int | None


def fill(setup: Setup) -> float:
    """Create the topic and produce every record; records/s of the fill."""
    create_topic(
        ClientSettings(setup.bootstrap),
        setup.topic,
        partitions=setup.partitions,
        replication_factor=3,
        configs={},
    )
    report = run_produce(
        setup.bootstrap,
        setup.topic,
        num_records=setup.records,
        record_size=setup.record_size,
        throughput=-1,
        props=dict(THROUGHPUT_PRODUCER_PROPS),
        timeout_s=PRODUCE_TIMEOUT_S,
        reporting_interval_s=PRODUCE_TIMEOUT_S,
        report=None,
    )
    if report.failed:
        raise BenchError(f"fill: {report.failed} of {setup.records} records not acknowledged")
    return report.records_per_s


def read_consumer(setup: Setup) -> float:
    """Seconds for one confluent-kafka consumer to read every record."""
    report = run_consume(
        setup.bootstrap,
        setup.topic,
        messages=setup.records,
        props={},
        timeout_s=CONSUME_IDLE_TIMEOUT_S,
    )
    if report.records != setup.records:
        raise BenchError(f"consumer read {report.records} of {setup.records} records")
    return report.records / report.records_per_s


def spark_action(spark: Any, setup: Setup, **options: str) -> tuple[int, int, float]:
    """(rows, value bytes, seconds) of one action that takes every row of the source
    through Spark: a count and a sum of the value lengths, one row back to the driver."""
    from pyspark.sql import functions as F  # noqa: PLC0415 - pyspark is heavy

    reader = (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", setup.bootstrap)
        .option("subscribe", setup.topic)
    )
    if setup.min_partitions:
        reader = reader.option("minPartitions", str(setup.min_partitions))
    for name, value in options.items():
        reader = reader.option(name, value)
    started = time.monotonic()
    sizes = reader.load().select(F.length("value").alias("size"))
    row = sizes.agg(F.count("*").alias("records"), F.sum("size").alias("bytes")).collect()[0]
    return int(row["records"]), int(row["bytes"] or 0), time.monotonic() - started


def read_spark(spark: Any, setup: Setup) -> float:
    """Seconds for the Spark source to read every record."""
    records, size_bytes, elapsed = spark_action(spark, setup)
    if records != setup.records:
        raise BenchError(f"spark source read {records} of {setup.records} records")
    if size_bytes != setup.records * setup.record_size:
        raise BenchError(f"spark source read {size_bytes} value bytes, not the produced ones")
    return elapsed


def warm_up(spark: Any, setup: Setup) -> float:
    """Seconds of a first, untimed action over the first WARM_UP_RECORDS offsets of each
    partition: it starts Spark's Python workers and compiles the JVM's hot paths."""
    client = Consumer({"bootstrap.servers": setup.bootstrap, "group.id": "bench-warm-up"})
    try:
        ends = {}
        for partition in range(setup.partitions):
            low, high = client.get_watermark_offsets(
                ConfluentPartition(setup.topic, partition), timeout=METADATA_TIMEOUT_S
            )
            ends[str(partition)] = min(high, low + WARM_UP_RECORDS)
    finally:
        client.close()
    records, _, elapsed = spark_action(spark, setup, endingOffsets=json.dumps({setup.topic: ends}))
    if records == 0:
        raise BenchError("the warm-up read nothing")
    return elapsed


@contextlib.contextmanager
def cluster_for(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    with fresh_cluster() as cluster:
        yield cluster.bootstrap


@contextlib.contextmanager
def master_for(arguments: argparse.Namespace) -> Iterator[tuple[str, int]]:
    """(the Spark master, the cores the job takes): local[--cores], --master, or a
    standalone cluster of --standalone-workers workers started here (one core each)."""
    if arguments.master:
        yield arguments.master, arguments.cores
        return
    if not arguments.standalone_workers:
        yield f"local[{arguments.cores}]", arguments.cores
        return
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as directory:
        record = plan_cluster(
            Path(directory),
            workers=arguments.standalone_workers,
            base_port=None,
            worker_memory=STANDALONE_WORKER_MEMORY,
        )
        try:
            record = start_stopped(record, timeout_s=STANDALONE_READY_TIMEOUT_S)
            yield record.master_url, arguments.standalone_workers
        finally:  # the file has every PID started, even if start_stopped failed part-way
            if (Path(directory) / STATE_FILE).exists():
                stop_daemons(read_cluster(Path(directory)))


def spark_session(master: str, cores: int, confs: list[tuple[str, str]]) -> Any:
    """spark_session on `master`, with `confs` given to spark-submit (static ones) and set
    again on the session where Spark lets them change at run time."""
    if confs:
        given = " ".join(f"--conf {k}={v}" for k, v in confs)
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"{given} pyspark-shell"
    from tidelog.spark.session import spark_session as session  # noqa: PLC0415 - pyspark

    spark = session("tidelog-bench-spark-read", master, cores=cores)
    for key, value in confs:
        if spark.conf.isModifiable(key):
            spark.conf.set(key, value)
    return spark


def run(arguments: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    readers = [
        Reader("consumer", arguments.records, arguments.record_size),
        Reader("spark source", arguments.records, arguments.record_size),
    ]
    topic = f"spark-read-{uuid.uuid4().hex[:8]}"
    with cluster_for(arguments.bootstrap) as bootstrap, master_for(arguments) as (master, cores):
        setup = Setup(
            bootstrap,
            topic,
            arguments.records,
            arguments.record_size,
            arguments.partitions,
            arguments.min_partitions,
        )
        say(f"filling {topic}: {setup.records} records of {setup.record_size} bytes ...")
        fill_rate = fill(setup)
        say(f"filled at {fill_rate:.0f} records/s")
        started = time.monotonic()
        spark = spark_session(master, cores, arguments.conf)
        startup_s = time.monotonic() - started
        say(f"spark session on {master} ({cores} cores) started in {startup_s:.1f} s (not timed)")
        try:
            warm_up_s = warm_up(spark, setup)
            say(f"warm-up action (untimed): {warm_up_s:.1f} s")
            for number in range(1, arguments.runs + 1):
                steps: list[tuple[Reader, Callable[[], float]]] = [
                    (readers[0], lambda: read_consumer(setup)),
                    (readers[1], lambda: read_spark(spark, setup)),
                ]
                for reader, step in steps:
                    reader.seconds.append(step())
                    rate = reader.rates()[-1]
                    say(f"run {number}: {reader.name:<14} {rate:>9.0f} records/s")
        finally:
            spark.stop()
            if arguments.bootstrap:
                delete_topic(ClientSettings(bootstrap), topic)
    consumer, source = readers
    ratio = source.median() / consumer.median()
    return {
        "records": arguments.records,
        "record_size": arguments.record_size,
        "partitions": arguments.partitions,
        "min_partitions": arguments.min_partitions,
        "cores": cores,
        "master": "local" if master.startswith("local") else "standalone",
        "standalone_workers": arguments.standalone_workers,
        "conf": dict(arguments.conf),
        "fill_records_per_s": fill_rate,
        "spark_startup_s": startup_s,
        "spark_warm_up_s": warm_up_s,
        "readers": [
            {**asdict(r), "records_per_s": r.median(), "mb_per_s": r.mb_per_s()} for r in readers
        ],
        "ratio": ratio,
        "goal_met": ratio >= GOAL_RATIO and source.median() >= GOAL_RECORDS_PER_S,
        "table": [consumer.line(), source.line()],
    }


def print_table(result: dict[str, Any]) -> None:
    print(
        f"\n{result['records']} records of {result['record_size']} bytes, "
        f"{result['partitions']} partitions (RF 3), Spark {where(result)}, "
        f"median of {len(result['readers'][0]['seconds'])} runs"
    )
    print(f"{'reader':<14} {'records/s':>12} {'MB/s':>8}")
    for line in result["table"]:
        print(line)
    verdict = "met" if result["goal_met"] else "NOT met"
    print(
        f"ratio source/consumer {result['ratio']:.2f}; goal (>= {GOAL_RATIO:g} and >= "
        f"{GOAL_RECORDS_PER_S} records/s): {verdict}"
    )


def where(result: dict[str, Any]) -> str:
    if result["master"] == "local":
        return f"local[{result['cores']}]"
    workers = result["standalone_workers"]
    return f"standalone ({workers or '?'} workers, {result['cores']} cores)"


def conf_pair(text: str) -> tuple[str, str]:
    key, found, value = text.partition("=")
    if not found or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=count_of(RECORDS_MAX), default=RECORDS_DEFAULT)
    parser.add_argument(
        "--record-size", type=count_of(RECORD_SIZE_MAX), default=RECORD_SIZE_DEFAULT
    )
    parser.add_argument("--partitions", type=count_of(64), default=PARTITIONS_DEFAULT)
    parser.add_argument("--runs", type=count_of(10), default=RUNS_DEFAULT)
    parser.add_argument(
        "--min-partitions",
        type=count_of(256),
        default=None,
        help="The source's minPartitions option (Spark tasks; default one per partition).",
    )
    parser.add_argument("--cores", type=count_of(64), default=CORES_DEFAULT)
    parser.add_argument(
        "--conf",
        type=conf_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A Spark setting (repeatable); local_session's own settings win over these.",
    )
    where_to = parser.add_mutually_exclusive_group()
    where_to.add_argument(
        "--master", help="A Spark standalone master (spark://HOST:PORT) instead of local."
    )
    where_to.add_argument(
        "--standalone-workers",
        type=count_of(16),
        default=None,
        help="Start a standalone cluster of this many 1-core workers for the run.",
    )
    parser.add_argument("--bootstrap", help="Use this running cluster instead of a fresh one.")
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    arguments = parser.parse_args()
    # With --json, progress goes to stderr so stdout holds the JSON object only.
    say: Callable[[str], None] = functools.partial(
        print, file=sys.stderr if arguments.json else sys.stdout, flush=True
    )
    result = run(arguments, say)
    if arguments.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)


if __name__ == "__main__":
    try:
        main()
    except BenchError as error:
        raise SystemExit(f"error: {error}") from None
