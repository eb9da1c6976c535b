"""Shared pytest options: `--rewrite` regenerates the scenario transcripts."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING

import pytest
import uvloop

from tidelog.server.peers import Deliver, PeerTransport
from tidelog.server.tls import PeerContexts
from tidelog.testing.live import LiveCluster, collect_leaked_sockets
from tidelog.types import NodeId

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SWEEP_WORKERS = 2
PEER_SERVER_WAIT_S = 10.0
Address = tuple[str, int]
PeerServer = Callable[[Deliver, "PeerContexts | None"], contextlib.AbstractContextManager[Address]]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--rewrite",
        action="store_true",
        default=False,
        help="write the actual output of scenario scripts back into tests/scenarios/",
    )


@pytest.fixture
def rewrite(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--rewrite"))


@pytest.fixture(autouse=True, scope="module")
def _finalize_leaked_client_sockets() -> Iterator[None]:
    """After each module, finalize the sockets kafka-python leaked (see
    tidelog.testing.live), so that they cannot surface as warnings in the next module."""
    yield
    collect_leaked_sockets()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    """One real 3-node cluster per module (`tidelog cluster up`, then `down`)."""
    running = LiveCluster(tmp_path_factory.mktemp("cluster"))
    yield running
    running.down()


@pytest.fixture(scope="session")
def workers() -> Iterator[ProcessPoolExecutor]:
    """Two worker processes for the simulator's sweeps (2 cores: a sweep takes half the
    time). Spawned, not forked: this process runs threads (clients, Spark) by then."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=SWEEP_WORKERS, mp_context=context) as pool:
        yield pool


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] Spark session for the whole run, with format("tidelog") registered."""
    from tidelog.spark.session import local_session  # noqa: PLC0415 - starts a JVM

    session = local_session("tidelog-tests")
    yield session
    session.stop()


@pytest.fixture
def peer_server() -> PeerServer:
    """`peer_server(deliver, tls)`: node 1's peer server (server/peers.py) on uvloop in a
    thread, as a node runs it, for the `with` block; the address it listens at."""

    @contextlib.contextmanager
    def serving(deliver: Deliver, tls: PeerContexts | None) -> Iterator[Address]:
        ready, stop = threading.Event(), threading.Event()
        bound: list[Address] = []

        async def serve() -> None:
            transport = PeerTransport(NodeId(1), "tidelog", {}, deliver, tls)
            await transport.start(("127.0.0.1", 0))
            assert transport.listener is not None
            bound.append(transport.listener.getsockname())
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.01)
            await transport.close()

        thread = threading.Thread(target=uvloop.run, args=(serve(),))
        thread.start()
        try:
            assert ready.wait(timeout=PEER_SERVER_WAIT_S)
            yield bound[0]
        finally:
            stop.set()
            thread.join(timeout=PEER_SERVER_WAIT_S)

    return serving
