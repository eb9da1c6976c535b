"""What the request handlers see of a node: a narrow protocol, not the Broker itself.

The handlers (`handlers`, `group_api`, `admin`, `answers`, `kafka_server`) read and ask
through `BrokerView` only; `tidelog.server.broker.Broker` is the one implementation, wired
by `tidelog.server.app`. So a handler's needs are written down in one place, and a test
may hand it any object that has them.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from typing import Any, Protocol

from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.peer import PartitionKey
from tidelog.server.acl import Authorizer
from tidelog.server.budget import RequestBytes
from tidelog.server.config import BrokerConfig
from tidelog.server.groups import GroupCoordinator
from tidelog.server.metadata import MetadataImage
from tidelog.server.metrics import NodeMetrics
from tidelog.server.partition import PartitionRunner
from tidelog.server.quorum import QuorumReport
from tidelog.types import DirectoryId, NodeId

client_listener: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "client_listener", default=None
)
"""The security protocol of the listener a connection came in on (PLAINTEXT, SSL, ...),
set by the listener for the tasks of that connection: Metadata and FindCoordinator name
the brokers' ports of that same listener, as Kafka answers on each listener."""


class BrokerView(Protocol):
    """A node as the Kafka and admin handlers use it."""

    config: BrokerConfig
    node_id: NodeId
    directory_id: DirectoryId  # the data directory's (server/data_dir.py)
    image: MetadataImage  # the topics as the applied metadata log says
    authorizer: Authorizer  # with the ACLs of `image`
    metadata: PartitionRunner  # the metadata log's partition
    coordinators: dict[int, GroupCoordinator]  # by __consumer_offsets partition
    kafka_connections: int
    stopping_nodes: set[NodeId]  # nodes shutting down (this one too): no leadership for them
    stopping: asyncio.Event  # set when this node stops (SIGTERM)
    admin_ports: dict[NodeId, int]  # the other nodes' admin ports on their peer hosts
    request_bytes: RequestBytes
    rng: random.Random
    metrics: NodeMetrics  # counters and histograms of /metrics (NULL_METRICS when off)
    # This NOTICE round's partitions: those awake and those that fell asleep since the
    # last round, or all of them (server/settled.py).
    noticed: list[PartitionRunner]

    @property
    def all_nodes(self) -> tuple[NodeId, ...]:
        """The cluster's brokers (registered, or in --peers; none unregistered)."""
        ...

    @property
    def kafka_ports(self) -> dict[NodeId, int]:
        """Each broker's port of the listener this request came in on (`client_listener`)."""
        ...

    @property
    def kafka_hosts(self) -> dict[NodeId, str]:
        """Each broker's advertised host of the listener this request came in on."""
        ...

    def runner(self, topic: str, partition: int) -> PartitionRunner | None:
        """The partition's runner on this node, for a client's request: when it hosts it
        and its log is open; never the metadata log's (its commands hold the SCRAM
        credentials and the ACLs: no client reads or writes it, as in Kafka)."""
        ...

    def dead_nodes(self) -> list[int]:
        """The brokers node liveness declared dead and not heard from since (sorted)."""
        ...

    def hosted(self) -> list[PartitionRunner]:
        """The partitions this node hosts (the metadata log's too), in the order it came
        to host them: a copy, for any request or task to read through their typed door."""
        ...

    def hosting(self, key: PartitionKey) -> PartitionRunner | None:
        """The partition's runner here (the metadata log's too), when this node hosts it."""
        ...

    def controller_id(self) -> int:
        """The metadata log's leader, or -1."""
        ...

    def leader_of(self, key: PartitionKey) -> tuple[int, int]:
        """(leader id or -1, leader epoch or -1) as this node knows it."""
        ...

    def elect_preferred(self, key: PartitionKey, leader: NodeId, epoch: int) -> None:
        """Ask `leader`, the partition's leader in `epoch` (this node or another), to hand
        its leadership to the partition's preferred replica."""
        ...

    async def quorum_report(self) -> QuorumReport | None:
        """The metadata log's quorum as its leader reports it: made here when this node
        leads it, else asked of the leader; None when no leader answers in time."""
        ...

    async def commit_metadata(self, command: dict[str, Any]) -> tuple[ErrorCode, str | None]:
        """Commit one command to the metadata log, at the controller (forwarded there by a
        node that is not); its error code and message once applied here."""
        ...
