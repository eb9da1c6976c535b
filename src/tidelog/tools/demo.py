"""`tidelog demo`: the main job end to end on a real local cluster of 3 brokers.

The story: start 3 brokers, create topic `transfers` (3 partitions, replication factor 3),
produce numbered transfers with acks=all and the idempotent producer (confluent-kafka), kill
-9 the leader of partition 0 part-way, keep producing, restart the killed broker, read every
record back (kafka-python, partitions assigned, no consumer group) and check that every
acknowledged record is there exactly once, at the offset it was acknowledged at. Then the
pipeline on Spark (`tools/demo_pipeline.py`): balances per account from the committed
transfers, checked to the cent against the acknowledged ones.

The live page (`tidelog ui`) is named as soon as the cluster is up, for a person to watch.
When a headless Chromium can start (`tools/browser.py`), it watches the page of a node that
is not to be killed and saves a picture of it, `--data-dir`/ui.png, once the page shows the
killed node DOWN and another node leading its partition, while the HWM moves on.

Rules of this file:
- It owns one directory (--data-dir). It starts from a clean slate: it stops the brokers
  that directory's `cluster.json` lists and removes the directory, but only when the
  directory holds nothing but a cluster (`cluster.json`, `node-N/`); anything else there
  makes it refuse. At the end it stops the brokers of that `cluster.json` again, always:
  on success, failure, Ctrl-C and SIGTERM. It never signals any other process.
- Brokers start and stop through `tools/cluster.py`, so `cluster.json` always lists every
  broker the demo started, also one it restarted.
- Production is paced over PRODUCE_S so the faults land in the middle of the stream; the
  faults are stepped between sends (`FaultScript.step`), never blocking for long.
- The picture is a by-product: its browser runs in a thread of its own (`PageCamera`),
  cued, never waited for, until the production is done; a missing or failing browser is
  one line of output and never fails the demo.
- Only acknowledged records are claimed: one whose send failed may or may not be in the log,
  and is never counted as lost. Every wait has a named deadline.
- Exit status 0 only on a good verdict.
"""

from __future__ import annotations

import enum
import functools
import re
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final

import click
from rich.console import Console
from rich.table import Table

from tidelog.errors import TidelogError
from tidelog.spark.standalone import MASTER_ENV, SparkClusterError
from tidelog.spark.standalone import read_cluster as read_spark_cluster
from tidelog.status import access_for, read_status
from tidelog.tools.browser import Page, PageCamera, Shot, browser_missing, partition_of
from tidelog.tools.client import render_table
from tidelog.tools.client_kafka import (
    ClientError,
    ClientSettings,
    KafkaConsumer,
    PartitionMetadata,
    TopicPartition,
    UnknownTopic,
    admin_client,
    create_topic,
    describe_topics,
    kafka_errors,
)
from tidelog.tools.client_status import ReplicaStatus, replica_statuses
from tidelog.tools.cluster import (
    BASE_PORT_DEFAULT,
    CLUSTER_FILE,
    LOG_NAME,
    POLL_INTERVAL_S,
    ClusterError,
    ClusterRecord,
    NodeRecord,
    has_exited,
    log_tail,
    page_url,
    plan_cluster,
    ports_in_use,
    read_cluster,
    signal_node,
    start_node,
    start_stopped,
    stop_nodes,
    wait_until,
    write_cluster,
)
from tidelog.tools.demo_pipeline import PIPELINE_DIR, SparkPlace, Transfer, run_pipeline_stage

TOPIC: Final = "transfers"
PARTITIONS: Final = 3
REPLICATION_FACTOR: Final = 3
NODES: Final = 3
VICTIM_PARTITION: Final = 0
DATA_DIR_DEFAULT: Final = Path("data/demo")
SCREENSHOT: Final = "ui.png"
RECORDS_DEFAULT: Final = 20_000
RECORDS_MIN: Final = 100
ACCOUNTS: Final = 100

PRODUCE_S: Final = 8.0
"""Production is paced to take about this long, so the faults land mid-stream."""
KILL_AT_FRACTION: Final = 0.3
RESTART_AT_FRACTION: Final = 0.75
"""The live page shows a node DOWN 2 s after its last answer (`server/cluster_view.py`):
the killed node stays down about 3.6 s, long enough to be seen so, live and in the picture."""
PORT_RANGE_STEP: Final = 1_000
PORT_RANGE_TRIES_MAX: Final = 20
"""Without --base-port: try 9092, 10092, ... until a range is free, this many at most."""

