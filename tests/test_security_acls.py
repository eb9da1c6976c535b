"""Authorization: Kafka's ACL model, stored in the metadata log, enforced on every request
when the authorizer is on (`--authorizer`, `--super-users`).

A table of rules against requests (deny wins, ALL and implied operations, prefixed and
wildcard names, `User:*`, hosts, super users), the metadata log's validation, and a live
broker where alice may write and read `orders` and join `g1`, mallory may do nothing: with
kafka-python, confluent-kafka and kcat, mallory's produce, fetch, DeleteRecords,
DeleteTopics, group join and ACL changes are refused, a DENY rule then refuses alice, and
what alice wrote is all there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka import Producer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import ClusterAuthorizationFailedError, KafkaError
from kafka.structs import OffsetAndMetadata

from tidelog.errors import MetadataError
from tidelog.server.acl import (
    ALL,
    ALLOW,
    ALTER,
    CLUSTER,
    DENY,
    DESCRIBE,
    GROUP,
    LITERAL,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    Acl,
    Authorizer,
    acl_of,
)
from tidelog.testing.live import eventually, free_base_port, one_broker, poll, tidelog

ON = Authorizer(enabled=True, super_users=frozenset({"User:root"}))


def rule(
    permission: int,
    principal: str,
    operation: int,
    name: str = "orders",
    *,
    resource_type: int = TOPIC,
    pattern: int = LITERAL,
    host: str = "*",
) -> Acl:
    return Acl(resource_type, name, pattern, principal, host, operation, permission)


@pytest.mark.parametrize(
    ("acls", "principal", "host", "operation", "resource", "expected"),
    [
        ([], "User:alice", "10.0.0.1", READ, (TOPIC, "orders"), False),  # nothing: denied
        ([], "User:root", "10.0.0.1", ALTER, (CLUSTER, "kafka-cluster"), True),  # super user
        ([rule(ALLOW, "User:alice", READ)], "User:alice", "h", READ, (TOPIC, "orders"), True),
        ([rule(ALLOW, "User:alice", READ)], "User:bob", "h", READ, (TOPIC, "orders"), False),
        ([rule(ALLOW, "User:alice", READ)], "User:alice", "h", WRITE, (TOPIC, "orders"), False),
        ([rule(ALLOW, "User:alice", READ)], "User:alice", "h", DESCRIBE, (TOPIC, "orders"), True),
        ([rule(ALLOW, "User:alice", ALL)], "User:alice", "h", WRITE, (TOPIC, "orders"), True),
        ([rule(ALLOW, "User:*", READ)], "User:carol", "h", READ, (TOPIC, "orders"), True),
        ([rule(ALLOW, "User:alice", READ, "*")], "User:alice", "h", READ, (TOPIC, "x"), True),
        (
            [rule(ALLOW, "User:alice", READ, "ord", pattern=PREFIXED)],
            "User:alice",
            "h",
            READ,
            (TOPIC, "orders"),
            True,
        ),
        (
            [rule(ALLOW, "User:alice", READ, "ord", pattern=PREFIXED)],
            "User:alice",
            "h",
            READ,
            (TOPIC, "bord"),
            False,
        ),
        ([rule(ALLOW, "User:alice", READ)], "User:alice", "h", READ, (GROUP, "orders"), False),
        (
            [rule(ALLOW, "User:alice", READ, host="10.0.0.1")],
            "User:alice",
            "10.0.0.2",
            READ,
            (TOPIC, "orders"),
            False,
        ),
        (
            [rule(ALLOW, "User:alice", ALL), rule(DENY, "User:alice", WRITE)],
            "User:alice",
            "h",
            WRITE,
            (TOPIC, "orders"),
            False,
        ),  # deny wins
        (
            [rule(ALLOW, "User:alice", ALL), rule(DENY, "User:*", READ, "o", pattern=PREFIXED)],
            "User:alice",
            "h",
            READ,
            (TOPIC, "orders"),
            False,
        ),
    ],
)
def test_the_authorizer_decides_as_kafka_s(
    *,
    acls: list[Acl],
    principal: str,
    host: str,
    operation: int,
    resource: tuple[int, str],
    expected: bool,
) -> None:
    resource_type, name = resource
    decided = ON.allowed(
        set(acls),
        principal=principal,
        host=host,
        operation=operation,
        resource_type=resource_type,
        name=name,
    )
    assert decided is expected
    off = Authorizer(enabled=False, super_users=frozenset())
    assert off.allowed(
        set(acls),
        principal=principal,
        host=host,
        operation=operation,
        resource_type=resource_type,
        name=name,
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"resource_type": 9},
        {"pattern": 1},
        {"operation": 1},
        {"permission": 7},
        {"name": ""},
        {"principal": "alice"},
        {"resource_type": CLUSTER, "name": "other"},
        {"host": ""},
        {"operation": "many"},
    ],
)
def test_a_rule_that_cannot_be_right_is_refused(fields: dict[str, Any]) -> None:
    good = rule(ALLOW, "User:alice", READ).to_json()
    assert acl_of(good) == rule(ALLOW, "User:alice", READ)
    with pytest.raises(MetadataError):
        acl_of({**good, **fields})


# ---------------------------------------------------------------------- a live broker --
def sasl(bootstrap: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


def add_user(plain: str, name: str, password: str) -> None:
    added = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidelog",
            "users",
            "add",
            name,
            "--password-stdin",
            "--bootstrap-server",
            plain,
        ],
        input=password + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert added.returncode == 0, added.stderr


def acls(plain: str, *args: str) -> None:
    result = tidelog("acls", *args, "--bootstrap-server", plain)
    assert result.returncode == 0, result.stderr


def produced(settings: dict[str, Any], value: bytes) -> int | None:
    """The offset the record got, or None when it was refused."""
    producer = KafkaProducer(acks="all", max_block_ms=5000, **settings)
    try:
        return int(producer.send("orders", value).get(timeout=15).offset)
    except KafkaError:
        return None
    finally:
        producer.close()


def test_only_what_is_allowed_happens(tmp_path: Path) -> None:
    base = free_base_port()
    plain, secured = f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"
    with one_broker(
        tmp_path,
        base,
        f"{plain},SASL_PLAINTEXT://{secured}",
        "--authorizer",
        # The loopback PLAINTEXT listener is this test's administrator.
        "--super-users",
        "User:ANONYMOUS",
    ) as broker:
        poll(
            lambda: tidelog("topics", "list", "--bootstrap-server", plain).returncode == 0 or None,
            "the broker answers",
        )
        add_user(plain, "alice", "a-pass")
        add_user(plain, "mallory", "m-pass")
        created = tidelog(
            "topics",
            "create",
            "orders",
            "--partitions",
            "1",
            "--replication-factor",
            "1",
            "--bootstrap-server",
            plain,
        )
        assert created.returncode == 0, created.stderr
        for operation in ("WRITE", "READ"):
            acls(
                plain, "add", "--allow", "User:alice", "--operation", operation, "--topic", "orders"
            )
        acls(plain, "add", "--allow", "User:alice", "--operation", "READ", "--group", "g1")
        listed = tidelog("acls", "list", "--json", "--bootstrap-server", plain)
        assert len(json.loads(listed.stdout)) == 3
        alice, mallory = sasl(secured, "alice", "a-pass"), sasl(secured, "mallory", "m-pass")

        assert produced(alice, b"a1") is not None
        assert produced(mallory, b"m1") is None
        librdkafka = Producer(
            {
                "bootstrap.servers": secured,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "SCRAM-SHA-256",
                "sasl.username": "mallory",
                "sasl.password": "m-pass",
            }
        )
        errors: list[Any] = []
        librdkafka.produce("orders", b"m2", on_delivery=lambda e, m: errors.append(e))
        librdkafka.flush(30)
        del librdkafka  # its threads stop now, not with the broker gone
        assert errors and errors[0].code() == ConfluentError.TOPIC_AUTHORIZATION_FAILED
        kcat = shutil.which("kcat")
        assert kcat is not None, "kcat is installed by `make test`"
        read = subprocess.run(
            [
                kcat,
                "-b",
                secured,
                "-X",
                "security.protocol=SASL_PLAINTEXT",
                "-X",
                "sasl.mechanisms=SCRAM-SHA-512",
                "-X",
                "sasl.username=mallory",
                "-X",
                "sasl.password=m-pass",
                "-C",
                "-t",
                "orders",
                "-e",
                "-q",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert "a1" not in read.stdout
        assert "Authorization" in read.stderr or read.returncode != 0

        admin = KafkaAdminClient(**mallory)
        with pytest.raises(KafkaError):
            admin.delete_records({TopicPartition("orders", 0): 1})
        with pytest.raises(KafkaError):
            admin.delete_topics(["orders"])
        # DescribeQuorum wants DESCRIBE on the cluster, as Kafka's controller asks.
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.describe_metadata_quorum()
        superuser = KafkaAdminClient(bootstrap_servers=plain)
        quorum = superuser.describe_metadata_quorum()["topics"][0]["partitions"][0]
        superuser.close()
        assert (quorum["error"], quorum["leader_id"]) == (None, 1)
        from kafka.admin import (  # noqa: PLC0415  # noqa: PLC0415
            ACL,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ResourcePattern,
            ResourceType,
        )

        grant = ACL(
            "User:mallory",
            "*",
            ACLOperation.ALL,
            ACLPermissionType.ALLOW,
            ResourcePattern(ResourceType.TOPIC, "orders", ACLResourcePatternType.LITERAL),
        )
        assert admin.create_acls([grant])["failed"]
        admin.close()
        consumer = KafkaConsumer(
            "orders",
            group_id="g1",
            consumer_timeout_ms=3000,
            auto_offset_reset="earliest",
            **mallory,
        )
        with pytest.raises(KafkaError):
            list(consumer)
        consumer.close()
        reader = KafkaConsumer(
            "orders", group_id="g1", consumer_timeout_ms=3000, auto_offset_reset="earliest", **alice
        )
        assert [m.value for m in reader] == [b"a1"]
        reader.close()
        # The group's offsets of a topic alice may not describe are not hers to see, as in
        # Kafka: left out of "every offset", refused when named.
        assert tidelog(
            "topics", "create", "hidden", "--partitions", "1", "--replication-factor", "1",
            "--bootstrap-server", plain,
        ).returncode == 0  # fmt: skip
        committer = KafkaConsumer(bootstrap_servers=plain, group_id="g1")
        committer.commit({TopicPartition("hidden", 0): OffsetAndMetadata(0, "", -1)})
        committer.close()
        everyone = KafkaAdminClient(bootstrap_servers=plain)
        assert {tp.topic for tp in everyone.list_group_offsets({"g1": None})["g1"]} == {
            "orders",
            "hidden",
        }
        everyone.close()
        hers = KafkaAdminClient(**alice)
        assert {tp.topic for tp in hers.list_group_offsets({"g1": None})["g1"]} == {"orders"}
        with pytest.raises(KafkaError):
            hers.list_group_offsets({"g1": [TopicPartition("hidden", 0)]})
        hers.close()
        # `groups describe` says why a group cannot be described, not that it is missing.
        config = tmp_path / "mallory.properties"
        config.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
            "sasl.username=mallory\nsasl.password=m-pass\n"
        )
        refused = tidelog(
            "groups", "describe", "g1", "--bootstrap-server", secured,
            "--command-config", str(config),
        )  # fmt: skip
        assert refused.returncode == 1
        assert "GroupAuthorizationFailedError" in refused.stderr, refused.stderr
        # DENY wins over ALLOW.
        acls(plain, "add", "--deny", "User:alice", "--operation", "WRITE", "--topic", "orders")
        eventually(lambda: produced(alice, b"a2") is None, "alice's writes refused by DENY")
        acls(plain, "remove", "--deny", "User:alice", "--operation", "WRITE", "--topic", "orders")
        assert poll(lambda: produced(alice, b"a3"), "alice writes again") >= 0
        assert broker.poll() is None
