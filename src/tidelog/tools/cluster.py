"""A local cluster of brokers: its directory and `cluster.json`, its processes, its
certificates (the `tidelog cluster` commands are tools/cluster_cmd.py's and
tools/cluster_grow.py's).

Rules of this file:
- A cluster lives in one directory: `DIR/cluster.json` records every node (id, pid,
  addresses, data directory), `DIR/node-N/` is node N's data directory and
  `DIR/node-N/broker.log` its stdout and stderr. `cluster.json` is replaced atomically.
- DIR is `--data-dir`, else `$TIDELOG_DATA_DIR`, else `./data`: where the client commands
  look for the local cluster too.
- Brokers run as `python -m tidelog broker ...` on 127.0.0.1 in their own session, so they
  outlive the command that started them. Node i (from 1) of base port P listens on P+i-1
  (Kafka), P+100+i-1 (peers) and P+200+i-1 (admin HTTP).
- Only processes recorded in `cluster.json` are ever signalled, and only while
  /proc/PID/cmdline still shows a tidelog broker with that node's data directory: a PID
  reused by an unrelated process is never touched.
- Ready means `GET http://ADMIN/status` answers JSON with `"ready": true`. Every wait polls
  with a deadline; every HTTP request has a short timeout.
- A secure cluster (`--secure`) is locked down as Kafka would be: peer links are mutual TLS,
  every broker runs the authorizer, and its super users are the SCRAM user `admin` and the
  principal of the cluster's own admin client certificate (`certs/admin-client.crt`,
  `User:CN=tidelog admin,O=tidelog cluster NAME`). An anonymous client (the loopback
  PLAINTEXT listener, or SSL without a certificate) is allowed only what ACLs allow it:
  nothing, until someone adds one.
- The first user is made without weakening that (Kafka's way: no anonymous super user):
  the SSL listeners request client certificates (`--ssl-client-auth requested`), and
  `cluster up` creates `admin` over SSL presenting the admin client certificate, whose
  principal is a super user. `DIR/client-ssl.properties` (that certificate) and
  `DIR/client-sasl.properties` (`admin`'s password), mode 0600, are what clients need;
  `tidelog` client commands take either with `--command-config`, and default to the second.
- `up --log-format json` starts brokers that log JSON lines (server/logs.py); the choice is
  recorded in `cluster.json`, so a node restarted later logs the same way. A line that
  `cluster` itself writes to a node's log (`--- tidelog cluster: ...`) stays plain text.
- `up --no-metrics` starts brokers without metrics (`GET /metrics` answers 404;
  server/metrics.py); kept in `cluster.json` the same way, until `up --metrics`.
  `up --auto-create-topics-enable` is kept the same way (off by default, as a broker's).
- `up` prints the live page's URL (`watch it live: ...`), as `tidelog demo` does.
- A node is not started on a full disk (less than DISK_FREE_BYTES_MIN free where its data
  lives), and a file the command cannot write is named with its reason: a clear message,
  never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import string
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

import click

from tidelog import clock
from tidelog.address import parse_address
from tidelog.client_config import read_properties
from tidelog.errors import TidelogError
from tidelog.server.data_dir import node_directory_id
from tidelog.server.joining import FIRST_VOTERS_FILE, write_first_voters
from tidelog.server.logs import LOG_FORMATS
from tidelog.server.metadata import METADATA_TOPIC
from tidelog.status import TOKEN_FILE, AdminAccess, access_for, read_status
from tidelog.tools.client_kafka import ClientSettings
from tidelog.tools.client_status import CLIENT_SASL_PROPERTIES, DATA_DIR_ENV, DEFAULT_DATA_DIR

CERTS_DIR = "certs"
CLIENT_PROPERTIES = "client-ssl.properties"
ADMIN_CLIENT_CERT = "admin-client"  # certs/admin-client.crt and .key: a super user's
ADMIN_CLIENT_NAME = "tidelog admin"  # its common name
CA_NAME_CHARACTERS = frozenset(string.ascii_letters + string.digits + "._-")
SUPER_USER_SEPARATOR = ";"
CLUSTER_FILE = "cluster.json"
LOG_NAME = "broker.log"
HOST = "127.0.0.1"
BASE_PORT_DEFAULT = 9092
PEER_PORT_OFFSET = 100
ADMIN_PORT_OFFSET = 200
SSL_PORT_OFFSET = 300  # a secure cluster's SSL listeners
SASL_PORT_OFFSET = 400  # and its SASL_SSL listeners
ADMIN_USER = "admin"
NODES_MAX = PEER_PORT_OFFSET  # more nodes would make the Kafka and peer ports overlap
READY_TIMEOUT_S_DEFAULT = 60.0
STOP_TIMEOUT_S = 30.0
LOG_LINES_SCANNED = 2000  # of a node's log, for its last error
POLL_INTERVAL_S = 0.2
LOG_TAIL_LINES = 20
EXIT_ERROR = 1
STATUS_TIMEOUT_S = 1.0
DISK_FREE_BYTES_MIN = 1024 * 1024  # below this a node could not even write its log


class ClusterError(TidelogError):
    """The cluster directory or a node cannot do what was asked."""


@dataclass(frozen=True)
class NodeRecord:
    """One node of `cluster.json`."""

    id: int
    pid: int
    kafka: str
    peer: str
    admin: str
    data_dir: str
    ssl: str = ""  # its SSL listener (a secure cluster), else ""
    sasl: str = ""  # its SASL_SSL listener (a secure cluster), else ""
    # Added to the running cluster (`cluster add-node`): it starts with --join, its
    # --peers the nodes of the cluster then (server/joining.py).
    join: bool = False

    def listeners(self) -> list[str]:
        """Its Kafka listeners, as `--listen` takes them."""
        extra = [f"SSL://{self.ssl}"] if self.ssl else []
        extra += [f"SASL_SSL://{self.sasl}"] if self.sasl else []
        return [self.kafka, *extra]


@dataclass(frozen=True)
class ClusterRecord:
    """The whole of `cluster.json`."""

    bootstrap: str
    nodes: tuple[NodeRecord, ...]
    secure: bool = False  # peer links are mutual TLS; the certificates are in certs/
    log_format: str = "text"  # every broker's --log-format
    metrics: bool = True  # False: every broker runs with --no-metrics
    # True: every broker runs with --auto-create-topics-enable (Kafka's
    # auto.create.topics.enable; a broker's default is off).
    auto_create_topics_enable: bool = False

    @property
    def ssl_bootstrap(self) -> str:
        return ",".join(node.ssl for node in self.nodes if node.ssl)

    @property
    def sasl_bootstrap(self) -> str:
        return ",".join(node.sasl for node in self.nodes if node.sasl)

    def node(self, node_id: int) -> NodeRecord:
        """The node with this id; ClusterError lists the valid ids otherwise."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        valid = ", ".join(str(node.id) for node in self.nodes)
        raise ClusterError(f"--node {node_id}: no such node (valid ids: {valid})")

    def with_pid(self, node_id: int, pid: int) -> ClusterRecord:
        nodes = tuple(replace(n, pid=pid) if n.id == node_id else n for n in self.nodes)
        return replace(self, nodes=nodes)


