"""Control records: round trips, range encoding, size at scale, and typed rejections."""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupkit.errors import RecordRejected
from groupkit.protocol import records
from groupkit.protocol.memo import BoundedMemo
from groupkit.protocol.records import (
    MAX_FALLBACK_DETAIL,
    AssignmentKey,
    AssignmentRecord,
    AssignorFallback,
    HeldEcho,
    HmacSigner,
    MemberKey,
    MemberRecord,
    assignment_record,
    covered_member,
    decode,
    decode_partitions,
    encode,
    encode_key,
    encode_partitions,
    member_record,
    member_tombstone,
)
from groupkit.protocol.state import GroupState
from groupkit.protocol.vocab import RejectReason, ReplayKind
from groupkit.types import TopicPartition as TP


def a_member(**kw: object) -> tuple[bytes, bytes | None]:
    args: dict[str, object] = {"incarnation": "i1", "seq": 3, "topics": ["t0", "t1"]}
    args.update(kw)
    k, v = member_record("g", "m1", **args)  # type: ignore[arg-type]
    return encode(k, v)


def an_assignment(n_members: int = 2, n_parts: int = 8) -> tuple[bytes, bytes | None]:
    members = {
        f"m{i}": covered_member(
            f"i{i}", ["t0"], [("t0", p) for p in range(n_parts) if p % n_members == i]
        )
        for i in range(n_members)
    }
    k, v = assignment_record(
        "g", generation=7, leader_id="m0", leader_incarnation="i0", leader_joined_at=5,
        protocol="cooperative", phase="complete", assignor="range",
        partition_counts={"t0": n_parts}, members=members,
    )  # fmt: skip
    return encode(k, v)


def test_member_record_round_trip() -> None:
    k, v = member_record(
        "g", "m1", incarnation="i1", seq=3, topics=["t1", "t0"], owned=[("t0", 1), ("t0", 2)],
        owned_generation=4, acked_generation=4, joined_at=100, rack="r1", capacity=2.5,
        client={"host": "h"},
    )  # fmt: skip
    rk, rv = encode(k, v)
    assert decode(rk, rv) == (k, v)
    assert k == MemberKey("g", "m1") and v.topics == ("t0", "t1")


def test_seen_generation_is_optional_and_never_below_acked() -> None:
    _, v = member_record("g", "m", incarnation="i", seq=1, topics=["t"], acked_generation=4)
    assert v.seen_generation == 4  # a member has seen at least what it acknowledged
    k, v = member_record("g", "m", incarnation="i", seq=1, topics=["t"], acked_generation=4,
                         seen_generation=6)  # fmt: skip
    assert decode(*encode(k, v)) == (k, v) and v.seen_generation == 6
    # records written before the field existed decode as having seen what they acked
    _, old = decode(MKEY, _value({**GOOD_MEMBER, "acked_gen": 5}))
    assert isinstance(old, MemberRecord) and old.seen_generation == 5
    with pytest.raises(ValueError):
        member_record("g", "m", incarnation="i", seq=1, topics=["t"], acked_generation=4,
                      seen_generation=3)  # fmt: skip


def test_assignment_record_round_trip_and_tombstone() -> None:
    rk, rv = an_assignment()
    k, v = decode(rk, rv)
    assert k == AssignmentKey("g")
    assert v is not None and not isinstance(v, type(None))
    assert decode(*encode(*decode(rk, rv))) == (k, v)
    tk, tv = encode(*member_tombstone("g", "m1"))
    assert tv is None and decode(tk, tv) == (MemberKey("g", "m1"), None)


def test_a_reassertion_names_its_origin_and_equals_the_record_it_repeats() -> None:
    """docs/protocol.md, "Generations": re-assertion: ``origin`` round-trips, is optional, and is
    no part of the generation (a re-assertion equals the first record)."""
    _, first = decode(*an_assignment())
    assert isinstance(first, AssignmentRecord) and first.origin is None
    again = dataclasses.replace(first, origin=(12, 3_400))
    _, v = decode(*encode(AssignmentKey("g"), again))
    assert isinstance(v, AssignmentRecord) and v.origin == (12, 3_400) and v == first
    assert "origin" not in records._assignment_doc(first)


