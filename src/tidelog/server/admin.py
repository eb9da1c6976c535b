"""The admin endpoint: `GET /status` (JSON) for tools and tests, and `GET /metrics`
(Prometheus' text format), over HTTP/1.0 (HTTPS with the node's certificate, and a bearer
token, in a secured cluster). Read-only.

`/status` is this node's view (`server/snapshot.py` says what it holds); `/metrics` is
described in `server/metrics.py`. `/` and `/ui` are the live page, `/events` its stream of
the whole cluster (`server/live_page.py`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import ssl

from tidelog.server.live_page import LivePage
from tidelog.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from tidelog.server.snapshot import leaders, status
from tidelog.server.view import BrokerView

Address = tuple[str, int]
REQUEST_BYTES_MAX = 8192
REQUEST_TIMEOUT_S = 5.0


async def serve_admin(
    broker: BrokerView,
    listen: Address,
    *,
    tls: ssl.SSLContext | None = None,
    token: str | None = None,
) -> asyncio.Server:
    """Serve `GET /status`, `/leaders`, `/metrics` and the live page; over HTTPS with
    `tls`, and only to a request that bears `token` (`Authorization: Bearer TOKEN`) when
    there is one (401 otherwise)."""
    wanted = None if token is None else f"bearer {token}".encode()
    page = LivePage(broker, token=token)

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
        if len(line) >= 2 and line[0] == "GET" and page.serves(line[1]):
            await page.answer(line[1], reader, writer, authorized=authorized(head))
            return
        kind = "application/json"
        path = line[1].split("?", 1)[0] if len(line) >= 2 and line[0] == "GET" else None
        if not authorized(head):
            code, body = "401 Unauthorized", b'{"error": "a bearer token is required"}'
        elif path == "/status":
            code, body = "200 OK", json.dumps(status(broker)).encode()
        elif path == "/leaders":
            code, body = "200 OK", json.dumps(leaders(broker)).encode()
        elif path == "/metrics" and broker.metrics.enabled:
            code, body, kind = "200 OK", broker.metrics.render(), METRICS_CONTENT_TYPE
        elif path == "/metrics":
            code, body = "404 Not Found", b'{"error": "metrics are off (--no-metrics)"}'
        else:
            code, body = "404 Not Found", b'{"error": "not found"}'
        writer.write(
            f"HTTP/1.0 {code}\r\nContent-Type: {kind}\r\n"
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
