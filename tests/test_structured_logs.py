"""Structured logs (`--log-format json`, server/logs.py): the formatter's lines, and the
lines of real brokers started by `tidelog cluster up --log-format json`.

The formatter is checked on records made as a call site makes them (`extra=` of
`partition_fields`), written through a real handler into a buffer: no mocks. The live test
starts a 3-node cluster on 127.0.0.1 and stops it with `cluster down` (by the PIDs it
recorded); every wait polls with a deadline.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer

from tidelog.server.logs import JsonFormatter, configure_logging, formatter_for, partition_fields
from tidelog.testing.live import LiveCluster, create_topic, eventually, tidelog
from tidelog.tools.cluster import (
    CLUSTER_FILE,
    LOG_NAME,
    broker_argv,
    last_error_line,
    plan_cluster,
    read_cluster,
)

FIELDS = ("time", "level", "node", "logger", "event")
ISO_UTC_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
CLUSTER_LINE = "--- tidelog cluster: "  # what `cluster up` itself writes to a node's log
TOPIC = "structured"


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger of its own whose records go, as JSON lines of node 7, to a buffer."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonFormatter(node_id=7))
    logger = logging.getLogger("tidelog.test_structured_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, buffer
    logger.removeHandler(handler)
    logger.propagate = True


def lines_of(buffer: io.StringIO) -> list[dict[str, Any]]:
    """Every line written, each parsed as one JSON object."""
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_a_json_line_has_the_fields_and_the_formatted_message(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, buffer = captured
    logger.info("node %d serving", 7)
    [line] = lines_of(buffer)
    assert list(line) == list(FIELDS)
    assert ISO_UTC_MS.fullmatch(line["time"]), line["time"]
    assert (line["level"], line["node"], line["logger"]) == (
        "INFO",
        7,
        "tidelog.test_structured_logs",
    )
    assert line["event"] == "node 7 serving"


def test_a_partition_s_fields_come_from_extra(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, buffer = captured
    logger.info(
        "%s-%d: %s in epoch %d", "orders", 2, "leader", 5, extra=partition_fields("orders", 2, 5)
    )
    logger.warning("%s-%d: closed unsynced", "orders", 3, extra=partition_fields("orders", 3))
    first, second = lines_of(buffer)
    assert first["event"] == "orders-2: leader in epoch 5"
    assert (first["topic"], first["partition"], first["epoch"]) == ("orders", 2, 5)
    assert (second["topic"], second["partition"]) == ("orders", 3)
    assert "epoch" not in second  # not known at that call site: left out, never null


def test_an_exception_is_one_string_field_and_a_record_stays_one_line(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, buffer = captured
    try:
        raise OSError(28, "No space left on device")
    except OSError:
        logger.exception("the stream to node %d failed\nsecond line", 3)
    text = buffer.getvalue()
    assert text.count("\n") == 1  # the newlines of message and traceback are escaped
    [line] = lines_of(buffer)
    assert line["level"] == "ERROR"
    assert line["event"] == "the stream to node 3 failed\nsecond line"
    assert line["exception"].startswith("Traceback (most recent call last):")
    assert line["exception"].endswith("OSError: [Errno 28] No space left on device")


def test_the_text_format_is_unchanged_and_ignores_the_fields() -> None:
    record = logging.LogRecord(
        "tidelog.server.partition", logging.INFO, __file__, 1, "%s-%d: leader", ("a", 0), None
    )
    record.__dict__.update(partition_fields("a", 0, 1))
    text = formatter_for("text", node_id=1).format(record)
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO tidelog.server.partition: a-0: leader", text
    ), text


def test_configure_logging_keeps_a_handler_already_there() -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    assert before, "pytest's own handlers are on the root logger"
    configure_logging(log_level="debug", log_format="json", node_id=1)
    assert root.handlers == before


def test_cluster_up_passes_the_log_format_to_every_broker(tmp_path: Path) -> None:
    record = plan_cluster(tmp_path, nodes=2, base_port=9092)
    assert not any(word.startswith("--log-format") for word in broker_argv(record, record.node(1)))
    json_record = replace(record, log_format="json")
    assert broker_argv(json_record, json_record.node(2))[-1] == "--log-format=json"


def test_cluster_status_finds_the_last_error_of_a_json_log(tmp_path: Path) -> None:
    node = plan_cluster(tmp_path, nodes=1, base_port=9092).node(1)
    Path(node.data_dir).mkdir(parents=True)
    error = {"time": "2026-01-02T03:04:05.678Z", "level": "ERROR", "node": 1, "event": "x"}
    after = {**error, "level": "INFO", "event": "y"}
    lines = [json.dumps(error), json.dumps(after)]
    (Path(node.data_dir) / LOG_NAME).write_text("\n".join(lines) + "\n")
    assert last_error_line(node) == json.dumps(error)


def test_brokers_started_with_log_format_json_write_only_json_lines(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path / "cluster", log_format="json")
    try:
        assert read_cluster(cluster.directory).log_format == "json"
        assert '"log_format": "json"' in (cluster.directory / CLUSTER_FILE).read_text()
        create_topic(cluster.bootstrap, TOPIC, partitions=2)

        def a_role_change_of_the_topic() -> bool:
            return any(
                line.get("topic") == TOPIC and " in epoch " in line["event"]
                for line in broker_lines(cluster, node=1)
            )

        eventually(a_role_change_of_the_topic, f"node 1 logs a role change of {TOPIC}")
    finally:
        cluster.down()
    for node in cluster.nodes:  # the lines of the controlled shutdown too
        lines = broker_lines(cluster, node=node)
        assert lines, f"node {node} logged nothing"
        for line in lines:
            assert set(FIELDS) <= set(line), line
            assert line["node"] == node
            assert ISO_UTC_MS.fullmatch(line["time"]), line
    changes = [line for line in broker_lines(cluster, node=1) if line.get("topic") == TOPIC]
    role = next(line for line in changes if " in epoch " in line["event"])
    assert isinstance(role["partition"], int) and isinstance(role["epoch"], int)
    assert role["event"].startswith(f"{TOPIC}-{role['partition']}: ")
    assert f" in epoch {role['epoch']} " in role["event"]


def broker_lines(cluster: LiveCluster, *, node: int) -> list[dict[str, Any]]:
    """Every whole line the broker of `node` wrote to its log so far, each parsed as JSON
    (a line that does not parse fails the test, naming it); `cluster up`'s own lines are
    left out, and so is a last line still being written (no newline yet)."""
    lines = []
    for text in cluster.log_of(node).split("\n")[:-1]:
        if text.startswith(CLUSTER_LINE):
            continue
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            pytest.fail(f"node {node} logged a line that is not JSON: {text!r}")
    return lines


def test_retention_logs_one_info_line_per_round_with_the_new_log_start(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path / "cluster", nodes=1, log_format="json")
    try:
        configs = ["--config", "segment.bytes=1024", "--config", "retention.bytes=1024"]
        via = ["--bootstrap-server", cluster.bootstrap]
        created = tidelog("topics", "create", "retained", *configs, *via)
        assert created.returncode == 0, created.stderr
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=0)
        try:
            for _ in range(40):  # about 8 kB in batches of one: several 1 kB segments
                producer.send("retained", b"x" * 200, partition=0).get(timeout=30)
        finally:
            producer.close()

        def deletions() -> list[dict[str, Any]]:
            return [
                line
                for line in broker_lines(cluster, node=1)
                if line.get("topic") == "retained" and "retention deleted" in line["event"]
            ]

        eventually(deletions, "node 1 logs a retention round of retained-0")
    finally:
        cluster.down()
    line = deletions()[0]
    assert (line["level"], line["partition"]) == ("INFO", 0)
    found = re.fullmatch(
        r"retained-0: retention deleted (\d+) segments? \(offsets 0-(\d+)\); log start offset "
        r"now (\d+)",
        line["event"],
    )
    assert found, line["event"]
    assert int(found[2]) + 1 == int(found[3])
