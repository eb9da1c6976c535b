"""Produce and consume rates of the Kafka clients against a real 3-node cluster (a
measurement, not a test).

    .venv/bin/python bench/client_rates.py [--runs 3] [--records 200000] [--slow-records 20000]

A fresh cluster on 127.0.0.1 (free ports, a temporary directory; `fresh_cluster` of
bench/failover.py). Each run creates its own topics (PARTITIONS partitions, replication
factor 3) and measures, with VALUE_BYTES-byte values and no keys:

- confluent-kafka producer, acks=all (librdkafka defaults otherwise: linger 5 ms, no
  compression, not idempotent): `--records` records, from the first send until flush;
- kafka-python producer, acks=all, linger 5 ms: `--slow-records` records, the same way;
- confluent-kafka and kafka-python consumers, partitions assigned from the beginning (the
  confluent consumer needs a group.id but commits nothing): every record the confluent
  producer wrote, from the assignment until the last record.

Prints records/s and MB/s (value bytes only, 10^6 bytes) per run and the median of the runs.
Every loop is bounded in count and time; the script stops only the cluster it started.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from failover import fresh_cluster

from tidelog.testing.live import create_topic
from tidelog.tools.client_kafka import KafkaConsumer, KafkaProducer, TopicPartition

PARTITIONS = 3
VALUE_BYTES = 100
RUNS_DEFAULT = 3
RECORDS_DEFAULT = 200_000
SLOW_RECORDS_DEFAULT = 20_000
RECORDS_MAX = 2_000_000
RUN_TIMEOUT_S = 120.0
QUEUE_WAIT_S = 0.01
POLL_RECORDS_MAX = 10_000
POLL_TIMEOUT_S = 0.5
MB = 1_000_000
VALUE = bytes(range(VALUE_BYTES))


class BenchError(Exception):
    """A run did not complete: not every record was acknowledged or read in time."""


def deadline_check(deadline: float, what: str) -> None:
    if time.monotonic() >= deadline:
        raise BenchError(f"{what}: not done after {RUN_TIMEOUT_S:g} s")


def produce_confluent(bootstrap: str, topic: str, count: int) -> float:
    """Seconds to produce `count` records and have every one acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failed: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failed.append(str(error))

    started = time.monotonic()
    deadline = started + RUN_TIMEOUT_S
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value=VALUE, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: serve deliveries, then retry
                deadline_check(deadline, "confluent-kafka produce")
                producer.poll(QUEUE_WAIT_S)
        producer.poll(0)
    left = producer.flush(max(0.0, deadline - time.monotonic()))
    elapsed = time.monotonic() - started
    if left or failed:
        raise BenchError(f"confluent-kafka: {left} unsettled, {len(failed)} failed {failed[:1]}")
    return elapsed


def produce_kafka_python(bootstrap: str, topic: str, count: int) -> float:
    """Seconds to produce `count` records and have every one acknowledged."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    failed: list[str] = []
    try:
        started = time.monotonic()
        for _ in range(count):
            producer.send(topic, value=VALUE).add_errback(lambda e: failed.append(str(e)))
        producer.flush(timeout=RUN_TIMEOUT_S)
        elapsed = time.monotonic() - started
    finally:
        producer.close()
    if failed:
        raise BenchError(f"kafka-python: {len(failed)} failed ({failed[0]})")
    return elapsed


def consume_confluent(bootstrap: str, topic: str, count: int) -> float:
    """Seconds to read `count` records from the beginning of every partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "log_level": 0,  # the broker has no consumer groups yet; nothing is committed
        }
    )
    read = 0
    try:
        started = time.monotonic()
        deadline = started + RUN_TIMEOUT_S
        consumer.assign([ConfluentPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        while read < count:
            deadline_check(deadline, f"confluent-kafka consume ({read} of {count})")
            for message in consumer.consume(num_messages=POLL_RECORDS_MAX, timeout=POLL_TIMEOUT_S):
                if message.error() is not None:
                    raise BenchError(f"confluent-kafka consume: {message.error()}")
                read += 1
        return time.monotonic() - started
    finally:
        consumer.close()


def consume_kafka_python(bootstrap: str, topic: str, count: int) -> float:
    """Seconds to read `count` records from the beginning of every partition."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    read = 0
    try:
        started = time.monotonic()
        deadline = started + RUN_TIMEOUT_S
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        while read < count:
            deadline_check(deadline, f"kafka-python consume ({read} of {count})")
            polled = consumer.poll(
                timeout_ms=int(POLL_TIMEOUT_S * 1000), max_records=POLL_RECORDS_MAX
            )
            read += sum(len(batch) for batch in polled.values())
        return time.monotonic() - started
    finally:
        consumer.close()


@dataclass
class Measure:
    """One client doing one thing: the seconds each run took for `count` records."""

    name: str
    count: int
    seconds: list[float]

    def line(self) -> str:
        rates = [self.count / s for s in self.seconds]
        median = statistics.median(rates)
        runs = "  ".join(f"{r:>8.0f}" for r in rates)
        return (
            f"{self.name:<30} {self.count:>8} {median:>10.0f} rec/s "
            f"{median * VALUE_BYTES / MB:>6.2f} MB/s   runs: {runs}"
        )


def run_once(bootstrap: str, number: int, measures: dict[str, Measure]) -> None:
    fast, slow = f"rates-{number}-confluent", f"rates-{number}-kafka-python"
    for topic in (fast, slow):
        create_topic(bootstrap, topic, partitions=PARTITIONS)
    steps: list[tuple[str, Callable[[str, str, int], float], str]] = [
        ("confluent-kafka produce", produce_confluent, fast),
        ("kafka-python produce", produce_kafka_python, slow),
        ("confluent-kafka consume", consume_confluent, fast),
        ("kafka-python consume", consume_kafka_python, fast),
    ]
    for name, step, topic in steps:
        measure = measures[name]
        measure.seconds.append(step(bootstrap, topic, measure.count))
        print(f"run {number}: {name:<24} {measure.count / measure.seconds[-1]:>8.0f} rec/s")


def count_of(maximum: int) -> Callable[[str], int]:
    """An argparse type: an integer from 1 to `maximum`."""

    def parse(text: str) -> int:
        value = int(text)
        if not 1 <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{value} is not in 1..{maximum}")
        return value

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=count_of(10), default=RUNS_DEFAULT)
    parser.add_argument("--records", type=count_of(RECORDS_MAX), default=RECORDS_DEFAULT)
    parser.add_argument("--slow-records", type=count_of(RECORDS_MAX), default=SLOW_RECORDS_DEFAULT)
    arguments = parser.parse_args()
    measures = {
        "confluent-kafka produce": Measure("confluent-kafka producer", arguments.records, []),
        "kafka-python produce": Measure("kafka-python producer", arguments.slow_records, []),
        "confluent-kafka consume": Measure("confluent-kafka consumer", arguments.records, []),
        "kafka-python consume": Measure("kafka-python consumer", arguments.records, []),
    }
    with fresh_cluster() as cluster:
        for number in range(1, arguments.runs + 1):
            run_once(cluster.bootstrap, number, measures)
    print(
        f"\n{'client (acks=all, 3 partitions, RF 3)':<30} {'records':>8} {'median':>16} "
        f"{VALUE_BYTES}-byte values"
    )
    for measure in measures.values():
        print(measure.line())


if __name__ == "__main__":
    try:
        main()
    except (BenchError, KafkaException) as error:
        raise SystemExit(f"error: {error}") from None
