"""The mutation gate: a safety rule is only real when removing it fails a test.

    python -m tidelog.testing.mutants [--only NAME ...] [--jobs 2] [--json] [--list]

Each mutant in `CATALOGUE` weakens one safety or liveness rule of the replication core by
exact text replacements. The gate applies each, one at a time, to a copy of the package in
a temporary directory and runs the checks of `mutant_checks` over that copy in a
subprocess: the scenario transcripts first, then bounded simulator seeds in memory and on
the faulty disk, with 3, 4 and 5 replicas, of the group coordinators, of ISR mode, of
replica sets that move and of partitions that quiesce, until a seed catches it (a
transcript's catch does not stop the seeds).

Rules of this file:
- An anchor (the old text of an edit) is a short, distinctive snippet that must occur
  exactly once in its file; otherwise the gate stops before running anything and names
  the mutant and the file (the core changed under it: refit the anchor here). A
  replacement must still compile.
- Mutants edit only `core/`, `node/` and `groups/`: the checks that judge them stay intact.
- The unmutated copy must pass every check that caught a mutant (the baseline): a check
  that fails without a mutant proves nothing about one. The transcripts run first, before
  any mutant; the simulator seeds that caught one run after the mutants, each on its own.
  The sweeps of every seed over the unmutated code are the simulator's own tests
  (tests/test_sim.py, test_group_sim.py, test_sim_isr.py; `make sim`).
- The gate passes (exit 0) only when the baseline passes and every mutant is caught by a
  simulator seed: a rule only a transcript guards is guarded against the one schedule its
  author thought of (a mutant caught by transcripts alone is reported as such and fails
  the gate). The exceptions are named in `TRANSCRIPT_ONLY`, a debt that only shrinks:
  their seeds run only when no transcript caught them (or with `--seeds-for-all`, which
  names those a seed now catches, to be taken off it). Exit 1 otherwise, exit 2 when the
  gate itself cannot run (an anchor, a bad flag). `--transcripts-suffice` stops each
  mutant at its first catch (the gate before it asked for seeds: quicker, weaker).
- Every run is bounded: seeds per mode (`SEED_PLAN`), a time limit per check (in
  `mutant_checks`), per job, and for the whole gate.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import tidelog
from tidelog.testing.mutant_checks import seed_of

PACKAGE = Path(tidelog.__file__).resolve().parent
DEFAULT_SCENARIOS = PACKAGE.parents[1] / "tests" / "scenarios"
EDITABLE_LAYERS = ("core/", "node/", "groups/")
# Seeds per simulator mode for each mutant, tried interleaved after the transcripts.
SEED_PLAN = (
    ("memory-3", 200),
    ("memory-4", 60),  # an even replica count (its majority is not a half)
    ("memory-5", 100),
    ("disk-3", 60),
    ("disk-5", 40),
    ("groups-3", 150),
    ("isr", 20),  # 2,000 walks of ISR mode's model, in batches of 100
    ("isr-sim-3", 60),  # the real IsrReplica in the simulator (`sim --mode isr`)
    ("membership", 20),  # 2,000 walks of the membership model, in batches of 100
    ("moves-4", 40),  # the replica set changing under the faults (`sim --moves`)
    ("quiesce-3", 40),  # idle partitions quiescing over node liveness (`sim --quiesce`)
)
# The seed that caught each mutant slowly (after more than a few rounds of the plan) when
# the gate last ran (`--json`: by_seed): tried first, right after the transcripts, so the
# gate stays within minutes. When the code moves under one and it no longer catches, the
# plan's seeds still run in full; refresh the entry from the gate's report.
FIRST_SEEDS: dict[str, tuple[str, int]] = {
    "voters-change-before-own-epoch-commit": ("membership", 48),  # walk 4727
    "removed-leader-counts-its-own-copy": ("moves-4", 114),
    "produce-while-handing-over": ("memory-3", 100),
    "lead-on-after-timeout-now": ("groups-3", 56),
    "reset-resent-as-probe": ("memory-3", 145),
    "producer-state-survives-truncation": ("memory-5", 41),
    "emptied-log-forgets-last-epoch": ("memory-5", 42),
    "vote-without-up-to-date-check": ("memory-3", 11),
    "isr-any-answer-settles": ("isr", 13),
    "reset-drops-acknowledged": ("disk-3", 8),
    "reset-below-hwm": ("disk-5", 8),
    "quorum-ignores-min-insync": ("memory-3", 5),
    "vote-in-own-epoch-ignores-lease": ("memory-5", 9),
    "accept-stale-epoch-acks": ("memory-5", 43),
    "quiesced-follower-ignores-higher-epoch": ("quiesce-3", 5),
    "follower-never-woken-by-an-append": ("quiesce-3", 2),
    "lease-kept-across-quiescence-without-liveness": ("quiesce-3", 3),
    "dead-node-partitions-never-woken": ("quiesce-3", 5),
}
JOB_SECONDS_MAX = 900
GATE_SECONDS_MAX = 1800
STDERR_TAIL_CHARS = 400


@dataclass(frozen=True, slots=True)
class Mutant:
    """A named weakening of one rule: `old`, which must occur exactly once in `path` (under
    the package), becomes `new`."""

    name: str
    rule: str
    path: str
    old: str
    new: str


REPLICA = "core/replica.py"
TRACKER = "core/tracker.py"
QUORUM = "core/quorum.py"
STORAGE = "core/storage.py"
PRODUCERS = "core/producers.py"
COORDINATOR = "groups/coordinator.py"
GROUP = "groups/group.py"
ISR = "core/isr.py"
ISR_MODE = "core/mode/isr.py"
QUORUM_MODE = "core/mode/quorum.py"
MEMBERSHIP = "core/membership.py"
STATE = "core/state.py"
CONFIG = "core/config.py"
REQUESTS = "core/requests.py"
FOLLOW = "core/follow.py"
REPLICATE = "core/replicate.py"
QUIESCE = "core/quiesce.py"

# Not here, because no check can catch them: counting the leader's own unsynced copy toward
# the HWM, or a candidate's own unsynced vote. The Ready contract steps nothing between
# `ready()` and `advance()`, so every acknowledgement a leader counts, and every vote a
# candidate counts, arrives after its own copy or vote is durable: those rules only matter
# to a driver that steps inputs while a sync is in flight (etcd's asynchronous writes).
# Nor forgetting the match of a follower that refuses a probe below it (rule 7, scenario
# 26): since a copy is named by its directory id (issue 44), a node back on an empty disk
# answers from a new directory and its leader forgets the old copy at once (`new_copy`);
# a probe refused below the match now only tells of a copy that lost acknowledged records
# under its own id (a disk restored from an old backup), which is outside the fault model
# (such a copy can elect a leader without a committed record). Scenario 26 keeps the rule.
CATALOGUE: tuple[Mutant, ...] = (
    # ---------------------------------------------------------------- commitment --------
    Mutant(
        "figure-8",
        "the HWM moves only into the leader's own epoch (Raft Figure 8)",
        QUORUM_MODE,
        "if candidate is None or candidate <= r.epoch_start_offset:",
        "if candidate is None:",
    ),
    Mutant(
        "follower-acks-before-fsync",
        "a follower's acknowledgement leaves only after its fsync (messages_after_persist)",
        FOLLOW,
        'echoing its time and seq."""\n        self.msgs_after_persist.append(',
        'echoing its time and seq."""\n        self.msgs.append(',
    ),
    Mutant(
        "acks-1-before-fsync",
        "acks=1 is acknowledged once the leader's copy is durable",
        STATE,
        "else durable",
        "else self.log.log_end_offset",
    ),
    Mutant(
        "quorum-ignores-min-insync",
        "an offset commits on max(majority, min.insync.replicas) durable copies",
        QUORUM,
        "return max(majority(voters), min_insync or majority(voters))",
        "return majority(voters)",
    ),
    Mutant(
        "produce-ignores-min-insync",
        "acks=all is refused with NotEnoughReplicas below min.insync.replicas live replicas",
        QUORUM_MODE,
        "if in_sync < needed:",
        "if False:",
    ),
    Mutant(
        "rejection-counts-as-match",
        "a follower's match moves only on a successful consistency check (KAFKA-13141)",
        REPLICATE,
        "if msg.success:\n            self._on_append_accepted(",
        "if True:\n            self._on_append_accepted(",
    ),
    Mutant(
        "ack-beyond-verified-prefix",
        "a follower acknowledges only the prefix it verified, not its whole log",
        FOLLOW,
        "self._answer(msg, True, end, NO_EPOCH)",
        "self._answer(msg, True, self.log.log_end_offset, NO_EPOCH)",
    ),
    # ---------------------------------------------------------------- epochs ------------
    Mutant(
        "in-sync-without-recent-ack",
        "a follower is in sync only if it acknowledged within an election timeout",
        TRACKER,
        "and self.last_ack_tick >= recent_tick",
        "",
    ),
    Mutant(
        "accept-stale-epoch",
        "a message of an older epoch is fenced and changes nothing (KIP-320)",
        REPLICA,
        "if msg.epoch < self.epoch:",
        "if False:",
    ),
    Mutant(
        "accept-stale-epoch-acks",
        "an acknowledgement of an older epoch is fenced, never counted (KIP-320)",
        REPLICA,
        "if msg.epoch < self.epoch:",
        "if msg.epoch < self.epoch and not isinstance(msg, AppendResponse):",
    ),
    Mutant(
        "no-control-batch",
        "a new leader starts its epoch with a control batch (KIP-207)",
        STATE,
        "granting),\n        )\n        self.log.append(control, check_batch(control))",
        "granting),\n        )\n        del control",
    ),
    # ---------------------------------------------------------------- follower log ------
    Mutant(
        "no-consistency-check",
        "a follower appends only after its record at prev_offset - 1 is of prev_epoch",
        FOLLOW,
        "return ours == prev_epoch",
        "return True",
    ),
    Mutant(
        "truncate-held-batches",
        "a follower cuts its log only where it conflicts, never a batch it holds already",
        FOLLOW,
        "and log.epoch_at(held) == header.epoch:",
        "and False:",
    ),
    Mutant(
        "truncate-to-hwm-on-restart",
        "divergence is found by epochs, never by truncating to the local HWM (KIP-101)",
        STATE,
        "self.hwm_in_ready = state.hwm",
        "self.hwm_in_ready = state.hwm\n"
        "        if self.hwm < self.log.log_end_offset:\n"
        "            self.log.truncate(self.hwm)\n"
        "            self.producers.truncate(self.hwm)",
    ),
    Mutant(
        "hwm-before-truncation",
        "a follower takes the leader's HWM only after truncating (KAFKA-14704)",
        FOLLOW,
        "if not self._prefix_matches(",
        "self._raise_hwm(Offset(min(msg.hwm, self.log.log_end_offset)))\n"
        "        if not self._prefix_matches(",
    ),
    Mutant(
        "hwm-bounded-by-log-end",
        "a follower's HWM is bounded by the prefix it verified, not its log end (KAFKA-14704)",
        FOLLOW,
        "self._raise_hwm(Offset(min(msg.hwm, end)))",
        "self._raise_hwm(Offset(min(msg.hwm, self.log.log_end_offset)))",
    ),
    Mutant(
        "reset-below-hwm",
        "a reset to the leader's log start never drops what the follower committed",
        FOLLOW,
        "committed_here = start <= max(self.hwm, self.log.log_start_offset)",
        "committed_here = False",
    ),
    Mutant(
        "follower-log-start-past-hwm",
        "a follower moves its log start only within its own HWM",
        FOLLOW,
        "min(leader_log_start, self.hwm,",
        "min(leader_log_start,",
    ),
    Mutant(
        "leader-log-start-past-hwm",
        "DeleteRecords never moves the log start past the HWM",
        REQUESTS,
        "if offset > readable_end:\n            raise",
        "if offset > self.log.log_end_offset:\n            raise",
    ),
    # ---------------------------------------------------------------- reads -------------
    Mutant(
        "read-above-hwm",
        "clients read only below min(HWM, log end offset)",
        REQUESTS,
        "return FetchResult((), readable_end",
        "return FetchResult((), self.log.log_end_offset",
    ),
    Mutant(
        "new-leader-reads-early",
        "a new leader serves no reads until its HWM passes its epoch start (KIP-207)",
        REQUESTS,
        "if self.hwm <= self.epoch_start_offset:",
        "if False:",
    ),
    Mutant(
        "follower-reads-before-sync",
        "a follower serves reads only once verified against the current leader",
        REQUESTS,
        "if self.role is Role.FOLLOWER and self.follower_synced:",
        "if self.role is Role.FOLLOWER:",
    ),
    Mutant(
        "no-read-lease",
        "a leader serves reads only within a lease a majority granted (Raft §8)",
        QUORUM_MODE,
        "return has_quorum(answered, len(r.voters))",
        "return True",
    ),
    Mutant(
        "read-lease-past-election-timeout",
        "the read lease is shorter than an election timeout",
        CONFIG,
        "(self.election_ticks - LEASE_MARGIN_TICKS)",
        "(self.election_ticks + LEASE_MARGIN_TICKS)",
    ),
    Mutant(
        "lease-dated-by-answer",
        "the lease is dated from when the request was sent, not when its answer came",
        REPLICATE,
        "progress.contact_sent_ms = max(progress.contact_sent_ms, msg.request_sent_ms)",
        "progress.contact_sent_ms = self.now_ms",
    ),
    Mutant(
        "no-consumer-divergence-check",
        "a fetch whose last epoch diverged gets LogDiverged (KIP-320 client side)",
        REQUESTS,
        "if last_fetched_epoch is not None and offset > 0:",
        "if False:",
    ),
    # ---------------------------------------------------------------- elections ---------
    Mutant(
        "vote-without-up-to-date-check",
        "a vote goes only to a candidate whose log is at least as up to date (Raft §5.4.1)",
        QUORUM_MODE,
        "granted = free and up_to_date",
        "granted = free",
    ),
    Mutant(
        "pre-vote-without-up-to-date-check",
        "a pre-vote goes only to a candidate whose log is at least as up to date",
        QUORUM_MODE,
        "and up_to_date and not self._in_lease()",
        "and not self._in_lease()",
    ),
    Mutant(
        "no-pre-vote",
        "a candidate first asks for pre-votes, changing no epoch (Raft thesis §9.6)",
        QUORUM_MODE,
        "if self.r.config.pre_vote:",
        "if False:",
    ),
    Mutant(
        "no-check-quorum",
        "a leader that has not heard from a majority for an election timeout steps down",
        QUORUM_MODE,
        "if r.config.check_quorum and not has_quorum(",
        "if False and not has_quorum(",
    ),
    Mutant(
        "votes-ignore-leader-lease",
        "a replica that heard from a leader within an election timeout ignores votes",
        QUORUM_MODE,
        "if self._in_lease() and not msg.transfer:",
        "if False:",
    ),
    Mutant(
        "restarted-replica-votes-at-once",
        "a restarted replica grants no vote for an election timeout",
        QUORUM_MODE,
        "0 if restarted else",
        "",
    ),
    Mutant(
        "vote-before-fsync",
        "a vote leaves only once it is durable (ZOOKEEPER-4646)",
        QUORUM_MODE,
        "r.msgs_after_persist.append(\n            VoteResponse(r.id, msg.sender, r.epoch, gra",
        "r.msgs.append(\n            VoteResponse(r.id, msg.sender, r.epoch, gra",
    ),
    Mutant(
        "hard-state-not-saved",
        "the epoch and the vote are written (and synced) before anything depends on them",
        "node/driver.py",
        "storage.save_hard_state(ready.hard_state)",
        "pass",
    ),
    # ---------------------------------------------------------------- producers ---------
    Mutant(
        "no-producer-dedup",
        "a retried idempotent batch is answered with its first offsets, not appended again",
        REQUESTS,
        "earlier = self.producers.check(header)",
        "earlier = None",
    ),
    Mutant(
        "followers-skip-producer-state",
        "every replica tracks producer state from the log, so a new leader deduplicates too",
        FOLLOW,
        "self.producers.on_append(header)\n        return end",
        "pass\n        return end",
    ),
    Mutant(
        "producer-state-survives-truncation",
        "a truncation forgets the producer batches it removed",
        FOLLOW,
        "self.producers.truncate(base)",
        "pass",
    ),
    Mutant(
        "deposed-leader-keeps-produces",
        "a deposed leader fails its pending produces (NotLeader)",
        STATE,
        "self._fail_pending(NotLeader(leader))",
        "pass",
    ),
    # ---------------------------------------------------------------- liveness ----------
    Mutant(
        "stalled-pipeline-not-restarted",
        "a follower whose match did not move for a heartbeat is sent its suffix again",
        REPLICATE,
        "progress.next_offset = progress.match_offset\n                progress.inflight.clear()",
        "pass",
    ),
    Mutant(
        "reset-drops-acknowledged",
        "a reset keeps the follower's log when it holds the record before the new start",
        FOLLOW,
        "and self.log.epoch_at(Offset(start - 1)) == msg.prev_epoch",
        "and False",
    ),
    Mutant(
        "probe-takes-any-answer",
        "a probing leader takes only the answer to its probe (scenario 19)",
        REPLICATE,
        "if progress.probing and not progress.answers_probe(msg.seq):",
        "if False:",
    ),
    Mutant(
        "match-goes-back",
        "a follower's match never goes back: a reset drops nothing it acknowledged",
        TRACKER,
        "if self.match_offset is None or match > self.match_offset:",
        "if True:",
    ),
    Mutant(
        "overtaken-refusal-forgets-the-match",
        "a refusal that may have been overtaken by later answers only makes the leader ask "
        "again at the match (scenarios 20, 26)",
        REPLICATE,
        "if progress.probing and progress.probe_key is not None:",
        "if True:",
    ),
    Mutant(
        "unsent-probe-counts-as-asked",
        "only an answer to a probe sent since it began proves a lost copy (scenario 27)",
        REPLICATE,
        "if progress.probing and progress.probe_key is not None:",
        "if progress.probing:",
    ),
    Mutant(
        "reset-resent-as-probe",
        "a lost reset is sent again as a reset, never as a probe (scenario 20)",
        REPLICATE,
        "progress.resetting = progress.resetting or progress.next_offset < floor",
        "progress.resetting = progress.next_offset < floor",
    ),
    Mutant(
        "emptied-log-forgets-last-epoch",
        "a log reset to its leader's start keeps the epoch of the record before it",
        "core/epochs.py",
        "self._entries = [EpochEntry(prev_epoch, Offset(start_offset - 1))]",
        "self._entries = []",
    ),
    Mutant(
        "no-epoch-below-log-start",
        "the epoch history keeps the record before the first batch (scenario 22)",
        "core/epochs.py",
        "before = Offset(first_offset - 1)",
        "before = first_offset",
    ),
    Mutant(
        "unknown-producer-accepted",
        "an unknown producer's batch must start at sequence 0, or it could be a duplicate",
        PRODUCERS,
        "            if producer is None:\n                return UnknownProducerId(",
        "            if False:\n                return UnknownProducerId(",
    ),
    Mutant(
        "lost-probe-not-resent",
        "a lost probe or reset is sent again at the next heartbeat",
        REPLICATE,
        "progress.probe_sent = False  # resent, as it was (a reset as a reset)\n"
        "                continue",
        "continue",
    ),
    Mutant(
        "producer-snapshot-not-saved",
        "storage saves the producer snapshot with a new log start (scenario 23)",
        REPLICA,
        "producers=() if new_start is None else self.producers.snapshot(new_start),",
        "producers=(),",
    ),
    Mutant(
        "reset-forgets-producers",
        "a reset carries the leader's producer snapshot and the follower keeps it (scenario 24)",
        FOLLOW,
        "            self.producers = ProducerStates()\n"
        "            self.producers.restore(entries)",
        "            self.producers = ProducerStates()",
    ),
    Mutant(
        "vote-in-own-epoch-ignores-lease",
        "the lease holds in the voter's own epoch too (a refused pre-vote moved it there)",
        QUORUM_MODE,
        "promised = self._in_lease() and r.voted_for != msg.sender",
        "promised = False",
    ),
    Mutant(
        "repairing-twice-keeps-match",
        "a follower that sets damage aside again while repairing is forgotten again (16)",
        REPLICATE,
        "if msg.repairing and (not progress.repairing or self._lost_again(progress, msg)):",
        "if msg.repairing and not progress.repairing:",
    ),
    Mutant(
        "probe-copies-refused",
        "an answer to any copy of the current probe ends it (a network slower than a heartbeat)",
        TRACKER,
        "if self.probe_key != key:  # a new probe, not a copy of the last",
        "if True:",
    ),
    # ---------------------------------------------------------------- leadership transfer
    Mutant(
        "transfer-keeps-read-lease",
        "a leader that sent TimeoutNow serves no reads: voters may elect its target inside "
        "their lease (rule 10)",
        QUORUM_MODE,
        "return False  # a transfer's target may be elected inside the lease (rule 10)",
        "pass",
    ),
    Mutant(
        "transfer-to-a-lagging-target",
        "TimeoutNow leaves only once the target durably holds the leader's whole log",
        QUORUM_MODE,
        "if progress.repairing or progress.match_offset != r.log.log_end_offset:",
        "if False:",
    ),
    Mutant(
        "produce-while-handing-over",
        "a leader handing its leadership over takes no produce (its target could never catch up)",
        QUORUM_MODE,
        "return NotLeader(self.transfer_target)  # handing over (rule 10)",
        "pass",
    ),
    Mutant(
        "lead-on-after-timeout-now",
        "a leader whose transfer failed after TimeoutNow left steps down (it holds no lease)",
        QUORUM_MODE,
        "if self.timeout_now_sent:  # no lease any more (rule 10): step down",
        "if False:",
    ),
    # ---------------------------------------------------------------- group coordinator -
    Mutant(
        "coordinator-serves-before-loaded",
        "a new coordinator serves only once its HWM reached its epoch (all earlier commits)",
        COORDINATOR,
        "if not self.loaded and caught_up:",
        "if not self.loaded:",
    ),
    Mutant(
        "coordinator-forgets-generations",
        "a new coordinator loads each group's last stored generation from the log",
        COORDINATOR,
        'elif kind == "group" and not self.loaded:',
        "elif False:",
    ),
    Mutant(
        "delete-a-group-with-members",
        "DeleteGroups deletes only an empty group (members keep their offsets)",
        "groups/offsets.py",
        "        raise GroupError(ErrorCode.NON_EMPTY_GROUP)",
        "        pass",
    ),
    Mutant(
        "commit-generation-unfenced",
        "an OffsetCommit names the group's current generation (stale members are fenced)",
        "groups/offsets.py",
        "        if body.generation != group.generation:\n"
        "            raise GroupError(ErrorCode.ILLEGAL_GENERATION)\n"
        "        member.heard(now)\n\n\ndef commit_records(",
        "        member.heard(now)\n\n\ndef commit_records(",
    ),
    Mutant(
        "static-member-answered-before-stored",
        "a static member that takes its own place is answered once the generation's record "
        "names its new id (else a new coordinator would let the old incarnation commit)",
        COORDINATOR,
        "            self._write([group_key(group.group_id)], [group.stored()], pending, now)\n"
        "            return True",
        "            self._reply(request, result)\n            return True",
    ),
    Mutant(
        "static-member-unfenced",
        "a request naming a group instance id whose member is another is fenced (KIP-345)",
        GROUP,
        "        return member is not None and member.member_id != member_id",
        "        return False",
    ),
    Mutant(
        "group-max-size-ignored",
        "a join that would take a group past group.max.size is refused (KIP-389)",
        COORDINATOR,
        "elif not body.member_id and group.size() >= config.group_max_size:",
        "elif False:",
    ),
    # ISR mode (docs/isr.md): judged by the abstract model's random walk (`isr` seeds)
    # and by ISR mode's transcripts.
    Mutant(
        "isr-hwm-over-committed-isr",
        "rule 2: the HWM waits for the maximal ISR (the committed one and a pending proposal's)",
        ISR,
        "        return frozenset(self.record.isr) | frozenset(pending)",
        "        return frozenset(self.record.isr)",
    ),
    Mutant(
        "isr-no-partition-epoch-check",
        "rule 3: a proposal applies only at the partition epoch it saw (KIP-497)",
        ISR,
        "    if proposal.partition_epoch < record.partition_epoch:\n"
        "        return Refusal.INVALID_UPDATE_VERSION\n",
        "",
    ),
    Mutant(
        "isr-expand-before-epoch-start",
        "rule 5: a follower joins the ISR only after fetching past the leader's epoch start",
        ISR,
        "state.match is not None and state.past_epoch_start and state.match >= self.hwm",
        "state.match is not None and state.match >= self.hwm",
    ),
    Mutant(
        "isr-any-answer-settles",
        "a controller's answer settles only the proposal it answers, and only if final",
        ISR,
        "if proposal == self.pending and result.refusal is not Refusal.NOT_CONTROLLER:",
        "if result.refusal is not None or proposal == self.pending:",
    ),
    Mutant(
        "isr-no-strict-min-isr",
        "rule 8b: no HWM advance while the committed ISR is below min.insync.replicas (KIP-966)",
        ISR,
        "        if self.deposed or not self.acks_all_allowed():\n            return\n"
        "        candidate = self.leo",
        "        if self.deposed:\n            return\n        candidate = self.leo",
    ),
    # Rule 9, registrations: judged by the isr-13 transcript and the model's walk, whose
    # restarts may come back on an empty disk.
    Mutant(
        "isr-first-registration-is-a-restart",
        "rule 9: a node's first registration changes nothing (its replicas took no record)",
        ISR,
        "    if first:\n        return record\n",
        "",
    ),
    Mutant(
        "isr-unclean-restart-keeps-the-isr",
        "rule 9: a node that starts again after an unclean stop leaves the ISR and the ELR",
        ISR,
        "    if clean:\n        return relinquish(record, node)\n",
        "    return relinquish(record, node)\n",
    ),
    Mutant(
        "isr-restart-keeps-the-partition-epoch",
        "rule 9: a restart always makes a new partition epoch (a proposal made on what the "
        "node's previous incarnation reported is refused)",
        ISR,
        "    if changed is without:\n        return replace(without, partition_epoch=",
        "    if changed is without:\n        return record\n        return replace(without, "
        "partition_epoch=",
    ),
    Mutant(
        "isr-leader-keeps-reports-of-a-restarted-follower",
        "rule 9: a leader forgets what a follower reported before it started again",
        ISR,
        "        restarted = restarted_since(self.record, record)\n",
        "        restarted = frozenset[NodeId]()\n",
    ),
    Mutant(
        "isr-replica-counts-answers-from-before-a-restart",
        "rule 9: a leader counts a restarted follower only on answers to its requests sent "
        "after the record that says so",
        ISR_MODE,
        "                    progress.forget_match(progress.next_offset, seq_min=r.append_seq + 1)",
        "                    pass",
    ),
    # ISR mode's unclean recovery (rule 10): judged by the isr-06 transcripts.
    Mutant(
        "isr-gives-up-without-unclean-election",
        "rules 10, 11: a replica truncates below its HWM only when the record says an "
        "unclean election happened at or before its leader's epoch",
        ISR,
        "return self.unclean_epoch is not None and leader_epoch >= self.unclean_epoch",
        "return True",
    ),
    Mutant(
        "isr-unchecked-follower-serves-reads",
        "rule 10: a follower whose HWM was not checked against a leader since an unclean "
        "election serves no reads (it may give those records up)",
        ISR_MODE,
        "if r.role is Role.FOLLOWER and not self.hwm_checked():",
        "if False:",
    ),
    # ---------------------------------------------------------------- the gate's blind spots
    # (issue 41): rules no simulator seed asked about before: a producer's sequence gap,
    # quorums of an even replica count (the `memory-4` seeds), OffsetForLeaderEpoch
    # (odd_clients.py asks it).
    Mutant(
        "out-of-order-sequence-accepted",
        "an idempotent batch that leaves a gap after the producer's last sequence is refused "
        "(OutOfOrderSequence)",
        PRODUCERS,
        "if producer.batches and header.base_sequence != expected:",
        "if False:",
    ),
    Mutant(
        "even-count-majority-too-small",
        "a majority of n voters is n // 2 + 1: of 4, 3 (two halves of 2 never both decide)",
        QUORUM,
        "return voters // 2 + 1",
        "return (voters + 1) // 2",
    ),
    Mutant(
        "epoch-end-served-unchecked",
        "OffsetForLeaderEpoch is answered only by a replica that may serve reads (a new "
        "leader's HWM past its epoch start, the read lease)",
        REQUESTS,
        "error = self._fencing_error(current_leader_epoch) or self._serving_error(now_ms)",
        "error = self._fencing_error(current_leader_epoch)",
    ),
    Mutant(
        "epoch-end-past-hwm",
        "OffsetForLeaderEpoch never names an end offset past the HWM (KIP-320)",
        REQUESTS,
        "return epoch, Offset(min(end, self.hwm, self.log.log_end_offset))",
        "return epoch, end",
    ),
    # ---------------------------------------------------------------- membership --------
    Mutant(
        "voters-change-before-own-epoch-commit",
        "a leader appends a voter change only after committing a record of its own epoch "
        "(Ongaro, raft-dev 2015)",
        MEMBERSHIP,
        "if hwm <= epoch_start_offset:",
        "if False:",
    ),
    Mutant(
        "voters-two-changes-in-flight",
        "at most one voter set lies between the HWM and the log end (KAFKA-16580)",
        MEMBERSHIP,
        "if history.uncommitted(hwm):",
        "if False:",
    ),
    Mutant(
        "learner-counted-for-hwm",
        "a copy that is no voter (a learner, a replaced disk) never counts for the HWM",
        QUORUM_MODE,
        "matches += [p.match_offset for p in r.counted_progress() if",
        "matches += [p.match_offset for p in r.progress.values() if",
    ),
    Mutant(
        "replaced-disk-keeps-its-vote",
        "a candidate counts only the votes of the copies its voter set names (KIP-853)",
        QUORUM_MODE,
        "if not r.counts(msg.sender, msg.directory):\n            return  # an observer's",
        "if False:\n            return  # an observer's",
    ),
    Mutant(
        "removed-leader-counts-its-own-copy",
        "a leader elected to commit the change that removed it counts for nothing itself "
        "(membership rule 6)",
        QUORUM_MODE,
        "matches = [r.log.durable_end_offset] if r.is_voter() else []",
        "matches = [r.log.durable_end_offset]",
    ),
    # ---------------------------------------------------------------- quiescence --------
    # core/quiesce.py (issue 42): judged by the `quiesce-3` seeds (`sim --quiesce`).
    Mutant(
        "quiesced-follower-ignores-higher-epoch",
        "a quiesced follower takes a message of a later epoch as any follower does (a new "
        "leader's appends, a transfer's votes): sleeping is no reason to stay behind",
        REPLICA,
        "if msg.epoch > self.epoch and not self._on_higher_epoch(msg):",
        "if msg.epoch > self.epoch and (self.quiesced or not self._on_higher_epoch(msg)):",
    ),
    Mutant(
        "follower-never-woken-by-an-append",
        "a quiesced follower wakes on its leader's next append (else its election timer "
        "stays off, and its promise holds, after the leader woke)",
        FOLLOW,
        "            self.quiesced = False\n        elif self.quiesced:",
        "            pass\n        elif self.quiesced:",
    ),
    Mutant(
        "lease-kept-across-quiescence-without-liveness",
        "a quiesced leader's read lease counts a follower only while node liveness heard "
        "its node, in the session it slept in (core/quiesce.py rule 4)",
        QUORUM_MODE,
        "answered = (contact > since for contact in r.lease_contacts())",
        "answered = (r.quiesced or contact > since for contact in r.lease_contacts())",
    ),
    Mutant(
        "dead-node-partitions-never-woken",
        "node liveness wakes the partitions a dead (or restarted) node shares: its followers "
        "campaign, its leaders heartbeat again (core/quiesce.py rules 2, 3)",
        QUIESCE,
        'found it started again (rules 2, 3)."""\n        if self.role is Role.LEADER:',
        'found it started again (rules 2, 3)."""\n        return\n'
        "        if self.role is Role.LEADER:",
    ),
)