READY_TIMEOUT_S: Final = 30.0
LEADERS_TIMEOUT_S: Final = 30.0
FAILOVER_TIMEOUT_S: Final = 30.0
FLUSH_TIMEOUT_S: Final = 60.0
CATCH_UP_TIMEOUT_S: Final = 30.0
CONSUME_TIMEOUT_S: Final = 60.0
EXIT_TIMEOUT_S: Final = 10.0
STATUS_PROBE_TIMEOUT_S: Final = 0.2
PRODUCER_POLL_S: Final = 0.005
CONSUMER_POLL_MS: Final = 200
CONSUMER_POLL_RECORDS_MAX: Final = 5_000
EXAMPLES_MAX: Final = 5
PIPED_WIDTH: Final = 120
EXIT_FAILED: Final = 1
EXIT_INTERRUPTED: Final = 130

_CLUSTER_ENTRY = re.compile(
    rf"(node-\d+|{PIPELINE_DIR}|{re.escape(SCREENSHOT)}|\.?{re.escape(CLUSTER_FILE)}(\.tmp)?)"
)


class DemoError(TidelogError):
    """The demo could not go on: a wait ran out (a failover, the producer's queue)."""


class DemoInterrupted(Exception):
    """SIGTERM arrived: unwind like Ctrl-C, so the cluster is stopped."""


# The cluster


def clear_directory(directory: Path) -> None:
    """Stop what `directory/cluster.json` lists and remove `directory`; refuse (ClusterError)
    when it holds anything but a cluster."""
    if not directory.exists():
        return
    if not directory.is_dir():
        raise ClusterError(f"{directory} is not a directory")
    strangers = sorted(p.name for p in directory.iterdir() if not _CLUSTER_ENTRY.fullmatch(p.name))
    if strangers:
        named = ", ".join(strangers[:EXAMPLES_MAX])
        raise ClusterError(f"{directory} holds more than a cluster ({named}); not removing it")
    if (directory / CLUSTER_FILE).exists():
        stop_nodes(list(read_cluster(directory).nodes))
    shutil.rmtree(directory)


def plan_demo_cluster(directory: Path, base_port: int | None) -> ClusterRecord:
    """The cluster to start: on --base-port, else on the first free range from 9092."""
    if base_port is not None:
        return plan_cluster(directory, nodes=NODES, base_port=base_port)
    for attempt in range(PORT_RANGE_TRIES_MAX):
        port = BASE_PORT_DEFAULT + attempt * PORT_RANGE_STEP
        record = plan_cluster(directory, nodes=NODES, base_port=port)
        if not ports_in_use(list(record.nodes)):
            return record
    raise ClusterError(f"no free port range found from {BASE_PORT_DEFAULT}; use --base-port")


def stop_cluster(directory: Path) -> list[int]:
    """Stop every broker `directory/cluster.json` lists; the ids stopped."""
    if not (directory / CLUSTER_FILE).exists():
        return []
    return stop_nodes(list(read_cluster(directory).nodes))


def restart_node(directory: Path, record: ClusterRecord, node_id: int) -> ClusterRecord:
    """Start a killed node again with the same flags (not waiting until it is ready)."""
    node = record.node(node_id)
    if not wait_until(lambda: has_exited(node.pid), timeout_s=EXIT_TIMEOUT_S):
        raise ClusterError(f"node {node_id} (pid {node.pid}) did not exit")
    busy = ports_in_use([node])
    if busy:
        raise ClusterError(f"address(es) already in use: {', '.join(busy)}")
    record = record.with_pid(node_id, start_node(record, node))
    write_cluster(directory, record)
    return record


def wait_for_broker_lists(record: ClusterRecord) -> None:
    """Poll until every broker's Metadata lists every broker.

    A broker reports ready once the metadata log has a leader, but learns the other
    brokers' Kafka ports only from their notices over the peer links: until then its
    Metadata can name a controller its broker list lacks, and kafka-python's admin client
    fails with UnknownBrokerIdError. ClusterError after LEADERS_TIMEOUT_S."""
    deadline = time.monotonic() + LEADERS_TIMEOUT_S
    waiting = list(record.nodes)
    last_error = ""
    while waiting:
        try:
            with admin_client(ClientSettings(waiting[0].kafka)) as admin:
                listed = len(admin.describe_cluster()["brokers"])
        except ClientError as error:
            listed, last_error = 0, str(error)
        if listed == len(record.nodes):
            waiting.pop(0)
            continue
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"node {waiting[0].id}'s Metadata lists {listed} of {len(record.nodes)} "
                f"brokers after {LEADERS_TIMEOUT_S:g} s {last_error}".rstrip()
            )
        time.sleep(POLL_INTERVAL_S)


