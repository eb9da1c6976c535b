"""The group simulator: consumers in one group, against the real coordinator on every node
of a replicated `__consumer_offsets` partition, under the replication simulator's faults.

    python -m tidelog.testing.group_sim --seeds 200 [--replicas 5] [--disk] [--jobs 2]

Each seed runs the replication simulator's cluster and faults (`sim.Run`, its settings for
an offsets log: no retention, no DeleteRecords) with a coordinator beside every replica
(`groups.GroupNodes`), and consumers that find the coordinator, join, sync (the leader
assigns the topic's partitions), heartbeat, commit rising offsets for their partitions,
fetch them, leave and come back; some join as at JoinGroup v4+ (a member id given first,
KIP-394) and some are static members (KIP-345) that restart now and then, their old self's
commit arriving late; some seeds cap the group below its consumers (group.max.size,
KIP-389): a consumer refused GROUP_MAX_SIZE_REACHED goes away and tries again later.
Some seeds (`draw_churn`, a generator of their own) make every consumer static and restart
them often, so a zombie's late commit meets its new self soon; in some an admin asks now
and then to delete the group (DeleteGroups: refused while it has members).
Besides every check of the replication simulator:
- no committed offset goes back: an OffsetFetch answered by any coordinator is at least
  every commit acknowledged before it was sent (a failover keeps every acknowledged
  commit);
- generations fence stale members: no partition is assigned to two members in one
  generation (two coordinators never answer SyncGroup for one generation differently);
  a restarted static member's old self commits nothing (its late commit, with offsets
  above what its new self commits next, would make an offset go back), and is told so:
  a request naming an instance id the coordinator holds for another member id is refused
  FENCED_INSTANCE_ID (KIP-345), not as a member merely unknown (that client would join
  again and fence its new self in turn);
- no committed generation holds more members than group.max.size;
- a group's tombstone (DeleteGroups) follows a committed generation with no members: a
  group with members is never deleted (after a deletion the offsets it took are gone, so
  offsets are no longer checked against earlier commits in that seed);
- liveness: once everything heals, a consumer commits and reads its commit back within a
  bound.
A failing seed prints the command that reproduces it; `--trace` prints its events.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import random
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

from tidelog.core.replica import Role
from tidelog.errors import TidelogError
from tidelog.groups.messages import (
    Commit,
    DeleteGroup,
    FetchOffsets,
    GroupConfig,
    Heartbeat,
    Join,
    JoinResult,
    Leave,
    Reply,
    Request,
    Sync,
    SyncResult,
    Write,
)
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.testing.faults import MICROS_PER_TICK
from tidelog.testing.groups import GroupNodes
from tidelog.testing.sim import Run, SeedResult
from tidelog.types import NodeId

GROUP = "g"
TOPIC = "t"
PARTITIONS = 4
CONSUMERS = 3
SESSION_MS = 40 * MICROS_PER_TICK
REBALANCE_MS = 30 * MICROS_PER_TICK
CLIENT_TIMEOUT = 60 * MICROS_PER_TICK  # a request unanswered this long is given up
ACT_RATE = 0.02  # per microtick, per consumer with nothing in flight
LIVENESS_TICKS_MAX = 1500
CONFIG = GroupConfig(
    session_timeout_ms_min=1,
    commit_timeout_ms=20 * MICROS_PER_TICK,
    offsets_retention_ms=1 << 40,
    offsets_retention_check_interval_ms=1 << 40,
)
# Errors after which a member joins again (with its member id, or without).
REJOIN = {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION}
FORGET = {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID}
# A member's refusals a coordinator decides after its instance-id check (KIP-345).
MEMBER_ERRORS = {
    ErrorCode.UNKNOWN_MEMBER_ID,
    ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.REBALANCE_IN_PROGRESS,
}
STATIC_SHARE = 0.4  # of consumers, drawn per seed
# Of the seeds, how many churn static members (all static, restarting this often when
# stable), and how many have an admin that asks to delete the group (this often).
CHURN_SHARE = 0.3
CHURN_RESTART_SHARE = 0.1
ADMIN_SHARE = 0.5
ADMIN_RATE = 0.001  # per microtick
# group.max.size per seed: (size, share of the seeds); the rest leave it at its default.
MAX_SIZES = ((1, 0.1), (2, 0.2))


def draw_max_size(seed: int) -> int:
    """The seed's group.max.size, drawn from a generator of its own."""
    roll = random.Random(f"group max size {seed}").random()
    for size, share in MAX_SIZES:
        if roll < share:
            return size
        roll -= share
    return CONFIG.group_max_size