# The debt: mutants that only a transcript catches, because no seed of SEED_PLAN makes the
# schedule that breaks their rule (the simulator's workload or fault model never asks it,
# or too rarely). Their seeds run only when no transcript caught them; each one a seed
# learns to catch comes off this list (the gate fails until it does), and no mutant is
# added to it. Empty since issue 41: a seed catches every mutant of the catalogue.
TRANSCRIPT_ONLY: frozenset[str] = frozenset()


# ==================================================================== applying ==========
class AnchorError(Exception):
    """A mutant does not apply to the current source: the gate cannot judge it."""


def mutated_source(mutant: Mutant, package: Path) -> str:
    """The text of the mutant's file with its edit made. Raises AnchorError."""
    if not mutant.path.startswith(EDITABLE_LAYERS):
        raise AnchorError(f"mutant {mutant.name}: {mutant.path} is outside {EDITABLE_LAYERS}")
    text = (package / mutant.path).read_text()
    found = text.count(mutant.old)
    if found != 1:
        raise AnchorError(
            f"mutant {mutant.name}: its anchor occurs {found} times in {mutant.path}, not once "
            f"(the core changed: refit it in tidelog/testing/mutants.py): {mutant.old!r}"
        )
    mutated = text.replace(mutant.old, mutant.new)
    try:
        compile(mutated, mutant.path, "exec")
    except SyntaxError as error:
        raise AnchorError(
            f"mutant {mutant.name}: {mutant.path} no longer compiles: {error}"
        ) from None
    return mutated


