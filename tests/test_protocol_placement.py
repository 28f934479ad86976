"""The load re-plan's decision rule (protocol/placement.py): examples, then hypothesis.

Properties: never more moves than the cap; no move under a steady balanced load; a move always
has a predicted gain of at least the margin; the same answer in any input order; and every
move goes from the partition's owner to a member subscribed to its topic.
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupkit.assignors import RangeAssignor
from groupkit.errors import ConfigError
from groupkit.protocol.placement import (
    LoadPolicy,
    PartitionLoad,
    decide,
    member_rates,
)
from groupkit.protocol.vocab import ReplanReason, ReplanSkip
from groupkit.types import MemberSubscription, TopicPartition

SCALE = int(os.environ.get("GROUPKIT_HYPOTHESIS_SCALE", "1"))
FAST = settings(
    max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def tp(p: int, t: str = "t") -> TopicPartition:
    return TopicPartition(t, p)


def members(owned: dict[str, list[int]], cap: float | None = None) -> dict[str, MemberSubscription]:
    return {
        m: MemberSubscription(["t"], [tp(p) for p in ps], 1, capacity=cap)
        for m, ps in owned.items()
    }


# ---------------------------------------------------------------- examples


def test_off_in_flight_and_too_soon_come_first() -> None:
    ms = members({"a": [0, 1], "b": [2]})
    loads = {tp(0): PartitionLoad(10_000, 300, 100), tp(1): PartitionLoad(10_000, 300, 100),
             tp(2): PartitionLoad(0, 1, 1)}  # fmt: skip
    assert decide(ms, loads, 0, policy=LoadPolicy(interval_ms=0)).skip == ReplanSkip.OFF
    assert decide(ms, loads, 0, in_flight=True).skip == ReplanSkip.IN_FLIGHT
    assert decide(ms, loads, 50_000, last_replan_ms=30_000).skip == ReplanSkip.TOO_SOON
    assert decide(ms, loads, 60_000, last_replan_ms=30_000).replan is not None


def test_the_hot_partitions_together_are_split() -> None:
    # the demo's story: one member holds the two hottest partitions and falls behind, the
    # other idles; each member does 500 records/s flat out
    ms = members({"a": [0, 1], "b": [2, 3]})
    loads = {
        tp(0): PartitionLoad(20_000, 400, 250),
        tp(1): PartitionLoad(20_000, 300, 250),
        tp(2): PartitionLoad(0, 20, 20),
        tp(3): PartitionLoad(0, 10, 10),
    }
    d = decide(ms, loads, 0, policy=LoadPolicy(max_moves=2))
    assert d.replan is not None, d
    r = d.replan
    assert r.reason == ReplanReason.OVERLOAD
    # a is measured at 500/s (busy) and receives 700/s; one hot partition to b fixes it
    assert [(mv.source, mv.target) for mv in r.moves] == [("a", "b")]
    assert r.moves[0].partition in (tp(0), tp(1))
    assert r.after.utilization < 1 <= r.before.utilization
    assert r.gain >= 0.2
    after = r.apply({m: s.owned for m, s in ms.items()})
    assert sorted(len(v) for v in after.values()) == [1, 3]


def test_a_member_slower_than_it_declared_is_planned_by_what_it_does() -> None:
    ms = members({"a": [0], "b": [1]}, cap=1000.0)
    loads = {tp(0): PartitionLoad(5_000, 300, 100), tp(1): PartitionLoad(0, 300, 300)}
    rates = member_rates(ms, loads)
    assert rates == {"a": 100.0, "b": 1000.0}  # a is busy at 100/s; b keeps up: its capacity


def test_unknown_rates_take_the_mean_of_the_known() -> None:
    ms = members({"a": [0], "b": [1], "c": [2]})
    ms["c"] = MemberSubscription(["t"], [tp(2)], 1, capacity=300.0)
    loads = {tp(0): PartitionLoad(5_000, 300, 100), tp(1): PartitionLoad(0, 50, 50),
             tp(2): PartitionLoad(0, 10, 10)}  # fmt: skip
    assert member_rates(ms, loads) == {"a": 100.0, "b": 200.0, "c": 300.0}


def test_no_pressure_no_move() -> None:
    ms = members({"a": [0, 1], "b": [2, 3]})
    loads = {tp(p): PartitionLoad(5, 100, 100) for p in range(4)}
    d = decide(ms, loads, 0)
    assert d.skip == ReplanSkip.NO_PRESSURE and d.replan is None


def test_a_drain_that_would_overload_a_member_is_not_made() -> None:
    # a has a backlog that drains slowly; moving it to b would put b over its rate
    ms = members({"a": [0], "b": [1]}, cap=100.0)
    loads = {tp(0): PartitionLoad(50_000, 10, 95), tp(1): PartitionLoad(0, 95, 95)}
    d = decide(ms, loads, 0)
    assert d.replan is None and d.skip == ReplanSkip.SMALL_GAIN


def test_the_cap_and_the_fewest_moves_for_most_of_the_gain() -> None:
    # one member holds six equally hot partitions, three idle members
    ms = members({"a": [0, 1, 2, 3, 4, 5], "b": [6], "c": [7], "d": [8]})
    loads = {tp(p): PartitionLoad(10_000, 100, 50) for p in range(6)}
    loads |= {tp(p): PartitionLoad(0, 0.0, 0.0) for p in (6, 7, 8)}
    for cap in (1, 2, 3):
        d = decide(ms, loads, 0, policy=LoadPolicy(max_moves=cap, min_gain=0.1))
        assert d.replan is not None and 1 <= len(d.replan.moves) <= cap


def test_policy_is_checked() -> None:
    with pytest.raises(ConfigError):
        LoadPolicy(interval_ms=-1)
    with pytest.raises(ConfigError):
        LoadPolicy(max_moves=0)


# ---------------------------------------------------------------- hypothesis


@st.composite
def loaded_groups(
    draw: Any,
) -> tuple[dict[str, MemberSubscription], dict[TopicPartition, PartitionLoad]]:
    n_members = draw(st.integers(2, 6))
    n_parts = draw(st.integers(1, 16))
    ids = [f"m{i}" for i in range(n_members)]
    caps = draw(st.lists(st.one_of(st.none(), st.floats(10, 2000)), min_size=n_members,
                         max_size=n_members))  # fmt: skip
    owner = draw(st.lists(st.integers(0, n_members - 1), min_size=n_parts, max_size=n_parts))
    subs = {
        m: MemberSubscription(["t"], [tp(p) for p in range(n_parts) if owner[p] == i], 3,
                              capacity=caps[i])
        for i, m in enumerate(ids)
    }  # fmt: skip
    loads = {}
    for p in range(n_parts):
        lag = draw(st.integers(0, 100_000))
        produce = draw(st.floats(0, 1000))
        consume = draw(st.one_of(st.none(), st.floats(0, 1000)))
        loads[tp(p)] = PartitionLoad(lag, produce, consume)
    return subs, loads


@FAST
@given(loaded_groups(), st.integers(1, 4), st.floats(0.05, 0.5))
def test_moves_are_capped_gainful_and_legal(group: Any, cap: int, margin: float) -> None:
    subs, loads = group
    policy = LoadPolicy(max_moves=cap, min_gain=margin)
    d = decide(subs, loads, 10**9, policy=policy)
    if d.replan is None:
        assert d.skip is not None
        return
    r = d.replan
    assert 1 <= len(r.moves) <= cap
    assert r.gain >= margin
    owned = {m: set(s.owned) for m, s in subs.items()}
    for mv in r.moves:
        assert mv.partition in owned[mv.source] and mv.source != mv.target
        assert mv.partition.topic in subs[mv.target].topics
        owned[mv.source].discard(mv.partition)
        owned[mv.target].add(mv.partition)
    # every partition still owned exactly once
    everyone = sorted(p for ps in owned.values() for p in ps)
    assert everyone == sorted(p for s in subs.values() for p in s.owned)


@FAST
@given(loaded_groups(), st.randoms(use_true_random=False))
def test_deterministic_in_any_order(group: Any, rnd: random.Random) -> None:
    subs, loads = group
    first = decide(subs, loads, 10**9)
    items = list(subs.items())
    rnd.shuffle(items)
    litems = list(loads.items())
    rnd.shuffle(litems)
    again = decide(dict(items), dict(litems), 10**9)
    assert again == first


@FAST
@given(
    st.integers(2, 6),
    st.integers(1, 4),
    st.floats(1, 500),
    st.floats(1.05, 10),
    st.integers(0, 100_000),
)
def test_steady_balanced_load_never_moves(
    n_members: int, per_member: int, rate: float, headroom: float, lag: int
) -> None:
    # every member owns as many partitions, each as hot and as far behind, and declares room
    # to spare: whether it is busy or not, no move can make the worst member better
    subs = {
        f"m{i}": MemberSubscription(
            ["t"], [tp(i * per_member + j) for j in range(per_member)], 2,
            capacity=rate * per_member * headroom,
        )
        for i in range(n_members)
    }  # fmt: skip
    loads = {tp(p): PartitionLoad(lag, rate, rate) for p in range(n_members * per_member)}
    d = decide(subs, loads, 10**9)
    assert d.replan is None


# ---------------------------------------------------------------- the group's assignor


class _Answers(RangeAssignor):
    """A user's assignor that answers re-plans with what it is given."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def replan(self, members: Any, loads: Any) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer(members) if callable(self.answer) else self.answer


