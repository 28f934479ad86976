"""Control records, the codec: versioned keys and values, bounds, the decode memo.

The schema (keys, values, factories) is :mod:`groupkit.protocol.schema`; partitions are
range-encoded by :mod:`groupkit.protocol.ranges` and records signed by a
:class:`~groupkit.protocol.signing.Signer`. The wire format, what
each field means and what decoding refuses are told in :mod:`groupkit.protocol.records`, which
re-exports both and is what the rest of groupkit imports.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from typing import Any

from groupkit.errors import RecordRejected
from groupkit.protocol.fields import get_field as _get
from groupkit.protocol.fields import nat_field as _nat
from groupkit.protocol.fields import opt_field as _opt
from groupkit.protocol.fields import str_field as _str
from groupkit.protocol.fields import topics_field as _topics
from groupkit.protocol.keys import decode_key, encode_key, forget_key
from groupkit.protocol.liveness_codec import liveness_doc, liveness_from
from groupkit.protocol.memo import BoundedMemo
from groupkit.protocol.ranges import (
    MAX_PARTITIONS,
    MAX_RANGE,
    PartitionBudget,
    decode_partitions,
    encode_partitions,
    is_int,
)
from groupkit.protocol.schema import (
    EMPTY,
    MAX_FALLBACK_DETAIL,
    MAX_RESET_TEXT,
    PHASES,
    PROTOCOLS,
    AssignmentRecord,
    AssignorFallback,
    CoveredMember,
    HeartbeatKey,
    HeartbeatRecord,
    HeldEcho,
    LeaseKey,
    LeaseRecord,
    LoadReplan,
    MemberKey,
    MemberRecord,
    Partitions,
    RecordKey,
    RecordValue,
    ResetKey,
    ResetRecord,
    SnapshotHold,
    SnapshotKey,
    SnapshotMember,
    SnapshotRecord,
    SnapshotReset,
    VerdictKey,
    VerdictRecord,
)
from groupkit.protocol.signing import Signer
from groupkit.protocol.vocab import RejectReason
from groupkit.types import TopicPartition

SCHEMA_VERSION = 1
#: the value version of protocol version 2's records (docs/protocol-v2.md): its member records
#: and the kinds it adds. Assignment, reset and snapshot records are the same in both.
SCHEMA_VERSION_2 = 2
FLAG_ZLIB = 0x01
FLAG_SIGNED = 0x02
#: payloads larger than this are zlib-compressed
COMPRESS_ABOVE = 512


# --------------------------------------------------------------------------- encoding


def encode_value(key: RecordKey, value: RecordValue, signer: Signer | None = None) -> bytes | None:
    """The bytes of ``value`` (``None`` for a tombstone)."""
    if value is None:
        return None
    version = SCHEMA_VERSION
    if isinstance(value, MemberRecord):
        doc = _member_doc(value)
        version = value.version
    elif isinstance(value, VerdictRecord | LeaseRecord | HeartbeatRecord):
        doc = liveness_doc(value)
        version = SCHEMA_VERSION_2
    elif isinstance(value, SnapshotRecord):
        doc = _snapshot_doc(value)
    elif isinstance(value, ResetRecord):
        doc = _reset_doc(value)
    else:
        doc = _assignment_doc(value)
    payload = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    flags = 0
    if len(payload) > COMPRESS_ABOVE or isinstance(value, SnapshotRecord):
        payload = zlib.compress(payload, 6)
        flags |= FLAG_ZLIB
    head = bytes([version, flags])
    if signer is None:
        return head + payload
    tag = signer.sign(encode_key(key) + payload)
    if len(tag) > 255:
        raise ValueError("signature tag longer than 255 bytes")
    return bytes([version, flags | FLAG_SIGNED, len(tag)]) + tag + payload


def encode(
    key: RecordKey, value: RecordValue, signer: Signer | None = None
) -> tuple[bytes, bytes | None]:
    """``(key bytes, value bytes or None)``, ready to produce to the control topic."""
    return encode_key(key), encode_value(key, value, signer)


def _member_doc(v: MemberRecord) -> dict[str, Any]:
    doc = {
        "inc": v.incarnation,
        "seq": v.seq,
        "topics": list(v.topics),
        "owned": encode_partitions(v.owned),
        "owned_gen": v.owned_generation,
        "acked_gen": v.acked_generation,
        "seen_gen": v.seen_generation,
        "joined_at": v.joined_at,
        "rack": v.rack,
        "capacity": v.capacity,
        "client": dict(v.client),
    }
    if v.run is None:
        doc["prev_ts"] = v.prev_ts
    else:
        doc["run"] = v.run
    doc["since_gen"] = v.since_generation
    if v.committed:  # optional: absent means none (and in every record that predates it)
        by_topic: dict[str, list[list[int]]] = {}
        for tp, o in v.committed:
            by_topic.setdefault(tp.topic, []).append([tp.partition, o])
        doc["committed"] = by_topic
    if v.instance_id is not None:  # optional: absent means a dynamic member
        doc["instance"] = v.instance_id
    if v.seat is not None:
        doc["seat"] = v.seat
    if v.seat_ts is not None:
        doc["seat_ts"] = v.seat_ts
    if v.reset_at >= 0:  # optional: absent means none (and in every record that predates it)
        doc["reset"] = {"at": v.reset_at, "done": encode_partitions(v.reset_done)}
    if v.leaving:  # optional: absent means false (and in every record that predates it)
        doc["leaving"] = True
    if v.admitted_in:  # optional: absent means 0 (and in every record that predates it)
        doc["admitted"] = v.admitted_in
    if v.held:  # optional: absent means none (and in every record that predates it)
        doc["held"] = [[h.process, encode_partitions(h.partitions), h.until, h.run]
                       for h in v.held]  # fmt: skip
    return doc


def _snapshot_doc(v: SnapshotRecord) -> dict[str, Any]:
    cur = _assignment_doc(v.assignment) if v.assignment is not None else None
    return {
        "group": v.group,
        "as_of": v.as_of,
        "log_time": v.log_time,
        "writer": v.writer_id,
        "writer_inc": v.writer_incarnation,
        "leader": v.leader,
        # a list, not an object: encode() sorts object keys, and this keeps the state's order
        "members": [
            [
                m.member_id,
                {
                    "inc": m.incarnation,
                    "seq": m.seq,
                    "topics": list(m.topics),
                    "claims": encode_partitions(m.claims),
                    "owned_gen": m.owned_generation,
                    "acked_gen": m.acked_generation,
                    "seen_gen": m.seen_generation,
                    "joined_at": m.joined_at,
                    "last_seen": m.last_seen,
                    "since_gen": m.since_generation,
                    "rack": m.rack,
                    "capacity": m.capacity,
                    "client": dict(m.client),
                    "ready": m.ready,
                    # static seats only: absent keeps older snapshots' bytes and readers
                    **(
                        {
                            "proc": m.process,
                            "instance": m.instance_id,
                            "proc_since": m.process_since,
                        }
                        if m.instance_id is not None
                        else {}
                    ),
                    # admitted joins only (docs/protocol.md, "Admission")
                    **({"admitted": m.admitted_in} if m.admitted_in else {}),
                    # protocol version 2 only
                    **({"run": m.run} if m.run else {}),
                    **({"ended": True} if m.ended else {}),
                },
            ]
            for m in v.members
        ],
        "assignment": cur,
        "assignment_offset": v.assignment_offset,
        # the current generation is nearly always in the history too: write it once (null)
        "history": [
            [t, None if a is v.assignment or a == v.assignment else _assignment_doc(a)]
            for t, a in v.history
        ],
        "holds": [
            [h.holder, encode_partitions(h.partitions), h.until, *([h.run] if h.run else [])]
            for h in v.holds
        ],
        "clobbered": v.assignment_clobbered,
        **_snapshot_reset_doc(v),
        **_snapshot_v2_doc(v),
    }


def _snapshot_v2_doc(v: SnapshotRecord) -> dict[str, Any]:
    """A snapshot's protocol-version-2 part (absent: version 1)."""
    if v.version == SCHEMA_VERSION:
        return {}
    return {
        "version": v.version,
        "verdicts": [[mid, liveness_doc(r)] for mid, r in v.verdicts],
        "lease": None if v.lease is None else liveness_doc(v.lease),
        "echoed": [[mid, list(procs)] for mid, procs in v.echoed],
    }


