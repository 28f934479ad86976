"""Offset resets on a running group, proven over the simulator.

Random schedules of :mod:`tests.test_protocol_hypothesis` (both protocols, every assignor,
joins, leaves, crashes, pauses, slow readers, backlogs, forged and stale records), with
revocations deferred as the runtime defers them or not, plus resets issued at any step (so
often in the middle of a rebalance, with partitions between owners) and forged reset records.
The simulator tags every position and commit with the reset it descends from
(``GroupSim._set_committed``). After every step:

- no member commits a partition at a position from before a reset once that reset's new
  offset has been committed for it, and the first commit after a reset is its new offset;
- (the simulator's own invariants: one owner per partition, agreement, no loss.)

After the quiet period at the end:

- every live member has acknowledged the newest reset (``ownership.reset_waiting`` is empty,
  and every member's record says so);
- every partition of it that the group consumes has its committed offset descending from it.

Forged and malformed reset records are rejected, counted and never crash the replay.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from groupkit.assignors import assignor_names
from groupkit.errors import RecordRejected
from groupkit.protocol import ownership
from groupkit.protocol.records import (
    HmacSigner,
    ResetKey,
    decode,
    encode,
    member_record,
    reset_record,
)
from groupkit.testing.sim import GroupSim
from groupkit.types import TopicPartition as TP
from tests.test_protocol_hypothesis import EXAMPLES, GroupSchedule, schedule_settings

KEY = HmacSigner(b"group key")
FORGER = HmacSigner(b"not the group key")


class ResetSchedule(GroupSchedule):
    @initialize(
        protocol=st.sampled_from(["eager", "cooperative"]),
        assignor=st.sampled_from(assignor_names()),
        t0=st.integers(1, 8),
        t1=st.integers(0, 4),
        release=st.sampled_from([None, 0, 100, 700]),
        signed=st.booleans(),
    )
    def start(self, protocol: str, assignor: str, t0: int, t1: int, release: int | None,
              signed: bool) -> None:  # fmt: skip
        self.sim = GroupSim(
            {"t0": t0, "t1": t1}, protocol=protocol, assignor=assignor,
            release_delay_ms=release, signer=KEY if signed else None, snapshot_every_ms=5_000,
            **self.sim_options(),
        )  # fmt: skip
        self.sim.lags = {}
        self.forged = 0
        # a group already running, records flowing, so that a reset moves real positions
        for mid in ("m0", "m1"):
            self.sim.join(mid, ["t0", "t1"])
        for _ in range(10):
            self.sim.tick()
            self.check()

    @rule(data=st.data())
    def reset(self, data: st.DataObject) -> None:
        """``reset-offsets --execute`` at any step: some partitions, to any offset (behind or
        ahead of what was processed)."""
        parts = [TP(t, p) for t, n in sorted(self.sim.partitions.items()) for p in range(n)]
        chosen = data.draw(st.lists(st.sampled_from(parts), min_size=1, unique=True))
        self.sim.reset({p: data.draw(st.integers(0, 200)) for p in chosen})

    @rule(mid=st.sampled_from(["n0", "n1"]))
    def join_from_snapshot(self, mid: str) -> None:
        """A newcomer that catches up from the newest snapshot (a reset may be pending in it)."""
        sm = self.sim.members.get(mid)
        if sm is None or sm.crashed or sm.member.state == "left":
            self.sim.members.pop(mid, None)
            self.sim.join(mid, ["t0", "t1"], bounded=True)

    @rule(data=st.data())
    def forge_reset(self, data: st.DataObject) -> None:
        """A reset signed with the wrong key (or none, when the group signs), or malformed."""
        kind = data.draw(st.sampled_from(["bad_key", "garbage", "tombstone"]))
        k, v = reset_record(self.sim.group, "forged", {TP("t0", 0): 0})
        if kind == "bad_key":
            if self.sim.signer is None:
                return  # an unsigned group trusts every writer of its log
            self.sim.inject(*encode(k, v, FORGER))
        elif kind == "garbage":
            self.sim.inject(encode(k, v)[0], data.draw(st.binary(max_size=20)))
        else:
            self.sim.inject(encode(k, v)[0], None)
        self.forged += 1

    def teardown(self) -> None:
        sim = self.sim
        super().teardown()  # the quiet period: settled
        if not sim.running():
            return
        # The ack set completes once every live member has read the reset (and written a
        # record): tick until each one has read the whole log, then a heartbeat and two
        # rounds of commits (COMMIT_EVERY_TICKS) more.
        # (a member that lapsed meanwhile acknowledges once healthy again)
        for _ in range(2_000):
            st = sim.view()
            behind = [sm for sm in sim.members.values() if not sm.crashed
                      and sm.member.state != "left" and (sm.paused_until > sim.clock
                      or sm.state.offset < len(sim.log.records) - 1)]  # fmt: skip
            if not behind and not ownership.reset_waiting(st):
                break
            sim.tick()
            assert not sim.violations()
        sim.tick(sim.heartbeat_interval_ms // sim.tick_ms + 2 * 3)
        assert not sim.violations()
        st = sim.view()
        rs = st.reset
        if rs is None:
            return  # no reset, or the group emptied since (it forgets it then)
        assert ownership.reset_waiting(st) == {}, sim.describe()
        for sm in sim.running():
            assert sm.member.reset_at == rs.at, (sm.member_id, sm.member.reset_at, rs.at)
            assert st.members[sm.member_id].ready
        for p in sim.expected_partitions() & rs.offsets.keys():
            assert sim.lineage.get(p) == rs.at, (p, sim.lineage.get(p), rs.at, sim.describe())
            assert p in rs.settled


ResetSchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestResetSchedule = ResetSchedule.TestCase


# --------------------------------------------------------------------------- examples


def _running(release: int | None = None, **kw: object) -> GroupSim:
    sim = GroupSim({"t": 4}, release_delay_ms=release, **kw)  # type: ignore[arg-type]
    sim.join("a")
    sim.join("b")
    sim.settle()
    sim.tick(30)
    return sim


@pytest.mark.parametrize("release", [None, 300])
def test_a_reset_of_a_running_group_is_applied_and_acknowledged(release: int | None) -> None:
    sim = _running(release)
    at = sim.reset({TP("t", p): 5 for p in range(4)})
    sim.tick(5)
    assert not sim.violations()
    st = sim.view()
    assert st.reset is not None and st.reset.at == at
    assert ownership.reset_waiting(st) == {} and st.reset.settled == set(st.reset.offsets)
    first = {c[2]: c[3] for c in reversed(sim.commits) if c[4] == at}
    assert first == {TP("t", p): 5 for p in range(4)}


@pytest.mark.parametrize("release", [None, 300])
def test_a_reset_during_a_rebalance_reaches_the_partitions_that_move(release: int | None) -> None:
    sim = _running(release)
    sim.join("c")
    sim.tick(1)  # the rebalance is under way: partitions are being revoked
    at = sim.reset({TP("t", p): 7 for p in range(4)})
    for _ in range(100):
        sim.tick()
        assert not sim.violations()
    sim.settle()
    st = sim.view()
    assert st.reset is not None and ownership.reset_waiting(st) == {}
    assert all(sim.lineage[TP("t", p)] == at for p in range(4))


def test_a_slow_owner_releases_with_a_stale_hint_and_the_next_owner_resets() -> None:
    """The owner at the reset lets the partition go before it has read the reset: its hint
    predates the reset, so the next owner starts at the reset's offset, not the hint."""
    sim = _running(700)
    sim.members["a"].read_rate = 1  # a falls behind the log
    sim.join("c")
    sim.tick(2)
    at = sim.reset({TP("t", p): 3 for p in range(4)})
    sim.members["a"].read_rate = None
    for _ in range(200):
        sim.tick()
        assert not sim.violations()
    sim.settle()
    assert all(sim.lineage[TP("t", p)] == at for p in range(4))


