"""The `tidelog` source's read of one offset range: by Fetch, straight into Arrow columns.

A task asks the cluster (Metadata) for its partition's leader, connects to it as the
source's security options say (`tidelog.spark.wire`), and sends Fetch v11 requests from the
range's start; each answer's batches become Arrow columns in `tidelog.spark.columnar`. The
next Fetch goes out as soon as the answer's batch headers are walked, before its records
are decoded, so the broker reads while the task decodes.

Rules of this file:
- The same range, the same rows, as `kafka_io.read_range` (librdkafka): a range ends at or
  below the HWM the driver saw, the broker serves nothing above its HWM, control batches
  are skipped and offsets are never counted.
- Whatever this reader does not handle itself, librdkafka reads, from the first offset not
  yet handed to Spark: options other than the security and fetch ones (FAST_KEYS), no
  leader known, an error code in an answer (a leader that moved, offsets that
  are gone: DataLoss is `kafka_io`'s), a connection that fails, an answer with no batch,
  aborted transactions, or a batch `columnar` does not decode (transactional).
- A corrupt batch (CRC, framing or records) is never handed over: it fails the task with
  SparkKafkaError naming the partition and offset, as librdkafka (check.crcs) would not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterator
from typing import Any, Final

import pyarrow as pa

from tidelog.client_config import ClientConfigError, ClientSecurity, security_of
from tidelog.errors import CorruptBatch
from tidelog.spark import columnar, wire
from tidelog.spark.kafka_io import (
    ARROW_ROWS_MAX,
    READ_DEFAULTS,
    RangeRead,
    SparkKafkaError,
    read_range,
)
from tidelog.spark.wire import FETCH_BYTES_MAX, FETCH_VERSION, BrokerConnection, ask_metadata

FETCH_WAIT_MS: Final = 500
READ_COMMITTED: Final = 1  # librdkafka's default isolation.level
SECURITY_KEYS: Final = frozenset(
    {
        "security.protocol",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
    }
)
FAST_KEYS: Final = SECURITY_KEYS | frozenset(READ_DEFAULTS)
"""Client properties this reader honours (the fetch ones only size librdkafka's queue)."""


def read(range_read: RangeRead) -> Iterator[pa.RecordBatch]:
    """The records of [start, end) of one partition, as Arrow record batches."""
    position = range_read.start
    if position < range_read.end and direct_readable(range_read):
        position = yield from read_directly(range_read)
    if position < range_read.end:
        yield from read_range(dataclasses.replace(range_read, start=position))


def direct_readable(range_read: RangeRead) -> bool:
    return set(range_read.config) <= FAST_KEYS


def read_directly(range_read: RangeRead) -> Generator[pa.RecordBatch, None, int]:
    """Read from the start by Fetch for as long as this reader can (module rules); the
    first offset not handed over."""
    position = range_read.start
    try:
        security = security_of(range_read.config)
        leader = leader_of(range_read, security)
        if leader is None:
            return position
        connection = BrokerConnection(leader, security)
    except (ClientConfigError, SparkKafkaError, OSError):
        return position
    where = f"{range_read.topic}-{range_read.partition}"
    with connection:
        try:
            sent = connection.send(fetch_request(range_read, position), FETCH_VERSION)
        except OSError:
            return position
        while position < range_read.end:
            try:
                answer = partition_answer(connection, range_read, sent)
            except (SparkKafkaError, OSError):
                return position
            if answer is None:
                return position
            records = answer.records or b""
            try:
                walk = columnar.walk_batches(records, position, range_read.end)
                if not walk.spans and walk.next_offset <= position:
                    return position
                more = not walk.stopped and walk.next_offset < range_read.end
                if more:
                    sent = connection.send(
                        fetch_request(range_read, walk.next_offset), FETCH_VERSION
                    )
                rows = columnar.decode(records, walk, position, range_read.end)
            except CorruptBatch as error:
                raise SparkKafkaError(f"{where}: a corrupt batch from {leader}: {error}") from None
            except OSError:
                return position
            batch = columnar.to_arrow(
                rows,
                range_read.topic,
                range_read.partition,
                include_headers=range_read.include_headers,
            )
            for start in range(0, batch.num_rows, ARROW_ROWS_MAX):
                yield batch.slice(start, ARROW_ROWS_MAX)
            position = min(walk.next_offset, range_read.end)
            if not more:
                return position
    return position


def leader_of(range_read: RangeRead, security: ClientSecurity) -> str | None:
    """host:port of the partition's leader, from the first bootstrap broker that answers;
    None when it names none."""
    metadata = ask_metadata(range_read.bootstrap, range_read.topic, security)
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
    for topic in metadata.topics:
        if topic.name != range_read.topic or topic.error_code != 0:
            continue
        for partition in topic.partitions:
            if partition.partition_index == range_read.partition and partition.error_code == 0:
                return brokers.get(partition.leader_id)
    return None


def fetch_request(range_read: RangeRead, offset: int) -> Any:
    """A Fetch of the range's partition at `offset`, as a consumer (read committed)."""
    return wire.fetch_request(
        range_read.topic, range_read.partition, offset, max_wait_ms=FETCH_WAIT_MS,
        min_bytes=1, isolation_level=READ_COMMITTED, rack_id="", max_bytes=FETCH_BYTES_MAX,
    )  # fmt: skip


def partition_answer(connection: BrokerConnection, range_read: RangeRead, sent: int) -> Any:
    """The answer for the range's partition to the Fetch `sent`; None when it holds an
    error code or aborted transactions (librdkafka takes over)."""
    answer = wire.fetch_answer(connection, range_read.partition, sent)
    if answer is None or answer.error_code != 0 or answer.aborted_transactions:
        return None
    return answer