def _snapshot_v2_from(key: SnapshotKey, doc: Mapping[str, Any]) -> dict[str, Any]:
    if "version" not in doc:
        return {}
    version = _get(doc, "version", int)
    if version != SCHEMA_VERSION_2:
        raise RecordRejected(RejectReason.UNKNOWN_VERSION, f"snapshot of version {version}")
    verdicts: list[tuple[str, VerdictRecord]] = []
    for entry in _get(doc, "verdicts", list):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], dict)):
            raise RecordRejected(RejectReason.WRONG_TYPE, "verdicts: bad entry")
        mid = entry[0]
        if not isinstance(mid, str) or not mid:
            raise RecordRejected(RejectReason.BAD_VALUE, "verdicts: bad member id")
        r = liveness_from(VerdictKey(key.group, mid), entry[1])
        assert isinstance(r, VerdictRecord)
        verdicts.append((mid, r))
    lease_doc = _opt(doc, "lease", dict)
    lease = None if lease_doc is None else liveness_from(LeaseKey(key.group), lease_doc)
    assert lease is None or isinstance(lease, LeaseRecord)
    echoed: list[tuple[str, tuple[str, ...]]] = []
    for entry in _get(doc, "echoed", list) if "echoed" in doc else ():
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and entry[0] and isinstance(entry[1], list) and entry[1]
                and all(isinstance(p, str) and p for p in entry[1])):  # fmt: skip
            raise RecordRejected(RejectReason.WRONG_TYPE, "echoed: not [member id, [process]]")
        echoed.append((entry[0], tuple(entry[1])))
    return {"version": version, "verdicts": tuple(verdicts), "lease": lease,
            "echoed": tuple(echoed)}  # fmt: skip