def copy_package(package: Path, directory: Path) -> Path:
    """Copy the package to directory/src/tidelog; returns the copy."""
    copy = directory / "src" / package.name
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


# ==================================================================== running ===========
@dataclass(frozen=True, slots=True)
class Job:
    """One run of the checks over one copy: a mutant's, or a share of the baseline's."""

    name: str
    mutant: Mutant | None
    scenarios: Path | None
    seed_plan: tuple[tuple[str, int], ...]
    seeds: tuple[tuple[str, int], ...] = ()  # single seeds (mode, seed)
    first: tuple[tuple[str, int], ...] = ()  # seeds tried before the plan's
    seeds_too: bool = False  # after a transcript's catch, run the seeds until one catches


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a job's checks found: `caught_by` None means every check passed."""

    name: str
    caught_by: str | None
    detail: str
    checks: int
    seconds: float
    also: tuple[str, ...] = ()  # other transcripts that caught it too
    ran: bool = True  # False: the gate's time was up before the job could start
    by_seed: str | None = None  # the simulator seed that caught it (None: no seed did)
    seed_detail: str = ""

    @property
    def caught(self) -> bool:
        return self.ran and self.caught_by is not None

    @property
    def clean(self) -> bool:
        return self.ran and self.caught_by is None

    @property
    def transcripts_only(self) -> bool:
        """Caught, but by no simulator seed."""
        return self.caught and self.by_seed is None


