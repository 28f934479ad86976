"""Static membership (KIP-345) over random schedules of the simulator.

A static member's member id is its ``group.instance.id``: the *seat* the group keeps for it.
Properties, both protocols, every assignor:

(a) **Never two running owners**, including two processes started with one instance id: the
    random schedules of ``test_protocol_hypothesis`` (slow readers, pauses, crashes, leaves,
    injected and replayed records, deferred revocations) plus static restarts (close without
    leaving, crash) and duplicate processes, checked after every tick; and the same against
    readers of the compacted topic (``test_protocol_compaction``'s agreement check) and with
    the control partition's leadership moving between skewed brokers.
(b) **A restart within the session is no rebalance**: the new process gets back exactly the
    partitions its seat had; no other member sees a revoke, an assign or a loss; the
    generation does not change. Drawn: group size, partitions, protocol, assignor, how the old
    process ends (``close()`` that keeps the seat, a crash, or still running: a duplicate), how
    long before the new one starts, deferred revocations, and where the seat is the leader.
(c) **After the session the seat is given away as usual**: a static member that does not come
    back within its session is expired and its partitions go to the others.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from groupkit.assignors import assignor_names
from groupkit.protocol import ownership
from groupkit.protocol.records import encode, member_record
from groupkit.protocol.vocab import MemberPhase
from groupkit.testing.sim import GroupSim
from groupkit.types import TopicPartition
from tests.test_protocol_compaction import CompactedSchedule
from tests.test_protocol_hypothesis import IDS, GroupSchedule, schedule_settings
from tests.test_protocol_skew import SkewedSchedule

EXAMPLES = int(os.environ.get("GROUPKIT_PROTOCOL_EXAMPLES", "1000"))
#: the ids that run as static members in the schedules (the others stay dynamic)
STATIC = IDS[:3]


class StaticRules:
    """Rules a schedule adds for static members (mixed into the schedules below)."""

    sim: GroupSim
    _alive: Callable[[], list[str]]

    def is_static(self, member_id: str) -> bool:
        return member_id in STATIC

    @rule(mid=st.sampled_from(IDS), rate=st.sampled_from([None, None, 4, 8]),
          topics=st.sampled_from([["t0"], ["t1"], ["t0", "t1"]]))  # fmt: skip
    def join(self, mid: str, rate: int | None, topics: list[str]) -> None:
        sm = self.sim.members.get(mid)
        if sm is None or sm.crashed or sm.member.state == MemberPhase.LEFT:
            self.sim.members.pop(mid, None)
            self.sim.join(mid, topics, read_rate=rate, static=mid in STATIC)

    @precondition(lambda self: any(m in STATIC for m in self._alive()))
    @rule(data=st.data())
    def close_static(self, data: st.DataObject) -> None:
        """``close()`` of a static member: it stops, and its seat waits for it a session."""
        mid = data.draw(st.sampled_from([m for m in self._alive() if m in STATIC]))
        if self.sim.members[mid].member.state not in ("leaving", "left", "unjoined"):
            self.sim.park(mid)

    @precondition(lambda self: any(m in STATIC for m in self._alive()))
    @rule(data=st.data(), rate=st.sampled_from([None, None, 4]))
    def start_twice(self, data: st.DataObject, rate: int | None) -> None:
        """A second process with a running one's instance id (a pod started twice)."""
        mid = data.draw(st.sampled_from([m for m in self._alive() if m in STATIC]))
        sm = self.sim.members[mid]
        if sm.member.state not in ("leaving", "left") and sm not in self.sim.displaced:
            self.sim.join(mid, sm.member.topics, read_rate=rate, static=True)

    @precondition(lambda self: bool(self._alive()))
    @rule(data=st.data())
    def poll_fences_alone(self, data: st.DataObject) -> None:
        """The runtime's ``poll`` thread fenced a member by its own clock and stopped what it
        owns as lost, while the control loop then confirmed a newer heartbeat, so the member
        itself never fenced (``Coordinator.lost``): its run goes on. A static seat's grant
        stays the seat's, and it takes it back (docs/protocol.md, rules 9.7 and 10.9); a
        dynamic member's the leader plans again (``partitions_lost``)."""
        mid = data.draw(st.sampled_from(self._alive()))
        sm = self.sim.members[mid]
        if sm.member.owned and sm.member.state not in ("leaving", "left"):
            sm.node.released(sm.member.owned)

    @rule(data=st.data(), mid=st.sampled_from(STATIC))
    def forge_join(self, data: st.DataObject, mid: str) -> None:
        """A forged static join (unsigned log): it may take a seat, never a partition."""
        recs = self.sim.log.records
        seat_ts = recs[-1].timestamp if recs else 0
        k, v = member_record(
            self.sim.group, mid, incarnation=f"forged{len(recs)}", seq=1, topics=["t0"],
            owned=[("t0", 0)] if data.draw(st.booleans()) else [], joined_at=0, prev_ts=None,
            instance_id=mid, seat="i1", seat_ts=seat_ts,
            seen_generation=self.sim.view().generation,
        )  # fmt: skip
        self.sim.inject(*encode(k, v))


