"""`register(spark)` on a session the user builds: its Python workers import tidelog.

The README's snippet, run as a script by the venv's interpreter with the venv not activated:
`python3` on PATH is another Python, without tidelog, and no PYSPARK_PYTHON is set, so PySpark
would start the source's and sink's workers with it. On a local master `register` points
them at the driver's interpreter: the sink writes, the source reads (batch and a stream).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.spark.workers import is_this_python, runs_tidelog
from tidelog.testing.live import LiveCluster, tidelog

pytestmark = pytest.mark.slow

SYSTEM_PYTHON = Path("/usr/bin/python3")
SCRIPT_TIMEOUT_S = 240

JOB = """
import json, sys
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from tidelog.spark import register

bootstrap, checkpoint = sys.argv[1], sys.argv[2]
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
register(spark)

def read(topic):
    frame = (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    return sorted(row.value.decode() for row in frame.collect())

rows = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(20)], "key string, value string")
rows.write.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option(
    "topic", "plain-in"
).mode("append").save()
query = (
    spark.readStream.format("tidelog")
    .option("kafka.bootstrap.servers", bootstrap)
    .option("subscribe", "plain-in")
    .option("startingOffsets", "earliest")
    .load()
    .selectExpr("key", "value", "'plain-out' AS topic")
    .writeStream.format("tidelog")
    .option("kafka.bootstrap.servers", bootstrap)
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start()
)
finished = query.awaitTermination(180)
worker_python = spark.range(1).select(udf(lambda _: sys.executable)("id")).first()[0]
print(json.dumps({
    "batch": read("plain-in"),
    "stream_finished": finished,
    "stream": read("plain-out"),
    "worker_python": worker_python,
}))
spark.stop()
"""


@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    running = LiveCluster(tmp_path_factory.mktemp("register"), nodes=1)
    yield running
    running.down()


def path_without_tidelog(directory: Path) -> str:
    """A PATH whose python3 is the system's (no tidelog), then the system's directories."""
    directory.mkdir()
    (directory / "python3").symlink_to(SYSTEM_PYTHON)
    return os.pathsep.join([str(directory), "/usr/bin", "/bin"])


def test_a_plain_sessions_workers_run_this_python(
    small_cluster: LiveCluster, tmp_path: Path
) -> None:
    bootstrap = small_cluster.bootstrap
    for topic in ("plain-in", "plain-out"):
        made = tidelog(
            "topics", "create", topic, "--partitions", "2", "--bootstrap-server", bootstrap
        )
        assert made.returncode == 0, made.stderr
    script = tmp_path / "job.py"
    script.write_text(JOB)
    path = path_without_tidelog(tmp_path / "bin")
    assert not runs_tidelog(str(tmp_path / "bin" / "python3"))  # the trap is set
    environment = {"PATH": path, "HOME": os.environ.get("HOME", str(tmp_path))}
    if "JAVA_HOME" in os.environ:
        environment["JAVA_HOME"] = os.environ["JAVA_HOME"]
    done = subprocess.run(
        [sys.executable, str(script), bootstrap, str(tmp_path / "checkpoint")],
        env=environment,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expected = sorted(f"v{i}" for i in range(20))
    assert result["batch"] == expected
    assert result["stream_finished"] is True
    assert result["stream"] == expected
    assert result["worker_python"] == sys.executable  # the session's UDFs run it too


def test_an_interpreter_is_asked_whether_it_runs_tidelog(tmp_path: Path) -> None:
    assert is_this_python(sys.executable)
    assert runs_tidelog(sys.executable)
    assert not is_this_python(str(SYSTEM_PYTHON))
    assert not runs_tidelog(str(SYSTEM_PYTHON))
    assert not runs_tidelog(str(tmp_path / "no-such-python"))
