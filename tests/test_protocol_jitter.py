"""The random schedules of test_protocol_hypothesis.py, with produce requests that take different
times (``GroupSim.produce_jitter_ms``).

The other schedules append a record the moment it is written, so two records one member writes
in one step (a leave's last record and its tombstone, a release and a heartbeat) always land
together, and nobody's record lands between a plan and its generation. Here each record takes a
produce delay of one to four ticks: other members' records land between one writer's, whose
own records keep their order (one idempotent producer, one partition), and readers see them a
tick later. Every invariant of the base schedule is checked after every step; the
``leaving`` flag (tests/test_protocol_leave.py) came from this interleaving in the bench.
"""

from __future__ import annotations

import os

from tests.test_protocol_hypothesis import GroupSchedule, schedule_settings

EXAMPLES = max(50, int(os.environ.get("GROUPKIT_PROTOCOL_EXAMPLES", "1000")) // 4)


class JitterSchedule(GroupSchedule):
    def sim_options(self) -> dict[str, int]:
        return {
            **super().sim_options(),
            "produce_delay_ms": 100,  # one tick
            "produce_jitter_ms": 300,
            "fetch_delay_ms": 100,
        }


JitterSchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestJitterSchedule = JitterSchedule.TestCase
