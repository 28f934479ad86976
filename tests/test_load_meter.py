"""The leader's measure of the load (runtime/load.py), without a broker: the meter's rates
from samples of end and committed offsets, the follower's hand-over of a decision, and the
setting. The same code on a real broker: tests/test_load_replan.py."""

from __future__ import annotations

import time
from typing import Any

import pytest

from groupkit.errors import ConfigError
from groupkit.protocol.placement import LoadPolicy
from groupkit.runtime.config import LOAD_INTERVAL_BALANCED_MS, GroupConfig
from groupkit.runtime.lag import GroupOffsets
from groupkit.runtime.load import LoadFollower, LoadMeter, sample_every_ms
from groupkit.testing.sim import GroupSim
from groupkit.types import TopicPartition

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def offsets(end: dict[TopicPartition, int], committed: dict[TopicPartition, int]) -> GroupOffsets:
    lag = {tp: end[tp] - committed.get(tp, 0) for tp in end}
    return GroupOffsets(end, {tp: committed.get(tp) for tp in end}, lag)


def test_rates_from_end_and_committed_offsets() -> None:
    m = LoadMeter(window_ms=10_000)
    owners = {A: "a", B: "b"}
    m.add(offsets({A: 1000, B: 0}, {A: 500, B: 0}), owners, 0)
    m.add(offsets({A: 3000, B: 10}, {A: 1500, B: 10}), owners, 2000)
    loads = m.loads()
    assert loads[A].produce_rate == 1000.0 and loads[A].consume_rate == 500.0
    assert loads[A].lag == 1500
    assert loads[B].produce_rate == 5.0 and loads[B].consume_rate == 5.0


def test_a_new_owner_starts_its_consume_rate_again() -> None:
    m = LoadMeter(window_ms=60_000)
    m.add(offsets({A: 1000}, {A: 0}), {A: "a"}, 0)
    m.add(offsets({A: 2000}, {A: 900}), {A: "a"}, 1000)
    m.add(offsets({A: 3000}, {A: 1000}), {A: "b"}, 2000)
    assert m.loads()[A].consume_rate is None  # one sample of b's: nothing measured yet
    assert m.loads()[A].produce_rate == 1000.0  # the log's rate is nobody's
    m.add(offsets({A: 4000}, {A: 3000}), {A: "b"}, 3000)
    assert m.loads()[A].consume_rate == 2000.0


def test_old_samples_leave_the_window_and_truncation_starts_again() -> None:
    m = LoadMeter(window_ms=2_000)
    for i in range(5):
        m.add(offsets({A: 100 * i}, {A: 100 * i}), {A: "a"}, 1000 * i)
    assert m.loads()[A].produce_rate == 100.0
    m.add(offsets({A: 10}, {A: 10}), {A: "a"}, 6000)  # recreated: a lower end
    assert m.loads()[A].produce_rate == 0.0 and m.loads()[A].consume_rate is None


def test_sample_period() -> None:
    assert sample_every_ms(30_000) == 6_000
    assert sample_every_ms(1_000) == 1_000
    assert sample_every_ms(600_000) == 10_000


def test_the_setting_and_its_defaults() -> None:
    base = {"group.id": "g", "bootstrap.servers": "x:9092"}
    assert GroupConfig.from_dict(base).load_interval_ms == 0
    bal = {**base, "groupkit.assignor": "balanced"}
    assert GroupConfig.from_dict(bal).load_interval_ms == LOAD_INTERVAL_BALANCED_MS
    eager = {**bal, "groupkit.rebalance.protocol": "eager"}
    assert GroupConfig.from_dict(eager).load_interval_ms == 0
    on = {**base, "groupkit.load.rebalance.interval.ms": 5000}
    assert GroupConfig.from_dict(on).load_interval_ms == 5000
    with pytest.raises(ConfigError):
        GroupConfig.from_dict({**base, "groupkit.load.rebalance.interval.ms": -1})
    with pytest.raises(ConfigError):
        GroupConfig.from_dict({**eager, "groupkit.load.rebalance.interval.ms": 5000})


def _stable_group() -> GroupSim:
    sim = GroupSim({"t": 4}, protocol="cooperative", assignor="cooperative-sticky")
    for mid in ("a", "b"):
        sim.join(mid, ["t"])
    sim.settle()
    sim.tick(2)
    return sim


def test_the_follower_samples_then_decides_on_its_worker() -> None:
    sim = _stable_group()
    st = sim.view()
    a = st.assignment
    assert a is not None
    hot = sorted(a.members["a"].assigned)
    # a's partitions take 400 records/s each and a does 300 in all (busy); b's are idle
    t0 = {tp: 0 for m in a.members.values() for tp in m.assigned}
    calls: list[int] = []

    def read(admin: Any, group: str, parts: list[TopicPartition], reset: str) -> GroupOffsets:
        n = len(calls)
        calls.append(n)
        end = {tp: (400 * n if tp in hot else 0) for tp in parts}
        com = {tp: (150 * n if tp in hot else 0) for tp in parts}
        return offsets({**t0, **end}, com)

    lf = LoadFollower(None, "g", "latest", LoadPolicy(interval_ms=1000), read=read)  # type: ignore[arg-type]
    now = 0
    got = None
    for _ in range(6):
        assert lf.due(now)
        lf.start(st, now, sim.partitions, ready=True)
        deadline = time.monotonic() + 5
        while (got := lf.take()) is None and lf._thread is not None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        if got is not None and got[1].replan is not None:
            break
        now += 1000
    assert got is not None and got[0] == a.generation
    r = got[1].replan
    assert r is not None and r.reason == "overload"
    assert all(mv.source == "a" and mv.target == "b" for mv in r.moves)
    # and the node writes it as a generation of its own
    assert sim.replan(r)
    sim.settle()
    after = sim.view().assignment
    assert after is not None and after.replan is not None and after.replan.moved == len(r.moves)


def test_no_decision_while_not_stable() -> None:
    sim = _stable_group()
    lf = LoadFollower(None, "g", "latest", LoadPolicy(interval_ms=1000),  # type: ignore[arg-type]
                      read=lambda *a: offsets({A: 0}, {}))  # fmt: skip
    # the planner finds the group stable, but the node is not ready (a write of its own)
    lf.planner = sim.planner
    lf.start(sim.view(), 0, sim.partitions, ready=False)
    assert lf._thread is not None
    lf._thread.join(5)
    assert lf.take() is None  # sampled, not decided
