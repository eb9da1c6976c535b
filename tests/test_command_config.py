"""`--command-config`: Kafka client properties for every client command, and a `cluster up
--secure` cluster that needs them.

The properties (librdkafka's names) map to kafka-python's keyword arguments as a table says;
a file that cannot be read, a line that is not `name=value` and a wrong security setting are
clear errors naming the file, before anything connects. `--command-config` comes before
`$TIDELOG_COMMAND_CONFIG`, which comes before a running secure local cluster's
client-sasl.properties; `--bootstrap-server` before the file's bootstrap.servers. The
principal `cluster up --secure` names a super user is the one a broker's SSL listener sees
for the cluster's admin client certificate (with which `cluster up` creates `admin`).

One live secure cluster: an anonymous client of its loopback PLAINTEXT listener is refused
produce, CreateTopics and DeleteTopics (TOPIC_AUTHORIZATION_FAILED, as Kafka refuses them),
while `tidelog topics create/describe`, `produce`, `consume`, `get-offsets`, `users list` and
`acls list` work with `--command-config DIR/client-sasl.properties`, with
`$TIDELOG_COMMAND_CONFIG`, and by default with the cluster as the local one.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import TopicAuthorizationFailedError

from tidelog.cli import main
from tidelog.client_config import ClientConfigError, read_properties, security_of
from tidelog.server.session import principal_of
from tidelog.server.tls import TlsFiles, listener_context
from tidelog.status import access_for, read_status
from tidelog.testing.live import LiveCluster, collect_leaked_sockets, eventually
from tidelog.tools.certs import issue, make_ca
from tidelog.tools.client_kafka import ClientError
from tidelog.tools.client_options import resolve_client
from tidelog.tools.cluster import (
    admin_client_principal,
    broker_argv,
    make_certificates,
    plan_cluster,
    ssl_properties,
)

TOPIC = "orders"


@pytest.fixture(autouse=True)
def no_local_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No local cluster and no $TIDELOG_COMMAND_CONFIG unless a test sets them."""
    monkeypatch.setenv("TIDELOG_DATA_DIR", str(tmp_path / "no-cluster"))
    monkeypatch.delenv("TIDELOG_COMMAND_CONFIG", raising=False)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """Files for the ssl.*.location properties (their contents do not matter to the map)."""
    names = {"ca": "ca.crt", "cert": "client.crt", "key": "client.key"}
    for name in names.values():
        (tmp_path / name).write_text("PEM\n")
    return {key: str(tmp_path / name) for key, name in names.items()}


# ---------------------------------------------------------------------- the mapping -----
SASL = {"sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "admin"}


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        ({}, {"security_protocol": "PLAINTEXT"}),
        ({"client.id": "x", "linger.ms": "5"}, {"security_protocol": "PLAINTEXT"}),
        (
            {"security.protocol": "ssl", "ssl.ca.location": "{ca}"},
            {"security_protocol": "SSL", "ssl_check_hostname": True, "ssl_cafile": "{ca}"},
        ),
        (
            {
                "security.protocol": "SSL",
                "ssl.ca.location": "{ca}",
                "ssl.certificate.location": "{cert}",
                "ssl.key.location": "{key}",
                "ssl.key.password": "k3y",
                "ssl.endpoint.identification.algorithm": "none",
            },
            {
                "security_protocol": "SSL",
                "ssl_check_hostname": False,
                "ssl_cafile": "{ca}",
                "ssl_certfile": "{cert}",
                "ssl_keyfile": "{key}",
                "ssl_password": "k3y",
            },
        ),
        (
            {
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": "{ca}",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "admin",
                "sasl.password": "a=b",
            },
            {
                "security_protocol": "SASL_SSL",
                "ssl_check_hostname": True,
                "ssl_cafile": "{ca}",
                **SASL,
                "sasl_plain_password": "a=b",
            },
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "plain",  # librdkafka's other spelling, any case
                "sasl.username": "alice",
                "sasl.password": "pw",
                "ssl.ca.location": "/not/used/without/tls",
            },
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "sasl_plain_username": "alice",
                "sasl_plain_password": "pw",
            },
        ),
    ],
)
def test_properties_map_to_kafka_python_settings(
    properties: dict[str, str], expected: dict[str, Any], files: dict[str, str]
) -> None:
    given = {name: value.format(**files) for name, value in properties.items()}
    wanted = {
        name: value.format(**files) if isinstance(value, str) else value
        for name, value in expected.items()
    }
    assert security_of(given).kafka_python() == wanted


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"security.protocol": "TLS"}, "security.protocol=TLS: not one of PLAINTEXT, SSL,"),
        ({"security.protocol": "SASL_SSL"}, "SASL_SSL with no sasl.mechanism: want one of"),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"},
            "with sasl.mechanism=GSSAPI: want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
        ),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"},
            "security.protocol=SASL_SSL needs sasl.password",
        ),
        (
            {"security.protocol": "SSL", "ssl.ca.location": "/no/such/ca.crt"},
            "ssl.ca.location=/no/such/ca.crt: no such file",
        ),
        (
            {"security.protocol": "SSL", "ssl.certificate.location": "{cert}"},
            "ssl.certificate.location and ssl.key.location go together",
        ),
    ],
)
def test_wrong_security_settings_are_refused(
    properties: dict[str, str], message: str, files: dict[str, str]
) -> None:
    given = {name: value.format(**files) for name, value in properties.items()}
    with pytest.raises(ClientConfigError, match=message):
        security_of(given)


