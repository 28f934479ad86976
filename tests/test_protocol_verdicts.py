"""Protocol version 2's main log (docs/protocol-v2.md): memberships that last until a judge's
verdict ends them, the lease, takeovers, the records' versions, and agreement between a full
reader and one that starts from the compacted log."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupkit.protocol import ownership
from groupkit.protocol.group import NEVER
from groupkit.protocol.records import (
    HeartbeatRecord,
    HeldEcho,
    LeaseRecord,
    MemberRef,
    SnapshotKey,
    SnapshotRecord,
    VerdictRecord,
    assignment_record,
    covered_member,
    decode,
    encode,
    heartbeat_record,
    lease_record,
    member_record,
    verdict_record,
)
from groupkit.protocol.snapshot import from_snapshot, to_snapshot
from groupkit.protocol.state import GroupState
from groupkit.testing.sim import GroupSim
from groupkit.types import TopicPartition as TP

SESSION = 10_000


@dataclass
class Log:
    """A main log being written: every record with its offset and time, and readers."""

    records: list[tuple[int, bytes, bytes | None, int]]
    t: int = 1_000

    def __post_init__(self) -> None:
        #: the time of the record that started each (member, incarnation, run), which its
        #: later records echo as joined_at, as a member learns it from its own replay
        self.starts: dict[tuple[str, str, int], int] = {}

    def append(self, kv: tuple[object, object], dt: int = 10) -> int:
        k, v = encode(*kv)  # type: ignore[arg-type]
        self.t += dt
        off = len(self.records)
        self.records.append((off, k, v, self.t))
        return off

    def member(
        self, mid: str, seq: int, run: int, inc: str = "i", start: bool = False, **kw: object
    ) -> int:
        """A member record; ``start``: the first of a membership (no joined_at)."""
        if start or (mid, inc, run) not in self.starts:
            off = self.append(m2(mid, seq, run, inc, joined_at=None, **kw))
            self.starts[mid, inc, run] = self.t
            return off
        return self.append(m2(mid, seq, run, inc, joined_at=self.starts[mid, inc, run], **kw))

    def read(self, state: GroupState | None = None) -> GroupState:
        st = state or GroupState("g", SESSION, version=2)
        for off, k, v, ts in self.records[st.offset + 1 :]:
            st.replay(off, k, v, ts)
        return st

    def compacted(self) -> GroupState:
        """A reader that starts from the log as compaction leaves it: the newest record per
        key (tombstones kept), in offset order."""
        newest: dict[bytes, tuple[int, bytes, bytes | None, int]] = {}
        for r in self.records:
            newest[r[1]] = r
        st = GroupState("g", SESSION, version=2)
        for off, k, v, ts in sorted(newest.values()):
            st.replay(off, k, v, ts)
        return st


def m2(mid: str, seq: int, run: int, inc: str = "i", **kw: object) -> tuple[object, object]:
    joined = kw.pop("joined_at", 0)
    return member_record("g", mid, incarnation=inc, seq=seq, topics=["t"], run=run,
                         joined_at=joined, **kw)  # type: ignore[arg-type]  # fmt: skip


def verdict(mid: str, run: int, by: str = "a", proc: str = "i") -> tuple[object, object]:
    """A verdict that ends run ``run`` of ``mid``'s process ``proc``."""
    return verdict_record("g", mid, process=proc, run=run, writer=(by, "i"))


def grant(log: Log, gen: int, leader: str, owners: dict[str, list[int]]) -> None:
    log.append(assignment_record(
        "g", generation=gen, leader_id=leader, leader_incarnation="i", leader_joined_at=0,
        protocol="cooperative", phase="complete", assignor="range",
        partition_counts={"t": 4},
        members={m: covered_member("i", ["t"], [("t", p) for p in ps])
                 for m, ps in owners.items()},
    ))  # fmt: skip


def granted(b_claims: bool = False) -> Log:
    """Members a and b, and generation 1 from leader a: a has t-0 and t-1, b t-2 and t-3 (with
    ``b_claims``, b's record that claims them too)."""
    log = Log([])
    log.member("a", 2, 1)
    log.member("b", 2, 1)
    grant(log, 1, "a", {"a": [0, 1], "b": [2, 3]})
    if b_claims:
        log.member("b", 3, 1, owned=[("t", 2), ("t", 3)], owned_generation=1, acked_generation=1)
    return log


