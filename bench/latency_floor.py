"""Where one acks=all record's latency goes on this machine: the chain's parts alone (not a test).

    .venv/bin/python bench/latency_floor.py [--runs R] [--records N]

Each of the R runs measures, one after the other on a quiet machine:

- disk: a 180-byte append + fdatasync to a file of its own, one writer alone, then three
  writers at once (three nodes on one disk sync each record at about the same time);
- loopback: a 100-byte round trip between two Python processes, a uvloop echo server and
  a blocking client (one Python hop there and back, no broker code);
- one record in flight on a 3-node cluster of this checkout, to a topic of replication
  factor 1 and to one of replication factor 3, each with two clients: librdkafka
  (`tidelog perf latency`, as `make bench-peers` runs it, a consumer reading each record
  back) and a raw client (one blocking socket to the leader, kafka-python's Produce
  encoding done before the clock starts, no client thread): whether the client is the
  bound shows as the gap between the two.

Prints each run and the medians. The cluster is started once and stopped by this script;
every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import uvloop
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder
from latency_ab import HERE, TOPIC, Tree, leader_of, start

RUNS_DEFAULT = 3
RUNS_MAX = 20
RECORDS_DEFAULT = 2000
RECORDS_MAX = 100_000
APPEND_BYTES = 180
MESSAGE_BYTES = 100
RECORD_BYTES = 100
ROUND_TRIP_TIMEOUT_S = 10.0
WRITERS = 3
TOPIC_RF1 = "latency-floor-rf1"


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


# ------------------------------------------------------------------------- disk -------
def sync_appends(path: str, count: int, out: multiprocessing.Queue[list[float]]) -> None:
    """`count` appends of APPEND_BYTES, each followed by fdatasync; their durations."""
    payload = os.urandom(APPEND_BYTES)
    took: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(count):
            start_s = time.perf_counter()
            os.write(fd, payload)
            os.fdatasync(fd)
            took.append(time.perf_counter() - start_s)
    finally:
        os.close(fd)
    out.put(took)


def fsync_p50_ms(directory: Path, writers: int, count: int) -> float:
    """The p50 of an append + fdatasync with `writers` processes at it at once."""
    out: multiprocessing.Queue[list[float]] = multiprocessing.Queue()
    processes = [
        multiprocessing.Process(target=sync_appends, args=(str(directory / f"w{n}"), count, out))
        for n in range(writers)
    ]
    for process in processes:
        process.start()
    took = [sample for _ in processes for sample in out.get(timeout=ROUND_TRIP_TIMEOUT_S * 6)]
    for process in processes:
        process.join(ROUND_TRIP_TIMEOUT_S)
    for path in directory.iterdir():
        path.unlink()
    return p50_ms(took)


# --------------------------------------------------------------------- loopback -------
def echo_server(port_out: multiprocessing.Queue[int]) -> None:
    """A uvloop echo server on 127.0.0.1 (a free port), for one connection."""

    async def serve() -> None:
        done = asyncio.Event()

        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(1 << 16):
                writer.write(data)
            writer.close()
            done.set()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port_out.put(server.sockets[0].getsockname()[1])
        await asyncio.wait_for(done.wait(), ROUND_TRIP_TIMEOUT_S * 6)
        server.close()

    uvloop.run(serve())


def loopback_p50_ms(count: int) -> float:
    port_out: multiprocessing.Queue[int] = multiprocessing.Queue()
    server = multiprocessing.Process(target=echo_server, args=(port_out,))
    server.start()
    try:
        sock = socket.create_connection(
            ("127.0.0.1", port_out.get(timeout=ROUND_TRIP_TIMEOUT_S)), ROUND_TRIP_TIMEOUT_S
        )
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        message = bytes(MESSAGE_BYTES)
        took: list[float] = []
        with sock:
            for _ in range(count):
                start_s = time.perf_counter()
                sock.sendall(message)
                got = 0
                while got < MESSAGE_BYTES:
                    chunk = sock.recv(1 << 16)
                    if not chunk:
                        raise RuntimeError("the echo server closed the connection")
                    got += len(chunk)
                took.append(time.perf_counter() - start_s)
    finally:
        server.join(ROUND_TRIP_TIMEOUT_S)
        if server.is_alive():
            server.kill()
    return p50_ms(took)


# ------------------------------------------------------------------- raw client -------
def produce_request(topic: str, number: int) -> ProduceRequest:
    """One acks=all Produce of one RECORD_BYTES record to partition 0 of `topic`."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    value = number.to_bytes(8, "big") + bytes(RECORD_BYTES - 8)
    builder.append(0, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    partition = ProduceRequest.TopicProduceData.PartitionProduceData
    return ProduceRequest(
        version=7,
        transactional_id=None,
        acks=-1,
        timeout_ms=int(ROUND_TRIP_TIMEOUT_S * 1000),
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic, partition_data=[partition(index=0, records=bytes(builder.build()))]
            )
        ],
    )