def a_fallback_assignment(
    fallback: AssignorFallback | None, signer: HmacSigner | None = None
) -> tuple[bytes, bytes | None]:
    k, v = assignment_record(
        "g", generation=3, leader_id="m0", leader_incarnation="i0", leader_joined_at=5,
        protocol="cooperative", phase="complete", assignor="mine", partition_counts={"t0": 2},
        members={"m0": covered_member("i0", ["t0"], [("t0", 0), ("t0", 1)])}, fallback=fallback,
    )  # fmt: skip
    return encode(k, v, signer)


def test_the_fallback_field_round_trips_is_optional_and_signed() -> None:
    """An assignment planned by the fallback says so: the field round-trips,
    records without it (all that predate it) decode with none, and the signature covers it."""
    why = AssignorFallback("invalid", "t0-0 is assigned twice: to a and b", "cooperative-sticky")
    rk, rv = a_fallback_assignment(why)
    _, v = decode(rk, rv)
    assert isinstance(v, AssignmentRecord) and v.fallback == why
    assert decode(*encode(*decode(rk, rv))) == decode(rk, rv)
    # absent: the group's own assignor planned it; the bytes are as before the field existed
    rk, plain = a_fallback_assignment(None)
    _, v = decode(rk, plain)
    assert isinstance(v, AssignmentRecord) and v.fallback is None
    assert isinstance(v, AssignmentRecord) and "fallback" not in records._assignment_doc(v)
    _, old = decode(AKEY, _value(GOOD_ASSIGNMENT))  # written before the field existed
    assert isinstance(old, AssignmentRecord) and old.fallback is None
    # signed: a reader with the key rejects a record whose fallback was changed
    s = HmacSigner(b"k")
    rk, signed = a_fallback_assignment(why, s)
    assert decode(rk, signed, s)[1] == decode(rk, a_fallback_assignment(why)[1])[1]
    forged = a_fallback_assignment(AssignorFallback("timeout", "x", "cooperative-sticky"))[1]
    assert signed is not None and forged is not None
    tag = signed[3 : 3 + signed[2]]
    with pytest.raises(RecordRejected) as e:
        decode(rk, bytes([signed[0], signed[1], len(tag)]) + tag + forged[2:], s)
    assert e.value.reason == "bad_signature"
    # the factory bounds the detail and needs a reason
    long = AssignorFallback("raised", "x" * 1000, "cooperative-sticky")
    _, v = decode(*a_fallback_assignment(long))
    assert isinstance(v, AssignmentRecord) and v.fallback is not None
    assert len(v.fallback.detail) == MAX_FALLBACK_DETAIL
    with pytest.raises(ValueError):
        a_fallback_assignment(AssignorFallback("", "x", "cooperative-sticky"))


def test_keys_carry_the_group_so_one_topic_serves_many() -> None:
    a = encode(*member_tombstone("g1", "m"))[0]
    b = encode(*member_tombstone("g2", "m"))[0]
    assert a != b and decode(a, None)[0].group == "g1"
    # the group id may contain anything, even the separator of a naive encoding
    k = encode(*member_tombstone("a\x00b", "m\x00"))[0]
    assert decode(k, None)[0] == MemberKey("a\x00b", "m\x00")


def test_partitions_are_range_encoded() -> None:
    ps = [("t", p) for p in [0, 1, 2, 3, 7, 9, 10]] + [("u", 5)]
    enc = encode_partitions(ps)
    assert enc == {"t": [[0, 3], 7, [9, 10]], "u": [5]}
    assert decode_partitions(enc) == frozenset(TP(t, p) for t, p in ps)


def test_factories_refuse_bad_input() -> None:
    with pytest.raises(ValueError):
        member_record("", "m", incarnation="i", seq=0, topics=[])
    with pytest.raises(ValueError):
        member_record("g", "m", incarnation="", seq=0, topics=[])
    with pytest.raises(ValueError):
        assignment_record(
            "g", generation=1, leader_id="m", leader_incarnation="i", leader_joined_at=0,
            protocol="sticky", phase="complete", assignor="r", partition_counts={}, members={},
        )  # fmt: skip


def test_100k_partitions_1000_members_under_1mb() -> None:
    # the worst case for range encoding: round-robin scatter, nothing contiguous
    # (encode and decode times are measured in bench/protocol.py, not asserted here)
    rk, rv = an_assignment(1000, 100_000)
    assert rv is not None
    assert len(rv) < 1_000_000
    _, v = decode(rk, rv)
    assert sum(len(c.assigned) for c in v.members.values()) == 100_000  # type: ignore[union-attr]


