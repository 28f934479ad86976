"""The data consumer: the librdkafka handle a member reads its partitions with, and its repairs.

A :class:`DataConsumer` owns one ``confluent_kafka.Consumer`` that never joins the broker's
group: it ``assign()``s exactly the partitions the member was granted (at an offset hint where
there is one) and uses ``group.id`` only for committed offsets. It is touched only by the
thread that calls ``GroupConsumer.poll`` (confluent-kafka admits one thread at a time into a
``Consumer``). It knows nothing of the control log; what it holds is what librdkafka holds:

- ``owned``: what the handle has assigned, and ``unassigns``, bumped by every unassign: a fetch
  that started before a bump may hold records of partitions no longer owned (the poll hot path
  filters only then; see runtime/consumer.py). ``assign``/``incremental_unassign`` return only
  after librdkafka has stopped the removed partitions' fetchers
  (``rd_kafka_toppar_op_fetch_stop``), and ``consume``/``poll`` drop every queued message of an
  older version (``rd_kafka_op_version_outdated``).
- Offsets are stored by librdkafka's own ``enable.auto.offset.store`` (when the user left it
  on): it stores ``offset + 1`` of each message as ``poll``/``consume`` returns it, i.e. of
  exactly the records handed out. Unassigning a partition resets its stored offset
  (``rd_kafka_assignment_serve_removals``), so nothing is ever committed for partitions that
  were dropped after a fetch.
- Its asynchronous commits (:class:`AsyncCommits`): auto-commit keeps at most one in flight.
- An offset reset (:meth:`DataConsumer.restart_at`): the partitions are unassigned and assigned
  again at their new offsets, so nothing fetched or stored before is handed out or committed;
  answers of async commits sent before it are not taken by the keep-alive as committed.
- Keep-alive of committed offsets (:class:`OffsetKeepAlive`). The broker never sees this
  handle in its group, so it keeps a committed offset only ``offsets.retention.minutes`` after
  its commit, however alive the group is (a native member's group keeps them all while it is
  not empty). So every ``groupkit.offsets.keepalive.interval.ms`` a partition that no commit
  touched is committed again, at exactly the offset that is committed now: the one groupkit
  last committed for it successfully (or named as committed in the hand-off's offset hint),
  else read back with ``committed()``; never the position, so nothing the application has not
  processed is committed. A partition's clock starts when it is assigned (its previous owner
  kept it alive until then) and again with each successful commit, so an idle partition costs
  one commit per interval, however long it idles, and a busy one none. Unless the interval is
  set, it is a quarter of the broker's ``offsets.retention.minutes``, read as the member starts
  (runtime/retention.py, :meth:`DataConsumer.take_retention`).

And the repairs librdkafka (2.16) needs:

- A failed look-up of committed offsets is not retried: a request-level error (the coordinator
  still loading after a broker restart) leaves the newly assigned partitions "queried" for
  good, and every later assignment of the handle waits behind them
  (``rd_kafka_assignment_handle_OffsetFetch``, ``rd_kafka_assignment_serve_pending``). So for
  a while after each assignment the messages are scanned for that error, and the partitions
  that have not started are assigned again, with a growing back-off (see
  :meth:`DataConsumer.refetch_offsets`).
- A handle can be stuck for good after a broker restart; once the member owns nothing it is
  replaced by a fresh one (:meth:`DataConsumer.renew`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
)
from confluent_kafka import TopicPartition as KTopicPartition

from groupkit.log import get_logger
from groupkit.protocol.records import Partitions
from groupkit.protocol.vocab import RebalanceProtocol
from groupkit.runtime.background import Background
from groupkit.runtime.config import GroupConfig, parse_setting
from groupkit.runtime.retention import RetentionRead
from groupkit.types import TopicPartition

_log = get_logger("groupkit.consumer")

#: How long after an assignment ``poll`` looks for librdkafka's "Failed to fetch committed
#: offset(s)" errors (at least; twice the session when that is longer): a look-up waits for a
#: coordinator, and a request that was sent times out after ``socket.timeout.ms`` (60 s).
_OFFSETS_WATCH_S = 90.0
#: First and longest wait before partitions whose committed offsets could not be fetched are
#: assigned again (doubling in between; an authorization error may last until an ACL is added).
_REFETCH_BACKOFF_S = (0.5, 10.0)
#: The text librdkafka gives both its request- and partition-level look-up failures.
_OFFSET_FETCH_FAILED = "Failed to fetch committed offset"

#: librdkafka's ``RD_KAFKA_OFFSET_TAIL_BASE``: ``OFFSET_TAIL(n)`` is this minus ``n``
_OFFSET_TAIL_BASE = -2000

_monotonic = time.monotonic
_msg_error = Message.error


def ktps(
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


def _committed_ok(partitions: Iterable[KTopicPartition]) -> list[KTopicPartition]:
    """The partitions of a commit's answer that were committed, at a real offset."""
    return [p for p in partitions if p.error is None and p.offset is not None and p.offset >= 0]