HOT = {tp(0): PartitionLoad(20_000, 400, 250), tp(1): PartitionLoad(20_000, 300, 250),
       tp(2): PartitionLoad(0, 20, 20), tp(3): PartitionLoad(0, 10, 10)}  # fmt: skip


def test_an_assignor_that_answers_none_leaves_it_to_the_rule() -> None:
    ms = members({"a": [0, 1], "b": [2, 3]})
    assert RangeAssignor().replan(ms, HOT) is None  # the default
    mine = decide(ms, HOT, 0, assignor=_Answers(None))
    assert mine == decide(ms, HOT, 0)


def test_an_assignor_says_no_change_or_moves_within_the_cap() -> None:
    ms = members({"a": [0, 1], "b": [2, 3]})
    same = decide(ms, HOT, 0, assignor=_Answers(lambda m: {i: s.owned for i, s in m.items()}))
    assert same.replan is None and same.skip == ReplanSkip.NO_CHANGE
    swap = {"a": [("t", 0), ("t", 2)], "b": [("t", 1), ("t", 3)]}
    d = decide(ms, HOT, 0, assignor=_Answers(swap))
    assert d.replan is not None and d.replan.reason == ReplanReason.ASSIGNOR
    assert {(mv.partition, mv.source, mv.target) for mv in d.replan.moves} == {
        (tp(1), "a", "b"), (tp(2), "b", "a"),
    }  # fmt: skip
    assert 0 <= d.replan.gain <= 1
    # more moves than the cap, a partition twice or missing, or raising: ignored
    for bad in (
        {"a": [], "b": [("t", p) for p in range(4)]}
        | {"a": [("t", 3)], "b": [("t", 0), ("t", 1), ("t", 2)]},
        {"a": [("t", 0), ("t", 1)], "b": [("t", 1), ("t", 3)]},
        {"a": [("t", 0)], "b": [("t", 2), ("t", 3)]},
        {"a": [("t", 0), ("t", 1)], "b": [("t", 2), ("t", 3)], "z": []},
        RuntimeError("boom"),
    ):
        d = decide(ms, HOT, 0, policy=LoadPolicy(max_moves=2), assignor=_Answers(bad))
        assert d.replan is None and d.skip == ReplanSkip.INVALID, bad
