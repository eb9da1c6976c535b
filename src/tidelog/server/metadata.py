"""The cluster's metadata: topics, their partitions' replicas, and their configs; the
users' salted SCRAM credentials.

Rules of this file:
- The metadata is a replicated partition (`METADATA_TOPIC`) over every node, run by the same
  core as any topic. Its records are JSON commands; every node applies the committed ones
  in offset order (commit index, then last applied), so every node's image is the same
  function of the same log.
- Applying is pure and idempotent per offset: `MetadataImage.apply` takes one committed
  command and returns what changed, for the broker to act on (create or remove replicas).
- Every command is validated before it is proposed (`validate_topic`) and again when it is
  applied: a committed command that cannot be applied (malformed, or invalid) is logged
  with its offset and changes nothing, the same outcome on every node. Applying never
  raises: what a node receives can never stop it.
- Replicas are placed round-robin, starting at a different node for each partition, so
  leaders spread over the nodes. A partition made names each replica's data directory as
  its node last registered it (`register_broker`'s `directory`, KIP-858): the copies of its
  first voter set (server/data_dir.py).
- Who belongs is server/members.py's (`membership`): the brokers' peer addresses, those
  unregistered, and the metadata quorum's voter target (KIP-853).
- Cluster truth lives here too, so every node answers the same: each partition's leader,
  epoch and in-sync replicas as its leader reported them (`partition_state`, Kafka's
  AlterPartition; a state of an older epoch than the one held changes nothing), and the
  brokers the controller fenced for missing their heartbeats (`fence_broker`,
  `unfence_broker`).
- ISR mode (docs/isr.md): a partition of a topic with `replication.mode=isr` has a
  `PartitionRecord` here (leader, leader epoch, partition epoch, ISR, ELR), changed only by
  core/isr.py's transitions as commands are applied: created with the topic (its first
  leader elected among the live replicas); `alter_partition` (a leader's AlterPartition,
  refused unless current: rule 3); `fence_broker` and `shutdown_broker` (the node leaves
  every ISR and leadership, rule 6); `register_broker` (a node's first registration
  changes nothing; one from a node that starts again: after an unclean stop it leaves
  every ISR and ELR, rule 9; after a clean one it gives up only its leaderships; a copy
  of one applied, the same incarnation, nothing); `replica_restarted` (one replica that
  started again, on a disk error or a repair, or that will not lead an epoch it claimed
  before); `elect_preferred`. After each, a partition with no live leader gets one by
  `isr.elect` (rules 4, 8, 10), live meaning not fenced. What changed is in
  `Change.records`, for the broker to hand to its replicas; the answer to a proposal is
  kept (`answers`) for the node that proposed it.
- Reassignment (KIP-455; the state machine is server/reassignment.py's): a partition moved
  once has an `Assignment` in `assignments`; `TopicInfo.replicas` is Kafka's replica list
  (what Metadata answers), `TopicInfo.born` the replicas it was made with (its first voter
  set, the order of `directories`). `alter_reassignments` starts, replaces or cancels
  moves; a quorum-mode leader's `partition_state` names its committed voter set and the
  assignment its replica holds, which completes a move and lets retiring copies go; in
  ISR mode a record whose ISR holds the target completes it (`_set_record`). The
  partitions whose copies or members changed are in `Change.moved`.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final

from tidelog.core import isr
from tidelog.core.isr import NO_LEADER, AlterResult, IsrProposal, PartitionRecord
from tidelog.errors import MetadataError
from tidelog.protocol.scram import ITERATIONS_MAX, ITERATIONS_MIN, ScramCredential
from tidelog.server.acl import Acl, acl_of
from tidelog.server.broker_configs import BrokerConfigs
from tidelog.server.logs import partition_fields
from tidelog.server.members import MEMBERSHIP_COMMANDS, Membership, peer_of
from tidelog.server.metadata_fields import (
    PARTITIONS_MAX,
    QUOTED_MAX,
    quoted,
    validate_topic_name,
)
from tidelog.server.metadata_fields import list_of as _list
from tidelog.server.metadata_fields import mechanism_of as _mechanism
from tidelog.server.metadata_fields import node_of as _node
from tidelog.server.metadata_fields import nodes_of as _nodes_of
from tidelog.server.metadata_fields import placement_of as _replicas
from tidelog.server.metadata_fields import string_of as _string
from tidelog.server.reassignment import (
    Assignment,
    cancel,
    complete,
    is_done,
    on_voters,
    submit,
    target_of,
)
from tidelog.server.topic_config import TopicConfig
from tidelog.types import NO_DIRECTORY, DirectoryId, Epoch, NodeId

METADATA_TOPIC = "__cluster_metadata"
OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({METADATA_TOPIC, OFFSETS_TOPIC})
INCARNATION_MAX = 64  # characters of a registration's incarnation id
LOGGED_BYTES_MAX = 120  # of a command's bytes, in a log line (up to 4 characters each)

log = logging.getLogger(__name__)


# The namespace of topic ids: a topic's id is the name-based UUID of the metadata offset
# that created it and its name, so every node derives the same id from the same log, and a
# topic deleted and created again under its name gets a new one, as in Kafka.
TOPIC_ID_NAMESPACE: Final = uuid.UUID("7c3f0e58-2a8e-4d0e-9b2a-1f4c6d8e5a01")


def topic_id_of(offset: int, name: str) -> uuid.UUID:
    """The id of the topic `name` created by the metadata command at `offset`."""
    return uuid.uuid5(TOPIC_ID_NAMESPACE, f"{offset}/{name}")


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    replicas: tuple[tuple[int, ...], ...]  # per partition, the node ids holding it
    topic_id: uuid.UUID  # Kafka's topic id (KIP-516): `topic_id_of`
    configs: dict[str, str] = field(default_factory=dict)  # as given
    config: TopicConfig = field(default_factory=TopicConfig)  # as parsed
    # Per partition, in the order of `replicas`, the data directory each replica's node had
    # registered when the partition was made (KIP-858; NO_DIRECTORY: none registered yet).
    directories: tuple[tuple[DirectoryId, ...], ...] = ()
    # Per partition, the replicas it was made with (its first voter set), once one has
    # moved (KIP-455): `replicas` is then Kafka's replica list now. Empty: `replicas`.
    born: tuple[tuple[int, ...], ...] = ()

    @property
    def partitions(self) -> int:
        return len(self.replicas)

    def born_of(self, partition: int) -> tuple[tuple[int, ...], tuple[DirectoryId, ...]]:
        """The partition's replicas when it was made, and their directories (() unknown)."""
        born = self.born[partition] if self.born else self.replicas[partition]
        return born, self.directories[partition] if self.directories else ()


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's leader, its epoch and the in-sync replicas, as the leader reported them."""

    leader: int
    epoch: int
    isr: tuple[int, ...]
    # Quorum mode: the nodes of the leader's committed voter set (None: not reported), and
    # the assignment version its replica holds (`Assignment.version`; None: not known).
    voters: tuple[int, ...] | None = None
    version: int | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """What one applied command changed: topics created, deleted, or whose configs changed."""

    created: tuple[TopicInfo, ...] = ()
    deleted: tuple[TopicInfo, ...] = ()
    altered: tuple[TopicInfo, ...] = ()
    records: tuple[tuple[str, int], ...] = ()  # ISR-mode partitions whose record changed
    moved: tuple[tuple[str, int], ...] = ()  # partitions whose copies or members changed
    brokers: bool = False  # broker configs changed (server/broker_configs.py)


