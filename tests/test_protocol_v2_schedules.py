"""Random schedules of a simulated group speaking protocol version 2 (docs/protocol-v2.md):
heartbeats on a liveness log only judges read, verdicts and the lease in the main log.

The schedules of ``test_protocol_hypothesis`` (both rebalance protocols, every assignor, slow
readers, pauses, crashes, leaves, forged and stale records, deferred revocations), against
readers of the compacted main log, newcomers that catch up from a snapshot, and static members,
plus what
version 2 adds: lost and late delivery reports, the two logs' brokers' clocks moving apart
(leadership moving to a broker whose clock is off, within the members' skew allowance), and
the leader killed together with its successors. The same invariants hold after every step:
no partition is owned by two running members, and members that replayed to the same offset
agree; and after a quiet period every subscribed partition is owned by exactly one live
subscriber, within a bound of generations.
"""

from __future__ import annotations

import os

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from tests.test_protocol_bounded_replay import BoundedSchedule
from tests.test_protocol_compaction import CompactedSchedule
from tests.test_protocol_hypothesis import GroupSchedule, schedule_settings
from tests.test_protocol_static import StaticRules

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
    """Static members, restarts and two processes with one instance id."""


VerdictSchedule.TestCase.settings = settings(schedule_settings(EXAMPLES), print_blob=True)
TestVerdictSchedule = VerdictSchedule.TestCase
for schedule in (VerdictCompactedSchedule, VerdictBoundedSchedule, VerdictStaticSchedule):
    schedule.TestCase.settings = settings(
        schedule_settings(max(EXAMPLES // 3, 25)), print_blob=True
    )
TestVerdictCompactedSchedule = VerdictCompactedSchedule.TestCase
TestVerdictBoundedSchedule = VerdictBoundedSchedule.TestCase
TestVerdictStaticSchedule = VerdictStaticSchedule.TestCase
