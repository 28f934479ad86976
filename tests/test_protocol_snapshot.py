"""Snapshots of the group state: a restored state replays on exactly like the original.

1. Round trips: a snapshot encodes and decodes to itself (signed or not), and
   ``snapshot.from_snapshot`` restores a state equal to the one snapshotted in everything but
   the rejection counters, history and holds included.
2. Bad snapshots are rejected with a reason, never a crash; the replay of a snapshot record
   changes nothing but what every record changes.
3. The random schedules of ``test_protocol_hypothesis`` (both protocols, every assignor, slow
   readers, pauses, crashes, garbage and stale copies of old records): at random ticks a
   member's state (the full observer's, or a slow or paused member's, at whatever offset it
   has reached) is snapshotted, written to the log as the leader would, decoded back and
   restored. From then on the restored state replays the log in step with the full observer
   and, after every tick, agrees with it on leader, generation, assignment, live members
   (ids, incarnations, ``joined_at``), ``holders()``, and every live member's ``may_hold``,
   ``is_lagging`` and ``handoffs`` -- in fact on the whole state. A snapshot of a reader that
   started from a compacted log agrees with the full replay on what such a reader must agree on
   (``test_protocol_compaction.agreed``). And :func:`newest_snapshot` picks, from the whole
   log and from the log compacted anywhere, a snapshot that restores the true state at its
   ``as_of``: the newest one, whatever stale copies were written after it; and :func:`restore`
   yields the full replay's state from it, or declines when the cleaner has been past it.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import time
import zlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from groupkit.errors import RecordRejected
from groupkit.protocol import ownership
from groupkit.protocol.records import (
    SCHEMA_VERSION,
    AssignmentKey,
    HmacSigner,
    SnapshotKey,
    SnapshotRecord,
    decode,
    decode_key,
    encode,
    encode_key,
)
from groupkit.protocol.snapshot import from_snapshot, newest_snapshot, restore, to_snapshot
from groupkit.protocol.state import GroupState
from groupkit.testing.logs import LogRecord
from groupkit.testing.sim import GroupSim
from tests.test_protocol_compaction import FullReader, agreed
from tests.test_protocol_hypothesis import GroupSchedule, schedule_settings

EXAMPLES = int(os.environ.get("GROUPKIT_SNAPSHOT_EXAMPLES", "100"))
#: what the random schedules checked (how many restored states, ticks, selections)
TALLY: Counter[str] = Counter()


def core(s: GroupState) -> tuple[object, ...]:
    """Everything a snapshot must carry: the whole state but the rejection counters."""
    return (
        s.group, s.session_timeout_ms, s.rebalance_timeout_ms, s.offset, s.log_time, s.members,
        s.leader, s.assignment, s.assignment_offset, s.holds, s.assignment_clobbered,
        s.generations, s.generation_time,
    )  # fmt: skip


def frozen_core(s: GroupState) -> tuple[object, ...]:
    """:func:`core` as of now (the state's dicts and lists change in place as it replays)."""
    return copy.deepcopy(core(s))


def observed(s: GroupState) -> tuple[object, ...]:
    """What a member acts on: leader, generation, assignment, live members, who may hold
    what, who is lagging, and what each may take by handoff (a restored state knows its
    holds: ``ownership.knows_holds``)."""
    live = s.live_members()
    return (
        s.leader,
        s.generation,
        s.assignment,
        [(i, m.incarnation, m.joined_at) for i, m in live.items()],
        {p: sorted(h) for p, h in ownership.holders(s).items()},
        {i: ownership.may_hold(s, i) for i in live},
        {i: ownership.is_lagging(s, i) for i in live},
        {i: ownership.handoffs(s, i) for i in live},
    )


def roundtrip(
    s: GroupState, signer: HmacSigner | None = None, writer: str = "w"
) -> tuple[bytes, bytes, GroupState]:
    """Snapshot ``s``, encode, decode, restore: ``(key, value, restored state)``."""
    snap = to_snapshot(s, writer, "i0")
    k, v = encode(SnapshotKey(s.group), snap, signer)
    assert v is not None
    dk, dv = decode(k, v, signer)
    assert dk == SnapshotKey(s.group) and dv == snap
    assert isinstance(dv, SnapshotRecord)
    restored = from_snapshot(dv, s.session_timeout_ms, s.rebalance_timeout_ms, signer)
    return k, v, restored


def busy_group(signer: HmacSigner | None = None) -> GroupSim:
    """A group that has had restarts (holds), slow readers (unacknowledged generations in the
    history), pauses past the session and leaves."""
    sim = GroupSim(
        {"t0": 8, "t1": 3},
        session_timeout_ms=2_000,
        heartbeat_interval_ms=300,
        rebalance_timeout_ms=4_000,
        signer=signer,
    )
    sim.join("m0")
    sim.join("m1", ["t0"])
    sim.tick(5)
    sim.join("m2", read_rate=2)
    sim.tick(10)
    sim.crash("m1")
    sim.join("m1", ["t0", "t1"])  # a new incarnation of a live member: its grants are held
    sim.tick(3)
    sim.pause("m2", 3_000)
    sim.join("m3")
    return sim


# ------------------------------------------------------------------ round trips


@pytest.mark.parametrize("signed", [False, True])
def test_roundtrip_restores_the_whole_state_at_every_tick(signed: bool) -> None:
    signer = HmacSigner(b"group key") if signed else None
    sim = busy_group(signer)
    seen_holds = seen_history = 0
    for _ in range(80):
        sim.tick()
        assert not sim.violations()
        full = sim.view()
        _, _, restored = roundtrip(full, signer)
        assert core(restored) == core(full)
        assert observed(restored) == observed(full)
        assert not restored.rejections
        seen_holds += bool(full.holds)
        seen_history += len(full.generations) > 1
    sim.leave("m0")
    sim.tick(3)
    _, _, restored = roundtrip(sim.view(), signer)
    assert core(restored) == core(sim.view())
    # the schedule exercised what the snapshot must carry beyond the current assignment
    assert seen_holds and seen_history, (seen_holds, seen_history)


def test_signed_snapshot_needs_the_group_key() -> None:
    sim = busy_group()
    sim.tick(20)
    snap = to_snapshot(sim.view(), "m0", "i1")
    k, v = encode(SnapshotKey("g"), snap, HmacSigner(b"right"))
    assert decode(k, v, HmacSigner(b"right"))[1] == snap
    with pytest.raises(RecordRejected) as e:
        decode(k, v, HmacSigner(b"wrong"))
    assert e.value.reason == "bad_signature"
    k2, v2 = encode(SnapshotKey("g"), snap)
    with pytest.raises(RecordRejected) as e:
        decode(k2, v2, HmacSigner(b"right"))
    assert e.value.reason == "unsigned"
    # the tag covers the key: the value under another group's snapshot key does not verify
    with pytest.raises(RecordRejected) as e:
        decode(encode_key(SnapshotKey("h")), v, HmacSigner(b"right"))
    assert e.value.reason == "bad_signature"


def test_snapshot_key_is_its_own_kind_and_value_is_compressed() -> None:
    k = encode_key(SnapshotKey("g"))
    assert k == b"\x01S\x00\x01g"
    assert decode_key(k) == SnapshotKey("g")
    sim = GroupSim({"t0": 1})
    sim.join("m0")
    sim.tick()
    _, v = encode(SnapshotKey("g"), to_snapshot(sim.view(), "m0", "i1"))
    assert v is not None and v[0] == SCHEMA_VERSION and v[1] & 0x01  # zlib, however small
    with pytest.raises(ValueError):
        to_snapshot(GroupState("g", 1_000), "m0", "i1")  # nothing replayed: no offset


# ------------------------------------------------------------------ bad snapshots


def snapshot_doc() -> dict[str, Any]:
    sim = busy_group()
    sim.tick(12)
    _, v = encode(SnapshotKey("g"), to_snapshot(sim.view(), "m0", "i1"))
    assert v is not None
    doc: dict[str, Any] = json.loads(zlib.decompress(v[2:]))
    assert doc["assignment"] is not None and doc["members"] and doc["holds"]
    return doc


def value_of(doc: object, flags: int = 0x01) -> bytes:
    payload = json.dumps(doc).encode()
    return bytes([SCHEMA_VERSION, flags]) + (zlib.compress(payload) if flags & 1 else payload)


def _set(path: tuple[Any, ...], x: object) -> Callable[[dict[str, Any]], None]:
    def f(doc: dict[str, Any]) -> None:
        d: Any = doc
        for p in path[:-1]:
            d = d[p]
        d[path[-1]] = x

    return f


def _drop(name: str) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc.pop(name)


MUTATIONS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("no as_of", _drop("as_of"), "missing_field"),
    ("no members", _drop("members"), "missing_field"),
    ("no history", _drop("history"), "missing_field"),
    ("no holds", _drop("holds"), "missing_field"),
    ("no clobbered", _drop("clobbered"), "missing_field"),
    ("as_of a string", _set(("as_of",), "7"), "wrong_type"),
    ("as_of < 0", _set(("as_of",), -1), "bad_value"),
    ("as_of a bool", _set(("as_of",), True), "wrong_type"),
    ("other group", _set(("group",), "h"), "bad_value"),
    ("empty writer", _set(("writer",), ""), "bad_value"),
    ("leader not a member", _set(("leader",), "nobody"), "bad_value"),
    ("members an object", _set(("members",), {}), "wrong_type"),
    ("member entry short", _set(("members", 0), ["m0"]), "wrong_type"),
    ("member id empty", _set(("members", 0, 0), ""), "bad_value"),
    ("member seq < 0", _set(("members", 0, 1, "seq"), -3), "bad_value"),
    ("member claims a list", _set(("members", 0, 1, "claims"), []), "wrong_type"),
    ("member claims bad range", _set(("members", 0, 1, "claims"), {"t0": [[5, 2]]}), "bad_value"),
    ("member ready an int", _set(("members", 0, 1, "ready"), 1), "wrong_type"),
    ("member seen < acked", _set(("members", 0, 1, "seen_gen"), -1), "bad_value"),
    ("member client not str", _set(("members", 0, 1, "client"), {"a": 1}), "wrong_type"),
    ("assignment bad phase", _set(("assignment", "phase"), "done"), "bad_value"),
    ("assignment_offset past as_of", _set(("assignment_offset",), 10**9), "bad_value"),
    ("history entry short", _set(("history",), [[1]]), "wrong_type"),
    ("history time < 0", _set(("history",), [[-1, None]]), "bad_value"),
    ("history of nothing", lambda d: d.update(assignment=None, assignment_offset=-1), "bad_value"),
    ("history out of order", lambda d: d.update(history=[[0, None], [0, None]]), "bad_value"),
    ("hold entry short", _set(("holds", 0), ["x"]), "wrong_type"),
    ("hold until < 0", _set(("holds", 0, 2), -5), "bad_value"),
    (
        "range bomb",
        _set(("holds", 0, 1), {"t0": [[0, 1 << 19]] * 20}),
        "too_large",
    ),
]


