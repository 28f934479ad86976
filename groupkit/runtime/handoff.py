"""The hand-off executor: carries out the coordinator's :class:`Handoff`s on the ``poll`` thread.

The control thread (:class:`~groupkit.runtime.coordinator.Coordinator`) decides what the member
loses, gives up and gets; this module does it, on the thread that calls
``GroupConsumer.poll`` (like librdkafka's rebalance callbacks, ``on_assign``/``on_revoke``/
``on_lost`` run on it), against the :class:`~groupkit.runtime.data_consumer.DataConsumer`. It
talks to the coordinator only through its narrow interface (``released``, ``lost``,
``check_commit``, ``generation``), never through its lock or member.

A hand-off is done in the order of its fields: lose, revoke, assign.

- **Lose** (``on_lost``, no commit): the partitions are unassigned, ``on_lost`` runs, and the
  coordinator is told (``Coordinator.lost``) so the member stops claiming them even when the
  ``poll`` thread's own fence was first. A member left owning nothing renews its data handle
  (``DataConsumer.renew``).
- **Revoke**, in this order, because the leader grants a partition to its next owner as soon as
  the log shows it released:

  1. stop returning messages of the partition (the ``poll`` thread is here, not fetching);
  2. note the offsets to commit (the positions of the records handed out, when auto-commit is
     on; else the user commits in ``on_revoke``);
  3. ``on_revoke``; 4. unassign it from the data consumer;
  5. commit, then tell the control thread (``Coordinator.released``), which then writes the
     record that no longer claims it. The commit is made on the ``poll`` thread, tried again
     by its service while the coordinator moves (see
     :meth:`HandoffExecutor.commit_then_release`): until it succeeds the member's record keeps
     claiming the partitions, so nobody is granted them with offsets still uncommitted.

- **Assign**: at the offsets the previous owner committed and named in its release, where it
  did (``Handoff.offsets``; docs/protocol.md, "Handoffs": offset hints): no look-up for those. Only
  partitions whose offsets groupkit cannot know (auto-commit off, offsets stored by the user)
  or whose previous owner did not release them (a crash) are looked up. Then ``on_assign``.
- **Reset** (an operator's ``groupkit reset-offsets``; docs/protocol.md, "Resets"),
  last: each partition of it still owned starts again at its new offset
  (:meth:`~groupkit.runtime.data_consumer.DataConsumer.restart_at`: nothing fetched or stored
  before it is handed out or committed after it), the new offsets are committed synchronously,
  and the coordinator is told (``Coordinator.reset_applied``), whose record acknowledges the
  reset. A partition under revocation is left out: its release commits its old position, and
  its next owner carries the reset out instead (the log ignores that release's hint).

**Ownership hooks** (:class:`OwnershipHook`; ``groupkit.eos`` is the one user) hear of each
change at the point where it must act, before the user's callbacks can: ``assigning`` before the
data consumer starts a partition (so before its committed offset is looked up), ``revoked``
after ``on_revoke`` and the unassign but before the commit-then-release, ``lost`` after the
unassign. A hook that owns the offsets (``owns_offsets``: they are committed in its
transactions) also turns offset hints off: its look-up after ``assigning`` is the authority.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KTopicPartition

from groupkit.errors import FencedError
from groupkit.log import get_logger
from groupkit.protocol.records import EMPTY, Partitions
from groupkit.runtime.coordinator import Coordinator
from groupkit.runtime.data_consumer import DataConsumer, ktps
from groupkit.runtime.handoff_queue import Handoff
from groupkit.runtime.hooks import Observers
from groupkit.types import TopicPartition

_log = get_logger("groupkit.consumer")

#: the consumer the callbacks are given (a ``GroupConsumer``)
ConsumerT = TypeVar("ConsumerT")
ConsumerT_contra = TypeVar("ConsumerT_contra", contravariant=True)


class RebalanceCallback(Protocol[ConsumerT_contra]):
    """``on_assign``, ``on_revoke`` or ``on_lost``: called on the ``poll`` thread with the
    consumer and the partitions concerned, as confluent-kafka calls its rebalance callbacks.

    Generic in the consumer so that this module names no consumer class (the consumer module
    imports this one): ``GroupConsumer`` takes a ``RebalanceCallback[GroupConsumer]``.
    """

    def __call__(self, consumer: ConsumerT_contra, parts: list[KTopicPartition], /) -> None: ...


_UNKNOWN_TOPIC = KafkaError.UNKNOWN_TOPIC_OR_PART


class OwnershipHook(Protocol):
    """Told of ownership changes on the ``poll`` thread (see the module docstring)."""

    #: the hook commits the offsets itself (in transactions): no offset hints, and nothing
    #: may commit them but the hook
    owns_offsets: bool

    def assigning(self, parts: Partitions) -> None:
        """``parts`` are about to start: before their committed offsets are looked up."""

    def revoked(self, parts: Partitions) -> None:
        """``parts`` are given up (``on_revoke`` ran, unassigned), not yet released."""

    def lost(self, parts: Partitions) -> None:
        """``parts`` were lost (unassigned, no commit)."""


class _Retry:
    """A commit before a release, tried until it is done (see ``commit_then_release``)."""

    def __init__(self, attempt: Callable[[], str], finish: Callable[[str], None]) -> None:
        self.attempt, self.finish = attempt, finish
        self.due = 0.0  # monotonic time of the next try

    def run(self) -> bool:
        """Try now; whether it is over (released, or the consumer closed)."""
        outcome = self.attempt()
        while outcome == "again":
            outcome = self.attempt()
        if outcome == "later":
            # the coordinator is moving; try again shortly (a try may itself have taken long)
            self.due = time.monotonic() + 0.2
            return False
        self.finish(outcome)
        return True


class HandoffExecutor(Generic[ConsumerT]):
    """Carries out hand-offs for one ``GroupConsumer`` (``consumer``, the callbacks' first
    argument) on its data consumer. ``coordinator`` gives the member's current coordinator
    (``None`` while it has none: not joined, left, or its control loop failed); ``closed`` says
    whether the consumer is closed (a closed one renews no handle)."""

    def __init__(
        self,
        consumer: ConsumerT,
        data: DataConsumer,
        observers: Observers,
        coordinator: Callable[[], Coordinator | None],
        closed: Callable[[], bool],
    ) -> None:
        self._consumer = consumer
        self._data = data
        self._observers = observers
        self._coordinator = coordinator
        self._closed = closed
        self.on_assign: RebalanceCallback[ConsumerT] | None = None
        self.on_revoke: RebalanceCallback[ConsumerT] | None = None
        self.on_lost: RebalanceCallback[ConsumerT] | None = None
        self.hooks: list[OwnershipHook] = []
        #: releases whose commit waits for the group coordinator (it is moving): tried again
        #: by the poll thread (:meth:`retry_due`), as the first try was
        self.retrying: list[_Retry] = []

    def apply(self, h: Handoff) -> None:
        """Carry out ``h``: lose, revoke (commit, then release), assign."""
        c = self._coordinator()
        assert c is not None
        data = self._data
        t0 = time.monotonic()
        if h.lost:
            mine = h.lost & frozenset(data.owned)
            self.lose(mine, "lost")
            if h.lost - mine:  # stopped already (poll's own fence was first), or never started
                c.lost(h.lost - mine)
        if h.revoke:
            revoke = h.revoke & frozenset(data.owned)
            if revoke:
                self.revoke(revoke, h.revoke, queued_at=h.queued_at)
            else:
                c.released(h.revoke)
        if h.assign:
            add = h.assign - frozenset(data.owned)
            if add:
                # At the offsets the previous owner committed and named in its release, where
                # it did: no look-up for those (docs/protocol.md, "Handoffs": offset hints).
                hinted = {p: o for p, o in h.offsets.items() if p in add}
                for hook in self.hooks:
                    hook.assigning(add)
                    if hook.owns_offsets:
                        hinted = {}
                t_assign = time.monotonic()
                data.assign(add, hinted)
                now = time.monotonic()
                # (hop events: the wait for the poll thread, and the assign call itself, which
                # holds the GIL while librdkafka's main thread serves it)
                _log.debug("hop.assigned", member=c.member_id, generation=h.generation,
                           partitions=len(add), at_hint=len(hinted),
                           picked_ms=round((t_assign - h.queued_at) * 1000, 1),
                           assign_ms=round((now - t_assign) * 1000, 1))  # fmt: skip
                if self.on_assign is not None:
                    self.on_assign(self._consumer, ktps(add))
        if h.reset:
            self.reset(h)
        # (losses are reported by lose, wherever they happen: poll's own fence may be first)
        c = self._coordinator()
        assert c is not None
        self._observers.handoff(c.member_id, h.generation, h.assign, h.revoke, EMPTY,
                                time.monotonic() - t0)  # fmt: skip

    def reset(self, h: Handoff, timeout: float = 10.0) -> None:
        """Carry out ``h.reset`` (module docstring): restart, commit, report what was done."""
        c = self._coordinator()
        assert c is not None
        data = self._data
        mine = {p: o for p, o in h.reset.items() if p in data.owned}
        # What this hand-off just assigned starts at the reset's offsets already.
        again = {p: o for p, o in mine.items() if p not in h.assign}
        if again:
            data.restart_at(again)
        done: list[TopicPartition] = []
        deadline = time.monotonic() + timeout
        while mine:
            try:
                c.check_commit(mine)
                got = data.commit_sync(ktps(mine, mine))
                done = [p for p, o in mine.items() if got.get(p) == o]
                break
            except FencedError as e:  # lost meanwhile: their next owner resets them
                _log.warning("reset.commit_refused", member=c.member_id, error=str(e))
                break
            except KafkaException as e:
                if time.monotonic() >= deadline:
                    # Not acknowledged: the operator's command reports the timeout. Their
                    # positions are reset; the next commits carry on from there.
                    _log.warning("reset.commit_failed", member=c.member_id, error=str(e))
                    return
                time.sleep(0.2)  # the coordinator is moving; try again shortly
        c.reset_applied(h.reset_at, done)

    def lose(self, parts: Partitions, why: str) -> None:
        """Stop ``parts`` without a commit, run ``on_lost`` and tell the coordinator, if the
        member still has one (not when its control loop failed)."""
        if not parts:
            return
        c = self._coordinator()
        member = c.member_id if c is not None else None
        _log.warning("partitions.lost", member=member, reason=why, partitions=len(parts))
        if c is not None:
            self._observers.handoff(c.member_id, c.generation, EMPTY, EMPTY, parts, 0.0)
        self._data.unassign(parts)
        if not self._data.owned and not self._closed():
            self._data.renew()
        try:
            for hook in self.hooks:
                hook.lost(parts)
            if self.on_lost is not None:
                self.on_lost(self._consumer, ktps(parts))
        finally:
            # Stopped here, so no longer claimed in the log either (a no-op when the control
            # loop's own fence took them; not when this thread's fence was first).
            c = self._coordinator()
            if c is not None:
                c.lost(parts)

    def revoke(
        self,
        parts: Partitions,
        release: Partitions,
        wait: float | None = None,
        leave: bool = False,
        queued_at: float | None = None,
    ) -> None:
        """Give up ``parts`` (owned): offsets noted, ``on_revoke``, unassigned; ``release``
        (``parts`` and any revoked partition no longer owned) is released once committed.
        ``queued_at``: when the hand-off was queued (``Handoff.queued_at``; hop events)."""
        t0 = time.monotonic()
        offsets = self._data.revoke_offsets(parts)
        if self.on_revoke is not None:
            self.on_revoke(self._consumer, ktps(parts))
        self._data.unassign(parts)
        for hook in self.hooks:  # e.g. its transactions ended before the release
            hook.revoked(parts)
        # (hop events: the poll thread's start after the hand-off, and on_revoke + unassign)
        stopping = (t0 if queued_at is None else queued_at, t0)
        # Released (and so grantable to the next owner) only once committed.
        self.commit_then_release(parts, offsets, release, wait=wait, leave=leave,
                                 stopping=stopping)  # fmt: skip

    def commit_then_release(
        self,
        parts: Partitions,
        offsets: list[KTopicPartition] | None,
        release: Partitions,
        wait: float | None = None,
        leave: bool = False,
        stopping: tuple[float, float] | None = None,
    ) -> None:
        """Commit ``offsets`` of revoked ``parts``, then tell the control loop they are free.

        Until the commit succeeds the member's record keeps claiming the partitions, so nobody
        is granted them with offsets still uncommitted. If the member's session lapses
        meanwhile, they are lost anyway and the commit stops. ``leave``: the member is
        closing; its last record goes with its tombstone.

        Every try runs on the ``poll`` thread. confluent-kafka serializes the calls on one
        handle (``Handle_serialize_enter``, in 2.16), and a call from another thread waits for
        a gap between this thread's calls, which a busy poll loop hardly leaves: the commit
        thread groupkit had took 1-4 s for a one-partition commit in ``bench/rebalance.py``'s
        trace while the broker answered in 10 ms, and the next owner waited for it. A try
        that fails because the coordinator is moving (a broker restart) is tried again 200 ms
        later by the poll thread's service (:meth:`retry_due`), which goes on serving the
        partitions that stay meanwhile; ``wait``: keep trying here for up to that long (a
        closing member).
        """
        c = self._coordinator()
        assert c is not None
        data = self._data
        t0 = time.monotonic()
        pending = offsets
        #: what the commit stored for sure, for the release record to carry (only offsets we
        #: named: what a commit of stored offsets covers we cannot know)
        committed: dict[TopicPartition, int] = {}
        t_rpc = t0  # (hop events: the time before the commit call itself)

        def attempt() -> str:
            """One try: ``done`` (committed, nothing to commit, or refused: release now),
            ``again`` (at once), ``later`` (the coordinator is moving), ``closed``."""
            nonlocal pending, committed, t_rpc
            if pending == []:
                return "done"
            try:
                c.check_commit(parts)
                t_rpc = time.monotonic()
                committed = data.commit_sync(pending)
                return "done"
            except FencedError as e:
                _log.warning("commit.refused", member=c.member_id, error=str(e))
                return "done"
            except KafkaException as e:
                err: Any = e.args[0] if e.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError._NO_OFFSET:
                    return "done"  # nothing consumed since the last commit
                if isinstance(err, KafkaError) and err.code() == _UNKNOWN_TOPIC:
                    # A deleted topic (a regex subscription lets it go): nothing to commit
                    # for it, ever; the rest is committed on the next try.
                    pending, gone = data.without_deleted_topics(parts, pending)
                    if gone:
                        _log.info("commit.topic_deleted", member=c.member_id,
                                  topics=sorted(gone))  # fmt: skip
                        return "again"
                _log.warning("commit.retrying", member=c.member_id, error=str(e))
                return "later"
            except RuntimeError:
                return "closed"  # the consumer was closed under us

        def finish(outcome: str) -> None:
            if outcome != "done":
                return
            now = time.monotonic()
            queued, started = stopping or (t0, t0)
            _log.debug("hop.released", member=c.member_id, partitions=len(release),
                       commit_ms=round((now - t0) * 1000, 1),
                       rpc_ms=round((now - t_rpc) * 1000, 1),
                       picked_ms=round((started - queued) * 1000, 1),
                       stop_ms=round((t0 - started) * 1000, 1))  # fmt: skip
            c.released(release, leave=leave, committed=committed)

        r = _Retry(attempt, finish)
        if not r.run():
            self.retrying.append(r)
            if wait is not None:
                deadline = time.monotonic() + wait
                while r in self.retrying and time.monotonic() < deadline:
                    time.sleep(max(0.0, min(r.due, deadline) - time.monotonic()))
                    self.retry_due()

    def retry_due(self) -> None:
        """Try again the commits before a release that are due (on the ``poll`` thread)."""
        now = time.monotonic()
        for r in list(self.retrying):
            if r.due <= now and r.run():
                self.retrying.remove(r)
