"""`tidelog verify-replicas` as a Spark batch job: every replica's committed batches, compared.

kafka-replica-verification's check, on tidelog's terms. The driver asks the cluster for the
topic's partitions, their replicas and the brokers' addresses (Metadata), and each partition's
log start offset (ListOffsets, earliest, to its leader). The `tidelog-replicas` source then
reads each replica in a Spark task of its own: the task connects to THAT replica's broker and
sends Fetch v11 requests with a rack id (so a follower serves reads below its own HWM, as a
leader always does) from the log start up to the HWM of its first answer. It does not decode
records: it walks the batch headers (`tidelog.records`) and yields one row per batch (base
and last offset, partitionLeaderEpoch, stored CRC, whether the CRC-32C recomputed matches),
then one `replica` row with the replica's HWM, log start offset and error, if any.

A secure cluster is read as its client properties say (`kafka.security.protocol`,
`kafka.ssl.ca.location`, `kafka.sasl.mechanism`, ... in librdkafka's names, as the `tidelog`
source takes them; `tidelog.client_config` checks and maps them): every connection, the
driver's and each task's, is TLS and authenticates (SaslHandshake, then SaslAuthenticate
rounds of kafka-python's PLAIN or SCRAM client) before its first request.

`verify_replicas` compares the rows in Spark. Per partition, over the replicas that answered:
the range checked is [max log start offset, min HWM); a batch there (keyed by base offset)
is a mismatch when its (last offset, epoch, CRC) differ across replicas, when a replica lacks
it, or when a CRC check failed anywhere. The partition's lag is max HWM - min HWM.

Rules of this file:
- A replica that cannot be read (no address, broker down, a refused login, an error code, a
  closed connection, a batch that does not frame) is a `replica` row with its error, never a
  failed Spark task and never silently skipped; it takes no part in its partition's range
  or comparison.
- A task reads up to the HWM of its first answer only, so it ends while producers write.
- The partitions are verified in rounds of consecutive partitions (at most ROUNDS_MAX, so
  a topic of many partitions costs a few Spark jobs more, not one per partition), and each
  round's report is handed out as soon as it is compared: a caller prints a partition's
  line when it is done, not at the end. A round's rows are materialized once
  (`localCheckpoint`): every figure of a partition comes from the same read of each replica.
- Every connection and request has a named timeout; a report lists at most
  MISMATCHES_LISTED_MAX mismatches, and counts all of them.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from tidelog.client_config import PLAINTEXT, ClientConfigError, ClientSecurity, security_of
from tidelog.errors import CorruptBatch
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.records import HEADER_SIZE, check_framing, crc_of, read_header
from tidelog.spark.failures import one_line_errors
from tidelog.spark.kafka_io import SparkKafkaError
from tidelog.spark.wire import (
    FETCH_VERSION,
    NO_EPOCH,
    NO_REPLICA_ID,
    BrokerConnection,
    ask_metadata,
    error_name,
    fetch_answer,
)
from tidelog.spark.wire import fetch_request as wire_fetch
from tidelog.spark.workers import point_workers_at_tidelog

# kafka-python 3.0.12 loads its JSON schemas with a deprecated importlib call at import time.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import (
        ListOffsetsRequest,
        ListOffsetsResponse,
    )

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

SOURCE_NAME: Final = "tidelog-replicas"
CLIENT_ID: Final = "tidelog-verify-replicas"
RACK_ID: Final = "tidelog-verify-replicas"
"""Any non-empty rack id makes a tidelog follower serve Fetch below its own HWM."""
ARROW_ROWS_MAX: Final = 50_000
MISMATCHES_LISTED_MAX: Final = 1_000
ROUNDS_MAX: Final = 8
"""Partitions are read and compared in at most this many Spark rounds (module rules)."""
LIST_OFFSETS_VERSION: Final = 5
KAFKA_PREFIX: Final = "kafka."
EARLIEST: Final = -2
BATCH: Final = "batch"
REPLICA: Final = "replica"
ARROW_SCHEMA: Final = pa.schema(
    [
        ("kind", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("replica", pa.int32()),
        ("address", pa.string()),
        ("base_offset", pa.int64()),
        ("last_offset", pa.int64()),
        ("epoch", pa.int32()),
        ("crc", pa.int64()),
        ("crc_ok", pa.bool_()),
        ("hwm", pa.int64()),
        ("log_start_offset", pa.int64()),
        ("error", pa.string()),
    ]
)
SCHEMA: Final = from_arrow_schema(ARROW_SCHEMA)
"""The rows as Spark sees them."""


class ReplicaReadError(SparkKafkaError):
    """One replica could not be read to its HWM; the message says where and why."""


# ---------------------------------------------------------------- planning, on the driver


@dataclass(frozen=True)
class ReplicaRead:
    """One Spark task: one replica of one partition, read from `start_offset` to its HWM.
    `address` is empty when the cluster's metadata lists no broker with that id."""

    topic: str
    partition: int
    replica: int
    address: str
    start_offset: int