def checks_command(copy: Path, job: Job) -> list[str]:
    command = [sys.executable, "-m", "tidelog.testing.mutant_checks", "--package", str(copy)]
    if job.scenarios is not None:
        command += ["--scenarios", str(job.scenarios)]
    for mode, seeds in job.seed_plan:
        command += ["--sim", f"{mode}:{seeds}"]
    for mode, seed in job.seeds:
        command += ["--seed", f"{mode}:{seed}"]
    for mode, seed in job.first:
        command += ["--first", f"{mode}:{seed}"]
    if job.seeds_too:
        command.append("--seeds-too")
    return command


def run_job(job: Job, package: Path) -> Outcome:
    """Copy the package, apply the job's mutant, run the checks over the copy."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tidelog-mutant-") as directory:
        copy = copy_package(package, Path(directory))
        if job.mutant is not None:
            (copy / job.mutant.path).write_text(mutated_source(job.mutant, package))
        try:
            done = subprocess.run(
                checks_command(copy, job),
                capture_output=True,
                text=True,
                cwd=directory,
                env={**os.environ, "PYTHONPATH": str(copy.parent)},
                timeout=JOB_SECONDS_MAX,
                check=False,
            )
            stdout, stderr, status = done.stdout, done.stderr, f"status {done.returncode}"
        except subprocess.TimeoutExpired as expired:
            stdout = expired.stdout.decode() if isinstance(expired.stdout, bytes) else ""
            stderr, status = "", f"killed after {JOB_SECONDS_MAX} s"
    return read_verdict(job.name, stdout, stderr, status, time.monotonic() - started)


def read_verdict(name: str, stdout: str, stderr: str, status: str, seconds: float) -> Outcome:
    """The outcome told by the JSON lines of `mutant_checks`.

    A run that ended without its verdict is caught by the check it was in; one that died
    before any check (the mutated package does not import) is caught at import."""
    lines = [line for line in map(json_object, stdout.splitlines()) if line is not None]
    if lines and "caught_by" in lines[-1]:
        last = lines[-1]
        also = tuple(str(label) for label in last["also"])
        seeds = {"by_seed": last.get("by_seed"), "seed_detail": last.get("seed_detail", "")}
        return Outcome(
            name, last["caught_by"], last["detail"], last["checks"], seconds, also, **seeds
        )
    where = str(lines[-1]["check"]) if lines else "import"
    detail = f"the checks died ({status}): {stderr[-STDERR_TAIL_CHARS:]}"
    by_seed = where if seed_of(where) is not None else None
    return Outcome(name, where, detail, len(lines), seconds, by_seed=by_seed)


def json_object(line: str) -> dict[str, Any] | None:
    """A line of `mutant_checks` output, or None for anything else the run printed."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) and ("check" in value or "caught_by" in value) else None