@pytest.mark.parametrize("name,mutate,reason", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_malformed_snapshot_is_rejected_with_a_reason(
    name: str, mutate: Callable[[dict[str, Any]], None], reason: str
) -> None:
    doc = snapshot_doc()
    key = encode_key(SnapshotKey("g"))
    assert isinstance(decode(key, value_of(doc))[1], SnapshotRecord)  # the baseline decodes
    mutate(doc)
    with pytest.raises(RecordRejected) as e:
        decode(key, value_of(doc))
    assert e.value.reason == reason, (name, e.value)


@pytest.mark.parametrize(
    "key,value,reason",
    [
        (b"\x01S\x00\x01gx", b"\x01\x01", "bad_bytes"),  # trailing bytes in the key
        (b"\x01S\x00\x01g", None, "bad_value"),  # a snapshot tombstone
        (b"\x01S\x00\x01g", b"\x02\x01x", "unknown_version"),
        (b"\x01S\x00\x01g", b"\x01\x01" + zlib.compress(b'{"a": 1}')[:-3], "bad_bytes"),
        (b"\x01S\x00\x01g", value_of([1, 2]), "wrong_type"),
        (b"\x01S\x00\x01g", value_of({}, flags=0), "missing_field"),
        # a zlib bomb: inflates past the snapshot bound
        (b"\x01S\x00\x01g", b"\x01\x01" + zlib.compress(b" " * (33 << 20)), "too_large"),
    ],
)
def test_bad_snapshot_bytes_are_rejected(key: bytes, value: bytes | None, reason: str) -> None:
    with pytest.raises(RecordRejected) as e:
        decode(key, value)
    assert e.value.reason == reason


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_corrupted_snapshot_bytes_never_crash_the_decoder(data: st.DataObject) -> None:
    v = bytearray(GOOD_VALUE)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(v) - 1))
        v[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(2, len(v)))
    with contextlib.suppress(RecordRejected):  # anything else fails the test
        decode(GOOD_KEY, bytes(v[:cut]))


