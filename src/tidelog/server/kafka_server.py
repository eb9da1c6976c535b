"""The Kafka listener: one task per client connection, requests pipelined, answers in order.

Rules of this file:
- A connection may have up to `INFLIGHT_REQUESTS_MAX` requests being handled at once
  (producers pipeline); responses leave in request order, as Kafka requires. A Fetch starts
  only once every earlier response of its connection is written, so a connection holds at
  most one Fetch response (`FETCH_MAX_BYTES`) however many it pipelines.
- Memory is bounded: a request's bytes are reserved from the broker's `RequestBytes`
  budget (Kafka's queued.max.request.bytes) as soon as its size prefix arrives, before its
  payload is read, and given back when it has been handled; while the budget is spent the
  broker reads from no connection that needs more, so the bytes wait in the kernel.
- A connection ends when its client closes it, when it sends something malformed, when it
  is idle (no request in flight, nothing read) for `connections_max_idle_ms`, or when a
  request's payload takes longer than that to arrive. Ending it cancels its requests in
  flight and drops their responses at once (a client that stopped reading holds nothing).
- A malformed, oversized or unknown request closes that connection, with one log line that
  quotes at most a few hundred characters of it; every other connection is unaffected.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from typing import Any

from tidelog.protocol.framing import FRAME_HEADER_SIZE, FRAME_SIZE, ProtocolError
from tidelog.protocol.kafka import (
    REQUEST_SIZE_MAX,
    ApiKey,
    KafkaConnection,
    KafkaRequest,
    RawResponse,
    bounded,
)
from tidelog.server.answers import client_host
from tidelog.server.budget import RequestBytes
from tidelog.server.config import Listener
from tidelog.server.handlers import handle
from tidelog.server.metrics import ERROR_CLOSED, error_names
from tidelog.server.session import (
    BEFORE_AUTHENTICATION,
    Session,
    client_session,
    principal_of,
    session,
)
from tidelog.server.view import BrokerView, client_listener

log = logging.getLogger("tidelog.kafka")

INFLIGHT_REQUESTS_MAX = 64
IDLE = "idle"
TLS_HANDSHAKE_S = 10.0
Address = tuple[str, int]
Answer = tuple[KafkaRequest, "asyncio.Task[Any]", float]  # and when it was read


async def serve_kafka(
    broker: BrokerView, listener: Listener, tls: ssl.SSLContext | None = None
) -> asyncio.Server:
    """Serve Kafka clients on one listener (TLS with `tls`: SSL and SASL_SSL)."""

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        broker.kafka_connections += 1
        client_listener.set(listener.protocol)
        peer = writer.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) else ""
        state = Session(listener.protocol, peer=str(peer), host=str(host))
        certificate = writer.get_extra_info("peercert") if tls is not None else None
        if certificate and listener.protocol == "SSL":
            state.principal, state.authenticated = principal_of(certificate), True
        client_session.set(state)
        try:
            await Connection(broker, broker.request_bytes, reader, writer).serve()
        except asyncio.CancelledError:
            pass  # the broker is stopping: the connection is closed, nothing else to do
        finally:
            broker.kafka_connections -= 1

    if tls is None:
        return await asyncio.start_server(on_connection, *listener.address)
    return await asyncio.start_server(
        on_connection, *listener.address, ssl=tls, ssl_handshake_timeout=TLS_HANDSHAKE_S
    )


class Connection:
    """One client connection: a reading loop and a writing loop over a queue of answers."""

    def __init__(
        self,
        broker: BrokerView,
        budget: RequestBytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.broker = broker
        self.budget = budget
        self.reader = reader
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        self.idle_s = broker.config.connections_max_idle_ms / 1000
        self.codec = KafkaConnection()
        self.answers: asyncio.Queue[Answer] = asyncio.Queue(INFLIGHT_REQUESTS_MAX)
        self.handling: set[asyncio.Task[Any]] = set()
        # The idle watchdog (`watch`): one timer per connection, not one per read.
        self.read_since: float | None = None  # when the read under way began (loop time)
        self.frame_size: int | None = None  # the size of the frame being read, if any
        self.expired: str | None = None  # why the watchdog ended the reading
        self.reading: asyncio.Task[None] | None = None
        self.watchdog: asyncio.TimerHandle | None = None

    async def serve(self) -> None:
        # Group members are described with their host, as Kafka shows it ("/127.0.0.1").
        client_host.set(f"/{self.peer[0]}" if isinstance(self.peer, tuple) else "")
        loop = asyncio.get_running_loop()
        self.reading = reading = loop.create_task(self.read_requests())
        writing = loop.create_task(self.write_responses())
        self.watchdog = loop.call_at(loop.time() + self.idle_s, self.watch)
        try:
            await asyncio.wait((reading, writing), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.watchdog.cancel()
            if self.expired == IDLE:
                log.info("closing the connection from %s: idle", self.peer)
            elif self.expired is not None:
                log.warning("closing the connection from %s: %s", self.peer, self.expired)
            for task in (reading, writing, *self.handling):
                task.cancel()
            await asyncio.gather(reading, writing, *self.handling, return_exceptions=True)
            self.writer.transport.abort()  # drop what a client that stopped reading left

    async def read_requests(self) -> None:
        try:
            while True:
                request, size = await self.next_request()
                started = time.perf_counter()
                state = session()
                if state.needs_sasl and request.api_key not in BEFORE_AUTHENTICATION:
                    self.budget.release(size)
                    log.warning(
                        "closing the connection from %s: %s before authenticating",
                        self.peer,
                        request.api_key.name,
                    )
                    return
                try:
                    if request.api_key is ApiKey.FETCH:
                        await self.answers.join()  # one Fetch response held at a time
                    task = asyncio.get_running_loop().create_task(handle(self.broker, request))
                except BaseException:
                    self.budget.release(size)
                    raise
                self.handling.add(task)
                task.add_done_callback(self.handling.discard)
                task.add_done_callback(functools.partial(self.release, size))
                if request.expects_response:
                    await self.answers.put((request, task, started))
                elif self.broker.metrics.enabled:  # acks=0: counted once handled
                    task.add_done_callback(
                        functools.partial(self.count_unanswered, request.api_key.name, started)
                    )
                # Keep no handled request in this frame (see `write_responses`).
                del request, task
        except ProtocolError as error:
            log.warning("closing the connection from %s: %s", self.peer, error)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass

    def count_unanswered(self, api: str, started: float, task: asyncio.Task[Any]) -> None:
        failed = task.cancelled() or task.exception() is not None
        self.broker.metrics.request(api, time.perf_counter() - started, [ERROR_CLOSED] * failed)

    def release(self, size: int, task: asyncio.Task[Any]) -> None:
        """A request was handled (or cancelled): its bytes go back to the budget."""
        del task
        self.budget.release(size)

    async def next_request(self) -> tuple[KafkaRequest, int]:
        """The next request and its size, reserved from the budget (the caller releases
        it). Raises ProtocolError or IncompleteReadError (the client went away); the
        watchdog cancels it when the connection stays idle, or a frame does not arrive,
        within `idle_s`."""
        loop = asyncio.get_running_loop()
        self.read_since = loop.time()
        try:
            head = await self.reader.readexactly(FRAME_HEADER_SIZE)
        finally:
            self.read_since = None
        (size,) = FRAME_SIZE.unpack(head)
        if not 0 <= size <= REQUEST_SIZE_MAX:
            raise ProtocolError(
                f"kafka request: frame of {size} bytes outside [0, {REQUEST_SIZE_MAX}]"
            )
        await self.budget.acquire(size)  # no time limit: the budget is shared
        self.read_since, self.frame_size = loop.time(), size
        try:
            payload = await self.reader.readexactly(size)
            return self.codec.request_of(payload), size
        except BaseException:
            self.budget.release(size)
            raise
        finally:
            self.read_since = self.frame_size = None

    def watch(self) -> None:
        """The idle watchdog, due when the read under way began `idle_s` ago: a frame
        not arrived in time, or a connection idle with nothing to answer, ends the
        reading (and so the connection); else it is due again in `idle_s`. One timer per
        connection, rescheduled at most once per `idle_s`, instead of a timeout around
        every read (two per request)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        since = self.read_since
        if since is not None and now >= since + self.idle_s:
            if self.frame_size is not None:
                self.expired = f"a request of {self.frame_size} bytes did not arrive in time"
            elif not self.handling and self.answers.empty():
                self.expired = IDLE
            else:  # requests are being answered: the client waits, it is not idle
                self.read_since = since = now
            if self.expired is not None and self.reading is not None:
                self.reading.cancel()
                return
        self.watchdog = loop.call_at((now if since is None else since) + self.idle_s, self.watch)

    async def write_responses(self) -> None:
        """Write each response once its request is handled, in request order.

        No local holds a response while the write drains: a client that stops reading
        and then vanishes ends the drain with an error whose traceback keeps this frame
        alive until a garbage collection, so its 50 MiB would outlive the connection."""
        while True:
            request, task, started = await self.answers.get()
            answered = await self.frames_of(request, task)
            del task
            api = request.api_key.name
            if answered is None:
                self.broker.metrics.request(api, time.perf_counter() - started, [ERROR_CLOSED])
                return
            frames, errors = answered
            self.writer.writelines(frames)
            del frames, answered
            try:
                await self.writer.drain()
            except (ConnectionError, OSError):
                return
            self.broker.metrics.request(api, time.perf_counter() - started, errors)
            self.answers.task_done()
            if session().close_after_reply:
                return  # a failed authentication: answered, then closed

    async def frames_of(
        self, request: KafkaRequest, task: asyncio.Task[Any]
    ) -> tuple[list[bytes | memoryview], list[str]] | None:
        """The frames answering `request` once `task` has handled it, and the errors they
        answer (for the metrics); None when the connection must close (a malformed
        request, or a bug: one log line)."""
        try:
            body = await task
            errors = error_names(body) if self.broker.metrics.enabled else []
            if isinstance(body, RawResponse):
                return self.codec.send_raw_response(request, body), errors
            return [self.codec.send_response(request, body)], errors
        except ProtocolError as error:
            log.warning("closing the connection from %s: %s", self.peer, error)
        except Exception as error:  # a bug: one line, and this connection only
            log.error(
                "closing the connection from %s: %s v%d failed: %s",
                self.peer,
                request.api_key.name,
                request.api_version,
                bounded(repr(error)),
            )
            log.debug("the failure", exc_info=True)
        return None