def live(st: GroupState) -> set[str]:
    return set(st.live_members())


def test_the_new_records_round_trip() -> None:
    for kv in (
        verdict_record("g", "a", process="p", run=7, writer=("b", "j")),
        verdict_record("g", "a", process="p", run=2, writer=("b", "j"), kind="process_ended"),
        lease_record("g", leader=("a", "i"), lease_seq=3, live_offset=41),
        heartbeat_record("g", "a", incarnation="i", seq=9, prev_ts=None, lease_ms=3000,
                         skew_ms=500, acked_generation=2),
        heartbeat_record("g", "a", incarnation="i", seq=1, prev_ts=5, lease_ms=10, skew_ms=0),
        m2("a", 5, 2, owned=[("t", 1)], owned_generation=1, acked_generation=1),
        m2("a", 1, 1, joined_at=None),
    ):  # fmt: skip
        k, v = decode(*encode(*kv))  # type: ignore[arg-type]
        assert (k, v) == kv
    v = decode(*encode(*lease_record("g", leader=("a", "i"), lease_seq=1)))[1]
    assert isinstance(v, LeaseRecord) and v.leader == MemberRef("a", "i")
    h = decode(*encode(*heartbeat_record("g", "a", incarnation="i", seq=1, prev_ts=None,
                                         lease_ms=10, skew_ms=0)))[1]  # fmt: skip
    assert isinstance(h, HeartbeatRecord) and h.prev_ts is None


def test_each_version_rejects_the_others_member_records() -> None:
    v1 = GroupState("g", SESSION)
    k, v = encode(*m2("a", 1, 1))
    assert v1.replay(0, k, v, 1).reason == "other_version"
    k, v = encode(*lease_record("g", leader=("a", "i"), lease_seq=1))
    assert v1.replay(1, k, v, 2).reason == "other_version"
    v2 = GroupState("g", SESSION, version=2)
    k, v = encode(*member_record("g", "a", incarnation="i", seq=1, topics=["t"]))
    assert v2.replay(0, k, v, 1).reason == "other_version"
    k, v = encode(*heartbeat_record("g", "a", incarnation="i", seq=1, prev_ts=None,
                                    lease_ms=10, skew_ms=0))  # fmt: skip
    assert v2.replay(1, k, v, 2).reason == "bad_value", "a heartbeat has no place in the main log"
    assert not v2.members and not v1.members


def test_another_versions_record_posing_as_a_live_member_is_told_apart() -> None:
    """A record of the other version with a live member's incarnation is no member of that
    version (the runtime's version guard stops for those alone); with another incarnation, or
    under another member id, it may be one."""
    log = Log([])
    log.member("a", 2, 1)
    st = log.read()
    posing = encode(*member_record("g", "a", incarnation="i", seq=9, topics=["t"], joined_at=0,
                                   prev_ts=0))  # fmt: skip
    res = st.replay(st.offset + 1, *posing, log.t)
    assert (res.reason, res.posing) == ("other_version", True) and live(st) == {"a"}
    other = encode(*member_record("g", "a", incarnation="j", seq=1, topics=["t"]))
    res = st.replay(st.offset + 1, *other, log.t)
    assert (res.reason, res.posing) == ("other_version", False)
    stranger = encode(*member_record("g", "z", incarnation="i", seq=1, topics=["t"]))
    res = st.replay(st.offset + 1, *stranger, log.t)
    assert (res.reason, res.posing) == ("other_version", False)
    assert st.rejections["other_version"] == 3 and live(st) == {"a"}


def test_a_membership_lasts_until_a_verdict_on_its_run_not_a_session() -> None:
    log = Log([])
    log.member("a", 2, 1)
    log.member("b", 2, 1)
    log.append(lease_record("g", leader=("a", "i"), lease_seq=1), dt=10 * SESSION)
    st = log.read()
    assert live(st) == {"a", "b"} and st.leader == "a"
    log.append(verdict("b", 1))
    log.read(st)
    assert live(st) == {"a"} and st.members["b"].ended
    # a record b had on its way when the verdict landed: the membership stays over
    log.member("b", 3, 1)
    log.read(st)
    assert live(st) == {"a"} and st.members["b"].ended and st.members["b"].seq == 3
    # b learns of it, starts a new run and joins again
    log.member("b", 5, 4, start=True)
    log.read(st)
    assert live(st) == {"a", "b"} and st.members["b"].run == 4
    assert [live(r) for r in (st, log.compacted())] == [{"a", "b"}] * 2


