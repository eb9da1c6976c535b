"""This checkout against another revision, A/B in one pair of clusters (not a test).

    .venv/bin/python bench/latency_ab.py [--base REV] [--runs R] [--records N]
                                         [--measure latency|produce]

`--measure latency` (the default): one acks=all record in flight; `--measure produce`: the
produce rate, `tidelog perf produce` of N 100-byte records with acks=all as fast as the
producer goes.

Exports REV's `src/` (default: main) with `git archive` into a temporary directory and
starts two 3-node clusters on 127.0.0.1 side by side (free ports): one running this
checkout's code, one REV's. Both stay up for the whole run, so the one not measured idles
beside the one measured either way. On each, a topic of one partition (replication factor
3) whose leader is its first replica (`tidelog leaders elect`). Each of the R runs runs
`tidelog perf latency --json` (this checkout's client, the same for both: confluent-kafka,
linger 0, one record in flight, each read back by a consumer), or `tidelog perf produce
--json`, against one cluster, then the other; the order alternates from run to run, so a
machine that slows down (or warms up) over the run weighs on both alike.

Latency on a shared machine is noisy (other work takes the cores in turns); the CPU the
brokers spend much less so: each run also reads each broker process's CPU time (user +
system, /proc/PID/stat) before and after, and reports CPU microseconds per record of the
leader and of the followers (which includes what they spend idling: ticks, heartbeats).

Prints each run (the acknowledgement's p50 and p99, and the p50 from the send to the
consumer's receipt; or the records per second), the medians and the ratios this/REV. Every
loop is bounded in count and time; the script stops only the clusters it started.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tidelog.testing.live import free_base_port

HERE = Path(__file__).resolve().parent.parent
TOPIC = "latency-ab"
RUNS_DEFAULT = 5
RUNS_MAX = 50
RECORDS_DEFAULT = 2000
COMMAND_TIMEOUT_S = 300.0
LEADER_WAIT_S = 60.0


@dataclass(frozen=True)
class Tree:
    """A source tree the brokers of one cluster run."""

    name: str
    src: Path

    def tidelog(self, *args: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
        env = {**os.environ, "PYTHONPATH": str(self.src)}
        result = subprocess.run(
            [sys.executable, "-m", "tidelog", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{self.name}: tidelog {' '.join(args)}: {result.stderr[-2000:]}")
        return result.stdout


Run = dict[str, float]
"""One run's figures by name (the CPU per record of the leader and of the followers too)."""

MEASURES = ("latency", "produce")


