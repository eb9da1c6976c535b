"""`spark.read.format("tidelog")` and `spark.readStream.format("tidelog")`.

The source plans on the driver and reads on executors. Planning turns the options into one
offset range [start, end) per partition (split further for `minPartitions` and
`maxRecordsPerPartition`); each range is one Spark task, which reads it with its own consumer
and hands Spark Arrow record batches.

Rules of this file:
- "latest" is each partition's HWM when the range is planned, and a range never ends past
  the HWM the driver saw: a Spark result holds committed records only.
- Streaming offsets are Spark's Kafka source's: `{"topic": {"partition": next offset}}`,
  checkpointed by Spark, so a restarted query reads every offset exactly once.
- A planned start below the log start offset is data loss: the query fails with a message
  naming the partition and the offsets (failOnDataLoss=true, the default), or skips ahead
  to the log start and logs it.
- What is wrong is said in one line, first (`tidelog.spark.failures`): the classes Spark
  calls are wrapped by `one_line_errors`, and `streamReader` never raises (PySpark 4's
  stream runner would report its own UnboundLocalError instead): a stream whose options are
  refused gets a reader that raises the refusal at its first call.
- A committed micro-batch's end offsets are also committed to a consumer group
  (`kafka.group.id`, else `groupIdPrefix`-uuid), so `tidelog groups describe` shows the
  query's lag; that commit is for watching only, the checkpoint is what the query resumes from.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from tidelog.errors import TidelogError
from tidelog.spark import direct
from tidelog.spark.failures import one_line_errors
from tidelog.spark.kafka_io import (
    DataLoss,
    Planner,
    RangeRead,
    SparkKafkaError,
    arrow_schema,
)
from tidelog.spark.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    PartitionOffsets,
    SinkOptions,
    SourceOptions,
    SparkOptionError,
    TopicPartition,
    boolean,
    lowered,
    parse_sink_options,
    parse_source_options,
)
from tidelog.spark.sink import SinkWriter, StreamSinkWriter, check_sink_schema

log = logging.getLogger("tidelog.spark")

COMMIT_TRIES_MAX: Final = 3

OffsetsJson = dict[str, dict[str, int]]


@one_line_errors
class TidelogDataSource(DataSource):
    """The `tidelog` format: Spark's Kafka source and sink, reading committed records only."""

    @classmethod
    def name(cls) -> str:
        return "tidelog"

    def schema(self) -> StructType:
        headers = boolean(lowered(self.options), "includeheaders", default=False)
        return from_arrow_schema(arrow_schema(headers))

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            return StreamReader(parse_source_options(self.options, streaming=True))
        except TidelogError as error:
            return RefusedStreamReader(error)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise SparkOptionError(
                "save mode overwrite is not allowed for tidelog: a log is appended to "
                "(use mode append)"
            )
        return SinkWriter(self.sink_for(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamSinkWriter(self.sink_for(schema))  # complete mode appends as well

    def sink_for(self, schema: StructType) -> SinkOptions:
        sink = parse_sink_options(self.options)
        check_sink_schema(schema, sink)
        return sink


class RangePartition(InputPartition):
    """One Spark task: offsets [start, end) of one partition."""

    def __init__(self, read: RangeRead) -> None:
        super().__init__((read.topic, read.partition, read.start, read.end))
        self.read = read


# Planning, shared by batch and streaming


def resolve(
    planner: Planner,
    spec: OffsetSpec,
    partitions: list[TopicPartition],
    marks: dict[TopicPartition, tuple[int, int]],
    *,
    side: str,
) -> PartitionOffsets:
    """Concrete offsets for `spec` on every partition: earliest is the log start offset,
    latest the HWM, a timestamp the first offset at or after it."""
    named = set(spec.offsets) | set(spec.timestamps_ms)
    strangers = sorted(named - set(partitions))
    if strangers:
        raise SparkOptionError(f"{side}: partitions {strangers} are not among those read")
    stamps = (
        dict.fromkeys(partitions, spec.timestamp_ms)
        if spec.timestamp_ms is not None
        else {tp: ms for tp, ms in spec.timestamps_ms.items() if tp in partitions}
    )
    found = planner.offsets_for_times(stamps)  # nothing is asked when there is no timestamp
    resolved: PartitionOffsets = {}
    for tp in partitions:
        low, high = marks[tp]
        if tp in found:
            offset = found[tp]
            if offset is None and not spec.by_timestamp_fallback_latest:
                raise SparkKafkaError(
                    f"{side}: no record of {tp[0]}-{tp[1]} at or after timestamp {stamps[tp]} "
                    f"(set {side}OffsetsByTimestampStrategy=latest to start at the end)"
                )
            resolved[tp] = high if offset is None else min(offset, high)
            continue
        wanted = spec.offsets.get(tp, spec.default)
        resolved[tp] = low if wanted == EARLIEST else high if wanted == LATEST else wanted
    return resolved


def check_starts(
    starts: PartitionOffsets,
    marks: dict[TopicPartition, tuple[int, int]],
    *,
    fail_on_data_loss: bool,
) -> PartitionOffsets:
    """Starts below the log start offset: DataLoss, or moved to the log start (logged)."""
    checked = dict(starts)
    for tp, start in starts.items():
        low = marks[tp][0]
        if start >= low:
            continue
        where = f"{tp[0]}-{tp[1]}"
        if fail_on_data_loss:
            raise DataLoss(
                f"{where}: the query planned to read from offset {start}, but the log starts at "
                f"{low} now: offsets {start}..{low - 1} were deleted (DeleteRecords or "
                "retention) before they were read. Set failOnDataLoss=false to skip them"
            )
        log.warning(
            "%s: offsets %d..%d were deleted before they were read; skipped", where, start, low - 1
        )
        checked[tp] = low
    return checked


def plan_ranges(
    options: SourceOptions, starts: PartitionOffsets, ends: PartitionOffsets
) -> list[RangePartition]:
    """One task per partition with records to read, split as Spark's Kafka source splits
    them: into `maxRecordsPerPartition` pieces, and for `minPartitions` in proportion to
    each range's size."""
    sizes = {tp: ends[tp] - starts[tp] for tp in ends if ends[tp] > starts.get(tp, ends[tp])}
    total = sum(sizes.values())
    ranges = []
    for tp, size in sorted(sizes.items()):
        pieces = 1
        if options.max_records_per_partition:
            pieces = math.ceil(size / options.max_records_per_partition)
        if options.min_partitions and len(sizes) < options.min_partitions:
            pieces = max(pieces, round(size / total * options.min_partitions), 1)
        pieces = min(pieces, size)
        start = starts[tp]
        for piece in range(pieces):
            begin = start + size * piece // pieces
            finish = start + size * (piece + 1) // pieces
            ranges.append(RangePartition(range_read(options, tp, begin, finish)))
    return ranges


def range_read(options: SourceOptions, tp: TopicPartition, start: int, end: int) -> RangeRead:
    return RangeRead(
        bootstrap=options.bootstrap,
        config=options.client_config,
        topic=tp[0],
        partition=tp[1],
        start=start,
        end=end,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
    )


def to_json(offsets: PartitionOffsets) -> OffsetsJson:
    document: OffsetsJson = {}
    for (topic, partition), offset in sorted(offsets.items()):
        document.setdefault(topic, {})[str(partition)] = offset
    return document


def from_json(document: dict[str, Any]) -> PartitionOffsets:
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in document.items()
        for partition, offset in partitions.items()
    }


def offsets_behind_latest(progress: dict[str, Any]) -> dict[str, float]:
    """Spark's Kafka source metrics `minOffsetsBehindLatest`, `maxOffsetsBehindLatest` and
    `avgOffsetsBehindLatest`, from one source entry of a query's progress (its `endOffset`,
    what the batch read to, and `latestOffset`, the HWMs the source reported)."""
    import json  # noqa: PLC0415 - the progress holds offsets as JSON text

    end, latest = (
        from_json(json.loads(value) if isinstance(value, str) else value or {})
        for value in (progress.get("endOffset"), progress.get("latestOffset"))
    )
    behind = [max(latest[tp] - end.get(tp, latest[tp]), 0) for tp in latest]
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": float(min(behind)),
        "maxOffsetsBehindLatest": float(max(behind)),
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
    }


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The records of one planned range. PySpark reads a plan of no ranges (nothing to
    read) as one task with a bare InputPartition: it yields nothing."""
    if isinstance(partition, RangePartition):
        yield from direct.read(partition.read)


# Batch


@one_line_errors
class BatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        planner = Planner(self.options.bootstrap, self.options.client_config)
        try:
            partitions = planner.partitions(self.options.subscription)
            marks = planner.watermarks(partitions)
            starts = resolve(planner, self.options.starting, partitions, marks, side="starting")
            ends = resolve(planner, self.options.ending, partitions, marks, side="ending")
        finally:
            planner.close()
        for tp in partitions:
            if starts[tp] > ends[tp]:
                raise SparkOptionError(
                    f"{tp[0]}-{tp[1]}: starting offset {starts[tp]} is after ending offset "
                    f"{ends[tp]} (the HWM is {marks[tp][1]})"
                )
        starts = check_starts(starts, marks, fail_on_data_loss=self.options.fail_on_data_loss)
        return plan_ranges(self.options, starts, ends)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_partition(partition)


# Streaming


@one_line_errors
class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the partitions the subscription names (new ones from earliest).

    Admission control: `maxOffsetsPerTrigger` caps a batch (shared out in proportion to
    what each partition has), `minOffsetsPerTrigger` waits for that many new offsets, at
    most `maxTriggerDelay` after the last batch; Trigger.AvailableNow reads up to the HWMs
    seen when the query started, in batches of at most maxOffsetsPerTrigger."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.group = options.group_id or f"{options.group_prefix}-{uuid.uuid4()}"
        self.target: PartitionOffsets | None = None  # Trigger.AvailableNow's end
        self.latest: PartitionOffsets = {}
        self.last_trigger_s = time.monotonic()
        self.group_offsets: PartitionOffsets = {}
        self._planner: Planner | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Executors get the options only: the driver's consumer stays on the driver."""
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options.bootstrap, self.options.client_config, self.group)
            log.info("tidelog source: commits offsets to consumer group %s", self.group)
        return self._planner

    def marks_now(self) -> dict[TopicPartition, tuple[int, int]]:
        return self.planner.watermarks(self.planner.partitions(self.options.subscription))

    def initialOffset(self) -> OffsetsJson:
        marks = self.marks_now()
        starts = resolve(self.planner, self.options.starting, sorted(marks), marks, side="starting")
        return to_json(starts)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {tp: high for tp, (_, high) in self.marks_now().items()}
        log.info("tidelog source: Trigger.AvailableNow reads up to %s", to_json(self.target))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> OffsetsJson:
        starts = from_json(start)
        # Spark asks for the next batch once the last one is committed, and calls commit()
        # only then: the last batch of a Trigger.AvailableNow run is committed here.
        self.commit_to_group(starts)
        marks = self.marks_now()
        self.latest = {tp: high for tp, (_, high) in marks.items()}
        behind = [high - starts[tp] for tp, high in self.latest.items() if tp in starts]
        log.info("tidelog source: max offsets behind latest %d", max(behind, default=0))
        available = dict(self.latest)
        if self.target is not None:
            available = {
                tp: min(o, self.target[tp]) for tp, o in available.items() if tp in self.target
            }
        for tp, offset in starts.items():
            if tp not in available:
                available[tp] = offset  # its partition is gone: partitions() decides
        base = {tp: starts.get(tp, marks[tp][0] if tp in marks else 0) for tp in available}
        ends = {tp: max(base[tp], offset) for tp, offset in available.items()}
        ends = self.admit(base, ends, limit)
        return to_json(ends)

    def admit(
        self, base: PartitionOffsets, ends: PartitionOffsets, limit: ReadLimit
    ) -> PartitionOffsets:
        """`ends` within the read limits; `base` (no new batch) while too few are waiting."""
        if isinstance(limit, ReadAllAvailable):
            return ends
        waiting = sum(ends[tp] - base[tp] for tp in ends)
        minimum = self.options.min_offsets_per_trigger
        now = time.monotonic()
        delayed_ms = (now - self.last_trigger_s) * 1000
        too_few = minimum is not None and self.target is None and waiting < minimum
        if too_few and delayed_ms < self.options.max_trigger_delay_ms:
            return base
        maximum = self.options.max_offsets_per_trigger
        if maximum is not None and waiting > maximum:
            ends = prorate(base, ends, maximum)
        if ends != base:
            self.last_trigger_s = now
        return ends

    def reportLatestOffset(self) -> OffsetsJson | None:
        return to_json(self.latest) if self.latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        starts, ends = from_json(start), from_json(end)
        marks = self.marks_now()
        gone = sorted(tp for tp in ends if tp not in marks)
        if gone and self.options.fail_on_data_loss:
            raise DataLoss(
                f"partitions {gone} no longer exist (their topic was deleted); set "
                "failOnDataLoss=false to go on without them"
            )
        ends = {tp: o for tp, o in ends.items() if tp in marks}
        starts = {tp: starts.get(tp, marks[tp][0]) for tp in ends}
        starts = check_starts(starts, marks, fail_on_data_loss=self.options.fail_on_data_loss)
        return plan_ranges(self.options, starts, ends)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self.commit_to_group(from_json(end))

    def commit_to_group(self, offsets: PartitionOffsets) -> None:
        """Commit a finished batch's end to the group, once; a failed commit is logged and
        left for the next batch (the checkpoint, not the group, is what the query resumes
        from)."""
        if not offsets or offsets == self.group_offsets:
            return
        for attempt in range(1, COMMIT_TRIES_MAX + 1):
            try:
                self.planner.commit(offsets)
            except SparkKafkaError as error:
                log.warning(
                    "commit %d/%d to group %s failed: %s",
                    attempt,
                    COMMIT_TRIES_MAX,
                    self.group,
                    error,
                )
                continue
            self.group_offsets = offsets
            return

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


@one_line_errors
class RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The reader of a stream whose options were refused: every call raises the refusal."""

    def __init__(self, error: TidelogError) -> None:
        self.error = error

    def initialOffset(self) -> OffsetsJson:
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    def getDefaultReadLimit(self) -> ReadLimit:
        raise self.error

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> OffsetsJson:
        raise self.error

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise self.error


def prorate(base: PartitionOffsets, ends: PartitionOffsets, maximum: int) -> PartitionOffsets:
    """At most `maximum` offsets in all, shared in proportion to what each partition has
    (Spark's KafkaMicroBatchStream.rateLimit)."""
    total = sum(ends[tp] - base[tp] for tp in ends)
    limited = {}
    for tp, end in ends.items():
        size = end - base[tp]
        share = maximum * size / total if total else 0.0
        step = math.ceil(share) if share < 1 else math.floor(share)
        limited[tp] = min(end, base[tp] + step)
    return limited
