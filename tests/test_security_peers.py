"""Authenticated peers: mutual TLS between nodes, each certificate naming its node id.

A secured cluster (`tidelog cluster up --secure`: a CA and node certificates made with the
`cryptography` library) carries acks=all writes (of the user `admin`, over SASL_SSL) as
before, while every forged peer stream is refused with one log line and changes nothing:
a forged AppendRequest in plaintext, a stream with no certificate, a certificate of another
cluster's CA, and a real node's certificate used to claim another node's id. Every
acknowledged record reads back.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tidelog.core.messages import AppendRequest
from tidelog.errors import ConfigError
from tidelog.protocol.peer import PartitionKey, PeerEncoder
from tidelog.server.config import load_config
from tidelog.server.tls import TlsError, TlsFiles, node_id_of, peer_contexts
from tidelog.status import AdminAccess, access_for, read_status
from tidelog.testing.live import LiveCluster, create_topic, eventually, tidelog
from tidelog.tools.certs import CertError, issue, issue_node, make_ca
from tidelog.types import Epoch, NodeId, Offset
from tidelog.wal.batches import producer_batch

if TYPE_CHECKING:
    from conftest import PeerServer

TOPIC = "secured"
RECORDS = 300


def certificate_of(context: ssl.SSLContext, address: tuple[str, int]) -> dict[str, object]:
    with socket.create_connection(address, timeout=5) as raw, context.wrap_socket(raw) as tls:
        cert = tls.getpeercert()
    assert cert is not None
    return cert  # type: ignore[return-value]


def client_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.load_verify_locations(cafile=ca)
    if cert is not None and key is not None:
        context.load_cert_chain(cert, key)
    return context


# ---------------------------------------------------------------------- certificates ----
def test_node_certificates_name_their_node_and_keys_are_private(tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "c1")
    node = issue_node(tmp_path, 2)
    client = issue(tmp_path, "alice", common_name="alice")
    for path in (ca.key, node.key, client.key):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    contexts = peer_contexts(TlsFiles(ca.cert, node.cert, node.key))
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        connection, _ = server.accept()
        with contexts.server.wrap_socket(connection, server_side=True) as tls:
            tls.recv(1)

    thread = threading.Thread(target=serve)  # a node's server side, in this process
    thread.start()
    seen = certificate_of(client_context(ca.cert, client.cert, client.key), ("127.0.0.1", port))
    thread.join(timeout=5)
    server.close()
    assert node_id_of(seen) == 2
    assert node_id_of({"subjectAltName": (("DNS", "localhost"),)}) is None
    assert node_id_of(None) is None
    with pytest.raises(CertError, match="exists"):
        make_ca(tmp_path, "c1")


@pytest.mark.parametrize("shift", [-400, 400], ids=["expired", "not-yet-valid"])
def test_a_peer_certificate_out_of_its_validity_is_refused(tmp_path: Path, shift: int) -> None:
    """Node 2's certificate, signed by the cluster's CA but valid 30 days from `shift` days
    off today, does not get through node 1's TLS handshake."""
    ca = make_ca(tmp_path, "c1")
    node = issue_node(tmp_path, 1)
    then = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=shift)
    stale = issue_node(tmp_path, 2, days=30, now=then)
    contexts = peer_contexts(TlsFiles(ca.cert, node.cert, node.key))
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    refusals: list[ssl.SSLError] = []

    def serve() -> None:
        connection, _ = server.accept()
        connection.settimeout(10)
        try:
            with contexts.server.wrap_socket(connection, server_side=True) as tls:
                tls.recv(1)
        except ssl.SSLError as error:
            refusals.append(error)

    thread = threading.Thread(target=serve)  # a node's server side, in this process
    thread.start()
    forged = forged_append(2, 1)
    assert (
        attempt(("127.0.0.1", port), client_context(ca.cert, stale.cert, stale.key), forged) == b""
    )
    thread.join(timeout=10)
    server.close()
    assert len(refusals) == 1
    assert "certificate" in str(refusals[0]), refusals[0]