def export_src(rev: str, into: Path) -> Path:
    """REV's src/ under `into` (git archive: the repository itself is not touched)."""
    archive = subprocess.run(
        ["git", "-C", str(HERE), "archive", rev, "src"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def start(tree: Tree, directory: Path) -> list[tuple[int, int]]:
    """Start a cluster of `tree` with the topic led by its first replica; [(node, pid)]."""
    tree.tidelog(
        "cluster",
        "up",
        "--nodes",
        "3",
        "--data-dir",
        str(directory),
        "--base-port",
        str(free_base_port(3)),
        "--no-metrics",
    )
    tree.tidelog(
        "topics",
        "create",
        TOPIC,
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        "--data-dir",
        str(directory),
    )
    deadline = time.monotonic() + LEADER_WAIT_S
    while leader_of(tree, directory) != first_replica(tree, directory):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{tree.name}: the first replica did not take the lead")
        tree.tidelog("leaders", "elect", "--all", "--data-dir", str(directory))
        time.sleep(0.5)
    record = json.loads((directory / "cluster.json").read_text())
    return [(int(node["id"]), int(node["pid"])) for node in record["nodes"]]


def describe(tree: Tree, directory: Path, topic: str = TOPIC) -> dict[str, object]:
    """Partition 0 of `topic`, as `tidelog topics describe --json` tells it."""
    partitions = json.loads(
        tree.tidelog("topics", "describe", topic, "--json", "--data-dir", str(directory))
    )
    partition: dict[str, object] = partitions[0]
    return partition


def leader_of(tree: Tree, directory: Path, topic: str = TOPIC) -> int:
    return int(str(describe(tree, directory, topic)["leader"]))


def first_replica(tree: Tree, directory: Path) -> int:
    replicas = describe(tree, directory)["replicas"]
    assert isinstance(replicas, list)
    return int(replicas[0])


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    tree: Tree,
    directory: Path,
    nodes: list[tuple[int, int]],
    records: int,
    *,
    client: Tree,
    what: str,
) -> Run:
    leader = leader_of(tree, directory)
    before = {node: cpu_s(pid) for node, pid in nodes}
    common = ["--topic", TOPIC, "--num-records", str(records), "--json"]
    common += ["--data-dir", str(directory)]
    if what == "latency":
        report = json.loads(client.tidelog("perf", "latency", *common))
        run = {
            "p50_ms": float(report["acknowledge"]["p50_ms"]),
            "p99_ms": float(report["acknowledge"]["p99_ms"]),
            "consume_p50_ms": float(report["consume"]["p50_ms"]),
        }
    else:
        report = json.loads(
            client.tidelog(
                "perf",
                "produce",
                *common,
                "--record-size",
                "100",
                "--throughput",
                "-1",
                "--acks",
                "all",
            )
        )
        if report["failed"]:
            raise RuntimeError(f"{tree.name}: {report['failed']} records failed")
        run = {"records_per_s": float(report["records_per_s"])}
    spent = {node: (cpu_s(pid) - before[node]) * 1e6 / records for node, pid in nodes}
    run["leader_us"] = spent[leader]
    run["followers_us"] = statistics.fmean(us for node, us in spent.items() if node != leader)
    return run


def shown(run: Run) -> str:
    return ", ".join(f"{key} {value:.2f}" for key, value in run.items())


def summary(name: str, runs: list[Run]) -> Run:
    medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    print(f"{name:>5} medians: {shown(medians)}")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main", help="The revision to compare with.")
    parser.add_argument("--runs", type=int, default=RUNS_DEFAULT)
    parser.add_argument("--records", type=int, default=RECORDS_DEFAULT)
    parser.add_argument("--measure", choices=MEASURES, default="latency")
    options = parser.parse_args()
    if not 1 <= options.runs <= RUNS_MAX or options.records < 100:
        parser.error(f"--runs must be 1..{RUNS_MAX} and --records at least 100")
    with tempfile.TemporaryDirectory(prefix="tidelog-latency-ab-") as temporary:
        root = Path(temporary)
        this = Tree("this", HERE / "src")
        base = Tree(options.base, export_src(options.base, root))
        trees = (this, base)
        started: list[tuple[Tree, Path]] = []
        results: dict[str, list[Run]] = {this.name: [], base.name: []}
        try:
            nodes = {}
            for tree in trees:
                directory = root / f"cluster-{trees.index(tree)}"
                started.append((tree, directory))
                nodes[tree.name] = (directory, start(tree, directory))
            for number in range(options.runs):
                order = trees if number % 2 == 0 else trees[::-1]
                for tree in order:
                    directory, pids = nodes[tree.name]
                    run = measure(
                        tree, directory, pids, options.records, client=this, what=options.measure
                    )
                    results[tree.name].append(run)
                    print(f"run {number + 1} {tree.name:>5}: {shown(run)}", flush=True)
        finally:
            for tree, directory in started:
                tree.tidelog("cluster", "down", "--data-dir", str(directory))
        ours = summary(this.name, results[this.name])
        theirs = summary(base.name, results[base.name])
        print(
            "ratios this/"
            + base.name
            + ": "
            + ", ".join(f"{key} {ours[key] / theirs[key]:.2f}x" for key in ours)
        )


if __name__ == "__main__":
    main()
