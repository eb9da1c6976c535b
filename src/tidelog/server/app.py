"""One place wires a node: its Broker, the peer links, the Kafka and admin listeners, and
the ticker, run until SIGTERM (`tidelog broker` calls `run`).

Rules of this file:
- Nothing else imports the listeners (`kafka_server`, `admin`): the handlers depend on the
  broker, never the other way round (tests/test_layers.py fails on any import cycle).
- SIGTERM stops the node cleanly: listeners close, each partition finishes its round and
  closes its log.
- When the metadata log cannot be opened the node does not start: it says why in one
  line and exits with EXIT_DISK.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from tidelog.server.admin import serve_admin
from tidelog.server.broker import Broker
from tidelog.server.config import BrokerConfig
from tidelog.server.kafka_server import serve_kafka
from tidelog.server.partition import describe_disk_error, is_disk_error

log = logging.getLogger("tidelog.broker")

EXIT_DISK = 3  # the node cannot start: its disk fails


async def serve(broker: Broker) -> int:
    """Serve until SIGTERM or SIGINT; returns the node's exit code."""
    broker.config.data_dir.mkdir(parents=True, exist_ok=True)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, broker.stopping.set)
    for link in broker.transport.links.values():
        link.on_connect = broker.announce_to
    await broker.transport.start(broker.config.peer_listen)
    kafka = await serve_kafka(broker, broker.config.listen)
    admin = (
        await serve_admin(broker, broker.config.admin_listen)
        if broker.config.admin_listen
        else None
    )
    broker.apply_metadata(broker.metadata)
    ticker = loop.create_task(broker.tick_forever())
    log.info(
        "node %d serving Kafka on %s:%d, peers on %s:%d",
        broker.node_id,
        *broker.config.listen,
        *broker.config.peer_listen,
    )
    await broker.stopping.wait()
    log.info("node %d stopping", broker.node_id)
    ticker.cancel()
    for server in (kafka, admin):
        if server is not None:
            server.close()
    await broker.transport.close()
    for runner in list(broker.runners.values()):
        await runner.stop()
    broker.executor.shutdown(wait=True)
    return broker.exit_code


def run(config: BrokerConfig) -> int:
    """Run one node in the foreground until SIGTERM; returns the exit code."""
    logging.basicConfig(
        stream=sys.stderr,
        level=config.log_level.upper(),
        format=f"%(asctime)s node-{config.node_id} %(levelname)s %(name)s: %(message)s",
    )
    import uvloop  # noqa: PLC0415

    try:
        code: int = uvloop.run(serve(Broker(config)))
    except OSError as error:
        if not is_disk_error(error):
            raise
        log.critical(
            "cannot start: %s; free space (or fix the disk) and start again",
            describe_disk_error(error),
        )
        return EXIT_DISK
    return code