def _value(doc: object, version: int = 1, flags: int = 0) -> bytes:
    return bytes([version, flags]) + json.dumps(doc).encode()


GOOD_MEMBER = {
    "inc": "i", "seq": 1, "topics": ["t"], "owned": {}, "owned_gen": 0, "acked_gen": 0,
    "joined_at": None, "rack": None, "capacity": None, "client": {}, "prev_ts": None,
    "since_gen": 0,
}  # fmt: skip
MKEY = encode(*member_tombstone("g", "m"))[0]
AKEY = an_assignment()[0]
GOOD_ASSIGNMENT = {
    "gen": 1, "leader": "m", "leader_inc": "i", "leader_joined_at": 0, "protocol": "eager",
    "phase": "complete", "assignor": "range", "counts": {"t": 1},
    "members": {"m": {"inc": "i", "topics": ["t"], "assigned": {"t": [0]}, "revoke": {},
                      "pending": {}}},
}  # fmt: skip


def _without(d: dict[str, object], k: str) -> dict[str, object]:
    return {x: y for x, y in d.items() if x != k}


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (b"", b"", "bad_bytes"),
        (None, b"", "bad_bytes"),
        (b"\x01M", b"", "bad_bytes"),
        (b"\x09M\x00\x01gm", b"", "unknown_version"),
        (b"\x01Z\x00\x01gm", b"", "unknown_kind"),
        (b"\x01M\x00\x09gm", b"", "bad_bytes"),
        (b"\x01M\x00\x01g", b"", "missing_field"),
        (b"\x01M\x00\x01\xff\xfe", b"", "bad_bytes"),
        (b"\x01A\x00\x01gx", b"", "bad_bytes"),
        (AKEY, None, "bad_value"),
        (MKEY, b"\x01", "bad_bytes"),
        (MKEY, _value(GOOD_MEMBER, version=3), "unknown_version"),
        (MKEY, _value(GOOD_MEMBER, version=2), "bad_value"),
        (MKEY, _value({**_without(GOOD_MEMBER, "prev_ts"), "run": 2}, version=2), "bad_value"),
        (MKEY, _value(_without(GOOD_MEMBER, "prev_ts"), version=2), "missing_field"),
        (AKEY, _value(GOOD_ASSIGNMENT, version=2), "unknown_version"),
        (MKEY, _value(GOOD_MEMBER, flags=0x80), "bad_bytes"),
        (MKEY, b"\x01\x00{not json", "bad_bytes"),
        (MKEY, b"\x01\x00\xff\xff", "bad_bytes"),
        (MKEY, b"\x01\x01notzlib", "bad_bytes"),
        (MKEY, b"\x01\x01" + zlib.compress(b"{}")[:-3], "bad_bytes"),
        (MKEY, _value([1, 2]), "wrong_type"),
        (MKEY, _value(_without(GOOD_MEMBER, "seq")), "missing_field"),
        (MKEY, _value(_without(GOOD_MEMBER, "rack")), "missing_field"),
        (MKEY, _value({**GOOD_MEMBER, "seq": True}), "wrong_type"),
        (MKEY, _value({**GOOD_MEMBER, "seq": "1"}), "wrong_type"),
        (MKEY, _value({**GOOD_MEMBER, "seq": -1}), "bad_value"),
        (MKEY, _value({**GOOD_MEMBER, "inc": ""}), "bad_value"),
        (MKEY, _value({**GOOD_MEMBER, "topics": [1]}), "wrong_type"),
        (MKEY, _value({**GOOD_MEMBER, "owned": {"t": [[3, 1]]}}), "bad_value"),
        (MKEY, _value({**GOOD_MEMBER, "owned": {"t": [-1]}}), "bad_value"),
        (MKEY, _value({**GOOD_MEMBER, "owned": {"t": [[0, 10**12]]}}), "bad_value"),
        (MKEY, _value({**GOOD_MEMBER, "owned": {"t": ["x"]}}), "wrong_type"),
        (MKEY, _value({**GOOD_MEMBER, "owned": []}), "wrong_type"),
        (MKEY, _value({**GOOD_MEMBER, "client": {"a": 1}}), "wrong_type"),
        (MKEY, _value({**GOOD_MEMBER, "leaving": 1}), "wrong_type"),
        (MKEY, _value({**GOOD_MEMBER, "acked_gen": 3, "seen_gen": 2}), "bad_value"),
        (MKEY, _value({**GOOD_MEMBER, "seen_gen": -1}), "bad_value"),
        (AKEY, _value({"gen": 1}), "missing_field"),
        (AKEY, _value({**GOOD_ASSIGNMENT, "fallback": "raised"}), "wrong_type"),
        (AKEY, _value({**GOOD_ASSIGNMENT, "origin": [3]}), "bad_value"),
        (AKEY, _value({**GOOD_ASSIGNMENT, "origin": [3, -1]}), "bad_value"),
        (AKEY, _value({**GOOD_ASSIGNMENT, "origin": {"offset": 3}}), "wrong_type"),
        (
            AKEY,
            _value({**GOOD_ASSIGNMENT, "fallback": {"reason": "raised", "detail": ""}}),
            "missing_field",
        ),
        (
            AKEY,
            _value({**GOOD_ASSIGNMENT, "fallback": {"reason": "", "detail": "", "assignor": "a"}}),
            "bad_value",
        ),
        (
            AKEY,
            _value(
                {**GOOD_ASSIGNMENT, "fallback": {"reason": "raised", "detail": 3, "assignor": "a"}}
            ),
            "wrong_type",
        ),
        (
            AKEY,
            _value(
                {
                    **GOOD_ASSIGNMENT,
                    "fallback": {
                        "reason": "raised",
                        "detail": "x" * (MAX_FALLBACK_DETAIL + 1),
                        "assignor": "a",
                    },
                }
            ),
            "bad_value",
        ),
    ],
)
def test_decoding_rejects_with_a_reason(key: bytes, value: bytes | None, reason: str) -> None:
    with pytest.raises(RecordRejected) as e:
        decode(key, value)
    assert e.value.reason == reason


