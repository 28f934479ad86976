"""Control records: keys, values, their factories and their versioned binary encoding.

A group's whole history is two kinds of record on one partition of the compacted control topic:

1. **Member record** (key: group + member id). The member's *whole* current state: incarnation,
   a per-incarnation sequence number, subscription, owned partitions and the generation they
   belong to, the generation it has acknowledged, rack/capacity, client info, and the
   ``joined_at`` it has learned from its own replay (see below). Because each record is whole,
   compaction loses nothing.
2. **Assignment record** (key: group). One generation of the group: leader id, incarnation and
   ``joined_at``, protocol (eager | cooperative), phase (revoke | partial | complete), assignor,
   the partition counts it was planned for, and per covered member its incarnation and topics,
   the partitions it is ``assigned`` now, must ``revoke`` now, and has ``pending`` (granted in a
   follow-up generation once their old owner lets go).
3. **Member tombstone** (key: group + member id, value ``None``): a clean leave.
4. **Snapshot record** (key: group, its own kind). The whole replayed ``GroupState`` as of an
   offset ``as_of`` of the writer's replay (:class:`SnapshotRecord`), so that a newcomer can
   restore it and replay only what follows. Compaction keeps the newest per group.
   Replay is deterministic, so a snapshot by any correct member is the state every full reader
   holds at ``as_of``; the replay itself ignores snapshot records (state.py). Its payload is
   always compressed, and may be larger than other records' (:data:`MAX_SNAPSHOT_PAYLOAD`).

Records are built only through the named factories (:func:`member_record`,
:func:`assignment_record`, :func:`member_tombstone`) and turned into bytes by :func:`encode`.

Three modules hold them, and this one re-exports them (import from here): the schema,
:mod:`~groupkit.protocol.schema` (keys, values, factories), the keys' bytes,
:mod:`~groupkit.protocol.keys`, and the values' codec, :mod:`~groupkit.protocol.codec`
(versions, bounds, signing, the decode memo).

Wire format::

    key   = [key version u8][kind u8: 'M' | 'A' | 'S' | 'R' | 'V' | 'L' | 'H'][group len u16 BE]
            [group utf-8][member utf-8, in 'M', 'V' and 'H' keys]
    value = [schema version u8][flags u8][tag length u8, tag if flags & SIGNED][payload]
    payload = JSON (zlib-compressed if flags & ZLIB)

Partitions are range-encoded per topic: ``{"t": [0, [5, 9], 12]}`` is partitions 0, 5..9, 12.

``joined_at`` is the broker time of a member's first record. The replay derives it; a member
never writes its own clock. It *echoes* the value it learned from its own replay so that a reader
starting from a compacted topic (where that first record is gone) still orders leaders the same.
``prev_ts`` is the broker time of the own record the member's session runs from (``null``: none,
or lapsed); with it the replay decides from the record alone whether it continues a membership,
which then takes the echoed ``joined_at`` and ``since_gen`` (state.py). Both fields are in every
member record: a record without them is rejected (``missing_field``).

``committed`` (optional, ``{"t": [[partition, offset], ...]}``): in the record by which a member
lets partitions go, the offsets it committed for them just before, so that their next
owner starts there without looking them up (``GroupState.offset_hints`` says when it may).
Absent means none; records that predate it decode with none. Like every field, it is inside the
signed payload.

``fallback`` (optional, in assignment records, ``{"reason": r, "detail": d, "assignor": a}``):
the generation was planned by the built-in fallback ``a`` because the group's assignor failed
(``reason`` is an ``AssignorFailure``: ``raised``, ``invalid`` or ``timeout``; protocol/assign.py;
a reader accepts any). Follow-up generations of that plan carry it on, so every member and
``groupkit describe`` see that the group runs on a fallback, and why. Absent means the group's
own assignor planned it; records that predate the field decode without one. It is inside the
signed payload like every field.

``replan`` (optional, in assignment records, ``{"reason", "gain", "moved", "gen", "at"}``): the
newest generation the leader planned to follow the load (protocol/placement.py): why
(``overload`` or ``drain``), its predicted gain, how many partitions it moved, the generation
that started it and the log time it was planned at. Information only: the replay checks the
generation as any other and reads nothing of it; later generations carry it on, so that
``groupkit describe`` shows the newest re-plan and the next leader keeps the interval.

``instance`` (optional, str): the ``group.instance.id`` of a static member (KIP-345), which is
its member id; ``seat`` (optional, str, only with ``instance``): the incarnation the group knows
its seat by, echoed from its replay; ``seat_ts`` (optional, int, only in a static member's join,
with ``seat`` and ``joined_at``): the time of the newest record of the seat it saw live. Absent
in records of dynamic members and of members that predate static membership; inside the signed
payload like every field. The replay's rules for them are in state.py ("Static membership").

Protocol version 2 (docs/protocol-v2.md) writes its member records, and the kinds it adds, at
value version 2: a member record with ``since`` instead of ``prev_ts``; ``V`` verdicts and the
``L`` lease in the main log; ``H`` heartbeats in the liveness log. Each version's replay rejects
the other's member records (``other_version``), so neither misreads the other.

Decoding raises nothing but :class:`~groupkit.errors.RecordRejected`, whose ``reason`` is one of
the decoder's labels of :class:`~groupkit.protocol.vocab.RejectReason` (``bad_bytes``,
``unknown_version``, ``unknown_kind``, ``missing_field``, ``wrong_type``, ``bad_value``,
``too_large``, ``unsigned``, ``bad_signature``). ``too_large``: what one record may make a
reader allocate is bounded (:data:`MAX_PAYLOAD`, :data:`MAX_CONTAINERS`, :data:`MAX_PARTITIONS`).

Signing (optional): pass a :class:`Signer` (e.g. :class:`HmacSigner` with a shared group key) to
:func:`encode` and :func:`decode_value`. The tag covers the key bytes and the payload. Tombstones
carry no value, so they cannot be signed; the replay limits what an unsigned tombstone can do.
"""

