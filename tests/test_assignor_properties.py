"""Hypothesis: random groups, claims with generations, lags, and sequences of rebalances.

Every assignor must be complete and deterministic under any input order; sticky and balanced
must also be balanced; sticky must be sticky; the quota path must keep the most owned.
"""

from __future__ import annotations

import os
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupkit.assignors import MemberSubscription as M
from groupkit.assignors import TopicPartition, assignor_names, get_assignor
from groupkit.assignors._balance import balance_counts
from groupkit.assignors.invariants import (
    assert_valid,
    moved_partitions,
    previous_owners,
    violations,
)
from groupkit.assignors.sticky import prepare

#: raise for a deeper search: GROUPKIT_HYPOTHESIS_SCALE=25 runs 25 times the examples
SCALE = int(os.environ.get("GROUPKIT_HYPOTHESIS_SCALE", "1"))
FAST = settings(
    max_examples=60 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
BALANCING = ("sticky", "cooperative-sticky", "balanced")

TOPICS = ["a", "b", "c", "d"]


@st.composite
def groups(draw: Any, equal: bool = False) -> tuple[dict[str, int], dict[str, M], dict]:  # type: ignore[type-arg]
    """A random group: topics with 0-7 partitions, members with claims and generations."""
    n_topics = draw(st.integers(1, 4))
    topics = TOPICS[:n_topics]
    parts = {t: draw(st.integers(0, 7)) for t in topics}
    if draw(st.booleans()):
        parts["gone"] = 0  # a subscribed topic without partitions is skipped
    n_members = draw(st.integers(1, 6))
    common = draw(st.sets(st.sampled_from([*topics, "gone"]), min_size=1))
    members = {}
    for i in range(n_members):
        subs = common if equal else draw(st.sets(st.sampled_from([*topics, "gone"])))
        owned = draw(
            st.lists(st.tuples(st.sampled_from(topics), st.integers(0, 8)), max_size=8, unique=True)
        )
        gen = draw(st.one_of(st.none(), st.integers(0, 3)))
        members[f"m{i}"] = M(subs, owned=owned, generation=gen)
    lags = {
        TopicPartition(t, p): draw(st.integers(0, 1000))
        for t, n in parts.items()
        for p in range(n)
        if draw(st.booleans())
    }
    return parts, members, lags


def shuffled(d: dict, rng: random.Random) -> dict:  # type: ignore[type-arg]
    items = list(d.items())
    rng.shuffle(items)
    return dict(items)


@FAST
@given(groups(), st.randoms(use_true_random=False))
def test_every_assignor_is_complete_and_deterministic(g: Any, rng: random.Random) -> None:
    parts, members, lags = g
    for name in assignor_names():
        a = get_assignor(name)
        first = a.assign(parts, members, lags)
        assert_valid(parts, members, first, balanced=False)
        # Same input, other dict orders and claim orders: the same answer.
        reordered = {
            m: M(list(reversed(s.topics)), owned=list(reversed(s.owned)), generation=s.generation)
            for m, s in shuffled(members, rng).items()
        }
        again = a.assign(shuffled(parts, rng), reordered, shuffled(lags, rng))
        assert again == first, name
        assert list(again) == sorted(members)


@FAST
@given(groups())
def test_sticky_and_balanced_are_balanced(g: Any) -> None:
    parts, members, lags = g
    for name in BALANCING:
        result = get_assignor(name).assign(parts, members, lags)
        assert_valid(parts, members, result, balanced=True, sticky=name != "balanced")


@FAST
@given(groups(equal=True))
def test_equal_subscriptions_counts_differ_by_at_most_one(g: Any) -> None:
    parts, members, lags = g
    for name in (*BALANCING, "fair", "roundrobin"):
        result = get_assignor(name).assign(parts, members, lags)
        counts = [len(v) for v in result.values()]
        assert max(counts) - min(counts) <= 1, name


@FAST
@given(groups(equal=True))
def test_quota_path_keeps_the_most_owned(g: Any) -> None:
    parts, members, _ = g
    result = get_assignor("sticky").assign(parts, members)
    topics = next(iter(members.values())).topics
    total = sum(parts.get(t, 0) for t in topics)
    quota, extra = divmod(total, len(members))
    owners = previous_owners(parts, members)
    owned_by = {m: sum(1 for o in owners.values() if o == m) for m in members}
    # The best any assignor can keep: everyone up to quota, and the extra places to owners
    # of more than quota.
    over = sum(1 for n in owned_by.values() if n > quota)
    best_kept = sum(min(n, quota) for n in owned_by.values()) + min(over, extra)
    assert len(owners) - len(moved_partitions(parts, members, result)) == best_kept


@FAST
@given(groups(equal=True))
def test_general_path_agrees_with_quota_path_on_balance(g: Any) -> None:
    """The general path, forced on equal subscriptions, is balanced and sticky too."""
    parts, members, _ = g
    counts = {t: n for t, n in parts.items() if n > 0}
    prepared = prepare(counts, members)
    origin: dict[tuple[str, int], int] = {
        tp: i for i, tps in enumerate(prepared.ownership.owned) for tp in tps
    }
    plan = balance_counts(counts, prepared.topics_of, prepared.ownership.owned, origin)
    result = {m: sorted(p) for m, p in zip(prepared.member_ids, plan, strict=True)}
    assert_valid(parts, members, result, balanced=True, sticky=True)
    quota = get_assignor("sticky").assign(parts, members)
    assert sorted(map(len, result.values())) == sorted(map(len, quota.values()))


# -- sequences of rebalances ----------------------------------------------------------------

events = st.lists(
    st.tuples(
        st.sampled_from(["join", "leave", "resubscribe", "stale", "lag"]),
        st.integers(0, 7),
        st.sets(st.sampled_from(TOPICS), min_size=1),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(TOPICS), st.integers(1, 9), min_size=1),
    events,
    st.sampled_from(BALANCING),
    st.randoms(use_true_random=False),
)
def test_sequences_of_rebalances(
    parts: dict[str, int], evs: list[Any], name: str, rng: random.Random
) -> None:
    """Members join, leave, change topics and report stale claims; every step stays valid."""
    assignor = get_assignor(name)
    subs: dict[str, set[str]] = {"m0": set(parts)}
    current: dict[str, list[TopicPartition]] = {}
    stale: dict[str, list[TopicPartition]] = {}
    lags = {TopicPartition(t, p): rng.randrange(1000) for t, n in parts.items() for p in range(n)}
    for gen, (kind, k, topics) in enumerate(evs):
        mid = f"m{k}"
        if kind == "join":
            subs[mid] = set(topics)
        elif kind == "leave" and len(subs) > 1:
            subs.pop(mid, None)
        elif kind == "resubscribe" and mid in subs:
            subs[mid] = set(topics)
        elif kind == "stale" and mid in subs:
            # The member missed the last generation and still reports what it had before.
            stale[mid] = current.get(mid, [])
        elif kind == "lag":
            lags = {tp: max(0, v + rng.randrange(-100, 100)) for tp, v in lags.items()}
        members = {}
        for m, ts in subs.items():
            if m in stale:
                members[m] = M(ts, owned=stale.pop(m), generation=gen - 1)
            else:
                members[m] = M(ts, owned=current.get(m, []), generation=gen)
        result = assignor.assign(parts, members, lags)
        found = violations(parts, members, result, balanced=True, sticky=name != "balanced")
        assert not found, found
        current = result