def _assignment_doc(v: AssignmentRecord) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "gen": v.generation,
        "leader": v.leader_id,
        "leader_inc": v.leader_incarnation,
        "leader_joined_at": v.leader_joined_at,
        "protocol": v.protocol,
        "phase": v.phase,
        "assignor": v.assignor,
        "counts": dict(v.partition_counts),
        "members": {
            m: {
                "inc": c.incarnation,
                "topics": list(c.topics),
                "assigned": encode_partitions(c.assigned),
                "revoke": encode_partitions(c.revoke),
                "pending": encode_partitions(c.pending),
                # optional: absent means none (and in every record that predates it)
                **({"admit": encode_partitions(c.admit)} if c.admit else {}),
                **({"inherit": encode_partitions(c.inherit)} if c.inherit else {}),
            }
            for m, c in v.members.items()
        },
    }
    if v.fallback is not None:  # optional: absent means the group's own assignor planned it
        f = v.fallback
        doc["fallback"] = {"reason": f.reason, "detail": f.detail, "assignor": f.assignor}
    if v.replan is not None:  # optional, information only: the newest re-plan for the load
        r = v.replan
        doc["replan"] = {"reason": r.reason, "gain": round(r.gain, 4), "moved": r.moved,
                         "gen": r.generation, "at": r.at}  # fmt: skip
    if v.origin is not None:  # optional: a re-assertion's only
        doc["origin"] = list(v.origin)
    return doc


# --------------------------------------------------------------------------- decoding

#: Bounds on what one record may make a reader allocate, whoever wrote it. The largest record
#: the planner writes for 100,000 partitions scattered over 1,000 members is ~0.7 MB of JSON
#: with ~7,000 containers (``bench/limits.py``); these leave an order of magnitude of room.
MAX_PAYLOAD = 8 * 1024 * 1024  # decompressed JSON bytes: refuses zlib bombs
MAX_CONTAINERS = 1 << 20  # JSON objects + arrays in one payload: refuses allocation bombs
#: A snapshot holds a whole group: every member's claims and every assignment record the state
#: keeps (the current one and those of unacknowledged generations), so it may be larger.
MAX_SNAPSHOT_PAYLOAD = 4 * MAX_PAYLOAD
MAX_SNAPSHOT_PARTITIONS = 4 * MAX_PARTITIONS

#: Heartbeats repeat the member's previous record but for ``seq`` and ``prev_ts``, and a member
#: that starts replays every one of them still in the log (an uncompacted segment holds all).
#: Decoded member records are kept by their payload with the digits of ``seq`` (and of
#: ``prev_ts``, when it is a number) cut out, so a repeat costs a regex search instead of a JSON
#: parse and its checks. Sound because exactly one ``"seq":`` (and at most one ``"prev_ts":``)
#: may appear (inside a JSON string a bare quote cannot precede the name; one escaped would make
#: a second occurrence, which skips the memo), and the number matched is what ``json`` reads:
#: no leading zero, no fraction or exponent. A ``prev_ts`` that is not such a number (``null``)
#: stays in the memo key as it is. Only records that decoded whole are kept.
_SEQ = re.compile(rb'"seq":(0|[1-9][0-9]*)(?=[,}])')
_PREV = re.compile(rb'"prev_ts":(0|[1-9][0-9]*)(?=[,}])')
_NULL_PREV = re.compile(rb'"prev_ts":null(?=[,}])')

#: Decoded member records, one entry per member key: ``(memo key, record)`` of the key's
#: newest record that decoded whole. One member's heartbeats replace its entry, so the memo
#: holds a group's members, not their history, and a group larger than the memo still hits.
_member_memo: BoundedMemo[MemberKey, tuple[bytes, MemberRecord]] = BoundedMemo(1 << 16, 128 << 20)
#: What an entry of ``_member_memo`` is estimated to hold besides its memo key, per partition
#: in its record
_PARTITION_WEIGHT = 100
_ENTRY_WEIGHT = 1024


def decode_value(key: RecordKey, raw: bytes | None, verifier: Signer | None = None) -> RecordValue:
    """Parse the value of ``key``; raises only :class:`RecordRejected`.

    With a ``verifier``, unsigned or wrongly signed values are rejected (tombstones excepted:
    they have no bytes to sign).
    """
    if raw is None:
        if not isinstance(key, MemberKey | VerdictKey):
            raise RecordRejected(RejectReason.BAD_VALUE, "a tombstone of a group's record")
        return None
    try:
        return _decode_value(key, bytes(raw), verifier)
    except RecordRejected:
        raise
    except Exception as e:  # the decoder's contract: nothing but RecordRejected escapes
        raise RecordRejected(RejectReason.BAD_BYTES, f"{type(e).__name__}: {e}") from None


