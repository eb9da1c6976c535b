"""Every version of Produce (3-13) and Fetch (4-18) on a real 3-node cluster.

Raw kafka-python request objects go to the partition's leader over one socket: a batch
produced at each Produce version, by name and from v13 by topic id, is fetched back at each
Fetch version, by name up to v12 and by topic id from v13. An id no topic has is answered
UNKNOWN_TOPIC_ID in both. A node that does not lead the partition names the leader and its
address (KIP-951: Produce v10+, Fetch v16+), and a Fetch that says it comes from a replica
is refused.
"""

from __future__ import annotations

import functools
import json
import uuid
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient
from kafka.record.memory_records import MemoryRecords

from tidelog.protocol.kafka import _APIS, TOPIC_ID_ZERO, ApiKey
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.metadata import METADATA_TOPIC, topic_id_of
from tidelog.testing.batches import batch, record
from tidelog.testing.live import LiveCluster, RawConnection, create_topic, poll
from tidelog.wal.dump import dump

PRODUCE_VERSIONS = range(3, 14)
FETCH_VERSIONS = range(4, 19)
TOPIC_ID_MIN = 13  # Produce and Fetch name topics by id from v13 (KIP-516)
UNKNOWN_ID = uuid.UUID("d1b2c3a4-0000-4000-8000-00000000beef")
RETRY_S = 0.5  # between attempts while a loaded machine moves a leadership


def topic_id(cluster: LiveCluster, name: str) -> uuid.UUID:
    """The id of topic `name`, as every node derives it: from the offset of the command
    that created it in the metadata log (read from node 1's files); Metadata is to answer
    it from v10."""
    node = cluster.record["nodes"][0]
    path = Path(node["data_dir"]) / f"{METADATA_TOPIC}-0"

    def created_at() -> int | None:
        found = None
        for line in dump(str(path), records=True, as_json=True):
            read = json.loads(line)  # a batch still being written has no records yet
            for entry in [] if read.get("isControl", True) else read.get("records", []):
                command = json.loads(entry["payload"])
                if {"type": "create_topic", "name": name}.items() <= command.items():
                    found = entry["offset"]
        return found

    return topic_id_of(poll(created_at, f"the creation of {name} in the metadata log"), name)


def address_of(cluster: LiveCluster, node_id: int) -> tuple[str, int]:
    node = next(node for node in cluster.record["nodes"] if node["id"] == node_id)
    host, port = node["kafka"].rsplit(":", 1)
    return host, int(port)


