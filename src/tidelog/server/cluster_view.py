"""The live page's picture of the whole cluster: gathered by the node that serves the page,
merged into one JSON value, pushed to each page that watches (`server/live_page.py`).

The node gathers its own `status(broker)` and every other node's `GET /status`, at the
admin port that node names in its BrokerNotice, on its host of `config.peers`, every
GATHER_INTERVAL_S while a page watches (never otherwise). `picture()` merges them.

Rules of this file:
- `picture()` is pure: what each node last answered, and when, in; one value out. A node
  is up while its last answer is younger than DOWN_AFTER_MS; a node that is down keeps its
  last answer (its bars stay frozen), marked down.
- A partition's leader, epoch, ISR, HWM and data end are those its leader reports: the up
  node that claims leadership in the highest epoch. Without one, no leader, and the HWM is
  the largest an up replica reports (of any replica's, when none is up), with the data end
  that replica reports. The data end is the offset after the last data record below the
  HWM (`server/snapshot.py`); a node that does not report it (an older version) is taken
  to have none but data (its data end is its HWM).
- A consumer group's committed offsets come from the up nodes that coordinate it (a node
  reports the groups whose `__consumer_offsets` partition it leads); when two report the
  same partition (a coordinator moving), the larger offset wins. Its lag is the lag of
  `tidelog groups describe` and of the metrics (`snapshot.group_lag`):
  data end - max(committed, log start), never negative, so the control batches at the top
  of the log (failovers after the group stopped) do not count.
- A peer's answer is input from the network: checked at the door (`checked_status`); an
  answer that is not a status of the node asked counts as no answer.
- In a secured cluster a peer's endpoint is HTTPS, verified against the cluster's CA, and
  wants the bearer token every node of the cluster shares (one token file).
- Everything is bounded: a peer answers within FETCH_TIMEOUT_S and STATUS_BYTES_MAX, at
  most STREAMS_MAX pages watch at once, and each page holds at most one picture not yet
  sent (a slow page skips pictures, it never queues them).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass
from typing import Any, Final

from tidelog.address import format_address
from tidelog.clock import monotonic_ms, wall_ms
from tidelog.server.snapshot import group_lag, status
from tidelog.server.view import BrokerView

GATHER_INTERVAL_S: Final = 0.5
FETCH_TIMEOUT_S: Final = 1.0
DOWN_AFTER_MS: Final = 2_000
STATUS_BYTES_MAX: Final = 16 * 1024 * 1024
STREAMS_MAX: Final = 16
INTERNAL_PREFIX: Final = "__"  # internal topics (__consumer_offsets) are drawn last

# The fields of a partition of `/status` the picture reads, and their types.
_PARTITION_FIELDS: Final[dict[str, type | tuple[type, ...]]] = {
    "topic": str,
    "partition": int,
    "role": str,
    "epoch": int,
    "hwm": int,
    "log_start_offset": int,
    "log_end_offset": int,
    "replicas": list,
    "isr": list,
    "leader": (int, type(None)),
}
_GROUP_FIELDS: Final[dict[str, type | tuple[type, ...]]] = {
    "group": str,
    "topic": str,
    "partition": int,
    "committed_offset": int,
}


@dataclass(frozen=True, slots=True)
class Heard:
    """A node's last good answer, and when it came (monotonic ms)."""

    status: dict[str, Any]
    at_ms: int


