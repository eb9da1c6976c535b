"""Scripted scenarios: a small command language over the simulation cluster.

The format follows etcd-io/raft's datadriven testdata: a command line, `----`, then the
exact output expected, then a blank line. `run_file(path, rewrite=True)` writes the
actual output back instead of comparing (pytest --rewrite).

This file holds the interpreter (`Scenario`: setup, what a Ready reports, inspection) and
the file format; each command family lives in a room of its own, mixed into `Scenario`:
scenario_net.py (time and network), scenario_disk.py (nodes, disks, syncs),
scenario_clients.py (produce, fetch, latest, delete-records), scenario_isr.py (the
controller of ISR mode), over scenario_base.py (the shared state and the transcripts'
descriptions). A command `name` runs the method `cmd_name`; group_scenario.py adds its own.

Commands (nodes are numbers; lists are comma-separated):
    cluster replicas=N [min-insync=N] [pre-vote=false] [check-quorum=false] [append-bytes-max=N]
            [directories=known]   the first voter set names each replica's directory
                          (core/membership.py): a node on an empty disk is no voter
            [name-directories=true]   the leader names them once their copies answered
            [quiesce=true]        idle partitions quiesce (core/quiesce.py), over node
                          liveness (core/liveness.py) timing out after an election timeout
    campaign N            start an election on N, as if its timer fired
    ping N[,M]            node N pings every other node (node liveness): in flight
    expire N[,M]          node N declares dead the nodes it has not heard for a timeout
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
    wipe N [same-directory=true]   the crashed N's disk is replaced by an empty one, a
                          new directory (a new copy); or its directory id kept (a log
                          emptied under its id: an old backup restored)
    status [N]            role, epoch, leader, HWM, log end, durable end, epoch history,
                          and the repair floor of a replica under repair
    progress N            the leader N's view of each follower (match, next, mode, and
                          whether its copy is an observer)
    log N                 the batches in N's log
    voters N              the voter sets N's log holds, by the offset where each begins
    fetch N offset=O [epoch=E] [bytes=B]   a consumer fetch at N
    latest N              the "latest" offset N answers (ListOffsets)
    delete-records N offset=O   DeleteRecords at the leader N (its low watermark)
    check [final=false]   every invariant of correctness.md over the cluster (`final=false`:
                          only those of every step, not the convergence of the end)

ISR mode (docs/isr.md): `cluster ... mode=isr [lag-ms=N]` puts every replica in ISR mode
(min-insync defaults to 1, Kafka's); the script plays the controller, whose
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
from dataclasses import dataclass, replace
from pathlib import Path

from tidelog.core.messages import Ready
from tidelog.core.replica import ReplicaConfig, Replication
from tidelog.testing.cluster import Cluster
from tidelog.testing.scenario_base import (
    ScriptError,
    describe_nodes,
    describe_proposal,
    describe_record_batch,
    isr_mode,
    nodes_of,
)
from tidelog.testing.scenario_clients import ClientCommands
from tidelog.testing.scenario_disk import DiskCommands
from tidelog.testing.scenario_isr import IsrCommands
from tidelog.testing.scenario_net import NetCommands
from tidelog.types import DirectoryId, NodeId

SEPARATOR = "----"


# ------------------------------------------------------------------ the interpreter -----
@dataclass
class Scenario(NetCommands, DiskCommands, ClientCommands, IsrCommands):
    """The interpreter: a command `name` runs the method `cmd_name` of one of its command
    families (scenario_net.py, scenario_disk.py, scenario_clients.py, scenario_isr.py);
    after each, every invariant is checked over the live replicas."""

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
        known = kv.get("directories") == "known"

        # `first=N`: the partition was made on the first N nodes; the others are members
        # from the start, learners until a change adds them (`members`).
        first = int(kv.get("first", str(replicas)))

        def config(node: NodeId, members: tuple[NodeId, ...]) -> ReplicaConfig:
            min_insync = kv.get("min-insync")
            born = members[:first]
            return ReplicaConfig(
                node,
                born,
                members=members if first < replicas else (),
                target=born if first < replicas else (),
                min_insync_replicas=int(min_insync) if min_insync else None,
                pre_vote=kv.get("pre-vote", "true") == "true",
                check_quorum=kv.get("check-quorum", "true") == "true",
                append_bytes_max=int(kv.get("append-bytes-max", str(1 << 20))),
                replication=replication,
                replica_lag_time_max_ms=int(kv.get("lag-ms", "10000")),
                # Node N's first copy is directory N (testing/cluster.py's memory storage).
                directories=tuple(DirectoryId(n) for n in born) if known else (),
                name_directories=kv.get("name-directories") == "true",
                quiesce=quiesce,
            )

        quiesce = kv.get("quiesce") == "true"
        timeout = ReplicaConfig(NodeId(1), (NodeId(1),)).election_ticks if quiesce else None
        self.cluster = Cluster(
            replicas=replicas, rng=random.Random(0), config=config, liveness_timeout_ms=timeout
        )
        self.cluster.listeners.append(self.on_completion)
        self.cluster.on_ready.append(self.on_ready)

    # ---------------------------------------------------------------- time and network --
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
            isr_replica = isr_mode(replica)
            isr_leader = None if isr_replica is None else isr_replica.isr_leader
            self.say(
                f"{node}: {replica.role.value} e{replica.epoch} leader={leader} "
                f"hwm={replica.hwm} leo={log.log_end_offset} durable={log.durable_end_offset} "
                f"epochs=[{epochs}]"
                + ("" if floor is None else f" floor=e{floor.epoch}/{floor.end_offset}")
                + ("" if isr_leader is None else f" isr={describe_nodes(isr_leader.record.isr)}")
                + (" quiesced" if replica.quiesced else "")
            )

    def cmd_progress(self, args: list[str], kv: dict[str, str]) -> None:
        """The leader's view of each follower: verified match, next offset, mode."""
        del kv
        replica = self.c.replica(nodes_of(args[0])[0])
        for peer, progress in sorted(replica.progress.items()):
            match = "-" if progress.match_offset is None else progress.match_offset
            mode = "probe" if progress.probing else "replicate"
            voter = progress.directory is None or replica.counts(peer, progress.directory)
            observer = "" if voter else " observer (its copy is no voter)"
            self.say(f"{peer}: match={match} next={progress.next_offset} {mode}{observer}")

    def cmd_voters(self, args: list[str], kv: dict[str, str]) -> None:
        """The voter sets each node's log holds, by the offset where each takes effect
        (-1: the partition's first), as node/directory keys (core/membership.py)."""
        del kv
        for node in nodes_of(args[0]):
            replica = self.c.replica(node)
            entries = [
                f"{entry.offset}:{{{' '.join(str(key) for key in entry.voters)}}}"
                for entry in replica.log.voters.entries
            ]
            self.say(f"{node}: {' '.join(entries)}")

    def cmd_members(self, args: list[str], kv: dict[str, str]) -> None:
        """The partition's replica set changes on the nodes named (all when none are):
        `members 1,2,3,4 target=1,2,4` (KIP-455; core/config.py's `members`, `target`)."""
        members = tuple(nodes_of(kv["members"])) if "members" in kv else self.c.ids
        target = tuple(nodes_of(kv["target"]))
        for node in nodes_of(args[0]) if args else list(self.c.ids):
            sim_node = self.c.nodes[node]
            sim_node.config = replace(sim_node.config, members=members, target=target)
            refusal = self.c.replica(node).set_members(members, target)
            self.say(f"{node}: {'ok' if refusal is None else refusal}")

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
