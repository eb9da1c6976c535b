"""The Spark source and sink against a real 3-node cluster, in one local[2] Spark session.

A Spark result holds committed records only: records a leader appended but its followers
have not (above the HWM) stay out of batch reads and streams until the followers return. A
streaming query restarted from its checkpoint reads every offset once; deleted offsets fail
the query, or are skipped with failOnDataLoss=false; the sink writes what the source reads.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from tidelog.cli import main
from tidelog.spark.failures import SparkJobFailed, known_failures, tidelog_cause
from tidelog.spark.source import offsets_behind_latest
from tidelog.status import read_status
from tidelog.testing.live import LiveCluster, create_topic, tidelog
from tidelog.tools.client_kafka import ClientSettings, describe_topics

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
QUERY_TIMEOUT_S = 180

Record = tuple[int, int, bytes | None, bytes]  # partition, offset, key, value
SPARK_OPTION_ERROR = "tidelog.spark.options.SparkOptionError"


def produce(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    *,
    acks: str = "all",
    headers: list[tuple[str, bytes]] | None = None,
) -> list[Record]:
    """Produce `values` keyed k<i>, return what was acknowledged (all of it, or fail)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "log_level": 0}
    )
    acked: list[Record] = []

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        acked.append((message.partition(), message.offset(), message.key(), message.value()))

    for i, value in enumerate(values):
        producer.produce(topic, value, f"k{i}".encode(), headers=headers, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0
    assert len(acked) == len(values)
    return acked


def source(spark: SparkSession, bootstrap: str, topic: str, **options: str) -> DataFrame:
    reader = spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
    return reader.option("subscribe", topic).options(**options).load()


def records_of(frame: DataFrame) -> list[Record]:
    rows = frame.select("partition", "offset", "key", "value").collect()
    return sorted((r.partition, r.offset, r.key, r.value) for r in rows)


def stream_to_parquet(
    spark: SparkSession, bootstrap: str, topic: str, out: Path, **options: str
) -> StreamingQuery:
    """One Trigger.AvailableNow run of topic -> Parquet (exactly-once file sink), to its end."""
    stream = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
        .select("partition", "offset", "key", "value")
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not finish"
    return query


def parquet_records(spark: SparkSession, out: Path) -> list[Record]:
    return records_of(spark.read.parquet(str(out / "data")))


def leader_and_followers(bootstrap: str, topic: str) -> tuple[int, list[int]]:
    (partition,) = describe_topics(ClientSettings(bootstrap), [topic])
    return partition.leader, [n for n in partition.replicas if n != partition.leader]


def cluster_command(cluster: LiveCluster, *args: str) -> None:
    result = tidelog("cluster", *args, "--data-dir", str(cluster.directory))
    assert result.returncode == 0, result.stdout + result.stderr


def hwm_of(bootstrap: str, topic: str) -> int:
    """Partition 0's HWM, asked of its leader (ListOffsets latest)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:  # a leader that just changed: ask again, with fresh metadata
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hwm", "log_level": 0})
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
            return int(high)
        except KafkaException as error:
            moved = error.args[0].code() in (
                KafkaError.NOT_LEADER_FOR_PARTITION,
                KafkaError.LEADER_NOT_AVAILABLE,
            )
            if not (moved or error.args[0].retriable()) or time.monotonic() > deadline:
                raise
        finally:
            consumer.close()
        time.sleep(0.2)


def leader_caught_up(cluster: LiveCluster, topic: str) -> bool:
    """Whether partition 0's leader has committed its whole log (HWM = log end offset)."""
    for node in cluster.record["nodes"]:
        status = read_status(node["admin"])
        if status is None:
            continue
        for p in status["partitions"]:
            if (p["topic"], p["partition"], p["role"]) == (topic, 0, "leader"):
                return bool(p["hwm"] == p["log_end_offset"])
    return False


def wait_until_committed(cluster: LiveCluster, topic: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not leader_caught_up(cluster, topic):
        assert time.monotonic() < deadline, f"{topic}: the leader's log never all committed"
        time.sleep(0.1)


def consumed(bootstrap: str, topic: str) -> list[Record]:
    """Partition 0 up to its HWM, read by a plain confluent-kafka consumer."""
    hwm = hwm_of(bootstrap, topic)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    records: list[Record] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not records or records[-1][1] < hwm - 1:
            assert time.monotonic() < deadline, f"{topic}: not read up to {hwm}"
            for m in consumer.consume(1000, 0.5):
                if m.error() is None:
                    records.append((m.partition(), m.offset(), m.key(), m.value()))
                elif m.offset() >= hwm:  # the end of the partition: control batches last
                    return sorted(records)
    finally:
        consumer.close()
    return sorted(records)


# Batch


def test_batch_read_equals_the_records_below_the_hwm(
    cluster: LiveCluster, spark: SparkSession
) -> None:
    bootstrap, topic = cluster.bootstrap, "spark-batch"
    create_topic(bootstrap, topic, partitions=3)
    started_ms = int(time.time() * 1000)
    acked = produce(bootstrap, topic, [f"v{i}".encode() for i in range(300)], headers=[("h", b"x")])

    frame = source(spark, bootstrap, topic, includeHeaders="true")
    assert frame.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert records_of(frame) == sorted(acked)
    row = frame.where("offset = 1").first()
    assert row is not None
    assert row.topic == topic
    assert row.timestampType == 0  # CreateTime
    assert started_ms - 1000 <= row.timestamp.timestamp() * 1000 <= time.time() * 1000 + 1000
    assert [(h.key, h.value) for h in row.headers] == [("h", b"x")]

    # Offsets as JSON (-2 earliest, -1 latest), split over more tasks than partitions.
    first = min(offset for partition, offset, _, _ in acked if partition == 0)
    ranged = source(
        spark,
        bootstrap,
        topic,
        startingOffsets=json.dumps({topic: {"0": first + 10, "1": -2, "2": -2}}),
        endingOffsets=json.dumps({topic: {"0": first + 20, "1": -1, "2": -1}}),
        minPartitions="7",
    )
    expected = [r for r in sorted(acked) if r[0] != 0 or first + 10 <= r[1] < first + 20]
    assert records_of(ranged) == expected
    assert ranged.rdd.getNumPartitions() >= 7

    # A pattern and fixed partitions, as Spark's Kafka source takes them.
    reader = spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
    by_pattern = reader.option("subscribePattern", "spark-ba.*").load()
    assert records_of(by_pattern) == sorted(acked)
    assigned = (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({topic: [1]}))
        .load()
    )
    assert records_of(assigned) == sorted(r for r in acked if r[0] == 1)


def test_starting_by_timestamp(cluster: LiveCluster, spark: SparkSession) -> None:
    bootstrap, topic = cluster.bootstrap, "spark-time"
    create_topic(bootstrap, topic, partitions=1)
    produce(bootstrap, topic, [f"early {i}".encode() for i in range(50)])
    deadline = time.monotonic() + DEADLINE_S
    later_ms = int(time.time() * 1000) + 5  # later than every record so far
    while time.time() * 1000 <= later_ms:
        assert time.monotonic() < deadline
    produce(bootstrap, topic, [f"late {i}".encode() for i in range(50)])

    rows = source(spark, bootstrap, topic, startingTimestamp=str(later_ms)).collect()
    assert sorted(r.value for r in rows) == sorted(f"late {i}".encode() for i in range(50))
    by_partition = json.dumps({topic: {"0": later_ms}})
    assert source(spark, bootstrap, topic, startingOffsetsByTimestamp=by_partition).count() == 50
    future = str(int(time.time() * 1000) + 3_600_000)
    with pytest.raises(PySparkException, match="at or after timestamp"):
        source(spark, bootstrap, topic, startingTimestamp=future).collect()
    strategy = {"startingOffsetsByTimestampStrategy": "latest"}
    assert source(spark, bootstrap, topic, startingTimestamp=future, **strategy).count() == 0


def test_bad_options_are_clear_errors(cluster: LiveCluster, spark: SparkSession) -> None:
    with pytest.raises(PySparkException, match="exactly one of subscribe"):
        spark.read.format("tidelog").option(
            "kafka.bootstrap.servers", cluster.bootstrap
        ).load().collect()
    with pytest.raises(PySparkException, match="unknown topic"):
        source(spark, cluster.bootstrap, "no-such-topic").collect()


def first_line(error: BaseException) -> str:
    return str(error).splitlines()[0]


def test_the_cause_comes_first(cluster: LiveCluster, spark: SparkSession, tmp_path: Path) -> None:
    """tidelog's one-line message right after Spark's wrapper, on the first line of what
    the user reads, not after the worker's traceback; the CLI turns it into `error: ...`."""
    misspelled = "unknown option 'subscrbe' (did you mean 'subscribe'?)"
    reader = spark.read.format("tidelog").option("kafka.bootstrap.servers", cluster.bootstrap)
    with pytest.raises(PySparkException) as batch:
        reader.option("subscrbe", "orders").load().collect()
    assert first_line(batch.value).endswith(f"reader: {SPARK_OPTION_ERROR}: {misspelled}")
    assert "Traceback" not in str(batch.value)
    with pytest.raises(SparkJobFailed, match=re.escape(misspelled)), known_failures():
        reader.option("subscrbe", "orders").load().collect()

    stream = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscrbe", "orders")
        .load()
        .writeStream.format("tidelog")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("topic", "orders")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(PySparkException) as streamed:
        stream.awaitTermination(QUERY_TIMEOUT_S)
    assert first_line(streamed.value).endswith(f"{SPARK_OPTION_ERROR}: {misspelled}")

    with pytest.raises(PySparkException) as unknown:
        source(spark, cluster.bootstrap, "no-such-topic").collect()
    assert first_line(unknown.value).endswith(
        f"unknown topic(s) at {cluster.bootstrap}: no-such-topic"
    )
    assert tidelog_cause(unknown.value) == f"unknown topic(s) at {cluster.bootstrap}: no-such-topic"


# Committed records only


def test_records_above_the_hwm_stay_out_until_the_followers_return(
    cluster: LiveCluster, spark: SparkSession, tmp_path: Path
) -> None:
    """min.insync.replicas=3: with one follower paused the leader keeps its quorum and takes
    acks=1 writes, but its HWM cannot pass them until the follower has them too."""
    bootstrap, topic = cluster.bootstrap, "spark-stall"
    create_topic(bootstrap, topic, partitions=1, configs={"min.insync.replicas": "3"})
    committed = produce(bootstrap, topic, [b"committed"] * 5)
    _, followers = leader_and_followers(bootstrap, topic)
    hwm = hwm_of(bootstrap, topic)

    cluster_command(cluster, "pause", "--node", str(followers[0]))
    try:
        pending = produce(bootstrap, topic, [b"pending"] * 7, acks="1")
        assert hwm_of(bootstrap, topic) == hwm
        assert min(offset for _, offset, _, _ in pending) >= hwm  # in the log, above the HWM
        assert records_of(source(spark, bootstrap, topic)) == sorted(committed)
        stream_to_parquet(spark, bootstrap, topic, tmp_path)
        assert parquet_records(spark, tmp_path) == sorted(committed)
    finally:
        cluster_command(cluster, "resume", "--node", str(followers[0]))

    wait_until_committed(cluster, topic)
    final = consumed(bootstrap, topic)
    # acks=1 writes are lost if the leader changes meanwhile (a loaded machine can starve
    # the leader past its election timeout); without a change they are all committed now.
    assert set(committed) <= set(final)
    assert {value for _, _, _, value in final} <= {b"committed", b"pending"}
    assert records_of(source(spark, bootstrap, topic)) == final
    stream_to_parquet(spark, bootstrap, topic, tmp_path)  # the same checkpoint, again
    assert parquet_records(spark, tmp_path) == final


# Streaming


def test_a_restarted_query_reads_every_offset_once(
    cluster: LiveCluster, spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap, topic, group = cluster.bootstrap, "spark-stream", "spark-stream-job"
    create_topic(bootstrap, topic, partitions=3)
    first = produce(bootstrap, topic, [f"a{i}".encode() for i in range(600)])
    options = {"maxOffsetsPerTrigger": "100", "kafka.group.id": group}

    query = stream_to_parquet(spark, bootstrap, topic, tmp_path, **options)
    assert len(query.recentProgress) >= 6  # 600 offsets, at most 100 per micro-batch
    assert max(p["numInputRows"] for p in query.recentProgress) <= 100
    assert parquet_records(spark, tmp_path) == sorted(first)

    second = produce(bootstrap, topic, [f"b{i}".encode() for i in range(400)])
    query = stream_to_parquet(spark, bootstrap, topic, tmp_path, **options)
    assert parquet_records(spark, tmp_path) == sorted(first + second)  # no duplicate, no gap
    last = [p for p in query.recentProgress if p["numInputRows"]][-1]["sources"][0]
    assert offsets_behind_latest(last) == {
        "minOffsetsBehindLatest": 0.0,
        "maxOffsetsBehindLatest": 0.0,
        "avgOffsetsBehindLatest": 0.0,
    }

    # The query's committed offsets are the group's: `groups describe` shows lag 0.
    described = tidelog("groups", "describe", group, "--bootstrap-server", bootstrap, "--json")
    assert described.returncode == 0, described.stderr
    rows = json.loads(described.stdout)["offsets"]
    assert sorted((r["topic"], r["partition"]) for r in rows) == [(topic, p) for p in range(3)]
    assert all(r["lag"] == 0 for r in rows), rows


def test_deleted_offsets_fail_the_query_unless_told_to_skip(
    cluster: LiveCluster, spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap, topic = cluster.bootstrap, "spark-loss"
    create_topic(bootstrap, topic, partitions=1)
    produce(bootstrap, topic, [b"read"] * 100)
    stream_to_parquet(spark, bootstrap, topic, tmp_path)  # checkpointed at the HWM
    later = produce(bootstrap, topic, [b"later"] * 100)
    cut = later[49][1]  # offsets below it are deleted before the query runs again
    deleted = tidelog(
        "delete-records",
        topic,
        "--partition",
        "0",
        "--offset",
        str(cut),
        "--bootstrap-server",
        bootstrap,
    )
    assert deleted.returncode == 0, deleted.stderr

    with pytest.raises(PySparkException, match="were deleted"):
        stream_to_parquet(spark, bootstrap, topic, tmp_path)
    with pytest.raises(PySparkException, match="were deleted"):
        source(spark, bootstrap, topic, startingOffsets=json.dumps({topic: {"0": 1}})).collect()

    stream_to_parquet(spark, bootstrap, topic, tmp_path, failOnDataLoss="false")
    values = [value for _, _, _, value in parquet_records(spark, tmp_path)]
    assert values == [b"read"] * 100 + [b"later"] * 51
    skipped = source(
        spark,
        bootstrap,
        topic,
        startingOffsets=json.dumps({topic: {"0": 1}}),
        failOnDataLoss="false",
    )
    assert records_of(skipped) == sorted(later[49:])


# Sink


def test_the_sink_writes_what_the_source_reads(
    cluster: LiveCluster, spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "spark-sink", partitions=2)
    rows = [(f"k{i}", f"value {i}".encode(), i % 2, [("n", str(i).encode())]) for i in range(200)]
    frame = spark.createDataFrame(
        rows,
        "key string, value binary, partition int, headers array<struct<key:string,value:binary>>",
    )
    (
        frame.write.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "spark-sink")
        .mode("append")
        .save()
    )
    back = source(spark, bootstrap, "spark-sink", includeHeaders="true").collect()
    written = sorted(
        (r.key.decode(), r.value, r.partition, [(h.key, h.value) for h in r.headers]) for r in back
    )
    assert written == sorted(rows)

    # A stream through the sink: spark-sink -> spark-sink-copy, the topic as a column.
    create_topic(bootstrap, "spark-sink-copy", partitions=2)
    copy = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "spark-sink")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value", "partition", "'spark-sink-copy' AS topic")
        .writeStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert copy.awaitTermination(QUERY_TIMEOUT_S)
    copied = source(spark, bootstrap, "spark-sink-copy").collect()
    assert sorted((r.key, r.value, r.partition) for r in copied) == sorted(
        (k.encode(), v, p) for k, v, p, _ in rows
    )


def test_the_sink_refuses_what_it_cannot_write(cluster: LiveCluster, spark: SparkSession) -> None:
    def writer(columns: str, **options: str) -> Any:
        frame = spark.createDataFrame([("x",)], columns)
        sink = frame.write.format("tidelog").option("kafka.bootstrap.servers", cluster.bootstrap)
        return sink.options(**options)

    with pytest.raises(PySparkException, match="needs a column named value"):
        writer("key string", topic="spark-sink").mode("append").save()
    with pytest.raises(PySparkException, match="overwrite is not allowed"):
        writer("value string", topic="spark-sink").mode("overwrite").save()
    with pytest.raises(PySparkException, match="name the topic"):
        writer("value string").mode("append").save()
    with pytest.raises(PySparkException, match=r"not acknowledged.*Unknown topic"):
        writer("value string", topic="no-such-topic").mode("append").save()


def test_the_source_and_sink_over_sasl_ssl(spark: SparkSession, tmp_path: Path) -> None:
    """Security options pass through as `kafka.*` (librdkafka's names, as the source and
    sink pass every other one): a secured cluster's SASL_SSL listener, user `admin`; with a
    wrong password the query fails. `verify-replicas --command-config` reads every replica
    over SASL_SSL too, and with a wrong password says so."""
    secure = LiveCluster(tmp_path / "secure", secure=True)
    try:
        settings = dict(secure.sasl_properties)
        bootstrap = settings.pop("bootstrap.servers")
        settings["sasl.mechanisms"] = settings.pop("sasl.mechanism")
        options = {f"kafka.{name}": value for name, value in settings.items()}
        create_topic(bootstrap, "spark-secure", partitions=2, **secure.sasl_settings)
        rows = [(f"k{i}", f"secret {i}".encode()) for i in range(50)]
        frame = spark.createDataFrame(rows, "key string, value binary")
        sink = frame.write.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
        sink.option("topic", "spark-secure").options(**options).mode("append").save()
        back = source(spark, bootstrap, "spark-secure", **options).collect()
        assert sorted((r.key.decode(), r.value) for r in back) == sorted(rows)
        wrong = {**options, "kafka.sasl.password": "not-the-password"}
        # librdkafka reports a failed authentication as a broker transport failure.
        with pytest.raises(PySparkException, match=r"metadata from .*Broker transport failure"):
            source(spark, bootstrap, "spark-secure", **wrong).collect()
        config = ("--command-config", str(secure.sasl_properties_path))
        verified = CliRunner().invoke(main, ["verify-replicas", "spark-secure", "--json", *config])
        assert verified.exit_code == 0, verified.output
        report = json.loads(verified.stdout)
        assert report["ok"] and len(report["replicas"]) == 6 and report["batch_count"] >= 2
        wrong_file = tmp_path / "wrong.properties"
        lines = [f"{k}={v}" for k, v in secure.sasl_properties.items() if k != "sasl.password"]
        wrong_file.write_text("\n".join([*lines, "sasl.password=not-the-password"]) + "\n")
        refused = CliRunner().invoke(
            main, ["verify-replicas", "spark-secure", "--command-config", str(wrong_file)]
        )
        assert refused.exit_code == 1
        assert "Authentication failed" in refused.stderr, refused.stderr
    finally:
        secure.down()