def test_a_bad_certificate_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "c1")
    node = issue_node(tmp_path, 1)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(TlsError, match=r"junk\.pem"):
        peer_contexts(TlsFiles(junk, node.cert, node.key))
    base = {
        "node_id": 1,
        "data_dir": str(tmp_path / "d"),
        "listen": "127.0.0.1:9092",
        "peers": "1@127.0.0.1:9192",
    }
    with pytest.raises(ConfigError, match="--ssl-ca needs --ssl-cert, --ssl-key too"):
        load_config({**base, "ssl_ca": str(ca.cert)}, None)
    short = tmp_path / "token"
    short.write_text("too-short\n")
    with pytest.raises(ConfigError, match="--admin-token-file: a token of 16"):
        load_config({**base, "admin_token_file": str(short)}, None)
    with pytest.raises(ConfigError, match="no such file"):
        load_config(
            {
                **base,
                "ssl_ca": str(ca.cert),
                "ssl_cert": str(tmp_path / "gone.crt"),
                "ssl_key": str(node.key),
            },
            None,
        )
    result = tidelog(
        "broker",
        "--node-id",
        "1",
        "--data-dir",
        str(tmp_path / "d"),
        "--listen",
        "127.0.0.1:9092",
        "--peers",
        "1@127.0.0.1:9192",
        "--ssl-ca",
        str(junk),
        "--ssl-cert",
        str(node.cert),
        "--ssl-key",
        str(node.key),
    )
    assert result.returncode == 2
    assert "junk.pem" in result.stderr
    assert not (tmp_path / "d").exists()


def test_a_peer_that_speaks_first_gets_through_the_tls_handshake(
    tmp_path: Path, peer_server: PeerServer
) -> None:
    """A dialling node sends its ClientHello the moment TCP connects. Node 1's peer server
    (on uvloop, as a node runs) must hand that first byte to the TLS handshake, not to a
    plaintext reader that upgrades later: 24 peers dialling at once all get through,
    and every handshake-and-frame they send is delivered."""
    ca = make_ca(tmp_path, "c1")
    own = issue_node(tmp_path, 1)
    other = issue_node(tmp_path, 2)
    contexts = peer_contexts(TlsFiles(ca.cert, own.cert, own.key))
    delivered: list[NodeId] = []
    with peer_server(lambda peer, _items: delivered.append(peer), contexts) as address:
        dialler = client_context(ca.cert, other.cert, other.key)
        streams = 24

        def dial(_: int) -> None:
            # The ClientHello leaves at once; the handshake times out in 5 s if node 1
            # has lost it.
            with (
                socket.create_connection(address, timeout=5) as raw,
                dialler.wrap_socket(raw) as tls,
            ):
                tls.sendall(forged_append(2, 1))

        with ThreadPoolExecutor(max_workers=streams) as pool:
            list(pool.map(dial, range(streams), timeout=60))
        eventually(lambda: len(delivered) == streams, lambda: f"{len(delivered)} delivered")
    assert delivered == [NodeId(2)] * streams


# ---------------------------------------------------------------------- a live cluster --
def produce_all(bootstrap: str, settings: dict[str, Any]) -> list[int]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=5, **settings)
    futures = [producer.send(TOPIC, f"r{i}".encode(), partition=0) for i in range(RECORDS)]
    producer.flush(timeout=60)
    offsets = [future.get(timeout=60).offset for future in futures]
    producer.close()
    return offsets


def read_all(bootstrap: str, settings: dict[str, Any]) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        consumer_timeout_ms=3000,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **settings,
    )
    consumer.assign([TopicPartition(TOPIC, 0)])
    values = [message.value for message in consumer]
    consumer.close()
    return values