def test_a_password_is_never_shown() -> None:
    security = security_of(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "s3cret",
        }
    )
    assert "s3cret" not in repr(security)


def test_the_tls_context_loads_the_ca_and_the_client_certificate(tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "c1")
    client = issue(tmp_path, "alice", common_name="alice")
    tls = {"security.protocol": "SSL", "ssl.ca.location": str(ca.cert)}
    mine = {
        **tls,
        "ssl.certificate.location": str(client.cert),
        "ssl.key.location": str(client.key),
    }
    assert security_of(mine).ssl_context() is not None
    assert security_of({}).ssl_context() is None
    with pytest.raises(ClientConfigError, match="TLS with"):
        security_of({**tls, "ssl.ca.location": str(client.key)}).ssl_context()


def test_properties_files_are_read_as_kafka_s(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# a comment\n! another\n\n  bootstrap.servers = h:1,h:2  \nsasl.password=a=b\n"
    )
    assert read_properties(path) == {"bootstrap.servers": "h:1,h:2", "sasl.password": "a=b"}
    path.write_text("security.protocol=SSL\nnot a property\n")
    with pytest.raises(ClientConfigError, match=r"bad line of --command-config .*'not a prop"):
        read_properties(path)
    with pytest.raises(ClientConfigError, match="No such file"):
        read_properties(tmp_path / "missing")
    with pytest.raises(ClientConfigError, match="Is a directory"):
        read_properties(tmp_path)


