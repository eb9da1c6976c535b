"""A replica whose storage set damaged records aside (rule 8 of the replica, scenario 16).

Storage decides what is damaged and reports a repair floor; the core decides what may
happen then: no vote for a candidate below the floor, no campaign, answers marked
`repairing` so the leader forgets the follower's match and does not count it in sync, and
the floor forgotten once the durable log reaches it again.
"""

from __future__ import annotations

import random

import pytest

from tidelog.core import MemoryStorage, ReplicaConfig, Role
from tidelog.core.messages import AppendResponse, HardState, VoteRequest, VoteResponse
from tidelog.core.replica import ACKS_ALL, Replica
from tidelog.core.storage import RepairFloor, later_floor
from tidelog.errors import NotEnoughReplicas, StorageError
from tidelog.node.driver import open_replica, run_round
from tidelog.testing.checker import Checker
from tidelog.testing.cluster import Cluster
from tidelog.testing.sim import build_batch
from tidelog.types import Epoch, NodeId, Offset
from tidelog.wal.batches import build_batches

N1, N2, N3 = NodeId(1), NodeId(2), NodeId(3)
E1, E2 = Epoch(1), Epoch(2)
MEMBERS = (N1, N2, N3)
ROUNDS_MAX = 10_000


def stored_log(count: int) -> MemoryStorage:
    """`count` one-record batches of epoch 1, synced and committed."""
    storage = MemoryStorage()
    storage.save_hard_state(HardState(E1, N1))
    storage.append(build_batches([1] * count))
    storage.save_hwm(Offset(count))
    storage.sync()
    return storage


def damaged_follower(count: int, rotten: int) -> tuple[Replica, MemoryStorage]:
    """Node 3 on a log of `count` records whose batch at `rotten` rotted, started past its
    post-restart lease (so votes are up to its rules alone)."""
    storage = stored_log(count)
    storage.corrupt(Offset(rotten))
    replica = open_replica(ReplicaConfig(N3, MEMBERS), storage, random.Random(3))
    for _ in range(replica.config.election_ticks * 3):
        replica.tick()
        drain(replica, storage)
    return replica, storage


def drain(replica: Replica, storage: MemoryStorage) -> list[object]:
    """Carry out every Ready; the messages they sent."""
    sent: list[object] = []
    while run_round(replica, storage, sent.extend) is not None:
        pass
    return sent


def vote(replica: Replica, storage: MemoryStorage, *, pre_vote: bool, last: int) -> bool:
    """Whether node 3 grants node 2 a (pre-)vote in epoch 2 for a log of `last` records."""
    replica.step(VoteRequest(N2, N3, E2, E1, Offset(last), pre_vote))
    answers = [m for m in drain(replica, storage) if isinstance(m, VoteResponse)]
    assert len(answers) == 1
    return answers[0].granted


def test_unknown_ends_need_a_later_epoch_and_the_later_floor_wins() -> None:
    known, unknown = RepairFloor(E1, Offset(10)), RepairFloor(E1, None)
    assert known.reached_by(E1, Offset(10))
    assert not known.reached_by(E1, Offset(9))
    assert known.reached_by(E2, Offset(0))
    assert not unknown.reached_by(E1, Offset(1 << 40))
    assert unknown.reached_by(E2, Offset(0))
    assert later_floor(known, unknown) == unknown
    assert later_floor(RepairFloor(E2, Offset(3)), unknown) == RepairFloor(E2, Offset(3))
    assert later_floor(None, known) == known


def test_storage_sets_the_rotten_batch_aside_and_the_replica_starts_with_a_floor() -> None:
    replica, storage = damaged_follower(10, rotten=4)
    assert replica.repair_floor == RepairFloor(E1, Offset(10))
    assert (replica.log.log_end_offset, replica.hwm, replica.role) == (4, 4, Role.FOLLOWER)
    assert storage.needs_repair is None
    assert len(replica.log.read(Offset(0), end_offset=Offset(10), max_bytes=1 << 20)) == 4


def test_a_replica_under_repair_refuses_candidates_below_its_floor_only() -> None:
    replica, storage = damaged_follower(10, rotten=4)
    # Its own log ends at 4, yet it answers as the log of 10 it held would.
    assert not vote(replica, storage, pre_vote=True, last=9)
    assert vote(replica, storage, pre_vote=True, last=10)
    assert not vote(replica, storage, pre_vote=False, last=9)
    assert vote(replica, storage, pre_vote=False, last=10)
    assert replica.voted_for == N2


def test_a_replica_under_repair_never_campaigns() -> None:
    replica, storage = damaged_follower(10, rotten=4)  # many election timeouts passed
    replica.campaign()
    assert drain(replica, storage) == []
    assert (replica.role, replica.epoch) == (Role.FOLLOWER, E1)


def test_a_rotten_batch_is_never_read_and_a_whole_log_has_nothing_to_set_aside() -> None:
    storage = stored_log(4)
    assert not storage.quarantine()
    storage.corrupt(Offset(2))
    with pytest.raises(StorageError, match="corrupt batch at offset 2"):
        storage.read(Offset(0), end_offset=Offset(4), max_bytes=1 << 20)
    assert storage.needs_repair == 2


# ------------------------------------------------------------------ with a leader ---------
def settle(cluster: Cluster) -> None:
    for _ in range(ROUNDS_MAX):
        if not cluster.in_flight:
            return
        cluster.deliver(min(cluster.in_flight, key=lambda e: e.seq))
    raise AssertionError("messages kept flowing")