def run_jobs(jobs: list[Job], package: Path, workers: int, deadline: float) -> list[Outcome]:
    """Run jobs `workers` at a time; a job not started by `deadline` does not run."""

    def run_in_time(job: Job) -> Outcome:
        if time.monotonic() > deadline:
            return Outcome(job.name, None, "", 0, 0.0, ran=False)
        return run_job(job, package)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run_in_time, jobs))


def seed_baseline_jobs(outcomes: list[Outcome]) -> list[Job]:
    """The unmutated copy over each simulator seed that caught a mutant, a job each."""
    labels = [label for o in outcomes if o.caught for label in (o.caught_by, o.by_seed)]
    caught = {seed_of(label) for label in labels}
    seeds = sorted(seed for seed in caught if seed is not None)
    return [Job(f"sim {mode} seed {seed}", None, None, (), ((mode, seed),)) for mode, seed in seeds]


@dataclass(frozen=True, slots=True)
class Report:
    """The gate's findings: it passed when the baseline was clean and every chosen mutant
    was caught."""

    baseline: list[Outcome]
    mutants: list[tuple[Mutant, Outcome]]
    chosen: int
    seconds: float
    seeds_required: bool = True  # every mutant must be caught by a simulator seed too
    excused: frozenset[str] = TRANSCRIPT_ONLY

    @property
    def baseline_clean(self) -> bool:
        return all(outcome.clean for outcome in self.baseline)

    @property
    def caught(self) -> int:
        return sum(1 for _, outcome in self.mutants if outcome.caught)

    @property
    def transcripts_only(self) -> list[str]:
        """The mutants no simulator seed caught (only a transcript did), but the excused."""
        return [
            m.name
            for m, outcome in self.mutants
            if outcome.transcripts_only and m.name not in self.excused
        ]

    @property
    def excused_caught_by_seed(self) -> list[str]:
        """Excused mutants a seed caught: to be taken off TRANSCRIPT_ONLY."""
        return [m.name for m, outcome in self.mutants if m.name in self.excused and outcome.by_seed]

    @property
    def passed(self) -> bool:
        seeds_guard = not self.seeds_required or not (
            self.transcripts_only or self.excused_caught_by_seed
        )
        return self.baseline_clean and self.caught == self.chosen and seeds_guard


