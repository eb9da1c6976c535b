"""core/membership.py: voter sets keyed by (node, directory) and their history (KIP-853)."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.core.membership import (
    ReplicaKey,
    VoterSet,
    VoterSetEntry,
    VoterSetHistory,
    VoterSetRecords,
    change_refusal,
    decode_voters,
    encode_voters,
    history_of,
    voters_in_batch,
)
from tidelog.records import (
    CONTROL_TYPE_LEADER_CHANGE,
    CONTROL_TYPE_VOTERS,
    build_control_batch,
    uvarint,
)
from tidelog.testing.sim import build_batch
from tidelog.types import NO_DIRECTORY, DirectoryId, Epoch, NodeId, Offset

A, B = DirectoryId(0xA), DirectoryId(0xB)


def key(node: int, directory: DirectoryId = A) -> ReplicaKey:
    return ReplicaKey(NodeId(node), directory)


def voters(*nodes: int) -> VoterSet:
    return VoterSet.of(key(node) for node in nodes)


# ---------------------------------------------------------------- voter sets (rules 1, 2)
def test_a_voter_set_counts_a_majority_of_its_keys_only() -> None:
    three = voters(1, 2, 3)
    assert three.majority == 2
    assert three.is_quorum([key(1), key(2)])
    # node 2 on a new disk is another replica: its answer is not a voter's
    assert not three.is_quorum([key(1), key(2, B)])
    assert voters(1, 2, 3, 4).majority == 3


def test_a_voter_set_holds_one_key_per_node_and_never_none() -> None:
    with pytest.raises(ValueError, match="one key per node"):
        VoterSet.of([key(1), key(1, B)])
    with pytest.raises(ValueError, match="at least one"):
        VoterSet.of([])
    with pytest.raises(ValueError, match="already votes"):
        voters(1, 2).add(key(2, B))
    with pytest.raises(ValueError, match="no voter"):
        voters(1, 2).remove(key(2, B))
    with pytest.raises(ValueError, match="at least one"):
        voters(1).remove(key(1))


def test_a_replaced_disk_is_a_remove_then_an_add() -> None:
    three = voters(1, 2, 3)
    without = three.remove(key(2))
    replaced = without.add(key(2, B))
    assert three.differs_by_at_most_one(without)
    assert without.differs_by_at_most_one(replaced)
    assert not three.differs_by_at_most_one(replaced)
    assert replaced.key_of(NodeId(2)) == key(2, B)
    assert replaced.key_of(NodeId(9)) is None


def test_a_copy_votes_under_its_own_key_or_one_of_no_known_directory() -> None:
    """Rule 7: a key of no known directory (a set written before the ids were known)
    matches its node on any directory; a known one only its own copy."""
    known = voters(1, 2)
    assert known.voter_key(NodeId(2), A) == key(2)
    assert known.voter_key(NodeId(2), B) is None
    assert known.voter_key(NodeId(3), A) is None
    unknown = VoterSet.of([key(1), key(2, NO_DIRECTORY)])
    assert unknown.voter_key(NodeId(2), B) == key(2, NO_DIRECTORY)
    assert str(key(2, NO_DIRECTORY)) == "2/?" and str(key(2, B)) == "2/11"


@given(st.integers(1, 7), st.data())
def test_majorities_of_sets_one_change_apart_always_meet(size: int, data: st.DataObject) -> None:
    """Rule 2: any majority of a set and any majority of a set one voter apart share a
    voter, so one epoch never elects two leaders across a change."""
    old = voters(*range(1, size + 1))
    if size > 1 and data.draw(st.booleans()):
        new = old.remove(key(data.draw(st.integers(1, size))))
    else:
        new = old.add(key(size + 1))
    for a in itertools.combinations(sorted(old.voters), old.majority):
        for b in itertools.combinations(sorted(new.voters), new.majority):
            assert set(a) & set(b)


# ---------------------------------------------------------------- the history (rules 4, 5)
def test_the_history_follows_appends_truncations_and_the_log_start() -> None:
    history = VoterSetHistory.starting_with(voters(1, 2, 3))
    history.append(Offset(10), voters(1, 2, 3, 4))
    history.append(Offset(20), voters(1, 2, 4))
    assert history.current == voters(1, 2, 4)
    assert history.at(Offset(9)) == voters(1, 2, 3)
    assert history.at(Offset(10)) == voters(1, 2, 3, 4)
    assert history.committed(Offset(20)) == voters(1, 2, 3, 4)
    assert history.uncommitted(Offset(20)) and not history.uncommitted(Offset(21))
    assert history.truncate(Offset(20))
    assert history.current == voters(1, 2, 3, 4)
    assert history.trim(Offset(15))
    assert history.entries == (VoterSetEntry(Offset(10), voters(1, 2, 3, 4)),)
    assert not history.trim(Offset(15))
    assert not history.truncate(Offset(0))  # a partition is never without voters
    history.reset(Offset(40), voters(1, 2))
    assert history.entries == (VoterSetEntry(Offset(39), voters(1, 2)),)
    assert not history.uncommitted(Offset(40))
    history.append(Offset(40), voters(1))
    with pytest.raises(ValueError, match="not after"):
        history.append(Offset(40), voters(2))


@given(st.lists(st.tuples(st.sampled_from(["append", "truncate", "trim"]), st.integers(0, 60))))
def test_the_history_answers_as_a_list_of_every_offset(ops: list[tuple[str, int]]) -> None:
    """Against a plain model: the set in effect at each offset of a log of 60."""
    sets = [voters(1), voters(1, 2), voters(1, 2, 3), voters(2, 3)]
    history = VoterSetHistory.starting_with(sets[0])
    model: list[tuple[int, VoterSet]] = [(-1, sets[0])]
    start = 0
    for number, (op, offset) in enumerate(ops):
        if op == "append" and offset > model[-1][0] and offset >= start:
            chosen = sets[number % len(sets)]
            history.append(Offset(offset), chosen)
            model.append((offset, chosen))
        elif op == "truncate" and offset > start:
            history.truncate(Offset(offset))
            model = [model[0]] + [e for e in model[1:] if e[0] < offset]
        elif op == "trim" and offset > start:
            history.trim(Offset(offset))
            start = offset
        for probe in range(start, 61):
            expected = [voters for at, voters in model if at <= probe]
            assert history.at(Offset(probe)) == (expected[-1] if expected else model[0][1])
        assert history.current == model[-1][1]


# ---------------------------------------------------------------- when a leader may change
def test_a_change_waits_for_an_own_epoch_commit_and_for_the_last_change() -> None:
    """Rule 3 (the raft-dev 2015 bug: a leader of epoch 2 that changed the set before
    committing an entry of its own could commit a change a leader of epoch 1 began)."""
    history = VoterSetHistory.starting_with(voters(1, 2, 3))
    four = voters(1, 2, 3, 4)
    assert change_refusal(history, four, hwm=Offset(10), epoch_start_offset=Offset(10)) == (
        "no record of the leader's own epoch is committed yet"
    )
    assert change_refusal(history, four, hwm=Offset(11), epoch_start_offset=Offset(10)) is None
    history.append(Offset(12), four)
    refusal = change_refusal(
        history, voters(1, 2, 4), hwm=Offset(12), epoch_start_offset=Offset(10)
    )
    assert refusal == "the voter set appended at 12 is not committed yet"
    assert change_refusal(history, voters(1, 2), hwm=Offset(13), epoch_start_offset=Offset(10)) == (
        "a change adds or removes one voter at a time"
    )
    assert change_refusal(history, four, hwm=Offset(13), epoch_start_offset=Offset(10)) == (
        "the voter set is already that"
    )
    assert (
        change_refusal(history, voters(1, 2, 4), hwm=Offset(13), epoch_start_offset=Offset(10))
        is None
    )


# ---------------------------------------------------------------- the VotersRecord -------
@given(st.sets(st.integers(0, 2**31 - 1), min_size=1, max_size=7), st.data())
def test_a_voters_record_reads_back_as_written(nodes: set[int], data: st.DataObject) -> None:
    directories = st.integers(0, 2**63 - 1).map(DirectoryId)
    written = VoterSet.of(ReplicaKey(NodeId(n), data.draw(directories)) for n in nodes)
    batch = build_control_batch(
        base_offset=Offset(5),
        epoch=Epoch(2),
        control_type=CONTROL_TYPE_VOTERS,
        timestamp_ms=0,
        value=encode_voters(written),
    )
    assert voters_in_batch(batch) == written


def test_a_voters_record_with_endpoints_and_tags_is_read_as_kafka_writes_it() -> None:
    """KRaft's VotersRecord names endpoints and may carry tagged fields: they are skipped."""
    value = (
        struct.pack(">h", 0)
        + uvarint(2)  # one voter
        + struct.pack(">iQQ", 3, 0, 0xD1)
        + uvarint(2)  # one endpoint: Name, Host, Port, no tags
        + uvarint(len(b"CONTROLLER") + 1)
        + b"CONTROLLER"
        + uvarint(len(b"localhost") + 1)
        + b"localhost"
        + struct.pack(">H", 9093)
        + uvarint(0)
        + struct.pack(">hh", 0, 1)
        + uvarint(0)
        + uvarint(1)  # one tagged field on the voter
        + uvarint(0)
        + uvarint(2)
        + b"xy"
        + uvarint(0)
    )
    assert decode_voters(value) == VoterSet.of([ReplicaKey(NodeId(3), DirectoryId(0xD1))])


