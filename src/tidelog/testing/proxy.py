"""A TCP proxy on 127.0.0.1 that a test can cut and heal, to fail one link between nodes.

    with TcpProxy(target=("127.0.0.1", 9201)) as proxy:   # listens on proxy.address
        proxy.cut(CutMode.RESET)       # or CutMode.BLACKHOLE
        proxy.heal()

    python -m tidelog.testing.proxy --listen 127.0.0.1:P --target 127.0.0.1:Q
        (SIGUSR1 cuts, SIGUSR2 heals, SIGTERM or SIGINT ends it)

Rules of this file:
- Binds 127.0.0.1 only. Each accepted connection gets its own connection to the target;
  bytes are forwarded both ways in order, and counted once they are written.
- Two ways to cut. RESET: every connection is closed with a TCP reset and the listening
  socket is closed, so new connections are refused; `heal` listens on the same port again.
  BLACKHOLE: connections stay open and new ones are accepted, but nothing is forwarded;
  bytes wait (TCP back-pressure fills up, as on a stalled network) and `heal` delivers
  them in order. Nothing is ever dropped from the middle of a stream.
- The proxy runs its own asyncio loop in a daemon thread; the public methods are called
  from other threads and wait for the loop with a timeout. A forwarding loop lasts as long
  as its connection; `close` ends them all. At most CONNECTIONS_MAX connections at once.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import signal
import socket
import struct
import sys
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from tidelog.address import parse_address as parse_host_port

HOST = "127.0.0.1"
CHUNK_BYTES_MAX = 64 * 1024
CONNECTIONS_MAX = 1024
CONNECT_TIMEOUT_S = 5.0
CONTROL_TIMEOUT_S = 10.0
# SO_LINGER on, 0 s: close() sends RST instead of FIN, as a broken link would.
LINGER_RESET = struct.pack("ii", 1, 0)

T = TypeVar("T")


class CutMode(enum.Enum):
    RESET = "reset"
    BLACKHOLE = "blackhole"


@dataclass(eq=False)
class _Link:
    """One client connection and, once made, its connection to the target."""

    client: asyncio.StreamWriter
    task: asyncio.Task[None] | None
    target: asyncio.StreamWriter | None = None

    def reset(self) -> None:
        """Abort both sides with a TCP reset and stop forwarding."""
        for writer in (self.client, self.target):
            if writer is None or writer.transport.is_closing():
                continue
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
            writer.transport.abort()
        if self.task is not None:
            self.task.cancel()


class TcpProxy:
    """Forwards 127.0.0.1:`listen_port` (0: any free port) to `target`; see module rules."""

    def __init__(self, target: tuple[str, int], *, listen_port: int = 0) -> None:
        self.target = target
        self.bytes_to_target = 0
        self.bytes_to_client = 0
        self.connections_accepted = 0
        self.cut_mode: CutMode | None = None
        self._port = listen_port
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._open: asyncio.Event | None = None

    @property
    def address(self) -> tuple[str, int]:
        """Where clients connect: (127.0.0.1, port)."""
        assert self._port != 0, "start() first"
        return HOST, self._port

    @property
    def bytes_forwarded(self) -> int:
        return self.bytes_to_target + self.bytes_to_client

    def start(self) -> TcpProxy:
        """Start the loop thread and listen; returns self."""
        self._thread.start()
        self._call(self._start())
        return self

    def cut(self, mode: CutMode = CutMode.RESET) -> None:
        """Fail the link (see the module rules for the two modes); heals a previous cut."""
        self._call(self._heal())
        self._call(self._cut(mode))
        self.cut_mode = mode

    def heal(self) -> None:
        """Undo a cut: listen again, or deliver what the black hole held."""
        self._call(self._heal())
        self.cut_mode = None

    def close(self) -> None:
        """Reset every connection, stop listening and stop the loop thread."""
        if not self._thread.is_alive():
            return
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CONTROL_TIMEOUT_S)
        assert not self._thread.is_alive()
        self._loop.close()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(CONTROL_TIMEOUT_S)

    async def _start(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        await self._listen()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._on_client, HOST, self._port, reuse_address=True
        )
        self._port = self._server.sockets[0].getsockname()[1]

    async def _cut(self, mode: CutMode) -> None:
        assert self._open is not None
        self._open.clear()
        if mode is CutMode.RESET:
            self._stop_listening()
            for link in list(self._links):
                link.reset()

    async def _heal(self) -> None:
        assert self._open is not None
        if self._server is None:
            await self._listen()
        self._open.set()

    async def _close(self) -> None:
        self._stop_listening()
        for link in list(self._links):
            link.reset()
        tasks = [link.task for link in self._links if link.task is not None]
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), CONTROL_TIMEOUT_S)

    def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        if len(self._links) >= CONNECTIONS_MAX:
            writer.transport.abort()
            return
        self.connections_accepted += 1
        link = _Link(client=writer, task=asyncio.current_task())
        self._links.add(link)
        try:
            # A black hole accepts, then holds the connection until healed.
            await self._open.wait()
            target_reader, target_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.target), CONNECT_TIMEOUT_S
            )
            link.target = target_writer
            await asyncio.gather(
                self._pump(reader, target_writer, to_target=True),
                self._pump(target_reader, writer, to_target=False),
            )
        except (OSError, TimeoutError):
            # The target refused or the link broke: the client sees its connection close.
            link.task = None
            link.reset()
        except asyncio.CancelledError:
            # cut(RESET) or close() has reset this link: ending here is the intended result.
            assert link.client.transport.is_closing()
        finally:
            self._links.discard(link)
            for side in (link.client, link.target):
                if side is not None:
                    side.close()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, to_target: bool
    ) -> None:
        """Copy until end of stream, then pass the end on (a half close)."""
        assert self._open is not None
        while data := await reader.read(CHUNK_BYTES_MAX):
            await self._open.wait()
            writer.write(data)
            await writer.drain()
            if to_target:
                self.bytes_to_target += len(data)
            else:
                self.bytes_to_client += len(data)
        if writer.can_write_eof() and not writer.transport.is_closing():
            writer.write_eof()


def parse_address(text: str) -> tuple[str, int]:
    """`127.0.0.1:PORT` (or a bare PORT) as (host, port); other hosts are refused."""
    try:
        host, port = parse_host_port(text if ":" in text else f"{HOST}:{text}")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if host != HOST:
        raise argparse.ArgumentTypeError(f"{text!r} is not {HOST}:PORT")
    return host, port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidelog.testing.proxy")
    parser.add_argument("--listen", type=parse_address, required=True)
    parser.add_argument("--target", type=parse_address, required=True)
    parser.add_argument("--cut-mode", choices=[m.value for m in CutMode], default="reset")
    args = parser.parse_args(argv)
    controls = {signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT}
    # Block the signals before the loop thread starts, so only sigwait below sees them.
    signal.pthread_sigmask(signal.SIG_BLOCK, controls)
    with TcpProxy(args.target, listen_port=args.listen[1]) as proxy:
        print(f"proxy {proxy.address} -> {args.target}", file=sys.stderr, flush=True)
        # Runs until SIGTERM or SIGINT: one control signal per turn.
        while (received := signal.sigwait(controls)) not in (signal.SIGTERM, signal.SIGINT):
            if received == signal.SIGUSR1:
                proxy.cut(CutMode(args.cut_mode))
            else:
                proxy.heal()
            print(f"proxy: {proxy.cut_mode or 'healed'}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
