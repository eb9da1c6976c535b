"""The Spark source and sink beyond one process: a standalone master and two workers
(`tidelog spark cluster up`), executors in their own JVMs, a real 3-node tidelog cluster.

One driver process (tests/standalone_driver.py, on TIDELOG_SPARK_MASTER) runs three phases
on one Spark application: the source's batch read, a Trigger.AvailableNow stream and the
sink's write, all exact; then a slow stream from one topic to another, during which one
executor JVM is killed (SIGKILL) in the middle of a task. The query goes on (the task is
retried), the source side stays exact and holds committed records only (records above the
HWM, kept there by a paused follower, are never read), and the sink's duplicates, if any,
are counted: the sink is at least once. Last, `tidelog demo --spark-cluster DIR
--kill-executor` runs its pipeline on that same application (no driver or executor JVMs of
its own to start) and kills an executor mid-batch: the balances stay exact. `tidelog spark
cluster down` at the end ends exactly the PIDs it recorded.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tidelog.spark.session import SparkMasterError, master_of
from tidelog.spark.standalone import (
    MASTER_ENV,
    SparkCluster,
    executor_pids,
    has_exited,
    read_cluster,
    tidelog_root,
)
from tidelog.testing.live import LiveCluster, create_topic, free_base_port, poll, tidelog

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DRIVER = Path(__file__).with_name("standalone_driver.py")
UP_TIMEOUT_S = 240.0
RESULT_DEADLINE_S = 420.0  # a driver's phase, JVMs included, on a loaded 2-core machine
KILL_DEADLINE_S = 300.0
DEADLINE_S = 60.0
ROUNDTRIP_RECORDS = 300
SLOW_RECORDS = 1000
PENDING_RECORDS = 20
MAX_PER_TRIGGER = 200
TASK_S = 2.0
DONE_BEFORE_KILL = 2  # micro-batches finished before the kill
KILL_WINDOW_S = TASK_S * 0.4  # a task started this recently is still in its first hold
DEMO_RECORDS = 1000  # one micro-batch
DEMO_KILL = re.compile(
    r"^kill -9 executor (?P<pid>\d+) \(a child of worker-\d\) in micro-batch 0, \d+ tasks "
    r"running on 2 executors$"
)
RETRIED = re.compile(
    r"(?P<tasks>\d+) task attempts failed with it and ran again, "
    r"(?P<stages>\d+) stage attempts resubmitted"
)
DEMO_VERDICT = re.compile(
    rf"^pipeline verdict: OK — 100 balances from {DEMO_RECORDS} transfers read, "
    rf"{DEMO_RECORDS} acknowledged, every balance exact to the cent; "
    r"sink duplicates \(at-least-once\): (?P<duplicates>\d+)$"
)

Record = tuple[int, int, str | None, str]  # partition, offset, key, value


def produce(bootstrap: str, topic: str, values: list[str], *, acks: str = "all") -> list[Record]:
    """Produce `values` keyed k<i>; what was acknowledged (all of it, or fail)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5})
    acked: list[Record] = []

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        acked.append(
            (
                message.partition(),
                message.offset(),
                message.key().decode(),
                message.value().decode(),
            )
        )

    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), f"k{i}".encode(), on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0
    assert len(acked) == len(values)
    return sorted(acked)


