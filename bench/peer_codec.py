"""Benchmark the inter-node codec on the replication hot path (not a test).

    .venv/bin/python bench/peer_codec.py [--rounds N] [--runs R]

One frame holds 100 AppendRequests of one 16 KiB batch each (100 partitions bound for one
peer). Reports the median MB/s of encode + decode over R runs.
"""

from __future__ import annotations

import argparse
import statistics
import time

from tidelog.core.messages import AppendRequest
from tidelog.protocol.framing import NEED_DATA
from tidelog.protocol.peer import PartitionKey, PeerDecoder, PeerEncoder
from tidelog.types import Epoch, NodeId, Offset

CLUSTER = "bench"
SECONDS_MAX = 30.0


def frame_items(batch_bytes: int, count: int) -> list[tuple[PartitionKey, AppendRequest]]:
    batch = bytes(range(256)) * (batch_bytes // 256)
    return [
        (
            PartitionKey(f"topic-{i % 3}", i),
            AppendRequest(
                NodeId(1),
                NodeId(2),
                Epoch(3),
                Offset(1000 * i),
                Epoch(3),
                (batch,),
                Offset(1000 * i),
                i,
            ),
        )
        for i in range(count)
    ]


def one_run(rounds: int, items: list[tuple[PartitionKey, AppendRequest]]) -> float:
    encoder = PeerEncoder(node_id=NodeId(1), cluster_id=CLUSTER)
    decoder = PeerDecoder(cluster_id=CLUSTER)
    decoder.receive_data(encoder.encode_handshake())
    decoder.next_frame()
    size = 0
    started = time.perf_counter()
    for _ in range(rounds):
        data = encoder.encode_frame(items)
        decoder.receive_data(data)
        decoded = decoder.next_frame()
        assert decoded is not NEED_DATA
        size += len(data)
        if time.perf_counter() - started > SECONDS_MAX:
            break
    return size / (time.perf_counter() - started) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    items = frame_items(16 * 1024, 100)
    rates = [one_run(args.rounds, items) for _ in range(args.runs)]
    print(
        f"peer codec, 100 x 16 KiB appends per frame: median {statistics.median(rates):.0f} MB/s "
        f"encode+decode over {args.runs} runs ({', '.join(f'{r:.0f}' for r in rates)})"
    )


if __name__ == "__main__":
    main()
