"""Exact examples: the seeds', KIP-49's, Kafka's documentation, and sticky edge cases."""

from __future__ import annotations

import pytest

from groupkit.assignors import MemberSubscription as M
from groupkit.assignors import TopicPartition, assignor_names, get_assignor
from groupkit.assignors.invariants import assert_valid, moved_partitions
from groupkit.types import Assignment


def tps(*names: str) -> list[TopicPartition]:
    """``tps("t0-1", "t1-0")`` -> sorted TopicPartitions."""
    out = []
    for n in names:
        t, p = n.rsplit("-", 1)
        out.append(TopicPartition(t, int(p)))
    return sorted(out)


def run(name: str, parts: dict[str, int], members: dict[str, M], lags=None) -> Assignment:  # type: ignore[no-untyped-def]
    return get_assignor(name).assign(parts, members, lags)


def test_registry_has_every_assignor() -> None:
    assert assignor_names() == [
        "balanced",
        "cooperative-sticky",
        "fair",
        "lag",
        "range",
        "roundrobin",
        "sticky",
    ]
    assert get_assignor("lag").uses_lag and get_assignor("balanced").uses_lag
    assert not get_assignor("sticky").uses_lag


# -- KIP-49 ---------------------------------------------------------------------------------

KIP49_PARTS = {"T1": 2, "T2": 1, "T3": 2, "T4": 1, "T5": 2}
KIP49_MEMBERS = {
    "C1": M(["T1", "T2", "T3", "T4", "T5"]),
    "C2": M(["T1", "T3", "T5"]),
    "C3": M(["T1", "T3", "T5"]),
    "C4": M(["T1", "T2", "T3", "T4", "T5"]),
}


def test_kip49_fair_example() -> None:
    assert run("fair", KIP49_PARTS, KIP49_MEMBERS) == {
        "C1": tps("T2-0", "T3-0"),
        "C2": tps("T1-0", "T3-1"),
        "C3": tps("T1-1", "T5-0"),
        "C4": tps("T4-0", "T5-1"),
    }


def test_kip49_range_and_roundrobin_are_skewed() -> None:
    assert run("range", KIP49_PARTS, KIP49_MEMBERS) == {
        "C1": tps("T1-0", "T2-0", "T3-0", "T4-0", "T5-0"),
        "C2": tps("T1-1", "T3-1", "T5-1"),
        "C3": [],
        "C4": [],
    }
    assert run("roundrobin", KIP49_PARTS, KIP49_MEMBERS) == {
        "C1": tps("T1-0", "T3-0", "T5-0"),
        "C2": tps("T1-1", "T3-1", "T5-1"),
        "C3": [],
        "C4": tps("T2-0", "T4-0"),
    }


def test_kip49_sticky_and_balanced_are_even() -> None:
    for name in ("sticky", "balanced"):
        result = run(name, KIP49_PARTS, KIP49_MEMBERS)
        assert sorted(map(len, result.values())) == [2, 2, 2, 2]
        assert_valid(KIP49_PARTS, KIP49_MEMBERS, result)


# -- KIP-169 / kafka-lag-based-assignor -----------------------------------------------------

SEED_LAGS = {
    TopicPartition("t0", 0): 100_000,
    TopicPartition("t0", 1): 50_000,
    TopicPartition("t0", 2): 60_000,
}
SEED_MEMBERS = {"C0": M(["t0"]), "C1": M(["t0"])}


def total(result: Assignment, member: str) -> int:
    return sum(SEED_LAGS[tp] for tp in result[member])


def test_seed_lag_example() -> None:
    result = run("lag", {"t0": 3}, SEED_MEMBERS, SEED_LAGS)
    assert result == {"C0": tps("t0-0"), "C1": tps("t0-1", "t0-2")}
    assert (total(result, "C0"), total(result, "C1")) == (100_000, 110_000)