def raw_client_p50_ms(address: tuple[str, int], topic: str, count: int) -> float:
    """One record in flight over one blocking socket to the partition's leader."""
    protocol = KafkaProtocol(client_id="latency-floor")
    took: list[float] = []
    with socket.create_connection(address, ROUND_TRIP_TIMEOUT_S) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for number in range(count):
            protocol.send_request(produce_request(topic, number))
            data = protocol.send_bytes()
            start_s = time.perf_counter()
            sock.sendall(data)
            answers: list[tuple[int, object]] = []
            while not answers:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    raise RuntimeError("the broker closed the connection")
                answers = protocol.receive_bytes(chunk)
            took.append(time.perf_counter() - start_s)
            error = answers[0][1].responses[0].partition_responses[0].error_code  # type: ignore[attr-defined]
            if error:
                raise RuntimeError(f"produce to {topic}: error code {error}")
    return p50_ms(took)


def kafka_address(directory: Path, node: int) -> tuple[str, int]:
    record = json.loads((directory / "cluster.json").read_text())
    listener = next(n["kafka"] for n in record["nodes"] if n["id"] == node)
    host, port = listener.rsplit(":", 1)
    return host, int(port)


def librdkafka_p50_ms(tree: Tree, directory: Path, topic: str, count: int) -> float:
    report = json.loads(
        tree.tidelog(
            "perf",
            "latency",
            "--topic",
            topic,
            "--num-records",
            str(count),
            "--json",
            "--data-dir",
            str(directory),
        )
    )
    return float(report["acknowledge"]["p50_ms"])


# ------------------------------------------------------------------------- main -------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS_DEFAULT)
    parser.add_argument("--records", type=int, default=RECORDS_DEFAULT)
    options = parser.parse_args()
    if not 1 <= options.runs <= RUNS_MAX or not 100 <= options.records <= RECORDS_MAX:
        parser.error(f"--runs must be 1..{RUNS_MAX} and --records 100..{RECORDS_MAX}")
    count = options.records
    tree = Tree("this", HERE / "src")
    with tempfile.TemporaryDirectory(prefix="tidelog-latency-floor-") as temporary:
        root = Path(temporary)
        files = root / "files"
        files.mkdir()
        cluster = root / "cluster"
        start(tree, cluster)
        try:
            tree.tidelog(
                "topics",
                "create",
                TOPIC_RF1,
                "--partitions",
                "1",
                "--replication-factor",
                "1",
                "--data-dir",
                str(cluster),
            )
            parts: dict[str, Callable[[], float]] = {
                "fsync, 1 writer": lambda: fsync_p50_ms(files, 1, count),
                f"fsync, {WRITERS} writers": lambda: fsync_p50_ms(files, WRITERS, count),
                "loopback round trip, Python": lambda: loopback_p50_ms(count),
                "RF 1, raw client": lambda: raw_client_p50_ms(
                    kafka_address(cluster, leader_of(tree, cluster, TOPIC_RF1)),
                    TOPIC_RF1,
                    count,
                ),
                "RF 1, librdkafka": lambda: librdkafka_p50_ms(tree, cluster, TOPIC_RF1, count),
                "RF 3, raw client": lambda: raw_client_p50_ms(
                    kafka_address(cluster, leader_of(tree, cluster)), TOPIC, count
                ),
                "RF 3, librdkafka": lambda: librdkafka_p50_ms(tree, cluster, TOPIC, count),
            }
            results: dict[str, list[float]] = {name: [] for name in parts}
            for number in range(options.runs):
                for name, measure in parts.items():
                    results[name].append(measure())
                shown = ", ".join(f"{name} {values[-1]:.3f}" for name, values in results.items())
                print(f"run {number + 1} (p50 ms): {shown}", flush=True)
        finally:
            tree.tidelog("cluster", "down", "--data-dir", str(cluster))
    print(f"medians of {options.runs} runs of {count} (p50 ms):")
    for name, values in results.items():
        print(f"  {name:<30} {statistics.median(values):.3f}")


if __name__ == "__main__":
    main()