def principal_seen_by_a_listener(certs: Path, node: int, client: Path, key: Path) -> str:
    """The principal a broker's SSL listener (client certificates requested) gives a client
    presenting `client`: a TLS handshake in this process."""
    files = TlsFiles(certs / "ca.crt", certs / f"node-{node}.crt", certs / f"node-{node}.key")
    server = socket.create_server(("127.0.0.1", 0))
    seen: list[str] = []

    def serve() -> None:
        connection, _ = server.accept()
        context = listener_context(files, "requested")
        with context.wrap_socket(connection, server_side=True) as tls:
            seen.append(principal_of(tls.getpeercert()))  # type: ignore[arg-type]
            tls.sendall(b"x")

    thread = threading.Thread(target=serve)
    thread.start()
    context = security_of(
        {
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs / "ca.crt"),
            "ssl.certificate.location": str(client),
            "ssl.key.location": str(key),
        }
    ).ssl_context()
    assert context is not None
    address = server.getsockname()
    with (
        socket.create_connection(address, timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.recv(1) == b"x"
    thread.join(timeout=10)
    server.close()
    return seen[0]


def test_a_secure_cluster_s_brokers_authorize_with_its_admin_certificate_a_super_user(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "odd name;here"  # the CA's name keeps only plain characters
    directory.mkdir()
    record = plan_cluster(directory, nodes=3, base_port=9092, secure=True)
    certs = make_certificates(directory, record)
    principal = "User:CN=tidelog admin,O=tidelog cluster odd-name-here"
    assert admin_client_principal(directory) == principal
    argv = broker_argv(record, record.node(2))
    assert "--authorizer" in argv
    assert f"--super-users=User:admin;{principal}" in argv
    assert "--ssl-client-auth=requested" in argv
    # The principal named a super user is the one a broker's listener sees.
    seen = principal_seen_by_a_listener(
        certs, 2, certs / "admin-client.crt", certs / "admin-client.key"
    )
    assert seen == principal
    assert ssl_properties(directory, record)["ssl.certificate.location"] == str(
        (certs / "admin-client.crt").resolve()
    )


# ---------------------------------------------------------------------- which settings --
def write(path: Path, properties: dict[str, str]) -> Path:
    path.write_text("".join(f"{name}={value}\n" for name, value in properties.items()))
    return path


def fake_local_cluster(directory: Path, *, secure: bool) -> None:
    """A cluster.json a running cluster would have (this process's pid), and its
    client-sasl.properties."""
    directory.mkdir()
    nodes = [{"id": 1, "pid": os.getpid()}]
    cluster = {"bootstrap": "127.0.0.1:1", "secure": secure, "nodes": nodes}
    (directory / "cluster.json").write_text(json.dumps(cluster))
    sasl = {"sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "pw"}
    write(
        directory / "client-sasl.properties",
        {"bootstrap.servers": "127.0.0.1:401", "security.protocol": "SASL_SSL", **sasl},
    )


def test_the_settings_come_from_flag_then_variable_then_local_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    named = write(tmp_path / "named", {"bootstrap.servers": "h:9", "security.protocol": "SSL"})
    other = write(tmp_path / "other", {"bootstrap.servers": "o:9"})
    client = resolve_client(None, named)
    assert (client.bootstrap, client.security.protocol) == ("h:9", "SSL")
    assert client.properties == {"security.protocol": "SSL"}
    assert client.kafka_python["bootstrap_servers"] == "h:9"
    assert resolve_client("b:1", named).bootstrap == "b:1"  # --bootstrap-server first
    monkeypatch.setenv("TIDELOG_COMMAND_CONFIG", str(other))
    assert resolve_client(None, None).bootstrap == "o:9"
    assert resolve_client(None, named).bootstrap == "h:9"  # --command-config first
    monkeypatch.delenv("TIDELOG_COMMAND_CONFIG")
    # $TIDELOG_DATA_DIR names a directory without cluster.json: said so, not guessed past.
    with pytest.raises(ClientError, match=r"no-cluster has no cluster.json \(no local cluster"):
        resolve_client(None, None)
    monkeypatch.delenv("TIDELOG_DATA_DIR")
    monkeypatch.chdir(tmp_path)  # no ./data either: only a guess, so the default
    assert resolve_client(None, None).bootstrap == "127.0.0.1:9092"
    local = tmp_path / "local"
    fake_local_cluster(local, secure=True)
    monkeypatch.setenv("TIDELOG_DATA_DIR", str(local))
    client = resolve_client(None, None)
    assert (client.bootstrap, client.security.protocol) == ("127.0.0.1:401", "SASL_SSL")
    assert client.security.username == "admin"
    client = resolve_client("b:1", None)  # a broker named: its settings are not guessed
    assert (client.bootstrap, client.security.protocol) == ("b:1", "PLAINTEXT")
    plain = tmp_path / "plain"
    fake_local_cluster(plain, secure=False)
    monkeypatch.setenv("TIDELOG_DATA_DIR", str(plain))
    client = resolve_client(None, None)
    assert (client.bootstrap, client.security.protocol) == ("127.0.0.1:1", "PLAINTEXT")


def test_a_bad_setting_names_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = write(tmp_path / "bad", {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
    with pytest.raises(ClientConfigError, match=f"--command-config {bad}: .* needs sasl.user"):
        resolve_client(None, bad)
    monkeypatch.setenv("TIDELOG_COMMAND_CONFIG", str(tmp_path / "gone"))
    with pytest.raises(ClientConfigError, match=r"\$TIDELOG_COMMAND_CONFIG .*gone: No such"):
        resolve_client(None, None)


def invoke(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env, input=stdin)


def refused(result: Result, message: str) -> None:
    """An expected failure: exit 1, `error: ...` on stderr, no traceback."""
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: "), result.stderr
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "command",
    [
        ["topics", "list"],
        ["topics", "create", "t"],
        ["produce", "t"],
        ["consume", "t"],
        ["get-offsets", "t"],
        ["delete-records", "t", "--partition", "0", "--offset", "1"],
        ["groups", "list"],
        ["users", "list"],
        ["acls", "list"],
        ["verify-replicas", "t"],
        ["perf", "produce", "--topic", "t", "--num-records", "1"],
    ],
)
def test_every_client_command_takes_command_config(command: list[str], tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.properties", {"security.protocol": "KERBEROS"})
    refused(
        invoke(*command, "--command-config", str(bad)),
        f"--command-config {bad}: security.protocol=KERBEROS: not one of",
    )
    refused(
        invoke(*command, env={"TIDELOG_COMMAND_CONFIG": str(tmp_path / "none")}),
        f"$TIDELOG_COMMAND_CONFIG {tmp_path / 'none'}: No such file or directory",
    )


# ---------------------------------------------------------------------- a live cluster --
def ok(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Result:
    result = invoke(*args, env=env, stdin=stdin)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def anonymous_produce_refused(bootstrap: str) -> bool:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks=1, enable_idempotence=False, max_block_ms=10_000
    )
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(TOPIC, b"anonymous").get(timeout=30)
    finally:
        producer.close()
    return True


def read_back(flag: tuple[str, ...]) -> list[str]:
    """The two records of TOPIC, read from the beginning (30 s idle at most)."""
    read = ok("consume", TOPIC, "--from-beginning", "--max-messages", "2",
              "--timeout-ms", "30000", *flag)  # fmt: skip
    return sorted(read.stdout.split())


def isr_sizes(described: str) -> list[tuple[int, int]]:
    """(partition, ISR size) of each row of `tidelog topics describe --json`."""
    return [(row["partition"], len(row["isr"])) for row in json.loads(described)]


def test_a_secure_cluster_refuses_anonymous_clients_and_serves_the_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "cluster"
    cluster = LiveCluster(directory, secure=True)
    try:
        config = str(cluster.sasl_properties_path)
        assert f"--command-config {config}" in cluster.up_messages
        assert f"TIDELOG_COMMAND_CONFIG={config}" in cluster.up_messages
        # `cluster up` returned once every node knew the admin user: it logs in anywhere.
        access = access_for(directory)
        for node in cluster.record["nodes"]:
            status = read_status(node["admin"], access=access)
            assert status is not None and "admin" in status["scram_users"], status
        flag = ("--command-config", config)
        ok("topics", "create", TOPIC, "--partitions", "2", "--replication-factor", "3", *flag)
        cluster.wait_hosted_everywhere(TOPIC, 2)
        # A leader counts a follower in sync once it answered it: right after any leadership
        # move the ISR is the leader's alone for a moment.
        eventually(
            lambda: (
                isr_sizes(ok("topics", "describe", TOPIC, "--json", *flag).stdout)
                == [(0, 3), (1, 3)]
            ),
            "both partitions with their three replicas in sync",
        )
        assert ok("produce", TOPIC, *flag, stdin="one\ntwo\n").stderr == "2 records produced\n"
        assert read_back(flag) == ["one", "two"]
        users = json.loads(ok("users", "list", "--json", *flag).stdout)
        assert users == {"admin": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}
        assert json.loads(ok("acls", "list", "--json", *flag).stdout) == []
        # confluent-kafka's AdminClient sends CreateAcls to any broker: every one takes it
        # (one that is not the controller forwards it).
        for n, broker in enumerate(cluster.sasl_bootstrap.split(",") * 2):
            settings = {**cluster.sasl_properties, "bootstrap.servers": broker}
            binding = AclBinding(
                ResourceType.TOPIC, f"granted-{n}", ResourcePatternType.LITERAL,
                "User:reader", "*", AclOperation.READ, AclPermissionType.ALLOW,
            )  # fmt: skip
            client = AdminClient(settings)  # kept until its answer came
            for future in client.create_acls([binding]).values():
                assert future.result(timeout=30) is None
        # Each node answers from the metadata it applied: the last rule may reach the node
        # asked a moment after the one that took it.
        eventually(
            lambda: len(json.loads(ok("acls", "list", "--json", *flag).stdout)) == 6,
            "every node lists the six rules",
        )
        # The same settings from the environment, and from the local cluster itself.
        variable = {"TIDELOG_COMMAND_CONFIG": config}
        offsets = json.loads(ok("get-offsets", TOPIC, "--json", env=variable).stdout)
        assert sum(row["offset"] for row in offsets) >= 2
        monkeypatch.setenv("TIDELOG_DATA_DIR", str(directory))
        assert TOPIC in ok("topics", "list").stdout.split()
        monkeypatch.setenv("TIDELOG_DATA_DIR", str(tmp_path / "no-cluster"))
        # Anonymous clients of the loopback PLAINTEXT listener: refused as Kafka refuses.
        assert anonymous_produce_refused(cluster.bootstrap)
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                admin.delete_topics([TOPIC])
            with pytest.raises(TopicAuthorizationFailedError):
                admin.create_topics([NewTopic("anonymous", 1, 3)])
        finally:
            admin.close()
        plain = ("--bootstrap-server", cluster.bootstrap)
        refused(invoke("topics", "delete", TOPIC, *plain), "TopicAuthorizationFailed")
        refused(invoke("produce", TOPIC, *plain, stdin="x\n"), "TopicAuthorizationFailed")
        assert ok("topics", "list", *plain).stdout == ""  # what it may not describe is left out
        # A wrong password is refused, naming the settings to check; nothing was lost.
        wrong = {**cluster.sasl_properties, "sasl.password": "not-the-password"}
        bad = write(tmp_path / "wrong.properties", wrong)
        refused(invoke("topics", "list", "--command-config", str(bad)), "let this client in")
        assert read_back(flag) == ["one", "two"]
    finally:
        cluster.down()
        collect_leaked_sockets()
