"""What one step of a member (:meth:`groupkit.protocol.member.Member.poll`) asks the runtime
to do: the :class:`Actions`, in their order (the member module's docstring), and the
:class:`Write` records among them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from groupkit.protocol.records import (
    EMPTY,
    HeartbeatKey,
    HeartbeatRecord,
    MemberKey,
    MemberRecord,
    Partitions,
)
from groupkit.protocol.vocab import MemberPhase
from groupkit.types import TopicPartition


def diff(
    old: Iterable[tuple[str, int]], new: Iterable[tuple[str, int]]
) -> tuple[Partitions, Partitions]:
    """``(added, revoked)`` going from owning ``old`` to owning ``new``."""
    o = frozenset(TopicPartition(t, p) for t, p in old)
    n = frozenset(TopicPartition(t, p) for t, p in new)
    return n - o, o - n


@dataclass(frozen=True, slots=True)
class Write:
    """A record to produce: decoded (for logs and tests) and encoded (for the producer)."""

    key: MemberKey | HeartbeatKey
    value: MemberRecord | HeartbeatRecord | None
    raw_key: bytes
    raw_value: bytes | None

    @property
    def liveness(self) -> bool:
        """A heartbeat, for the group's liveness log (protocol version 2); else the main log.
        Its delivery report goes back to the member
        (:meth:`~groupkit.protocol.member.Member.heartbeat_confirmed`)."""
        return isinstance(self.key, HeartbeatKey)


@dataclass(frozen=True, slots=True)
class Actions:
    """What the runtime must do now, in field order (see the module docstring)."""

    lost: Partitions = EMPTY
    revoke: Partitions = EMPTY
    assign: Partitions = EMPTY
    #: where to start some of ``assign`` (the rest: look the committed offset up)
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    writes: tuple[Write, ...] = ()
    #: the generation the member's partitions belong to after these actions
    generation: int = 0
    state: MemberPhase = MemberPhase.UNJOINED
    #: why, for the runtime's logs: a :class:`~groupkit.protocol.vocab.LossReason` when what
    #: it owned was lost, ``"generation N"`` when what it owns changed for generation N
    events: tuple[str, ...] = ()
    #: offset reset (docs/protocol.md, "Resets"), carried out after ``assign``: start these
    #: partitions (owned, or just assigned) at these offsets and commit them, then report
    #: :meth:`~groupkit.protocol.member.Member.reset_applied` with ``reset_at`` (at once unless
    #: ``defer_revocations``)
    reset: Mapping[TopicPartition, int] = field(default_factory=dict)
    reset_at: int = -1

    @property
    def idle(self) -> bool:
        return not (self.lost or self.revoke or self.assign or self.writes or self.reset)