def run_gate(
    chosen: list[Mutant],
    scenarios: Path,
    workers: int,
    *,
    seeds_required: bool = True,
    seeds_for_all: bool = False,
) -> Report:
    """The transcripts' baseline, then (only if it is clean) every chosen mutant, then the
    baseline of the seeds that caught one. With `seeds_required` each mutant's seeds run
    after a transcript caught it, until one catches too (an excused one's only with
    `seeds_for_all`)."""
    started = time.monotonic()
    deadline = started + GATE_SECONDS_MAX
    baseline = run_jobs([Job("scenarios", None, scenarios, ())], PACKAGE, workers, deadline)
    outcomes: list[Outcome] = []
    if all(outcome.clean for outcome in baseline):  # else a catch would prove nothing
        excused = frozenset[str]() if seeds_for_all else TRANSCRIPT_ONLY
        jobs = [
            Job(
                m.name,
                m,
                scenarios,
                SEED_PLAN,
                seeds_too=m.name not in excused,
                first=(FIRST_SEEDS[m.name],) if m.name in FIRST_SEEDS else (),
            )
            for m in chosen
        ]
        if not seeds_required:
            jobs = [replace(job, seeds_too=False) for job in jobs]
        outcomes = run_jobs(jobs, PACKAGE, workers, deadline)
        baseline += run_jobs(seed_baseline_jobs(outcomes), PACKAGE, workers, deadline)
    mutants = list(zip(chosen, outcomes, strict=False))
    seconds = time.monotonic() - started
    excused = frozenset[str]() if seeds_for_all else TRANSCRIPT_ONLY
    return Report(baseline, mutants, len(chosen), seconds, seeds_required, excused)