def _nodes(nodes: tuple[int, ...]) -> tuple[NodeId, ...]:
    return tuple(NodeId(node) for node in nodes)


def validate_topic(
    name: str,
    partitions: int,
    replication_factor: int,
    configs: dict[str, str | None],
    *,
    nodes: int,
    existing: set[str] | frozenset[str] = frozenset(),
) -> TopicConfig:
    """The topic's parsed configs; raise MetadataError when it cannot be created as asked."""
    validate_topic_name(name, existing)
    if not 1 <= partitions <= PARTITIONS_MAX:
        raise MetadataError(
            "INVALID_PARTITIONS", f"{partitions} partitions: use 1..{PARTITIONS_MAX}"
        )
    if not 1 <= replication_factor <= nodes:
        raise MetadataError(
            "INVALID_REPLICATION_FACTOR",
            f"Replication factor: {replication_factor} larger than available brokers: {nodes}.",
        )
    return TopicConfig.parse(configs, replication_factor=replication_factor)


def encode_command(command: dict[str, Any]) -> bytes:
    return json.dumps(command, sort_keys=True, separators=(",", ":")).encode()


class MetadataImage:
    """The topics as of the last applied metadata offset."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicInfo] = {}
        # (user, mechanism) -> the salted SCRAM credential (upsert_scram, delete_scram).
        self.scram: dict[tuple[str, str], ScramCredential] = {}
        self.acls: set[Acl] = set()  # create_acls, delete_acls
        self.partitions: dict[tuple[str, int], PartitionState] = {}  # partition_state
        self.fenced: set[int] = set()  # fence_broker, unfence_broker
        # register_broker: each node's incarnation last registered (None: not said), and
        # its data directory's id (server/data_dir.py; absent: not said).
        self.incarnations: dict[int, str | None] = {}
        self.directories: dict[int, DirectoryId] = {}
        # ISR mode: each partition's record, and the last answer to a leader's proposal.
        self.records: dict[tuple[str, int], PartitionRecord] = {}
        self.answers: dict[tuple[str, int], tuple[IsrProposal, AlterResult]] = {}
        self.assignments: dict[tuple[str, int], Assignment] = {}  # partitions moved once
        self.membership = Membership()  # peers, unregistered, voter target (members.py)
        self.broker_configs = BrokerConfigs()  # alter_broker_configs (broker_configs.py)
        self.applied_offset = 0  # every command below this offset is applied

    def topic_named(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic whose id is `topic_id`, or None (none has it now)."""
        for info in self.topics.values():
            if info.topic_id == topic_id:
                return info.name
        return None

    def apply(self, offset: int, value: bytes) -> Change:
        """Apply the committed command at `offset`; commands are applied once, in order.
        One that cannot be applied is logged and changes nothing (never raises)."""
        if offset < self.applied_offset:
            return Change()  # applied already
        self.applied_offset = offset + 1
        try:
            command = json.loads(value)
            if not isinstance(command, dict):
                raise MetadataError("INVALID_REQUEST", "a command is a JSON object")
            kind = command.get("type")
            if kind == "create_topic":
                return self._create(command, offset)
            if kind == "delete_topic":
                return self._delete(command)
            if kind == "create_partitions":
                return self._create_partitions(command)
            if kind == "alter_configs":
                return self._alter_configs(command)
            if kind == "alter_broker_configs":
                self.broker_configs.apply(command)
                return Change(brokers=True)
            if kind in ("create_acls", "delete_acls"):
                acls = [acl_of(fields) for fields in _list(command, "acls")]  # all or none
                if kind == "create_acls":
                    self.acls.update(acls)
                else:
                    self.acls.difference_update(acls)
                return Change()
            if kind == "upsert_scram":
                return self._upsert_scram(command)
            if kind == "delete_scram":
                self.scram.pop((_string(command, "user"), _mechanism(command)), None)
                return Change()
            if kind == "partition_state":
                return self._partition_state(command, offset)
            if kind == "alter_reassignments":
                return self._alter_reassignments(command, offset)
            if kind in ("fence_broker", "unfence_broker", "shutdown_broker"):
                node = _node(command.get("node"))
                if kind == "unfence_broker":
                    self.fenced.discard(node)
                    return self._elect_all()
                self.fenced.add(node)
                return self._change_records(
                    node, lambda r, m: isr.fence(r, NodeId(node), min_insync=m)
                )
            if kind == "register_broker":
                return self._register(command)
            if kind == "alter_partition":
                return self._alter_partition(command)
            if kind == "replica_restarted":
                return self._replica_restarted(command)
            if kind == "elect_preferred":
                return self._elect_preferred(command)
            if kind in MEMBERSHIP_COMMANDS:
                self.membership.apply(kind, command, self)
                return Change()
            raise MetadataError("INVALID_REQUEST", f"unknown command type {kind!r}")
        except (MetadataError, ValueError) as error:
            log.error(
                "metadata command at offset %d not applied: %s (%s)",
                offset,
                str(error)[:QUOTED_MAX],
                bytes(value[:LOGGED_BYTES_MAX]),
            )
            return Change()

    def _create(self, command: dict[str, Any], offset: int) -> Change:
        name = _string(command, "name")
        if name in self.topics:
            return Change()  # a second create of the same name: the first one won
        replicas = _replicas(command.get("replicas"))
        configs = command.get("configs", {})
        if not isinstance(configs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in configs.items()
        ):
            raise MetadataError("INVALID_CONFIG", "configs are a map of strings")
        if name not in INTERNAL_TOPICS:
            validate_topic_name(name, set(self.topics))
        config = TopicConfig.parse(configs, replication_factor=len(replicas[0]))
        info = TopicInfo(
            name,
            replicas,
            topic_id_of(offset, name),
            dict(configs),
            config,
            self._directories_of(replicas),
        )
        self.topics[name] = info
        return Change(created=(info,), records=self._new_records(info, 0))

    def _upsert_scram(self, command: dict[str, Any]) -> Change:
        """A user's salted SCRAM credential (never a password), as validated at the door."""
        user, mechanism = _string(command, "user"), _mechanism(command)
        iterations = command.get("iterations")
        if not isinstance(iterations, int) or not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
            raise MetadataError("INVALID_REQUEST", f"iterations {iterations!r} out of range")
        try:
            salt, stored_key, server_key = (
                base64.b64decode(_string(command, key), validate=True)
                for key in ("salt", "stored_key", "server_key")
            )
        except binascii.Error:
            raise MetadataError("INVALID_REQUEST", "a credential that is not base64") from None
        if not user or not salt or not stored_key or len(stored_key) != len(server_key):
            raise MetadataError("INVALID_REQUEST", "an incomplete credential")
        self.scram[(user, mechanism)] = ScramCredential(
            mechanism, salt, iterations, stored_key, server_key
        )
        return Change()

    def _alter_configs(self, command: dict[str, Any]) -> Change:
        """A topic's configs as a whole (AlterConfigs and IncrementalAlterConfigs write the
        resulting set), parsed again as at creation."""
        info = self.topics.get(_string(command, "name"))
        if info is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", "no such topic")
        configs = command.get("configs")
        if not isinstance(configs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in configs.items()
        ):
            raise MetadataError("INVALID_CONFIG", "configs are a map of strings")
        config = TopicConfig.parse(configs, replication_factor=len(info.replicas[0]))
        altered = replace(info, configs=dict(configs), config=config)
        self.topics[info.name] = altered
        return Change(altered=(altered,))

    def _create_partitions(self, command: dict[str, Any]) -> Change:
        """New partitions after a topic's last (CreatePartitions): their placements."""
        info = self.topics.get(_string(command, "name"))
        if info is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", "no such topic")
        added = _replicas(command.get("replicas"))
        if len(added[0]) != len(info.replicas[0]):
            raise MetadataError("INVALID_REPLICA_ASSIGNMENT", "a new partition's replication")
        if info.partitions + len(added) > PARTITIONS_MAX:
            raise MetadataError("INVALID_PARTITIONS", f"more than {PARTITIONS_MAX} partitions")
        grown = replace(
            info,
            replicas=info.replicas + added,
            directories=info.directories + self._directories_of(added)
            if len(info.directories) == info.partitions
            else (),
            born=info.born + added if info.born else (),
        )
        self.topics[info.name] = grown
        return Change(created=(grown,), records=self._new_records(grown, info.partitions))

    def _partition_state(self, command: dict[str, Any], offset: int) -> Change:
        """A leader's report (server/truth.py): its epoch and in-sync replicas among the
        partition's copies, and in quorum mode its committed voter set and the assignment
        version its replica holds, which may complete a move or let retiring copies go."""
        topic = self.topics.get(_string(command, "topic"))
        partition = command.get("partition")
        if topic is None or not isinstance(partition, int) or isinstance(partition, bool):
            raise MetadataError("INVALID_REQUEST", "partition_state of no such partition")
        if not 0 <= partition < topic.partitions:
            raise MetadataError("INVALID_REQUEST", f"no partition {partition} of {topic.name}")
        key = (topic.name, partition)
        copies = self.members(key)
        leader, epoch = _node(command.get("leader")), _node(command.get("epoch"))
        isr_value, voters = command.get("isr"), _nodes_of(command.get("voters"))
        version = command.get("version")
        if not isinstance(isr_value, list):
            raise MetadataError("INVALID_REQUEST", "isr is not a list")
        isr = tuple(sorted({_node(node) for node in isr_value}))
        if leader not in copies or leader not in isr or not set(isr) <= set(copies):
            raise MetadataError("INVALID_REQUEST", f"a state naming no replica of {copies}")
        held = self.partitions.get(key)
        if held is not None and held.epoch > epoch:
            return Change()  # a deposed leader's report, committed after its successor's
        voter_nodes = None if voters is None else tuple(sorted(set(voters)))
        version = None if version is None else _node(version)
        self.partitions[key] = PartitionState(leader, epoch, isr, voter_nodes, version)
        moved = self.assignments.get(key)
        if moved is None or voter_nodes is None or topic.config.isr_mode:
            return Change()
        changed = on_voters(moved, voter_nodes, version, version=offset)
        if changed == moved:
            return Change()
        self._place(key, changed)
        return Change(moved=(key,))

    def _delete(self, command: dict[str, Any]) -> Change:
        info = self.topics.pop(_string(command, "name"), None)
        if info is None:
            return Change()
        for partition in range(info.partitions):
            self.partitions.pop((info.name, partition), None)
            self.records.pop((info.name, partition), None)
            self.answers.pop((info.name, partition), None)
            self.assignments.pop((info.name, partition), None)
        return Change(deleted=(info,))

    # ---------------------------------------------------------------- reassignment -----
    def assignment(self, key: tuple[str, int]) -> Assignment:
        """The partition's assignment (server/reassignment.py): its replicas when never moved."""
        moved = self.assignments.get(key)
        if moved is not None:
            return moved
        info = self.topics[key[0]]
        return Assignment(info.replicas[key[1]])

    def members(self, key: tuple[str, int]) -> tuple[int, ...]:
        """The nodes holding a copy of the partition (each hosts it): in ISR mode the
        record's replicas, in quorum mode the assignment's members."""
        moved = self.assignments.get(key)
        if moved is None:  # never moved: its replicas (asked of thousands every few ticks)
            return self.topics[key[0]].replicas[key[1]]
        return moved.members

    def voter_target(self, key: tuple[str, int]) -> tuple[int, ...]:
        """Quorum mode: the nodes the partition's voter set is to hold."""
        return self.assignment(key).voter_target

    def check_reassignment(
        self, topic: str, partition: object, replicas: object
    ) -> tuple[int, ...] | None:
        """A reassignment of one partition as Kafka's controller checks it: its target (None:
        a cancel); MetadataError with Kafka's error when it cannot be done."""
        info = self.topics.get(topic)
        if info is None or topic == METADATA_TOPIC:
            raise MetadataError(
                "UNKNOWN_TOPIC_OR_PARTITION", f"Unable to find a topic named {quoted(topic)}."
            )
        if (
            not isinstance(partition, int)
            or isinstance(partition, bool)
            or not 0 <= partition < info.partitions
        ):
            raise MetadataError(
                "UNKNOWN_TOPIC_OR_PARTITION", f"Unable to find partition {topic}:{partition}."
            )
        target = target_of(replicas, self.incarnations)
        key = (topic, partition)
        moved = self.assignment(key)
        if target is None and not moved.moving:
            raise MetadataError(
                "NO_REASSIGNMENT_IN_PROGRESS", "No partition reassignment is in progress."
            )
        record = self.records.get(key)
        unclean = info.config.unclean_leader_election
        reverts_unclean = (
            target is None
            and record is not None
            and not set(record.isr + record.elr) & set(moved.original)
        )
        if reverts_unclean and not unclean:  # Kafka's PartitionReassignmentRevert
            raise MetadataError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"Unable to revert partition assignment for {topic}:{partition} because "
                "it would require an unclean leader election.",
            )
        return target

    def _alter_reassignments(self, command: dict[str, Any], offset: int) -> Change:
        """AlterPartitionReassignments: each partition's new target, or its cancel (null),
        checked again here; one that cannot be done is logged and left as it is."""
        moved, records = [], []
        for entry in _list(command, "partitions"):
            topic, partition = _string(entry, "topic"), entry.get("partition")
            try:
                target = self.check_reassignment(topic, partition, entry.get("replicas"))
            except MetadataError as error:
                log.warning("reassignment of %s-%r not done: %s", topic, partition, error)
                continue
            assert isinstance(partition, int)
            key = (topic, partition)
            before = self.assignment(key)
            after = (
                cancel(before, version=offset)
                if target is None
                else submit(before, target, version=offset)
            )
            info = self.topics[topic]
            if info.config.isr_mode:
                moved.append(key)
                self._place(key, replace(after, retiring=()))
                minimum = info.config.min_insync(len(after.replicas))
                record = isr.reassigned(
                    self.records[key], _nodes(after.replicas), min_insync=minimum
                )
                if self._set_record(key, record):
                    records.append(key)
                continue
            held = self.partitions.get(key)
            if held is not None and held.voters is not None:  # a shrink may be done already
                after = on_voters(after, held.voters, None, version=offset)
            self._place(key, after)
            moved.append(key)
        return Change(moved=tuple(moved), records=tuple(records))

    def _place(self, key: tuple[str, int], assignment: Assignment) -> None:
        """Keep the partition's new assignment; its topic names Kafka's replicas now."""
        info = self.topics[key[0]]
        replicas = list(info.replicas)
        replicas[key[1]] = assignment.replicas
        born = info.born or info.replicas
        self.topics[key[0]] = replace(info, replicas=tuple(replicas), born=born)
        self.assignments[key] = assignment

    # ---------------------------------------------------------------- ISR mode ---------
    def _live(self, record: PartitionRecord) -> set[NodeId]:
        return {node for node in record.replicas if node not in self.fenced}

    def _settled(self, key: tuple[str, int], record: PartitionRecord) -> PartitionRecord:
        """`record` with a leader elected when its leader is not live (rules 4, 8, 10)."""
        if record.leader != NO_LEADER and record.leader not in self.fenced:
            return record
        config = self.topics[key[0]].config
        election = isr.elect(
            record,
            self._live(record),
            min_insync=config.min_insync(len(record.replicas)),
            unclean_allowed=config.unclean_leader_election,
        )
        if election.unclean:
            log.warning(
                "%s-%d: unclean leader election: node %d leads in epoch %d though it was in "
                "neither the ISR nor the ELR (unclean.leader.election.enable=true); records "
                "acknowledged beyond its log end are lost (each replica logs what it gives up)",
                key[0],
                key[1],
                election.leader,
                election.record.leader_epoch,
                extra=partition_fields(key[0], key[1], election.record.leader_epoch),
            )
        elif election.leader == NO_LEADER and record.leader != NO_LEADER:
            log.warning(
                "%s-%d: offline: no live replica of the ISR %s or ELR %s to lead it "
                "(unclean.leader.election.enable=false)",
                key[0],
                key[1],
                list(record.isr),
                list(record.elr),
                extra=partition_fields(key[0], key[1], record.leader_epoch),
            )
        return election.record

    def _set_record(self, key: tuple[str, int], record: PartitionRecord) -> bool:
        moving = self.assignments.get(key)
        config = self.topics[key[0]].config
        if moving is not None and is_done(
            moving, record.isr, config.min_insync(len(moving.target))
        ):  # KIP-455: the target is in the ISR: the move is done
            done = replace(complete(moving, version=self.applied_offset - 1), retiring=())
            self._place(key, done)
            minimum = config.min_insync(len(done.replicas))
            record = isr.reassigned(record, _nodes(done.replicas), min_insync=minimum)
        settled = self._settled(key, record)
        if self.records.get(key) == settled:
            return False
        self.records[key] = settled
        return True

    def _new_records(self, info: TopicInfo, first: int) -> tuple[tuple[str, int], ...]:
        """The first record of each new partition of an ISR-mode topic: every replica in
        the ISR (all are empty), led by the first live one (`elect`)."""
        if not info.config.isr_mode:
            return ()
        keys = []
        for partition in range(first, info.partitions):
            replicas = tuple(NodeId(node) for node in info.replicas[partition])
            key = (info.name, partition)
            self._set_record(key, PartitionRecord(replicas, NO_LEADER, Epoch(0), 0, replicas))
            keys.append(key)
        return tuple(keys)

    def _change_records(
        self, node: int, change: Callable[[PartitionRecord, int], PartitionRecord]
    ) -> Change:
        """Apply `change` (with the topic's min.insync.replicas) to every record naming
        `node` among its replicas, then elect where no live leader is left."""
        keys = []
        for key, record in sorted(self.records.items()):
            if node not in record.replicas:
                continue
            config = self.topics[key[0]].config
            changed = change(record, config.min_insync(len(record.replicas)))
            if self._set_record(key, changed):
                keys.append(key)
        return Change(records=tuple(keys))

    def _elect_all(self) -> Change:
        """Elect a leader for every partition that has none (a node came back)."""
        keys = [
            key for key, record in sorted(self.records.items()) if self._set_record(key, record)
        ]
        return Change(records=tuple(keys))

    def _directories_of(
        self, replicas: tuple[tuple[int, ...], ...]
    ) -> tuple[tuple[DirectoryId, ...], ...]:
        """Each replica's registered data directory, for partitions made now."""
        return tuple(
            tuple(self.directories.get(node, NO_DIRECTORY) for node in nodes) for nodes in replicas
        )

    def _register(self, command: dict[str, Any]) -> Change:
        """A node started (rule 9, `isr.registered`). Its first registration in this log
        changes nothing (its replicas took no record before it); a later one, from a new
        incarnation (a process that started again), is a restart: after an unclean stop
        the node leaves every ISR and ELR, after a clean one (it synced and closed every
        log) it gives up its leaderships only. A copy of a registration already applied
        (the same incarnation, committed twice) changes nothing. A command without an
        incarnation is always a new one."""
        node = NodeId(_node(command.get("node")))
        clean = command.get("clean")
        if not isinstance(clean, bool):
            raise MetadataError("INVALID_REQUEST", "clean is not a boolean")
        incarnation = command.get("incarnation")
        if incarnation is not None and (
            not isinstance(incarnation, str) or not 0 < len(incarnation) <= INCARNATION_MAX
        ):
            raise MetadataError("INVALID_REQUEST", "incarnation is not a short string")
        directory = command.get("directory")
        if directory is not None and (
            not isinstance(directory, int)
            or isinstance(directory, bool)
            or not NO_DIRECTORY < directory < 1 << 63
        ):
            raise MetadataError("INVALID_REQUEST", f"directory {directory!r} is no directory id")
        peer = peer_of(command)  # where the others dial it (server/members.py)
        first = node not in self.incarnations
        if not first and incarnation is not None and self.incarnations[node] == incarnation:
            return Change()  # this incarnation registered already
        self.incarnations[node] = incarnation
        self.membership.registered(node, peer)
        if directory is not None:
            self.directories[node] = DirectoryId(directory)
        return self._change_records(
            node, lambda r, m: isr.registered(r, node, first=first, clean=clean, min_insync=m)
        )

    def _isr_key(self, command: dict[str, Any]) -> tuple[tuple[str, int], PartitionRecord]:
        topic = _string(command, "topic")
        partition = command.get("partition")
        if not isinstance(partition, int) or isinstance(partition, bool):
            raise MetadataError("INVALID_REQUEST", "partition is not a number")
        record = self.records.get((topic, partition))
        if record is None:
            raise MetadataError("INVALID_REQUEST", f"no ISR-mode partition {topic}-{partition}")
        return (topic, partition), record

    def _alter_partition(self, command: dict[str, Any]) -> Change:
        """A leader's AlterPartition (rule 3): applied only when current."""
        key, record = self._isr_key(command)
        isr_value = command.get("isr")
        if not isinstance(isr_value, list):
            raise MetadataError("INVALID_REQUEST", "isr is not a list")
        proposal = IsrProposal(
            NodeId(_node(command.get("leader"))),
            Epoch(_node(command.get("leader_epoch"))),
            _node(command.get("partition_epoch")),
            tuple(NodeId(_node(node)) for node in isr_value),
        )
        config = self.topics[key[0]].config
        result = isr.alter_isr(record, proposal, min_insync=config.min_insync(len(record.replicas)))
        changed = self._set_record(key, result.record)
        self.answers[key] = (proposal, replace(result, record=self.records[key]))
        return Change(records=(key,) if changed else ())

    def _replica_restarted(self, command: dict[str, Any]) -> Change:
        """One replica started again on its log (rule 9), for that partition alone."""
        key, record = self._isr_key(command)
        node = NodeId(_node(command.get("node")))
        if node not in record.replicas:
            raise MetadataError("INVALID_REQUEST", f"node {node} is no replica of {key}")
        if _node(command.get("leader_epoch")) != record.leader_epoch:
            return Change()  # about a leader epoch that is over: nothing to change
        config = self.topics[key[0]].config
        changed = isr.restarted(record, node, min_insync=config.min_insync(len(record.replicas)))
        return Change(records=(key,) if self._set_record(key, changed) else ())

    def _elect_preferred(self, command: dict[str, Any]) -> Change:
        """The preferred replica leads, if it is in the ISR and live (a new leader epoch)."""
        key, record = self._isr_key(command)
        changed = isr.elect_preferred(record, self._live(record))
        return Change(records=(key,) if self._set_record(key, changed) else ())
