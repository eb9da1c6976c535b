"""What metrics cost (not a test): produce throughput of a cluster with metrics on against
one with `--no-metrics`, and the time of one scrape.

    .venv/bin/python bench/metrics_cost.py [--records N] [--runs R] [--scrape-partitions P]

Starts two 3-node clusters on 127.0.0.1 side by side (free ports, their own directories in
one temporary directory): `tidelog cluster up` and `tidelog cluster up --no-metrics`. Both
stay up for the whole run, so the one not measured idles beside the one measured either
way. Each of the R runs creates a topic of PARTITIONS partitions (replication factor 3) on
each cluster and runs `tidelog perf produce` (acks=all, N records of RECORD_BYTES bytes, as
fast as it goes) against one cluster, then the other; the order alternates from run to run,
so a machine that slows down (or warms up) over the run weighs on both alike. Before each
run the topic's leaders are spread, one a node (`tidelog leaders elect`: the partitions'
first replicas differ), as the elections that follow a topic's creation may not leave
them: a cluster whose node leads all three partitions is slower, metrics or not. Each run
prints where its leaders were.

While the metrics-on cluster is measured, every node of it is scraped every
`--scrape-interval` seconds (default 5: more often than Prometheus' usual 15); the counters
read before and after each run show what the run moved (Produce requests, produce-to-commit
times, fsyncs).

Then the scrape cost: a topic on the metrics-on cluster brings the partitions node 1 hosts
to P (replication factor 3 on 3 nodes: every node hosts every partition; those of
`__consumer_offsets` count, the metadata log does not), and SCRAPES_TIMED GETs of its
/metrics are timed, from the request sent to the last byte read.

Throughput on a shared machine is noisy (other work takes the cores in turns); the CPU the
brokers spend is not: each run also reads the three broker processes' CPU time (user +
system, /proc/PID/stat) before and after, and reports CPU microseconds per record. That
ratio is the cost of metrics the noise does not hide.

Prints each run, the medians, the on/off ratios and the scrape figures. Every loop is bounded
in count and time; the script stops only the clusters it started.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from tidelog.status import read_status
from tidelog.testing.live import LiveCluster, Samples, create_topic, sample, scrape, tidelog

PARTITIONS = 3
RECORD_BYTES = 100
RECORDS_DEFAULT = 1_000_000  # some 5 s a run at 200k records/s: less is noise
RUNS_DEFAULT = 4
RUNS_MAX = 50
SCRAPE_INTERVAL_S_DEFAULT = 5.0  # Prometheus' usual 15 s, and then some
SCRAPE_PARTITIONS_DEFAULT = 50
SCRAPE_PARTITIONS_MAX = 2_000
SCRAPES_TIMED = 20
PERF_TIMEOUT_S = 900.0
SPREAD_TIMEOUT_S = 30.0
POLL_S = 0.2
HTTP_TIMEOUT_S = 10.0
METADATA_TOPIC = "__cluster_metadata"
# Counters summed over a cluster's nodes, before and after a run: what the run moved.
MOVED: tuple[tuple[str, dict[str, str]], ...] = (
    ("tidelog_requests_total", {"api": "Produce"}),
    ("tidelog_produce_commit_seconds_count", {}),
    ("tidelog_fsync_duration_seconds_count", {}),
    ("tidelog_fsync_bytes_sum", {}),
)


def perf_produce(bootstrap: str, topic: str, records: int) -> float:
    """Records per second `tidelog perf produce` reports (acks=all)."""
    result = subprocess.run(
        [
            sys.executable, "-m", "tidelog", "perf", "produce",
            "--bootstrap-server", bootstrap, "--topic", topic,
            "--num-records", str(records), "--record-size", str(RECORD_BYTES),
            "--acks", "all", "--json",
        ],
        capture_output=True,
        text=True,
        timeout=PERF_TIMEOUT_S,
        check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"perf produce failed: {result.stderr.strip()}")
    report = json.loads(result.stdout)
    if report["failed"]:
        raise SystemExit(f"perf produce: {report['failed']} records failed")
    return float(report["records_per_s"])


def leaders(cluster: LiveCluster, topic: str) -> list[int]:
    """The node that leads each partition of `topic`, as that node says (0: none yet)."""
    found = [0] * PARTITIONS
    for node in cluster.record["nodes"]:
        status = read_status(node["admin"])
        for part in [] if status is None else status["partitions"]:
            if part["topic"] == topic and part["role"] == "leader":
                found[part["partition"]] = node["id"]
    return found


def spread_leaders(cluster: LiveCluster, topic: str) -> list[int]:
    """Ask for preferred elections of `topic` until each node leads one of its partitions,
    for up to SPREAD_TIMEOUT_S; the leaders then (spread or not: the run line shows it)."""
    deadline = time.monotonic() + SPREAD_TIMEOUT_S
    while len(set(now := leaders(cluster, topic)) - {0}) < PARTITIONS:
        if time.monotonic() >= deadline:
            break
        tidelog("leaders", "elect", "--topic", topic, "--bootstrap-server", cluster.bootstrap)
        time.sleep(POLL_S)
    return now


def admins(cluster: LiveCluster) -> list[str]:
    return [node["admin"] for node in cluster.record["nodes"]]


def counters(cluster: LiveCluster) -> dict[str, float]:
    """MOVED, each summed over the cluster's nodes."""
    scrapes = [scrape(admin) for admin in admins(cluster)]
    return {
        name: sum(sample(samples, name, **labels) or 0.0 for samples in scrapes)
        for name, labels in MOVED
    }