@pytest.mark.parametrize(
    ("held", "reason"),
    [
        ([["i1", {"t0": [1]}, 5, 0]], "bad_value"),  # the writer's own process
        ([["i0", {}, 5, 0]], "bad_value"),  # holding nothing
        ([["i0", {"t0": [1]}, -1, 0]], "bad_value"),
        ([["i0", {"t0": [1]}, 5]], "wrong_type"),
        ([["i0", {"t0": [1]}, "5", 0]], "wrong_type"),
        ({"i0": 1}, "wrong_type"),
    ],
)
def test_a_held_echo_names_another_process_and_what_it_holds(held: object, reason: str) -> None:
    k, v = member_record("g", "m", incarnation="i1", seq=1, topics=["t0"],
                         held=[HeldEcho("i0", frozenset({TP("t0", 1)}), None, 2)])  # fmt: skip
    rk, rv = encode(k, v)
    assert decode(rk, rv) == (k, v)
    assert rv is not None and rv[1] == 0  # uncompressed: the JSON follows the two header bytes
    doc = json.loads(rv[2:])
    doc["held"] = held
    with pytest.raises(RecordRejected) as e:
        decode(rk, rv[:2] + json.dumps(doc).encode())
    assert e.value.reason == reason


def test_truncated_records_are_rejected() -> None:
    rk, rv = an_assignment(10, 1000)
    assert rv is not None
    for cut in range(0, len(rv), max(1, len(rv) // 50)):
        with pytest.raises(RecordRejected):
            decode(rk, rv[:cut])


def test_signed_records() -> None:
    s = HmacSigner(b"group key")
    k, v = member_record("g", "m", incarnation="i", seq=1, topics=["t"])
    rk, rv = encode(k, v, s)
    assert decode(rk, rv, s) == (k, v)
    assert decode(rk, rv) == (k, v)  # readers without a key still read signed records
    with pytest.raises(RecordRejected) as e:
        decode(rk, encode(k, v)[1], s)
    assert e.value.reason == "unsigned"
    with pytest.raises(RecordRejected) as e:
        decode(rk, encode(k, v, HmacSigner(b"other"))[1], s)
    assert e.value.reason == "bad_signature"
    # a signature binds the key: the same value under another member's key does not verify
    other = encode(*member_tombstone("g", "m2"))[0]
    with pytest.raises(RecordRejected) as e:
        decode(other, rv, s)
    assert e.value.reason == "bad_signature"


# ---------------------------------------------------------------- fuzz: only RecordRejected

VALID = [
    a_member(),
    a_member(owned=[("t0", 1)], joined_at=4),
    an_assignment(),
    an_assignment(50, 2000),
]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=64), st.one_of(st.none(), st.binary(max_size=256)))
def test_fuzz_random_bytes(key: bytes, value: bytes | None) -> None:
    try:
        decode(key, value)
    except RecordRejected as e:
        assert e.reason


