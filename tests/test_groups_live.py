"""Consumer groups on a real 3-node cluster, with real clients.

A kafka-python `KafkaConsumer` and a confluent-kafka `Consumer` in one group share the
partitions; a member leaving hands its partitions to the other; the committed offsets are
exactly what each consumed; `tidelog groups describe` shows the exact lag after more
records arrive. Then the coordinator's node is killed with SIGKILL: the group carries on
with the new coordinator, no committed offset is lost and no record is skipped, and a new
member starts exactly at the committed offsets.
"""

from __future__ import annotations

import contextlib
import json
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import KafkaError as ConfluentError
from kafka import (
    ConsumerRebalanceListener,
    KafkaAdminClient,
    KafkaConsumer,
    OffsetAndMetadata,
    TopicPartition,
)
from kafka.admin import MemberToRemove, NewTopic
from kafka.errors import KafkaError, NoError

from tidelog.testing.live import (
    LiveCluster,
    create_topic,
    eventually,
    free_base_port,
    knows_before_joining,
    one_broker,
    poll,
    sample,
    scrape,
    tidelog,
)

DEADLINE_S = 60.0
SESSION_MS = 6_000
HEARTBEAT_MS = 500


def produce(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    """acks=all, record i to partition i % partitions; every record acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failed: list[object] = []
    for i, value in enumerate(values):
        producer.produce(
            topic,
            value.encode(),
            partition=i % partitions,
            on_delivery=lambda error, _: failed.append(error) if error else None,
        )
    assert producer.flush(30) == 0
    assert not failed


def filled_topic(cluster: LiveCluster, topic: str, partitions: int, values: list[str]) -> list[str]:
    """A new topic on every node, holding `values` (record i in partition i % partitions)."""
    create_topic(cluster.bootstrap, topic, partitions)
    cluster.wait_hosted_everywhere(topic, partitions)
    produce(cluster.bootstrap, topic, values, partitions)
    return values


def kafka_python_member(
    bootstrap: str, topic: str, group: str, listener: ConsumerRebalanceListener | None = None
) -> Any:
    """Subscribed to `topic`, its partitions in its metadata before its first poll joins
    (`knows_before_joining`: a leader that assigned from metadata without them may never
    take the assignment of its rejoin)."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="kafka-python-member",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        request_timeout_ms=20_000,
    )
    consumer.subscribe([topic], listener=listener)
    knows_before_joining(consumer, topic)
    return consumer


def confluent_member(
    bootstrap: str, topic: str, group: str, *, instance: str | None = None, **subscribe: Any
) -> Any:
    """A confluent-kafka member of `group`; a static one (KIP-345) with `instance`."""
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": "confluent-member",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": HEARTBEAT_MS,
    }
    if instance is not None:
        settings["group.instance.id"] = instance
    consumer = Consumer(settings)
    consumer.subscribe([topic], **subscribe)
    return consumer


def poll_kafka_python(
    consumer: Any, seen: list[str], read_to: dict[int, int] | None = None
) -> None:
    """One poll; what it returned is appended to `seen`, then committed synchronously."""
    polled = consumer.poll(timeout_ms=1000)
    positions = {}
    for tp, records in polled.items():
        seen.extend(record.value.decode() for record in records)
        positions[tp] = OffsetAndMetadata(records[-1].offset + 1, "", -1)
        if read_to is not None:
            read_to[tp.partition] = records[-1].offset + 1
    if positions:
        # A rebalance or a coordinator move can refuse it: those records come again.
        with contextlib.suppress(KafkaError):
            consumer.commit(positions)


def poll_confluent(consumer: Any, seen: list[str]) -> None:
    messages = [m for m in consumer.consume(num_messages=100, timeout=0.1) if not m.error()]
    if messages:
        seen.extend(m.value().decode() for m in messages)
        consumer.commit(asynchronous=False)


