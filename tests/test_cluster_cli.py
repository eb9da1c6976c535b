"""`tidelog cluster`: cluster.json, the PID-safety check, errors, and every subcommand.

The subcommands run real brokers on 127.0.0.1: one 3-node cluster for the whole module,
started by `cluster up` and stopped by `cluster down` in its fixture. Each test that
changes it (pause, kill, restart, down) leaves every node up again. Tests signal only
processes they started, by PID. What a Kafka client sees across a killed leader is
tests/test_failover.py's; here, what the commands do and report.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tidelog.cli import main
from tidelog.server.groups import OFFSETS_TOPIC
from tidelog.testing.live import create_topic, eventually, free_base_port
from tidelog.tools.cluster import (
    broker_argv,
    is_our_broker,
    plan_cluster,
    read_cluster,
    stop_nodes,
    write_cluster,
)

DEADLINE_S = 30.0
POLL_S = 0.05
TOPIC = "events"


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["cluster", *args])
    return result.exit_code, result.stdout, result.stderr


# cluster.json and errors: no broker needed


def test_plan_write_and_read_cluster_json(tmp_path: Path) -> None:
    record = plan_cluster(tmp_path, nodes=3, base_port=9092)
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
        "ssl": "",
        "sasl": "",
        "join": False,
    }
    assert (data["secure"], data["log_format"], data["metrics"]) == (False, "text", True)
    assert read_cluster(tmp_path) == record.with_pid(2, 1234)
    secure = plan_cluster(tmp_path, nodes=3, base_port=9092, secure=True).node(3)
    assert (secure.ssl, secure.sasl) == ("127.0.0.1:9394", "127.0.0.1:9494")
    assert secure.listeners() == [
        "127.0.0.1:9094",
        "SSL://127.0.0.1:9394",
        "SASL_SSL://127.0.0.1:9494",
    ]


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


def test_the_directory_defaults_as_the_client_commands_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --data-dir: $TIDELOG_DATA_DIR, else ./data (here: neither holds a cluster)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TIDELOG_DATA_DIR", raising=False)
    code, _, stderr = cli("status")
    assert (code, stderr) == (1, "error: no cluster in data (run `tidelog cluster up`)\n")
    named = tmp_path / "elsewhere"
    result = CliRunner(env={"TIDELOG_DATA_DIR": str(named)}).invoke(
        main, ["cluster", "kill", "--node", "1"]
    )
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: no cluster in {named} (run `tidelog cluster up`)\n",
    )


def test_bad_arguments_and_files(tmp_path: Path) -> None:
    write_cluster(tmp_path, plan_cluster(tmp_path, nodes=3, base_port=9092))
    code, _, stderr = cli("kill", "--data-dir", str(tmp_path), "--node", "7")
    assert (code, stderr) == (1, "error: --node 7: no such node (valid ids: 1, 2, 3)\n")
    code, _, stderr = cli("up", "--data-dir", str(tmp_path), "--nodes", "5")
    assert code == 1
    assert stderr == (
        f"error: --nodes 5, but {tmp_path} holds a cluster of 3: add a node to it with "
        f"`tidelog cluster add-node --data-dir {tmp_path}`, take one out with "
        f"`tidelog cluster remove-node --data-dir {tmp_path} --node N`\n"
    )
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


def test_no_metrics_is_kept_in_cluster_json_and_passed_to_every_broker(tmp_path: Path) -> None:
    record = plan_cluster(tmp_path, nodes=2, base_port=9092)
    assert "--no-metrics" not in broker_argv(record, record.node(1))  # on: argv as it was
    off = replace(record, metrics=False)
    assert [broker_argv(off, node)[-1] for node in off.nodes] == ["--no-metrics"] * 2
    write_cluster(tmp_path, off)
    assert json.loads((tmp_path / "cluster.json").read_text())["metrics"] is False
    assert read_cluster(tmp_path) == off
    data = json.loads((tmp_path / "cluster.json").read_text())
    (tmp_path / "cluster.json").write_text(json.dumps({**data, "metrics": "false"}))
    code, _, stderr = cli("status", "--data-dir", str(tmp_path))
    assert code == 1
    assert stderr == f"error: {tmp_path / 'cluster.json'}: metrics 'false' is not true or false\n"


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
    record = plan_cluster(tmp_path, nodes=2, base_port=9092)
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
    record = plan_cluster(tmp_path, nodes=1, base_port=9092)
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


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory for a cluster that may fail to start; afterwards, `down` stops whatever
    its cluster.json still records."""
    yield tmp_path
    if (tmp_path / "cluster.json").exists():
        assert cli("down", "--data-dir", str(tmp_path))[0] == 0


