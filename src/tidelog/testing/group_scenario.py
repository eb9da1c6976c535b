"""Scripted group scenarios: the scenario language (`scenario.py`) with consumers, run
against the real coordinator on every node of a replicated `__consumer_offsets` partition
(`groups.GroupNodes`). Transcripts live in tests/group_scenarios/.

    python -m tidelog.testing.group_scenario FILE...   (prints each transcript)

Commands besides the replication ones (crash, isolate, partition, heal, hold-persist,
persist, status, check, ...):
    cluster replicas=N [session-ms=S] [retention-ms=R] [max-size=M]   nodes tick every
                          10 ms; a group holds at most M members (group.max.size)
    run ms=K              K ms pass: messages are delivered, syncs finish, nodes tick,
                          coordinators follow their replicas; answers print as they come
    join C [version=V] [instance=I] [node=N]   consumer C joins (with the member id it
                          has, if any); at JoinGroup v4+ a member without an id gets one
                          first (KIP-394); with a group instance id C is a static member
                          (KIP-345) and names it in every request from then on
    sync C [node=N]       C syncs its generation (its leader assigns partitions round robin)
    heartbeat C / leave C [by=instance] / fetch-offsets C [node=N]   (a static member
                          leaves by its instance id alone with by=instance)
    commit C P=O[,P=O] [generation=G] [node=N]   commit offsets of topic t's partitions
    delete-topic T        the topic is gone: its offsets expire at the next check
    group-max-size M      every coordinator's group.max.size becomes M (brokers restarted
                          with a lower limit: a group above it sheds members as they rejoin)
    groups N              what N's coordinator holds: loaded, state, generation, members,
                          offsets
A request goes to the node that leads the partition unless `node=` names one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from pathlib import Path

from tidelog.core.replica import ReplicaConfig, Role
from tidelog.groups.messages import (
    Commit,
    CommittedOffset,
    DeleteGroup,
    DeleteOffsets,
    FetchOffsets,
    GroupConfig,
    Heartbeat,
    Join,
    JoinResult,
    Leave,
    Reply,
    Request,
    SyncResult,
)
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.testing.cluster import Cluster
from tidelog.testing.group_sim import sync_body
from tidelog.testing.groups import GroupNodes
from tidelog.testing.scenario import Scenario, run_file, run_text
from tidelog.testing.scenario_base import ScriptError, nodes_of
from tidelog.types import NodeId

TICK_MS = 10
TOPIC = "t"
GROUP = "g"


@dataclass
class Client:
    name: str
    member_id: str = ""
    generation: int = -1
    members: list[str] = field(default_factory=list)
    instance: str | None = None  # its group instance id: a static member


@dataclass
class GroupScenario(Scenario):
    """A scenario with coordinators and consumers."""

    nodes: GroupNodes | None = None
    clients: dict[str, Client] = field(default_factory=dict)
    asked: dict[int, tuple[Client, Request]] = field(default_factory=dict)

    @property
    def g(self) -> GroupNodes:
        if self.nodes is None:
            raise ScriptError("no cluster: start the script with `cluster replicas=N`")
        return self.nodes

    def cmd_cluster(self, args: list[str], kv: dict[str, str]) -> None:
        del args

        def config(node: NodeId, members: tuple[NodeId, ...]) -> ReplicaConfig:
            return ReplicaConfig(node, members, tick_ms=TICK_MS)

        self.cluster = Cluster(
            replicas=int(kv.get("replicas", "3")), rng=random.Random(0), config=config
        )
        group_config = GroupConfig(
            session_timeout_ms_min=1,
            commit_timeout_ms=200,
            offsets_retention_ms=int(kv.get("retention-ms", str(1 << 40))),
            offsets_retention_check_interval_ms=100,
            group_max_size=int(kv.get("max-size", str(2**31 - 1))),
        )
        self.nodes = GroupNodes(self.cluster, group_config, {TOPIC})
        self.nodes.listeners.append(self.on_reply)
        self.session_ms = int(kv.get("session-ms", "300"))

    # ---------------------------------------------------------------- time -------------
    def cmd_run(self, args: list[str], kv: dict[str, str]) -> None:
        del args
        cluster = self.c
        for _ in range(int(kv.get("ms", "100"))):
            cluster.now += 1
            for envelope in sorted(cluster.in_flight, key=lambda e: (e.deliver_at, e.seq)):
                if envelope.deliver_at <= cluster.now:
                    cluster.deliver(envelope)
            for node in cluster.ids:
                if cluster.nodes[node].clock.ticks_at(cluster.now, TICK_MS):
                    cluster.tick(node)
            self.g.step()

    # ---------------------------------------------------------------- clients ----------
    def client(self, name: str) -> Client:
        return self.clients.setdefault(name, Client(name))

    def leader(self) -> NodeId:
        for node, replica in self.c.live_replicas():
            if replica.role is Role.LEADER:
                return node
        raise ScriptError("no leader to send to: name one with node=N")

    def ask(self, client: Client, body: Request, kv: dict[str, str]) -> None:
        node = nodes_of(kv["node"])[0] if "node" in kv else self.leader()
        self.next_request += 1
        self.asked[self.next_request] = (client, body)
        if not self.g.request(node, self.next_request, body):
            self.asked.pop(self.next_request)
            self.say(f"{client.name} -> {node}: no answer (down, paused or syncing)")
        elif self.next_request in self.asked:
            self.say(f"{client.name} -> {node}: {type(body).__name__} waits")

    def cmd_join(self, args: list[str], kv: dict[str, str]) -> None:
        client = self.client(args[0])
        client.instance = kv.get("instance", client.instance)
        body = Join(
            GROUP,
            client.member_id,
            client.instance,
            client.name,
            "script",
            self.session_ms,
            self.session_ms,
            "consumer",
            (("range", TOPIC.encode()),),
            require_known_member_id=int(kv.get("version", "0")) >= 4,
        )
        self.ask(client, body, kv)

    def cmd_sync(self, args: list[str], kv: dict[str, str]) -> None:
        client = self.client(args[0])
        body = sync_body(client.generation, client.member_id, client.members, client.instance)
        self.ask(client, body, kv)

    def cmd_heartbeat(self, args: list[str], kv: dict[str, str]) -> None:
        client = self.client(args[0])
        self.ask(client, Heartbeat(GROUP, client.generation, client.member_id, client.instance), kv)

    def cmd_leave(self, args: list[str], kv: dict[str, str]) -> None:
        client = self.client(args[0])
        member_id = "" if kv.get("by") == "instance" else client.member_id
        self.ask(client, Leave(GROUP, (member_id,), (), (client.instance,)), kv)

    def cmd_commit(self, args: list[str], kv: dict[str, str]) -> None:
        client = self.client(args[0])
        offsets = tuple(
            ((TOPIC, int(partition)), (int(offset), -1, ""))
            for partition, offset in kv.items()
            if partition.isdigit()
        )
        generation = int(kv.get("generation", str(client.generation)))
        self.ask(client, Commit(GROUP, generation, client.member_id, offsets, client.instance), kv)

    def cmd_fetch_offsets(self, args: list[str], kv: dict[str, str]) -> None:
        self.ask(self.client(args[0]), FetchOffsets(GROUP, None), kv)

    def cmd_delete_group(self, args: list[str], kv: dict[str, str]) -> None:
        """`delete-group c1`: client c1 asks to delete the group (DeleteGroups)."""
        self.ask(self.client(args[0]), DeleteGroup(GROUP), kv)

    def cmd_delete_offsets(self, args: list[str], kv: dict[str, str]) -> None:
        """`delete-offsets c1 partitions=0,1`: OffsetDelete of those partitions of t."""
        partitions = tuple((TOPIC, int(p)) for p in kv["partitions"].split(","))
        self.ask(self.client(args[0]), DeleteOffsets(GROUP, partitions), kv)

    def cmd_group_max_size(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        self.g.config = replace(self.g.config, group_max_size=int(args[0]))
        for hosted in self.g.hosted.values():
            hosted.coordinator.config = self.g.config

    def cmd_delete_topic(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        self.g.topics.discard(args[0])
        for hosted in self.g.hosted.values():
            hosted.coordinator.expire_now()

    def on_reply(self, node: NodeId, reply: Reply) -> None:
        entry = self.asked.pop(reply.request, None)
        if entry is None:
            return
        client, body = entry
        head = f"{client.name} <- {node}: {type(body).__name__}"
        if reply.error is not ErrorCode.NONE:
            given = ""
            if isinstance(reply.result, JoinResult):  # MEMBER_ID_REQUIRED: the id to use
                client.member_id = reply.result.member_id
                given = f" member={client.member_id}"
            self.say(f"{head} {reply.error.name}{given}")
            return
        self.say(f"{head} {self.describe(client, reply.result)}")

    def describe(self, client: Client, result: object) -> str:
        if isinstance(result, JoinResult):
            client.member_id, client.generation = result.member_id, result.generation
            client.members = [member for member, _, _ in result.members]
            members = f" members={','.join(client.members)}" if client.members else ""
            return (
                f"generation={result.generation} member={result.member_id} "
                f"leader={result.leader}{members}"
            )
        if isinstance(result, SyncResult):
            return f"assignment={result.assignment.decode() or '-'}"
        if isinstance(result, dict):
            return " ".join(f"{t}-{p}={describe_value(v)}" for (t, p), v in result.items()) or "-"
        if isinstance(result, list):
            return " ".join(code.name for code in result)
        return "ok"

    # ---------------------------------------------------------------- state ------------
    def cmd_groups(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        node = nodes_of(args[0])[0]
        coordinator = self.g.coordinator(node)
        if coordinator is None:
            self.say(f"node {node}: down")
            return
        if not coordinator.active:
            self.say(f"node {node}: not coordinating")
            return
        loaded = "loaded" if coordinator.loaded else "loading"
        self.say(f"node {node}: {loaded} epoch={coordinator.epoch}")
        for group in coordinator.groups.values():
            members = ",".join(group.members) or "-"
            pending = f" pending={','.join(group.pending)}" if group.pending else ""
            self.say(
                f"  {group.group_id}: {group.state.value} generation={group.generation} "
                f"leader={group.leader or '-'} members={members}{pending}"
            )
            for (topic, partition), committed in sorted(group.offsets.items()):
                self.say(f"    {topic}-{partition}={committed.offset}")


def describe_value(value: object) -> str:
    if isinstance(value, CommittedOffset):
        return str(value.offset)
    if isinstance(value, ErrorCode):
        return value.name
    return "none"


def run_group_file(path: Path, *, rewrite: bool = False) -> list[str]:
    """Run a group scenario file; with rewrite, store the actual output. Returns differences."""
    return run_file(path, rewrite=rewrite, make=GroupScenario)


def main(argv: list[str] | None = None) -> int:
    import argparse  # noqa: PLC0415 - only the command line needs it

    parser = argparse.ArgumentParser(prog="python -m tidelog.testing.group_scenario")
    parser.add_argument("files", nargs="+", type=Path, help="group scenario scripts to run")
    args = parser.parse_args(argv)
    for path in args.files:
        if not path.is_file():
            parser.error(f"{path}: no such scenario file")
        rewritten, _ = run_text(path.read_text(), GroupScenario)
        print(rewritten)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