def draw_churn(seed: int) -> tuple[bool, bool]:
    """Whether the seed churns static members, and whether an admin deletes the group,
    from a generator of their own (a seed with neither runs as before they existed)."""
    rng = random.Random(f"group churn {seed}")
    return rng.random() < CHURN_SHARE, rng.random() < ADMIN_SHARE


def assign(members: list[str]) -> dict[str, bytes]:
    """The leader's assignment: the partitions round robin over the sorted member ids."""
    ordered = sorted(members)
    owned: dict[str, list[str]] = {member: [] for member in ordered}
    for partition in range(PARTITIONS):
        owned[ordered[partition % len(ordered)]].append(str(partition))
    return {member: ",".join(parts).encode() for member, parts in owned.items()}


def sync_body(generation: int, member_id: str, members: list[str], instance: str | None) -> Sync:
    """A SyncGroup of group GROUP; a leader (given the `members`) assigns them the partitions
    round robin (`assign`), a follower (given none) assigns nothing."""
    plan = assign(members) if members else {}
    return Sync(GROUP, generation, member_id, tuple(plan.items()), group_instance_id=instance)


def partitions_of(assignment: bytes) -> tuple[int, ...]:
    return tuple(int(part) for part in assignment.decode().split(",") if part)


@dataclass
class GroupChecker:
    """What consumers were told and what the coordinators stored, checked as it happens."""

    violations: list[str]
    max_size: int = CONFIG.group_max_size
    events: int = 0  # a clock of client events: acknowledgements and sends
    acked: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # p: (event, offset)
    commits_acked: int = 0
    fetches_checked: int = 0
    # The committed group records, in log order: an era ends with the group's tombstone.
    next_offset: int = 0
    era: int = 0
    stored: dict[tuple[int, int], dict[str, tuple[int, ...]]] = field(default_factory=dict)
    last_generation: int = 0
    syncs_checked: int = 0
    last_members: int = 0  # how many members the last committed generation names
    deleted: bool = False  # a tombstone was committed: earlier commits are gone
    # Per node, how many members the last group record its coordinator proposed names
    # (committed or not): a coordinator that found every member gone writes an empty
    # generation, and that write may fail (NOT_ENOUGH_REPLICAS) while the group stays empty.
    proposed_members: dict[NodeId, int] = field(default_factory=dict)

    def tick(self) -> int:
        self.events += 1
        return self.events

    def on_commit_acked(self, partition: int, offset: int) -> None:
        self.commits_acked += 1
        self.acked.setdefault(partition, []).append((self.tick(), offset))

    def on_fetch(self, sent: int, offsets: dict[tuple[str, int], object], node: NodeId) -> None:
        if self.deleted:
            return
        self.fetches_checked += 1
        for partition, acks in self.acked.items():
            floor = max((offset for at, offset in acks if at < sent), default=None)
            if floor is None:
                continue
            committed = offsets.get((TOPIC, partition))
            got = getattr(committed, "offset", None)
            if got is None or got < floor:
                self.violations.append(
                    f"offset went back: coordinator {node} answered {got} for partition "
                    f"{partition}, but {floor} was acknowledged before the fetch was sent"
                )

    def on_write(self, node: NodeId, write: Write) -> None:
        for key, value in zip(write.keys, write.values, strict=True):
            if value is not None and json.loads(key).get("type") == "group":
                self.proposed_members[node] = len(json.loads(value)["members"])

    def on_record(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """A committed record (each offset once): a group's generation, checked."""
        if offset < self.next_offset:
            return
        self.next_offset = offset + 1
        if key is None or json.loads(key).get("type") != "group":
            return
        if value is None:
            # DeleteGroups refuses a group with members: the last generation committed
            # names none, or a coordinator had found them all gone (its empty generation
            # not written) as Kafka's does.
            if self.last_members and 0 not in self.proposed_members.values():
                self.violations.append(
                    f"the group was deleted at offset {offset}, its last generation "
                    f"{self.last_generation} naming {self.last_members} members"
                )
            self.era += 1
            self.last_generation = 0
            self.deleted = True
            self.proposed_members.clear()
            return
        content = json.loads(value)
        generation = int(content["generation"])
        if generation < self.last_generation:
            self.violations.append(
                f"generation went back in the log at offset {offset}: {generation} after "
                f"{self.last_generation}"
            )
        self.last_generation = generation
        self.last_members = len(content["members"])
        if len(content["members"]) > self.max_size:
            self.violations.append(
                f"generation {generation} at offset {offset} holds "
                f"{len(content['members'])} members, above group.max.size {self.max_size}"
            )
        owned: dict[str, tuple[int, ...]] = {}
        claimed: dict[int, str] = {}
        for member in content["members"]:
            parts = partitions_of(base64.b64decode(member["assignment"]))
            owned[member["member_id"]] = parts
            for partition in parts:
                if partition in claimed:
                    self.violations.append(
                        f"generation {generation} at offset {offset} gives partition "
                        f"{partition} to {claimed[partition]} and {member['member_id']}"
                    )
                claimed[partition] = member["member_id"]
        if owned:
            self.stored[(self.era, generation)] = owned

    def on_assignment(self, generation: int, member: str, partitions: tuple[int, ...]) -> None:
        """A SyncGroup answer must be what the committed record of its generation says:
        a stale member is never handed a generation the log does not hold."""
        self.syncs_checked += 1
        stored = self.stored.get((self.era, generation), {})
        if stored.get(member) != partitions:
            self.violations.append(
                f"{member} was given partitions {partitions} in generation {generation}, "
                f"but the committed generation says {stored.get(member)}"
            )


@dataclass
class Consumer:
    """One consumer of the group, as a Kafka client: one request in flight at a time."""

    name: str
    member_id: str = ""
    generation: int = -1
    leader: bool = False
    members: list[str] = field(default_factory=list)
    phase: str = "join"  # join -> sync -> fetch -> stable; "gone" after a leave
    partitions: tuple[int, ...] = ()
    positions: dict[int, int] = field(default_factory=dict)
    in_flight: tuple[int, Request, int, int] | None = None  # request, body, sent, event
    target: NodeId | None = None
    # Joins as at JoinGroup v4+: without a member id it is given one first (KIP-394).
    requires_known_id: bool = False
    # Its group instance id, if it is a static member (KIP-345): it restarts now and then
    # (joins without its member id, taking its own place), leaving a zombie commit behind.
    instance: str | None = None
    # A commit of its old partitions in its old generation, made as it learns of a
    # rebalance and delivered once it is stable in the next one (a commit that was long on
    # its way): the generation must fence it.
    zombie: Commit | None = None

    def rejoin(self, forget: bool = False) -> None:
        self.phase = "join"
        self.partitions = ()
        if forget:
            self.member_id, self.generation = "", -1


def is_zombie(commit: Commit, consumer: Consumer) -> bool:
    """A commit of the consumer's older self: another generation, or (a static member
    restarted in the same generation) another member id."""
    return commit.generation != consumer.generation or commit.member_id != consumer.member_id


@dataclass
class GroupRun:
    """One seed: the replication `Run`, coordinators on its nodes, consumers, checks."""

    seed: int
    replicas: int
    ticks: int
    disk: bool = False
    trace: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        self.run = Run(
            self.seed, self.replicas, self.ticks, disk=self.disk, trace=self.trace, offsets_log=True
        )
        self.cluster = self.run.cluster
        self.rng = random.Random(self.seed * 7919 + 1)
        max_size = draw_max_size(self.seed)
        self.nodes = GroupNodes(self.cluster, replace(CONFIG, group_max_size=max_size), {TOPIC})
        self.nodes.listeners.append(self.on_reply)
        self.checker = GroupChecker(self.run.checker.violations, max_size)
        self.nodes.record_listeners.append(self.checker.on_record)
        self.nodes.write_listeners.append(self.checker.on_write)
        # Which consumers join as at v4+, and which are static, is drawn apart from `rng`.
        versions = random.Random(f"join versions {self.seed}")
        churn, admin = draw_churn(self.seed)
        self.restart_share = CHURN_RESTART_SHARE if churn else 0.02
        self.consumers = [
            Consumer(
                f"c{i}",
                requires_known_id=versions.random() < 0.5,
                instance=f"i{i}" if versions.random() < STATIC_SHARE or churn else None,
            )
            for i in range(1, CONSUMERS + 1)
        ]
        self.admin = Consumer("admin", phase="admin") if admin else None
        self.admin_rng = random.Random(f"group admin {self.seed}")
        self.zombies_fenced = 0  # FENCED_INSTANCE_ID answers to a static member's zombie
        self.requests = 0
        self.ids_given_first = 0  # MEMBER_ID_REQUIRED answers
        self.refused_full = 0  # GROUP_MAX_SIZE_REACHED answers
        self.deletes_refused = 0  # NON_EMPTY_GROUP answers to the admin
        self.waiting: dict[int, Consumer] = {}
        self.healed = False
        self.committed_after_heal = False  # a commit acknowledged after healing
        self.read_back_after_heal = False  # and a fetch sent after it, answered and checked

    def note(self, text: str) -> None:
        self.cluster.note(text)

    # ---------------------------------------------------------------- clients ---------
    def find_coordinator(self, consumer: Consumer) -> NodeId:
        """FindCoordinator: a random node names the leader it knows (or itself)."""
        if consumer.target is not None and self.rng.random() < 0.9:
            return consumer.target
        asked = self.rng.choice(self.cluster.ids)
        replica = self.cluster.nodes[asked].replica
        if replica is not None:
            state = replica.status()
            if state.role is Role.LEADER:
                return asked
            if state.leader_id is not None and self.rng.random() < 0.8:
                return NodeId(state.leader_id)
        return self.rng.choice(self.cluster.ids)

    def send(self, consumer: Consumer, body: Request) -> None:
        self.requests += 1
        request = self.requests
        node = self.find_coordinator(consumer)
        consumer.target = node
        consumer.in_flight = (request, body, self.cluster.now, self.checker.tick())
        self.waiting[request] = consumer
        self.note(f"{consumer.name} -> {node}: #{request} {type(body).__name__}")
        self.nodes.request(node, request, body)

    def act(self, consumer: Consumer) -> None:
        if consumer.in_flight is not None:
            request, _, sent, _ = consumer.in_flight
            if self.cluster.now - sent < CLIENT_TIMEOUT:
                return
            self.waiting.pop(request, None)  # given up: find the coordinator again
            consumer.in_flight, consumer.target = None, None
            self.note(f"{consumer.name}: #{request} timed out")
        if self.rng.random() >= ACT_RATE:
            return
        if consumer.zombie is not None and consumer.phase == "stable":
            zombie, consumer.zombie = consumer.zombie, None
            if is_zombie(zombie, consumer):  # else it is no zombie: drop it
                self.send(consumer, zombie)
                return
        if consumer.phase == "gone":
            consumer.phase = "join" if self.rng.random() < 0.2 else "gone"
            return
        if consumer.phase == "join":
            self.send(consumer, self.join_body(consumer))
        elif consumer.phase == "sync":
            members = consumer.members if consumer.leader else []
            body = sync_body(consumer.generation, consumer.member_id, members, consumer.instance)
            self.send(consumer, body)
        elif consumer.phase == "fetch":
            partitions = tuple((TOPIC, p) for p in range(PARTITIONS))
            self.send(consumer, FetchOffsets(GROUP, partitions))
        else:
            self.act_stable(consumer)

    def join_body(self, consumer: Consumer) -> Join:
        return Join(
            GROUP,
            consumer.member_id,
            consumer.instance,
            consumer.name,
            "sim",
            SESSION_MS,
            REBALANCE_MS,
            "consumer",
            (("range", TOPIC.encode()),),
            require_known_member_id=consumer.requires_known_id,
        )

    def act_stable(self, consumer: Consumer) -> None:
        roll = self.rng.random()
        if roll < 0.4:
            beat = Heartbeat(GROUP, consumer.generation, consumer.member_id, consumer.instance)
            self.send(consumer, beat)
        elif roll < 0.8 and consumer.partitions:
            body = self.commit_body(consumer, consumer.generation, consumer.partitions)
            self.send(consumer, body)
        elif roll < 0.98 - self.restart_share or (roll < 0.98 and consumer.instance is None):
            self.send(consumer, FetchOffsets(GROUP, None))
        elif roll < 0.98:  # a static member restarts: its old self commits late
            if consumer.partitions:
                old = consumer.generation, consumer.partitions
                consumer.zombie = self.commit_body(consumer, *old)
            self.note(f"{consumer.name}: restarts (static member {consumer.instance})")
            consumer.rejoin(forget=True)
        else:
            leave = Leave(GROUP, (consumer.member_id,), (), (consumer.instance,))
            self.send(consumer, leave)

    def commit_body(
        self, consumer: Consumer, generation: int, partitions: tuple[int, ...]
    ) -> Commit:
        offsets = []
        for partition in partitions:
            position = consumer.positions.get(partition, 0) + self.rng.randint(1, 3)
            consumer.positions[partition] = position
            offsets.append(((TOPIC, partition), (position, -1, "")))
        return Commit(GROUP, generation, consumer.member_id, tuple(offsets), consumer.instance)

    def on_reply(self, node: NodeId, reply: Reply) -> None:
        consumer = self.waiting.pop(reply.request, None)
        if consumer is None or consumer.in_flight is None or consumer.in_flight[0] != reply.request:
            return  # given up before the answer came
        _, body, _, sent = consumer.in_flight
        consumer.in_flight = None
        outcome = reply.error.name if reply.error is not ErrorCode.NONE else "ok"
        self.note(f"{consumer.name} <- {node}: #{reply.request} {outcome}")
        zombie = isinstance(body, Commit) and is_zombie(body, consumer)
        if zombie and reply.error is ErrorCode.FENCED_INSTANCE_ID:
            self.zombies_fenced += 1
        elif zombie and reply.error in MEMBER_ERRORS:
            assert isinstance(body, Commit)
            self.check_fenced(node, body, reply.error)
        if reply.error is ErrorCode.MEMBER_ID_REQUIRED:
            assert isinstance(reply.result, JoinResult)
            consumer.member_id = reply.result.member_id  # and it joins again with it
            self.ids_given_first += 1
            return
        if reply.error is not ErrorCode.NONE:
            if not zombie:  # the zombie's refusal is expected, and changes nothing
                self.on_error(consumer, reply.error)
            return
        if isinstance(body, Join):
            assert isinstance(reply.result, JoinResult)
            result = reply.result
            consumer.member_id, consumer.generation = result.member_id, result.generation
            consumer.leader = result.leader == result.member_id
            consumer.members = [member for member, _, _ in result.members]
            consumer.phase = "sync"
            self.note(f"{consumer.name}: {result.member_id} in generation {result.generation}")
        elif isinstance(body, Sync):
            assert isinstance(reply.result, SyncResult)
            consumer.partitions = partitions_of(reply.result.assignment)
            self.checker.on_assignment(consumer.generation, consumer.member_id, consumer.partitions)
            consumer.phase = "fetch"
            self.note(f"{consumer.name}: partitions {consumer.partitions}")
        elif isinstance(body, FetchOffsets):
            assert isinstance(reply.result, dict)
            self.checker.on_fetch(sent, reply.result, node)
            if self.healed:
                self.read_back_after_heal = self.read_back_after_heal or self.committed_after_heal
            if consumer.phase == "fetch":
                for (_, partition), committed in reply.result.items():
                    consumer.positions[partition] = getattr(committed, "offset", 0)
                consumer.phase = "stable"
        elif isinstance(body, Commit):
            assert isinstance(reply.result, dict)
            for ((_, partition), code), (_, (offset, _, _)) in zip(
                reply.result.items(), body.offsets, strict=True
            ):
                if code is ErrorCode.NONE:
                    self.checker.on_commit_acked(partition, offset)
                    self.committed_after_heal = self.committed_after_heal or self.healed
        elif isinstance(body, Leave):
            consumer.rejoin(forget=True)
            consumer.phase = "gone"

    def check_fenced(self, node: NodeId, body: Commit, error: ErrorCode) -> None:
        """A zombie's commit refused as it was handled (the answer is synchronous): if the
        coordinator holds its instance id for another member id, it must say FENCED."""
        coordinator = self.nodes.coordinator(node)
        group = None if coordinator is None else coordinator.groups.get(GROUP)
        holder = None if group is None else group.static_member(body.group_instance_id)
        if holder is not None and holder.member_id != body.member_id:
            self.run.checker.fail(
                f"coordinator {node} answered {error.name} to {body.member_id}, whose instance "
                f"{body.group_instance_id} it holds for {holder.member_id} (FENCED_INSTANCE_ID)"
            )

    def on_error(self, consumer: Consumer, error: ErrorCode) -> None:
        if error is ErrorCode.NON_EMPTY_GROUP:
            self.deletes_refused += 1
        elif error is ErrorCode.GROUP_MAX_SIZE_REACHED:  # fatal to the client: it goes away
            self.refused_full += 1
            consumer.rejoin(forget=True)
            consumer.phase = "gone"
        elif error in FORGET:
            consumer.rejoin(forget=True)
        elif error in REJOIN:
            if consumer.partitions and self.rng.random() < 0.5:
                old = consumer.generation, consumer.partitions
                consumer.zombie = self.commit_body(consumer, *old)
            consumer.rejoin()
        elif error in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            consumer.target = None
            if consumer.phase == "sync":
                consumer.rejoin()

    # ---------------------------------------------------------------- the run ---------
    def step(self, faults: bool) -> None:
        self.run.step(self.run.faults if faults else None)
        self.nodes.step()
        for consumer in self.consumers:
            self.act(consumer)
        self.act_admin()

    def act_admin(self) -> None:
        """The admin asks, now and then, to delete the group (DeleteGroups)."""
        admin = self.admin
        if admin is None or self.healed:
            return
        if admin.in_flight is not None:
            request, _, sent, _ = admin.in_flight
            if self.cluster.now - sent < CLIENT_TIMEOUT:
                return
            self.waiting.pop(request, None)
            admin.in_flight, admin.target = None, None
        if self.admin_rng.random() < ADMIN_RATE:
            self.send(admin, DeleteGroup(GROUP))

    def execute(self) -> SeedResult:
        run = self.run
        try:
            for _ in range(self.ticks * MICROS_PER_TICK):
                self.step(faults=True)
                if run.checker.violations:
                    break
            else:
                self.liveness()
        except AssertionError as error:
            run.checker.fail(f"assertion failed at t={self.cluster.now}: {error!r}")
        except TidelogError as error:  # IllegalTransition, say: never expected here
            run.checker.fail(f"{type(error).__name__} at t={self.cluster.now}: {error}")
        for violation in run.checker.violations:
            self.note(f"VIOLATION {violation}")
        stops = dict(self.cluster.stops)
        stops["commits acknowledged"] = self.checker.commits_acked
        stops["fetches checked"] = self.checker.fetches_checked
        stops["assignments checked"] = self.checker.syncs_checked
        stops["member ids given first"] = self.ids_given_first
        stops["zombies fenced"] = self.zombies_fenced
        stops["refused at group.max.size"] = self.refused_full
        stops["deletes refused (members)"] = self.deletes_refused
        stops["groups deleted"] = int(self.checker.deleted)
        return SeedResult(run.checker.violations, stops)

    def liveness(self) -> None:
        """Heal everything; then a commit acknowledged and read back within a bound."""
        self.run.heal_all()
        self.healed = True
        for consumer in self.consumers:
            if consumer.phase == "gone":
                consumer.phase = "join"
        deadline = self.cluster.now + LIVENESS_TICKS_MAX * MICROS_PER_TICK
        while self.cluster.now < deadline:
            self.step(faults=False)
            if self.run.checker.violations or self.read_back_after_heal:
                return
        self.run.checker.fail(
            f"liveness: after healing, no commit acknowledged and read back in "
            f"{LIVENESS_TICKS_MAX} ticks (committed: {self.committed_after_heal})"
        )


def run_seed(seed: int, replicas: int, ticks: int, disk: bool, trace: bool = False) -> SeedResult:
    printer = print if trace else None
    return GroupRun(seed, replicas, ticks, disk=disk, trace=printer).execute()


def reproduce_command(seed: int, replicas: int, ticks: int, disk: bool) -> str:
    return (
        f"python -m tidelog.testing.group_sim --seeds 1 --first-seed {seed} "
        f"--replicas {replicas} --ticks {ticks}{' --disk' if disk else ''} --trace"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tidelog.testing.group_sim", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--replicas", type=int, choices=(3, 5), default=3)
    parser.add_argument("--ticks", type=int, default=400, help="ticks of the safety phase")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--disk", action="store_true")
    parser.add_argument("--trace", action="store_true")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.ticks < 1 or args.jobs < 1:
        parser.error("--seeds, --ticks and --jobs must be positive")
    if args.trace and args.seeds != 1:
        parser.error("--trace prints the events of one seed: use it with --seeds 1")
    if not args.trace:
        logging.getLogger("tidelog").setLevel(logging.ERROR)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    started = time.monotonic()
    violations = 0
    totals: dict[str, int] = {}
    n = len(seeds)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        parallel = args.jobs > 1 and not args.trace
        mapper = pool.map if parallel else map
        results = mapper(
            run_seed,
            seeds,
            [args.replicas] * n,
            [args.ticks] * n,
            [args.disk] * n,
            [args.trace] * n,
        )
        for seed, result in zip(seeds, results, strict=True):
            for key, value in result.stops.items():
                totals[key] = totals.get(key, 0) + value
            if result.violations:
                violations += len(result.violations)
                command = reproduce_command(seed, args.replicas, args.ticks, args.disk)
                print(f"seed {seed}: {result.violations[0]}  (reproduce: {command})")
    elapsed = time.monotonic() - started
    print(f"# {args.seeds / elapsed * 60:.0f} seeds per minute ({elapsed:.1f} s)", file=sys.stderr)
    print("# " + ", ".join(f"{key}: {value}" for key, value in sorted(totals.items())))
    print(f"{args.seeds} seeds, {violations} violations")
    return 0 if violations == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
