"""Which Python the Spark session's workers run, so that they can import tidelog.

PySpark runs the source's and sink's code in Python worker processes, started with the
session's `SparkContext.pythonExec`: $PYSPARK_PYTHON when the session was created, else
`python3` from PATH (spark.pyspark.python counts only when spark-submit starts the driver,
which then sets PYSPARK_PYTHON). `spark.dataSource.register` records that interpreter with
the data source, and every worker of the source and sink (planning on the driver, tasks on
the executors) is started with it. A script run as `.venv/bin/python job.py`, the venv not
activated, therefore gets workers of the system's python3, without tidelog.

Rules of this file:
- The workers' interpreter is kept when it is this one (sys.executable) or when it runs
  this Python version and finds tidelog (asked in a subprocess, at most PROBE_TIMEOUT_S).
- Otherwise, on a local master (`local`, `local[N]`, `local-cluster[...]`: every worker is on
  this machine) the session's workers are pointed at sys.executable, for the data source
  and for the session's other Python code (UDFs) alike, and it is logged.
- On any other master the executors may be other machines: WorkerPythonError, one line
  naming what to set.
- A Spark Connect session is left alone: its server decides.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Final

from tidelog.errors import TidelogError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("tidelog.spark")

PROBE_TIMEOUT_S: Final = 30.0
"""How long the interpreter asked may take to answer (a loaded machine starts Python slowly)."""
LOCAL_PREFIX: Final = "local"
PROBE: Final = (
    "import importlib.util, sys; "
    "sys.exit(sys.version_info[:2] != ({major}, {minor}) "
    "or importlib.util.find_spec('tidelog') is None)"
)


class WorkerPythonError(TidelogError):
    """The session's Python workers run an interpreter that cannot import tidelog, and
    register cannot choose another (the executors are not on this machine)."""


def point_workers_at_tidelog(spark: SparkSession) -> None:
    """Make the session's Python workers run an interpreter with tidelog (module rules);
    WorkerPythonError when that cannot be done here. Call before registering."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 - pyspark is heavy

    if not isinstance(spark, SparkSession):  # Spark Connect
        return
    context = spark.sparkContext
    configured = context.pythonExec
    if is_this_python(configured) or runs_tidelog(configured):
        return
    if (context.master or "").startswith(LOCAL_PREFIX) and sys.executable:
        log.info(
            "tidelog: %r cannot import tidelog; this session's Python workers run %s",
            configured,
            sys.executable,
        )
        context.pythonExec = sys.executable
        return
    raise WorkerPythonError(
        f"the Python workers of this Spark session run {configured!r}, which cannot import "
        f"tidelog: set PYSPARK_PYTHON (with spark-submit: spark.pyspark.python) to a Python "
        f"with tidelog installed on every executor, such as {sys.executable}, before the "
        "session is created"
    )


def is_this_python(command: str) -> bool:
    found = shutil.which(command)
    return (
        bool(sys.executable)
        and found is not None
        and (os.path.abspath(found) == os.path.abspath(sys.executable))
    )


def runs_tidelog(command: str) -> bool:
    """Whether `command` is a Python of this version that finds tidelog."""
    probe = PROBE.format(major=sys.version_info[0], minor=sys.version_info[1])
    try:
        done = subprocess.run(
            [command, "-c", probe],
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