def decode(
    raw_key: bytes | None, raw_value: bytes | None, verifier: Signer | None = None
) -> tuple[RecordKey, RecordValue]:
    """Decode a whole record; raises only :class:`RecordRejected`."""
    key = decode_key(raw_key)
    if raw_value is None and isinstance(key, MemberKey):
        # a member's tombstone: its entries are of no more use (a return decodes anew)
        _member_memo.pop(key)
        if type(raw_key) is bytes:
            forget_key(raw_key)
    return key, decode_value(key, raw_value, verifier)


def _decode_value(key: RecordKey, raw: bytes, verifier: Signer | None) -> RecordValue:
    if len(raw) < 2:
        raise RecordRejected(RejectReason.BAD_BYTES, "value too short")
    version, flags = raw[0], raw[1]
    if version not in (SCHEMA_VERSION, SCHEMA_VERSION_2):
        raise RecordRejected(RejectReason.UNKNOWN_VERSION, f"schema version {version}")
    v2_kind = isinstance(key, VerdictKey | LeaseKey | HeartbeatKey)
    if version == SCHEMA_VERSION_2 and not (v2_kind or isinstance(key, MemberKey)):
        raise RecordRejected(RejectReason.UNKNOWN_VERSION, f"schema version {version}")
    if version == SCHEMA_VERSION and v2_kind:
        raise RecordRejected(RejectReason.UNKNOWN_VERSION, f"a version-2 kind at {version}")
    if flags & ~(FLAG_ZLIB | FLAG_SIGNED):
        raise RecordRejected(RejectReason.BAD_BYTES, f"unknown flags {flags:#x}")
    pos = 2
    tag = b""
    if flags & FLAG_SIGNED:
        if len(raw) < 3 or len(raw) < 3 + raw[2]:
            raise RecordRejected(RejectReason.BAD_BYTES, "signature truncated")
        tag = raw[3 : 3 + raw[2]]
        pos = 3 + raw[2]
    payload = raw[pos:]
    if verifier is not None:
        if not flags & FLAG_SIGNED:
            raise RecordRejected(RejectReason.UNSIGNED, "record is not signed")
        if not verifier.verify(encode_key(key) + payload, tag):
            raise RecordRejected(RejectReason.BAD_SIGNATURE, "signature does not verify")
    limit = MAX_SNAPSHOT_PAYLOAD if isinstance(key, SnapshotKey) else MAX_PAYLOAD
    if flags & FLAG_ZLIB:
        try:
            d = zlib.decompressobj()
            payload = d.decompress(payload, limit + 1)
            if d.unconsumed_tail:
                raise RecordRejected(RejectReason.TOO_LARGE, f"payload inflates to > {limit} bytes")
            if not d.eof:
                raise RecordRejected(RejectReason.BAD_BYTES, "compressed payload truncated")
        except zlib.error as e:
            raise RecordRejected(RejectReason.BAD_BYTES, f"zlib: {e}") from None
    if len(payload) > limit:
        raise RecordRejected(RejectReason.TOO_LARGE, f"payload of {len(payload)} bytes > {limit}")
    memo_key = None
    if isinstance(key, MemberKey) and version == SCHEMA_VERSION:
        m = _SEQ.search(payload)
        p = _PREV.search(payload)
        i = payload.find(b'"prev_ts":')
        if (
            m is not None
            and _once(payload, b'"seq":', m.start(), m.end())
            and (
                (p is not None and _once(payload, b'"prev_ts":', p.start(), p.end()))
                or (i >= 0 and _NULL_PREV.match(payload, i) is not None
                    and _once(payload, b'"prev_ts":', i, i + 10))
            )
        ):  # fmt: skip
            cuts = sorted([m.span(1)] + ([p.span(1)] if p is not None else []))
            ends = [0] + [e for _, e in cuts]
            starts = [a for a, _ in cuts] + [len(payload)]
            memo_key = b"".join(payload[a:b] for a, b in zip(ends, starts, strict=True))
            known = _member_memo.get(key)
            if known is not None and known[0] == memo_key:
                k = known[1]  # (dataclasses.replace costs more than the rest of a hit)
                prev = int(p.group(1)) if p is not None else None
                _check_prev_ts(prev, k.joined_at)
                return MemberRecord(k.incarnation, int(m.group(1)), k.topics, k.owned,
                                    k.owned_generation, k.acked_generation, k.joined_at, k.rack,
                                    k.capacity, k.client, k.seen_generation, prev,
                                    k.since_generation, k.committed,
                                    k.instance_id, k.seat, k.seat_ts,
                                    k.reset_at, k.reset_done, k.leaving,
                                    k.admitted_in, None, k.held)  # fmt: skip
    if payload.count(b"{") + payload.count(b"[") > MAX_CONTAINERS:
        raise RecordRejected(
            RejectReason.TOO_LARGE, f"more than {MAX_CONTAINERS} JSON objects and arrays"
        )
    try:
        doc = json.loads(payload)
    except (UnicodeDecodeError, ValueError) as e:
        raise RecordRejected(RejectReason.BAD_BYTES, f"json: {e}") from None
    if not isinstance(doc, dict):
        raise RecordRejected(RejectReason.WRONG_TYPE, "payload is not an object")
    if v2_kind:
        return liveness_from(key, doc)
    if isinstance(key, MemberKey):
        record = _member_from(doc, version)
        if memo_key is not None:
            held = (
                len(record.owned)
                + len(record.committed)
                + len(record.reset_done)
                + sum(len(h.partitions) for h in record.held)
            )
            weight = len(memo_key) + _ENTRY_WEIGHT + _PARTITION_WEIGHT * held
            _member_memo.put(key, (memo_key, record), weight)
        return record
    if isinstance(key, SnapshotKey):
        return _snapshot_from(key, doc)
    if isinstance(key, ResetKey):
        return _reset_from(doc)
    return _assignment_from(doc)


