"""What goes into and comes out of a replica: peer messages, client results, and `Ready`.

Every peer message names its sender, its recipient and the sender's epoch. An epoch older
than the recipient's is fenced: it is rejected and changes nothing (KIP-320).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidelog.core.isr import GivenUp, IsrProposal
from tidelog.core.membership import VoterSet
from tidelog.core.producers import ProducerEntry
from tidelog.errors import TidelogError
from tidelog.types import NO_DIRECTORY, NO_EPOCH, DirectoryId, Epoch, NodeId, Offset


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before a replica acts on it: its epoch and its vote in it."""

    epoch: Epoch
    voted_for: NodeId | None


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """Leader -> follower: batches starting at `prev_offset`, or none (probe / heartbeat).

    The follower accepts them only if its record at prev_offset - 1 is of `prev_epoch`
    (the consistency check). A `reset` tells a follower too far behind that the leader's
    log now begins at `prev_offset` (the batch holding its log start): the follower keeps
    its log if its record at prev_offset - 1 is of `prev_epoch`, else drops it and starts
    empty there (Kafka's truncateFullyAndStartAt). `hwm` and `log_start_offset` are the
    leader's. `sent_ms` is the leader's clock when it sent this; the answer echoes it, which
    dates the leader's lease. `seq` numbers the leader's requests: the answer echoes it, so
    a leader probing a follower takes only the answer to its probe. A reset carries the
    leader's producer snapshot at `prev_offset` in `producers` (`producers.encode_entries`),
    so that a retry whose first copy lies below it is still recognised, and its voter set
    there in `voters` (one VotersRecord value, `membership.encode_voters`). `quiesce` asks
    a follower that holds the whole log to quiesce (core/quiesce.py); it names the
    incarnation of the leader's node process (core/liveness.py) in `incarnation`.
    """

    sender: NodeId
    recipient: NodeId
    epoch: Epoch
    prev_offset: Offset
    prev_epoch: Epoch
    batches: tuple[bytes, ...]
    hwm: Offset
    sent_ms: int
    log_start_offset: Offset
    reset: bool = False
    seq: int = 0
    producers: tuple[bytes, ...] = ()
    voters: tuple[bytes, ...] = ()
    quiesce: bool = False
    incarnation: int = 0


@dataclass(frozen=True, slots=True)
class AppendResponse:
    """Follower -> leader, sent only once the follower's log is durable.

    On success `match_offset` is the end of the prefix the follower now holds and has
    verified against the leader. On rejection (`success` False), (`hint_epoch`,
    `match_offset`) is where the follower's log may last agree with the leader's: the end
    of the follower's largest epoch <= the asked one (KIP-101/279). `request_sent_ms` and
    `seq` echo the request's `sent_ms` and `seq`. `repairing` says the follower lost part
    of a log it once held (its storage set damage aside) and has not reached it again: the
    leader forgets what it acknowledged before and does not count it as in sync.
    `directory` names the follower's copy (KIP-853): a leader counts the answers of one
    copy, and a new one (an empty disk) only once it is a voter (core/membership.py).
    `session` is the follower's node-liveness session with the leader's node when it
    answered (core/liveness.py): a quiesced leader's reads rest on it (core/quiesce.py).
    """

    sender: NodeId
    recipient: NodeId
    epoch: Epoch
    success: bool
    prev_offset: Offset
    match_offset: Offset
    hint_epoch: Epoch
    request_sent_ms: int
    seq: int = 0
    repairing: bool = False
    directory: DirectoryId = NO_DIRECTORY
    session: int = 0


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """Candidate -> voter. A pre-vote asks whether a vote would be granted, changing nothing.
    `transfer` marks the campaign of a leadership transfer's target (TimeoutNow): the
    voters' lease does not hold it back, as the leader that asked for it gave its up.
    `directory` names the candidate's copy (KIP-853's CandidateDirectoryId)."""

    sender: NodeId
    recipient: NodeId
    epoch: Epoch
    last_epoch: Epoch
    log_end_offset: Offset
    pre_vote: bool
    transfer: bool = False
    directory: DirectoryId = NO_DIRECTORY


