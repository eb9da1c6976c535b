"""Rule 9 of the replica: every peer message is checked at the door. One that cannot be
right changes nothing and `step` says why; no message, however forged, trips an assertion.
So is a request to hand leadership over (rule 10): one that cannot be done says why."""

from __future__ import annotations

import functools
import random

import pytest

from tidelog.core import MemoryStorage, Replica, ReplicaConfig, Role
from tidelog.core.membership import ReplicaKey, VoterSet, encode_voters
from tidelog.core.messages import (
    AppendRequest,
    AppendResponse,
    Message,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tidelog.core.mode.quorum import QuorumMode
from tidelog.core.replica import ACKS_ALL, ACKS_LEADER
from tidelog.core.storage import FIRST_DIRECTORY
from tidelog.errors import InvalidBatch
from tidelog.node.driver import run_round
from tidelog.records import CONTROL_TYPE_LEADER_CHANGE, CONTROL_TYPE_VOTERS, build_control_batch
from tidelog.testing.sim import build_batch
from tidelog.types import NO_EPOCH, Epoch, NodeId, Offset

ONE, TWO, THREE, STRANGER = NodeId(1), NodeId(2), NodeId(3), NodeId(9)
BATCH = build_batch(b"forged")
THREE_VOTERS = encode_voters(VoterSet.of(ReplicaKey(n, FIRST_DIRECTORY) for n in (ONE, TWO, THREE)))
# A VOTERS control batch whose VotersRecord announces three voters and holds none.
UNREADABLE_VOTERS = build_control_batch(
    base_offset=Offset(1),
    epoch=Epoch(1),
    control_type=CONTROL_TYPE_VOTERS,
    timestamp_ms=0,
    value=b"\x00\x00\x04",
)


def replica_of(node: NodeId, seed: int = 1) -> tuple[Replica, MemoryStorage]:
    config = ReplicaConfig(node, (ONE, TWO, THREE), election_ticks=10, heartbeat_ticks=2)
    storage = MemoryStorage()
    return Replica(config, storage, random.Random(seed)), storage


def drain(replica: Replica, storage: MemoryStorage) -> list[Message]:
    sent: list[Message] = []
    while run_round(replica, storage, sent.extend) is not None:
        pass
    return sent


def leader() -> tuple[Replica, MemoryStorage]:
    """Node 1, leading epoch 1 with one committed record of its own."""
    replica, storage = replica_of(ONE)
    replica.campaign()
    drain(replica, storage)
    replica.step(VoteResponse(TWO, ONE, Epoch(replica.status().epoch + 1), True, True))
    drain(replica, storage)
    replica.step(VoteResponse(TWO, ONE, replica.status().epoch, True, False))
    drain(replica, storage)
    assert replica.status().role is Role.LEADER
    return replica, storage


def follower() -> tuple[Replica, MemoryStorage]:
    """Node 2, following node 1 in epoch 1."""
    replica, storage = replica_of(TWO)
    taken = replica.step(
        AppendRequest(ONE, TWO, Epoch(1), Offset(0), NO_EPOCH, (BATCH,), Offset(0), 0, Offset(0))
    )
    assert taken is None
    drain(replica, storage)
    assert (replica.status().leader_id, replica.status().log_end_offset) == (ONE, 1)
    return replica, storage


def append(sender: NodeId, recipient: NodeId, epoch: int, **changes: object) -> AppendRequest:
    fields: dict[str, object] = {
        "sender": sender,
        "recipient": recipient,
        "epoch": Epoch(epoch),
        "prev_offset": Offset(1),
        "prev_epoch": Epoch(1),
        "batches": (BATCH,),
        "hwm": Offset(2),
        "sent_ms": 0,
        "log_start_offset": Offset(0),
    }
    fields.update(changes)
    return AppendRequest(**fields)  # type: ignore[arg-type]


CASES = [
    ("follower", append(ONE, THREE, 1), "addressed to node 3"),
    ("follower", append(STRANGER, TWO, 2), "from node 9, no replica"),
    ("follower", append(THREE, TWO, 1), "led by node 1"),
    ("follower", append(THREE, TWO, 1, reset=True, batches=()), "led by node 1"),
    ("follower", append(ONE, TWO, 1, prev_offset=Offset(-1)), "impossible offsets"),
    ("follower", append(ONE, TWO, 1, hwm=Offset(-5)), "impossible offsets"),
    ("follower", append(ONE, TWO, 1, prev_epoch=Epoch(-7)), "impossible offsets"),
    ("follower", append(ONE, TWO, -3), "in epoch -3"),
    ("follower", append(ONE, TWO, 2**31 - 1), "in epoch 2147483647"),
    ("follower", VoteRequest(THREE, TWO, Epoch(2**40), Epoch(1), Offset(9), False), "in epoch"),
    ("follower", append(ONE, TWO, 1, producers=(bytes(36),)), "that is no reset"),
    ("follower", append(ONE, TWO, 1, reset=True, batches=(), producers=(b"x",)), "cannot be"),
    ("follower", VoteRequest(THREE, TWO, Epoch(2), NO_EPOCH, Offset(-1), False), "impossible log"),
    ("follower", TimeoutNow(THREE, TWO, Epoch(1)), "not the leader of epoch 1"),
    ("follower", TimeoutNow(STRANGER, TWO, Epoch(1)), "no replica"),
    ("leader", TimeoutNow(TWO, ONE, Epoch(1)), "not the leader of epoch 1"),
    (
        "leader",
        AppendResponse(TWO, ONE, Epoch(1), True, Offset(1), Offset(1 << 40), Epoch(1), 0, 0),
        "more than the log we lead",
    ),
    ("leader", append(TWO, ONE, 1), "which we lead"),
    ("leader", append(TWO, ONE, 1, reset=True, batches=()), "which we lead"),
    (
        "leader",
        AppendResponse(TWO, ONE, Epoch(1), True, Offset(-1), Offset(-4), NO_EPOCH, 0, 0, False),
        "impossible offsets",
    ),
    ("follower", append(ONE, TWO, 1, reset=True, batches=()), "a voter set that cannot be"),
    ("follower", append(ONE, TWO, 1, voters=(THREE_VOTERS,)), "a voter set that cannot be"),
    (
        "follower",
        append(ONE, TWO, 1, reset=True, batches=(), voters=(THREE_VOTERS[:-1],)),
        "a voter set that cannot be",
    ),
    ("follower", append(ONE, TWO, 1, batches=(UNREADABLE_VOTERS,)), "a voter set that cannot be"),
]


@pytest.mark.parametrize(("who", "msg", "reason"), CASES, ids=[c[2] for c in CASES])
def test_a_message_that_cannot_be_right_changes_nothing(
    who: str, msg: Message, reason: str
) -> None:
    replica, storage = leader() if who == "leader" else follower()
    before = replica.status()
    refusal = replica.step(msg)
    assert refusal is not None and reason in refusal
    assert drain(replica, storage) == []
    assert replica.status() == before


def test_no_message_trips_an_assertion() -> None:
    """Messages of every kind with extreme fields, from anyone to anyone, into leaders,
    followers and fresh replicas: none raises, whatever it does."""
    rng = random.Random(7)
    values = [-(1 << 40), -5, -1, 0, 1, 2, 3, 7, 1 << 40]
    for trial in range(300):
        fresh = functools.partial(replica_of, ONE, trial)
        replica, storage = (leader, follower, fresh)[trial % 3]()
        if trial % 3 == 0:
            replica.propose(1, BATCH, acks=ACKS_ALL)
            drain(replica, storage)
        for _ in range(20):
            pick = rng.choice
            sender, recipient = NodeId(pick([1, 2, 3, 9])), NodeId(pick([1, 2, 2, 3]))
            epoch = Epoch(pick([replica.status().epoch, replica.status().epoch + 1, pick(values)]))
            kind = rng.randrange(5)
            msg: Message
            if kind == 0:
                msg = AppendRequest(
                    sender, recipient, epoch, Offset(pick(values)), Epoch(pick(values)),
                    pick([(), (BATCH,)]), Offset(pick(values)), pick(values),
                    Offset(pick(values)), rng.random() < 0.3, pick(values),
                    pick([(), (b"x" * 36,), (bytes(36),), (b"short",)]),
                )  # fmt: skip
            elif kind == 1:
                msg = AppendResponse(
                    sender, recipient, epoch, rng.random() < 0.5, Offset(pick(values)),
                    Offset(pick(values)), Epoch(pick(values)), pick(values), pick(values),
                    rng.random() < 0.2,
                )  # fmt: skip
            elif kind == 2:
                msg = VoteRequest(
                    sender, recipient, epoch, Epoch(pick(values)), Offset(pick(values)),
                    rng.random() < 0.5, rng.random() < 0.3,
                )  # fmt: skip
            elif kind == 3:
                msg = TimeoutNow(sender, recipient, epoch)
            else:
                msg = VoteResponse(sender, recipient, epoch, rng.random() < 0.5, rng.random() < 0.5)
            replica.step(msg)
            drain(replica, storage)
            if rng.random() < 0.3:
                replica.tick(now_ms=0)
                drain(replica, storage)


def test_a_transfer_that_cannot_be_done_says_why() -> None:
    replica, storage = leader()
    before = replica.status()
    assert replica.transfer_leadership(STRANGER) == "node 9 is no other replica of this partition"
    assert replica.transfer_leadership(ONE) == "node 1 is no other replica of this partition"
    assert drain(replica, storage) == [] or replica.status() == before
    assert isinstance(replica.mode, QuorumMode)
    assert replica.mode.transfer_target is None
    assert replica.transfer_leadership(TWO) is None
    assert replica.transfer_leadership(THREE) == "a transfer is under way"
    assert follower()[0].transfer_leadership(ONE) == "not the leader"


def test_a_producer_may_not_write_a_control_batch() -> None:
    """Only a leader writes control batches (its epoch's first, voter sets): a producer's
    is refused before it reaches the log, as Kafka's INVALID_RECORD."""
    replica, storage = leader()
    end = replica.status().log_end_offset
    control = build_control_batch(
        base_offset=Offset(0),
        epoch=Epoch(0),
        control_type=CONTROL_TYPE_LEADER_CHANGE,
        timestamp_ms=0,
    )
    replica.propose(7, control, acks=ACKS_LEADER)
    ready = replica.ready()
    replica.advance(ready)
    [result] = ready.completions
    assert isinstance(result.error, InvalidBatch) and result.error.code == "INVALID_RECORD"
    assert replica.status().log_end_offset == end
    drain(replica, storage)


def test_a_leaders_status_names_its_voters_and_each_followers_copy() -> None:
    """What DescribeQuorum reads: the voter set, and per follower the copy that answers,
    whether it votes, its match and when it last answered."""
    replica, storage = leader()
    for _ in range(2):
        replica.tick()
    sent = drain(replica, storage)
    probe = next(m for m in sent if isinstance(m, AppendRequest) and m.recipient == TWO)
    answer = AppendResponse(
        TWO,
        ONE,
        probe.epoch,
        True,
        probe.prev_offset,
        probe.prev_offset,
        NO_EPOCH,
        probe.sent_ms,
        probe.seq,
        False,
        FIRST_DIRECTORY,
    )
    assert replica.step(answer) is None
    status = replica.status()
    assert status.directory_id == FIRST_DIRECTORY
    assert [str(key) for key in status.voters] == ["1/?", "2/?", "3/?"]
    two, three = status.followers
    assert (two.node, two.directory, two.voter) == (TWO, FIRST_DIRECTORY, True)
    assert two.match_offset == probe.prev_offset and two.contact_ms == probe.sent_ms
    assert (three.node, three.directory, three.voter, three.match_offset) == (
        THREE,
        None,
        False,
        None,
    )
