"""Benchmark of the disk log's append path, beside raw disk figures from the same run.

Appends 100-byte records in batches of 1, 10, 100 and 1000 records, durably: syncing after
every batch, and group commit syncing every GROUP_BATCHES or BIG_GROUP_BATCHES batches.
Raw figures: the fdatasync rate of 4 KiB appends, and the sequential bandwidth of a Python
loop writing the same bytes followed by one fsync. Every loop is bounded in count and in
time. Each figure is the median of RUNS runs. Usage: .venv/bin/python bench/wal_append.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

from tidelog.records import stamp
from tidelog.types import Epoch, Offset
from tidelog.wal import DiskStorage, WalConfig
from tidelog.wal.batches import build_batch

RECORD_BYTES = 100
BATCH_RECORDS = (1, 10, 100, 1000)
GROUP_BATCHES = 16
BIG_GROUP_BATCHES = 128
RUN_BYTES_MAX = 64 * 1024 * 1024
RUN_BATCHES_MAX = 20_000
RUN_SECONDS_MAX = 3.0
FSYNC_PROBES_MAX = 2_000
PAGE = 4096
MB = 1_000_000


def clock_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def timed(body: Callable[[], int]) -> tuple[float, int]:
    started = time.perf_counter()
    count = body()
    return time.perf_counter() - started, count


def timed_on_probe_file(directory: str, body: Callable[[int], int]) -> tuple[float, int]:
    """(seconds, count) of `body(fd)` on a fresh file, removed afterwards."""
    path = os.path.join(directory, "probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        return timed(lambda: body(fd))
    finally:
        os.close(fd)
        os.unlink(path)


def raw_fdatasync_per_s(directory: str) -> float:
    """fdatasync rate of 4 KiB appends to one file."""
    page = b"x" * PAGE
    deadline = time.perf_counter() + RUN_SECONDS_MAX

    def loop(fd: int) -> int:
        count = 0
        while count < FSYNC_PROBES_MAX and time.perf_counter() < deadline:
            os.write(fd, page)
            os.fdatasync(fd)
            count += 1
        return count

    seconds, count = timed_on_probe_file(directory, loop)
    return count / seconds


def raw_sequential_mb_s(directory: str, chunk: bytes, count: int) -> float:
    """Bandwidth of writing `count` copies of `chunk` in a Python loop, then one fsync."""

    def loop(fd: int) -> int:
        for _ in range(count):
            os.write(fd, chunk)
        os.fsync(fd)
        return count

    seconds, _ = timed_on_probe_file(directory, loop)
    return count * len(chunk) / seconds / MB


def wal_append(
    directory: str, template: bytes, records: int, sync_every: int
) -> tuple[float, float, int]:
    """(records/s, MB/s, batches) appending stamped copies of `template`, syncing every
    `sync_every` batches, until the byte, batch or time limit."""
    shutil.rmtree(directory, ignore_errors=True)
    limit = min(RUN_BATCHES_MAX, RUN_BYTES_MAX // len(template))
    batches = [
        stamp(template, base_offset=Offset(i * records), epoch=Epoch(1)) for i in range(limit)
    ]
    storage = DiskStorage(directory, clock=clock_ms, config=WalConfig())
    deadline = time.perf_counter() + RUN_SECONDS_MAX

    def loop() -> int:
        count = 0
        while count < limit and time.perf_counter() < deadline:
            storage.append([batches[count]])
            count += 1
            if count % sync_every == 0:
                storage.sync()
        storage.sync()
        return count

    try:
        seconds, count = timed(loop)
    finally:
        storage.close()
        shutil.rmtree(directory, ignore_errors=True)
    return count * records / seconds, count * len(template) / seconds / MB, count


def median_of(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="tidelog-bench-", dir=args.dir)
    try:
        report(root, args.runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(root: str, runs: int) -> None:
    fsyncs = median_of(runs, lambda: raw_fdatasync_per_s(root))
    print(f"raw: fdatasync of 4 KiB appends: {fsyncs:,.0f}/s")
    print(
        f"{'records/batch':>13} {'mode':>14} {'records/s':>12} {'MB/s':>8} "
        f"{'raw seq MB/s':>12} {'of raw':>7}"
    )
    partition = os.path.join(root, "topic-0")
    for records in BATCH_RECORDS:
        template = build_batch(
            [b"v" * RECORD_BYTES] * records, base_offset=Offset(0), epoch=Epoch(1)
        )
        count = min(RUN_BATCHES_MAX, RUN_BYTES_MAX // len(template))
        raw = statistics.median(raw_sequential_mb_s(root, template, count) for _ in range(runs))
        modes = [
            ("sync/batch", 1),
            (f"sync/{GROUP_BATCHES}", GROUP_BATCHES),
            (f"sync/{BIG_GROUP_BATCHES}", BIG_GROUP_BATCHES),
        ]
        for mode, every in modes:
            results = [wal_append(partition, template, records, every) for _ in range(runs)]
            rate = statistics.median(r[0] for r in results)
            mb_s = statistics.median(r[1] for r in results)
            print(
                f"{records:>13} {mode:>14} {rate:>12,.0f} {mb_s:>8.1f} {raw:>12.1f} "
                f"{mb_s / raw:>7.0%}"
            )


if __name__ == "__main__":
    main()
