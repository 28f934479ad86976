"""Admission (docs/protocol.md, "Admission"): a newcomer's join is planned by the generation it
joins.

A complete cooperative generation planned by a built-in sticky assignor names, per member, what
it gives the next newcomer (``CoveredMember.admit``). The first caught-up newcomer's join record
in that generation *admits* it: from that record the givers revoke those partitions, and the
newcomer takes each at its giver's release, without waiting for the leader to read the join and
write a generation (one control-log hop fewer: ``tests/test_protocol_hops.py``). The leader's
plan that covers the newcomer then keeps it there.

Inheritance (docs/protocol.md, "Inheritance") is proven by the same schedules: the same
generations name who inherits what a member owns, the schedules' members leave (also while the
leader is paused, so that only their heirs move anything), and the compacted readers must agree
on what every member inherits too. Its scenarios are in ``tests/test_protocol_inheritance.py``.

Proven here over random schedules (the base schedule's rules and invariants, every one checked
after every step, with compacted readers that must agree with the full replay on the admission
and on every member's ``admitted_in``; and again with produce jitter; the leader paused so that
admissions run without it), and shown in scenarios.
"""

from __future__ import annotations

import os
from collections import Counter

import hypothesis.strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from groupkit.protocol import ownership
from groupkit.protocol.assign import AssignRequest
from groupkit.protocol.records import (
    AssignmentKey,
    covered_member,
    decode,
    encode,
    encode_key,
    member_record,
)
from groupkit.protocol.state import GroupState
from groupkit.testing.sim import GroupSim
from groupkit.types import TopicPartition
from tests.test_protocol_compaction import FullReaderRules, agreed, compacted_reader
from tests.test_protocol_hypothesis import GroupSchedule, schedule_settings
from tests.test_protocol_jitter import JitterSchedule
from tests.test_protocol_v2_schedules import LivenessRules

