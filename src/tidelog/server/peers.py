"""The inter-node transport: one outbound TCP stream to each peer, coalesced per round.

Rules of this file:
- `send` only queues. Once per event-loop round, everything queued for a peer leaves as
  one frame (tidelog.protocol.peer), so replication costs one write per peer per round,
  not one per partition per message.
- Each node dials every other node and only writes on the streams it dialled; it reads on
  the streams others dialled to it. A lost stream is redialled with a bounded backoff.
- The links are those of `--peers` at the start; a node that joins later gets one when it
  is learned (`add_link`, server/joining.py), and one that leaves loses its link
  (`remove_link`). A stream is taken from any node of the cluster (its handshake's cluster
  id, and with TLS a certificate of the cluster's CA naming that node), known or not.
- Messages for an unreachable peer, or beyond a peer's write buffer limit, are dropped:
  the core retransmits (heartbeats, probes), so dropping is safe; blocking is not.
- A malformed frame closes that stream only.
- In a secured cluster (`PeerContexts`) every stream is mutual TLS against the cluster's
  CA, and a stream is taken only from the node its certificate names: an inbound stream
  whose handshake claims another node id, or a dialled peer whose certificate names
  another node, is closed with one log line (`tidelog.server.tls`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from tidelog.protocol.framing import NEED_DATA, ProtocolError
from tidelog.protocol.peer import (
    PEER_FRAME_ITEMS_MAX,
    Handshake,
    PartitionKey,
    PeerDecoder,
    PeerEncoder,
)
from tidelog.server.tls import PeerContexts, node_id_of
from tidelog.types import NodeId

log = logging.getLogger(__name__)

Address = tuple[str, int]
PeerItem = tuple[PartitionKey, Any]
Deliver = Callable[[NodeId, list[PeerItem]], None]

WRITE_BUFFER_MAX_BYTES = 64 << 20
FRAME_BYTES_SOFT_MAX = 8 << 20
RECONNECT_DELAY_MIN_S = 0.05
RECONNECT_DELAY_MAX_S = 1.0
CONNECT_TIMEOUT_S = 2.0
TLS_HANDSHAKE_S = 10.0  # an inbound peer's TLS handshake (a loaded machine is slow)
STREAM_STABLE_S = 1.0
CLOSE_WAIT_S = 2.0


class PeerLink:
    """The stream this node dialled to one peer."""

    def __init__(
        self,
        node_id: NodeId,
        peer: NodeId,
        address: Address,
        cluster_id: str,
        tls: PeerContexts | None = None,
    ) -> None:
        self.peer = peer
        self.tls = tls
        self.address = address
        self.encoder = PeerEncoder(node_id=node_id, cluster_id=cluster_id)
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.on_connect: Callable[[NodeId], None] | None = None

    def write(self, items: list[PeerItem]) -> None:
        writer = self.writer
        if writer is None or writer.is_closing():
            self.dropped += len(items)
            return
        if writer.transport.get_write_buffer_size() > WRITE_BUFFER_MAX_BYTES:
            self.dropped += len(items)
            return
        for chunk in chunks_of(items):
            writer.write(self.encoder.encode_frame(chunk))

    async def run(self) -> None:
        """Dial, handshake, hold the stream until it breaks; redial with backoff.

        The link outlives any failure of one stream. The backoff only starts over once a
        stream has lived for STREAM_STABLE_S, so a peer that accepts and drops at once (a
        node still starting behind a proxy) is not dialled in a tight loop."""
        delay = RECONNECT_DELAY_MIN_S
        while True:
            started = time.monotonic()
            try:
                await self.hold_stream()
            except (OSError, TimeoutError) as error:
                log.debug("no stream to node %d: %r", self.peer, error)
            except Exception:
                log.exception("the stream to node %d failed", self.peer)
            lived = time.monotonic() - started
            delay = (
                RECONNECT_DELAY_MIN_S
                if lived >= STREAM_STABLE_S
                else min(delay * 2, RECONNECT_DELAY_MAX_S)
            )
            await asyncio.sleep(delay)

    async def hold_stream(self) -> None:
        ssl = None if self.tls is None else self.tls.client
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(*self.address, ssl=ssl), CONNECT_TIMEOUT_S
        )
        if ssl is not None:
            named = node_id_of(writer.get_extra_info("peercert"))
            if named != self.peer:
                log.warning(
                    "refusing the stream to node %d at %s:%d: its certificate names node %s",
                    self.peer,
                    *self.address,
                    named,
                )
                writer.close()
                return
        writer.write(self.encoder.encode_handshake())
        self.writer = writer
        log.info("connected to node %d at %s:%d", self.peer, *self.address)
        if self.on_connect is not None:
            self.on_connect(self.peer)
        try:
            await reader.read()  # the peer never writes here: returns when it closes
        finally:
            self.writer = None
            writer.close()
            log.info("lost the stream to node %d", self.peer)

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.writer is not None:
            self.writer.close()


def chunks_of(items: list[PeerItem]) -> list[list[PeerItem]]:
    """Split a round's items so no frame exceeds the item or (roughly) the byte limit."""
    out: list[list[PeerItem]] = [[]]
    size = 0
    for item in items:
        batches = getattr(item[1], "batches", ())
        item_size = 64 + sum(len(batch) for batch in batches)
        if out[-1] and (
            len(out[-1]) >= PEER_FRAME_ITEMS_MAX or size + item_size > FRAME_BYTES_SOFT_MAX
        ):
            out.append([])
            size = 0
        out[-1].append(item)
        size += item_size
    return out


