"""Random schedules of a simulated group speaking protocol version 2 (docs/protocol-v2.md):
heartbeats on a liveness log only judges read, verdicts and the lease in the main log.

The schedules of ``test_protocol_hypothesis`` (both rebalance protocols, every assignor, slow
readers, pauses, crashes, leaves, forged and stale records, deferred revocations), plus what
version 2 adds: lost and late delivery reports, the two logs' brokers' clocks moving apart
(leadership moving to a broker whose clock is off, within the members' skew allowance), and
the leader killed together with its successors. The same invariants hold after every step:
no partition is owned by two running members, and members that replayed to the same offset
agree; and after a quiet period every subscribed partition is owned by exactly one live
subscriber, within a bound of generations.
"""

from __future__ import annotations

import os

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from groupkit.testing.sim import GroupSim
from tests.test_protocol_hypothesis import GroupSchedule, schedule_settings, schedule_start

EXAMPLES = int(os.environ.get("GROUPKIT_PROTOCOL_V2_EXAMPLES", "300"))
SKEW = 150


class VerdictSchedule(GroupSchedule):
    @schedule_start([None, None, 0, 100, 700])
    def start(self, protocol: str, assignor: str, t0: int, t1: int, release: int | None) -> None:
        self.sim = GroupSim(
            {"t0": t0, "t1": t1}, protocol=protocol, assignor=assignor,
            release_delay_ms=release, version=2, max_clock_skew_ms=SKEW,
            **self.sim_options(),
        )  # fmt: skip
        self.sim.lags = {}

    @rule(loss=st.sampled_from([0.0, 0.0, 0.1, 0.5]), delay=st.sampled_from([0, 100, 500]))
    def reports(self, loss: float, delay: int) -> None:
        """Delivery reports get lost (a failed report of a record that may have landed), or
        come late."""
        self.sim.report_loss = loss
        self.sim.report_delay_ms = delay

    @rule(main=st.integers(-SKEW // 2, SKEW // 2), live=st.integers(-SKEW // 2, SKEW // 2))
    def move_leadership(self, main: int, live: int) -> None:
        """Either log's partition moves to a broker whose clock is off, by no more than the
        allowance apart (its stamps may jump back)."""
        self.sim.log.skew = main
        self.sim.liveness.skew = live

    @precondition(lambda self: bool(self._alive()))
    @rule()
    def kill_the_judges(self) -> None:
        """The leader and both of its successors die at once: a follower must judge."""
        st_ = self.sim.view()
        live = sorted(st_.live_members().values(), key=lambda m: (m.joined_at, m.member_id))
        for m in live[:3]:
            sm = self.sim.members.get(m.member_id)
            if sm is not None and not sm.crashed:
                self.sim.crash(m.member_id)

    def teardown(self) -> None:
        # the faults stop for the quiet period: a failed report that may have landed keeps
        # its member lapsed until its next heartbeat starts a new run (rule L1.5), so at one
        # report in two a member rejoins about every other heartbeat
        self.sim.report_loss = 0.0
        super().teardown()


VerdictSchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestVerdictSchedule = VerdictSchedule.TestCase