from groupkit.protocol.codec import (
    COMPRESS_ABOVE,
    FLAG_SIGNED,
    FLAG_ZLIB,
    MAX_CONTAINERS,
    MAX_PAYLOAD,
    MAX_SNAPSHOT_PARTITIONS,
    MAX_SNAPSHOT_PAYLOAD,
    SCHEMA_VERSION,
    SCHEMA_VERSION_2,
    decode,
    decode_value,
    encode,
    encode_value,
)
from groupkit.protocol.codec import (  # the decoder's private parts that tests reach into
    _assignment_doc as _assignment_doc,
)
from groupkit.protocol.codec import (
    _member_memo as _member_memo,
)
from groupkit.protocol.keys import (
    KEY_VERSION,
    KIND_ASSIGNMENT,
    KIND_HEARTBEAT,
    KIND_LEASE,
    KIND_MEMBER,
    KIND_RESET,
    KIND_SNAPSHOT,
    KIND_VERDICT,
    decode_key,
    encode_key,
    other_group_key,
)
from groupkit.protocol.ranges import (
    MAX_PARTITIONS,
    MAX_RANGE,
    decode_partitions,
    encode_partitions,
)
from groupkit.protocol.schema import (
    EMPTY,
    MAX_FALLBACK_DETAIL,
    MAX_RESET_TEXT,
    PHASES,
    PROTOCOLS,
    VERDICT_KINDS,
    AssignmentKey,
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
    MemberRef,
    Partitions,
    Protocol_,
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
    assignment_record,
    covered_member,
    heartbeat_record,
    lease_record,
    member_record,
    member_tombstone,
    reset_record,
    verdict_record,
)
from groupkit.protocol.signing import HmacSigner, Signer

__all__ = [
    "COMPRESS_ABOVE",
    "EMPTY",
    "FLAG_SIGNED",
    "FLAG_ZLIB",
    "KEY_VERSION",
    "KIND_ASSIGNMENT",
    "KIND_HEARTBEAT",
    "KIND_LEASE",
    "KIND_MEMBER",
    "KIND_RESET",
    "KIND_SNAPSHOT",
    "KIND_VERDICT",
    "MAX_CONTAINERS",
    "MAX_FALLBACK_DETAIL",
    "MAX_PARTITIONS",
    "MAX_PAYLOAD",
    "MAX_RANGE",
    "MAX_RESET_TEXT",
    "MAX_SNAPSHOT_PARTITIONS",
    "MAX_SNAPSHOT_PAYLOAD",
    "PHASES",
    "PROTOCOLS",
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_2",
    "VERDICT_KINDS",
    "AssignmentKey",
    "AssignmentRecord",
    "AssignorFallback",
    "CoveredMember",
    "HeartbeatKey",
    "HeartbeatRecord",
    "HeldEcho",
    "HmacSigner",
    "LeaseKey",
    "LeaseRecord",
    "LoadReplan",
    "MemberKey",
    "MemberRecord",
    "MemberRef",
    "Partitions",
    "Protocol_",
    "RecordKey",
    "RecordValue",
    "ResetKey",
    "ResetRecord",
    "Signer",
    "SnapshotHold",
    "SnapshotKey",
    "SnapshotMember",
    "SnapshotRecord",
    "SnapshotReset",
    "VerdictKey",
    "VerdictRecord",
    "assignment_record",
    "covered_member",
    "decode",
    "decode_key",
    "decode_partitions",
    "decode_value",
    "encode",
    "encode_key",
    "encode_partitions",
    "encode_value",
    "heartbeat_record",
    "lease_record",
    "member_record",
    "member_tombstone",
    "other_group_key",
    "reset_record",
    "verdict_record",
]
