"""What ``GroupConsumer.poll`` does: fence, serve the group, fetch, hand out, commit.

:class:`PollLoop` runs on the thread that calls ``poll``/``consume``/``commit``; the consumer
(runtime/consumer.py) keeps the public API and the membership, and sets the loop's
``coordinator`` as members join and leave.

- ``poll`` fences: before it returns any message it checks, by the monotonic clock, that the
  member's own latest record was seen in the log within ``session.timeout.ms``; if not, the
  member's partitions are lost (``on_lost``, no commit) before anyone else can be granted them.
- ``poll`` also serves the group (:meth:`PollLoop.service`): it carries out the hand-offs the
  control thread queued (runtime/handoff.py), leaves and joins again after the control thread
  gave up on a member that did not poll in time, raises a failed control loop, and auto-commits.

The hot path (``poll``/``consume`` while nothing changes) does no work per message and takes no
lock, without weakening any of the above:

- Fencing uses a cached deadline: the session lapses at ``send time of the newest own record
  seen in the log + session.timeout``; that send time only grows (a member's records carry a
  growing ``seq``), so a deadline read under the lock (``Coordinator.fence``) is never later
  than the true one. The lock is taken again only once the cached deadline has passed (about
  once per session).
- :meth:`PollLoop.service` (hand-offs, abandonment, a failed control loop, auto-commit) runs at
  once when there is a hand-off or an abandonment (``Coordinator.needs_service``, a flag read
  without the lock), else (a failed control loop, auto-commit, the fence) at least every 10 ms
  while the group is busy (``Coordinator.busy_until``) and every 50 ms while it is idle.
- Ownership needs no per-message filter: ``assign``/``incremental_unassign`` return only after
  librdkafka has stopped the removed partitions' fetchers by bumping their version barrier
  (``rd_kafka_toppar_op_fetch_stop``), and ``consume``/``poll`` drop every queued message of an
  older version (``rd_kafka_op_version_outdated``); assignment changes only happen on this
  thread. So a fetch started after the last unassign returns only owned partitions, and the
  filter runs only when partitions were lost *after* the fetch started (the fence after it;
  ``DataConsumer.unassigns`` counts the unassigns).
- Offsets are stored by librdkafka's own ``enable.auto.offset.store`` (when the user left it
  on): it stores ``offset + 1`` of each message as ``poll``/``consume`` returns it, i.e. of
  exactly the records handed to us. The only records not handed on to the user are those of
  partitions lost after the fetch, and unassigning a partition resets its stored offset
  (``rd_kafka_assignment_serve_removals``), so nothing is ever committed for them.
- For a while after each assignment the messages are scanned for librdkafka's failed look-ups
  of committed offsets (``DataConsumer.watch_offset_errors``; it does not retry them itself).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, overload

from confluent_kafka import KafkaException, Message
from confluent_kafka import TopicPartition as KTopicPartition

from groupkit.errors import ConsumerClosedError, ControlLoopError, FencedError
from groupkit.log import get_logger
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.coordinator import Coordinator
from groupkit.runtime.data_consumer import DataConsumer
from groupkit.runtime.handoff import HandoffExecutor
from groupkit.runtime.hooks import Observers
from groupkit.types import TopicPartition

_log = get_logger("groupkit.consumer")

#: How often a waiting ``poll`` looks for hand-offs while the group is busy
#: (``Coordinator.busy_until``: a record that changed the group was read lately): each hop of a
#: rebalance that needs the poll thread (revoke, assign) waits at most this long for it.
SERVICE_EVERY_S = 0.01
#: ... and while it is idle: a tenth of a heartbeat, 50-100 ms. librdkafka's wait cannot be
#: woken from another thread, so an owner waits for records in slices, each a wake-up: at
#: 10 ms, 100 a second, most of an idle member's CPU (a native consumer's ``poll(0.1)`` loop
#: wakes 10 times). A rebalance's first hop on an owner (a giver's revoke for a newcomer)
#: waits for the slice under way: up to 100 ms at the default 1 s heartbeat, where Kafka's own
#: protocols take seconds.
IDLE_SERVICE_EVERY_S = 0.05
IDLE_SERVICE_MAX_S = 0.1
#: the shortest wait librdkafka takes (its timeouts are whole milliseconds)
_MIN_WAIT_S = 0.001

_monotonic = time.monotonic
_msg_error = Message.error
_msg_topic = Message.topic
_msg_partition = Message.partition


def _counts(msgs: list[Message]) -> list[tuple[tuple[str, int], int]]:
    """(partition, records) pairs of a batch; error events are not records."""
    if any(map(_msg_error, msgs)):
        msgs = [m for m in msgs if m.error() is None]
    keys: Any = zip(map(_msg_topic, msgs), map(_msg_partition, msgs), strict=True)
    return list(Counter[tuple[str, int]](keys).items())


class _LazyCounts(Sequence[tuple[tuple[str, int], int]]):
    """:func:`_counts` of a batch, counted only if an observer looks at it."""

    __slots__ = ("_items", "_msgs")

    def __init__(self, msgs: list[Message]) -> None:
        self._msgs = msgs
        self._items: list[tuple[tuple[str, int], int]] | None = None

    def _get(self) -> list[tuple[tuple[str, int], int]]:
        if self._items is None:
            self._items = _counts(self._msgs)
        return self._items

    @overload
    def __getitem__(self, i: int) -> tuple[tuple[str, int], int]: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple[tuple[str, int], int]]: ...
    def __getitem__(
        self, i: int | slice
    ) -> tuple[tuple[str, int], int] | list[tuple[tuple[str, int], int]]:
        return self._get()[i]

    def __len__(self) -> int:
        return len(self._get())

    def __iter__(self) -> Iterator[tuple[tuple[str, int], int]]:
        return iter(self._get())

    def __repr__(self) -> str:
        return repr(self._get())


def _msg_tp(msg: Message) -> TopicPartition:
    partition = msg.partition()
    return TopicPartition(msg.topic() or "", -1 if partition is None else partition)


class PollLoop:
    """The ``poll`` thread's side of one ``GroupConsumer`` (see the module docstring).

    ``rejoin`` starts the consumer's next member (after the control thread gave up on this one
    for not polling in time); it sets :attr:`coordinator`.
    """

    def __init__(
        self,
        cfg: GroupConfig,
        data: DataConsumer,
        handoffs: HandoffExecutor[Any],
        observers: Observers,
        rejoin: Callable[[], None],
    ) -> None:
        self._cfg = cfg
        self._data = data
        self._handoffs = handoffs
        self._observers = observers
        self._rejoin = rejoin
        #: the member's control loop (``None`` while it has none: not joined, or left)
        self.coordinator: Coordinator | None = None
        #: the consumer is closed: every call raises
        self.closed = False
        #: monotonic seconds before which our session cannot have lapsed (see :meth:`fence`)
        self.fence_until = 0.0
        #: monotonic seconds at which :meth:`service` is due even with nothing to do
        self.next_service = 0.0
        #: set by the control thread when it queues a hand-off: a waiting ``poll`` wakes up
        self.wake = threading.Event()
        #: the idle slice (IDLE_SERVICE_EVERY_S), no longer than the busy one at heartbeats
        #: below 200 ms: a group tuned that tight trades CPU for the fastest hops throughout
        hb_s = cfg.heartbeat_interval_ms / 1000
        self._idle_every = SERVICE_EVERY_S if hb_s < 0.2 else \
            min(IDLE_SERVICE_MAX_S, max(IDLE_SERVICE_EVERY_S, hb_s / 10))  # fmt: skip
        #: monotonic seconds of the latest ``poll`` (``max.poll.interval.ms`` counts from it)
        self.last_poll = time.monotonic()

    @property
    def member_id(self) -> str | None:
        c = self.coordinator
        return c.member_id if c else None

    # ------------------------------------------------------------------ consuming

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next message of an owned partition, or ``None`` after ``timeout`` seconds."""
        now = _monotonic()
        c = self.coordinator
        d = self._data
        if c is not None and now < self.next_service and d.owned and not c.needs_service:
            every = self._slice(c, now)
            # The fast path: nothing for service to do (see consume), one fetch. Unlike a
            # batch, Consumer.poll returns a record as it dequeues it, after any callback it
            # served, so an unassign in a callback drops it in librdkafka: only the fence
            # below can make it unowned, and _hand_out counts unassigns from here.
            self.last_poll = now
            if timeout is not None and 0 <= timeout < every:
                msg = d.poll(timeout)
                if msg is None:
                    return None
            else:
                msg = d.poll(every)
            if msg is not None and now < d.offsets_watch_until:
                d.watch_offset_errors((msg,))
            if msg is not None and (
                _monotonic() < self.fence_until or self._hand_out([msg], d.unassigns)
            ):
                if self._observers.registered:  # bool(self._observers) without its call
                    self._observers.consumed(self.member_id or "", _LazyCounts([msg]))
                return msg
            if timeout is not None and timeout >= 0:
                timeout = max(0.0, timeout - (_monotonic() - now))
        msgs = self.consume(1, timeout)
        return msgs[0] if msgs else None

    def consume(self, n: int, timeout: float | None) -> list[Message]:
        """Up to ``n`` messages of owned partitions, or ``[]`` after ``timeout`` seconds."""
        if self.closed:
            raise ConsumerClosedError("the consumer is closed")
        d = self._data
        now = _monotonic()
        deadline = None if timeout is None or timeout < 0 else now + timeout
        while True:
            self.last_poll = now  # a blocking poll is polling (as librdkafka counts it)
            c = self.coordinator
            if c is None or now >= self.next_service or c.needs_service:
                # Hand-offs and an abandonment at once; a failed control loop, auto-commit
                # and the fence without records within 10 ms.
                self.service()
                self.next_service = self._service_due(now)
            remaining = 0.1 if deadline is None else max(0.0, deadline - now)
            # Owning nothing, a hand-off sets ``wake``: the idle slice serves the rest, but
            # for hand-offs held back (runtime/handoff_queue.py), looked at again in a slice.
            if c is not None and (d.owned or c.needs_service):
                every = self._slice(c, now)
            else:
                every = self._idle_every
            wait = remaining if remaining < every else every
            msgs: list[Message] = []
            unassigns = d.unassigns
            if d.owned:
                msgs = d.consume(n, wait)
            else:
                self.wake.wait(wait)
                self.wake.clear()
            now = _monotonic()
            if msgs and now < d.offsets_watch_until:
                d.watch_offset_errors(msgs)
            if msgs:
                # (A batch may hold records dequeued before a callback in the same fetch
                # unassigned their partition: the count is taken before the fetch.)
                if now >= self.fence_until or d.unassigns != unassigns or d.unassign_failed:
                    self._hand_out(msgs, unassigns)
                if msgs:
                    if self._observers:
                        self._observers.consumed(self.member_id or "", _LazyCounts(msgs))
                    return msgs
            # librdkafka waits whole milliseconds: a wait of less than one returns at once,
            # so the last fraction of a millisecond before the deadline would spin
            if deadline is not None and now >= deadline - _MIN_WAIT_S:
                return []

    def _service_due(self, now: float) -> float:
        """When :meth:`service` must run next at the latest: now, while the fast path is
        unsafe."""
        c = self.coordinator
        if c is None or self.closed or self._data.unassign_failed:
            return 0.0
        return now + self._slice(c, now)

    def _slice(self, c: Coordinator, now: float) -> float:
        """How long one wait for records may last: the service slice while the group is busy
        (``Coordinator.busy_until``) or a hand-off waits, the idle slice otherwise."""
        return SERVICE_EVERY_S if now < c.busy_until or c.needs_service else self._idle_every

    def fast_path_off(self) -> None:
        """Serve the group on the next call, whatever is due: an unassign failed (from now on
        every fetch is filtered by ownership), or the consumer closed (the next call raises)."""
        self.next_service = 0.0

    def _hand_out(self, msgs: list[Message], unassigns: int) -> bool:
        """Fence, then keep in ``msgs`` only what may be handed out; false if nothing may.

        A process frozen inside the fetch wakes up here: fence before handing out anything.
        Hand-offs wait for the next call, so a revocation never commits past records the
        user has not been given. What was unassigned since the fetch started (``unassigns``
        moved) is dropped; librdkafka dropped its stored offsets when it was unassigned.
        """
        self.fence()
        d = self._data
        if d.unassigns != unassigns or d.unassign_failed:
            owned = d.owned
            msgs[:] = [
                m for m in msgs if m.error() is not None or (m.topic(), m.partition()) in owned
            ]
        return bool(msgs)

    def fence(self) -> None:
        """Lose everything, uncommitted, once our own heartbeat is older than the session.

        Cheap unless the cached deadline has passed: the session lapses ``session.timeout``
        after the send of the newest own record seen in the log, and that send time never
        moves back (``Member``'s records have growing ``seq``; an older one is not confirmed
        again), so the deadline ``Coordinator.fence`` computes is never later than the true
        one; a newer heartbeat only moves the true one later, which the next look finds.
        """
        c = self.coordinator
        owned = self._data.owned
        if c is None or not owned or _monotonic() < self.fence_until:
            return
        fence = c.fence(owned)
        if fence.until is None:
            self.fence_until = 0.0
            self._handoffs.lose(frozenset(owned), "session_lapsed")
        else:
            # What the member itself no longer owns, it lost (a revoked partition stays owned
            # until released): the control thread fenced it, and may since have confirmed a
            # newer heartbeat, so the age alone says nothing of it: in a process thawed after a
            # freeze past its session, the control thread may fence and heartbeat first, and
            # poll would hand out records of the lost partitions before the hand-off.
            if fence.gone:
                self._handoffs.lose(fence.gone, "fenced")
            self.fence_until = fence.until

    def service(self) -> None:
        """Fence, carry out hand-offs, auto-commit: everything ``poll`` owes the group."""
        c = self.coordinator
        if c is None:
            return
        if c.failure is not None:
            raise ControlLoopError(c.failure) from c.failure
        if c.abandoned:
            # We left for not polling in time; others may own our partitions by now.
            self._handoffs.lose(frozenset(self._data.owned), "max_poll_interval_exceeded")
            c.close(5)  # (the stopped loop flushed its tombstone)
            self._rejoin()
            return
        self.fence()
        for h in c.take_handoffs():
            self._handoffs.apply(h)
        if self._handoffs.retrying:  # commits before a release, waiting for the coordinator
            self._handoffs.retry_due()
        if c.superseded:  # (what it owned is lost above: on_lost, no commit)
            raise FencedError(
                f"group.instance.id {c.member_id!r} was taken by a newer process (newest join "
                "wins): this consumer is fenced; close it"
            )
        d = self._data
        now = _monotonic()
        if d.refetch_at is not None and now >= d.refetch_at:
            d.refetch_offsets()
        if d.auto_commit_due(now):
            try:
                self.commit(asynchronous=True)
            except (FencedError, KafkaException) as e:
                _log.debug("auto_commit.skipped", error=str(e))
        if d.retention is not None:  # the keep-alive's interval waits for the broker's answer
            d.take_retention(now)
        if now >= d.keepalive.next_at:
            self._keep_offsets_alive(now)

    def _keep_offsets_alive(self, now: float) -> None:
        """Commit again, as they are, the committed offsets of owned partitions no commit has
        touched for ``groupkit.offsets.keepalive.interval.ms`` (runtime/data_consumer.py,
        "Keep-alive"): here on the ``poll`` thread, after this turn's hand-offs, as an owner
        that may commit them (never after a release: :meth:`check_commit`)."""
        d = self._data
        offsets = d.keepalive_offsets(now, min(10.0, self._cfg.max_poll_interval_ms / 10_000))
        if not offsets:
            return
        try:
            self.check_commit([TopicPartition(p.topic, p.partition) for p in offsets])
            d.commit(None, offsets, asynchronous=True)
            _log.debug("offsets.keepalive", member=self.member_id, partitions=len(offsets))
        except (FencedError, KafkaException) as e:
            _log.debug("offsets.keepalive_skipped", error=str(e))

    # ------------------------------------------------------------------ offsets

    def commit(
        self,
        message: Message | None = None,
        offsets: Sequence[KTopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[KTopicPartition] | None:
        """Commit like ``Consumer.commit``, but only partitions this member owns, unfenced."""
        if message is not None:
            parts = [_msg_tp(message)]
        elif offsets is not None:
            parts = [TopicPartition(o.topic, o.partition) for o in offsets]
        else:
            parts = sorted(self._data.owned)
        self.check_commit(parts)
        if message is None and offsets is None and not parts:
            return None
        return self._data.commit(message, offsets, asynchronous)

    def check_commit(self, parts: Iterable[TopicPartition]) -> None:
        """:class:`FencedError` unless this member may commit ``parts`` now."""
        c = self.coordinator
        if c is None:
            raise FencedError("not subscribed: this consumer owns no partitions")
        if c.abandoned:
            raise FencedError(
                f"member {c.member_id} left the group (max.poll.interval.ms exceeded); "
                "commit refused"
            )
        owned = self._data.owned
        foreign = sorted(str(p) for p in parts if p not in owned)
        if foreign:
            raise FencedError(
                f"member {c.member_id} does not own {', '.join(foreign)}; commit refused"
            )
        c.check_commit(parts)
