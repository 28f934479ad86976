"""Replay rules: bad records rejected with a reason while the group carries on; compaction;
zombies; the member's state table; the cooperative filter and the member's diff."""

from __future__ import annotations

import pytest

from groupkit.assignors import Assignor
from groupkit.protocol import ownership
from groupkit.protocol.actions import diff
from groupkit.protocol.member import Member, ProtocolError
from groupkit.protocol.planner import Planner, adjust_cooperative
from groupkit.protocol.records import (
    HmacSigner,
    assignment_record,
    covered_member,
    encode,
    member_record,
    member_tombstone,
)
from groupkit.protocol.snapshot import from_snapshot, to_snapshot
from groupkit.protocol.state import GroupState
from groupkit.protocol.vocab import MEMBER_TRANSITIONS, DecisionAction, MemberEvent
from groupkit.testing.sim import GroupSim
from groupkit.types import MemberSubscription
from groupkit.types import TopicPartition as TP
from tests.sim_log_readers import parts


def stable_pair(protocol: str = "cooperative", **kw: object) -> GroupSim:
    sim = GroupSim({"t0": 4}, protocol=protocol, **kw)  # type: ignore[arg-type]
    sim.join("a")
    sim.settle()
    sim.join("b")
    sim.settle()
    return sim


def snapshot(sim: GroupSim) -> tuple[object, ...]:
    st = sim.members["a"].state
    return (
        st.leader,
        st.generation,
        st.assignment,
        {m: sm.member.owned for m, sm in sim.members.items()},
    )


def forged_assignment(
    sim: GroupSim, leader: str, gen: int, a: str, b: str
) -> tuple[bytes, bytes | None]:
    st = sim.members["a"].state
    ms = st.members
    k, v = assignment_record(
        "g", generation=gen, leader_id=leader, leader_incarnation=ms[leader].incarnation,
        leader_joined_at=ms[leader].joined_at, protocol="cooperative", phase="complete",
        assignor="range", partition_counts={"t0": 4},
        members={
            m: covered_member(ms[m].incarnation, ["t0"], [("t0", int(p)) for p in ps])
            for m, ps in (("a", a), ("b", b))
        },
    )  # fmt: skip
    return encode(k, v)


def inject_and_settle(sim: GroupSim, key: bytes | None, value: bytes | None) -> str | None:
    before = snapshot(sim)
    n = len(sim.rejected)
    sim.inject(key, value)
    sim.tick(20)
    assert not sim.violations()
    sim.settle()
    after = snapshot(sim)
    assert after[2] == before[2] or after[2].generation > before[2].generation  # type: ignore[union-attr]
    assert after[3] == before[3], "the group's ownership was disturbed"
    return sim.rejected[n].reason if len(sim.rejected) > n else None


def test_forged_assignment_from_a_non_leader_is_rejected() -> None:
    sim = stable_pair()
    g = sim.members["a"].state.generation
    assert inject_and_settle(sim, *forged_assignment(sim, "b", g + 1, "", "0123")) == "not_leader"


def test_stale_generation_is_rejected() -> None:
    sim = stable_pair()
    old = next(r for r in sim.log.records if r.key is not None and r.key[1] == ord("A"))
    assert inject_and_settle(sim, old.key, old.value) == "stale_generation"


def test_duplicated_member_record_is_rejected() -> None:
    sim = stable_pair()
    last_b = [r for r in sim.log.records if r.key is not None and r.key.endswith(b"b")][-1]
    assert inject_and_settle(sim, last_b.key, last_b.value) == "stale_member_record"


def test_truncated_and_garbage_records_are_rejected() -> None:
    sim = stable_pair()
    last = sim.log.records[-1]
    assert last.value is not None
    assert inject_and_settle(sim, last.key, last.value[:-5]) == "bad_bytes"
    assert inject_and_settle(sim, b"\x00garbage", b"\x00\x01") == "unknown_version"
    assert inject_and_settle(sim, None, None) == "bad_bytes"


def test_unsafe_grant_even_from_the_leader_is_rejected_and_reasserted() -> None:
    sim = stable_pair()
    g = sim.members["a"].state.generation
    # a "leader" record that hands b's partitions to a without revoking them first
    assert inject_and_settle(sim, *forged_assignment(sim, "a", g + 1, "0123", "")) == (
        "unsafe_grant"
    )
    # the rejected record was on the assignment key: the leader re-asserted the real one,
    # so a reader of the compacted topic still finds it
    st = sim.members["a"].state
    assert not st.assignment_clobbered
    fresh = sim.new_state()
    for r in sim.log.compacted():
        fresh.replay(r.offset, r.key, r.value, r.timestamp)
    assert fresh.assignment == st.assignment


