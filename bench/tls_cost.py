"""What TLS and SASL cost (not a test): `tidelog perf` through each listener of one
secured cluster, in the same run.

    .venv/bin/python bench/tls_cost.py [--records N] [--runs R]

Starts `tidelog cluster up --secure` (3 nodes on 127.0.0.1: mutual TLS between them, and
PLAINTEXT, SSL and SASL_SSL listeners on each), creates a topic of one partition
(replication factor 3), then R times in turn through PLAINTEXT, SSL and SASL_SSL
(SCRAM-SHA-512): `perf produce` (acks=all, N records of 100 bytes, as fast as it goes),
`perf consume` of what it wrote, and `perf latency` (200 records, one in flight). Prints
the medians and each listener's ratio to PLAINTEXT. Stops the cluster it started.

The cluster runs the authorizer, as `cluster up --secure` makes it: the SSL client (the
admin client certificate) and the SASL_SSL one (`admin`) are super users; the anonymous
PLAINTEXT client is allowed the bench's topics and groups by prefixed ACLs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tidelog.testing.live import LiveCluster, create_topic, tidelog

TOPIC_PREFIX = "cost-"
GROUP_PREFIX = "perf-"  # perf's consumers' group ids (assigned partitions, no commits)


def perf(*args: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-m", "tidelog", "perf", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"perf {args[0]} failed: {result.stderr.strip()}")
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def write_properties(path: Path, bootstrap: str, extra: str = "") -> Path:
    path.write_text(f"bootstrap.servers={bootstrap}\n{extra}")
    return path


def allow_anonymous(cluster: LiveCluster) -> None:
    """ACLs that let the anonymous PLAINTEXT client use the bench's topics and groups."""
    config = ("--command-config", str(cluster.sasl_properties_path))
    for kind, prefix in (("--topic", TOPIC_PREFIX), ("--group", GROUP_PREFIX)):
        added = tidelog(
            "acls", "add", "--allow", "User:ANONYMOUS", "--operation", "ALL",
            kind, prefix, "--prefixed", *config,
        )  # fmt: skip
        if added.returncode != 0:
            raise SystemExit(f"acls add failed: {added.stderr.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidelog-tls-cost-") as temporary:
        directory = Path(temporary) / "cluster"
        cluster = LiveCluster(directory, secure=True)
        try:
            allow_anonymous(cluster)
            listeners = {
                "PLAINTEXT": write_properties(Path(temporary) / "plain", cluster.bootstrap),
                "SSL": directory / "client-ssl.properties",
                "SASL_SSL": directory / "client-sasl.properties",
            }
            results: dict[str, dict[str, list[float]]] = {name: {} for name in listeners}
            for run in range(args.runs):
                for name, properties in listeners.items():
                    topic = f"{TOPIC_PREFIX}{name.lower().replace('_', '-')}-{run}"
                    create_topic(
                        cluster.sasl_bootstrap, topic, partitions=1, **cluster.sasl_settings
                    )
                    config = ("--command-config", str(properties))
                    produced = perf(
                        "produce",
                        "--topic",
                        topic,
                        "--num-records",
                        str(args.records),
                        "--record-size",
                        "100",
                        *config,
                    )
                    consumed = perf(
                        "consume", "--topic", topic, "--messages", str(args.records), *config
                    )
                    latency = perf(
                        "latency",
                        "--topic",
                        topic,
                        "--num-records",
                        "200",
                        "--record-size",
                        "100",
                        *config,
                    )
                    got = results[name]
                    got.setdefault("produce records/s", []).append(float(produced["records_per_s"]))  # type: ignore[arg-type]
                    got.setdefault("consume records/s", []).append(float(consumed["records_per_s"]))  # type: ignore[arg-type]
                    acknowledge = latency["acknowledge"]
                    assert isinstance(acknowledge, dict)
                    got.setdefault("acks=all p50 ms", []).append(float(acknowledge["p50_ms"]))
                    print(
                        f"run {run + 1} {name}: "
                        + ", ".join(f"{key} {values[-1]:,.1f}" for key, values in got.items()),
                        flush=True,
                    )
        finally:
            cluster.down()
    base = {key: statistics.median(v) for key, v in results["PLAINTEXT"].items()}
    print(f"\nmedians of {args.runs} runs, {args.records:,} records of 100 bytes:")
    for name, measures in results.items():
        cells = []
        for key, values in measures.items():
            median = statistics.median(values)
            cells.append(f"{key} {median:,.1f} ({median / base[key]:.2f}x)")
        print(f"{name:10} " + "; ".join(cells))


if __name__ == "__main__":
    main()
