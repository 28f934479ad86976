"""Protocol version 2's liveness (docs/protocol-v2.md, rules L1, L2, L6): a member judges its own
heartbeats from its delivery reports, the judge from the log, and no verdict ends a run before
the member has stopped counting itself running in it. Over random schedules of
:mod:`groupkit.testing.liveness_sim` (leader moves with broker clocks apart, slow and failing
reports, freezes, crashes, a late judge), and by hand for each rule."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from groupkit.protocol.liveness import (
    Confirmed,
    Heartbeat,
    HeartbeatClock,
    LivenessJudge,
    VerdictKind,
    continues,
)
from groupkit.testing.liveness_sim import LivenessSim

SESSION_MS = 10_000


def _members(static: bool) -> dict[str, tuple[int, int, int]]:
    # (lease, skew allowance, heartbeat interval): a static process's lease is 3 s and renewed
    # every second, a dynamic member's lease is its session.
    dynamic = (SESSION_MS, 1000, 1000)
    return {"a": (3000, 600, 1000) if static else dynamic, "b": dynamic, "c": (3000, 300, 500)}


# Each schedule is two simulated minutes with leadership moving often, seconds-long appends and
# reports now and then, failed reports, freezes past the session and crashes. Without any one of
# the judge's allowance, the member's allowance, the in-flight basis (L6.2) or the member's
# memory of a report that may have landed, 1.5-17 % of schedules break: 300 find each.
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), skew=st.integers(0, 300), static=st.booleans())
def test_no_verdict_ends_a_run_the_member_still_runs_and_both_sides_agree(
    seed: int, skew: int, static: bool
) -> None:
    sim = LivenessSim(_members(static), SESSION_MS, max_skew_ms=skew, seed=seed,
                      move_rate=0.05, fail_rate=0.05, freeze_rate=0.0005, max_freeze_ms=12_000,
                      crash_rate=0.0002)  # fmt: skip
    sim.run(120_000)
    assert sim.violations() == []
    assert sim.read > 0


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32), skew=st.integers(0, 300))
def test_a_member_whose_heartbeats_land_in_time_is_never_ended(seed: int, skew: int) -> None:
    sim = LivenessSim(_members(static=True), SESSION_MS, max_skew_ms=skew, seed=seed,
                      fail_rate=0.0, freeze_rate=0.0, crash_rate=0.0, slow_rate=0.0)  # fmt: skip
    sim.run(30_000)
    assert sim.violations() == []
    assert [v for _t, v in sim.verdicts] == []


def test_the_allowance_is_what_keeps_a_verdict_behind_the_fence() -> None:
    """With the brokers' clocks further apart than the members allow for, the schedules find a
    verdict that ends a run the member still counts itself running in, or a disagreement."""
    broken = 0
    for seed in range(40):
        sim = LivenessSim({"a": (3000, 0, 1000), "b": (3000, 0, 1000)}, SESSION_MS,
                          max_skew_ms=2500, seed=seed, move_rate=0.05, freeze_rate=0.004,
                          max_freeze_ms=4000)  # fmt: skip
        sim.run(30_000)
        broken += bool(sim.violations())
    assert broken > 0


def test_a_heartbeat_continues_only_within_its_lease_of_the_stamp_it_names() -> None:
    hb = Heartbeat("m", "i", 2, prev_ts=1000, lease_ms=3000, skew_ms=500)
    assert continues(hb, 3999)
    assert not continues(hb, 4000)
    assert not continues(Heartbeat("m", "i", 2, None, 3000, 500), 1000)


def test_the_member_fences_at_its_basis_send_plus_lease_less_the_allowance() -> None:
    c = HeartbeatClock(lease_ms=3000, skew_ms=500)
    assert c.heartbeat(1, now_ms=0) is None  # nothing confirmed: a run starts
    assert c.lapsed(0)
    assert c.confirmed(1, ts=10_020) == Confirmed.RESTARTED and c.run_start == 1
    assert c.deadline() == 2500
    assert c.heartbeat(2, now_ms=1000) == 10_020
    assert c.deadline() == 2500  # heartbeat 2 names heartbeat 1: its basis binds meanwhile
    assert c.confirmed(2, ts=11_030) == Confirmed.CONTINUED
    assert c.deadline() == 3500 and c.run_start == 1
    # a heartbeat that lands later than its lease after the stamp it names starts a new run
    assert c.heartbeat(3, now_ms=2000) == 11_030
    assert c.confirmed(3, ts=14_030) == Confirmed.RESTARTED and c.run_start == 3


def test_a_report_that_may_or_may_not_have_landed_stops_the_deadline_where_it_is() -> None:
    """The heartbeat binds as one on its way does (it may have landed late and restarted the
    run), for good: the member runs to that bound, and then starts a new run."""
    c = HeartbeatClock(lease_ms=3000, skew_ms=500)
    c.heartbeat(1, 0)
    c.confirmed(1, 100)
    c.heartbeat(2, 1000)
    c.failed(2, maybe_landed=True)
    assert not c.lapsed(1001) and c.deadline() == 2500  # 0 + 3000 - 500: no further
    assert c.heartbeat(3, 2000) == 100
    assert c.confirmed(3, 2100) == Confirmed.UNKNOWN and c.deadline() == 2500
    assert c.lapsed(2500)
    assert c.heartbeat(4, 2600) is None  # lapsed: no prev_ts
    assert c.restarting
    assert c.confirmed(4, 2700) == Confirmed.RESTARTED
    assert not c.lapsed(2601) and c.deadline() == 5100


def test_the_judge_ends_a_process_then_a_session_an_allowance_after_them() -> None:
    j = LivenessJudge(session_ms=SESSION_MS)
    assert j.replay(0, 1000, Heartbeat("m", "i", 1, None, 3000, 500)) == []
    assert j.replay(1, 2000, Heartbeat("m", "i", 2, 1000, 3000, 500)) == []
    assert j.advance(2, 5499) == []
    [ended] = j.advance(3, 5500)  # 2000 + 3000 + 500
    assert (ended.kind, ended.run_start) == (VerdictKind.PROCESS_ENDED, 1)
    assert j.advance(4, 12_499) == []
    [expired] = j.advance(5, 12_500)  # 2000 + 10000 + 500
    assert expired.kind == VerdictKind.EXPIRED and ("m", "i") not in j.runs


def test_the_judge_restarts_a_run_at_a_late_heartbeat_and_ignores_stale_ones() -> None:
    j = LivenessJudge(session_ms=SESSION_MS)
    j.replay(0, 1000, Heartbeat("m", "i", 1, None, 3000, 500))
    [restart] = j.replay(1, 4000, Heartbeat("m", "i", 2, 1000, 3000, 500))
    assert (restart.kind, restart.run_start) == (VerdictKind.RESTARTED, 1)
    assert j.runs[("m", "i")].start == 2
    assert j.replay(2, 4100, Heartbeat("m", "i", 2, 1000, 3000, 500)) == []  # a copy
    assert j.stale == 1


def test_a_judge_that_starts_mid_log_judges_the_runs_it_has_seen() -> None:
    """It reads every heartbeat after the first it sees of a run, so it knows the run's
    newest: its process ends a lease and the allowance after it, as for any judge. The run is
    named by that heartbeat, which ends it and every earlier run of the process."""
    j = LivenessJudge(session_ms=SESSION_MS)
    j.replay(0, 1000, Heartbeat("m", "i", 7, 500, 3000, 500))
    assert j.advance(1, 4_499) == []
    [ended] = j.advance(2, 4_500)  # 1000 + 3000 + 500
    assert (ended.kind, ended.run_start) == (VerdictKind.PROCESS_ENDED, 7)


def test_after_a_report_that_may_have_landed_the_member_cannot_tell_its_run() -> None:
    """Heartbeat 2 may have landed late and restarted the run: heartbeat 3, sent with the same
    prev_ts, then continues the judge's new run, not the member's. The member cannot tell, so
    it does not count 3 as continuing: it runs no further than 2's bound, then starts a new
    run."""
    c = HeartbeatClock(lease_ms=3000, skew_ms=500)
    c.heartbeat(1, 0)
    c.confirmed(1, 100)
    assert c.heartbeat(2, 1000) == 100
    assert c.heartbeat(3, 1500) == 100
    c.failed(2, maybe_landed=True)
    assert c.confirmed(3, 1600) == Confirmed.UNKNOWN
    assert c.deadline() == 2500 and c.run_start == 1  # no further than before 2 was sent
    assert c.lapsed(2500) and c.heartbeat(4, 2600) is None
    assert c.confirmed(4, 2700) == Confirmed.RESTARTED and not c.lapsed(2601)