def test_member_claiming_what_it_was_never_granted_is_rejected() -> None:
    sim = stable_pair()
    st = sim.members["a"].state
    b = st.members["b"]
    k, v = member_record("g", "b", incarnation=b.incarnation, seq=b.seq + 100, topics=["t0"],
                         owned=[("t0", 0)], acked_generation=st.generation, prev_ts=b.last_seen,
                         joined_at=b.joined_at, since_generation=b.since_generation)  # fmt: skip
    assert inject_and_settle(sim, *encode(k, v)) == "unowned_claim"


def test_replay_order_regressions_are_rejected() -> None:
    st = GroupState("g", 10_000)
    k, v = encode(*member_record("g", "m", incarnation="i", seq=1, topics=["t"]))
    assert st.replay(5, k, v, 100).kind == "member"
    assert st.replay(5, k, v, 100).reason == "offset_regressed"
    assert st.replay(6, k, v, 100).reason == "stale_member_record"
    assert st.rejections == {"offset_regressed": 1, "stale_member_record": 1}
    assert st.replay(7, *encode(*member_record("other", "m", incarnation="i", seq=1, topics=[])),
                     100).kind == "other_group"  # fmt: skip


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("kind", [b"M", b"A"])
def test_other_groups_records_are_skipped_by_key_without_decoding_the_value(
    signed: bool, kind: bytes
) -> None:
    """A record of another group is told by its key bytes: its value is never decoded nor
    verified (a value no decoder would accept is skipped all the same), it only moves the
    clock, and it counts as no rejection."""
    st = GroupState("g", 10_000, verifier=HmacSigner(b"k") if signed else None)
    k, v = encode(*member_record("g", "m", incarnation="i", seq=1, topics=["t"]),
                  HmacSigner(b"k") if signed else None)  # fmt: skip
    assert st.replay(1, k, v, 100).kind == "member"
    other = b"\x01" + kind + len(b"other").to_bytes(2, "big") + b"other"
    if kind == b"M":
        other += b"someone"
    for offset, value in enumerate([b"\xff\xfe not a record", b"\x01\x00{}", None, b""], 2):
        res = st.replay(offset, other, value, 100 + 5_000 * offset)
        assert (res.kind, res.reason) == ("other_group", None)
    assert st.rejections == {}
    assert st.log_time == 100 + 5_000 * 5  # the clock moved: "m" expired
    assert not st.is_live("m")
    # a group whose name starts with ours, or that ours starts with, is another group too
    for name in (b"gg", b"g\x00"):
        key = b"\x01M" + len(name).to_bytes(2, "big") + name + b"m"
        assert st.replay(st.offset + 1, key, b"junk", st.log_time).kind == "other_group"
    # ours with the same junk is still rejected
    ours = b"\x01M" + (1).to_bytes(2, "big") + b"g" + b"m"
    assert st.replay(st.offset + 1, ours, b"junk", st.log_time).kind == "rejected"


def test_signed_group_rejects_unsigned_records() -> None:
    signer = HmacSigner(b"k")
    sim = stable_pair(signer=signer)
    g = sim.members["a"].state.generation
    assert inject_and_settle(sim, *forged_assignment(sim, "a", g + 1, "01", "23")) == "unsigned"


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
def test_compacted_log_replays_to_the_same_group(protocol: str) -> None:
    sim = GroupSim({"t0": 6, "t1": 3}, protocol=protocol, assignor="roundrobin")
    for m in "abcd":
        sim.join(m)
        sim.tick(3)
    sim.settle()
    sim.crash("a")  # the first leader: the survivors must agree on the next one
    sim.leave("c")
    sim.settle()
    sim.tick(40)  # everyone heartbeats again after the changes
    live = sim.members["b"].state
    fresh = sim.new_state()
    for r in sim.log.compacted():
        fresh.replay(r.offset, r.key, r.value, r.timestamp)
    assert (fresh.leader, fresh.generation, fresh.assignment) == (
        live.leader, live.generation, live.assignment,
    )  # fmt: skip
    assert set(fresh.live_members()) == set(live.live_members()) == {"b", "d"}
    assert {m: ownership.may_hold(fresh, m) for m in "bd"} == {
        m: ownership.may_hold(live, m) for m in "bd"
    }
    # a member started now, from the compacted topic, joins without disturbing the group
    sim.join("e")
    sim.settle()
    assert not sim.members["e"].state.rejections


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
def test_zombie_is_fenced_before_its_partitions_move(protocol: str) -> None:
    sim = stable_pair(protocol, keep_actions=True)
    b_had = sim.members["b"].member.owned
    sim.pause("b", 3 * sim.session_timeout_ms)
    b = sim.members["b"]
    while not any(x.lost for x in b.actions):
        sim.tick()
        assert not sim.violations()
    # b's first poll after the pause: everything lost (not committed), nothing revoked
    lost = [x for x in b.actions if x.lost]
    assert lost and lost[0].lost == b_had and "session_lapsed" in lost[0].events
    with pytest.raises(Exception, match="commit refused"):
        b.member.check_commit(b_had, sim.clock)
    sim.settle()
    assert sorted(parts(sim.members[m].member.owned) for m in "ab") == ["t0-0 t0-1", "t0-2 t0-3"]


