"""A reader that starts from a compacted control topic agrees with one that read everything.

Kafka's cleaner, having reached offset ``C``, leaves below ``C`` only the newest record of each
key (a tombstone stays until ``delete.retention.ms`` has passed) and every record from ``C`` on.
A member that starts then replays that. The random schedules of
``test_protocol_hypothesis`` run here, and after every tick a fresh :class:`GroupState` replays
the log as compacted at a random cleaning point; it must agree with the replay of the whole log
(at the same end offset) on:

- the **leader**: it decides which assignment records are accepted from now on;
- the **generation** and the **assignment record** itself: what every member takes and gives up;
- the **live members**, which of them the assignment **covers**, and which are **newcomers** the
  leader may plan for at their join record (``ownership.is_newcomer_ready``): what the leader
  plans from (``Planner.rebalance_reason``) and whether a member takes its grants
  (``Member.poll``);
- what the current generation's pending partitions are **reserved** for
  (``ownership.reserved``): a grant that one reader rejects as unsafe another must not accept,
  and a handoff claimed by its target must be no ``unowned_claim`` for any of them.
- the current generation's **admission** and what each member **inherits** from owners that are
  gone (docs/protocol.md, "Admission", "Inheritance"): reservations too.

What need not agree: what was lost with the compacted records and matters no more. Holds and
tombstones older than a session, rejection counters, and the assignment history the full reader
keeps for members that have not acknowledged a generation yet (``may_hold``), which the
compacted reader replaces by trusting the claims of the members it first sees.

A cleaning point is *admissible* unless the newest record of one of the group's keys below it is
one the full reader rejected: compaction then dropped the record that counted and kept one that
did not, and no replay rule can bring it back. The protocol repairs that itself: the leader
re-asserts a clobbered assignment (``GroupState.assignment_clobbered``), and a member's next
heartbeat supersedes a rejected copy of its record. Such points are counted, not checked.

Assumption: ``delete.retention.ms`` >= ``session.timeout.ms`` (Kafka's default is 24 hours), so
a tombstone is dropped only after the hold it starts has run out.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from groupkit.protocol import ownership
from groupkit.protocol.group import Hold
from groupkit.protocol.records import (
    AssignmentKey,
    AssignmentRecord,
    MemberKey,
    MemberRecord,
    assignment_record,
    covered_member,
    decode_key,
    decode_value,
    encode,
    encode_key,
    encode_value,
    member_record,
)
from groupkit.protocol.state import GroupState
from groupkit.testing.logs import LogRecord
from groupkit.testing.sim import GroupSim
from groupkit.types import TopicPartition
from tests.test_protocol_hypothesis import IDS, GroupSchedule, schedule_settings

EXAMPLES = int(os.environ.get("GROUPKIT_COMPACTION_EXAMPLES", "150"))
#: measuring mode (``GROUPKIT_COMPACTION_TALLY=1``): count disagreements in TALLY, do not fail
TALLY_ONLY = os.environ.get("GROUPKIT_COMPACTION_TALLY") == "1"
TALLY: Counter[str] = Counter()


def agreed(st: GroupState) -> tuple[object, ...]:
    """What a reader of the compacted log must agree on (see the module docstring)."""
    live = st.live_members()
    return (
        st.leader,
        st.generation,
        st.assignment,
        sorted(live),
        sorted(m for m in live if st.covers(m)),
        sorted(m for m in live if ownership.is_newcomer_ready(st, m)),
        {m: ownership.reserved(st, m) & _pending(st, m) for m in live},
        # the current generation's admission (docs/protocol.md, "Admission"); like reservations, an
        # older generation's is not agreed on: a reader may never see that generation's record
        ownership.admission(st),
        sorted(m for m in live if st.members[m].admitted_in == st.generation),
        # what each member inherits in the current generation (docs/protocol.md, "Inheritance")
        {m: ownership.inherited(st, m) for m in live},
    )


def _pending(st: GroupState, member_id: str) -> frozenset[object]:
    a = st.assignment
    c = a.members.get(member_id) if a is not None else None
    return c.pending if c is not None else frozenset()


def replay(sim: GroupSim, records: list[LogRecord]) -> GroupState:
    st = sim.new_state()
    for r in records:
        st.replay(r.offset, r.key, r.value, r.timestamp)
    return st


class FullReader:
    """The replay of the whole log, remembering which group keys' records it rejected."""

    def __init__(self, sim: GroupSim) -> None:
        self.sim = sim
        self.state = sim.new_state()
        self.rejected: set[int] = set()

    def follow(self) -> GroupState:
        for r in self.sim.log.records[self.state.offset + 1 :]:
            res = self.state.replay(r.offset, r.key, r.value, r.timestamp)
            if res.kind == "rejected" and res.key is not None and res.key.group == "g":
                self.rejected.add(r.offset)
        return self.state

    def admissible(self, clean_to: int) -> bool:
        last: dict[bytes | None, int] = {}
        for r in self.sim.log.records[:clean_to]:
            last[r.key] = r.offset
        return not any(o in self.rejected for o in last.values())