def plan_cluster(
    directory: Path, *, nodes: int, base_port: int, secure: bool = False
) -> ClusterRecord:
    """The record of a new cluster (pids 0: nothing started yet)."""
    if not 1 <= nodes <= NODES_MAX:
        raise ClusterError(f"--nodes: {nodes} is out of range (1-{NODES_MAX})")
    if not 1 <= base_port <= 65535 - SASL_PORT_OFFSET - nodes + 1:
        raise ClusterError(f"--base-port: {base_port} leaves no room for {nodes} nodes")
    records = tuple(
        node_at(directory, i, scheme_ports(base_port, i, secure=secure))
        for i in range(1, nodes + 1)
    )
    bootstrap = ",".join(node.kafka for node in records)
    return ClusterRecord(bootstrap=bootstrap, nodes=records, secure=secure)


def scheme_ports(base_port: int, node_id: int, *, secure: bool) -> dict[str, int]:
    """Node `node_id`'s ports in the scheme of base port `base_port` (see the rules)."""
    offsets = {"kafka": 0, "peer": PEER_PORT_OFFSET, "admin": ADMIN_PORT_OFFSET}
    if secure:
        offsets |= {"ssl": SSL_PORT_OFFSET, "sasl": SASL_PORT_OFFSET}
    return {name: base_port + offset + node_id - 1 for name, offset in offsets.items()}