def test_slow_reader_fences_itself_and_recovers() -> None:
    sim = GroupSim({"t0": 4}, session_timeout_ms=3_000, heartbeat_interval_ms=300)
    sim.join("a")
    sim.join("b", read_rate=1)  # reads one record per tick: falls behind the heartbeats
    for _ in range(300):
        sim.tick()
        assert not sim.violations()
    sim.members["b"].read_rate = None
    sim.settle()


def lapsed_slow_reader(rate: int) -> GroupSim:
    """a and b own two partitions each; then b's reader falls more than a session behind (a
    backlog of junk it reads ``rate`` records a tick), so b fences itself by its own clock while
    the log, which keeps getting b's heartbeats, still has it live; c joins meanwhile."""
    sim = GroupSim({"t0": 4}, session_timeout_ms=2_000, heartbeat_interval_ms=300,
                   rebalance_timeout_ms=4_000, keep_actions=True)  # fmt: skip
    sim.join("a")
    sim.join("b")
    sim.settle()
    b = sim.members["b"]
    assert parts(b.member.owned) == "t0-2 t0-3"
    b.read_rate = rate
    for _ in range(20):
        sim.inject(b"junk", b"junk")
    for i in range(400):
        if i == 3:
            sim.join("c")
        sim.tick()
        assert not sim.violations()
    assert any(x.lost for x in b.actions), "the scenario needs b to have fenced itself"
    return sim


def test_slow_reader_never_retakes_a_grant_that_moved_while_it_was_fenced() -> None:
    # The schedule: b acknowledges the current generation while fenced (owning nothing), so the
    # log stops reserving its grants; c is granted t0-3; then b catches up. Taking t0-3 from the
    # generation it had acknowledged would make two owners.
    sim = lapsed_slow_reader(rate=1)
    sim.members["b"].read_rate = None
    sim.settle()
    owners = sim.owners()
    assert set(owners) == sim.expected_partitions()
    assert all(len(ms) == 1 for ms in owners.values())
    assert sim.members["b"].member.owned, "b is back in the group"


def test_member_that_never_catches_up_is_left_out_and_holds_nothing() -> None:
    # b reads 10 records/s while the log grows about as fast: it never confirms a fresh
    # heartbeat again. The group goes on without it instead of waiting for it forever.
    sim = lapsed_slow_reader(rate=1)
    owners = sim.owners()
    assert set(owners) == sim.expected_partitions()
    assert all(len(ms) == 1 and ms[0] != "b" for ms in owners.values())
    st = sim.view()
    assert st.is_live("b") and ownership.is_lagging(st, "b") and not ownership.may_hold(st, "b")


def test_confirmed_send_time_never_moves_back() -> None:
    # The runtime caches its fence deadline from session_age_ms(); a state that has replayed
    # only an older record of ours (a second, lagging GroupState) must not make the member
    # look younger than it is.
    sim = GroupSim({"t0": 2}, session_timeout_ms=3_000, heartbeat_interval_ms=300)
    sim.join("a")
    sim.tick(2)  # our first record is in the log, and confirmed
    lagging = sim.new_state()
    for r in sim.log.records:
        lagging.replay(r.offset, r.key, r.value, r.timestamp)
    sim.tick(20)
    member = sim.members["a"].member
    age = member.session_age_ms(sim.clock)
    assert age is not None and age < 3_000
    assert lagging.members["a"].seq < sim.view().members["a"].seq  # an older record of ours
    member.poll(lagging, sim.clock)
    assert member.session_age_ms(sim.clock) == age


def test_member_state_table() -> None:
    m = Member("g", "m", "i", ["t"], session_timeout_ms=1000, heartbeat_interval_ms=100)
    st = GroupState("g", 1000)
    acts = m.poll(st, 0)
    assert acts.state == "joining" and len(acts.writes) == 1
    with pytest.raises(ProtocolError, match="not allowed"):
        m._fire(MemberEvent.LEFT)
    m.leave()
    assert m.poll(st, 10).writes[-1].value is None  # the tombstone
    with pytest.raises(ProtocolError):
        m.poll(st, 20)
    states = {s for s, _ in MEMBER_TRANSITIONS} | set(MEMBER_TRANSITIONS.values())
    assert states == {"unjoined", "joining", "active", "fenced", "leaving", "left"}