def _good() -> tuple[bytes, bytes]:
    sim = busy_group()
    sim.tick(12)
    k, v = encode(SnapshotKey("g"), to_snapshot(sim.view(), "m0", "i1"))
    assert v is not None
    return k, v


GOOD_KEY, GOOD_VALUE = _good()


# ------------------------------------------------------------------ replay and selection


def test_replay_of_a_snapshot_record_changes_no_state() -> None:
    sim = busy_group()
    sim.tick(12)
    full = sim.view()
    k, v = encode(SnapshotKey("g"), to_snapshot(full, "m0", "i1"))
    # the same state twice; one replays the snapshot, the other a foreign record at the
    # same offset and time (which moves the clock, expires, and changes nothing else)
    a = from_snapshot(decode(k, v)[1], full.session_timeout_ms,  # type: ignore[arg-type]
                                 full.rebalance_timeout_ms)  # fmt: skip
    b = from_snapshot(decode(k, v)[1], full.session_timeout_ms,  # type: ignore[arg-type]
                                 full.rebalance_timeout_ms)  # fmt: skip
    t = full.log_time + 700
    res = a.replay(full.offset + 1, k, v, t)
    assert res.kind == "snapshot" and res.key == SnapshotKey("g")
    b.replay(full.offset + 1, b"junk", b"junk", t)
    assert core(a) == core(b) and a.offset == full.offset + 1 and a.log_time == t
    assert not a.rejections
    # another group's snapshot, and a bad snapshot key, are what they are for any record
    assert a.replay(a.offset + 1, encode_key(SnapshotKey("h")), v, t).kind == "other_group"
    res = a.replay(a.offset + 1, b"\x01S\x00", v, t)
    assert res.kind == "rejected" and res.reason == "bad_bytes"
    # a bad value is not parsed by the replay: it changes nothing either
    assert a.replay(a.offset + 1, k, b"\x01\x01garbage", t).kind == "snapshot"
    assert not a.assignment_clobbered


