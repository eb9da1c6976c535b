"""The compatibility matrix, beside kafka-python, confluent-kafka and kcat: Kafka clients
from npm written independently of those and of each other, each with its own protocol code
in JavaScript (CLIENTS; compat/node, pinned by its package-lock.json, installed by `make
node-clients`). Small Node scripts (compat/node/*.mjs) drive each against one live 3-node
cluster: produce (acks=all, keys, headers, two partitions), consume it back exactly, a
consumer group that ends at lag 0, admin (create, list, describe, add partitions, delete),
offsets by time, and a leader killed with SIGKILL (`tidelog cluster kill`) while the client
produces. What a client itself gets wrong is in the compatibility matrix
(docs/compatibility.md), and asserted here as that client's own behaviour, not worked around.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from tidelog.testing.live import (
    LiveCluster,
    create_topic,
    dump_log,
    eventually,
    poll,
    tidelog,
)

NODE_DIR = Path(__file__).resolve().parent.parent / "compat" / "node"
RUN_S = 60.0  # one script's run; each script also stops itself at its --timeout-ms
RECORDS = 200
TIMESTAMP_BASE = 1_700_000_000_000


@dataclass(frozen=True)
class Client:
    name: str
    script: str
    # What a lookup by a timestamp past the last record answers: Kafka's ListOffsets says
    # -1; kafkajs's fetchTopicOffsetsByTimestamp puts the partition's end offset instead.
    past_the_end_is_end_offset: bool


CLIENTS = [
    Client("kafkajs", "kafkajs.mjs", past_the_end_is_end_offset=True),
    Client("platformatic", "platformatic.mjs", past_the_end_is_end_offset=False),
]


@pytest.fixture(params=CLIENTS, ids=[client.name for client in CLIENTS])
def client(request: pytest.FixtureRequest) -> Client:
    return request.param  # type: ignore[no-any-return]


def node_command(client: Client, command: str, cluster: LiveCluster, *args: str) -> list[str]:
    node = shutil.which("node")
    assert node is not None and (NODE_DIR / "node_modules").is_dir(), "run `make node-clients`"
    return [
        node, str(NODE_DIR / client.script), command, "--bootstrap", cluster.bootstrap,
        "--timeout-ms", str(int(RUN_S * 1000)), *args,
    ]  # fmt: skip


def run(client: Client, command: str, cluster: LiveCluster, *args: str, stdin: Any = None) -> Any:
    """What the client's script printed for `command` (JSON); it must exit 0."""
    result = subprocess.run(
        node_command(client, command, cluster, *args),
        input="" if stdin is None else json.dumps(stdin),
        capture_output=True,
        text=True,
        timeout=RUN_S + 15,
        check=False,
    )
    assert result.returncode == 0, f"{client.name} {command}: {result.stderr[-4000:]}"
    return json.loads(result.stdout)


def new_topic(cluster: LiveCluster, client: Client, what: str, partitions: int) -> str:
    """A topic of replication factor 3, created with kafka-python, on every node."""
    topic = f"{client.name}-{what}"
    create_topic(cluster.bootstrap, topic, partitions)
    cluster.wait_hosted_everywhere(topic, partitions)
    return topic


def read_partitions(cluster: LiveCluster, topic: str, partitions: int) -> list[Any]:
    """Every record of the topic, read with kafka-python up to the end offsets."""
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, enable_auto_commit=False, request_timeout_ms=20_000
    )
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        ends = consumer.end_offsets(assigned)
        read: list[Any] = []

        def done() -> bool:
            for records in consumer.poll(timeout_ms=200).values():
                read.extend(records)
            return all(consumer.position(tp) >= ends[tp] for tp in assigned)

        eventually(done, f"{topic} read to its end offsets {ends}")
        return read
    finally:
        consumer.close()


def records_for(client: Client) -> list[dict[str, Any]]:
    return [
        {
            "partition": i % 2,
            "key": f"k{i}",
            "value": f"{client.name}-{i}",
            "headers": {"client": client.name, "n": str(i)},
        }
        for i in range(RECORDS)
    ]