def mutations(raw: bytes, flips: list[tuple[int, int]], cut: int) -> tuple[bytes, bytes]:
    """``raw`` with bytes overwritten at ``flips`` (positions wrap), whole and truncated."""
    b = bytearray(raw)
    for pos, byte in flips:
        b[pos % len(b)] = byte
    return bytes(b), bytes(b)[: cut % (len(b) + 1)]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(VALID),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
    st.integers(0, 10**6),
)
def test_fuzz_mutated_records(
    rec: tuple[bytes, bytes], flips: list[tuple[int, int]], cut: int
) -> None:
    rk, rv = rec
    for value in mutations(rv, flips, cut):
        try:
            decode(rk, value)
        except RecordRejected as e:
            assert e.reason


@settings(max_examples=1000, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(
        ["inc", "seq", "topics", "owned", "owned_gen", "acked_gen", "joined_at", "rack",
         "capacity", "client", "gen", "leader", "members", "assigned", "t"]), c, max_size=6),
    max_leaves=12,
))  # fmt: skip
def test_fuzz_structured_json(doc: object) -> None:
    for key in (MKEY, AKEY):
        for d in (doc, {**GOOD_MEMBER, "owned": doc}):
            try:
                decode(key, _value(d))
            except RecordRejected as e:
                assert e.reason


def test_key_length_prefix() -> None:
    k = encode(*member_tombstone("grp", "m"))[0]
    assert k[:4] == struct.pack(">BBH", 1, ord("M"), 3)


# ------------------------------------------------------------------ the decoded-record memo


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**40), st.integers(0, 2**40),
    st.lists(st.tuples(st.sampled_from(["t0", "t1"]), st.integers(0, 50)), max_size=8),
    st.one_of(st.none(), st.integers(0, 2**40)), st.integers(0, 5), st.integers(0, 3),
)  # fmt: skip
def test_a_heartbeat_decoded_from_the_memo_equals_a_full_decode(
    seq1: int, seq2: int, owned: list[tuple[str, int]], joined_at: int | None, acked: int,
    ahead: int,
) -> None:  # fmt: skip
    def record(seq: int) -> tuple[MemberKey, MemberRecord]:
        k, v = member_record("g", "m1", incarnation="i1", seq=seq, topics=["t0", "t1"],
                             owned=owned, acked_generation=acked, seen_generation=acked + ahead,
                             joined_at=joined_at, client={"host": "h"})  # fmt: skip
        return k, v  # type: ignore[return-value]

    records._member_memo.clear()
    first, second = record(seq1), record(seq2)
    assert decode(*encode(*first)) == first  # a full decode, kept
    assert decode(*encode(*second)) == second  # from the memo when only seq differs
    records._member_memo.clear()
    assert decode(*encode(*second)) == second


#: MemberRecord's fields in order: the memo's fast path in ``_decode_value`` builds a record
#: positionally (for speed), so a new or moved field must be added there too, then here
MEMBER_RECORD_FIELDS = (
    "incarnation", "seq", "topics", "owned", "owned_generation", "acked_generation",
    "joined_at", "rack", "capacity", "client", "seen_generation", "prev_ts",
    "since_generation", "committed", "instance_id", "seat", "seat_ts", "reset_at",
    "reset_done", "leaving", "admitted_in",
    # version 2's: the memo holds version-1 records only, which have none
    "run",
    "held",
)  # fmt: skip


def test_member_record_fields_are_the_ones_the_memo_fast_path_builds() -> None:
    assert tuple(f.name for f in dataclasses.fields(MemberRecord)) == MEMBER_RECORD_FIELDS