def plan_reads(
    bootstrap: str, topic: str, security: ClientSecurity = PLAINTEXT
) -> list[ReplicaRead]:
    """One read per replica of every partition of `topic`, by partition then replica.
    SparkKafkaError when no bootstrap broker answers or the topic is unknown."""
    metadata = ask_metadata(bootstrap, topic, security)
    found = next((t for t in metadata.topics if t.name == topic), None)
    if found is None:
        raise SparkKafkaError(f"the Metadata answer of {bootstrap} lacks topic '{topic}'")
    if found.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise SparkKafkaError(f"unknown topic '{topic}' at {bootstrap}")
    if found.error_code != 0:
        raise SparkKafkaError(f"topic '{topic}': {error_name(found.error_code)}")
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
    leaders: dict[int, list[int]] = {}
    for p in found.partitions:
        leaders.setdefault(p.leader_id, []).append(p.partition_index)
    starts: dict[int, int] = {}
    for leader, partitions in leaders.items():
        if leader in brokers:
            starts.update(ask_log_starts(brokers[leader], topic, partitions, security))
    return [
        ReplicaRead(
            topic, p.partition_index, r, brokers.get(r, ""), starts.get(p.partition_index, 0)
        )
        for p in sorted(found.partitions, key=lambda p: p.partition_index)
        for r in sorted(p.replica_nodes)
    ]


def ask_log_starts(
    leader: str, topic: str, partitions: list[int], security: ClientSecurity
) -> dict[int, int]:
    """partition -> log start offset, from their leader; partitions it does not answer for
    are left out (their reads start at 0, and a replica that lacks 0 says so)."""
    request = ListOffsetsRequest(
        replica_id=NO_REPLICA_ID,
        isolation_level=0,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                        partition_index=p, current_leader_epoch=NO_EPOCH, timestamp=EARLIEST
                    )
                    for p in partitions
                ],
            )
        ],
    )
    try:
        with BrokerConnection(leader, security, client_id=CLIENT_ID) as connection:
            response = connection.call(request, ListOffsetsResponse, LIST_OFFSETS_VERSION)
    except (OSError, SparkKafkaError):
        return {}
    return {
        p.partition_index: p.offset
        for t in response.topics
        for p in t.partitions
        if p.error_code == 0 and p.offset >= 0
    }


def plan_to_json(reads: Sequence[ReplicaRead]) -> str:
    return json.dumps([asdict(read) for read in reads])


def plan_from_json(text: str) -> list[ReplicaRead]:
    return [ReplicaRead(**read) for read in json.loads(text)]


# ---------------------------------------------------------------- reading, on an executor


