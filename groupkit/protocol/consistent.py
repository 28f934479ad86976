"""Rule 3's check 4 (docs/protocol.md, "Generations"): what an assignment record must be by
itself, whatever the state it lands in, or it is rejected as ``inconsistent``."""

from __future__ import annotations

from groupkit.errors import RecordRejected
from groupkit.protocol.records import AssignmentRecord
from groupkit.protocol.vocab import Phase, RebalanceProtocol, RejectReason
from groupkit.types import TopicPartition

_EAGER, _COOPERATIVE = RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE


def check_consistent(a: AssignmentRecord) -> None:
    counts = dict(a.partition_counts)
    seen: set[TopicPartition] = set()
    for mid, c in a.members.items():
        if c.assigned & c.revoke or c.assigned & c.pending:
            raise RecordRejected(
                RejectReason.INCONSISTENT, f"{mid}: a partition assigned and revoked"
            )
        if a.phase == Phase.REVOKE and (c.assigned or c.pending):
            raise RecordRejected(RejectReason.INCONSISTENT, f"{mid}: revoke phase assigns")
        if a.protocol == _EAGER and a.phase != Phase.REVOKE and c.revoke:
            raise RecordRejected(
                RejectReason.INCONSISTENT, f"{mid}: eager revokes outside the revoke phase"
            )
        if a.phase == Phase.COMPLETE and c.pending:
            raise RecordRejected(RejectReason.INCONSISTENT, f"{mid}: complete phase with pending")
        if c.admit and (
            a.protocol != _COOPERATIVE or a.phase != Phase.COMPLETE or not c.admit <= c.assigned
        ):
            raise RecordRejected(
                RejectReason.INCONSISTENT, f"{mid}: admits outside its complete cooperative grant"
            )
        for p in c.assigned | c.pending:
            if p.partition >= counts.get(p.topic, 0) or p.topic not in c.topics:
                raise RecordRejected(
                    RejectReason.INCONSISTENT, f"{mid}: {p} not subscribed or not there"
                )
            if p in seen:
                raise RecordRejected(RejectReason.INCONSISTENT, f"{p} given to two members")
            seen.add(p)
    heirs: set[TopicPartition] = set()
    for mid, c in a.members.items():
        if not c.inherit:
            continue
        if a.protocol != _COOPERATIVE or a.phase != Phase.COMPLETE or c.inherit & c.assigned:
            raise RecordRejected(
                RejectReason.INCONSISTENT, f"{mid}: inherits outside a complete cooperative one"
            )
        for p in c.inherit:
            if p not in seen or p.topic not in c.topics:
                raise RecordRejected(
                    RejectReason.INCONSISTENT, f"{mid}: inherits {p}, nobody's or not subscribed"
                )
            if p in heirs:
                raise RecordRejected(RejectReason.INCONSISTENT, f"{p} has two heirs")
            heirs.add(p)