def test_produce_then_consume_exactly(cluster: LiveCluster, client: Client) -> None:
    topic = new_topic(cluster, client, "records", partitions=2)
    sent = records_for(client)
    offsets = run(client, "produce", cluster, "--topic", topic, stdin=sent)["offsets"]
    expected = {
        (r["partition"], offset): (r["key"], r["value"], r["headers"])
        for r, offset in zip(sent, offsets, strict=True)
    }
    assert len(expected) == RECORDS, "two records acknowledged at one offset"

    got = run(
        client, "consume", cluster, "--topic", topic, "--group", f"reader-{uuid.uuid4().hex}",
        "--count", str(RECORDS),
    )["records"]  # fmt: skip
    assert len(got) == RECORDS
    assert {
        (r["partition"], r["offset"]): (r["key"], r["value"], r["headers"]) for r in got
    } == expected

    # What another implementation reads back is what this client says it wrote.
    independent = {
        (r.partition, r.offset): (
            r.key.decode(),
            r.value.decode(),
            {key: value.decode() for key, value in r.headers},
        )
        for r in read_partitions(cluster, topic, 2)
    }
    assert independent == expected


def lag_of(cluster: LiveCluster, group: str) -> dict[int, Any]:
    result = tidelog("groups", "describe", group, "--json", "--bootstrap-server", cluster.bootstrap)
    assert result.returncode == 0, result.stderr
    return {row["partition"]: row["lag"] for row in json.loads(result.stdout)["offsets"]}


def test_a_group_consumes_everything_commits_and_shows_lag_0(
    cluster: LiveCluster, client: Client
) -> None:
    topic = new_topic(cluster, client, "group", partitions=2)
    run(client, "produce", cluster, "--topic", topic, stdin=records_for(client))
    group = f"{client.name}-group"
    got = run(
        client, "group-consume", cluster, "--topic", topic, "--group", group,
        "--count", str(RECORDS),
    )["records"]  # fmt: skip
    assert sorted(r["value"] for r in got) == sorted(r["value"] for r in records_for(client))
    assert lag_of(cluster, group) == {0: 0, 1: 0}


def test_admin_create_list_describe_add_partitions_delete(
    cluster: LiveCluster, client: Client
) -> None:
    topic = f"{client.name}-admin"
    create = ("--topic", topic, "--partitions", "2", "--replication-factor", "3")
    assert run(client, "create-topic", cluster, *create)["created"] is True
    assert topic in run(client, "list-topics", cluster)["topics"]

    described = run(client, "describe-topic", cluster, "--topic", topic)["partitions"]
    assert [p["partition"] for p in described] == [0, 1]
    for partition in described:
        assert sorted(partition["replicas"]) == [1, 2, 3]
        assert partition["leader"] in partition["replicas"]

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20_000)
    try:
        [seen] = admin.describe_topics([topic])
        assert sorted(p["partition_index"] for p in seen["partitions"]) == [0, 1]
        assert all(len(p["replica_nodes"]) == 3 for p in seen["partitions"])

        run(client, "add-partitions", cluster, "--topic", topic, "--partitions", "4")

        def four_partitions() -> Any:
            now = run(client, "describe-topic", cluster, "--topic", topic)["partitions"]
            led = len(now) == 4 and all(p["leader"] >= 0 for p in now)
            return now if led else None

        grown = poll(four_partitions, f"{client.name} sees 4 partitions of {topic}")
        assert all(sorted(p["replicas"]) == [1, 2, 3] for p in grown)

        run(client, "delete-topic", cluster, "--topic", topic)
        eventually(
            lambda: topic not in run(client, "list-topics", cluster)["topics"],
            f"{topic} gone from {client.name}'s list",
        )
        assert topic not in admin.list_topics()
    finally:
        admin.close()