def heartbeat(cluster: Cluster) -> None:
    for _ in range(2):
        cluster.tick(N1)
    settle(cluster)


def three_nodes(min_insync: int | None = None) -> Cluster:
    """Node 1 leads three nodes and has committed two records."""
    cluster = Cluster(
        replicas=3,
        rng=random.Random(0),
        config=lambda node, members: ReplicaConfig(
            node, members, check_quorum=False, min_insync_replicas=min_insync
        ),
    )
    cluster.input(N1, Replica.campaign)
    settle(cluster)
    for value in (b"a", b"b"):
        batch = build_batch(value)
        cluster.input(N1, lambda replica, b=batch: replica.propose(0, b, acks=ACKS_ALL))
        settle(cluster)
    heartbeat(cluster)
    assert cluster.replica(N1).hwm == cluster.replica(N3).hwm == 3
    return cluster


def rot_and_restart(cluster: Cluster, node: NodeId, offset: int) -> None:
    cluster.crash(node)
    storage = cluster.nodes[node].storage
    assert isinstance(storage, MemoryStorage)
    storage.corrupt(Offset(offset))
    cluster.restart(node)


def test_the_leader_forgets_a_repairing_follower_and_counts_it_again_once_repaired() -> None:
    cluster = three_nodes()
    leader = cluster.replica(N1)
    assert leader.progress[N3].match_offset == 3
    rot_and_restart(cluster, N3, offset=1)
    assert cluster.replica(N3).repair_floor == RepairFloor(E1, Offset(3))
    for _ in range(2):
        cluster.tick(N1)
    cluster.deliver(next(e for e in cluster.in_flight if e.msg.recipient == N3))
    (answer,) = [e for e in cluster.in_flight if e.msg.recipient == N1]
    assert isinstance(answer.msg, AppendResponse) and answer.msg.repairing
    cluster.deliver(answer)
    progress = leader.progress[N3]
    assert (progress.repairing, progress.match_offset) == (True, None)
    assert leader.in_sync_replicas() == (N1, N2)
    # An answer to a request sent before the leader heard of the repair counts for nothing.
    stale = AppendResponse(N3, N1, E1, True, Offset(3), Offset(3), Epoch(-1), 0, seq=1)
    cluster.input(N1, lambda replica: replica.step(stale))
    assert progress.match_offset is None
    settle(cluster)
    heartbeat(cluster)
    follower = cluster.replica(N3)
    assert follower.repair_floor is None
    assert (follower.log.log_end_offset, follower.hwm) == (3, 3)
    assert (progress.repairing, progress.match_offset) == (False, 3)
    assert leader.in_sync_replicas() == (N1, N2, N3)
    state = cluster.nodes[N3].storage.load()
    assert state.repair_floor is None  # forgotten durably


def test_the_checker_excuses_a_lost_match_only_until_the_leader_ends_a_probe() -> None:
    """A leader may count a match for records a follower set aside until a probe it sent
    since ends (its answer says where the follower's log ends): a match kept past that is
    a violation (`Checker.check_matches`, scenario 16 repaired twice)."""
    cluster = three_nodes()
    checker = Checker(leases=False)
    leader = cluster.replica(N1)
    rot_and_restart(cluster, N3, offset=1)
    checker.check_matches(dict(cluster.live_replicas()))
    for _ in range(2):
        cluster.tick(N1)
    cluster.deliver(next(e for e in cluster.in_flight if e.msg.recipient == N3))
    follower = cluster.replica(N3)
    assert (follower.leader_id, follower.log.durable_end_offset) == (N1, 1)
    assert leader.progress[N3].match_offset == 3  # the leader has not heard yet: excused
    checker.check_matches(dict(cluster.live_replicas()))
    assert checker.violations == []
    # Its answer (repairing: the leader forgets the match), the probe, the probe's answer.
    # The checker looks after every step, as the simulator's does.
    for recipient in (N1, N3, N1):
        cluster.deliver(next(e for e in cluster.in_flight if e.msg.recipient == recipient))
        checker.check_matches(dict(cluster.live_replicas()))
    progress = leader.progress[N3]
    assert (progress.probing, progress.match_offset) == (False, 1)
    checker.check_matches(dict(cluster.live_replicas()))
    assert checker.violations == []
    progress.match_offset = Offset(3)  # as a leader that did not forget the match would
    checker.check_matches(dict(cluster.live_replicas()))
    assert checker.violations == [
        "leader 1 counts node 3's match 3, but node 3 holds its log durably only up to 1"
    ]


def test_a_repairing_follower_does_not_count_toward_min_insync() -> None:
    cluster = three_nodes(min_insync=3)
    rot_and_restart(cluster, N3, offset=2)
    leader = cluster.replica(N1)
    for _ in range(2):
        cluster.tick(N1)
    cluster.deliver(next(e for e in cluster.in_flight if e.msg.recipient == N3))
    cluster.deliver(next(e for e in cluster.in_flight if e.msg.recipient == N1))
    assert leader.progress[N3].repairing
    results = []
    cluster.listeners.append(lambda node, result: results.append(result))
    cluster.input(N1, lambda replica: replica.propose(9, build_batch(b"c"), acks=ACKS_ALL))
    assert [type(result.error) for result in results] == [NotEnoughReplicas]