def _has_fields(value: object, fields: dict[str, type | tuple[type, ...]]) -> bool:
    if not isinstance(value, dict):
        return False
    # bool is an int to isinstance: no field the picture reads is a bool.
    return all(
        isinstance(value.get(name), kind) and not isinstance(value.get(name), bool)
        for name, kind in fields.items()
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def checked_status(value: object, node_id: int) -> dict[str, Any] | None:
    """`value` when it is a `/status` of node `node_id` with every field the picture reads,
    of the right type (`data_end`, when there, an int at most the HWM); else None."""
    if not isinstance(value, dict) or value.get("node_id") != node_id:
        return None
    partitions, groups = value.get("partitions"), value.get("groups", [])
    if not isinstance(partitions, list) or not isinstance(groups, list):
        return None
    if not all(_has_fields(p, _PARTITION_FIELDS) for p in partitions):
        return None
    for partition in partitions:
        for nodes in (partition["replicas"], partition["isr"]):
            if not all(_is_int(n) for n in nodes):
                return None
        data_end = partition.get("data_end", partition["hwm"])
        if not _is_int(data_end) or data_end > partition["hwm"]:
            return None
    if not all(_has_fields(g, _GROUP_FIELDS) for g in groups):
        return None
    return value


def picture(
    *,
    node_id: int,
    nodes: dict[int, str | None],
    heard: dict[int, Heard],
    now_ms: int,
    at_wall_ms: int,
) -> dict[str, Any]:
    """The cluster as node `node_id` sees it at `now_ms`: every node of `nodes` (its
    admin address, or None when unknown) with what it last answered (`heard`)."""
    up = {node for node, seen in heard.items() if now_ms - seen.at_ms < DOWN_AFTER_MS}
    replicas: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    for node, seen in sorted(heard.items()):
        for partition in seen.status["partitions"]:
            key = (partition["topic"], partition["partition"])
            replicas.setdefault(key, {})[node] = partition
    groups = _group_rows(heard, up)
    topics: dict[str, list[dict[str, Any]]] = {}
    for key, reports in sorted(replicas.items()):
        row = _partition_row(key[1], reports, up)
        row["groups"] = _lags(groups.get(key, {}), row)
        topics.setdefault(key[0], []).append(row)
    return {
        "node_id": node_id,
        "wall_ms": at_wall_ms,
        "nodes": [
            _node_row(node, admin, heard.get(node), up, now_ms)
            for node, admin in sorted(nodes.items())
        ],
        "topics": [
            {"topic": topic, "partitions": rows}
            for topic, rows in sorted(
                topics.items(), key=lambda t: (t[0].startswith(INTERNAL_PREFIX), t[0])
            )
        ],
    }


def _node_row(
    node: int, admin: str | None, seen: Heard | None, up: set[int], now_ms: int
) -> dict[str, Any]:
    return {
        "node_id": node,
        "admin": admin,
        "up": node in up,
        "heard_ms_ago": None if seen is None else now_ms - seen.at_ms,
        "ready": None if seen is None else seen.status.get("ready"),
        "metadata_leader": None if seen is None else seen.status.get("metadata_leader"),
    }


def _partition_row(
    partition: int, reports: dict[int, dict[str, Any]], up: set[int]
) -> dict[str, Any]:
    """One partition: its leader's view, and each replica's log as its node reports it."""
    leaders = [
        (report["epoch"], node)
        for node, report in reports.items()
        if node in up and report["role"] == "leader"
    ]
    leader = None if not leaders else reports[max(leaders)[1]]
    if leader is not None:
        hwm, log_start = leader["hwm"], leader["log_start_offset"]
        data_end = leader.get("data_end", hwm)
    else:
        seen = [r for n, r in reports.items() if n in up] or list(reports.values())
        furthest = max(seen, key=lambda r: r["hwm"])
        hwm, data_end = furthest["hwm"], furthest.get("data_end", furthest["hwm"])
        log_start = max(r["log_start_offset"] for r in seen)
    # The replica set as the leader (else the newest report) names it, then any other
    # node that reports a replica of it.
    named = leader or max(reports.values(), key=lambda r: r["epoch"])
    order = list(dict.fromkeys([*named["replicas"], *sorted(reports)]))
    return {
        "partition": partition,
        "leader": None if leader is None else leader["leader"],
        "epoch": None if leader is None else leader["epoch"],
        "hwm": hwm,
        "data_end": data_end,
        "log_start_offset": log_start,
        "isr": None if leader is None else leader["isr"],
        "replicas": [_replica_row(node, reports.get(node), up) for node in order],
    }


def _replica_row(node: int, report: dict[str, Any] | None, up: set[int]) -> dict[str, Any]:
    if report is None:  # a replica no node reports (its node never answered)
        return {"node_id": node, "up": node in up, "known": False}
    return {
        "node_id": node,
        "up": node in up,
        "known": True,
        "role": report["role"],
        "epoch": report["epoch"],
        "hwm": report["hwm"],
        "log_start_offset": report["log_start_offset"],
        "log_end_offset": report["log_end_offset"],
    }


def _group_rows(heard: dict[int, Heard], up: set[int]) -> dict[tuple[str, int], dict[str, int]]:
    """{(topic, partition): {group: committed offset}} of the up nodes' reports."""
    rows: dict[tuple[str, int], dict[str, int]] = {}
    for node in sorted(up):
        for group in heard[node].status.get("groups", []):
            offsets = rows.setdefault((group["topic"], group["partition"]), {})
            committed = group["committed_offset"]
            offsets[group["group"]] = max(committed, offsets.get(group["group"], committed))
    return rows


def _lags(offsets: dict[str, int], row: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "group": group,
            "committed_offset": committed,
            "lag": group_lag(
                committed, log_start_offset=row["log_start_offset"], data_end=row["data_end"]
            ),
        }
        for group, committed in sorted(offsets.items())
    ]