def test_offsets_by_time(cluster: LiveCluster, client: Client) -> None:
    """Record i of partition p has the timestamp BASE + 1000 i + 500 p: a lookup answers
    the first record at or after the time, and past the last one -1 (Kafka) or, where the
    client says so, the end offset."""
    topic = new_topic(cluster, client, "times", partitions=2)
    sent = [
        {
            "partition": p,
            "key": f"k{i}",
            "value": f"t{p}-{i}",
            "headers": {},
            "timestamp": TIMESTAMP_BASE + 1000 * i + 500 * p,
        }
        for p in (0, 1)
        for i in range(10)
    ]
    offsets = run(client, "produce", cluster, "--topic", topic, stdin=sent)["offsets"]
    stamped = [(r["partition"], r["timestamp"], o) for r, o in zip(sent, offsets, strict=True)]
    ends = {p: max(o for q, _, o in stamped if q == p) + 1 for p in (0, 1)}

    def expected(partition: int, timestamp: int) -> int:
        at_or_after = [o for p, t, o in stamped if p == partition and t >= timestamp]
        if at_or_after:
            return min(at_or_after)
        return ends[partition] if client.past_the_end_is_end_offset else -1

    lookups = [
        TIMESTAMP_BASE - 1,  # before everything: the first record
        TIMESTAMP_BASE + 3000,  # exactly record 3 of partition 0
        TIMESTAMP_BASE + 3001,  # between records
        TIMESTAMP_BASE + 9500,  # the last record of partition 1, past partition 0's
        TIMESTAMP_BASE + 10**6,  # past every record
    ]
    answers = run(client, "offsets-by-time", cluster, "--topic", topic, stdin=lookups)["answers"]
    assert [a["timestamp"] for a in answers] == lookups
    for answer in answers:
        found = {int(p): offset for p, offset in answer["offsets"].items()}
        assert found == {p: expected(p, answer["timestamp"]) for p in (0, 1)}, answer


