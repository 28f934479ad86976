"""Control-log hops per rebalance, for both protocols, with the simulator's latency model.

The hop counts are exact on purpose: a change that removes (or adds) a sequential record round
trip must update them here, and the README table (``bench/hops.py``) with them. Run with ``-s``
to see the table.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.hops import HopRow, hop_table, measure, render
from groupkit.testing.sim import GroupSim

#: (protocol, assignor, scenario) -> (hops until the partitions are owned again, hops until
#: stable). With cooperative-sticky the current generation names what a newcomer gets, so the
#: owners let it go at the join record itself, without the leader's turn (docs/protocol.md,
#: "Admission"): a join is owned a hop sooner than with range. The leader's plan that covers the
#: newcomer waits until the newcomer claims its share (``Planner.admission_under_way``): made at
#: the join record, it raced the owners' releases, and a release it beat took hops more. So the
#: join is stable a hop later (5, was 4) and owned as soon (2).
EXPECTED = {
    ("eager", "range", "join"): (4, 5),
    ("eager", "range", "join_bounded"): (4, 5),
    ("eager", "range", "leave"): (4, 5),
    ("eager", "range", "crash"): (3, 4),
    ("cooperative", "range", "join"): (3, 5),
    ("cooperative", "range", "join_bounded"): (3, 5),
    ("cooperative", "range", "leave"): (3, 5),
    ("cooperative", "range", "crash"): (2, 4),
    ("cooperative", "cooperative-sticky", "join"): (2, 5),
    ("cooperative", "cooperative-sticky", "join_bounded"): (2, 5),
    ("cooperative", "cooperative-sticky", "leave"): (1, 3),
    ("cooperative", "cooperative-sticky", "crash"): (1, 2),
}


def test_hop_table() -> None:
    rows = hop_table()  # produce 10 ms + fetch 10 ms a hop, session 10 s, heartbeat 1 s
    print("\n" + render(rows))
    assert {(r.protocol, r.assignor, r.scenario): (r.hops_owned, r.hops) for r in rows} == EXPECTED
    for r in rows:
        if r.scenario == "crash":
            # the session must pass first; the hops follow the heartbeat that shows it passed
            assert 10_000 + r.hops * 20 <= r.latency_ms <= 10_000 + 1_000 + 20 + r.hops * 20
        else:  # the event's record is written one tick (5 ms) after the call
            assert r.latency_ms == r.hops * 20 + 5


@pytest.mark.parametrize(
    "protocol,assignor",
    [("eager", "range"), ("cooperative", "range"), ("cooperative", "cooperative-sticky")],
)
def test_hops_do_not_depend_on_the_delays(protocol: str, assignor: str) -> None:
    """A hop is a record round trip, whatever it costs: other delays, the same counts."""
    for scenario in ("join", "leave"):
        r = measure(protocol, scenario, produce_delay_ms=30, fetch_delay_ms=70, tick_ms=10,
                    heartbeat_interval_ms=3_000, assignor=assignor)  # fmt: skip
        assert r == HopRow(protocol, scenario, *EXPECTED[protocol, assignor, scenario],
                           r.hops * 100 + 10, assignor)  # fmt: skip


def test_a_record_is_visible_only_after_produce_and_fetch_delay() -> None:
    sim = GroupSim({"t0": 2}, tick_ms=10, produce_delay_ms=20, fetch_delay_ms=30)
    sim.join("a")
    sim.tick()  # clock 10: "a" writes its join record
    assert sim.log.records == [] and sim.visible() == 0
    sim.tick(2)  # clock 30: appended, stamped with its append time
    assert [r.timestamp for r in sim.log.records] == [30]
    assert sim.visible() == 0 and sim.view().members == {}
    sim.tick(2)  # clock 50: still in the fetch
    assert sim.visible() == 0
    sim.tick()  # clock 60 = 10 + 20 + 30
    assert sim.visible() == 1 and "a" in sim.view().members
    sim.settle()
    assert sim.members["a"].member.owned == {("t0", 0), ("t0", 1)}


def test_jitter_keeps_each_writers_order_and_lets_others_land_between() -> None:
    """``produce_jitter_ms``: one writer's records land in the order it wrote them; another
    writer's record, written after both, may land between them."""
    sim = GroupSim({"t0": 2}, tick_ms=10, produce_delay_ms=10, produce_jitter_ms=50, seed=3)
    for i in range(200):
        sim._produce(b"a", b"%d" % i, "a")
        sim._produce(b"a", b"%d" % (i + 1000), "a")
        sim._produce(b"b", b"%d" % i, "b")
        sim.tick()
    sim.tick(10)
    assert len(sim.log.records) == 600
    values = {w: [int(r.value or b"") for r in sim.log.records if r.key == w] for w in (b"a", b"b")}
    assert values[b"a"] == [v for i in range(200) for v in (i, i + 1000)]
    assert values[b"b"] == list(range(200))
    keys = [r.key for r in sim.log.records]
    assert any(keys[j : j + 3] == [b"a", b"b", b"a"] for j in range(len(keys) - 2))
