"""The bank-transfer pipeline of `tidelog demo`: balances per account, on Spark.

A Structured Streaming query reads the committed transfers (`transfer NUMBER acct-A ->
acct-B AMOUNT`, AMOUNT with two decimals) with Trigger.AvailableNow, turns each into a debit
of the payer and a credit of the payee in cents, sums them per account and, after each
micro-batch, writes every balance to the balances topic through the tidelog sink (complete
mode: a key's last record is its balance, as in a compacted topic). A batch job then reads
the balances topic, keeps each account's last record and writes the table to Parquet.

Rules of this file: amounts are whole cents (no floating point anywhere); a value that is
not a transfer is counted, never guessed at; every wait has a named maximum.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pyspark.sql import DataFrameReader, SparkSession, Window
from pyspark.sql import functions as F

QUERY_TIMEOUT_S: Final = 300
MAX_OFFSETS_PER_TRIGGER: Final = 5_000
TRANSFER: Final = r"^transfer (\d+) (\S+) -> (\S+) (\d+)\.(\d\d)$"


@dataclass(frozen=True)
class PipelineRun:
    balances: dict[str, int]  # account -> cents
    transfers_read: int  # rows the streaming query read from the transfers topic
    malformed: int  # of those, values that are not transfers
    batches: int  # micro-batches that read something
    parquet: Path


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

    def run(self, spark: SparkSession) -> PipelineRun:
        rows, batches = self.stream_balances(spark)
        parquet = self.directory / "balances.parquet"
        table = self.latest_balances(spark, parquet)
        return PipelineRun(table, rows, self.count_malformed(spark), batches, parquet)

    def stream_balances(self, spark: SparkSession) -> tuple[int, int]:
        """Run the streaming query to the end of what is committed now; (rows read,
        micro-batches that read something)."""
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
            F.sum("move.cents").alias("cents")
        )
        query = (
            totals.select(
                F.col("account").alias("key"), F.col("cents").cast("string").alias("value")
            )
            .writeStream.format("tidelog")
            .outputMode("complete")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("topic", self.balances)
            .option("checkpointLocation", str(self.directory / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(QUERY_TIMEOUT_S):
            query.stop()
            raise TimeoutError(f"the balances query did not finish in {QUERY_TIMEOUT_S} s")
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        return sum(int(p["numInputRows"]) for p in progress), len(progress)

    def count_malformed(self, spark: SparkSession) -> int:
        """Values of the transfers topic that are not transfers (a batch read)."""
        frame = self.reader(spark, self.transfers).load()
        return frame.where(~F.col("value").cast("string").rlike(TRANSFER)).count()

    def latest_balances(self, spark: SparkSession, parquet: Path) -> dict[str, int]:
        """Each account's last balance record, written to Parquet and returned."""
        records = self.reader(spark, self.balances).load()
        newest_first = Window.partitionBy("key").orderBy(F.col("offset").desc())
        table = (
            records.withColumn("rank", F.row_number().over(newest_first))
            .where("rank = 1")
            .select(
                F.col("key").cast("string").alias("account"),
                F.col("value").cast("string").cast("long").alias("cents"),
                F.col("partition"),
                F.col("offset"),
            )
        )
        table.write.mode("overwrite").parquet(str(parquet))
        return {row.account: row.cents for row in spark.read.parquet(str(parquet)).collect()}
