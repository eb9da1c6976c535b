"""Scripted scenarios: a small command language over the simulation cluster.

The format follows etcd-io/raft's datadriven testdata: a command line, `----`, then the
exact output expected, then a blank line. `run_file(path, rewrite=True)` writes the
actual output back instead of comparing (pytest --rewrite).

Commands (nodes are numbers; lists are comma-separated):
    cluster replicas=N [min-insync=N] [pre-vote=false] [check-quorum=false] [append-bytes-max=N]
    campaign N            start an election on N, as if its timer fired
    tick N[,M] [count=K] [deliver=..]  K ticks of the nodes' clocks; messages stay in
                          flight, or are delivered quietly among `deliver` after each tick
    deliver [from=..] [to=..] [type=append|append-resp|vote|vote-resp] [count=K] [skip=S]
                          deliver matching messages in flight, oldest first (after the
                          S oldest, which stay in flight: reordering)
    drop [from=..] [to=..] [type=..]     lose matching messages in flight
    stabilize [nodes=..]  deliver everything (among `nodes`) until nothing is in flight
    produce N acks=all|1|0 value=V [records=K] [producer=ID,EPOCH,SEQUENCE]   (idempotent)
    hold-persist N / persist N   hold N's syncs / finish the one N is waiting on
    crash N / restart N / isolate N / partition 1,2 3 / heal
    corrupt N offset=O    the batch holding O rots on N's disk (found when N next reads it)
    wipe N                the crashed N's disk is replaced by an empty one
    status [N]            role, epoch, leader, HWM, log end, durable end, epoch history,
                          and the repair floor of a replica under repair
    progress N            the leader N's view of each follower (match, next, mode)
    log N                 the batches in N's log
    fetch N offset=O [epoch=E] [bytes=B]   a consumer fetch at N
    latest N              the "latest" offset N answers (ListOffsets)
    delete-records N offset=O   DeleteRecords at the leader N (its low watermark)
    check [final=false]   every invariant of correctness.md over the cluster (`final=false`:
                          only those of every step, not the convergence of the end)

ISR mode (docs/isr.md): `cluster ... mode=isr [lag-ms=N]` makes every replica an
`IsrReplica` (min-insync defaults to 1, Kafka's); the script plays the controller, whose
record (`core.isr.PartitionRecord`) it changes with `core.isr`'s transitions and hands to
the replicas. A leader's ISR proposal is printed as it leaves a Ready, and waits in flight.
    record leader=N [isr=..] [elr=..] [epoch=E] [to=..]   the controller writes a record
                          (epoch: the leader epoch, by default the last one, + 1 when the
                          leader changes) and hands it to `to` (default: every live node)
    publish [to=..]       hand the controller's current record to nodes again
    fence N / restarted N / elect live=.. [unclean=true]   [to=..]   core.isr's transitions
    register N [first=true] [clean=true] [to=..]   N registers (`isr.registered`): its first
                          registration ever, or a start after a clean or an unclean stop
    alter [from=N] [to=..] [lose=true] [answer=now|late|never] [copy=true] [stale=K]
                          the controller takes the oldest proposal in flight (alter_isr),
                          answers its leader and hands the record to `to` (default: every
                          other live node); `lose` drops it unanswered. A controller failover
                          (isr-05): `answer=never`, the controller fails after committing,
                          before answering; `answer=late`, the answer waits for `answer`;
                          `copy=true`, a copy of the proposal stays in flight (delivered
                          twice); `stale=K`, it reaches a controller that is no longer active,
                          K records behind: judged by that record, it commits nothing
    answer                deliver the oldest answer that `alter answer=late` held back
    isr N                 the ISR leader N's view: committed ISR, pending proposal, followers
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch

from tidelog.core import isr
from tidelog.core.isr import NO_LEADER, IsrProposal, PartitionRecord
from tidelog.core.isr_replica import IsrReplica
from tidelog.core.messages import (
    AppendRequest,
    AppendResponse,
    Message,
    ProduceResult,
    Ready,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tidelog.core.replica import (
    ACKS_ALL,
    ACKS_LEADER,
    ACKS_NONE,
    Replica,
    ReplicaConfig,
    Replication,
)
from tidelog.core.storage import MemoryStorage
from tidelog.errors import StorageError, TidelogError
from tidelog.records import read_header
from tidelog.testing.checker import Checker, batch_identity
from tidelog.testing.cluster import Cluster, Envelope, SimMemoryStorage
from tidelog.testing.sim import build_batch
from tidelog.testing.trace import describe_batches
from tidelog.types import Epoch, NodeId, Offset

SEPARATOR = "----"
ACKS = {"all": ACKS_ALL, "-1": ACKS_ALL, "1": ACKS_LEADER, "0": ACKS_NONE}
MESSAGE_TYPES: dict[str, type] = {
    "append": AppendRequest,
    "append-resp": AppendResponse,
    "vote": VoteRequest,
    "vote-resp": VoteResponse,
    "timeout-now": TimeoutNow,
}
STABILIZE_ROUNDS_MAX = 10_000


class ScriptError(Exception):
    """A scenario script is malformed."""


# ------------------------------------------------------------------ descriptions --------
def describe_message(msg: Message) -> str:
    head = f"{msg.sender}->{msg.recipient}"
    if isinstance(msg, AppendRequest):
        body = describe_batches(msg.batches) if msg.batches else "heartbeat"
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


# ------------------------------------------------------------------ the interpreter -----
@dataclass
class Scenario:
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

    def run(self, command: str, args: list[str], kv: dict[str, str]) -> str:
        handler: Callable[[list[str], dict[str, str]], None] | None = getattr(
            self, "cmd_" + command.replace("-", "_"), None
        )
        if handler is None:
            raise ScriptError(f"unknown command {command!r}")
        self.output = []
        handler(args, kv)
        self.observe()
        return "\n".join(self.output) if self.output else "ok"

    def observe(self) -> None:
        """Run the invariant checks over every live replica after each command."""
        if self.cluster is None:
            return
        for node, sim_node in self.cluster.nodes.items():
            if node in self.unchecked and not self.checked_again(node, sim_node.replica):
                continue
            if sim_node.replica is not None:
                self.checker.check_replica(
                    node,
                    sim_node.replica,
                    sim_node.incarnation,
                    durable_hwm_at_start=sim_node.hwm_before_start,
                    repaired=sim_node.repaired,
                )
        self.checker.verify_acks()

    # ---------------------------------------------------------------- setup ------------
    def cmd_cluster(self, args: list[str], kv: dict[str, str]) -> None:
        del args
        replicas = int(kv.get("replicas", "3"))

        replication = Replication(kv.get("mode", "quorum"))
        self.min_insync = int(kv.get("min-insync", "1"))

        def config(node: NodeId, members: tuple[NodeId, ...]) -> ReplicaConfig:
            min_insync = kv.get("min-insync")
            return ReplicaConfig(
                node,
                members,
                min_insync_replicas=int(min_insync) if min_insync else None,
                pre_vote=kv.get("pre-vote", "true") == "true",
                check_quorum=kv.get("check-quorum", "true") == "true",
                append_bytes_max=int(kv.get("append-bytes-max", str(1 << 20))),
                replication=replication,
                replica_lag_time_max_ms=int(kv.get("lag-ms", "10000")),
            )

        self.cluster = Cluster(replicas=replicas, rng=random.Random(0), config=config)
        self.cluster.listeners.append(self.on_completion)
        self.cluster.on_ready.append(self.on_ready)

    # ---------------------------------------------------------------- time and network --
    def cmd_campaign(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            self.c.input(node, lambda replica: replica.campaign())

    def cmd_transfer(self, args: list[str], kv: dict[str, str]) -> None:
        """`transfer 1 to=2`: node 1, the leader, hands its leadership to node 2."""
        node, target = nodes_of(args[0])[0], NodeId(int(kv["to"]))
        refusals: list[str | None] = []
        self.c.input(node, lambda replica: refusals.append(replica.transfer_leadership(target)))
        if refusals and refusals[0] is not None:
            self.say(f"refused: {refusals[0]}")

    def cmd_tick(self, args: list[str], kv: dict[str, str]) -> None:
        among = {"from": kv["deliver"], "to": kv["deliver"]} if "deliver" in kv else None
        for _ in range(int(kv.get("count", "1"))):
            self.c.now += 1
            for node in nodes_of(args[0]):
                self.c.tick(node)
            if among is not None:
                self.deliver_quietly(among)

    def deliver_quietly(self, among: dict[str, str]) -> None:
        """Deliver everything among some nodes without a transcript (time passing)."""
        for _ in range(STABILIZE_ROUNDS_MAX):
            pending = list(self.matching(among))
            if not pending:
                return
            self.c.deliver(pending[0])
        raise ScriptError("deliver did not settle")

    def cmd_deliver(self, args: list[str], kv: dict[str, str]) -> None:
        del args
        limit = int(kv.get("count", "1000000"))
        skip = int(kv.get("skip", "0"))
        for envelope in list(self.matching(kv))[skip : skip + limit]:
            self.deliver(envelope)

    def cmd_drop(self, args: list[str], kv: dict[str, str]) -> None:
        del args
        for envelope in list(self.matching(kv)):
            self.c.in_flight.remove(envelope)
            self.say(f"dropped {describe_message(envelope.msg)}")

    def cmd_stabilize(self, args: list[str], kv: dict[str, str]) -> None:
        del args
        only = {"from": kv["nodes"], "to": kv["nodes"]} if "nodes" in kv else {}
        for _ in range(STABILIZE_ROUNDS_MAX):
            pending = list(self.matching(only))
            if not pending:
                return
            self.deliver(pending[0])
        raise ScriptError("stabilize did not settle")

    def matching(self, kv: dict[str, str]) -> Iterator[Envelope]:
        senders = set(nodes_of(kv["from"])) if "from" in kv else None
        recipients = set(nodes_of(kv["to"])) if "to" in kv else None
        kind = MESSAGE_TYPES[kv["type"]] if "type" in kv else None
        for envelope in sorted(self.c.in_flight, key=lambda e: e.seq):
            msg = envelope.msg
            if senders is not None and msg.sender not in senders:
                continue
            if recipients is not None and msg.recipient not in recipients:
                continue
            if kind is not None and not isinstance(msg, kind):
                continue
            yield envelope

    def deliver(self, envelope: Envelope) -> None:
        recipient = self.c.nodes[envelope.msg.recipient]
        suffix = "" if recipient.alive else "  (recipient down: lost)"
        self.say(describe_message(envelope.msg) + suffix)
        self.c.deliver(envelope)

    # ---------------------------------------------------------------- faults -----------
    def cmd_crash(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            self.c.crash(node)

    def cmd_restart(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            self.c.restart(node)

    def cmd_wipe(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            if self.c.nodes[node].alive:
                raise ScriptError(f"wipe {node}: crash it first")
            self.c.nodes[node].storage = SimMemoryStorage()
            self.c.nodes[node].durable_hwm = 0  # the new disk holds nothing

    def cmd_isolate(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            self.c.isolate(node)

    def cmd_partition(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        self.c.partition(*(nodes_of(group) for group in args))

    def cmd_heal(self, args: list[str], kv: dict[str, str]) -> None:
        del args, kv
        self.c.heal()

    def cmd_corrupt(self, args: list[str], kv: dict[str, str]) -> None:
        node = nodes_of(args[0])[0]
        storage = self.c.nodes[node].storage
        if not isinstance(storage, MemoryStorage):
            raise ScriptError("corrupt needs the in-memory storage")
        storage.corrupt(Offset(int(kv["offset"])))

    def cmd_hold_persist(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            self.c.nodes[node].manual_persist = True

    def cmd_persist(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            sim_node = self.c.nodes[node]
            sim_node.manual_persist = False
            if sim_node.persisting is not None:
                self.c.finish_persist(node)

    # ---------------------------------------------------------------- clients ----------
    def cmd_produce(self, args: list[str], kv: dict[str, str]) -> None:
        node = nodes_of(args[0])[0]
        value = kv["value"]
        acks = ACKS[kv.get("acks", "all")]
        records = int(kv.get("records", "1"))
        if "producer" in kv:
            producer_id, epoch, sequence = (int(part) for part in kv["producer"].split(","))
            producer = (producer_id, epoch, sequence)
            batch = build_batch(value.encode(), records=records, producer=producer)
        else:
            batch = build_batch(value.encode(), records=records)
        self.next_request += 1
        request_id = self.next_request
        self.produced[request_id] = (value, batch, acks)
        if not self.c.input(node, lambda replica: replica.propose(request_id, batch, acks=acks)):
            self.say(f"produce {value}: node {node} is down")

    def on_completion(self, node: NodeId, result: ProduceResult) -> None:
        value, batch, acks = self.produced[result.request_id]
        if result.error is not None:
            self.say(f"produce {value}: {describe_error(result.error)}")
            return
        self.say(f"produce {value}: acknowledged by {node} at offset {result.base_offset}")
        if acks == ACKS_ALL and result.base_offset is not None:
            self.checker.on_acked(result.base_offset, batch)

    def cmd_fetch(self, args: list[str], kv: dict[str, str]) -> None:
        node = nodes_of(args[0])[0]
        replica = self.c.replica(node)
        epoch = Epoch(int(kv["epoch"])) if "epoch" in kv else None
        try:
            result = replica.fetch(
                Offset(int(kv["offset"])),
                max_bytes=int(kv.get("bytes", str(1 << 20))),
                last_fetched_epoch=epoch,
                now_ms=self.c.now,
            )
        except StorageError as error:  # never served; the node repairs in its next round
            self.say(f"error {describe_error(error)}")
            self.c.drain(node)
            return
        if result.error is not None:
            self.say(f"error {describe_error(result.error)}")
            return
        self.checker.on_read(node, result.batches)
        self.say(f"hwm={result.hwm} log_start={result.log_start_offset}")
        for batch in result.batches:
            self.say(describe_record_batch(batch))

    def cmd_delete_records(self, args: list[str], kv: dict[str, str]) -> None:
        node = nodes_of(args[0])[0]
        offset = Offset(int(kv["offset"]))
        outcome: list[str] = []

        def delete(replica: Replica) -> None:
            try:
                outcome.append(f"low_watermark={replica.delete_records(offset)}")
            except TidelogError as error:
                outcome.append(f"error {describe_error(error)}")

        self.c.input(node, delete)
        self.output.extend(outcome)

    def cmd_latest(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        node = nodes_of(args[0])[0]
        replica = self.c.replica(node)
        try:
            latest = replica.latest_offset(now_ms=self.c.now)
        except TidelogError as error:
            self.say(f"error {describe_error(error)}")
            return
        self.checker.on_leader_hwm(node, latest)
        self.say(f"latest={latest}")

    # ---------------------------------------------------------------- Ready's events ---
    def on_ready(self, node: NodeId, ready: Ready) -> None:
        """Name what a Ready reports besides its writes: a follower's lost copy, and (ISR
        mode) proposals and records given up."""
        for lost in ready.lost_copies:
            self.say(
                f"{node}: node {lost.follower} lost records: its log ends at {lost.log_end}, "
                f"below the {lost.acknowledged} it acknowledged"
            )
        for proposal in ready.isr_proposals:
            self.proposals.append((node, proposal))
            self.say(f"{node}: propose {describe_proposal(proposal)}")
        for given in ready.given_up:
            self.say(
                f"{node}: gave up committed offsets {given.start_offset}.."
                f"{given.end_offset - 1} to leader {given.leader} of epoch {given.leader_epoch} "
                f"(unclean election in epoch {given.unclean_epoch})"
            )

    # ---------------------------------------------------------------- ISR mode ---------
    def forget_lost(self, leader: NodeId, epoch: Epoch) -> None:
        """An unclean election of `leader` in `epoch`: its log is the truth from now on.
        Name the committed records it lacks (the first offset where its log leaves the
        checker's history, to the history's end) and take them out of the history and
        the acknowledged writes; leave every other replica unchecked until its HWM is
        checked against a leader of this history (`checked_again`)."""
        checker, replica = self.checker, self.c.replica(leader)
        cut = 0
        while cut < checker.committed_end:
            known = checker.history[cut]
            held = replica.log.read(
                Offset(cut), end_offset=Offset(known.next_offset), max_bytes=1 << 30
            )
            if len(held) != 1 or batch_identity(held[0]) != known.identity:
                break
            cut = known.next_offset
        if cut < checker.committed_end:
            self.say(f"lost: committed offsets {cut}..{checker.committed_end - 1}")
        for offset in [offset for offset in checker.history if offset >= cut]:
            del checker.history[offset]
        checker.committed_end = cut
        checker.acked = {key: at for key, at in checker.acked.items() if at < cut}
        checker.unverified_acks = [(at, key) for at, key in checker.unverified_acks if at < cut]
        checker.committed_identities = {
            key: at for key, at in checker.committed_identities.items() if at < cut
        }
        checker.checked = {node: min(end, cut) for node, end in checker.checked.items()}
        checker.leader_hwm_max = min(checker.leader_hwm_max, cut)
        checker.node_hwm_max = {node: min(hwm, cut) for node, hwm in checker.node_hwm_max.items()}
        self.unclean_epoch = epoch
        self.unchecked = {node for node in self.c.ids if node != leader}

    def checked_again(self, node: NodeId, replica: Replica | None) -> bool:
        """Whether `node`, unchecked since the unclean election, knows of it and has had
        its HWM checked against a leader since: then the checker takes it up again, its
        HWM allowed to have gone back once."""
        if not isinstance(replica, IsrReplica) or replica.record is None:
            return False
        unclean = replica.record.unclean_epoch
        if unclean is None or self.unclean_epoch is None or unclean < self.unclean_epoch:
            return False
        if not replica.hwm_checked():
            return False
        self.unchecked.discard(node)
        self.checker.hwm_seen.pop(node, None)
        return True

    @property
    def current_record(self) -> PartitionRecord:
        if self.record is None:
            raise ScriptError("no partition record yet: write one with `record leader=N`")
        return self.record

    def isr_input(self, node: NodeId, action: Callable[[IsrReplica], str | None]) -> None:
        """One input to an ISR-mode replica; the reason it gives for a refusal is printed."""
        refusals: list[str] = []

        def run(replica: Replica) -> None:
            if not isinstance(replica, IsrReplica):
                raise ScriptError(f"node {node} is not in ISR mode (cluster ... mode=isr)")
            refusal = action(replica)
            if refusal is not None:
                refusals.append(refusal)

        self.c.input(node, run)
        for refusal in refusals:
            self.say(f"{node} refused: {refusal}")

    def publish(self, kv: dict[str, str], *, default: tuple[NodeId, ...] | None = None) -> None:
        """Hand the controller's record to `to` (or `default`, or every live node)."""
        record = self.current_record
        chosen = nodes_of(kv["to"]) if "to" in kv else list(default or self.c.ids)
        for node in chosen:
            if self.c.nodes[node].alive:
                self.isr_input(node, lambda replica: replica.on_partition_record(record))

    def change_record(self, record: PartitionRecord, kv: dict[str, str]) -> None:
        self.commit_record(record)
        self.publish(kv)

    def commit_record(self, record: PartitionRecord) -> None:
        """The controller commits `record` to the metadata log (printed when it changed)."""
        if record != self.record:
            self.record = record
            self.history.append(record)
            self.say(describe_record(record))

    def cmd_record(self, args: list[str], kv: dict[str, str]) -> None:
        del args
        leader = NodeId(int(kv["leader"])) if kv.get("leader", "-") != "-" else NO_LEADER
        last = self.record
        if "epoch" in kv:
            epoch = Epoch(int(kv["epoch"]))
        elif last is None:
            epoch = Epoch(1)
        else:
            epoch = Epoch(last.leader_epoch + (leader != last.leader))
        isr_ = tuple(nodes_of(kv["isr"])) if "isr" in kv else self.c.ids
        elr = tuple(nodes_of(kv.get("elr", "")))
        partition_epoch = 0 if last is None else last.partition_epoch + 1
        unclean = None if last is None else last.unclean_epoch  # history is kept
        record = PartitionRecord(self.c.ids, leader, epoch, partition_epoch, isr_, elr, unclean)
        self.change_record(record, kv)

    def cmd_publish(self, args: list[str], kv: dict[str, str]) -> None:
        del args
        self.publish(kv)

    def cmd_fence(self, args: list[str], kv: dict[str, str]) -> None:
        node = nodes_of(args[0])[0]
        self.change_record(isr.fence(self.current_record, node, min_insync=self.min_insync), kv)

    def cmd_restarted(self, args: list[str], kv: dict[str, str]) -> None:
        node = nodes_of(args[0])[0]
        record = isr.restarted(self.current_record, node, min_insync=self.min_insync)
        self.change_record(record, kv)

    def cmd_register(self, args: list[str], kv: dict[str, str]) -> None:
        node = nodes_of(args[0])[0]
        record = isr.registered(
            self.current_record,
            node,
            first=kv.get("first", "false") == "true",
            clean=kv.get("clean", "false") == "true",
            min_insync=self.min_insync,
        )
        self.change_record(record, kv)

    def cmd_elect(self, args: list[str], kv: dict[str, str]) -> None:
        del args
        election = isr.elect(
            self.current_record,
            nodes_of(kv["live"]),
            min_insync=self.min_insync,
            unclean_allowed=kv.get("unclean", "false") == "true",
        )
        if election.leader == NO_LEADER:
            self.say("no leader may be elected: offline")
        elif election.unclean:
            self.say(f"unclean election of node {election.leader}")
            self.forget_lost(election.leader, election.record.leader_epoch)
        self.change_record(election.record, kv)

    def cmd_alter(self, args: list[str], kv: dict[str, str]) -> None:
        del args
        wanted = set(nodes_of(kv["from"])) if "from" in kv else None
        found = [p for p in self.proposals if wanted is None or p[0] in wanted]
        if not found:
            raise ScriptError("no ISR proposal in flight")
        node, proposal = found[0]
        if kv.get("copy") != "true":
            self.proposals.remove(found[0])
        if kv.get("lose") == "true":
            self.say(f"lost: {node}: propose {describe_proposal(proposal)}")
            return
        if "stale" in kv:
            self.alter_at_stale_controller(node, proposal, int(kv["stale"]))
            return
        result = isr.alter_isr(self.current_record, proposal, min_insync=self.min_insync)
        refusal = result.refusal
        self.say(f"controller: {'accepted' if refusal is None else f'refused {refusal.value}'}")
        self.commit_record(result.record)
        answer = kv.get("answer", "now")
        if answer == "late":
            self.late_answers.append((node, proposal, result))
        elif answer == "never":
            self.say("controller: failed before answering")
        elif self.c.nodes[node].alive:
            self.isr_input(node, lambda replica: replica.on_isr_answer(proposal, result))
        others = tuple(other for other in self.c.ids if other != node)
        self.publish(kv, default=others)

    def alter_at_stale_controller(self, node: NodeId, proposal: IsrProposal, behind: int) -> None:
        """A controller that is no longer active, `behind` records short of the metadata
        log, judges the proposal by the record it has: it can commit nothing, so it either
        refuses (answered with its old record) or fails to commit (no answer)."""
        if not 0 < behind < len(self.history):
            raise ScriptError(f"stale={behind}: the metadata log holds {len(self.history)} records")
        record = self.history[-1 - behind]
        result = isr.alter_isr(record, proposal, min_insync=self.min_insync)
        refusal = result.refusal
        self.say(
            f"stale controller at pe{record.partition_epoch}: "
            + ("cannot commit, no answer" if refusal is None else f"refused {refusal.value}")
        )
        if refusal is not None and self.c.nodes[node].alive:
            answer = isr.AlterResult(record, refusal)
            self.isr_input(node, lambda replica: replica.on_isr_answer(proposal, answer))

    def cmd_answer(self, args: list[str], kv: dict[str, str]) -> None:
        del args, kv
        if not self.late_answers:
            raise ScriptError("no answer held back (alter answer=late)")
        node, proposal, result = self.late_answers.pop(0)
        refusal = result.refusal
        verdict = "accepted" if refusal is None else f"refused {refusal.value}"
        self.say(
            f"{node} hears: {verdict} to {describe_proposal(proposal)}, "
            f"with record pe{result.record.partition_epoch}"
        )
        if self.c.nodes[node].alive:
            self.isr_input(node, lambda replica: replica.on_isr_answer(proposal, result))

    def cmd_isr(self, args: list[str], kv: dict[str, str]) -> None:
        """The ISR leader's view: committed and pending ISR, HWM, each follower."""
        del kv
        replica = self.c.replica(nodes_of(args[0])[0])
        leader = replica.isr_leader if isinstance(replica, IsrReplica) else None
        if leader is None:
            self.say("not an ISR leader")
            return
        pending = "-" if leader.pending is None else describe_proposal(leader.pending)
        self.say(f"isr={describe_nodes(leader.record.isr)} pending={pending} hwm={leader.hwm}")
        for peer, state in sorted(leader.followers.items()):
            match = "-" if state.match is None else state.match
            self.say(
                f"{peer}: match={match} past_epoch_start={str(state.past_epoch_start).lower()} "
                f"caught_up_ms={state.last_caught_up_ms}"
            )

    # ---------------------------------------------------------------- inspection -------
    def cmd_status(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        chosen = nodes_of(args[0]) if args else list(self.c.ids)
        for node in chosen:
            replica = self.c.nodes[node].replica
            if replica is None:
                self.say(f"{node}: down")
                continue
            log = replica.log
            epochs = " ".join(f"e{e.epoch}@{e.start_offset}" for e in log.epochs)
            leader = replica.leader_id if replica.leader_id is not None else "-"
            floor = replica.repair_floor
            isr_leader = replica.isr_leader if isinstance(replica, IsrReplica) else None
            self.say(
                f"{node}: {replica.role.value} e{replica.epoch} leader={leader} "
                f"hwm={replica.hwm} leo={log.log_end_offset} durable={log.durable_end_offset} "
                f"epochs=[{epochs}]"
                + ("" if floor is None else f" floor=e{floor.epoch}/{floor.end_offset}")
                + ("" if isr_leader is None else f" isr={describe_nodes(isr_leader.record.isr)}")
            )

    def cmd_progress(self, args: list[str], kv: dict[str, str]) -> None:
        """The leader's view of each follower: verified match, next offset, mode."""
        del kv
        replica = self.c.replica(nodes_of(args[0])[0])
        for peer, progress in sorted(replica.progress.items()):
            match = "-" if progress.match_offset is None else progress.match_offset
            mode = "probe" if progress.probing else "replicate"
            self.say(f"{peer}: match={match} next={progress.next_offset} {mode}")

    def cmd_log(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            replica = self.c.replica(node)
            start, end = replica.log.log_start_offset, replica.log.log_end_offset
            batches = replica.log.read(start, end_offset=end, max_bytes=1 << 30)
            self.say(f"{node}:" + (" (empty)" if not batches else ""))
            for batch in batches:
                self.say("  " + describe_record_batch(batch))

    def cmd_check(self, args: list[str], kv: dict[str, str]) -> None:
        """Every invariant; with `final=false` only those of every step, not the end's
        (every acknowledged write on every replica): for a partition left offline."""
        del args
        replicas = dict(self.c.live_replicas())
        for node in sorted(self.unchecked & set(replicas)):
            del replicas[node]
            self.say(f"not checked: node {node}, not yet checked against the unclean leader")
        self.observe()
        if kv.get("final", "true") == "true":
            self.checker.check_final(replicas)
        if self.checker.violations:
            for violation in self.checker.violations:
                self.say(f"VIOLATION {violation}")
            self.checker.violations.clear()
        else:
            self.say("invariants hold")


def nodes_of(text: str) -> list[NodeId]:
    return [NodeId(int(part)) for part in text.split(",") if part]


# ------------------------------------------------------------------ the file format -----
@dataclass
class Case:
    line: int
    command: str
    expected: str


def parse(text: str) -> Iterator[Case]:
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        if not line or line.startswith("#"):
            index += 1
            continue
        start = index
        index += 1
        if index >= len(lines) or lines[index].strip() != SEPARATOR:
            raise ScriptError(f"line {start + 1}: expected {SEPARATOR!r} after {line!r}")
        index += 1
        expected: list[str] = []
        while index < len(lines) and lines[index].strip():
            expected.append(lines[index])
            index += 1
        yield Case(start + 1, line, "\n".join(expected))


def execute(scenario: Scenario, command: str) -> str:
    words = shlex.split(command)
    args = [word for word in words[1:] if "=" not in word]
    kv = dict(word.split("=", 1) for word in words[1:] if "=" in word)
    return scenario.run(words[0], args, kv)


def run_text(
    text: str, make: Callable[[], Scenario] = Scenario
) -> tuple[str, list[tuple[Case, str]]]:
    """Run a script (in a new `make()`). Returns the rewritten text and the cases whose
    output differed."""
    scenario = make()
    out: list[str] = []
    mismatches: list[tuple[Case, str]] = []
    comments = leading_comments(text)
    for case in parse(text):
        actual = execute(scenario, case.command)
        if actual != case.expected:
            mismatches.append((case, actual))
        out.append("\n".join([*comments.get(case.line, []), case.command, SEPARATOR, actual]))
    return "\n\n".join(out) + "\n", mismatches


def leading_comments(text: str) -> dict[int, list[str]]:
    """The comment lines right before each command line (kept when rewriting)."""
    found: dict[int, list[str]] = {}
    pending: list[str] = []
    in_output = False
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if in_output:
            in_output = bool(line)
            continue
        if line.startswith("#"):
            pending.append(raw)
        elif line == SEPARATOR:
            in_output = True
        elif line:
            found[number] = pending
            pending = []
    return found


def run_file(
    path: Path, *, rewrite: bool = False, make: Callable[[], Scenario] = Scenario
) -> list[str]:
    """Run a scenario file (in a new `make()`); with rewrite, store the actual output.
    Returns the differences."""
    text = path.read_text()
    rewritten, mismatches = run_text(text, make)
    if rewrite:
        path.write_text(rewritten)
        return []
    return [
        f"{path.name}:{case.line}: {case.command}\n"
        f"--- expected\n{case.expected}\n--- actual\n{actual}"
        for case, actual in mismatches
    ]


def main(argv: list[str] | None = None) -> int:
    """Print the transcript of scenario scripts: `python -m tidelog.testing.scenario FILE...`."""
    import argparse  # noqa: PLC0415 - only the command line needs it

    parser = argparse.ArgumentParser(prog="python -m tidelog.testing.scenario")
    parser.add_argument("files", nargs="+", type=Path, help="scenario scripts to run")
    args = parser.parse_args(argv)
    for path in args.files:
        if not path.is_file():
            parser.error(f"{path}: no such scenario file")
        rewritten, _ = run_text(path.read_text())
        print(rewritten)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