# ==================================================================== reporting =========
def verdict(outcome: Outcome, *, baseline: bool) -> str:
    if not outcome.ran:
        return "NOT RUN: the gate's time was up"
    if baseline:
        return "passed" if outcome.clean else f"FAILS: {outcome.caught_by}"
    if outcome.caught_by is None:
        return "SURVIVED"
    more = f" (+{len(outcome.also)} more)" if outcome.also else ""
    if outcome.by_seed is None:
        return f"{outcome.caught_by}{more}; NO SEED"
    if outcome.by_seed == outcome.caught_by:
        return outcome.caught_by
    return f"{outcome.caught_by}{more}; {outcome.by_seed}"


def table(title: str, outcomes: list[Outcome], *, baseline: bool) -> list[str]:
    """One line per job (name, verdict, time), then its detail indented below it."""
    width = max(len(title), *(len(o.name) for o in outcomes))
    lines = [f"{title:<{width}}  {'TIME':>7}  {'RESULT' if baseline else 'CAUGHT BY'}"]
    for outcome in outcomes:
        said = verdict(outcome, baseline=baseline)
        lines.append(f"{outcome.name:<{width}}  {outcome.seconds:6.1f}s  {said}")
        if outcome.detail:
            lines.append(f"{'':<{width}}  {'':>7}    {outcome.detail}")
        if outcome.seed_detail and outcome.by_seed != outcome.caught_by:
            lines.append(f"{'':<{width}}  {'':>7}    {outcome.seed_detail}")
    return lines


