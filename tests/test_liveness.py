"""Node liveness (core/liveness.py): sessions, deaths and contact, rule by rule."""

from __future__ import annotations

from tidelog.core.liveness import NodeLiveness, NodePing, NodePong
from tidelog.types import NodeId

A, B = NodeId(1), NodeId(2)
TIMEOUT = 10


def pair() -> tuple[NodeLiveness, NodeLiveness]:
    a, b = NodeLiveness(A, 7, TIMEOUT), NodeLiveness(B, 9, TIMEOUT)
    a.watch(B, 0)
    b.watch(A, 0)
    return a, b


def exchange(a: NodeLiveness, b: NodeLiveness, now: int, sent_ms: int) -> tuple[bool, bool]:
    """`a` pings `b`, which answers: whether b's and a's views changed."""
    (ping,) = a.pings(sent_ms)
    pong, b_changed = b.on_ping(ping, now)
    return b_changed, a.on_pong(pong)


def test_a_peer_not_heard_for_a_timeout_is_declared_dead_once_and_its_session_changes() -> None:
    a, b = pair()
    exchange(b, a, now=3, sent_ms=3)
    session = a.session(B)
    assert a.expire(12) == []
    assert a.expire(13) == [B]
    assert not a.is_live(B) and a.session(B) != session
    assert a.expire(100) == []  # once per death
    exchange(b, a, now=101, sent_ms=101)
    assert a.is_live(B)  # heard again, in the new session


def test_a_peer_never_heard_is_declared_dead_a_timeout_after_it_was_watched() -> None:
    a, _ = pair()
    assert not a.ever_heard(B)
    assert a.expire(TIMEOUT) == [B]


def test_contact_counts_only_in_the_session_it_was_made_in() -> None:
    a, b = pair()
    exchange(a, b, now=1, sent_ms=100)
    session = b.session(A)
    assert a.contact_sent_ms(B, session) == 100
    assert a.contact_sent_ms(B, session + 1) is None
    exchange(a, b, now=2, sent_ms=150)
    assert a.contact_sent_ms(B, session) == 150
    # B declares A dead: its session with A changes, and its next answer says so.
    assert b.expire(2 + TIMEOUT) == [A]
    b_changed, a_changed = exchange(a, b, now=20, sent_ms=200)
    assert a_changed and not b_changed
    assert a.contact_sent_ms(B, session) is None
    assert a.contact_sent_ms(B, b.session(A)) == 200


def test_a_peer_that_started_again_is_a_new_session_at_once() -> None:
    a, b = pair()
    exchange(b, a, now=1, sent_ms=1)
    session = a.session(B)
    again = NodeLiveness(B, 10, TIMEOUT)  # B's process started again: a new incarnation
    pong, changed = a.on_ping(NodePing(B, A, again.incarnation, 5), 2)
    assert changed and a.session(B) != session and pong == NodePong(A, B, a.session(B), 5)
    assert a.is_live(B)


def test_an_answer_from_a_node_not_watched_changes_nothing() -> None:
    a = NodeLiveness(A, 1, TIMEOUT)
    assert not a.on_pong(NodePong(B, A, 3, 4))
    assert a.contact_sent_ms(B, 3) is None
    a.watch(B, 0)
    a.forget(B)
    assert a.peers() == ()
