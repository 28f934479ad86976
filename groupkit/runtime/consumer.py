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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KTopicPartition

from groupkit.errors import ConfigError, FencedError, GroupkitError
from groupkit.protocol.records import Partitions
from groupkit.runtime.admin import connect_admin
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.coordinator import Coordinator, Handoff, monotonic_ms
from groupkit.runtime.hooks import GroupObserver, Observers
from groupkit.types import TopicPartition

_log = structlog.get_logger("groupkit.consumer")

#: How often a waiting ``poll`` looks for hand-offs: each hop of a rebalance that needs the poll
#: thread (revoke, assign) waits at most this long for it.
_SERVICE_EVERY_S = 0.01

Callback = Callable[["GroupConsumer", list[KTopicPartition]], None]


def _ktps(parts: Iterable[TopicPartition]) -> list[KTopicPartition]:
    return [KTopicPartition(tp.topic, tp.partition) for tp in sorted(parts)]


def _counts(msgs: list[Message]) -> list[tuple[tuple[str, int], int]]:
    counts: dict[tuple[str, int], int] = {}
    for m in msgs:
        if m.error() is None:
            tp = _msg_tp(m)
            counts[tp] = counts.get(tp, 0) + 1
    return list(counts.items())


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
        self._cfg = GroupConfig.from_dict(config)
        self._registry = registry
        self.observers = Observers(observers)
        # Fails fast and says so when the credentials are refused (admin.connect_admin).
        self._admin = connect_admin(self._cfg.client_config())
        if self._cfg.telemetry_enable:  # only the leader publishes; see runtime/telemetry.py
            from groupkit.runtime.telemetry import TelemetryPublisher

            self.observers.add(TelemetryPublisher(self._cfg, self._admin))
        # Offsets are stored only for records handed to the user (see _store).
        self._auto_store = bool(self._cfg.data_consumer.get("enable.auto.offset.store", True))
        try:
            self._data = Consumer({**self._cfg.data_consumer, "enable.auto.offset.store": False})
        except KafkaException as e:
            raise ConfigError(f"the data consumer refused its settings: {e}") from e
        self._coordinator: Coordinator | None = None
        self._topics: list[str] = []
        self._on_assign: Callback | None = None
        self._on_revoke: Callback | None = None
        self._on_lost: Callback | None = None
        self._owned: set[TopicPartition] = set()  # what the data consumer has assigned
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

    def _join(self) -> None:
        self._coordinator = Coordinator(
            self._cfg,
            self._topics,
            self._admin,
            on_handoff=self._wake.set,
            poll_age=lambda: time.monotonic() - self._last_poll,
            observers=self.observers,
        )
        self._coordinator.start()

    def unsubscribe(self) -> None:
        self._leave()

    # ------------------------------------------------------------------ consuming

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next message of an owned partition, or ``None`` after ``timeout`` seconds."""
        msgs = self._consume(1, timeout)
        return msgs[0] if msgs else None

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        return self._consume(num_messages, timeout)

    def _consume(self, n: int, timeout: float | None) -> list[Message]:
        self._ensure_open()
        self._last_poll = time.monotonic()
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        while True:
            self._service()
            remaining = 0.1 if deadline is None else max(0.0, deadline - time.monotonic())
            msgs: list[Message] = []
            if self._owned:
                msgs = self._data.consume(n, min(remaining, _SERVICE_EVERY_S))
            else:
                self._wake.wait(min(remaining, _SERVICE_EVERY_S))
                self._wake.clear()
            if msgs:
                # A process frozen inside consume() wakes up here: fence before handing out
                # anything. Hand-offs wait for the next call, so a revocation never commits
                # past records the user has not been given.
                self._fence()
                out = [m for m in msgs if m.error() is not None or _msg_tp(m) in self._owned]
                if out:
                    self._store(out)
                    if self.observers:
                        self.observers.consumed(self.member_id or "", _counts(out))
                    return out
            if deadline is not None and time.monotonic() >= deadline:
                return []

    def _store(self, msgs: list[Message]) -> None:
        """Store the offsets of records given to the user (librdkafka's auto-store is off)."""
        if not self._auto_store:
            return
        nxt: dict[tuple[str, int], int] = {}
        for m in msgs:
            off = m.offset()
            if m.error() is None and off is not None:
                tp = _msg_tp(m)
                nxt[tp] = max(nxt.get(tp, 0), off + 1)
        if nxt:
            self._data.store_offsets(
                offsets=[KTopicPartition(t, p, o) for (t, p), o in nxt.items()]
            )

    def _fence(self) -> None:
        """Lose everything, uncommitted, once our own heartbeat is older than the session."""
        c = self._coordinator
        if c is None or not self._owned:
            return
        with c.lock:
            age = c.member.session_age_ms(monotonic_ms())
        if age is None or age >= self._cfg.session_timeout_ms:
            self._lose(frozenset(self._owned), "session_lapsed")

    def _service(self) -> None:
        """Fence, carry out hand-offs, auto-commit: everything ``poll`` owes the group."""
        c = self._coordinator
        if c is None:
            return
        if c.failure is not None:
            raise GroupkitError(f"the control loop failed: {c.failure}") from c.failure
        if c.abandoned:
            # We left for not polling in time; others may own our partitions by now.
            self._lose(frozenset(self._owned), "max_poll_interval_exceeded")
            c.stop()
            c.reader.close()
            self._join()
            return
        self._fence()
        with c.lock:
            handoffs = list(c.handoffs)
            c.handoffs.clear()
        for h in handoffs:
            self._apply(h)
        if (
            self._cfg.enable_auto_commit
            and self._owned
            and time.monotonic() - self._last_commit >= self._cfg.auto_commit_interval_ms / 1000
        ):
            self._last_commit = time.monotonic()
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
                if self._cfg.protocol == "cooperative":
                    self._data.incremental_assign(_ktps(add))
                else:
                    self._owned |= add
                    self._data.assign(_ktps(self._owned))
                self._owned |= add
                if self._on_assign is not None:
                    self._on_assign(self, _ktps(add))
        self.observers.handoff(self._coordinator.member_id, h.generation, h.assign, h.revoke,
                               h.lost, time.monotonic() - t0)  # fmt: skip

    def _lose(self, parts: Partitions, why: str) -> None:
        if not parts:
            return
        _log.warning("partitions.lost", member=self.member_id, reason=why, partitions=len(parts))
        self._unassign(parts)
        if self._on_lost is not None:
            self._on_lost(self, _ktps(parts))

    def _unassign(self, parts: Partitions) -> None:
        self._owned -= parts
        if self._cfg.protocol == "cooperative":
            self._data.incremental_unassign(_ktps(parts))
        else:
            self._data.assign(_ktps(self._owned))

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
        # confluent-kafka's overloads want a literal ``asynchronous``; ours is a plain bool.
        commit: Any = self._data.commit
        if message is not None:
            result = commit(message=message, asynchronous=asynchronous)
        elif offsets is not None:
            result = commit(offsets=list(offsets), asynchronous=asynchronous)
        else:
            if not parts:
                return None
            result = commit(asynchronous=asynchronous)
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
    ) -> None:
        """Commit ``offsets`` of revoked ``parts``, then tell the control loop they are free.

        The commit runs in its own thread: a synchronous commit can block for as long as the
        group coordinator is unreachable (a broker restart), and the poll thread must keep
        serving the partitions that stay. Until the commit succeeds the member's record keeps
        claiming the partitions, so nobody is granted them with offsets still uncommitted. If
        the member's session lapses meanwhile, they are lost anyway and the commit stops.
        """
        c = self._coordinator
        assert c is not None

        def run() -> None:
            while offsets != []:
                try:
                    with c.lock:
                        c.member.check_commit(parts, monotonic_ms())
                    commit: Any = self._data.commit
                    if offsets is None:
                        commit(asynchronous=False)
                    else:
                        commit(offsets=offsets, asynchronous=False)
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
            c.released(release)

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
        self._service()
        # Revoke everything on this thread (commit first), then say goodbye through the log.
        owned = frozenset(self._owned)
        if owned:
            offsets = self._revoke_offsets(owned)
            if self._on_revoke is not None:
                self._on_revoke(self, _ktps(owned))
            self._unassign(owned)
            self._commit_then_release(owned, offsets, owned, wait=10.0)
        with c.lock:
            c.member.leave()
        # One more turn of the loop writes the empty record and the tombstone.
        deadline = time.monotonic() + 5
        while c.member.state != "left" and time.monotonic() < deadline:
            time.sleep(0.01)  # the control thread's next turn (every 20 ms) takes the leave
        c.stop()
        c.writer.flush(5)
        c.reader.close()
        self._coordinator = None

    def close(self) -> None:
        """Leave the group (revoke, commit, tombstone) and close the clients."""
        if self._closed:
            return
        try:
            self._leave()
        finally:
            self._closed = True
            self._data.close()

    def _ensure_open(self) -> None:
        if self._closed:
            raise GroupkitError("the consumer is closed")

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