def leader_or_none(cluster: LiveCluster, topic: str) -> int | None:
    """The leader of partition 0 of `topic` as Metadata says, None while it has none."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        leader: int = admin.describe_topics([topic])[0]["partitions"][0]["leader_id"]
    finally:
        admin.close()
    return leader if leader >= 0 else None


def new_topic(cluster: LiveCluster, name: str) -> uuid.UUID:
    """A new one-partition topic on every node, and its id."""
    create_topic(cluster.bootstrap, name, partitions=1)
    cluster.wait_hosted_everywhere(name, 1)
    return topic_id(cluster, name)


class Leader:
    """A raw connection to the leader of partition 0 of `topic`, that follows the
    leadership when a loaded machine elects another leader meanwhile."""

    def __init__(self, cluster: LiveCluster, topic: str) -> None:
        self.cluster, self.topic = cluster, topic
        self.node = poll(lambda: leader_or_none(cluster, topic), f"a leader of {topic}")
        self.connection = RawConnection(address_of(cluster, self.node))

    def ask(self, request: Any, partition_of: Any) -> Any:
        """The answer to `request` from the partition's leader; `partition_of` picks the
        partition's part of it, which must not say NOT_LEADER_OR_FOLLOWER (such a request
        changed nothing, so it is asked again of the leader)."""

        def attempt() -> Any:
            answer = self.connection.ask(request)
            if partition_of(answer).error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
                return answer
            self.follow()
            return None

        return poll(attempt, f"an answer from the leader of {self.topic}", interval_s=RETRY_S)

    def follow(self) -> None:
        self.connection.close()
        self.node = poll(lambda: leader_or_none(self.cluster, self.topic), "a leader")
        self.connection = RawConnection(address_of(self.cluster, self.node))

    def close(self) -> None:
        self.connection.close()


def named(key: str | uuid.UUID, name_field: str) -> dict[str, Any]:
    """The field naming a topic in a request: its name, or its id."""
    return {"topic_id": key} if isinstance(key, uuid.UUID) else {name_field: key}


def produce_request(version: int, value: str, key: str | uuid.UUID, *, acks: int = -1) -> Any:
    """A Produce of one record of `value` to partition 0 of the topic `key` names."""
    cls = _APIS[ApiKey.PRODUCE].request_class
    data = cls.TopicProduceData
    partition = data.PartitionProduceData(index=0, records=batch([record(0, value.encode())]))
    return cls(
        version=version,
        transactional_id=None,
        acks=acks,
        timeout_ms=30_000,
        topic_data=[data(partition_data=[partition], **named(key, "name"))],
    )


def fetch_request(version: int, keys: list[str | uuid.UUID], **fields: Any) -> Any:
    """A Fetch of partition 0 of each topic `keys` name (names, or from v13 ids) from
    offset 0, that does not wait; with `fields` set."""
    cls = _APIS[ApiKey.FETCH].request_class
    topic_cls = cls.FetchTopic
    partition = topic_cls.FetchPartition(
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    return cls(
        version=version,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 24,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[topic_cls(partitions=[partition], **named(key, "topic")) for key in keys],
        forgotten_topics_data=[],
        rack_id="",
        **fields,
    )


def key_of(version: int, name: str, topic_id: uuid.UUID) -> str | uuid.UUID:
    return topic_id if version >= TOPIC_ID_MIN else name


def values_in(records: bytes | None) -> list[str]:
    """The values of the data records in `records` (control batches skipped)."""
    found = []
    memory = MemoryRecords(bytes(records or b""))
    while (read := memory.next_batch()) is not None:
        if not read.is_control_batch:
            found.extend(r.value.decode() for r in read)
    return found


def fetched(answer: Any, index: int = 0) -> Any:
    return answer.responses[index].partitions[0]


def produced(answer: Any) -> Any:
    return answer.responses[0].partition_responses[0]


def test_every_produce_and_fetch_version_by_name_and_by_id(cluster: LiveCluster) -> None:
    known_id = new_topic(cluster, "versions")
    leader = Leader(cluster, "versions")
    try:
        sent: list[str] = []
        for version in PRODUCE_VERSIONS:
            key = key_of(version, "versions", known_id)
            answer = leader.ask(produce_request(version, f"v{version}", key), produced)
            topic = answer.responses[0]
            assert (topic.topic_id if version >= TOPIC_ID_MIN else topic.name) == key
            assert produced(answer).error_code == 0, (version, answer)
            sent.append(f"v{version}")
        for version in FETCH_VERSIONS:
            key = key_of(version, "versions", known_id)
            answer = leader.ask(fetch_request(version, [key]), fetched)
            topic = answer.responses[0]
            assert (topic.topic_id if version >= TOPIC_ID_MIN else topic.topic) == key
            part = fetched(answer)
            assert part.error_code == 0, (version, part)
            assert values_in(part.records) == sent, version
            assert part.high_watermark >= len(sent) + 1  # and the leader's control batch
            assert part.current_leader is None  # tagged fields only where Kafka sends them
    finally:
        leader.close()


def produce_unanswered(leader: Leader, version: int, key: str | uuid.UUID) -> bool | None:
    """An acks=0 Produce, then one with acks=all on the same connection: True once the
    leader took the second (and so the first before it), None when it was refused."""
    quiet = produce_request(version, f"quiet-v{version}", key, acks=0)
    leader.connection.protocol.send_request(quiet)
    # The next answer on this connection is the next request's: none for acks=0.
    answer = leader.connection.ask(produce_request(version, f"v{version}", key))
    if produced(answer).error_code == 0:
        return True
    leader.follow()  # a new leader: the unanswered one may be lost, so both go again
    return None


def test_a_produce_with_acks_0_is_appended_unanswered(cluster: LiveCluster) -> None:
    known_id = new_topic(cluster, "unanswered")
    leader = Leader(cluster, "unanswered")
    try:
        for version in (9, 13):
            key = key_of(version, "unanswered", known_id)
            attempt = functools.partial(produce_unanswered, leader, version, key)
            poll(attempt, "two produces taken", interval_s=RETRY_S)
        answer = leader.ask(fetch_request(18, [known_id]), fetched)
        values = values_in(fetched(answer).records)
        for version in (9, 13):
            assert values.index(f"quiet-v{version}") < values.index(f"v{version}")
    finally:
        leader.close()


def test_an_unknown_topic_id_is_answered_unknown_topic_id(cluster: LiveCluster) -> None:
    known_id = new_topic(cluster, "known")
    leader = Leader(cluster, "known")
    try:
        for unknown in (UNKNOWN_ID, TOPIC_ID_ZERO):
            answer = leader.connection.ask(produce_request(13, "lost", unknown))
            assert answer.responses[0].topic_id in (unknown, None)  # None: zeros
            assert produced(answer).error_code == ErrorCode.UNKNOWN_TOPIC_ID
        leader.ask(produce_request(13, "kept", known_id), produced)
        for version in FETCH_VERSIONS:
            keys: list[str | uuid.UUID] = ["known", "no-such-topic"]
            if version >= TOPIC_ID_MIN:
                keys = [known_id, UNKNOWN_ID, TOPIC_ID_ZERO]
            answer = leader.ask(fetch_request(version, keys), fetched)
            assert values_in(fetched(answer).records) == ["kept"], version
            for index in range(1, len(keys)):
                part = fetched(answer, index)
                expected = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if version >= TOPIC_ID_MIN:
                    expected = ErrorCode.UNKNOWN_TOPIC_ID
                    assert answer.responses[index].topic_id in (keys[index], None)
                assert (part.error_code, part.high_watermark) == (expected, -1), version
                assert not part.records
    finally:
        leader.close()


def test_a_node_that_does_not_lead_names_the_leader(cluster: LiveCluster) -> None:
    """NOT_LEADER_OR_FOLLOWER answers name the leader and its address, Produce from v10
    and Fetch from v16, as Kafka's (KIP-951); the leader named takes the produce."""
    known_id = new_topic(cluster, "moved")
    poll(lambda: hints_agree(cluster, known_id), "one leader named", interval_s=RETRY_S)


