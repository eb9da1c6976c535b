"""Client listeners as Kafka's: several per broker, each answered with the brokers' ports
of that same listener; SSL with the cluster's CA, and client certificates when required.

Real clients of three kinds (kafka-python, confluent-kafka, kcat) write and read through
the SSL listeners of a `cluster up --secure` cluster, checking the brokers' host names
against their certificates and presenting the cluster's admin client certificate (its
principal is a super user; without a certificate a client is anonymous, and refused, since
the cluster runs the authorizer); a single broker with `--ssl-client-auth required` refuses a
client without a certificate and serves one with a certificate of the cluster's CA.
"""

from __future__ import annotations

import datetime
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAuthorizationFailedError

from tidelog.client_config import read_properties
from tidelog.errors import ConfigError
from tidelog.server.app import exposure_warnings
from tidelog.server.config import load_config
from tidelog.testing.live import LiveCluster, eventually, free_base_port, one_broker, poll
from tidelog.tools.certs import issue, issue_node, make_ca

TOPIC = "tls"
RECORDS = 200
BASE = {"node_id": 1, "data_dir": "/nonexistent/d", "peers": "1@127.0.0.1:9192"}


def test_listeners_are_parsed_and_checked_as_kafka_s() -> None:
    config = load_config({**BASE, "listen": "PLAINTEXT://127.0.0.1:9092"}, None)
    assert [str(listener) for listener in config.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert config.listen == ("127.0.0.1", 9092)
    with pytest.raises(ConfigError, match=r"SSL://127\.0\.0\.1:9093 needs --ssl-ca"):
        load_config({**BASE, "listen": "127.0.0.1:9092,SSL://127.0.0.1:9093"}, None)
    with pytest.raises(ConfigError, match="PLAINTEXT is listed twice"):
        load_config({**BASE, "listen": "127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093"}, None)
    with pytest.raises(ConfigError, match="'TLS' is not one of"):
        load_config({**BASE, "listen": "TLS://127.0.0.1:9093"}, None)
    with pytest.raises(ConfigError, match="is also --listen PLAINTEXT"):
        load_config({**BASE, "listen": "127.0.0.1:9192"}, None)


def test_a_plaintext_listener_beyond_loopback_is_warned_about() -> None:
    local = load_config({**BASE, "listen": "127.0.0.1:9092"}, None)
    assert exposure_warnings(local) == []
    # Only parsed here: no test listens beyond 127.0.0.1.
    exposed = load_config(
        {
            **BASE,
            "listen": "0.0.0.0:9092",
            "advertised_listen": "10.1.2.3:9092",
            "peers": "1@10.1.2.3:9192",
        },
        None,
    )
    warnings = exposure_warnings(exposed)
    assert len(warnings) == 2
    assert "PLAINTEXT://0.0.0.0:9092 is not loopback and has no TLS" in warnings[0]
    assert "peer listener 10.1.2.3:9192 is not loopback and has no TLS" in warnings[1]


def ssl_settings(ca: Path) -> dict[str, object]:
    return {"security_protocol": "SSL", "ssl_cafile": str(ca), "ssl_check_hostname": True}


def test_three_kinds_of_clients_write_and_read_over_ssl(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path / "cluster", secure=True)
    try:
        properties = read_properties(tmp_path / "cluster" / "client-ssl.properties")
        ca = properties["ssl.ca.location"]
        cert, key = properties["ssl.certificate.location"], properties["ssl.key.location"]
        bootstrap = ",".join(node["ssl"] for node in cluster.record["nodes"])
        assert properties["bootstrap.servers"] == bootstrap
        anonymous = ssl_settings(Path(ca))
        settings = {**anonymous, "ssl_certfile": cert, "ssl_keyfile": key}
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, **settings)
        admin.create_topics([NewTopic(TOPIC, 1, 3)])
        admin.close()
        cluster.wait_hosted_everywhere(TOPIC, 1)
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **settings)
        sent = [producer.send(TOPIC, f"r{i}".encode()) for i in range(RECORDS)]
        producer.flush(timeout=60)
        assert all(future.get(timeout=60).offset >= 0 for future in sent)
        # The brokers this client learnt of are the SSL listeners, not the plaintext ones.
        assert {b.port for b in producer._metadata.brokers()} == {
            int(node["ssl"].rsplit(":", 1)[1]) for node in cluster.record["nodes"]
        }
        producer.close()
        stranger = KafkaProducer(
            bootstrap_servers=bootstrap, acks=1, enable_idempotence=False, **anonymous
        )
        with pytest.raises(TopicAuthorizationFailedError):  # TLS, but no certificate
            stranger.send(TOPIC, b"anonymous").get(timeout=30)
        stranger.close()
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            consumer_timeout_ms=3000,
            auto_offset_reset="earliest",
            **settings,
        )
        consumer.assign([TopicPartition(TOPIC, 0)])
        assert [m.value for m in consumer] == [f"r{i}".encode() for i in range(RECORDS)]
        consumer.close()
        librdkafka = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "security.protocol": "SSL",
                "ssl.ca.location": ca,
                "ssl.certificate.location": cert,
                "ssl.key.location": key,
                "group.id": "tls-readers",
                "auto.offset.reset": "earliest",
            }
        )
        librdkafka.subscribe([TOPIC])
        seen: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(seen) < RECORDS and time.monotonic() < deadline:
            message = librdkafka.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value())
        librdkafka.close()
        assert seen == [f"r{i}".encode() for i in range(RECORDS)]
        kcat = shutil.which("kcat")
        assert kcat is not None, "kcat is installed by `make test`"
        result = subprocess.run(
            [
                kcat,
                "-b",
                bootstrap,
                "-X",
                "security.protocol=ssl",
                "-X",
                f"ssl.ca.location={ca}",
                "-X",
                f"ssl.certificate.location={cert}",
                "-X",
                f"ssl.key.location={key}",
                "-C",
                "-t",
                TOPIC,
                "-e",
                "-q",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [f"r{i}" for i in range(RECORDS)]
    finally:
        cluster.down()


API_VERSIONS_V0 = bytes.fromhex("0000000e0012000000000001000474657374")


def answer_to_api_versions(address: tuple[str, int], context: ssl.SSLContext) -> bytes:
    """What a TLS client gets back for an ApiVersions v0 request (b"": nothing)."""
    try:
        with (
            socket.create_connection(address, timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(API_VERSIONS_V0)
            return tls.recv(4)
    except OSError:
        return b""


def test_client_certificates_when_required(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    make_ca(certs, "one")
    node = issue_node(certs, 1)
    client = issue(certs, "alice", common_name="alice")
    make_ca(tmp_path / "other", "other")
    stranger = issue(tmp_path / "other", "mallory", common_name="mallory")
    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=400)
    expired = issue(certs, "old", common_name="alice", days=30, now=long_ago)
    base = free_base_port()
    with one_broker(
        tmp_path,
        base,
        f"SSL://127.0.0.1:{base}",
        "--ssl-ca",
        str(certs / "ca.crt"),
        "--ssl-cert",
        str(node.cert),
        "--ssl-key",
        str(node.key),
        "--ssl-client-auth",
        "required",
    ) as broker:
        bootstrap = f"127.0.0.1:{base}"
        settings = ssl_settings(certs / "ca.crt")

        mine = {"ssl_certfile": str(client.cert), "ssl_keyfile": str(client.key), **settings}

        def with_certificate() -> KafkaAdminClient | None:
            try:
                return KafkaAdminClient(bootstrap_servers=bootstrap, **mine)
            except KafkaError:
                return None

        admin = poll(with_certificate, "an admin client with a client certificate connects")
        admin.create_topics([NewTopic("alone", 1, 1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **mine)
        assert producer.send("alone", b"x").get(timeout=30).offset >= 0
        producer.close()
        # With its certificate a client is answered; without one, with one of another CA,
        # or with an expired one, the handshake fails and an ApiVersions request gets no
        # answer.
        for cert in (client, None, stranger, expired):
            context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
            if cert is not None:
                context.load_cert_chain(cert.cert, cert.key)
            answer = answer_to_api_versions(("127.0.0.1", base), context)
            assert (answer != b"") is (cert is client), cert
        eventually(lambda: broker.poll() is None, "the broker is still running")
