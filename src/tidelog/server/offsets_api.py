"""ListOffsets and DeleteRecords: where a partition's log starts and ends, and where a
timestamp falls in it, as its leader may serve them; and moving its log start.

Rules of this file:
- Only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere); a log being repaired answers
  KAFKA_STORAGE_ERROR. A leader that cannot serve yet (its new epoch's HWM, a read lease)
  is waited for up to SERVING_WAIT_S.
- "latest" is the HWM; a timestamp's offset is of a committed record, never at or past it.
- DeleteRecords moves the log start (Kafka's low watermark), never past the HWM.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

from tidelog.clock import monotonic_ms
from tidelog.core.replica import Role
from tidelog.errors import RetriableError, StorageError, TidelogError
from tidelog.protocol.kafka import ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode, error_code_for
from tidelog.server.acl import DELETE, DESCRIBE, TOPIC
from tidelog.server.answers import body_of, response
from tidelog.server.authorize import allowed
from tidelog.server.metadata import INTERNAL_TOPICS
from tidelog.server.view import BrokerView
from tidelog.types import Offset

# A leader that cannot answer ListOffsets yet (its new epoch's HWM, a read lease being
# renewed on a loaded machine) is waited for up to this long, polled every step, as a fetch
# long-polls, rather than answered with an error some clients do not retry.
SERVING_WAIT_S = 2.0
SERVING_POLL_S = 0.02


LATEST, EARLIEST = -1, -2
# KIP-734, KIP-405/KIP-1005, KIP-1023: the special timestamps of later versions, each with
# the first version that may send it (an older request that sends one gets
# UNSUPPORTED_VERSION for that partition, as Kafka answers).
MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -3, -4, -5, -6
SPECIAL_SINCE: Final = {
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL: 8,
    LATEST_TIERED: 9,
    EARLIEST_PENDING_UPLOAD: 11,
}


async def list_offsets(broker: BrokerView, request: KafkaRequest) -> Any:
    cls = request.response_class.ListOffsetsTopicResponse
    topics = []
    for topic in body_of(request).topics:
        partitions = await asyncio.gather(
            *(
                list_partition(
                    broker,
                    cls,
                    topic.name,
                    part.partition_index,
                    part.timestamp,
                    version=request.api_version,
                )
                for part in topic.partitions
            )
        )
        topics.append(cls(name=topic.name, partitions=partitions))
    return response(request, throttle_time_ms=0, topics=topics)


async def list_partition(
    broker: BrokerView,
    cls: Any,
    topic: str,
    partition: int,
    timestamp: int,
    *,
    version: int,
) -> Any:
    def answer(error: ErrorCode, offset: int = -1, found_timestamp: int = -1) -> Any:
        return cls.ListOffsetsPartitionResponse(
            partition_index=partition,
            error_code=int(error),
            old_style_offsets=[],
            timestamp=found_timestamp,
            offset=offset,
            leader_epoch=epoch,
        )

    epoch = -1
    if not allowed(broker, DESCRIBE, TOPIC, topic):
        return answer(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if version < SPECIAL_SINCE.get(timestamp, 0):
        return answer(ErrorCode.UNSUPPORTED_VERSION)
    runner = broker.runner(topic, partition)
    if runner is None or runner.status().role is not Role.LEADER:
        known = topic in broker.image.topics
        return answer(
            ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
    if runner.repairing:  # its log is being repaired
        return answer(ErrorCode.KAFKA_STORAGE_ERROR)
    deadline = time.monotonic() + SERVING_WAIT_S
    while True:
        epoch = int(runner.status().epoch)
        try:
            latest = runner.latest_offset(now_ms=monotonic_ms())
            break
        except RetriableError as error:
            if time.monotonic() >= deadline or runner.status().role is not Role.LEADER:
                return answer(error_code_for(error))
        except TidelogError as error:
            return answer(error_code_for(error))
        await asyncio.sleep(SERVING_POLL_S)
    if timestamp == LATEST:
        return answer(ErrorCode.NONE, int(latest))
    if timestamp in (EARLIEST, EARLIEST_LOCAL):  # every record is local: no tiered storage
        return answer(ErrorCode.NONE, int(runner.status().log_start_offset))
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return answer(ErrorCode.NONE, -1)  # nothing is tiered, nothing waits to be
    try:
        if timestamp == MAX_TIMESTAMP:
            found = runner.max_timestamp_record(latest)
        else:
            found = runner.offset_for_timestamp(timestamp)
    except StorageError as error:  # a batch failed its CRC: never served; it is repaired
        return answer(error_code_for(error))
    if found is None or found[0] >= latest:
        return answer(ErrorCode.NONE, -1)  # no record that recent (yet committed)
    return answer(ErrorCode.NONE, int(found[0]), found[1])  # the found record's timestamp


async def delete_records(broker: BrokerView, request: KafkaRequest) -> Any:
    """Move each partition's log start (Kafka's low watermark), never past its HWM."""
    cls = request.response_class.DeleteRecordsTopicResult
    topics = []
    for topic in body_of(request).topics:
        partitions = []
        for part in topic.partitions:
            code, low = await delete_partition_records(broker, topic.name, part)
            partitions.append(
                cls.DeleteRecordsPartitionResult(
                    partition_index=part.partition_index, low_watermark=low, error_code=int(code)
                )
            )
        topics.append(cls(name=topic.name, partitions=partitions))
    return response(request, throttle_time_ms=0, topics=topics)


async def delete_partition_records(
    broker: BrokerView, topic: str, part: Any
) -> tuple[ErrorCode, int]:
    if topic in INTERNAL_TOPICS:  # Kafka: "Cannot delete records of internal topic"
        return ErrorCode.INVALID_TOPIC_EXCEPTION, -1
    if not allowed(broker, DELETE, TOPIC, topic):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1
    runner = broker.runner(topic, part.partition_index)
    if runner is None:
        known = topic in broker.image.topics
        return (
            ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        ), -1
    asked = Offset(part.offset) if part.offset >= 0 else None  # None: all it may read
    try:
        low = await runner.delete_records(asked)
    except TidelogError as error:
        return error_code_for(error), -1
    return ErrorCode.NONE, int(low)


OFFSETS_HANDLERS = {
    ApiKey.LIST_OFFSETS: list_offsets,
    ApiKey.DELETE_RECORDS: delete_records,
}