def test_seed_range_comparison() -> None:
    # The README's 160,000 / 50,000 for range is computed with KIP-169's lags (t0p1 60,000,
    # t0p2 50,000); with the README's own lags range gives 150,000 / 60,000.
    result = run("range", {"t0": 3}, SEED_MEMBERS, SEED_LAGS)
    assert result == {"C0": tps("t0-0", "t0-1"), "C1": tps("t0-2")}
    assert (total(result, "C0"), total(result, "C1")) == (150_000, 60_000)


def test_kip169_example() -> None:
    lags = {TopicPartition("t0", p): v for p, v in enumerate([100_000, 60_000, 50_000])}
    # KIP-169 says range and round robin both give 160,000 / 50,000; that holds for range.
    # Round robin deals t0p0, t0p2 to C0 (150,000 / 60,000).
    result = run("range", {"t0": 3}, SEED_MEMBERS, lags)
    assert [sum(lags[tp] for tp in result[m]) for m in ("C0", "C1")] == [160_000, 50_000]
    result = run("roundrobin", {"t0": 3}, SEED_MEMBERS, lags)
    assert [sum(lags[tp] for tp in result[m]) for m in ("C0", "C1")] == [150_000, 60_000]
    result = run("lag", {"t0": 3}, SEED_MEMBERS, lags)
    assert result == {"C0": tps("t0-0"), "C1": tps("t0-1", "t0-2")}
    assert [sum(lags[tp] for tp in result[m]) for m in ("C0", "C1")] == [100_000, 110_000]


def test_seed_balanced_matches_lag() -> None:
    assert run("balanced", {"t0": 3}, SEED_MEMBERS, SEED_LAGS) == {
        "C0": tps("t0-0"),
        "C1": tps("t0-1", "t0-2"),
    }


def test_lag_tie_rules() -> None:
    # Equal lags: partition order; equal counts: least lag of this topic, then member id.
    lags = {TopicPartition("t", p): v for p, v in enumerate([5, 5, 9, 1])}
    result = run("lag", {"t": 4}, {"b": M(["t"]), "a": M(["t"])}, lags)
    # t-2 (9) -> a; t-0 (5) -> b; t-1 (5): both hold one, b has less lag -> b; t-3 -> a.
    assert result == {"a": tps("t-2", "t-3"), "b": tps("t-0", "t-1")}


def test_lag_counts_per_topic_not_total() -> None:
    # KIP-169 balances each topic alone: the same member takes each topic's heaviest.
    lags = {TopicPartition(t, p): (1000 if p == 0 else 1) for t in ("a", "b") for p in range(2)}
    members = {"C0": M(["a", "b"]), "C1": M(["a", "b"])}
    result = run("lag", {"a": 2, "b": 2}, members, lags)
    assert result["C0"] == tps("a-0", "b-0")


# -- Kafka's documentation ------------------------------------------------------------------


def test_kafka_range_doc_example() -> None:
    members = {"C0": M(["t0", "t1"]), "C1": M(["t0", "t1"])}
    assert run("range", {"t0": 3, "t1": 3}, members) == {
        "C0": tps("t0-0", "t0-1", "t1-0", "t1-1"),
        "C1": tps("t0-2", "t1-2"),
    }


def test_kafka_roundrobin_doc_example() -> None:
    members = {"C0": M(["t0", "t1"]), "C1": M(["t0", "t1"])}
    assert run("roundrobin", {"t0": 3, "t1": 3}, members) == {
        "C0": tps("t0-0", "t0-2", "t1-1"),
        "C1": tps("t0-1", "t1-0", "t1-2"),
    }


POOR_PARTS = {"t0": 1, "t1": 2, "t2": 3}
POOR_MEMBERS = {"C0": M(["t0"]), "C1": M(["t0", "t1"]), "C2": M(["t0", "t1", "t2"])}


def test_poor_roundrobin_case() -> None:
    assert run("roundrobin", POOR_PARTS, POOR_MEMBERS) == {
        "C0": tps("t0-0"),
        "C1": tps("t1-0"),
        "C2": tps("t1-1", "t2-0", "t2-1", "t2-2"),
    }