def test_diff_and_adjust_cooperative() -> None:
    t = lambda *ps: frozenset(TP("t", p) for p in ps)  # noqa: E731
    assert diff(t(0, 1), t(1, 2)) == (t(2), t(0))
    adj = adjust_cooperative({"a": t(0, 1), "b": t(2, 3)}, {"a": t(0, 1, 2), "x": t(3)})
    assert adj.assigned == {"a": t(0, 1), "b": frozenset()}
    assert adj.revoke == {"a": t(2), "b": frozenset()}
    assert adj.pending == {"a": frozenset(), "b": t(2, 3)}
    assert not adj.complete


class _LagOnly(Assignor):
    name = "lag-test"
    uses_lag = True

    def _assign(self, counts, members, lags):  # type: ignore[no-untyped-def]
        ids = sorted(members)
        by_lag = sorted(lags, key=lambda p: (-lags[p], p))
        return {
            m: [p for i, p in enumerate(by_lag) if i % len(ids) == j] for j, m in enumerate(ids)
        }


def test_planner_asks_for_lags_only_when_it_runs_a_lag_assignor() -> None:
    st = GroupState("g", 10_000)
    st.replay(0, *encode(*member_record("g", "a", incarnation="i", seq=1, topics=["t"])), 1)
    p = Planner(_LagOnly(), "cooperative")
    assert p.needs_lags(st, {"t": 2})
    d = p.plan(st, {"t": 2})
    assert d.action == DecisionAction.NEED_LAGS and d.lag_topics == ("t",)
    d = p.plan(st, {"t": 2}, {TP("t", 0): 5, TP("t", 1): 9})
    assert d.action == DecisionAction.WRITE and d.record is not None
    st.replay(1, *d.encode(), 2)
    assert not p.needs_lags(st, {"t": 2})  # stable: no assignor run, no lags
    assert MemberSubscription(["t"]).topics == ("t",)


def test_a_record_on_its_way_keeps_the_session_running_from_its_prev_ts() -> None:
    # The log restarts a membership (voiding its claims) at a record appended a session or
    # more after its prev_ts. So while such a record is on its way, the member must not count
    # its session from a newer record it reads back meanwhile: it is fenced by its own clock
    # no later than the log time at which that record could void its claims.
    session = 1_000
    m = Member("g", "m", "i", ["t"], session_timeout_ms=session, heartbeat_interval_ms=100)
    st = GroupState("g", session)
    offset = 0

    def append(w: object, ts: int) -> None:
        nonlocal offset
        st.replay(offset, w.raw_key, w.raw_value, ts)  # type: ignore[attr-defined]
        offset += 1

    (w1,) = m.poll(st, 0).writes
    assert w1.value is not None and w1.value.prev_ts is None  # nothing of ours read back yet
    assert not m.poll(st, 5).writes  # and no second such record until we have
    append(w1, 0)
    (w2,) = m.poll(st, 10).writes  # read back: say prev_ts at once, the leader waits for it
    assert w2.value is not None and w2.value.prev_ts == 0 and w2.value.joined_at == 0
    append(w2, 10)
    m.poll(st, 20)  # w2 confirmed: the session runs from its send, 10
    assert m.session_age_ms(20) == 10
    (w3,) = m.poll(st, 120).writes  # heartbeats written before w3 is read back: both name w2
    (w4,) = m.poll(st, 230).writes
    assert w3.value is not None and w4.value is not None
    assert w3.value.prev_ts == w4.value.prev_ts == 10
    append(w3, 120)
    m.poll(st, 240)  # w3 read back; w4, which names w2, still on its way
    assert m.session_age_ms(240) == 230, "the session still runs from w2's send"
    assert m.session_age_ms(1010) == session  # lapsed, though w3 was read back at 240
    (w5,) = m.poll(st, 1010).writes
    assert w5.value is not None and w5.value.prev_ts is None  # says so: a new membership
    # w4 arrives late: the log restarts the membership, when our own clock had fenced us
    res = st.replay(offset, w4.raw_key, w4.raw_value, 1010)
    offset += 1
    assert res.new_membership and st.members["m"].joined_at == 1010


def _member_records(sim: GroupSim, mid: str) -> list[tuple[int, object]]:
    from groupkit.protocol.records import MemberKey, decode

    out = []
    for r in sim.log.records:
        k, v = decode(r.key, r.value)
        if isinstance(k, MemberKey) and k.member_id == mid:
            out.append((r.offset, v))
    return out


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
def test_a_caught_up_newcomer_is_planned_for_at_its_join_record(protocol: str) -> None:
    # Its first record (seq 1, no prev_ts) says it has seen the current generation: the leader
    # plans for it at once, without waiting for a second record that says prev_ts.
    sim = stable_pair(protocol)
    g = sim.view().generation
    sim.join("c")
    sim.tick()  # c writes its join record
    st = sim.view()
    assert st.members["c"].seq == 1 and not st.members["c"].ready
    assert ownership.is_newcomer_ready(st, "c") and not ownership.is_lagging(st, "c")
    sim.tick()  # the leader reads it and plans
    st = sim.view()
    assert st.generation == g + 1 and "c" in st.assignment.members  # type: ignore[union-attr]
    first_gen_offset = st.assignment_offset
    assert len([o for o, _ in _member_records(sim, "c") if o < first_gen_offset]) == 1
    sim.settle()
    assert sim.members["c"].member.owned