def test_a_verdict_frees_claims_and_a_record_in_flight_cannot_claim_them_again() -> None:
    log = granted(b_claims=True)
    st = log.read()
    assert st.members["b"].claims == {TP("t", 2), TP("t", 3)}
    assert ownership.holders(st).get(TP("t", 2)) == {"b"}
    log.append(verdict("b", 1))
    log.member("b", 4, 1, owned=[("t", 2), ("t", 3)], owned_generation=1, acked_generation=1)
    log.read(st)
    for reader in (st, log.compacted()):
        assert reader.members["b"].claims == frozenset(), "the claims outlived the verdict"
        assert TP("t", 2) not in ownership.holders(reader)


def test_a_grant_a_newer_generation_revokes_is_still_the_members_to_take() -> None:
    """A member that reads the main log slowly (its heartbeats keep it live meanwhile) takes an
    old generation's grant after newer ones revoked part of it. A reader of the compacted log
    has only the newest generation's record: it finds that grant in its ``revoke``."""
    log = granted()
    log.append(assignment_record(
        "g", generation=2, leader_id="a", leader_incarnation="i", leader_joined_at=0,
        protocol="cooperative", phase="partial", assignor="range", partition_counts={"t": 4},
        members={"a": covered_member("i", ["t"], [("t", 0)], pending=[("t", 2)]),
                 "b": covered_member("i", ["t"], [("t", 3)], revoke=[("t", 2)])},
    ))  # fmt: skip
    st = log.read()
    assert "b" in ownership.holders(st)[TP("t", 2)]
    fresh = log.compacted()  # the cleaner has been past generation 2
    # b has read generation 1 only, and takes all of it
    log.member("b", 3, 1, owned=[("t", 2), ("t", 3)], owned_generation=1, acked_generation=1,
               seen_generation=1)  # fmt: skip
    for reader in (log.read(st), log.read(fresh)):
        assert not reader.rejections, reader.rejections
        assert reader.members["b"].claims == {TP("t", 2), TP("t", 3)}
        assert "b" in ownership.holders(reader)[TP("t", 2)], "t-2 may go to a while b runs it"


def test_a_claim_from_a_generation_compacted_away_is_trusted_as_the_full_reader_accepts_it() -> (
    None
):
    """A slow reader that a newer generation no longer names (it lagged) takes an old grant.
    A reader that started from the compacted log lacks that generation's record: it trusts
    the claim, as the full reader accepts it, instead of rejecting the member's record."""
    log = granted()
    log.append(assignment_record(
        "g", generation=2, leader_id="a", leader_incarnation="i", leader_joined_at=0,
        protocol="cooperative", phase="partial", assignor="range", partition_counts={"t": 4},
        members={"a": covered_member("i", ["t"], [("t", 0), ("t", 1)],
                                     pending=[("t", 2), ("t", 3)])},
    ))  # fmt: skip
    st = log.read()
    fresh = log.compacted()
    assert 1 not in fresh.generations and 1 in st.generations
    log.member("b", 3, 1, owned=[("t", 2), ("t", 3)], owned_generation=1, acked_generation=1,
               seen_generation=1)  # fmt: skip
    for reader in (log.read(st), log.read(fresh)):
        assert not reader.rejections, reader.rejections
        assert reader.members["b"].claims == {TP("t", 2), TP("t", 3)}
        assert "b" in ownership.holders(reader)[TP("t", 2)]
    # a claim the full reader could check and refuse is refused by both: a generation that
    # never granted it, and that the fresh reader has
    log.member("b", 4, 1, owned=[("t", 0), ("t", 2), ("t", 3)], owned_generation=2,
               acked_generation=2, seen_generation=2)  # fmt: skip
    for reader in (log.read(st), log.read(fresh)):
        assert reader.rejections["unowned_claim"] == 1, reader.rejections


