"""`df.write.format("tidelog")` and `df.writeStream.format("tidelog")`.

Columns, as Spark's Kafka sink takes them: `value` (required, string or binary), `key`
(string or binary), `headers` (array<struct<key:string,value:binary>>), `topic` (string) and
`partition` (int); the option `topic` overrides the column. Other columns are ignored.

Guarantee: at least once, as Spark's Kafka sink documents it. Each task produces its rows
with acks=all and an idempotent producer and succeeds only once every row is acknowledged
(committed by a majority); a task Spark retries, or a micro-batch a restarted query runs
again, produces its rows again, so a reader may see duplicates. Readers that need exactly
once deduplicate, for example by a key the job writes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from tidelog.spark.failures import one_line_errors
from tidelog.spark.kafka_io import Writer
from tidelog.spark.options import SinkOptions, SparkOptionError

log = logging.getLogger("tidelog.spark")

BYTES_TYPES: Final = (StringType, BinaryType)


@dataclass
class Written(WriterCommitMessage):
    records: int


def check_sink_schema(schema: StructType, sink: SinkOptions) -> None:
    """SparkOptionError when the columns cannot be written (before any task starts)."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise SparkOptionError("the tidelog sink needs a column named value (string or binary)")
    for name in ("value", "key"):
        if name in fields and not isinstance(fields[name], BYTES_TYPES):
            raise SparkOptionError(f"column {name} must be string or binary, not {fields[name]}")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise SparkOptionError(f"column topic must be a string, not {fields['topic']}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise SparkOptionError(f"column partition must be an int, not {fields['partition']}")
    if "headers" in fields and not is_headers_type(fields["headers"]):
        raise SparkOptionError("column headers must be array<struct<key:string,value:binary>>")
    if sink.topic is None and "topic" not in fields:
        raise SparkOptionError("name the topic: the option topic, or a column named topic")


def is_headers_type(data_type: Any) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    inner = {f.name: f.dataType for f in data_type.elementType.fields}
    return isinstance(inner.get("key"), StringType) and isinstance(inner.get("value"), BinaryType)


def listed(batch: pa.RecordBatch, name: str, *, as_binary: bool = False) -> list[Any]:
    """The column `name` (any case) as a list, or Nones where there is no such column."""
    for index, field_name in enumerate(batch.schema.names):
        if field_name.lower() == name:
            column = batch.column(index)
            values: list[Any] = (column.cast(pa.binary()) if as_binary else column).to_pylist()
            return values
    return [None] * batch.num_rows


def write_batches(sink: SinkOptions, batches: Iterator[pa.RecordBatch]) -> Written:
    """Produce every row; return once all are acknowledged (SparkKafkaError otherwise)."""
    writer = Writer(sink.bootstrap, sink.client_config)
    for batch in batches:
        values = listed(batch, "value", as_binary=True)
        keys = listed(batch, "key", as_binary=True)
        topics = [sink.topic] * batch.num_rows if sink.topic else listed(batch, "topic")
        partitions = listed(batch, "partition")
        headers = listed(batch, "headers")
        for value, key, topic, partition, header in zip(
            values, keys, topics, partitions, headers, strict=True
        ):
            if topic is None:
                raise SparkOptionError("a row has no topic (null in column topic, no option)")
            pairs = [(h["key"], h["value"]) for h in header] if header else None
            writer.send(topic, value, key, partition, pairs)
    return Written(writer.finish())


def acknowledged(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.records for m in messages if isinstance(m, Written))


class ProducesRows:
    """What both writers do in a task: produce the rows, answer once all are acknowledged."""

    def __init__(self, sink: SinkOptions) -> None:
        self.sink = sink

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return write_batches(self.sink, iterator)


@one_line_errors
class SinkWriter(ProducesRows, DataSourceArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("tidelog sink: %d records acknowledged", acknowledged(messages))


@one_line_errors
class StreamSinkWriter(ProducesRows, DataSourceStreamArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("tidelog sink: batch %d, %d records acknowledged", batchId, acknowledged(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("tidelog sink: batch %d aborted; its acknowledged rows stay written", batchId)