def _check_prev_ts(prev: int | None, joined_at: int | None) -> None:
    """A ``prev_ts`` names a record of a membership (so ``joined_at`` comes with it), not
    negative. It may be *before* ``joined_at``: the two are stamped by whichever brokers led the
    control partition then, and a broker whose clock is behind the previous leader's stamps
    earlier times after later ones (``tests/test_protocol_skew.py``)."""
    if prev is not None and (prev < 0 or joined_at is None):
        raise RecordRejected(RejectReason.BAD_VALUE, "prev_ts < 0, or without joined_at")


def _once(payload: bytes, name: bytes, start: int, end: int) -> bool:
    """Whether the occurrence of ``name`` at ``start`` (matched up to ``end``) is the only one."""
    return payload.find(name, end) < 0 and payload.rfind(name, 0, start) < 0


def _member_from(doc: Mapping[str, Any], version: int = SCHEMA_VERSION) -> MemberRecord:
    client = _get(doc, "client", dict)
    if not all(isinstance(k, str) and isinstance(x, str) for k, x in client.items()):
        raise RecordRejected(RejectReason.WRONG_TYPE, "client: values must be strings")
    joined_at = _opt(doc, "joined_at", int)
    if joined_at is not None and joined_at < 0:
        raise RecordRejected(RejectReason.BAD_VALUE, "joined_at < 0")
    capacity = _opt(doc, "capacity", (int, float))
    acked = _nat(doc, "acked_gen")
    # optional: records written before the field existed have seen what they acked
    seen = _nat(doc, "seen_gen") if "seen_gen" in doc else acked
    if seen < acked:
        raise RecordRejected(RejectReason.BAD_VALUE, f"seen_gen {seen} < acked_gen {acked}")
    if version == SCHEMA_VERSION:
        prev = _opt(doc, "prev_ts", int)  # required, null or not: see MemberRecord.prev_ts
        _check_prev_ts(prev, joined_at)
        run = None
    else:
        if "prev_ts" in doc:
            raise RecordRejected(RejectReason.BAD_VALUE, "prev_ts in a version-2 record")
        prev, run = None, _nat(doc, "run")
        if not 1 <= run <= _nat(doc, "seq"):
            raise RecordRejected(RejectReason.BAD_VALUE, "run not in [1, seq]")
    since = _nat(doc, "since_gen")
    budget = PartitionBudget()
    owned = decode_partitions(_get(doc, "owned", dict), "owned", budget)
    # optional: static members only (see MemberRecord.instance_id, .seat)
    instance = _str(doc, "instance") if "instance" in doc else None
    seat = _str(doc, "seat") if "seat" in doc else None
    if seat is not None and instance is None:
        raise RecordRejected(RejectReason.BAD_VALUE, "seat without instance")
    seat_ts = _nat(doc, "seat_ts") if "seat_ts" in doc else None
    if seat_ts is not None and (seat is None or prev is not None or joined_at is None):
        raise RecordRejected(
            RejectReason.BAD_VALUE, "seat_ts without seat and joined_at, or with prev_ts"
        )
    return MemberRecord(
        incarnation=_str(doc, "inc"),
        seq=_nat(doc, "seq"),
        topics=_topics(doc, "topics"),
        owned=owned,
        owned_generation=_nat(doc, "owned_gen"),
        acked_generation=acked,
        joined_at=joined_at,
        rack=_opt(doc, "rack", str),
        capacity=None if capacity is None else float(capacity),
        client=tuple(sorted(client.items())),
        seen_generation=seen,
        prev_ts=prev,
        since_generation=since,
        committed=_committed(doc, owned, budget) if "committed" in doc else (),
        instance_id=instance,
        seat=seat,
        seat_ts=seat_ts,
        **(_member_reset(doc, budget) if "reset" in doc else {}),
        leaving=_get(doc, "leaving", bool) if "leaving" in doc else False,
        admitted_in=_admitted(doc, seen),
        run=run,
        held=_held(doc, _str(doc, "inc"), budget) if "held" in doc else (),
    )


