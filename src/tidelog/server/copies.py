"""Which partitions this node holds a copy of: the node's side of the metadata image's
topics and reassignments (KIP-455, server/reassignment.py).

Rules of this file:
- A node holds a copy of a partition while the image names it among the partition's
  members (`MetadataImage.members`: the replicas, and in quorum mode the retiring copies);
  it opens the copy when it becomes one, and stops it and deletes its directory once it
  is none (as a deleted topic's). Changes are gathered while the metadata log is applied
  and carried out once that batch of commands is (`flush`), from the image as it is then:
  a node replaying a log in which a partition was made and then moved away from it opens
  nothing. At most `FLUSH_CHUNK` at a time: a topic of thousands of partitions opens in
  chunks, the event loop running between two (node liveness's pings, the partitions
  already open), each chunk from the image as it is then.
- A copy is made with the partition's first voter set (`TopicInfo.born_of`: its replicas
  and their directories when it was made, core/config.py's `replicas` and `directories`)
  and the image's members and voter target now (`members`, `target`); a copy that lives
  on is handed every change as `SetMembers`, and every few ticks (`refresh`) each replica
  is checked to hold the image's members (a replica started again, after a repair, holds
  those it was made with), so the core follows the image.
- `applied` is the assignment version (`Assignment.version`) each replica here took, for
  the leader's report (server/truth.py): only a leader holding the current assignment may
  let a retiring copy go.
- A new partition's preferred replica campaigns at once (server/leadership.py); a copy
  made by a move never does: it joins as a learner and votes once its leader adds it.
- A copy whose log cannot be opened (a failing disk) is tried again every
  RETENTION_EVERY_TICKS (`open_unopened`).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from concurrent.futures import Executor
from pathlib import Path
from typing import Final, Protocol

from tidelog.protocol.peer import PartitionKey
from tidelog.server.config import BrokerConfig
from tidelog.server.data_dir import CopiesHeld
from tidelog.server.disk_health import DiskHealth, is_disk_error
from tidelog.server.groups import GroupCoordinator
from tidelog.server.isr_control import IsrControl
from tidelog.server.logs import partition_fields
from tidelog.server.metadata import OFFSETS_TOPIC, MetadataImage, TopicInfo
from tidelog.server.partition import OpenedLog, PartitionPlan, PartitionRunner
from tidelog.server.partition_inputs import Campaign, SetMembers
from tidelog.server.settled import FULL_PASS_EVERY
from tidelog.server.topic_config import TopicConfig
from tidelog.types import DirectoryId, NodeId

log = logging.getLogger("tidelog.broker")
Nodes = tuple[NodeId, ...]
Dirs = tuple[DirectoryId, ...]


FLUSH_CHUNK: Final = 32
"""Copies opened (or handed their members, or stopped) in one round of the event loop."""


class Host(Protocol):
    """What this module needs of its node (tidelog.server.broker.Broker)."""

    config: BrokerConfig
    node_id: NodeId
    image: MetadataImage
    runners: dict[PartitionKey, PartitionRunner]
    coordinators: dict[int, GroupCoordinator]
    leader_hints: dict[PartitionKey, tuple[int, NodeId]]
    campaigning: dict[PartitionKey, int]
    disk: DiskHealth
    isr: IsrControl
    copies_held: CopiesHeld

    def partition_dir(self, key: PartitionKey) -> Path: ...

    @property
    def executor(self) -> Executor: ...  # where new copies' logs open

    def plan_partition(
        self, key: PartitionKey, replicas: Nodes, config: TopicConfig, directories: Dirs, *,
        members: Nodes, target: Nodes, topic_id: str | None = None,
    ) -> PartitionPlan: ...  # fmt: skip

    def start_partition(self, plan: PartitionPlan, opened: OpenedLog) -> PartitionRunner: ...

    def fatal(self, error: BaseException) -> None: ...


def _nodes(nodes: tuple[int, ...]) -> tuple[NodeId, ...]:
    return tuple(NodeId(node) for node in nodes)


class Copies:
    """This node's copies of the partitions (see the rules)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.dirty: dict[PartitionKey, bool] = {}  # to sync at `flush`; True: just made
        self.flushing = False  # a task carries the changes out
        self.opening: set[PartitionKey] = set()  # logs opening in worker threads
        self.unopened: dict[PartitionKey, TopicInfo] = {}  # a failing disk kept closed
        self.stopping: set[PartitionKey] = set()
        self.applied: dict[PartitionKey, int] = {}  # the assignment version each took
        self.refreshes = 0  # `refresh` looks again once metadata is applied, or every
        self.refreshed_at = -1  # FULL_PASS_EVERY-th time (server/settled.py)

    # ---------------------------------------------------------------- changes ----------
    def created(self, topic: TopicInfo) -> None:
        for partition in range(topic.partitions):
            self.dirty[PartitionKey(topic.name, partition)] = True

    def moved(self, key: PartitionKey) -> None:
        self.dirty.setdefault(key, False)

    def flush(self) -> None:
        """Carry out the changes gathered (see the rules), in a task of its own."""
        if self.dirty and not self.flushing:
            self.flushing = True
            asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        """A chunk at a time: what is no new copy at once, the new copies together."""
        try:
            while self.dirty:
                chunk = [(key, self.dirty.pop(key)) for key in list(self.dirty)[:FLUSH_CHUNK]]
                self.claim([key for key, _ in chunk])
                new = []
                for key, campaign in chunk:
                    info = self.to_open(key)
                    if info is None:
                        self.sync(key, campaign=campaign)
                    else:
                        new.append((key, info, campaign))
                await self.open_many(new)
        except Exception as error:  # a bug: stop the node (fail-stop)
            self.host.fatal(error)
            raise
        finally:
            self.flushing = False

    def to_open(self, key: PartitionKey) -> TopicInfo | None:
        """The topic of `key` when this node is to make its copy now, else None."""
        host = self.host
        info = host.image.topics.get(key.topic)
        if (
            info is None
            or key.partition >= info.partitions
            or key in host.runners
            or key in self.stopping
            or host.node_id not in host.image.members((key.topic, key.partition))
        ):
            return None
        return info

    def claim(self, keys: list[PartitionKey]) -> None:
        """The copies of `keys` about to be made, claimed in the data directory with one
        sync (server/data_dir.py's CopiesHeld), not one each."""
        copies = []
        for key in keys:
            info = self.to_open(key)
            if info is not None:
                copies.append((info.topic_id.hex, key.partition))
        self.host.copies_held.claim_all(copies)

    def sync(self, key: PartitionKey, *, campaign: bool = False) -> None:
        """Open, hand the members to, or stop this node's copy of `key`, as the image says."""
        host = self.host
        image = host.image
        info = image.topics.get(key.topic)
        if info is None or key.partition >= info.partitions:
            return  # deleted: `delete_replicas` stops it
        ours = host.node_id in image.members((key.topic, key.partition))
        runner = host.runners.get(key)
        if runner is None and ours:
            self.open(key, info, campaign=campaign)
        elif runner is not None and not ours:
            asyncio.get_running_loop().create_task(self.remove(key))
        elif runner is not None:
            self.hand_members(key, runner)
        if info.config.isr_mode and ours:
            host.isr.hand_record(key)  # the controller names its leader

    def members_of(self, key: PartitionKey) -> tuple[tuple[NodeId, ...], tuple[NodeId, ...]]:
        """The members and voter target the image gives the partition's replicas, (), ()
        for one never moved (its replicas then)."""
        image = self.host.image
        image_key = (key.topic, key.partition)
        if image_key not in image.assignments:
            return (), ()
        return _nodes(image.members(image_key)), _nodes(image.voter_target(image_key))

    def version_of(self, key: PartitionKey) -> int:
        moved = self.host.image.assignments.get((key.topic, key.partition))
        return 0 if moved is None else moved.version

    def hand_members(self, key: PartitionKey, runner: PartitionRunner) -> None:
        members, target = self.members_of(key)
        if not members:
            return
        version = self.version_of(key)
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def taken(future: asyncio.Future[bool]) -> None:
            if not future.cancelled() and future.result() and self.host.runners.get(key) is runner:
                self.applied[key] = max(version, self.applied.get(key, 0))

        done.add_done_callback(taken)
        runner.submit(SetMembers(members, target, done))

    def refresh(self) -> None:
        """Every few ticks: each partition of the image is held here exactly when this node
        is one of its members, and each replica holds the image's members."""
        host = self.host
        self.refreshes += 1
        version = host.image.applied_offset
        if version == self.refreshed_at and self.refreshes % FULL_PASS_EVERY:
            return  # no metadata applied since the last pass (server/settled.py)
        self.refreshed_at = version
        for info in list(host.image.topics.values()):
            for partition in range(info.partitions):
                key = PartitionKey(info.name, partition)
                ours = host.node_id in host.image.members((info.name, partition))
                runner = host.runners.get(key)
                if key in self.stopping or key in self.unopened or key in self.opening:
                    continue
                if (runner is None) == ours:
                    self.sync(key)  # opens or stops it
                elif runner is not None:
                    members, _ = self.members_of(key)
                    if members and set(runner.status().replicas) != set(members):
                        self.hand_members(key, runner)

    # ---------------------------------------------------------------- copies -----------
    def open(self, key: PartitionKey, info: TopicInfo, *, campaign: bool) -> None:
        """Open this node's copy of `key` now, on the loop."""
        if key in self.stopping or key in self.opening:
            return  # `refresh` opens it once the old copy is gone
        try:
            plan = self.plan(key, info)
            runner = self.host.start_partition(plan, plan.open_log())
        except OSError as error:
            self.not_opened(key, info, error)
            return
        self.opened(key, info, runner, campaign=campaign)

    async def open_many(self, copies: list[tuple[PartitionKey, TopicInfo, bool]]) -> None:
        """Open these copies (key, topic, whether new): their logs in worker threads
        together (each a directory made and synced: the file system syncs them as one),
        then their runners on the loop, each if the image still names this node."""
        host = self.host
        plans = []
        for key, info, campaign in copies:
            if key in self.stopping or key in self.opening or key in host.runners:
                continue
            plans.append((self.plan(key, info), info, campaign))
            self.opening.add(key)
        loop = asyncio.get_running_loop()
        logs = await asyncio.gather(
            *(loop.run_in_executor(host.executor, plan.open_log) for plan, _, _ in plans),
            return_exceptions=True,
        )
        for (plan, info, campaign), opened in zip(plans, logs, strict=True):
            key = plan.key
            self.opening.discard(key)
            if isinstance(opened, OSError):
                self.not_opened(key, info, opened)
                continue
            if isinstance(opened, BaseException):
                raise opened  # a bug: the node stops (`_flush`)
            if key in host.runners or self.to_open(key) is None:
                opened.release()  # moved away, or deleted, while it opened
                continue
            try:
                runner = host.start_partition(plan, opened)
            except OSError as error:
                self.not_opened(key, info, error)
                continue
            self.opened(key, info, runner, campaign=campaign)

    def plan(self, key: PartitionKey, info: TopicInfo) -> PartitionPlan:
        born, directories = info.born_of(key.partition)
        members, target = self.members_of(key)
        return self.host.plan_partition(
            key,
            _nodes(born),
            info.config,
            directories,
            members=members,
            target=target,
            topic_id=info.topic_id.hex,
        )

    def not_opened(self, key: PartitionKey, info: TopicInfo, error: OSError) -> None:
        """A failing disk kept `key` closed: tried again later (`open_unopened`)."""
        if not is_disk_error(error):
            raise error
        self.host.disk.on_failure(key, error)
        self.unopened[key] = info

    def opened(
        self, key: PartitionKey, info: TopicInfo, runner: PartitionRunner, *, campaign: bool
    ) -> None:
        host = self.host
        self.unopened.pop(key, None)
        self.applied[key] = self.version_of(key)
        replicas = info.replicas[key.partition]
        log.info(
            "hosting %s-%d (replicas %s)",
            key.topic,
            key.partition,
            list(replicas),
            extra=partition_fields(key.topic, key.partition),
        )
        preferred = campaign and not info.config.isr_mode and replicas[0] == host.node_id
        if preferred and runner.status().epoch == 0:
            runner.submit(Campaign())  # the preferred leader starts at once,
            host.campaigning[key] = host.config.election_ticks  # and tries each tick

    def open_unopened(self) -> None:
        """Try again to open the partitions a failing disk kept closed."""
        for key, info in list(self.unopened.items()):
            current = self.host.image.topics.get(key.topic)
            del self.unopened[key]
            if current is not None and current.topic_id == info.topic_id:
                self.sync(key)

    async def remove(self, key: PartitionKey) -> None:
        """This node holds no copy of `key` any more: stop it and delete its log."""
        host = self.host
        if key in self.stopping:
            return
        runner = host.runners.pop(key, None)
        if runner is None:
            return
        self.stopping.add(key)
        try:
            self.forget(key)
            await runner.stop()
            shutil.rmtree(host.partition_dir(key), ignore_errors=True)
            log.info(
                "removed %s-%d: this node holds no copy of it now",
                key.topic,
                key.partition,
                extra=partition_fields(key.topic, key.partition),
            )
        finally:
            self.stopping.discard(key)

    def forget(self, key: PartitionKey) -> None:
        host = self.host
        self.unopened.pop(key, None)
        self.applied.pop(key, None)
        host.leader_hints.pop(key, None)
        host.campaigning.pop(key, None)
        if key.topic == OFFSETS_TOPIC:
            host.coordinators.pop(key.partition, None)

    async def delete_replicas(self, topic: TopicInfo) -> None:
        """A topic deleted: every copy of it here stops and its log goes."""
        host = self.host
        for partition in range(topic.partitions):
            key = PartitionKey(topic.name, partition)
            self.forget(key)
            runner = host.runners.pop(key, None)
            if runner is None or key in self.stopping:
                continue
            self.stopping.add(key)  # a topic made again under its name waits for this
            try:
                await runner.stop()
                shutil.rmtree(host.partition_dir(key), ignore_errors=True)
            finally:
                self.stopping.discard(key)
            log.info(
                "deleted %s-%d",
                topic.name,
                partition,
                extra=partition_fields(topic.name, partition),
            )
