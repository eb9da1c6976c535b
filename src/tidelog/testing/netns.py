"""Separate hosts for live tests: Linux network namespaces on one bridge, each with one
address, and tidelog brokers started inside them, so nothing may assume 127.0.0.1 or one
host (issue 44). It needs root and iproute2's `ip`, as CI has.

`Network(hosts=3)` makes, for one run:
- a namespace per host, `tl-<pid>-<k>-<n>` (n from 1; k counts this process's networks),
  with its loopback up and one veth end `eth0` at 10.77.<X>.<n>/24;
- a namespace `tl-<pid>-<k>-br` holding the bridge `br0` the hosts' other veth ends join;
- a veth pair from this (the test's) namespace, `tl<pid hex>-<k>` at 10.77.<X>.254/24,
  onto the same bridge: test clients run here and reach every host through it.

Rules of this file:
- The subnet 10.77.<X>.0/24 is one no address of this namespace is in yet, chosen and taken
  under a file lock, so concurrent runs on one machine never share one.
- Only what this run made is ever deleted, and only the processes it started are ever
  signalled, by their PID (the process `ip netns exec` became). `close()` does it all even
  when a step of it fails, and says what failed afterwards; `network()` closes on any exit.
  Every process started here is also killed by the kernel if this process dies
  (PR_SET_PDEATHSIG), so a killed test run leaves no broker behind.
- `Cluster` runs one `tidelog broker` per host from a TOML file of its own: Kafka, peer and
  admin listeners on the host's address, or, for the hosts named in `wildcard`, on 0.0.0.0
  with `advertised_listen` naming the host's address. Never on 127.0.0.1.
- Every wait polls with a deadline (`tidelog.testing.live.eventually`), never a bare sleep.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import ipaddress
import itertools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tidelog.status import TOKEN_FILE, AdminAccess, read_status
from tidelog.testing.live import eventually

IP_TIMEOUT_S = 10.0
SUBNET_PREFIX = "10.77"
GATEWAY_OCTET = 254  # this namespace's address on the bridge
HOSTS_MAX = 253  # .1 .. .253
LOCK_FILE = Path("/run/lock/tidelog-netns.lock")
STOP_WAIT_S = 10.0  # after SIGTERM, before SIGKILL
PR_SET_PDEATHSIG = 1
KAFKA_PORT = 9092
SSL_PORT = 9093
PEER_PORT = 9192
ADMIN_PORT = 9292
STATUS_TIMEOUT_S = 1.0
_networks = itertools.count(1)


class NetnsError(RuntimeError):
    """A namespace, link or address could not be made or removed."""


def can_make_namespaces() -> str | None:
    """None when this process can make namespaces, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is missing"
    return None


def ip(*args: str, namespace: str | None = None) -> str:
    """Run `ip [-n namespace] args...`; its stdout, or NetnsError with its stderr."""
    command = ["ip", *(["-n", namespace] if namespace else []), *args]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=IP_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


def subnets_in_use() -> set[int]:
    """The X of every 10.77.X.0/24 that a network of an address of this namespace overlaps."""
    networks = [
        ipaddress.ip_interface(line.split()[3]).network
        for line in ip("-o", "-4", "addr", "show").splitlines()
        if len(line.split()) > 3 and line.split()[2] == "inet"
    ]
    return {
        x
        for x in range(256)
        if any(ipaddress.ip_network(f"{SUBNET_PREFIX}.{x}.0/24").overlaps(n) for n in networks)
    }


