"""The Spark source's options and planning, without a cluster or a JVM: Spark's Kafka source
options parse or fail with a message naming the option; ranges split and rate limits share
as Spark's Kafka source does; progress metrics come out as the Kafka source names them."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from tidelog.spark.options import (
    EARLIEST,
    LATEST,
    SourceOptions,
    SparkOptionError,
    parse_sink_options,
    parse_source_options,
)
from tidelog.spark.source import (
    StreamReader,
    from_json,
    offsets_behind_latest,
    plan_ranges,
    prorate,
    to_json,
)

BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def parse(streaming: bool = False, **options: str) -> SourceOptions:
    return parse_source_options({**BOOTSTRAP, **options}, streaming=streaming)


def test_the_options_of_sparks_kafka_source_parse() -> None:
    options = parse_source_options(
        {
            **BOOTSTRAP,
            "subscribe": "b, a",
            "startingOffsets": '{"a": {"0": 5, "1": -2}}',
            "endingOffsets": '{"a": {"0": 9}}',
            "failOnDataLoss": "false",
            "minPartitions": "4",
            "includeHeaders": "TRUE",
            "kafka.client.id": "job",
            "kafka.group.id": "g",
            "maxTriggerDelay": "30s",
        },
        streaming=False,
    )
    assert options.subscription.topics == ("a", "b")
    assert options.starting.offsets == {("a", 0): 5, ("a", 1): EARLIEST}
    assert options.starting.default == EARLIEST
    assert options.ending.offsets == {("a", 0): 9}
    assert options.ending.default == LATEST
    assert not options.fail_on_data_loss
    assert options.min_partitions == 4
    assert options.include_headers
    assert options.client_config == {"client.id": "job"}  # group.id is the source's own
    assert options.group_id == "g"
    assert options.max_trigger_delay_ms == 30_000
    streaming = parse_source_options({**BOOTSTRAP, "subscribePattern": "t.*"}, streaming=True)
    assert streaming.starting.default == LATEST
    assert streaming.subscription.matches("topic")
    assert not streaming.subscription.matches("__consumer_offsets")
    assigned = parse(assign='{"t": [1, 0]}')
    assert assigned.subscription.assigned == (("t", 0), ("t", 1))
    by_time = parse(subscribe="a", startingTimestamp="1700000000000")
    assert by_time.starting.timestamp_ms == 1_700_000_000_000


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({}, False, "exactly one of subscribe, subscribePattern and assign"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, False, "found: subscribe, assign"),
        ({"subscribePattern": "("}, False, "not a regular expression"),
        ({"assign": "[0]"}, False, "assign takes"),
        ({"subscribe": "a", "startingOffsets": "soon"}, False, "startingOffsets takes"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, False, "-3 for a-0"),
        ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, False, "-2 for a-0"),
        ({"subscribe": "a", "startingOffsets": "latest"}, False, "streaming queries only"),
        ({"subscribe": "a", "endingOffsets": "latest"}, True, "batch queries only"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "takes a number > 0"),
        ({"subscribe": "a", "minPartitions": "x"}, False, "takes a whole number"),
        ({"subscribe": "a", "failOnDataLoss": "yes"}, False, "takes true or false"),
        ({"subscribe": "a", "maxTriggerDelay": "soon"}, True, "takes a duration"),
        (
            {"subscribe": "a", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"},
            True,
            "larger than maxOffsetsPerTrigger",
        ),
    ],
)
def test_a_bad_option_is_named(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(SparkOptionError, match=message.replace("(", r"\(")):
        parse_source_options({**BOOTSTRAP, **options}, streaming=streaming)


def test_the_bootstrap_servers_are_required() -> None:
    with pytest.raises(SparkOptionError, match=r"kafka\.bootstrap\.servers is required"):
        parse_source_options({"subscribe": "a"}, streaming=False)
    with pytest.raises(SparkOptionError, match=r"kafka\.bootstrap\.servers is required"):
        parse_sink_options({"topic": "a"})
    assert parse_sink_options({**BOOTSTRAP, "TOPIC": "a"}).topic == "a"


def test_ranges_split_for_min_partitions_and_max_records() -> None:
    options = parse_source_options(
        {**BOOTSTRAP, "subscribe": "t", "minPartitions": "6"}, streaming=False
    )
    ranges = plan_ranges(
        options,
        {("t", 0): 0, ("t", 1): 10, ("t", 2): 5},
        {("t", 0): 300, ("t", 1): 110, ("t", 2): 5},
    )
    pieces = [(r.read.partition, r.read.start, r.read.end) for r in ranges]
    # 400 offsets over 6 tasks in proportion: 300 -> 4 pieces (rounded from 4.5), 100 -> 2.
    assert pieces == [
        (0, 0, 75),
        (0, 75, 150),
        (0, 150, 225),
        (0, 225, 300),
        (1, 10, 60),
        (1, 60, 110),
    ]
    capped = parse_source_options(
        {**BOOTSTRAP, "subscribe": "t", "maxRecordsPerPartition": "40"}, streaming=False
    )
    assert [
        (r.read.start, r.read.end) for r in plan_ranges(capped, {("t", 0): 0}, {("t", 0): 100})
    ] == [
        (0, 33),
        (33, 66),
        (66, 100),
    ]


def test_max_offsets_per_trigger_is_shared_in_proportion() -> None:
    base = {("t", 0): 0, ("t", 1): 100, ("t", 2): 7}
    ends = {("t", 0): 300, ("t", 1): 200, ("t", 2): 7}
    assert prorate(base, ends, 100) == {("t", 0): 75, ("t", 1): 125, ("t", 2): 7}
    assert prorate(base, ends, 1000) == ends


def test_offsets_json_and_offsets_behind_latest() -> None:
    offsets = {("b", 1): 7, ("a", 0): 3, ("b", 0): 5}
    assert to_json(offsets) == {"a": {"0": 3}, "b": {"0": 5, "1": 7}}
    assert from_json(to_json(offsets)) == offsets
    progress = {"endOffset": '{"a": {"0": 3, "1": 10}}', "latestOffset": {"a": {"0": 9, "1": 10}}}
    assert offsets_behind_latest(progress) == {
        "minOffsetsBehindLatest": 0.0,
        "maxOffsetsBehindLatest": 6.0,
        "avgOffsetsBehindLatest": 3.0,
    }
    assert offsets_behind_latest({"endOffset": None, "latestOffset": None}) == {}


def test_min_offsets_per_trigger_waits_at_most_max_trigger_delay() -> None:
    options = parse(
        True,
        subscribe="t",
        minOffsetsPerTrigger="50",
        maxOffsetsPerTrigger="100",
        maxTriggerDelay="1s",
    )
    reader = StreamReader(options)
    base, ends = {("t", 0): 10}, {("t", 0): 40}
    assert reader.getDefaultReadLimit() == ReadMaxRows(100)
    assert reader.admit(base, ends, ReadMaxRows(100)) == base  # 30 waiting, fewer than 50
    assert reader.admit(base, ends, ReadAllAvailable()) == ends  # the engine says: all
    reader.last_trigger_s -= 2  # maxTriggerDelay has passed since the last batch
    assert reader.admit(base, ends, ReadMaxRows(100)) == ends
    assert reader.admit(base, {("t", 0): 500}, ReadMaxRows(100)) == {("t", 0): 110}
    reader.target = {("t", 0): 40}  # Trigger.AvailableNow never waits for more
    assert reader.admit(base, ends, ReadMaxRows(100)) == ends


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscrbe": "a"}, "unknown option 'subscrbe' (did you mean 'subscribe'?)"),
        ({"subscribe": "a", "failOnDataLos": "false"}, "(did you mean 'failOnDataLoss'?)"),
        ({"subscribe": "a", "STARTINGOFFSET": "earliest"}, "(did you mean 'startingOffsets'?)"),
        ({"subscribe": "a", "maxOfsetsPerTrigger": "5"}, "(did you mean 'maxOffsetsPerTrigger'?)"),
    ],
)
def test_a_misspelled_option_is_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(SparkOptionError) as raised:
        parse_source_options({**BOOTSTRAP, **options}, streaming=False)
    assert message in str(raised.value)
    with pytest.raises(SparkOptionError, match=r"unknown option 'topc' \(did you mean 'topic'\?\)"):
        parse_sink_options({**BOOTSTRAP, "topc": "a"})


def test_sparks_own_and_unrelated_options_pass() -> None:
    """Every option Spark's Kafka source and sink take, Spark's own that reach a source or
    sink, any `kafka.*`, and names like no known one (ignored, as Spark ignores them)."""
    options = parse_source_options(
        {
            **BOOTSTRAP,
            "SUBSCRIBE": "a",
            "startingOffsetsByTimestampStrategy": "latest",
            "fetchOffset.numRetries": "3",
            "fetchOffset.retryIntervalMs": "10",
            "kafkaConsumer.pollTimeoutMs": "500",
            "groupIdPrefix": "job",
            "maxRecordsPerPartition": "10",
            "path": "/x",
            "checkpointLocation": "/tmp/c",
            "asyncProgressTrackingEnabled": "false",
            "asyncProgressTrackingCheckpointIntervalMs": "1000",
            "kafka.subscrbe": "passes through",
            "header": "true",
            "mode": "x",
        },
        streaming=True,
    )
    assert options.subscription.topics == ("a",)
    assert options.client_config == {"subscrbe": "passes through"}
    sink = parse_sink_options({**BOOTSTRAP, "topic": "a", "checkpointLocation": "/tmp/c"})
    assert sink.topic == "a"
