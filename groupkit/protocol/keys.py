"""Control records' keys: their bytes, parsing them, and telling another group's apart.

A key is ``[key version u8][kind u8][group length u16 BE][group utf-8][member id utf-8]``; the
member id is in member (``M``), verdict (``V``) and heartbeat (``H``) keys only. Keys are never
signed or compressed: a reader skips another group's records by its key's bytes alone
(:func:`other_group_key`) and decodes its own (:func:`decode_key`, memoized by the bytes). The
values are :mod:`groupkit.protocol.codec`'s.
"""

from __future__ import annotations

import struct

from groupkit.errors import RecordRejected
from groupkit.protocol.memo import BoundedMemo
from groupkit.protocol.schema import (
    AssignmentKey,
    HeartbeatKey,
    LeaseKey,
    MemberKey,
    RecordKey,
    ResetKey,
    SnapshotKey,
    VerdictKey,
)
from groupkit.protocol.vocab import RejectReason

KEY_VERSION = 1
KIND_MEMBER = ord("M")
KIND_ASSIGNMENT = ord("A")
KIND_SNAPSHOT = ord("S")
KIND_RESET = ord("R")
KIND_VERDICT = ord("V")
KIND_PROCESS_END = ord("P")
KIND_LEASE = ord("L")
KIND_HEARTBEAT = ord("H")


def encode_key(key: RecordKey) -> bytes:
    g = key.group.encode()
    if len(g) > 0xFFFF:
        raise ValueError("group id too long")
    if isinstance(key, MemberKey):
        return struct.pack(">BBH", KEY_VERSION, KIND_MEMBER, len(g)) + g + key.member_id.encode()
    if isinstance(key, SnapshotKey):
        return struct.pack(">BBH", KEY_VERSION, KIND_SNAPSHOT, len(g)) + g
    if isinstance(key, ResetKey):
        return struct.pack(">BBH", KEY_VERSION, KIND_RESET, len(g)) + g
    if isinstance(key, VerdictKey):
        kind = KIND_VERDICT if key.kind == "expired" else KIND_PROCESS_END
        return struct.pack(">BBH", KEY_VERSION, kind, len(g)) + g + key.member_id.encode()
    if isinstance(key, HeartbeatKey):
        head = struct.pack(">BBH", KEY_VERSION, KIND_HEARTBEAT, len(g))
        return head + g + key.member_id.encode()
    if isinstance(key, LeaseKey):
        return struct.pack(">BBH", KEY_VERSION, KIND_LEASE, len(g)) + g
    return struct.pack(">BBH", KEY_VERSION, KIND_ASSIGNMENT, len(g)) + g


#: Parsed keys by their bytes
_key_memo: BoundedMemo[bytes, RecordKey] = BoundedMemo(1 << 16, 32 << 20)

#: what a key's entry is estimated to hold besides its bytes
_KEY_WEIGHT = 256

_group_prefixes: BoundedMemo[str, bytes] = BoundedMemo(4096, 4 << 20)


def other_group_key(raw: bytes | None, group: str) -> bool:
    """Whether ``raw`` is a key of another group than ``group``, from its bytes alone.

    Every key of a group holds the same bytes after its version and kind: the group's
    length-prefixed name. A key of a known version whose bytes there differ names another
    group (had it decoded, its group would differ: the length or the UTF-8 differ), so a
    reader skips it without decoding, verifying or even looking at its value: a partition
    shared with other groups costs a reader a prefix comparison per record of theirs.
    Anything else (a key of this group, or too short or of a version to tell) is for
    :func:`decode` to accept or reject.
    """
    prefix = _group_prefixes.get(group)
    if prefix is None:
        g = group.encode()
        prefix = struct.pack(">H", len(g)) + g
        _group_prefixes.put(group, prefix, len(prefix))
    return (
        type(raw) is bytes
        and len(raw) >= 4
        and raw[0] == KEY_VERSION
        and not raw.startswith(prefix, 2)
    )


def decode_key(raw: bytes | None) -> RecordKey:
    """Parse a key; raises only :class:`RecordRejected`."""
    if type(raw) is bytes:
        known = _key_memo.get(raw)
        if known is not None:
            return known
        key = _decode_key(raw)
        _key_memo.put(raw, key, len(raw) + _KEY_WEIGHT)
        return key
    return _decode_key(raw)


def _decode_key(raw: bytes | bytearray | None) -> RecordKey:
    if not isinstance(raw, bytes | bytearray) or len(raw) < 4:
        raise RecordRejected(RejectReason.BAD_BYTES, "key too short")
    version, kind, glen = struct.unpack_from(">BBH", raw)
    if version != KEY_VERSION:
        raise RecordRejected(RejectReason.UNKNOWN_VERSION, f"key version {version}")
    if len(raw) < 4 + glen or glen == 0:
        raise RecordRejected(RejectReason.BAD_BYTES, "key truncated")
    try:
        group = bytes(raw[4 : 4 + glen]).decode()
        rest = bytes(raw[4 + glen :]).decode()
    except UnicodeDecodeError:
        raise RecordRejected(RejectReason.BAD_BYTES, "key is not utf-8") from None
    if kind == KIND_MEMBER:
        if not rest:
            raise RecordRejected(RejectReason.MISSING_FIELD, "member key without member id")
        return MemberKey(group, rest)
    if kind == KIND_ASSIGNMENT:
        if rest:
            raise RecordRejected(RejectReason.BAD_BYTES, "trailing bytes in assignment key")
        return AssignmentKey(group)
    if kind == KIND_SNAPSHOT:
        if rest:
            raise RecordRejected(RejectReason.BAD_BYTES, "trailing bytes in snapshot key")
        return SnapshotKey(group)
    if kind == KIND_RESET:
        if rest:
            raise RecordRejected(RejectReason.BAD_BYTES, "trailing bytes in reset key")
        return ResetKey(group)
    if kind in (KIND_VERDICT, KIND_PROCESS_END, KIND_HEARTBEAT):
        if not rest:
            raise RecordRejected(RejectReason.MISSING_FIELD, "member key without member id")
        if kind == KIND_HEARTBEAT:
            return HeartbeatKey(group, rest)
        return VerdictKey(group, rest, "expired" if kind == KIND_VERDICT else "process_ended")
    if kind == KIND_LEASE:
        if rest:
            raise RecordRejected(RejectReason.BAD_BYTES, "trailing bytes in lease key")
        return LeaseKey(group)
    raise RecordRejected(RejectReason.UNKNOWN_KIND, f"key kind {kind}")


def forget_key(raw: bytes) -> None:
    """Drop ``raw`` from the parsed-key memo (a member's tombstone: its key is of no more use)."""
    _key_memo.pop(raw)
