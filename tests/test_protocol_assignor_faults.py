"""A user's assignor cannot take the group down, in the simulator.

Examples first: each way an assignor can misbehave (raise, duplicate a partition, omit a
partition or a member, name an unknown member or partition, give a partition to a member that
does not subscribe to its topic, answer garbage, take longer than its budget) is contained by
``run_assignor``: the plan is the fallback's, and says why. Then whole groups: an assignor that
raises, duplicates or omits partitions neither stops the group nor makes it rewrite a rejected
record in a loop, and a plan that finishes after the membership it was made for changed is
discarded.

Then random schedules (``FaultySchedule``, the schedules of test_protocol_hypothesis.py, both
protocols): the group's assignor misbehaves in a random way at every call (drawn per schedule),
sometimes slowly (past its budget, or within it while the group changes). The invariants of
those schedules hold after every step (no partition owned twice, members agree), and the quiet
period ends with every subscribed partition owned once by a live subscriber; no record is
rejected as inconsistent, and a generation planned on a fallback says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize

from groupkit.assignors import Assignor, get_assignor, register_assignor, unregister_assignor
from groupkit.protocol.assign import AssignRequest, basis_of, run_assignor
from groupkit.protocol.records import KIND_ASSIGNMENT, AssignmentRecord, decode
from groupkit.protocol.vocab import AssignorFailure
from groupkit.testing.sim import GroupSim
from groupkit.types import MemberSubscription, TopicPartition
from tests.test_protocol_hypothesis import EXAMPLES, GroupSchedule, schedule_settings

TP = TopicPartition

#: what a faulty assignor does at a call, and the failure it must be contained as
MODES: dict[str, str | None] = {
    "ok": None,
    "raise": AssignorFailure.RAISED,
    "duplicate": AssignorFailure.INVALID,  # a partition to two members
    "omit_partition": AssignorFailure.INVALID,  # leaves partitions out
    "omit_member": AssignorFailure.INVALID,
    "unknown_member": AssignorFailure.INVALID,
    "unknown_partition": AssignorFailure.INVALID,
    "unsubscribed": AssignorFailure.INVALID,
    "garbage": AssignorFailure.INVALID,
    "slow": AssignorFailure.TIMEOUT,  # past its budget
    "slowish": None,  # within its budget, but the group may change meanwhile
}
#: how long a "slow" and a "slowish" plan take in the simulator, against a 1 s budget
BUDGET_MS = 1_000
SLOW_MS = {"slow": 3_000, "slowish": 600}


class FaultyAssignor(Assignor):
    """Range, broken in the way ``modes`` says, one mode per call, in turn."""

    name = "faulty"

    def __init__(self, modes: tuple[str, ...] = ("ok",)) -> None:
        self.modes = modes
        self.calls = 0
        self.last = "ok"

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        members: Mapping[str, MemberSubscription],
        lags: Mapping[TopicPartition, int] | None = None,
    ) -> Any:
        mode = self.last = self.modes[self.calls % len(self.modes)]
        self.calls += 1
        good = get_assignor("range").assign(partitions_per_topic, members, lags)
        return break_plan(mode, good, partitions_per_topic, members)

    def _assign(self, *args: Any) -> Any:  # never called: assign is overridden
        raise NotImplementedError

    def plan_ms(self, request: AssignRequest) -> int:
        """How long the last call took (the simulator asks right after it)."""
        return SLOW_MS.get(self.last, 0)


def break_plan(
    mode: str,
    good: dict[str, list[TopicPartition]],
    counts: Mapping[str, int],
    members: Mapping[str, MemberSubscription],
) -> Any:
    """``good`` broken as ``mode`` says (left as it is if the group is too small for it)."""
    plan: dict[Any, Any] = {m: list(ps) for m, ps in good.items()}
    everything = [tp for ps in plan.values() for tp in ps]
    if mode == "raise":
        raise RuntimeError("the user's assignor has a bug")
    if mode == "duplicate" and everything:
        for m in plan:
            plan[m] = sorted(set(plan[m]) | {everything[0]})
    elif mode == "omit_partition" and everything:
        for m in plan:
            plan[m] = [tp for tp in plan[m] if tp != everything[-1]]
    elif mode == "omit_member" and plan:
        plan.pop(sorted(plan)[-1])
    elif mode == "unknown_member":
        plan["ghost"] = []
    elif mode == "unknown_partition" and plan:
        m = sorted(plan)[0]
        plan[m] = [*plan[m], TP("nowhere", 0), TP("t0", counts.get("t0", 0) + 5)]
    elif mode == "unsubscribed":
        for m, sub in sorted(members.items()):
            other = [t for t in counts if t not in sub.topics and counts[t] > 0]
            if other:
                owner = next(o for o, ps in plan.items() if TP(other[0], 0) in ps)
                plan[owner].remove(TP(other[0], 0))
                plan[m] = sorted([*plan[m], TP(other[0], 0)])
                break
    elif mode == "garbage" and plan:
        plan[sorted(plan)[0]] = [("t0", "zero"), None]
    return plan


def request_for(counts: dict[str, int], members: dict[str, MemberSubscription]) -> AssignRequest:
    basis = basis_of("faulty", {m: ("i", s.topics) for m, s in members.items()}, counts)
    return AssignRequest("faulty", counts, members, None, basis)


# ------------------------------------------------------------------ contained, one call


@pytest.mark.parametrize("mode", [m for m in MODES if m not in ("ok", "slow", "slowish")])
def test_each_misbehaviour_is_contained_as_a_valid_fallback(mode: str) -> None:
    counts = {"t0": 4, "t1": 2}
    members = {
        "a": MemberSubscription(["t0"], owned=[TP("t0", 0), TP("t0", 1)], generation=3),
        "b": MemberSubscription(["t0", "t1"], owned=[TP("t0", 2)], generation=3),
        "c": MemberSubscription(["t0", "t1"]),
    }
    out = run_assignor(FaultyAssignor((mode,)), request_for(counts, members))
    assert out.fallback is not None and out.fallback.reason == MODES[mode], out.fallback
    assert out.fallback.assignor == "cooperative-sticky" and out.fallback.detail
    owners = {tp: m for m, ps in out.assignment.items() for tp in ps}
    assert sorted(owners) == [TP("t0", p) for p in range(4)] + [TP("t1", p) for p in range(2)]
    assert sum(len(ps) for ps in out.assignment.values()) == len(owners)  # each once
    assert set(out.assignment) == set(members)
    # the current owners keep what they own (the counts need no evening out here)
    assert {TP("t0", 0), TP("t0", 1)} <= out.assignment["a"]
    assert TP("t0", 2) in out.assignment["b"]


def test_a_correct_answer_is_used_as_it_is() -> None:
    counts = {"t0": 5}
    members = {m: MemberSubscription(["t0"]) for m in ("a", "b")}
    out = run_assignor(FaultyAssignor(("ok",)), request_for(counts, members))
    assert out.fallback is None
    want = get_assignor("range").assign(counts, members)
    assert {m: sorted(ps) for m, ps in out.assignment.items()} == want


def test_the_detail_is_one_bounded_line() -> None:
    class Loud(FaultyAssignor):
        def assign(self, *args: Any, **kwargs: Any) -> Any:
            raise ValueError("line one\nline two " + "x" * 5_000)

    out = run_assignor(Loud(), request_for({"t0": 1}, {"a": MemberSubscription(["t0"])}))
    assert out.fallback is not None and out.fallback.reason == AssignorFailure.RAISED
    assert "\n" not in out.fallback.detail and len(out.fallback.detail) <= 300
    assert out.fallback.detail.startswith("ValueError: line one line two")


# ------------------------------------------------------------------ whole groups


@pytest.fixture
def faulty() -> Any:
    made: list[FaultyAssignor] = []

    def register(*modes: str) -> FaultyAssignor:
        a = FaultyAssignor(modes)
        made.append(a)
        register_assignor("faulty", lambda: a)
        return a

    yield register
    unregister_assignor("faulty")


def assignment_records(sim: GroupSim) -> list[AssignmentRecord]:
    out = []
    for r in sim.log.records:
        if r.key is not None and len(r.key) > 1 and r.key[1] == KIND_ASSIGNMENT:
            _, v = decode(r.key, r.value)
            assert isinstance(v, AssignmentRecord)
            out.append(v)
    return out


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("raise", AssignorFailure.RAISED),
        ("duplicate", AssignorFailure.INVALID),
        ("omit_partition", AssignorFailure.INVALID),
        ("slow", AssignorFailure.TIMEOUT),
    ],
)
def test_a_raising_duplicating_omitting_or_slow_assignor_leaves_the_group_assigned(
    faulty: Any, protocol: str, mode: str, reason: str
) -> None:
    """The group settles, fully assigned, on the fallback, says why, and writes a bounded number
    of records that replay accepts. Uncontained, the duplicating assignor makes the leader write
    a rejected record almost every tick (298 in 300), and the one that leaves partitions out
    leaves three of four partitions unconsumed."""
    a = faulty(mode)
    sim = GroupSim({"t0": 4}, protocol=protocol, assignor="faulty", plan_ms=a.plan_ms,
                   assignor_timeout_ms=BUDGET_MS)  # fmt: skip
    for m in ("m0", "m1", "m2"):
        sim.join(m)
    sim.settle()
    sim.tick(300)
    assert not sim.violations()
    assert sim.is_stable()
    assert not sim.rejected, sim.rejected[:3]
    owners = sim.owners()
    assert sorted(owners) == [TP("t0", p) for p in range(4)]
    assert all(len(ms) == 1 for ms in owners.values())
    records = assignment_records(sim)
    assert len(records) <= 6, [(r.generation, r.phase) for r in records]
    final = sim.view().assignment
    assert final is not None and final.fallback is not None
    assert final.fallback.reason == reason and final.assignor == "faulty"


def test_a_group_on_a_fallback_plans_again_when_it_changes_and_the_assignor_recovers(
    faulty: Any,
) -> None:
    a = faulty("raise")
    sim = GroupSim({"t0": 4}, assignor="faulty")
    sim.join("m0")
    sim.settle()
    assert sim.view().assignment.fallback is not None  # type: ignore[union-attr]
    a.modes = ("ok",)
    sim.join("m1")
    sim.settle()
    final = sim.view().assignment
    assert final is not None and final.fallback is None
    assert final.assigned("m1")


def test_a_plan_made_for_a_membership_that_changed_is_discarded(faulty: Any) -> None:
    a = faulty("slowish")
    sim = GroupSim({"t0": 6}, assignor="faulty", plan_ms=a.plan_ms, assignor_timeout_ms=BUDGET_MS)
    sim.join("m0")
    sim.tick(2)  # the leader asked for a plan for {m0}; it takes 600 ms
    assert sim.members["m0"].node.planning is not None
    sim.join("m1")
    sim.settle()
    # the plan for {m0} came back after m1 joined: not written; a new one for {m0, m1} was
    first = sim.plans[0].basis[1]
    assert [m for m, _, _ in first] == ["m0"]
    for rec in assignment_records(sim):
        assert set(rec.members) == {"m0", "m1"}, rec.members
    assert all(sim.owners().get(TP("t0", p)) for p in range(6))
    assert sim.view().assignment.assigned("m1")  # type: ignore[union-attr]


def test_the_leader_heartbeats_while_its_assignor_runs(faulty: Any) -> None:
    """A slow plan is made off the heartbeat path: the leader's session never lapses while it
    waits, and the plan, past its budget, is replaced by the fallback at the budget."""
    a = faulty("slow")
    sim = GroupSim({"t0": 4}, assignor="faulty", plan_ms=a.plan_ms, assignor_timeout_ms=BUDGET_MS,
                   session_timeout_ms=2_000, heartbeat_interval_ms=300)  # fmt: skip
    sim.join("m0")
    sim.join("m1")
    ticks = sim.settle()
    leader = sim.view().leader
    assert leader is not None and sim.members[leader].member.state == "active"
    assert sim.view().generation <= 2 and ticks * sim.tick_ms < 3 * BUDGET_MS
    assert sim.view().assignment.fallback.reason == AssignorFailure.TIMEOUT  # type: ignore[union-attr]


# ------------------------------------------------------------------ random schedules


class FaultySchedule(GroupSchedule):
    """GroupSchedule with a group assignor that misbehaves at random (drawn per schedule)."""

    faulty: FaultyAssignor

    @initialize(
        protocol=st.sampled_from(["eager", "cooperative"]),
        modes=st.lists(st.sampled_from(sorted(MODES)), min_size=1, max_size=6),
        t0=st.integers(1, 8),
        t1=st.integers(0, 4),
        release=st.sampled_from([None, None, 0, 100, 700]),
    )
    def start(  # type: ignore[override]
        self, protocol: str, modes: list[str], t0: int, t1: int, release: int | None
    ) -> None:
        self.faulty = a = FaultyAssignor(tuple(modes))
        register_assignor("faulty", lambda: a)
        self.sim = GroupSim(
            {"t0": t0, "t1": t1}, protocol=protocol, assignor="faulty", release_delay_ms=release,
            plan_ms=a.plan_ms, assignor_timeout_ms=BUDGET_MS, **self.sim_options(),
        )  # fmt: skip
        self.sim.lags = {}

    def check(self) -> None:
        super().check()
        if not hasattr(self, "sim"):
            return
        assert "inconsistent" not in self.sim.view().rejections
        for out in self.sim.plans:
            assert out.fallback is None or out.fallback.reason in list(AssignorFailure)

    def teardown(self) -> None:
        try:
            super().teardown()
            if hasattr(self, "sim") and self.sim.running():
                a = self.sim.view().assignment
                assert a is not None
                broken = {MODES[m] for m in self.faulty.modes} - {None}
                assert a.fallback is None or a.fallback.reason in broken, (a.fallback, broken)
        finally:
            unregister_assignor("faulty")


FaultySchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestFaultySchedule = FaultySchedule.TestCase
