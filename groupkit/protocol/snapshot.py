"""Snapshots of a group's state: taking one, choosing one, and restoring from it.

The leader writes the whole replayed state now and then as a snapshot record
(:func:`to_snapshot`; ``Node.snapshot_due``). A newcomer reads the tail of the control
partition, restores the state of the snapshot :func:`newest_snapshot` picks
(:func:`from_snapshot`), and replays only the records after its ``as_of``. Replaying a snapshot
record changes nothing (state.py): it is a copy of a past state, not an event.

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

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Protocol

from groupkit.errors import RecordRejected
from groupkit.protocol.group import Hold, MemberState, ResetState
from groupkit.protocol.records import (
    Signer,
    SnapshotHold,
    SnapshotKey,
    SnapshotMember,
    SnapshotRecord,
    SnapshotReset,
    decode,
)
from groupkit.protocol.state import GroupState


def to_snapshot(state: GroupState, writer_id: str, writer_incarnation: str) -> SnapshotRecord:
    """``state`` as of its offset (rejection counters and offset hints aside), to be written
    under ``SnapshotKey(group)``."""
    if state.offset < 0:
        raise ValueError("nothing replayed yet: no offset to snapshot at")
    history = tuple(
        (state.generation_time[g], state.generations[g]) for g in sorted(state.generations)
    )
    return SnapshotRecord(
        group=state.group,
        as_of=state.offset,
        log_time=state.log_time,
        writer_id=writer_id,
        writer_incarnation=writer_incarnation,
        leader=state.leader,
        members=tuple(_member_to_snapshot(m) for m in state.members.values()),
        assignment=state.assignment,
        assignment_offset=state.assignment_offset,
        history=history,
        holds=tuple(SnapshotHold(h.holder, h.partitions, h.until, h.run) for h in state.holds),
        assignment_clobbered=state.assignment_clobbered,
        reset=None if state.reset is None else _reset_to_snapshot(state.reset),
        reset_floor=state.reset_floor,
        version=state.version,
        verdicts=tuple(sorted(state.verdicts.items())),
        lease=state.lease,
        echoed=tuple((mid, tuple(sorted(p))) for mid, p in sorted(state.echoed.items())),
    )


def from_snapshot(
    record: SnapshotRecord,
    session_timeout_ms: int,
    rebalance_timeout_ms: int = 60_000,
    verifier: Signer | None = None,
) -> GroupState:
    """The state :func:`to_snapshot` captured (rejection counters start empty); feed it the
    records after ``record.as_of``."""
    st = GroupState(record.group, session_timeout_ms, rebalance_timeout_ms, verifier,
                    record.version)  # fmt: skip
    st.verdicts = dict(record.verdicts)
    st.lease = record.lease
    st.echoed = {mid: frozenset(p) for mid, p in record.echoed}
    st.offset = record.as_of
    st.log_time = record.log_time
    st.members = {m.member_id: _member_from_snapshot(m) for m in record.members}
    st.leader = record.leader
    st.assignment = record.assignment
    st.assignment_offset = record.assignment_offset
    st.holds = [Hold(h.holder, h.partitions, h.until, h.run) for h in record.holds]
    st.assignment_clobbered = record.assignment_clobbered
    st.generations = {a.generation: a for _, a in record.history}
    st.generation_time = {a.generation: t for t, a in record.history}
    for m in st.members.values():
        for p in m.claims:
            st.claimers.setdefault(p, set()).add(m.member_id)
        if m.admitted_in:
            st.admitted_ids.add(m.member_id)
    st.pending_generations = {
        g for g, a in st.generations.items() if any(c.pending for c in a.members.values())
    }
    st.inherit_generations = {
        g for g, a in st.generations.items() if any(c.inherit for c in a.members.values())
    }
    st.reset_floor = record.reset_floor
    if record.reset is not None:
        r = record.reset
        st.reset = ResetState(r.at, r.reset_id, dict(r.offsets), set(r.settled),
                              dict(r.waiting))  # fmt: skip
    # Its writer knew its holds (Node.snapshot_due writes no snapshot otherwise), and the
    # snapshot carries them: a gap from here on is the reader's own (replay sets it). So a
    # newcomer that caught up from a snapshot takes handoffs at once (ownership.knows_holds).
    st.gap_ts = None
    return st


def _reset_to_snapshot(r: ResetState) -> SnapshotReset:
    return SnapshotReset(r.at, r.reset_id, tuple(sorted(r.offsets.items())),
                         frozenset(r.settled), tuple(sorted(r.waiting.items())))  # fmt: skip


#: MemberState's fields, which a SnapshotMember carries under the same names
_MEMBER_FIELDS = tuple(f.name for f in fields(MemberState))


def _member_to_snapshot(m: MemberState) -> SnapshotMember:
    return SnapshotMember(**{f: getattr(m, f) for f in _MEMBER_FIELDS})


def _member_from_snapshot(m: SnapshotMember) -> MemberState:
    return MemberState(**{f: getattr(m, f) for f in _MEMBER_FIELDS})


class RawRecord(Protocol):
    """A control record as read: what the runtime's and the simulator's records both have."""

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


def newest_snapshot(
    records: Iterable[RawRecord], group: str, verifier: Signer | None = None, version: int = 1
) -> tuple[int, SnapshotRecord] | None:
    """``(offset of the record, snapshot)`` of the valid snapshot of ``group`` with the largest
    ``as_of`` (on a tie, the first in the log), or ``None`` if there is none. Only snapshots of
    the reader's protocol ``version`` count."""
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
        if k != want or not isinstance(v, SnapshotRecord) or v.version != version:
            continue
        if version == 1 and v.as_of >= r.offset:
            # in the main log it must follow what it sums up; version 2's are on the liveness
            # log (docs/protocol-v2.md, L8), where as_of is another log's offset
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
    version: int = 1,
) -> GroupState | None:
    """The state at the end of ``records`` (the control partition as read, in offset order),
    from the snapshot :func:`newest_snapshot` picks and the records after it; ``None`` if there
    is none, or the records after it are not whole (see the module docstring)."""
    rs = list(records)
    got = newest_snapshot(rs, group, verifier, version)
    if got is None:
        return None
    snap = got[1]
    state = from_snapshot(snap, session_timeout_ms, rebalance_timeout_ms, verifier)
    for r in rs:
        if r.offset <= snap.as_of:
            continue
        if r.offset != state.offset + 1:
            return None  # a gap: the cleaner has been past as_of
        state.replay(r.offset, r.key, r.value, r.timestamp)
    return state