def partitions_of(assignment: Any) -> set[int]:
    return {tp.partition for tp in assignment}


def committed_and_hwm(bootstrap: str, group: str, topic: str, partitions: int) -> Any:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        offsets = admin.list_group_offsets({group: None})[group]
        committed = {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        latest = admin.list_partition_offsets(dict.fromkeys(tps, -1))
        return committed, {tp.partition: latest[tp].offset for tp in tps}
    finally:
        admin.close()


def describe(cluster: LiveCluster, group: str) -> dict[str, Any]:
    result = tidelog("groups", "describe", group, "--json", "--bootstrap-server", cluster.bootstrap)
    assert result.returncode == 0, result.stderr
    described: dict[str, Any] = json.loads(result.stdout)
    return described


class Assignments(ConsumerRebalanceListener):  # type: ignore[misc]
    """The partitions of each assignment a kafka-python member took, in order."""

    def __init__(self) -> None:
        self.taken: list[set[int]] = []

    def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.taken.append(partitions_of(assigned))


def test_a_kafka_python_leader_assigns_every_partition_in_its_first_generation(
    cluster: LiveCluster,
) -> None:
    """Five kafka-python members, each alone in a new group: each one's first assignment
    holds both partitions, since its metadata held them before it joined
    (`knows_before_joining`). Without that, some (two of five in a quiet run) joined first
    and assigned themselves nothing, then rejoined on the metadata change alone: a rejoin that
    kafka-python 3.0.12 drops when it completes while no poll waits for it, leaving the
    member with no partitions and no heartbeat (seen under load)."""
    topic = "at-once"
    create_topic(cluster.bootstrap, topic, 2)
    cluster.wait_hosted_everywhere(topic, 2)
    for attempt in range(5):
        assignments = Assignments()
        member = kafka_python_member(cluster.bootstrap, topic, f"at-once-{attempt}", assignments)
        try:
            eventually(partial(took_one, member, assignments), f"member {attempt} assigned")
        finally:
            member.close()
        assert assignments.taken[0] == {0, 1}, assignments.taken


def took_one(consumer: Any, assignments: Assignments) -> bool:
    consumer.poll(timeout_ms=1000)
    return bool(assignments.taken)


def test_kafka_python_and_confluent_share_a_group(cluster: LiveCluster) -> None:
    topic, group, partitions = "shared", "mixed", 3
    values = filled_topic(cluster, topic, partitions, [f"r-{i}" for i in range(60)])
    seen_kp: list[str] = []
    seen_ck: list[str] = []
    kp = kafka_python_member(cluster.bootstrap, topic, group)
    ck = confluent_member(cluster.bootstrap, topic, group)
    try:

        def shared_and_all_read() -> bool:
            poll_kafka_python(kp, seen_kp)
            poll_confluent(ck, seen_ck)
            mine, theirs = partitions_of(kp.assignment()), partitions_of(ck.assignment())
            split = bool(mine) and bool(theirs) and not mine & theirs
            return split and mine | theirs == {0, 1, 2} and set(seen_kp + seen_ck) == set(values)

        eventually(
            shared_and_all_read,
            lambda: (
                f"both assigned ({kp.assignment()}, {ck.assignment()}), all read "
                f"({len(set(seen_kp + seen_ck))} of {len(values)})"
            ),
        )
        committed, hwm = committed_and_hwm(cluster.bootstrap, group, topic, partitions)
        assert committed == hwm  # each member committed exactly what it read
        members = describe(cluster, group)["members"]
        clients = sorted(m["client_id"] for m in members)
        assert clients == ["confluent-member", "kafka-python-member"]
        # Both clients joined as Kafka 2.2+ has them (JoinGroup v4+): a member id given
        # first with MEMBER_ID_REQUIRED, then the join with it (KIP-394).
        given = sum(
            sample(
                scrape(node["admin"]),
                "tidelog_request_errors_total",
                api="JoinGroup",
                error="MEMBER_ID_REQUIRED",
            )
            or 0
            for node in cluster.record["nodes"]
        )
        assert given >= 2
        ck.close()  # leaves the group: its partitions move to the other member
        eventually(
            lambda: poll_kafka_python(kp, seen_kp) or partitions_of(kp.assignment()) == {0, 1, 2},
            "the remaining member holds every partition",
        )
    finally:
        kp.close()
    assert sorted(set(seen_kp + seen_ck)) == sorted(values)
    # The group is empty now: K more records show as exactly K of lag, per partition.
    produce(cluster.bootstrap, topic, [f"more-{i}" for i in range(7)], partitions)
    lag = {row["partition"]: row["lag"] for row in describe(cluster, group)["offsets"]}
    assert lag == {0: 3, 1: 2, 2: 2}
    text = tidelog("groups", "describe", group, "--bootstrap-server", cluster.bootstrap)
    header = text.stdout.splitlines()[0].split()
    assert header == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-START-OFFSET",
        "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID",
    ]  # fmt: skip