def compacted_reader(
    sim: GroupSim, full: FullReader, rng: random.Random
) -> tuple[GroupState, GroupState, int] | None:
    """``(fresh, full, clean_to)``: the full replay, and a fresh reader's of the log compacted
    at a random point; ``None`` where that point cannot be had (see :meth:`FullReader.
    admissible`) or nothing is in the log yet."""
    st = full.follow()
    end = st.offset
    if end < 0:
        return None
    # cleaning points anywhere, and more of them near the head, where the cleaner usually is
    clean_to = rng.choice([rng.randint(0, end), end - rng.randint(0, min(end, 30))])
    if not full.admissible(clean_to):
        TALLY["inadmissible"] += 1
        return None
    retention = sim.session_timeout_ms * rng.choice([1, 2, 5])
    return replay(sim, sim.log.compacted(clean_to, sim.clock - retention)), st, clean_to


def check_compacted(sim: GroupSim, full: FullReader, rng: random.Random) -> str | None:
    """Compact at a random point; ``None`` if the fresh reader agrees, else what differs."""
    got = compacted_reader(sim, full, rng)
    if got is None:
        return None
    fresh, st, clean_to = got
    end = st.offset
    TALLY["checked"] += 1
    if agreed(fresh) == agreed(st):
        return None
    names = (
        "leader",
        "generation",
        "assignment",
        "live",
        "covered",
        "newcomers",
        "reserved",
        "admission",
        "admitted",
        "inherited",
    )
    diffs = [n for n, a, b in zip(names, agreed(fresh), agreed(st), strict=True) if a != b]
    for d in diffs:
        TALLY[d] += 1
    TALLY["disagreements"] += 1
    return (
        f"compacted at {clean_to} of {end}: {diffs} differ; "
        f"compacted: {agreed(fresh)[:2]}, full: {agreed(st)[:2]}"
    )


