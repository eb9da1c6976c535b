"""The broker's fetch path: whole batches read from a segment file as one view
(`DiskStorage.read_range`) and a Fetch response encoded around them
(`encode_fetch_response`), byte for byte what the general path produces."""

from __future__ import annotations

import os

import pytest
from kafka.protocol.consumer import FetchResponse

from tidelog.errors import StorageError
from tidelog.protocol.kafka import (
    FETCH_RAW_VERSIONS,
    ApiKey,
    FetchedPartition,
    KafkaConnection,
    KafkaRequest,
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


@pytest.mark.parametrize("version", range(FETCH_RAW_VERSIONS[0], FETCH_RAW_VERSIONS[1] + 1))
def test_fetch_response_bytes_are_kafka_pythons(version: int) -> None:
    data = b"".join(build_batches([2, 3]))
    partitions = [
        FetchedPartition(0, 0, 5, 1, memoryview(data)),
        FetchedPartition(1, 6, -1, -1, b""),
    ]
    raw = encode_fetch_response(version, [("orders", partitions), ("empty", [])])
    cls = FetchResponse
    topic_cls = cls.FetchableTopicResponse
    expected = cls(
        version=version,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            topic_cls(
                topic="orders",
                partitions=[
                    topic_cls.PartitionData(
                        partition_index=p.partition_index,
                        error_code=p.error_code,
                        high_watermark=p.high_watermark,
                        last_stable_offset=p.high_watermark,
                        log_start_offset=p.log_start_offset,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=bytes(p.records),
                    )
                    for p in partitions
                ],
            ),
            topic_cls(topic="empty", partitions=[]),
        ],
    )
    connection = KafkaConnection()
    request = fetch_request(version)
    frame = b"".join(connection.send_raw_response(request, raw))
    assert frame == connection.send_response(request, expected)
