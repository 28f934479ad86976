"""The Node driver's own rules: when it leads, and the wait for its own assignment record.

The schedules (test_protocol_hypothesis and friends) run every Node through GroupSim; these pin
the edges that the runtime reaches and the simulator rarely does: an offset reported after the
record was already replayed, a failed write, a lapsed session, a node that has left.
"""

from __future__ import annotations

from typing import Any

import pytest

import groupkit.protocol.ownership as ownership
from groupkit.protocol import GroupState, Member, Node, Planner
from groupkit.protocol.node import SENT
from groupkit.protocol.planner import Decision
from groupkit.protocol.vocab import DecisionAction, RebalanceOutcome
from groupkit.testing.sim import GroupSim

SESSION = 10_000


def _node(member_id: str = "a") -> Node:
    m = Member("g", member_id, "i1", ["t"], session_timeout_ms=SESSION,
               heartbeat_interval_ms=1_000)  # fmt: skip
    return Node(m, GroupState("g", SESSION, 30_000), Planner("range", "cooperative"))


class _Log:
    """Just enough of a control partition: append at a broker time, read in order."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes | None, bytes | None, int]] = []

    def append(self, key: bytes | None, value: bytes | None, ts: int) -> int:
        self.records.append((len(self.records), key, value, ts))
        return len(self.records) - 1

    def feed(self, node: Node) -> None:
        for off, k, v, ts in self.records[node.state.offset + 1 :]:
            node.feed(off, k, v, ts)


def _joined(node: Node, log: _Log, now: int = 0) -> None:
    """Run the node until it leads a group of itself that needs its first generation."""
    for t in range(now, now + 5):
        log.feed(node)
        for w in node.step(t).actions.writes:
            log.append(w.raw_key, w.raw_value, t)
        log.feed(node)
        for w in node.poll(t).writes:
            log.append(w.raw_key, w.raw_value, t)  # confirm what it read back, as step does
        log.feed(node)
        # peek at the planner itself: Node.plan would start the wait for the record
        if node.ready(t) and node.planner.plan(node.state, {"t": 2}).action == DecisionAction.WRITE:
            return
    raise AssertionError("never ready")


def test_plans_once_then_waits_for_its_own_record() -> None:
    node, log = _node(), _Log()
    _joined(node, log)
    s = node.step(10, {"t": 2})
    assert s.leader and s.ready and s.lead is not None and s.lead.action == DecisionAction.WRITE
    assert node.awaiting == SENT and s.lead.key is not None
    # until the record is in the log and replayed, it leads but plans nothing
    again = node.step(11, {"t": 2})
    assert again.leader and not again.ready and again.lead is None
    off = log.append(s.lead.key, s.lead.value, 12)
    node.written(off)
    assert node.awaiting == off and not node.ready(12)
    log.feed(node)
    assert node.awaiting is None and node.ready(13)
    assert node.state.generation == 1


def test_offset_reported_after_the_record_was_replayed() -> None:
    node, log = _node(), _Log()
    _joined(node, log)
    lead = node.plan(10, {"t": 2})
    assert lead is not None and lead.key is not None
    log.append(lead.key, lead.value, 11)
    log.feed(node)  # the reader was faster than the delivery report
    assert node.awaiting == SENT
    node.written(log.records[-1][0])
    assert node.awaiting is None and node.ready(12)


def test_a_failed_write_plans_again() -> None:
    node, log = _node(), _Log()
    _joined(node, log)
    first = node.plan(10, {"t": 2})
    assert first is not None and first.action == DecisionAction.WRITE
    assert node.plan(10, {"t": 2}) is None
    node.write_failed()
    second = node.plan(11, {"t": 2})
    assert second is not None and second.action == DecisionAction.WRITE
    assert second.decision.record == first.decision.record


def test_a_shared_state_replayed_elsewhere_ends_the_wait() -> None:
    node, log = _node(), _Log()
    _joined(node, log)
    lead = node.plan(10, {"t": 2})
    assert lead is not None and lead.key is not None
    node.written(log.append(lead.key, lead.value, 11))
    for off, k, v, ts in log.records[node.state.offset + 1 :]:
        node.state.replay(off, k, v, ts)  # not through node.feed: the simulator's shared view
    assert node.ready(12)


def test_no_lead_with_a_lapsed_session_or_after_leaving() -> None:
    node, log = _node(), _Log()
    _joined(node, log)
    age = node.session_age_ms(5)
    assert age is not None
    deadline = node.fence_deadline(5)
    assert deadline == 5 - age + SESSION
    assert node.is_leader(deadline - 1) and not node.is_leader(deadline)
    node.leave()
    s = node.step(6, {"t": 2})
    assert node.left and s.leader and not s.ready and s.lead is None
    assert [w.value for w in s.actions.writes][-1] is None  # the tombstone


def test_another_incarnation_with_our_id_does_not_lead() -> None:
    old, log = _node(), _Log()
    _joined(old, log)
    new = _node()  # a restarted process: same id, same state, a new incarnation
    new.member.incarnation = "i2"
    log.feed(new)
    assert new.state.leader == "a" and not new.is_leader(0)
    assert new.step(0, {"t": 2}).lead is None


def test_the_leader_tombstones_members_long_expired_and_they_may_return() -> None:
    """Crashed members leave no record behind for ever: two sessions after a crash the leader
    writes its tombstone, every reader forgets it, and compaction drops it from the log."""
    from groupkit.protocol.node import FORGET_AFTER_SESSIONS
    from groupkit.testing.sim import GroupSim

    sim = GroupSim({"t0": 4}, session_timeout_ms=2_000, heartbeat_interval_ms=300)
    for m in ("a", "b", "c"):
        sim.join(m)
    sim.settle()
    sim.crash("c")
    crashed_at = sim.clock
    sim.settle()
    assert "c" in sim.view().members  # expired, not yet forgotten
    while "c" in sim.view().members:
        sim.tick()
        assert not sim.violations()
    assert sim.clock - crashed_at >= FORGET_AFTER_SESSIONS * 2_000
    key_c = next(r.key for r in sim.log.records if r.value is None)
    compacted = sim.log.compacted()
    assert not [r for r in compacted if r.key == key_c]
    tombstones = [r for r in sim.log.records if r.key == key_c and r.value is None]
    assert len(tombstones) == 1  # written once, not in a loop
    sim.members.pop("c")
    sim.join("c")
    sim.settle()
    assert sim.members["c"].member.owned


# ------------------------------------------------------------------ rebalance summaries


def _rebalanced(protocol: str) -> GroupSim:
    sim = GroupSim({"t": 6}, protocol=protocol, assignor="range")
    sim.join("a")
    sim.settle()
    sim.join("b")
    sim.settle()
    sim.tick(5)  # the leader's next plan finds the group stable: the rebalance completed
    return sim


@pytest.mark.parametrize("protocol", ["cooperative", "eager"])
def test_the_leader_node_summarises_each_rebalance(protocol: str) -> None:
    """The summaries the runtime hands its observers come from the Node, so the simulator
    sees the same ones: the first assignment, then b's join (range moves 3 of a's 6)."""
    sim = _rebalanced(protocol)
    first, join = sim.rebalances
    assert first.outcome == RebalanceOutcome.COMPLETED == "completed"
    assert (first.reason, first.first_generation, first.generation, first.moved) == (
        "first_assignment", 1, 1, 0,
    )  # fmt: skip
    assert (join.group, join.leader, join.protocol, join.assignor) == ("g", "a", protocol, "range")
    assert join.reason == "membership_changed" and join.outcome == "completed"
    assert join.first_generation == 2 and join.generation == sim.view().generation == 3
    assert join.generations == 2 and join.moved == 3
    # eager revokes everything a owns first; cooperative only what moves
    assert join.revoked == (6 if protocol == "eager" else 3)
    assert 0 < join.duration_s < 5


def test_a_new_change_supersedes_the_rebalance_under_way() -> None:
    sim = GroupSim({"t": 6}, protocol="eager", assignor="range")
    sim.join("a")
    sim.settle()
    sim.join("b")
    while sim.view().generation < 2:  # b's rebalance has started (the revoke phase)
        sim.tick()
    sim.join("c")
    sim.settle()
    sim.tick(5)
    outcomes = [(s.first_generation, s.outcome) for s in sim.rebalances]
    assert outcomes[1] == (2, RebalanceOutcome.SUPERSEDED), outcomes
    assert outcomes[-1][1] == RebalanceOutcome.COMPLETED, outcomes


def _count_plans(sim: GroupSim) -> list[tuple[int, DecisionAction]]:
    """Record every call of the group's planner (all nodes share it): (log time, action)."""
    calls: list[tuple[int, DecisionAction]] = []
    plan = sim.planner.plan

    def counted(state: GroupState, *args: Any, **kw: Any) -> Decision:
        d = plan(state, *args, **kw)
        calls.append((state.log_time, d.action))
        return d

    sim.planner.plan = counted  # type: ignore[method-assign]
    return calls