def test_newest_snapshot_picks_the_largest_as_of_not_the_last_written() -> None:
    key = HmacSigner(b"k")
    sim = busy_group(key)
    states: dict[int, tuple[object, ...]] = {}
    written: list[int] = []
    for _ in range(3):
        sim.tick(6)
        full = sim.view()
        states[full.offset] = frozen_core(full)
        k, v = encode(SnapshotKey("g"), to_snapshot(full, "m0", "i1"), key)
        written.append(sim.inject(k, v))
    newest = max(states)
    sim.tick(2)
    # forged or broken ones: another group's, unsigned, one claiming a future offset
    forged = to_snapshot(sim.view(), "x", "x")
    future = SnapshotRecord(**{**_fields(forged), "as_of": len(sim.log.records) + 5})
    sim.inject(*encode(SnapshotKey("h"), forged, key))
    sim.inject(*encode(SnapshotKey("g"), forged))
    sim.inject(*encode(SnapshotKey("g"), future, key))
    sim.inject(encode_key(SnapshotKey("g")), b"\x01\x01junk")
    # and a stale copy of the first snapshot, written after all of them
    first = sim.log.records[written[0]]
    sim.inject(first.key, first.value)
    got = newest_snapshot(sim.log.records, "g", key)
    assert got is not None and got[0] == written[-1] and got[1].as_of == newest
    assert newest_snapshot(sim.log.records[: written[0]], "g", key) is None
    # compaction keeps only the stale copy: it restores the true, older state, at its as_of
    compacted = sim.log.compacted()
    got = newest_snapshot(compacted, "g", key)
    assert got is not None and got[1].as_of == min(states)
    restored = from_snapshot(got[1], sim.session_timeout_ms, sim.rebalance_timeout_ms,
                                        key)  # fmt: skip
    assert core(restored) == states[min(states)]


