"""The node's Prometheus metrics, served as text at `GET /metrics` on the admin address.

Rules of this file:
- Two kinds. What a node counts as it works (requests, fsyncs, produce-to-commit times,
  elections, truncations, resets, leadership transfers) lives in counters and histograms of
  `prometheus-client`, each updated where it happens through `NodeMetrics`. What a node *is*
  (watermarks, roles, ISR sizes, group lag, connections) is read at scrape time from the
  same value `GET /status` answers (`server/snapshot.py`'s `StateCollector`): nothing on
  the write path keeps a gauge up to date.
- Names follow Prometheus' conventions: `tidelog_` and the unit (`_seconds`, `_bytes`),
  `_total` for counters. The four cluster health gauges carry the names Kafka's metrics
  have under the Prometheus JMX exporter, so a Kafka dashboard's alerts read them unchanged:
  UnderReplicatedPartitions, UnderMinIsrPartitionCount (counted by a partition's leader),
  OfflinePartitionsCount and ActiveControllerCount (by the metadata log's leader).
- Metrics off (`metrics = false`): `NULL_METRICS`, whose methods do nothing, and `/metrics`
  answers 404. The cost with metrics on is measured by `bench/metrics_cost.py`.
- A node keeps its own registry: brokers in one process (tests) never share a series.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from kafka.protocol.data_container import DataContainer
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.registry import Collector

from tidelog.protocol.kafka import RawResponse
from tidelog.protocol.kafka_errors import ErrorCode

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds: a request (a Fetch long-polls up to its max wait), an fsync, a commit.
REQUEST_BUCKETS_S = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
FSYNC_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip
COMMIT_BUCKETS_S = REQUEST_BUCKETS_S
FSYNC_BUCKETS_BYTES = tuple(float(4**k * 512) for k in range(11))  # 512 B .. 512 MiB
ERROR_CLOSED = "CONNECTION_CLOSED"  # a request the broker answered by closing the connection

# No `_created` series beside each counter and histogram: a dashboard never reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]


class NodeMetrics:
    """The counters and histograms of one node, and the scrape of the rest."""

    enabled = True

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        registry = self.registry
        self.requests = Counter(
            "tidelog_requests", "Kafka requests handled, by API.", ["api"], registry=registry
        )
        self.request_errors = Counter(
            "tidelog_request_errors",
            "Error codes answered in Kafka responses (one per partition or resource), by "
            "API and error.",
            ["api", "error"],
            registry=registry,
        )
        self.request_seconds = Histogram(
            "tidelog_request_duration_seconds",
            "From a Kafka request read to its response written, by API.",
            ["api"],
            buckets=REQUEST_BUCKETS_S,
            registry=registry,
        )
        self.commit_seconds = Histogram(
            "tidelog_produce_commit_seconds",
            "From an acks=all batch handed to its partition to the HWM passing it.",
            buckets=COMMIT_BUCKETS_S,
            registry=registry,
        )
        self.fsync_seconds = Histogram(
            "tidelog_fsync_duration_seconds",
            "One fsync of a partition's log (its data, index and checkpoints).",
            buckets=FSYNC_BUCKETS_S,
            registry=registry,
        )
        self.fsync_bytes = Histogram(
            "tidelog_fsync_bytes",
            "Record bytes an fsync made durable.",
            buckets=FSYNC_BUCKETS_BYTES,
            registry=registry,
        )
        self.elections = Counter(
            "tidelog_leader_elections",
            "Times this node's replica became a partition's leader.",
            ["topic", "partition"],
            registry=registry,
        )
        self.transfers = Counter(
            "tidelog_leadership_transfers",
            "Leadership handovers this node started (controlled shutdown, rebalance, asked).",
            registry=registry,
        )
        self.truncations = Counter(
            "tidelog_log_truncations",
            "Times a replica cut its divergent suffix to match its leader.",
            ["topic", "partition"],
            registry=registry,
        )
        self.resets = Counter(
            "tidelog_log_resets",
            "Times a replica dropped its whole log to start at its leader's log start.",
            ["topic", "partition"],
            registry=registry,
        )
        self._request_children: dict[str, tuple[Any, Any]] = {}

    def watch(self, collector: Collector) -> None:
        """Add the gauges `collector` reads from the node at each scrape."""
        self.registry.register(collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # ------------------------------------------------------------- updates -------------
    def request(self, api: str, seconds: float, errors: Iterable[str] = ()) -> None:
        """One request of `api` (ApiKey's name, PRODUCE), labelled as Kafka's request
        metrics name it (Produce)."""
        children = self._request_children.get(api)
        if children is None:
            label = api_label(api)
            children = (self.requests.labels(label), self.request_seconds.labels(label))
            self._request_children[api] = children
        children[0].inc()
        children[1].observe(seconds)
        for error in errors:
            self.request_errors.labels(api_label(api), error).inc()

    def committed(self, seconds: float) -> None:
        self.commit_seconds.observe(seconds)

    def fsynced(self, seconds: float, written_bytes: int) -> None:
        self.fsync_seconds.observe(seconds)
        self.fsync_bytes.observe(written_bytes)

    def elected(self, topic: str, partition: int) -> None:
        self.elections.labels(topic, str(partition)).inc()

    def truncated(self, topic: str, partition: int) -> None:
        self.truncations.labels(topic, str(partition)).inc()

    def reset(self, topic: str, partition: int) -> None:
        self.resets.labels(topic, str(partition)).inc()

    def transferred(self) -> None:
        self.transfers.inc()


class NullMetrics(NodeMetrics):
    """Metrics off: every update does nothing, and there is nothing to render."""

    enabled = False

    def __init__(self) -> None:
        pass

    def watch(self, collector: Collector) -> None:
        pass

    def render(self) -> bytes:
        return b""

    def request(self, api: str, seconds: float, errors: Iterable[str] = ()) -> None:
        pass

    def committed(self, seconds: float) -> None:
        pass

    def fsynced(self, seconds: float, written_bytes: int) -> None:
        pass

    def elected(self, topic: str, partition: int) -> None:
        pass

    def truncated(self, topic: str, partition: int) -> None:
        pass

    def reset(self, topic: str, partition: int) -> None:
        pass

    def transferred(self) -> None:
        pass


NULL_METRICS = NullMetrics()


def timed(clock: Callable[[], float] = time.perf_counter) -> Callable[[], float]:
    """A stopwatch: call the result for the seconds since."""
    started = clock()
    return lambda: clock() - started


def api_label(api: str) -> str:
    """PRODUCE -> Produce, API_VERSIONS -> ApiVersions: Kafka's request names."""
    return "".join(word.capitalize() for word in api.split("_"))


def error_names(body: object) -> list[str]:
    """The error codes other than NONE a response body answers, by Kafka's names: those
    its encoder noted (Produce, Fetch), or every `error_code` field of a kafka-python body."""
    if isinstance(body, RawResponse):
        return [_error_name(code) for code in body.error_codes]
    names: list[str] = []
    _walk_errors(body, names)
    return names


def _walk_errors(value: object, names: list[str]) -> None:
    if isinstance(value, DataContainer):
        struct = value._struct
        assert struct is not None  # every response class of kafka-python has one
        for field in struct._fields:
            item = getattr(value, field.name, None)
            if field.name == "error_code":
                if isinstance(item, int) and item != 0:
                    names.append(_error_name(item))
            elif isinstance(item, list):
                for element in item:
                    _walk_errors(element, names)
            elif isinstance(item, DataContainer):
                _walk_errors(item, names)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
