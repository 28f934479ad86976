"""The protocol core: pure, deterministic, no Kafka, no threads, no clock.

0. :mod:`~groupkit.protocol.vocab` — the closed vocabularies (``StrEnum``: phases, reasons ...).
1. :mod:`~groupkit.protocol.records` — control records, their factories and encoding: the
   schema (:mod:`~groupkit.protocol.schema`) and the codec (:mod:`~groupkit.protocol.codec`,
   reading fields with :mod:`~groupkit.protocol.fields`).
2. :mod:`~groupkit.protocol.state` — :class:`GroupState`, built only by ``replay``; its fields
   and value classes in :mod:`~groupkit.protocol.group`, who may hold what derived from it in
   :mod:`~groupkit.protocol.ownership`, holds and their echo in :mod:`~groupkit.protocol.holds`,
   what an assignment record must be by itself in :mod:`~groupkit.protocol.consistent`.
3. :mod:`~groupkit.protocol.planner` — the leader's :class:`Planner` and ``adjust_cooperative``.
4. :mod:`~groupkit.protocol.member` — a member's :class:`Member` state machine and ``diff``.
5. :mod:`~groupkit.protocol.snapshot` — a state to and from its snapshot, and which one a
   newcomer restores from.
6. :mod:`~groupkit.protocol.node` — :class:`Node`, the driver that composes the three above.

How a runtime drives it (through a ``Node``, as the runtime and the simulator,
:mod:`groupkit.testing.sim`, both do): feed every control record (``Node.feed``); then
``Node.step(now_ms)`` and carry out its ``Actions`` in order (lost, revoke with commit, assign,
write records); if the step says the node is ready to lead, ``Node.plan(now_ms,
partition_counts)`` (again with ``lags`` if it answers ``need_lags``), produce the record of a
``write`` answer and report its offset (``Node.written``) or its failure (``Node.write_failed``);
the node plans again once that offset is replayed.
"""

from groupkit.errors import ProtocolError
from groupkit.protocol.actions import Actions, Write, diff
from groupkit.protocol.group import MemberState
from groupkit.protocol.member import Member
from groupkit.protocol.node import Lead, Node, NodeStep
from groupkit.protocol.planner import (
    Adjusted,
    Decision,
    Planner,
    adjust_cooperative,
    default_cover_after_ms,
)
from groupkit.protocol.records import (
    AssignmentKey,
    AssignmentRecord,
    CoveredMember,
    HmacSigner,
    MemberKey,
    MemberRecord,
    MemberRef,
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
from groupkit.protocol.state import ASSIGNMENT_TRANSITIONS, GroupState, Replayed
from groupkit.protocol.vocab import MEMBER_TRANSITIONS

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
    "Lead",
    "Member",
    "MemberKey",
    "MemberRecord",
    "MemberRef",
    "MemberState",
    "Node",
    "NodeStep",
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
    "default_cover_after_ms",
    "diff",
    "encode",
    "member_record",
    "member_tombstone",
    "newest_snapshot",
    "restore",
]