def _copy(p: KTopicPartition) -> KTopicPartition:
    """A partition at ``p``'s offset, with its commit metadata (when there is any)."""
    if p.metadata is None:
        return KTopicPartition(p.topic, p.partition, p.offset)
    return KTopicPartition(p.topic, p.partition, p.offset, metadata=p.metadata)


class OffsetKeepAlive:
    """When each owned partition's committed offset is due to be committed again, and at what.

    Touched on the ``poll`` thread, but for :meth:`committed`, which an async commit's answer
    calls from librdkafka's callback (served inside ``poll``/``consume`` of the same thread);
    single dict stores, so a revoke commit's thread answering in between loses nothing.
    ``interval`` seconds (``0``: off); a commit that got no good answer is retried after
    ``retry`` seconds.
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.retry = self._retry_after(interval)
        #: owned partition -> monotonic time its offset is to be committed again
        self.due: dict[TopicPartition, float] = {}
        #: owned partition -> its committed offset as groupkit knows it (with its metadata)
        self.known: dict[TopicPartition, KTopicPartition] = {}
        #: the earliest of ``due`` (``inf``: nothing due); a cheap check for ``poll``
        self.next_at = float("inf")

    @staticmethod
    def _retry_after(interval: float) -> float:
        return max(1.0, min(60.0, interval / 10))

    def retune(self, interval: float) -> None:
        """Keep alive every ``interval`` seconds from now on (the broker's retention was read:
        runtime/retention.py). An owned partition keeps its clock: it is due ``interval``
        after its last commit or assignment, or when it was due already, if that is sooner."""
        if not self.interval or interval <= 0:  # off stays off (it tracks no partition)
            return
        old, self.interval, self.retry = self.interval, interval, self._retry_after(interval)
        for tp, at in self.due.items():  # (at - old: when its clock started)
            self.due[tp] = min(at, at - old + interval)
        self.next_at = min(self.due.values(), default=float("inf"))

    def assigned(self, parts: Iterable[TopicPartition], hints: Mapping[TopicPartition, int],
                 now: float) -> None:  # fmt: skip
        if not self.interval:
            return
        for tp in parts:
            self.due[tp] = now + self.interval
            if tp in hints:  # what the previous owner committed, just before releasing it
                self.known[tp] = KTopicPartition(tp.topic, tp.partition, hints[tp])
        self.next_at = min(self.due.values(), default=float("inf"))

    def unassigned(self, parts: Iterable[TopicPartition]) -> None:
        for tp in parts:
            self.due.pop(tp, None)
            self.known.pop(tp, None)
        self.next_at = min(self.due.values(), default=float("inf"))

    def committed(self, partitions: Iterable[KTopicPartition], now: float) -> None:
        """``partitions`` were committed successfully: their clocks start again."""
        if not self.interval:
            return
        for p in _committed_ok(partitions):
            tp = TopicPartition(p.topic, p.partition)
            if tp in self.due:  # owned (an answer may come after a revocation)
                self.known[tp] = _copy(p)
                self.due[tp] = now + self.interval
        self.next_at = min(self.due.values(), default=float("inf"))

    def take_due(self, now: float) -> tuple[list[KTopicPartition], list[TopicPartition]]:
        """The partitions due now: ``(known, unknown)`` (committed offset known or to be read
        back). Their clocks move on by ``retry``; a good answer moves them a whole interval."""
        due = sorted(tp for tp, at in self.due.items() if at <= now)
        for tp in due:
            self.due[tp] = now + self.retry
        self.next_at = min(self.due.values(), default=float("inf"))
        known = [self.known[tp] for tp in due if tp in self.known]
        return known, [tp for tp in due if tp not in self.known]

    def nothing_committed(self, parts: Iterable[TopicPartition], now: float) -> None:
        """``parts`` have no committed offset: nothing to keep for another interval."""
        for tp in parts:
            if tp in self.due:
                self.due[tp] = now + self.interval
        self.next_at = min(self.due.values(), default=float("inf"))


class AsyncCommits:
    """The asynchronous commits of one data consumer handle still waiting for their result.

    librdkafka queues an async commit while no group coordinator is known and looks up no
    committed offsets for newly assigned partitions until every commit is done
    (``rd_kafka_assignment_serve_pending``): auto-commit keeps at most one in flight, so an
    outage leaves one queued commit behind rather than one per interval. Its ``done`` is the
    handle's ``on_commit`` and calls the user's (librdkafka reports only async commits there).
    """

    def __init__(
        self, user_cb: Callable[..., Any] | None, keepalive: OffsetKeepAlive | None = None
    ) -> None:
        self._user_cb = user_cb
        self._keepalive = keepalive
        self.sent: deque[float] = deque()  # monotonic send times, oldest first
        #: answers received so far; with ``sent``, the ordinal of each async commit
        self.answered = 0
        #: partition -> how many async commits had been sent when it was reset: their answers
        #: name offsets from before the reset, which the keep-alive must not take as committed
        self.reset_barrier: dict[TopicPartition, int] = {}

    def done(self, err: Any, partitions: Any) -> None:
        if self.sent:
            self.sent.popleft()
        self.answered += 1
        if self.reset_barrier and partitions:
            partitions = self._after_reset(partitions)
        if err is None and partitions and self._keepalive is not None:
            self._keepalive.committed(partitions, time.monotonic())
        if self._user_cb is not None:
            self._user_cb(err, partitions)

    def waiting_since(self) -> float | None:
        return self.sent[0] if self.sent else None

    def reset(self, parts: Iterable[TopicPartition]) -> None:
        """``parts`` were reset (``DataConsumer.restart_at``): answers of the async commits
        sent so far are from before it. (Their commits reach the coordinator before the
        reset's own synchronous commit: one connection, in order.)"""
        issued = self.answered + len(self.sent)
        for p in parts:
            self.reset_barrier[p] = issued

    def _after_reset(self, partitions: list[KTopicPartition]) -> list[KTopicPartition]:
        n = self.answered
        out = [p for p in partitions
               if self.reset_barrier.get(TopicPartition(p.topic, p.partition), 0) < n]  # fmt: skip
        for tp in [tp for tp, b in self.reset_barrier.items() if b < n]:
            del self.reset_barrier[tp]
        return out


#: The bound of the metadata warm-up (:meth:`DataConsumer._learn_metadata`): it only saves
#: time, and a ``GroupConsumer()`` that fails waits for it before it closes the handle.
_WARM_S = 3.0
#: how long after an assign auto-commit waits, for librdkafka to start the partitions (it
#: serves the assignment in a few milliseconds; longer on a busy machine)
_ASSIGN_START_S = 0.1


class DataConsumer:
    """The member's librdkafka data handle: assign/unassign at offsets, commits, repairs.

    ``member_id`` names the member in log lines; ``on_unassign_failed`` is told when an
    unassign raised (the poll hot path must then filter every fetch by ownership).
    """

    def __init__(
        self,
        cfg: GroupConfig,
        member_id: Callable[[], str | None],
        on_unassign_failed: Callable[[], None],
    ) -> None:
        self._cfg = cfg
        self._member_id = member_id
        self._on_unassign_failed = on_unassign_failed
        # librdkafka stores the offset of each record as poll/consume hands it over; those
        # are the records handed to the user (see the module docstring).
        store = cfg.data_consumer.get("enable.auto.offset.store", True)
        self.auto_store = bool(parse_setting("enable.auto.offset.store", store, "bool"))
        self.keepalive = OffsetKeepAlive(cfg.offsets_keepalive_ms / 1000)
        #: the read of the broker's retention the keep-alive's interval waits for, if any
        #: (runtime/retention.py; :meth:`take_retention`)
        self.retention: RetentionRead | None = None
        self.commits = AsyncCommits(None)  # replaced with each handle
        self.handle: Consumer = self._new_handle()
        #: the handle's own ``poll`` and ``consume``, bound (the hot path calls them directly)
        self.poll = self.handle.poll
        self.consume = self.handle.consume
        self.owned: set[TopicPartition] = set()  # what the handle has assigned
        #: bumped by every unassign (and renewal): a fetch that started before a bump may hold
        #: records of partitions no longer owned
        self.unassigns = 0
        #: an unassign failed: the handle may still fetch partitions we do not own
        self.unassign_failed = False
        #: monotonic seconds until which messages are scanned for failed offset look-ups
        self.offsets_watch_until = 0.0
        #: when to assign again what could not start for want of its committed offset
        self.refetch_at: float | None = None
        self._refetch_backoff = _REFETCH_BACKOFF_S[0]
        self._last_commit = time.monotonic()
        #: monotonic seconds before which auto-commit waits: partitions were just assigned
        self._auto_commit_after = 0.0
        #: partition -> wall ms of this member's newest commit of it (sent, for an async one):
        #: what the lag status sampler dates its commits by (runtime/lag_status.py), since
        #: the broker keeps no commit time that a client can read
        self.commit_times: dict[TopicPartition, int] = {}
        #: owned partitions the application paused (``pause``); resumed when they go away
        self.paused: set[TopicPartition] = set()
        #: owned partition -> offset the application ``seek``-ed it to, where it has handed
        #: out no record since (librdkafka's position is unset until then; see ``seek``)
        self.seeked: dict[TopicPartition, int] = {}
        self._warming = Background(self._learn_metadata, "groupkit-warm-data")

    def _learn_metadata(self) -> None:
        """Ask for the cluster's metadata once, as the handle is made.

        ``subscribe()`` checks its topics in the handle's metadata, and a new handle's first
        answer waits for a connection to a broker it learned from the bootstrap one (55-65 ms
        on a loopback broker, against 3 ms once connected). Asked here, while the rest of
        ``GroupConsumer()`` talks to the cluster, the connection is up by the time the app
        subscribes. A failure is not reported here: ``subscribe()`` asks again and says why.
        """
        try:
            self.handle.list_topics(timeout=_WARM_S)
        except KafkaException as e:
            _log.debug("data_consumer.warm_failed", error=str(e))

    def _new_handle(self) -> Consumer:
        """A data consumer handle, and a fresh record of its async commits."""
        commits = AsyncCommits(self._cfg.user_config.get("on_commit"), self.keepalive)
        handle = Consumer({**self._cfg.data_consumer, "enable.auto.offset.store": self.auto_store,
                           "on_commit": commits.done})  # fmt: skip
        self.commits = commits
        return handle

    # ------------------------------------------------------------------ assignment

    def assign(self, add: Partitions, start: Mapping[TopicPartition, int]) -> None:
        """Start fetching ``add``, at ``start`` where given (offset hints), else at the
        committed offset (looked up by librdkafka)."""
        now = time.monotonic()
        # librdkafka starts no newly assigned partition, even at a known offset, while a
        # commit of its handle is in flight (``rd_kafka_assignment_serve``), and serves the
        # assignment on its own thread after this returns: an auto-commit sent in the same
        # turn would hold the partitions back for its round trip. librdkafka's own auto-commit
        # skips while its group rebalances; this one waits until the assignment has started.
        self._auto_commit_after = now + _ASSIGN_START_S
        if not self.owned:
            # A member that begins to own, as a newcomer taking its partitions one hand-off
            # at a time, auto-commits first an interval later, when the rest have usually
            # come: a commit at the first record (40 ms at the bench's load) held the next
            # hand-off back.
            self._last_commit = now
        if self._cfg.protocol == RebalanceProtocol.COOPERATIVE:
            self.handle.incremental_assign(ktps(add, start))
        else:
            self.owned |= add
            self.handle.assign(ktps(self.owned, start))
        self.owned |= add
        for tp in add:  # (a partition that comes back starts afresh, as in Kafka)
            self.seeked.pop(tp, None)
        self.keepalive.assigned(add, start, now)
        self.watch_offsets()

    def unassign(self, parts: Partitions) -> None:
        """Stop fetching ``parts``; returns once librdkafka has stopped their fetchers."""
        self._forget_app_state(parts)
        self.owned -= parts
        self.unassigns += 1
        self.keepalive.unassigned(parts)
        try:
            if self._cfg.protocol == RebalanceProtocol.COOPERATIVE:
                self.handle.incremental_unassign(ktps(parts))
            else:
                self.handle.assign(ktps(self.owned))
        except BaseException:
            # From now on every fetch is filtered by ownership (the fast path is off).
            self.unassign_failed = True
            self._on_unassign_failed()
            raise

    def restart_at(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Start owned partitions again at ``offsets`` (an offset reset): unassigned, so that
        librdkafka drops what it fetched and what it stored for them (nothing fetched before
        is handed out, nothing stored before is committed after), then assigned at the new
        offsets, which the keep-alive takes as their committed ones from now on. (Not
        ``seek``: it keeps the stored offset, from before the reset, which auto-commit would
        then commit, and with ``enable.auto.offset.store`` it cannot be stored over.)"""
        parts = frozenset(offsets)
        if self._cfg.protocol == RebalanceProtocol.COOPERATIVE:
            self.unassign(parts)
            self.assign(parts, offsets)
        else:
            # Eager assigns the whole set at once: the partitions that stay go on from their
            # positions (without them they would start over from their committed offsets).
            rest = self.handle.position(ktps(sorted(self.owned - parts)))
            start = {TopicPartition(k.topic, k.partition): k.offset for k in rest
                     if k.offset is not None and k.offset >= 0}  # fmt: skip
            self.unassigns += 1
            self.keepalive.unassigned(parts)
            self.handle.assign(ktps(self.owned, {**start, **offsets}))
            self.keepalive.assigned(parts, offsets, time.monotonic())
        self.commits.reset(parts)

    # ------------------------------------------------------------------ commits

    def commit(
        self,
        message: Message | None,
        offsets: Sequence[KTopicPartition] | None,
        asynchronous: bool,
    ) -> list[KTopicPartition] | None:
        """``Consumer.commit`` of the current handle, its async commits counted."""
        # confluent-kafka's overloads want a literal ``asynchronous``; ours is a plain bool.
        commit: Any = self.handle.commit
        commits = self.commits  # of the handle committing, whatever replaces it meanwhile
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
        self._stamp_commit(message, offsets)
        if asynchronous:
            return None
        done = list(result or [])
        self.keepalive.committed(done, time.monotonic())
        return done

    def commit_sync(self, offsets: list[KTopicPartition] | None) -> dict[TopicPartition, int]:
        """Commit ``offsets`` (``None``: what is stored) synchronously, on whatever handle is
        current; return what was stored for sure (only offsets we named: what a commit of
        stored offsets covers we cannot know). Raises ``KafkaException`` as ``commit`` does."""
        commit: Any = self.handle.commit
        if offsets is None:
            commit(asynchronous=False)
            self._stamp_commit(None, None)
            return {}
        done = commit(offsets=offsets, asynchronous=False)
        self._stamp_commit(None, offsets)
        return {
            TopicPartition(p.topic, p.partition): p.offset
            for p in done or ()
            if p.error is None and p.offset >= 0
        }

    def _stamp_commit(
        self, message: Message | None, offsets: Sequence[KTopicPartition] | None
    ) -> None:
        """Note when the partitions a commit covers were committed (all owned ones for a
        commit of the stored offsets): once a synchronous commit is answered, so that a
        sampler that sees the stamp reads the offset it committed; as an asynchronous one is
        sent. A commit the broker refused still showed a consumer at work."""
        now_ms = int(time.time() * 1000)
        if message is not None:
            tps: Iterable[TopicPartition] = (
                TopicPartition(message.topic() or "", message.partition() or 0),
            )
        elif offsets is not None:
            tps = [TopicPartition(p.topic, p.partition) for p in offsets]
        else:
            tps = list(self.owned)
        for tp in tps:
            self.commit_times[tp] = now_ms

    def without_deleted_topics(
        self, parts: Iterable[TopicPartition], offsets: list[KTopicPartition] | None
    ) -> tuple[list[KTopicPartition] | None, set[str]]:
        """``offsets`` without the partitions of topics of ``parts`` the cluster no longer
        has, and those topics (``None`` offsets, a commit of what is stored: ``[]`` once every
        topic is gone, else unchanged)."""
        gone: set[str] = set()
        for topic in sorted({tp.topic for tp in parts}):
            try:
                md = self.handle.list_topics(topic, timeout=5).topics.get(topic)
            except KafkaException:
                continue  # not known to be gone: try the commit again
            if md is None or (
                md.error is not None and md.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            ):
                gone.add(topic)
        if not gone:
            return offsets, gone
        if offsets is None:
            return ([] if gone >= {tp.topic for tp in parts} else None), gone
        return [p for p in offsets if p.topic not in gone], gone

    def auto_commit_due(self, now: float) -> bool:
        """Whether auto-commit should commit now (and, if so, it counts as done now)."""
        if (
            self._cfg.enable_auto_commit
            and self.owned
            and now - self._last_commit >= self._cfg.auto_commit_interval_ms / 1000
            and now >= self._auto_commit_after
            and not self._commit_awaited(now)
        ):
            self._last_commit = now
            return True
        return False

    def _commit_awaited(self, now: float) -> bool:
        """Whether a commit is in flight and its answer not yet long overdue (ten auto-commit
        intervals, at least a session): at most one is in flight (see AsyncCommits), but an
        answer that never comes must not stop auto-commit and the keep-alive for good."""
        waiting = self.commits.waiting_since()
        overdue = max(10 * self._cfg.auto_commit_interval_ms, self._cfg.session_timeout_ms)
        return waiting is not None and now - waiting < overdue / 1000

    def take_retention(self, now: float) -> None:
        """Move the keep-alive to the interval the broker's retention gives, once it is read."""
        read = self.retention
        if read is None:
            return
        interval_ms = read.interval_ms(now)
        if interval_ms is not None:
            self.retention = None
            self.keepalive.retune(interval_ms / 1000)

    def keepalive_offsets(self, now: float, timeout: float) -> list[KTopicPartition]:
        """The committed offsets of the owned partitions due to be committed again (see the
        module docstring), those groupkit does not know read back with ``committed()``
        (bounded by ``timeout``); ``[]`` when none is due, or while a commit is in flight
        (its answer may move an offset: committing the older one after it would rewind)."""
        ka = self.keepalive
        if now < ka.next_at or not self.owned or now < self._auto_commit_after:
            return []  # (after an assign: as auto-commit, see assign)
        if self._commit_awaited(now):
            return []
        known, unknown = ka.take_due(now)
        if unknown:
            try:
                read = self.handle.committed(ktps(unknown), timeout=timeout)
            except KafkaException as e:  # tried again after ka.retry
                _log.debug("offsets.keepalive_read_failed", member=self._member_id(),
                           error=str(e))  # fmt: skip
                return known
            ok = _committed_ok(read)
            ka.nothing_committed(
                {TopicPartition(p.topic, p.partition) for p in read
                 if p.error is None and (p.offset is None or p.offset < 0)},
                now,
            )  # fmt: skip
            known += [_copy(p) for p in ok]
        return sorted(known, key=lambda p: (p.topic, p.partition))

    def revoke_offsets(self, parts: Partitions) -> list[KTopicPartition] | None:
        """What to commit for ``parts`` before giving them away: the positions of the records
        handed to the user (``None``: the user stores offsets, commit what is stored; ``[]``:
        auto-commit is off, the user commits in ``on_revoke``)."""
        if not self._cfg.enable_auto_commit:
            return []
        if not self.auto_store:
            return None
        positions = self.handle.position(ktps(parts))
        # After a seek, librdkafka has no position until a record is handed out: the offset
        # sought is the position then (as Kafka's commit of positions does), never the one
        # from before the seek.
        for p in positions:
            if p.offset is None or p.offset < 0:
                p.offset = self.seeked.get(TopicPartition(p.topic, p.partition), p.offset)
        return [p for p in positions if p.offset is not None and p.offset >= 0]

    # ------------------------------------------------------------------ the app's controls

    def pause(self, parts: Iterable[TopicPartition]) -> None:
        """Pause fetching the owned ``parts`` (``Consumer.pause``); others are not touched:
        librdkafka keeps a pause flag on a partition it does not fetch, which would pause it
        on a later assignment, which Kafka never does."""
        mine = sorted(set(parts) & self.owned)
        if mine:
            self.handle.pause(ktps(mine))
            self.paused.update(mine)

    def resume(self, parts: Iterable[TopicPartition]) -> None:
        """Resume fetching the owned ``parts`` (``Consumer.resume``)."""
        mine = sorted(set(parts) & self.owned)
        if mine:
            self.handle.resume(ktps(mine))
            self.paused.difference_update(mine)

    def seek(self, partition: KTopicPartition) -> None:
        """``Consumer.seek`` of an owned partition, remembered for its next commit.

        librdkafka forgets the partition's position on a seek (``rd_kafka_toppar_seek``) but
        keeps its stored offset, which auto-commit would commit. So the offset sought (a
        logical one resolved from the watermarks) is stored, as Kafka's auto-commit commits
        the position after a seek, and the revoke commit (``revoke_offsets``) uses it until a
        record is handed out. A partition whose committed offset is still being looked up
        cannot be sought in librdkafka (``_STATE``): it is assigned again at the offset.
        """
        tp = TopicPartition(partition.topic, partition.partition)
        try:
            self.handle.seek(partition)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._STATE or tp not in self.owned:
                raise
            # assigned but not started: start it again, at the offset (as refetch_offsets)
            self.handle.incremental_unassign(ktps([tp]))
            self.handle.incremental_assign([partition])
        offset = self._absolute(partition)
        self.seeked[tp] = offset
        if offset >= 0 and self.auto_store:
            try:
                self.handle.store_offsets(offsets=[KTopicPartition(tp.topic, tp.partition,
                                                                   offset)])  # fmt: skip
            except KafkaException as e:  # the revoke commit still uses ``seeked``
                _log.debug("seek.store_failed", member=self._member_id(), error=str(e))

    def _absolute(self, partition: KTopicPartition) -> int:
        """The offset a seek to ``partition.offset`` starts at (negative: not known)."""
        offset = partition.offset
        logical = offset in (OFFSET_BEGINNING, OFFSET_END) or offset <= _OFFSET_TAIL_BASE
        if offset >= 0 or not logical:
            return offset
        try:
            low, high = self.handle.get_watermark_offsets(partition, timeout=5)
        except KafkaException:
            return offset
        if offset == OFFSET_BEGINNING:
            return int(low)
        if offset == OFFSET_END:
            return int(high)
        return int(max(low, high - (_OFFSET_TAIL_BASE - offset)))  # OFFSET_TAIL(n)

    def _forget_app_state(self, parts: Iterable[TopicPartition]) -> None:
        """``parts`` go away: they come back resumed and unsought, as in Kafka (librdkafka
        would keep them paused: its pause flag outlives an unassign)."""
        paused = sorted(self.paused & set(parts))
        for tp in parts:
            self.seeked.pop(tp, None)
        if paused:
            self.paused.difference_update(paused)
            try:
                self.handle.resume(ktps(paused))
            except KafkaException as e:
                _log.debug("resume.failed", member=self._member_id(), error=str(e))

    # ------------------------------------------------------------------ offset repair

    def watch_offsets(self, assigned: bool = True) -> None:
        """Scan messages for failed offset look-ups for a while (after an assignment, which
        also starts the back-off afresh unless a re-fetch is already due)."""
        window = max(_OFFSETS_WATCH_S, 2 * self._cfg.session_timeout_ms / 1000)
        self.offsets_watch_until = _monotonic() + window
        if assigned and self.refetch_at is None:
            self._refetch_backoff = _REFETCH_BACKOFF_S[0]

    def watch_offset_errors(self, msgs: Iterable[Message]) -> None:
        """Schedule :meth:`refetch_offsets` when librdkafka says a look-up failed for good."""
        for m in msgs:
            err = _msg_error(m)
            if err is None or not err.str().startswith(_OFFSET_FETCH_FAILED):
                continue
            if self.refetch_at is None:
                self.refetch_at = _monotonic() + self._refetch_backoff
                _log.warning("offsets.fetch_failed", member=self._member_id(), error=err.str(),
                             retry_in_s=self._refetch_backoff)  # fmt: skip

    def refetch_offsets(self) -> None:
        """Assign again what cannot start for want of its committed offset.

        That is every owned partition without a position, i.e. with nothing handed out since
        it was assigned (librdkafka does not say which ones a request-level error stranded; a
        partition-level error names one, which has no position either). One that merely had
        no records yet starts again from its committed offset, where it was; one that has a
        position is never touched, so nothing is read twice. Unassigning takes them off
        librdkafka's "queried" list, which also unblocks the look-ups of later assignments.
        """
        self.refetch_at = None
        stuck: set[TopicPartition] = set()
        if self.owned:
            for p in self.handle.position(ktps(sorted(self.owned))):
                tp = TopicPartition(p.topic, p.partition)
                # (a partition sought has no position either, but it has started: see seek)
                if (p.offset is None or p.offset < 0) and tp not in self.seeked:
                    stuck.add(tp)
        _log.warning("offsets.refetch", member=self._member_id(), partitions=len(stuck))
        if stuck:
            parts = ktps(sorted(stuck))
            try:
                self.handle.incremental_unassign(parts)
                self.handle.incremental_assign(parts)
            except KafkaException as e:
                _log.warning("offsets.refetch_failed", member=self._member_id(), error=str(e))
                self.refetch_at = _monotonic() + self._refetch_backoff
        self._refetch_backoff = min(self._refetch_backoff * 2, _REFETCH_BACKOFF_S[1])
        self.watch_offsets(assigned=False)

    def renew(self) -> None:
        """Swap in a fresh handle once the member has lost everything.

        A handle can be stuck for good after a broker restart: librdkafka (2.16) looks up no
        committed offsets for newly assigned partitions while any of its commits is outstanding,
        nor after a look-up failed at the request level (see :meth:`refetch_offsets`, which
        mends that case for a member that keeps partitions). Owning nothing now, and refused any
        commit as a fenced member, this member gives the old handle nothing more to do: it is
        closed in the background.
        """
        old = self.handle
        try:
            self.handle = self._new_handle()
        except KafkaException as e:  # keep the old one: better stuck than gone
            _log.warning("data_consumer.renew_failed", member=self._member_id(), error=str(e))
            return
        self.poll = self.handle.poll
        self.consume = self.handle.consume
        self.unassigns += 1  # a fetch under way on the old handle hands out nothing
        self.paused.clear()  # (owned nothing: already so; a fresh handle pauses nothing)
        self.seeked.clear()

        def close_old() -> None:
            try:
                old.close()
            except Exception as e:  # closing a handle we no longer use: nothing to do
                _log.debug("data_consumer.close_failed", error=str(e))

        threading.Thread(target=close_old, name="groupkit-close-data", daemon=True).start()

    def close(self) -> None:
        self._warming.result()  # (bounded by its timeout) a handle is never closed under a request
        self.handle.close()