def test_a_static_member_restarts_without_a_rebalance_and_a_double_is_fenced(
    cluster: LiveCluster,
) -> None:
    """KIP-345 with librdkafka: two static members share a topic; one is closed (a static
    member sends no LeaveGroup) and started again with its group.instance.id: it takes its
    old partitions back with no rebalance (the other member sees no revocation). Then a
    second consumer with the other's instance id joins: it takes that member's place, and
    the first instance is fenced (a fatal error on its side). Last, a static member closed
    for good is removed by an admin naming its instance id alone."""
    topic, group, partitions = "statics", "statics", 2
    filled_topic(cluster, topic, partitions, [f"s-{i}" for i in range(20)])
    rebalances: list[str] = []

    def count(kind: str, consumer: Any, assigned: Any) -> None:
        del consumer
        rebalances.append(f"{kind} {sorted(partitions_of(assigned))}")

    b = confluent_member(
        cluster.bootstrap,
        topic,
        group,
        instance="b",
        on_assign=partial(count, "assign"),
        on_revoke=partial(count, "revoke"),
    )
    a = confluent_member(cluster.bootstrap, topic, group, instance="a")
    again: Any = None
    double: Any = None
    try:

        def split() -> bool:
            for member in (a, b):
                member.poll(0.1)
            mine, theirs = partitions_of(a.assignment()), partitions_of(b.assignment())
            return len(mine) == len(theirs) == 1 and mine | theirs == {0, 1}

        eventually(split, lambda: f"a and b hold one partition each ({rebalances})")
        held_by_a, held_by_b = partitions_of(a.assignment()), partitions_of(b.assignment())
        seen_by_b = list(rebalances)
        a.close()  # static: no LeaveGroup; "a" stays a member until its session times out
        again = confluent_member(cluster.bootstrap, topic, group, instance="a")

        def back() -> bool:
            for member in (again, b):
                member.poll(0.1)
            return partitions_of(again.assignment()) == held_by_a

        eventually(back, "the restarted instance a holds its partition again")
        for _ in range(10):  # b goes on heartbeating: no rebalance reaches it
            b.poll(0.1)
        assert rebalances == seen_by_b
        assert partitions_of(b.assignment()) == held_by_b
        members = describe(cluster, group)["members"]
        assert sorted(m["group_instance_id"] for m in members) == ["a", "b"], members
        text = tidelog(
            "groups", "describe", group, "--members", "--bootstrap-server", cluster.bootstrap
        )
        assert text.stdout.splitlines()[0].split() == [
            "GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
        ]  # fmt: skip
        assert {line.split()[2] for line in text.stdout.splitlines()[1:]} == {"a", "b"}
        # A second consumer with b's instance id: b is fenced, for good.
        double = confluent_member(cluster.bootstrap, topic, group, instance="b")
        fenced: list[Any] = []

        def b_fenced() -> bool:
            double.poll(0.1)
            again.poll(0.1)
            message = b.poll(0.1)
            if message is not None and message.error() is not None:
                fenced.append(message.error())
            return any("fenced" in error.str().lower() for error in fenced)

        eventually(b_fenced, lambda: f"b fenced by its double ({fenced})")
        assert fenced[-1].code() == ConfluentError._FATAL, fenced
        # Instance a stops for good: closed, it stays a member until an admin removes it
        # by its instance id (LeaveGroup v3+ naming only the instance id).
        again.close()
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20_000)
        try:
            removed = admin.remove_group_members(
                group, [MemberToRemove(group_instance_id="a", reason="scaled down")]
            )
        finally:
            admin.close()
        assert removed == {"a": NoError}, removed
        instances = [m["group_instance_id"] for m in describe(cluster, group)["members"]]
        assert instances == ["b"], instances
    finally:
        for member in (a, b, again, double):
            if member is not None:
                with contextlib.suppress(Exception):
                    member.close()


