"""Three hosts: each broker in a Linux network namespace of its own, joined by a bridge as
separate machines are by a switch (tidelog.testing.netns; issue 44). The tests' own clients
run in this namespace and reach the hosts across the bridge; `tidelog consume` runs on a
fourth host, which has no broker.

- Every broker is named by its host's address in Metadata, DescribeCluster and
  FindCoordinator, asked of any broker: node 1 too, which listens on 0.0.0.0 (Kafka, peers,
  admin) and advertises its address (`advertised_listen`). Never 127.0.0.1 or 0.0.0.0.
- Each node's live page reads the others' `/status` across the bridge: every node up.
- kafka-python, acks=all and idempotent, writes numbered records; the leader of a partition
  is killed with SIGKILL (by its PID) while writes are in flight, and the writes go on
  without it. Every acknowledged record is read back exactly once from the fourth host. The
  killed node restarts and catches up: each of its replicas reaches its leader's HWM and log
  end, in the leader's ISR, with the same batches below the HWM.
- The fourth host grows the cluster to four: its broker joins with `join = true`, its
  `[peers]` naming one running broker and itself, as an operator writes it on a new
  machine; every broker names it by its host's address, it hosts a new topic's replicas and
  votes in the metadata quorum (AddRaftVoter). Then it leaves (RemoveRaftVoter, the topic
  deleted, UnregisterBroker, stopped) and the three others name only themselves again.
"""

from __future__ import annotations

import ipaddress
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from tidelog.address import parse_address
from tidelog.protocol.kafka import ApiKey, request_class
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.testing.live import (
    ask_once,
    create_topic,
    dump_log,
    eventually,
    first_picture,
    poll,
    tidelog,
)
from tidelog.testing.netns import PEER_PORT, Cluster, network

pytestmark = pytest.mark.timeout(120)

TOPIC = "multihost"
PARTITIONS = 3
BROKERS = 3
CLIENT_HOST = 4  # no broker here: a client's own machine
RECORDS_BEFORE = 1000  # acknowledged before the kill
RECORDS_IN_FLIGHT = 500  # sent, not yet acknowledged, when the leader is killed
RECORDS_AFTER = 1000  # sent while it is down
FLUSH_S = 60.0
CATCH_UP_S = 30.0
JOINING = CLIENT_HOST  # the host where a fourth broker joins, at the end
JOIN_BOOTSTRAP = 2  # the one broker its [peers] names, with itself
GROWN = "grown"  # a topic with replicas on the joined host


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with network(BROKERS + 1) as net:
        hosts = Cluster(net, tmp_path_factory.mktemp("multihost"), nodes=BROKERS, wildcard=(1,))
        try:
            hosts.start_all()
            hosts.wait_ready()
            yield hosts
        finally:
            hosts.close()


def addresses(cluster: Cluster) -> dict[int, str]:
    return {node: cluster.net.host(node).address for node in cluster.nodes}


def test_every_broker_is_named_by_its_host_s_address(cluster: Cluster) -> None:
    expected = {node: (address, 9092) for node, address in addresses(cluster).items()}
    assert "0.0.0.0:9092" in cluster.config_path(1).read_text()  # node 1 binds every address
    for node in cluster.nodes:  # each broker answers alone, from its own view
        answer = ask_once(parse_address(cluster.kafka(node)), MetadataRequest[1](topics=None))
        assert {b.node_id: (b.host, b.port) for b in answer.brokers} == expected
    for host, _ in expected.values():
        assert not ipaddress.ip_address(host).is_loopback
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka(2), request_timeout_ms=20_000)
    try:
        described = admin.describe_cluster()["brokers"]
        assert {b["broker_id"]: (b["host"], b["port"]) for b in described} == expected
    finally:
        admin.close()
    create_topic(cluster.bootstrap, "groups-here", partitions=1)  # __consumer_offsets too
    for node in cluster.nodes:  # FindCoordinator names the coordinator's host, as Metadata

        def coordinator(node: int = node) -> Any:
            request = FindCoordinatorRequest[1](key="g", key_type=0)
            answer = ask_once(parse_address(cluster.kafka(node)), request)
            return answer if answer.error_code == 0 else None

        answer = poll(coordinator, f"node {node}'s answer to FindCoordinator")
        assert (answer.host, answer.port) == expected[answer.node_id]


