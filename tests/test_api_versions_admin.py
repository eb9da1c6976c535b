"""Every version kafka-python's classes declare valid, of Metadata, ListOffsets,
CreateTopics, DeleteTopics, DeleteRecords, InitProducerId, DescribeConfigs,
DescribeLogDirs and ApiVersions, asked of a live broker with raw requests: each answers
at the version asked, with that version's fields right (topic ids from v10/v7/v6,
authorized operations from v8, the special timestamps of ListOffsets v7-v11, the created
topic's configs from CreateTopics v5, config types and documentation from DescribeConfigs
v3).
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaProducer

from tidelog.protocol.kafka import SUPPORTED_VERSIONS, ApiKey
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.testing.live import RawConnection, free_base_port, one_broker, poll

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin import (
        CreateTopicsRequest,
        DeleteRecordsRequest,
        DeleteTopicsRequest,
        DescribeConfigsRequest,
        DescribeLogDirsRequest,
    )
    from kafka.protocol.consumer import ListOffsetsRequest
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
    from kafka.protocol.producer import InitProducerIdRequest

TOPIC = "versions"
ZERO = uuid.UUID(int=0)
# The operations a topic has in Kafka's AclOperation numbers: with no authorizer every
# one of them is allowed.
TOPIC_OPERATIONS = {3, 4, 5, 6, 7, 8, 10, 11}


def versions(api_key: ApiKey) -> range:
    low, high = SUPPORTED_VERSIONS[api_key]
    return range(low, high + 1)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawConnection]:
    """A one-node broker holding TOPIC: one partition, records r0..r9 stamped 1000..1009,
    r10 stamped 5000 and r11 stamped 2000 (the newest record is not the last one)."""
    directory = tmp_path_factory.mktemp("versions")
    base = free_base_port()
    address = ("127.0.0.1", base)
    with one_broker(directory, base, f"127.0.0.1:{base}"):
        connection = poll(lambda: connect(address), "the broker answers")
        request = CreateTopicsRequest[4](
            topics=[
                CreateTopicsRequest.CreatableTopic(
                    name=TOPIC,
                    num_partitions=1,
                    replication_factor=1,
                    assignments=[],
                    configs=[],
                )
            ],
            timeout_ms=30_000,
            validate_only=False,
        )
        created = poll(lambda: answered(connection.ask(request)), "a controller takes CreateTopics")
        assert created.topics[0].error_code == 0, created
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{base}", acks="all")
        stamps = [*range(1000, 1010), 5000, 2000]
        for index, stamp in enumerate(stamps):
            producer.send(TOPIC, f"r{index}".encode(), partition=0, timestamp_ms=stamp)
        producer.flush(timeout=60)
        producer.close()
        try:
            yield connection
        finally:
            connection.close()


def answered(answer: Any) -> Any:
    """`answer`, or None while the broker has no controller yet (NOT_CONTROLLER)."""
    return None if answer.topics[0].error_code == ErrorCode.NOT_CONTROLLER else answer


def connect(address: tuple[str, int]) -> RawConnection | None:
    try:
        connection = RawConnection(address)
        connection.ask(ApiVersionsRequest[0]())
    except (OSError, AssertionError):
        return None
    return connection


def metadata(broker: RawConnection, version: int, **fields: Any) -> Any:
    return broker.ask(MetadataRequest[version](**fields))


def test_api_versions_answers_every_version(broker: RawConnection) -> None:
    for version in versions(ApiKey.API_VERSIONS):
        answer = broker.ask(ApiVersionsRequest[version](client_software_name="t"))
        assert answer.error_code == 0
        listed = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        assert listed[ApiKey.METADATA] == SUPPORTED_VERSIONS[ApiKey.METADATA]


def test_metadata_at_every_version_names_topics_by_name_and_by_id(
    broker: RawConnection,
) -> None:
    named = [MetadataRequest.MetadataRequestTopic(name=TOPIC, topic_id=ZERO)]
    topic_ids = set()
    for version in versions(ApiKey.METADATA):
        answer = metadata(broker, version, topics=named, allow_auto_topic_creation=False)
        [topic] = answer.topics
        assert (topic.error_code, topic.name) == (0, TOPIC), (version, topic)
        assert [p.partition_index for p in topic.partitions] == [0]
        if version >= 10:
            topic_ids.add(topic.topic_id)
        if version >= 13:
            assert answer.error_code == 0
    [topic_id] = topic_ids
    assert topic_id != ZERO
    for version in range(10, SUPPORTED_VERSIONS[ApiKey.METADATA][1] + 1):
        by_id = [
            MetadataRequest.MetadataRequestTopic(
                name=None if version >= 12 else "", topic_id=topic_id
            )
        ]
        [topic] = metadata(broker, version, topics=by_id).topics
        assert (topic.error_code, topic.name, topic.topic_id) == (0, TOPIC, topic_id), version
        unknown = uuid.uuid4()
        missing = [
            MetadataRequest.MetadataRequestTopic(
                name=None if version >= 12 else "", topic_id=unknown
            )
        ]
        [topic] = metadata(broker, version, topics=missing).topics
        assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_ID and topic.topic_id == unknown
    # Authorized operations (v8+): sent when asked for, else Kafka's "not asked" value.
    for version in range(8, SUPPORTED_VERSIONS[ApiKey.METADATA][1] + 1):
        asked = metadata(broker, version, topics=named, include_topic_authorized_operations=True)
        assert asked.topics[0].authorized_operations == TOPIC_OPERATIONS
        plain = metadata(broker, version, topics=named)
        assert plain.topics[0].authorized_operations is None
        if version <= 10:
            cluster = metadata(
                broker, version, topics=[], include_cluster_authorized_operations=True
            )
            assert cluster.authorized_operations == {5, 7, 8, 9, 10, 11, 12}


def list_offset(broker: RawConnection, version: int, timestamp: int) -> Any:
    partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, current_leader_epoch=-1, timestamp=timestamp
    )
    answer = broker.ask(
        ListOffsetsRequest[version](
            replica_id=-1,
            isolation_level=0,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[partition])],
            timeout_ms=1000,
        )
    )
    [topic] = answer.topics
    [found] = topic.partitions
    return found


def test_list_offsets_at_every_version_with_each_special_timestamp(
    broker: RawConnection,
) -> None:
    end = list_offset(broker, 1, -1).offset
    start = list_offset(broker, 1, -2).offset
    assert end - start == 12 + 1  # the twelve records and the leader's epoch-start batch
    first = start + 1
    for version in versions(ApiKey.LIST_OFFSETS):
        assert list_offset(broker, version, -1).offset == end
        assert list_offset(broker, version, -2).offset == start
        by_time = list_offset(broker, version, 1003)
        assert (by_time.offset, by_time.timestamp) == (first + 3, 1003)
        assert list_offset(broker, version, 1999).offset == first + 10  # r10, at 5000
        assert list_offset(broker, version, 6000).offset == -1
        newest = list_offset(broker, version, -3)  # MAX_TIMESTAMP (KIP-734)
        if version >= 7:
            assert (newest.error_code, newest.offset, newest.timestamp) == (0, first + 10, 5000)
        else:
            assert newest.error_code == ErrorCode.UNSUPPORTED_VERSION
        local = list_offset(broker, version, -4)  # EARLIEST_LOCAL: nothing is tiered
        assert local.offset == (start if version >= 8 else -1)
        tiered = list_offset(broker, version, -5)  # LATEST_TIERED
        assert (tiered.error_code == 0) == (version >= 9) and tiered.offset == -1


def test_create_describe_and_delete_topics_at_every_version(broker: RawConnection) -> None:
    config = CreateTopicsRequest.CreatableTopic.CreatableTopicConfig
    for version in versions(ApiKey.CREATE_TOPICS):
        name = f"made-v{version}"
        topic = CreateTopicsRequest.CreatableTopic(
            name=name,
            num_partitions=2,
            replication_factor=1,
            assignments=[],
            configs=[config(name="retention.ms", value="60000")],
        )
        answer = broker.ask(
            CreateTopicsRequest[version](topics=[topic], timeout_ms=30_000, validate_only=False)
        )
        [made] = answer.topics
        assert made.error_code == 0, (version, made)
        if version >= 5:
            assert (made.num_partitions, made.replication_factor) == (2, 1)
            configs = {c.name: (c.value, c.config_source) for c in made.configs}
            assert configs["retention.ms"] == ("60000", 1)  # given: TOPIC_CONFIG
            assert configs["segment.bytes"][1] == 5  # DEFAULT_CONFIG
        topic_id = ZERO
        if version >= 7:
            topic_id = made.topic_id
            [listed] = metadata(
                broker, 12, topics=[MetadataRequest.MetadataRequestTopic(name=name, topic_id=ZERO)]
            ).topics
            assert listed.topic_id == topic_id != ZERO
        again = broker.ask(
            CreateTopicsRequest[version](topics=[topic], timeout_ms=30_000, validate_only=False)
        )
        assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        if version >= 5:
            assert again.topics[0].num_partitions == -1
        delete_version = min(version - 1, SUPPORTED_VERSIONS[ApiKey.DELETE_TOPICS][1])
        delete_and_check(broker, delete_version, name, topic_id)
    delete_and_check(broker, 6, "made-v7-again", None)


def delete_and_check(
    broker: RawConnection, version: int, name: str, topic_id: uuid.UUID | None
) -> None:
    """Delete `name` (by id at v6 when it is known) and check the answer."""
    if version >= 6:
        topic = DeleteTopicsRequest.DeleteTopicState(
            name=None if topic_id is not None else name, topic_id=topic_id or ZERO
        )
        answer = broker.ask(DeleteTopicsRequest[version](topics=[topic], timeout_ms=30_000))
    else:
        answer = broker.ask(DeleteTopicsRequest[version](topic_names=[name], timeout_ms=30_000))
    [result] = answer.responses
    if topic_id is None:  # unknown
        assert result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if version >= 5:
            assert result.error_message
        return
    assert result.error_code == 0, (version, result)
    if version >= 6:
        assert (result.name, result.topic_id) == (name, topic_id)
        gone = broker.ask(
            DeleteTopicsRequest[version](
                topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=topic_id)],
                timeout_ms=30_000,
            )
        )
        assert gone.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_describe_configs_at_every_version(broker: RawConnection) -> None:
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=TOPIC, configuration_keys=None
    )
    for version in versions(ApiKey.DESCRIBE_CONFIGS):
        for documented in (False, True):
            answer = broker.ask(
                DescribeConfigsRequest[version](
                    resources=[resource],
                    include_synonyms=False,
                    include_documentation=documented,
                )
            )
            [result] = answer.results
            assert result.error_code == 0
            configs = {c.name: c for c in result.configs}
            retention = configs["retention.ms"]
            assert retention.value in {"604800000", "-1"}
            if version >= 3:
                assert retention.config_type == 5  # LONG
                assert configs["cleanup.policy"].config_type == 7  # LIST
                assert bool(retention.documentation) == documented


def test_delete_records_init_producer_id_and_log_dirs_at_every_version(
    broker: RawConnection,
) -> None:
    for version in versions(ApiKey.DELETE_RECORDS):
        answer = broker.ask(
            DeleteRecordsRequest[version](
                topics=[
                    DeleteRecordsRequest.DeleteRecordsTopic(
                        name=TOPIC,
                        partitions=[
                            DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
                                partition_index=0, offset=1 + version
                            )
                        ],
                    )
                ],
                timeout_ms=30_000,
            )
        )
        [result] = answer.topics[0].partitions
        assert (result.error_code, result.low_watermark) == (0, 1 + version)
    ids = set()
    for version in versions(ApiKey.INIT_PRODUCER_ID):
        answer = broker.ask(
            InitProducerIdRequest[version](transactional_id=None, transaction_timeout_ms=-1)
        )
        assert answer.error_code == 0 and answer.producer_epoch == 0
        ids.add(answer.producer_id)
        if version >= 6:
            assert answer.ongoing_txn_producer_id == -1
    assert len(ids) == len(versions(ApiKey.INIT_PRODUCER_ID))
    for version in versions(ApiKey.DESCRIBE_LOG_DIRS):
        answer = broker.ask(DescribeLogDirsRequest[version](topics=None))
        if version >= 3:
            assert answer.error_code == 0
        [log_dir] = answer.results
        names = {topic.name for topic in log_dir.topics}
        assert TOPIC in names
        if version >= 4:
            assert log_dir.total_bytes > 0
