"""Benchmark Produce validation, the leader's check of each batch (not a test).

    .venv/bin/python bench/produce_validation.py [--records N] [--runs R]

Batches of N 100-byte records (null keys, no headers), as librdkafka writes them for
`tidelog perf produce`, are validated R times each way: by `validate_batch` (the records
share one layout, so the column check decides), and by the record-by-record walk that
decides every other batch (values of varying lengths). Reports the median ns per record.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from tidelog.protocol.record_walk import walk_records
from tidelog.protocol.validate import BatchRules, validate_batch
from tidelog.records import HEADER_SIZE
from tidelog.testing.batches import TIMESTAMP_BASE, batch, record

RULES = BatchRules(api_version=8, max_message_bytes=2**31 - 1, partition_name="bench-0")
RECORD_SIZE = 100
LINGER_MS = 5  # the timestamps of one batch span librdkafka's default linger.ms


def uniform_batch(count: int) -> bytes:
    value = bytes(i % 251 for i in range(RECORD_SIZE))
    deltas = [i * LINGER_MS // count for i in range(count)]
    records = [record(i, value, timestamp_delta=d) for i, d in enumerate(deltas)]
    return batch(records, max_timestamp=TIMESTAMP_BASE + max(deltas))


def varied_batch(count: int) -> bytes:
    return batch([record(i, b"v" * (RECORD_SIZE - i % 7), timestamp_delta=i) for i in range(count)])


def ns_per_record(check: Callable[[], object], count: int, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        check()
        times.append(time.perf_counter() - started)
    return statistics.median(times) / count * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    uniform, varied = uniform_batch(args.records), varied_batch(args.records)
    assert validate_batch(uniform, RULES) is uniform
    assert validate_batch(varied, RULES) is varied
    rows = [
        ("validate_batch, one layout (column check)", lambda: validate_batch(uniform, RULES)),
        ("validate_batch, varied lengths (walk)", lambda: validate_batch(varied, RULES)),
        ("walk alone, one layout", lambda: walk_records(uniform, HEADER_SIZE, args.records)),
    ]
    for name, check in rows:
        print(f"{name}: {ns_per_record(check, args.records, args.runs):.0f} ns a record")


if __name__ == "__main__":
    main()