def is_ready(node: NodeRecord) -> bool:
    """Whether the node answers /status with ready; ClusterError when it exited."""
    if has_exited(node.pid):
        raise ClusterError(
            f"node {node.id} exited; {Path(node.data_dir) / LOG_NAME} ends:\n{log_tail(node)}"
        )
    status = read_status(node.admin, timeout_s=STATUS_PROBE_TIMEOUT_S)
    return status is not None and status.get("ready") is True


# The topic as clients and brokers see it


Statuses = dict[tuple[str, int, int], ReplicaStatus]


@dataclass(frozen=True)
class TopicView:
    """The topic's partitions (Metadata API) and each replica's own /status."""

    partitions: list[PartitionMetadata]
    statuses: Statuses

    def leader(self, partition: int) -> int:
        return next(p.leader for p in self.partitions if p.partition == partition)

    def leader_status(self, partition: int) -> ReplicaStatus | None:
        return self.statuses.get((TOPIC, partition, self.leader(partition)))


def view_topic(record: ClusterRecord) -> TopicView:
    partitions = describe_topics(ClientSettings(record.bootstrap), [TOPIC])
    return TopicView(partitions, replica_statuses([node.admin for node in record.nodes]))


def wait_for_leaders(record: ClusterRecord) -> TopicView:
    """Poll until every partition has a leader that reports itself as one."""
    deadline = time.monotonic() + LEADERS_TIMEOUT_S
    while True:
        try:
            view = view_topic(record)
        except UnknownTopic:  # the brokers have not all learnt of it yet
            view = TopicView([], {})
        leaders = [view.leader_status(p.partition) for p in view.partitions]
        if view.partitions and all(s is not None and s.role == "leader" for s in leaders):
            return view
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"{TOPIC}: not every partition has a leader after {LEADERS_TIMEOUT_S:g} s"
            )
        time.sleep(POLL_INTERVAL_S)


def is_converged(record: ClusterRecord) -> bool:
    """Every replica of every partition reports the leader's epoch, HWM and log end.

    False also while a broker cannot describe the topic yet (just restarted)."""
    try:
        view = view_topic(record)
    except ClientError:
        return False
    for p in view.partitions:
        leader = view.leader_status(p.partition)
        if leader is None or leader.hwm != leader.log_end_offset:
            return False
        for node_id in p.replicas:
            copy = view.statuses.get((TOPIC, p.partition, node_id))
            if copy is None:
                return False
            facts = (copy.epoch, copy.hwm, copy.log_end_offset)
            if facts != (leader.epoch, leader.hwm, leader.log_end_offset):
                return False
    return True


def print_moves(console: Console, before: TopicView, after: TopicView) -> None:
    """Per partition, leader, epoch, HWM and log end offset before and after."""
    table = Table(title="what moved (leader's view)", title_justify="left")
    for column in ("PARTITION", "LEADER", "EPOCH", "HIGH-WATERMARK", "LOG-END-OFFSET"):
        table.add_column(column)
    for p in after.partitions:
        old, new = before.leader_status(p.partition), after.leader_status(p.partition)
        table.add_row(
            str(p.partition),
            f"{before.leader(p.partition)} -> {p.leader}",
            *(arrow(old, new, fact) for fact in ("epoch", "hwm", "log_end_offset")),
        )
    console.print(table)


def arrow(old: ReplicaStatus | None, new: ReplicaStatus | None, fact: str) -> str:
    """`OLD -> NEW` of one field of two replica states (`?` for an unknown one)."""
    before = "?" if old is None else str(getattr(old, fact))
    after = "?" if new is None else str(getattr(new, fact))
    return f"{before} -> {after}"


def print_describe(console: Console, directory: Path, view: TopicView) -> None:
    """What `tidelog topics describe transfers --table` prints for this cluster."""
    console.print(f"$ TIDELOG_DATA_DIR={directory} tidelog topics describe {TOPIC} --table")
    render_table(view.partitions, view.statuses)


# Producing, with the faults stepped between sends


def transfer_parts(number: int) -> Transfer:
    """Transfer `number`: (paying account, paid account, amount in cents)."""
    payer, payee = number * 37 % ACCOUNTS, (number * 61 + 17) % ACCOUNTS
    return f"acct-{payer:03d}", f"acct-{payee:03d}", number * 7919 % 100_000