EXAMPLES = max(50, int(os.environ.get("GROUPKIT_PROTOCOL_EXAMPLES", "1000")) // 4)
STICKY = ["cooperative-sticky", "sticky"]


class AdmissionRules(GroupSchedule):
    """The base schedule's rules, on groups whose generations admit newcomers."""

    @initialize(
        assignor=st.sampled_from(STICKY),
        t0=st.integers(2, 8),
        t1=st.integers(0, 4),
        release=st.sampled_from([None, 0, 100, 700]),
    )
    def start(self, assignor: str, t0: int, t1: int, release: int | None) -> None:  # type: ignore[override]
        self.sim = GroupSim(
            {"t0": t0, "t1": t1}, protocol="cooperative", assignor=assignor,
            release_delay_ms=release, **self.sim_options(),
        )  # fmt: skip
        self.sim.lags = {}

    @precondition(lambda self: bool(self._alive()))
    @rule(mid=st.sampled_from(["m5", "m6", "m7"]), ms=st.integers(300, 3_000))
    def join_while_the_leader_is_paused(self, mid: str, ms: int) -> None:
        """A newcomer joins while the leader cannot plan: only an admission moves anything."""
        leader = self.sim.view().leader
        if leader in self.sim.members and not self.sim.members[leader].crashed:
            self.sim.pause(leader, ms)
        sm = self.sim.members.get(mid)
        if sm is None or sm.crashed or sm.member.state == "left":
            self.sim.members.pop(mid, None)
            topics = sorted({t for m in self.sim.view().live_members().values() for t in m.topics})
            self.sim.join(mid, topics or ["t0"])

    @precondition(lambda self: len(self._alive()) >= 2)
    @rule(data=st.data(), ms=st.integers(300, 3_000))
    def leave_while_the_leader_is_paused(self, data: st.DataObject, ms: int) -> None:
        """A member leaves cleanly while the leader cannot plan: only its heirs move anything
        (docs/protocol.md, "Inheritance")."""
        leader = self.sim.view().leader
        if leader in self.sim.members and not self.sim.members[leader].crashed:
            self.sim.pause(leader, ms)
        mid = data.draw(st.sampled_from(self._alive()))
        if self.sim.members[mid].member.state not in ("leaving", "left", "unjoined"):
            self.sim.leave(mid)

    def check_handoffs(self) -> None:
        """(7) What an admission hands to its newcomer is handed to it alone, and nobody else
        may hold it; the givers are the current generation's members. (8) What an heir takes
        by inheritance nobody else may hold, and it inherits it in the current generation."""
        super().check_handoffs()
        if not hasattr(self, "sim"):
            return
        for state in [self.sim.view(), *(sm.state for sm in self.sim.running())]:
            holders = ownership.holders(state)
            adm = ownership.admission(state)
            if adm is not None:
                newcomer, admitted = adm
                assert state.assignment is not None and newcomer not in state.assignment.members
                for p in ownership.admission_handoffs(state, newcomer):
                    assert p in admitted and holders.get(p) == {newcomer}, (p, holders.get(p))
            for m in state.live_members():
                for p in ownership.inheritance_handoffs(state, m):
                    assert p in ownership.inherited(state, m) and holders.get(p) == {m}, (
                        p,
                        holders.get(p),
                    )


#: how often the compacted reader's base state (leader, generation, assignment, live members,
#: coverage, reservations) already differed, so that the admission was not compared
TALLY: Counter[str] = Counter()


def admission_of(st: GroupState) -> tuple[object, ...]:
    """What readers must agree on about the current generation's admission and inheritance."""
    live = st.live_members()
    return (
        ownership.admission(st),
        sorted(m for m in live if st.members[m].admitted_in == st.generation),
        {m: ownership.inherited(st, m) for m in live},
    )


class AdmissionSchedule(AdmissionRules, FullReaderRules):
    """Checked against compacted readers too (test_protocol_compaction.py): at a random
    cleaning point after every step, a reader of the compacted log agrees with the full replay
    on the admission. Only where it agrees on the rest of what test_protocol_compaction.py
    compares: some of these schedules find readers that disagree on that already, with or
    without admissions, and an admission read from a different generation would prove
    nothing."""

    @invariant()
    def check(self) -> None:
        super().check()
        reader = self.full_reader()
        if reader is None:
            return
        got = compacted_reader(self.sim, reader, self.rng)
        if got is None:
            return
        fresh, full, clean_to = got
        if agreed(fresh) != agreed(full):
            base = [a == b for a, b in zip(agreed(fresh), agreed(full), strict=True)][:-3]
            if not all(base):
                TALLY["base_disagreements"] += 1
                return
        TALLY["compared"] += 1
        if ownership.admission(full) is not None:
            TALLY["admissions"] += 1
        if any(ownership.inherited(full, m) for m in full.live_members()):
            TALLY["inheritances"] += 1
        assert admission_of(fresh) == admission_of(full), clean_to

    def teardown(self) -> None:
        if hasattr(self, "sim"):
            super().teardown()


class AdmissionJitterSchedule(AdmissionRules, JitterSchedule):
    """With produce requests that take different times (test_protocol_jitter.py). Not against
    compacted readers: those disagree under jitter with or without admissions (a member's late
    acknowledgement claims a grant of a generation compaction dropped)."""


class AdmissionV2Schedule(AdmissionRules, LivenessRules):
    """On protocol version 2 (test_protocol_v2_schedules.py), with its faults: lost and late
    delivery reports, the logs' clocks apart, the judges killed. Its newcomers claim the part
    of their share they took only with the rest (rule 6.6), which the reservation must cover."""


AdmissionSchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestAdmissionSchedule = AdmissionSchedule.TestCase
AdmissionJitterSchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestAdmissionJitterSchedule = AdmissionJitterSchedule.TestCase
AdmissionV2Schedule.TestCase.settings = schedule_settings(EXAMPLES)
TestAdmissionV2Schedule = AdmissionV2Schedule.TestCase


# ------------------------------------------------------------------ scenarios


def stable_group(
    assignor: str = "cooperative-sticky",
    partitions: int = 12,
    slow_plan_for: str = "",
    slow_plan_without: str = "",
) -> GroupSim:
    """A stable cooperative group of a, b and c; the leader takes 2 s to plan for a group
    with ``slow_plan_for`` in it, or without ``slow_plan_without`` (its assignor runs off the
    heartbeat path meanwhile)."""

    def plan_ms(req: AssignRequest) -> int:
        slow = slow_plan_for in req.members or (
            slow_plan_without and slow_plan_without not in req.members
        )
        return 2_000 if slow else 0

    sim = GroupSim({"t0": partitions}, protocol="cooperative", assignor=assignor,
                   session_timeout_ms=10_000, heartbeat_interval_ms=1_000, tick_ms=5,
                   produce_delay_ms=10, fetch_delay_ms=10, plan_ms=plan_ms)  # fmt: skip
    for m in ("a", "b", "c"):
        sim.join(m)
    sim.settle()
    return sim


def test_a_complete_generation_names_the_newcomers_share_from_the_most_loaded() -> None:
    a = stable_group(partitions=14).view().assignment
    assert a is not None and a.phase == "complete"
    admit = {m: c.admit for m, c in a.members.items()}
    # 14 // 4 = 3, taken one at a time from whoever owns the most: the two owners of 5 first
    assert sum(map(len, admit.values())) == 3
    assert all(admit[m] <= a.members[m].assigned for m in admit)
    left = sorted(len(a.members[m].assigned - admit[m]) for m in admit)
    assert left == [3, 4, 4]


def test_a_newcomers_share_comes_from_as_few_givers_as_balance_allows_leader_last() -> None:
    """9 members owning 6, 6, 6, 5 x 6 of 48 give a tenth its 4 from 3 givers (one gives 2),
    not one each from 4; among members tied for the most, the leader gives last. Every member
    still ends within one of every other, the newcomer included."""
    from groupkit.protocol.planner import admit_newcomer

    sizes = {f"m{i}": 6 if i < 3 else 5 for i in range(9)}
    nxt, members = 0, {}
    for m, n in sizes.items():
        members[m] = covered_member(m, ["t"], assigned=[("t", p) for p in range(nxt, nxt + n)])
        nxt += n
    for leader in ("m0", "m8", None):
        got = admit_newcomer(members, {"t": 48}, leader)
        admit = {m: c.admit for m, c in got.items()}
        givers = [m for m, a in admit.items() if a]
        assert sum(map(len, admit.values())) == 4 and len(givers) == 3
        assert all(admit[m] <= members[m].assigned for m in admit)
        after = [sizes[m] - len(admit[m]) for m in sizes] + [4]
        assert max(after) - min(after) <= 1
        if leader is not None:
            assert leader not in givers or sizes[leader] == 6  # an owner of the most gives
    # tied for the most, the leader is spared: 4 x 4 give a fifth 3, one each, not the leader
    even = {m: covered_member(m, ["t"], assigned=[("t", 4 * i + p) for p in range(4)])
            for i, m in enumerate("abcd")}  # fmt: skip
    got = admit_newcomer(even, {"t": 16}, "d")
    assert not got["d"].admit and all(len(got[m].admit) == 1 for m in "abc")


def test_a_join_is_owned_without_the_leaders_turn() -> None:
    sim = stable_group(slow_plan_for="d")  # the leader plans nothing for d for 2 s
    st0 = sim.view()
    gen0 = st0.generation
    share = {p for c in st0.assignment.members.values() for p in c.admit}  # type: ignore[union-attr]
    assert len(share) == 3
    d = sim.join("d")
    for _ in range(100):
        sim.tick()
        assert not sim.violations(), sim.violations()
        if d.member.owned == share:
            break
    assert d.member.owned == share
    assert sim.view().generation == gen0  # no leader's turn
    assert all(len(ms) == 1 for ms in sim.owners().values())


def test_the_plan_that_covers_the_newcomer_keeps_what_it_was_admitted() -> None:
    sim = stable_group()
    before = {p: m for m, c in sim.view().assignment.members.items() for p in c.assigned}  # type: ignore[union-attr]
    share = {p for c in sim.view().assignment.members.values() for p in c.admit}  # type: ignore[union-attr]
    sim.join("d")
    sim.settle()
    after = sim.view().assignment
    assert after is not None and after.phase == "complete"
    assert after.members["d"].assigned == share
    moved = {p for m, c in after.members.items() for p in c.assigned if before.get(p) != m}
    assert moved == share  # nothing else moved
    # done: the index of admissions under way forgets it (its records still echo it)
    st = sim.view()
    assert ownership.admission(st) is None and st.members["d"].admitted_in and not st.admitted_ids


def test_the_plan_for_a_join_waits_until_the_newcomer_owns_its_share() -> None:
    """Planner.admission_under_way: no generation is written while the newcomer takes what it
    was admitted; the next is written once its record claims all of it, and covers it."""
    sim = stable_group()
    g = sim.view().generation
    share = {p for c in sim.view().assignment.members.values() for p in c.admit}  # type: ignore[union-attr]
    sim.join("d")
    while sim.view().generation == g:
        sim.tick()
        assert not sim.violations(), sim.violations()
    st = sim.view()
    assert st.members["d"].claims == share  # its record claimed all of it first
    assert st.assignment is not None and st.assignment.members["d"].assigned == share


def test_the_covering_plan_waits_a_heartbeat_after_the_claim_unless_the_group_changes() -> None:
    """Planner.cover_after_ms (the heartbeat interval, as the runtime gives it): the plan that
    covers the newcomer is not made until that much log time after the record that claimed
    its share, and is made within a heartbeat after that; a member leaving meanwhile ends the
    wait (the plan is then needed for more than bookkeeping)."""
    for leave_meanwhile in (False, True):
        sim = stable_group()  # heartbeat 1 s
        g = sim.view().generation
        share = {p for c in sim.view().assignment.members.values() for p in c.admit}  # type: ignore[union-attr]
        sim.join("d")
        while sim.view().members.get("d") is None or sim.view().members["d"].claims != share:
            sim.tick()
            assert sim.view().generation == g
        claimed = ownership.share_claimed_at(sim.view(), "d")
        assert claimed is not None
        if leave_meanwhile:
            leaver = max(m for m in ("a", "b", "c") if m != sim.view().leader)
            sim.leave(leaver)
        while sim.view().generation == g:
            sim.tick()
            assert not sim.violations(), sim.violations()
        planned = sim.view().log_time
        if leave_meanwhile:
            assert planned - claimed < 1_000, "a leave ended the wait"
        else:
            assert 1_000 <= planned - claimed <= 2_000 + 100, planned - claimed
        a = sim.view().assignment
        assert a is not None and share <= a.members["d"].assigned


def test_a_giver_that_cannot_let_go_holds_the_plan_back_half_a_session_at_most() -> None:
    sim = stable_group()  # session 10 s
    a = sim.view().assignment
    assert a is not None
    g = sim.view().generation
    giver = min(m for m, c in a.members.items() if c.admit and m != sim.view().leader)
    sim.pause(giver, 8_000)  # frozen: it neither lets go nor heartbeats, yet stays live
    sim.join("d")
    joined = sim.clock
    while sim.view().generation == g:
        sim.tick()
        assert not sim.violations(), sim.violations()
        assert sim.clock - joined < 6_000, "the plan waited past half a session"
    assert sim.clock - joined >= 5_000 - 100  # it did wait (the others' share came at once)
    assert sim.view().assignment.members["d"].assigned  # type: ignore[union-attr]


def test_only_the_first_newcomer_of_a_generation_is_admitted() -> None:
    sim = stable_group(slow_plan_for="d")
    sim.join("d")
    sim.join("e")
    for _ in range(60):
        sim.tick()
        assert not sim.violations(), sim.violations()
    st1 = sim.view()
    assert st1.members["d"].admitted_in == st1.generation
    assert st1.members["e"].admitted_in == 0
    assert not sim.members["e"].member.owned  # it waits for the leader's plan
    sim.settle()
    a = sim.view().assignment
    assert a is not None and a.members["e"].assigned and a.members["d"].assigned


def test_range_and_eager_groups_admit_nobody_and_name_no_heirs() -> None:
    for protocol, assignor in (("cooperative", "range"), ("eager", "cooperative-sticky")):
        sim = GroupSim({"t0": 12}, protocol=protocol, assignor=assignor)
        for m in ("a", "b", "c"):
            sim.join(m)
        sim.settle()
        a = sim.view().assignment
        assert a is not None and not any(c.admit or c.inherit for c in a.members.values())


def test_admission_fields_round_trip_and_a_future_admission_is_refused() -> None:
    c = covered_member("i", ["t0"], assigned=[("t0", 0), ("t0", 1)], admit=[("t0", 1)])
    assert c.admit == {TopicPartition("t0", 1)}
    k, v = member_record("g", "m", incarnation="i", seq=3, topics=["t0"], acked_generation=4,
                         seen_generation=5, joined_at=10, prev_ts=20, since_generation=5,
                         admitted_in=4)  # fmt: skip
    assert decode(*encode(k, v))[1] == v
    raw_k, raw_v = encode(k, v)
    assert raw_v is not None
    forged = raw_v.replace(b'"admitted":4', b'"admitted":9')
    import pytest

    from groupkit.errors import RecordRejected

    with pytest.raises(RecordRejected) as e:
        decode(raw_k, forged)
    assert e.value.reason == "bad_value"


def test_a_clobbered_generation_of_a_leader_that_left_is_superseded_not_carried_over() -> None:
    """The new leader re-asserts a clobbered generation only while the group is as it says. A
    leader that left gave what it admitted to a newcomer, so a copy of its grant is unsafe:
    every copy would be rejected and clobber the assignment again, and the new leader would
    write nothing else for good (a schedule of tests/test_protocol_jitter.py reaches this)."""
    sim = stable_group(slow_plan_for="d")
    a = sim.view().assignment
    assert a is not None
    old = sim.view().leader
    assert old is not None and a.members[old].admit
    d = sim.join("d")
    for _ in range(200):  # d takes what it was admitted, the leader's own share included
        sim.tick()
        if d.member.owned == {p for c in a.members.values() for p in c.admit}:
            break
    else:
        raise AssertionError("d was not handed its share")
    sim.leave(old)
    for _ in range(40):
        sim.tick()
        if sim.view().leader != old:
            break
    assert sim.view().leader != old
    sim.inject(encode_key(AssignmentKey(sim.group)), b"\x01garbage")  # clobbers the assignment
    sim.tick(5)
    assert sim.view().assignment_clobbered
    sim.settle(max_ticks=600)
    final = sim.view().assignment
    assert final is not None and old not in final.members
    assert not sim.view().rejections["unsafe_grant"]


def test_a_newcomer_claims_its_share_in_one_record_in_version_2() -> None:
    """Rule 6.6: a version-2 newcomer whose givers release at different times takes each part
    at its release, but claims what it took only together with the rest: its records go from
    claiming nothing to claiming its whole share. Over seeds of produce jitter, some newcomers
    owned part of their share for a while (the hold was exercised), and the group stays safe.
    The givers take 300 ms to commit, so the newcomer has acknowledged the generation before
    the first part comes (a record it writes for that reason would carry what it owns)."""
    partial = 0
    for seed in range(8):
        sim = GroupSim({"t0": 12}, protocol="cooperative", assignor="cooperative-sticky",
                       version=2, session_timeout_ms=10_000, heartbeat_interval_ms=1_000,
                       tick_ms=5, produce_delay_ms=10, fetch_delay_ms=10, produce_jitter_ms=300,
                       release_delay_ms=300, seed=seed)  # fmt: skip
        for m in ("a", "b", "c", "d"):
            sim.join(m)
        sim.settle()
        a = sim.view().assignment
        assert a is not None
        share = frozenset(p for c in a.members.values() for p in c.admit)
        assert len(share) == 2
        e = sim.join("e")
        claimed_partly = owned_partly = False
        for _ in range(400):
            sim.tick()
            assert not sim.violations(), sim.violations()
            me = sim.view().members.get("e")
            claims = me.claims if me is not None else frozenset()
            claimed_partly |= bool(claims) and claims != share
            owned_partly |= bool(e.member.owned) and e.member.owned != share
            if claims == share:
                break
        assert claims == share, seed
        assert not claimed_partly, seed
        partial += owned_partly
        assert all(len(ms) == 1 for ms in sim.owners().values())
    assert partial > 0
