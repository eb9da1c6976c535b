"""`GET /metrics` (server/metrics.py) as Prometheus reads it: scraped over HTTP from real
brokers and parsed by prometheus-client's own parser, after a workload whose numbers are
known in advance.

- A known workload: 40 acks=all records one at a time and a group's commit at 25. Every
  replica says HWM 40, log end 40, log start 0, the same epoch; the leader counts 40
  Produce requests, 40 produce-to-commit times, its election, fsyncs with their bytes; the
  group's coordinator says committed 25 and lag 15; exactly one node is the active
  controller; nothing is under-replicated, under min ISR or offline; connections and
  queued bytes are there. A follower paused past the lag time makes the partition
  under-replicated at its leader, and in sync again once resumed.
- Truncations and resets are counted where links are cut (tests/test_link_cut.py).
- Off: `--no-metrics` answers 404 at /metrics and /status still works.
- Error codes are counted by their Kafka names, from the raw Produce and Fetch answers and
  from every `error_code` of a kafka-python answer.
- The sample Grafana dashboard (deploy/grafana/tidelog.json) is a dashboard (panels with
  targets, each an expression over the `DS_PROMETHEUS` data source), every metric name its
  expressions read is a series of a live scrape (after a tiny workload of its own: a
  Produce, a group's commit, an error), and every metric a node exports has a panel.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families

from tidelog.address import parse_address
from tidelog.protocol.kafka import ProducedPartition, encode_produce_response
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.metrics import NULL_METRICS, api_label, error_names
from tidelog.status import read_status
from tidelog.testing.live import (
    DEADLINE_S,
    LiveCluster,
    RawConnection,
    Samples,
    create_topic,
    eventually,
    free_base_port,
    metrics_text,
    one_broker,
    sample,
    scrape,
    tidelog,
)

TOPIC = "metered"
RECORDS = 40
COMMITTED = 25
GROUP = "metered-group"
DASHBOARD = Path(__file__).parent.parent / "deploy" / "grafana" / "tidelog.json"
DASHBOARD_TOPIC = "dashboard"
DASHBOARD_GROUP = "dashboard-group"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
GRID_COLUMNS = 24  # a Grafana dashboard's width
METRIC_NAME = re.compile(r"\b(?:tidelog|kafka)_[a-z_]+")
# Counted only where a replica diverges from its leader (tests/test_link_cut.py): every
# scrape declares them, and has a sample once a partition was cut.
SAMPLED_AFTER_A_CUT = frozenset({"tidelog_log_truncations_total", "tidelog_log_resets_total"})
# The series names a family of each type has in a scrape.
SERIES_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}


def admins(cluster: LiveCluster) -> dict[int, str]:
    return {node["id"]: node["admin"] for node in cluster.record["nodes"]}


def partition_value(samples: Samples, name: str, node: int, topic: str = TOPIC) -> float | None:
    return sample(samples, name, topic=topic, partition=0, node=node)


def produce_one_at_a_time(bootstrap: str, topic: str, count: int, **settings: Any) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, **settings)
    try:
        for i in range(count):
            producer.send(topic, f"record-{i}".encode(), partition=0).get(timeout=DEADLINE_S)
    finally:
        producer.close()


def test_a_known_workload_reads_back_from_every_node(cluster: LiveCluster) -> None:
    create_topic(cluster.bootstrap, TOPIC, partitions=1)
    cluster.wait_hosted_everywhere(TOPIC, 1)
    leader = cluster.leader_of(TOPIC)
    nodes = admins(cluster)
    # The log starts with the leader's mark of its epoch (an offset of its own).
    first = partition_value(scrape(nodes[leader]), "tidelog_partition_high_watermark", leader)
    assert first is not None
    end = first + RECORDS
    produce_one_at_a_time(cluster.bootstrap, TOPIC, RECORDS)
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, group_id=GROUP, enable_auto_commit=False
    )
    try:
        consumer.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(COMMITTED, "", -1)})
    finally:
        consumer.close()
    scrapes: dict[int, Samples] = {}

    def seen(name: str) -> str:
        return f"{name}: {[partition_value(s, name, n) for n, s in scrapes.items()]}"

    def every_replica_at_the_end() -> bool:
        scrapes.update({node: scrape(admin) for node, admin in nodes.items()})
        name = "tidelog_partition_high_watermark"
        return all(partition_value(scrapes[n], name, n) == end for n in nodes)

    eventually(every_replica_at_the_end, lambda: seen("tidelog_partition_high_watermark"))
    epochs = set()
    for node, samples in scrapes.items():
        assert partition_value(samples, "tidelog_partition_log_end_offset", node) == end
        assert partition_value(samples, "tidelog_partition_log_start_offset", node) == 0
        assert partition_value(samples, "tidelog_partition_replicas", node) == 3
        epochs.add(partition_value(samples, "tidelog_partition_leader_epoch", node))
        role = "leader" if node == leader else "follower"
        assert (
            sample(
                samples, "tidelog_partition_role", topic=TOPIC, partition=0, node=node, role=role
            )
            == 1
        )
        assert sample(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
        assert sample(samples, "kafka_server_replicamanager_underminisrpartitioncount") == 0
        assert sample(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
        assert sample(samples, "tidelog_connections") is not None
        assert sample(samples, "tidelog_queued_request_bytes") == 0
        assert sample(samples, "tidelog_ready") == 1
        assert (sample(samples, "tidelog_fsync_duration_seconds_count") or 0) > 0
        assert (sample(samples, "tidelog_fsync_bytes_sum") or 0) > 0
    assert len(epochs) == 1 and epochs.pop() >= 1, scrapes
    controllers = [
        sample(s, "kafka_controller_kafkacontroller_activecontrollercount")
        for s in scrapes.values()
    ]
    assert sorted(controllers) == [0, 0, 1]

    at_leader = scrapes[leader]
    assert partition_value(at_leader, "tidelog_partition_in_sync_replicas", leader) == 3
    assert sample(at_leader, "tidelog_requests_total", api="Produce") == RECORDS
    assert sample(at_leader, "tidelog_request_duration_seconds_count", api="Produce") == RECORDS
    assert sample(at_leader, "tidelog_produce_commit_seconds_count") == RECORDS
    assert (sample(at_leader, "tidelog_produce_commit_seconds_sum") or 0) > 0
    assert sample(at_leader, "tidelog_leader_elections_total", topic=TOPIC, partition=0) == 1
    fsynced = sum(sample(s, "tidelog_fsync_bytes_sum") or 0 for s in scrapes.values())
    assert fsynced >= 3 * RECORDS * len("record-0")  # every replica synced every record

    # The group's coordinator answers its committed offset and the lag against its HWM.
    def group_read() -> bool:
        scrapes.update({node: scrape(admin) for node, admin in nodes.items()})
        labels = {"group": GROUP, "topic": TOPIC, "partition": 0}
        committed = [
            sample(s, "tidelog_consumer_group_committed_offset", **labels) for s in scrapes.values()
        ]
        lags = [sample(s, "tidelog_consumer_group_lag", **labels) for s in scrapes.values()]
        return sorted(c for c in committed if c is not None) == [COMMITTED] and sorted(
            lag for lag in lags if lag is not None
        ) == [end - COMMITTED]

    eventually(group_read, "the group's committed offset and lag at its coordinator")
    # What `tidelog groups describe` says (as kafka-consumer-groups does) is the same.
    described = tidelog("groups", "describe", GROUP, "--bootstrap-server", cluster.bootstrap)
    assert described.returncode == 0, described.stderr
    row = next(line.split() for line in described.stdout.splitlines() if TOPIC in line)
    assert {str(COMMITTED), str(int(end)), str(int(end) - COMMITTED)} <= set(row), row

    # A follower paused past replica.lag.time.max.ms leaves the ISR: under-replicated at
    # the leader until it is back.
    follower = next(node for node in nodes if node != leader)
    paused = tidelog(
        "cluster", "pause", "--data-dir", str(cluster.directory), "--node", str(follower)
    )
    assert paused.returncode == 0, paused.stderr
    try:
        under = "kafka_server_replicamanager_underreplicatedpartitions"
        eventually(lambda: (sample(scrape(nodes[leader]), under) or 0) >= 1, "under-replicated")
    finally:
        resumed = tidelog(
            "cluster", "resume", "--data-dir", str(cluster.directory), "--node", str(follower)
        )
        assert resumed.returncode == 0, resumed.stderr
    eventually(lambda: sample(scrape(nodes[leader]), under) == 0, "in sync again")


def test_metrics_off_answers_404_and_status_still_answers(tmp_path: Path) -> None:
    base = free_base_port(1)
    admin = f"127.0.0.1:{base + 200}"
    flags = ("--admin-listen", admin, "--no-metrics")
    with one_broker(tmp_path, base, f"127.0.0.1:{base}", *flags):
        eventually(lambda: read_status(admin) is not None, "the admin endpoint")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with pytest.raises(urllib.error.HTTPError) as refused:
            opener.open(f"http://{admin}/metrics", timeout=DEADLINE_S)
        assert refused.value.code == 404
        assert "--no-metrics" in json.loads(refused.value.read())["error"]
    assert NULL_METRICS.render() == b""


def test_leaders_answers_the_partitions_status_shows_led(tmp_path: Path) -> None:
    """`GET /leaders`: what a tool waiting for leaders polls at thousands of partitions,
    the same partitions `/status` shows this node leading."""
    base = free_base_port(1)
    admin, bootstrap = f"127.0.0.1:{base + 200}", f"127.0.0.1:{base}"
    with one_broker(tmp_path, base, bootstrap, "--admin-listen", admin):
        eventually(lambda: read_status(admin) is not None, "the admin endpoint")
        admin_client = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin_client.create_topics([NewTopic("led", 3, 1)])
        finally:
            admin_client.close()

        def agree() -> bool:
            status = read_status(admin)
            found = read_status(admin, path="/leaders")
            if status is None or found is None:
                return False
            rows = [row for row in status["partitions"] if row["topic"] == "led"]
            led = sorted(
                [row["topic"], row["partition"]] for row in rows if row["role"] == "leader"
            )
            mine = sorted(pair for pair in found["leaders"] if pair[0] == "led")
            return (
                found["node_id"] == 1
                and found["hosted"] == len(status["partitions"])
                and (led == mine == [["led", 0], ["led", 1], ["led", 2]])
            )

        eventually(agree, "/leaders and /status agree on every partition led")


def test_error_codes_are_counted_by_their_kafka_names() -> None:
    raw = encode_produce_response(
        9,
        [
            (
                "t",
                [
                    ProducedPartition(0, ErrorCode.NONE, 5),
                    ProducedPartition(1, ErrorCode.NOT_LEADER_OR_FOLLOWER),
                ],
            )
        ],
    )
    assert error_names(raw) == ["NOT_LEADER_OR_FOLLOWER"]
    topic = MetadataResponse.MetadataResponseTopic(
        version=9, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name="gone", partitions=[]
    )
    body = MetadataResponse(version=9, brokers=[], cluster_id="c", controller_id=1, topics=[topic])
    assert error_names(body) == ["UNKNOWN_TOPIC_OR_PARTITION"]
    assert api_label("API_VERSIONS") == "ApiVersions" and api_label("PRODUCE") == "Produce"


def dashboard_expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every target's expression, once the JSON is checked to be a Grafana dashboard whose
    panels all read the data source variable."""
    assert dashboard["title"] and dashboard["uid"]
    assert dashboard["schemaVersion"] >= 36
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert (variables["DS_PROMETHEUS"]["type"], variables["DS_PROMETHEUS"]["query"]) == (
        "datasource",
        "prometheus",
    )
    topic = variables["topic"]
    assert topic["query"]["query"] == "label_values(tidelog_partition_high_watermark, topic)"
    assert topic["datasource"] == DATASOURCE
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels), "panel ids are unique"
    expressions = []
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= GRID_COLUMNS, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], f"{panel['title']} has no target"
        for target in panel["targets"]:
            expression = target["expr"]
            assert expression and target["datasource"] == DATASOURCE, panel["title"]
            assert expression.count("(") == expression.count(")"), expression
            assert expression.count("{") == expression.count("}"), expression
            expressions.append(expression)
    return expressions