def transfer(number: int) -> tuple[bytes, bytes]:
    """Record `number`: key the paying account, value `transfer NUMBER FROM -> TO AMOUNT`."""
    payer, payee, cents = transfer_parts(number)
    value = f"transfer {number:07d} {payer} -> {payee} {cents // 100}.{cents % 100:02d}"
    return payer.encode(), value.encode()


def number_of(value: bytes | None) -> int | None:
    """The record number in a value `transfer` made, or None for anything else."""
    words = (value or b"").split(b" ")
    if len(words) < 2 or words[0] != b"transfer" or not words[1].isdigit():
        return None
    return int(words[1])


@dataclass
class Ledger:
    """What the producer was told about each record number."""

    acked: dict[int, tuple[int, int]] = field(default_factory=dict)  # -> (partition, offset)
    failed: dict[int, str] = field(default_factory=dict)
    watch_from: int | None = None  # the first record sent after the kill
    resumed_at: float | None = None  # when the victim partition acknowledged one of those

    def on_delivery(self, number: int, error: Any, message: Any) -> None:
        """confluent-kafka's delivery callback (run inside poll and flush)."""
        if error is not None:
            self.failed[number] = str(error)
            return
        self.acked[number] = (message.partition(), message.offset())
        watching = self.watch_from is not None and number >= self.watch_from
        if watching and self.resumed_at is None and message.partition() == VICTIM_PARTITION:
            self.resumed_at = time.monotonic()


class PacedProducer:
    """An acks=all idempotent confluent-kafka producer sending `records` at a steady rate."""

    def __init__(self, bootstrap: str, *, records: int) -> None:
        from confluent_kafka import Producer  # noqa: PLC0415 - a dev dependency

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": int(FLUSH_TIMEOUT_S * 1000),
                "retry.backoff.ms": 50,
                # librdkafka logs every refused connection to the killed broker; the
                # demo tells that story itself.
                "log_level": 0,
            }
        )
        self.records = records
        self.rate_per_s = records / PRODUCE_S
        self.ledger = Ledger()
        self.sent = 0
        self.started = time.monotonic()

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def send_next(self) -> None:
        """Send the next record once its time has come (paced), then serve callbacks."""
        while self.sent > self.elapsed_s() * self.rate_per_s:
            self.producer.poll(PRODUCER_POLL_S)
        key, value = transfer(self.sent)
        deliver = functools.partial(self.ledger.on_delivery, self.sent)
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        while True:
            try:
                self.producer.produce(TOPIC, key=key, value=value, on_delivery=deliver)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                if time.monotonic() >= deadline:
                    raise DemoError(
                        f"the producer's queue stayed full for {FLUSH_TIMEOUT_S:g} s"
                    ) from None
                self.producer.poll(PRODUCER_POLL_S)
        self.sent += 1
        self.producer.poll(0)

    def pending(self) -> int:
        return self.sent - len(self.ledger.acked) - len(self.ledger.failed)


class Stage(enum.Enum):
    """Where the fault script is; the value is what a stage that times out waited for."""

    RUNNING = "the kill"
    KILLED = "a write acknowledged by a new leader"
    FAILED_OVER = "the restart"
    RESTARTING = "the restarted node to be ready"
    DONE = "nothing"