class Scraper:
    """Scrapes every node of a cluster every `interval_s` in a thread, until stopped."""

    def __init__(self, cluster: LiveCluster, interval_s: float) -> None:
        self.cluster = cluster
        self.interval_s = interval_s
        self.stopped = threading.Event()
        self.scrapes = 0
        self.thread = threading.Thread(target=self.run, name="scraper", daemon=True)

    def run(self) -> None:
        # Event.wait bounds each pause; stop() ends the loop at the next one.
        while not self.stopped.wait(self.interval_s):
            for admin in admins(self.cluster):
                scrape(admin)
                self.scrapes += 1

    def __enter__(self) -> Scraper:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        self.thread.join(HTTP_TIMEOUT_S * len(self.cluster.nodes))


def broker_cpu_s(cluster: LiveCluster) -> float:
    """The CPU seconds (user + system) the cluster's broker processes have used."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for node in cluster.record["nodes"]:
        fields = Path(f"/proc/{node['pid']}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / ticks


def measure(
    cluster: LiveCluster, topic: str, records: int, *, metrics: bool, interval_s: float
) -> tuple[float, float, str]:
    """One run against one cluster: records/s, the brokers' CPU microseconds per record,
    and what its counters say it did."""
    create_topic(cluster.bootstrap, topic, partitions=PARTITIONS)
    cluster.wait_hosted_everywhere(topic, PARTITIONS)
    placed = f"leaders on nodes {spread_leaders(cluster, topic)}"
    cpu_before = broker_cpu_s(cluster)
    if not metrics:
        rate = perf_produce(cluster.bootstrap, topic, records)
        cpu_us = (broker_cpu_s(cluster) - cpu_before) * 1e6 / records
        return rate, cpu_us, placed
    before = counters(cluster)
    with Scraper(cluster, interval_s) as scraper:
        rate = perf_produce(cluster.bootstrap, topic, records)
    cpu_us = (broker_cpu_s(cluster) - cpu_before) * 1e6 / records
    after = counters(cluster)
    moved = ", ".join(f"{name} +{after[name] - before[name]:,.0f}" for name, _ in MOVED)
    return rate, cpu_us, f"{placed}; {scraper.scrapes} scrapes during the run; {moved}"


def hosted(admin: str) -> int:
    """The partitions a node hosts, its metadata log's aside."""
    status = read_status(admin)
    assert status is not None, f"{admin} does not answer /status"
    return sum(p["topic"] != METADATA_TOPIC for p in status["partitions"])