class FullReaderRules(GroupSchedule):
    """A seeded random source for cleaning points, and the full replay of the current
    simulation to compare compacted readers with (:meth:`full_reader`)."""

    @initialize(seed=st.integers(0, 2**32 - 1))
    def seed(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.full: FullReader | None = None

    def full_reader(self) -> FullReader | None:
        """The full replay of this simulation (a new one when the simulation is new);
        ``None`` before the schedule has both its seed and its simulation."""
        if not hasattr(self, "rng") or not hasattr(self, "sim"):
            return None
        if self.full is None or self.full.sim is not self.sim:
            self.full = FullReader(self.sim)
        return self.full


class CompactedSchedule(FullReaderRules):
    """The schedules of ``test_protocol_hypothesis``, checked against compacted readers too."""

    @invariant()
    def check(self) -> None:
        super().check()
        before = getattr(self, "full", None)
        full = self.full_reader()
        if full is None:
            return
        if full is not before:
            self.deadlines: dict[tuple[str, str], int] = {}
        self.check_deadlines()
        TALLY["ticks"] += 1
        err = check_compacted(self.sim, full, self.rng)
        if not TALLY_ONLY:
            assert err is None, err

    def is_static(self, member_id: str) -> bool:
        """Whether the schedule runs ``member_id`` as a static member (none here)."""
        return False

    @precondition(lambda self: bool(self._alive()))
    @rule(data=st.data(), newcomer=st.sampled_from(IDS), older_leave=st.booleans())
    def restart_then_compacted_join(
        self, data: st.DataObject, newcomer: str, older_leave: bool
    ) -> None:
        """A running member restarts while its process is live (what that process may hold is
        held), and a newcomer starts from the log as compacted now, within that session; with
        ``older_leave``, every other member leaves, then the restarted one, so the newcomer leads
        while the hold lasts.
        Readers of the log compacted at random points then agree with the full replay
        (``check``); the newcomer starts from the compacted log only where its end is an
        admissible cleaning point, else it reads it whole."""
        mid = data.draw(st.sampled_from(self._alive()))
        sm = self.sim.members[mid]
        if mid == newcomer or sm.member.state in ("leaving", "left", "unjoined"):
            return
        self.sim.crash(mid)
        self.sim.members.pop(mid)
        self.sim.join(mid, sm.member.topics, static=sm.member.instance_id is not None)
        self.tick(data.draw(st.integers(1, 3)))
        old = self.sim.members.get(newcomer)
        if old is not None and not old.crashed and old.member.state != "left":
            return
        self.sim.members.pop(newcomer, None)
        full = self.full_reader()
        end = full.follow() if full is not None else None
        compacted = full is not None and full.admissible(self.sim.visible())
        if end is not None and compacted:
            # Not where the full replay has a hold that the newest record of its member id,
            # which compaction keeps, does not echo: one a tombstone started, or a static seat's
            # in version 2 (docs/protocol.md, "Generations": safety); every hold it echoes, the
            # newcomer must rebuild.
            newest: dict[str, bytes | None] = {}
            for r in self.sim.log.records:
                k = _member_key(r.key)
                if k is not None:
                    newest[k.member_id] = r.value
            compacted = all(_echoes(newest.get(h.holder.split("/")[0]), h) for h in end.holds)
            TALLY["compacted join" if compacted else "compacted join, a hold not echoed"] += 1
        self.sim.join(newcomer, compacted=compacted, static=self.is_static(newcomer))
        self.tick(data.draw(st.integers(1, 3)))
        if not older_leave:
            return
        # the others first, then the restarted member (which took nothing yet: its own leave
        # would hold what the group had for it, and cover the hold this is about)
        for group in ([m for m in self._alive() if m not in (newcomer, mid)], [mid]):
            for other in group:
                if self.sim.members[other].member.state not in ("leaving", "left", "unjoined"):
                    self.sim.leave(other)
            self.tick(data.draw(st.integers(1, 3)))

    def check_deadlines(self) -> None:
        """The fence deadline the runtime caches (``session_age_ms``) never moves back, but
        to "lapsed" once it has passed, or when the member read that its membership is over
        (a verdict, a tombstone): it then gives up everything as lost in that step, and the
        runtime writes nothing more until the poll thread has stopped it."""
        sim = self.sim
        for sm in sim.running():
            m = sm.member
            age = m.session_age_ms(sim.clock)
            k = (m.member_id, m.incarnation)
            was = self.deadlines.get(k)
            if age is None:
                me = sm.node.state.members.get(m.member_id)
                over = (me is None or me.ended or me.incarnation != m.incarnation) and not m.owned
                assert was is None or sim.clock >= was or over, (k, was, sim.clock)
                self.deadlines.pop(k, None)
            else:
                now = sim.clock - age + m.fence_after_ms
                assert was is None or now >= was, (k, was, now)
                self.deadlines[k] = now

    def teardown(self) -> None:
        """A quiet period, still checked after every tick (liveness is the other test's)."""
        if hasattr(self, "sim"):
            for _ in range(60):
                self.sim.tick()
                self.check()


CompactedSchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestCompactedSchedule = CompactedSchedule.TestCase


# ------------------------------------------------------------------ the two causes, one by one


def _member_key(key: bytes | None) -> MemberKey | None:
    try:
        k = decode_key(key)
    except Exception:
        return None
    return k if isinstance(k, MemberKey) else None


def _echoes(value: bytes | None, h: Hold) -> bool:
    """Whether a member record's value echoes hold ``h`` (``MemberRecord.held``)."""
    if value is None:
        return False
    v = decode_value(MemberKey("g", h.holder.split("/")[0]), value)
    proc = h.holder.split("/", 1)[1]
    return isinstance(v, MemberRecord) and any(e.process == proc for e in v.held)


def member_offsets(sim: GroupSim, member_id: str, since: int = 0) -> list[int]:
    key = MemberKey(sim.group, member_id)
    out = []
    for r in sim.log.records[since:]:
        try:
            if decode_key(r.key) == key:
                out.append(r.offset)
        except Exception:
            continue
    return out


def disagreements(sim: GroupSim, clean_to: list[int]) -> list[str]:
    """Leader, generation, assignment of fresh replays of the log compacted at each point,
    where they differ from the full replay's."""
    full = sim.view()
    want = (full.leader, full.generation, full.assignment)
    out = []
    for c in clean_to:
        fresh = replay(sim, sim.log.compacted(c, sim.clock - sim.session_timeout_ms))
        got = (fresh.leader, fresh.generation, fresh.assignment)
        if got != want:
            out.append(f"at {sim.clock} compacted at {c}: leader {got[0]} gen {got[1]}, "
                       f"full: leader {want[0]} gen {want[1]}")  # fmt: skip
    return out


def paused_past_its_session() -> tuple[GroupSim, int]:
    """b joined first and led; a pause past its session expired it, so a leads. b has just
    resumed and written its first record; also returns the log's end when the pause began."""
    sim = GroupSim({"t0": 4})
    sim.join("b")
    sim.settle()
    sim.join("a")
    sim.settle()
    assert sim.view().leader == "b"
    sim.pause("b", 3 * sim.session_timeout_ms)
    start = len(sim.log.records)
    while not member_offsets(sim, "b", start):
        sim.tick()
        assert not sim.violations()
    assert sim.view().leader == "a"
    return sim, start


def test_a_member_back_from_a_pause_past_its_session_does_not_lead_a_compacted_replay() -> None:
    # Cause (b): b's first records after the pause still echo its old joined_at (it has not
    # replayed yet that the log expired it). The full replay starts a new membership there; a
    # reader whose first sight of b is such a record (compacted just after it) took it for a
    # continuation, gave b back its old joined_at and made it the leader.
    sim, start = paused_past_its_session()
    errs = disagreements(sim, [o + 1 for o in member_offsets(sim, "b", start)])
    for _ in range(40):
        sim.tick()
        assert not sim.violations()
        errs += disagreements(sim, [o + 1 for o in member_offsets(sim, "b", start)])
    assert not errs, errs[:3]
    assert sim.view().leader == "a"
    sim.settle()


def test_a_member_that_has_not_read_its_own_record_back_keeps_its_place() -> None:
    # Cause (a): b reads slowly (a backlog), so its records carry no joined_at echo until it
    # has read its first one back. A reader whose first sight of b was its second record
    # started b's membership there, after a's, while the full replay has b joining first (and
    # leading); b's echo, earlier than that, was never followed.
    sim = GroupSim({"t0": 4}, session_timeout_ms=6_000, heartbeat_interval_ms=300)
    for _ in range(20):
        sim.inject(b"junk", b"junk")
    sim.join("b", read_rate=1)
    sim.tick()
    sim.join("a")
    errs: list[str] = []
    for _ in range(60):
        sim.tick()
        assert not sim.violations()
        errs += disagreements(sim, [o + 1 for o in member_offsets(sim, "b")])
    assert not errs, errs[:3]
    assert sim.view().leader == "b"
    sim.members["b"].read_rate = None
    sim.settle()


def test_a_newcomer_that_starts_from_the_compacted_log_is_covered() -> None:
    # The consequence: c starts while compaction has kept b's first record after its pause
    # (the echo of its old joined_at) as b's newest. It must follow a, the real leader, and
    # accept a's assignments, not reject them as ``not_leader``.
    sim, _ = paused_past_its_session()
    sim.join("c", compacted=True)
    sim.settle()
    c = sim.members["c"]
    assert c.state.leader == "a" and not c.state.rejections["not_leader"]
    assert c.state.covers("c") and c.member.owned


def test_a_reasserted_generation_keeps_its_time_and_place_for_a_compacted_reader() -> None:
    # The random schedules' case (docs/protocol.md, "Generations": re-assertion), as
    # records. Generation 1 covers c, whose next record starts a new membership (no prev_ts: it had
    # not read its first back). A forged record then clobbers generation 1's on the assignment key,
    # and the leader re-asserts it. Compacted, the log keeps only the re-assertion, after c's
    # restart: a fresh reader saw c start under no generation, so it took generation 1's grant for
    # the new membership's, and rejected generation 2, which gives those partitions to a, as
    # unsafe.
    def member(mid: str, seq: int, ts: int, prev: int | None, owned: str = "", gen: int = 0,
               joined: int | None = None) -> tuple[bytes, bytes | None]:  # fmt: skip
        return encode(*member_record(
            "g", mid, incarnation=f"i-{mid}", seq=seq, topics=["t0"],
            owned=[("t0", int(p)) for p in owned], owned_generation=gen if owned else 0,
            acked_generation=gen, joined_at=joined if prev is not None else None,
            prev_ts=prev, since_generation=1 if prev is not None else 0,
        ))  # fmt: skip

    def generation(gen: int, leader: str, grants: dict[str, str]) -> AssignmentRecord:
        return assignment_record(
            "g", generation=gen, leader_id=leader, leader_incarnation=f"i-{leader}",
            leader_joined_at=0, protocol="eager", phase="complete", assignor="range",
            partition_counts={"t0": 4},
            members={m: covered_member(f"i-{m}", ["t0"], [("t0", int(p)) for p in ps])
                     for m, ps in grants.items()},
        )[1]  # fmt: skip

    akey = encode_key(AssignmentKey("g"))
    gen1 = generation(1, "a", {"a": "01", "c": "23"})
    log: list[tuple[bytes, bytes | None, int]] = [
        (*member("a", 1, 0, None), 0),
        (*member("a", 2, 50, 0, joined=0), 50),
        (*member("c", 1, 100, None), 100),
        (akey, encode_value(AssignmentKey("g"), gen1), 150),  # generation 1: offset 3
        (*member("a", 3, 200, 50, "01", 1, joined=0), 200),
        (*member("a", 4, 1_000, 200, "01", 1, joined=0), 1_000),
        (*member("c", 2, 1_300, None), 1_300),  # c restarts (its session: 1 s)
        (akey, encode_value(AssignmentKey("g"), replace(gen1, leader_id="c",
                                                        leader_incarnation="i-c")), 1_300),
    ]  # fmt: skip
    sim = GroupSim({"t0": 4}, protocol="eager", session_timeout_ms=1_000)
    full = sim.new_state()
    for o, (k, v, ts) in enumerate(log):
        full.replay(o, k, v, ts)
    assert full.rejections["not_leader"] == 1 and full.assignment_clobbered
    assert full.members["c"].since_generation == 2
    reassertion = full.reassertion()
    assert reassertion == gen1 and reassertion.origin == (3, 150)
    log.append((akey, encode_value(AssignmentKey("g"), reassertion), 1_350))
    log.append((*member("a", 5, 1_400, 1_000, "01", 1, joined=0), 1_400))
    gen2 = generation(2, "a", {"a": "0123"})
    log.append((akey, encode_value(AssignmentKey("g"), gen2), 1_450))
    last: dict[bytes | None, int] = {}
    for o, (k, _, _) in enumerate(log[:-1]):
        last[k] = o
    fresh = sim.new_state()
    for o, (k, v, ts) in enumerate(log):
        if o == len(log) - 1:
            assert fresh.members["c"].since_generation == full.members["c"].since_generation
            assert fresh.assignment_offset == 3 and ownership.is_lagging(
                fresh, "c"
            ) == ownership.is_lagging(full, "c")
            assert fresh.reassertion().origin == (3, 150)
        if o in last.values() or o == len(log) - 1:  # compacted below the last record
            fresh.replay(o, k, v, ts)
        if o >= len(log) - 3:
            full.replay(o, k, v, ts)
    assert not fresh.rejections and not full.rejections["unsafe_grant"]
    assert fresh.generation == full.generation == 2
    assert agreed(fresh) == agreed(full)


def test_a_grant_to_a_restarted_members_old_incarnation_is_judged_alike_without_its_hold() -> None:
    # The random schedules' case (docs/protocol.md, "Generations", check 5), as records. The
    # leader a planned generation 2 (a partition was added) before b's restart landed, so it names
    # b's old incarnation i1, with what i1 owns. At that record b/i1's partitions are in a hold
    # (b/i1 may still run), which a reader of the log compacted past b's restart never saw. The
    # full replay refused the grant as unsafe (the hold "b/i1" is not "b"), the compacted reader
    # accepted it: they disagreed on the generation. An entry that names no membership grants
    # nothing anyone takes, so both accept it, judged against the live members alone.
    log: list[tuple[bytes, bytes | None, int]] = []

    def member(mid: str, inc: str, seq: int, ts: int, prev: int | None, owned: str = "",
               gen: int = 0, joined: int = 0) -> None:  # fmt: skip
        log.append((*encode(*member_record(
            "g", mid, incarnation=inc, seq=seq, topics=["t0"],
            owned=[("t0", int(p)) for p in owned], owned_generation=gen if owned else 0,
            acked_generation=gen, joined_at=joined if prev is not None else None,
            prev_ts=prev, since_generation=1 if prev is not None else 0,
        )), ts))  # fmt: skip

    def generation(gen: int, grants: dict[str, tuple[str, str]], count: int, ts: int) -> None:
        k, v = assignment_record(
            "g", generation=gen, leader_id="a", leader_incarnation="i", leader_joined_at=0,
            protocol="cooperative", phase="complete", assignor="range",
            partition_counts={"t0": count},
            members={m: covered_member(inc, ["t0"], [("t0", int(p)) for p in ps])
                     for m, (inc, ps) in grants.items()},
        )  # fmt: skip
        log.append((*encode(k, v), ts))

    member("a", "i", 1, 0, None)
    member("b", "i1", 1, 1, None)
    member("a", "i", 2, 2, 0)
    member("b", "i1", 2, 3, 1, joined=1)
    generation(1, {"a": ("i", "01"), "b": ("i1", "23")}, 4, 4)
    member("a", "i", 3, 5, 2, "01", 1)
    member("b", "i1", 3, 6, 3, "23", 1, joined=1)
    member("b", "i2", 1, 7, None)  # b restarts while b/i1 is live: b/i1's t0-2, t0-3 held
    clean_to = len(log)  # the cleaner reached here: b/i1's records are gone
    generation(2, {"a": ("i", "014"), "b": ("i1", "23")}, 5, 8)  # planned before b's restart
    # the same stale entry granting what a live member may hold (a's t0-4, granted by 2)
    generation(3, {"a": ("i", "01"), "b": ("i1", "234")}, 5, 9)

    full, fresh = GroupState("g", 10_000, 30_000), GroupState("g", 10_000, 30_000)
    newest = {k: o for o, (k, _, _) in enumerate(log[:clean_to])}
    for o, (k, v, ts) in enumerate(log):
        full.replay(o, k, v, ts)
        if o >= clean_to or newest[k] == o:
            fresh.replay(o, k, v, ts)
        if o == clean_to - 1:
            assert [h.holder for h in full.holds] == ["b/i1"] and not fresh.holds
        if o == clean_to:
            assert full.generation == fresh.generation == 2
            assert agreed(fresh) == agreed(full)
    # nobody takes the grant to b/i1, and the hold still keeps b/i1's partitions from b/i2
    t2 = TopicPartition("t0", 2)
    assert not full.covers("b") and t2 not in ownership.may_hold(full, "b")
    assert ownership.holders(full)[t2] == {"b/i1"}
    # both refuse the entry's grant of what a live member may hold
    assert full.rejections["unsafe_grant"] == fresh.rejections["unsafe_grant"] == 1
    assert full.generation == fresh.generation == 2 and agreed(fresh) == agreed(full)


@pytest.mark.parametrize("version", [1, 2])
def test_a_leader_that_started_from_the_compacted_topic_grants_nothing_a_hold_covers(
    version: int,
) -> None:
    # b restarts while its first process is live, so what that process owns is held for a
    # session (version 2: until a verdict on its run). c starts from the compacted topic after
    # the restart: the record of b's first process is gone. a and b leave, and c leads within
    # that session. b's records echo the hold (MemberRecord.held), so c builds it from the
    # newest of them and grants nothing it covers, as the full replay refuses to.
    sim = GroupSim({"t0": 4}, version=version)
    sim.join("a")
    sim.join("b")
    sim.settle()
    sim.crash("b")
    sim.tick()
    sim.join("b")
    sim.tick(3)
    held = ownership.held(sim.view())
    assert held
    sim.join("c", compacted=True)
    sim.tick(3)
    assert ownership.held(sim.members["c"].state) == held
    sim.leave("a")
    sim.tick(3)
    sim.leave("b")
    for _ in range(40):
        sim.tick()
        c = sim.members["c"].state
        full = replay(sim, sim.log.records[: c.offset + 1])
        assert (c.leader, c.generation, c.assignment) == (
            full.leader,
            full.generation,
            full.assignment,
        )
    assert not sim.view().rejections["unsafe_grant"]
    assert not sim.violations()
    sim.settle()  # the hold ends, and c takes b's old partitions too
    assert sim.members["c"].member.owned == {TopicPartition("t0", p) for p in range(4)}


@pytest.mark.parametrize("version", [1, 2])
def test_a_stale_copy_of_an_earlier_processs_record_reads_alike_at_every_cleaning_point(
    version: int,
) -> None:
    # m's first process led and left; its second joined before a, so it leads. A copy of a
    # record of the first process, replayed into the log, used to start a new membership for
    # it in the full replay (joined now: a led), which the later process's next record then
    # replaced with a younger one; a reader of the log compacted past that copy never saw it,
    # took the later record as a continuation with its older joined_at, and elected m. Another
    # process's continuation is now taken as at first sight, whatever the reader saw before
    # (docs/protocol.md, "Membership and continuation"), so readers agree at every cleaning
    # point: before the copy, at it and after it.
    sim = GroupSim({"t0": 4}, version=version, session_timeout_ms=2_000,
                   heartbeat_interval_ms=300, max_clock_skew_ms=150)  # fmt: skip
    sim.join("m")
    sim.settle()
    stale = sim.log.records[member_offsets(sim, "m")[-1]]
    sim.leave("m")
    sim.tick(3)
    sim.members.pop("m")
    sim.join("m")
    sim.settle()
    sim.join("a")
    sim.settle()
    assert sim.view().leader == "m"
    at = sim.inject(stale.key, stale.value)
    for _ in range(30):
        sim.tick()
        assert not sim.violations()
        assert disagreements(sim, [len(sim.log.records), at, at + 1]) == []
    assert max(member_offsets(sim, "m")) > at  # the live process wrote again, after the copy
    assert sim.view().leader == "m" and sim.view().members["m"].joined_at < (
        sim.view().members["a"].joined_at
    )
