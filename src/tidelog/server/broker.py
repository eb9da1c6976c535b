"""One tidelog node: its partitions, the metadata log, the peer transport and the listeners.

Rules of this file:
- Every partition this node hosts is a `PartitionRunner`; so is the metadata partition,
  which every node hosts. Topics exist on a node once their creation is committed in the
  metadata log and applied here, in offset order.
- Only the real clock lives here: a ticker turns wall time into the core's ticks.
- A metadata command (create or delete a topic, a SCRAM credential, an ACL) may be asked
  of any node: one that does not lead the metadata log forwards it to the node that does
  (ForwardRequest over the authenticated peer link, as KRaft brokers forward admin
  requests), after authorizing the client itself, and answers once the command is applied
  here too. The controller takes at most FORWARDED_MAX at a time and only the command
  types of FORWARDABLE; a command is validated again when it is applied.
- DescribeQuorum may be asked of any node too: only the metadata log's leader knows how far
  each copy has come, so another node asks it (server/quorum_queries.py).
- Leaders tell the nodes that do not host their partition who leads (LeaderNotice), and
  every node tells the others its advertised Kafka listeners (`advertised_listen`, else
  `listen`) and its admin port (BrokerNotice), so any node
  can answer a Metadata request for any partition, and gather the cluster's status for
  its live page.
- SIGTERM stops the node cleanly (`tidelog.server.app` wires and runs it): listeners
  close, each partition finishes its round and closes its log.
- A disk that fails (ENOSPC, EIO, ...) stops no node: a partition whose log cannot be
  written waits for it (tidelog.server.partition), one that cannot be opened is opened
  again later. Only when the metadata log cannot be opened does the node not start
  (`tidelog.server.app`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

from tidelog.address import Address
from tidelog.clock import monotonic_ms, wall_ms
from tidelog.core.liveness import NodePing, NodePong
from tidelog.core.replica import ACKS_ALL, ReplicaConfig, Replication, Role
from tidelog.errors import RequestTimedOut
from tidelog.protocol.kafka_errors import ErrorCode, error_code_for
from tidelog.protocol.peer import (
    BrokerNotice,
    ElectPreferred,
    ForwardReply,
    ForwardRequest,
    LeaderNotice,
    PartitionKey,
    PeersNotice,
    QuorumAnswer,
    QuorumQuery,
)
from tidelog.server.acl import Authorizer
from tidelog.server.budget import RequestBytes
from tidelog.server.config import BrokerConfig
from tidelog.server.copies import Copies
from tidelog.server.data_dir import CopiesHeld, node_directory_id
from tidelog.server.disk_health import DiskHealth, Syncs
from tidelog.server.groups import GroupConfig, GroupCoordinator
from tidelog.server.isr_control import IsrControl, clean_start
from tidelog.server.joining import Joining
from tidelog.server.leadership import controlled_shutdown, hand_over, rebalance
from tidelog.server.liveness import Liveness
from tidelog.server.metadata import (
    METADATA_TOPIC,
    OFFSETS_TOPIC,
    Change,
    MetadataImage,
    TopicInfo,
    encode_command,
)
from tidelog.server.metadata_fields import place_replicas
from tidelog.server.metrics import NULL_METRICS, NodeMetrics
from tidelog.server.partition import (
    OnRound,
    OpenedLog,
    PartitionPlan,
    PartitionRunner,
    replica_opener,
)
from tidelog.server.partition_inputs import Campaign, Retain, Step, Tick
from tidelog.server.peers import PeerTransport
from tidelog.server.quorum import QuorumReport, report_of
from tidelog.server.quorum_queries import QuorumQueries
from tidelog.server.settled import NoticePass
from tidelog.server.throttles import ReplicationThrottles
from tidelog.server.tls import peer_contexts
from tidelog.server.topic_config import TopicConfig
from tidelog.server.truth import ClusterTruth
from tidelog.server.view import client_listener
from tidelog.types import NO_DIRECTORY, DirectoryId, Epoch, NodeId
from tidelog.wal import WalConfig
from tidelog.wal.batches import producer_batch

log = logging.getLogger("tidelog.broker")

NOTICE_EVERY_TICKS = 5
RETENTION_EVERY_TICKS = 100
FLUSH_INTERVAL_MS_WEAK = 1000
# The metadata log keeps every command: a node that restarts replays them all.
METADATA_CONFIG = TopicConfig(retention_ms=None)
SYNC_THREADS = 8
METADATA_APPLY_WAIT_S = 10.0
FORWARD_TIMEOUT_S = 15.0
FORWARDED_MAX = 256  # forwarded commands the controller commits at once
FORWARD_COMMAND_MAX_BYTES = 1024 * 1024
FORWARDABLE = frozenset(
    {
        "create_topic",
        "delete_topic",
        "create_partitions",
        "alter_configs",
        "alter_broker_configs",  # the replication throttles (server/broker_configs.py)
        "create_acls",
        "delete_acls",
        "upsert_scram",
        "delete_scram",
        "add_voter",  # KIP-853, UnregisterBroker (server/voters_api.py, members.py)
        "remove_voter",
        "unregister_broker",
        "voter_target",
        "partition_state",  # a leader's report (server/truth.py)
        "alter_reassignments",  # KIP-455 (server/reassign_api.py)
        # ISR mode (server/isr_control.py)
        "alter_partition",
        "register_broker",
        "replica_restarted",
        "shutdown_broker",
        "elect_preferred",
    }
)
# The field naming the node a forwarded command speaks for: only that node may send it.
SPEAKS_FOR: Final = {
    "partition_state": "leader",
    "alter_partition": "leader",
    "register_broker": "node",
    "replica_restarted": "node",
    "shutdown_broker": "node",
}
Outcome = tuple[ErrorCode, str | None, int]
"""A metadata command's error code, the error's message, and the log's offset after it."""


