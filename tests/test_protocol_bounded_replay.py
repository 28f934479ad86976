"""Bounded replay: a newcomer that catches up from the newest snapshot agrees with one that
replayed the whole log, at its catch-up offset and at every later offset.

The leader writes a snapshot of the group every half session (``Node.snapshot_due``); a newcomer
reads only the last ``CATCH_UP_WINDOW_SESSIONS`` sessions of the log, restores the snapshot with
the largest ``as_of`` found there and replays the records after it (``snapshot.CatchUp``), or
falls back to the whole log when there is none. The random schedules of
``test_protocol_hypothesis`` (both protocols, every assignor, slow readers, pauses, crashes,
leader kills, leaves, injected garbage and stale copies of old records) run here with snapshots
on and newcomers joining bounded; after every tick each bounded member's replay must equal the
full replay at its own offset on leader, generation, assignment, live members, held partitions,
what each live member may hold and who is lagging (``observed``), and the safety invariants of
every schedule hold. Then, in a quiet group, the records a newcomer replays do not grow with the
age of the log.
"""

from __future__ import annotations

import os
from collections import Counter

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from groupkit.protocol.state import GroupState
from groupkit.testing.sim import GroupSim
from tests.test_protocol_hypothesis import IDS, GroupSchedule, schedule_settings
from tests.test_protocol_snapshot import observed

EXAMPLES = int(os.environ.get("GROUPKIT_BOUNDED_EXAMPLES", "200"))
TALLY: Counter[str] = Counter()


class FullObserved:
    """The whole log's replay, with what it observed at every offset (to compare members that
    are behind)."""

    def __init__(self, sim: GroupSim) -> None:
        self.sim = sim
        self.state: GroupState = sim.new_state()
        self.at: dict[int, tuple[object, ...]] = {}

    def upto(self, offset: int) -> tuple[object, ...]:
        for r in self.sim.log.records[self.state.offset + 1 : offset + 1]:
            self.state.replay(r.offset, r.key, r.value, r.timestamp)
            self.at[r.offset] = observed(self.state)
        return self.at[offset]


class BoundedSchedule(GroupSchedule):
    """The random schedules, with snapshots, and newcomers that catch up bounded."""

    def sim_options(self) -> dict[str, int]:
        opts = super().sim_options()
        return {**opts, "snapshot_every_ms": opts["session_timeout_ms"] // 2}

    @rule(mid=st.sampled_from(IDS), topics=st.sampled_from([["t0"], ["t1"], ["t0", "t1"]]),
          rate=st.sampled_from([None, None, 4]))  # fmt: skip
    def join_bounded(self, mid: str, topics: list[str], rate: int | None) -> None:
        sm = self.sim.members.get(mid)
        if sm is None or sm.crashed or sm.member.state == "left":
            self.sim.members.pop(mid, None)
            sm = self.sim.join(mid, topics, read_rate=rate, bounded=True)
            TALLY[f"catch_up {sm.catch_up}"] += 1

    @invariant()
    def check(self) -> None:
        super().check()
        sim = getattr(self, "sim", None)
        if sim is None:
            return
        full = getattr(self, "_full", None)
        if full is None or full.sim is not sim:
            full = self._full = FullObserved(sim)
        for sm in sim.running():
            if sm.catch_up != "state" or sm.state.offset < 0:
                continue
            TALLY["bounded checks"] += 1
            want = full.upto(sm.state.offset)
            assert observed(sm.state) == want, (sm.member_id, observed(sm.state), want)


BoundedSchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestBoundedSchedule = BoundedSchedule.TestCase


def test_zz_the_schedules_caught_up_from_snapshots() -> None:
    """The property above is only as good as the catch-ups it saw restore from a snapshot."""
    if not TALLY:
        return  # run alone (-k): nothing to say
    assert TALLY["catch_up state"] > 0 and TALLY["bounded checks"] > 0, TALLY


def quiet_group(members: int, session: int, heartbeat: int) -> GroupSim:
    sim = GroupSim({"t0": 2 * members}, session_timeout_ms=session,
                   heartbeat_interval_ms=heartbeat, snapshot_every_ms=session // 2)  # fmt: skip
    for i in range(members):
        sim.join(f"m{i:02}")
    sim.settle()
    return sim


def test_records_replayed_at_join_do_not_grow_with_log_age() -> None:
    """The bound: replayed <= members x 1.5 x session / heartbeat + a small constant,
    at a log age of 20 s and of 5 min alike (a full replay grows with the age). What a
    newcomer replays depends on where between two snapshots it arrives, so each age takes the
    most of five newcomers spread over one snapshot interval."""
    members, session, heartbeat = 10, 2_000, 200
    bound = members * 1.5 * session / heartbeat + 10
    sim = quiet_group(members, session, heartbeat)
    most = {}
    for age_s in (20, 300):
        sim.tick(age_s * 1_000 // sim.tick_ms - sim.clock // sim.tick_ms)
        counts = []
        for i in range(5):
            sm = sim.join(f"new{age_s}-{i}", bounded=True)
            assert sm.catch_up == "state"
            counts.append(sm.replayed)
            sim.settle()
            assert sm.member.owned  # joined and took its share
            sim.leave(sm.member_id)
            sim.tick(session // 2 // 5 // sim.tick_ms)
            sim.settle()
        most[age_s] = max(counts)
    assert all(c <= bound for c in most.values()), (most, bound)
    assert most[300] <= 1.2 * most[20] + 10, most
    assert len(sim.log.records) > 10 * most[300]  # what a full replay would have read


def test_no_snapshot_in_the_window_falls_back_to_the_whole_log() -> None:
    sim = quiet_group(3, 2_000, 200)
    sim.snapshot_every_ms = None  # leaders from now on write none
    for sm in sim.members.values():
        sm.node.snapshot_every_ms = None
    sim.tick(100)  # 10 s: the last snapshot is out of the window
    sm = sim.join("late", bounded=True)
    assert sm.catch_up == "full"
    sim.settle()
    assert sim.members["late"].member.owned


def test_a_young_log_is_replayed_whole() -> None:
    sim = GroupSim({"t0": 2}, snapshot_every_ms=5_000)
    sim.join("a")
    sim.tick(3)
    assert sim.join("b", bounded=True).catch_up == "full"
    sim.settle()
