"""The link-cut proxy: forwarding, byte counts, RESET and BLACKHOLE cuts, heal, process mode."""

from __future__ import annotations

import signal
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from tidelog.testing.live import eventually
from tidelog.testing.proxy import CutMode, TcpProxy

DEADLINE_S = 10.0
POLL_S = 0.02
QUIET_S = 0.3  # how long "nothing arrives" is watched for


class EchoHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = EchoServer(("127.0.0.1", 0), EchoHandler)
    thread = threading.Thread(target=server.serve_forever, args=(POLL_S,), daemon=True)
    thread.start()
    yield server.server_address[0], server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(DEADLINE_S)


@pytest.fixture
def proxy(echo: tuple[str, int]) -> Iterator[TcpProxy]:
    with TcpProxy(echo) as running:
        yield running


def connect(address: tuple[str, int]) -> socket.socket:
    return socket.create_connection(address, timeout=DEADLINE_S)


def receive(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, f"connection closed after {len(data)} of {count} bytes"
        data += chunk
    return data


def assert_quiet(sock: socket.socket) -> None:
    """Nothing arrives within QUIET_S."""
    sock.settimeout(QUIET_S)
    with pytest.raises(TimeoutError):
        sock.recv(1)
    sock.settimeout(DEADLINE_S)


def refuses(address: tuple[str, int]) -> bool:
    try:
        with connect(address):
            return False
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:
        return False  # queued as the listener closed: ask again


def test_forwards_both_ways_and_counts_bytes(proxy: TcpProxy) -> None:
    with connect(proxy.address) as client:
        client.sendall(b"hello")
        assert receive(client, 5) == b"hello"
        client.sendall(b"x" * 200_000)
        assert receive(client, 200_000) == b"x" * 200_000
        eventually(lambda: proxy.bytes_to_client == 200_005)
    assert proxy.bytes_to_target == 200_005
    assert proxy.bytes_forwarded == 400_010
    assert proxy.connections_accepted == 1


def test_end_of_stream_is_passed_on(proxy: TcpProxy) -> None:
    with connect(proxy.address) as client:
        client.sendall(b"bye")
        client.shutdown(socket.SHUT_WR)
        assert receive(client, 3) == b"bye"
        assert client.recv(1) == b""


def test_reset_cut_breaks_connections_and_refuses_new_ones(proxy: TcpProxy) -> None:
    with connect(proxy.address) as client:
        client.sendall(b"a")
        assert receive(client, 1) == b"a"
        proxy.cut(CutMode.RESET)
        with pytest.raises(ConnectionResetError):
            client.sendall(b"b")
            client.recv(1)
    assert refuses(proxy.address)
    proxy.heal()
    with connect(proxy.address) as client:
        client.sendall(b"c")
        assert receive(client, 1) == b"c"


def test_blackhole_holds_bytes_until_healed(proxy: TcpProxy) -> None:
    with connect(proxy.address) as before:
        before.sendall(b"1")
        assert receive(before, 1) == b"1"
        proxy.cut(CutMode.BLACKHOLE)
        before.sendall(b"2")
        with connect(proxy.address) as during:
            during.sendall(b"3")
            assert_quiet(before)
            assert_quiet(during)
            assert proxy.bytes_to_target == 1
            proxy.heal()
            assert receive(before, 1) == b"2"
            assert receive(during, 1) == b"3"


def test_cut_twice_switches_mode_and_close_refuses(echo: tuple[str, int]) -> None:
    with TcpProxy(echo) as proxy:
        proxy.cut(CutMode.BLACKHOLE)
        proxy.cut(CutMode.RESET)
        assert proxy.cut_mode is CutMode.RESET
        assert refuses(proxy.address)
        proxy.heal()
        assert proxy.cut_mode is None
        address = proxy.address
    assert refuses(address)
    proxy.close()  # closing twice is harmless


def test_an_unreachable_target_resets_the_client() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        target = unused.getsockname()
    # The reset may come as the connection is made or at the first read: either way.
    with TcpProxy(target) as proxy, pytest.raises(ConnectionResetError):  # noqa: SIM117
        with connect(proxy.address) as client:
            client.recv(1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def echoes(address: tuple[str, int]) -> bool:
    try:
        with connect(address) as client:
            client.sendall(b"?")
            return client.recv(1) == b"?"
    except OSError:
        return False


def test_process_mode_cuts_on_sigusr1_and_heals_on_sigusr2(echo: tuple[str, int]) -> None:
    port = free_port()
    command = [sys.executable, "-m", "tidelog.testing.proxy", "--listen", f"127.0.0.1:{port}"]
    command += ["--target", f"{echo[0]}:{echo[1]}"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE)
    try:
        eventually(lambda: echoes(("127.0.0.1", port)))
        process.send_signal(signal.SIGUSR1)
        eventually(lambda: refuses(("127.0.0.1", port)))
        process.send_signal(signal.SIGUSR2)
        eventually(lambda: echoes(("127.0.0.1", port)))
        process.send_signal(signal.SIGTERM)
        assert process.wait(DEADLINE_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(DEADLINE_S)
        assert process.stderr is not None
        process.stderr.close()