def test_up_refuses_ports_in_use(cluster_dir: Path) -> None:
    base = free_base_port()
    with socket.create_server(("127.0.0.1", base + 201)):
        code, _, stderr = cli(
            "up", "--data-dir", str(cluster_dir), "--nodes", "2", "--base-port", str(base)
        )
    assert code == 1
    assert stderr == f"error: address(es) already in use: 127.0.0.1:{base + 201}\n"
    assert not (cluster_dir / "cluster.json").exists()


def test_a_node_that_exits_at_startup_is_reported_with_its_log(cluster_dir: Path) -> None:
    """A file where the broker keeps its metadata log: the broker cannot open its data
    directory and exits; `up` says so, with the end of that node's log."""
    (cluster_dir / "node-1").mkdir()
    (cluster_dir / "node-1" / "__cluster_metadata-0").write_text("not a directory\n")
    base = free_base_port()
    code, _, stderr = cli(
        "up", "--data-dir", str(cluster_dir), "--nodes", "1", "--base-port", str(base)
    )
    assert code == 1
    log = cluster_dir / "node-1" / "broker.log"
    assert stderr.startswith(f"error: node 1 exited during startup; {log.resolve()} ends:\n")
    assert "FileExistsError" in stderr
    assert "__cluster_metadata-0" in stderr
    assert [node["state"] for node in status_of(cluster_dir)] == ["down"]


