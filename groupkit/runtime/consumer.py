"""``GroupConsumer``: a confluent-kafka consumer whose group is coordinated by groupkit.

It looks like ``confluent_kafka.Consumer`` (a config dict; ``subscribe``, ``poll``,
``consume``, ``commit``, ``store_offsets``, ``position``, ``assignment``, ``close``), but the
data consumer never joins the broker's group: it ``assign()``s exactly what groupkit's control
log grants this member, and uses ``group.id`` only for committed offsets.

Which thread does what:

- the control thread (:class:`~groupkit.runtime.coordinator.Coordinator`) reads and writes the
  control topic, heartbeats and, on the leader, plans generations;
- the thread that calls :meth:`GroupConsumer.poll` carries out hand-offs (like librdkafka's
  rebalance callbacks, ``on_assign``/``on_revoke``/``on_lost`` run on it), commits, and gets
  messages. A revocation is done in this order, because the leader grants a partition to its
  next owner as soon as the log shows it released:

  1. stop returning messages of the partition;
  2. commit its offsets (when auto-commit is on, else the user commits in ``on_revoke``);
  3. ``on_revoke``; 4. unassign it from the data consumer;
  5. tell the control thread, which then writes the record that no longer claims it.

- ``poll`` also fences: before it returns any message it checks, by the monotonic clock, that
  the member's own latest record was seen in the log within ``session.timeout.ms``; if not, the
  member's partitions are lost (``on_lost``, no commit) before anyone else can be granted them.

The hot path (``poll``/``consume`` while nothing changes) does no work per message and takes no
lock, without weakening any of the above:

- Fencing uses a cached deadline: the session lapses at ``send time of the newest own record
  seen in the log + session.timeout``; that send time only grows (a member's records carry a
  growing ``seq``), so a deadline read under the lock is never later than the true one. The
  lock is taken again only once the cached deadline has passed (about once per session).
- ``_service`` (hand-offs, abandonment, a failed control loop, auto-commit) runs at once when
  there is a hand-off, a failure or an abandonment, else at least every 10 ms.
- Ownership needs no per-message filter: ``assign``/``incremental_unassign`` return only after
  librdkafka has stopped the removed partitions' fetchers by bumping their version barrier
  (``rd_kafka_toppar_op_fetch_stop``), and ``consume``/``poll`` drop every queued message of an
  older version (``rd_kafka_op_version_outdated``); assignment changes only happen on this
  thread. So a fetch started after the last unassign returns only owned partitions, and the
  filter runs only when partitions were lost *after* the fetch started (the fence after it).
- Offsets are stored by librdkafka's own ``enable.auto.offset.store`` (when the user left it
  on): it stores ``offset + 1`` of each message as ``poll``/``consume`` returns it, i.e. of
  exactly the records handed to us. The only records not handed on to the user are those of
  partitions lost after the fetch, and unassigning a partition resets its stored offset
  (``rd_kafka_assignment_serve_removals``), so nothing is ever committed for them.
- A failed look-up of committed offsets is not retried by librdkafka (2.16): a request-level
  error (the coordinator still loading after a broker restart) leaves the newly assigned
  partitions "queried" for good, and every later assignment of the handle waits behind them
  (``rd_kafka_assignment_handle_OffsetFetch``, ``rd_kafka_assignment_serve_pending``). So for a
  while after each assignment the messages are scanned for that error, and the partitions that
  have not started are assigned again, with a growing back-off (see ``_refetch_offsets``).
- Most assignments need no look-up at all: when a revocation's commit of the positions succeeds,
  the record that releases the partitions carries those offsets, and their next owner is
  assigned them at those offsets (``Handoff.offsets``; protocol/state.py, "Offset hints"). Only
  partitions whose offsets groupkit cannot know (auto-commit off, offsets stored by the user)
  or whose previous owner did not release them (a crash) are looked up.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient

from groupkit.errors import (
    ConfigError,
    ConsumerClosedError,
    ControlLoopError,
    FencedError,
)
from groupkit.log import get_logger
from groupkit.protocol.records import EMPTY, Partitions
from groupkit.runtime.admin import connect_admin
from groupkit.runtime.config import GroupConfig, _parse
from groupkit.runtime.control_log import ControlClients
from groupkit.runtime.control_topic import ensure_control_topic, partition_for_group
from groupkit.runtime.coordinator import Coordinator, Handoff, monotonic_ms
from groupkit.runtime.hooks import GroupObserver, Observers

if TYPE_CHECKING:
    from groupkit.runtime.telemetry import TelemetryPublisher
from groupkit.types import TopicPartition

_log = get_logger("groupkit.consumer")

#: How often a waiting ``poll`` looks for hand-offs: each hop of a rebalance that needs the poll
#: thread (revoke, assign) waits at most this long for it.
_SERVICE_EVERY_S = 0.01

#: How long after an assignment ``poll`` looks for librdkafka's "Failed to fetch committed
#: offset(s)" errors (at least; twice the session when that is longer): a look-up waits for a
#: coordinator, and a request that was sent times out after ``socket.timeout.ms`` (60 s).
_OFFSETS_WATCH_S = 90.0
#: First and longest wait before partitions whose committed offsets could not be fetched are
#: assigned again (doubling in between; an authorization error may last until an ACL is added).
_REFETCH_BACKOFF_S = (0.5, 10.0)
#: The text librdkafka gives both its request- and partition-level look-up failures.
_OFFSET_FETCH_FAILED = "Failed to fetch committed offset"

Callback = Callable[["GroupConsumer", list[KTopicPartition]], None]

_monotonic = time.monotonic
_msg_error = Message.error
_msg_topic = Message.topic
_msg_partition = Message.partition


def _ktps(
    parts: Iterable[TopicPartition], offsets: Mapping[TopicPartition, int] | None = None
) -> list[KTopicPartition]:
    """confluent-kafka's partitions; at ``offsets`` where given (else: the committed offset,
    looked up when assigned)."""
    if not offsets:
        return [KTopicPartition(tp.topic, tp.partition) for tp in sorted(parts)]
    return [
        KTopicPartition(tp.topic, tp.partition, offsets[tp])
        if tp in offsets
        else KTopicPartition(tp.topic, tp.partition)
        for tp in sorted(parts)
    ]


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


class _AsyncCommits:
    """The asynchronous commits of one data consumer handle still waiting for their result.

    librdkafka queues an async commit while no group coordinator is known and looks up no
    committed offsets for newly assigned partitions until every commit is done
    (``rd_kafka_assignment_serve_pending``): auto-commit keeps at most one in flight, so an
    outage leaves one queued commit behind rather than one per interval. Its ``done`` is the
    handle's ``on_commit`` and calls the user's (librdkafka reports only async commits there).
    """

    def __init__(self, user_cb: Callable[..., Any] | None) -> None:
        self._user_cb = user_cb
        self.sent: deque[float] = deque()  # monotonic send times, oldest first

    def done(self, err: Any, partitions: Any) -> None:
        if self.sent:
            self.sent.popleft()
        if self._user_cb is not None:
            self._user_cb(err, partitions)

    def waiting_since(self) -> float | None:
        return self.sent[0] if self.sent else None


def _msg_tp(msg: Message) -> TopicPartition:
    partition = msg.partition()
    return TopicPartition(msg.topic() or "", -1 if partition is None else partition)


class GroupConsumer:
    """A consumer in a groupkit group. Use one per thread of work, like ``Consumer``."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        registry: Any = None,
        observers: Iterable[GroupObserver] = (),
    ) -> None:
        self._cfg = cfg = GroupConfig.from_dict(config)
        self._registry = registry
        self.observers = Observers(observers)
        # Fails fast and says so when the credentials are refused (admin.connect_admin).
        self._admin: AdminClient | None = connect_admin(cfg.client_config("admin"))
        #: the control clients the next join takes (opened here: see _open_control)
        self._control: ControlClients | None = None
        try:
            self._open_control()
            # librdkafka stores the offset of each record as poll/consume hands it over; those
            # are the records handed to the user (see the module docstring).
            self._auto_store = bool(_parse("enable.auto.offset.store",
                                           cfg.data_consumer.get("enable.auto.offset.store",
                                                                 True), "bool"))  # fmt: skip
            self._commits = _AsyncCommits(None)  # replaced with each data consumer handle
            try:
                self._data = self._new_data_consumer()
            except KafkaException as e:
                raise ConfigError(f"the data consumer refused its settings: {e}") from e
        except BaseException:
            self._close_clients()
            raise
        self._telemetry: TelemetryPublisher | None = None
        if cfg.telemetry_enable:  # only the leader publishes; see runtime/telemetry.py
            from groupkit.runtime.telemetry import TelemetryPublisher

            self._telemetry = TelemetryPublisher(cfg, self._admin)
            self.observers.add(self._telemetry)
        self._coordinator: Coordinator | None = None
        self._topics: list[str] = []
        self._on_assign: Callback | None = None
        self._on_revoke: Callback | None = None
        self._on_lost: Callback | None = None
        self._owned: set[TopicPartition] = set()  # what the data consumer has assigned
        #: bumped by every unassign: a fetch that started before a bump may hold records of
        #: partitions no longer owned (see _consume)
        self._unassigns = 0
        #: an unassign failed: the data consumer may still fetch partitions we do not own
        self._unassign_failed = False
        #: monotonic seconds before which our session cannot have lapsed (see _fence)
        self._fence_until = 0.0
        #: monotonic seconds at which _service is due even with nothing to do
        self._next_service = 0.0
        #: monotonic seconds until which messages are scanned for failed offset look-ups
        self._offsets_watch_until = 0.0
        #: when to assign again what could not start for want of its committed offset
        self._refetch_at: float | None = None
        self._refetch_backoff = _REFETCH_BACKOFF_S[0]
        self._wake = threading.Event()
        self._last_poll = time.monotonic()
        self._last_commit = time.monotonic()
        self._closed = False
        if registry is not None:  # no registry, no metrics: nothing global is touched
            from groupkit.metrics import instrument

            self.observers.add(instrument(self, registry))

    # ------------------------------------------------------------------ properties

    @property
    def member_id(self) -> str | None:
        return self._coordinator.member_id if self._coordinator else None

    @property
    def generation(self) -> int:
        if self._coordinator is None:
            return -1
        with self._coordinator.lock:
            return self._coordinator.member.generation

    @property
    def is_leader(self) -> bool:
        c = self._coordinator
        if c is None:
            return False
        with c.lock:
            return c.state.leader == c.member_id

    @property
    def coordinator(self) -> Coordinator | None:
        """The control loop (for metrics and diagnostics)."""
        return self._coordinator

    # ------------------------------------------------------------------ membership

    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
        on_lost: Callback | None = None,
    ) -> None:
        """Join groupkit's membership of ``group.id`` for ``topics`` (never the broker's group)."""
        self._ensure_open()
        topics = sorted(set(topics))
        if not topics:
            raise ConfigError("subscribe needs at least one topic")
        # Asked of the data consumer, so it knows the topics before its first assign (no
        # ~500 ms metadata wait for a new owner's first record).
        md = self._data.list_topics(timeout=10)
        missing = [t for t in topics if t not in md.topics or md.topics[t].error is not None]
        if missing:
            raise ConfigError(
                f"topic(s) {', '.join(missing)} do not exist on the cluster "
                "(or this principal lacks DESCRIBE on them)"
            )
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        if self._coordinator is not None:
            with self._coordinator.lock:
                self._coordinator.member.set_subscription(topics)
            return
        self._topics = topics
        self._join()

    def _open_control(self) -> None:
        """Check the control topic and open this member's control clients, warming them in the
        background: a member that joins has them ready (a cold writer took 0.5-1 s to deliver
        its first record, the join). A bad control topic fails ``GroupConsumer()`` itself."""
        cfg = self._cfg
        assert self._admin is not None
        partitions = ensure_control_topic(
            self._admin,
            cfg.control_topic,
            cfg.control_partitions,
            cfg.control_replication_factor,
            create=cfg.create_control_topic,
            session_timeout_ms=cfg.session_timeout_ms,
        )
        self._control_partition = partition_for_group(cfg.group_id, partitions)
        self._control = ControlClients(cfg, cfg.control_topic, self._control_partition)

    def _join(self) -> None:
        self._fence_until = 0.0  # a new member: nothing of ours is confirmed yet
        # The clients opened by the constructor, else (a member joining again after it left)
        # new ones: a new member replays its partition from the beginning.
        control, self._control = self._control, None
        if control is None:
            control = ControlClients(self._cfg, self._cfg.control_topic, self._control_partition)
        try:
            control.wait_warm()
            assert self._admin is not None
            self._coordinator = Coordinator(
                self._cfg,
                self._topics,
                self._admin,
                on_handoff=self._wake.set,
                poll_age=lambda: time.monotonic() - self._last_poll,
                observers=self.observers,
                control=control,
            )
        except BaseException:
            control.close(0)
            raise
        self._coordinator.start()

    def unsubscribe(self) -> None:
        self._leave()

    # ------------------------------------------------------------------ consuming

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next message of an owned partition, or ``None`` after ``timeout`` seconds."""
        now = _monotonic()
        c = self._coordinator
        if (
            c is not None
            and now < self._next_service
            and self._owned
            and not (c.handoffs or c.abandoned)
        ):
            # The fast path: nothing for _service to do (see _consume), one fetch. Unlike a
            # batch, Consumer.poll returns a record as it dequeues it, after any callback it
            # served, so an unassign in a callback drops it in librdkafka: only the fence
            # below can make it unowned, and _hand_out counts unassigns from here.
            self._last_poll = now
            if timeout is not None and 0 <= timeout < _SERVICE_EVERY_S:
                msg = self._data.poll(timeout)
                if msg is None:
                    return None
            else:
                msg = self._data.poll(_SERVICE_EVERY_S)
            if msg is not None and now < self._offsets_watch_until:
                self._watch_offset_errors((msg,))
            if msg is not None and (
                _monotonic() < self._fence_until or self._hand_out([msg], self._unassigns)
            ):
                if self.observers._observers:  # bool(self.observers) without its call
                    self.observers.consumed(self.member_id or "", _LazyCounts([msg]))
                return msg
            if timeout is not None and timeout >= 0:
                timeout = max(0.0, timeout - (_monotonic() - now))
        msgs = self._consume(1, timeout)
        return msgs[0] if msgs else None

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        return self._consume(num_messages, timeout)

    def _consume(self, n: int, timeout: float | None) -> list[Message]:
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")
        now = _monotonic()
        deadline = None if timeout is None or timeout < 0 else now + timeout
        while True:
            self._last_poll = now  # a blocking poll is polling (as librdkafka counts it)
            c = self._coordinator
            if c is None or now >= self._next_service or c.handoffs or c.abandoned:
                # Hand-offs and an abandonment at once; a failed control loop, auto-commit
                # and the fence without records within 10 ms.
                self._service()
                self._next_service = self._service_due(now)
            remaining = 0.1 if deadline is None else max(0.0, deadline - now)
            wait = remaining if remaining < _SERVICE_EVERY_S else _SERVICE_EVERY_S
            msgs: list[Message] = []
            unassigns = self._unassigns
            if self._owned:
                msgs = self._data.consume(n, wait)
            else:
                self._wake.wait(wait)
                self._wake.clear()
            now = _monotonic()
            if msgs and now < self._offsets_watch_until:
                self._watch_offset_errors(msgs)
            if msgs:
                # (A batch may hold records dequeued before a callback in the same fetch
                # unassigned their partition: the count is taken before the fetch.)
                if (
                    now >= self._fence_until
                    or self._unassigns != unassigns
                    or self._unassign_failed
                ):
                    self._hand_out(msgs, unassigns)
                if msgs:
                    if self.observers:
                        self.observers.consumed(self.member_id or "", _LazyCounts(msgs))
                    return msgs
            if deadline is not None and now >= deadline:
                return []

    def _service_due(self, now: float) -> float:
        """When ``_service`` must run next at the latest: now, while the fast path is unsafe."""
        if self._coordinator is None or self._closed or self._unassign_failed:
            return 0.0
        return now + _SERVICE_EVERY_S

    def _hand_out(self, msgs: list[Message], unassigns: int) -> bool:
        """Fence, then keep in ``msgs`` only what may be handed out; false if nothing may.

        A process frozen inside the fetch wakes up here: fence before handing out anything.
        Hand-offs wait for the next call, so a revocation never commits past records the
        user has not been given. What was unassigned since the fetch started (``unassigns``
        moved) is dropped; librdkafka dropped its stored offsets when it was unassigned.
        """
        self._fence()
        if self._unassigns != unassigns or self._unassign_failed:
            owned = self._owned
            msgs[:] = [
                m for m in msgs if m.error() is not None or (m.topic(), m.partition()) in owned
            ]
        return bool(msgs)

    def _fence(self) -> None:
        """Lose everything, uncommitted, once our own heartbeat is older than the session.

        Cheap unless the cached deadline has passed: the session lapses ``session.timeout``
        after the send of the newest own record seen in the log, and that send time never
        moves back (``Member``'s records have growing ``seq``; an older one is not confirmed
        again), so the deadline computed here is never later than the true one; a newer
        heartbeat only moves the true one later, which the next look under the lock finds.
        """
        c = self._coordinator
        if c is None or not self._owned or _monotonic() < self._fence_until:
            return
        session = c.member.fence_after_ms  # the session less the clock-skew allowance
        with c.lock:
            now_ms = monotonic_ms()
            age = c.member.session_age_ms(now_ms)
            # What the member itself no longer owns, it lost (a revoked partition stays owned
            # until released): the control thread fenced it, and may since have confirmed a
            # newer heartbeat, so the age alone says nothing of it. Seen in the soak: a process
            # thawed after a freeze past its session, the control thread fenced and heartbeat
            # first, and poll handed out records of the lost partitions before the hand-off.
            gone = frozenset(self._owned - c.member.owned)
        if age is None or age >= session:
            self._fence_until = 0.0
            self._lose(frozenset(self._owned), "session_lapsed")
        else:
            if gone:
                self._lose(gone, "fenced")
            # monotonic_ms() floors monotonic_ns(); -1 ms keeps the float deadline early.
            self._fence_until = (now_ms - age + session - 1) / 1000

    def _service(self) -> None:
        """Fence, carry out hand-offs, auto-commit: everything ``poll`` owes the group."""
        c = self._coordinator
        if c is None:
            return
        if c.failure is not None:
            raise ControlLoopError(c.failure) from c.failure
        if c.abandoned:
            # We left for not polling in time; others may own our partitions by now.
            self._lose(frozenset(self._owned), "max_poll_interval_exceeded")
            c.stop()
            c.control.close(5)  # (the stopped loop flushed its tombstone)
            self._join()
            return
        self._fence()
        if c.handoffs:
            with c.lock:
                handoffs = list(c.handoffs)
                c.handoffs.clear()
            for h in handoffs:
                self._apply(h)
        now = _monotonic()
        if self._refetch_at is not None and now >= self._refetch_at:
            self._refetch_offsets()
        interval = self._cfg.auto_commit_interval_ms / 1000
        waiting = self._commits.waiting_since()
        overdue = max(10 * interval, self._cfg.session_timeout_ms / 1000)
        if (
            self._cfg.enable_auto_commit
            and self._owned
            and now - self._last_commit >= interval
            # at most one in flight (see _AsyncCommits), unless its answer is long overdue
            and (waiting is None or now - waiting >= overdue)
        ):
            self._last_commit = now
            try:
                self.commit(asynchronous=True)
            except (FencedError, KafkaException) as e:
                _log.debug("auto_commit.skipped", error=str(e))

    def _apply(self, h: Handoff) -> None:
        assert self._coordinator is not None
        t0 = time.monotonic()
        if h.lost:
            self._lose(h.lost & frozenset(self._owned), "lost")
        if h.revoke:
            revoke = h.revoke & frozenset(self._owned)
            if revoke:
                offsets = self._revoke_offsets(revoke)
                if self._on_revoke is not None:
                    self._on_revoke(self, _ktps(revoke))
                self._unassign(revoke)
                # Released (and so grantable to the next owner) only once committed.
                self._commit_then_release(revoke, offsets, h.revoke)
            else:
                self._coordinator.released(h.revoke)
        if h.assign:
            add = h.assign - frozenset(self._owned)
            if add:
                # At the offsets the previous owner committed and named in its release, where
                # it did: no look-up for those (state.py, "Offset hints").
                start = {p: o for p, o in h.offsets.items() if p in add}
                if self._cfg.protocol == "cooperative":
                    self._data.incremental_assign(_ktps(add, start))
                else:
                    self._owned |= add
                    self._data.assign(_ktps(self._owned, start))
                self._owned |= add
                self._watch_offsets()
                if self._on_assign is not None:
                    self._on_assign(self, _ktps(add))
        # (losses are reported by _lose, wherever they happen: poll's own fence may be first)
        self.observers.handoff(self._coordinator.member_id, h.generation, h.assign, h.revoke,
                               EMPTY, time.monotonic() - t0)  # fmt: skip

    def _watch_offsets(self, assigned: bool = True) -> None:
        """Scan messages for failed offset look-ups for a while (after an assignment, which
        also starts the back-off afresh unless a re-fetch is already due)."""
        window = max(_OFFSETS_WATCH_S, 2 * self._cfg.session_timeout_ms / 1000)
        self._offsets_watch_until = _monotonic() + window
        if assigned and self._refetch_at is None:
            self._refetch_backoff = _REFETCH_BACKOFF_S[0]

    def _watch_offset_errors(self, msgs: Iterable[Message]) -> None:
        """Schedule ``_refetch_offsets`` when librdkafka says a look-up failed for good."""
        for m in msgs:
            err = _msg_error(m)
            if err is None or not err.str().startswith(_OFFSET_FETCH_FAILED):
                continue
            if self._refetch_at is None:
                self._refetch_at = _monotonic() + self._refetch_backoff
                _log.warning("offsets.fetch_failed", member=self.member_id, error=err.str(),
                             retry_in_s=self._refetch_backoff)  # fmt: skip

    def _refetch_offsets(self) -> None:
        """Assign again what cannot start for want of its committed offset.

        That is every owned partition without a position, i.e. with nothing handed out since
        it was assigned (librdkafka does not say which ones a request-level error stranded; a
        partition-level error names one, which has no position either). One that merely had
        no records yet starts again from its committed offset, where it was; one that has a
        position is never touched, so nothing is read twice. Unassigning takes them off
        librdkafka's "queried" list, which also unblocks the look-ups of later assignments.
        """
        self._refetch_at = None
        stuck: set[TopicPartition] = set()
        if self._owned:
            for p in self._data.position(_ktps(sorted(self._owned))):
                if p.offset is None or p.offset < 0:
                    stuck.add(TopicPartition(p.topic, p.partition))
        _log.warning("offsets.refetch", member=self.member_id, partitions=len(stuck))
        if stuck:
            parts = _ktps(sorted(stuck))
            try:
                self._data.incremental_unassign(parts)
                self._data.incremental_assign(parts)
            except KafkaException as e:
                _log.warning("offsets.refetch_failed", member=self.member_id, error=str(e))
                self._refetch_at = _monotonic() + self._refetch_backoff
        self._refetch_backoff = min(self._refetch_backoff * 2, _REFETCH_BACKOFF_S[1])
        self._watch_offsets(assigned=False)

    def _new_data_consumer(self) -> Consumer:
        """A data consumer handle, and a fresh record of its async commits."""
        commits = _AsyncCommits(self._cfg.user_config.get("on_commit"))
        data = Consumer({**self._cfg.data_consumer, "enable.auto.offset.store": self._auto_store,
                         "on_commit": commits.done})  # fmt: skip
        self._commits = commits
        return data

    def _renew_data_consumer(self) -> None:
        """Swap in a fresh data consumer once the member has lost everything.

        A handle can be stuck for good after a broker restart: librdkafka (2.16) looks up no
        committed offsets for newly assigned partitions while any of its commits is outstanding,
        nor after a look-up failed at the request level (see ``_refetch_offsets``, which mends
        that case for a member that keeps partitions; the soak's stuck members turned out to be
        that one). Owning nothing now, and refused any commit as a fenced member, this member
        gives the old handle nothing more to do: it is closed in the background.
        """
        old = self._data
        try:
            self._data = self._new_data_consumer()
        except KafkaException as e:  # keep the old one: better stuck than gone
            _log.warning("data_consumer.renew_failed", member=self.member_id, error=str(e))
            return
        self._unassigns += 1  # a fetch under way on the old handle hands out nothing

        def close_old() -> None:
            try:
                old.close()
            except Exception as e:  # closing a handle we no longer use: nothing to do
                _log.debug("data_consumer.close_failed", error=str(e))

        threading.Thread(target=close_old, name="groupkit-close-data", daemon=True).start()

    def _lose(self, parts: Partitions, why: str) -> None:
        if not parts:
            return
        _log.warning("partitions.lost", member=self.member_id, reason=why, partitions=len(parts))
        c = self._coordinator
        if c is not None:
            self.observers.handoff(c.member_id, c.member.generation, EMPTY, EMPTY, parts, 0.0)
        self._unassign(parts)
        if not self._owned and not self._closed:
            self._renew_data_consumer()
        try:
            if self._on_lost is not None:
                self._on_lost(self, _ktps(parts))
        finally:
            # Stopped here, so no longer claimed in the log either (a no-op when the control
            # loop's own fence took them; not when this thread's fence was first).
            c = self._coordinator
            if c is not None:
                c.lost(parts)

    def _unassign(self, parts: Partitions) -> None:
        self._owned -= parts
        self._unassigns += 1
        try:
            if self._cfg.protocol == "cooperative":
                self._data.incremental_unassign(_ktps(parts))
            else:
                self._data.assign(_ktps(self._owned))
        except BaseException:
            # From now on every fetch is filtered by ownership (the fast path is off).
            self._unassign_failed = True
            self._next_service = 0.0
            raise

    # ------------------------------------------------------------------ offsets

    def commit(
        self,
        message: Message | None = None,
        offsets: Sequence[KTopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[KTopicPartition] | None:
        """Commit like ``Consumer.commit``, but only partitions this member owns, unfenced."""
        self._ensure_open()
        if message is not None:
            parts = [_msg_tp(message)]
        elif offsets is not None:
            parts = [TopicPartition(o.topic, o.partition) for o in offsets]
        else:
            parts = sorted(self._owned)
        self._check_commit(parts)
        if message is None and offsets is None and not parts:
            return None
        # confluent-kafka's overloads want a literal ``asynchronous``; ours is a plain bool.
        commit: Any = self._data.commit
        commits = self._commits  # of the handle committing, whatever replaces it meanwhile
        if asynchronous:  # counted before: its answer may be served on another thread at once
            commits.sent.append(time.monotonic())
        try:
            if message is not None:
                result = commit(message=message, asynchronous=asynchronous)
            elif offsets is not None:
                result = commit(offsets=list(offsets), asynchronous=asynchronous)
            else:
                result = commit(asynchronous=asynchronous)
        except BaseException:
            if asynchronous and commits.sent:
                commits.sent.pop()  # refused at once: librdkafka will not answer it
            raise
        return None if asynchronous else list(result or [])

    def _check_commit(self, parts: Iterable[TopicPartition]) -> None:
        c = self._coordinator
        if c is None:
            raise FencedError("not subscribed: this consumer owns no partitions")
        if c.abandoned:
            raise FencedError(
                f"member {c.member_id} left the group (max.poll.interval.ms exceeded); "
                "commit refused"
            )
        foreign = sorted(str(p) for p in parts if p not in self._owned)
        if foreign:
            raise FencedError(
                f"member {c.member_id} does not own {', '.join(foreign)}; commit refused"
            )
        with c.lock:
            c.member.check_commit(parts, monotonic_ms())

    def _revoke_offsets(self, parts: Partitions) -> list[KTopicPartition] | None:
        """What to commit for ``parts`` before giving them away: the positions of the records
        handed to the user (``None``: the user stores offsets, commit what is stored; ``[]``:
        auto-commit is off, the user commits in ``on_revoke``)."""
        if not self._cfg.enable_auto_commit:
            return []
        if not self._auto_store:
            return None
        positions = self._data.position(_ktps(parts))
        return [p for p in positions if p.offset is not None and p.offset >= 0]

    def _commit_then_release(
        self,
        parts: Partitions,
        offsets: list[KTopicPartition] | None,
        release: Partitions,
        wait: float | None = None,
        leave: bool = False,
    ) -> None:
        """Commit ``offsets`` of revoked ``parts``, then tell the control loop they are free.

        The commit runs in its own thread: a synchronous commit can block for as long as the
        group coordinator is unreachable (a broker restart), and the poll thread must keep
        serving the partitions that stay. Until the commit succeeds the member's record keeps
        claiming the partitions, so nobody is granted them with offsets still uncommitted. If
        the member's session lapses meanwhile, they are lost anyway and the commit stops.
        ``leave``: the member is closing; its last record goes with its tombstone.
        """
        c = self._coordinator
        assert c is not None

        def run() -> None:
            #: what the commit below stored for sure, for the release record to carry (only
            #: offsets we named: what a commit of stored offsets covers we cannot know)
            committed: dict[TopicPartition, int] = {}
            while offsets != []:
                try:
                    with c.lock:
                        c.member.check_commit(parts, monotonic_ms())
                    commit: Any = self._data.commit
                    if offsets is None:
                        commit(asynchronous=False)
                    else:
                        done = commit(offsets=offsets, asynchronous=False)
                        committed = {
                            TopicPartition(p.topic, p.partition): p.offset
                            for p in done or ()
                            if p.error is None and p.offset >= 0
                        }
                    break
                except FencedError as e:
                    _log.warning("commit.refused", member=c.member_id, error=str(e))
                    break
                except KafkaException as e:
                    err = e.args[0] if e.args else None
                    if isinstance(err, KafkaError) and err.code() == KafkaError._NO_OFFSET:
                        break  # nothing consumed since the last commit
                    _log.warning("commit.retrying", member=c.member_id, error=str(e))
                    time.sleep(0.2)  # the coordinator is moving; try again shortly
                except RuntimeError:
                    return  # the consumer was closed under us
            c.released(release, leave=leave, committed=committed)

        t = threading.Thread(target=run, name="groupkit-revoke-commit", daemon=True)
        t.start()
        if wait is not None:
            t.join(wait)

    def store_offsets(
        self, message: Message | None = None, offsets: Sequence[KTopicPartition] | None = None
    ) -> None:
        if message is not None:
            self._data.store_offsets(message=message)
        elif offsets is not None:
            self._data.store_offsets(offsets=list(offsets))

    def position(self, partitions: Sequence[KTopicPartition]) -> list[KTopicPartition]:
        return list(self._data.position(list(partitions)))

    def committed(
        self, partitions: Sequence[KTopicPartition], timeout: float | None = None
    ) -> list[KTopicPartition]:
        return list(self._data.committed(list(partitions), timeout=timeout or 10))

    def assignment(self) -> list[KTopicPartition]:
        return _ktps(self._owned)

    # ------------------------------------------------------------------ closing

    def _leave(self) -> None:
        c = self._coordinator
        if c is None:
            return
        if c.failure is not None:
            self._abandon(c)
        self._service()
        # Revoke everything on this thread (commit first), then say goodbye through the log.
        owned = frozenset(self._owned)
        if owned:
            offsets = self._revoke_offsets(owned)
            if self._on_revoke is not None:
                self._on_revoke(self, _ktps(owned))
            self._unassign(owned)
            # Released and left in one step (Coordinator.released), unless the commit is slow.
            self._commit_then_release(owned, offsets, owned, wait=10.0, leave=True)
        with c.lock:
            if c.member.state not in ("leaving", "left"):
                c.member.leave()
        # Written with the release above; else one more turn of the loop writes them.
        deadline = time.monotonic() + 5
        while c.member.state != "left" and time.monotonic() < deadline:
            time.sleep(0.01)  # the control thread's next turn takes the leave
        c.stop()
        c.control.close(5)
        self._coordinator = None

    def _abandon(self, c: Coordinator) -> None:
        """Leave after the control loop failed: nothing can go through the log any more.

        What we own is lost (``on_lost``, no commit: the group may have moved on without us),
        the control clients are closed, and the failure is raised, as every ``poll`` did.
        """
        self._coordinator = None
        try:
            self._lose(frozenset(self._owned), "control_loop_failed")
        finally:
            c.stop()
            c.control.close(1)
            # The failure's traceback holds the loop's frame, which holds the coordinator (and
            # the admin), which holds the failure: a cycle only a garbage collection frees, so
            # the admin kept reconnecting meanwhile. The loop has ended: its frames' locals can
            # go (the traceback still says where it failed).
            if c.failure is not None:
                traceback.clear_frames(c.failure.__traceback__)
        assert c.failure is not None  # _leave abandons only a failed loop
        raise ControlLoopError(c.failure) from c.failure

    def close(self) -> None:
        """Leave the group (revoke, commit, tombstone) and close the clients."""
        if self._closed:
            return
        try:
            self._leave()
        finally:
            self._closed = True
            self._next_service = 0.0  # poll's fast path is off: the next call raises
            self._close_clients()

    def _close_clients(self) -> None:
        """Close every client this consumer still holds (none after a failed constructor)."""
        control, self._control = self._control, None
        telemetry, self._telemetry = getattr(self, "_telemetry", None), None
        try:
            if telemetry is not None:  # it borrows the admin and owns a producer
                telemetry.close()
            if control is not None:  # never joined: nothing was written
                control.close(0)
            data = getattr(self, "_data", None)
            if data is not None:
                data.close()
        finally:
            # AdminClient has no close(): the last reference going destroys it (the control
            # loop's and the telemetry publisher's are gone by now).
            self._admin = None

    def _ensure_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