def test_poor_roundrobin_case_sticky_and_fair_fix_it() -> None:
    expected = {
        "C0": tps("t0-0"),
        "C1": tps("t1-0", "t1-1"),
        "C2": tps("t2-0", "t2-1", "t2-2"),
    }
    assert run("sticky", POOR_PARTS, POOR_MEMBERS) == expected
    assert run("fair", POOR_PARTS, POOR_MEMBERS) == expected


def test_kafka_sticky_doc_unequal_then_c0_leaves() -> None:
    # Kafka's StickyAssignor javadoc: after C0 leaves, round robin reshuffles, sticky keeps.
    members = {
        "C1": M(["t0", "t1"], owned=tps("t1-0", "t1-1"), generation=1),
        "C2": M(["t0", "t1", "t2"], owned=tps("t2-0", "t2-1", "t2-2"), generation=1),
    }
    assert run("sticky", POOR_PARTS, members) == {
        "C1": tps("t0-0", "t1-0", "t1-1"),
        "C2": tps("t2-0", "t2-1", "t2-2"),
    }
    assert run("roundrobin", POOR_PARTS, members) == {
        "C1": tps("t0-0", "t1-1"),
        "C2": tps("t1-0", "t2-0", "t2-1", "t2-2"),
    }


FOUR_TOPICS = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
ALL = ["t0", "t1", "t2", "t3"]


def test_kafka_sticky_doc_equal_example_and_c1_leaves() -> None:
    fresh = run("sticky", FOUR_TOPICS, {"C0": M(ALL), "C1": M(ALL), "C2": M(ALL)})
    assert fresh == {
        "C0": tps("t0-0", "t1-1", "t3-0"),
        "C1": tps("t0-1", "t2-0", "t3-1"),
        "C2": tps("t1-0", "t2-1"),
    }
    after = run(
        "sticky",
        FOUR_TOPICS,
        {
            "C0": M(ALL, owned=fresh["C0"], generation=1),
            "C2": M(ALL, owned=fresh["C2"], generation=1),
        },
    )
    assert after == {
        "C0": tps("t0-0", "t1-1", "t2-0", "t3-0"),
        "C2": tps("t0-1", "t1-0", "t2-1", "t3-1"),
    }


# -- sticky quota edge cases ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
def test_two_plus_two_then_newcomer_moves_one(name: str) -> None:
    members = {
        "c1": M(["t"], owned=tps("t-0", "t-1"), generation=3),
        "c2": M(["t"], owned=tps("t-2", "t-3"), generation=3),
        "c3": M(["t"]),
    }
    result = run(name, {"t": 4}, members)
    assert result == {"c1": tps("t-0", "t-1"), "c2": tps("t-2"), "c3": tps("t-3")}
    assert len(moved_partitions({"t": 4}, members, result)) == 1


def test_two_plus_two_across_topics_newcomer_moves_one() -> None:
    members = {
        "c1": M(["a", "b"], owned=tps("a-0", "a-1"), generation=3),
        "c2": M(["a", "b"], owned=tps("b-0", "b-1"), generation=3),
        "c3": M(["a", "b"]),
    }
    result = run("sticky", {"a": 2, "b": 2}, members)
    assert len(moved_partitions({"a": 2, "b": 2}, members, result)) == 1
    assert_valid({"a": 2, "b": 2}, members, result, sticky=True)


def test_owner_above_quota_keeps_the_extra_place() -> None:
    # 7 partitions, 3 members: quota 2, one member may keep 3; c1 owns the most, so c1 keeps 3.
    members = {
        "c1": M(["t"], owned=tps("t-0", "t-1", "t-2", "t-3"), generation=1),
        "c2": M(["t"], owned=tps("t-4", "t-5", "t-6"), generation=1),
        "c3": M(["t"]),
    }
    result = run("sticky", {"t": 7}, members)
    assert result == {
        "c1": tps("t-0", "t-1", "t-2"),
        "c2": tps("t-4", "t-5"),
        "c3": tps("t-3", "t-6"),
    }