# Looked up here, not in the child: between fork and exec the child only calls it.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def kill_with_parent() -> None:
    """In the child, before exec: the kernel sends SIGKILL when its parent dies."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class Host:
    """One namespace: its name, its number (from 1) and its one address."""

    index: int
    namespace: str
    address: str


class Network:
    """`hosts` namespaces on one bridge, and this namespace on it too (the module rules)."""

    def __init__(self, hosts: int) -> None:
        assert 1 <= hosts <= HOSTS_MAX
        why_not = can_make_namespaces()
        assert why_not is None, why_not
        self.prefix = f"tl-{os.getpid()}-{next(_networks)}"
        self.bridge = f"{self.prefix}-br"
        self.root_link = f"tl{os.getpid():x}-{self.prefix.rsplit('-', 1)[1]}"
        assert len(self.root_link) <= 15, self.root_link  # IFNAMSIZ
        self.namespaces: list[str] = []  # made so far, in order
        self.root_link_made = False
        self.processes: list[subprocess.Popen[bytes]] = []
        self.hosts: tuple[Host, ...] = ()
        self.gateway = ""
        try:
            self._make(hosts)
        except BaseException:
            self.close()
            raise

    def _make(self, count: int) -> None:
        self._add_namespace(self.bridge)
        ip("link", "add", "br0", "type", "bridge", namespace=self.bridge)
        ip("link", "set", "br0", "up", namespace=self.bridge)
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        with LOCK_FILE.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = subnets_in_use()
            start = os.getpid() % 256
            free = [x % 256 for x in range(start, start + 256) if x % 256 not in used]
            if not free:
                raise NetnsError(f"every {SUBNET_PREFIX}.X.0/24 is in use here")
            subnet = f"{SUBNET_PREFIX}.{free[0]}"
            self.gateway = f"{subnet}.{GATEWAY_OCTET}"
            # Taken once this namespace holds an address in it (under the lock).
            self._join(self.root_link, f"{self.gateway}/24", namespace=None)
        hosts = []
        for index in range(1, count + 1):
            host = Host(index, f"{self.prefix}-{index}", f"{subnet}.{index}")
            self._add_namespace(host.namespace)
            self._join("eth0", f"{host.address}/24", namespace=host.namespace)
            hosts.append(host)
        self.hosts = tuple(hosts)

    def _add_namespace(self, name: str) -> None:
        ip("netns", "add", name)
        self.namespaces.append(name)
        ip("link", "set", "lo", "up", namespace=name)

    def _join(self, link: str, address: str, *, namespace: str | None) -> None:
        """A veth pair: `link` at `address` in `namespace` (None: this one), its peer on
        the bridge."""
        port = f"p{len(self.namespaces)}" if namespace else "proot"
        target = namespace or str(os.getpid())
        ip("link", "add", port, "type", "veth", "peer", "name", link, "netns", target,
           namespace=self.bridge)  # fmt: skip
        if namespace is None:
            self.root_link_made = True
        ip("link", "set", port, "master", "br0", "up", namespace=self.bridge)
        ip("addr", "add", address, "dev", link, namespace=namespace)
        ip("link", "set", link, "up", namespace=namespace)

    def host(self, index: int) -> Host:
        return self.hosts[index - 1]

    def start(self, host: Host, argv: Sequence[str], *, log: IO[bytes]) -> subprocess.Popen[bytes]:
        """`argv` run inside `host`'s namespace, its output to `log`; its PID is the
        process's own (`ip netns exec` becomes it)."""
        process = subprocess.Popen(
            ["ip", "netns", "exec", host.namespace, *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=kill_with_parent,  # noqa: PLW1509 - a prctl call, nothing else
        )
        self.processes.append(process)
        return process

    def run(
        self, host: Host, argv: Sequence[str], *, cwd: Path | None = None, timeout_s: float = 60
    ) -> str:
        """`argv` run to its end inside `host`'s namespace (in `cwd`); its stdout
        (NetnsError when it fails)."""
        command = ["ip", "netns", "exec", host.namespace, *argv]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False, cwd=cwd
        )
        if done.returncode != 0:
            raise NetnsError(f"{' '.join(command)}: exit {done.returncode}: {done.stderr}")
        return done.stdout

    def close(self) -> None:
        """End what this run started and remove what it made (the module rules)."""
        errors: list[str] = []
        stop_processes(self.processes)
        if self.root_link_made:
            with contextlib.suppress(NetnsError):  # gone with the bridge's namespace
                ip("link", "del", self.root_link)
        for name in reversed(self.namespaces):
            try:
                ip("netns", "del", name)
            except NetnsError as error:
                errors.append(str(error))
        self.namespaces.clear()
        self.root_link_made = False
        if errors:
            raise NetnsError("; ".join(errors))