def _held(doc: Mapping[str, Any], inc: str, budget: PartitionBudget) -> tuple[HeldEcho, ...]:
    """``held`` (optional): ``[[process, partitions, until or null, run], ...]``, each on
    another process than the writer's, holding some partition."""
    out = []
    for h in _get(doc, "held", list):
        if not isinstance(h, list) or len(h) != 4:
            raise RecordRejected(
                RejectReason.WRONG_TYPE, "held: not [process, partitions, until, run]"
            )
        e = dict(zip(("process", "partitions", "until", "run"), h, strict=True))
        parts = decode_partitions(_get(e, "partitions", dict), "held", budget)
        process = _str(e, "process")
        if process == inc or not parts:
            raise RecordRejected(
                RejectReason.BAD_VALUE, "held: the writer's own process, or nothing"
            )
        until = None if e["until"] is None else _nat(e, "until")
        out.append(HeldEcho(process, parts, until, _nat(e, "run")))
    return tuple(out)


def _admitted(doc: Mapping[str, Any], seen: int) -> int:
    """``admitted`` (optional): a generation the member had seen when it wrote the record."""
    if "admitted" not in doc:
        return 0
    admitted = _nat(doc, "admitted")
    if admitted > seen:
        raise RecordRejected(RejectReason.BAD_VALUE, f"admitted {admitted} > seen_gen {seen}")
    return admitted


def _committed(
    doc: Mapping[str, Any], owned: Partitions, budget: PartitionBudget
) -> tuple[tuple[TopicPartition, int], ...]:
    """``{"t": [[partition, offset], ...]}``: each partition once, none of them ``owned``
    (a record cannot let go of what it claims), offsets >= 0. Counted against the record's
    partition budget."""
    v = _get(doc, "committed", dict)
    out: dict[TopicPartition, int] = {}
    for t, pairs in v.items():
        if not t or not isinstance(pairs, list):
            raise RecordRejected(RejectReason.WRONG_TYPE, "committed: bad topic entry")
        budget.take(len(pairs), "committed")
        for pair in pairs:
            if not (isinstance(pair, list) and len(pair) == 2
                    and is_int(pair[0]) and is_int(pair[1])):  # fmt: skip
                raise RecordRejected(RejectReason.WRONG_TYPE, f"committed: bad entry {pair!r}")
            tp = TopicPartition(t, pair[0])
            bad = not (0 <= pair[0] < MAX_RANGE and 0 <= pair[1] < 1 << 63)
            if bad or tp in out or tp in owned:
                raise RecordRejected(RejectReason.BAD_VALUE, f"committed: bad entry {t}-{pair!r}")
            out[tp] = pair[1]
    return tuple(sorted(out.items()))


def _assignment_from(
    doc: Mapping[str, Any], budget: PartitionBudget | None = None
) -> AssignmentRecord:
    protocol = _str(doc, "protocol")
    if protocol not in PROTOCOLS:
        raise RecordRejected(RejectReason.BAD_VALUE, f"protocol {protocol!r}")
    phase = _str(doc, "phase")
    if phase not in PHASES:
        raise RecordRejected(RejectReason.BAD_VALUE, f"phase {phase!r}")
    counts = _get(doc, "counts", dict)
    if not all(is_int(n) and n >= 0 for n in counts.values()):
        raise RecordRejected(RejectReason.WRONG_TYPE, "counts: values must be ints >= 0")
    members: dict[str, CoveredMember] = {}
    budget = budget if budget is not None else PartitionBudget()
    for m, c in sorted(_get(doc, "members", dict).items()):
        if not m or not isinstance(c, dict):
            raise RecordRejected(RejectReason.WRONG_TYPE, "members: bad entry")
        members[m] = CoveredMember(
            incarnation=_str(c, "inc"),
            topics=_topics(c, "topics"),
            assigned=decode_partitions(_get(c, "assigned", dict), "assigned", budget),
            revoke=decode_partitions(_get(c, "revoke", dict), "revoke", budget),
            pending=decode_partitions(_get(c, "pending", dict), "pending", budget),
            admit=(
                decode_partitions(_get(c, "admit", dict), "admit", budget)
                if "admit" in c
                else EMPTY
            ),
            inherit=(
                decode_partitions(_get(c, "inherit", dict), "inherit", budget)
                if "inherit" in c
                else EMPTY
            ),
        )
    return AssignmentRecord(
        generation=_nat(doc, "gen"),
        leader_id=_str(doc, "leader"),
        leader_incarnation=_str(doc, "leader_inc"),
        leader_joined_at=_nat(doc, "leader_joined_at"),
        protocol=protocol,
        phase=phase,
        assignor=_str(doc, "assignor"),
        partition_counts=tuple(sorted(counts.items())),
        members=members,
        fallback=_fallback(doc) if "fallback" in doc else None,
        replan=_replan(doc) if "replan" in doc else None,
        origin=_origin(doc) if "origin" in doc else None,
    )


