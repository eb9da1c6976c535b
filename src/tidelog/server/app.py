"""One place wires a node: its Broker, the peer links, the Kafka and admin listeners, and
the ticker, run until SIGTERM (`tidelog broker` calls `run`).

Rules of this file:
- Nothing else imports the listeners (`kafka_server`, `admin`): the handlers depend on the
  broker, never the other way round (tests/test_layers.py fails on any import cycle).
- SIGTERM stops the node cleanly: first every leadership it holds is handed over
  (controlled shutdown, `server/leadership.py`) while it still serves, then listeners
  close, each partition finishes its round and closes its log.
- When the metadata log cannot be opened the node does not start: it says why in one
  line and exits with EXIT_DISK.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import resource
import signal

from tidelog.address import format_address
from tidelog.errors import StorageError
from tidelog.server.admin import serve_admin
from tidelog.server.broker import Broker
from tidelog.server.config import BrokerConfig
from tidelog.server.disk_health import describe_disk_error, is_disk_error
from tidelog.server.isr_control import mark_clean_shutdown
from tidelog.server.kafka_server import serve_kafka
from tidelog.server.logs import configure_logging
from tidelog.server.snapshot import StateCollector
from tidelog.server.tls import admin_context, listener_context

log = logging.getLogger("tidelog.broker")

EXIT_DISK = 3  # the node cannot start: its disk fails


async def serve(broker: Broker) -> int:
    """Serve until SIGTERM or SIGINT; returns the node's exit code."""
    broker.config.data_dir.mkdir(parents=True, exist_ok=True)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, broker.stopping.set)
    broker.transport.on_connect = broker.announce_to
    await broker.transport.start(broker.config.peer_listen)
    config = broker.config
    tls = config.tls
    listeners = [
        await serve_kafka(
            broker,
            listener,
            listener_context(tls, config.ssl_client_auth)
            if listener.tls and tls is not None
            else None,
        )
        for listener in config.listeners
    ]
    for warning in exposure_warnings(config):
        log.warning("%s", warning)
    broker.metrics.watch(StateCollector(broker))
    admin = (
        await serve_admin(
            broker,
            config.admin_listen,
            tls=None if tls is None else admin_context(tls),
            token=config.admin_token,
        )
        if config.admin_listen
        else None
    )
    broker.apply_metadata(broker.metadata)
    ticker = loop.create_task(broker.tick_forever())
    log.info(
        "node %d serving Kafka on %s, peers on %s%s",
        broker.node_id,
        ", ".join(str(listener) for listener in config.listeners),
        format_address(config.peer_listen),
        " (mutual TLS)" if tls is not None else "",
    )
    await broker.stopping.wait()
    log.info("node %d stopping", broker.node_id)
    if config.controlled_shutdown_timeout_ms > 0:
        await broker.shut_down_leadership()
    ticker.cancel()
    for server in (*listeners, admin):
        if server is not None:
            server.close()
    await broker.transport.close()
    for runner in broker.hosted():
        await runner.stop()
    broker.executor.shutdown(wait=True)
    if broker.exit_code == 0:
        mark_clean_shutdown(broker.config.data_dir)
    return broker.exit_code


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may reach beyond this machine


def exposure_warnings(config: BrokerConfig) -> list[str]:
    """What this node exposes beyond the machine without TLS, one line each."""
    warnings = [
        f"Kafka listener {listener} is not loopback and has no TLS: whoever reaches it "
        "reads and writes every topic"
        for listener in config.listeners
        if not listener.tls and not is_loopback(listener.address[0])
    ]
    admin = config.admin_listen
    if admin is not None and not is_loopback(admin[0]) and config.admin_token_file is None:
        warnings.append(
            f"admin endpoint {format_address(admin)} is not loopback and wants no token "
            "(--admin-token-file): whoever reaches it reads the cluster's state"
        )
    if config.tls is None and not is_loopback(config.peer_listen[0]):
        warnings.append(
            f"peer listener {format_address(config.peer_listen)} is not loopback and has no "
            "TLS (--ssl-ca/--ssl-cert/--ssl-key): whoever reaches it can forge replication"
        )
    return warnings


def raise_open_files_limit() -> None:
    """Lift this process's soft limit of open descriptors to its hard limit: a node holds
    the files of thousands of partitions (wal/fs.py's budget is a share of it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run(config: BrokerConfig) -> int:
    """Run one node in the foreground until SIGTERM; returns the exit code."""
    configure_logging(  # a no-op after `tidelog broker` set it up (server/logs.py)
        log_level=config.log_level, log_format=config.log_format, node_id=config.node_id
    )
    import uvloop  # noqa: PLC0415

    raise_open_files_limit()
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
    except StorageError as error:  # a checkpoint of the data directory that cannot be read
        log.critical("cannot start: %s", error)
        return EXIT_DISK
    return code
