"""tidelog on Apache Spark: the `tidelog` source and sink (PySpark's Python data source API).

    from tidelog.spark import register
    register(spark)
    df = (spark.read.format("tidelog")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders")
          .load())

The options and the schema are those of Spark's Kafka source and sink (see
`tidelog.spark.options`), so an existing job ports by changing the format name. It needs the
`spark` extra (pyspark, pyarrow, pandas) and Java 17.

The session's Python workers must import tidelog: `register` points them at this interpreter
on a local master when the one they would run cannot, and refuses (WorkerPythonError, one
line saying what to set) on another master (`tidelog.spark.workers`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make `format("tidelog")` known to `spark` (batch and streaming, read and write), its
    workers running a Python that imports tidelog; WorkerPythonError when none can be
    chosen here."""
    from tidelog.spark.source import TidelogDataSource  # noqa: PLC0415 - pyspark is heavy
    from tidelog.spark.workers import point_workers_at_tidelog  # noqa: PLC0415

    # The data source keeps the interpreter the session has when it is registered.
    point_workers_at_tidelog(spark)
    spark.dataSource.register(TidelogDataSource)