def stop_processes(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each still running, SIGKILL to any not gone within STOP_WAIT_S; reaped."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        process.terminate()
    for process in running:
        try:
            process.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def network(hosts: int) -> Iterator[Network]:
    """A Network of `hosts`, closed on exit, whatever happened inside."""
    made = Network(hosts)
    try:
        yield made
    finally:
        made.close()


class Cluster:
    """A tidelog broker on each of the first `nodes` hosts of `net` (node n on host n; all
    of them by default), data and logs in `directory`; the hosts in `wildcard` listen on
    0.0.0.0 and advertise their address. `settings` are more keys of every node's file.

    With `certs` (a directory as `tidelog certs` makes it: ca.crt, node-N.crt and .key,
    admin.token), peer links are mutual TLS, each node has an SSL listener beside its
    PLAINTEXT one, and its admin endpoint is HTTPS and wants the token."""

    def __init__(
        self,
        net: Network,
        directory: Path,
        *,
        nodes: int | None = None,
        wildcard: Sequence[int] = (),
        settings: dict[str, int | bool | str] | None = None,
        certs: Path | None = None,
    ) -> None:
        self.net = net
        self.directory = directory
        self.wildcard = frozenset(wildcard)
        self.settings = settings or {}
        self.certs = certs
        self.access = AdminAccess()
        if certs is not None:
            self.access = AdminAccess(certs / "ca.crt", (certs / TOKEN_FILE).read_text().strip())
        self.nodes = tuple(range(1, (len(net.hosts) if nodes is None else nodes) + 1))
        assert set(self.nodes) <= {host.index for host in net.hosts}
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.logs: dict[int, IO[bytes]] = {}
        directory.mkdir(parents=True, exist_ok=True)
        for node in self.nodes:
            self.config_path(node).write_text(self.config_text(node))

    @property
    def bootstrap(self) -> str:
        return ",".join(self.kafka(node) for node in self.nodes)

    @property
    def ssl_bootstrap(self) -> str:
        return ",".join(f"{self.net.host(node).address}:{SSL_PORT}" for node in self.nodes)

    def kafka(self, node: int) -> str:
        return f"{self.net.host(node).address}:{KAFKA_PORT}"

    def admin(self, node: int) -> str:
        return f"{self.net.host(node).address}:{ADMIN_PORT}"

    def config_path(self, node: int) -> Path:
        return self.directory / f"node-{node}.toml"

    def log_path(self, node: int) -> Path:
        return self.directory / f"node-{node}.log"

    def listeners(self, host: str) -> str:
        """Kafka listeners on `host`, as `listen` takes them: PLAINTEXT, and SSL with certs."""
        listeners = [f"PLAINTEXT://{host}:{KAFKA_PORT}"]
        if self.certs is not None:
            listeners.append(f"SSL://{host}:{SSL_PORT}")
        return ",".join(listeners)

    def config_text(self, node: int) -> str:
        """Node `node`'s TOML file, as an operator would write it for that host."""
        address = self.net.host(node).address
        bind = "0.0.0.0" if node in self.wildcard else address
        lines = [
            f"node_id = {node}",
            f'data_dir = "{self.directory / f"node-{node}"}"',
            f'listen = "{self.listeners(bind)}"',
            f'peer_listen = "{bind}:{PEER_PORT}"',
            f'admin_listen = "{bind}:{ADMIN_PORT}"',
        ]
        if node in self.wildcard:
            lines.append(f'advertised_listen = "{self.listeners(address)}"')
        if self.certs is not None:
            lines += [
                f'ssl_ca = "{self.certs / "ca.crt"}"',
                f'ssl_cert = "{self.certs / f"node-{node}.crt"}"',
                f'ssl_key = "{self.certs / f"node-{node}.key"}"',
                f'admin_token_file = "{self.certs / TOKEN_FILE}"',
            ]
        for key, value in self.settings.items():
            text = str(value).lower() if isinstance(value, bool) else value
            lines.append(f'{key} = "{text}"' if isinstance(value, str) else f"{key} = {text}")
        lines.append("[peers]")
        lines += [f'"{n}" = "{self.net.host(n).address}:{PEER_PORT}"' for n in self.nodes]
        return "\n".join(lines) + "\n"

    def start(self, node: int) -> subprocess.Popen[bytes]:
        """Start node `node`'s broker in its host's namespace (appending to its log)."""
        assert node not in self.processes or self.processes[node].poll() is not None
        if node not in self.logs:
            self.logs[node] = self.log_path(node).open("ab")
        argv = [sys.executable, "-m", "tidelog", "broker", "--config", str(self.config_path(node))]
        process = self.net.start(self.net.host(node), argv, log=self.logs[node])
        self.processes[node] = process
        return process

    def start_all(self) -> None:
        for node in self.nodes:
            self.start(node)

    def kill(self, node: int) -> None:
        """SIGKILL to node `node`'s broker, by its PID; returns once it is gone."""
        process = self.processes[node]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=STOP_WAIT_S)

    def status(self, node: int) -> dict[str, Any] | None:
        """Node `node`'s `GET /status`, read from this namespace across the bridge."""
        return read_status(self.admin(node), timeout_s=STATUS_TIMEOUT_S, access=self.access)

    def replica(self, node: int, topic: str, partition: int) -> dict[str, Any] | None:
        """Node `node`'s replica of the partition as its `/status` shows it (None: no answer,
        or it does not host it)."""
        for state in (self.status(node) or {}).get("partitions", []):
            if (state["topic"], state["partition"]) == (topic, partition):
                return dict(state)
        return None

    def leader_of(self, topic: str, partition: int) -> int | None:
        """The running node whose replica of the partition leads, if one does."""
        for node in self.nodes:
            if self.processes[node].poll() is None:
                state = self.replica(node, topic, partition)
                if state is not None and state["role"] == "leader":
                    return node
        return None

    def wait_ready(self, nodes: Sequence[int] | None = None, *, deadline_s: float = 30) -> None:
        """Until every node of `nodes` (default: all) answers `/status` ready."""
        waiting = list(self.nodes if nodes is None else nodes)

        def ready() -> bool:
            for node in waiting:
                process = self.processes[node]
                assert process.poll() is None, f"node {node} exited: {self.log_tail(node)}"
            return all((self.status(node) or {}).get("ready") is True for node in waiting)

        eventually(ready, f"nodes {waiting} ready", deadline_s=deadline_s)

    def log_tail(self, node: int, lines: int = 20) -> str:
        text = self.log_path(node).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        stop_processes(list(self.processes.values()))
        for log in self.logs.values():
            log.close()
