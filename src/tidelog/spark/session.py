"""A local Spark session for tidelog's own jobs (the demo, verify-replicas, benchmarks, tests).

Rules of this file: the Python workers run the interpreter that runs this code (so they see
tidelog and pyarrow), Spark's UI is off, and the session's time zone is UTC, so timestamps
print as the brokers stamp them. `format("tidelog")` is registered on the session.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Final

from pyspark.sql import SparkSession

from tidelog.errors import TidelogError
from tidelog.spark import register

SHUFFLE_PARTITIONS: Final = 4
LOG_LEVEL: Final = "ERROR"
LOOPBACK: Final = "127.0.0.1"
LOG_CONFIG: Final = Path(__file__).with_name("log4j2.properties")
"""Spark's log4j settings: errors only (Spark's default logs every start-up step)."""


class NoJava(TidelogError):
    """PySpark needs a Java runtime (17) and none was found."""


def local_session(app_name: str, *, cores: int = 2) -> SparkSession:
    """A `local[cores]` session with `format("tidelog")` registered; NoJava without Java."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise NoJava("PySpark needs Java 17: apt-get install openjdk-17-jre-headless")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)  # the driver listens on loopback only
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG_CONFIG}")
        .config("spark.driver.host", LOOPBACK)
        .config("spark.driver.bindAddress", LOOPBACK)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(LOG_LEVEL)
    register(spark)
    return spark