def test_a_newcomer_that_wrote_before_catching_up_waits_for_prev_ts() -> None:
    # c's join record was written before c had replayed the current generation (it reads
    # slowly): it is planned for only once its record says prev_ts, as before.
    sim = stable_pair()
    sim.join("c", read_rate=1)
    sim.tick()
    st = sim.view()
    assert st.members["c"].seen_generation < st.generation
    assert not ownership.is_newcomer_ready(st, "c") and ownership.is_lagging(st, "c")
    while sim.view().members["c"].seq == 1:
        sim.tick()
        assert not ownership.is_newcomer_ready(sim.view(), "c")
        assert "c" not in sim.view().assignment.members  # type: ignore[union-attr]
    sim.members["c"].read_rate = None
    sim.settle()


def test_a_member_that_lapsed_is_not_planned_for_until_it_reads_back() -> None:
    # A lapsed member's fresh record (no prev_ts) is not its first: it stays out of the plan
    # until its record says prev_ts again, even though it has seen the current generation.
    sim = stable_pair()
    sim.pause("b", 2 * sim.session_timeout_ms)
    while sim.members["b"].paused_until > sim.clock:
        sim.tick()
    sim.members["b"].read_rate = 0  # b resumes, writes, but reads nothing back
    sim.tick()
    st = sim.view()
    b = st.members["b"]
    assert b.seq > 1 and not b.ready and b.seen_generation >= st.generation - 1
    for _ in range(30):
        sim.tick()
        st = sim.view()
        assert (
            ownership.is_lagging(st, "b")
            and not ownership.is_newcomer_ready(st, "b")
            and not st.covers("b")
        )
    sim.members["b"].read_rate = None
    sim.settle()
    assert sim.members["b"].member.owned