def text_report(report: Report) -> str:
    lines = table("BASELINE", report.baseline, baseline=True)
    if not report.baseline_clean:
        lines.append("the unmutated code fails a check: no mutant it caught is judged")
    if report.mutants:
        lines += ["", *table("MUTANT", [o for _, o in report.mutants], baseline=False)]
    if report.seeds_required and report.transcripts_only:
        lines.append(f"caught by transcripts only: {', '.join(report.transcripts_only)}")
    if report.seeds_required and report.excused_caught_by_seed:
        taken = ", ".join(report.excused_caught_by_seed)
        lines.append(f"caught by a seed now, take off TRANSCRIPT_ONLY: {taken}")
    if report.seeds_required and report.excused:
        judged = [m.name for m, _ in report.mutants if m.name in report.excused]
        lines.append(f"{len(judged)} excused (TRANSCRIPT_ONLY): their seeds ran only if needed")
    outcome = "gate passed" if report.passed else "gate FAILED"
    by_seeds = sum(1 for _, outcome in report.mutants if outcome.caught and outcome.by_seed)
    lines.append(
        f"{report.caught} of {report.chosen} mutants caught ({by_seeds} by a simulator seed) "
        f"in {report.seconds:.0f} s: {outcome}"
    )
    return "\n".join(lines)


def json_report(report: Report) -> str:
    return json.dumps(
        {
            "passed": report.passed,
            "seconds": round(report.seconds, 1),
            "transcripts_only": report.transcripts_only,
            "excused_caught_by_seed": report.excused_caught_by_seed,
            "baseline": [asdict(outcome) for outcome in report.baseline],
            "mutants": [
                {**asdict(outcome), "rule": m.rule, "file": m.path} for m, outcome in report.mutants
            ],
        },
        indent=2,
    )


# ==================================================================== command line ======
def select(only: list[str]) -> list[Mutant]:
    """The mutants named by --only (all when none). Raises AnchorError on an unknown name."""
    if not only:
        return list(CATALOGUE)
    known = {m.name: m for m in CATALOGUE}
    unknown = [name for name in only if name not in known]
    if unknown:
        raise AnchorError(f"no such mutant: {', '.join(unknown)} (see --list)")
    return [known[name] for name in only]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tidelog.testing.mutants", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--only", action="append", default=[], help="run only this mutant")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--list", action="store_true", help="print the catalogue and stop")
    parser.add_argument("--scenarios", type=Path, default=DEFAULT_SCENARIOS)
    parser.add_argument(
        "--seeds-for-all",
        action="store_true",
        help="run the seeds of the TRANSCRIPT_ONLY mutants too (slow: most run every seed)",
    )
    parser.add_argument(
        "--transcripts-suffice",
        action="store_true",
        help="stop each mutant at its first catch, a transcript's too (quicker, weaker)",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be positive")
    if not args.scenarios.is_dir():
        parser.error(f"{args.scenarios}: no such directory of scenario transcripts")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for m in CATALOGUE:
            print(f"{m.name:<36} {m.path:<16} {m.rule}")
        return 0
    try:
        chosen = select(args.only)
        for m in chosen:
            mutated_source(m, PACKAGE)
    except AnchorError as error:
        print(f"mutation gate error: {error}", file=sys.stderr)
        return 2
    report = run_gate(
        chosen,
        args.scenarios,
        args.jobs,
        seeds_required=not args.transcripts_suffice,
        seeds_for_all=args.seeds_for_all,
    )
    print(json_report(report) if args.json else text_report(report))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