def metrics_answer(directory: Path) -> int:
    """The HTTP status of node 1's `GET /metrics`."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    url = f"http://{read_cluster(directory).node(1).admin}/metrics"
    try:
        with opener.open(url, timeout=DEADLINE_S) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as refused:
        refused.close()
        return refused.code


def broker_cmdline(directory: Path) -> list[str]:
    pid = read_cluster(directory).node(1).pid
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def test_up_no_metrics_reaches_the_broker_and_a_restart_keeps_it(cluster_dir: Path) -> None:
    base = str(free_base_port(1))
    directory = str(cluster_dir)
    code, _, stderr = cli(
        "up", "--data-dir", directory, "--nodes", "1", "--base-port", base, "--no-metrics"
    )
    assert code == 0, stderr
    assert read_cluster(cluster_dir).metrics is False
    assert "--no-metrics" in broker_cmdline(cluster_dir)
    assert metrics_answer(cluster_dir) == 404
    code, _, stderr = cli("restart", "--data-dir", directory, "--node", "1")
    assert code == 0, stderr
    assert "--no-metrics" in broker_cmdline(cluster_dir)
    assert metrics_answer(cluster_dir) == 404
    # `up --metrics` records the change; the nodes it starts (here: all) serve /metrics.
    assert cli("down", "--data-dir", directory)[0] == 0
    code, _, stderr = cli("up", "--data-dir", directory, "--metrics")
    assert code == 0, stderr
    assert read_cluster(cluster_dir).metrics is True
    assert "--no-metrics" not in broker_cmdline(cluster_dir)
    assert metrics_answer(cluster_dir) == 200


# one real cluster for the rest


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """(its directory, what `up` printed) of a 3-node cluster; `down` stops it at the end."""
    directory = tmp_path_factory.mktemp("cluster")
    code, stdout, stderr = cli(
        "up", "--nodes", "3", "--data-dir", str(directory), "--base-port", str(free_base_port())
    )
    assert code == 0, stderr
    create_topic(read_cluster(directory).bootstrap, TOPIC, partitions=1)
    yield directory, stdout
    code, stdout, stderr = cli("down", "--data-dir", str(directory))
    assert code == 0, stderr


def status_of(directory: Path) -> list[dict[str, Any]]:
    code, stdout, _ = cli("status", "--data-dir", str(directory), "--json")
    report = json.loads(stdout)
    assert code == (0 if report["health"]["healthy"] else 1)  # 1: a node down, ...
    nodes: list[dict[str, Any]] = report["nodes"]
    return nodes


def states(directory: Path) -> list[str]:
    return [node["state"] for node in status_of(directory)]


def leader_of_topic(directory: Path) -> int | None:
    """The one node that says it leads TOPIC-0, or None."""
    leaders = [node["id"] for node in status_of(directory) if f"{TOPIC}-0" in node["leads"]]
    return leaders[0] if len(leaders) == 1 else None


def all_up_and_ready(directory: Path) -> bool:
    return all(n["state"] == "up" and n["ready"] for n in status_of(directory))


def pids(directory: Path) -> list[int]:
    return [node.pid for node in read_cluster(directory).nodes]


def test_up_starts_every_node_and_up_again_changes_nothing(cluster: tuple[Path, str]) -> None:
    directory, printed = cluster
    record = read_cluster(directory)
    base = int(record.node(1).kafka.rpartition(":")[2])
    assert printed == f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}\n"
    assert all(is_our_broker(node) for node in record.nodes)
    before = pids(directory)
    code, stdout, stderr = cli("up", "--data-dir", str(directory))
    assert (code, stdout) == (0, printed)
    live = f"watch it live: http://{record.node(1).admin}/"
    assert stderr == f"cluster of 3 nodes ready in {directory}\n{live}\n"
    assert pids(directory) == before


def test_status_reports_each_node_and_the_partitions_it_leads(cluster: tuple[Path, str]) -> None:
    directory, _ = cluster
    eventually(lambda: leader_of_topic(directory) is not None)
    nodes = status_of(directory)
    assert [(n["id"], n["state"], n["ready"]) for n in nodes] == [
        (1, "up", True),
        (2, "up", True),
        (3, "up", True),
    ]
    assert [n["pid"] for n in nodes] == pids(directory)
    assert len({n["metadata_leader"] for n in nodes}) == 1
    assert nodes[0]["metadata_leader"] in (1, 2, 3)
    hosted = [p["topic"] for n in nodes for p in n["status"]["partitions"]]
    assert sorted(t for t in hosted if t != OFFSETS_TOPIC) == [TOPIC] * 3
    # The table of the call that found every partition in sync: a leader that just took
    # over counts its followers in sync only once they answer it.
    answers: list[tuple[int, str, str]] = []

    def in_sync() -> bool:
        answers[:] = [cli("status", "--data-dir", str(directory))]
        return answers[0][0] == 0

    eventually(in_sync, "all in sync")
    code, table, _ = answers[0]
    assert code == 0
    header, *rows, verdict = table.splitlines()
    assert header.split() == [
        "node", "pid", "state", "fenced", "ready", "leads", "under-repl.", "kafka",
    ]  # fmt: skip
    assert [row.split()[2:5] for row in rows] == [["up", "no", "yes"]] * 3
    assert sum(int(row.split()[5]) for row in rows) >= 1  # TOPIC-0, and __consumer_offsets
    assert verdict.startswith("healthy")


def test_pause_and_resume_a_node(cluster: tuple[Path, str]) -> None:
    directory, _ = cluster
    pid = read_cluster(directory).node(2).pid
    code, stdout, _ = cli("pause", "--data-dir", str(directory), "--node", "2")
    assert (code, stdout) == (0, f"node 2: paused (pid {pid})\n")
    eventually(lambda: states(directory) == ["up", "paused", "up"])
    assert status_of(directory)[1]["status"] is None  # a paused node is not asked
    code, table, _ = cli("status", "--data-dir", str(directory))
    assert code == 1
    assert "node 2 is paused: see" in table
    assert "unhealthy: node(s) not up: 2" in table
    code, stdout, _ = cli("resume", "--data-dir", str(directory), "--node", "2")
    assert (code, stdout) == (0, f"node 2: resumed (pid {pid})\n")
    eventually(lambda: all_up_and_ready(directory))


def test_kill_the_leader_then_up_starts_only_that_node(cluster: tuple[Path, str]) -> None:
    directory, printed = cluster
    eventually(lambda: leader_of_topic(directory) is not None)
    leader = leader_of_topic(directory)
    assert leader is not None
    before = pids(directory)
    code, stdout, _ = cli("kill", "--data-dir", str(directory), "--node", str(leader))
    assert (code, stdout) == (0, f"node {leader}: killed (pid {before[leader - 1]})\n")
    eventually(lambda: states(directory)[leader - 1] == "down")
    down = status_of(directory)[leader - 1]
    assert down["log"].endswith(f"node-{leader}/broker.log")
    # The survivors elect another leader, and status shows it.
    eventually(lambda: leader_of_topic(directory) not in (None, leader))
    code, _, stderr = cli("kill", "--data-dir", str(directory), "--node", str(leader))
    assert (code, stderr) == (1, f"error: node {leader} is not running\n")
    code, stdout, _ = cli("up", "--data-dir", str(directory))
    assert (code, stdout) == (0, printed)
    after = pids(directory)
    assert [b == a for b, a in zip(before, after, strict=True)] == [
        node != leader for node in (1, 2, 3)
    ]
    assert all_up_and_ready(directory)
    status = status_of(directory)[leader - 1]["status"]
    recovered = [p["topic"] for p in status["partitions"] if p["topic"] != OFFSETS_TOPIC]
    assert recovered == [TOPIC]  # it recovered its replica


def test_restart_gives_a_node_a_new_pid(cluster: tuple[Path, str]) -> None:
    directory, _ = cluster
    before = read_cluster(directory).node(1).pid
    code, stdout, _ = cli("restart", "--data-dir", str(directory), "--node", "1")
    restarted = read_cluster(directory).node(1)
    assert (code, stdout) == (0, f"node 1: restarted (pid {restarted.pid})\n")
    assert restarted.pid != before
    assert is_our_broker(restarted)
    assert all_up_and_ready(directory)


def test_down_stops_every_node_and_up_starts_them_again(cluster: tuple[Path, str]) -> None:
    directory, printed = cluster
    log = Path(read_cluster(directory).node(1).data_dir) / "broker.log"
    starts = log.read_text().count("--- tidelog cluster: starting node 1:")
    before = pids(directory)
    code, stdout, _ = cli("down", "--data-dir", str(directory))
    assert (code, stdout) == (0, "node 1: stopped\nnode 2: stopped\nnode 3: stopped\n")
    assert states(directory) == ["down", "down", "down"]
    code, stdout, _ = cli("down", "--data-dir", str(directory))
    assert stdout == "node 1: was not running\nnode 2: was not running\nnode 3: was not running\n"
    code, stdout, _ = cli("up", "--data-dir", str(directory))
    assert (code, stdout) == (0, printed)
    assert all(b != a for b, a in zip(before, pids(directory), strict=True))
    assert all_up_and_ready(directory)
    assert log.read_text().count("--- tidelog cluster: starting node 1:") == starts + 1
    # The data stays: the topic is back, with a leader.
    eventually(lambda: leader_of_topic(directory) is not None)


def test_signal_commands_say_what_they_do_in_the_imperative() -> None:
    for name, summary in [
        ("kill", "Kill one node at once, as a crash would (SIGKILL)."),
        ("pause", "Pause one node: it answers nothing till resumed (SIGSTOP)."),
        ("resume", "Resume a paused node (SIGCONT)."),
    ]:
        code, stdout, _ = cli(name, "--help")
        assert code == 0
        assert f"\n  {summary}\n" in stdout


def test_auto_create_topics_enable_is_kept_and_creates_what_a_client_names(
    cluster_dir: Path,
) -> None:
    from kafka import KafkaProducer  # noqa: PLC0415

    record = plan_cluster(cluster_dir, nodes=1, base_port=9092)
    assert "--auto-create-topics-enable" not in broker_argv(record, record.node(1))  # off
    base = str(free_base_port(1))
    directory = str(cluster_dir)
    flag = "--auto-create-topics-enable"
    code, _, stderr = cli("up", "--data-dir", directory, "--nodes", "1", "--base-port", base, flag)
    assert code == 0, stderr
    assert read_cluster(cluster_dir).auto_create_topics_enable is True
    assert flag in broker_cmdline(cluster_dir)
    bootstrap = read_cluster(cluster_dir).bootstrap
    # kafka-python's producer allows auto-creation: the topic appears, with the defaults.
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=30_000)
    try:
        sent = producer.send("made-on-demand", b"hello").get(timeout=DEADLINE_S)
    finally:
        producer.close()
    assert (sent.topic, sent.partition) == ("made-on-demand", 0)
    via = ["--bootstrap-server", bootstrap]
    described = CliRunner().invoke(main, ["topics", "describe", "made-on-demand", *via])
    assert "Topic: made-on-demand\tPartitionCount: 1\tReplicationFactor: 1" in described.stdout
    # tidelog's own tools never ask for it: an unknown topic stays unknown.
    produced = CliRunner().invoke(main, ["produce", "not-made", *via], input="x\n")
    assert produced.exit_code == 1 and "not-made" in produced.stderr
    assert (
        "auto-created topic made-on-demand" in (cluster_dir / "node-1" / "broker.log").read_text()
    )
    # `up --no-auto-create-topics-enable` records the change for the nodes it starts.
    assert cli("down", "--data-dir", directory)[0] == 0
    code, _, stderr = cli("up", "--data-dir", directory, "--no-auto-create-topics-enable")
    assert code == 0, stderr
    assert read_cluster(cluster_dir).auto_create_topics_enable is False
    assert flag not in broker_cmdline(cluster_dir)


def test_a_topic_is_not_auto_created_by_default(cluster: tuple[Path, str]) -> None:
    from kafka import KafkaProducer  # noqa: PLC0415
    from kafka.errors import KafkaTimeoutError  # noqa: PLC0415

    directory, _ = cluster
    bootstrap = read_cluster(directory).bootstrap
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=2_000)
    try:
        with pytest.raises(KafkaTimeoutError):
            producer.send("never-made", b"x").get(timeout=DEADLINE_S)
    finally:
        producer.close()
    listed = CliRunner().invoke(main, ["topics", "list", "--bootstrap-server", bootstrap])
    assert "never-made" not in listed.stdout.split()