@pytest.mark.parametrize(
    "value",
    [b"", b"\x00\x01\x02", b"\x00\x00\x03", encode_voters(VoterSet.of([key(1)])) + b"!"],
    ids=["empty", "version 1", "cut short", "bytes after it"],
)
def test_a_voters_record_that_cannot_be_read_says_so(value: bytes) -> None:
    with pytest.raises(ValueError):
        decode_voters(value)


def test_only_a_voters_control_batch_holds_a_voter_set() -> None:
    leader_change = build_control_batch(
        base_offset=Offset(0),
        epoch=Epoch(1),
        control_type=CONTROL_TYPE_LEADER_CHANGE,
        timestamp_ms=0,
    )
    assert voters_in_batch(leader_change) is None
    assert voters_in_batch(build_batch(b"data")) is None


def test_storage_records_follow_the_log_and_start_the_replicas_history() -> None:
    """`VoterSetRecords` keeps what a storage's log holds; `history_of` puts the partition's
    first set before it unless a set carried from below the log start stands in for it."""
    first, second, third = voters(1, 2, 3), voters(1, 2), voters(1, 2, 4)
    records = VoterSetRecords()
    for offset, voter_set in ((4, second), (9, third)):
        batch = build_control_batch(
            base_offset=Offset(offset),
            epoch=Epoch(1),
            control_type=CONTROL_TYPE_VOTERS,
            timestamp_ms=0,
            value=encode_voters(voter_set),
        )
        assert records.on_batch(batch, Offset(offset))
    assert not records.on_batch(build_batch(b"data"), Offset(10))
    assert history_of(first, records.entries, Offset(0)).at(Offset(3)) == first
    records.trim(Offset(9))  # the first batch at 9: the set below it stays
    assert [e.offset for e in records.entries] == [4, 9]
    assert history_of(first, records.entries, Offset(9)).at(Offset(8)) == second
    records.trim(Offset(12))
    assert [e.offset for e in records.entries] == [9]
    records.truncate(Offset(9))
    assert records.entries == ()
    records.reset(Offset(20), third)
    history = history_of(first, records.entries, Offset(20))
    assert history.current == third and history.last_offset == 19
