"""The protocol core: pure, deterministic, no Kafka, no threads, no clock.

1. :mod:`~groupkit.protocol.records` — control records, their factories and encoding.
2. :mod:`~groupkit.protocol.state` — :class:`GroupState`, built only by ``replay``.
3. :mod:`~groupkit.protocol.planner` — the leader's :class:`Planner` and ``adjust_cooperative``.
4. :mod:`~groupkit.protocol.member` — a member's :class:`Member` state machine and ``diff``.
5. :mod:`~groupkit.protocol.snapshot` — which snapshot a newcomer restores from.
6. :mod:`~groupkit.protocol.sim` — an in-memory log and a simulated group (tests, benches).

How a runtime drives it: replay every control record into a ``GroupState``; then call
``Member.poll(state, now_ms)`` and carry out its ``Actions`` in order (lost, revoke with commit,
assign, write records); if ``state.leader`` is this member, call ``Planner.plan(state,
partition_counts)`` (again with ``lags`` if it answers ``need_lags``) and produce the record of a
``write`` decision, then wait until that offset is replayed before planning again.
"""

from groupkit.errors import ProtocolError
from groupkit.protocol.member import (
    MEMBER_TRANSITIONS,
    Actions,
    Member,
    Write,
    diff,
)
from groupkit.protocol.planner import Adjusted, Decision, Planner, adjust_cooperative
from groupkit.protocol.records import (
    AssignmentKey,
    AssignmentRecord,
    CoveredMember,
    HmacSigner,
    MemberKey,
    MemberRecord,
    Signer,
    SnapshotKey,
    SnapshotRecord,
    assignment_record,
    covered_member,
    decode,
    decode_key,
    decode_value,
    encode,
    member_record,
    member_tombstone,
)
from groupkit.protocol.snapshot import newest_snapshot, restore
from groupkit.protocol.state import ASSIGNMENT_TRANSITIONS, GroupState, MemberState, Replayed

__all__ = [
    "ASSIGNMENT_TRANSITIONS",
    "MEMBER_TRANSITIONS",
    "Actions",
    "Adjusted",
    "AssignmentKey",
    "AssignmentRecord",
    "CoveredMember",
    "Decision",
    "GroupState",
    "HmacSigner",
    "Member",
    "MemberKey",
    "MemberRecord",
    "MemberState",
    "Planner",
    "ProtocolError",
    "Replayed",
    "Signer",
    "SnapshotKey",
    "SnapshotRecord",
    "Write",
    "adjust_cooperative",
    "assignment_record",
    "covered_member",
    "decode",
    "decode_key",
    "decode_value",
    "diff",
    "encode",
    "member_record",
    "member_tombstone",
    "newest_snapshot",
    "restore",
]