def time_scrapes(cluster: LiveCluster, partitions: int) -> str:
    """Bring node 1 to `partitions` hosted partitions; time SCRAPES_TIMED GETs of its
    /metrics."""
    admin = admins(cluster)[0]
    missing = partitions - hosted(admin)
    if missing > 0:
        create_topic(cluster.bootstrap, "scrape-cost", partitions=missing)
        cluster.wait_hosted_everywhere("scrape-cost", missing)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    seconds: list[float] = []
    size = 0
    for _ in range(SCRAPES_TIMED):
        started = time.perf_counter()
        with opener.open(f"http://{admin}/metrics", timeout=HTTP_TIMEOUT_S) as reply:
            size = len(reply.read())
        seconds.append(time.perf_counter() - started)
    samples: Samples = scrape(admin)
    ms = sorted(s * 1000 for s in seconds)
    return (
        f"scrape of a node hosting {hosted(admin)} partitions: median "
        f"{statistics.median(ms):.1f} ms, min {ms[0]:.1f} ms, max {ms[-1]:.1f} ms "
        f"({SCRAPES_TIMED} GETs; {size:,} bytes, {len(samples):,} samples)"
    )


def refuses_metrics(cluster: LiveCluster) -> bool:
    """Whether the metrics-off cluster's first node answers /metrics with 404."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        opener.open(f"http://{admins(cluster)[0]}/metrics", timeout=HTTP_TIMEOUT_S).close()
    except urllib.error.HTTPError as refused:
        refused.close()
        return refused.code == 404
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS_DEFAULT)
    parser.add_argument(
        "--runs", type=int, default=RUNS_DEFAULT, choices=range(1, RUNS_MAX + 1), metavar="R"
    )
    parser.add_argument("--scrape-interval", type=float, default=SCRAPE_INTERVAL_S_DEFAULT)
    parser.add_argument(
        "--scrape-partitions",
        type=int,
        default=SCRAPE_PARTITIONS_DEFAULT,
        choices=range(1, SCRAPE_PARTITIONS_MAX + 1),
        metavar="P",
    )
    args = parser.parse_args()
    results: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="tidelog-metrics-cost-") as temporary:
        clusters: dict[bool, LiveCluster] = {}
        try:
            clusters[True] = LiveCluster(Path(temporary) / "on")
            clusters[False] = LiveCluster(Path(temporary) / "off", metrics=False)
            if not refuses_metrics(clusters[False]):
                raise SystemExit("the --no-metrics cluster serves /metrics")
            for run in range(args.runs):
                order = (True, False) if run % 2 == 0 else (False, True)
                for metrics in order:
                    rate, cpu_us, detail = measure(
                        clusters[metrics],
                        f"cost-{run}",
                        args.records,
                        metrics=metrics,
                        interval_s=args.scrape_interval,
                    )
                    results[metrics].append(rate)
                    cpu[metrics].append(cpu_us)
                    state = "on " if metrics else "off"
                    print(
                        f"run {run + 1} metrics {state}: {rate:,.0f} records/s, brokers' CPU "
                        f"{cpu_us:.1f} us/record; {detail}"
                    )
            scrape_line = time_scrapes(clusters[True], args.scrape_partitions)
        finally:
            for cluster in clusters.values():
                cluster.down()
    on, off = statistics.median(results[True]), statistics.median(results[False])
    print(f"\nmedians of {args.runs} runs, {args.records:,} records of {RECORD_BYTES} bytes:")
    for metrics, median in ((True, on), (False, off)):
        runs = ", ".join(f"{rate:,.0f}" for rate in results[metrics])
        print(f"metrics {'on ' if metrics else 'off'} {median:,.0f} records/s (runs: {runs})")
    print(f"on/off {on / off:.3f}")
    cpu_on, cpu_off = statistics.median(cpu[True]), statistics.median(cpu[False])
    print(
        f"brokers' CPU per record: on {cpu_on:.1f} us, off {cpu_off:.1f} us, "
        f"on/off {cpu_on / cpu_off:.3f}"
    )
    print(scrape_line)


if __name__ == "__main__":
    main()
