"""The counterfactual's pure core: lag simulated forward under assignors and policies.

No Spark here: :mod:`groupkit.pipeline.counterfactual` is values in, values out, and these
tests give it histories whose answer is known (a group that runs exactly the model, a hot
partition a sticky assignor leaves where it is) and properties that hold for any input.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupkit.pipeline import counterfactual as cf
from groupkit.pipeline.synthetic import synthetic_history
from groupkit.runtime.telemetry import (
    LagSnapshot,
    MemberInfo,
    RebalanceEvent,
    TopicOffsets,
    decode,
)
from groupkit.types import TopicPartition

T0 = 1_000_000


def run_group(
    rates: Sequence[float],
    members: Sequence[Sequence[str]],
    owner_of: dict[str, dict[int, str]] | None = None,
    capacity: float = 100.0,
    dt: float = 2.0,
    protocol: str = "cooperative",
    declared: float | None = None,
    boost: dict[int, float] | None = None,
) -> list[LagSnapshot]:
    """A group on one topic that runs exactly the model: partition ``p`` appended at
    ``rates[p]``, members (``members[i]`` at snapshot ``i``) process ``capacity`` records/s
    each, in proportion to backlog; partitions go round-robin over the members unless
    ``owner_of`` (by snapshot key) says otherwise; ``boost[i]`` multiplies the appends of
    interval ``i``."""
    n = len(rates)
    end = [0] * n
    committed = [0] * n
    out = []
    for i, ms in enumerate(members):
        owner = {p: ms[p % len(ms)] for p in range(n)}
        if owner_of and str(i) in owner_of:
            owner = owner_of[str(i)]
        if i > 0:
            lag = {p: float(end[p] - committed[p]) for p in range(n)}
            f = (boost or {}).get(i, 1.0)
            for p in range(n):
                end[p] += round(rates[p] * dt * f)
                lag[p] += round(rates[p] * dt * f)
            tps = {TopicPartition("t", p): owner[p] for p in range(n)}
            lags = {TopicPartition("t", p): lag[p] for p in range(n)}
            caps = dict.fromkeys(ms, capacity)
            done = cf._process(lags, tps, caps, dt, {})
            for p in range(n):
                committed[p] += round(done.get(TopicPartition("t", p), 0.0))
        out.append(
            LagSnapshot(
                group="g",
                ts_ms=T0 + round(i * dt * 1000),
                leader=ms[0],
                generation=1,
                protocol=protocol,
                assignor="roundrobin",
                members={m: MemberInfo(("t",), capacity=declared) for m in ms},
                topics={
                    "t": TopicOffsets(
                        end=tuple(end),
                        committed=tuple(committed),
                        lag=tuple(e - c for e, c in zip(end, committed, strict=True)),
                        owner=tuple(owner[p] for p in range(n)),
                    )
                },
                interval_ms=None if i == 0 else round(dt * 1000),
                load_interval_ms=0,
            )
        )
    return out


def test_the_calibration_reproduces_a_group_that_runs_the_model() -> None:
    """Recorded assignments, recovered appends and capacities: the recorded lag comes back."""
    snaps = run_group([150, 10, 10, 10], [["a", "b"]] * 30)
    h = cf.recover("g", snaps)
    assert h.capacity == {"a": pytest.approx(100, rel=0.02), "b": pytest.approx(100, rel=0.02)}
    rec = cf.recorded_track(h).max_member_lag
    sim = cf.simulate(h, None).max_member_lag
    assert max(rec) > 1000  # a falls behind: 160 records/s on a member doing 100
    assert max(abs(x - y) for x, y in zip(sim, rec, strict=True)) <= 0.02 * max(rec)


def test_a_hot_partition_drains_where_there_is_spare_capacity() -> None:
    """a holds p0 (90/s) and p2 (30/s); b holds p1 and p3 (10/s each); each does 100/s.
    Sticky never moves them, so a's lag only grows; following the load (the leader's
    re-plan) moves p2 to b, and a drains."""
    snaps = run_group([90, 10, 30, 10], [["a", "b"]] * 30)
    got = cf.counterfactual_group("g", snaps, ["sticky"])
    rows = {(r["assignor"], r["policy"]): r for r in got}
    stay, follow = rows[("sticky", "membership")], rows[("sticky", "load")]
    assert stay["moves"] == 0 and follow["moves"] >= 1
    assert follow["mean_max_member_lag"] < stay["mean_max_member_lag"]
    # the calibration row names the model's error; the recorded row is the history itself
    assert rows[(cf.ACTUAL, cf.RECORDED)]["calibration_pct"] < 2
    assert rows[(cf.RECORDED, cf.RECORDED)]["calibration_pct"] is None


def test_spare_capacity_drains_a_burst_and_the_drain_time_says_when() -> None:
    """Nobody is ever busy before the burst, so the members' declared capacity is what the
    simulation has to go by."""
    burst = {9: 4.0, 10: 4.0, 11: 4.0}  # 160/s per partition for three intervals
    snaps = run_group([40.0, 40.0], [["a", "b"]] * 20, declared=100, boost=burst)
    h = cf.recover("g", snaps)
    assert cf.bursts(h) == [(9, 11)]
    t = cf.simulate(h, "roundrobin", "membership")
    drains, undrained = cf.drain_times(h, t.max_member_lag)
    # 60/s more than each member does for 6 s: 360 records each, drained at 60/s: ~6 s
    assert undrained == 0 and drains == [pytest.approx(6, abs=2.1)]
    assert drains == cf.drain_times(h, cf.recorded_track(h).max_member_lag)[0]


def test_eager_pays_for_every_partition_cooperative_only_for_the_moved() -> None:
    members = [["a", "b"]] * 5 + [["a", "b", "c"]] * 5
    coop = cf.recover("g", run_group([20] * 6, members))
    eager = cf.recover("g", run_group([20] * 6, members, protocol="eager"))
    tc = cf.simulate(coop, "sticky", "membership")
    te = cf.simulate(eager, "sticky", "membership")
    assert tc.moves == te.moves == 2  # c takes two of the six; sticky moves only those
    assert tc.unowned_ps == pytest.approx(2 * cf.MOVE_COST_S["cooperative"])
    assert te.unowned_ps == pytest.approx(6 * cf.MOVE_COST_S["eager"])


def test_the_groups_own_rebalance_durations_price_a_move() -> None:
    snaps = run_group([20] * 4, [["a", "b"]] * 4)
    event = RebalanceEvent("g", T0, "a", "membership_changed", "cooperative", "range",
                           1, 2, 1, 2, 2, 250.0, "completed")  # fmt: skip
    assert cf.recover("g", snaps, [event]).move_cost_s == 0.25
    assert cf.recover("g", snaps).move_cost_s == cf.MOVE_COST_S["cooperative"]


def test_the_combination_the_group_ran_is_marked() -> None:
    snaps = run_group([20] * 4, [["a", "b"]] * 4)
    rows = cf.counterfactual_group("g", snaps, ["roundrobin", "range"], ["membership", "load"])
    ran = [(r["assignor"], r["policy"]) for r in rows if r["ran"]]
    assert ran == [("roundrobin", "membership")]
    assert len(rows) == 2 + 2 * 2


def test_a_failing_group_gives_one_error_row() -> None:
    values = [s.to_json() for s in run_group([20] * 4, [["a", "b"]] * 3)]
    rows = cf.counterfactual_values("g", values, ["no-such-assignor"])
    assert len(rows) == 1 and "UnknownAssignorError" in rows[0]["error"]
    assert cf.counterfactual_values("g", [b"junk", None], ["range"]) == []


@pytest.mark.parametrize("index", range(6))
def test_calibration_on_synthetic_histories_is_within_target(index: int) -> None:
    """The synthetic generator consumes as the model does (with noise on the capacity): the
    calibration must find its histories again, bursts, hot spots, joins and leaves."""
    records = [decode(v) for _, v in synthetic_history(index, 60, seed=5)]
    snaps = [r for r in records if isinstance(r, LagSnapshot)]
    events = [r for r in records if isinstance(r, RebalanceEvent)]
    rows = cf.counterfactual_group(f"s{index}", snaps, ["range", "balanced"], rebalances=events)
    actual = next(r for r in rows if r["assignor"] == cf.ACTUAL)
    assert actual["calibration_pct"] <= 20, actual


# --------------------------------------------------------------------------- properties

LAGS = st.dictionaries(
    st.integers(0, 7).map(lambda p: TopicPartition("t", p)),
    st.floats(0, 1e6, allow_nan=False),
    min_size=1,
)


@settings(max_examples=300, deadline=None)
@given(
    lags=LAGS,
    who=st.lists(st.sampled_from("abc"), min_size=8, max_size=8),
    caps=st.fixed_dictionaries({m: st.floats(0, 1e4, allow_nan=False) for m in "abc"}),
    dt=st.floats(0.1, 30),
    gaps=st.dictionaries(st.integers(0, 7), st.floats(0, 40)),
)
def test_processing_respects_capacity_backlog_and_hand_offs(
    lags: dict[TopicPartition, float],
    who: list[str],
    caps: dict[str, float],
    dt: float,
    gaps: dict[int, float],
) -> None:
    """No member does more than its capacity allows, no partition loses more than its
    backlog or than its owner could do while owning it, and a member with budget left over
    has nothing left it could have done (work conserving)."""
    owners = {tp: who[tp.partition] for tp in lags}
    unowned = {TopicPartition("t", p): u for p, u in gaps.items()}
    lag = dict(lags)
    done = cf._process(lag, owners, caps, dt, unowned)
    eps = 1e-6
    for m in "abc":
        mine = [tp for tp, o in owners.items() if o == m]
        total = sum(done.get(tp, 0.0) for tp in mine)
        assert total <= caps[m] * dt * (1 + eps) + eps
        left = caps[m] * dt - total
        for tp in mine:
            n = done.get(tp, 0.0)
            room = min(lags[tp], caps[m] * max(0.0, dt - unowned.get(tp, 0.0)))
            assert -eps <= n <= room * (1 + eps) + eps
            assert lag[tp] == pytest.approx(max(0.0, lags[tp] - n), abs=1e-6 * (1 + lags[tp]))
            if left > 1e-3 * (1 + caps[m] * dt):
                assert n >= room * (1 - 1e-6) - 1e-3, "budget left over, yet room unused"


@settings(max_examples=40, deadline=None)
@given(
    rates=st.lists(st.integers(0, 300), min_size=2, max_size=6),
    sizes=st.lists(st.integers(1, 3), min_size=3, max_size=10),
    policy=st.sampled_from(cf.POLICIES),
    assignor=st.sampled_from(["range", "sticky", "balanced", "lag"]),
)
def test_simulated_lag_is_never_negative_and_accounts_for_every_record(
    rates: list[int], sizes: list[int], policy: str, assignor: str
) -> None:
    """Whatever the assignor and policy: the lag stays >= 0, and what is left at the end is
    the first lag plus every append, less at most what the members could process."""
    members = [["a", "b", "c"][:k] for k in sizes]
    h = cf.recover("g", run_group([float(r) for r in rates], members, capacity=50))
    t = cf.simulate(h, assignor, policy)
    assert len(t.max_member_lag) == len(h.snaps)
    assert all(x >= 0 for x in t.max_member_lag)
    assert t.moves >= 0 and t.unowned_ps >= 0
    appended = sum(sum(a.values()) for a in h.appended)
    first = sum(h.snaps[0].lags().values())
    could = sum(
        h.dt(i) * sum(h.capacity[m] for m in h.snaps[i].members) for i in range(1, len(h.snaps))
    )
    assert all(x <= first + appended + 1e-6 for x in t.max_member_lag)
    assert could >= 0
    again = cf.simulate(h, assignor, policy)
    assert again.max_member_lag == t.max_member_lag  # deterministic