def declared_series(admin: str) -> dict[str, set[str]]:
    """Each metric family a node's scrape declares, with the names of its series (a
    labelled counter not counted yet has its HELP and TYPE lines, and no sample)."""
    return {
        family.name: {family.name + suffix for suffix in SERIES_SUFFIXES.get(family.type, ("",))}
        for family in text_string_to_metric_families(metrics_text(admin))
    }


def test_the_grafana_dashboard_reads_only_series_a_scrape_has(cluster: LiveCluster) -> None:
    used = {
        name
        for expression in dashboard_expressions(json.loads(DASHBOARD.read_text()))
        for name in METRIC_NAME.findall(expression)
    }
    # A workload of its own, whatever ran before: a Produce (the histograms by API), a
    # group's commit (committed offset and lag), a Metadata error (errors by API).
    create_topic(cluster.bootstrap, DASHBOARD_TOPIC, partitions=1)
    cluster.wait_hosted_everywhere(DASHBOARD_TOPIC, 1)
    produce_one_at_a_time(cluster.bootstrap, DASHBOARD_TOPIC, 3)
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, group_id=DASHBOARD_GROUP, enable_auto_commit=False
    )
    try:
        consumer.commit({TopicPartition(DASHBOARD_TOPIC, 0): OffsetAndMetadata(1, "", -1)})
    finally:
        consumer.close()
    connection = RawConnection(parse_address(cluster.record["nodes"][0]["kafka"]))
    try:
        missing = [MetadataRequest.MetadataRequestTopic(name="no-such-topic")]
        answer = connection.ask(MetadataRequest[4](topics=missing, allow_auto_topic_creation=False))
        assert answer.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        connection.close()
    nodes = admins(cluster).values()
    sampled: set[str] = set()

    def every_series_sampled() -> bool:
        sampled.update(name for admin in nodes for name, _ in scrape(admin))
        return used - SAMPLED_AFTER_A_CUT <= sampled

    eventually(
        every_series_sampled, lambda: f"not in a scrape: {used - SAMPLED_AFTER_A_CUT - sampled}"
    )
    families: dict[str, set[str]] = {}
    for admin in nodes:
        families.update(declared_series(admin))
    declared = set().union(*families.values())
    assert used <= declared, used - declared
    # And the converse: each family a node exports has a panel reading one of its series.
    unread = sorted(family for family, series in families.items() if not series & used)
    assert not unread, f"metrics without a panel: {unread}"