class FaultScript:
    """The faults, stepped between sends; `step` never blocks for long.

    Once KILL_AT records were sent, SIGKILL the leader of the victim partition. Once that
    partition acknowledged a record sent after the kill, and RESTART_AT records were sent,
    start the killed node again; then poll until it is ready. A stage that waits longer than
    its deadline raises DemoError (or ClusterError when the node exits). `on_kill(victim)`
    is called right after the kill and must not block."""

    def __init__(
        self,
        console: Console,
        directory: Path,
        record: ClusterRecord,
        producer: PacedProducer,
        *,
        on_kill: Callable[[int], None] = lambda victim: None,
    ) -> None:
        self.console = console
        self.on_kill = on_kill
        self.directory = directory
        self.record = record
        self.producer = producer
        self.kill_at = int(producer.records * KILL_AT_FRACTION)
        self.restart_at = int(producer.records * RESTART_AT_FRACTION)
        self.stage = Stage.RUNNING
        self.victim = 0
        self.killed_at = 0.0
        self.stage_deadline = 0.0
        self.next_probe = 0.0

    @property
    def done(self) -> bool:
        return self.stage is Stage.DONE

    def say(self, message: str) -> None:
        ledger, producer = self.producer.ledger, self.producer
        self.console.print(
            f"  {producer.elapsed_s():5.2f} s  sent {producer.sent:>6}  "
            f"acked {len(ledger.acked):>6}  {message}"
        )

    def step(self) -> None:
        now = time.monotonic()
        if self.stage is Stage.RUNNING and self.producer.sent >= self.kill_at:
            self.kill_leader()
        elif self.stage is Stage.KILLED and self.producer.ledger.resumed_at is not None:
            self.report_failover()
        elif self.stage is Stage.FAILED_OVER and self.producer.sent >= self.restart_at:
            self.record = restart_node(self.directory, self.record, self.victim)
            self.say(f"restart node {self.victim} (pid {self.record.node(self.victim).pid})")
            self.stage, self.stage_deadline = Stage.RESTARTING, now + READY_TIMEOUT_S
        elif self.stage is Stage.RESTARTING and now >= self.next_probe:
            self.next_probe = now + POLL_INTERVAL_S
            if is_ready(self.record.node(self.victim)):
                self.say(f"node {self.victim} is ready again and catches up as a follower")
                self.stage = Stage.DONE
        if self.stage in (Stage.KILLED, Stage.RESTARTING) and now >= self.stage_deadline:
            raise DemoError(
                f"waited {self.stage_deadline - self.killed_at:.0f} s after killing node "
                f"{self.victim} for {self.stage.value}; the node logs are "
                f"{self.directory}/node-N/{LOG_NAME}"
            )

    def kill_leader(self) -> None:
        self.victim = view_topic(self.record).leader(VICTIM_PARTITION)
        node = self.record.node(self.victim)
        if not signal_node(node, signal.SIGKILL):
            raise ClusterError(f"node {self.victim} was not running when it was to be killed")
        self.killed_at = time.monotonic()
        self.producer.ledger.watch_from = self.producer.sent
        self.on_kill(self.victim)
        self.say(
            f"kill -9 node {self.victim} (pid {node.pid}), leader of {TOPIC}-{VICTIM_PARTITION}; "
            f"{self.producer.pending()} records in flight"
        )
        self.stage, self.stage_deadline = Stage.KILLED, self.killed_at + FAILOVER_TIMEOUT_S

    def report_failover(self) -> None:
        resumed_at = self.producer.ledger.resumed_at
        assert resumed_at is not None
        survivors = [node.admin for node in self.record.nodes if node.id != self.victim]
        statuses = replica_statuses(survivors)
        leaders = [
            f"node {node_id}, epoch {status.epoch}"
            for (topic, partition, node_id), status in sorted(statuses.items())
            if (topic, partition) == (TOPIC, VICTIM_PARTITION) and status.role == "leader"
        ]
        self.say(
            f"{TOPIC}-{VICTIM_PARTITION} takes writes again {resumed_at - self.killed_at:.2f} s "
            f"after the kill; leader: {'; '.join(leaders) or 'not reported yet'}"
        )
        self.stage = Stage.FAILED_OVER


def produce_with_faults(producer: PacedProducer, script: FaultScript) -> None:
    """Send every record while stepping the faults, finish the faults, then flush."""
    while producer.sent < producer.records:
        producer.send_next()
        script.step()
    while not script.done:  # each stage has a deadline of its own
        producer.producer.poll(PRODUCER_POLL_S)
        script.step()
    producer.producer.flush(FLUSH_TIMEOUT_S)
    ledger = producer.ledger
    script.say(f"flushed: {len(ledger.failed)} failed, {producer.pending()} unsettled")


# The picture of the live page


def open_camera(directory: Path) -> PageCamera | None:
    """A started camera for `directory`/ui.png; None when no headless Chromium can start."""
    if browser_missing() is not None:
        return None
    camera = PageCamera(directory / SCREENSHOT)
    camera.start()
    return camera


def watch_survivor(
    camera: PageCamera | None, directory: Path, record: ClusterRecord, view: TopicView
) -> None:
    """Point the camera at the page of a node that does not lead the victim partition, so
    the page stays up when that leader is killed."""
    if camera is None:
        return
    leader = view.leader(VICTIM_PARTITION)
    node = next(node for node in record.nodes if node.id != leader)
    camera.watch(page_url(node.admin, access_for(directory)))


def shows_failover(page: Page, *, victim: int) -> bool:
    """Whether the page shows node `victim` DOWN, its replica of the victim partition as it
    was last seen, and another node leading that partition: the moment of the picture."""
    row = partition_of(page, TOPIC, VICTIM_PARTITION)
    if row is None or row["leader"] in (None, str(victim)):
        return False
    frozen = [r for r in row["replicas"] if r["node"] == victim and r["role"] is not None]
    return bool(frozen) and frozen[0]["state"] == "down"