class StaticSchedule(StaticRules, GroupSchedule):
    """(a): the random schedules, with static members, restarts and duplicates."""


class StaticCompactedSchedule(StaticRules, CompactedSchedule):
    """(a) against readers of the compacted topic: they agree with the full replay, through
    static restarts (close, crash, and a new process within the session).

    Not drawn here: forged joins (agreement with a compacted reader is not promised for forged
    records, which signing keeps out: test_protocol_compaction's rule 3), and two processes
    running with one instance id at once: a reader that sees only the newest record of that id
    cannot tell them apart (docs/protocol.md, "Replay": compaction). Their safety is
    checked in the other schedules."""

    @precondition(lambda self: False)
    @rule()
    def forge_join(self) -> None:  # type: ignore[override]
        raise AssertionError("not drawn")

    @precondition(lambda self: False)
    @rule()
    def start_twice(self) -> None:  # type: ignore[override]
        raise AssertionError("not drawn")


class StaticSkewedSchedule(StaticRules, SkewedSchedule):
    """(a) while the control partition moves between brokers whose clocks differ."""


StaticSchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestStaticSchedule = StaticSchedule.TestCase
StaticCompactedSchedule.TestCase.settings = schedule_settings(max(EXAMPLES // 4, 25))
TestStaticCompactedSchedule = StaticCompactedSchedule.TestCase
StaticSkewedSchedule.TestCase.settings = schedule_settings(max(EXAMPLES // 4, 25))
TestStaticSkewedSchedule = StaticSkewedSchedule.TestCase


# ------------------------------------------------------------------ (b) and (c)

SESSION = 6_000


def stable_static_group(protocol: str, assignor: str, members: int, t0: int, t1: int,
                        release: int | None) -> GroupSim:  # fmt: skip
    sim = GroupSim({"t0": t0, "t1": t1}, protocol=protocol, assignor=assignor,
                   session_timeout_ms=SESSION, heartbeat_interval_ms=500,
                   rebalance_timeout_ms=4_000, release_delay_ms=release,
                   keep_actions=True)  # fmt: skip
    for i in range(members):
        sim.join(f"s{i}", static=True)
    sim.settle()
    return sim


@settings(max_examples=max(EXAMPLES // 4, 25), deadline=None, derandomize=True)
@given(
    protocol=st.sampled_from(["eager", "cooperative"]),
    assignor=st.sampled_from(assignor_names()),
    members=st.integers(2, 5),
    t0=st.integers(1, 9),
    t1=st.integers(0, 4),
    release=st.sampled_from([None, 0, 300]),
    how=st.sampled_from(["close", "crash", "duplicate"]),
    who=st.integers(0, 4),
    away_ms=st.integers(0, SESSION - 1_500),
)
def test_restart_within_the_session_is_no_rebalance(
    protocol: str, assignor: str, members: int, t0: int, t1: int, release: int | None,
    how: str, who: int, away_ms: int,
) -> None:  # fmt: skip
    """(b) and (a): the restarted process takes back exactly its seat's partitions, nobody
    else sees anything, the generation stays, and two processes never both own one."""
    sim = stable_static_group(protocol, assignor, members, t0, t1, release)
    victim = f"s{who % members}"
    gen = sim.view().generation
    before = {i: sm.member.owned for i, sm in sim.members.items()}
    assert set().union(*before.values()) == sim.expected_partitions()
    for sm in sim.members.values():
        sm.actions.clear()
    if how == "close":
        sim.park(victim)
        while sim.members[victim].member.state != MemberPhase.LEFT:  # close() returns once it wrote
            sim.tick()
    elif how == "crash":
        sim.crash(victim)
    for _ in range(away_ms // sim.tick_ms):
        sim.tick()
        assert not sim.violations(), sim.describe()
    new = sim.join(victim, static=True)
    for _ in range(SESSION * 2 // sim.tick_ms):
        sim.tick()
        assert not sim.violations(), sim.describe()
        if new.member.owned == before[victim] and all(
            d.member.state == MemberPhase.LEFT for d in sim.displaced
        ):
            break
    assert new.member.owned == before[victim], sim.describe()
    assert sim.view().generation == gen, sim.describe()
    for i, sm in sim.members.items():
        if i != victim:
            assert sm.member.owned == before[i]
            seen = [a for a in sm.actions if a.assign or a.revoke or a.lost]
            assert not seen, (i, seen)
    if how == "duplicate":  # the old process was fenced: newest join wins
        old = sim.displaced[0]
        assert (
            old.member.state == MemberPhase.LEFT and old.member.superseded and not old.member.owned
        )
    # a close hands over at once: only the time the new process takes to read its join back
    if how == "close":
        assert sim.view().rejections["fenced_instance"] == 0


@settings(max_examples=max(EXAMPLES // 10, 20), deadline=None, derandomize=True)
@given(
    protocol=st.sampled_from(["eager", "cooperative"]),
    assignor=st.sampled_from(assignor_names()),
    members=st.integers(2, 4),
    t0=st.integers(2, 8),
    how=st.sampled_from(["close", "crash"]),
)
def test_after_the_session_the_seat_is_given_away(
    protocol: str, assignor: str, members: int, t0: int, how: str
) -> None:
    """(c) A static member that does not come back within its session is expired; the others
    take its partitions, and it comes back as a new member, not into its old seat."""
    sim = stable_static_group(protocol, assignor, members, t0, 0, None)
    victim = "s0"
    gen = sim.view().generation
    if how == "close":
        sim.park(victim)
    else:
        sim.crash(victim)
    sim.tick(SESSION // sim.tick_ms + 5)
    sim.settle()
    st_ = sim.view()
    assert victim not in st_.live_members() and st_.generation > gen
    owners = sim.owners()
    assert set(owners) == sim.expected_partitions() and victim not in {
        m for ms in owners.values() for m in ms
    }
    expired_gen = st_.generation
    back = sim.join(victim, static=True)
    sim.settle()
    assert sim.view().generation > expired_gen  # a join, planned as any
    assert sim.view().members[victim].incarnation == back.member.incarnation


def test_a_close_that_leaves_gives_the_seat_away_at_once() -> None:
    """``leave()`` (close with leave) of a static member: the tombstone ends the seat now."""
    sim = stable_static_group("cooperative", "range", 3, 6, 0, None)
    gen = sim.view().generation
    sim.leave("s1")
    sim.settle()
    assert "s1" not in sim.view().members and sim.view().generation > gen
    assert sum(len(sm.member.owned) for sm in sim.running()) == 6


def test_records_of_the_replaced_process_are_refused() -> None:
    """Newest join wins: once a new process took the seat, a heartbeat of the old one is
    rejected (``fenced_instance``) and the old process stops without a record more."""
    sim = stable_static_group("cooperative", "range", 2, 4, 0, None)
    old = sim.members["s0"]
    owned = old.member.owned
    old.paused_until = sim.clock + 10_000_000  # frozen: it has not read the new join yet
    sim.join("s0", static=True)
    sim.tick(3)
    old.paused_until = 0
    n = len(sim.log.records)
    sim.tick(1)
    assert old.member.superseded and old.member.state == MemberPhase.LEFT
    assert len(sim.log.records) >= n
    # its partitions stay held until its session (from its last record) ends
    assert owned <= ownership.held(sim.view())
    sim.settle()
    assert sim.members["s0"].member.owned == owned
    # a heartbeat of the replaced process, replayed into the log, is refused
    k, v = member_record(sim.group, "s0", incarnation=old.member.incarnation, seq=99,
                         topics=["t0", "t1"], owned=[], joined_at=0, prev_ts=sim.clock,
                         instance_id="s0")  # fmt: skip
    sim.inject(*encode(k, v))
    sim.tick()
    assert sim.view().rejections["fenced_instance"] >= 1
    assert sim.members["s0"].member.owned == owned


def test_instance_id_round_trips_and_old_records_decode_without_one() -> None:
    from groupkit.protocol.records import decode

    k, v = member_record("g", "pod-1", incarnation="i2", seq=1, topics=["t"], joined_at=5,
                         prev_ts=None, instance_id="pod-1", seat="i1", seat_ts=7)  # fmt: skip
    assert decode(*encode(k, v)) == (k, v)
    k2, v2 = member_record("g", "m", incarnation="i", seq=3, topics=["t"])
    _, got = decode(*encode(k2, v2))
    assert got is not None and got.instance_id is None and got.seat is None  # type: ignore[union-attr]
    assert TopicPartition("t", 0) not in v.owned


def test_a_snapshot_keeps_the_static_seats() -> None:
    """A state with a seat taken over survives a snapshot (encode, decode, restore) whole, and
    replays on alike."""
    from groupkit.protocol.records import SnapshotKey, decode_value, encode_value
    from groupkit.protocol.snapshot import from_snapshot, to_snapshot

    sim = stable_static_group("cooperative", "range", 3, 6, 0, None)
    sim.park("s1")
    while sim.members["s1"].member.state != MemberPhase.LEFT:
        sim.tick()
    sim.join("s1", static=True)
    sim.settle()
    st_ = sim.view()
    assert st_.members["s1"].process not in (None, st_.members["s1"].incarnation)
    rec = to_snapshot(st_, "s0", "i1")
    key = SnapshotKey(st_.group)
    back = decode_value(key, encode_value(key, rec))
    assert back == rec
    restored = from_snapshot(rec, sim.session_timeout_ms, sim.rebalance_timeout_ms)
    assert restored.members == st_.members
    sim.tick(30)
    for r in sim.log.records[rec.as_of + 1 :]:
        restored.replay(r.offset, r.key, r.value, r.timestamp)
    assert restored.fingerprint() == sim.view().fingerprint()
    assert restored.members == sim.view().members