def test_a_reset_of_an_empty_group_is_rejected() -> None:
    sim = GroupSim({"t": 2})
    sim.reset({TP("t", 0): 1})
    assert sim.view().rejections == {"reset_of_empty_group": 1}
    assert sim.view().reset is None


def test_a_copy_of_a_reset_of_an_empty_group_is_refused_once_members_live() -> None:
    """A reset refused because nobody lived to carry it out is no less stale when a copy of
    it lands after members joined (hypothesis found a member applying such a copy, then
    committing the old reset's offsets): the refused reset raises the floor too."""
    sim = GroupSim({"t": 2}, signer=KEY)
    at = sim.reset({TP("t", 0): 1})
    assert sim.view().rejections == {"reset_of_empty_group": 1}
    sim.join("a")
    sim.settle()
    r = sim.log.records[at]
    sim.inject(r.key, r.value)
    sim.tick(5)
    st = sim.view()
    assert st.rejections.get("stale_reset") == 1 and st.reset is None
    assert not sim.violations() and not sim.errors


def test_forged_and_malformed_resets_are_rejected_and_counted() -> None:
    sim = _running(None, signer=KEY)
    k, v = reset_record("g", "x", {TP("t", 0): 0})
    sim.inject(*encode(k, v, FORGER))
    sim.inject(*encode(k, v))  # unsigned
    sim.inject(encode(k, v)[0], b"\x01\x00{not json")
    sim.inject(encode(k, v)[0], None)
    sim.tick(3)
    st = sim.view()
    # (the garbage carries no signature: refused as unsigned before it is parsed)
    assert st.rejections == {"bad_signature": 1, "unsigned": 2, "bad_value": 1}
    assert st.reset is None and not sim.violations()


