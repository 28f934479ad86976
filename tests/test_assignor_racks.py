"""Rack-aware assignment (KIP-881): Kafka's own rack test cases, and properties.

The anchors are the rack cases of Kafka's ``RangeAssignorTest`` and ``AbstractStickyAssignorTest``
(``testRackAwareAssignmentWithUniformSubscription``, ``...WithNonEqualSubscription``), on
their input: topics t1 (6 partitions), t2 (7), t3 (2); brokers ``i`` on racks a, b, c, ...;
partition ``i`` of the ``k``-th topic (counting partitions before it) on brokers
``(i + j + k) mod brokers`` for ``j`` below the replication factor; consumer ``i`` on rack
``i``. ``range`` must give Kafka's exact assignment; the sticky assignors, whose plans differ
from Kafka's, at most as many partitions outside the member's rack as Kafka's.
"""

from __future__ import annotations

import io
import json
import os
import random
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupkit.assignors import (
    Assignor,
    MemberSubscription,
    StickyAssignor,
    TopicPartition,
    get_assignor,
)
from groupkit.assignors.base import reads_racks, validate_racks
from groupkit.assignors.invariants import assert_valid, member_loads, rack_local
from groupkit.cli import main
from groupkit.errors import ConfigError
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.planning import WithRacks

M = MemberSubscription
TOPICS = {"t1": 6, "t2": 7, "t3": 2}
ALL = ["t1", "t2", "t3"]
RACK_AWARE = ("range", "sticky", "cooperative-sticky", "balanced")


def kafka_racks(topics: Mapping[str, int], rf: int, brokers: str) -> dict[str, list[list[str]]]:
    """Replica racks as Kafka's ``AbstractPartitionAssignorTest.partitionInfos`` places them."""
    out, first = {}, 0
    for t, n in topics.items():
        out[t] = [[brokers[(i + j + first) % len(brokers)] for j in range(rf)] for i in range(n)]
        first += n
    return out


def consumers(subs: Sequence[Sequence[str]], racks: str, owned: Sequence[str] = ()) -> dict[str, M]:
    return {
        f"consumer{i}": M(s, owned=_tps(owned[i]) if owned else (), generation=1 if owned else None,
                          rack=racks[i])
        for i, s in enumerate(subs)
    }  # fmt: skip


def _tps(text: str) -> list[tuple[str, int]]:
    return [(x.split("-")[0], int(x.split("-")[1])) for x in text.split(", ") if x]