def test_anyone_may_judge_and_the_leader_moves_when_its_run_ends() -> None:
    log = Log([])
    for mid in "abc":
        log.member(mid, 2, 1)
    st = log.read()
    assert st.leader == "a"
    log.append(verdict("a", 1, by="b"))  # a successor's verdict on the leader
    log.read(st)
    assert live(st) == {"b", "c"} and st.leader == "b"
    log.append(verdict("a", 1, by="c"))  # a second judge found the same: nothing changes
    log.read(st)
    assert live(st) == {"b", "c"} and st.leader == "b" and not st.rejections


def test_a_verdict_on_an_older_run_leaves_a_newer_one() -> None:
    log = Log([])
    log.member("a", 2, 1)
    log.member("b", 6, 5)  # b's membership lives in run 5
    log.append(verdict("b", 3))  # a late judge ends run 3, over long ago
    st = log.read()
    assert live(st) == {"a", "b"}
    log.append(verdict("b", 5, proc="other"))  # another process's run 5
    log.read(st)
    assert live(st) == {"a", "b"}


def test_the_lease_moves_the_clock_and_names_where_judging_starts() -> None:
    log = Log([])
    log.member("a", 2, 1)
    log.append(lease_record("g", leader=("a", "i"), lease_seq=1, live_offset=3), dt=SESSION)
    log.append(lease_record("g", leader=("a", "i"), lease_seq=2, live_offset=8), dt=SESSION)
    st = log.read()
    assert st.lease is not None and st.lease.live_offset == 8 and st.log_time == log.t
    assert live(st) == {"a"} and not st.rejections


def test_a_hold_on_a_replaced_process_lasts_until_a_verdict_on_its_run() -> None:
    log = granted(b_claims=True)
    log.member("b", 2, 1, inc="j")  # b restarted while its old process may still run
    log.append(lease_record("g", leader=("a", "i"), lease_seq=1), dt=10 * SESSION)
    st = log.read()
    assert [(h.holder, h.until, h.run) for h in st.holds] == [("b/i", NEVER, 1)]
    log.append(verdict("b", 1, proc="i"))
    log.read(st)
    assert not st.holds and live(st) == {"a", "b"}, "the verdict on the old process ends it"


def _disagreements(log: Log) -> list[tuple[int, int]]:
    """The (cleaning point, offset) pairs where a reader of the log compacted at that point
    differs from the full reader, from the cleaning point on (offset -1: it rejected a
    record)."""
    full = GroupState("g", SESSION, version=2)
    seen = []
    for off, k, v, ts in log.records:
        full.replay(off, k, v, ts)
        seen.append((full.leader, full.generation, full.assignment, tuple(full.holds)))
    out = []
    for clean_to in range(len(log.records) + 1):
        newest = {r[1]: r[0] for r in log.records[:clean_to]}
        fresh = GroupState("g", SESSION, version=2)
        for off, k, v, ts in log.records:
            if off >= clean_to or newest[k] == off:
                fresh.replay(off, k, v, ts)
            if off >= clean_to - 1:
                got = (fresh.leader, fresh.generation, fresh.assignment, tuple(fresh.holds))
                if got != seen[off]:
                    out.append((clean_to, off))
        if fresh.rejections:
            out.append((clean_to, -1))
    return out


def test_a_hold_echoed_by_a_process_that_left_ends_for_every_reader_at_either_verdict() -> None:
    # b restarts while its first process i may still run: the join of b/j starts a hold on
    # what b/i may hold, and echoes it; b/j leaves, and its leaving record (no tombstone, so
    # compaction keeps the echo) echoes it too. A judge ends b/i's run, which ends the hold, then
    # b/j's: the two verdicts share b's key, so a reader of the log compacted past the second has
    # only that one, and took the hold from the echo alone. It kept it for good and refused the
    # generation that grants b/i's partitions to a, which the full reader accepted; it ends with
    # the run that echoed it (docs/protocol-v2.md, L3.8).
    log = granted(b_claims=True)
    echo = [HeldEcho("i", frozenset({TP("t", 2), TP("t", 3)}), None, 1)]
    log.member("b", 1, 1, inc="j", held=echo)  # b/j replaces b/i
    log.member("b", 2, 1, inc="j", held=echo, leaving=True)
    log.append(verdict("b", 1, proc="i"))
    log.append(verdict("b", 1, proc="j"))
    grant(log, 2, "a", {"a": [0, 1, 2, 3]})
    full = log.read()
    assert full.generation == 2 and not full.rejections
    assert _disagreements(log) == []