@dataclass
class ReplicaRows:
    """The rows of one replica's read as they are gathered: batches, then its summary."""

    read: ReplicaRead
    batches: list[tuple[int, int, int, int, bool]] = field(default_factory=list)
    hwm: int | None = None
    log_start_offset: int | None = None
    error: str | None = None

    def add_batches(self, records: bytes, offset: int, end: int) -> int:
        """Add the whole batches of one Fetch answer that start below `end`; the offset to
        fetch next. ReplicaReadError when it holds none, or one that does not frame."""
        view = memoryview(records)
        position, next_offset = 0, offset
        while position + HEADER_SIZE <= len(view):
            header = read_header(view, position)
            if header.base_offset >= end or position + header.size_bytes > len(view):
                break  # above the HWM first seen, or cut at the fetch's byte limit
            try:
                check_framing(view, position)
            except CorruptBatch as error:
                where = f"offset {header.base_offset}"
                raise ReplicaReadError(f"the batch at {where} does not frame: {error}") from None
            crc_ok = crc_of(view, position, header.size_bytes) == header.crc
            self.batches.append(
                (header.base_offset, header.last_offset, header.epoch, header.crc, crc_ok)
            )
            next_offset = header.next_offset
            position += header.size_bytes
        if next_offset <= offset:
            raise ReplicaReadError(f"no whole batch at offset {offset} below the HWM {end}")
        return next_offset

    def take(self) -> pa.RecordBatch:
        """The batch rows gathered since the last take."""
        rows, self.batches = self.batches, []
        count = len(rows)
        columns = list(zip(*rows, strict=True)) if rows else [()] * 5
        nulls = [None] * count
        return self.to_arrow(BATCH, count, [*columns, nulls, nulls, nulls])

    def summary(self) -> pa.RecordBatch:
        """The replica row: its HWM, log start offset and error."""
        return self.to_arrow(
            REPLICA, 1, [[None]] * 5 + [[self.hwm], [self.log_start_offset], [self.error]]
        )

    def to_arrow(self, kind: str, count: int, columns: list[Sequence[Any]]) -> pa.RecordBatch:
        read = self.read
        fixed = [
            [kind] * count,
            [read.topic] * count,
            [read.partition] * count,
            [read.replica] * count,
            [read.address] * count,
        ]
        arrays = [
            pa.array(values, type=f.type)
            for values, f in zip(fixed + columns, ARROW_SCHEMA, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def fetch_request(read: ReplicaRead, offset: int) -> Any:
    """A Fetch v11 of one partition at `offset`, with a rack id so a follower answers."""
    return wire_fetch(
        read.topic, read.partition, offset, max_wait_ms=0, min_bytes=0, isolation_level=0,
        rack_id=RACK_ID,
    )  # fmt: skip


def fetch_once(connection: BrokerConnection, read: ReplicaRead, offset: int) -> Any:
    """The replica's answer for its partition at `offset`; ReplicaReadError for an error."""
    sent = connection.send(fetch_request(read, offset), FETCH_VERSION)
    answer = fetch_answer(connection, read.partition, sent)
    if answer is None:
        raise ReplicaReadError("the Fetch answer is not for this partition")
    if answer.error_code != 0:
        raise ReplicaReadError(error_name(answer.error_code))
    return answer


def read_replica(
    read: ReplicaRead, security: ClientSecurity = PLAINTEXT
) -> Iterator[pa.RecordBatch]:
    """The rows of one replica: its batches from `start_offset` to the HWM of its first
    answer, then its summary row (with the error that stopped the read, if any)."""
    rows = ReplicaRows(read)
    offset = read.start_offset
    try:
        if not read.address:
            raise ReplicaReadError(f"broker {read.replica} is not in the metadata (down?)")
        with BrokerConnection(read.address, security, client_id=CLIENT_ID) as connection:
            while rows.hwm is None or offset < rows.hwm:
                answer = fetch_once(connection, read, offset)
                if rows.hwm is None:
                    rows.hwm = int(answer.high_watermark)
                rows.log_start_offset = int(answer.log_start_offset)
                if offset < rows.hwm:
                    offset = rows.add_batches(answer.records or b"", offset, rows.hwm)
                if len(rows.batches) >= ARROW_ROWS_MAX:
                    yield rows.take()
    except (SparkKafkaError, ClientConfigError, OSError) as error:
        where = f"{read.address or 'no address'}, fetch offset {offset}"
        rows.error = f"{where}: {str(error) or type(error).__name__}"
    if rows.batches:
        yield rows.take()
    yield rows.summary()


class ReplicaPartition(InputPartition):
    """One Spark task: one replica of one partition."""

    def __init__(self, read: ReplicaRead) -> None:
        super().__init__((read.topic, read.partition, read.replica))
        self.read = read


@one_line_errors
class ReplicasReader(DataSourceReader):
    def __init__(self, reads: list[ReplicaRead], security: ClientSecurity) -> None:
        self.reads = reads
        self.security = security

    def partitions(self) -> Sequence[InputPartition]:
        return [ReplicaPartition(read) for read in self.reads]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReplicaPartition)
        yield from read_replica(partition.read, self.security)


@one_line_errors
class ReplicasDataSource(DataSource):
    """`format("tidelog-replicas")`: one row per batch of every replica of a topic, and one
    per replica. Options: `plan` (what `plan_to_json` writes), or `bootstrap` and `topic`;
    and a secure cluster's client properties as `kafka.*`."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        security = security_of(client_properties(self.options))
        if "plan" in self.options:
            return ReplicasReader(plan_from_json(str(self.options["plan"])), security)
        missing = [name for name in ("bootstrap", "topic") if name not in self.options]
        if missing:
            raise SparkKafkaError(f"{SOURCE_NAME}: option(s) {', '.join(missing)} needed")
        reads = plan_reads(self.options["bootstrap"], self.options["topic"], security)
        return ReplicasReader(reads, security)


def client_properties(options: Mapping[str, Any]) -> dict[str, str]:
    """The `kafka.*` options, without the prefix (Spark's option names are case-blind)."""
    return {
        key[len(KAFKA_PREFIX) :]: str(value)
        for key, value in options.items()
        if key.lower().startswith(KAFKA_PREFIX)
    }


# ---------------------------------------------------------------- comparing, in Spark


@dataclass(frozen=True)
class ReplicaState:
    """What one replica answered: its HWM and log start offset, and its error if any."""

    partition: int
    replica: int
    address: str
    hwm: int | None
    log_start_offset: int | None
    batch_count: int
    error: str | None


@dataclass(frozen=True)
class PartitionCheck:
    """One partition: the range compared, [start_offset, end_offset) = [max log start, min
    HWM) over the replicas that answered, and the lag (max HWM - min HWM) among them."""

    partition: int
    replica_count: int
    answered_count: int
    start_offset: int | None
    end_offset: int | None
    hwm_max: int | None
    lag: int | None
    batch_count: int
    mismatch_count: int


@dataclass(frozen=True)
class BatchCopy:
    replica: int
    last_offset: int
    epoch: int
    crc: int
    crc_ok: bool


@dataclass(frozen=True)
class Mismatch:
    """A batch (by base offset) whose copies differ, lack on `missing`, or fail their CRC."""

    partition: int
    base_offset: int
    copies: tuple[BatchCopy, ...]
    missing: tuple[int, ...]


@dataclass(frozen=True)
class ReplicaReport:
    topic: str
    partitions: tuple[PartitionCheck, ...]
    replicas: tuple[ReplicaState, ...]
    mismatches: tuple[Mismatch, ...]
    """The first MISMATCHES_LISTED_MAX, by partition and offset."""
    mismatch_count: int

    @property
    def errors(self) -> tuple[ReplicaState, ...]:
        return tuple(r for r in self.replicas if r.error is not None)

    @property
    def batch_count(self) -> int:
        return sum(p.batch_count for p in self.partitions)

    @property
    def ok(self) -> bool:
        return self.mismatch_count == 0 and not self.errors


def register(spark: SparkSession) -> None:
    """Make `format("tidelog-replicas")` known, its workers running a Python with tidelog."""
    point_workers_at_tidelog(spark)
    spark.dataSource.register(ReplicasDataSource)


PartitionsDone = Callable[[ReplicaReport], None]
"""Called with the report of each round of partitions as soon as that round is compared."""


def verify_replicas(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    properties: Mapping[str, str] | None = None,
    *,
    on_partitions: PartitionsDone | None = None,
) -> ReplicaReport:
    """Read every replica of `topic` and compare their committed batches (see the module),
    connecting as the client `properties` say (librdkafka's names). SparkKafkaError when the
    cluster does not answer or does not know the topic; ClientConfigError for a bad setting.

    The partitions are read and compared in at most ROUNDS_MAX rounds of consecutive
    partitions, in partition order; `on_partitions` gets each round's report as soon as it
    is done, and the report returned is all of them joined."""
    register(spark)
    given = dict(properties or {})
    reads = plan_reads(bootstrap, topic, security_of(given))
    rounds = []
    for reads_of_round in partition_rounds(reads):
        rows = (
            spark.read.format(SOURCE_NAME)
            .option("plan", plan_to_json(reads_of_round))
            .options(**{KAFKA_PREFIX + key: value for key, value in given.items()})
            .load()
            .localCheckpoint(eager=True)
        )
        report = compare_rows(topic, reads_of_round, rows)
        if on_partitions is not None:
            on_partitions(report)
        rounds.append(report)
    return joined_reports(topic, rounds)


def partition_rounds(reads: Sequence[ReplicaRead]) -> list[list[ReplicaRead]]:
    """`reads` (by partition, then replica) cut into at most ROUNDS_MAX rounds of whole,
    consecutive partitions, as even as they divide."""
    partitions = sorted({read.partition for read in reads})
    size = max(1, -(-len(partitions) // ROUNDS_MAX))  # ceiling division
    groups = [set(partitions[i : i + size]) for i in range(0, len(partitions), size)]
    return [[read for read in reads if read.partition in group] for group in groups]


def joined_reports(topic: str, rounds: Sequence[ReplicaReport]) -> ReplicaReport:
    """One report of the rounds' reports (each of whole partitions, in partition order)."""
    mismatches = tuple(m for report in rounds for m in report.mismatches)
    return ReplicaReport(
        topic=topic,
        partitions=tuple(p for report in rounds for p in report.partitions),
        replicas=tuple(r for report in rounds for r in report.replicas),
        mismatches=mismatches[:MISMATCHES_LISTED_MAX],
        mismatch_count=sum(report.mismatch_count for report in rounds),
    )


def compare_rows(topic: str, reads: Sequence[ReplicaRead], rows: DataFrame) -> ReplicaReport:
    """The report on `rows` (of the source's schema), read as `reads` planned."""
    batches = rows.where(F.col("kind") == BATCH).drop("kind")
    replicas = rows.where(F.col("kind") == REPLICA).drop("kind")
    bounds = partition_bounds(replicas)
    compared = compared_batches(batches, replicas, bounds)
    listed = (
        compared.where(~F.col("matches"))
        .orderBy("partition", "base_offset")
        .limit(MISMATCHES_LISTED_MAX)
        .collect()
    )
    checks = partition_checks(reads, bounds, compared)
    return ReplicaReport(
        topic=topic,
        partitions=checks,
        replicas=replica_states(replicas, batches),
        mismatches=tuple(mismatch_of(row) for row in listed),
        mismatch_count=sum(p.mismatch_count for p in checks),
    )


def partition_bounds(replicas: DataFrame) -> DataFrame:
    """Per partition, over the replicas that answered: the range compared and the lag."""
    return (
        replicas.where(F.col("error").isNull())
        .groupBy("partition")
        .agg(
            F.count("*").alias("answered"),
            F.collect_list("replica").alias("answering"),
            F.max("log_start_offset").alias("start_offset"),
            F.min("hwm").alias("end_offset"),
            F.max("hwm").alias("hwm_max"),
        )
        .withColumn("lag", F.col("hwm_max") - F.col("end_offset"))
    )


def compared_batches(batches: DataFrame, replicas: DataFrame, bounds: DataFrame) -> DataFrame:
    """One row per batch base offset in its partition's range, with every copy of it and
    `matches`: all answering replicas hold it, alike, and every CRC checks."""
    answered = replicas.where(F.col("error").isNull()).select("partition", "replica")
    in_range = (
        batches.join(answered, ["partition", "replica"])
        .join(bounds, "partition")
        .where(
            (F.col("base_offset") < F.col("end_offset"))
            & (F.col("last_offset") >= F.col("start_offset"))
        )
    )
    copy = F.struct("replica", "last_offset", "epoch", "crc", "crc_ok")
    return (
        in_range.groupBy("partition", "base_offset")
        .agg(
            F.sort_array(F.collect_list(copy)).alias("copies"),
            F.count("*").alias("copy_count"),
            F.count_distinct("last_offset", "epoch", "crc").alias("variants"),
            F.min(F.col("crc_ok").cast("int")).alias("all_crc_ok"),
            F.first("answered").alias("answered"),
            F.first("answering").alias("answering"),
        )
        .withColumn(
            "matches",
            (F.col("copy_count") == F.col("answered"))
            & (F.col("variants") == 1)
            & (F.col("all_crc_ok") == 1),
        )
    )


def partition_checks(
    reads: Sequence[ReplicaRead], bounds: DataFrame, compared: DataFrame
) -> tuple[PartitionCheck, ...]:
    """Every partition planned, with its range, lag and tallies (none where no replica
    answered)."""
    tallies = compared.groupBy("partition").agg(
        F.count("*").alias("batch_count"),
        F.sum((~F.col("matches")).cast("int")).alias("mismatch_count"),
    )
    found = {r["partition"]: r for r in bounds.join(tallies, "partition", "left").collect()}
    replica_counts = Counter(read.partition for read in reads)
    return tuple(
        PartitionCheck(
            partition=partition,
            replica_count=count,
            answered_count=row["answered"] if row else 0,
            start_offset=row["start_offset"] if row else None,
            end_offset=row["end_offset"] if row else None,
            hwm_max=row["hwm_max"] if row else None,
            lag=row["lag"] if row else None,
            batch_count=(row["batch_count"] or 0) if row else 0,
            mismatch_count=(row["mismatch_count"] or 0) if row else 0,
        )
        for partition, count in sorted(replica_counts.items())
        for row in [found.get(partition)]
    )


def replica_states(replicas: DataFrame, batches: DataFrame) -> tuple[ReplicaState, ...]:
    counts = batches.groupBy("partition", "replica").agg(F.count("*").alias("batch_count"))
    joined = replicas.join(counts, ["partition", "replica"], "left")
    return tuple(
        ReplicaState(
            partition=row["partition"],
            replica=row["replica"],
            address=row["address"],
            hwm=row["hwm"],
            log_start_offset=row["log_start_offset"],
            batch_count=row["batch_count"] or 0,
            error=row["error"],
        )
        for row in joined.orderBy("partition", "replica").collect()
    )


def mismatch_of(row: Row) -> Mismatch:
    copies = tuple(
        BatchCopy(c["replica"], c["last_offset"], c["epoch"], c["crc"], c["crc_ok"])
        for c in row["copies"]
    )
    held = {c.replica for c in copies}
    missing = tuple(sorted(r for r in row["answering"] if r not in held))
    return Mismatch(row["partition"], row["base_offset"], copies, missing)
