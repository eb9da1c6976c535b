"""Who a client is: SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) on SASL listeners, with the
users' salted SCRAM credentials in the metadata log.

The SCRAM server is checked against RFC 7677's example exchange and against kafka-python's
client, and every malformed message is a SaslError (never anything else). A secured cluster
(`cluster up --secure`, which creates the user `admin`) is used by kafka-python,
confluent-kafka and kcat over SASL_SSL; a wrong password, an unknown user and a request
before authenticating are refused; `tidelog users` (as `admin`, `--command-config`) adds,
lists and removes users, and a removed user is refused from then on.
"""

from __future__ import annotations

import base64
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.net.sasl.scram import ScramClient

from tidelog.protocol.scram import (
    MECHANISMS,
    SaslError,
    ScramCredential,
    ScramServer,
    check_plain,
    make_credential,
)
from tidelog.server.metadata import MetadataImage, encode_command
from tidelog.testing.live import LiveCluster, create_topic, eventually, tidelog

TOPIC = "sasl"
RECORDS = 100


def lookup_of(credentials: dict[tuple[str, str], ScramCredential]):  # type: ignore[no-untyped-def]
    return lambda user, mechanism: credentials.get((user, mechanism))


# ---------------------------------------------------------------------- the mechanisms --
def test_scram_sha_256_matches_rfc_7677_s_example() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = make_credential("SCRAM-SHA-256", "pencil", salt, 4096)
    server = ScramServer(
        "SCRAM-SHA-256",
        lookup_of({("user", "SCRAM-SHA-256"): credential}),
        "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )
    first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.user == "user"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_s_scram_client_authenticates_and_a_wrong_password_does_not(
    mechanism: str,
) -> None:
    credentials = {("alice", mechanism): make_credential(mechanism, "s3cret", b"0123456789abcdef")}
    for password, accepted in (("s3cret", True), ("s3cred", False)):
        client = ScramClient("alice", password, mechanism)
        server = ScramServer(mechanism, lookup_of(credentials), "servernonce")
        client.process_server_first_message(server.step(client.first_message()))
        if accepted:
            client.process_server_final_message(server.step(client.final_message()))
            assert server.user == "alice"
        else:
            with pytest.raises(SaslError, match="authentication failed"):
                server.step(client.final_message())
            assert server.user is None


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"n,,",
        b"p=tls-unique,,n=alice,r=abc",  # channel binding, not offered
        b"n,,n=mallory,r=abc",  # unknown user
        b"n,a=bob,n=alice,r=abc",  # another authorization id
        b"n,,n=alice,r=abc,ext=1",
        b"n,,n=ali=ce,r=abc",  # a bad escape
        b"n,,r=abc,n=alice",
        b"\xff\xfe",
        b"n,,n=alice,r=" + b"x" * 5000,
    ],
)
def test_a_malformed_client_first_message_is_a_sasl_error(first: bytes) -> None:
    credentials = {("alice", "SCRAM-SHA-256"): make_credential("SCRAM-SHA-256", "pw", b"salt")}
    server = ScramServer("SCRAM-SHA-256", lookup_of(credentials), "n")
    with pytest.raises(SaslError):
        server.step(first)


@pytest.mark.parametrize(
    "final",
    [
        b"c=biws,r=abcXn",  # no proof
        b"c=biws,r=wrongnonce,p=AAAA",
        b"c=eSws,r=abcn,p=AAAA",  # another channel binding
        b"c=biws,r=abcn,p=!!!",
        b"c=biws,r=abcn,p=AAAA",  # a proof of the wrong length
    ],
)
def test_a_malformed_client_final_message_is_a_sasl_error(final: bytes) -> None:
    credentials = {("alice", "SCRAM-SHA-256"): make_credential("SCRAM-SHA-256", "pw", b"salt")}
    server = ScramServer("SCRAM-SHA-256", lookup_of(credentials), "n")
    server.step(b"n,,n=alice,r=abc")
    with pytest.raises(SaslError):
        server.step(final)
    with pytest.raises(SaslError):
        server.step(b"c=biws,r=abcn,p=AAAA")  # nor can it go on


def test_plain_is_checked_against_the_scram_credential() -> None:
    credentials = {("bob", "SCRAM-SHA-512"): make_credential("SCRAM-SHA-512", "pw", b"salt")}
    assert check_plain(b"\0bob\0pw", lookup_of(credentials)) == "bob"
    for message in (b"\0bob\0nope", b"\0eve\0pw", b"bob\0pw", b"x\0bob\0pw", b"\0bob\0pw\0"):
        with pytest.raises(SaslError):
            check_plain(message, lookup_of(credentials))


def test_the_metadata_log_keeps_salted_credentials_and_skips_bad_commands() -> None:
    image = MetadataImage()
    credential = make_credential("SCRAM-SHA-512", "pw", b"salt", 4096)
    upsert = {
        "type": "upsert_scram",
        "user": "carol",
        "mechanism": "SCRAM-SHA-512",
        "iterations": 4096,
        "salt": base64.b64encode(credential.salt).decode(),
        "stored_key": base64.b64encode(credential.stored_key).decode(),
        "server_key": base64.b64encode(credential.server_key).decode(),
    }
    image.apply(0, encode_command(upsert))
    assert image.scram[("carol", "SCRAM-SHA-512")] == credential
    for offset, bad in enumerate(
        [
            {**upsert, "user": "dave", "iterations": 1},
            {**upsert, "user": "dave", "mechanism": "MD5"},
            {**upsert, "user": "dave", "salt": "***"},
            {**upsert, "user": ""},
            {"type": "delete_scram", "user": "carol"},
        ],
        start=1,
    ):
        image.apply(offset, encode_command(bad))
    assert list(image.scram) == [("carol", "SCRAM-SHA-512")]
    image.apply(
        9, encode_command({"type": "delete_scram", "user": "carol", "mechanism": "SCRAM-SHA-512"})
    )
    assert image.scram == {}


