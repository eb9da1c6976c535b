"""A group that has consumed everything shows lag 0, even when control batches end the
partition: a new leader's, after a restart, that the consumer read past, or one appended by
a failover after the group stopped, below which its committed offset stays. Lag is the
offset after the last data record below the HWM minus max(committed, log start offset),
never negative, in `tidelog groups describe` (with `tidelog consume --group`, kafka-python,
confluent-kafka and kcat), in /metrics (`tidelog_consumer_group_lag`) and on the live page;
a record produced after that counts again. The arithmetic of it is tested here too: where
the control batches of a log lie (wal/controls.py, DiskStorage), and the lag of each place."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from kafka import KafkaConsumer, KafkaProducer

from tidelog.records import CONTROL_TYPE_LEADER_CHANGE, build_control_batch, read_header
from tidelog.server.snapshot import group_lag
from tidelog.testing.live import (
    DEADLINE_S,
    LiveCluster,
    create_topic,
    eventually,
    first_picture,
    knows_before_joining,
    sample,
    scrape,
    tidelog,
)
from tidelog.tools import groups_cmd
from tidelog.types import Epoch, Offset
from tidelog.wal import DiskStorage, OsFileSystem, WalConfig
from tidelog.wal.batches import build_batches
from tidelog.wal.controls import RUNS_MAX, ControlBatches, Run

TOPIC = "drained"
RECORDS = 10


def write_records(bootstrap: str, topic: str) -> None:
    """A new topic of one partition holding RECORDS records, each acknowledged (acks=all)."""
    create_topic(bootstrap, topic, partitions=1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(RECORDS):
        producer.send(topic, f"r{i}".encode(), partition=0).get(timeout=30)
    producer.close()


def lag_of(bootstrap: str, group: str) -> list[Any]:
    result = tidelog("groups", "describe", group, "--json", "--bootstrap-server", bootstrap)
    assert result.returncode == 0, result.stderr
    return [row["lag"] for row in json.loads(result.stdout)["offsets"]]


def test_a_drained_group_shows_lag_0_behind_a_control_batch(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path / "cluster")
    try:
        write_records(cluster.bootstrap, TOPIC)
        node = cluster.leader_of(TOPIC)
        restarted = tidelog(
            "cluster", "restart", "--data-dir", str(tmp_path / "cluster"), "--node", str(node)
        )
        assert restarted.returncode == 0, restarted.stderr
        cluster.wait_hosted_everywhere(TOPIC, 1)  # the partition now ends with a control batch
        bootstrap = cluster.bootstrap

        read = tidelog(
            "consume", TOPIC, "--group", "cli", "--from-beginning", "--timeout-ms", "3000",
            "--bootstrap-server", bootstrap,
        )  # fmt: skip
        assert read.returncode == 0 and len(read.stdout.split()) == RECORDS, read.stderr
        assert lag_of(bootstrap, "cli") == [0]

        consumer = KafkaConsumer(
            TOPIC,
            bootstrap_servers=bootstrap,
            group_id="kafka-python",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        knows_before_joining(consumer, TOPIC)
        seen: list[bytes] = []

        def drained() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                seen.extend(record.value for record in records)
            return len(seen) >= RECORDS and not consumer.poll(timeout_ms=500)

        eventually(drained, "kafka-python read everything")
        consumer.commit()  # its positions
        consumer.close()
        assert lag_of(bootstrap, "kafka-python") == [0]

        confluent = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "confluent",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        confluent.subscribe([TOPIC])
        got = 0

        def confluent_drained() -> bool:
            nonlocal got
            message = confluent.poll(0.5)
            if message is not None and message.error() is None:
                got += 1
            return got >= RECORDS and message is None

        eventually(confluent_drained, "confluent-kafka read everything")
        confluent.commit(asynchronous=False)
        confluent.close()
        assert lag_of(bootstrap, "confluent") == [0]

        kcat = shutil.which("kcat")
        assert kcat is not None, "kcat is installed by `make test`"
        subprocess.run(
            [kcat, "-b", bootstrap, "-G", "kcat", TOPIC, "-o", "beginning", "-e", "-q",
             "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100"],
            capture_output=True, timeout=DEADLINE_S, check=True,
        )  # fmt: skip
        eventually(lambda: lag_of(bootstrap, "kcat") == [0], "kcat's group at lag 0")
    finally:
        cluster.down()


# --- the arithmetic ---------------------------------------------------------------------


def control(offset: int, epoch: int) -> bytes:
    """The control batch the leader of `epoch` appends at `offset`."""
    return build_control_batch(
        base_offset=Offset(offset),
        epoch=Epoch(epoch),
        control_type=CONTROL_TYPE_LEADER_CHANGE,
        timestamp_ms=0,
    )


def data(offset: int, records: int, epoch: int) -> bytes:
    [batch] = build_batches([records], base_offset=offset, epochs=[Epoch(epoch)])
    return batch


# Offsets 0 control | 1..3 data | 4, 5 control | 6, 7 data | 8 control.
LOG = [control(0, 1), data(1, 3, 1), control(4, 2), control(5, 3), data(6, 2, 3), control(8, 4)]
DATA_ENDS = [0, 0, 2, 3, 4, 4, 4, 7, 8, 8]  # the data end below each offset 0..9


def test_control_batches_are_kept_as_runs_and_the_data_end_skips_the_top_one() -> None:
    controls = ControlBatches(Offset(0))
    for batch in LOG:
        controls.on_batch(read_header(batch))
    assert controls.runs == [
        Run(Offset(0), Offset(1)),
        Run(Offset(4), Offset(6)),
        Run(Offset(8), Offset(9)),
    ]
    assert [controls.data_end(Offset(below)) for below in range(10)] == DATA_ENDS
    controls.truncate(Offset(5))  # the control batch at 5 is gone
    assert controls.runs[-1] == Run(Offset(4), Offset(5))
    assert controls.data_end(Offset(5)) == 4
    controls.truncate(Offset(4))
    assert controls.data_end(Offset(4)) == 4
    controls.reset(Offset(20))
    assert (controls.runs, controls.known_from) == ([], 20)


def test_the_oldest_runs_are_forgotten_and_what_is_below_is_learned() -> None:
    controls = ControlBatches(Offset(0))
    for number in range(RUNS_MAX + 1):  # runs of one control batch, data in between
        controls.on_batch(read_header(control(2 * number, number + 1)))
    assert len(controls.runs) == RUNS_MAX
    assert controls.known_from == 1  # after the forgotten run [0, 1)

    below = ControlBatches(Offset(5))  # what a recovery that scanned from 5 on knows
    below.on_batch(read_header(control(5, 3)))
    assert below.data_end(Offset(6)) == 5  # it cannot tell what lies below 5
    below.learn(read_header(control(4, 2)))
    assert (below.runs, below.known_from, below.data_end(Offset(6))) == (
        [Run(Offset(4), Offset(6))],
        4,
        4,
    )
    below.learn(read_header(data(1, 3, 1)))
    assert (below.known_from, below.data_end(Offset(6))) == (1, 4)


SEEDS = 20
STEPS = 120


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000

    def __call__(self) -> int:
        return self.now_ms


def open_disk(path: Path, config: WalConfig, clock: Clock) -> DiskStorage:
    return DiskStorage(str(path), clock=clock, config=config, fs=OsFileSystem())


def test_the_disk_log_knows_its_data_end_through_appends_truncations_and_recovery(
    tmp_path: Path,
) -> None:
    config = WalConfig(segment_bytes=400, hwm_checkpoint_interval_ms=0)
    clock = Clock()
    with open_disk(tmp_path, config, clock) as storage:
        storage.append(LOG)
        assert [storage.data_end_offset(Offset(b)) for b in range(10)] == DATA_ENDS
        assert storage.data_end_offset(Offset(10)) == 10  # past the log end: unknown
        storage.sync()
        assert len(storage.segment_paths()) > 2  # recovery trusts some without a scan
    with open_disk(tmp_path, config, clock) as storage:
        assert [storage.data_end_offset(Offset(b)) for b in range(10)] == DATA_ENDS
        storage.truncate_to(offset=Offset(8))
        assert storage.data_end_offset(Offset(8)) == 8
        storage.append([control(8, 5), control(9, 6)])  # two failovers, no data
        assert storage.data_end_offset(Offset(10)) == 8
        storage.append([data(10, 1, 6)])
        assert storage.data_end_offset(Offset(11)) == 11
        storage.save_hwm(Offset(11))
        storage.advance_log_start(Offset(9))
        assert storage.data_end_offset(Offset(10)) == 9  # never below the log start


def test_a_run_of_control_batches_below_what_recovery_scanned_is_read_once(
    tmp_path: Path,
) -> None:
    """Each failover's control batch alone in a segment (rolled by age): recovery scans the
    last segment only; the data end reads the headers below it, once."""
    config = WalConfig(segment_ms=100, hwm_checkpoint_interval_ms=0)
    clock = Clock()
    with open_disk(tmp_path, config, clock) as storage:
        storage.append([data(0, 3, 1)])
        for offset, epoch in ((3, 2), (4, 3), (5, 4)):
            clock.now_ms += 100
            storage.append([control(offset, epoch)])
        storage.sync()
        assert len(storage.segment_paths()) == 4
    with open_disk(tmp_path, config, clock) as storage:
        assert storage.data_end_offset(Offset(6)) == 3
        for path in storage.segment_paths()[1:3]:
            Path(path).write_bytes(b"")  # the headers already read are not read again
        assert storage.data_end_offset(Offset(6)) == 3
        assert storage.data_end_offset(Offset(4)) == 3


def data_end_read(storage: DiskStorage, below: int) -> int:
    """The data end below `below` from every batch the log holds (`data_end_offset`'s
    contract, the slow way)."""
    start = storage.log_start_offset
    batches = storage.read(start, end_offset=storage.log_end_offset, max_bytes=1 << 30)
    ending = {read_header(batch).next_offset: read_header(batch) for batch in batches}
    end = below
    while end > start and end in ending and ending[end].is_control:  # else inside data
        end = max(ending[end].base_offset, start)
    return end


def test_the_data_end_is_the_one_the_log_holds_through_random_histories(
    tmp_path: Path,
) -> None:
    """Appends of data and control batches, syncs, truncations, log start moves and
    reopens (recovery trusts the segments below its recovery point without a scan), in
    small segments: after each, the data end below every offset is what reading the whole
    log says. A failure names its seed."""
    config = WalConfig(segment_bytes=300, hwm_checkpoint_interval_ms=0)
    for seed in range(SEEDS):
        rng = random.Random(seed)
        path = tmp_path / str(seed)
        storage = open_disk(path, config, Clock())
        epoch, hwm = 1, 0
        try:
            for _ in range(STEPS):
                step = rng.choice(["append", "append", "append", "sync", "cut", "start", "reopen"])
                end = storage.log_end_offset
                if step == "append":
                    if rng.random() < 0.4:
                        epoch += 1
                        storage.append([control(end, epoch)])
                    else:
                        storage.append([data(end, rng.randint(1, 3), epoch)])
                elif step == "sync":
                    storage.sync()
                elif step == "cut":
                    batches = storage.read(Offset(hwm), end_offset=end, max_bytes=1 << 30)
                    bases = [
                        read_header(b).base_offset
                        for b in batches
                        if read_header(b).base_offset >= hwm
                    ]
                    if bases:
                        storage.truncate_to(offset=rng.choice(bases))
                elif step == "start" and end > hwm:
                    hwm = rng.randint(hwm, end)
                    storage.save_hwm(Offset(hwm))
                    storage.advance_log_start(Offset(rng.randint(storage.log_start_offset, hwm)))
                elif step == "reopen":
                    storage.close()
                    storage = open_disk(path, config, Clock())
                low, high = storage.log_start_offset, storage.log_end_offset
                for below in range(low, high + 1):
                    found = storage.data_end_offset(Offset(below))
                    assert found == data_end_read(storage, below), (seed, step, below)
        finally:
            storage.close()


def test_the_lag_of_the_broker_and_of_groups_describe() -> None:
    # committed, log start, data end -> lag: the same in both.
    for committed, log_start, data_end, lag in [
        (8, 0, 8, 0),  # read every data record, control batches above it
        (5, 0, 8, 3),
        (9, 0, 8, 0),  # past the data end (it read past a control batch): never negative
        (2, 6, 8, 2),  # below the log start: counted from there
    ]:
        assert group_lag(committed, log_start_offset=log_start, data_end=data_end) == lag
        assert groups_cmd.lag_of(committed, log_start, data_end) == lag
    assert groups_cmd.lag_of(None, 0, 8) is None
    # What groups describe reads to find the data end: the top of [max(committed, log
    # start), HWM), LAG_READ_MAX offsets at most.
    most = groups_cmd.LAG_READ_MAX
    assert groups_cmd.to_read(None, 0, 9) is None
    assert groups_cmd.to_read(9, 0, 9) is None  # nothing to read: lag 0
    assert groups_cmd.to_read(10, 0, 9) is None
    assert groups_cmd.to_read(8, 0, 9) == (8, 9)
    assert groups_cmd.to_read(2, 6, 9) == (6, 9)
    assert groups_cmd.to_read(0, 0, most) == (0, most)
    assert groups_cmd.to_read(0, 0, most + 5) == (5, most + 5)


# --- a failover after the group stopped --------------------------------------------------

FAILOVER_TOPIC = "idle"
GROUP = "idle-reader"


def described(bootstrap: str, *, settled: bool = True) -> dict[str, Any] | None:
    """GROUP's row of `groups describe --json`; None when it fails and the cluster may not
    have `settled` since a node was killed (no new leader or coordinator yet)."""
    result = tidelog("groups", "describe", GROUP, "--json", "--bootstrap-server", bootstrap)
    if result.returncode != 0 and not settled:
        return None
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)["offsets"]
    return dict(row)


def described_lag(bootstrap: str) -> object:
    row = described(bootstrap)
    assert row is not None
    return row["lag"]


def metric_lags(admins: list[str]) -> list[float]:
    """tidelog_consumer_group_lag of GROUP at every node that reports it (its coordinator)."""
    labels = {"group": GROUP, "topic": FAILOVER_TOPIC, "partition": 0}
    found = [sample(scrape(admin), "tidelog_consumer_group_lag", **labels) for admin in admins]
    return [lag for lag in found if lag is not None]


def page_lag(admin: str) -> tuple[int, int] | None:
    """(HWM, GROUP's lag) of the partition as the live page's picture from `admin` shows
    them; None when it does not show the group."""
    for topic in first_picture(admin)["topics"]:
        for row in topic["partitions"]:
            for group in row["groups"] if topic["topic"] == FAILOVER_TOPIC else []:
                if group["group"] == GROUP:
                    return int(row["hwm"]), int(group["lag"])
    return None


def test_an_idle_group_keeps_lag_0_through_a_failover(tmp_path: Path) -> None:
    """Read everything, stop; kill -9 the leader: the new leader's control batch moves the
    HWM one past the committed offset, and the lag stays 0 in groups describe, /metrics
    and the live page. One more record counts everywhere: lag 2, the record and the
    control batch below it (a control batch between the group and data counts, as in
    Kafka)."""
    cluster = LiveCluster(tmp_path / "cluster")
    try:
        write_records(cluster.bootstrap, FAILOVER_TOPIC)
        read = tidelog(
            "consume", FAILOVER_TOPIC, "--group", GROUP, "--from-beginning",
            "--timeout-ms", "2000", "--bootstrap-server", cluster.bootstrap,
        )  # fmt: skip
        assert read.returncode == 0 and len(read.stdout.split()) == RECORDS, read.stderr
        before = described(cluster.bootstrap)
        assert before is not None
        assert before["lag"] == 0 and before["log_end_offset"] == before["current_offset"]

        killed = cluster.leader_of(FAILOVER_TOPIC)
        result = tidelog(
            "cluster", "kill", "--data-dir", str(cluster.directory), "--node", str(killed)
        )
        assert result.returncode == 0, result.stderr
        admins = [n["admin"] for n in cluster.record["nodes"] if n["id"] != killed]
        committed = before["current_offset"]
        found: list[dict[str, Any]] = []

        def controlled() -> bool:
            row = described(cluster.bootstrap, settled=False)
            found[:] = [] if row is None else [row]
            return row is not None and row["log_end_offset"] == committed + 1

        eventually(controlled, "a new leader's control batch committed")
        [after] = found
        assert (after["current_offset"], after["lag"]) == (committed, 0), after
        eventually(lambda: metric_lags(admins) == [0], lambda: f"metrics: {metric_lags(admins)}")
        eventually(
            lambda: page_lag(admins[0]) == (committed + 1, 0),
            lambda: f"the live page: {page_lag(admins[0])}",
        )

        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        producer.send(FAILOVER_TOPIC, b"one more", partition=0).get(timeout=30)
        producer.close()
        eventually(lambda: described_lag(cluster.bootstrap) == 2, "one more record: lag 2")
        eventually(lambda: metric_lags(admins) == [2], lambda: f"metrics: {metric_lags(admins)}")
        eventually(
            lambda: page_lag(admins[0]) == (committed + 2, 2),
            lambda: f"the live page: {page_lag(admins[0])}",
        )
    finally:
        cluster.down()
