"""Cluster truth: what every node answers the same, through the metadata log.

Rules of this file:
- Each partition's leader reports its state (itself, its epoch, the in-sync replicas) to
  the metadata log whenever it differs from what the log holds, as Kafka's leaders send
  AlterPartition; one report per partition is in flight at a time, and a leader that sees
  a later epoch in the log reports nothing. Metadata answers take the in-sync replicas from
  the log, so every broker names the same ones.
- In quorum mode the report also names the leader's voter set, once it is committed, and
  the assignment version its replica holds (server/copies.py's `applied`): what completes
  a reassignment and lets retiring copies go (server/reassignment.py). While its voter set
  is not committed, the leader reports the ones held, so no report names an uncommitted
  set. The in-sync set names only the partition's copies the image knows.
- A replica joins the reported in-sync set as soon as its leader counts it in sync, and
  leaves it only once it has been out for `replica_lag_time_max_ms` (Kafka's
  replica.lag.time.max.ms), across leader changes too: a follower slow for a moment, or a
  new leader's first heartbeats, do not make the set flap.
- The controller (the metadata log's leader) fences a broker it has not heard from for
  `broker_session_timeout_ms` (Kafka's broker.session.timeout.ms) and unfences it once it
  is heard again: every message from a peer is a heartbeat (each node sends a BrokerNotice
  every few ticks). A node that has just become controller gives every broker a whole
  session first. A fenced broker leaves Metadata's broker list until it is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from tidelog.core.replica import ReplicaStatus, Role
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.peer import PartitionKey
from tidelog.server.metadata import METADATA_TOPIC, PartitionState
from tidelog.server.view import BrokerView
from tidelog.types import NodeId

log = logging.getLogger("tidelog.truth")

HEARD_RECENTLY_S: Final = 2.0  # a fenced broker heard within this is back


class ClusterTruth:
    """One node's part in the cluster truth (see the rules): its partitions' reports and,
    while it is the controller, the brokers' sessions."""

    def __init__(self, broker: BrokerView, versions: Mapping[PartitionKey, int]) -> None:
        self.broker = broker
        self.versions = versions  # the assignment version each replica here took
        self.last_heard: dict[NodeId, float] = {}
        self.controller_since: float | None = None
        self.out_since: dict[tuple[PartitionKey, int], float] = {}
        self.in_flight: set[object] = set()  # partition keys, ("fence"/"unfence", node)
        self.reporting: set[PartitionKey] = set()  # reports in flight: looked at again

    def heard(self, node: NodeId) -> None:
        self.last_heard[node] = time.monotonic()

    def step(self) -> None:
        """Report what changed and check the sessions (every few ticks)."""
        now = time.monotonic()
        self.report_partitions(now)
        self.check_sessions(now)

    # ---------------------------------------------------------------- partitions -------
    def reported_isr(
        self, key: PartitionKey, status: ReplicaStatus, held: PartitionState | None, now: float
    ) -> tuple[int, ...]:
        in_sync = {int(node) for node in status.in_sync_replicas}
        isr = set(in_sync)
        lag_s = self.broker.config.replica_lag_time_max_ms / 1000
        for node in held.isr if held is not None else ():
            if node in in_sync or node not in status.replicas:
                self.out_since.pop((key, node), None)
                continue
            since = self.out_since.setdefault((key, node), now)
            if now - since < lag_s:
                isr.add(node)
        for node in in_sync:
            self.out_since.pop((key, node), None)
        return tuple(sorted(isr))

    def report_partitions(self, now: float) -> None:
        broker = self.broker
        # The partitions awake, those that fell asleep (server/settled.py), and those whose
        # report was in flight at the last pass: it may not have been committed.
        again = (broker.hosting(key) for key in self.reporting)
        self.reporting = set()
        for runner in [*broker.noticed, *(r for r in again if r is not None)]:
            key = runner.key
            if key.topic == METADATA_TOPIC:
                continue
            if key in self.in_flight:
                self.reporting.add(key)
                continue
            if (key.topic, key.partition) in broker.image.records:
                continue  # ISR mode: the controller's record is the truth

            status = runner.status()
            if status.role is not Role.LEADER:
                continue
            held = broker.image.partitions.get((key.topic, key.partition))
            if held is not None and held.epoch > status.epoch:
                continue  # deposed: the log knows a later leader
            copies = set(broker.image.members((key.topic, key.partition)))
            isr = tuple(n for n in self.reported_isr(key, status, held, now) if n in copies)
            voters, version = held_voters(held)
            if status.voters_committed:
                voters = tuple(sorted({int(voter.node) for voter in status.voters}))
                version = self.versions.get(key)
            wanted = PartitionState(int(broker.node_id), int(status.epoch), isr, voters, version)
            if wanted != held:
                command = {
                    "type": "partition_state",
                    "topic": key.topic,
                    "partition": key.partition,
                    "leader": wanted.leader,
                    "epoch": wanted.epoch,
                    "isr": list(wanted.isr),
                    "voters": None if voters is None else list(voters),
                    "version": version,
                }
                self.commit(key, command)
                self.reporting.add(key)

    # ---------------------------------------------------------------- sessions ---------
    def check_sessions(self, now: float) -> None:
        broker = self.broker
        if broker.metadata.status().role is not Role.LEADER:
            self.controller_since = None
            return
        if self.controller_since is None:
            self.controller_since = now
        session_s = broker.config.broker_session_timeout_ms / 1000
        fenced = broker.image.fenced
        for node in broker.all_nodes:
            if node == broker.node_id:
                if node in fenced:  # the controller is alive by definition
                    self.commit(("unfence", node), {"type": "unfence_broker", "node": node})
                continue
            heard = max(self.last_heard.get(node, 0.0), self.controller_since)
            if node not in fenced and now - heard > session_s:
                log.warning("fencing node %d: not heard from for %.1f s", node, now - heard)
                self.commit(("fence", node), {"type": "fence_broker", "node": node})
            elif (
                node in fenced
                and now - heard < HEARD_RECENTLY_S
                and node not in broker.stopping_nodes  # fenced by its controlled shutdown
            ):
                log.info("unfencing node %d: heard from again", node)
                self.commit(("unfence", node), {"type": "unfence_broker", "node": node})

    # ---------------------------------------------------------------- commits ----------
    def commit(self, tag: object, command: dict[str, Any]) -> None:
        commit_once(self.broker, self.in_flight, tag, command)


def held_voters(held: PartitionState | None) -> tuple[tuple[int, ...] | None, int | None]:
    """The voter set and assignment version the log holds for a partition (None: none)."""
    return (None, None) if held is None else (held.voters, held.version)


def commit_once(
    broker: BrokerView,
    in_flight: set[object],
    tag: object,
    command: dict[str, Any],
    then: Callable[[], None] | None = None,
) -> None:
    """Commit `command` in the background unless one of the same `tag` is in flight; call
    `then()` once it is applied here. A command not committed is asked again by its
    caller's next step."""
    if tag in in_flight:
        return
    in_flight.add(tag)

    async def run() -> None:
        try:
            code, message = await broker.commit_metadata(command)
            if code is not ErrorCode.NONE:
                log.debug("%s not committed (will retry): %s %s", command, code, message)
            elif then is not None:
                then()
        finally:
            in_flight.discard(tag)

    asyncio.get_running_loop().create_task(run())
