"""The hand-offs the control thread queues for the ``poll`` thread, and when they are due.

A :class:`Handoff` is the runtime's copy of one step's ``Actions`` that the ``poll`` thread
must carry out (runtime/handoff.py). The :class:`HandoffQueue` keeps them, oldest first, under
the coordinator's lock, with one exception to "at once": a member's **first partitions start
together**.

librdkafka keeps one fetch in flight per broker, and a fetch waits up to
``fetch.wait.max.ms`` (500 ms by default) for records of the partitions it asks for. A newcomer
is handed its share one giver at a time, as each releases its part (docs/protocol.md,
"Admission"). Started as they come, its first partitions' fetch goes out alone; if they are
quiet, the partitions handed over next wait for that fetch to come back before their first
one, their backlog already there: half a second on a busy machine whose producers fall
behind. So while a member whose owned partitions have not started yet still awaits part of its
share, its hand-offs wait, and start together, in one assignment, as soon as the share is
complete or :data:`FIRST_START_HOLD_S` after the first. This is timing only: the log says
what the member owns, whenever its fetches start.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from groupkit.protocol import GroupState
from groupkit.protocol.ownership import admission
from groupkit.protocol.records import EMPTY, Partitions
from groupkit.types import TopicPartition

#: the longest a member's first partitions wait for the rest of its share: about the spread
#: of its givers' releases on a busy machine, well under ``fetch.wait.max.ms``
FIRST_START_HOLD_S = 0.1


@dataclass(frozen=True)
class Handoff:
    """Work for the ``poll`` thread, in the order it must be done."""

    lost: Partitions
    revoke: Partitions
    assign: Partitions
    generation: int
    #: where to start some of ``assign``: the offsets their previous owner committed and named
    #: in its release (``Actions.offsets``); the others look their committed offset up
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    #: an offset reset to carry out after ``assign`` (``Actions.reset``): start these at these
    #: offsets, commit them, then report :meth:`Coordinator.reset_applied` with ``reset_at``
    reset: Mapping[TopicPartition, int] = field(default_factory=dict)
    reset_at: int = -1
    #: ``time.monotonic()`` when the control thread queued it, the first of merged ones (hop
    #: events: how long until the ``poll`` thread started it, a hold included)
    queued_at: float = field(default_factory=time.monotonic)

    @property
    def assigns_only(self) -> bool:
        return not (self.lost or self.revoke or self.reset)


def awaited(state: GroupState, member_id: str, owned: Partitions) -> Partitions:
    """What of the member's share it does not own yet: what the current generation assigns
    it, pending partitions included, or, for the newcomer it admitted, what its members give
    it."""
    a = state.assignment
    share = a.target(member_id) if a is not None else EMPTY
    adm = admission(state)
    if adm is not None and adm[0] == member_id:
        share |= adm[1]
    return share - owned


class HandoffQueue:
    """The queued hand-offs (see the module docstring); used under the coordinator's lock."""

    def __init__(self, hold_s: float = FIRST_START_HOLD_S) -> None:
        self._items: list[Handoff] = []
        self._hold_s = hold_s
        #: ``time.monotonic()`` until which the queue holds a member's first partitions back
        self.hold_until: float | None = None

    def __bool__(self) -> bool:
        return bool(self._items)

    def put(self, h: Handoff, owned: Partitions, awaiting: Partitions) -> None:
        """Queue ``h``; ``owned``: what the member owns after it, ``awaiting``: what of its
        share is still to come. Consecutive assignments merge into one."""
        items = self._items
        if items and items[-1].assigns_only and h.assigns_only:
            last = items[-1]
            offsets = {**last.offsets, **h.offsets}
            h = replace(h, assign=last.assign | h.assign, offsets=offsets, queued_at=last.queued_at)
            items[-1] = h
        else:
            items.append(h)
        first = all(x.assigns_only for x in items) and owned <= h.assign
        if not (first and awaiting):
            self.hold_until = None
        elif self.hold_until is None:
            self.hold_until = h.queued_at + self._hold_s

    def release(self) -> None:
        """Hold nothing back from now on (the member is leaving)."""
        self.hold_until = None

    def held(self, now: float) -> bool:
        return self.hold_until is not None and now < self.hold_until

    def take(self, now: float) -> list[Handoff]:
        """Every queued hand-off, oldest first, unless they are held back."""
        if self.held(now):
            return []
        items, self._items = self._items, []
        self.hold_until = None
        return items