def hints_agree(cluster: LiveCluster, known_id: uuid.UUID) -> bool | None:
    """True when a node that does not lead partition 0 of "moved" refuses every version
    of Produce and Fetch naming the same leader where the version can, and that leader
    takes a Produce; None when leadership moved meanwhile (try again)."""
    leader = leader_or_none(cluster, "moved")
    if leader is None:
        return None
    follower = next(node["id"] for node in cluster.record["nodes"] if node["id"] != leader)
    requests = [
        (produce_request(v, "refused", key_of(v, "moved", known_id)), produced, v >= 10)
        for v in PRODUCE_VERSIONS
    ] + [
        (fetch_request(v, [key_of(v, "moved", known_id)]), fetched, v >= 16) for v in FETCH_VERSIONS
    ]
    hints: set[int | None] = set()
    connection = RawConnection(address_of(cluster, follower))
    try:
        for request, partition_of, hinted in requests:
            answer = connection.ask(request)
            if partition_of(answer).error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
                return None  # it leads now
            hints.add(leader_hint(cluster, answer, partition_of(answer), hinted))
    finally:
        connection.close()
    if hints != {None, leader}:
        return None
    connection = RawConnection(address_of(cluster, leader))
    try:
        answer = connection.ask(produce_request(13, "to the leader named", known_id))
    finally:
        connection.close()
    return True if produced(answer).error_code == 0 else None


def leader_hint(cluster: LiveCluster, answer: Any, part: Any, expected: bool) -> int | None:
    """The leader `part` names (its CurrentLeader), checked against the response's
    NodeEndpoints and the cluster's addresses; None where the version has none."""
    if not expected:
        assert part.current_leader is None
        return None
    leader = part.current_leader
    assert leader is not None and leader.leader_epoch >= 1, part
    [endpoint] = answer.node_endpoints
    assert endpoint.node_id == leader.leader_id
    assert (endpoint.host, endpoint.port) == address_of(cluster, leader.leader_id)
    assert endpoint.rack is None
    return int(leader.leader_id)


def test_a_fetch_from_a_replica_is_refused(cluster: LiveCluster) -> None:
    """tidelog's followers replicate over the peer protocol: a Fetch naming a replica
    (ReplicaId to v14, ReplicaState from v15) reads nothing, not even committed records."""
    known_id = new_topic(cluster, "replicated")
    state_cls = _APIS[ApiKey.FETCH].request_class.ReplicaState
    leader = Leader(cluster, "replicated")
    try:
        leader.ask(produce_request(9, "committed", "replicated"), produced)
        for version in FETCH_VERSIONS:
            key = key_of(version, "replicated", known_id)
            replica = 1 + version % 3
            if version >= 15:
                claim = {"replica_state": state_cls(replica_id=replica, replica_epoch=1)}
                consumer = {"replica_state": state_cls(replica_id=-1, replica_epoch=-1)}
            else:
                claim, consumer = {"replica_id": replica}, {"replica_id": -1}
            part = fetched(leader.connection.ask(fetch_request(version, [key], **claim)))
            assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, (version, part)
            assert not part.records
            answer = leader.ask(fetch_request(version, [key], **consumer), fetched)
            assert values_in(fetched(answer).records) == ["committed"], version
    finally:
        leader.close()


def test_no_client_reads_or_writes_the_metadata_log(cluster: LiveCluster) -> None:
    """The metadata log holds the SCRAM credentials and the ACLs: every node (the
    controller, which leads it, among them) answers a client's Fetch and Produce of it as
    of no topic, and serves none of its bytes, as Kafka serves none of its own."""
    for node in cluster.record["nodes"]:
        connection = RawConnection(address_of(cluster, node["id"]))
        try:
            read = fetched(connection.ask(fetch_request(12, [METADATA_TOPIC])))
            assert read.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, read
            assert not read.records
            written = produced(connection.ask(produce_request(9, "x", METADATA_TOPIC)))
            assert written.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION, written  # internal
        finally:
            connection.close()
