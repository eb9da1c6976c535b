"""The Kafka listener: one task per client connection, requests pipelined, answers in order.

Rules of this file:
- A connection may have up to `INFLIGHT_REQUESTS_MAX` requests being handled at once
  (producers pipeline); responses leave in request order, as Kafka requires.
- A malformed, oversized or unknown request closes that connection, with a log line; every
  other connection is unaffected.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tidelog.protocol.framing import NEED_DATA, ProtocolError
from tidelog.protocol.kafka import KafkaConnection, KafkaRequest, RawResponse
from tidelog.server.answers import client_host
from tidelog.server.broker import Broker
from tidelog.server.handlers import handle

log = logging.getLogger("tidelog.kafka")

READ_CHUNK_BYTES = 1 << 20
INFLIGHT_REQUESTS_MAX = 64
Address = tuple[str, int]
Answer = tuple[KafkaRequest, "asyncio.Task[Any]"]


async def serve_kafka(broker: Broker, listen: Address) -> asyncio.Server:
    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await serve_connection(broker, reader, writer)

    return await asyncio.start_server(on_connection, *listen)


async def serve_connection(
    broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    peer = writer.get_extra_info("peername")
    # Group members are described with their host, as Kafka shows it ("/127.0.0.1").
    client_host.set(f"/{peer[0]}" if isinstance(peer, tuple) else "")
    connection = KafkaConnection()
    answers: asyncio.Queue[Answer | None] = asyncio.Queue(INFLIGHT_REQUESTS_MAX)
    responder = asyncio.get_running_loop().create_task(respond(connection, answers, writer))
    try:
        while data := await reader.read(READ_CHUNK_BYTES):
            connection.receive_data(data)
            while (request := connection.next_request()) is not NEED_DATA:
                task = asyncio.get_running_loop().create_task(handle(broker, request))
                if request.expects_response:
                    await answers.put((request, task))
    except ProtocolError as error:
        log.warning("closing the connection from %s: %s", peer, error)
    except (ConnectionError, OSError):
        pass
    finally:
        await answers.put(None)
        await asyncio.gather(responder, return_exceptions=True)
        writer.close()


async def respond(
    connection: KafkaConnection, answers: asyncio.Queue[Answer | None], writer: asyncio.StreamWriter
) -> None:
    """Write each response once its request is handled, in request order."""
    while (answer := await answers.get()) is not None:
        request, task = answer
        try:
            body = await task
            frames = (
                connection.send_raw_response(request, body)
                if isinstance(body, RawResponse)
                else [connection.send_response(request, body)]
            )
        except ProtocolError as error:
            log.warning("closing a connection: %s", error)
            writer.close()
            return
        except Exception:  # a bug: log it and close this connection only
            log.exception("request %s v%d failed", request.api_key.name, request.api_version)
            writer.close()
            return
        writer.writelines(frames)
        try:
            await writer.drain()
        except (ConnectionError, OSError):
            return