def forged_append(sender: int, recipient: int) -> bytes:
    """A handshake claiming `sender`, then an AppendRequest in a far epoch with one batch."""
    encoder = PeerEncoder(node_id=NodeId(sender), cluster_id="tidelog")
    append = AppendRequest(
        sender=NodeId(sender),
        recipient=NodeId(recipient),
        epoch=Epoch(1000),
        prev_offset=Offset(0),
        prev_epoch=Epoch(0),
        batches=(producer_batch([b"FORGED"]),),
        hwm=Offset(1),
        sent_ms=0,
        log_start_offset=Offset(0),
    )
    return encoder.encode_handshake() + encoder.encode_frame([(PartitionKey(TOPIC, 0), append)])


def attempt(address: tuple[str, int], context: ssl.SSLContext | None, data: bytes) -> bytes:
    """Connect (over TLS with `context`), send `data`; what came back before the node
    closed the stream (b"": nothing, or the handshake failed)."""
    try:
        with socket.create_connection(address, timeout=10) as raw:
            stream = raw if context is None else context.wrap_socket(raw)
            with stream:
                stream.sendall(data)
                return stream.recv(1024)
    except OSError:
        return b""


def test_forged_peer_streams_are_refused_and_nothing_is_lost(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path / "cluster", secure=True)
    try:
        certs = tmp_path / "cluster" / "certs"
        bootstrap, settings = cluster.sasl_bootstrap, cluster.sasl_settings
        create_topic(bootstrap, TOPIC, partitions=1, **settings)
        cluster.wait_hosted_everywhere(TOPIC, 1)
        offsets = produce_all(bootstrap, settings)
        first = offsets[0]  # after the leader's epoch-start batch
        assert offsets == list(range(first, first + RECORDS))
        peers = {n["id"]: n["peer"] for n in cluster.record["nodes"]}
        host, port = peers[2].rsplit(":", 1)
        address = (host, int(port))
        ca = certs / "ca.crt"
        forged = forged_append(1, 2)
        # 1. Plaintext: the forged append is no TLS ClientHello.
        assert attempt(address, None, forged) == b""
        # 2. TLS without a client certificate.
        assert attempt(address, client_context(ca), forged) == b""
        # 3. A certificate of another cluster's CA (naming node 1).
        make_ca(tmp_path / "foreign", "other")
        other = issue_node(tmp_path / "foreign", 1)
        assert attempt(address, client_context(ca, other.cert, other.key), forged) == b""
        # 4. Node 3's own certificate, claiming to be node 1.
        node_3 = client_context(ca, certs / "node-3.crt", certs / "node-3.key")

        def refused_for_its_claim() -> bool:
            """One more such stream (a loaded machine may time its TLS handshake out
            first); True once node 2 has refused one for the id it claims."""
            assert attempt(address, node_3, forged) == b""
            return "claims node 1: its certificate names node 3" in cluster.log_of(2)

        eventually(
            refused_for_its_claim,
            "node 2 logs the stream claiming node 1 with node 3's certificate",
            interval_s=1.0,
        )
        assert cluster.log_of(2).count("refused a peer connection from") >= 3
        # Nothing forged was taken: the cluster still writes, and reads back exactly
        # what was acknowledged.
        more = produce_all(bootstrap, settings)
        assert more == list(range(first + RECORDS, first + 2 * RECORDS))
        values = read_all(bootstrap, settings)
        assert values == [f"r{i}".encode() for i in range(RECORDS)] * 2
        assert b"FORGED" not in b"".join(values)
        # The admin endpoint: HTTPS with the cluster's CA, and only with its token.
        admin = cluster.record["nodes"][0]["admin"]
        access = access_for(tmp_path / "cluster")
        assert access.ca is not None and access.token is not None
        assert read_status(admin, access=access) is not None
        assert read_status(admin) is None  # plain HTTP
        assert read_status(admin, access=AdminAccess(ca=access.ca)) is None  # no token
        assert read_status(admin, access=AdminAccess(ca=access.ca, token="x" * 32)) is None
        status = tidelog("cluster", "status", "--data-dir", str(tmp_path / "cluster"), "--json")
        assert status.returncode == 0 and '"ready": true' in status.stdout, status.stdout
    finally:
        cluster.down()
