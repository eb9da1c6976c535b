"""What every command family of the scenario language (testing/scenario.py) shares: the
state of one script, how a transcript names messages, records and batches, and the one
question a scenario asks of a replica's mode (`isr_mode`).

Rules of this file: descriptions are the transcripts' words, so a change here changes
every transcript under tests/scenarios/ (rewrite them only for a change of behaviour).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafka.record.default_records import DefaultRecordBatch

from tidelog.core import isr
from tidelog.core.isr import NO_LEADER, IsrProposal, PartitionRecord
from tidelog.core.liveness import LivenessMessage, NodePing, NodePong
from tidelog.core.messages import (
    AppendRequest,
    AppendResponse,
    Message,
    TimeoutNow,
    VoteRequest,
    WakeUp,
)
from tidelog.core.mode.isr import IsrMode
from tidelog.core.replica import Replica
from tidelog.errors import TidelogError
from tidelog.records import read_header
from tidelog.testing.checker import Checker
from tidelog.testing.cluster import Cluster
from tidelog.testing.trace import describe_batches
from tidelog.types import Epoch, NodeId


class ScriptError(Exception):
    """A scenario script is malformed."""


def nodes_of(text: str) -> list[NodeId]:
    return [NodeId(int(part)) for part in text.split(",") if part]


def isr_mode(replica: Replica | None) -> IsrMode | None:
    """`replica`'s ISR mode (the controller's record, `isr_leader`, `hwm_checked()`), or
    None (quorum mode, or down): the only place the scenarios ask which mode a replica
    runs in."""
    return None if replica is None else replica.isr


# ------------------------------------------------------------------ descriptions --------
def describe_message(msg: Message | LivenessMessage) -> str:
    head = f"{msg.sender}->{msg.recipient}"
    if isinstance(msg, NodePing):
        return f"{head} Ping incarnation={msg.incarnation} sent={msg.sent_ms}"
    if isinstance(msg, NodePong):
        return f"{head} Pong session={msg.session:#x} sent={msg.ping_sent_ms}"
    if isinstance(msg, AppendRequest):
        body = describe_batches(msg.batches) if msg.batches else "heartbeat"
        body = "quiesce" if msg.quiesce else body
        body = f"reset producers={len(msg.producers)}" if msg.reset else body
        prev = f"prev={msg.prev_offset}/e{msg.prev_epoch}"
        return f"{head} Append e{msg.epoch} {prev} hwm={msg.hwm} {body}"
    if isinstance(msg, AppendResponse):
        repairing = " repairing" if msg.repairing else ""
        if msg.success:
            return f"{head} AppendOK e{msg.epoch} match={msg.match_offset}{repairing}"
        return (
            f"{head} AppendReject e{msg.epoch} prev={msg.prev_offset} "
            f"hint={msg.match_offset}/e{msg.hint_epoch}{repairing}"
        )
    if isinstance(msg, VoteRequest):
        kind = "PreVote" if msg.pre_vote else "Vote"
        transfer = " transfer" if msg.transfer else ""
        return f"{head} {kind} e{msg.epoch} last=e{msg.last_epoch}/{msg.log_end_offset}{transfer}"
    if isinstance(msg, TimeoutNow):
        return f"{head} TimeoutNow e{msg.epoch}"
    if isinstance(msg, WakeUp):
        return f"{head} WakeUp e{msg.epoch}"
    kind = "PreVote" if msg.pre_vote else "Vote"
    verdict = "Grant" if msg.granted else "Reject"
    return f"{head} {kind}{verdict} e{msg.epoch}"


def describe_error(error: TidelogError) -> str:
    return f"{type(error).__name__}: {error}"


def describe_nodes(nodes: tuple[NodeId, ...]) -> str:
    return "{" + ",".join(str(node) for node in nodes) + "}"


def describe_record(record: PartitionRecord) -> str:
    leader = "-" if record.leader == NO_LEADER else str(record.leader)
    unclean = "" if record.unclean_epoch is None else f" unclean=e{record.unclean_epoch}"
    restarted = [f"{n}:{record.restarts_of(n)}" for n in record.replicas if record.restarts_of(n)]
    restarts = f" restarts={{{','.join(restarted)}}}" if restarted else ""
    return (
        f"record pe{record.partition_epoch}: leader={leader} e{record.leader_epoch} "
        f"isr={describe_nodes(record.isr)} elr={describe_nodes(record.elr)}{unclean}{restarts}"
    )


def describe_proposal(proposal: IsrProposal) -> str:
    return (
        f"isr={describe_nodes(proposal.isr)} "
        f"(e{proposal.leader_epoch} pe{proposal.partition_epoch})"
    )


def describe_record_batch(batch: bytes) -> str:
    header = read_header(batch)
    head = f"{header.base_offset}..{header.last_offset} e{header.epoch}"
    if header.is_control:
        return f"{head} control"
    values = [record.value.decode() for record in DefaultRecordBatch(batch)]
    return f"{head} " + " ".join(f'"{value}"' for value in values)


# ------------------------------------------------------------------ the state ----------
@dataclass
class ScenarioState:
    """The state of one script: the cluster, the checker and what clients were told."""

    cluster: Cluster | None = None
    checker: Checker = field(default_factory=Checker)
    output: list[str] = field(default_factory=list)
    produced: dict[int, tuple[str, bytes, int]] = field(default_factory=dict)
    next_request: int = 0
    # ISR mode: the controller's record, its min.insync.replicas, proposals in flight.
    record: PartitionRecord | None = None
    min_insync: int = 1
    proposals: list[tuple[NodeId, IsrProposal]] = field(default_factory=list)
    history: list[PartitionRecord] = field(default_factory=list)  # every record committed
    late_answers: list[tuple[NodeId, IsrProposal, isr.AlterResult]] = field(default_factory=list)
    # After an unclean election: its leader epoch, and the replicas the checker leaves
    # alone until their HWM is checked against the new leader's log (they may give up
    # committed records, which the checker would call lost).
    unclean_epoch: Epoch | None = None
    unchecked: set[NodeId] = field(default_factory=set)

    @property
    def c(self) -> Cluster:
        if self.cluster is None:
            raise ScriptError("no cluster: start the script with `cluster replicas=N`")
        return self.cluster

    def say(self, line: str) -> None:
        self.output.append(line)