def node_at(
    directory: Path, node_id: int, ports: dict[str, int], *, join: bool = False
) -> NodeRecord:
    """A node's record (pid 0) at `ports`: kafka, peer, admin, and ssl, sasl if secure."""
    return NodeRecord(
        id=node_id,
        pid=0,
        kafka=f"{HOST}:{ports['kafka']}",
        peer=f"{HOST}:{ports['peer']}",
        admin=f"{HOST}:{ports['admin']}",
        data_dir=str((directory / f"node-{node_id}").resolve()),
        ssl=f"{HOST}:{ports['ssl']}" if "ssl" in ports else "",
        sasl=f"{HOST}:{ports['sasl']}" if "sasl" in ports else "",
        join=join,
    )


def make_certificates(directory: Path, record: ClusterRecord) -> Path:
    """The cluster's CA, every node's certificate and the admin client certificate in
    directory/certs (keys mode 0600)."""
    from tidelog.tools.certs import (  # noqa: PLC0415 - secure clusters only
        issue,
        issue_node,
        make_ca,
        write_private,
    )

    certs = directory / CERTS_DIR
    if not (certs / "ca.crt").exists():
        make_ca(certs, ca_name(directory))
    for node in record.nodes:
        if not (certs / f"node-{node.id}.crt").exists():
            issue_node(certs, node.id)
    if not (certs / f"{ADMIN_CLIENT_CERT}.crt").exists():
        issue(certs, ADMIN_CLIENT_CERT, common_name=ADMIN_CLIENT_NAME)
    if not (certs / TOKEN_FILE).exists():  # the admin endpoints' bearer token
        write_private(certs / TOKEN_FILE, secrets.token_urlsafe(24).encode())
    return certs


def ca_name(directory: Path) -> str:
    """The cluster's name in its certificates: the directory's, in characters that need no
    escaping in a principal (`User:CN=...,O=tidelog cluster NAME`) or a super-user list."""
    name = "".join(c if c in CA_NAME_CHARACTERS else "-" for c in directory.resolve().name)
    return name or "tidelog"


def admin_client_principal(directory: Path) -> str:
    """The principal a broker gives the admin client certificate: its subject, as
    `server.session.principal_of` names a client certificate's."""
    from tidelog.tools.certs import CertError, principal_of_file  # noqa: PLC0415

    path = directory / CERTS_DIR / f"{ADMIN_CLIENT_CERT}.crt"
    try:
        principal = principal_of_file(path)
    except CertError as error:
        raise ClusterError(f"{error} (`tidelog cluster up` makes it)") from None
    if SUPER_USER_SEPARATOR in principal:
        raise ClusterError(f"{path}: its principal {principal!r} cannot be a super user")
    return principal


def ssl_properties(directory: Path, record: ClusterRecord) -> dict[str, str]:
    """What a client (librdkafka's names) needs to reach the SSL listeners as a super user:
    the cluster's CA and the admin client certificate."""
    certs = (directory / CERTS_DIR).resolve()
    return {
        "bootstrap.servers": record.ssl_bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs / "ca.crt"),
        "ssl.certificate.location": str(certs / f"{ADMIN_CLIENT_CERT}.crt"),
        "ssl.key.location": str(certs / f"{ADMIN_CLIENT_CERT}.key"),
    }


def write_properties(path: Path, properties: dict[str, str]) -> None:
    """A client properties file, mode 0600 (it names a key, or holds a password)."""
    from tidelog.tools.certs import write_private  # noqa: PLC0415 - secure clusters only

    text = "".join(f"{name}={value}\n" for name, value in properties.items())
    write_private(path, text.encode())


def write_client_properties(directory: Path, record: ClusterRecord) -> Path:
    """DIR/client-ssl.properties (`ssl_properties`); written once, mode 0600."""
    path = directory / CLIENT_PROPERTIES
    if not path.exists():
        write_properties(path, ssl_properties(directory, record))
    return path


