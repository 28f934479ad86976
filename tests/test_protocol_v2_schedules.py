"""Random schedules of a simulated group speaking protocol version 2 (docs/protocol-v2.md):
heartbeats on a liveness log only judges read, verdicts and the lease in the main log.

The schedules of ``test_protocol_hypothesis`` (both rebalance protocols, every assignor, slow
readers, pauses, crashes, leaves, forged and stale records, deferred revocations), against
readers of the compacted main log, newcomers that catch up from a snapshot, and static members,
plus what version 2 adds: lost and late delivery reports, the two logs' brokers' clocks moving
apart (leadership moving to a broker whose clock is off, within the members' skew allowance),
the leader killed together with its successors, and acknowledgements that wait (rule L9). The
same invariants hold after every step: no partition is owned by two running members, and
members that replayed to the same offset agree; and after a quiet period every subscribed
partition is owned by exactly one live subscriber, within a bound of generations.
"""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from groupkit.assignors import assignor_names
from groupkit.testing.sim import GroupSim
from tests.test_protocol_bounded_replay import BoundedSchedule
from tests.test_protocol_compaction import CompactedSchedule
from tests.test_protocol_hypothesis import GroupSchedule, schedule_settings
from tests.test_protocol_static import StaticCompactedSchedule, StaticRules

EXAMPLES = int(os.environ.get("GROUPKIT_PROTOCOL_V2_EXAMPLES", "300"))
SKEW = 150


class LivenessRules(GroupSchedule):
    """What version 2 adds to a schedule: its members and logs, and its faults."""

    def sim_options(self) -> dict[str, int]:
        return {**super().sim_options(), "version": 2, "max_clock_skew_ms": SKEW}

    @rule(loss=st.sampled_from([0.0, 0.0, 0.1, 0.5]), delay=st.sampled_from([0, 100, 500]))
    def reports(self, loss: float, delay: int) -> None:
        """Delivery reports get lost (a failed report of a record that may have landed), or
        come late."""
        self.sim.report_loss = loss
        self.sim.report_delay_ms = delay

    @rule(delay=st.sampled_from([0, 100, 250, 1_000]))
    def ack_delays(self, delay: int) -> None:
        """An acknowledgement that changes nothing else of its member's waits up to ``delay``
        (rule L9): in the members running now, and in those started later."""
        self.sim.ack_delay_ms = delay
        for sm in self.sim.members.values():
            sm.member.ack_delay_ms = delay

    @rule(main=st.integers(0, SKEW), live=st.integers(0, SKEW))
    def move_leadership(self, main: int, live: int) -> None:
        """Either log's partition moves to a broker whose clock is off, by no more than the
        allowance apart (its stamps may jump back; never below zero, as a broker's are not)."""
        self.sim.log.skew = main
        self.sim.liveness.skew = live

    @precondition(lambda self: bool(self._alive()))
    @rule()
    def kill_the_judges(self) -> None:
        """The leader and both of its successors die at once: a follower must judge."""
        view = self.sim.view()
        live = sorted(view.live_members().values(), key=lambda m: (m.joined_at, m.member_id))
        for m in live[:3]:
            sm = self.sim.members.get(m.member_id)
            if sm is not None and not sm.crashed:
                self.sim.crash(m.member_id)

    def teardown(self) -> None:
        # the faults stop for the quiet period: a failed report that may have landed keeps
        # its member lapsed until its next heartbeat starts a new run (rule L1.5), so at one
        # report in two a member rejoins about every other heartbeat
        if hasattr(self, "sim"):
            self.sim.report_loss = 0.0
        super().teardown()


class VerdictSchedule(LivenessRules, GroupSchedule):
    """The schedules of ``test_protocol_hypothesis`` on version 2."""


class VerdictCompactedSchedule(LivenessRules, CompactedSchedule):
    """Against readers of the compacted main log: they agree with the full replay."""


class VerdictBoundedSchedule(LivenessRules, BoundedSchedule):
    """Newcomers that catch up from a snapshot agree with the full replay."""


class VerdictStaticSchedule(StaticRules, LivenessRules, GroupSchedule):
    """Static members, restarts and two processes with one instance id, with a process lease
    shorter than the session (rule L7): a restarted process takes its seat's partitions once
    the old process's lease has ended."""

    def sim_options(self) -> dict[str, int]:
        # Shorter than the session, and long enough for the slowest delivery reports the
        # schedules make (500 ms, longer than a heartbeat interval): while a heartbeat that
        # names the basis before the last is on its way, the member runs from that basis
        # (L6.2), so the lease must cover the allowance, two intervals and the report's delay.
        return {**super().sim_options(), "process_lease_ms": 1_500}


