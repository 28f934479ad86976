"""Re-plans for the load at random points of random schedules (protocol/placement.py).

The schedules of test_protocol_hypothesis.py, with one more step: the leader is asked to move
a few random partitions to random members, as a re-plan for the load would
(``GroupSim.replan``, ``Node.replan``). The same invariants hold after every step: no
partition owned by two running members, members that replayed alike agree, a partition that
keeps its owner is never revoked, and the quiet group settles with every partition owned once.
A re-plan is written only while the group is stable, and only under the cooperative protocol.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from groupkit.errors import RecordRejected
from groupkit.protocol.codec import decode, encode
from groupkit.protocol.placement import Forecast, Move, Replan
from groupkit.protocol.records import LoadReplan, assignment_record, covered_member
from groupkit.protocol.vocab import DecisionReason, ReplanReason
from groupkit.testing.sim import GroupSim
from groupkit.types import TopicPartition
from tests.test_protocol_hypothesis import GroupSchedule, schedule_settings

EXAMPLES = int(os.environ.get("GROUPKIT_REPLAN_EXAMPLES", "200"))


def random_replan(sim: GroupSim, data: st.DataObject) -> Replan | None:
    """Up to three moves of partitions the current generation assigns, each to another member
    of it subscribed to the partition's topic."""
    a = sim.view().assignment
    if a is None:
        return None
    owned = {m: set(c.assigned) for m, c in a.members.items()}
    moves: list[Move] = []
    for _ in range(data.draw(st.integers(1, 3))):
        pairs = sorted((tp, m) for m, ps in owned.items() for tp in ps)
        if not pairs:
            break
        tp, src = data.draw(st.sampled_from(pairs))
        takers = sorted(m for m, c in a.members.items() if m != src and tp.topic in c.topics)
        if not takers:
            continue
        dst = data.draw(st.sampled_from(takers))
        owned[src].discard(tp)
        owned[dst].add(TopicPartition(*tp))
        moves.append(Move(TopicPartition(*tp), src, dst))
    if not moves:
        return None
    f = Forecast(2.0, 60.0)
    return Replan(ReplanReason.OVERLOAD, tuple(moves), 0.5, f, Forecast(1.0, 60.0))


class ReplanSchedule(GroupSchedule):
    #: re-plans written, over all examples (the suite checks some were)
    written = 0

    @rule(data=st.data(), within=st.integers(0, 80))
    def replan(self, data: st.DataObject, within: int) -> None:
        """Ask for a re-plan now and at every tick of the next ``within``, until the leader
        writes one (it does only once the group is stable)."""
        r, gen = random_replan(self.sim, data), self.sim.view().generation
        for _ in range(within + 1):
            if r is not None and self.sim.replan(r):
                assert self.sim.planner.protocol == "cooperative"
                ReplanSchedule.written += 1
                break
            self.sim.tick()
            self.check()
            if r is None or self.sim.view().generation != gen:  # drawn for another generation
                r, gen = random_replan(self.sim, data), self.sim.view().generation


ReplanSchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestReplanSchedule = ReplanSchedule.TestCase


def test_the_schedules_wrote_replans() -> None:
    """(Runs after the schedules, in file order.) Re-plans were written, not only refused."""
    if ReplanSchedule.written == 0:
        ReplanSchedule.TestCase().runTest()
    assert ReplanSchedule.written > 0


def test_a_replan_moves_its_partitions_and_nothing_else() -> None:
    sim = GroupSim({"t": 6}, protocol="cooperative", assignor="cooperative-sticky",
                   release_delay_ms=100)  # fmt: skip
    for m in ("a", "b", "c"):
        sim.join(m, ["t"])
    sim.settle()
    sim.tick(2)  # the leader reads the acknowledgements the observer has read
    before = sim.view().assignment
    assert before is not None
    src = "a"
    tp = min(before.members[src].assigned)
    r = Replan(ReplanReason.DRAIN, (Move(tp, src, "b"),), 0.4, Forecast(0.5, 40.0),
               Forecast(0.5, 20.0))  # fmt: skip
    assert sim.replan(r)
    assert not sim.replan(r)  # in flight: refused
    sim.settle()
    after = sim.view().assignment
    assert after is not None and after.replan is not None
    assert after.replan.reason == "drain" and after.replan.moved == 1
    assert after.replan.generation == before.generation + 1
    for m in ("a", "b", "c"):
        want = set(before.members[m].assigned)
        if m == "a":
            want.discard(tp)
        if m == "b":
            want.add(tp)
        assert set(after.members[m].assigned) == want
    sim.tick(3)  # the leader finds the group stable: the re-plan's summary
    done = sim.rebalances[-1]
    assert done.reason == DecisionReason.LOAD and done.moved == 1 and done.revoked == 1
    # a later generation carries the newest re-plan on
    sim.join("d", ["t"])
    sim.settle()
    last = sim.view().assignment
    assert last is not None and last.generation > after.generation
    assert last.replan == after.replan


def test_an_eager_group_never_replans() -> None:
    sim = GroupSim({"t": 4}, protocol="eager", assignor="range")
    for m in ("a", "b"):
        sim.join(m, ["t"])
    sim.settle()
    a = sim.view().assignment
    assert a is not None
    tp = min(a.members["a"].assigned)
    r = Replan(ReplanReason.OVERLOAD, (Move(tp, "a", "b"),), 0.5, Forecast(2, 1), Forecast(1, 1))
    assert not sim.replan(r)


def test_the_replan_field_round_trips_and_a_bad_one_is_rejected() -> None:
    info = LoadReplan("overload", 0.5, 2, 7, 1_000)
    key, rec = assignment_record(
        "g", generation=7, leader_id="a", leader_incarnation="i", leader_joined_at=1,
        protocol="cooperative", phase="complete", assignor="balanced",
        partition_counts={"t": 1}, members={"a": covered_member("i", ["t"], [("t", 0)])},
        replan=info,
    )  # fmt: skip
    k, v = encode(key, rec)
    _, back = decode(k, v)
    assert back == rec and back.replan == info
    # a gain outside [0, 1] is a bad value (the record, like any, is then rejected)
    assert b'"gain":0.5' in v
    with pytest.raises(RecordRejected):
        decode(k, v.replace(b'"gain":0.5', b'"gain":1.5'))