def _origin(doc: Mapping[str, Any]) -> tuple[int, int]:
    o = _get(doc, "origin", list)
    if len(o) != 2 or not all(is_int(x) and x >= 0 for x in o):
        raise RecordRejected(RejectReason.BAD_VALUE, "origin: [offset, log time] expected")
    return o[0], o[1]


def _replan(doc: Mapping[str, Any]) -> LoadReplan:
    r = _get(doc, "replan", dict)
    gain = _get(r, "gain", (int, float))
    if isinstance(gain, bool) or not 0 <= gain <= 1:
        raise RecordRejected(RejectReason.BAD_VALUE, "replan gain: a number in [0, 1] expected")
    return LoadReplan(_str(r, "reason"), float(gain), _nat(r, "moved"), _nat(r, "gen"),
                      _nat(r, "at"))  # fmt: skip


def _fallback(doc: Mapping[str, Any]) -> AssignorFallback:
    f = _get(doc, "fallback", dict)
    detail = _str(f, "detail", allow_empty=True)
    if len(detail) > MAX_FALLBACK_DETAIL:
        raise RecordRejected(
            RejectReason.BAD_VALUE, f"fallback detail longer than {MAX_FALLBACK_DETAIL}"
        )
    return AssignorFallback(_str(f, "reason"), detail, _str(f, "assignor"))


def _snapshot_from(key: SnapshotKey, doc: Mapping[str, Any]) -> SnapshotRecord:
    budget = PartitionBudget(MAX_SNAPSHOT_PARTITIONS)
    group = _str(doc, "group")
    if group != key.group:
        raise RecordRejected(
            RejectReason.BAD_VALUE, f"snapshot of group {group!r} under {key.group!r}"
        )
    as_of = _nat(doc, "as_of")
    members: list[SnapshotMember] = []
    ids: set[str] = set()
    for entry in _get(doc, "members", list):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], dict)):
            raise RecordRejected(RejectReason.WRONG_TYPE, "members: bad entry")
        mid, m = entry
        if not isinstance(mid, str) or not mid or mid in ids:
            raise RecordRejected(RejectReason.BAD_VALUE, f"members: bad or repeated id {mid!r}")
        ids.add(mid)
        members.append(_snapshot_member_from(mid, m, budget))
    leader = _opt(doc, "leader", str)
    if leader is not None and leader not in ids:
        raise RecordRejected(RejectReason.BAD_VALUE, f"leader {leader!r} is not a member")
    cur_doc = _opt(doc, "assignment", dict)
    cur = _assignment_from(cur_doc, budget) if cur_doc is not None else None
    assignment_offset = _get(doc, "assignment_offset", int)
    if not -1 <= assignment_offset <= as_of or (cur is None) != (assignment_offset == -1):
        raise RecordRejected(RejectReason.BAD_VALUE, f"assignment_offset {assignment_offset}")
    history: list[tuple[int, AssignmentRecord]] = []
    for entry in _get(doc, "history", list):
        if not (isinstance(entry, list) and len(entry) == 2 and is_int(entry[0])):
            raise RecordRejected(RejectReason.WRONG_TYPE, "history: bad entry")
        t, a_doc = entry
        if t < 0:
            raise RecordRejected(RejectReason.BAD_VALUE, "history: generation time < 0")
        if a_doc is None:
            if cur is None:
                raise RecordRejected(RejectReason.BAD_VALUE, "history names an absent assignment")
            a = cur
        elif isinstance(a_doc, dict):
            a = _assignment_from(a_doc, budget)
        else:
            raise RecordRejected(RejectReason.WRONG_TYPE, "history: bad assignment")
        if history and a.generation <= history[-1][1].generation:
            raise RecordRejected(RejectReason.BAD_VALUE, "history: generations not increasing")
        history.append((t, a))
    holds: list[SnapshotHold] = []
    for entry in _get(doc, "holds", list):
        if not (isinstance(entry, list) and len(entry) in (3, 4)):
            raise RecordRejected(RejectReason.WRONG_TYPE, "holds: bad entry")
        holder, parts, until, *rest = entry
        run = rest[0] if rest else 0
        if not isinstance(holder, str) or not holder or not is_int(until) or until < 0 \
                or not is_int(run) or run < 0:  # fmt: skip
            raise RecordRejected(RejectReason.BAD_VALUE, "holds: bad holder, time or run")
        parts = decode_partitions(parts, "holds", budget)
        holds.append(SnapshotHold(holder, parts, until, run))
    return SnapshotRecord(
        group=group,
        as_of=as_of,
        log_time=_nat(doc, "log_time"),
        writer_id=_str(doc, "writer"),
        writer_incarnation=_str(doc, "writer_inc"),
        leader=leader,
        members=tuple(members),
        assignment=cur,
        assignment_offset=assignment_offset,
        history=tuple(history),
        holds=tuple(holds),
        assignment_clobbered=_get(doc, "clobbered", bool),
        **_snapshot_reset_from(doc, budget),
        **_snapshot_v2_from(key, doc),
    )