@pytest.mark.parametrize("restates", [True, False])
def test_a_verdict_restates_the_run_whose_key_it_takes(restates: bool) -> None:
    # b restarts twice while live (b/i, then b/j, then b/k) and b/k leaves: its leaving record
    # echoes the holds on b/i and b/j. The judge ends b/i's run, then b/j's, and writes no
    # verdict on b/k's, which left. The two verdicts share b's key, so a reader of the log
    # compacted past the second builds both holds from the echo and sees only that verdict: it
    # restates b/i's run, so that reader frees b/i's partitions where the full reader did and
    # accepts the generation that grants them (docs/protocol-v2.md, L3.9). Without it, that
    # reader keeps the hold for good.
    log = granted(b_claims=True)
    on_i = HeldEcho("i", frozenset({TP("t", 2), TP("t", 3)}), None, 1)
    on_j = HeldEcho("j", frozenset({TP("t", 2)}), None, 1)
    log.member("b", 1, 1, inc="j", held=[on_i])
    log.member("b", 1, 1, inc="k", held=[on_i, on_j])
    log.member("b", 2, 1, inc="k", held=[on_i, on_j], leaving=True)
    log.append(verdict("b", 1, proc="i"))
    restated = [("i", 1)] if restates else []
    log.append(verdict_record("g", "b", process="j", run=1, writer=("a", "i"), ended=restated))
    grant(log, 2, "a", {"a": [0, 1, 2, 3]})
    full = log.read()
    assert full.generation == 2 and not full.rejections and not full.holds
    if restates:
        assert _disagreements(log) == []
        assert log.compacted().generation == 2
    else:
        assert _disagreements(log), "the hold on b/i outlives its verdict for some reader"


def test_a_verdicts_restated_runs_round_trip_and_malformed_ones_are_counted() -> None:
    k, v = encode(*verdict_record("g", "b", process="k", run=3, writer=("a", "i"),
                                  ended=[("j", 2), ("i", 1)]))  # fmt: skip
    back = decode(k, v)[1]
    assert isinstance(back, VerdictRecord) and back.ended == (("i", 1), ("j", 2))
    assert back.ends("i", 1) and back.ends("j", 1) and back.ends("k", 3)
    assert not back.ends("j", 3) and not back.ends("x", 1)
    with pytest.raises(ValueError):
        verdict_record("g", "b", process="k", run=3, writer=("a", "i"), ended=[("k", 1)])
    with pytest.raises(ValueError):
        verdict_record("g", "b", process="k", run=3, writer=("a", "i"), kind="process_ended",
                       ended=[("j", 1)])  # fmt: skip
    assert v is not None
    head, body = v[: v.index(b"{")], json.loads(v[v.index(b"{") :])
    bad = [[["k", 1]], [["j", 0]], [["j", 1], ["i", 1]], [["i", 1], ["i", 2]], [], [["j"]], "j"]
    st = GroupState("g", SESSION, version=2)
    for n, ended in enumerate(bad):
        doc = head + json.dumps({**body, "ended": ended}).encode()
        assert st.replay(n, k, doc, 1_000 + n).kind == "rejected", ended
    assert sum(st.rejections.values()) == len(bad) and not st.verdicts


