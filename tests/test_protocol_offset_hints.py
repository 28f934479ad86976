"""Offset hints (issue 14): a member that takes a partition starts at the offset its previous
owner committed and named in the record that released it, with no look-up.

Random schedules of :mod:`tests.test_protocol_hypothesis` (both protocols, every assignor,
crashes, pauses, slow readers, forged and stale records), with revocations deferred as the
runtime defers them, and the simulator's committed offsets (``GroupSim``: each owner processes
a record per tick and commits now and then; a release commits first). After every step:

- no member starts a partition beyond every record processed so far (no loss), at a hint or not;
- a hint is never ahead of the partition's committed offset when it is taken;
- with no crash, pause or forged record in the schedule, a hint *is* the committed offset.

About a third of the schedules start some partition at a hint (most of the rest move nothing
between live owners).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize

from groupkit.assignors import assignor_names
from groupkit.protocol.sim import GroupSim
from tests.test_protocol_hypothesis import EXAMPLES, GroupSchedule, schedule_settings


class HintSchedule(GroupSchedule):
    #: a crash, pause or forged record happened: hints may lag the committed offset
    disturbed: bool

    @initialize(
        protocol=st.sampled_from(["eager", "cooperative"]),
        assignor=st.sampled_from(assignor_names()),
        t0=st.integers(1, 8),
        t1=st.integers(0, 4),
        release=st.sampled_from([0, 100, 700]),
    )
    def start(self, protocol: str, assignor: str, t0: int, t1: int, release: int | None) -> None:
        self.sim = GroupSim(
            {"t0": t0, "t1": t1}, protocol=protocol, assignor=assignor,
            release_delay_ms=release, **self.sim_options(),
        )  # fmt: skip
        self.sim.lags = {}
        self.disturbed = False
        for name in ("crash", "pause", "inject"):
            setattr(self.sim, name, self._disturbing(getattr(self.sim, name)))
        # A group already running, so that a join or a leave moves partitions (and their
        # offsets) between live owners from the first step on.
        for mid in ("m0", "m1"):
            self.sim.join(mid, ["t0", "t1"])
        for _ in range(10):
            self.sim.tick()
            self.check()

    def _disturbing(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            self.disturbed = True
            return fn(*args)

        return run

    def check(self) -> None:
        super().check()
        if not self.disturbed:
            lagging = [h for h in self.sim.hint_starts if h[2] != h[3]]
            assert not lagging, lagging


HintSchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestHintSchedule = HintSchedule.TestCase
