"""A stand-in broker for testing the cluster tools: it listens and reports, nothing more.

    python -m tidelog.testing.fake_broker broker --node-id N --data-dir D --listen H:P
        --peer-listen H:P --peers 1@H:P,... --admin-listen H:P

Rules of this file:
- It takes the flags `tidelog cluster` passes to a real broker, binds the Kafka and peer
  addresses (so they are in use, as with a real broker), and serves `GET /status` with the
  schema of the real admin endpoint: ready at once, the lowest node id leads partition
  `fake-0`, replicated on every node.
- It exits 0 on SIGTERM or SIGINT. It never speaks Kafka or the peer protocol.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType

FAKE_TOPIC = "fake"


def split_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def status_report(node_id: int, node_ids: list[int]) -> dict[str, object]:
    """What the real broker's `/status` would say of a healthy cluster."""
    leader = min(node_ids)
    partition = {
        "topic": FAKE_TOPIC,
        "partition": 0,
        "replicas": node_ids,
        "role": "leader" if node_id == leader else "follower",
        "leader": leader,
        "epoch": 1,
        "hwm": 0,
        "log_start_offset": 0,
        "log_end_offset": 0,
        "isr": node_ids,
    }
    return {"node_id": node_id, "ready": True, "metadata_leader": leader, "partitions": [partition]}


def make_handler(report: dict[str, object]) -> type[BaseHTTPRequestHandler]:
    body = json.dumps(report).encode()

    class StatusHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/status":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the cluster tool polls /status often."""

    return StatusHandler


def stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidelog.testing.fake_broker")
    parser.add_argument("command", choices=["broker"])
    for name in ("--data-dir", "--listen", "--peer-listen", "--peers", "--admin-listen"):
        parser.add_argument(name, required=True)
    parser.add_argument("--node-id", type=int, required=True)
    args = parser.parse_args(argv)
    node_ids = sorted(int(item.partition("@")[0]) for item in args.peers.split(","))
    listeners = []
    for address in (args.listen, args.peer_listen):
        listener = socket.create_server(split_address(address))
        listeners.append(listener)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    handler = make_handler(status_report(args.node_id, node_ids))
    with ThreadingHTTPServer(split_address(args.admin_listen), handler) as server:
        print(f"fake broker {args.node_id} ready", file=sys.stderr, flush=True)
        try:
            server.serve_forever()
        finally:
            for listener in listeners:
                listener.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