@pytest.mark.parametrize(
    "extra",
    [
        # a static member's join that takes its seat over
        {"instance_id": "m1", "seat": "i0", "seat_ts": 90, "joined_at": 50, "prev_ts": None},
        # a static member's heartbeat with committed offsets and a carried-out reset
        {"instance_id": "m1", "seat": "i0", "joined_at": 50, "prev_ts": 95,
         "since_generation": 2, "committed": {("t1", 3): 41},
         "reset": (7, [("t0", 0), ("t0", 1)])},
        # a clean leave's last record
        {"joined_at": 50, "prev_ts": 95, "since_generation": 2, "committed": {("t1", 3): 41},
         "leaving": True},
        # an admitted newcomer's heartbeat (docs/protocol.md, "Admission")
        {"joined_at": 50, "prev_ts": 95, "since_generation": 5, "admitted_in": 4},
        # a restarted member's, echoing the hold on its earlier process (docs/protocol.md, rule 1)
        {"joined_at": 50, "prev_ts": 95, "since_generation": 2,
         "held": [HeldEcho("i0", frozenset({TP("t1", 2)}), 1_000, 0)]},
    ],
)  # fmt: skip
def test_a_memo_hit_keeps_every_field(extra: dict[str, object]) -> None:
    def record(seq: int) -> tuple[MemberKey, MemberRecord]:
        k, v = member_record("g", "m1", incarnation="i1", seq=seq, topics=["t0", "t1"],
                             owned=[("t0", 0), ("t0", 1)], owned_generation=3,
                             acked_generation=3, seen_generation=4, rack="r1", capacity=2.5,
                             client={"host": "h"}, **extra)  # type: ignore[arg-type]  # fmt: skip
        return k, v  # type: ignore[return-value]

    records._member_memo.clear()
    first, second = record(4), record(5)
    assert decode(*encode(*first)) == first
    assert records._member_memo  # the next decode is a memo hit
    assert decode(*encode(*second)) == second


@pytest.mark.parametrize(
    ("seq", "expect"),
    [
        (b"01", "bad_bytes"),  # JSON has no leading zeros
        (b"-1", "bad_value"),
        (b"1.5", "wrong_type"),
        (b"1e3", "wrong_type"),
        (b'1,"seq":7', 7),  # a repeated key: JSON keeps the last, and so must we
        (b"12", 12),
    ],
)
def test_the_memo_reads_seq_as_json_does(seq: bytes, expect: object) -> None:
    doc = json.dumps(GOOD_MEMBER, separators=(",", ":"), sort_keys=True).encode()
    template = doc.replace(b'"seq":1', b'"seq":%s')
    records._member_memo.clear()
    decode(MKEY, bytes([1, 0]) + template % b"1")  # now in the memo
    for memo in (True, False):
        if not memo:
            records._member_memo.clear()
        raw = bytes([1, 0]) + template % seq
        if isinstance(expect, int):
            assert decode(MKEY, raw)[1].seq == expect  # type: ignore[union-attr]
        else:
            with pytest.raises(RecordRejected) as e:
                decode(MKEY, raw)
            assert e.value.reason == expect


# ------------------------------------------------------------------ prev_ts


def test_prev_ts_round_trips_and_is_in_every_record() -> None:
    for prev, joined in ((None, None), (None, 5), (7, 5), (5, 5), (0, 0)):
        k, v = member_record("g", "m1", incarnation="i1", seq=3, topics=["t0"], joined_at=joined,
                             prev_ts=prev, since_generation=4)  # fmt: skip
        assert v.prev_ts == prev and v.since_generation == 4
        assert decode(*encode(k, v)) == (k, v)
    # by default a record starts a new membership, and says so on the wire
    k, v = member_record("g", "m1", incarnation="i1", seq=3, topics=["t0"])
    raw = encode(k, v)[1] or b""
    assert v.prev_ts is None and b'"prev_ts":null' in raw and b'"since_gen":0' in raw


#: a member record in the format written before ``prev_ts`` existed (neither it nor since_gen)
WITHOUT_PREV_TS = _without(_without(GOOD_MEMBER, "prev_ts"), "since_gen")