#: How far back from the log's end a bounded catch-up starts reading: the leader writes a
#: snapshot every half session (node.py), so one session and a half of log holds one, with half
#: a session to spare for a slow write or a leader change.
CATCH_UP_WINDOW_SESSIONS = 1.5


@dataclass(frozen=True, slots=True)
class _Buffered:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


class CatchUp:
    """A newcomer's bounded catch-up, sans-I/O: the runtime and the simulator both drive it.

    1. The caller starts reading at the first offset stamped at or after ``end time -
       CATCH_UP_WINDOW_SESSIONS x session`` (Kafka's ``offsets_for_times``), tells
       :meth:`start` that offset, and :meth:`feed`\\ s every record up to the high watermark.
    2. :meth:`finish` answers one of:

       - ``("state", GroupState)``: restored from the newest snapshot and the records after it;
       - ``("reread", offset)``: the newest snapshot's ``as_of`` is before where reading
         started; read again from ``offset`` (``as_of + 1``), then :meth:`finish` again;
       - ``("full", 0)``: no usable snapshot (a young group, a leader dead for long, or a tail
         the cleaner has been through): replay the whole log, as before snapshots.

    It counts the records it fed (:attr:`read`) and the ones it replayed (:attr:`replayed`).
    """

    def __init__(
        self,
        group: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int = 60_000,
        verifier: Signer | None = None,
        version: int = 1,
    ) -> None:
        self.group = group
        self.version = version
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.verifier = verifier
        self._records: list[_Buffered] = []
        self._start = 0
        self.read = 0
        self.replayed = 0

    def start(self, offset: int) -> None:
        """Reading starts (again) at ``offset``: what was fed before is dropped."""
        self._start = offset
        self._records = []

    def feed(self, offset: int, key: bytes | None, value: bytes | None, timestamp: int) -> None:
        self._records.append(_Buffered(offset, key, value, timestamp))
        self.read += 1

    def finish(self) -> tuple[str, GroupState | int]:
        if self._start == 0:
            # reading from the beginning: restoring would only skip, not bound, and the log
            # may be compacted (which a restored state must not be fed: module docstring)
            return "full", 0
        got = newest_snapshot(self._records, self.group, self.verifier, self.version)
        if got is None:
            return "full", 0
        as_of = got[1].as_of
        if as_of + 1 < self._start:
            return "reread", as_of + 1
        state = restore(
            self._records, self.group, self.session_timeout_ms, self.rebalance_timeout_ms,
            self.verifier, self.version,
        )  # fmt: skip
        if state is None:
            return "full", 0
        self.replayed = sum(1 for r in self._records if r.offset > as_of)
        return "state", state

    def run(
        self,
        start: int | None,
        end: int,
        read: Callable[[int], Iterable[tuple[int, bytes | None, bytes | None, int]]],
    ) -> GroupState | None:
        """The whole catch-up: read (``read(offset)`` yields ``(offset, key, value,
        timestamp)`` from ``offset`` to the high watermark ``end``) from ``start``, and once
        more from the snapshot's ``as_of`` if :meth:`finish` asks; the restored state, or
        ``None``: replay the whole log."""
        for _ in range(2):  # the window, then at most one re-read
            if start is None or not 0 < start < end:
                return None
            self.start(start)
            for r in read(start):
                self.feed(*r)
            verdict, got = self.finish()
            if verdict == "state":
                assert isinstance(got, GroupState)
                return got
            if verdict != "reread":
                return None
            assert isinstance(got, int)
            start = got
        return None

    @staticmethod
    def window_start_ms(end_time_ms: int, session_timeout_ms: int) -> int:
        """The broker time from which to read (see the class docstring)."""
        return end_time_ms - int(CATCH_UP_WINDOW_SESSIONS * session_timeout_ms)
