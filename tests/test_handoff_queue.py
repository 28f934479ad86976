"""The hand-off queue: a member's first partitions start together (runtime/handoff_queue.py)."""

from __future__ import annotations

from groupkit.protocol.records import EMPTY
from groupkit.runtime.handoff_queue import Handoff, HandoffQueue
from groupkit.types import TopicPartition

T = "t"
A, B, C, D = (TopicPartition(T, p) for p in range(4))


def assign(*parts: TopicPartition, at: float = 0.0, offsets: dict[TopicPartition, int] | None = None
           ) -> Handoff:  # fmt: skip
    return Handoff(EMPTY, EMPTY, frozenset(parts), 1, offsets or {}, queued_at=at)


def test_a_first_share_handed_in_parts_starts_in_one_assignment_once_complete() -> None:
    q = HandoffQueue(hold_s=0.1)
    q.put(assign(A, at=0.0, offsets={A: 5}), owned=frozenset({A}), awaiting=frozenset({B, C}))
    assert q.take(0.01) == []
    q.put(assign(B, at=0.02, offsets={B: 7}), owned=frozenset({A, B}), awaiting=frozenset({C}))
    assert q.take(0.03) == []
    q.put(assign(C, at=0.04), owned=frozenset({A, B, C}), awaiting=EMPTY)
    (h,) = q.take(0.05)
    assert h.assign == {A, B, C}
    assert h.offsets == {A: 5, B: 7}
    assert h.queued_at == 0.0  # the wait counts from the first
    assert not q and q.take(0.06) == []


def test_the_first_partitions_wait_at_most_the_hold() -> None:
    q = HandoffQueue(hold_s=0.1)
    q.put(assign(A, at=1.0), owned=frozenset({A}), awaiting=frozenset({B}))
    assert q.take(1.099) == []
    (h,) = q.take(1.1)
    assert h.assign == {A}


def test_a_member_that_owns_started_partitions_starts_more_at_once() -> None:
    q = HandoffQueue(hold_s=0.1)
    q.put(assign(C, at=0.0), owned=frozenset({A, B, C}), awaiting=frozenset({D}))
    assert [h.assign for h in q.take(0.0)] == [{C}]


def test_a_loss_behind_held_partitions_is_carried_out_at_once_and_in_order() -> None:
    q = HandoffQueue(hold_s=0.1)
    q.put(assign(A, at=0.0), owned=frozenset({A}), awaiting=frozenset({B}))
    assert q.take(0.0) == []
    lost = Handoff(frozenset({A}), EMPTY, EMPTY, 2, queued_at=0.01)
    q.put(lost, owned=EMPTY, awaiting=frozenset({A, B}))
    first, second = q.take(0.01)
    assert first.assign == {A} and second.lost == {A}


def test_a_revocation_is_never_merged_into_an_assignment() -> None:
    q = HandoffQueue(hold_s=0.1)
    q.put(assign(A, at=0.0), owned=frozenset({A, B}), awaiting=EMPTY)
    revoke = Handoff(EMPTY, frozenset({B}), frozenset({C}), 2, queued_at=0.0)
    q.put(revoke, owned=frozenset({A, C}), awaiting=EMPTY)
    assert [(h.revoke, h.assign) for h in q.take(0.0)] == [(EMPTY, {A}), ({B}, {C})]


def test_a_leaving_member_starts_what_it_holds_back_at_once() -> None:
    q = HandoffQueue(hold_s=0.1)
    q.put(assign(A, at=0.0), owned=frozenset({A}), awaiting=frozenset({B}))
    q.release()
    assert [h.assign for h in q.take(0.0)] == [{A}]
