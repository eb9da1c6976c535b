"""`tidelog perf produce|consume|latency` against one real 3-node cluster.

Small runs only: these tests check the shape of the output and the counts, never a speed
(speed is measured by bench/, not asserted). Each command runs as a real `python -m
tidelog` subprocess, as a user runs it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tidelog.testing.live import LiveCluster, create_topic, tidelog
from tidelog.tools.client_options import resolve_client

RECORDS = 3000
LATENCY_RECORDS = 50
NUMBER = r"\d+(?:\.\d+)?"
PRODUCE_WINDOW = re.compile(
    rf"^\d+ records sent, {NUMBER} records/sec \({NUMBER} MB/sec\), {NUMBER} ms avg latency, "
    rf"{NUMBER} ms max latency\.$"
)
PRODUCE_TOTAL = re.compile(
    rf"^(?P<records>\d+) records sent, {NUMBER} records/sec \({NUMBER} MB/sec\), "
    rf"{NUMBER} ms avg latency, {NUMBER} ms max latency, \d+ ms 50th, \d+ ms 95th, "
    r"\d+ ms 99th, \d+ ms 99\.9th\.$"
)
CONSUME_HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)
TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
CONSUME_LINE = re.compile(
    rf"^{TIME}, {TIME}, (?P<mb>{NUMBER}), {NUMBER}, (?P<records>\d+), {NUMBER}, 0, \d+, "
    rf"{NUMBER}, {NUMBER}$"
)
LATENCY_LINE = re.compile(
    rf"^(?P<records>\d+) records, produce to (?P<what>acknowledge|consume): {NUMBER} ms avg "
    rf"latency, {NUMBER} ms max latency, {NUMBER} ms 50th, {NUMBER} ms 95th, {NUMBER} ms 99th, "
    rf"{NUMBER} ms 99\.9th\.$"
)


def test_produce_then_consume_print_kafka_lines(cluster: LiveCluster) -> None:
    create_topic(cluster.bootstrap, "perf-lines", partitions=3)
    produced = tidelog(
        "perf", "produce", "--topic", "perf-lines", "--num-records", str(RECORDS),
        "--record-size", "100", "--throughput", "-1", "--reporting-interval", "1",
        "--producer-props", "linger.ms=1", "--bootstrap-server", cluster.bootstrap,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    *windows, total = produced.stdout.splitlines()
    assert all(PRODUCE_WINDOW.match(line) for line in windows), windows
    found = PRODUCE_TOTAL.match(total)
    assert found is not None, total
    assert int(found["records"]) == RECORDS

    consumed = tidelog(
        "perf", "consume", "--topic", "perf-lines", "--messages", str(RECORDS),
        "--bootstrap-server", cluster.bootstrap,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    header, line = consumed.stdout.splitlines()
    assert header == CONSUME_HEADER
    found = CONSUME_LINE.match(line)
    assert found is not None, line
    assert int(found["records"]) == RECORDS
    assert float(found["mb"]) == round(RECORDS * 100 / 1024 / 1024, 4)


def test_throttled_produce_json(cluster: LiveCluster) -> None:
    create_topic(cluster.bootstrap, "perf-json", partitions=1)
    produced = tidelog(
        "perf", "produce", "--topic", "perf-json", "--num-records", "200", "--record-size",
        "10", "--throughput", "1000", "--acks", "1", "--json",
        "--bootstrap-server", cluster.bootstrap,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    report = json.loads(produced.stdout)
    assert report["records"] == 200
    assert report["failed"] == 0
    assert report["elapsed_s"] >= 0.19  # 200 records at 1000/s take 0.2 s at least
    assert set(report["latency"]) == {
        "count", "avg_ms", "max_ms", "p50_ms", "p95_ms", "p99_ms", "p999_ms"
    }  # fmt: skip
    assert report["latency"]["count"] == 200


def test_records_a_full_client_queue_refused_are_given_again(cluster: LiveCluster) -> None:
    # librdkafka queues 50 of each 1,000 handed to it; the rest wait for deliveries.
    create_topic(cluster.bootstrap, "perf-queue", partitions=1)
    produced = tidelog(
        "perf", "produce", "--topic", "perf-queue", "--num-records", str(RECORDS), "--json",
        "--producer-props", "queue.buffering.max.messages=50",
        "--bootstrap-server", cluster.bootstrap,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    report = json.loads(produced.stdout)
    assert (report["records"], report["failed"], report["latency"]["count"]) == (
        RECORDS,
        0,
        RECORDS,
    )
    consumed = tidelog(
        "perf", "consume", "--topic", "perf-queue", "--messages", str(RECORDS + 1),
        "--timeout", "2000", "--bootstrap-server", cluster.bootstrap,
    )  # fmt: skip
    # Each record once: one more is never read.
    assert consumed.returncode == 1, consumed.stdout
    assert f"consume ({RECORDS} of {RECORDS + 1} read)" in consumed.stderr, consumed.stderr


def test_latency_measures_every_record(cluster: LiveCluster) -> None:
    create_topic(cluster.bootstrap, "perf-latency", partitions=1)
    measured = tidelog(
        "perf", "latency", "--topic", "perf-latency", "--num-records", str(LATENCY_RECORDS),
        "--bootstrap-server", cluster.bootstrap,
    )  # fmt: skip
    assert measured.returncode == 0, measured.stderr
    lines = [LATENCY_LINE.match(line) for line in measured.stdout.splitlines()]
    assert [m["what"] if m else None for m in lines] == ["acknowledge", "consume"]
    assert all(m is not None and int(m["records"]) == LATENCY_RECORDS for m in lines)


def test_missing_topic_is_a_clean_error(cluster: LiveCluster) -> None:
    consumed = tidelog(
        "perf", "consume", "--topic", "perf-absent", "--messages", "1",
        "--bootstrap-server", cluster.bootstrap,
    )  # fmt: skip
    assert consumed.returncode == 1
    assert consumed.stderr.startswith("error: ")
    assert "Traceback" not in consumed.stderr


def test_a_command_config_file_gives_the_bootstrap_and_client_properties(tmp_path: Path) -> None:
    properties = tmp_path / "client.properties"
    properties.write_text(
        "# a secure cluster's\nbootstrap.servers=127.0.0.1:9500\nsecurity.protocol=SASL_SSL\n"
        "sasl.mechanism=PLAIN\nsasl.username=u\nsasl.password=a=b\nlinger.ms=5\n"
    )
    client = resolve_client(None, properties)
    assert client.bootstrap == "127.0.0.1:9500"
    # perf hands librdkafka every property (under its own --producer-props).
    assert client.properties == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "a=b",
        "linger.ms": "5",
    }
    assert resolve_client("127.0.0.1:9092", properties).bootstrap == "127.0.0.1:9092"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidelog",
            "perf",
            "produce",
            "--topic",
            "t",
            "--num-records",
            "1",
            "--record-size",
            "8",
            "--command-config",
            str(tmp_path / "missing.properties"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "missing.properties" in result.stderr