async def listening_socket(listen: Address) -> socket.socket:
    """A non-blocking TCP socket listening at `listen` (a host name or address, and a
    port), reusing the address as asyncio's servers do."""
    host, port = listen
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class FrameReceiver(asyncio.Protocol):
    """Reads one inbound peer stream: the frames of each chunk that arrives are decoded
    and delivered in the transport's own callback, with no reader task between the
    socket and the partitions (a loop iteration less for each frame). In a secured
    cluster the stream is taken only while its handshake claims the node its certificate
    names. A malformed frame, or a claim of another node, closes the stream (one log
    line). `closed` completes when the stream has ended."""

    def __init__(self, cluster_id: str, address: Any, deliver: Deliver, *, tls: bool) -> None:
        self.decoder = PeerDecoder(cluster_id=cluster_id)
        self.address = address
        self.deliver = deliver
        self.tls = tls
        self.named: int | None = None  # the node the certificate names (TLS)
        self.peer: NodeId | None = None  # the node the handshake claims
        self.transport: asyncio.BaseTransport | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        if self.tls:
            self.named = node_id_of(transport.get_extra_info("peercert"))
            if self.named is None:
                self.refuse(
                    f"refused a peer connection from {self.address}: its certificate names no node"
                )

    def data_received(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        try:
            self.decoder.receive_data(data)
            while (frame := self.decoder.next_frame()) is not NEED_DATA:
                if isinstance(frame, Handshake):
                    if self.tls and frame.node_id != self.named:
                        self.refuse(
                            f"refusing a peer stream that claims node {frame.node_id}: its "
                            f"certificate names node {self.named}"
                        )
                        return
                    self.peer = NodeId(frame.node_id)
                    continue
                if self.peer is None:  # the decoder yields a handshake first: our bug
                    raise ProtocolError("a frame before the handshake")
                self.deliver(self.peer, frame)
        except ProtocolError as error:
            self.refuse(f"closing a peer stream from {self.address}: {error}")

    def refuse(self, why: str) -> None:
        log.warning("%s", why)
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool:
        return False  # the peer is done: close

    def connection_lost(self, exc: Exception | None) -> None:
        del exc  # a broken stream (ssl.SSLError too) ends like a closed one
        if not self.closed.done():
            self.closed.set_result(None)


class PeerTransport:
    """Every link of this node, and the server the other nodes dial."""

    def __init__(
        self,
        node_id: NodeId,
        cluster_id: str,
        peers: dict[int, Address],
        deliver: Deliver,
        tls: PeerContexts | None = None,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.deliver = deliver
        self.tls = tls
        self.links = {
            NodeId(peer): PeerLink(node_id, NodeId(peer), address, cluster_id, tls)
            for peer, address in peers.items()
            if peer != node_id
        }
        self.pending: dict[NodeId, list[PeerItem]] = {}
        self.on_connect: Callable[[NodeId], None] | None = None  # each link's, when it connects
        self.flush_scheduled = False
        self.listener: socket.socket | None = None
        self.acceptor: asyncio.Task[None] | None = None
        self.inbound: dict[asyncio.Task[None], asyncio.BaseTransport | None] = {}

    async def start(self, listen: Address) -> None:
        loop = asyncio.get_running_loop()
        self.listener = await listening_socket(listen)
        self.acceptor = loop.create_task(self._accept(self.listener))
        for link in self.links.values():
            link.on_connect = self.on_connect
            link.task = loop.create_task(link.run())

    def add_link(self, peer: NodeId, address: Address) -> None:
        """Dial `peer` at `address` from now on (a node learned after the start); a link
        held already only takes the address for its next dial."""
        if peer == self.node_id:
            return
        link = self.links.get(peer)
        if link is not None:
            link.address = address
            return
        link = PeerLink(self.node_id, peer, address, self.cluster_id, self.tls)
        link.on_connect = self.on_connect
        self.links[peer] = link
        if self.listener is not None:  # started: dial at once
            link.task = asyncio.get_running_loop().create_task(link.run())

    def remove_link(self, peer: NodeId) -> None:
        """Dial `peer` no more (a node that left the cluster)."""
        link = self.links.pop(peer, None)
        if link is not None:
            link.close()

    def send(self, key: PartitionKey, messages: Any) -> None:
        """Queue messages; they leave together at the end of this event-loop round."""
        for msg in messages:
            self.pending.setdefault(msg.recipient, []).append((key, msg))
        if self.pending and not self.flush_scheduled:
            self.flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        pending, self.pending = self.pending, {}
        for peer, items in pending.items():
            link = self.links.get(peer)
            if link is not None:
                link.write(items)

    def connected(self) -> list[NodeId]:
        return [peer for peer, link in self.links.items() if link.writer is not None]

    async def _accept(self, listener: socket.socket) -> None:
        """Take the streams other nodes dial. Each accepted socket is handed whole to
        the loop's TLS (or plain) transport, so the first byte a peer sends (its TLS
        ClientHello) reaches the handshake: upgrading a stream that already reads would
        race it."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, address = await loop.sock_accept(listener)
            except OSError as error:  # out of descriptors, say: the peers redial
                log.warning("accepting a peer stream failed: %r", error)
                await asyncio.sleep(RECONNECT_DELAY_MIN_S)
                continue
            task = loop.create_task(self._serve(conn, address))
            self.inbound[task] = None

    async def _serve(self, conn: socket.socket, address: Any) -> None:
        task = asyncio.current_task()
        assert task is not None
        receiver = FrameReceiver(self.cluster_id, address, self.deliver, tls=self.tls is not None)
        transport: asyncio.BaseTransport | None = None
        try:
            transport = await self.open_inbound(conn, address, receiver)
            if transport is None:
                return
            if task in self.inbound:
                self.inbound[task] = transport
            await receiver.closed
        finally:
            if transport is not None:
                transport.close()
            else:
                conn.close()
            self.inbound.pop(task, None)

    async def open_inbound(
        self, conn: socket.socket, address: Any, receiver: FrameReceiver
    ) -> asyncio.BaseTransport | None:
        """The transport of an accepted socket, read by `receiver`, after the TLS handshake
        in a secured cluster; None (one log line) when the handshake fails."""
        loop = asyncio.get_running_loop()
        if self.tls is None:
            transport, _ = await loop.connect_accepted_socket(lambda: receiver, conn)
            return transport
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: receiver,
                conn,
                ssl=self.tls.server,
                ssl_handshake_timeout=TLS_HANDSHAKE_S,
            )
        except (OSError, TimeoutError) as error:  # ssl.SSLError, ConnectionAbortedError
            reason = str(error) or type(error).__name__
            log.warning(
                "refused a peer connection from %s: TLS handshake failed (%s)", address, reason
            )
            return None
        return transport

    async def close(self) -> None:
        for link in self.links.values():
            link.close()
        if self.acceptor is not None:
            self.acceptor.cancel()
        if self.listener is not None:
            self.listener.close()
        for task, transport in list(self.inbound.items()):
            if transport is None:
                task.cancel()  # still in its handshake
            else:
                transport.close()  # its task sees the end of the stream and returns
        if self.inbound:
            await asyncio.wait(list(self.inbound), timeout=CLOSE_WAIT_S)
