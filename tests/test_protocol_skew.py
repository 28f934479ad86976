"""Broker clock skew: "never two running owners" holds for any skew up to the allowance.

Log time is the ``LogAppendTime`` of whichever broker leads the control partition. When the
partition moves to a broker whose clock is ahead by ``d``, the log expires every member ``d``
early, measured from its own records' sends; a member that fences itself by its monotonic clock
at ``send + session.timeout`` could still be processing when its partitions are granted to
another (with ``d`` = 1 s or 2 s of a 10 s session, a pause of 8.5-9 s is enough). So the
member fences at ``send + session.timeout - max_clock_skew_ms`` (member.py, "Clock skew").

Proven here over the random schedules of ``test_protocol_hypothesis`` (both protocols, every
assignor, slow readers, pauses, crashes, leaves, injected and stale records) with three brokers
whose clocks are off by random amounts within the allowance, and leadership of the control
partition moving between them at random (forward and backward jumps of the log's stamps),
plus pauses just under the session. And shown the other way: a pause just under the session
while the log's broker is ahead breaks the invariant without the allowance and holds with it.
"""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from groupkit.assignors import assignor_names
from groupkit.testing.sim import GroupSim
from tests.test_protocol_hypothesis import GroupSchedule, schedule_settings

EXAMPLES = int(os.environ.get("GROUPKIT_SKEW_EXAMPLES", "400"))
SESSION = 3_000
ALLOWANCE = 1_000


class SkewedSchedule(GroupSchedule):
    """The random schedules, on three brokers whose clocks differ by up to ALLOWANCE."""

    def sim_options(self) -> dict[str, int]:
        return {**super().sim_options(), "session_timeout_ms": SESSION,
                "max_clock_skew_ms": ALLOWANCE}  # fmt: skip

    @rule(offset=st.one_of(st.sampled_from([0, ALLOWANCE]), st.integers(0, ALLOWANCE)))
    def leader_moves(self, offset: int) -> None:
        """The control partition's leadership moves to a broker whose clock is ``offset`` ahead
        of the members': it stamps every append from now. Offsets are in [0, ALLOWANCE], so any
        two brokers differ by at most the allowance (the extremes are drawn most often)."""
        self.sim.log.skew = offset

    @precondition(lambda self: bool(self._alive()))
    @rule(data=st.data(), short=st.integers(0, ALLOWANCE + 200))
    def pause_near_session(self, data: st.DataObject, short: int) -> None:
        """A pause just under the session: the member resumes while the log, stamped by a
        broker that is ahead, may already have expired it."""
        mid = data.draw(st.sampled_from(self._alive()))
        self.sim.pause(mid, SESSION - short)
        self.sim.members[mid].read_rate = data.draw(st.sampled_from([1, 3, None]))


SkewedSchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestSkewedSchedule = SkewedSchedule.TestCase


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True)
@given(
    protocol=st.sampled_from(["eager", "cooperative"]),
    assignor=st.sampled_from(assignor_names()),
    members=st.integers(2, 4),
    partitions=st.integers(1, 6),
    skew=st.one_of(st.just(ALLOWANCE), st.integers(-ALLOWANCE, ALLOWANCE)),
    before=st.integers(0, 10),
    pause=st.integers(SESSION - ALLOWANCE - 300, SESSION),
    read_rate=st.sampled_from([1, 2, 3, None]),
    moves_back=st.booleans(),
)
def test_pause_under_the_session_while_the_clock_jumps(
    protocol: str, assignor: str, members: int, partitions: int, skew: int, before: int,
    pause: int, read_rate: int | None, moves_back: bool,
) -> None:  # fmt: skip
    """A pause under a skewed clock, drawn: a stable group; ``before`` ticks later the control
    partition moves to a broker ``skew`` ms off; one member pauses just under its session and
    reads slowly after it resumes; maybe the partition moves back meanwhile."""
    sim = GroupSim({"t0": partitions}, protocol=protocol, assignor=assignor,
                   **SkewedSchedule.sim_options(SkewedSchedule()))  # fmt: skip
    sim.log.clock = 1_000_000
    ids = [f"m{i}" for i in range(members)]
    for m in ids:
        sim.join(m)
    sim.settle()
    sim.tick(before)
    sim.log.skew = skew
    victim = ids[before % members]
    sim.pause(victim, pause)
    sim.members[victim].read_rate = read_rate
    for i in range(SESSION // sim.tick_ms * 3):
        if moves_back and i == pause // sim.tick_ms:
            sim.log.skew = 0
        sim.tick()
        assert not sim.violations(), sim.describe()


def paused_member_under_skew(delta: int, allowance: int, pause_ms: int, read_rate: int,
                             protocol: str) -> list[str]:  # fmt: skip
    """A pause under a clock ahead: a stable group of three, the control partition moves to a broker
    ``delta`` ms ahead, and one member pauses just under its 10 s session, then reads the log
    ``read_rate`` records a tick. Returns the safety violations seen."""
    sim = GroupSim({"t0": 4}, protocol=protocol, session_timeout_ms=10_000,
                   heartbeat_interval_ms=1_000, max_clock_skew_ms=allowance)  # fmt: skip
    sim.log.clock = 1_000_000  # a broker's epoch time: a clock behind never stamps below 0
    for m in ("a", "b", "c"):
        sim.join(m)
    sim.settle()
    sim.log.skew = delta
    sim.pause("b", pause_ms)
    sim.members["b"].read_rate = read_rate
    for _ in range(300):
        sim.tick()
        errs = sim.violations()
        if errs:
            return errs
    return []


def test_a_pause_under_a_clock_ahead_breaks_without_the_allowance_and_holds_with_it() -> None:
    cases = [(p, r, proto) for p in range(8_500, 9_001, 100) for r in (1, 3)
             for proto in ("eager", "cooperative")]  # fmt: skip
    for delta in (1_000, 2_000):
        broken = [c for c in cases if paused_member_under_skew(delta, 0, *c)]
        assert broken, f"no schedule broke with {delta} ms of skew and no allowance"
        for allowance in (delta, delta + 500):
            held = [c for c in cases if paused_member_under_skew(delta, allowance, *c)]
            assert not held, (delta, allowance, held[:3])
    # a broker behind (stamps going backwards) is safe even without an allowance
    assert not [c for c in cases if paused_member_under_skew(-2_000, 0, *c)]


def test_member_measures_a_forward_jump_of_the_broker_clock() -> None:
    sim = GroupSim({"t0": 2}, session_timeout_ms=10_000, heartbeat_interval_ms=1_000,
                   max_clock_skew_ms=1_000)  # fmt: skip
    sim.join("a")
    sim.settle()
    sim.tick(20)
    assert sim.members["a"].member.skew_seen_ms <= sim.tick_ms  # one tick of read-back
    sim.log.skew = 3_000
    sim.tick(20)
    assert 3_000 - sim.tick_ms <= sim.members["a"].member.skew_seen_ms <= 3_000


def test_member_measures_a_backward_jump_of_the_broker_clock() -> None:
    sim = GroupSim({"t0": 2}, session_timeout_ms=10_000, heartbeat_interval_ms=1_000,
                   max_clock_skew_ms=1_000)  # fmt: skip
    sim.log.clock = 1_000_000
    sim.join("a")
    sim.settle()
    sim.tick(20)
    sim.log.skew = -3_000
    sim.tick(20)
    assert 3_000 - 2 * sim.tick_ms <= sim.members["a"].member.skew_seen_ms <= 3_000
    assert not sim.violations()


def test_allowance_must_be_below_the_session() -> None:
    import pytest

    with pytest.raises(ValueError):
        GroupSim({"t0": 1}, session_timeout_ms=1_000, max_clock_skew_ms=1_000).join("a")
