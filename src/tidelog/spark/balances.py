"""The bank-transfer pipeline of `tidelog demo`: balances per account, on Spark.

A Structured Streaming query reads the committed transfers (`transfer NUMBER acct-A ->
acct-B AMOUNT`, AMOUNT with two decimals) with Trigger.AvailableNow, turns each into a debit
of the payer and a credit of the payee in cents, sums them per account and, after each
micro-batch, writes every balance to the balances topic through the tidelog sink (complete
mode: a key's last record is its balance, as in a compacted topic). Each balance record
carries, in its header `moves`, how many debits and credits its sum took: the transfers the
query read are counted from its exactly-once state, not from its progress metrics, which
also count the rows of a task attempt that failed (a killed executor's). A batch job then
reads the balances topic, keeps each account's last record and writes the table to Parquet.
The sink is at least once: the records in the balances topic beyond those the micro-batches
emitted are its duplicates, counted.

While the query runs, a watcher (the demo's progress display, its executor kill) is handed
the query every WATCH_INTERVAL_S from the driver's thread; it must return promptly.

Rules of this file: amounts are whole cents (no floating point anywhere); a value that is
not a transfer is counted, never guessed at; every wait has a named maximum.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrameReader, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

QUERY_TIMEOUT_S: Final = 300
WATCH_INTERVAL_S: Final = 0.25
"""How often a running query is handed to its watcher."""
MAX_OFFSETS_PER_TRIGGER: Final = 5_000
MOVES_HEADER: Final = "moves"
"""The balance record's header: the debits and credits its sum took (two per transfer)."""
TRANSFER: Final = r"^transfer (\d+) (\S+) -> (\S+) (\d+)\.(\d\d)$"


@dataclass(frozen=True)
class PipelineRun:
    balances: dict[str, int]  # account -> cents
    transfers_read: int  # transfers the query's aggregate took (its moves, halved)
    malformed: int  # values of the transfers topic that are not transfers (a batch read)
    batches: int  # micro-batches that read something
    parquet: Path
    balances_emitted: int  # rows the micro-batches handed the sink (each batch: every balance)
    balances_written: int  # records found in the balances topic afterwards

    @property
    def sink_duplicates(self) -> int:
        """Records the sink wrote more than once (at least once: a retried task writes its
        rows again); negative if records are missing."""
        return self.balances_written - self.balances_emitted


Watcher = Callable[[StreamingQuery], None]
"""Called with the running query every WATCH_INTERVAL_S, and once more when it has ended."""


@dataclass(frozen=True)
class Pipeline:
    """Where the pipeline reads, writes and keeps its files."""

    bootstrap: str
    transfers: str  # topic
    balances: str  # topic
    directory: Path  # checkpoint and Parquet output
    group: str  # the consumer group the query commits to

    def reader(self, spark: SparkSession, topic: str) -> DataFrameReader:
        source = spark.read.format("tidelog").option("kafka.bootstrap.servers", self.bootstrap)
        return source.option("subscribe", topic)

    def run(self, spark: SparkSession, watch: Watcher | None = None) -> PipelineRun:
        progress = self.stream_balances(spark, watch)
        parquet = self.directory / "balances.parquet"
        table = self.latest_balances(spark, parquet)
        return PipelineRun(
            balances={account: cents for account, (cents, _) in table.items()},
            transfers_read=sum(moves for _, moves in table.values()) // 2,
            malformed=self.count_malformed(spark),
            batches=len(progress),
            parquet=parquet,
            balances_emitted=sum(rows_emitted(p) for p in progress),
            balances_written=self.reader(spark, self.balances).load().count(),
        )

    def stream_balances(
        self, spark: SparkSession, watch: Watcher | None = None
    ) -> list[dict[str, Any]]:
        """Run the streaming query to the end of what is committed now, handing it to
        `watch` while it runs; the progress of the micro-batches that read something."""
        read = (
            spark.readStream.format("tidelog")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", self.transfers)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER))
            .option("kafka.group.id", self.group)
            .load()
        )
        value = F.col("value").cast("string")
        parts = [F.regexp_extract(value, TRANSFER, index) for index in range(1, 6)]
        parsed = read.where(value.rlike(TRANSFER)).select(
            parts[1].alias("payer"),
            parts[2].alias("payee"),
            (parts[3].cast("long") * 100 + parts[4].cast("long")).alias("cents"),
        )
        moves = parsed.select(
            F.explode(
                F.array(
                    F.struct(F.col("payer").alias("account"), (-F.col("cents")).alias("cents")),
                    F.struct(F.col("payee").alias("account"), F.col("cents").alias("cents")),
                )
            ).alias("move")
        )
        totals = moves.groupBy(F.col("move.account").alias("account")).agg(
            F.sum("move.cents").alias("cents"), F.count(F.lit(1)).alias("moves")
        )
        moves_header = F.struct(
            F.lit(MOVES_HEADER).alias("key"),
            F.col("moves").cast("string").cast("binary").alias("value"),
        )
        query = (
            totals.select(
                F.col("account").alias("key"),
                F.col("cents").cast("string").alias("value"),
                F.array(moves_header).alias("headers"),
            )
            .writeStream.format("tidelog")
            .outputMode("complete")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("topic", self.balances)
            .option("checkpointLocation", str(self.directory / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        # awaitTermination takes float seconds (it sends int(timeout * 1000) ms); the stub
        # says int.
        while not query.awaitTermination(WATCH_INTERVAL_S):  # type: ignore[arg-type]
            if time.monotonic() >= deadline:
                query.stop()
                raise TimeoutError(f"the balances query did not finish in {QUERY_TIMEOUT_S} s")
            if watch is not None:
                watch(query)
        if watch is not None:
            watch(query)
        return [p for p in query.recentProgress if p["numInputRows"]]

    def count_malformed(self, spark: SparkSession) -> int:
        """Values of the transfers topic that are not transfers (a batch read)."""
        frame = self.reader(spark, self.transfers).load()
        return frame.where(~F.col("value").cast("string").rlike(TRANSFER)).count()

    def latest_balances(self, spark: SparkSession, parquet: Path) -> dict[str, tuple[int, int]]:
        """Each account's last balance record, written to Parquet and returned: account ->
        (cents, moves)."""
        records = self.reader(spark, self.balances).option("includeHeaders", "true").load()
        moves = F.filter("headers", lambda h: h["key"] == MOVES_HEADER)[0]["value"]
        newest_first = Window.partitionBy("key").orderBy(F.col("offset").desc())
        table = (
            records.withColumn("rank", F.row_number().over(newest_first))
            .where("rank = 1")
            .select(
                F.col("key").cast("string").alias("account"),
                F.col("value").cast("string").cast("long").alias("cents"),
                moves.cast("string").cast("long").alias("moves"),
                F.col("partition"),
                F.col("offset"),
            )
        )
        table.write.mode("overwrite").parquet(str(parquet))
        rows = spark.read.parquet(str(parquet)).collect()
        return {row.account: (row.cents, row.moves or 0) for row in rows}


def rows_emitted(progress: dict[str, Any]) -> int:
    """The rows one micro-batch handed the sink: the sink's count when Spark reports one,
    else (complete mode emits the whole aggregate) the state's rows after the batch."""
    sink = int(progress.get("sink", {}).get("numOutputRows", -1))
    if sink >= 0:
        return sink
    return sum(int(state["numRowsTotal"]) for state in progress.get("stateOperators", []))
