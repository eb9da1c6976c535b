"""`tidelog cluster`: cluster.json, the PID-safety check, errors, and every subcommand.

The subcommands run against `tidelog.testing.fake_broker` (it binds the same addresses
and serves the same /status schema as the real broker). Tests signal only processes they
started, by PID; a fixture stops whatever a test's cluster.json still records.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tidelog.cli import main
from tidelog.tools.cluster import (
    ClusterRecord,
    is_our_broker,
    plan_cluster,
    ports_in_use,
    read_cluster,
    stop_nodes,
    write_cluster,
)

FAKE = "tidelog.testing.fake_broker"
DEADLINE_S = 10.0
POLL_S = 0.05
PORT_TRIES = 20


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["cluster", *args])
    return result.exit_code, result.stdout, result.stderr


def eventually(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(POLL_S)


def test_plan_write_and_read_cluster_json(tmp_path: Path) -> None:
    record = plan_cluster(tmp_path, nodes=3, base_port=9092, module="tidelog")
    assert record.bootstrap == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    third = record.node(3)
    assert (third.kafka, third.peer, third.admin) == (
        "127.0.0.1:9094",
        "127.0.0.1:9194",
        "127.0.0.1:9294",
    )
    assert third.data_dir == str(tmp_path.resolve() / "node-3")
    write_cluster(tmp_path, record.with_pid(2, 1234))
    data = json.loads((tmp_path / "cluster.json").read_text())
    assert data["bootstrap"] == record.bootstrap
    assert [node["id"] for node in data["nodes"]] == [1, 2, 3]
    assert data["nodes"][1] == {
        "id": 2,
        "pid": 1234,
        "kafka": "127.0.0.1:9093",
        "peer": "127.0.0.1:9193",
        "admin": "127.0.0.1:9293",
        "data_dir": str(tmp_path.resolve() / "node-2"),
    }
    assert read_cluster(tmp_path) == record.with_pid(2, 1234)


@pytest.mark.parametrize(
    "args",
    [
        ["down"],
        ["status"],
        ["status", "--json"],
        ["kill", "--node", "1"],
        ["pause", "--node", "1"],
        ["resume", "--node", "1"],
        ["restart", "--node", "1"],
    ],
)
def test_a_directory_without_a_cluster(tmp_path: Path, args: list[str]) -> None:
    code, _, stderr = cli(*args, "--data-dir", str(tmp_path))
    assert code == 1
    assert stderr == f"error: no cluster in {tmp_path} (run `tidelog cluster up`)\n"


def test_bad_arguments_and_files(tmp_path: Path) -> None:
    write_cluster(tmp_path, plan_cluster(tmp_path, nodes=3, base_port=9092, module="tidelog"))
    code, _, stderr = cli("kill", "--data-dir", str(tmp_path), "--node", "7")
    assert (code, stderr) == (1, "error: --node 7: no such node (valid ids: 1, 2, 3)\n")
    code, _, stderr = cli("up", "--data-dir", str(tmp_path), "--nodes", "5")
    assert (code, stderr) == (1, f"error: --nodes 5, but {tmp_path} holds a cluster of 3\n")
    code, _, stderr = cli("up", "--data-dir", str(tmp_path / "new"))
    assert code == 1
    assert stderr == f"error: --nodes is required: {tmp_path / 'new'} holds no cluster yet\n"
    code, _, stderr = cli("up", "--data-dir", str(tmp_path / "new"), "--nodes", "0")
    assert (code, stderr) == (1, "error: --nodes: 0 is out of range (1-100)\n")
    code, _, stderr = cli(
        "up", "--data-dir", str(tmp_path / "new"), "--nodes", "3", "--base-port", "65400"
    )
    assert (code, stderr) == (1, "error: --base-port: 65400 leaves no room for 3 nodes\n")
    (tmp_path / "cluster.json").write_text("{not json")
    code, _, stderr = cli("status", "--data-dir", str(tmp_path))
    assert code == 1
    assert stderr.startswith(f"error: {tmp_path / 'cluster.json'} is not a cluster file")


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process that is not a tidelog broker; this test ends it, by its PID."""
    process = subprocess.Popen(["sleep", "30"])
    yield process
    os.kill(process.pid, signal.SIGKILL)
    process.wait(DEADLINE_S)


