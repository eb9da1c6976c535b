"""The inbound peer streams of a node (server/peers.py `FrameReceiver`), on uvloop as a node
runs: frames are delivered as they arrive, whole and in order however the bytes are cut; a
malformed frame closes that stream only, after what came before it was delivered."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from tidelog.core.messages import AppendRequest
from tidelog.protocol.peer import PartitionKey, PeerEncoder
from tidelog.server.peers import Deliver
from tidelog.testing.live import eventually
from tidelog.types import Epoch, NodeId, Offset

if TYPE_CHECKING:
    from conftest import PeerServer

WAIT_S = 10.0


def appends(sender: int, count: int) -> tuple[bytes, list[int]]:
    """A handshake from `sender`, then `count` frames of one empty append each; their seqs."""
    encoder = PeerEncoder(node_id=NodeId(sender), cluster_id="tidelog")
    frames = [encoder.encode_handshake()]
    for seq in range(1, count + 1):
        append = AppendRequest(
            sender=NodeId(sender),
            recipient=NodeId(1),
            epoch=Epoch(1),
            prev_offset=Offset(0),
            prev_epoch=Epoch(0),
            batches=(),
            hwm=Offset(0),
            sent_ms=0,
            log_start_offset=Offset(0),
            seq=seq,
        )
        frames.append(encoder.encode_frame([(PartitionKey("t", 0), append)]))
    return b"".join(frames), list(range(1, count + 1))


def recorder(delivered: list[tuple[int, int]]) -> Deliver:
    """Delivers into `delivered`: (sender, seq) of each append."""

    def deliver(peer: NodeId, items: list[tuple[PartitionKey, Any]]) -> None:
        delivered.extend((int(peer), message.seq) for _, message in items)

    return deliver


def test_frames_cut_anywhere_are_delivered_whole_and_in_order(peer_server: PeerServer) -> None:
    delivered: list[tuple[int, int]] = []
    data, seqs = appends(2, 50)
    with (
        peer_server(recorder(delivered), None) as address,
        socket.create_connection(address, WAIT_S) as stream,
    ):
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for start in range(0, len(data), 7):  # 7-byte pieces: every frame cut mid-way
            stream.sendall(data[start : start + 7])
        eventually(lambda: len(delivered) == len(seqs), lambda: f"{len(delivered)} delivered")
    assert delivered == [(2, seq) for seq in seqs]


def test_a_malformed_frame_closes_its_stream_only(peer_server: PeerServer) -> None:
    delivered: list[tuple[int, int]] = []
    good, seqs = appends(2, 3)
    with peer_server(recorder(delivered), None) as address:
        with socket.create_connection(address, WAIT_S) as bad:
            # A frame of 5 bytes whose kind is no message kind, after 3 good ones.
            bad.sendall(good + b"\x00\x00\x00\x05\xff\x00\x00\x00\x00")
            bad.settimeout(WAIT_S)
            assert bad.recv(1024) == b""  # node 1 closed it
        assert delivered == [(2, seq) for seq in seqs]
        other, _ = appends(3, 3)
        with socket.create_connection(address, WAIT_S) as stream:
            stream.sendall(other)
            eventually(lambda: len(delivered) == 6, lambda: f"{len(delivered)} delivered")
    assert delivered[3:] == [(3, seq) for seq in seqs]