class Stream(threading.Thread):
    """The client's produce-stream, its JSON lines collected as they come."""

    def __init__(self, command: list[str], log: Path) -> None:
        super().__init__(daemon=True)
        self.log = log
        with log.open("w") as stderr:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=stderr, text=True
            )
        self.lines: list[dict[str, Any]] = []

    def run(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout as lines:
            for line in lines:
                self.lines.append(json.loads(line))

    def acked(self) -> list[dict[str, Any]]:
        return [line for line in list(self.lines) if "offset" in line]


# What a broker logs when it answers a produce as a retry (tidelog.server.produce_api.log_retry).
RETRY_ANSWER = re.compile(
    r"produce to (?P<partition>\S+): producer (?P<producer>\d+) epoch \d+ "
    r"sequences (?P<sequence>\d+)\.\.\d+ are at offset (?P<offset>\d+) already"
)


@dataclass(frozen=True)
class Evidence:
    """What a partition holds after the run: each offset's value (read by kafka-python),
    the producer id and sequence of the batch there (`tidelog dump-log`), and the produces
    the brokers answered as retries of a batch in their log (producer, sequence, offset)."""

    held: dict[int, str]
    sequenced: dict[int, tuple[int, int]]
    retries: frozenset[tuple[int, int, int]]


def evidence_of(
    cluster: LiveCluster, topic: str, node: int, log: list[tuple[int, str]]
) -> Evidence:
    batches = dump_log(cluster.directory / f"node-{node}" / f"{topic}-0")
    sequenced = {
        b["baseOffset"]: (b["producerId"], b["baseSequence"])
        for b in batches
        if "error" not in b and not b["isControl"]
    }
    retries = frozenset(
        (int(m["producer"]), int(m["sequence"]), int(m["offset"]))
        for n in cluster.nodes
        for m in RETRY_ANSWER.finditer(cluster.log_of(n))
        if m["partition"] == f"{topic}-0"
    )
    return Evidence(dict(log), sequenced, retries)


def not_a_reused_sequence(lines: list[dict[str, Any]], acks: list[int], n: int, e: Evidence) -> str:
    """Why the n-th acknowledgement, whose record is not in the log at its offset, is not the
    clients' known sequence reuse, or "" when it is. Both clients advance a partition's
    sequence number only when a send is acknowledged (kafkajs gives it back when a send
    fails, @platformatic/kafka counts it up on an answer only), so the records of the next
    send after one it reported failed carry the failed send's sequence number. When that
    failed send was written after all (its answer lost with the killed leader), the new
    leader answers the next send as a retry of it, with its offset, as Kafka does: the
    client reports its record acknowledged there, and it is written nowhere. That, and
    nothing else, is accepted here: the record is nowhere in the log; its offset holds a
    record of a send the client reported failed since its previous acknowledgement; the
    batch there has the sequence number between those of the acknowledgements before and
    after it, of the same producer (each acknowledged send took the next one); and a broker
    logged that it answered exactly that producer's sequence as a retry of that offset. A
    record tidelog acknowledged and then truncated leaves at its offset nothing, a control
    batch or a later record, and fails here; so does one found at another offset. What this
    cannot tell from the client's loss is a committed record overwritten by a record of an
    earlier send under the same producer sequence: neither can the protocol, whose brokers
    deduplicate by producer, epoch and sequence alone (Kafka's too)."""
    line = lines[acks[n]]
    offset = line["offset"]
    if line["acked"] in e.held.values():
        return "it is in the log at another offset"
    since = acks[n - 1] + 1 if n else 0
    failed = {other["failed"] for other in lines[since : acks[n]] if "failed" in other}
    if e.held.get(offset) not in failed:
        return f"offset {offset} holds {e.held.get(offset)!r}, no send reported failed before it"
    if offset not in e.sequenced:
        return f"no batch of an idempotent producer at offset {offset}"
    producer, sequence = e.sequenced[offset]
    for neighbour, step in ((n - 1, -1), (n + 1, 1)):
        if 0 <= neighbour < len(acks):
            at = lines[acks[neighbour]]["offset"]
            if e.sequenced.get(at) != (producer, sequence + step):
                return (
                    f"the acknowledgement at offset {at} has {e.sequenced.get(at)}, "
                    f"not sequence {sequence + step} of producer {producer}"
                )
    if (producer, sequence, offset) not in e.retries:
        return f"no broker answered sequence {sequence} of producer {producer} as a retry"
    return ""


def unwritten_acknowledgements(lines: list[dict[str, Any]], e: Evidence) -> list[str]:
    """Asserts that every record the client reported acknowledged is in the log at its
    offset, or is one the client itself never had written (`not_a_reused_sequence`);
    returns those."""
    where = {value: offset for offset, value in e.held.items()}
    acks = [i for i, line in enumerate(lines) if "offset" in line]
    unwritten = []
    for n, i in enumerate(acks):
        line = lines[i]
        if where.get(line["acked"]) == line["offset"]:
            continue
        reason = not_a_reused_sequence(lines, acks, n, e)
        if reason:
            near = range(line["offset"] - 3, line["offset"] + 4)
            raise AssertionError(
                f"acknowledged, then lost: {line} ({reason}); the client's lines around it: "
                f"{lines[max(i - 5, 0) : i + 3]}; the log around it: "
                f"{[(o, e.held.get(o), e.sequenced.get(o)) for o in near]}; "
                f"answered as retries: {sorted(e.retries)}"
            )
        unwritten.append(line["acked"])
    return unwritten


def test_a_killed_leader_loses_no_acknowledged_record(
    cluster: LiveCluster, client: Client, tmp_path: Path
) -> None:
    topic = new_topic(cluster, client, "failover", partitions=1)
    stream = Stream(
        node_command(
            client, "produce-stream", cluster, "--topic", topic, "--partitions", "0",
            "--count", "600", "--rate", "40",
        ),
        tmp_path / "stream.log",
    )  # fmt: skip
    stream.start()
    directory = str(cluster.directory)
    leader = None
    try:
        eventually(
            lambda: len(stream.acked()) >= 80 or stream.process.poll() is not None,
            f"{client.name} producing",
        )
        assert stream.process.poll() is None, stream.log.read_text()[-4000:]
        leader = cluster.leader_of(topic)
        killed = tidelog("cluster", "kill", "--data-dir", directory, "--node", str(leader))
        assert killed.returncode == 0, killed.stderr
        acked_before_kill = len(stream.acked())
        stream.process.wait(timeout=RUN_S + 15)
        stream.join(timeout=10)
        assert stream.process.returncode == 0, stream.log.read_text()[-4000:]
    finally:
        if stream.process.poll() is None:
            stream.process.kill()
            stream.process.wait()
        if leader is not None:
            restarted = tidelog(
                "cluster", "restart", "--data-dir", directory, "--node", str(leader)
            )
            assert restarted.returncode == 0, restarted.stderr
            cluster.wait_hosted_everywhere(topic, 1)

    summary = stream.lines[-1]
    acked = stream.acked()
    assert summary["done"] is True and summary["acked"] == len(acked)
    assert len(acked) > acked_before_kill + 100, "the client went on producing after the kill"
    log = [(r.offset, r.value.decode()) for r in read_partitions(cluster, topic, 1)]
    values = [value for _, value in log]
    assert len(values) == len(set(values)), "a record is in the log twice"
    survivor = next(node for node in cluster.nodes if node != leader)
    unwritten = unwritten_acknowledgements(stream.lines, evidence_of(cluster, topic, survivor, log))
    errors = sorted(
        {line["error"][:160] for line in stream.lines if "failed" in line and "error" in line}
    )
    print(
        f"{client.name}: {len(acked)} acknowledged, {summary['failed']} failed (of 600), "
        f"{len(log)} in the log; leader {leader} killed after {acked_before_kill}; {errors}; "
        f"acknowledged on a failed send's sequence and so never written: {unwritten}"
    )


# The verdict alone, on what a run could leave: producer 7, a new leader's control batch at 4.
REUSED = [
    {"acked": "s0", "partition": 0, "offset": 1},
    {"acked": "s1", "partition": 0, "offset": 2},
    {"failed": "s2", "error": "Connection closed"},  # written at 3, its answer lost
    {"failed": "s3", "error": "connect ECONNREFUSED"},
    {"acked": "s4", "partition": 0, "offset": 3},  # sequence 2 again: answered as s2's retry
    {"acked": "s5", "partition": 0, "offset": 5},
]
REUSED_LOG = Evidence(
    held={1: "s0", 2: "s1", 3: "s2", 5: "s5"},
    sequenced={1: (7, 0), 2: (7, 1), 3: (7, 2), 5: (7, 3)},
    retries=frozenset({(7, 2, 3)}),
)


def test_an_acknowledgement_on_a_failed_sends_sequence_is_the_clients_loss() -> None:
    assert unwritten_acknowledgements(REUSED, REUSED_LOG) == ["s4"]


@pytest.mark.parametrize(
    ("lines", "evidence", "reason"),
    [
        (  # no broker answered it as a retry: s4 may have been written, then overwritten
            REUSED,
            Evidence(REUSED_LOG.held, REUSED_LOG.sequenced, frozenset()),
            "no broker answered sequence 2",
        ),
        (  # s4 took sequence 2 and was truncated; s5 (sequence 3) then went to offset 3
            [*REUSED[:2], {"acked": "s4", "partition": 0, "offset": 3}, REUSED[5]],
            Evidence({1: "s0", 2: "s1", 3: "s5"}, {1: (7, 0), 2: (7, 1), 3: (7, 3)}, frozenset()),
            "holds 's5', no send reported failed",
        ),
        (  # s2 was written, s4 acknowledged at 3 took a sequence of its own and was lost
            REUSED,
            Evidence(REUSED_LOG.held, {**REUSED_LOG.sequenced, 5: (7, 4)}, REUSED_LOG.retries),
            "not sequence 3 of producer 7",
        ),
        (  # the record is in the log, at another offset than the one acknowledged
            REUSED,
            Evidence({**REUSED_LOG.held, 6: "s4"}, REUSED_LOG.sequenced, REUSED_LOG.retries),
            "at another offset",
        ),
    ],
)
def test_an_acknowledged_record_lost_otherwise_fails_the_verdict(
    lines: list[dict[str, Any]], evidence: Evidence, reason: str
) -> None:
    with pytest.raises(AssertionError, match=reason):
        unwritten_acknowledgements(lines, evidence)
