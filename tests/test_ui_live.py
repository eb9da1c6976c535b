"""The live page as a person uses it: headless Chromium (selenium) on a real 3-node cluster,
the numbers it shows checked against the real CLI (`tidelog get-offsets`, `tidelog groups
describe`), then one node killed (SIGKILL, by the PID its cluster recorded) while records
keep coming.

The cluster is the module's (`cluster` in conftest.py); the test that kills a node runs
last. A secure cluster of its own shows the stream only to the token, and its node reads
its peers' status over HTTPS with the cluster's CA and token. Every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from tidelog.server.cluster_view import STREAMS_MAX
from tidelog.testing.live import LiveCluster, ProducerLoad, create_topic, poll, tidelog
from tidelog.tools.browser import CHROMIUM, headless_chromium, partition_of, read_page

TOPIC = "ui-orders"
GROUP = "ui-billing"
PARTITIONS = 3
COMMITTED = (5, 17, 0)  # the group's committed offset of each partition
DEADLINE_S = 20.0  # for the page to show what the CLI says
DOWN_DEADLINE_S = 6.0  # for the page to show a killed node DOWN
SOCKET_TIMEOUT_S = 5.0


def cli_hwms(cluster: LiveCluster) -> dict[int, int]:
    """{partition: HWM} as `tidelog get-offsets` prints it."""
    result = tidelog("get-offsets", TOPIC, "--json", "--bootstrap-server", cluster.bootstrap)
    assert result.returncode == 0, result.stderr
    return {row["partition"]: row["offset"] for row in json.loads(result.stdout)}


def cli_lags(cluster: LiveCluster) -> dict[int, int]:
    """{partition: lag} of GROUP as `tidelog groups describe` prints it."""
    result = tidelog("groups", "describe", GROUP, "--json", "--bootstrap-server", cluster.bootstrap)
    assert result.returncode == 0, result.stderr
    return {row["partition"]: row["lag"] for row in json.loads(result.stdout)["offsets"]}


def page_numbers(page: dict[str, Any]) -> tuple[dict[int, int], dict[int, int]] | None:
    """({partition: HWM}, {partition: GROUP's lag}) as the page shows them, checked against
    their text; None until every partition of TOPIC is there."""
    hwms, lags = {}, {}
    for partition in range(PARTITIONS):
        row = partition_of(page, TOPIC, partition)
        if row is None:
            return None
        assert row["hwm_text"] == f"HWM {row['hwm']}"
        hwms[partition] = row["hwm"]
        for group in row["groups"]:
            if group["group"] == GROUP:
                assert group["text"].endswith(f"lag {group['lag']}")
                lags[partition] = group["lag"]
    return hwms, lags


def produce(cluster: LiveCluster, records_per_partition: int) -> None:
    """Records to every partition of TOPIC, each acknowledged (acks=all)."""
    for partition in range(PARTITIONS):
        load = ProducerLoad(
            cluster.bootstrap,
            TOPIC,
            records=records_per_partition,
            rate_per_s=5000,
            partition=partition,
        )
        load.run()
        assert not load.failed and len(load.acked) == records_per_partition


def open_stream(admin: str, path: str = "/events") -> tuple[socket.socket, bytes]:
    """A connection that asked for `path`, and the status line of its answer."""
    host, port = admin.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)
    sock.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, "the admin endpoint closed the connection"
        data += chunk
    return sock, data.split(b"\r\n", 1)[0]


def test_at_most_streams_max_pages_watch_at_once(cluster: LiveCluster) -> None:
    admin = cluster.record["nodes"][0]["admin"]
    streams = [open_stream(admin) for _ in range(STREAMS_MAX)]
    try:
        assert {status for _, status in streams} == {b"HTTP/1.0 200 OK"}
        extra, status = open_stream(admin)
        extra.close()
        assert status == b"HTTP/1.0 503 Service Unavailable"
        streams.pop()[0].close()  # a page that goes away frees its place

        def reopened() -> tuple[socket.socket, bytes] | None:
            sock, status = open_stream(admin)
            if status == b"HTTP/1.0 200 OK":
                return sock, status
            sock.close()
            return None

        again = poll(reopened, "a stream once one closed", deadline_s=DEADLINE_S)
        streams.append(again)
        first_event = b""
        while b"\n\ndata: " not in first_event or not first_event.endswith(b"\n\n"):
            first_event += again[0].recv(1 << 16)
        picture = json.loads(first_event.split(b"data: ", 1)[1].split(b"\n\n", 1)[0])
        assert [node["node_id"] for node in picture["nodes"]] == [1, 2, 3]
    finally:
        for sock, _ in streams:
            sock.close()


def test_the_page_and_its_stream_are_routes_of_the_admin_endpoint(cluster: LiveCluster) -> None:
    admin = cluster.record["nodes"][1]["admin"]
    for path in ("/", "/ui"):
        sock, status = open_stream(admin, path)
        sock.close()
        assert status == b"HTTP/1.0 200 OK"
    ui = tidelog("ui", "--data-dir", str(cluster.directory), "--no-open")
    assert ui.returncode == 0, ui.stderr
    assert ui.stdout.strip() == f"http://{cluster.record['nodes'][0]['admin']}/"


def events_of(sock: socket.socket, *, count: int) -> list[dict[str, Any]]:
    """The next `count` pictures of an event stream whose head was read (`open_stream`)."""
    data, pictures = b"", []
    deadline = time.monotonic() + DEADLINE_S
    while len(pictures) < count:
        assert time.monotonic() < deadline, f"{count} events: not within {DEADLINE_S} s"
        chunk = sock.recv(1 << 16)
        assert chunk, "the stream ended"
        data += chunk
        *events, data = data.split(b"\n\n")
        pictures += [json.loads(e[len(b"data: ") :]) for e in events if e.startswith(b"data: ")]
    return pictures


def test_a_secure_cluster_shows_its_page_to_the_token_only(tmp_path: Path) -> None:
    secure = LiveCluster(tmp_path / "secure", secure=True)
    try:
        admin = secure.record["nodes"][0]["admin"]
        certs = secure.directory / "certs"
        token = (certs / "admin.token").read_text().strip()
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        host, port = admin.rsplit(":", 1)

        def ask(path: str) -> tuple[socket.socket, bytes]:
            raw = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)
            sock = context.wrap_socket(raw, server_hostname=host)
            sock.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(1)
                assert chunk, "the admin endpoint closed the connection"
                head += chunk
            return sock, head.split(b"\r\n", 1)[0]

        for path, expected in [("/", b"200 OK"), ("/events", b"401 Unauthorized")]:
            sock, status = ask(path)
            sock.close()
            assert status == b"HTTP/1.0 " + expected, path
        sock, status = ask(f"/events?token={token}")
        try:
            assert status == b"HTTP/1.0 200 OK"
            # The node asked its peers over HTTPS with the cluster's CA and token: all up.
            pictures = events_of(sock, count=3)
            assert [n["up"] for n in pictures[-1]["nodes"]] == [True, True, True]
        finally:
            sock.close()
        ui = tidelog("ui", "--data-dir", str(secure.directory), "--no-open")
        assert ui.returncode == 0, ui.stderr
        assert ui.stdout.strip() == f"https://{admin}/#token={token}"
    finally:
        secure.down()


@pytest.fixture
def browser() -> Iterator[Any]:
    assert shutil.which(CHROMIUM), "chromium is installed by the Makefile's test set-up"
    with headless_chromium() as driver:
        yield driver


def kill(cluster: LiveCluster, node_id: int) -> None:
    """SIGKILL node `node_id` of `cluster`, by the PID its cluster.json records, after
    checking that this PID still runs that node's broker."""
    node = next(n for n in cluster.record["nodes"] if n["id"] == node_id)
    command = Path(f"/proc/{node['pid']}/cmdline").read_bytes().split(b"\0")
    assert b"broker" in command, command
    assert f"--data-dir={node['data_dir']}".encode() in command, command
    os.kill(node["pid"], signal.SIGKILL)


def test_the_page_shows_hwm_lag_and_a_killed_node(cluster: LiveCluster, browser: Any) -> None:
    create_topic(cluster.bootstrap, TOPIC, partitions=PARTITIONS)
    produce(cluster, 100)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=GROUP)
    try:
        consumer.commit(
            {
                TopicPartition(TOPIC, partition): OffsetAndMetadata(offset, "", -1)
                for partition, offset in enumerate(COMMITTED)
            }
        )
    finally:
        consumer.close()
    started = time.monotonic()
    browser.get(f"http://{cluster.record['nodes'][0]['admin']}/")
    hwms, lags = cli_hwms(cluster), cli_lags(cluster)
    assert all(hwm >= 100 for hwm in hwms.values())
    assert lags == {p: hwms[p] - COMMITTED[p] for p in range(PARTITIONS)}
    poll(
        lambda: page_numbers(read_page(browser)) == (hwms, lags) or None,
        f"the page shows HWMs {hwms} and lags {lags}",
        deadline_s=DEADLINE_S,
    )
    shown = time.monotonic() - started
    page = read_page(browser)
    assert page["connection"] == "live"
    assert {node: shown["state"] for node, shown in page["nodes"].items()} == {
        "1": "up",
        "2": "up",
        "3": "up",
    }

    kill(cluster, 3)
    killed = time.monotonic()
    poll(
        lambda: read_page(browser)["nodes"]["3"]["state"] == "down" or None,
        "node 3 shown DOWN",
        deadline_s=DOWN_DEADLINE_S,
    )
    down_after = time.monotonic() - killed
    produce(cluster, 100)
    after = cli_hwms(cluster)
    assert all(after[p] > hwms[p] for p in range(PARTITIONS)), (hwms, after)

    def moved_on() -> bool:
        page = read_page(browser)
        numbers = page_numbers(page)
        frozen = {
            row["partition"]: replica
            for row in page["partitions"]
            if row["topic"] == TOPIC
            for replica in row["replicas"]
            if replica["node"] == 3
        }
        # Node 3's bars stay as it was last seen: no further than the HWMs before the kill.
        return (
            numbers is not None
            and numbers[0] == after
            and len(frozen) == PARTITIONS
            and all(r["state"] == "down" for r in frozen.values())
            and all(int(r["log_end_offset"]) <= hwms[p] for p, r in frozen.items())
        )

    poll(lambda: moved_on() or None, "the HWMs move on without node 3", deadline_s=DEADLINE_S)
    print(
        f"page showed the CLI's numbers after {shown:.1f} s; node 3 DOWN after {down_after:.1f} s"
    )