def _text(tps: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


def mismatched(result: Mapping[str, Sequence[tuple[str, int]]], members: Mapping[str, M],
               racks: Mapping[str, list[list[str]]]) -> int:  # fmt: skip
    return sum(len(v) for v in result.values()) - rack_local(result, members, racks)


UNIFORM = [ALL, ALL, ALL]
UNEQUAL = [ALL, ALL, ["t1", "t3"]]


# --------------------------------------------------------------------------- range: exact


@pytest.mark.parametrize(
    ("subs", "rf", "brokers", "expected", "mismatch"),
    [
        (UNIFORM, 1, "abc", ["t1-0, t1-3, t2-0, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t3-0",
                             "t1-2, t1-5, t2-2, t2-5, t3-1"], 0),
        (UNIFORM, 2, "abc", ["t1-0, t1-2, t2-0, t2-2, t2-3, t3-1", "t1-1, t1-3, t2-1, t2-4, t3-0",
                             "t1-4, t1-5, t2-5, t2-6"], 1),
        # one consumer on a rack without replicas: plain ranges
        (UNIFORM, 3, "ab", ["t1-0, t1-1, t2-0, t2-1, t2-2, t3-0", "t1-2, t1-3, t2-3, t2-4, t3-1",
                            "t1-4, t1-5, t2-5, t2-6"], 4),
        (UNEQUAL, 1, "abc", ["t1-0, t1-3, t2-0, t2-2, t2-3, t2-6",
                             "t1-1, t1-4, t2-1, t2-4, t2-5, t3-0", "t1-2, t1-5, t3-1"], 2),
        (UNEQUAL, 2, "abc", ["t1-0, t1-2, t2-0, t2-2, t2-3, t2-5, t3-1",
                             "t1-1, t1-3, t2-1, t2-4, t2-6, t3-0", "t1-4, t1-5"], 0),
        (UNEQUAL, 3, "ab", ["t1-0, t1-1, t2-0, t2-1, t2-2, t2-3, t3-0",
                            "t1-2, t1-3, t2-4, t2-5, t2-6, t3-1", "t1-4, t1-5"], 2),
    ],
)  # fmt: skip
def test_range_gives_kafkas_rack_aware_assignment(
    subs: list[list[str]], rf: int, brokers: str, expected: list[str], mismatch: int
) -> None:
    racks = kafka_racks(TOPICS, rf, brokers)
    members = consumers(subs, "abc")
    result = get_assignor("range").assign(TOPICS, members, racks=racks)
    assert [_text(result[f"consumer{i}"]) for i in range(3)] == expected
    assert mismatched(result, members, racks) == mismatch


def test_range_co_partitioned_topics_stay_joined_by_partition() -> None:
    # Kafka's rule: same subscribers, same partition count: partition i of both goes to one
    # member, local to it in both when one is.
    topics = {"t1": 6, "t2": 6}
    racks = {"t1": [["a"], ["b"], ["c"]] * 2, "t2": [["a"], ["b"], ["c"]] * 2}
    members = consumers([["t1", "t2"]] * 3, "abc")
    result = get_assignor("range").assign(topics, members, racks=racks)
    for tps in result.values():
        assert {p for t, p in tps if t == "t1"} == {p for t, p in tps if t == "t2"}
    assert mismatched(result, members, racks) == 0


def test_range_without_racks_that_matter_is_plain_range() -> None:
    plain = get_assignor("range").assign(TOPICS, consumers(UNIFORM, "abc"))
    # every partition on every rack (replication factor 3 over 3 racks): racks cannot matter
    full = kafka_racks(TOPICS, 3, "abc")
    assert get_assignor("range").assign(TOPICS, consumers(UNIFORM, "abc"), racks=full) == plain
    # consumers on racks without replicas
    assert get_assignor("range").assign(TOPICS, consumers(UNIFORM, "def"),
                                        racks=kafka_racks(TOPICS, 1, "abc")) == plain  # fmt: skip


# --------------------------------------------------------------------------- sticky: counts


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky", "balanced"])
@pytest.mark.parametrize(
    ("subs", "rf", "brokers", "kafka_mismatch"),
    [
        (UNIFORM, 1, "abc", 0),
        (UNIFORM, 2, "abc", 0),
        (UNIFORM, 3, "ab", 5),  # consumer2's rack has no replica: balance wins
        (UNEQUAL, 1, "abc", 4),
        (UNEQUAL, 2, "abc", 0),
    ],
)
def test_sticky_assignors_at_least_as_rack_local_as_kafkas(
    name: str, subs: list[list[str]], rf: int, brokers: str, kafka_mismatch: int
) -> None:
    racks = kafka_racks(TOPICS, rf, brokers)
    members = consumers(subs, "abc")
    result = get_assignor(name).assign(TOPICS, members, racks=racks)
    assert_valid(TOPICS, members, result)
    blind = get_assignor(name).assign(TOPICS, members)
    assert sorted(map(len, result.values())) == sorted(map(len, blind.values()))
    assert mismatched(result, members, racks) <= kafka_mismatch


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
def test_misaligned_owned_partitions_move_to_their_rack(name: str) -> None:
    # Kafka: "rack-awareness is improved if already owned partitions are misaligned"
    owned = ["t1-0, t1-1, t1-2, t1-3, t1-4", "t1-5, t2-0, t2-1, t2-2, t2-3",
             "t2-4, t2-5, t2-6, t3-0, t3-1"]  # fmt: skip
    racks = kafka_racks(TOPICS, 1, "abc")
    members = consumers(UNIFORM, "abc", owned)
    result = get_assignor(name).assign(TOPICS, members, racks=racks)
    assert_valid(TOPICS, members, result)
    assert mismatched(result, members, racks) == 0


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky", "balanced"])
def test_stickiness_is_kept_when_racks_match(name: str) -> None:
    # Kafka: "stickiness is retained when racks match"
    owned = ["t1-0, t1-3, t2-0, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t3-0",
             "t1-2, t1-5, t2-2, t2-5, t3-1"]  # fmt: skip
    racks = kafka_racks(TOPICS, 3, "abc")
    members = consumers(UNIFORM, "abc", owned)
    result = get_assignor(name).assign(TOPICS, members, racks=racks)
    assert [_text(result[f"consumer{i}"]) for i in range(3)] == owned


def test_balanced_keeps_its_largest_member_lag_within_tolerance() -> None:
    racks = kafka_racks(TOPICS, 1, "abc")
    members = consumers(UNIFORM, "abc")
    lags = {TopicPartition(t, p): 1000 // (p + 1) + 7 * p for t, n in TOPICS.items()
            for p in range(n)}  # fmt: skip
    blind = get_assignor("balanced").assign(TOPICS, members, lags)
    result = get_assignor("balanced").assign(TOPICS, members, lags, racks=racks)
    worst = max(member_loads(blind, lags).values())
    assert max(member_loads(result, lags).values()) <= worst * 1.05
    assert rack_local(result, members, racks) >= rack_local(blind, members, racks)


# --------------------------------------------------------------------------- the input


def test_racks_are_ignored_without_member_racks() -> None:
    racks = kafka_racks(TOPICS, 1, "abc")
    members = consumers(UNIFORM, [None, None, None])  # type: ignore[arg-type]
    for name in RACK_AWARE:
        a = get_assignor(name)
        assert a.assign(TOPICS, members, racks=racks) == a.assign(TOPICS, members)


def test_validate_racks() -> None:
    assert validate_racks({"t": [["a", "b"]], "x": [["c"]]}, {"t": 2}) == {
        "t": [frozenset({"a", "b"}), frozenset()]
    }
    for bad in ({"t": "ab"}, {"t": [["a"], ["b"], ["c"]]}, {"t": [[1]]}, {"t": [["a", ""]]},
                {"t": ["ab"]}):  # fmt: skip
        with pytest.raises(ConfigError):
            validate_racks(bad, {"t": 2})  # type: ignore[arg-type]


class OldStyle(Assignor):
    """A user's assignor written before racks: ``_assign`` with three arguments."""

    name = "old-style"

    def _assign(self, partitions_per_topic: dict[str, int], members: dict[str, M],
                lags: dict[TopicPartition, int]) -> dict[str, list[TopicPartition]]:  # fmt: skip
        first = min(members)
        return {first: [TopicPartition(t, p) for t, n in partitions_per_topic.items()
                        for p in range(n)]}  # fmt: skip


def test_assignors_written_before_racks_still_work() -> None:
    racks = kafka_racks(TOPICS, 1, "abc")
    members = consumers(UNIFORM, "abc")
    old = OldStyle()
    assert not reads_racks(old)
    assert old.assign(TOPICS, members, racks=racks) == old.assign(TOPICS, members)

    class Overriding:
        """One that overrides ``assign`` itself, with today's three arguments (and claims to
        read racks): the runtime must call it as ever."""

        uses_racks = True

        def assign(self, partitions_per_topic: Any, members: Any, lags: Any = None) -> Any:
            return {"consumer0": []}

    assert not reads_racks(Overriding())

    class MySticky(StickyAssignor):
        """A subclass of a rack-aware assignor that overrides ``_assign`` only."""

        def _assign(
            self,
            partitions_per_topic: dict[str, int],
            members: dict[str, M],
            lags: dict[TopicPartition, int],
        ) -> dict[str, list[TopicPartition]]:
            return OldStyle()._assign(partitions_per_topic, members, lags)

    mine = MySticky()
    assert not reads_racks(mine)
    assert mine.assign(TOPICS, members, racks=racks) == old.assign(TOPICS, members)
    for name in RACK_AWARE:
        assert reads_racks(get_assignor(name))
    assert not reads_racks(get_assignor("roundrobin"))


def test_runtime_binds_racks_to_rack_aware_assignors() -> None:
    racks = kafka_racks(TOPICS, 1, "abc")
    members = consumers(UNIFORM, "abc")
    sticky = get_assignor("sticky")
    bound = WithRacks(sticky, racks)
    assert bound.name == "sticky" and bound.uses_lag == sticky.uses_lag
    assert bound.assign(TOPICS, members) == sticky.assign(TOPICS, members, racks=racks)


def test_client_rack_and_its_alias() -> None:
    base = {"group.id": "g", "bootstrap.servers": "localhost:9092"}
    cfg = GroupConfig.from_dict({**base, "client.rack": "a"})
    assert cfg.rack == "a" and cfg.data_consumer["client.rack"] == "a"
    # the control clients read leaders: a follower would show them records later
    assert "client.rack" not in cfg.client_config("control")
    alias = GroupConfig.from_dict({**base, "groupkit.client.rack": "b"})
    assert alias.rack == "b" and alias.data_consumer["client.rack"] == "b"
    assert (
        GroupConfig.from_dict({**base, "client.rack": "a", "groupkit.client.rack": "a"}).rack == "a"
    )
    with pytest.raises(ConfigError, match="different racks"):
        GroupConfig.from_dict({**base, "client.rack": "a", "groupkit.client.rack": "b"})
    assert GroupConfig.from_dict(base).rack is None


def test_cli_reads_racks(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    members = {"c0": {"topics": ["t0"], "rack": "b"}, "c1": {"topics": ["t0"], "rack": "a"}}
    doc = {"partitions": {"t0": 2}, "members": members, "racks": {"t0": [["a"], ["b", "c"]]}}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(doc)))
    assert main(["assign", "--assignor", "range"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"assignment": {"c0": [["t0", 1]], "c1": [["t0", 0]]}}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({**doc, "racks": {"t0": "a"}})))
    assert main(["assign", "--assignor", "range"]) == 2