def test_the_live_page_gathers_every_host(cluster: Cluster) -> None:
    """Each node's page shows every node up: it reads the others' `/status` on their hosts
    (node 1's admin endpoint on 0.0.0.0, the others' on their address)."""
    for node in cluster.nodes:

        def all_up(node: int = node) -> dict[str, Any] | None:
            picture = first_picture(cluster.admin(node))
            return picture if all(n["up"] for n in picture["nodes"]) else None

        picture = poll(all_up, f"node {node}'s page with every node up")
        assert [n["node_id"] for n in picture["nodes"]] == list(cluster.nodes)


def produce(producer: KafkaProducer, first: int, count: int) -> list[Any]:
    """Records `first`.. to every partition in turn (record n to partition n mod 3), so
    the partition whose leader dies keeps being written to."""
    return [
        producer.send(TOPIC, value=f"r{n:06d}".encode(), partition=n % PARTITIONS)
        for n in range(first, first + count)
    ]


def acknowledged(futures: list[Any]) -> dict[bytes, tuple[int, int]]:
    """value -> (partition, offset) of every send acknowledged; each must be."""
    acked: dict[bytes, tuple[int, int]] = {}
    for number, future in enumerate(futures):
        metadata = future.get(timeout=FLUSH_S)
        acked[f"r{number:06d}".encode()] = (metadata.partition, metadata.offset)
    return acked


def consume_on_client_host(cluster: Cluster, bootstrap: str, count: int, cwd: Path) -> list[str]:
    """What `tidelog consume` reads from the start, on the host without a broker."""
    out = cluster.net.run(
        cluster.net.host(CLIENT_HOST),
        [
            sys.executable, "-m", "tidelog", "consume", TOPIC, "--bootstrap-server", bootstrap,
            "--from-beginning", "--max-messages", str(count), "--timeout-ms", "10000",
        ],
        cwd=cwd,
    )  # fmt: skip
    return out.splitlines()


def caught_up(cluster: Cluster, node: int) -> bool:
    """Whether each of `node`'s replicas has its leader's HWM and log end, in its ISR."""
    for partition in range(PARTITIONS):
        leader = cluster.leader_of(TOPIC, partition)
        if leader is None:
            return False
        lead = cluster.replica(leader, TOPIC, partition)
        mine = cluster.replica(node, TOPIC, partition)
        if lead is None or mine is None or node not in lead["isr"]:
            return False
        if (mine["hwm"], mine["log_end_offset"]) != (lead["hwm"], lead["log_end_offset"]):
            return False
    return True


def batches_below(directory: Path, hwm: int) -> list[tuple[int, int, int]]:
    return [
        (batch["baseOffset"], batch["partitionLeaderEpoch"], batch["crc"])
        for batch in dump_log(directory)
        if batch["lastOffset"] < hwm
    ]