def test_a_pid_that_is_not_our_broker_is_never_signalled(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    record = plan_cluster(tmp_path, nodes=2, base_port=9092, module="tidelog")
    write_cluster(tmp_path, record.with_pid(1, sleeper.pid))
    code, stdout, _ = cli("down", "--data-dir", str(tmp_path))
    assert code == 0
    assert stdout == "node 1: was not running\nnode 2: was not running\n"
    for command in ("kill", "pause", "resume"):
        code, _, stderr = cli(command, "--data-dir", str(tmp_path), "--node", "1")
        assert (code, stderr) == (1, "error: node 1 is not running\n")
    assert sleeper.poll() is None
    status = json.loads(cli("status", "--data-dir", str(tmp_path), "--json")[1])
    assert [node["state"] for node in status["nodes"]] == ["down", "down"]


def test_the_cmdline_must_name_a_broker_of_that_data_dir(tmp_path: Path) -> None:
    """A tidelog broker of another directory (another cluster) is not ours either."""
    record = plan_cluster(tmp_path, nodes=1, base_port=9092, module="tidelog")
    node = record.node(1)
    script = "import time; time.sleep(30)"
    lookalike = [sys.executable, "-c", script, "tidelog", "broker", f"--data-dir={node.data_dir}"]
    other = [*lookalike[:-1], "--data-dir=/somewhere/else"]
    with subprocess.Popen(lookalike) as ours, subprocess.Popen(other) as theirs:
        try:
            assert is_our_broker(record.with_pid(1, ours.pid).node(1))
            assert not is_our_broker(record.with_pid(1, theirs.pid).node(1))
            assert stop_nodes([record.with_pid(1, ours.pid).node(1)], timeout_s=DEADLINE_S) == [1]
            # stop_nodes may have collected its exit status (it is this process's child).
            assert ours.wait(DEADLINE_S) in (0, -signal.SIGTERM)
            assert not is_our_broker(record.with_pid(1, ours.pid).node(1))
            assert theirs.poll() is None
        finally:
            for process in (ours, theirs):
                if process.poll() is None:
                    os.kill(process.pid, signal.SIGKILL)


def free_base_port(directory: Path, nodes: int) -> int:
    """A base port whose Kafka, peer and admin ports are all free now."""
    rng = random.Random()
    for _ in range(PORT_TRIES):
        base = rng.randrange(20_000, 40_000)
        record = plan_cluster(directory, nodes=nodes, base_port=base, module=FAKE)
        if not ports_in_use(list(record.nodes)):
            return base
    raise AssertionError("no free block of ports")


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    """A cluster directory; afterwards every broker it still records is stopped."""
    yield tmp_path
    if (tmp_path / "cluster.json").exists():
        stop_nodes(list(read_cluster(tmp_path).nodes), timeout_s=DEADLINE_S)


def status_of(directory: Path) -> list[dict[str, Any]]:
    code, stdout, _ = cli("status", "--data-dir", str(directory), "--json")
    assert code == 0
    nodes: list[dict[str, Any]] = json.loads(stdout)["nodes"]
    return nodes


def states(directory: Path) -> list[str]:
    return [node["state"] for node in status_of(directory)]


def up(directory: Path, *extra: str) -> tuple[int, str, str]:
    return cli("up", "--data-dir", str(directory), "--broker-module", FAKE, *extra)


def test_up_status_pause_resume_kill_restart_down(cluster_dir: Path) -> None:
    base = free_base_port(cluster_dir, 3)
    code, stdout, stderr = up(cluster_dir, "--nodes", "3", "--base-port", str(base))
    assert code == 0, stderr
    assert stdout == f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}\n"
    record = read_cluster(cluster_dir)
    assert all(is_our_broker(node) for node in record.nodes)
    first = status_of(cluster_dir)
    assert [(n["state"], n["ready"], n["leads"]) for n in first] == [
        ("up", True, ["fake-0"]),
        ("up", True, []),
        ("up", True, []),
    ]
    code, table, _ = cli("status", "--data-dir", str(cluster_dir))
    assert code == 0
    assert "fake-0" in table
    assert cli("pause", "--data-dir", str(cluster_dir), "--node", "2")[0] == 0
    eventually(lambda: states(cluster_dir) == ["up", "paused", "up"])
    assert cli("resume", "--data-dir", str(cluster_dir), "--node", "2")[0] == 0
    eventually(lambda: states(cluster_dir) == ["up", "up", "up"])
    assert cli("kill", "--data-dir", str(cluster_dir), "--node", "3")[0] == 0
    eventually(lambda: states(cluster_dir) == ["up", "up", "down"])
    check_up_again_and_restart(cluster_dir, record)
    code, stdout, _ = cli("down", "--data-dir", str(cluster_dir))
    assert (code, stdout) == (0, "node 1: stopped\nnode 2: stopped\nnode 3: stopped\n")
    assert states(cluster_dir) == ["down", "down", "down"]
    log = (Path(record.node(1).data_dir) / "broker.log").read_text()
    assert log.count("--- tidelog cluster: starting node 1:") == 2


def check_up_again_and_restart(directory: Path, before: ClusterRecord) -> None:
    """`up` restarts only the stopped node 3; `restart` gives node 1 a new pid."""
    code, stdout, _ = up(directory)
    assert (code, stdout) == (0, before.bootstrap + "\n")
    after = read_cluster(directory)
    assert [n.pid == m.pid for n, m in zip(before.nodes, after.nodes, strict=True)] == [
        True,
        True,
        False,
    ]
    assert after.node(3).kafka == before.node(3).kafka
    code, stdout, _ = cli("restart", "--data-dir", str(directory), "--node", "1")
    restarted = read_cluster(directory).node(1)
    assert (code, stdout) == (0, f"node 1: restarted (pid {restarted.pid})\n")
    assert restarted.pid != before.node(1).pid
    assert states(directory) == ["up", "up", "up"]


def test_a_node_that_exits_at_startup_is_reported_with_its_log(cluster_dir: Path) -> None:
    base = free_base_port(cluster_dir, 1)
    code, _, stderr = cli(
        "up",
        "--data-dir",
        str(cluster_dir),
        "--nodes",
        "1",
        "--base-port",
        str(base),
        "--broker-module",
        "tidelog.testing.no_such_module",
    )
    assert code == 1
    assert stderr.startswith("error: node 1 exited during startup; ")
    assert "No module named tidelog.testing.no_such_module" in stderr


def test_up_refuses_ports_in_use(cluster_dir: Path) -> None:
    base = free_base_port(cluster_dir, 2)
    with socket.create_server(("127.0.0.1", base + 201)):
        code, _, stderr = up(cluster_dir, "--nodes", "2", "--base-port", str(base))
    assert code == 1
    assert stderr == f"error: address(es) already in use: 127.0.0.1:{base + 201}\n"