def hwm_of(bootstrap: str, topic: str, partition: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hwm"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(high)
    finally:
        consumer.close()


def values_below_hwm(bootstrap: str, topic: str) -> list[str]:
    """Partition 0's values from offset 0 up to its HWM (a plain consumer)."""
    hwm = hwm_of(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []
    last = -1
    deadline = time.monotonic() + DEADLINE_S
    try:
        while last < hwm - 1:
            assert time.monotonic() < deadline, f"{topic}: not read up to {hwm}"
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    values.append(message.value().decode())
                    last = message.offset()
    finally:
        consumer.close()
    return values


def spark_cluster_command(
    *args: str, timeout: float = DEADLINE_S
) -> subprocess.CompletedProcess[str]:
    return tidelog("spark", "cluster", *args, timeout=timeout)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """`tidelog spark cluster up --workers 2`, and `down` at the end: every PID it recorded
    is gone after it."""
    directory = tmp_path_factory.mktemp("spark-standalone")
    up = spark_cluster_command(
        "up", "--dir", str(directory), "--workers", "2", timeout=UP_TIMEOUT_S
    )
    if up.returncode != 0:  # it may have started daemons before it failed: end them
        spark_cluster_command("down", "--dir", str(directory))
    assert up.returncode == 0, up.stdout + up.stderr
    record = read_cluster(directory)
    assert up.stdout.strip() == record.master_url
    yield record
    down = spark_cluster_command("down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert all(has_exited(daemon.pid) for daemon in record.daemons), down.stdout


@dataclass
class Job:
    """What the driver did, and what the test saw and did around it."""

    roundtrip: dict[str, Any]
    slow_copy: dict[str, Any]
    acked: list[Record]
    slow_acked: list[Record]
    pending: list[Record]
    slow_hwm: int
    killed: str  # the marker of the task attempt whose executor was killed
    markers: Path
    slow_out: list[str]
    driver: subprocess.Popen[bytes]  # still running the demo, its last phase
    work: Path


def result_of(driver: subprocess.Popen[bytes], work: Path, name: str) -> dict[str, Any]:
    """The driver's `work/NAME.json`, once written; fails with its log if it exits first."""

    def written() -> dict[str, Any] | None:
        path = work / f"{name}.json"
        if path.exists():
            loaded: dict[str, Any] = json.loads(path.read_text())
            return loaded
        log = (work / "driver.log").read_text(errors="replace")[-4000:]
        assert driver.poll() is None, f"the driver exited ({driver.returncode}):\n{log}"
        return None

    return poll(written, f"the driver's {name}", deadline_s=RESULT_DEADLINE_S, interval_s=0.2)


def kill_mid_task(cluster: SparkCluster, markers: Path, driver: subprocess.Popen[bytes]) -> str:
    """SIGKILL the executor JVM of a task attempt that started less than KILL_WINDOW_S ago,
    once DONE_BEFORE_KILL attempts have finished; the attempt's marker name. Only a child of
    a worker this test's cluster started is killed."""

    def victim() -> str | None:
        assert driver.poll() is None, "the driver exited before a task could be killed"
        done = {path.stem for path in markers.glob("*.done")}
        if len(done) < DONE_BEFORE_KILL:
            return None
        executors = {pid for worker in cluster.workers for pid in executor_pids(worker)}
        for path in markers.glob("*.start"):
            pid = int(path.stem.split("-")[0])
            recent = time.time() - path.stat().st_mtime < KILL_WINDOW_S
            if path.stem not in done and recent and pid in executors:
                os.kill(pid, signal.SIGKILL)
                return path.stem
        return None

    return poll(victim, "a task in flight to kill", deadline_s=KILL_DEADLINE_S, interval_s=0.02)


def follower_leading_nothing(cluster: LiveCluster, topics: list[str]) -> int:
    leaders = {cluster.leader_of(topic) for topic in topics}
    return next(node for node in cluster.nodes if node not in leaders)


@pytest.fixture(scope="module")
def job(
    cluster: LiveCluster, standalone: SparkCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Job]:
    bootstrap, work = cluster.bootstrap, tmp_path_factory.mktemp("spark-job")
    create_topic(bootstrap, "sa-in", partitions=3)
    create_topic(bootstrap, "sa-out", partitions=2)
    create_topic(bootstrap, "sa-slow-in", partitions=1, configs={"min.insync.replicas": "3"})
    create_topic(bootstrap, "sa-slow-out", partitions=1)
    acked = produce(bootstrap, "sa-in", [f"v{i}" for i in range(ROUNDTRIP_RECORDS)])
    slow_acked = produce(bootstrap, "sa-slow-in", [f"s{i:05d}" for i in range(SLOW_RECORDS)])
    command = [
        sys.executable, str(DRIVER), "--bootstrap", bootstrap, "--work", str(work),
        "--topic", "sa-in", "--sink-topic", "sa-out",
        "--slow-topic", "sa-slow-in", "--slow-sink-topic", "sa-slow-out",
        "--task-s", str(TASK_S), "--max-per-trigger", str(MAX_PER_TRIGGER),
        "--demo-dir", str(work / "demo"), "--demo-base-port", str(free_base_port()),
        "--demo-records", str(DEMO_RECORDS), "--spark-cluster", standalone.directory,
    ]  # fmt: skip
    environment = {**os.environ, MASTER_ENV: standalone.master_url}
    with (work / "driver.log").open("wb") as log:
        driver = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
    try:
        roundtrip = result_of(driver, work, "roundtrip")
        # Records above the HWM: a follower paused, min.insync.replicas=3, acks=1 writes.
        paused = follower_leading_nothing(cluster, ["sa-slow-in", "sa-slow-out"])
        slow_hwm = hwm_of(bootstrap, "sa-slow-in")
        pause = tidelog(
            "cluster", "pause", "--node", str(paused), "--data-dir", str(cluster.directory)
        )
        assert pause.returncode == 0, pause.stderr
        try:
            pending = produce(bootstrap, "sa-slow-in", ["pending"] * PENDING_RECORDS, acks="1")
            assert hwm_of(bootstrap, "sa-slow-in") == slow_hwm
            (work / "go").touch()
            killed = kill_mid_task(standalone, work / "markers", driver)
            slow_copy = result_of(driver, work, "slow-copy")
        finally:
            resume = tidelog(
                "cluster", "resume", "--node", str(paused), "--data-dir", str(cluster.directory)
            )
            assert resume.returncode == 0, resume.stderr
        yield Job(
            roundtrip=roundtrip,
            slow_copy=slow_copy,
            acked=acked,
            slow_acked=slow_acked,
            pending=pending,
            slow_hwm=slow_hwm,
            killed=killed,
            markers=work / "markers",
            slow_out=values_below_hwm(bootstrap, "sa-slow-out"),
            driver=driver,
            work=work,
        )
    finally:
        if driver.poll() is None:  # SIGTERM first: a demo under way stops its brokers
            driver.terminate()
            try:
                driver.wait(DEADLINE_S)
            except subprocess.TimeoutExpired:
                driver.kill()
                driver.wait(DEADLINE_S)


def test_the_cluster_is_up_with_its_environment_recorded(standalone: SparkCluster) -> None:
    status = spark_cluster_command("status", "--dir", standalone.directory, "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    state = json.loads(status.stdout)
    assert state["healthy"]
    assert [d["role"] for d in state["daemons"]] == ["master", "worker-1", "worker-2"]
    assert all(d["up"] and d["alive"] for d in state["daemons"])
    environment = standalone.environment
    assert environment["PYSPARK_PYTHON"] == sys.executable
    assert environment["PYTHONPATH"].split(os.pathsep)[0] == str(tidelog_root())
    assert environment["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert standalone.master_url.startswith("spark://127.0.0.1:")


def test_source_and_sink_on_the_standalone_cluster(job: Job) -> None:
    """The batch read and the stream hold exactly the acknowledged records; what the sink
    wrote reads back the same."""
    expected = [list(record) for record in job.acked]
    assert job.roundtrip["batch"] == expected
    assert job.roundtrip["stream"] == expected
    assert job.roundtrip["stream_batches"] >= ROUNDTRIP_RECORDS // 100  # maxOffsetsPerTrigger
    assert job.roundtrip["sink_back"] == sorted([key, value] for _, _, key, value in job.acked)


def test_an_executor_killed_mid_task_the_query_goes_on_exactly(job: Job) -> None:
    pid, stage, partition, attempt = job.killed.split("-")
    assert has_exited(int(pid))
    assert not (job.markers / f"{job.killed}.done").exists()  # killed in the middle
    retried = [
        path.stem
        for path in job.markers.glob(f"*-{stage}-{partition}-a*.done")
        if int(path.stem.rpartition("-a")[2]) > int(attempt.removeprefix("a"))
    ]
    assert retried, "the killed task was not retried to its end"

    assert min(offset for _, offset, _, _ in job.pending) >= job.slow_hwm
    # The source side is exact: committed records only, each read once.
    assert job.slow_copy["input_rows"] == SLOW_RECORDS
    assert job.slow_copy["end_offset"] == {"sa-slow-in": {"0": job.slow_hwm}}
    assert job.slow_copy["batches"] >= SLOW_RECORDS // MAX_PER_TRIGGER
    # The sink is at least once: every committed record, none above the HWM, and the rows
    # the killed attempt had written before it died, at most, again.
    counts = collections.Counter(job.slow_out)
    assert set(counts) == {value for _, _, _, value in job.slow_acked}
    duplicates = len(job.slow_out) - len(counts)
    assert duplicates <= MAX_PER_TRIGGER
    print(f"sink duplicates after the executor was killed: {duplicates}")


def test_the_executors_temporary_files_stay_in_the_cluster_directory(
    standalone: SparkCluster, job: Job
) -> None:
    """The native libraries the executors extract (lz4's, snappy's) go to the workers'
    `tmp/`, not to /tmp, where the killed executor (it ran no exit hook) would leave its."""
    del job  # its executors, the killed one among them, have run
    extracted = [
        path.name
        for worker in standalone.workers
        for path in (Path(standalone.directory) / worker.role / "tmp").glob("*.so")
    ]
    assert any(name.startswith("liblz4-java-") for name in extracted), extracted


def test_the_demo_on_the_cluster_with_an_executor_killed(
    standalone: SparkCluster, job: Job
) -> None:
    """`tidelog demo --spark-cluster DIR --kill-executor` (the driver's last phase, on its
    application): the pipeline runs on the cluster's executors, one of them is killed with
    SIGKILL while every executor runs a task, and the query goes on: each committed
    transfer read once (none other), every balance exact to the cent, the sink's duplicates
    counted in the verdict."""
    status = result_of(job.driver, job.work, "demo")["status"]
    output = (job.work / "demo.out").read_text()
    log = (job.work / "driver.log").read_text(errors="replace")[-4000:]
    assert status == 0, output + log
    assert job.driver.wait(DEADLINE_S) == 0, log
    lines = output.splitlines()
    assert f"starting Spark ({standalone.master_url}); its JVM takes a while to start" in lines
    kills = [m for line in lines if (m := DEMO_KILL.match(line))]
    assert len(kills) == 1, output
    pid = int(kills[0]["pid"])
    assert has_exited(pid)
    went_on = f"executor {pid} was killed; the query went on: "
    retried = [line.removeprefix(went_on) for line in lines if line.startswith(went_on)]
    assert retried, output
    # Work lost with it ran again: task attempts, or whole stage attempts (Spark's status
    # tracker shows a stage's latest attempt only, so a resubmitted stage may hide the
    # task failures of the attempt it replaced).
    counts = RETRIED.fullmatch(retried[0])
    assert counts is not None, output
    assert int(counts["tasks"]) + int(counts["stages"]) >= 1, output
    verdicts = [m for line in lines if (m := DEMO_VERDICT.match(line))]
    assert len(verdicts) == 1, output
    print(f"sink duplicates after the executor was killed: {verdicts[0]['duplicates']}")


# Without a JVM


def test_the_master_is_local_unless_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MASTER_ENV, raising=False)
    assert master_of(None) == "local[2]"
    assert master_of(None, cores=1) == "local[1]"
    monkeypatch.setenv(MASTER_ENV, "spark://127.0.0.1:7077")
    assert master_of(None) == "spark://127.0.0.1:7077"
    assert master_of("local[3]") == "local[3]"  # named beats the environment
    for wrong in ("yarn", "spark://127.0.0.1", "spark://:7077", "mesos://127.0.0.1:5050"):
        with pytest.raises(SparkMasterError, match="give local"):
            master_of(wrong)


def test_cluster_commands_without_a_cluster(tmp_path: Path) -> None:
    for command in ("status", "down"):
        result = spark_cluster_command(command, "--dir", str(tmp_path))
        assert result.returncode == 1
        assert "no Spark cluster in" in result.stderr
    refused = spark_cluster_command("up", "--dir", str(tmp_path), "--workers", "0")
    assert refused.returncode == 2  # click's usage error, before anything starts
    assert not (tmp_path / "spark-cluster.json").exists()


def test_verify_replicas_refuses_a_master_it_cannot_use(cluster: LiveCluster) -> None:
    create_topic(cluster.bootstrap, "sa-verify", partitions=1)
    result = tidelog(
        "verify-replicas", "sa-verify", "--bootstrap-server", cluster.bootstrap,
        "--spark-master", "yarn",
    )  # fmt: skip
    assert result.returncode == 1
    assert "give local[N] or spark://HOST:PORT" in result.stderr
