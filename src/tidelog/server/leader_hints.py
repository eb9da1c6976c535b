"""What an answer says of a partition's leader and of the topic a request names: the
latest leader this node knows (its own replica's, or a later one the metadata log holds),
whether clients can reach it, and its address (Kafka's KIP-951, for Produce and Fetch), and
the topic named by name or by id (KIP-516).

Rules of this file:
- A leader is named only when clients can reach it (listed in Metadata: its address known
  here, not fenced); this node is named only while its own replica leads.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from tidelog.protocol.kafka import LeaderAndEpoch, NodeEndpoint
from tidelog.protocol.peer import PartitionKey
from tidelog.server.answers import host_of
from tidelog.server.view import BrokerView
from tidelog.types import NodeId


def name_of(broker: BrokerView, key: str | uuid.UUID) -> str | None:
    """The topic a request names: by name, or (Fetch v13+, Produce v13) by id; None when
    no topic has that id (KIP-516: UNKNOWN_TOPIC_ID)."""
    return key if isinstance(key, str) else broker.image.topic_named(key)


def latest_leader(broker: BrokerView, topic: str, partition: int) -> LeaderAndEpoch:
    """The partition's leader (or -1) and epoch as this node knows them: its replica's, or
    a later epoch the metadata log reported. This node is named only while its replica
    leads: a report naming it is out of date once it stepped down (cut away from the
    others, its last report is still the latest it holds) or before it has taken over."""
    own, epoch = broker.leader_of(PartitionKey(topic, partition))
    leader = own
    reported = broker.image.partitions.get((topic, partition))
    if reported is not None and reported.epoch > epoch:
        leader, epoch = reported.leader, reported.epoch
    record = broker.image.records.get((topic, partition))  # ISR mode: the controller's
    if record is not None and record.leader_epoch > epoch:
        leader, epoch = int(record.leader), int(record.leader_epoch)
    if leader == broker.node_id and own != leader:
        leader = -1
    return LeaderAndEpoch(leader, epoch)


def reachable(broker: BrokerView, node: int) -> bool:
    """Whether clients can reach `node`: listed in Metadata (its address known here, not
    fenced)."""
    return node in broker.kafka_ports and node not in broker.image.fenced


def known_leader(broker: BrokerView, topic: str, partition: int) -> LeaderAndEpoch | None:
    """The partition's latest leader and epoch when clients can reach that leader. Kafka's
    getCurrentLeader."""
    latest = latest_leader(broker, topic, partition)
    return latest if reachable(broker, latest.leader_id) else None


def node_endpoints(
    broker: BrokerView, leaders: Iterable[LeaderAndEpoch | None]
) -> list[NodeEndpoint]:
    """The addresses of `leaders` on this request's listener, each node once (KIP-951's
    NodeEndpoints, by node id)."""
    nodes = sorted({leader.leader_id for leader in leaders if leader is not None})
    ports = broker.kafka_ports
    return [NodeEndpoint(node, host_of(broker, node), ports[NodeId(node)]) for node in nodes]
