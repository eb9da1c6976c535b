"""The broker's fetch path: whole batches read from a segment file as one view
(`DiskStorage.read_range`) and a Fetch response encoded around them
(`encode_fetch_response`), byte for byte what the general path produces."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.parser import KafkaProtocol

from tidelog.errors import StorageError
from tidelog.protocol.kafka import (
    FETCH_FLEXIBLE_MIN,
    FETCH_NODE_ENDPOINTS_MIN,
    FETCH_RAW_VERSIONS,
    FETCH_TOPIC_ID_MIN,
    ApiKey,
    FetchedPartition,
    FetchedTopic,
    KafkaConnection,
    KafkaRequest,
    LeaderAndEpoch,
    NodeEndpoint,
    encode_fetch_response,
)
from tidelog.types import Offset
from tidelog.wal import DiskStorage, OsFileSystem, WalConfig
from tidelog.wal.batches import build_batches

SMALL = WalConfig(segment_bytes=1500, index_interval_bytes=200, hwm_checkpoint_interval_ms=0)


def open_disk(path: str) -> DiskStorage:
    return DiskStorage(path, clock=lambda: 1_000, config=SMALL, fs=OsFileSystem())


@pytest.mark.parametrize("max_bytes", [1, 150, 400, 1 << 20])
def test_read_range_is_the_joined_batches_of_one_segment(tmp_path: object, max_bytes: int) -> None:
    batches = build_batches([1, 3, 2, 5, 1, 4, 2, 2, 3, 1, 1, 6])
    with open_disk(str(tmp_path)) as storage:
        storage.append(batches)
        storage.sync()
        end = storage.log_end_offset
        for start in range(int(end)):
            for stop in (start + 1, start + 4, int(end)):
                expected = storage.read(Offset(start), end_offset=Offset(stop), max_bytes=max_bytes)
                got = storage.read_range(
                    Offset(start), end_offset=Offset(stop), max_bytes=max_bytes
                )
                # Never more than `read`; a prefix of it (it stops at the segment's end).
                joined = b"".join(expected)
                assert bytes(got) == joined[: len(got)]
                assert (len(got) > 0) == (len(joined) > 0)


def test_read_range_checks_each_crc(tmp_path: object) -> None:
    batches = build_batches([2, 2, 2])
    with open_disk(str(tmp_path)) as storage:
        storage.append(batches)
        storage.sync()
        path = storage.segment_paths()[0]
        position = len(batches[0]) + 70  # inside the second batch's records
        fd = os.open(path, os.O_RDWR)
        try:
            os.pwrite(fd, b"\xff", position)
        finally:
            os.close(fd)
        with pytest.raises(StorageError, match="needs repair"):
            storage.read_range(Offset(0), end_offset=storage.log_end_offset, max_bytes=1 << 20)


def fetch_request(version: int) -> KafkaRequest:
    return KafkaRequest(ApiKey.FETCH, version, 7, "test", None, version)


TOPIC_IDS = {name: uuid.uuid5(uuid.NAMESPACE_DNS, name) for name in ("orders", "empty", "big")}


def fetched_topics(version: int) -> list[tuple[str, list[FetchedPartition]]]:
    """Several topics: batches of a few records and of thousands (lengths of 1 to 3 varint
    bytes from v12), a partition without records, one answered with an error naming the
    leader (written from v12), and a topic without partitions."""
    small = memoryview(b"".join(build_batches([2, 3])))
    tiny = b"".join(build_batches([1]))[:100]  # a record's worth: a 1-byte varint length
    large = b"".join(build_batches([400] * 8))
    leader = LeaderAndEpoch(2, 7) if version >= FETCH_FLEXIBLE_MIN else None
    return [
        (
            "orders",
            [
                FetchedPartition(0, 0, 5, 1, small),
                FetchedPartition(1, 6, -1, -1, b"", leader),
                FetchedPartition(2, 0, 9, 0, b""),
                FetchedPartition(3, 0, 2, 0, tiny),
            ],
        ),
        ("empty", []),
        ("big", [FetchedPartition(0, 0, 3200, 0, large)]),
    ]


def kafka_pythons(
    version: int,
    topics: list[tuple[str, list[FetchedPartition]]],
    endpoints: list[NodeEndpoint],
) -> Any:
    """The same response as kafka-python's object."""
    cls = FetchResponse
    topic_cls = cls.FetchableTopicResponse
    partition_cls = topic_cls.PartitionData

    def leader_of(part: FetchedPartition) -> Any:
        leader = part.current_leader
        return None if leader is None else partition_cls.LeaderIdAndEpoch(*leader)

    return cls(
        version=version,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            topic_cls(
                topic=name,
                topic_id=TOPIC_IDS[name],
                partitions=[
                    partition_cls(
                        partition_index=p.partition_index,
                        error_code=p.error_code,
                        high_watermark=p.high_watermark,
                        last_stable_offset=p.high_watermark,
                        log_start_offset=p.log_start_offset,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=bytes(p.records),
                        current_leader=leader_of(p),
                    )
                    for p in partitions
                ],
            )
            for name, partitions in topics
        ],
        node_endpoints=[cls.NodeEndpoint(*node, rack=None) for node in endpoints],
    )


@pytest.mark.parametrize("version", range(FETCH_RAW_VERSIONS[0], FETCH_RAW_VERSIONS[1] + 1))
def test_fetch_response_bytes_are_kafka_pythons(version: int) -> None:
    topics = fetched_topics(version)
    endpoints = []
    if version >= FETCH_NODE_ENDPOINTS_MIN:
        endpoints = [NodeEndpoint(2, "127.0.0.1", 9093), NodeEndpoint(3, "broker-3", 19094)]
    by_id = version >= FETCH_TOPIC_ID_MIN
    keyed: list[FetchedTopic] = [
        (TOPIC_IDS[name] if by_id else name, partitions) for name, partitions in topics
    ]
    raw = encode_fetch_response(version, keyed, endpoints)
    connection = KafkaConnection()
    request = fetch_request(version)
    frame = b"".join(connection.send_raw_response(request, raw))
    assert frame == connection.send_response(request, kafka_pythons(version, topics, endpoints))
    # Each partition's records are a chunk of their own: the very object read, not a copy.
    records = [p.records for _, partitions in topics for p in partitions if p.records]
    assert [chunk for chunk in raw.chunks if any(chunk is r for r in records)] == records


@pytest.mark.parametrize("version", [11, 12, 18])
def test_a_client_reads_the_raw_fetch_response(version: int) -> None:
    """kafka-python's client parses the frame (response header v1 from v12) back into the
    records and the leader named."""
    kafka_client = KafkaProtocol(client_id="test")
    kafka_client.send_request(FetchRequest(version=version, max_wait_ms=0, min_bytes=0, topics=[]))
    connection = KafkaConnection()
    connection.receive_data(kafka_client.send_bytes())
    request = connection.next_request()
    assert isinstance(request, KafkaRequest)
    topics = fetched_topics(version)
    key = TOPIC_IDS["orders"] if version >= FETCH_TOPIC_ID_MIN else "orders"
    raw = encode_fetch_response(version, [(key, topics[0][1])])
    [(_, got)] = kafka_client.receive_bytes(b"".join(connection.send_raw_response(request, raw)))
    [topic] = got.responses
    assert bytes(topic.partitions[0].records) == bytes(topics[0][1][0].records)
    leader = topic.partitions[1].current_leader
    if version >= FETCH_FLEXIBLE_MIN:
        assert (leader.leader_id, leader.leader_epoch) == (2, 7)