def write_admin_user(directory: Path, record: ClusterRecord) -> Path:
    """The first SCRAM user (`admin`, a generated password), created over SSL with the
    admin client certificate, and DIR/client-sasl.properties (mode 0600) with what a client
    needs to use it; once per cluster."""
    path = directory / CLIENT_SASL_PROPERTIES
    if path.exists():
        return path
    from kafka.admin._users import (  # noqa: PLC0415 - secure clusters only
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    from tidelog.tools.client_kafka import ClientSettings  # noqa: PLC0415
    from tidelog.tools.users_cmd import alter  # noqa: PLC0415

    password = secrets.token_urlsafe(18)
    alterations = [
        UserScramCredentialUpsertion(ADMIN_USER, mechanism, password, salt=secrets.token_bytes(16))
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    ssl = ssl_properties(directory, record)
    client = ClientSettings.of(ssl.pop("bootstrap.servers"), ssl)
    error = alter(client, alterations).get(ADMIN_USER)
    if error:
        raise ClusterError(f"the admin user was not created: {error}")
    write_properties(
        path,
        {
            "bootstrap.servers": record.sasl_bootstrap,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": ssl["ssl.ca.location"],
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": ADMIN_USER,
            "sasl.password": password,
        },
    )
    return path


def read_cluster(directory: Path) -> ClusterRecord:
    """The cluster recorded in `directory`; ClusterError when there is none or it is bad."""
    path = directory / CLUSTER_FILE
    if not path.is_file():
        raise ClusterError(f"no cluster in {directory} (run `tidelog cluster up`)")
    try:
        data = json.loads(path.read_text())
        nodes = tuple(NodeRecord(**node) for node in data["nodes"])
        record = ClusterRecord(
            bootstrap=data["bootstrap"],
            nodes=nodes,
            secure=bool(data.get("secure", False)),
            log_format=str(data.get("log_format", "text")),
            metrics=data.get("metrics", True),
            auto_create_topics_enable=data.get("auto_create_topics_enable", False),
        )
    except (ValueError, KeyError, TypeError) as error:
        raise ClusterError(f"{path} is not a cluster file: {error!r}") from None
    if not record.nodes:
        raise ClusterError(f"{path} lists no nodes")
    if record.log_format not in LOG_FORMATS:
        raise ClusterError(f"{path}: log_format {record.log_format!r} is not one of {LOG_FORMATS}")
    for name in ("metrics", "auto_create_topics_enable"):
        value = getattr(record, name)
        if not isinstance(value, bool):  # a file edited by hand: "false" is not False
            raise ClusterError(f"{path}: {name} {value!r} is not true or false")
    return record


def write_cluster(directory: Path, record: ClusterRecord) -> None:
    """Replace `cluster.json` atomically (write a temporary file, then rename)."""
    data = {
        "bootstrap": record.bootstrap,
        "secure": record.secure,
        "log_format": record.log_format,
        "metrics": record.metrics,
        "auto_create_topics_enable": record.auto_create_topics_enable,
        "nodes": [asdict(node) for node in record.nodes],
    }
    temporary = directory / f".{CLUSTER_FILE}.tmp"
    try:
        temporary.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(temporary, directory / CLUSTER_FILE)
    except OSError as error:
        raise ClusterError(f"cannot write {directory / CLUSTER_FILE}: {error.strerror}") from None


def broker_argv(record: ClusterRecord, node: NodeRecord) -> list[str]:
    """The command line that starts `node` (the same on every restart)."""
    peers = ",".join(f"{n.id}@{n.peer}" for n in record.nodes)
    argv = [
        sys.executable,
        "-m",
        "tidelog",
        "broker",
        f"--node-id={node.id}",
        f"--data-dir={node.data_dir}",
        "--listen=" + ",".join(node.listeners()),
        f"--peer-listen={node.peer}",
        f"--peers={peers}",
        f"--admin-listen={node.admin}",
    ]
    # Its data directory keeps what it joined as: harmless on a restart. A node of the
    # cluster's birth whose data directory lost its kept first voter set (a disk replaced)
    # joins too: its new copies are observers until the leaders add them (joining.py).
    replaced = fresh(node) and not formatted(node) and any(map(formatted, record.nodes))
    if node.join or replaced:
        argv.append("--join")
    if record.log_format != "text":  # text is the broker's default: argv as it always was
        argv.append(f"--log-format={record.log_format}")
    if not record.metrics:  # on is the broker's default, as for the log format
        argv.append("--no-metrics")
    if record.auto_create_topics_enable:  # off is the broker's default
        argv.append("--auto-create-topics-enable")
    if record.secure:
        directory = Path(node.data_dir).parent
        certs = directory / CERTS_DIR
        super_users = [f"User:{ADMIN_USER}", admin_client_principal(directory)]
        argv += [
            f"--ssl-ca={certs / 'ca.crt'}",
            f"--ssl-cert={certs / f'node-{node.id}.crt'}",
            f"--ssl-key={certs / f'node-{node.id}.key'}",
            f"--admin-token-file={certs / TOKEN_FILE}",
            "--authorizer",
            "--super-users=" + SUPER_USER_SEPARATOR.join(super_users),
            "--ssl-client-auth=requested",
        ]
    return argv


def is_our_broker(node: NodeRecord) -> bool:
    """Whether `node.pid` is still that node's broker: a live process whose command line
    shows `tidelog`, `broker` and this node's `--data-dir`. A zombie has an empty one; if
    it is this process's child (the CLI run in-process, as in tests), it is collected."""
    if node.pid <= 0:
        return False
    reap(node.pid)
    try:
        args = Path(f"/proc/{node.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    words = [arg.decode(errors="replace") for arg in args]
    return (
        any("tidelog" in word for word in words)
        and "broker" in words
        and f"--data-dir={node.data_dir}" in words
    )


def process_state(pid: int) -> str | None:
    """The state letter of /proc/PID/stat (R, S, T, Z, ...), or None if there is no such
    process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[0]


def is_paused(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP)."""
    return process_state(pid) in ("T", "t")


def has_exited(pid: int) -> bool:
    """Whether the process is gone or a zombie. Not the same as `not is_our_broker`: a
    process that is exiting, or in the middle of exec, shows an empty command line."""
    reap(pid)
    return process_state(pid) in (None, "Z", "X")


def reap(pid: int) -> None:
    """Collect the exit status if `pid` is our child (when the CLI runs in-process)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def signal_node(node: NodeRecord, signum: signal.Signals) -> bool:
    """Send `signum` to `node` if it is still its broker; whether it was sent."""
    if not is_our_broker(node):
        return False
    try:
        os.kill(node.pid, signum)
    except ProcessLookupError:
        return False
    return True


def wait_until(condition: Callable[[], bool], *, timeout_s: float) -> bool:
    """Poll `condition` until it holds or `timeout_s` passes; whether it held."""
    return clock.wait_until(condition, timeout_s=timeout_s, interval_s=POLL_INTERVAL_S)


def stop_nodes(nodes: list[NodeRecord], *, timeout_s: float = STOP_TIMEOUT_S) -> list[int]:
    """SIGTERM every running node, wait for all, SIGKILL what is left; ids stopped.

    A paused node also gets SIGCONT after SIGTERM, so it can act on it at once."""
    stopped = [node for node in nodes if signal_node(node, signal.SIGTERM)]
    for node in stopped:
        signal_node(node, signal.SIGCONT)

    def all_gone() -> bool:
        return all(has_exited(node.pid) for node in stopped)

    if not wait_until(all_gone, timeout_s=timeout_s):
        for node in stopped:
            signal_node(node, signal.SIGKILL)
        wait_until(all_gone, timeout_s=timeout_s)
    return [node.id for node in stopped]


def formatted(node: NodeRecord) -> bool:
    """Whether the node's data directory keeps the metadata log's first voter set."""
    return (Path(node.data_dir) / FIRST_VOTERS_FILE).exists()


def fresh(node: NodeRecord) -> bool:
    """Whether the node's data directory holds no metadata log yet (never started, or a
    disk replaced)."""
    return not (Path(node.data_dir) / f"{METADATA_TOPIC}-0").exists()


def format_cluster(record: ClusterRecord) -> None:
    """Before a new cluster's first start, give each node's data directory its id and keep
    on each the metadata log's first voter set with those ids (KRaft's `kafka-storage format
    --initial-controllers`): a node on another disk is never one of them."""
    nodes = [node.id for node in record.nodes]
    try:
        directories = [node_directory_id(Path(node.data_dir)) for node in record.nodes]
        for node in record.nodes:
            write_first_voters(Path(node.data_dir), nodes, directories)
    except (OSError, TidelogError) as error:
        raise ClusterError(f"cannot format the nodes' data directories: {error}") from None


def start_node(record: ClusterRecord, node: NodeRecord) -> int:
    """Start `node` in its own session, output appended to its log; the new pid.

    posix_spawn rather than subprocess.Popen: the broker must outlive this command, and a
    Popen object dropped while its child runs warns (ResourceWarning)."""
    try:
        Path(node.data_dir).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ClusterError(f"node {node.id}: cannot use {node.data_dir}: {error}") from error
    check_free_space(node)
    log_path = Path(node.data_dir) / LOG_NAME
    argv = broker_argv(record, node)
    try:
        with log_path.open("a") as log:
            log.write(f"--- tidelog cluster: starting node {node.id}: {' '.join(argv)}\n")
    except OSError as error:
        raise ClusterError(f"node {node.id}: cannot write {log_path}: {error.strerror}") from None
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log_path), flags, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    return os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=actions, setsid=True)


def check_free_space(node: NodeRecord) -> None:
    """ClusterError when the disk holding the node's data is full."""
    free = shutil.disk_usage(node.data_dir).free
    if free < DISK_FREE_BYTES_MIN:
        raise ClusterError(
            f"node {node.id}: the disk holding {node.data_dir} is full ({free} bytes free): "
            "free space, then start it again"
        )


def log_tail(node: NodeRecord) -> str:
    """The last lines of a node's log, for error messages."""
    path = Path(node.data_dir) / LOG_NAME
    try:
        lines = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return f"({path} is missing)"
    return "\n".join(f"  | {line}" for line in lines)


def node_status(node: NodeRecord, *, timeout_s: float = STATUS_TIMEOUT_S) -> dict[str, Any] | None:
    """A node's `GET /status` (HTTPS and its token in a secure cluster), or None."""
    access = access_for(Path(node.data_dir).parent)
    return read_status(node.admin, timeout_s=timeout_s, access=access)


def still_waiting(
    nodes: Sequence[NodeRecord], done: Callable[[NodeRecord], bool], *, timeout_s: float
) -> list[NodeRecord]:
    """Poll until `done(node)` has held once for every node; those it never held for
    within `timeout_s` (empty when all did). `done` may raise to stop the wait."""
    waiting = {node.id: node for node in nodes}

    def all_done() -> bool:
        for node in list(waiting.values()):
            if done(node):
                del waiting[node.id]
        return not waiting

    wait_until(all_done, timeout_s=timeout_s)
    return sorted(waiting.values(), key=lambda node: node.id)


def wait_ready(nodes: list[NodeRecord], *, timeout_s: float) -> None:
    """Wait until every node's /status says ready; ClusterError on exit or timeout."""

    def ready(node: NodeRecord) -> bool:
        if not is_our_broker(node) and has_exited(node.pid):
            raise ClusterError(
                f"node {node.id} exited during startup; "
                f"{Path(node.data_dir) / LOG_NAME} ends:\n{log_tail(node)}"
            )
        status = node_status(node)
        return status is not None and status.get("ready") is True

    waiting = still_waiting(nodes, ready, timeout_s=timeout_s)
    if waiting:
        names = ", ".join(str(node.id) for node in waiting)
        logs = ", ".join(str(Path(node.data_dir) / LOG_NAME) for node in waiting)
        raise ClusterError(
            f"not ready after {timeout_s:g} s: node(s) {names}; they are still running "
            f"(see {logs}; `tidelog cluster down` stops them)"
        )


def wait_user_known(nodes: Sequence[NodeRecord], user: str, *, timeout_s: float) -> None:
    """Wait until every node's metadata image holds the SCRAM user `user` (each learns it
    from the metadata log, a moment apart), so a client logs in at any node;
    ClusterError on timeout."""

    def knows(node: NodeRecord) -> bool:
        status = node_status(node)
        return status is not None and user in status.get("scram_users", ())

    waiting = still_waiting(nodes, knows, timeout_s=timeout_s)
    if waiting:
        names = ", ".join(str(node.id) for node in waiting)
        raise ClusterError(f"node(s) {names} did not learn the user {user} in {timeout_s:g} s")


def ports_in_use(nodes: list[NodeRecord]) -> list[str]:
    """The addresses of `nodes` that something already listens on (checked by binding)."""
    busy: list[str] = []
    for node in nodes:
        for address in (node.peer, node.admin, *(a.split("//")[-1] for a in node.listeners())):
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(parse_address(address))
                except OSError:
                    busy.append(address)
    return busy


def start_stopped(directory: Path, record: ClusterRecord, *, timeout_s: float) -> ClusterRecord:
    """Start every node that is not running, resume paused ones, wait until all are ready."""
    for node in record.nodes:
        if is_our_broker(node) and is_paused(node.pid):
            signal_node(node, signal.SIGCONT)
    down = [node for node in record.nodes if not is_our_broker(node)]
    busy = ports_in_use(down)
    if busy:
        raise ClusterError(f"address(es) already in use: {', '.join(busy)}")
    if all(fresh(node) and not formatted(node) for node in record.nodes):
        format_cluster(record)  # a new cluster: its nodes' first start
    for node in down:
        record = record.with_pid(node.id, start_node(record, node))
        # Record each pid at once, so `down` finds it even if startup fails later.
        write_cluster(directory, record)
    wait_ready([record.node(node.id) for node in record.nodes], timeout_s=timeout_s)
    return record


def fail(error: TidelogError) -> NoReturn:
    click.echo(f"error: {error}", err=True)
    raise SystemExit(EXIT_ERROR) from error


def page_url(admin: str, access: AdminAccess) -> str:
    """The live page's URL at admin endpoint `admin` (HOST:PORT)."""
    scheme = "http" if access.ca is None else "https"
    fragment = "" if access.token is None else "#" + urllib.parse.urlencode({"token": access.token})
    return f"{scheme}://{admin}/{fragment}"


def live_page_url(directory: Path, record: ClusterRecord) -> str:
    """The live page of the cluster's first node, as `tidelog demo` and `tidelog ui` name it."""
    return page_url(record.nodes[0].admin, access_for(directory))


def last_error_line(node: NodeRecord) -> str | None:
    """The last ERROR or CRITICAL line (or traceback end) of a node's log, if any."""
    path = Path(node.data_dir) / LOG_NAME
    try:
        lines = path.read_text(errors="replace").splitlines()[-LOG_LINES_SCANNED:]
    except OSError:
        return None
    marks = (
        " ERROR ",  # the text format's levels
        " CRITICAL ",
        '"level": "ERROR"',  # the JSON format's (server/logs.py)
        '"level": "CRITICAL"',
        "Error: ",  # a traceback's end, and its start
        "Traceback",
    )
    found = [line for line in lines if any(mark in line for mark in marks)]
    return found[-1].strip() if found else None


def restart_node(
    directory: Path, record: ClusterRecord, node_id: int, *, timeout_s: float
) -> ClusterRecord:
    """Stop one node (SIGTERM: it hands its leaderships over first), start it again with
    the same flags, wait until it is ready; the new record (written)."""
    node = record.node(node_id)
    stop_nodes([node])
    busy = ports_in_use([node])
    if busy:
        raise ClusterError(f"address(es) already in use: {', '.join(busy)}")
    record = record.with_pid(node_id, start_node(record, node))
    write_cluster(directory, record)
    wait_ready([record.node(node_id)], timeout_s=timeout_s)
    return record


def fully_in_sync(directory: Path, record: ClusterRecord) -> bool:
    """Whether every node answers /status, every partition has a leader, and every
    leader counts all its replicas in sync."""
    access = access_for(directory)
    for node in record.nodes:
        status = read_status(node.admin, access=access)
        if status is None:
            return False
        for partition in status["partitions"]:
            if partition["leader"] is None:
                return False
            if partition["role"] == "leader" and len(partition["isr"]) != len(
                partition["replicas"]
            ):
                return False
    return True


def client_of(directory: Path, record: ClusterRecord) -> ClientSettings:
    """How a client reaches the cluster: its SASL_SSL listeners as `admin` when secure."""
    if not record.secure:
        return ClientSettings.of(record.bootstrap, {})
    properties = read_properties(directory / CLIENT_SASL_PROPERTIES, "the cluster's")
    properties.pop("bootstrap.servers", None)
    return ClientSettings.of(record.sasl_bootstrap, properties)


directory_option = click.option(
    "--data-dir",
    "directory",
    envvar=DATA_DIR_ENV,
    default=DEFAULT_DATA_DIR,
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help=f"The cluster's directory (holds cluster.json and node-N/; default: ${DATA_DIR_ENV}, "
    "else ./data, as the client commands).",
)
node_option = click.option("--node", "node_id", type=int, required=True, help="Node id.")
timeout_option = click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=READY_TIMEOUT_S_DEFAULT,
    show_default=True,
    help="Seconds to wait until ready.",
)
