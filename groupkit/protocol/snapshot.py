"""Choosing the snapshot a newcomer restores from (issue 14).

A newcomer reads the tail of the control partition, restores the state of the snapshot this
picks (:meth:`GroupState.from_snapshot`), and replays only the records after its ``as_of``.

The rule: the valid snapshot of the group with the largest ``as_of``. Not the newest in the log:
a stale copy of an old snapshot may be written again later (a zombie leader, a replayed
message). Such a copy still describes a true state, the one at its own ``as_of``, because every
correct member's replay holds that state there; so picking by ``as_of`` is never misled by it,
at worst it makes the newcomer replay more. A snapshot is valid if it decodes (and verifies,
with a verifier) and its ``as_of`` is before its own offset: a state cannot include the record
that carries it, so a snapshot claiming a later offset was not written by a correct member.

The tail must be whole. A state restored at ``as_of`` and fed the records after it equals the
full replay only if none of those records was compacted away: a restored state judges a member
record by the memberships it knows, so a claim granted by an assignment record the cleaner
dropped is rejected (``unowned_claim``), and what follows disagrees. (A reader starting from
the compacted log has no such problem: it trusts what it first sees, state.py.) Compaction
leaves gaps in the offsets, so :func:`restore` checks that the offsets after ``as_of`` are
contiguous and otherwise declines; the caller then replays from the start of the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from groupkit.errors import RecordRejected
from groupkit.protocol.records import Signer, SnapshotKey, SnapshotRecord, decode
from groupkit.protocol.state import GroupState


class RawRecord(Protocol):
    """A control record as read: what the runtime's and the simulator's records both have."""

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


def newest_snapshot(
    records: Iterable[RawRecord], group: str, verifier: Signer | None = None
) -> tuple[int, SnapshotRecord] | None:
    """``(offset of the record, snapshot)`` of the valid snapshot of ``group`` with the largest
    ``as_of`` (on a tie, the first in the log), or ``None`` if there is none."""
    best: tuple[int, SnapshotRecord] | None = None
    want = SnapshotKey(group)
    for r in records:
        key = r.key
        # the kind byte, before any decoding: most records are not snapshots
        if not isinstance(key, bytes) or len(key) < 2 or key[1] != ord("S"):
            continue
        try:
            k, v = decode(key, r.value, verifier)
        except RecordRejected:
            continue
        if k != want or not isinstance(v, SnapshotRecord) or v.as_of >= r.offset:
            continue
        if best is None or v.as_of > best[1].as_of:
            best = (r.offset, v)
    return best


class TimedRecord(RawRecord, Protocol):
    @property
    def timestamp(self) -> int: ...


def restore(
    records: Iterable[TimedRecord],
    group: str,
    session_timeout_ms: int,
    rebalance_timeout_ms: int = 60_000,
    verifier: Signer | None = None,
) -> GroupState | None:
    """The state at the end of ``records`` (the control partition as read, in offset order),
    from the snapshot :func:`newest_snapshot` picks and the records after it; ``None`` if there
    is none, or the records after it are not whole (see the module docstring)."""
    rs = list(records)
    got = newest_snapshot(rs, group, verifier)
    if got is None:
        return None
    snap = got[1]
    state = GroupState.from_snapshot(snap, session_timeout_ms, rebalance_timeout_ms, verifier)
    for r in rs:
        if r.offset <= snap.as_of:
            continue
        if r.offset != state.offset + 1:
            return None  # a gap: the cleaner has been past as_of
        state.replay(r.offset, r.key, r.value, r.timestamp)
    return state
