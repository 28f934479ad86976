"""Decoder and replay fuzz beyond ``test_protocol_records.py``, and allocation bombs.

Together with the three fuzz tests there (4,000 inputs) this runs 10,700 hypothesis inputs:
keys, signed values, and whole sequences of records replayed into a ``GroupState``.
The contract: the decoder raises nothing but ``RecordRejected``; ``GroupState.replay`` raises
nothing at all, and counts every rejection by reason.

The bombs are records of a few bytes to a few KB that, without the bounds in
``groupkit.protocol.records`` (``MAX_PARTITIONS``, ``MAX_PAYLOAD``, ``MAX_CONTAINERS``), would
make every member of a group expand billions of partitions or parse a gigabyte of JSON.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupkit.errors import RecordRejected
from groupkit.protocol import ownership
from groupkit.protocol.records import (
    MAX_CONTAINERS,
    MAX_PARTITIONS,
    MAX_PAYLOAD,
    HmacSigner,
    assignment_record,
    covered_member,
    decode,
    decode_key,
    decode_value,
    encode,
    member_record,
    member_tombstone,
)
from groupkit.protocol.state import GroupState
from groupkit.types import TopicPartition
from tests.test_protocol_records import mutations

# ------------------------------------------------------------------ allocation bombs

MKEY = encode(*member_tombstone("g", "m"))[0]
AKEY = encode(*assignment_record(
    "g", generation=1, leader_id="m", leader_incarnation="i", leader_joined_at=0,
    protocol="cooperative", phase="complete", assignor="range", partition_counts={}, members={},
))[0]  # fmt: skip
FULL = [0, (1 << 20) - 1]  # the widest range one topic may have


def _member_doc(owned: object) -> dict[str, Any]:
    return {"inc": "i", "seq": 1, "topics": ["t"], "owned": owned, "owned_gen": 0,
            "acked_gen": 0, "joined_at": None, "rack": None, "capacity": None,
            "client": {}, "prev_ts": None, "since_gen": 0}  # fmt: skip


def _rejected_fast(key: bytes, value: bytes, reason: str) -> None:
    """Rejected for ``reason`` — ``too_large`` is decided from the encoded ranges, before any
    of them is expanded, so the bomb costs no work (bench/limits.py measures it)."""
    with pytest.raises(RecordRejected) as e:
        decode(key, value)
    assert e.value.reason == reason, e.value


def test_repeated_full_ranges_are_refused_before_expanding() -> None:
    # 1.5 KB: 100 times every partition of one topic (before: 50 s of CPU in every member)
    doc = _member_doc({"t": [FULL] * 100})
    _rejected_fast(MKEY, b"\x01\x00" + json.dumps(doc).encode(), "too_large")


def test_a_million_single_partitions_are_refused() -> None:
    half = list(range(MAX_PARTITIONS // 2 + 1))
    doc = _member_doc({"t0": half, "t1": half})
    _rejected_fast(MKEY, b"\x01\x01" + zlib.compress(json.dumps(doc).encode()), "too_large")


def test_many_full_topics_are_refused_before_expanding() -> None:
    # 20 KB: 1,000 topics of 1M partitions each (before: ~200 GB of TopicPartitions)
    doc = _member_doc({f"t{i}": [FULL] for i in range(1000)})
    _rejected_fast(MKEY, b"\x01\x00" + json.dumps(doc).encode(), "too_large")


def test_partition_budget_spans_every_member_of_an_assignment() -> None:
    # each member's share is allowed alone; together they exceed one record's budget
    share = [0, MAX_PARTITIONS // 2]
    members = {
        f"m{i}": {"inc": "i", "topics": ["t"], "assigned": {}, "revoke": {},
                  "pending": {"t": [share]}}
        for i in range(2)
    }  # fmt: skip
    doc = {"gen": 1, "leader": "m0", "leader_inc": "i", "leader_joined_at": 0,
           "protocol": "cooperative", "phase": "partial", "assignor": "x",
           "counts": {"t": 1 << 20}, "members": members}  # fmt: skip
    _rejected_fast(AKEY, b"\x01\x00" + json.dumps(doc).encode(), "too_large")


def test_zlib_bomb_is_refused() -> None:
    payload = b" " * (MAX_PAYLOAD + 10) + json.dumps(_member_doc({})).encode()
    packed = zlib.compress(payload, 9)
    assert len(packed) < 20_000
    _rejected_fast(MKEY, b"\x01\x01" + packed, "too_large")


def test_container_bomb_is_refused() -> None:
    # ~3 MB of "{}," (3 KB compressed) would be a million dicts in every member
    payload = b'{"x":[' + b"{}," * MAX_CONTAINERS + b"{}]}"
    assert len(payload) < MAX_PAYLOAD
    _rejected_fast(MKEY, b"\x01\x01" + zlib.compress(payload, 9), "too_large")


# ------------------------------------------------------------------ keys

KEY_PARTS = st.tuples(
    st.sampled_from([0, 1, 1, 1, 2, 255]),
    st.sampled_from([ord("M"), ord("A"), ord("Z"), 0]),
    st.integers(0, 12),
    st.binary(max_size=12),
)


@settings(max_examples=3500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=24), KEY_PARTS.map(
    lambda p: bytes([p[0], p[1]]) + p[2].to_bytes(2, "big") + p[3]
)))  # fmt: skip
def test_fuzz_keys(raw: bytes) -> None:
    try:
        key = decode_key(raw)
    except RecordRejected as e:
        assert e.reason
        return
    # a key that decodes takes any value without escaping the contract
    for value in (None, b"", b"\x01\x00{}", raw):
        try:
            decode_value(key, value)
        except RecordRejected as e:
            assert e.reason


# ------------------------------------------------------------------ signed values

SIGNER = HmacSigner(b"group key")
SIGNED = [
    encode(*member_record("g", "m1", incarnation="i1", seq=2, topics=["t0"]), SIGNER),
    encode(*member_record("g", "m1", incarnation="i1", seq=3, topics=["t0"],
                          owned=[("t0", p) for p in range(300)]), SIGNER),  # zlib
    encode(*assignment_record(
        "g", generation=2, leader_id="m1", leader_incarnation="i1", leader_joined_at=1,
        protocol="eager", phase="complete", assignor="range", partition_counts={"t0": 2},
        members={"m1": covered_member("i1", ["t0"], [("t0", 0), ("t0", 1)])},
    ), SIGNER),
]  # fmt: skip


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(SIGNED),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 10**6),
)
def test_fuzz_signed_values_only_verify_untouched(
    rec: tuple[bytes, bytes], flips: list[tuple[int, int]], cut: int
) -> None:
    rk, rv = rec
    for value in mutations(rv, flips, cut):
        try:
            decode(rk, value, SIGNER)
        except RecordRejected as e:
            assert e.reason
            continue
        # only bytes that still carry the same tag over the same key and payload verify
        assert value == rv


# ------------------------------------------------------------------ replay sequences

MEMBERS = ("m1", "m2", "m3")
PARTS = [("t0", p) for p in range(4)]
subsets = st.lists(st.sampled_from(PARTS), max_size=4, unique=True)


@st.composite
def a_member_record(draw: st.DrawFn) -> tuple[bytes, bytes | None]:
    mid = draw(st.sampled_from(MEMBERS))
    if draw(st.integers(0, 9)) == 0:
        return encode(*member_tombstone("g", mid))
    joined_at = draw(st.one_of(st.none(), st.integers(0, 3000)))
    prev = draw(st.one_of(st.none(), st.integers(0, 4000)))
    if isinstance(prev, int):  # a record with prev_ts says when the membership began
        joined_at = prev if joined_at is None else min(joined_at, prev)
    owned = draw(subsets)
    # offsets committed for what it lets go, or for what it never had
    free = [p for p in PARTS if p not in owned]
    released = draw(st.lists(st.sampled_from(free), max_size=2, unique=True)) if free else []
    k, v = member_record(
        "g", mid, incarnation=draw(st.sampled_from(["i1", "i2"])), seq=draw(st.integers(0, 6)),
        topics=draw(st.sampled_from([["t0"], ["t0", "t1"], []])), owned=owned,
        owned_generation=draw(st.integers(0, 4)), acked_generation=draw(st.integers(0, 4)),
        joined_at=joined_at, prev_ts=prev, since_generation=draw(st.integers(0, 4)),
        committed={p: draw(st.integers(0, 100)) for p in released},
    )  # fmt: skip
    return encode(k, v)


@st.composite
def an_assignment(draw: st.DrawFn) -> tuple[bytes, bytes | None]:
    covered = draw(st.lists(st.sampled_from(MEMBERS), min_size=1, max_size=3, unique=True))
    protocol = draw(st.sampled_from(["eager", "cooperative"]))
    k, v = assignment_record(
        "g", generation=draw(st.integers(0, 5)), leader_id=draw(st.sampled_from(MEMBERS)),
        leader_incarnation=draw(st.sampled_from(["i1", "i2"])),
        leader_joined_at=draw(st.integers(0, 3000)), protocol=protocol,
        phase=draw(st.sampled_from(["revoke", "partial", "complete"])), assignor="range",
        partition_counts={"t0": draw(st.integers(0, 4))},
        members={
            m: covered_member(draw(st.sampled_from(["i1", "i2"])), ["t0"], draw(subsets),
                              draw(subsets), draw(subsets))
            for m in covered
        },
    )  # fmt: skip
    return encode(k, v)


@st.composite
def garbage(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    k, v = draw(st.one_of(a_member_record(), an_assignment()))
    if v is not None and draw(st.booleans()):
        b = bytearray(v)
        b[draw(st.integers(0, len(b) - 1))] = draw(st.integers(0, 255))
        v = bytes(b)
    return draw(st.sampled_from([k, None, b"", k[:3]])), draw(
        st.one_of(st.just(v), st.binary(max_size=40))
    )


RECORD = st.one_of(a_member_record(), a_member_record(), an_assignment(), garbage())
STEP = st.tuples(RECORD, st.integers(-1, 3), st.integers(-500, 4000))


@settings(max_examples=1200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, min_size=1, max_size=12), st.booleans())
def test_fuzz_replay_never_raises_and_counts_rejections(
    steps: list[tuple[tuple[bytes | None, bytes | None], int, int]], signed: bool
) -> None:
    state = GroupState("g", 3000, 5000, verifier=SIGNER if signed else None)
    offset, now, rejected = 0, 1000, 0
    for (key, value), doff, dt in steps:
        offset += doff  # sometimes repeats or goes back: offset_regressed
        now += dt  # sometimes goes back, or jumps past every session
        res = state.replay(offset, key, value, now)
        if res.kind == "rejected":
            rejected += 1
            assert res.reason
        if signed and value:
            # nothing unsigned gets past a group key
            assert res.kind in ("rejected", "other_group") or value[1] & 0x02
    assert sum(state.rejections.values()) == rejected
    a = state.assignment
    if a is not None:  # whatever was accepted is self-consistent
        granted = [tp for c in a.members.values() for tp in c.assigned]
        assert len(granted) == len(set(granted))
    for mid in state.live_members():  # every query answers
        ownership.may_hold(state, mid)
        ownership.is_lagging(state, mid)
        hints = ownership.hints_for(state, mid, "i1", [TopicPartition(*p) for p in PARTS])
        assert all(o >= 0 for o in hints.values())
    ownership.holders(state)
    ownership.in_flight(state)


# ------------------------------------------------------------------ memory of a long-lived group


def test_replay_state_does_not_grow_with_generations() -> None:
    from groupkit.testing.sim import GroupSim

    sim = GroupSim({"t0": 4}, session_timeout_ms=3000, heartbeat_interval_ms=300)
    sim.join("a")
    sim.settle()
    for i in range(30):  # 30 rebalances: a member joins and leaves
        sim.join(f"b{i}")
        sim.settle()
        sim.leave(f"b{i}")
        sim.settle()
    st = sim.view()
    assert st.generation >= 60
    assert len(st.generations) <= 2 and len(st.generation_time) <= 2, (
        st.generations,
        st.generation_time,
    )
