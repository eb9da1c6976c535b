"""Topic configs and names as Kafka validates them, and a metadata image that no committed
command can stop (scenario 21 of the correctness notes: "poison pill" commands)."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.errors import MetadataError
from tidelog.server.metadata import MetadataImage, encode_command, validate_topic
from tidelog.server.topic_config import MAX_MESSAGE_BYTES_DEFAULT, TopicConfig


def test_defaults_are_kafkas() -> None:
    config = TopicConfig.parse({}, replication_factor=3)
    assert config == TopicConfig()
    assert config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.max_message_bytes == MAX_MESSAGE_BYTES_DEFAULT == 1048588


def test_good_values_parse() -> None:
    config = TopicConfig.parse(
        {
            "retention.ms": " -1 ",
            "retention.bytes": "1000",
            "segment.bytes": "14",
            "min.insync.replicas": "2",
            "max.message.bytes": "+512",
            "cleanup.policy": "delete",
        },
        replication_factor=3,
    )
    assert config == TopicConfig(
        min_insync_replicas=2,
        retention_ms=None,
        retention_bytes=1000,
        segment_bytes=14,
        max_message_bytes=512,
    )
    wal = config.wal_config(flush_interval_ms=None)
    assert (wal.retention_ms, wal.retention_bytes, wal.segment_bytes) == (None, 1000, 14)


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            {"retention.ms": "abc"},
            "Invalid value abc for configuration retention.ms: Not a number of type LONG",
        ),
        (
            {"retention.bytes": "1.5"},
            "Invalid value 1.5 for configuration retention.bytes: Not a number of type LONG",
        ),
        (
            {"segment.bytes": "0"},
            "Invalid value 0 for configuration segment.bytes: Value must be at least 14",
        ),
        ({"segment.bytes": "-5"}, "Value must be at least 14"),
        ({"segment.bytes": "2147483648"}, "Value must be no more than 2147483647"),
        ({"retention.ms": "-2"}, "Value must be at least -1"),
        ({"retention.ms": "1_000"}, "Not a number of type LONG"),
        ({"retention.ms": ""}, "Not a number of type LONG"),
        ({"min.insync.replicas": "0"}, "Value must be at least 1"),
        ({"min.insync.replicas": "4"}, "the replication factor is 3"),
        ({"max.message.bytes": "-1"}, "Value must be at least 0"),
        ({"retention.ms": None}, "Null value not supported for topic configs: retention.ms"),
        ({"cleanup.policy": "compact"}, "log compaction is not implemented"),
        ({"cleanup.policy": "shred"}, "String must be one of: compact, delete"),
        ({"compression.type": "lz4"}, "Unknown topic config name: compression.type"),
    ],
)
def test_bad_values_are_refused_naming_the_config(
    configs: dict[str, str | None], message: str
) -> None:
    with pytest.raises(MetadataError, match=message.replace(".", r"\.")) as raised:
        TopicConfig.parse(configs, replication_factor=3)
    assert raised.value.code == "INVALID_CONFIG"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "can't be empty"),
        (".", 'cannot be "." or ".."'),
        ("..", 'cannot be "." or ".."'),
        ("a" * 250, "can't be longer than 249 characters"),
        ("é", "contains a character other than ASCII alphanumerics"),
        ("a b", "contains a character other than ASCII alphanumerics"),
        ("my_topic", "collides with existing topic: my.topic"),
    ],
)
def test_topic_names_follow_kafkas_rules(name: str, message: str) -> None:
    with pytest.raises(MetadataError, match=message) as raised:
        validate_topic(name, 1, 1, {}, nodes=3, existing={"my.topic"})
    assert raised.value.code == "INVALID_TOPIC_EXCEPTION"
    validate_topic("a" * 249, 1, 1, {}, nodes=3, existing={"my.topic"})
    validate_topic("my.topic", 1, 1, {}, nodes=3, existing={"my.topic"})  # itself: not a clash


def create(name: str, configs: object, replicas: object = ((1, 2, 3),)) -> bytes:
    replicas = [list(r) for r in replicas] if isinstance(replicas, tuple) else replicas
    return encode_command(
        {"type": "create_topic", "name": name, "replicas": replicas, "configs": configs}
    )


def test_a_committed_command_that_cannot_be_applied_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every node applies the same log: a bad command is skipped the same way on each, with
    one bounded log line naming its offset, and the commands after it still apply."""
    image = MetadataImage()
    commands = [
        create("t", {"retention.ms": "abc"}),
        create("u", {"segment.bytes": "0"}),
        create("é", {}),
        create("v", {}, replicas=[[1, 1]]),
        create("w", {}, replicas=[]),
        create("x", {"retention.ms": None}),
        b"{not json",
        b"[1, 2]",
        encode_command({"type": "create_topic", "name": 7}),
        encode_command({"type": "drop_everything"}),
        b"\xff" * 4096,
        create("good", {"retention.ms": "1000"}),
    ]
    changes = [image.apply(offset, value) for offset, value in enumerate(commands)]
    assert [c.created for c in changes[:-1]] == [()] * (len(commands) - 1)
    assert list(image.topics) == ["good"]
    assert image.topics["good"].config.retention_ms == 1000
    assert image.applied_offset == len(commands)
    skipped = [r for r in caplog.records if "not applied" in r.getMessage()]
    assert len(skipped) == len(commands) - 1
    assert all(len(r.getMessage()) < 1000 for r in skipped)
    assert "at offset 0 not applied: Invalid value abc for configuration retention.ms" in (
        skipped[0].getMessage()
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    command=st.fixed_dictionaries(
        {"type": st.sampled_from(["create_topic", "delete_topic", "other"])},
        optional={"name": json_values, "replicas": json_values, "configs": json_values},
    )
)
def test_no_committed_command_can_make_apply_raise(command: dict[str, object]) -> None:
    image = MetadataImage()
    image.apply(0, json.dumps(command).encode())
    for info in image.topics.values():  # whatever was created is whole and valid
        assert info.replicas and all(len(set(r)) == len(r) for r in info.replicas)
        assert isinstance(info.config, TopicConfig)


def test_topic_ids_are_the_same_on_every_node_and_new_for_a_topic_created_again() -> None:
    """A topic's id (KIP-516) comes from the metadata offset that created it: two nodes
    applying the same log agree on it; deleting the topic and creating it again under the
    same name gives another id, as in Kafka; no id is Kafka's reserved 0 or 1."""
    log = [
        create("t", {}),
        create("u", {}),
        encode_command({"type": "delete_topic", "name": "t"}),
        create("t", {}),
    ]
    images = [MetadataImage(), MetadataImage()]
    first_ids = []
    for image in images:
        for offset, value in enumerate(log):
            image.apply(offset, value)
            if offset == 1:
                first_ids.append(image.topics["t"].topic_id)
    assert first_ids[0] == first_ids[1]
    again = [image.topics["t"].topic_id for image in images]
    assert again[0] == again[1] != first_ids[0]
    ids = {image.topics[name].topic_id for image in images for name in ("t", "u")}
    assert len(ids) == 2 and not ids & {uuid.UUID(int=0), uuid.UUID(int=1)}
    assert images[0].topic_named(again[0]) == "t"
    assert images[0].topic_named(first_ids[0]) is None