async def fetch_status(
    host: str, port: int, *, tls: ssl.SSLContext | None, token: str | None
) -> object:
    """A node's `GET /status`, parsed JSON; None when it does not answer 200 with JSON
    within FETCH_TIMEOUT_S and STATUS_BYTES_MAX."""
    request = f"GET /status HTTP/1.0\r\nHost: {host}\r\n"
    if token is not None:
        request += f"Authorization: Bearer {token}\r\n"
    try:
        async with asyncio.timeout(FETCH_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=tls, server_hostname=host if tls is not None else None
            )
            try:
                writer.write(f"{request}Connection: close\r\n\r\n".encode())
                data = await reader.read(STATUS_BYTES_MAX + 1)
                while len(data) <= STATUS_BYTES_MAX and (more := await reader.read(1 << 16)):
                    data += more
            finally:
                writer.close()
    except (OSError, TimeoutError):  # ssl.SSLError is an OSError
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    if len(data) > STATUS_BYTES_MAX or head.split(b" ", 2)[1:2] != [b"200"]:
        return None
    try:
        return json.loads(body)
    except ValueError:  # not JSON, or not UTF-8
        return None


class ClusterWatch:
    """Gathers the cluster's status while a page watches, and hands each watching page
    the newest picture (`subscribe`, then `get` from the queue it returns)."""

    def __init__(self, broker: BrokerView) -> None:
        self.broker = broker
        files = broker.config.tls
        # A peer's admin endpoint is HTTPS in a secured cluster: its certificate is
        # signed by the cluster's CA and names its host (`tidelog certs`).
        self.tls = None if files is None else ssl.create_default_context(cafile=str(files.ca))
        self.token = broker.config.admin_token
        self.heard: dict[int, Heard] = {}
        self.queues: set[asyncio.Queue[bytes]] = set()
        self.watched = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def subscribe(self) -> asyncio.Queue[bytes] | None:
        """A queue of pictures (JSON), or None when STREAMS_MAX pages watch already."""
        if len(self.queues) >= STREAMS_MAX:
            return None
        queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=1)
        self.queues.add(queue)
        self.watched.set()
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.gather_forever())
        return queue

    def unsubscribe(self, queue: asyncio.Queue[bytes]) -> None:
        self.queues.discard(queue)
        if not self.queues:
            self.watched.clear()

    def admin_addresses(self) -> dict[int, tuple[str, int] | None]:
        """Each node's admin endpoint: ours as configured, the others' on their peer host
        at the port of their BrokerNotice (None until one came, or when it names none)."""
        broker = self.broker
        addresses: dict[int, tuple[str, int] | None] = {}
        for node in broker.all_nodes:
            port = broker.admin_ports.get(node)
            # Its registration's peer address (a node that joined), else its --peers entry.
            peer = broker.image.membership.peers.get(node) or broker.config.peers.get(node)
            addresses[node] = None if port is None or peer is None else (peer[0], port)
        addresses[broker.node_id] = broker.config.admin_listen
        return addresses

    async def gather_forever(self) -> None:
        while True:
            await self.watched.wait()
            started_ms = monotonic_ms()
            payload = await self.gather()
            for queue in self.queues:
                if queue.full():  # the page has not taken the last one: it is stale
                    queue.get_nowait()
                queue.put_nowait(payload)
            elapsed_s = (monotonic_ms() - started_ms) / 1000
            await asyncio.sleep(max(0.0, GATHER_INTERVAL_S - elapsed_s))

    async def gather(self) -> bytes:
        """Ask every node for its status (ours directly), then the picture as JSON."""
        addresses = self.admin_addresses()
        others = [(n, a) for n, a in addresses.items() if n != self.broker.node_id and a]
        answers = await asyncio.gather(
            *(fetch_status(*address, tls=self.tls, token=self.token) for _, address in others)
        )
        now_ms = monotonic_ms()
        self.heard[self.broker.node_id] = Heard(status(self.broker), now_ms)
        for (node, _), answer in zip(others, answers, strict=True):
            checked = checked_status(answer, node)
            if checked is not None:
                self.heard[node] = Heard(checked, now_ms)
        value = picture(
            node_id=int(self.broker.node_id),
            nodes={
                node: None if address is None else format_address(address)
                for node, address in addresses.items()
            },
            heard=self.heard,
            now_ms=now_ms,
            at_wall_ms=wall_ms(),
        )
        return json.dumps(value, separators=(",", ":")).encode()