def test_a_record_without_prev_ts_is_rejected_not_decoded() -> None:
    """The format before ``prev_ts`` is not decoded: such a record is a rejection like any
    other record that lacks a field, by the decoder and the memo's fast path alike."""
    for memo in (False, True):
        records._member_memo.clear()
        if memo:  # the same record but for seq and prev_ts, decoded first
            decode(MKEY, _value({**GOOD_MEMBER, "prev_ts": 9, "joined_at": 9}))
        with pytest.raises(RecordRejected) as e:
            decode(MKEY, _value({**WITHOUT_PREV_TS, "joined_at": 9}))
        assert e.value.reason == RejectReason.MISSING_FIELD


def test_the_replay_counts_a_record_without_prev_ts_and_goes_on() -> None:
    st = GroupState("g", 10_000)
    k = encode_key(MemberKey("g", "m"))
    r = st.replay(0, k, _value({**WITHOUT_PREV_TS, "seq": 1}), 1_000)
    assert r.kind == ReplayKind.REJECTED and r.reason == RejectReason.MISSING_FIELD
    assert st.rejections[RejectReason.MISSING_FIELD] == 1 and "m" not in st.members
    # the member's next record, in the format of today, joins it as usual
    r = st.replay(1, k, _value({**GOOD_MEMBER, "seq": 2}), 1_100)
    assert r.kind == ReplayKind.MEMBER and r.new_membership and "m" in st.members


def test_prev_ts_before_joined_at_decodes() -> None:
    """Brokers' clocks differ: after the control partition moves to a broker whose clock is
    behind, a member's newest record may be stamped before its membership's first."""
    _, v = decode(MKEY, _value({**GOOD_MEMBER, "prev_ts": 5, "since_gen": 0, "joined_at": 6}))
    assert isinstance(v, MemberRecord) and v.prev_ts == 5 and v.joined_at == 6


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"prev_ts": 5, "since_gen": 0}, "bad_value"),  # continues, but joined_at unknown
        ({"prev_ts": -1, "since_gen": 0, "joined_at": 0}, "bad_value"),
        ({"prev_ts": "5", "since_gen": 0, "joined_at": 0}, "wrong_type"),
        ({"prev_ts": None}, "missing_field"),  # since_gen comes with it
        ({"prev_ts": 5, "since_gen": -1, "joined_at": 0}, "bad_value"),
    ],
)
def test_bad_prev_ts_is_rejected(fields: dict[str, object], reason: str) -> None:
    for memo in (False, True):
        records._member_memo.clear()
        if memo:  # the same record but for seq and prev_ts, decoded first
            decode(MKEY, _value({**GOOD_MEMBER, "prev_ts": 9, "since_gen": 0, "joined_at": 9}))
        with pytest.raises(RecordRejected) as e:
            decode(MKEY, _value({**_without(GOOD_MEMBER, "since_gen"), **fields}))
        assert e.value.reason == reason


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**40), st.integers(0, 2**40),
    st.one_of(st.none(), st.integers(0, 2**40)), st.one_of(st.none(), st.integers(0, 2**40)),
    st.integers(0, 2**40), st.integers(0, 5),
)  # fmt: skip
def test_a_heartbeat_with_prev_ts_decoded_from_the_memo_equals_a_full_decode(
    seq1: int, seq2: int, prev1: int | None, prev2: int | None, joined_at: int, since: int
) -> None:  # fmt: skip
    def record(seq: int, prev: int | None) -> tuple[MemberKey, MemberRecord]:
        k, v = member_record("g", "m1", incarnation="i1", seq=seq, topics=["t0"],
                             joined_at=joined_at if prev is None else min(joined_at, prev),
                             prev_ts=prev, since_generation=since)  # fmt: skip
        return k, v  # type: ignore[return-value]

    records._member_memo.clear()
    first, second = record(seq1, prev1), record(seq2, prev2)
    assert decode(*encode(*first)) == first  # a full decode, kept
    assert decode(*encode(*second)) == second  # from the memo when only seq, prev_ts differ
    records._member_memo.clear()
    assert decode(*encode(*second)) == second
    # the memo is used for a heartbeat that differs only in seq and prev_ts
    records._member_memo.clear()
    decode(*encode(*record(seq1, joined_at + 1)))
    hb = record(seq2, joined_at + 2)
    assert len(records._member_memo) == 1
    assert decode(*encode(*hb)) == hb and len(records._member_memo) == 1


_GROUPS = st.sampled_from(["g", "gg", "g\x00", "ü", "orders", ""]).filter(bool)