def test_a_member_back_from_a_lapse_is_ready_only_once_it_reads_back_quickly() -> None:
    # Member._basis: back from a lapse, b says prev_ts again only once its own record came back
    # within half its fence time. Read back slower (here 3/4 of it), b writes another record
    # without prev_ts and stays out of the plan; read back at once, the next one is ready. (A
    # reader at 4 records a tick would otherwise flap in and out of the group: planned for as
    # soon as it saw a record, put behind again by the rebalance's own records.)
    sim = stable_pair()
    sim.pause("b", 2 * sim.session_timeout_ms)
    while sim.members["b"].paused_until > sim.clock:
        sim.tick()
    b = sim.members["b"]
    b.read_rate = 0  # b resumes and writes a fresh record, but reads nothing back for a while
    sim.tick()
    back = sim.view().members["b"]
    assert back.seq > 1 and not back.ready
    sim.tick(sim.session_timeout_ms * 3 // 4 // sim.tick_ms)
    b.read_rate = None
    seen: dict[int, bool] = {}
    for _ in range(10):
        sim.tick()
        st = sim.view()
        m = st.members["b"]
        seen[m.seq] = m.ready
        if not m.ready:
            assert ownership.is_lagging(st, "b") and not st.covers("b")
    after = [ready for seq, ready in sorted(seen.items()) if seq > back.seq]
    assert after[:1] == [False], seen  # read back slowly: not ready yet
    assert True in after and after[after.index(True) :] == [True] * len(after[after.index(True) :])
    sim.settle()
    assert sim.members["b"].member.owned


@pytest.mark.parametrize("backlog", [130, 146])
@pytest.mark.parametrize("release", [None, 100])
def test_a_member_back_from_a_lapse_takes_no_grant_its_own_restart_voided(
    backlog: int, release: int | None
) -> None:
    # A schedule of TestStaticCompactedSchedule (not static-specific). m1 reads 4 records a tick
    # behind a backlog: its second record goes out without prev_ts (it has read nothing of its
    # own yet). As leader in its own replay (m2 is paused), it plans generation 1 for itself and
    # m0. Then it reads its second record back late, and so, back from a lapse (_basis), writes
    # its third without prev_ts although its session holds: a new membership where it lands,
    # voiding generation 1's grants for it. m2, caught up, plans generation 2 and takes t1-0.
    # m1 must not take generation 1's t1-0 in the replay that has not reached its own restart
    # yet (Member.poll: nothing is taken while a record of ours without prev_ts is on its way).
    sim = GroupSim({"t0": 3, "t1": 1}, protocol="cooperative", assignor="cooperative-sticky",
                   release_delay_ms=release, session_timeout_ms=2_000,
                   heartbeat_interval_ms=300, rebalance_timeout_ms=4_000)  # fmt: skip
    for _ in range(backlog):
        sim.inject(b"junk", b"junk")
    sim.join("m0", ["t0"], read_rate=4)
    sim.join("m2", ["t1"])
    sim.pause("m2", 2_454)
    sim.join("m1", ["t0", "t1"], read_rate=4)
    for _ in range(100):
        sim.tick()
        assert not sim.violations()
    m1 = sim.members["m1"].member
    assert m1._seq >= 3 and m1.acked >= 1  # it did come back, and did act on a generation
    sim.members["m0"].read_rate = sim.members["m1"].read_rate = None
    sim.settle()


@pytest.mark.parametrize("release", [None, 300])
def test_a_released_pending_partition_is_taken_before_the_follow_up(release: int | None) -> None:
    # Cooperative join: b's partitions t0-2, t0-3 are pending for c until b lets go. At b's
    # release record, nobody but c may hold them: c takes them there, and the log counts them
    # for c (may_hold) until the leader's follow-up grants them, so no other grant can have them.
    sim = GroupSim({"t0": 6}, release_delay_ms=release)
    for m in "ab":
        sim.join(m)
        sim.settle()
    g = sim.view().generation
    sim.join("c")
    taken_at_gen = None
    while not sim.is_stable():
        sim.tick()
        assert not sim.violations()
        st = sim.view()
        c = sim.members["c"]
        if taken_at_gen is None and c.member.owned - st.assignment.assigned("c"):  # type: ignore[union-attr]
            taken_at_gen = st.generation
            handed = c.member.owned - st.assignment.assigned("c")  # type: ignore[union-attr]
            assert st.assignment.phase == "partial"  # type: ignore[union-attr]
            assert handed <= ownership.handoffs(st, "c") and handed <= ownership.may_hold(st, "c")
            assert all(ownership.holders(st)[p] == {"c"} for p in handed)
            # a reader that started from the compacted log (it may lack holds and history)
            # reserves them for c alike, but would not take a handoff itself for a session
            fresh = sim.new_state()
            for r in sim.log.compacted(tombstones_before=0):
                fresh.replay(r.offset, r.key, r.value, r.timestamp)
            assert fresh.offset == st.offset and handed <= ownership.may_hold(fresh, "c")
            assert not ownership.handoffs(fresh, "c")
    assert taken_at_gen == g + 1, "taken before the follow-up generation"
    assert sim.view().generation >= g + 2  # the follow-ups still come, off the critical path


@pytest.mark.parametrize("release", [100, 300])
def test_one_follow_up_for_several_owners_that_let_go_one_after_another(release: int) -> None:
    # A join takes a partition from each of three owners, which let go 200 ms apart. The
    # newcomer takes each at its owner's release (a handoff), so the leader's follow-up waits
    # for the last one (planner._handed_off): two generations, not one more per owner (every
    # generation is a record each member reads and acknowledges, mid-rebalance). With range:
    # a sticky assignor's join is an admission, whose plan waits until the newcomer owns its
    # share (Planner.admission_under_way), so no partial generation is made for it.
    sim = GroupSim({"t0": 16}, protocol="cooperative", assignor="range",
                   release_delay_ms=release, session_timeout_ms=3_000,
                   heartbeat_interval_ms=300, rebalance_timeout_ms=4_000)  # fmt: skip
    for i in range(4):
        sim.join(f"m{i}")
    sim.settle()
    g = sim.view().generation
    sim.join("new")
    while sim.view().generation == g:
        sim.tick()
    partial = sim.view().assignment
    assert partial is not None and partial.phase == "partial"
    owners = sorted(m for m, c in partial.members.items() if c.revoke)
    assert len(owners) >= 3
    for k, m in enumerate(owners):
        sim.pause(m, 200 * (k + 1))
    target = partial.target("new")
    took_all_at = None
    while not sim.is_stable():
        sim.tick()
        assert not sim.violations()
        if took_all_at is None and sim.members["new"].member.owned == target:
            took_all_at = sim.view().generation
    assert sim.view().generation == g + 2
    assert took_all_at == g + 1  # all of it by handoffs, before the follow-up


def test_a_handoff_is_reserved_for_its_target_across_a_newer_generation() -> None:
    # c was handed t0-2 (its owner let go) but its record does not claim it yet when a newer
    # generation arrives: the log must keep it for c until c's record says it has seen that
    # generation, or the newer generation could grant it elsewhere while c processes it.
    from groupkit.protocol.records import covered_member

    st = GroupState("g", 10_000, 30_000)
    off = iter(range(1000))

    def feed(k: bytes, v: bytes | None, ts: int) -> None:
        st.replay(next(off), k, v, ts)

    def member(mid: str, seq: int, owned: list[int], acked: int, seen: int, ts: int,
               prev: int | None = 0) -> None:  # fmt: skip
        k, v = member_record(
            "g", mid, incarnation="i", seq=seq, topics=["t0"], owned=[("t0", p) for p in owned],
            owned_generation=acked if owned else 0, acked_generation=acked, seen_generation=seen,
            joined_at=0, prev_ts=prev, since_generation=1,
        )  # fmt: skip
        feed(*encode(k, v), ts)

    def assign(gen: int, phase: str, ms: dict[str, tuple[list[int], list[int], list[int]]],
               ts: int) -> None:  # fmt: skip
        k, v = assignment_record(
            "g", generation=gen, leader_id="a", leader_incarnation="i", leader_joined_at=0,
            protocol="cooperative", phase=phase, assignor="range", partition_counts={"t0": 3},
            members={m: covered_member("i", ["t0"], [("t0", p) for p in a],
                                       [("t0", p) for p in r], [("t0", p) for p in pe])
                     for m, (a, r, pe) in ms.items()},
        )  # fmt: skip
        feed(*encode(k, v), ts)

    member("a", 1, [], 0, 0, 0, prev=None)
    member("b", 1, [], 0, 0, 1, prev=None)
    member("c", 1, [], 0, 0, 2, prev=None)
    member("a", 2, [], 0, 0, 3)
    member("b", 2, [], 0, 0, 4)
    member("c", 2, [], 0, 0, 5)
    assign(1, "complete", {"a": ([0], [], []), "b": ([1, 2], [], []), "c": ([], [], [])}, 6)
    member("a", 3, [0], 1, 1, 7)
    member("b", 3, [1, 2], 1, 1, 8)
    member("c", 3, [], 1, 1, 9)
    assign(2, "partial", {"a": ([0], [], []), "b": ([1], [2], []), "c": ([], [], [2])}, 10)
    member("c", 4, [], 2, 2, 11)  # c acked 2, nothing to take yet
    assert ownership.handoffs(st, "c") == frozenset()
    member("b", 4, [1], 2, 2, 12)  # b lets go of t0-2: handed to c at this offset
    assert ownership.handoffs(st, "c") == {TP("t0", 2)} and ownership.holders(st)[TP("t0", 2)] == {
        "c"
    }
    # a newer generation (say, a subscription change) that would give t0-2 to a: unsafe
    k, v = assignment_record(
        "g", generation=3, leader_id="a", leader_incarnation="i", leader_joined_at=0,
        protocol="cooperative", phase="complete", assignor="range", partition_counts={"t0": 3},
        members={"a": covered_member("i", ["t0"], [("t0", 0), ("t0", 2)]),
                 "b": covered_member("i", ["t0"], [("t0", 1)]),
                 "c": covered_member("i", ["t0"], [])},
    )  # fmt: skip
    before = st.rejections["unsafe_grant"]
    feed(*encode(k, v), 13)
    assert st.rejections["unsafe_grant"] == before + 1 and st.generation == 2
    # a newer generation that keeps it pending for someone else: accepted, yet still c's
    # (reserved for a too: each blocks the other's handoff, and a grant to a third member)
    assign(3, "partial", {"a": ([0], [], [2]), "b": ([1], [], []), "c": ([], [], [])}, 14)
    assert TP("t0", 2) in ownership.may_hold(st, "c") and ownership.holders(st)[TP("t0", 2)] == {
        "a",
        "c",
    }
    assert TP("t0", 2) not in ownership.granted(st, "a")  # a's grant waits for c
    assert ownership.handoffs(st, "a") == frozenset()  # c may have taken it at the older generation
    member("c", 5, [2], 2, 2, 15)  # c's record, written before it saw generation 3, claims it
    assert st.members["c"].claims == {TP("t0", 2)} and not st.rejections["unowned_claim"]
    member("c", 6, [], 3, 3, 16)  # c saw generation 3 and let go (not its target)
    assert ownership.handoffs(st, "a") == {TP("t0", 2)} and TP("t0", 2) not in ownership.may_hold(
        st, "c"
    )


def test_a_reservation_does_not_depend_on_holds_a_compacted_reader_lacks() -> None:
    # c's partition t0-2 is pending because the hold of b's old incarnation has it. A reader
    # that starts from the compacted log lost the record that started the hold. Both readers
    # must still reserve t0-2 for c alike (a handoff would read the hold: the full reader hands
    # nothing, the compacted one could have), so the hold c's leave starts is the same for both,
    # and so is their verdict on a later grant of t0-2 (hypothesis found the divergence).
    log: list[tuple[bytes, bytes | None, int]] = []

    def member(mid: str, inc: str, seq: int, owned: list[int], acked: int, ts: int,
               prev: int | None, joined: int = 0, since: int = 1) -> None:  # fmt: skip
        k, v = member_record(
            "g", mid, incarnation=inc, seq=seq, topics=["t0"], owned=[("t0", p) for p in owned],
            owned_generation=acked if owned else 0, acked_generation=acked, seen_generation=acked,
            joined_at=joined if prev is not None else None, prev_ts=prev,
            since_generation=since if prev is not None else 0,
        )  # fmt: skip
        log.append((*encode(k, v), ts))

    def assign(gen: int, phase: str, ms: dict[str, tuple[str, list[int], list[int]]],
               ts: int) -> None:  # fmt: skip
        k, v = assignment_record(
            "g", generation=gen, leader_id="a", leader_incarnation="i", leader_joined_at=0,
            protocol="cooperative", phase=phase, assignor="range", partition_counts={"t0": 3},
            members={m: covered_member(inc, ["t0"], [("t0", p) for p in a], [],
                                       [("t0", p) for p in pe])
                     for m, (inc, a, pe) in ms.items()},
        )  # fmt: skip
        log.append((*encode(k, v), ts))

    member("a", "i", 1, [], 0, 0, None)
    member("b", "i1", 1, [], 0, 1, None)
    member("a", "i", 2, [], 0, 2, 0)
    member("b", "i1", 2, [], 0, 3, 1)
    assign(1, "complete", {"a": ("i", [0], []), "b": ("i1", [1, 2], [])}, 4)
    member("a", "i", 3, [0], 1, 5, 2)
    member("b", "i1", 3, [1, 2], 1, 6, 3)
    member("b", "i2", 1, [], 0, 7, None)  # b restarts: b/i1's t0-1, t0-2 held until 10006
    member("c", "i", 1, [], 0, 8, None)
    member("b", "i2", 2, [], 1, 9, 7, joined=7, since=2)
    member("c", "i", 2, [], 1, 10, 8, joined=8, since=2)
    assign(2, "partial", {"a": ("i", [0], []), "b": ("i2", [], [1]), "c": ("i", [], [2])}, 11)
    member("c", "i", 3, [], 2, 12, 10, joined=8, since=2)
    clean_to = len(log)  # the cleaner reached here: the newest record of each key stays
    log.append((encode(*member_tombstone("g", "c"))[0], None, 13))  # c leaves
    member("a", "i", 4, [0], 2, 5_000, 5)
    member("b", "i2", 3, [], 2, 5_001, 9, joined=7, since=2)
    member("a", "i", 5, [0], 2, 10_006, 5_000)
    assign(3, "complete", {"a": ("i", [0, 2], []), "b": ("i2", [1], [])}, 10_007)

    full, fresh = GroupState("g", 10_000, 30_000), GroupState("g", 10_000, 30_000)
    newest = {k: o for o, (k, _, _) in enumerate(log[:clean_to])}
    for o, (k, v, ts) in enumerate(log):
        full.replay(o, k, v, ts)
        if o >= clean_to or newest[k] == o:
            fresh.replay(o, k, v, ts)
        if o == clean_to - 1:
            assert [h.holder for h in full.holds] == ["b/i1"] and not fresh.holds
            assert ownership.reserved(full, "c") == ownership.reserved(fresh, "c") == {TP("t0", 2)}
            assert not ownership.handoffs(full, "c") and not ownership.handoffs(
                fresh, "c"
            )  # the hold; the gap
        if o == clean_to:  # c left: its hold covers what it may have been handed
            assert {h.holder: h.partitions for h in full.holds}["c/i"] == {TP("t0", 2)}
            assert [(h.holder, h.partitions) for h in fresh.holds] == [("c/i", {TP("t0", 2)})]
    # b/i1's hold has run out, c's has not: both reject the grant of t0-2 to a
    assert full.generation == fresh.generation == 2
    assert full.rejections["unsafe_grant"] == fresh.rejections["unsafe_grant"] == 1


def test_a_snapshot_is_written_only_by_a_reader_that_knows_its_holds() -> None:
    # A state restored from a snapshot takes handoffs at once (ownership.handoffs), trusting
    # that its writer knew every hold: so a leader that started from the compacted topic less
    # than a session ago (it may lack holds) writes no snapshot yet.
    sim = GroupSim({"t0": 4}, snapshot_every_ms=1_000)
    for m in "ab":
        sim.join(m)
    sim.settle()
    sim.tick(20)
    lead = sim.members[sim.view().leader].node  # type: ignore[index]
    restored = from_snapshot(to_snapshot(sim.view(), "x", "i0"), sim.session_timeout_ms)
    assert ownership.knows_holds(restored) and ownership.knows_holds(sim.view())
    fresh = sim.new_state()
    for r in sim.log.compacted():
        fresh.replay(r.offset, r.key, r.value, r.timestamp)
    assert fresh.leader == lead.member_id and not ownership.knows_holds(fresh)
    lead.state, lead._snapshot_ts, lead._snapshot_sent = fresh, None, None
    assert lead.snapshot_due(sim.clock) is None
    lead.state = restored
    assert lead.snapshot_due(sim.clock) is not None
