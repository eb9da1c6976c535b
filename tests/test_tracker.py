"""Table tests of a follower's progress as its leader tracks it (core/tracker.py)."""

from __future__ import annotations

import pytest

from tidelog.core.tracker import Progress
from tidelog.types import Offset


def pipelining(match: int, inflight: tuple[int, ...] = ()) -> Progress:
    progress = Progress(next_offset=Offset(match), match_offset=Offset(match), probing=False)
    progress.inflight.extend(Offset(i) for i in inflight)
    if inflight:
        progress.next_offset = Offset(inflight[-1])
    return progress


@pytest.mark.parametrize(
    ("match", "inflight", "ack", "expected_match", "expected_inflight"),
    [
        (5, (8, 10), 8, 8, (10,)),
        (5, (8, 10), 10, 10, ()),
        (5, (8, 10), 3, 5, (8, 10)),  # a stale acknowledgement: match never goes back
        (5, (), 5, 5, ()),
    ],
)
def test_an_acknowledgement_raises_match_and_releases_the_window(
    match: int,
    inflight: tuple[int, ...],
    ack: int,
    expected_match: int,
    expected_inflight: tuple[int, ...],
) -> None:
    progress = pipelining(match, inflight)
    progress.accept(Offset(ack), tick=7)
    assert (progress.match_offset, tuple(progress.inflight)) == (expected_match, expected_inflight)
    assert progress.last_ack_tick == 7
    assert not progress.probing


def test_an_answered_probe_starts_pipelining_from_match() -> None:
    progress = Progress(next_offset=Offset(9))
    progress.sent_probe((Offset(9), False), seq=4)
    progress.accept(Offset(9), tick=1)
    assert (progress.probing, progress.next_offset, progress.match_offset) == (False, 9, 9)


@pytest.mark.parametrize(
    ("copies", "answer", "ends_probe"),
    [
        ([((9, False), 4)], 4, True),
        ([((9, False), 4)], 3, False),  # an older request: it may predate a reset
        ([((9, False), 4), ((9, False), 6)], 4, True),  # any copy of the probe
        ([((9, False), 4), ((9, False), 6)], 6, True),
        ([((9, False), 4), ((9, True), 6)], 4, False),  # a reset is a new probe
        ([((9, False), 4), ((7, False), 6)], 5, False),  # so is a probe further back
    ],
)
def test_an_answer_to_any_copy_of_the_current_probe_ends_it(
    copies: list[tuple[tuple[int, bool], int]], answer: int, ends_probe: bool
) -> None:
    progress = Progress(next_offset=Offset(9))
    for (offset, reset), seq in copies:
        progress.sent_probe((Offset(offset), reset), seq)
    assert progress.answers_probe(answer) is ends_probe


def test_probing_again_forgets_the_window_and_the_probe_sent() -> None:
    progress = pipelining(5, (8, 10))
    progress.sent_probe((Offset(5), False), seq=3)
    progress.probe(Offset(4))
    assert (progress.probing, progress.probe_sent, progress.probe_key) == (True, False, None)
    assert (progress.next_offset, tuple(progress.inflight)) == (4, ())


def test_a_follower_that_lost_records_is_forgotten_and_probed() -> None:
    progress = pipelining(5, (8,))
    progress.lost_records(Offset(3), seq_min=11)
    assert (progress.match_offset, progress.repairing, progress.seq_min) == (None, True, 11)
    assert (progress.probing, progress.next_offset) == (True, 3)


@pytest.mark.parametrize(
    ("match", "last_ack_tick", "repairing", "recent", "in_sync"),
    [
        (5, 10, False, 5, True),
        (5, 4, False, 5, False),  # silent for an election timeout
        (None, 10, False, 5, False),  # never verified
        (5, 10, True, 5, False),  # repairing (rule 8)
    ],
)
def test_in_sync(
    match: int | None, last_ack_tick: int, repairing: bool, recent: int, in_sync: bool
) -> None:
    progress = Progress(
        next_offset=Offset(0),
        match_offset=None if match is None else Offset(match),
        last_ack_tick=last_ack_tick,
        repairing=repairing,
    )
    assert progress.in_sync(recent) is in_sync