@settings(max_examples=500, deadline=None)
@given(
    _GROUPS,
    st.one_of(
        st.binary(max_size=24),
        st.builds(lambda kind, name, rest, glen: b"\x01" + kind + glen(name) + name + rest,
                   st.sampled_from([b"M", b"A", b"Z"]),
                   _GROUPS.map(str.encode) | st.binary(max_size=6), st.binary(max_size=4),
                   st.sampled_from([lambda n: len(n).to_bytes(2, "big"),
                                    lambda n: (len(n) + 1).to_bytes(2, "big")])),
    ),
)  # fmt: skip
def test_other_group_key_agrees_with_the_decoded_key(group: str, raw: bytes) -> None:
    """Skipping by key bytes skips exactly the keys that decode to another group: a key of
    this group is never skipped, and whatever is skipped either names another group or is not
    a key at all (then it is not this group's either)."""
    skipped = records.other_group_key(raw, group)
    try:
        key = records.decode_key(raw)
    except RecordRejected:
        if skipped:  # not a key; neither could it be one of ours, whatever followed
            assert not raw.startswith(len(group.encode()).to_bytes(2, "big") + group.encode(), 2)
        return
    assert skipped == (key.group != group)


def test_the_member_memo_keeps_hitting_above_4096_members() -> None:
    """A group's heartbeats cycle through its members: the memo keeps one entry per member, so
    it still hits when the group outnumbers the old clear-when-full bound of 4,096 entries, and
    a member's tombstone drops its entry."""
    n = 6_000

    def heartbeat(i: int, seq: int) -> tuple[bytes, bytes | None]:
        return encode(*member_record("g", f"m{i:05d}", incarnation=f"i{i}", seq=seq,
                                     topics=["t0"], owned=[("t0", i)], acked_generation=3,
                                     seen_generation=3, joined_at=50, prev_ts=40 + seq,
                                     client={"host": "h"}))  # fmt: skip

    memo = records._member_memo
    memo.clear()
    for i in range(n):
        decode(*heartbeat(i, 2))
    stores = memo.stores
    assert len(memo) == n
    for seq in (3, 4):
        for i in range(n):
            _, v = decode(*heartbeat(i, seq))
            assert isinstance(v, MemberRecord) and v.seq == seq and v.prev_ts == 40 + seq
    assert memo.stores == stores  # every heartbeat of the later rounds was a hit
    assert decode(*heartbeat(7, 9)) == member_record(
        "g", "m00007", incarnation="i7", seq=9, topics=["t0"], owned=[("t0", 7)],
        acked_generation=3, seen_generation=3, joined_at=50, prev_ts=49, client={"host": "h"},
    )  # fmt: skip
    decode(*encode(*member_tombstone("g", "m00007")))
    assert len(memo) == n - 1
    memo.clear()


def test_a_full_memo_stays_bounded_and_keeps_hitting() -> None:
    """More keys than the memo holds, in a cycle (a group larger than it) or never seen
    again (a writer that invents keys): it stays within its entries and weight, keeps hitting
    on most of what it holds, and still takes new keys over time."""
    memo: BoundedMemo[str, int] = BoundedMemo(max_entries=100, max_weight=1_600)
    for round_ in range(5):
        before = memo.stores
        hits = 0
        for i in range(300):  # a cycle over 3x what it holds
            if memo.get(f"k{i}") is not None:
                hits += 1
            else:
                memo.put(f"k{i}", i, 10)
            assert len(memo) <= 100 and memo.weight <= 1_600
        if round_:
            assert hits >= 50  # cleared when full, or FIFO, it would hit nothing
            assert memo.stores - before <= 300 // memo.TURNOVER + 1
    for i in range(10_000):  # invented keys, never seen again
        memo.put(f"x{i}", i, 16)
        assert len(memo) <= 100 and memo.weight <= 1_600
    assert any(k.startswith("x") for k in memo)  # new keys still make their way in
    held = next(iter(memo))
    memo.put(held, -1, 90)  # a key's heavier entry makes room for itself
    assert memo[held] == -1 and len(memo) <= 100 and memo.weight <= 1_600
    memo.put("big", 0, 1_000)  # more than a sixteenth of the weight: never kept
    assert "big" not in memo and memo.weight == sum(memo._weights.values())