def aim_at_failover(camera: PageCamera | None) -> Callable[[int], None]:
    """FaultScript's `on_kill`: the camera waits for the page to show the failover."""
    if camera is None:
        return lambda victim: None
    return lambda victim: camera.aim(functools.partial(shows_failover, victim=victim))


def skipped_line(missing: str) -> str:
    """The line of a demo without a browser: what is missing, and what installs it."""
    installers = {"make chromium": "chrom" in missing, "make install": "selenium" in missing}
    how = " and ".join(f"`{target}`" for target, needed in installers.items() if needed)
    return f"screenshot of the live page skipped (no {missing}): {how or '`make chromium`'}"


def shot_line(camera: PageCamera | None) -> str:
    """One line on the picture: where it is, or why there is none and how to get one."""
    if camera is None:
        return skipped_line(browser_missing() or "browser")
    shot: Shot = camera.finish()
    if shot.path is None:
        return f"screenshot of the live page skipped: {shot.note}"
    return f"the live page, mid-demo: {shot.path}" + (f" ({shot.note})" if shot.note else "")


# Reading back and judging


Read = tuple[int, int, bytes | None]  # (partition, offset, value)


def read_back(bootstrap: str) -> list[Read]:
    """Every record of the topic up to each partition's HWM at the start (kafka-python,
    partitions assigned: no consumer group)."""
    partitions = [TopicPartition(TOPIC, n) for n in range(PARTITIONS)]
    reads: list[Read] = []
    with kafka_errors(ClientSettings(bootstrap)):
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, client_id="tidelog-demo"
        )
        try:
            consumer.assign(partitions)
            consumer.seek_to_beginning(*partitions)
            ends = consumer.end_offsets(partitions)
            deadline = time.monotonic() + CONSUME_TIMEOUT_S
            while any(consumer.position(tp) < ends[tp] for tp in partitions):
                if time.monotonic() >= deadline:
                    raise DemoError(f"reading back took longer than {CONSUME_TIMEOUT_S:g} s")
                polled = consumer.poll(
                    timeout_ms=CONSUMER_POLL_MS, max_records=CONSUMER_POLL_RECORDS_MAX
                )
                for tp, batch in polled.items():
                    reads.extend((tp.partition, r.offset, r.value) for r in batch)
        finally:
            consumer.close()
    return reads


@dataclass(frozen=True)
class Verdict:
    """What was read against what was acknowledged. Sends that failed or never settled
    are not claimed either way: they may or may not be in the log."""

    acknowledged: int
    read: int
    lost: list[int]  # acknowledged, never read
    duplicated: list[int]  # read more than once
    misplaced: list[int]  # read, but not at the offset acknowledged
    foreign: int  # read, but never sent
    unacknowledged: int  # sends that failed or never settled
    converged: bool  # every replica ended with the leader's epoch, HWM and log end

    @property
    def ok(self) -> bool:
        clean = not (self.lost or self.duplicated or self.misplaced or self.foreign)
        return clean and self.unacknowledged == 0 and self.converged

    def line(self) -> str:
        counts = (
            f"{self.acknowledged} acknowledged, {self.read} read, "
            f"{len(self.lost)} lost, {len(self.duplicated)} duplicated"
        )
        problems = [
            f"{len(self.misplaced)} at another offset than acknowledged" if self.misplaced else "",
            f"{self.foreign} never sent" if self.foreign else "",
            f"{self.unacknowledged} sends not acknowledged" if self.unacknowledged else "",
            "" if self.converged else "replicas did not converge",
        ]
        if self.ok:
            return f"verdict: OK — {counts}"
        return f"verdict: FAILED — {', '.join([counts, *filter(None, problems)])}"


def judge(ledger: Ledger, reads: list[Read], *, sent: int, converged: bool) -> Verdict:
    places: dict[int, list[tuple[int, int]]] = {}
    foreign = 0
    for partition, offset, value in reads:
        number = number_of(value)
        if number is None or not 0 <= number < sent:
            foreign += 1
            continue
        places.setdefault(number, []).append((partition, offset))
    return Verdict(
        acknowledged=len(ledger.acked),
        read=len(reads),
        lost=sorted(n for n in ledger.acked if n not in places),
        duplicated=sorted(n for n, found in places.items() if len(found) > 1),
        misplaced=sorted(
            n for n, at in ledger.acked.items() if n in places and at not in places[n]
        ),
        foreign=foreign,
        unacknowledged=sent - len(ledger.acked),
        converged=converged,
    )