@dataclass(frozen=True, slots=True)
class VoteResponse:
    """Voter -> candidate. A granted real vote is sent only once it is durable. `directory`
    names the voter's copy: a candidate counts only the votes of its voter set's keys."""

    sender: NodeId
    recipient: NodeId
    epoch: Epoch
    granted: bool
    pre_vote: bool
    directory: DirectoryId = NO_DIRECTORY


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leader -> the target of a leadership transfer, once the target holds the leader's
    whole log durably: campaign at once (Raft thesis §3.10, etcd-io/raft's MsgTimeoutNow)."""

    sender: NodeId
    recipient: NodeId
    epoch: Epoch


@dataclass(frozen=True, slots=True)
class WakeUp:
    """A replica that hears from no leader and may not campaign (under repair, an
    observer, ISR mode's follower) -> its peers: a quiesced leader among them wakes
    (core/quiesce.py rule 2); anyone else takes it as any message of its epoch."""

    sender: NodeId
    recipient: NodeId
    epoch: Epoch


Message = AppendRequest | AppendResponse | VoteRequest | VoteResponse | TimeoutNow | WakeUp


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """The completion of one produce request: the offsets it got, or why it failed.
    `retried`: the batch repeated one already in the log (the same producer, epoch and
    sequences), so it was not appended again and the offsets are those that batch got."""

    request_id: int
    base_offset: Offset | None
    next_offset: Offset | None
    error: TidelogError | None
    retried: bool = False


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Committed batches from the asked offset on, with the replica's watermarks."""

    batches: tuple[bytes, ...]
    hwm: Offset
    log_start_offset: Offset
    error: TidelogError | None = None


@dataclass(frozen=True, slots=True)
class LostCopy:
    """Follower `follower` refused our probe with a log ending at `log_end`, below the
    `acknowledged` it had acknowledged: it lost records (its copy lost with a disk, rule 7
    of the replica). The caller logs it, naming the partition."""

    follower: NodeId
    acknowledged: Offset
    log_end: Offset


@dataclass(frozen=True, slots=True)
class Ready:
    """What the caller must do, in this order, before calling `Replica.advance(ready)`:

    1. Persist: save `hard_state` if set; if `reset_to` is set, drop the whole log and start
       it empty at that offset, its last record of `reset_prev_epoch`, `reset_voters` the
       voter set in effect there (`LogStorage.reset`'s `voters`); if `truncate_to` is
       set, truncate the log there; append `batches` at the log end; save `hwm`; if
       `log_start_offset` is set, advance the log start there (DeleteRecords); with a reset
       or a new log start, save `producers`, the producer snapshot at the log start; if
       `repair_floor_cleared`, forget the repair floor; then make all of it durable (fsync).
       `hwm` may be checkpointed lazily: it is never needed for safety.
    2. Send `messages_after_persist` (acks and votes), which promise durable state.
    `messages` may be sent at once, before or during the persist. `completions` are
    client answers; produce acknowledgements in them are already safe to deliver.
    `isr_proposals` (ISR mode only) go to the controller, which may be at once: they rest
    on what followers hold durably and on the HWM, never on this Ready's writes; its
    answers come back through `Replica.on_isr_answer`. `given_up` (ISR mode only, after
    an unclean election) names committed records this replica gave up: the caller logs
    them, and its storage lowers its HWM (and any HWM checkpoint) to the first of them
    before the truncation in step 1, which then cuts below the old HWM. `lost_copies`
    (a leader) names followers that proved they lost records: the caller logs them.
    No `step`, `tick` or client request may reach the replica between `ready()` and
    `advance()`.
    """

    hard_state: HardState | None = None
    reset_to: Offset | None = None
    reset_prev_epoch: Epoch = NO_EPOCH
    reset_voters: VoterSet | None = None
    producers: tuple[ProducerEntry, ...] = ()
    truncate_to: Offset | None = None
    batches: tuple[bytes, ...] = ()
    hwm: Offset | None = None
    log_start_offset: Offset | None = None
    repair_floor_cleared: bool = False
    messages: tuple[Message, ...] = ()
    messages_after_persist: tuple[Message, ...] = ()
    completions: tuple[ProduceResult, ...] = field(default=())
    isr_proposals: tuple[IsrProposal, ...] = ()
    given_up: tuple[GivenUp, ...] = ()
    lost_copies: tuple[LostCopy, ...] = ()

    @property
    def must_sync(self) -> bool:
        """True when step 1 has anything to make durable."""
        return bool(
            self.hard_state
            or self.reset_to is not None
            or self.truncate_to is not None
            or self.batches
            or self.log_start_offset is not None
            or self.repair_floor_cleared
        )