def _snapshot_member_from(
    mid: str, doc: Mapping[str, Any], budget: PartitionBudget
) -> SnapshotMember:
    client = _get(doc, "client", dict)
    if not all(isinstance(k, str) and isinstance(x, str) for k, x in client.items()):
        raise RecordRejected(RejectReason.WRONG_TYPE, "client: values must be strings")
    acked = _nat(doc, "acked_gen")
    seen = _nat(doc, "seen_gen")
    if seen < acked:
        raise RecordRejected(RejectReason.BAD_VALUE, f"seen_gen {seen} < acked_gen {acked}")
    capacity = _opt(doc, "capacity", (int, float))
    return SnapshotMember(
        member_id=mid,
        incarnation=_str(doc, "inc"),
        seq=_nat(doc, "seq"),
        topics=_topics(doc, "topics"),
        claims=decode_partitions(_get(doc, "claims", dict), "claims", budget),
        owned_generation=_nat(doc, "owned_gen"),
        acked_generation=acked,
        seen_generation=seen,
        joined_at=_nat(doc, "joined_at"),
        last_seen=_nat(doc, "last_seen"),
        since_generation=_nat(doc, "since_gen"),
        rack=_opt(doc, "rack", str),
        capacity=None if capacity is None else float(capacity),
        client=tuple(sorted(client.items())),
        ready=_get(doc, "ready", bool),
        process=_str(doc, "proc") if "instance" in doc else None,
        instance_id=_str(doc, "instance") if "instance" in doc else None,
        process_since=_nat(doc, "proc_since") if "instance" in doc else 0,
        admitted_in=_nat(doc, "admitted") if "admitted" in doc else 0,
        run=_nat(doc, "run") if "run" in doc else 0,
        ended=_get(doc, "ended", bool) if "ended" in doc else False,
    )


# --------------------------------------------------------------------------- offset resets


def _reset_doc(v: ResetRecord) -> dict[str, Any]:
    by_topic: dict[str, list[list[int]]] = {}
    for tp, o in v.offsets:
        by_topic.setdefault(tp.topic, []).append([tp.partition, o])
    return {"id": v.reset_id, "offsets": by_topic, "by": v.requested_by, "base": v.based_on}


def _reset_from(doc: Mapping[str, Any]) -> ResetRecord:
    reset_id = _str(doc, "id")
    by = _str(doc, "by", allow_empty=True)
    if len(reset_id) > MAX_RESET_TEXT or len(by) > MAX_RESET_TEXT:
        raise RecordRejected(
            RejectReason.BAD_VALUE, f"reset id or issuer longer than {MAX_RESET_TEXT}"
        )
    offsets = _committed({"committed": _get(doc, "offsets", dict)}, EMPTY, PartitionBudget())
    if not offsets:
        raise RecordRejected(RejectReason.BAD_VALUE, "a reset of no partition")
    base = _get(doc, "base", int)
    if base < -1:
        raise RecordRejected(RejectReason.BAD_VALUE, "base < -1")
    return ResetRecord(reset_id, offsets, by, base)


def _member_reset(doc: Mapping[str, Any], budget: PartitionBudget) -> dict[str, Any]:
    """A member record's optional ``reset``: ``{"at": offset, "done": partitions}``."""
    r = _get(doc, "reset", dict)
    return {
        "reset_at": _nat(r, "at"),
        "reset_done": decode_partitions(_get(r, "done", dict), "reset done", budget),
    }


def _snapshot_reset_doc(v: SnapshotRecord) -> dict[str, Any]:
    """A snapshot's optional ``reset`` and ``reset_floor`` (absent: none, -1)."""
    doc: dict[str, Any] = {}
    if v.reset_floor >= 0:
        doc["reset_floor"] = v.reset_floor
    r = v.reset
    if r is not None:
        offsets = _reset_doc(ResetRecord(r.reset_id, r.offsets))["offsets"]
        doc["reset"] = {"at": r.at, "id": r.reset_id, "offsets": offsets,
                        "settled": encode_partitions(r.settled),
                        "waiting": [list(w) for w in r.waiting]}  # fmt: skip
    return doc


def _snapshot_reset_from(doc: Mapping[str, Any], budget: PartitionBudget) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "reset_floor" in doc:
        out["reset_floor"] = _nat(doc, "reset_floor")
    if "reset" in doc:
        r = _get(doc, "reset", dict)
        waiting = _get(r, "waiting", list)
        if not all(isinstance(w, list) and len(w) == 2 and all(isinstance(x, str) and x for x in w)
                   for w in waiting):  # fmt: skip
            raise RecordRejected(RejectReason.WRONG_TYPE, "reset waiting: bad entry")
        out["reset"] = SnapshotReset(
            at=_nat(r, "at"),
            reset_id=_str(r, "id"),
            offsets=_committed({"committed": _get(r, "offsets", dict)}, EMPTY, budget),
            settled=decode_partitions(_get(r, "settled", dict), "reset settled", budget),
            waiting=tuple((w[0], w[1]) for w in waiting),
        )
    return out