# ---------------------------------------------------------------------- a live cluster --
def api_versions_then_metadata(address: tuple[str, int], context: ssl.SSLContext) -> bytes:
    """ApiVersions (allowed before authenticating), then Metadata (not): what comes back
    for the Metadata request (b"": the connection was closed)."""
    api_versions = bytes.fromhex("0012000000000001000474657374")
    metadata = bytes.fromhex("000300000000000200047465737400000000")
    with (
        socket.create_connection(address, timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(struct.pack(">i", len(api_versions)) + api_versions)
        size = struct.unpack(">i", tls.recv(4))[0]
        received = b""
        while len(received) < size:
            received += tls.recv(size - len(received))
        tls.sendall(struct.pack(">i", len(metadata)) + metadata)
        try:
            return tls.recv(4)
        except OSError:
            return b""


def test_three_kinds_of_clients_over_sasl_ssl_and_who_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    cluster = LiveCluster(directory, secure=True)
    try:
        settings = cluster.sasl_properties
        bootstrap, ca = settings["bootstrap.servers"], settings["ssl.ca.location"]
        password = settings["sasl.password"]
        python_settings = cluster.sasl_settings
        create_topic(bootstrap, TOPIC, partitions=1, **python_settings)
        cluster.wait_hosted_everywhere(TOPIC, 1)
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **python_settings)
        sent = [producer.send(TOPIC, f"p{i}".encode()) for i in range(RECORDS)]
        producer.flush(timeout=60)
        assert all(future.get(timeout=60).offset >= 0 for future in sent)
        producer.close()
        librdkafka = {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": ca,
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": password,
        }
        delivered: list[object] = []
        confluent = Producer({**librdkafka, "acks": "all"})
        for i in range(RECORDS):
            confluent.produce(TOPIC, f"c{i}".encode(), on_delivery=lambda e, m: delivered.append(e))
        assert confluent.flush(60) == 0
        assert delivered == [None] * RECORDS
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            consumer_timeout_ms=3000,
            auto_offset_reset="earliest",
            **python_settings,
        )
        consumer.assign([TopicPartition(TOPIC, 0)])
        expected = [f"p{i}".encode() for i in range(RECORDS)] + [
            f"c{i}".encode() for i in range(RECORDS)
        ]
        assert [m.value for m in consumer] == expected
        consumer.close()
        kcat = shutil.which("kcat")
        assert kcat is not None, "kcat is installed by `make test`"
        kcat_flags = [
            "-b",
            bootstrap,
            "-X",
            "security.protocol=SASL_SSL",
            "-X",
            f"ssl.ca.location={ca}",
            "-X",
            "sasl.mechanisms=SCRAM-SHA-256",
            "-X",
            "sasl.username=admin",
        ]
        read = subprocess.run(
            [kcat, *kcat_flags, "-X", f"sasl.password={password}", "-C", "-t", TOPIC, "-e", "-q"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert read.returncode == 0, read.stderr
        assert read.stdout.split() == [value.decode() for value in expected]
        # Refused: a wrong password (kcat, confluent-kafka), a request before authenticating.
        wrong = subprocess.run(
            [kcat, *kcat_flags, "-X", "sasl.password=wrong", "-L", "-m", "5"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert wrong.returncode != 0
        assert "Authentication failed" in wrong.stderr
        stranger = Consumer({**librdkafka, "sasl.password": "wrong", "group.id": "g"})
        with pytest.raises(KafkaException):
            stranger.list_topics(timeout=5)
        stranger.close()
        context = ssl.create_default_context(cafile=ca)
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        assert api_versions_then_metadata((host, int(port)), context) == b""
        eventually(
            lambda: "METADATA before authenticating" in "".join(map(cluster.log_of, (1, 2, 3))),
            "a broker logs the Metadata request before authenticating",
        )
        # `tidelog users`: add a user, who then reads; remove it, and it is refused.
        admin = ("--command-config", str(cluster.sasl_properties_path))
        added = subprocess.run(
            [
                sys.executable,
                "-m",
                "tidelog",
                "users",
                "add",
                "reader",
                "--password-stdin",
                *admin,
            ],
            input="r34der\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert added.returncode == 0, added.stderr
        listed = tidelog("users", "list", "--json", *admin)
        assert '"reader": ["SCRAM-SHA-256", "SCRAM-SHA-512"]' in listed.stdout
        reader = [*kcat_flags[:-2], "-X", "sasl.username=reader", "-X", "sasl.password=r34der"]
        assert (
            subprocess.run(
                [kcat, *reader, "-L", "-m", "10"], capture_output=True, timeout=60, check=False
            ).returncode
            == 0
        )
        removed = tidelog("users", "remove", "reader", *admin)
        assert removed.returncode == 0, removed.stderr
        deadline = time.monotonic() + 30
        while (
            subprocess.run(
                [kcat, *reader, "-L", "-m", "3"], capture_output=True, timeout=60, check=False
            ).returncode
            == 0
        ):
            assert time.monotonic() < deadline, "a removed user is still let in"
    finally:
        cluster.down()