VerdictSchedule.TestCase.settings = settings(schedule_settings(EXAMPLES), print_blob=True)


class VerdictStaticCompactedSchedule(StaticCompactedSchedule, VerdictStaticSchedule):
    """Static members with a process lease, against readers of the compacted main log (without
    two processes of one instance id at once, as version 1's: see StaticCompactedSchedule)."""


TestVerdictSchedule = VerdictSchedule.TestCase
for schedule in (VerdictCompactedSchedule, VerdictBoundedSchedule, VerdictStaticSchedule,
                 VerdictStaticCompactedSchedule):  # fmt: skip
    schedule.TestCase.settings = settings(
        schedule_settings(max(EXAMPLES // 3, 25)), print_blob=True
    )
TestVerdictCompactedSchedule = VerdictCompactedSchedule.TestCase
TestVerdictBoundedSchedule = VerdictBoundedSchedule.TestCase
TestVerdictStaticSchedule = VerdictStaticSchedule.TestCase
TestVerdictStaticCompactedSchedule = VerdictStaticCompactedSchedule.TestCase


# ------------------------------------------------------------------ the process lease (L7)

LEASE, SESSION = 1_500, 30_000


@settings(max_examples=max(EXAMPLES // 10, 20), deadline=None, derandomize=True)
@given(
    protocol=st.sampled_from(["eager", "cooperative"]),
    assignor=st.sampled_from(assignor_names()),
    members=st.integers(2, 4),
    t0=st.integers(1, 9),
    who=st.integers(0, 3),
    away_ms=st.integers(0, 3_000),
)
def test_a_crashed_static_member_is_back_a_lease_after_its_crash_not_a_session(
    protocol: str, assignor: str, members: int, t0: int, who: int, away_ms: int
) -> None:
    """A static member killed and started again takes its seat's partitions back once its old
    process's lease has ended (the judge's ``process_ended`` verdict ends the hold on them),
    not its session; nobody else sees anything, and no partition has two running owners."""
    sim = GroupSim({"t0": t0}, protocol=protocol, assignor=assignor, version=2,
                   session_timeout_ms=SESSION, heartbeat_interval_ms=1_000,
                   max_clock_skew_ms=SKEW, process_lease_ms=LEASE, keep_actions=True)  # fmt: skip
    for i in range(members):
        sim.join(f"s{i}", static=True)
    sim.settle()
    for _ in range(3_000 // sim.tick_ms):  # a group at work: its judges are reading
        sim.tick()
    victim = f"s{who % members}"
    before = {i: sm.member.owned for i, sm in sim.members.items()}
    gen = sim.view().generation
    for sm in sim.members.values():
        sm.actions.clear()
    crashed_at = sim.clock
    sim.crash(victim)
    for _ in range(away_ms // sim.tick_ms):
        sim.tick()
    new = sim.join(victim, static=True)
    # the lease and the allowance from the last heartbeat, then the judge's verdict, the
    # new process's read of it, and its take: within a few heartbeats more
    bound = crashed_at + max(away_ms, LEASE + SKEW) + 4_000
    while new.member.owned != before[victim]:
        assert sim.clock < bound, sim.describe()
        sim.tick()
        assert not sim.violations(), sim.describe()
    assert sim.view().generation == gen, sim.describe()
    for i, sm in sim.members.items():
        if i != victim:
            assert sm.member.owned == before[i]
            assert not [a for a in sm.actions if a.assign or a.revoke or a.lost], i


def test_a_member_cut_off_from_the_main_log_lets_its_run_lapse_and_its_partitions_move() -> None:
    """A member whose heartbeats still land but that reads nothing from the main log, not even
    the lease the group writes there every lease interval, stops heartbeating (rule L4.5): its
    run lapses, a judge ends it, and the others take its partitions, never while it runs them.
    """
    session = 2_000
    sim = GroupSim({"t0": 6}, version=2, session_timeout_ms=session, heartbeat_interval_ms=300,
                   max_clock_skew_ms=SKEW)  # fmt: skip
    for mid in ("a", "b", "c"):
        sim.join(mid)
    sim.settle()
    cut = sim.members["c"]
    assert cut.member.owned
    cut.read_rate = 0
    started = sim.clock
    lease = session // 3
    bound = started + 2 * (session + lease) + session + SKEW + 3 * lease + 2_000
    while cut.member.owned or sim.expected_partitions() != (
        sim.members["a"].member.owned | sim.members["b"].member.owned
    ):
        assert sim.clock < bound, sim.describe()
        sim.tick()
        assert not sim.violations(), sim.describe()
    assert sim.clock - started >= 2 * (session + lease) - 2 * lease, "it lapsed too soon"


def test_a_replaced_process_that_leaves_does_not_end_its_successors_seat() -> None:
    """A static process leaves before it has read the join that replaced it: its leaving
    record is ``fenced_instance``, and the tombstone that follows it, which names no process,
    must not end the seat its successor now holds (rule L7.5): no rebalance, and the new
    process keeps its seat's partitions. Its successor writes its record again, so that a
    reader of the compacted log, which may keep that tombstone as the key's newest, has the
    seat too."""
    sim = GroupSim({"t0": 4}, version=2, session_timeout_ms=SESSION, heartbeat_interval_ms=300,
                   max_clock_skew_ms=SKEW, process_lease_ms=LEASE)  # fmt: skip
    sim.join("a", static=True)
    sim.join("b")
    sim.settle()
    old = sim.members["a"]
    had = old.member.owned
    old.read_rate = 0  # it never reads its replacement's join
    new = sim.join("a", static=True)
    sim.tick(2)
    gen = sim.view().generation
    old.member.leave()
    sim.tick()
    tombstones = sim.view().rejections["fenced_instance"]
    for _ in range(3 * LEASE // sim.tick_ms):
        sim.tick()
        assert not sim.violations(), sim.describe()
        seat = sim.view().members.get("a")
        assert seat is not None and seat.proc == new.member.incarnation and not seat.ended
        assert sim.view().generation == gen
    assert tombstones >= 2  # its leaving record and its tombstone
    assert new.member.owned == had
    compacted = sim.new_state()
    for r in sim.log.compacted():
        compacted.replay(r.offset, r.key, r.value, r.timestamp)
    assert compacted.members["a"].proc == new.member.incarnation
    assert compacted.fingerprint() == sim.view().fingerprint()


# ------------------------------------------------------------------ failover (L5.3)


@settings(max_examples=max(EXAMPLES // 10, 20), deadline=None, derandomize=True)
@given(
    protocol=st.sampled_from(["eager", "cooperative"]),
    assignor=st.sampled_from(assignor_names()),
    members=st.integers(2, 5),
    t0=st.integers(1, 9),
    phase_ms=st.integers(0, 400),
    report_delay=st.sampled_from([0, 20, 50]),
)
def test_a_killed_leader_is_ended_by_a_successor_a_session_after_its_last_heartbeat(
    protocol: str, assignor: str, members: int, t0: int, phase_ms: int, report_delay: int
) -> None:
    """A successor writes its verdict on the dead leader as soon as it finds the leader's run
    ended (rule L3.1), not a lease interval later as on anyone else's: the leader's membership
    ends a session and the skew allowance after its last heartbeat, plus the heartbeats that
    move liveness time past it and the verdict's trip; never before; the group settles under a
    new leader with no partition owned by two running members."""
    session, hb = 3_000, 200  # a lease interval is a third of the session: 1,000 ms
    sim = GroupSim({"t0": t0}, protocol=protocol, assignor=assignor, version=2,
                   session_timeout_ms=session, heartbeat_interval_ms=hb, tick_ms=20,
                   max_clock_skew_ms=SKEW, report_delay_ms=report_delay)  # fmt: skip
    for i in range(members):
        sim.join(f"m{i}")
    sim.settle()
    for _ in range((2_000 + phase_ms) // sim.tick_ms):  # a group at work: its judges read
        sim.tick()
    view = sim.view()
    leader = min(view.live_members().values(), key=lambda m: (m.joined_at, m.member_id))
    crashed_at = sim.clock
    sim.crash(leader.member_id)
    # the last heartbeat was at most an interval before the crash; then liveness time must
    # pass its end (the next heartbeat of another member) and the verdict land (a few ticks)
    earliest = crashed_at - hb + session + SKEW
    bound = crashed_at + session + SKEW + 2 * hb + 5 * sim.tick_ms
    while not sim.view().members[leader.member_id].ended:
        assert sim.clock < bound, sim.describe()
        sim.tick()
        assert not sim.violations(), sim.describe()
    assert sim.clock >= earliest, sim.describe()
    sim.settle()
    assert not sim.violations(), sim.describe()
    assert sim.is_stable(), sim.describe()