def print_verdict(console: Console, verdict: Verdict, ledger: Ledger) -> None:
    for name, numbers in (
        ("lost", verdict.lost),
        ("duplicated", verdict.duplicated),
        ("at another offset", verdict.misplaced),
    ):
        if numbers:
            shown = ", ".join(str(n) for n in numbers[:EXAMPLES_MAX])
            console.print(
                f"  {name}: records {shown}{' ...' if len(numbers) > EXAMPLES_MAX else ''}"
            )
    for number, error in list(ledger.failed.items())[:EXAMPLES_MAX]:
        console.print(f"  send of record {number} failed: {error}")
    style = "bold green" if verdict.ok else "bold red"
    console.print(verdict.line(), style=style)


# The story


def start_cluster(console: Console, directory: Path, base_port: int | None) -> ClusterRecord:
    console.rule(f"1 · Start a local cluster of {NODES} brokers in {directory}")
    record = plan_demo_cluster(directory, base_port)
    directory.mkdir(parents=True)
    record = start_stopped(directory, record, timeout_s=READY_TIMEOUT_S)
    table = Table("NODE", "PID", "KAFKA", "PEERS", "ADMIN")
    for node in record.nodes:
        table.add_row(str(node.id), str(node.pid), node.kafka, node.peer, node.admin)
    console.print(table)
    console.print(f"each node's log: {directory}/node-N/{LOG_NAME}")
    console.print(f"watch it live: {page_url(record.nodes[0].admin, access_for(directory))}")
    wait_for_broker_lists(record)
    return record


def create_demo_topic(console: Console, directory: Path, record: ClusterRecord) -> TopicView:
    console.rule(
        f"2 · Create topic {TOPIC}: {PARTITIONS} partitions, replication factor "
        f"{REPLICATION_FACTOR}"
    )
    create_topic(
        ClientSettings(record.bootstrap),
        TOPIC,
        partitions=PARTITIONS,
        replication_factor=REPLICATION_FACTOR,
        configs={},
    )
    view = wait_for_leaders(record)
    print_describe(console, directory, view)
    return view


def show_after(console: Console, directory: Path, record: ClusterRecord, before: TopicView) -> bool:
    """Wait until the replicas converge, show the topic; whether they converged."""
    console.rule("4 · After the restart: every replica back in step")
    converged = wait_until(lambda: is_converged(record), timeout_s=CATCH_UP_TIMEOUT_S)
    after = view_topic(record)
    print_describe(console, directory, after)
    print_moves(console, before, after)
    if not converged:
        console.print(f"replicas did not converge within {CATCH_UP_TIMEOUT_S:g} s", style="red")
    return converged


def run_demo(
    console: Console,
    directory: Path,
    *,
    records: int,
    base_port: int | None,
    place: SparkPlace | None = None,
) -> bool:
    """The whole story; whether both verdicts (brokers, then the Spark pipeline) are OK."""
    camera = open_camera(directory)  # its browser starts while the brokers do
    try:
        record = start_cluster(console, directory, base_port)
        return run_story(console, directory, record, camera, records=records, place=place)
    finally:
        if camera is not None:  # quit its browser on every path
            camera.finish()


def run_story(
    console: Console,
    directory: Path,
    record: ClusterRecord,
    camera: PageCamera | None,
    *,
    records: int,
    place: SparkPlace | None = None,
) -> bool:
    """From the topic's creation to the pipeline's verdict (the cluster is up)."""
    before = create_demo_topic(console, directory, record)
    watch_survivor(camera, directory, record, before)
    console.rule(
        f"3 · Produce {records} transfers; kill -9 the leader of {TOPIC}-{VICTIM_PARTITION}"
    )
    console.print(
        f"confluent-kafka, acks=all, idempotent, paced over ~{PRODUCE_S:g} s so the kill lands\n"
        "mid-stream. A record counts as written once its acknowledgement arrives."
    )
    producer = PacedProducer(record.bootstrap, records=records)
    script = FaultScript(console, directory, record, producer, on_kill=aim_at_failover(camera))
    produce_with_faults(producer, script)
    console.print(shot_line(camera), soft_wrap=True)
    converged = show_after(console, directory, script.record, before)
    console.rule("5 · Read everything back and check")
    console.print(
        "kafka-python, partitions assigned (no consumer group), up to the HWM. Every\n"
        "acknowledged record must be there once, at the offset it was acknowledged at."
    )
    reads = read_back(script.record.bootstrap)
    verdict = judge(producer.ledger, reads, sent=producer.sent, converged=converged)
    print_verdict(console, verdict, producer.ledger)
    if not verdict.ok:
        console.print("the Spark pipeline is skipped: the log itself failed its check")
        return False
    acknowledged = [transfer_parts(number) for number in sorted(producer.ledger.acked)]
    stage = run_pipeline_stage(
        console,
        script.record.bootstrap,
        directory,
        topic=TOPIC,
        transfers=acknowledged,
        place=place,
    )
    return stage.ok


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise DemoInterrupted


