"""The Spark source's range read by Fetch (`tidelog.spark.direct`) against a real cluster.

It reads the same rows as librdkafka (`kafka_io.read_range`), column for column, for a
partition of batches from three producers (keys, headers, nulls, a gzip batch between
them), for ranges that start and end inside batches, in Fetches of any size. It reads
every batch itself; from a batch it does not decode on, librdkafka reads the rest of the
range; headers are read as librdkafka reads them; with a client property it does not know,
librdkafka reads all of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from tidelog.spark import columnar, direct
from tidelog.spark.kafka_io import RangeRead, read_range
from tidelog.testing.live import LiveCluster, create_topic

pytestmark = pytest.mark.slow
DEADLINE_S = 60.0
TOPIC = "direct"


def produce(
    bootstrap: str, records: list[tuple[Any, bytes | None, Any]], **config: Any
) -> list[int]:
    """Produce (key, value, headers) to partition 0 with one producer; the offsets."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "log_level": 0, **config}
    )
    offsets: list[int] = []

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        offsets.append(message.offset())

    for key, value, headers in records:
        producer.produce(TOPIC, value, key, partition=0, headers=headers, on_delivery=delivered)
    assert producer.flush(DEADLINE_S) == 0
    assert len(offsets) == len(records)
    return sorted(offsets)


@pytest.fixture(scope="module")
def written(cluster: LiveCluster) -> dict[str, Any]:
    create_topic(cluster.bootstrap, TOPIC, partitions=1)
    plain = produce(
        cluster.bootstrap,
        [(f"k{i}".encode(), b"v" * (i % 40), [("h", b"x")] if i % 3 else None) for i in range(300)],
    )
    packed = produce(
        cluster.bootstrap,
        [(None, b"gzip" * 30, None) for _ in range(50)],
        **{"compression.type": "gzip"},
    )
    tail = produce(
        cluster.bootstrap, [(None, None if i % 7 == 0 else b"t" * 200, None) for i in range(300)]
    )
    return {"plain": plain, "packed": packed, "tail": tail, "end": tail[-1] + 1}


def a_range(cluster: LiveCluster, start: int, end: int, **fields: Any) -> RangeRead:
    read = RangeRead(cluster.bootstrap, {}, TOPIC, 0, start, end, False, True, 30_000)
    return replace(read, **fields)


def table(batches: Iterator[pa.RecordBatch]) -> pa.Table:
    return pa.Table.from_batches(list(batches))


@pytest.mark.parametrize("fetch_bytes", [None, 1024], ids=["8MiB", "1KiB"])
def test_the_direct_read_equals_librdkafkas(
    cluster: LiveCluster,
    written: dict[str, Any],
    fetch_bytes: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With Fetches of 1 KiB, each answer holds a batch or two: many Fetches, each sent
    before the previous answer's records are decoded."""
    if fetch_bytes is not None:
        monkeypatch.setattr(direct, "FETCH_BYTES_MAX", fetch_bytes)
    end = written["end"]
    for start, stop in [(0, end), (written["plain"][17], written["tail"][123]), (end - 1, end)]:
        read = a_range(cluster, start, stop)
        assert direct.direct_readable(read)
        got = table(direct.read(read))
        assert got.equals(table(read_range(read))), (start, stop)
        assert got.column("offset")[0].as_py() >= start
        assert got.column("offset")[-1].as_py() < stop
    every = table(direct.read(a_range(cluster, 0, end))).to_pydict()
    assert every["offset"] == written["plain"] + written["packed"] + written["tail"]
    assert every["value"][:3] == [b"", b"v", b"vv"]
    assert every["key"][:2] == [b"k0", b"k1"]
    tail = every["value"][len(written["plain"]) + len(written["packed"]) :]
    assert tail == [None if i % 7 == 0 else b"t" * 200 for i in range(300)]


def run_to_end(reader: Any) -> tuple[int, int]:
    """The rows a `read_directly` generator yields, and the offset it returns."""
    rows = 0
    with pytest.raises(StopIteration) as stopped:
        while True:
            rows += next(reader).num_rows
    return rows, stopped.value.value


def test_every_batch_is_read_by_fetch(cluster: LiveCluster, written: dict[str, Any]) -> None:
    rows, returned = run_to_end(direct.read_directly(a_range(cluster, 0, written["end"])))
    records = len(written["plain"]) + len(written["packed"]) + len(written["tail"])
    assert (rows, returned) == (records, written["end"])


def test_librdkafka_reads_on_from_a_batch_the_fetch_read_does_not_decode(
    cluster: LiveCluster, written: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As if gzip were not decoded: the Fetch read stops at the first gzip batch, and
    librdkafka reads the rest of the range from there."""
    monkeypatch.setattr(columnar, "CODECS", frozenset({0}))
    read = a_range(cluster, 0, written["end"])
    rows, returned = run_to_end(direct.read_directly(read))
    assert (rows, returned) == (len(written["plain"]), written["packed"][0])
    got = table(direct.read(read))
    assert got.equals(table(read_range(read)))
    assert (
        got.column("offset").to_pylist() == written["plain"] + written["packed"] + written["tail"]
    )


def test_headers_are_read_as_librdkafka_reads_them(
    cluster: LiveCluster, written: dict[str, Any]
) -> None:
    read = a_range(cluster, 0, written["end"], include_headers=True)
    assert direct.direct_readable(read)
    got = table(direct.read(read))
    assert got.equals(table(read_range(read)))
    headers = got.column("headers").to_pylist()
    assert headers[:3] == [[], [{"key": "h", "value": b"x"}], [{"key": "h", "value": b"x"}]]


def test_a_client_property_it_does_not_know_has_librdkafka_read(
    cluster: LiveCluster, written: dict[str, Any]
) -> None:
    read = a_range(cluster, 0, written["end"], config={"client.rack": "r1"})
    assert not direct.direct_readable(read)
    got = table(direct.read(read))
    assert got.equals(table(read_range(read)))
    assert got.num_rows == len(written["plain"]) + len(written["packed"]) + len(written["tail"])
