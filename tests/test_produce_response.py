"""The Produce response written without kafka-python's objects (`encode_produce_response`),
byte for byte what kafka-python encodes, at every version tidelog serves."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from tidelog.protocol.kafka import (
    PRODUCE_LEADER_HINT_MIN,
    PRODUCE_TOPIC_ID_MIN,
    ApiKey,
    KafkaConnection,
    KafkaRequest,
    LeaderAndEpoch,
    NodeEndpoint,
    ProducedPartition,
    ProducedTopic,
    encode_produce_response,
)

VERSIONS = range(3, 14)
texts = st.text(max_size=12)
leaders = st.none() | st.builds(
    LeaderAndEpoch, st.integers(-1, 2**31 - 1), st.integers(-1, 2**31 - 1)
)
partitions = st.builds(
    ProducedPartition,
    partition_index=st.integers(0, 2**31 - 1),
    error_code=st.integers(-1, 120),
    base_offset=st.integers(-1, 2**63 - 1),
    log_start_offset=st.integers(-1, 2**63 - 1),
    record_errors=st.lists(st.tuples(st.integers(0, 2**31 - 1), st.none() | texts), max_size=3).map(
        tuple
    ),
    error_message=st.none() | texts,
    current_leader=leaders,
)
endpoints = st.lists(
    st.builds(NodeEndpoint, st.integers(0, 2**31 - 1), texts, st.integers(0, 65535)), max_size=3
)


def produce_request(version: int) -> KafkaRequest:
    return KafkaRequest(
        api_key=ApiKey.PRODUCE,
        api_version=version,
        correlation_id=41,
        client_id="test",
        body=None,
        response_version=version,
    )


def kafka_pythons(version: int, topics: list[ProducedTopic], nodes: list[NodeEndpoint]) -> Any:
    """The same response as kafka-python's object (what tidelog wrote before)."""
    cls = ProduceResponse
    topic_cls = cls.TopicProduceResponse
    partition_cls = topic_cls.PartitionProduceResponse

    def partition(p: ProducedPartition) -> Any:
        leader = p.current_leader
        return partition_cls(
            index=p.partition_index,
            error_code=p.error_code,
            base_offset=p.base_offset,
            log_append_time_ms=-1,
            log_start_offset=p.log_start_offset,
            record_errors=[
                partition_cls.BatchIndexAndErrorMessage(
                    batch_index=index, batch_index_error_message=message
                )
                for index, message in p.record_errors
            ],
            error_message=p.error_message,
            current_leader=None if leader is None else partition_cls.LeaderIdAndEpoch(*leader),
        )

    return cls(
        version=version,
        responses=[
            topic_cls(
                partition_responses=[partition(p) for p in parts],
                **({"name": key} if isinstance(key, str) else {"topic_id": key}),
            )
            for key, parts in topics
        ],
        throttle_time_ms=0,
        node_endpoints=[cls.NodeEndpoint(*node, rack=None) for node in nodes],
    )


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    topics=st.lists(st.tuples(texts, st.lists(partitions, max_size=3)), max_size=3),
    nodes=endpoints,
)
def test_produce_response_bytes_are_kafka_pythons(
    version: int, topics: list[tuple[str, list[ProducedPartition]]], nodes: list[NodeEndpoint]
) -> None:
    by_id = version >= PRODUCE_TOPIC_ID_MIN
    keyed: list[ProducedTopic] = [
        (uuid.uuid5(uuid.NAMESPACE_DNS, name) if by_id else name, parts) for name, parts in topics
    ]
    if version < PRODUCE_LEADER_HINT_MIN:
        nodes = []  # NodeEndpoints is a v10+ field: the broker names none before
    connection = KafkaConnection()
    request = produce_request(version)
    raw = encode_produce_response(version, keyed, nodes)
    frame = b"".join(connection.send_raw_response(request, raw))
    assert frame == connection.send_response(request, kafka_pythons(version, keyed, nodes))


def test_a_client_reads_the_raw_produce_response() -> None:
    """kafka-python's client parses the frame back: offsets, errors and the leader named."""
    version = 12
    kafka_client = KafkaProtocol(client_id="test")
    kafka_client.send_request(
        ProduceRequest(version=version, transactional_id=None, acks=-1, timeout_ms=1, topic_data=[])
    )
    connection = KafkaConnection()
    connection.receive_data(kafka_client.send_bytes())
    request = connection.next_request()
    assert isinstance(request, KafkaRequest)
    parts = [
        ProducedPartition(0, 0, base_offset=181, log_start_offset=3),
        ProducedPartition(1, 6, current_leader=LeaderAndEpoch(2, 7), error_message="moved"),
    ]
    raw = encode_produce_response(version, [("orders", parts)], [NodeEndpoint(2, "h", 9092)])
    [(_, got)] = kafka_client.receive_bytes(b"".join(connection.send_raw_response(request, raw)))
    [topic] = got.responses
    assert topic.name == "orders"
    first, second = topic.partition_responses
    assert (first.base_offset, first.log_start_offset, first.error_code) == (181, 3, 0)
    assert (second.error_code, second.error_message) == (6, "moved")
    assert (second.current_leader.leader_id, second.current_leader.leader_epoch) == (2, 7)
    assert [(n.node_id, n.host, n.port) for n in got.node_endpoints] == [(2, "h", 9092)]
