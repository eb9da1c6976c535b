"""The live page on the admin endpoint: `GET /` (or `/ui`) is one static HTML page
(`server/ui/index.html`, package data), `GET /events` a stream of server-sent events, one
picture of the whole cluster each (`server/cluster_view.py`), about every 0.5 s.

Rules of this file:
- The page itself holds no state of the cluster: it is served to anyone who reaches the
  endpoint. `/events` is what the bearer token guards: in the `Authorization` header, or
  as `?token=` (a browser's EventSource cannot send headers; the page takes the token from
  its URL's fragment, which never leaves the browser).
- A stream stays open until the page goes away (its connection closes or sends anything),
  the node stops, or a write waits longer than WRITE_TIMEOUT_S. At most
  cluster_view.STREAMS_MAX streams at once; beyond, 503.
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.resources
import urllib.parse
from typing import Final

from tidelog.server.cluster_view import ClusterWatch
from tidelog.server.view import BrokerView

PAGE_PATHS: Final = ("/", "/ui")
EVENTS_PATH: Final = "/events"
WRITE_TIMEOUT_S: Final = 5.0
RETRY_MS: Final = 1000  # how soon a page's EventSource connects again after a drop


def page_html() -> bytes:
    return importlib.resources.files("tidelog.server").joinpath("ui/index.html").read_bytes()


def response_head(code: str, content_type: str, length: int | None = None) -> bytes:
    sized = "" if length is None else f"Content-Length: {length}\r\n"
    return (
        f"HTTP/1.0 {code}\r\nContent-Type: {content_type}\r\n{sized}"
        "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
    ).encode()


class LivePage:
    """The routes of the live page, for `server/admin.py`."""

    def __init__(self, broker: BrokerView, *, token: str | None) -> None:
        self.broker = broker
        self.token = token
        self.watch: ClusterWatch | None = None  # made by the first stream
        self.html: bytes | None = None

    def serves(self, target: str) -> bool:
        return urllib.parse.urlsplit(target).path in (*PAGE_PATHS, EVENTS_PATH)

    async def answer(
        self,
        target: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        authorized: bool,
    ) -> None:
        """Answer a GET of `target` (one that `serves`), then close the connection;
        `authorized` says whether the request's header bears the token."""
        url = urllib.parse.urlsplit(target)
        try:
            if url.path in PAGE_PATHS:
                if self.html is None:
                    self.html = page_html()
                writer.write(response_head("200 OK", "text/html; charset=utf-8", len(self.html)))
                writer.write(self.html)
            elif authorized or self.token_in(url.query):
                await self.stream(reader, writer)
            else:
                body = b'{"error": "a bearer token is required"}'
                writer.write(response_head("401 Unauthorized", "application/json", len(body)))
                writer.write(body)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
        except (OSError, TimeoutError):  # the page went away: nothing to answer
            pass
        finally:
            writer.close()

    def token_in(self, query: str) -> bool:
        if self.token is None:
            return True
        given = urllib.parse.parse_qs(query).get("token", [""])[0]
        return hmac.compare_digest(given.encode(), self.token.encode())

    async def stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Pictures as server-sent events until the page goes away or the node stops."""
        if self.watch is None:
            self.watch = ClusterWatch(self.broker)
        queue = self.watch.subscribe()
        if queue is None:
            body = b'{"error": "too many pages watch this node"}'
            writer.write(response_head("503 Service Unavailable", "application/json", len(body)))
            writer.write(body)
            return
        writer.write(response_head("200 OK", "text/event-stream"))
        writer.write(f"retry: {RETRY_MS}\n\n".encode())
        gone = asyncio.ensure_future(reader.read(1))  # EOF (or anything) ends the stream
        stopping = asyncio.ensure_future(self.broker.stopping.wait())
        try:
            while True:
                picture = asyncio.ensure_future(queue.get())
                await asyncio.wait((picture, gone, stopping), return_when=asyncio.FIRST_COMPLETED)
                if not picture.done():
                    picture.cancel()
                    return
                writer.write(b"data: " + picture.result() + b"\n\n")
                await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
        finally:
            for waiter in (gone, stopping):
                if waiter.done() and not waiter.cancelled():
                    waiter.exception()  # retrieved: a reset connection is no error here
                waiter.cancel()
            self.watch.unsubscribe(queue)