# --------------------------------------------------------------------------- properties

SCALE = int(os.environ.get("GROUPKIT_HYPOTHESIS_SCALE", "1"))
FAST = settings(
    max_examples=80 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
RACKS = ["a", "b", "c", "d"]


@st.composite
def racked_groups(draw: Any) -> tuple[dict[str, int], dict[str, M], dict[TopicPartition, int],
                                      dict[str, list[list[str]]]]:  # fmt: skip
    """Random topics, members (some without a rack, some owning), lags and replica racks."""
    topics = ["a", "b", "c"][: draw(st.integers(1, 3))]
    parts = {t: draw(st.integers(1, 9)) for t in topics}
    equal = draw(st.booleans())
    common = draw(st.sets(st.sampled_from(topics), min_size=1))
    members = {}
    for i in range(draw(st.integers(1, 6))):
        subs = common if equal else draw(st.sets(st.sampled_from(topics), min_size=1))
        owned = draw(st.lists(st.tuples(st.sampled_from(topics), st.integers(0, 8)), max_size=6,
                              unique=True))  # fmt: skip
        rack = draw(st.one_of(st.none(), st.sampled_from(RACKS)))
        members[f"m{i}"] = M(subs, owned=owned, generation=1 if owned else None, rack=rack)
    racks = {
        t: [draw(st.lists(st.sampled_from(RACKS[:3]), min_size=0, max_size=2, unique=True))
            for _ in range(n)]
        for t, n in parts.items()
    }  # fmt: skip
    lags = {TopicPartition(t, p): draw(st.integers(0, 500)) for t, n in parts.items()
            for p in range(n)}  # fmt: skip
    return parts, members, lags, racks


@FAST
@given(racked_groups(), st.randoms(use_true_random=False))
def test_racks_keep_balance_and_never_lower_locality(g: Any, rng: random.Random) -> None:
    parts, members, lags, racks = g
    for name in RACK_AWARE:
        a = get_assignor(name)
        blind = a.assign(parts, members, lags)
        result = a.assign(parts, members, lags, racks=racks)
        assert_valid(parts, members, result, balanced=name != "range")
        # balance exactly as without racks: the same counts (range: per topic)
        if name == "range":
            for t in parts:
                per = [Counter(tp[0] for tp in tps)[t] for tps in result.values()]
                assert sorted(per) == sorted(Counter(tp[0] for tp in tps)[t]
                                             for tps in blind.values())  # fmt: skip
        else:
            assert sorted(map(len, result.values())) == sorted(map(len, blind.values()))
        assert rack_local(result, members, racks) >= rack_local(blind, members, racks)
        if name == "balanced":
            worst = max(member_loads(blind, lags).values(), default=0.0)
            # racks may spend the tolerance stickiness has (5 %)
            assert max(member_loads(result, lags).values(), default=0.0) <= worst * 1.05 + 1e-9
        # deterministic whatever the order of the input's dicts
        items = list(members.items())
        rng.shuffle(items)
        assert a.assign(dict(reversed(parts.items())), dict(items), lags, racks=racks) == result


def rack_optimum(parts: Mapping[str, int], racks: Mapping[str, list[list[str]]],
                 member_racks: Sequence[str | None]) -> int:  # fmt: skip
    """The most rack-local partitions any assignment with balanced counts (q or q + 1) can have:
    over every way to give the q + 1 places to racks, a max flow of partitions to racks."""
    total, n = sum(parts.values()), len(member_racks)
    q, extra = divmod(total, n)
    groups = Counter(r for r in member_racks if r)
    rackless = n - sum(groups.values())
    classes = Counter(frozenset(racks[t][p]).intersection(groups) for t, c in parts.items()
                      for p in range(c))  # fmt: skip
    names = sorted(groups)
    best = 0

    def flow(cap: dict[str, int]) -> int:
        # augmenting paths on class -> rack, one unit at a time (the inputs are small)
        left = dict(classes)
        room = dict(cap)
        used: dict[tuple[frozenset[str], str], int] = Counter()
        got = 0
        while True:
            # BFS from classes with partitions left to a rack with room, through reversible uses
            parent: dict[Any, Any] = {}
            frontier = [("c", k) for k, v in left.items() if v > 0 and k]
            for node in frontier:
                parent[node] = None
            found = None
            while frontier and found is None:
                nxt = []
                for kind, x in frontier:
                    if kind == "c":
                        for r in sorted(x):
                            if ("r", r) not in parent:
                                parent[("r", r)] = (kind, x)
                                if room[r] > 0:
                                    found = ("r", r)
                                    break
                                nxt.append(("r", r))
                    else:
                        for k in classes:
                            if used[(k, x)] > 0 and ("c", k) not in parent:
                                parent[("c", k)] = (kind, x)
                                nxt.append(("c", k))
                    if found:
                        break
                frontier = nxt
            if found is None:
                return got
            node = found
            room[node[1]] -= 1
            while parent[node] is not None:
                prev = parent[node]
                if prev[0] == "c":
                    used[(prev[1], node[1])] += 1
                else:
                    used[(node[1], prev[1])] -= 1
                node = prev
            left[node[1]] -= 1
            got += 1

    def spread(i: int, left: int, cap: dict[str, int]) -> None:
        nonlocal best
        if i == len(names):
            if left <= rackless:
                best = max(best, flow(cap))
            return
        r = names[i]
        for e in range(min(groups[r], left) + 1):
            spread(i + 1, left - e, {**cap, r: groups[r] * q + e})

    spread(0, extra, {})
    return best


@FAST
@given(racked_groups())
def test_sticky_reaches_the_rack_optimum_with_equal_subscriptions(g: Any) -> None:
    parts, members, _, racks = g
    topics = sorted(parts)
    equal = {m: M(topics, owned=s.owned, generation=s.generation, rack=s.rack)
             for m, s in members.items()}  # fmt: skip
    best = rack_optimum(parts, racks, [s.rack for s in equal.values()])
    for name in ("sticky", "cooperative-sticky"):
        result = get_assignor(name).assign(parts, equal, racks=racks)
        assert rack_local(result, equal, racks) == best