def test_a_killed_leader_loses_no_acknowledged_write_and_catches_up(
    cluster: Cluster, tmp_path: Path
) -> None:
    create_topic(cluster.bootstrap, TOPIC, partitions=PARTITIONS)
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap.split(","),
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        request_timeout_ms=10_000,
        delivery_timeout_ms=int(FLUSH_S * 1000),
        retry_backoff_ms=50,
        metadata_max_age_ms=1000,
    )
    try:
        futures = produce(producer, 0, RECORDS_BEFORE)
        producer.flush(FLUSH_S)
        assert len(acknowledged(futures)) == RECORDS_BEFORE
        before = consume_on_client_host(cluster, cluster.bootstrap, RECORDS_BEFORE, tmp_path)
        assert sorted(before) == [f"r{n:06d}" for n in range(RECORDS_BEFORE)]

        killed = cluster.leader_of(TOPIC, 0)
        assert killed is not None
        futures += produce(producer, len(futures), RECORDS_IN_FLIGHT)
        cluster.kill(killed)
        futures += produce(producer, len(futures), RECORDS_AFTER)
        producer.flush(FLUSH_S)
        acked = acknowledged(futures)
    finally:
        producer.close(timeout=10)
    total = RECORDS_BEFORE + RECORDS_IN_FLIGHT + RECORDS_AFTER
    assert len(acked) == total
    # Writes to partition 0 went on without it: acknowledged by a new leader, in a new epoch.
    offsets = [acked[f"r{n:06d}".encode()] for n in range(0, total, PARTITIONS)]
    last_before = max(offset for _, offset in offsets[: RECORDS_BEFORE // PARTITIONS])
    assert all(offset > last_before for _, offset in offsets[-10:])
    survivors = ",".join(cluster.kafka(node) for node in cluster.nodes if node != killed)
    read = consume_on_client_host(cluster, survivors, total, tmp_path)
    assert sorted(read) == sorted(value.decode() for value in acked)  # each exactly once

    cluster.start(killed)
    cluster.wait_ready([killed])
    eventually(lambda: caught_up(cluster, killed), f"{killed} caught up", deadline_s=CATCH_UP_S)
    for partition in range(PARTITIONS):
        leader = cluster.leader_of(TOPIC, partition)
        assert leader is not None
        hwm = (cluster.replica(leader, TOPIC, partition) or {})["hwm"]
        name = f"{TOPIC}-{partition}"
        assert batches_below(cluster.directory / f"node-{killed}" / name, hwm) == batches_below(
            cluster.directory / f"node-{leader}" / name, hwm
        )
    # The restarted node alone bootstraps a client on another host.
    again = consume_on_client_host(cluster, cluster.kafka(killed), total, tmp_path)
    assert sorted(again) == sorted(read)


def join_config(cluster: Cluster) -> str:
    """The new host's settings: its own, `join = true`, and a bootstrap of one broker."""
    own = cluster.config_text(JOINING).split("[peers]")[0]
    peers = [
        f'"{node}" = "{cluster.net.host(node).address}:{PEER_PORT}"'
        for node in (JOIN_BOOTSTRAP, JOINING)
    ]
    return own + "join = true\n[peers]\n" + "\n".join(peers) + "\n"


def brokers_of(cluster: Cluster, asked: int) -> dict[int, str]:
    answer = ask_once(parse_address(cluster.kafka(asked)), MetadataRequest[1](topics=[]))
    return {int(broker.node_id): str(broker.host) for broker in answer.brokers}


def voters_of(cluster: Cluster) -> list[int]:
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka(1), request_timeout_ms=20_000)
    try:
        partition = admin.describe_metadata_quorum()["topics"][0]["partitions"][0]
    finally:
        admin.close()
    return sorted(int(voter["replica_id"]) for voter in partition["current_voters"])


def ask(cluster: Cluster, key: ApiKey, **fields: Any) -> Any:
    return ask_once(parse_address(cluster.kafka(1)), request_class(key)[0](**fields))


def voter_change(cluster: Cluster, key: ApiKey, node: int, **fields: Any) -> int:
    zero = uuid.UUID(int=0)
    answer = ask(cluster, key, cluster_id=None, voter_id=node, voter_directory_id=zero, **fields)
    return int(answer.error_code)


def test_a_fourth_host_joins_votes_and_leaves(cluster: Cluster) -> None:
    path = cluster.directory / f"node-{JOINING}.toml"
    path.write_text(join_config(cluster))
    log = (cluster.directory / f"node-{JOINING}.log").open("ab")
    cluster.logs[JOINING] = log  # closed with the cluster's, and its process stopped
    argv = [sys.executable, "-m", "tidelog", "broker", "--config", str(path)]
    process = cluster.net.start(cluster.net.host(JOINING), argv, log=log)
    cluster.processes[JOINING] = process
    cluster.wait_ready([JOINING])
    hosts = {node: cluster.net.host(node).address for node in (*cluster.nodes, JOINING)}
    for asked in (1, JOINING):
        eventually(lambda asked=asked: brokers_of(cluster, asked) == hosts, f"node {asked}")

    create_topic(cluster.kafka(JOINING), GROWN, partitions=4)  # replicas on every host
    eventually(lambda: len(hosted(cluster, JOINING)) == 3, "node 4 hosts 3 of 4 partitions")
    added = voter_change(cluster, ApiKey.ADD_RAFT_VOTER, JOINING, timeout_ms=30_000, listeners=[])
    assert added == ErrorCode.NONE
    assert voters_of(cluster) == [1, 2, 3, 4]

    assert voter_change(cluster, ApiKey.REMOVE_RAFT_VOTER, JOINING) == 0
    assert voters_of(cluster) == [1, 2, 3]
    refused = ask(cluster, ApiKey.UNREGISTER_BROKER, broker_id=JOINING)
    assert refused.error_code == ErrorCode.INVALID_REQUEST  # it holds replicas still
    deleted = tidelog("topics", "delete", GROWN, "--bootstrap-server", cluster.kafka(1))
    assert deleted.returncode == 0, deleted.stderr
    eventually(lambda: not hosted(cluster, JOINING), "node 4 hosts nothing")
    assert ask(cluster, ApiKey.UNREGISTER_BROKER, broker_id=JOINING).error_code == 0
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    del hosts[JOINING]
    for asked in cluster.nodes:
        eventually(lambda asked=asked: brokers_of(cluster, asked) == hosts, f"node {asked}")
    create_topic(cluster.bootstrap, "after", partitions=1)  # three hosts still commit


def hosted(cluster: Cluster, node: int) -> list[int]:
    """The partitions of GROWN node `node` says it hosts."""
    states = (cluster.status(node) or {}).get("partitions", [])
    return [state["partition"] for state in states if state["topic"] == GROWN]


def make_certificates(certs: Path, hosts: dict[int, str]) -> None:
    """A CA, each node's certificate naming its host (`hosts`: node -> address) and the
    admin token, with `tidelog certs` as docs/deploy.md makes them."""
    made = [tidelog("certs", "ca", "--dir", str(certs), "--cluster", "multihost")]
    for node, address in hosts.items():
        made.append(tidelog("certs", "node", "--dir", str(certs), "--node-id", str(node),
                            "--host", address))  # fmt: skip
    made.append(tidelog("certs", "token", "--dir", str(certs)))
    assert [done.returncode for done in made] == [0] * len(made), made


def test_a_secured_cluster_across_hosts(tmp_path: Path) -> None:
    """Certificates from `tidelog certs` naming each host's address: peer links are mutual
    TLS, clients reach the SSL listeners checking host names, and each node's live page
    reads the others' HTTPS admin endpoints with the token (checking their names too)."""
    certs = tmp_path / "certs"
    with network(BROKERS + 1) as net:
        make_certificates(certs, {node: net.host(node).address for node in range(1, BROKERS + 1)})
        secure = Cluster(net, tmp_path / "cluster", nodes=BROKERS, wildcard=(1,), certs=certs)
        try:
            secure.start_all()
            secure.wait_ready()
            for node in secure.nodes:
                assert "(mutual TLS)" in secure.log_path(node).read_text()
            ssl: dict[str, Any] = {
                "security_protocol": "SSL",
                "ssl_cafile": str(certs / "ca.crt"),
                "ssl_check_hostname": True,  # the advertised address against the certificate
            }
            create_topic(secure.ssl_bootstrap, "secure", partitions=1, **ssl)
            producer = KafkaProducer(
                bootstrap_servers=secure.ssl_bootstrap.split(","),
                acks="all",
                enable_idempotence=True,
                **ssl,
            )
            try:
                futures = [producer.send("secure", f"s{n}".encode()) for n in range(100)]
                producer.flush(FLUSH_S)
                assert all(future.get(timeout=FLUSH_S).offset >= 0 for future in futures)
            finally:
                producer.close(timeout=10)
            properties = tmp_path / "client-ssl.properties"
            properties.write_text(f"security.protocol=SSL\nssl.ca.location={certs / 'ca.crt'}\n")
            read = net.run(
                net.host(CLIENT_HOST),
                [
                    sys.executable, "-m", "tidelog", "consume", "secure", "--bootstrap-server",
                    secure.ssl_bootstrap, "--command-config", str(properties),
                    "--from-beginning", "--max-messages", "100", "--timeout-ms", "10000",
                ],
                cwd=tmp_path,
            ).splitlines()  # fmt: skip
            assert sorted(read) == sorted(f"s{n}" for n in range(100))
            for node in secure.nodes:

                def all_up(node: int = node) -> dict[str, Any] | None:
                    picture = first_picture(secure.admin(node), secure.access)
                    return picture if all(n["up"] for n in picture["nodes"]) else None

                poll(all_up, f"node {node}'s page with every node up, over HTTPS")
        finally:
            secure.close()