def test_join_leave_sequence_on_six_partitions() -> None:
    parts = {"t": 6}
    gen = 0
    current: Assignment = {}

    def step(ids: list[str]) -> Assignment:
        nonlocal gen, current
        gen += 1
        members = {m: M(["t"], owned=current.get(m, []), generation=gen - 1) for m in ids}
        current = run("sticky", parts, members)
        assert_valid(parts, members, current, sticky=True)
        return current

    assert step(["c1"]) == {"c1": tps(*(f"t-{p}" for p in range(6)))}
    assert step(["c1", "c2"]) == {"c1": tps("t-0", "t-1", "t-2"), "c2": tps("t-3", "t-4", "t-5")}
    assert step(["c1", "c2", "c3"]) == {
        "c1": tps("t-0", "t-1"),
        "c2": tps("t-3", "t-4"),
        "c3": tps("t-2", "t-5"),
    }
    assert step(["c2", "c3"]) == {"c2": tps("t-0", "t-3", "t-4"), "c3": tps("t-1", "t-2", "t-5")}
    assert step(["c2", "c3", "c4"]) == {
        "c2": tps("t-0", "t-3"),
        "c3": tps("t-1", "t-2"),
        "c4": tps("t-4", "t-5"),
    }
    assert step(["c3", "c4"]) == {"c3": tps("t-0", "t-1", "t-2"), "c4": tps("t-3", "t-4", "t-5")}


# -- generations ----------------------------------------------------------------------------


def test_newer_generation_claim_wins() -> None:
    members = {
        "a": M(["t"], owned=tps("t-0", "t-1"), generation=4),
        "b": M(["t"], owned=tps("t-1"), generation=3),  # stale: b lost t-1 in generation 4
    }
    assert run("sticky", {"t": 2}, members) == {"a": tps("t-0"), "b": tps("t-1")}
    members["b"] = M(["t"], owned=tps("t-0"), generation=5)
    # b's newer claim on t-0 wins; a keeps t-1.
    assert run("sticky", {"t": 2}, members) == {"a": tps("t-1"), "b": tps("t-0")}


def test_claim_without_generation_loses() -> None:
    members = {
        "a": M(["t"], owned=tps("t-1"), generation=None),
        "b": M(["t"], owned=tps("t-1"), generation=0),
    }
    assert run("sticky", {"t": 2}, members) == {"a": tps("t-0"), "b": tps("t-1")}


def test_same_generation_double_claim_is_unowned() -> None:
    members = {
        "a": M(["t"], owned=tps("t-0", "t-1", "t-2"), generation=2),
        "b": M(["t"], owned=tps("t-2", "t-3"), generation=2),
        "c": M(["t"]),
    }
    result = run("sticky", {"t": 6}, members)
    # t-2 counts as nobody's; a keeps t-0, t-1 and b keeps t-3, so nothing owned moves.
    assert moved_partitions({"t": 6}, members, result) == []
    assert_valid({"t": 6}, members, result, sticky=True)


def test_claims_on_dropped_topics_and_missing_partitions_are_ignored() -> None:
    members = {
        "a": M(["t"], owned=tps("u-0", "t-9"), generation=1),
        "b": M(["t", "u"], owned=tps("t-0"), generation=1),
    }
    result = run("sticky", {"t": 2, "u": 1}, members)
    assert TopicPartition("t", 0) in result["b"]
    assert_valid({"t": 2, "u": 1}, members, result)


# -- fair and roundrobin details ------------------------------------------------------------


def test_roundrobin_circle_continues_after_skips() -> None:
    members = {"a": M(["x", "y"]), "b": M(["y"]), "c": M(["x", "y"])}
    # x-0 a, x-1 c (b skipped), y-0 a, y-1 b, y-2 c
    assert run("roundrobin", {"x": 2, "y": 3}, members) == {
        "a": tps("x-0", "y-0"),
        "b": tps("y-1"),
        "c": tps("x-1", "y-2"),
    }


def test_fair_orders_topics_by_subscribers_then_size_then_name() -> None:
    members = {"a": M(["big", "small"]), "b": M(["big", "small"])}
    # Same subscribers: more partitions first (big), then each to the least loaded.
    assert run("fair", {"big": 3, "small": 1}, members) == {
        "a": tps("big-0", "big-2"),
        "b": tps("big-1", "small-0"),
    }
