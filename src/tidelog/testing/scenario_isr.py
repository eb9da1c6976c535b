"""The scenario language's ISR-mode commands (docs/isr.md): the script plays the controller.
It writes the partition record (`record`, `fence`, `restarted`, `register`, `elect`), takes
the leaders' ISR proposals (`alter`, `answer`) and hands records to the replicas
(`publish`); `isr N` prints a leader's view. After an unclean election the checker's
history is cut to the new leader's log (`forget_lost`).
"""

from __future__ import annotations

from collections.abc import Callable

from tidelog.core import isr
from tidelog.core.isr import NO_LEADER, IsrProposal, PartitionRecord
from tidelog.core.replica import Replica
from tidelog.testing.checker import batch_identity
from tidelog.testing.scenario_base import (
    ScenarioState,
    ScriptError,
    describe_nodes,
    describe_proposal,
    describe_record,
    isr_mode,
    nodes_of,
)
from tidelog.types import Epoch, NodeId, Offset


class IsrCommands(ScenarioState):
    """The controller of ISR mode, played by the script."""

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
        checker.cut(cut)
        self.unclean_epoch = epoch
        self.unchecked = {node for node in self.c.ids if node != leader}

    def checked_again(self, node: NodeId, replica: Replica | None) -> bool:
        """Whether `node`, unchecked since the unclean election, knows of it and has had
        its HWM checked against a leader since: then the checker takes it up again, its
        HWM allowed to have gone back once."""
        isr_replica = isr_mode(replica)
        if isr_replica is None or isr_replica.record is None:
            return False
        unclean = isr_replica.record.unclean_epoch
        if unclean is None or self.unclean_epoch is None or unclean < self.unclean_epoch:
            return False
        if not isr_replica.hwm_checked():
            return False
        self.unchecked.discard(node)
        self.checker.hwm_seen.pop(node, None)
        return True

    @property
    def current_record(self) -> PartitionRecord:
        if self.record is None:
            raise ScriptError("no partition record yet: write one with `record leader=N`")
        return self.record

    def isr_input(self, node: NodeId, action: Callable[[Replica], str | None]) -> None:
        """One input to an ISR-mode replica; the reason it gives for a refusal is printed."""
        refusals: list[str] = []

        def run(replica: Replica) -> None:
            if isr_mode(replica) is None:
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
        isr_replica = isr_mode(replica)
        leader = None if isr_replica is None else isr_replica.isr_leader
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