def test_a_v2_state_survives_a_snapshot() -> None:
    log = Log([])
    for mid in "abc":
        log.member(mid, 2, 1)
    grant(log, 1, "a", {"a": [0], "b": [1], "c": [2, 3]})
    log.member("c", 3, 1, owned=[("t", 2)], owned_generation=1, acked_generation=1)
    log.member("c", 2, 1, inc="j", held=[HeldEcho("i", frozenset({TP("t", 2)}), None, 1)])
    log.append(verdict("b", 1))
    log.append(lease_record("g", leader=("a", "i"), lease_seq=4, live_offset=9))
    st = log.read()
    assert st.holds and st.echoed == {"c": frozenset({"i"})}
    snap = decode(*encode(SnapshotKey("g"), to_snapshot(st, "a", "i")))[1]
    assert isinstance(snap, SnapshotRecord)
    back = from_snapshot(snap, SESSION)
    assert back.version == 2 and back.verdicts == st.verdicts and back.lease == st.lease
    assert back.echoed == st.echoed
    assert live(back) == live(st) == {"a", "c"} and back.holds == st.holds
    assert back.members["b"].ended and back.members["a"].run == 1
    assert back.fingerprint() == st.fingerprint()


# ----------------------------------------------------------------- compaction agreement

_EVENTS = ["record", "restart run", "new process", "verdict", "late verdict", "lease"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from(_EVENTS)), max_size=40))
def test_a_reader_of_the_compacted_log_agrees_with_the_full_reader(
    events: list[tuple[str, str]],
) -> None:
    """Whatever members write and judges find, a reader that starts from the log as
    compaction leaves it ends in the full reader's state: the same live memberships in the
    same runs, the same leader, verdicts and holders of every partition."""
    log = Log([])
    full = GroupState("g", SESSION, version=2)
    #: each member's own view: incarnation, its seq counter, its current run
    me: dict[str, tuple[str, int, int]] = {}
    lease = 0
    for mid, what in events:
        full = log.read(full)
        inc, seq, run = me.get(mid, ("i", 0, 0))
        if what in ("record", "restart run", "new process") or mid not in me:
            start = mid not in me or what != "record"
            if what == "new process":
                inc, seq = inc + "'", 0
            if start:
                seq += 1  # the heartbeat that starts the run
                run = seq
            seq += 1
            me[mid] = (inc, seq, run)
            log.member(mid, seq, run, inc=inc, start=start)
        elif what in ("verdict", "late verdict"):
            # a judge ends the member's current run, or (late) an older one; never one older
            # than a verdict on that process it has read (judge._relevant)
            ended = run if what == "verdict" else max(1, run - 1)
            known = full.verdicts.get(mid)
            if known is None or known.process != inc or known.run <= ended:
                log.append(verdict_record("g", mid, process=inc, run=ended, writer=("a", "i")))
        elif what == "lease":
            lease += 1
            log.append(lease_record("g", leader=("a", "i"), lease_seq=lease))
    full = log.read(full)
    compact = log.compacted()
    assert live(compact) == live(full)
    assert compact.leader == full.leader
    assert compact.verdicts == full.verdicts
    for mid in live(full):
        c, f = compact.members[mid], full.members[mid]
        assert (c.proc, c.run, c.claims) == (f.proc, f.run, f.claims)


SLOW = [("eager", 2, 60), ("cooperative", 1, 30), ("cooperative", 1, 40)]


@pytest.mark.parametrize(("protocol", "rate", "junk"), SLOW)
def test_a_slow_member_takes_nothing_of_a_membership_its_newer_start_ended(
    protocol: str, rate: int, junk: int
) -> None:
    """A member whose start goes unread for a session starts again when it has something to
    say (a new subscription). When it reads its first start back at last, it does not take
    that membership's grants: the log gave them away when the second start ended it."""
    sim = GroupSim({"t0": 4, "t1": 2}, version=2, session_timeout_ms=2_000,
                   heartbeat_interval_ms=300, protocol=protocol)  # fmt: skip
    for _ in range(junk):
        sim.inject(b"junk", b"junk")
    sim.join("a", ["t0", "t1"])
    slow = sim.join("b", ["t0"], read_rate=rate)
    for t in range(300):
        sim.tick()
        if t == 22:  # past a session, its start still unread
            sim.subscribe("b", ["t0", "t1"])
        assert not sim.violations(), sim.describe()
    key = encode(*m2("b", 1, 1))[0]
    starts = [r for r in sim.log.records if r.key == key]
    assert sum(decode(r.key, r.value)[1].joined_at is None for r in starts) >= 2  # type: ignore[union-attr]
    assert slow.member.owned and sim.view().rejections["stale_member_record"] == 0