def finish(console: Console, directory: Path) -> None:
    """Stop the demo's brokers; a second Ctrl-C meanwhile is ignored."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        stopped = stop_cluster(directory)
    except ClusterError as error:
        console.print(f"error: cannot stop the cluster: {error}", style="bold red")
        return
    finally:
        signal.signal(signal.SIGINT, previous)
    names = ", ".join(str(node_id) for node_id in stopped) or "none running"
    console.print(f"stopped nodes: {names}; the logs stay in {directory}/node-N/{LOG_NAME}")


@click.command("demo")
@click.option(
    "--data-dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=DATA_DIR_DEFAULT,
    show_default=True,
    help="The demo cluster's directory; removed first if it holds only a cluster.",
)
@click.option(
    "--records",
    type=click.IntRange(min=RECORDS_MIN),
    default=RECORDS_DEFAULT,
    show_default=True,
    help="How many transfers to produce.",
)
@click.option(
    "--base-port",
    type=click.IntRange(min=1, max=65535),
    default=None,
    help="First Kafka port (default: 9092, or the next free range of 1000 above it).",
)
@click.option(
    "--spark-master",
    envvar=MASTER_ENV,
    default=None,
    help=f"Run the Spark pipeline on this master: spark://HOST:PORT (env {MASTER_ENV}); "
    "default local[2], or --spark-cluster's.",
)
@click.option(
    "--spark-cluster",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Run the Spark pipeline on the standalone cluster `tidelog spark cluster up` "
    "started in this directory.",
)
@click.option(
    "--kill-executor",
    is_flag=True,
    help="Kill one executor JVM of --spark-cluster with SIGKILL in the middle of a "
    "micro-batch: the query must go on, exact.",
)
def demo(
    *,
    directory: Path,
    records: int,
    base_port: int | None,
    spark_master: str | None,
    spark_cluster: Path | None,
    kill_executor: bool,
) -> None:
    """Run the main job end to end on a local 3-node cluster, kill -9 a leader, check.

    Exits 0 only when every acknowledged record is read back exactly once, at the offset
    it was acknowledged at, every replica converges, and the Spark pipeline's balances equal
    those of the acknowledged transfers. The cluster is stopped at the end,
    also on failure, Ctrl-C or SIGTERM.
    """
    place = spark_place(spark_master, spark_cluster, kill_executor=kill_executor)
    console, errors = Console(highlight=False), Console(stderr=True, highlight=False)
    if not console.is_terminal:  # piped: a fixed width, wide enough for every line
        console = Console(highlight=False, width=PIPED_WIDTH)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    status, owned = EXIT_FAILED, False
    try:
        clear_directory(directory)
        owned = True
        ok = run_demo(console, directory, records=records, base_port=base_port, place=place)
        status = 0 if ok else EXIT_FAILED
    except (KeyboardInterrupt, DemoInterrupted):
        errors.print("interrupted", style="bold red")
        status = EXIT_INTERRUPTED
    except TidelogError as error:
        errors.print(f"error: {error}", style="bold red", markup=False)
    finally:
        if owned:
            finish(console, directory)
        signal.signal(signal.SIGTERM, previous)
    if status:
        raise SystemExit(status)


def spark_place(master: str | None, cluster_dir: Path | None, *, kill_executor: bool) -> SparkPlace:
    """Where the pipeline runs, from the options; click's usage error (exit 2) for options
    that do not go together or a cluster directory without a cluster."""
    if cluster_dir is None:
        if kill_executor:
            raise click.UsageError("--kill-executor needs --spark-cluster DIR")
        return SparkPlace(master=master)
    try:
        cluster = read_spark_cluster(cluster_dir)
    except SparkClusterError as error:
        raise click.UsageError(str(error)) from None
    if master is not None and master != cluster.master_url:
        raise click.UsageError(
            f"--spark-master {master} is not the master of --spark-cluster ({cluster.master_url})"
        )
    return SparkPlace(master=cluster.master_url, kill_in=cluster if kill_executor else None)