# --------------------------------------------------------------------------- records


def test_reset_records_round_trip_signed() -> None:
    k, v = reset_record("g", "r1", {TP("t", 2): 10, ("u", 0): 0}, requested_by="ops@host")
    rk, rv = encode(k, v, KEY)
    assert decode(rk, rv, KEY) == (ResetKey("g"), v)
    assert v.offsets == ((TP("t", 2), 10), (TP("u", 0), 0))
    with pytest.raises(RecordRejected) as e:
        decode(rk, rv, FORGER)
    assert e.value.reason == "bad_signature"


@pytest.mark.parametrize(
    "payload, reason",
    [
        (b'{"id":"r","by":"","base":0,"offsets":{}}', "bad_value"),
        (b'{"id":"r","by":"","base":0,"offsets":{"t":[[0,-1]]}}', "bad_value"),
        (b'{"id":"r","by":"","base":0,"offsets":{"t":[[0,1],[0,2]]}}', "bad_value"),
        (b'{"id":"r","by":"","base":0,"offsets":{"t":[[0]]}}', "wrong_type"),
        (b'{"id":"","by":"","base":0,"offsets":{"t":[[0,1]]}}', "bad_value"),
        (b'{"by":"","base":0,"offsets":{"t":[[0,1]]}}', "missing_field"),
        (b'{"id":"r","by":"","base":0,"offsets":{"t":[[0,1]]},"x":[' + b"[" * 9, "bad_bytes"),
        (b'{"id":"r","by":"","offsets":{"t":[[0,1]]}}', "missing_field"),
        (b'{"id":"r","by":"","base":-2,"offsets":{"t":[[0,1]]}}', "bad_value"),
    ],
)
def test_bad_reset_records_are_rejected(payload: bytes, reason: str) -> None:
    k = encode(ResetKey("g"), None)[0]
    with pytest.raises(RecordRejected) as e:
        decode(k, b"\x01\x00" + payload)
    assert e.value.reason == reason


def test_member_records_carry_the_reset_they_acknowledge() -> None:
    k, v = member_record("g", "m", incarnation="i", seq=2, topics=["t"], owned=[("t", 0)],
                         reset=(7, [("t", 0), ("t", 3)]))  # fmt: skip
    rk, rv = encode(k, v)
    _, back = decode(rk, rv)
    assert back == v and back.reset_at == 7 and back.reset_done == {TP("t", 0), TP("t", 3)}
    # twice: the second decode is a memo hit, which must keep the fields too
    assert decode(rk, rv)[1] == v
    k2, old = member_record("g", "m", incarnation="i", seq=3, topics=["t"])
    assert decode(*encode(k2, old))[1].reset_at == -1  # type: ignore[union-attr]


def test_the_factory_refuses_what_the_decoder_would_reject() -> None:
    with pytest.raises(ValueError):
        reset_record("g", "r", {})
    with pytest.raises(ValueError):
        reset_record("g", "r", {TP("t", 0): -1})


def test_a_copy_of_a_reset_record_replayed_later_is_refused() -> None:
    """A reset record copied back into the log (a duplicate, or an attacker's replay of a
    signed record) must not reset the group again: it is based on an older log."""
    sim = _running(None, signer=KEY)
    at = sim.reset({TP("t", 0): 1})
    sim.tick(20)
    r = sim.log.records[at]
    sim.inject(r.key, r.value)
    at2 = sim.reset({TP("t", 1): 2})
    sim.inject(r.key, r.value)  # an older one, after a newer
    sim.tick(5)
    st = sim.view()
    assert st.rejections == {"stale_reset": 2}
    assert st.reset is not None and st.reset.at == at2 and not sim.violations()


def test_a_pending_reset_survives_a_snapshot() -> None:
    """A newcomer that catches up from a snapshot knows the pending reset (and which
    partitions are settled, and the floor that refuses copies of older resets)."""
    from groupkit.protocol.records import SnapshotKey
    from groupkit.protocol.snapshot import from_snapshot, to_snapshot

    sim = _running(None)
    sim.members["b"].read_rate = 0  # b falls behind: the reset stays pending for it
    sim.reset({TP("t", p): 3 for p in range(4)})
    sim.tick(2)
    st = sim.view()
    assert st.reset is not None and ownership.reset_waiting(st)
    snap = to_snapshot(st, "a", "i1")
    _k, v = decode(*encode(SnapshotKey("g"), snap))
    assert v == snap
    back = from_snapshot(v, sim.session_timeout_ms)  # type: ignore[arg-type]
    assert back.reset == st.reset and back.reset_floor == st.reset_floor
    assert ownership.reset_waiting(back) == ownership.reset_waiting(st)
