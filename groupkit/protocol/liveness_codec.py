"""The values of protocol version 2's liveness kinds (docs/protocol-v2.md): verdicts and the
lease in the main log, heartbeats in the liveness log, to and from their JSON documents.
:mod:`groupkit.protocol.codec` frames them (key, version, signature) as every other record."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from groupkit.errors import RecordRejected
from groupkit.protocol.fields import get_field as _get
from groupkit.protocol.fields import nat_field as _nat
from groupkit.protocol.fields import opt_field as _opt
from groupkit.protocol.fields import str_field as _str
from groupkit.protocol.schema import (
    VERDICT_KINDS,
    HeartbeatRecord,
    LeaseKey,
    LeaseRecord,
    MemberRef,
    RecordKey,
    VerdictKey,
    VerdictRecord,
)
from groupkit.protocol.vocab import RejectReason


def liveness_doc(v: VerdictRecord | LeaseRecord | HeartbeatRecord) -> dict[str, Any]:
    if isinstance(v, VerdictRecord):
        doc = {"proc": v.process, "run": v.run, "kind": v.kind, "by": list(v.writer)}
        if v.ended:
            doc["ended"] = [list(e) for e in v.ended]
        return doc
    if isinstance(v, LeaseRecord):
        return {"leader": list(v.leader), "lease_seq": v.lease_seq, "live_offset": v.live_offset}
    return {"inc": v.incarnation, "seq": v.seq, "prev_ts": v.prev_ts, "lease": v.lease_ms,
            "skew": v.skew_ms, "acked_gen": v.acked_generation}  # fmt: skip


def _ended(doc: Mapping[str, Any], process: str, kind: str) -> tuple[tuple[str, int], ...]:
    """A verdict's ``ended`` (optional, ``expired`` only): ``[[process, run], ...]``, each
    another process than the verdict's, named once, in order, with a run of at least 1."""
    if "ended" not in doc:
        return ()
    raw = _get(doc, "ended", list)
    out: list[tuple[str, int]] = []
    for e in raw:
        if not (isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and e[0]
                and type(e[1]) is int and e[1] >= 1):  # fmt: skip
            raise RecordRejected(RejectReason.WRONG_TYPE, "ended: not [process, run >= 1]")
        out.append((e[0], e[1]))
    if kind != "expired" or not out or any(p == process for p, _ in out) \
            or [p for p, _ in out] != sorted({p for p, _ in out}):  # fmt: skip
        raise RecordRejected(
            RejectReason.BAD_VALUE,
            "ended: empty, on a process_ended verdict, the verdict's "
            "own process, or not one per process in order",
        )
    return tuple(out)


def _ref(doc: Mapping[str, Any], name: str) -> MemberRef:
    r = _get(doc, name, list)
    if len(r) != 2 or not all(isinstance(x, str) and x for x in r):
        raise RecordRejected(RejectReason.WRONG_TYPE, f"{name}: not [member id, incarnation]")
    return MemberRef(r[0], r[1])


def liveness_from(
    key: RecordKey, doc: Mapping[str, Any]
) -> VerdictRecord | LeaseRecord | HeartbeatRecord:
    if isinstance(key, VerdictKey):
        kind = _str(doc, "kind")
        if kind not in VERDICT_KINDS or kind != key.kind:
            raise RecordRejected(RejectReason.BAD_VALUE, f"verdict kind {kind!r} under {key.kind}")
        run = _nat(doc, "run")
        if run < 1:
            raise RecordRejected(RejectReason.BAD_VALUE, "run < 1")
        proc = _str(doc, "proc")
        return VerdictRecord(proc, run, kind, _ref(doc, "by"), _ended(doc, proc, kind))
    if isinstance(key, LeaseKey):
        seq, live = _nat(doc, "lease_seq"), _get(doc, "live_offset", int)
        if seq < 1 or live < -1:
            raise RecordRejected(RejectReason.BAD_VALUE, "lease_seq < 1 or live_offset < -1")
        return LeaseRecord(_ref(doc, "leader"), seq, live)
    seq, lease, skew = _nat(doc, "seq"), _nat(doc, "lease"), _nat(doc, "skew")
    prev = _opt(doc, "prev_ts", int)
    if seq < 1 or not 0 <= skew < lease or (prev is not None and prev < 0):
        raise RecordRejected(RejectReason.BAD_VALUE, "seq < 1, skew not in [0, lease), prev_ts < 0")
    return HeartbeatRecord(_str(doc, "inc"), seq, prev, lease, skew, _nat(doc, "acked_gen"))