def _stable(members: str) -> GroupSim:
    sim = GroupSim({"t": 6}, protocol="cooperative", assignor="cooperative-sticky",
                   session_timeout_ms=SESSION, heartbeat_interval_ms=1_000)  # fmt: skip
    for m in members:
        sim.join(m)
    sim.settle()
    sim.tick(SESSION // sim.tick_ms)
    assert sim.is_stable()
    return sim


def test_an_idle_leader_plans_only_when_a_session_ends() -> None:
    """Heartbeats that repeat their memberships change nothing the planner reads but the log
    time, so the leader's step does not plan again (it steps every tick, 10 a second here)
    until the log time reaches the first point where the plan may differ: here a crashed
    member's session end, with no record of the group saying so."""
    sim = _stable("abc")
    calls = _count_plans(sim)
    sim.tick(50)  # 5 s: 50 leader steps, 15 heartbeats
    assert len(calls) <= 1
    assert sim.view().leader == "a"
    sim.crash("c")
    ends = sim.view().members["c"].last_seen + SESSION
    calls.clear()
    while sim.view().log_time < ends:
        sim.tick()
    # one recheck at most before (a live member's session end, which its heartbeat moved)
    assert len([t for t, _ in calls if t < ends]) <= 2
    sim.tick(2)
    after = [(t, a) for t, a in calls if t >= ends]
    # the first plan after it is for the group without c (the simulator runs the assignor
    # off the node: need_plan, then the write)
    assert after and after[0][1] in (DecisionAction.NEED_PLAN, DecisionAction.WRITE)
    sim.settle()
    assert set(sim.view().members) >= {"a", "b"}
    assert set(sim.view().assignment.members) == {"a", "b"}  # type: ignore[union-attr]


def test_the_plan_that_covers_a_newcomer_waits_its_cover_time_only() -> None:
    """The cover wait (``Planner.cover_after_ms``) ends with no record of the group: the
    leader plans when the log time reaches it, not at its next heartbeat's change."""
    sim = _stable("abc")
    calls = _count_plans(sim)
    sim.join("d")
    claimed = None
    for _ in range(100):
        sim.tick()
        st = sim.view()
        claimed = claimed or ownership.share_claimed_at(st, "d")
        if st.assignment is not None and "d" in st.assignment.members:
            break
    assert claimed is not None
    writes = [t for t, a in calls if a in (DecisionAction.NEED_PLAN, DecisionAction.WRITE)]
    cover = sim.planner.cover_after_ms
    assert writes and claimed + cover <= writes[0] < claimed + cover + 1_000


def test_a_version_2_member_says_when_its_next_heartbeat_is_due() -> None:
    """The runtime's control loop sleeps until ``beat_due_in_ms``: it must be the moment
    ``poll`` writes the next heartbeat, not later (a late heartbeat shortens the session)."""
    v1 = Member("g", "a", "i1", ["t"], session_timeout_ms=SESSION, heartbeat_interval_ms=1_000)
    v1.poll(GroupState("g", SESSION, 30_000), 0)
    assert v1.beat_due_in_ms(0) is None  # version 1 heartbeats with its member record

    m = Member("g", "a", "i1", ["t"], session_timeout_ms=SESSION, heartbeat_interval_ms=1_000,
               version=2)  # fmt: skip
    group = GroupState("g", SESSION, 30_000, version=2)
    assert m.beat_due_in_ms(0) is None  # none sent yet

    def beats(now: int) -> list[Any]:
        return [w for w in m.poll(group, now).writes if w.liveness]

    (first,) = beats(0)
    m.heartbeat_confirmed(first.value.seq, 5)
    for now in (0, 400, 999):
        assert m.beat_due_in_ms(now) == 1_000 - now
        assert not beats(now)
    assert m.beat_due_in_ms(1_000) == 0
    assert beats(1_000)
    assert m.beat_due_in_ms(1_000) == 1_000
    assert m.beat_due_in_ms(5_000) == 0  # overdue: due now
