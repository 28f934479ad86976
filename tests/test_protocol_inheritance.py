"""Inheritance (docs/protocol.md, "Inheritance"): a clean leave is planned by the generation it
leaves.

A complete cooperative generation planned by a built-in sticky assignor names, per member, what
it inherits (``CoveredMember.inherit``): every partition of every other member has one heir. Once
a partition's owner is gone (its ``leaving`` record ended its membership), its heir takes it as
soon as nobody else may hold it, at the offset the leave committed, without waiting for the
leader to read the leave and write a generation (one control-log hop fewer:
``tests/test_protocol_hops.py``). The leader's plan without the leaver keeps it there.

The random schedules that prove it are ``tests/test_protocol_admission.py``'s (members leave in
them, also while the leader is paused) and ``tests/test_protocol_compaction.py``'s (compacted
readers agree on what every member inherits). These are the scenarios; that range and eager
groups name no heirs is checked with their admissions there.
"""

from __future__ import annotations

import pytest

from groupkit.errors import RecordRejected
from groupkit.protocol import ownership
from groupkit.protocol.consistent import check_consistent
from groupkit.protocol.records import (
    AssignmentRecord,
    assignment_record,
    covered_member,
    decode,
    encode,
)
from groupkit.testing.sim import GroupSim
from groupkit.types import TopicPartition
from tests.test_protocol_admission import stable_group


def heirs(sim: GroupSim) -> dict[TopicPartition, str]:
    a = sim.view().assignment
    assert a is not None
    return {p: m for m, c in a.members.items() for p in c.inherit}


def test_every_partition_has_one_heir_and_any_leave_leaves_the_group_balanced() -> None:
    a = stable_group(partitions=14).view().assignment
    assert a is not None and a.phase == "complete"
    owner = {p: m for m, c in a.members.items() for p in c.assigned}
    heir = {p: m for m, c in a.members.items() for p in c.inherit}
    assert heir.keys() == owner.keys()  # every partition, one heir (the record refuses two)
    assert all(heir[p] != owner[p] for p in owner)
    for leaver in a.members:
        load = {m: len(c.assigned) + len(c.inherit & a.members[leaver].assigned)
                for m, c in a.members.items() if m != leaver}  # fmt: skip
        assert sum(load.values()) == 14 and max(load.values()) - min(load.values()) <= 1, load


@pytest.mark.parametrize("leaver", ["c", "a"])  # a member, and the leader itself
def test_a_leave_is_owned_without_the_leaders_turn(leaver: str) -> None:
    sim = stable_group(slow_plan_without=leaver)  # no plan without the leaver for 2 s
    gen0 = sim.view().generation
    assert sim.view().leader == "a"
    gone = sim.view().assignment.members[leaver].assigned  # type: ignore[union-attr]
    heir = heirs(sim)
    sim.leave(leaver)
    for _ in range(100):
        sim.tick()
        assert not sim.violations(), sim.violations()
        owners = sim.owners()
        if all(owners.get(p) == [heir[p]] for p in gone):
            break
    else:
        raise AssertionError(f"the heirs did not take {sorted(gone)}: {sim.owners()}")
    assert sim.view().generation == gen0  # no leader's turn
    assert all(len(ms) == 1 for ms in sim.owners().values())
    assert set(sim.owners()) == sim.expected_partitions()
    # each heir started where the leaver committed: the leave's hints name it as receiver
    st = sim.view()
    for p in gone:
        h = st.offset_hints.get(p)
        assert h is None or h.receiver is None or h.receiver.member_id == heir[p]


def test_the_plan_without_the_leaver_keeps_what_its_heirs_inherited() -> None:
    sim = stable_group()
    a0 = sim.view().assignment
    assert a0 is not None
    before = {p: m for m, c in a0.members.items() for p in c.assigned}
    heir = heirs(sim)
    sim.leave("b")
    sim.settle()
    after = sim.view().assignment
    assert after is not None and after.phase == "complete" and "b" not in after.members
    now = {p: m for m, c in after.members.items() for p in c.assigned}
    assert now == {p: heir[p] if m == "b" else m for p, m in before.items()}  # nothing else
    assert not sim.view().rejections


def test_a_crashed_owner_is_not_inherited() -> None:
    """Its process may still run (it is a member until the leader tombstones it): its
    partitions wait for the leader's plan, as without heirs."""
    sim = stable_group()
    gen0 = sim.view().generation
    gone = sim.view().assignment.members["c"].assigned  # type: ignore[union-attr]
    sim.crash("c")
    for _ in range(4_000):
        sim.tick()
        assert not sim.violations(), sim.violations()
        st = sim.view()
        if st.generation == gen0:
            assert not set(sim.owners()) & gone, sim.owners()
            assert not any(ownership.inherited(st, m) for m in st.live_members())
        if sim.is_stable() and st.generation > gen0:
            break
    else:
        raise AssertionError("no generation without c")
    assert set(sim.owners()) == sim.expected_partitions()


def _record(
    protocol: str = "cooperative", phase: str = "complete", **inherit: list[tuple[str, int]]
) -> AssignmentRecord:
    k, v = assignment_record(
        "g", generation=2, leader_id="a", leader_incarnation="ia", leader_joined_at=1,
        protocol=protocol, phase=phase,
        assignor="sticky", partition_counts={"t0": 4},
        members={
            "a": covered_member("ia", ["t0"], assigned=[("t0", 0), ("t0", 1)],
                                inherit=inherit.get("a", ())),
            "b": covered_member("ib", ["t0"], assigned=[("t0", 2), ("t0", 3)],
                                inherit=inherit.get("b", ())),
        },
    )  # fmt: skip
    got = decode(*encode(k, v))[1]
    assert got == v  # the field round-trips
    assert isinstance(got, AssignmentRecord)
    return got


def test_inherit_round_trips_and_inconsistent_heirs_are_refused() -> None:
    good = _record(a=[("t0", 2), ("t0", 3)], b=[("t0", 0), ("t0", 1)])
    check_consistent(good)
    assert good.members["a"].inherit == {TopicPartition("t0", 2), TopicPartition("t0", 3)}
    bad = {
        "its own partition": _record(a=[("t0", 0)]),
        "two heirs": _record(a=[("t0", 2)], b=[("t0", 2)]),
        "nobody's partition": _record(a=[("t0", 9)]),
        "an eager generation": _record("eager", a=[("t0", 2)]),
        "a partial generation": _record("cooperative", "partial", a=[("t0", 2)]),
    }
    for why, rec in bad.items():
        with pytest.raises(RecordRejected) as e:
            check_consistent(rec)
        assert e.value.reason == "inconsistent", why