def test_restore_uses_the_snapshot_only_while_its_tail_is_whole() -> None:
    sim = busy_group()
    sim.tick(10)
    assert restore(sim.log.records, "g", sim.session_timeout_ms) is None  # no snapshot yet
    full = sim.view()
    as_of = full.offset
    sim.inject(*encode(SnapshotKey("g"), to_snapshot(full, "m0", "i1")))
    sim.tick(30)
    full = sim.view()

    def restored(records: list[LogRecord]) -> GroupState | None:
        return restore(records, "g", sim.session_timeout_ms, sim.rebalance_timeout_ms)

    whole = restored(sim.log.records)
    assert whole is not None and core(whole) == core(full)
    # only the tail is needed; the cleaner may have been anywhere before the snapshot's as_of
    assert (r := restored(sim.log.records[as_of - 3 :])) is not None and core(r) == core(full)
    r = restored(sim.log.compacted(as_of + 1))
    assert r is not None and core(r) == core(full)
    # past it, records the restored state would judge are gone: it declines
    assert restored(sim.log.compacted(as_of + 10)) is None
    assert restored(sim.log.records[: as_of + 5] + sim.log.records[as_of + 6 :]) is None


def _fields(r: SnapshotRecord) -> dict[str, Any]:
    return {f: getattr(r, f) for f in SnapshotRecord.__slots__}


# ------------------------------------------------------------------ random schedules


class Follower:
    """A state restored from a snapshot, replaying the log on from its ``as_of``."""

    def __init__(self, state: GroupState, strict: bool, origin: str) -> None:
        self.state = state
        #: restored from a reader that read the whole log: must agree on everything
        self.strict = strict
        self.origin = origin

    def follow(self, records: list[LogRecord], to: int) -> GroupState:
        for r in records[self.state.offset + 1 : to + 1]:
            self.state.replay(r.offset, r.key, r.value, r.timestamp)
        return self.state


