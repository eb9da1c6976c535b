"""ISR mode on one node (docs/isr.md): between its ISR-mode replicas and the controller's
partition records in the metadata log.

Rules of this file:
- A replica learns who leads only from the committed record (rule 4): each record the
  image changes is handed to the replica here, read from the image when the replica takes
  it (so a replay of the metadata log hands only the latest), and every few ticks each
  replica is checked to hold the image's record (a replica started again, on a disk error
  or a repair, holds none). A record older than the epoch the replica is in is the image
  being behind the replica (the metadata log is replayed): not handed, a later one comes.
- A leader's ISR proposal (`Ready.isr_proposals`) is committed as `alter_partition` (rule 3:
  the controller refuses it unless current); one per partition is in flight, the replica
  sends it again after an election timeout when it is lost. Once committed and applied
  here, the controller's answer (kept by the image) goes back to the replica.
- A replica that will not lead the epoch a record names it for (it claimed that epoch
  before it started again: it may have lost part of what it wrote in it) is reported as
  restarted (`replica_restarted`, for that leader epoch only), so the controller takes it
  out of the ISR and elects another leader; so is a replica whose storage set damaged
  records aside (rule 9).
- A node that starts registers once (`register_broker`), naming this process (a random
  incarnation id, so a registration committed twice counts once) and saying whether it
  stopped cleanly (`CLEAN_SHUTDOWN_FILE`, written once every log is closed, removed at
  start): after an unclean stop it leaves every ISR and ELR, after a clean one only its
  leaderships; a node's first registration ever changes nothing (`isr.registered`).
- Until its registration is applied here, no ISR-mode replica of this node takes a
  record: it neither leads nor follows, so a node registering for the first time holds
  nothing anyone counted, and a node that starts again acts only on the records its
  registration changed (a wiped disk is never elected on what it held before).
- A node that stops (SIGTERM) asks the controller to move its ISR-mode leaderships and
  take it out of every ISR first (`shutdown_broker`, Kafka's controlled shutdown), for at
  most SHUTDOWN_WAIT_S, and only while some other node is not stopping too (in `cluster
  down` nobody is left to take over).
- Preferred-leader elections (ElectLeaders, the automatic rebalance) are the controller's
  `elect_preferred`: the preferred replica leads when it is in the ISR and live.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from tidelog.address import format_address
from tidelog.core.isr import IsrProposal, PartitionRecord
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.peer import PartitionKey
from tidelog.server.partition import PartitionRunner
from tidelog.server.partition_inputs import TakeAnswer, TakeRecord
from tidelog.server.truth import commit_once
from tidelog.server.view import BrokerView

log = logging.getLogger("tidelog.isr")

CLEAN_SHUTDOWN_FILE: Final = ".clean_shutdown"
SHUTDOWN_WAIT_S: Final = 10.0
SHUTDOWN_POLL_S: Final = 0.05


def clean_start(data_dir: Path) -> bool:
    """Whether this node stopped cleanly last time; the mark is removed (a crash from now
    on is an unclean stop)."""
    mark = data_dir / CLEAN_SHUTDOWN_FILE
    clean = mark.exists()
    mark.unlink(missing_ok=True)
    return clean


def mark_clean_shutdown(data_dir: Path) -> None:
    """Every log is closed (synced): the next start is a clean one."""
    (data_dir / CLEAN_SHUTDOWN_FILE).touch()


class IsrControl:
    """This node's ISR-mode replicas and the controller's records (see the rules)."""

    def __init__(self, broker: BrokerView, *, clean: bool) -> None:
        self.broker = broker
        self.clean = clean
        self.incarnation = uuid.uuid4().hex
        self.registered = False
        self.in_flight: set[object] = set()

    def record_of(self, key: PartitionKey) -> PartitionRecord | None:
        return self.broker.image.records.get((key.topic, key.partition))

    # ---------------------------------------------------------------- records ----------
    def hand_record(self, key: PartitionKey) -> None:
        """Hand the partition's replica here the image's record (as of when it takes it),
        once this node's registration is applied."""
        runner = self.broker.hosting(key)
        if self.registered and runner is not None and self.record_of(key) is not None:
            # The replica declining the leadership the record names it for comes back to
            # `report_restarted` (the runner's `on_declined`).
            runner.submit(TakeRecord(self.broker.image.records))

    def refresh(self) -> None:
        """Every ISR-mode replica here holds the image's record (see the rules)."""
        if not self.registered:
            return
        for runner in self.broker.hosted():
            if not runner.isr_mode:
                continue  # quorum mode: no record to hold
            key = runner.key
            record = self.record_of(key)
            if record is None or runner.repairing:
                continue
            if runner.isr_record() != record:
                self.hand_record(key)
            elif runner.declines_leadership():
                self.report_restarted(key, record)

    def on_set_aside(self, runner: PartitionRunner) -> None:
        """The replica's storage set damaged records aside (rule 9): the controller is told."""
        self.report_restarted(runner.key)

    def report_restarted(self, key: PartitionKey, record: PartitionRecord | None = None) -> None:
        """Tell the controller this replica started again (rule 9), for the leader epoch
        of `record` (the image's when None)."""
        record = record or self.record_of(key)
        if record is None:
            return
        command = {
            "type": "replica_restarted",
            "topic": key.topic,
            "partition": key.partition,
            "node": int(self.broker.node_id),
            "leader_epoch": int(record.leader_epoch),
        }
        self.commit(("restarted", key, record.leader_epoch), command)

    # ---------------------------------------------------------------- proposals --------
    def propose(self, runner: PartitionRunner, proposals: Sequence[IsrProposal]) -> None:
        """Commit a leader's latest proposal as `alter_partition`, then answer it."""
        key, proposal = runner.key, proposals[-1]
        tag = ("alter", key)
        if tag in self.in_flight:
            return  # the replica sends it again after an election timeout if lost
        command = {
            "type": "alter_partition",
            "topic": key.topic,
            "partition": key.partition,
            "leader": int(proposal.leader),
            "leader_epoch": int(proposal.leader_epoch),
            "partition_epoch": proposal.partition_epoch,
            "isr": [int(node) for node in proposal.isr],
        }

        def answer() -> None:
            held = self.broker.image.answers.get((key.topic, key.partition))
            if held is not None and held[0] == proposal and self.broker.hosting(key) is runner:
                runner.submit(TakeAnswer(proposal, held[1]))

        self.commit(tag, command, answer)

    # ---------------------------------------------------------------- the node ---------
    def step(self) -> None:
        """Every few ticks: register once, and check every replica holds its record."""
        if not self.registered:
            command = {
                "type": "register_broker",
                "node": int(self.broker.node_id),
                "clean": self.clean,
                "incarnation": self.incarnation,
                "directory": int(self.broker.directory_id),
                # where the others dial it: a node that joins is learned so (members.py)
                "peer": format_address(self.broker.config.peers[self.broker.node_id]),
            }
            self.commit("register", command, self._on_registered)
        self.refresh()

    def _on_registered(self) -> None:
        self.registered = True
        self.refresh()  # the replicas take their records now, not a step later

    def leads_any(self) -> bool:
        return any(runner.isr_mode for runner in self.broker.hosted())

    async def shut_down(self) -> None:
        """Controlled shutdown of this node's ISR-mode replicas (see the rules)."""
        broker = self.broker
        others = set(broker.all_nodes) - {broker.node_id}
        if not self.leads_any() or others <= broker.stopping_nodes:
            return
        command = {"type": "shutdown_broker", "node": int(broker.node_id)}
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + SHUTDOWN_WAIT_S
        outcome = "no answer in time"
        while time.monotonic() < deadline:
            commit = loop.create_task(broker.commit_metadata(command))
            while not commit.done() and time.monotonic() < deadline:
                if others <= broker.stopping_nodes:  # the whole cluster stops: nobody takes over
                    commit.cancel()
                    return
                await asyncio.wait({commit}, timeout=SHUTDOWN_POLL_S)
            if not commit.done():
                commit.cancel()
                break
            code, message = commit.result()
            if code is ErrorCode.NONE:
                return
            outcome = f"{code.name} {message}"  # no controller for a moment: ask again
            await asyncio.sleep(SHUTDOWN_POLL_S)
        log.warning("controlled shutdown of the ISR-mode replicas: %s", outcome)

    def elect_preferred(self, key: PartitionKey) -> None:
        command = {"type": "elect_preferred", "topic": key.topic, "partition": key.partition}
        self.commit(("preferred", key), command)

    def commit(
        self, tag: object, command: dict[str, Any], then: Callable[[], None] | None = None
    ) -> None:
        commit_once(self.broker, self.in_flight, tag, command, then)
