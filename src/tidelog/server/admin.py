"""The admin endpoint: `GET /status` (JSON) for tools and tests, over HTTP/1.0 (HTTPS with
the node's certificate, and a bearer token, in a secured cluster). Read-only.

`/status` is this node's view: whether it is ready (the metadata log has a leader), who
that is, the SCRAM users it knows (their names), its open Kafka connections and the bytes
of requests it holds, and each partition it hosts with its role, epoch, leader, HWM, log
start and log end offsets, replicas and in-sync replicas (in ISR mode, the committed ISR,
partition epoch and ELR of the controller's record), and whether its replica is
repairing (its storage set damaged records aside and it has not fetched them again yet)
or waits for its disk.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import ssl
from typing import Any

from tidelog.server.handlers import in_sync_nodes
from tidelog.server.metadata import METADATA_TOPIC
from tidelog.server.view import BrokerView

Address = tuple[str, int]
REQUEST_BYTES_MAX = 8192
REQUEST_TIMEOUT_S = 5.0


def status(broker: BrokerView) -> dict[str, Any]:
    partitions = []
    for key, runner in sorted(broker.runners.items()):
        if key.topic == METADATA_TOPIC:
            continue
        state = runner.replica.status()  # one frozen value: every field of one moment
        replicas = tuple(int(n) for n in state.replicas)
        reported = broker.image.partitions.get((key.topic, key.partition))
        record = broker.image.records.get((key.topic, key.partition))
        if record is not None:  # ISR mode: the controller's record is what Metadata answers
            reported_isr: list[int] | None = [int(node) for node in record.isr]
        else:
            reported_isr = None if reported is None else list(reported.isr)
        partitions.append(
            {
                "topic": key.topic,
                "partition": key.partition,
                "replicas": list(replicas),
                "role": state.role.value,
                "leader": state.leader_id,
                "epoch": int(state.epoch),
                "hwm": int(state.hwm),
                "log_start_offset": int(state.log_start_offset),
                "log_end_offset": int(state.log_end_offset),
                "isr": in_sync_nodes(broker, key, replicas),
                # As the metadata log holds it (the leader's report): what Metadata answers.
                "reported_isr": reported_isr,
                "replication": "quorum" if record is None else "isr",
                # ISR mode: the record's partition epoch and eligible leader replicas.
                "partition_epoch": None if record is None else record.partition_epoch,
                "elr": None if record is None else [int(node) for node in record.elr],
                "repairing": state.repair_floor is not None,
                "disk_error": None if runner.disk_error is None else str(runner.disk_error),
            }
        )
    controller = broker.controller_id()
    # Ready: a metadata leader exists and this node can tell clients the address of every
    # broker that is not fenced (one that is down stays fenced until it is back).
    ready = controller >= 0 and all(
        node in broker.kafka_ports or node in broker.image.fenced for node in broker.all_nodes
    )
    return {
        "node_id": int(broker.node_id),
        "ready": ready,
        "metadata_leader": controller if controller >= 0 else None,
        "fenced": sorted(broker.image.fenced),
        # The SCRAM users this node's metadata image holds (names only): a client logs in
        # at this node once its name is here.
        "scram_users": sorted({user for user, _ in broker.image.scram}),
        "kafka_connections": broker.kafka_connections,
        "request_bytes_held": broker.request_bytes.used,
        "partitions": partitions,
    }


async def serve_admin(
    broker: BrokerView,
    listen: Address,
    *,
    tls: ssl.SSLContext | None = None,
    token: str | None = None,
) -> asyncio.Server:
    """Serve `GET /status`; over HTTPS with `tls`, and only to a request that bears
    `token` (`Authorization: Bearer TOKEN`) when there is one (401 otherwise)."""
    wanted = None if token is None else f"bearer {token}".encode()

    def authorized(head: bytes) -> bool:
        if wanted is None:
            return True
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"authorization":
                given = value.strip()
                return hmac.compare_digest(given[:7].lower() + given[7:], wanted)
        return False

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            writer.close()
            return
        line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if not authorized(head):
            code, body = "401 Unauthorized", b'{"error": "a bearer token is required"}'
        elif len(line) >= 2 and line[0] == "GET" and line[1] == "/status":
            code, body = "200 OK", json.dumps(status(broker)).encode()
        else:
            code, body = "404 Not Found", b'{"error": "not found"}'
        writer.write(
            f"HTTP/1.0 {code}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        try:
            await writer.drain()
        finally:
            writer.close()

    if tls is None:
        return await asyncio.start_server(on_connection, *listen, limit=REQUEST_BYTES_MAX)
    return await asyncio.start_server(
        on_connection, *listen, limit=REQUEST_BYTES_MAX, ssl=tls, ssl_handshake_timeout=5.0
    )