class Broker:
    """The state of one node, shared by the Kafka handlers and the admin endpoint."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = NodeId(config.node_id)
        self.executor = ThreadPoolExecutor(max_workers=SYNC_THREADS, thread_name_prefix="fsync")
        tls = None if config.tls is None else peer_contexts(config.tls)
        self.transport = PeerTransport(
            self.node_id, config.cluster_id, config.peers, self.on_peer_items, tls
        )
        self.runners: dict[PartitionKey, PartitionRunner] = {}
        self.image = MetadataImage()
        super_users = (p.strip() for p in config.super_users.split(";"))
        self.authorizer = Authorizer(config.authorizer, frozenset(filter(None, super_users)))
        self.leader_hints: dict[PartitionKey, tuple[int, NodeId]] = {}
        # Each node's advertised Kafka address per listener protocol, from its BrokerNotices.
        self.listener_addresses: dict[str, dict[NodeId, Address]] = {
            listener.protocol: {self.node_id: listener.address}
            for listener in config.advertised_listeners
        }
        self.metadata_key = PartitionKey(METADATA_TOPIC, 0)
        self.rng = random.Random()
        self.ticks = 0
        self.stopping = asyncio.Event()
        self.stopping_nodes: set[NodeId] = set()  # from BrokerNotices, and this node's own
        # Each other node's admin port on its peer host, from its BrokerNotices (the live
        # page gathers their status there).
        self.admin_ports: dict[NodeId, int] = {}
        self.request_bytes = RequestBytes(config.queued_max_request_bytes)
        self.kafka_connections = 0
        self.exit_code = 0
        self.group_config = GroupConfig(
            session_timeout_ms_min=config.group_min_session_timeout_ms,
            session_timeout_ms_max=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            group_max_size=config.group_max_size,
            offsets_retention_ms=config.offsets_retention_ms,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
        )
        self.coordinators: dict[int, GroupCoordinator] = {}
        self.creating_offsets_topic = False
        # Commands this node forwarded to the controller, by request id: (controller, future).
        self.forward_ids = itertools.count(1)
        self.forwarded: dict[int, tuple[NodeId, asyncio.Future[Outcome]]] = {}
        self.forwarding = 0  # commands of other nodes this node is committing
        self.quorum_queries = QuorumQueries(
            self.node_id, self.transport, self.metadata_key, self.quorum_here, self.controller_id
        )
        self.disk = DiskHealth()
        self.metrics = NodeMetrics() if config.metrics else NULL_METRICS
        self.syncs = Syncs(self.executor, self.transport.flush, metrics=self.metrics)
        # New partitions this node prefers, and the ticks left to campaign for them.
        self.campaigning: dict[PartitionKey, int] = {}
        self.directory_id = node_directory_id(config.data_dir)
        self.copies_held = CopiesHeld(config.data_dir)
        # Node liveness (server/liveness.py), and the partitions awake: only they tick.
        self.liveness = Liveness(
            self,
            self.transport.send,
            election_ticks=config.election_ticks,
            heartbeat_ticks=config.heartbeat_ticks,
        )
        self.awake: dict[PartitionKey, PartitionRunner] = {}
        # This NOTICE round's partitions: those awake, and those that fell asleep since
        # the last round, or all of them (server/settled.py).
        self.notice_pass = NoticePass()
        self.noticed: list[PartitionRunner] = []
        self.joining = Joining(self)  # first voters, notices, links, members (joining.py)
        self.isr = IsrControl(self, clean=clean_start(config.data_dir))
        plan = self.plan_partition(self.metadata_key, self.all_nodes, METADATA_CONFIG)
        self.metadata = self.start_partition(plan, plan.open_log())
        self.copies = Copies(self)  # which partitions this node holds a copy of
        self.throttles = ReplicationThrottles(self)  # their throttles (server/throttles.py)
        self.truth = ClusterTruth(self, self.copies.applied)

    # ---------------------------------------------------------------- partitions -------
    def partition_dir(self, key: PartitionKey) -> Path:
        return self.config.data_dir / f"{key.topic}-{key.partition}"

    def plan_partition(
        self,
        key: PartitionKey,
        replicas: tuple[NodeId, ...],
        config: TopicConfig,
        directories: tuple[DirectoryId, ...] = (),
        *,
        members: tuple[NodeId, ...] = (),
        target: tuple[NodeId, ...] = (),
        topic_id: str | None = None,
    ) -> PartitionPlan:
        """A partition to open here, its copy claimed (`first_copy_id`): its log may be
        opened in a worker thread (`PartitionPlan.open_log`), then `start_partition` makes
        its runner. `replicas` and `directories`: its first voter set (KIP-858;
        server/data_dir.py), directories for a data partition in quorum mode; `members`
        and `target`: its copies and voter target now (KIP-455)."""
        metadata = key == self.metadata_key

        if metadata:  # its first voters, members and target are joining's (joining.py)
            replicas, members, target = self.joining.metadata_shape()
            directories = self.joining.first_directories
        if config.isr_mode or not any(directories):
            directories = ()  # ISR mode: a restart on an empty disk is the controller's
        replica_config = ReplicaConfig(
            self.node_id,
            replicas,
            election_ticks=self.config.election_ticks,
            heartbeat_ticks=self.config.heartbeat_ticks,
            min_insync_replicas=config.min_insync_replicas,
            tick_ms=self.config.tick_ms,
            replication=Replication.ISR if config.isr_mode else Replication.QUORUM,
            replica_lag_time_max_ms=max(1, self.config.replica_lag_time_max_ms),
            directories=directories,
            # The leader names the voters' directories not known at birth (KIP-853), the
            # metadata log's all: a node back on an empty disk is no voter of it until
            # it is added again.
            name_directories=metadata or NO_DIRECTORY in directories,
            members=members,
            target=target,
            quiesce=self.config.quiesce,
        )
        return PartitionPlan(
            key,
            config,
            replica_config,
            str(self.partition_dir(key)),
            self.wal_config(config),
            self.first_copy_id(key, topic_id, replica_config),
        )

    def start_partition(self, plan: PartitionPlan, opened: OpenedLog) -> PartitionRunner:
        """The runner of a planned partition on its opened log (on the event loop)."""
        key, config = plan.key, plan.config
        start_replica = replica_opener(plan.replica_config, self.rng, self.liveness.view)
        on_round: OnRound | None = self.apply_metadata if key == self.metadata_key else None
        coordinator = None
        if key.topic == OFFSETS_TOPIC:
            coordinator = GroupCoordinator(
                key.partition, self.group_config, topic_exists=self.image.topics.__contains__
            )
            on_round = coordinator.on_round
        isr = self.isr if config.isr_mode else None
        runner = PartitionRunner(  # it releases the log if its replica fails to start
            key,
            opened,
            open_replica=start_replica,
            send=self.transport.send,
            executor=self.executor,
            fatal=self.fatal,
            disk=self.disk,
            on_round=on_round,
            on_proposals=None if isr is None else isr.propose,
            on_set_aside=None if isr is None else isr.on_set_aside,
            on_declined=None if isr is None else isr.report_restarted,
            syncs=self.syncs,
            metrics=self.metrics,
            on_quiesce=self.on_quiesce,
        )
        if coordinator is not None:
            self.coordinators[key.partition] = coordinator
        self.runners[key] = runner
        self.awake[key] = runner
        return runner

    def dead_nodes(self) -> list[int]:
        view = self.liveness.view
        return sorted(int(node) for node in view.peers() if not view.is_live(node))

    def on_quiesce(self, runner: PartitionRunner) -> None:
        """A partition fell asleep or woke (core/quiesce.py): only those awake tick."""
        if runner.quiesced:
            self.awake.pop(runner.key, None)
            self.notice_pass.quiesced(runner.key)
        elif self.runners.get(runner.key) is runner:
            self.awake[runner.key] = runner

    def first_copy_id(
        self, key: PartitionKey, topic_id: str | None, config: ReplicaConfig
    ) -> DirectoryId | None:
        """The id a new directory of this copy takes: the node's when it is the copy the
        partition's first voter set names (server/data_dir.py's CopiesHeld), else None (a
        random one)."""
        if key == self.metadata_key:
            topic_id = METADATA_TOPIC  # formatted (joining.py): its first set names ours
        if topic_id is None:
            return None
        fresh = self.copies_held.claim(topic_id, key.partition)
        named = config.first_voters.voter_key(self.node_id, self.directory_id)
        return self.directory_id if fresh and named is not None else None

    def runner(self, topic: str, partition: int) -> PartitionRunner | None:
        if topic == METADATA_TOPIC:  # never a client's to read or write, as in Kafka
            return None
        return self.runners.get(PartitionKey(topic, partition))

    def hosted(self) -> list[PartitionRunner]:
        """The partitions this node hosts (the metadata log's too), in the order it came
        to host them."""
        return list(self.runners.values())

    def hosting(self, key: PartitionKey) -> PartitionRunner | None:
        """The partition's runner here (the metadata log's too), when this node hosts it."""
        return self.runners.get(key)

    def fatal(self, error: BaseException) -> None:
        log.critical("stopping: a partition's log failed: %r", error)
        self.exit_code = 1
        self.stopping.set()

    # ---------------------------------------------------------------- metadata ---------
    def apply_metadata(self, runner: PartitionRunner) -> None:
        """Apply every committed metadata command not applied yet, in offset order."""

        def apply(offset: int, key: bytes | None, value: bytes | None) -> None:
            self.on_change(self.image.apply(offset, value or b""))

        self.image.applied_offset = runner.apply_committed(self.image.applied_offset, apply)
        self.copies.flush()  # the copies follow the image as it is now (server/copies.py)
        self.throttles.flush()

    def on_change(self, change: Change) -> None:
        self.throttles.on_change(change)
        for topic in change.created:
            self.copies.created(topic)
        for topic_name, partition in (*change.moved, *change.records):
            self.copies.moved(PartitionKey(topic_name, partition))  # ISR: hands the record
        for topic in change.altered:
            self.reconfigure(topic)
        for topic in change.deleted:
            asyncio.get_running_loop().create_task(self.copies.delete_replicas(topic))
            for coordinator in self.coordinators.values():
                coordinator.expire_now()  # its groups' offsets of that topic expire

    def wal_config(self, config: TopicConfig) -> WalConfig:
        """A partition log's settings: the topic's, with this node's durability."""
        flush_interval_ms = None if self.config.fsync else FLUSH_INTERVAL_MS_WEAK
        return config.wal_config(flush_interval_ms=flush_interval_ms)

    def reconfigure(self, topic: TopicInfo) -> None:
        """A topic's configs changed: its replicas here follow (retention and segments at
        once, min.insync.replicas from the partition's next round)."""
        wal_config = self.wal_config(topic.config)
        min_insync = topic.config.min_insync_replicas
        for partition in range(topic.partitions):
            runner = self.runners.get(PartitionKey(topic.name, partition))
            if runner is None:
                continue
            runner.reconfigure(wal_config, min_insync)

    async def propose_metadata(self, command: dict[str, Any]) -> Any:
        """Write one command to the metadata log with acks=all (the controller only)."""
        batch = producer_batch([encode_command(command)], timestamp_ms=wall_ms())
        return await self.metadata.produce(batch, ACKS_ALL)

    async def commit_metadata(self, command: dict[str, Any]) -> tuple[ErrorCode, str | None]:
        """Commit one command to the metadata log with acks=all, here when this node is the
        controller, else forwarded to it; answer once the command is applied here."""
        if self.metadata.status().role is Role.LEADER:
            code, message, next_offset = await self.commit_here(command)
        else:
            code, message, next_offset = await self.forward(command)
        if code is not ErrorCode.NONE:
            return code, message
        deadline = time.monotonic() + METADATA_APPLY_WAIT_S
        while self.image.applied_offset < next_offset:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return ErrorCode.REQUEST_TIMED_OUT, "the metadata was not applied in time"
            await self.metadata.wait_for_hwm(self.metadata.status().hwm, remaining)
        return ErrorCode.NONE, None

    async def commit_here(self, command: dict[str, Any]) -> Outcome:
        result = await self.propose_metadata(command)
        if result.error is None and result.next_offset is not None:
            return ErrorCode.NONE, None, int(result.next_offset)
        code = error_code_for(result.error)
        if code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
            code = ErrorCode.NOT_CONTROLLER  # what admin clients retry, asking the new one
        return code, str(result.error), -1

    async def forward(self, command: dict[str, Any]) -> Outcome:
        controller = self.controller_id()
        if controller < 0 or controller == self.node_id:
            return ErrorCode.NOT_CONTROLLER, "no controller is known yet", -1
        request_id = next(self.forward_ids)
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.forwarded[request_id] = (NodeId(controller), future)
        request = ForwardRequest(
            self.node_id, NodeId(controller), request_id, (encode_command(command),)
        )
        self.transport.send(self.metadata_key, [request])
        try:
            return await asyncio.wait_for(future, FORWARD_TIMEOUT_S)
        except TimeoutError:
            error = RequestTimedOut(f"controller {controller} did not answer in time")
            return error_code_for(error), str(error), -1
        finally:
            self.forwarded.pop(request_id, None)

    def on_forward_request(self, request: ForwardRequest) -> None:
        """A command another node forwards: validated at the door, committed, answered."""

        def reply(outcome: Outcome) -> None:
            code, message, next_offset = outcome
            text = () if message is None else (message.encode()[:1000],)
            answer = ForwardReply(
                self.node_id, request.sender, request.request_id, int(code), next_offset, text
            )
            self.transport.send(self.metadata_key, [answer])

        if self.metadata.status().role is not Role.LEADER:
            reply((ErrorCode.NOT_CONTROLLER, "this node is not the controller", -1))
            return
        if self.forwarding >= FORWARDED_MAX:
            reply((ErrorCode.REQUEST_TIMED_OUT, "the controller is busy", -1))
            return
        command = forwarded_command(request)
        if command is None:
            log.warning("refused a forwarded command from node %d: malformed", request.sender)
            reply((ErrorCode.INVALID_REQUEST, "a malformed forwarded command", -1))
            return

        async def commit() -> None:
            self.forwarding += 1
            try:
                reply(await self.commit_here(command))
            finally:
                self.forwarding -= 1

        asyncio.get_running_loop().create_task(commit())

    def on_forward_reply(self, answer: ForwardReply) -> None:
        waiting = self.forwarded.get(answer.request_id)
        if waiting is None or waiting[0] != answer.sender or waiting[1].done():
            return  # late (timed out), or not from the node it was asked of
        try:
            code = ErrorCode(answer.error_code)
        except ValueError:
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        message = answer.message[0].decode(errors="replace") if answer.message else None
        waiting[1].set_result((code, message, answer.next_offset))

    # ---------------------------------------------------------------- quorum -----------
    def quorum_here(self) -> QuorumReport | None:
        """The metadata log's quorum report when this node leads it, else None."""
        status = self.metadata.status()
        if status.role is not Role.LEADER:
            return None
        return report_of(status, monotonic_now_ms=monotonic_ms(), wall_now_ms=wall_ms())

    async def quorum_report(self) -> QuorumReport | None:
        return await self.quorum_queries.report()

    def maybe_create_offsets_topic(self) -> None:
        """The controller creates `__consumer_offsets` once every broker is known, as
        Kafka does at the first FindCoordinator (here at once, so it is ready by then)."""
        if (
            self.creating_offsets_topic
            or OFFSETS_TOPIC in self.image.topics
            or self.metadata.status().role is not Role.LEADER
            or len(self.kafka_ports) < len(self.all_nodes)
        ):
            return
        factor = min(self.config.default_replication_factor, len(self.all_nodes))
        start = self.rng.randrange(len(self.all_nodes))
        replicas = place_replicas(
            list(self.all_nodes), self.config.offsets_topic_partitions, factor, start
        )
        command = {
            "type": "create_topic",
            "name": OFFSETS_TOPIC,
            "replicas": replicas,
            "configs": {"retention.ms": "-1"},
        }

        async def create() -> None:
            try:
                result = await self.propose_metadata(command)
                if result.error is not None:
                    log.info("creating %s: %s (will retry)", OFFSETS_TOPIC, result.error)
            finally:
                self.creating_offsets_topic = False

        self.creating_offsets_topic = True
        asyncio.get_running_loop().create_task(create())

    def controller_id(self) -> int:
        """The metadata log's leader; while joining, the one a PeersNotice named."""
        leader = self.metadata.status().leader_id
        return self.joining.controller_told() if leader is None else int(leader)

    @property
    def all_nodes(self) -> tuple[NodeId, ...]:
        """The cluster's brokers: registered in the image, or in --peers, and not
        unregistered (server/members.py)."""
        return self.image.membership.brokers(self.image, self.config.peers)

    def leader_of(self, key: PartitionKey) -> tuple[int, int]:
        """(leader id or -1, leader epoch or -1) as this node knows it."""
        runner = self.runners.get(key)
        if runner is not None and runner.disk_error is None:
            status = runner.status()
            if status.leader_id is None:
                return -1, -1
            return int(status.leader_id), int(status.epoch)
        hint = self.leader_hints.get(key)
        return (int(hint[1]), hint[0]) if hint is not None else (-1, -1)

    # ---------------------------------------------------------------- peers ------------
    def on_peer_items(self, peer: NodeId, items: list[tuple[PartitionKey, Any]]) -> None:
        self.truth.heard(peer)
        for key, msg in items:
            if isinstance(msg, QuorumQuery | QuorumAnswer):
                if msg.recipient == self.node_id and key == self.metadata_key:
                    self.quorum_queries.on_message(msg)
            elif isinstance(msg, ForwardRequest | ForwardReply) and msg.recipient != self.node_id:
                log.warning("dropped a forwarded command for node %d", msg.recipient)
            elif isinstance(msg, ForwardRequest):
                self.on_forward_request(msg)
            elif isinstance(msg, ForwardReply):
                self.on_forward_reply(msg)
            elif isinstance(msg, BrokerNotice):
                self.joining.on_notice(peer, msg)
            elif isinstance(msg, PeersNotice):
                self.joining.on_peers_notice(msg)
            elif isinstance(msg, ElectPreferred):
                self.on_elect_preferred(key, msg)
            elif isinstance(msg, NodePing | NodePong):
                self.liveness.on_message(peer, msg)
            elif isinstance(msg, LeaderNotice):
                known = self.leader_hints.get(key)
                if known is None or msg.epoch >= known[0]:
                    self.leader_hints[key] = (int(msg.epoch), msg.sender)
            else:
                runner = self.runners.get(key)
                if runner is not None:
                    runner.submit(Step(msg))

    @property
    def kafka_ports(self) -> dict[NodeId, int]:
        return {node: address[1] for node, address in self.kafka_addresses().items()}

    @property
    def kafka_hosts(self) -> dict[NodeId, str]:
        return {node: address[0] for node, address in self.kafka_addresses().items()}

    def kafka_addresses(self) -> dict[NodeId, Address]:
        """Each broker's advertised address on the listener this request came in on."""
        protocol = client_listener.get() or self.config.listeners[0].protocol
        brokers = {*self.all_nodes, self.node_id}
        held = self.listener_addresses.get(protocol, {})
        return {node: address for node, address in held.items() if node in brokers}

    def send_notices(self) -> None:
        """Links learned, the metadata members handed over, the notices sent (joining.py)."""
        self.joining.step()

    # ---------------------------------------------------------------- leadership -------
    def elect_preferred(self, key: PartitionKey, leader: NodeId, epoch: int) -> None:
        if self.isr.record_of(key) is not None:
            self.isr.elect_preferred(key)  # the controller's choice in ISR mode
            return
        if leader != self.node_id:
            self.transport.send(key, [ElectPreferred(self.node_id, leader, Epoch(epoch))])
            return
        runner = self.runners.get(key)
        if runner is not None:
            hand_over(runner, runner.status().replicas[0])

    def on_elect_preferred(self, key: PartitionKey, msg: ElectPreferred) -> None:
        """A node asks us, the partition's leader in `msg.epoch`, to hand over to its
        preferred replica; in any other epoch, or not leading, nothing to do."""
        runner = self.runners.get(key)
        if msg.recipient != self.node_id or runner is None:
            return
        status = runner.status()
        if status.role is Role.LEADER and status.epoch == msg.epoch:
            preferred = status.replicas[0]
            if preferred not in self.stopping_nodes:
                hand_over(runner, preferred)

    async def shut_down_leadership(self) -> int:
        """Controlled shutdown (SIGTERM): tell the others, then hand every leadership over;
        how many partitions this node still leads after `controlled_shutdown_timeout_ms`."""
        self.stopping_nodes.add(self.node_id)
        self.send_notices()
        await self.isr.shut_down()
        return await controlled_shutdown(self, self.config.controlled_shutdown_timeout_ms / 1000)

    # ---------------------------------------------------------------- time -------------
    async def tick_forever(self) -> None:
        interval = self.config.tick_ms / 1000
        next_at = time.monotonic()
        rebalance_every = max(
            1, self.config.leader_imbalance_check_interval_ms // self.config.tick_ms
        )
        while True:  # until cancelled, after the controlled shutdown
            # Ticks missed in a stall are skipped, never fired in a burst: a follower must
            # not count time that has not passed since the last message it took, or it
            # could vote while the leader's read lease still holds.
            next_at = max(next_at + interval, time.monotonic())
            await asyncio.sleep(next_at - time.monotonic())
            self.ticks += 1
            stamp, wall = monotonic_ms(), wall_ms()
            self.liveness.tick()
            tick = Tick(stamp, wall)  # one for all: frozen
            for key, runner in list(self.awake.items()):
                if self.runners.get(key) is runner:
                    runner.tick(tick)
                else:
                    del self.awake[key]  # stopped here
            self.campaign_again()
            for coordinator in list(self.coordinators.values()):
                coordinator.tick()
            self.disk.maybe_over()
            if self.ticks % NOTICE_EVERY_TICKS == 0:
                self.noticed = self.notice_pass.runners(
                    self.runners, self.awake, self.image.applied_offset
                )
                self.send_notices()
                self.maybe_create_offsets_topic()
                self.truth.step()
                self.isr.step()
                self.copies.refresh()
                self.throttles.refresh()
            if (
                self.config.auto_leader_rebalance
                and self.ticks % rebalance_every == 0
                and not self.stopping.is_set()
            ):
                rebalance(self, self.config.leader_imbalance_per_broker_percentage)
            if self.ticks % RETENTION_EVERY_TICKS == 0:
                for runner in list(self.runners.values()):
                    if runner.retention_due(wall):  # idle partitions cost no round
                        runner.submit(Retain(wall))
                self.copies.open_unopened()

    def campaign_again(self) -> None:
        """New partitions this node prefers campaign again while no one leads them, for one
        election timeout (server/leadership.py)."""
        for key, ticks_left in list(self.campaigning.items()):
            runner = self.runners.get(key)
            if runner is None or ticks_left <= 0 or runner.status().leader_id is not None:
                del self.campaigning[key]
                continue
            self.campaigning[key] = ticks_left - 1
            runner.submit(Campaign())

    # ---------------------------------------------------------------- lifecycle --------
    def announce_to(self, peer: NodeId) -> None:
        """A link to `peer` just came up: tell it our Kafka ports at once."""
        self.transport.send(self.metadata_key, [self.joining.notice_to(peer)])


def forwarded_command(request: ForwardRequest) -> dict[str, Any] | None:
    """The one command of a forwarded request, if it is one the controller takes."""
    if len(request.commands) != 1 or len(request.commands[0]) > FORWARD_COMMAND_MAX_BYTES:
        return None
    try:
        command = json.loads(request.commands[0])
    except ValueError:
        return None
    if not isinstance(command, dict) or command.get("type") not in FORWARDABLE:
        return None
    speaker = SPEAKS_FOR.get(command["type"])
    if speaker is not None and command.get(speaker) != request.sender:
        log.warning(
            "refused a %s from node %d speaking for node %r",
            command["type"],
            request.sender,
            command.get(speaker),
        )
        return None
    return command
