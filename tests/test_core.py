"""Unit tests of the replica core: configuration, one-node partitions, clients, errors."""

from __future__ import annotations

import random

import pytest

from tidelog.core import MemoryStorage, Ready, Replica, ReplicaConfig, Role
from tidelog.core.isr import PartitionRecord
from tidelog.core.messages import AppendRequest, VoteRequest, VoteResponse
from tidelog.core.replica import ACKS_ALL, ACKS_LEADER, ACKS_NONE
from tidelog.errors import (
    ConfigError,
    CorruptBatch,
    FencedEpoch,
    InvalidProducerEpoch,
    NotLeader,
    OffsetNotAvailable,
    OffsetOutOfRange,
    OutOfOrderSequence,
    UnknownProducerId,
)
from tidelog.node.driver import run_round
from tidelog.records import read_header
from tidelog.testing.sim import build_batch
from tidelog.types import NO_EPOCH, Epoch, NodeId, Offset

ONE = NodeId(1)


def persist(replica: Replica, storage: MemoryStorage) -> list[Ready]:
    """Carry out every Ready of a lone replica, as the node driver does."""
    readies = []
    while (ready := run_round(replica, storage, lambda messages: None)) is not None:
        readies.append(ready)
    return readies


def lone_leader() -> tuple[Replica, MemoryStorage]:
    storage = MemoryStorage()
    replica = Replica(ReplicaConfig(ONE, (ONE,)), storage, random.Random(1))
    replica.campaign()
    persist(replica, storage)
    assert replica.role is Role.LEADER
    return replica, storage


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"replicas": (NodeId(2), NodeId(3))}, "not among the replicas"),
        ({"replicas": (ONE, ONE)}, "name a node twice"),
        ({"replicas": (ONE,), "heartbeat_ticks": 5, "election_ticks": 5}, "heartbeat_ticks"),
        ({"replicas": (ONE,), "heartbeat_ticks": 2, "election_ticks": 4}, "lease margin"),
        ({"replicas": (ONE,), "min_insync_replicas": 2}, r"min.insync.replicas\): 2"),
        ({"replicas": (ONE,), "inflight_appends_max": 0}, "inflight_appends_max: 0"),
    ],
)
def test_config_refuses_what_does_not_fit(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ReplicaConfig(ONE, **kwargs)  # type: ignore[arg-type]


def test_min_insync_changes_at_run_time_and_bad_values_are_refused() -> None:
    replica, storage = lone_leader()
    assert replica.set_min_insync_replicas(2) is not None  # one replica: at most 1
    assert replica.config.min_insync_replicas is None
    assert replica.set_min_insync_replicas(1) is None
    assert replica.config.min_insync_replicas == 1
    replica.propose(3, build_batch(b"v"), acks=ACKS_ALL)
    persist(replica, storage)
    assert replica.hwm == 2  # it still commits, with the quorum it has
    assert replica.set_min_insync_replicas(None) is None


def test_a_lone_replica_elects_itself_and_commits_its_control_batch() -> None:
    replica, _ = lone_leader()
    assert replica.epoch == 1
    assert replica.hwm == 1
    assert replica.latest_offset() == 1
    (control,) = replica.fetch(Offset(0), max_bytes=1 << 20).batches
    assert read_header(control).is_control


def test_acks_all_completes_only_once_committed_and_offsets_are_stamped() -> None:
    replica, storage = lone_leader()
    replica.propose(7, build_batch(b"v", records=3), acks=ACKS_ALL)
    ready = replica.ready()
    assert ready.completions == ()  # not durable yet, so not committed
    storage.append(list(ready.batches))
    storage.sync()
    replica.advance(ready)
    (completion,) = replica.ready().completions
    assert (completion.request_id, completion.base_offset, completion.next_offset) == (7, 1, 4)
    assert completion.error is None
    stored = storage.read(Offset(1), end_offset=Offset(4), max_bytes=1 << 20)
    header = read_header(stored[0])
    assert (header.base_offset, header.epoch, header.records_count) == (1, 1, 3)


def test_acks_zero_completes_at_once_and_acks_one_after_the_sync() -> None:
    replica, storage = lone_leader()
    replica.propose(1, build_batch(b"a"), acks=ACKS_NONE)
    replica.propose(2, build_batch(b"b"), acks=ACKS_LEADER)
    ready = replica.ready()
    assert [c.request_id for c in ready.completions] == [1]
    storage.append(list(ready.batches))
    storage.sync()
    replica.advance(ready)
    assert [c.request_id for c in replica.ready().completions] == [2]


def test_roles_change_only_along_the_table() -> None:
    """One function changes a role (ROLE_TRANSITIONS); a quorum replica leads only from
    candidacy, so a follower cannot be made leader by a path that skips the election."""
    follower = Replica(ReplicaConfig(ONE, (ONE, NodeId(2))), MemoryStorage(), random.Random(1))
    with pytest.raises(AssertionError):
        follower.become_leader((ONE,))
    assert follower.role is Role.FOLLOWER
    leader, _ = lone_leader()
    with pytest.raises(AssertionError, match="leader -> candidate"):
        leader._set_role(Role.CANDIDATE)
    assert leader.role is Role.LEADER


def test_a_quorum_replica_has_no_isr_state_and_takes_no_record() -> None:
    replica, _ = lone_leader()
    assert replica.isr is None
    assert replica.partition_record() is None
    assert not replica.declines_leadership()
    record = PartitionRecord((ONE,), ONE, Epoch(1), 0, (ONE,))
    assert replica.on_partition_record(record) == (
        "quorum mode: the replicas elect their leader, not the controller"
    )


def test_a_batch_that_lies_about_its_size_is_refused_with_its_reason() -> None:
    """The leader checks a produce's framing; its CRC is the door's (protocol/validate.py,
    the "bad CRC" case of test_produce_validation), not computed again here."""
    replica, _ = lone_leader()
    cut = build_batch(b"payload")[:-1]
    replica.propose(3, cut, acks=ACKS_ALL)
    (completion,) = replica.ready().completions
    assert isinstance(completion.error, CorruptBatch)
    assert "present" in str(completion.error)
    assert replica.log.log_end_offset == 1


def test_a_follower_refuses_produce_with_a_leader_hint() -> None:
    members = (ONE, NodeId(2))
    replica = Replica(ReplicaConfig(NodeId(2), members), MemoryStorage(), random.Random(2))
    replica.propose(1, build_batch(b"x"), acks=ACKS_ALL)
    (completion,) = replica.ready().completions
    assert isinstance(completion.error, NotLeader)
    assert completion.error.leader_hint is None


def test_fetch_errors_name_the_range_and_fence_old_epochs() -> None:
    replica, _ = lone_leader()
    result = replica.fetch(Offset(5), max_bytes=100)
    assert isinstance(result.error, OffsetOutOfRange)
    assert (result.error.log_start_offset, result.error.end_offset) == (0, 1)
    fenced = replica.fetch(Offset(0), max_bytes=100, current_leader_epoch=Epoch(0))
    assert isinstance(fenced.error, FencedEpoch)
    future = replica.fetch(Offset(0), max_bytes=100, current_leader_epoch=Epoch(9))
    assert isinstance(future.error, OffsetNotAvailable)
    assert replica.fetch(Offset(1), max_bytes=100).batches == ()


def test_a_restarted_replica_recovers_its_epoch_vote_and_log() -> None:
    replica, storage = lone_leader()
    replica.propose(1, build_batch(b"kept"), acks=ACKS_ALL)
    persist(replica, storage)
    again = Replica(ReplicaConfig(ONE, (ONE,)), storage, random.Random(3))
    assert (again.epoch, again.voted_for, again.role) == (1, ONE, Role.FOLLOWER)
    assert again.log.log_end_offset == 2
    again.campaign()
    persist(again, storage)
    assert again.epoch == 2
    assert again.hwm == 3  # its new control batch commits everything before it


def test_no_input_between_ready_and_advance() -> None:
    replica, _ = lone_leader()
    replica.propose(1, build_batch(b"x"), acks=ACKS_ALL)
    replica.ready()
    with pytest.raises(AssertionError):
        replica.tick()


def idempotent(
    value: bytes, sequence: int, *, records: int = 1, epoch: int = 0, producer_id: int = 77
) -> bytes:
    return build_batch(value, records=records, producer=(producer_id, epoch, sequence))


def test_a_retried_idempotent_batch_gets_its_first_offsets_and_is_not_appended() -> None:
    replica, storage = lone_leader()
    replica.propose(1, idempotent(b"a", 0, records=2), acks=ACKS_ALL)
    persist(replica, storage)
    replica.propose(2, idempotent(b"a", 0, records=2), acks=ACKS_ALL)
    (again,) = [c for r in persist(replica, storage) for c in r.completions]
    assert (again.request_id, again.base_offset, again.next_offset) == (2, 1, 3)
    assert again.retried
    assert replica.log.log_end_offset == 3


def test_a_batch_that_reuses_a_logged_batchs_sequences_is_answered_as_that_batch() -> None:
    """As Kafka does, a retry is known by its producer, epoch and sequences alone: a batch
    that carries other records under the sequences of one in the log is answered with that
    batch's offsets, marked `retried`, and never written. (A client that gives a failed
    send's sequence numbers to its next records meets this: tests/test_compat_node.py.)"""
    replica, storage = lone_leader()
    replica.propose(1, idempotent(b"s203", 0), acks=ACKS_ALL)
    replica.propose(2, idempotent(b"s204", 1), acks=ACKS_ALL)  # its answer never arrives
    replica.propose(3, idempotent(b"s207", 1), acks=ACKS_ALL)  # the next send, sequence 1
    replica.propose(4, idempotent(b"s208", 2), acks=ACKS_ALL)
    answers = {c.request_id: c for r in persist(replica, storage) for c in r.completions}
    assert {i: (a.base_offset, a.retried, a.error) for i, a in answers.items()} == {
        1: (1, False, None),
        2: (2, False, None),
        3: (2, True, None),
        4: (3, False, None),
    }
    batches = replica.fetch(Offset(1), max_bytes=1 << 20).batches
    assert [read_header(b).base_offset for b in batches] == [1, 2, 3]
    assert [b"s207" in b for b in batches] == [False, False, False]


def test_idempotent_sequence_gaps_and_old_epochs_are_refused() -> None:
    replica, storage = lone_leader()
    replica.propose(1, idempotent(b"a", 0, epoch=1), acks=ACKS_ALL)
    persist(replica, storage)
    replica.propose(2, idempotent(b"b", 5, epoch=1), acks=ACKS_ALL)
    replica.propose(3, idempotent(b"c", 1, epoch=0), acks=ACKS_ALL)
    errors = [type(c.error) for r in persist(replica, storage) for c in r.completions]
    assert errors == [OutOfOrderSequence, InvalidProducerEpoch]


def test_producer_states_are_rebuilt_from_the_log_on_restart() -> None:
    replica, storage = lone_leader()
    replica.propose(1, idempotent(b"a", 0), acks=ACKS_ALL)
    persist(replica, storage)
    again = Replica(ReplicaConfig(ONE, (ONE,)), storage, random.Random(3))
    again.campaign()
    persist(again, storage)
    again.propose(2, idempotent(b"a", 0), acks=ACKS_ALL)
    (completion,) = [c for r in persist(again, storage) for c in r.completions]
    assert (completion.base_offset, completion.error) == (1, None)


def test_a_new_producer_epoch_starts_at_sequence_zero() -> None:
    replica, storage = lone_leader()
    replica.propose(1, idempotent(b"a", 0, epoch=1), acks=ACKS_ALL)
    replica.propose(2, idempotent(b"b", 3, epoch=2), acks=ACKS_ALL)
    replica.propose(3, idempotent(b"c", 0, epoch=2), acks=ACKS_ALL)
    errors = {c.request_id: type(c.error) for r in persist(replica, storage) for c in r.completions}
    assert errors == {1: type(None), 2: OutOfOrderSequence, 3: type(None)}


def restarted_leader(storage: MemoryStorage) -> Replica:
    again = Replica(ReplicaConfig(ONE, (ONE,)), storage, random.Random(3))
    again.campaign()
    persist(again, storage)
    return again


def test_a_retry_whose_first_copy_was_deleted_is_never_written_twice() -> None:
    """The producer snapshot saved with the log start outlives the deleted batches: a
    retry of the last one is answered with its first offsets, before and after a restart,
    whatever its sequence (0 included); a producer never seen that does not start at 0 is
    refused (UNKNOWN_PRODUCER_ID)."""
    replica, storage = lone_leader()
    replica.propose(1, idempotent(b"a", 0), acks=ACKS_ALL)
    replica.propose(2, idempotent(b"b", 1), acks=ACKS_ALL)
    replica.propose(3, idempotent(b"z", 0, producer_id=8), acks=ACKS_ALL)
    persist(replica, storage)
    assert replica.delete_records(replica.log.log_end_offset) == 4
    persist(replica, storage)
    replica.propose(4, idempotent(b"b", 1), acks=ACKS_ALL)
    (first,) = [c for r in persist(replica, storage) for c in r.completions]
    assert (first.base_offset, first.error) == (2, None)
    again = restarted_leader(storage)
    end = again.log.log_end_offset
    again.propose(5, idempotent(b"b", 1), acks=ACKS_ALL)
    again.propose(6, idempotent(b"z", 0, producer_id=8), acks=ACKS_ALL)
    again.propose(7, idempotent(b"y", 4, producer_id=9), acks=ACKS_ALL)
    answers = {c.request_id: c for r in persist(again, storage) for c in r.completions}
    assert (answers[5].base_offset, answers[5].error) == (2, None)
    assert (answers[6].base_offset, answers[6].error) == (3, None)
    assert isinstance(answers[7].error, UnknownProducerId)
    assert again.log.log_end_offset == end


def test_an_emptied_log_keeps_the_epoch_of_its_last_record() -> None:
    """DeleteRecords up to the log end leaves no record, yet the last epoch is known (votes
    and consistency checks need it), in memory and after a restart."""
    replica, storage = lone_leader()
    replica.propose(1, build_batch(b"x"), acks=ACKS_ALL)
    persist(replica, storage)
    end = replica.log.log_end_offset
    replica.delete_records(end)
    persist(replica, storage)
    assert (replica.log.log_start_offset, replica.log.last_epoch) == (end, 1)
    again = Replica(ReplicaConfig(ONE, (ONE,)), storage, random.Random(3))
    assert (again.log.log_start_offset, again.log.log_end_offset) == (end, end)
    assert again.log.last_epoch == 1
    assert again.log.epoch_at(Offset(end - 1)) == 1


def test_a_refused_pre_vote_that_moves_the_epoch_keeps_the_lease() -> None:
    """A follower that heard from its leader moments ago refuses votes for an election
    timeout (the leader's read lease rests on it), also in an epoch a refused pre-vote moved
    it to (found by the simulator: seed 2431, 5 replicas)."""
    one, two, three = NodeId(1), NodeId(2), NodeId(3)
    config = ReplicaConfig(two, (one, two, three), election_ticks=10, heartbeat_ticks=2)
    storage = MemoryStorage()
    follower = Replica(config, storage, random.Random(1))
    for _ in range(config.election_ticks):  # a restarted replica's lease first passes
        follower.tick(now_ms=0)
    heartbeat = AppendRequest(one, two, Epoch(1), Offset(0), NO_EPOCH, (), Offset(0), 0, Offset(0))
    follower.step(heartbeat)
    persist(follower, storage)
    # Node 3, a candidate in epoch 2, refuses a pre-vote of ours: we move to epoch 2.
    follower.step(VoteResponse(three, two, Epoch(2), False, True))
    follower.step(VoteRequest(three, two, Epoch(2), NO_EPOCH, Offset(0), False))
    votes = [m for r in persist(follower, storage) for m in r.messages_after_persist]
    assert [(v.epoch, v.granted) for v in votes if isinstance(v, VoteResponse)] == [(2, False)]
    for _ in range(config.election_ticks):  # no word from a leader for an election timeout
        follower.tick(now_ms=0)
    follower.step(VoteRequest(three, two, Epoch(2), NO_EPOCH, Offset(0), False))
    votes = [m for r in persist(follower, storage) for m in r.messages_after_persist]
    assert [(v.epoch, v.granted) for v in votes if isinstance(v, VoteResponse)] == [(2, True)]