def test_a_group_at_group_max_size_refuses_one_more_member(tmp_path: Path) -> None:
    """A one-node broker with group_max_size = 1 (its TOML): a second librdkafka member of
    a group that has one gets GROUP_MAX_SIZE_REACHED, a fatal error on its side, and the
    first keeps its partitions."""
    base = free_base_port()
    bootstrap = f"127.0.0.1:{base}"
    config = tmp_path / "broker.toml"
    config.write_text("group_max_size = 1\n")
    with one_broker(tmp_path, base, bootstrap, "--config", str(config)):
        topic = "capped"

        def created() -> bool | None:
            try:
                admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
            except KafkaError:
                return None  # not answering yet
            try:
                admin.create_topics([NewTopic(topic, 2, 1)])
                return True
            except KafkaError:
                return None  # no controller yet
            finally:
                admin.close()

        poll(created, "the topic created")
        first = confluent_member(bootstrap, topic, "capped")
        second: Any = None
        try:
            eventually(
                lambda: first.poll(0.1) is None and partitions_of(first.assignment()) == {0, 1},
                "the first member holds both partitions",
            )
            second = confluent_member(bootstrap, topic, "capped")
            errors: list[Any] = []

            def refused() -> bool:
                first.poll(0.1)
                message = second.poll(0.1)
                if message is not None and message.error() is not None:
                    errors.append(message.error())
                return any("maximum size" in error.str() for error in errors)

            eventually(refused, lambda: f"the second member refused ({errors})")
            assert partitions_of(first.assignment()) == {0, 1}
        finally:
            for member in (first, second):
                if member is not None:
                    with contextlib.suppress(Exception):
                        member.close()


def test_reset_offsets_is_a_dry_run_until_executed_and_refused_while_active(
    cluster: LiveCluster,
) -> None:
    topic, group = "rewind", "rewinders"
    filled_topic(cluster, topic, 1, [f"v-{i}" for i in range(10)])
    seen: list[str] = []
    consumer = kafka_python_member(cluster.bootstrap, topic, group)
    try:
        eventually(lambda: poll_kafka_python(consumer, seen) or len(seen) == 10, "all read")
        refused = tidelog(
            "groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute",
            "--bootstrap-server", cluster.bootstrap,
        )  # fmt: skip
        assert refused.returncode == 1 and "current state is Stable" in refused.stderr
    finally:
        consumer.close()
    before = describe(cluster, group)["offsets"][0]["current_offset"]
    args = [group, "--topic", f"{topic}:0", "--shift-by", "-4", "--json"]
    dry = tidelog("groups", "reset-offsets", *args, "--bootstrap-server", cluster.bootstrap)
    planned = json.loads(dry.stdout)
    assert planned["executed"] is False and planned["offsets"][0]["new_offset"] == before - 4
    assert describe(cluster, group)["offsets"][0]["current_offset"] == before  # unchanged
    done = tidelog(
        "groups", "reset-offsets", *args, "--execute", "--bootstrap-server", cluster.bootstrap
    )
    assert done.returncode == 0, done.stderr
    row = describe(cluster, group)["offsets"][0]
    assert (row["current_offset"], row["lag"]) == (before - 4, 4)
    again: list[str] = []
    consumer = kafka_python_member(cluster.bootstrap, topic, group)
    try:
        eventually(lambda: poll_kafka_python(consumer, again) or len(again) >= 4, "re-read")
    finally:
        consumer.close()
    assert again == ["v-6", "v-7", "v-8", "v-9"]