class SnapshotSchedule(GroupSchedule):
    """The schedules of ``test_protocol_hypothesis``, with snapshots taken and restored."""

    @initialize(seed=st.integers(0, 2**32 - 1))
    def seed(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.followers: list[Follower] = []
        self.taken: dict[int, tuple[object, ...]] = {}  # as_of -> core of the true state there
        self.full: FullReader | None = None

    @precondition(lambda self: bool(self._alive()))
    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        """A process restarts at once: its old incarnation's grants are held (Hold)."""
        sm = self.sim.members[data.draw(st.sampled_from(self._alive()))]
        self.sim.crash(sm.member_id)
        self.sim.members.pop(sm.member_id)
        self.sim.join(sm.member_id, sm.member.topics, read_rate=sm.read_rate)

    @invariant()
    def check(self) -> None:
        super().check()
        if not hasattr(self, "rng") or not hasattr(self, "sim"):
            return
        sim, rng = self.sim, self.rng
        if self.full is None or self.full.sim is not sim:
            self.full = FullReader(sim)
            self.followers, self.taken = [], {}
        full = self.full.follow()
        view = sim.view()
        assert view.offset == full.offset
        for f in self.followers:
            st = f.follow(sim.log.records, full.offset)
            assert st.offset == full.offset
            TALLY["strict ticks" if f.strict else "compacted ticks"] += 1
            if f.strict:
                assert observed(st) == observed(full), (f.origin, observed(st), observed(full))
                assert core(st) == core(full), f.origin
            else:
                assert agreed(st)[:4] == agreed(full)[:4], (f.origin, agreed(st), agreed(full))
        TALLY["ticks with holds"] += bool(full.holds)
        # more often where the state is richest: holds, unacknowledged generations
        interesting = bool(full.holds) or len(full.generations) > 1
        if full.offset >= 0 and rng.random() < (0.4 if interesting else 0.1):
            self.take_snapshot(full)
        if full.offset >= 0 and rng.random() < 0.05:
            self.take_compacted_snapshot(full)
        if self.taken and rng.random() < 0.2:
            self.check_selection(full)

    def take_snapshot(self, full: GroupState) -> None:
        """Snapshot a running member's state (any correct reader, at its own offset), write it
        to the log as the leader would, and follow the state restored from it."""
        sim, rng = self.sim, self.rng
        readers = [sm for sm in sim.members.values() if not sm.crashed and sm.state.offset >= 0]
        src = rng.choice(readers).state if readers and rng.random() < 0.5 else full
        k, v, restored = roundtrip(src, writer=rng.choice(sorted(sim.members) or ["w"]))
        assert core(restored) == core(src)
        self.taken[src.offset] = frozen_core(src)
        sim.inject(k, v)
        self.followers.append(Follower(restored, True, f"snapshot at {src.offset}"))
        TALLY["snapshots" if src is full else "snapshots of a reader behind"] += 1
        TALLY["with holds"] += bool(src.holds)
        TALLY["with history > 1"] += len(src.generations) > 1
        del self.followers[:-4]  # a few at a time keep the schedule fast

    def take_compacted_snapshot(self, full: GroupState) -> None:
        """A reader that started from the log compacted at a random point snapshots: the
        restored state agrees with the full replay as a compacted reader does."""
        assert self.full is not None
        sim, rng = self.sim, self.rng
        end = full.offset
        clean_to = rng.choice([rng.randint(0, end), end - rng.randint(0, min(end, 30))])
        if not self.full.admissible(clean_to):
            return  # see test_protocol_compaction: no replay can agree there
        retention = sim.session_timeout_ms * rng.choice([1, 2, 5])
        fresh = sim.new_state()
        for r in sim.log.compacted(clean_to, sim.clock - retention):
            if r.offset > end:
                break  # a snapshot this check wrote after the full reader's offset
            fresh.replay(r.offset, r.key, r.value, r.timestamp)
        _, _, restored = roundtrip(fresh)
        assert core(restored) == core(fresh)
        assert agreed(restored) == agreed(full), (clean_to, agreed(restored), agreed(full))
        self.followers.append(Follower(restored, False, f"compacted at {clean_to}"))
        TALLY["compacted snapshots"] += 1
        del self.followers[:-4]

    def check_selection(self, full: GroupState) -> None:
        """The whole log, and the log compacted anywhere: the snapshot picked restores the
        true state at its ``as_of``; from the whole log, it is the newest one taken."""
        sim, rng = self.sim, self.rng
        assert self.full is not None
        full = self.full.follow()  # to the end: a snapshot may have been written since
        got = newest_snapshot(sim.log.records, sim.group)
        assert got is not None and got[1].as_of == max(self.taken)
        whole = restore(sim.log.records, sim.group, sim.session_timeout_ms,
                        sim.rebalance_timeout_ms)  # fmt: skip
        assert whole is not None and core(whole) == core(full)
        # anywhere, and often past the end: then the snapshot kept is the one written last,
        # which is an older one whenever a reader behind wrote it (a stale copy)
        clean_to = rng.choice([rng.randint(0, full.offset + 1), full.offset + 1])
        # tombstones kept (delete.retention.ms): dropping the log's last records would leave
        # a tail that looks whole, and a replay that ends before the full one
        compacted = sim.log.compacted(clean_to, tombstones_before=0)
        st = restore(compacted, sim.group, sim.session_timeout_ms, sim.rebalance_timeout_ms)
        # with a whole tail, the restored replay is the full one; else restore declines
        TALLY["restored" if st is not None else "restore declined"] += 1
        assert st is None or core(st) == core(full)
        got = newest_snapshot(compacted, sim.group)
        TALLY["selections"] += 1
        if got is not None:
            TALLY["older snapshot picked"] += got[1].as_of < max(self.taken)
            restored = from_snapshot(got[1], sim.session_timeout_ms, sim.rebalance_timeout_ms)
            assert core(restored) == self.taken[got[1].as_of]

    def teardown(self) -> None:
        """A quiet period, still checked after every tick (liveness is the other test's)."""
        if hasattr(self, "sim"):
            for _ in range(40):
                self.sim.tick()
                self.check()


SnapshotSchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestSnapshotSchedule = SnapshotSchedule.TestCase


def test_zz_the_schedules_exercised_snapshots() -> None:
    """Runs after the schedules (file order): they restored states of every kind. (A history
    of more than one generation is rare in them; the round-trip test above requires it.)"""
    if not TALLY:
        pytest.skip("the schedules did not run in this process")
    print(sorted(TALLY.items()))  # shown with -s
    for k in (
        "snapshots",
        "snapshots of a reader behind",
        "compacted snapshots",
        "with holds",
        "older snapshot picked",
        "strict ticks",
        "compacted ticks",
        "restored",
        "restore declined",
    ):
        assert TALLY[k] > 0, (k, str(sorted(TALLY.items())))


# ------------------------------------------------------------------ size and speed


def big_group(members: int) -> GroupSim:
    """A settled group of ``members`` members on 10 topics of ``members`` partitions each,
    round-robin (every member's partitions scattered: the encoding's worst case)."""
    sim = GroupSim(
        {f"t{i}": members for i in range(10)},
        assignor="roundrobin",
        shared_state=True,
        session_timeout_ms=30_000,
        heartbeat_interval_ms=3_000,
    )
    per_tick = max(1, members // 10)
    for i in range(members):
        sim.join(f"m{i:04d}")
        if (i + 1) % per_tick == 0:
            sim.tick()
    sim.settle(max_ticks=300)
    return sim


def measure(sim: GroupSim) -> dict[str, float]:
    full = sim.view()
    t0 = time.process_time()
    snap = to_snapshot(full, "m0000", "i1")
    k, v = encode(SnapshotKey(sim.group), snap)
    t1 = time.process_time()
    _, dv = decode(k, v)
    t2 = time.process_time()
    assert isinstance(dv, SnapshotRecord) and v is not None
    restored = from_snapshot(dv, sim.session_timeout_ms, sim.rebalance_timeout_ms)
    t3 = time.process_time()
    assert core(restored) == core(full)
    return {
        "members": len(full.members),
        "history": len(full.generations),
        "bytes": len(v),
        "json_bytes": len(zlib.decompress(v[2:])),
        "encode_ms": (t1 - t0) * 1e3,
        "decode_ms": (t2 - t1) * 1e3,
        "restore_ms": (t3 - t2) * 1e3,
    }


def churn(sim: GroupSim, members: int) -> None:
    """Crash one member in 20, start as many new ones, and stop mid-rebalance."""
    for i in range(0, members, 20):
        sim.crash(f"m{i:04d}")
    for i in range(max(1, members // 20)):
        sim.join(f"n{i:04d}")
    sim.tick(20)


def test_a_thousand_member_snapshot_stays_well_under_a_megabyte() -> None:
    sim = big_group(1_000)
    m = measure(sim)
    assert m["members"] == 1_000 and m["bytes"] < 256 * 1024, m
    churn(sim, 1_000)
    m = measure(sim)
    assert m["members"] == 1_050 and m["bytes"] < 256 * 1024, m


if __name__ == "__main__":  # sizes and timings: python -m tests.test_protocol_snapshot
    for n in (10, 100, 1_000):
        sim = big_group(n)
        print(n, "settled", measure(sim))
        churn(sim, n)
        print(n, "churn  ", measure(sim))
        a = sim.view().assignment
        assert a is not None
        # what each generation the history keeps beyond the current one adds, at most
        print(n, "one assignment record", len(encode(AssignmentKey(sim.group), a)[1] or b""))
