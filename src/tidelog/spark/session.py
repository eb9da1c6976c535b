"""The Spark session of tidelog's own jobs (the demo, verify-replicas, benchmarks, tests):
`local[N]` in this process, or a standalone cluster's master (`spark://HOST:PORT`, such as
`tidelog spark cluster up` starts; `TIDELOG_SPARK_MASTER` names it when the caller does not).

Rules of this file: the Python workers run the interpreter that runs this code (so they see
tidelog and pyarrow), Spark's UI is off, and the session's time zone is UTC, so timestamps
print as the brokers stamp them. `format("tidelog")` is registered on the session.

On a standalone master the executors are other JVMs, whose Python workers must import the
same tidelog: `register` ships the data source class by reference (cloudpickle pickles a
class of an importable module by its name), so the session sets spark.pyspark.python to this
interpreter and spark.executorEnv.PYTHONPATH to the directory this tidelog is imported from
(on this machine: executors on other machines need tidelog installed at the same paths).
Executors are small (EXECUTOR_MEMORY, one core each) and the job takes at most `cores` cores.
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
from tidelog.spark.standalone import MASTER_ENV, tidelog_root

SHUFFLE_PARTITIONS: Final = 4
LOG_LEVEL: Final = "ERROR"
LOOPBACK: Final = "127.0.0.1"
LOG_CONFIG: Final = Path(__file__).with_name("log4j2.properties")
"""Spark's log4j settings: errors only (Spark's default logs every start-up step)."""


STANDALONE_PREFIX: Final = "spark://"
EXECUTOR_MEMORY: Final = "512m"
EXECUTOR_CORES: Final = 1


class NoJava(TidelogError):
    """PySpark needs a Java runtime (17) and none was found."""


class SparkMasterError(TidelogError):
    """The master named is not one tidelog's jobs run on, or another is already running."""


def master_of(master: str | None, *, cores: int = 2) -> str:
    """`master`, else TIDELOG_SPARK_MASTER, else `local[cores]`; SparkMasterError for
    anything but local[...] and spark://HOST:PORT."""
    chosen = master or os.environ.get(MASTER_ENV) or f"local[{cores}]"
    if chosen.startswith("local[") or chosen == "local":
        return chosen
    host, _, port = chosen.removeprefix(STANDALONE_PREFIX).rpartition(":")
    if not chosen.startswith(STANDALONE_PREFIX) or not host or not port.isdigit():
        raise SparkMasterError(
            f"Spark master {chosen!r}: give local[N] or spark://HOST:PORT "
            "(`tidelog spark cluster up` prints one)"
        )
    return chosen


def local_session(app_name: str, *, cores: int = 2) -> SparkSession:
    """A `local[cores]` session with `format("tidelog")` registered; NoJava without Java."""
    return spark_session(app_name, f"local[{cores}]", cores=cores)


def spark_session(app_name: str, master: str | None = None, *, cores: int = 2) -> SparkSession:
    """A session on `master` (None: TIDELOG_SPARK_MASTER, else local[cores]) with
    `format("tidelog")` registered. On spark://, executors of EXECUTOR_MEMORY and one core,
    at most `cores` of them. NoJava without Java; SparkMasterError for a bad master, or when
    this process already runs a session on another one (Spark allows one per process)."""
    master = master_of(master, cores=cores)
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise NoJava("PySpark needs Java 17: apt-get install openjdk-17-jre-headless")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)  # the driver listens on loopback only
    builder = SparkSession.builder.master(master)
    if master.startswith(STANDALONE_PREFIX):
        builder = standalone_settings(builder, cores=cores)
    spark = (
        builder.appName(app_name)
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
    running = spark.sparkContext.master
    if running != master:
        raise SparkMasterError(f"this process already runs a Spark session on {running}")
    spark.sparkContext.setLogLevel(LOG_LEVEL)
    register(spark)
    return spark


def standalone_settings(builder: SparkSession.Builder, *, cores: int) -> SparkSession.Builder:
    """Small executors that run this interpreter and import this tidelog (module rules)."""
    root = str(tidelog_root())
    return (
        builder.config("spark.executor.memory", EXECUTOR_MEMORY)
        .config("spark.executor.cores", str(EXECUTOR_CORES))
        .config("spark.cores.max", str(cores))
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executorEnv.PYTHONPATH", root)
    )