def test_offsets_survive_a_coordinator_killed_with_sigkill(cluster: LiveCluster) -> None:
    topic, group, partitions = "resume", "survivors", 3
    values = filled_topic(cluster, topic, partitions, [f"x-{i}" for i in range(90)])
    seen: list[str] = []
    read_to: dict[int, int] = {}  # per partition, the offset after the last record read
    member = kafka_python_member(cluster.bootstrap, topic, group)
    coordinator = -1
    try:
        eventually(
            lambda: poll_kafka_python(member, seen, read_to) or len(seen) >= 30, "a first part"
        )
        before, _ = committed_and_hwm(cluster.bootstrap, group, topic, partitions)
        coordinator = describe(cluster, group)["coordinator"]
        killed = tidelog("cluster", "kill", "--data-dir", str(cluster.directory), "--node",
                         str(coordinator))  # fmt: skip
        assert killed.returncode == 0, killed.stderr
        # The new coordinator has every offset committed before the kill.
        after = poll_committed(cluster, group, topic, partitions)
        assert all(after[p] >= offset for p, offset in before.items())
        eventually(
            lambda: poll_kafka_python(member, seen, read_to) or set(seen) == set(values),
            "the member reads on, with the new coordinator",
        )
        eventually(lambda: commits(member, topic, read_to), "a commit of what was read")
        # Committed: just past the last record read (a new leader's control record may
        # follow it, below the HWM; consumers never see those).
        assert poll_committed(cluster, group, topic, partitions) == read_to
    finally:
        member.close()
        if coordinator >= 0:
            restarted = tidelog("cluster", "restart", "--data-dir", str(cluster.directory),
                                "--node", str(coordinator))  # fmt: skip
            assert restarted.returncode == 0, restarted.stderr
    # A new member starts exactly at the committed offsets: it reads only what comes next.
    produce(cluster.bootstrap, topic, [f"y-{i}" for i in range(6)], partitions)
    fresh: list[str] = []
    newcomer = confluent_member(cluster.bootstrap, topic, group)
    try:
        eventually(lambda: poll_confluent(newcomer, fresh) or len(fresh) >= 6, "the next six")
        # One more poll of a second: a member rewound too far would show older records.
        extra = [m for m in newcomer.consume(num_messages=100, timeout=1.0) if not m.error()]
        fresh.extend(m.value().decode() for m in extra)
    finally:
        newcomer.close()
    assert sorted(fresh) == sorted(f"y-{i}" for i in range(6))


def commits(consumer: Any, topic: str, read_to: dict[int, int]) -> bool:
    """Commit `read_to` synchronously; False when the coordinator refused it (retry)."""
    offsets = {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in read_to.items()}
    try:
        consumer.commit(offsets)
    except KafkaError:
        return False
    return True


def poll_committed(cluster: LiveCluster, group: str, topic: str, partitions: int) -> Any:
    """The committed offsets, once some coordinator answers for the group."""
    found: dict[int, int] = {}

    def answered() -> bool:
        try:
            committed, _ = committed_and_hwm(cluster.bootstrap, group, topic, partitions)
        except KafkaError:
            return False
        found.update(committed)
        return bool(committed)

    eventually(answered, "a coordinator answers OffsetFetch")
    return found
