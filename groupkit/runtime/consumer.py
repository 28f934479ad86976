"""``GroupConsumer``: a confluent-kafka consumer whose group is coordinated by groupkit.

It looks like ``confluent_kafka.Consumer`` (a config dict and every public method of it, with
its signature: tests/test_consumer_parity.py), but the data consumer never joins the broker's
group: it ``assign()``s exactly what groupkit's control log grants this member, and uses
``group.id`` only for committed offsets. So ``assign`` and its kin are refused, and ``pause``,
``resume`` and ``seek`` act on the partitions the member owns (runtime/data_consumer.py keeps
them across hand-offs as Kafka does). A subscription may name topics by pattern
(runtime/patterns.py).

This module is the public API and the member's lifecycle (join, subscription, leave, close).
The rest of a member is in four pieces, each with one job:

- the control thread (:class:`~groupkit.runtime.coordinator.Coordinator`) reads and writes the
  control topic, heartbeats and, on the leader, plans generations; this module and the next
  talk to it only through its narrow interface ("the poll thread's side": ``needs_service``,
  ``take_handoffs``, ``fence``, ``check_commit``, ``released``, ``lost``, ``leave``, ...);
- the hand-off executor (runtime/handoff.py) carries out on the thread that calls
  :meth:`GroupConsumer.poll` what the control thread hands it (like librdkafka's rebalance
  callbacks, ``on_assign``/``on_revoke``/``on_lost`` run on it). A revocation is done in this
  order, because the leader grants a partition to its next owner as soon as the log shows it
  released: 1. stop returning messages of the partition; 2. commit its offsets (when
  auto-commit is on, else the user commits in ``on_revoke``); 3. ``on_revoke``; 4. unassign it
  from the data consumer; 5. tell the control thread, which then writes the record that no
  longer claims it. An assignment starts at the offsets the previous owner committed and named
  in its release, where it did (offset hints);
- the data consumer (runtime/data_consumer.py) owns the librdkafka handle: assignment at
  offsets, commits, the repair of failed offset look-ups and the renewal of a stuck handle;
- the poll loop (runtime/poll_loop.py) is what ``poll``/``consume``/``commit`` do on the
  caller's thread: the fence of a lapsed session, the service of the group (hand-offs,
  auto-commit), the fetch and the hot path that hands records out without a per-message cost.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, Message
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient

from groupkit.errors import (
    AssignmentOwnedError,
    ConfigError,
    ConsumerClosedError,
    ControlLoopError,
)
from groupkit.log import get_logger
from groupkit.protocol.records import Partitions
from groupkit.runtime.admin import GroupkitAdmin, appeared_topic, connect_admin
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.control_log import ControlClients
from groupkit.runtime.control_topic import ensure_control_topic, partition_for_group
from groupkit.runtime.coordinator import Coordinator
from groupkit.runtime.data_consumer import DataConsumer, ktps
from groupkit.runtime.handoff import HandoffExecutor, OwnershipHook, RebalanceCallback
from groupkit.runtime.hooks import GroupObserver, Observers
from groupkit.runtime.lag_status import StatusSampler
from groupkit.runtime.liveness_io import bind_liveness_log
from groupkit.runtime.patterns import DEFAULT_REFRESH_MS, Subscription, TopicWatcher
from groupkit.runtime.poll_loop import PollLoop
from groupkit.runtime.probe import MemberProbe
from groupkit.runtime.retention import RetentionRead

if TYPE_CHECKING:
    from groupkit.runtime.telemetry import TelemetryPublisher
from groupkit.types import TopicPartition

_log = get_logger("groupkit.consumer")

#: ``on_assign``, ``on_revoke`` and ``on_lost`` of :meth:`GroupConsumer.subscribe`
Callback = RebalanceCallback["GroupConsumer"]


def _tps(partitions: Iterable[KTopicPartition]) -> list[TopicPartition]:
    return [TopicPartition(p.topic, p.partition) for p in partitions]


def _owned(method: str) -> AssignmentOwnedError:
    return AssignmentOwnedError(
        f"GroupConsumer.{method}() is not allowed: groupkit owns the assignment (the group "
        "grants each member its partitions). Use subscribe(), pause()/resume() or seek()."
    )


class GroupConsumer:
    """A consumer in a groupkit group. Use one per thread of work, like ``Consumer``."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        observers: Iterable[GroupObserver] = (),
    ) -> None:
        self._cfg = cfg = GroupConfig.from_dict(config)
        self.observers = Observers(observers)
        #: the control clients the next join takes (opened here: see _open_control)
        self._control: ControlClients | None = None
        #: protocol version 2: the group's partition of the liveness topic (_open_control)
        self._liveness: tuple[str, int] | None = None
        self._admin: AdminClient | None = None
        # The data consumer first: it learns the cluster's metadata in the background while
        # the admin client connects (subscribe() reads it; DataConsumer._learn_metadata).
        try:
            self._data = DataConsumer(cfg, lambda: self.member_id, self._unassign_failed)
        except KafkaException as e:
            raise ConfigError(f"the data consumer refused its settings: {e}") from e
        try:
            # The control clients next: they warm up (metadata, the writer's producer id) while
            # the admin client connects and checks the control topic (_open_control).
            self._control = ControlClients(cfg, cfg.control_topic)
            # Fails fast and says so when the credentials are refused (admin.connect_admin).
            self._admin = admin = connect_admin(cfg.client_config("admin"))
            if cfg.offsets_keepalive_from_retention:
                # Sent, not awaited: the poll thread takes the answer (runtime/retention.py).
                self._data.retention = RetentionRead(
                    admin, admin.broker_ids, cfg.offsets_keepalive_ms, cfg.group_id
                )
            self._open_control()
        except BaseException:
            self._close_clients()
            raise
        self._telemetry: TelemetryPublisher | None = None
        if cfg.telemetry_enable:  # only the leader publishes; see runtime/telemetry.py
            from groupkit.runtime.telemetry import TelemetryPublisher

            self._telemetry = TelemetryPublisher(cfg, self._admin)
            self.observers.add(self._telemetry)
        self._handoffs: HandoffExecutor[GroupConsumer] = HandoffExecutor(
            self, self._data, self.observers, lambda: self._coordinator, lambda: self._closed
        )
        #: what poll, consume and commit do; it holds the member's coordinator (_coordinator)
        self._poll_loop = PollLoop(cfg, self._data, self._handoffs, self.observers, self._join)
        self._topics: list[str] = []
        #: follows the subscription's patterns, if it has any (runtime/patterns.py)
        self._watcher: TopicWatcher | None = None
        self._watch_lock = threading.Lock()
        #: Burrow's status of the owned partitions, sampled on a thread of its own
        #: (runtime/lag_status.py)
        self._lag_status: StatusSampler | None = None
        self._probe = MemberProbe(
            cfg,
            lambda: self._topics,
            self._data,
            lambda: self._coordinator,
            lambda: self._admin,
            lambda: None if self._lag_status is None else self._lag_status.view(),
        )
        if cfg.lag_status_interval_ms > 0:
            probe = self._probe
            self._lag_status = StatusSampler(
                cfg.lag_status_interval_ms / 1000,
                probe.owned,
                lambda parts: probe.read_offsets(parts, timeout=5.0),
                lambda: self._data.commit_times,
            )
        self._closed = False
        #: the next member, started here: it catches up on the control log and keeps up while
        #: the app gets ready, writing nothing, so subscribe() joins at once (the catch-up was
        #: a phase of every join: ~35 ms of a tuned join at 10 x 48 on 2 cores, up to 300 ms)
        self._standby: Coordinator | None = None
        try:
            # Each observer the app passed in learns its member (metrics read it through the
            # probe) before the standby replays a record and calls any other hook.
            for o in self.observers.registered:
                o.attached(self._probe)
            self._standby = self._new_member()
        except BaseException:
            self._close_clients()
            raise
        if self._lag_status is not None:
            self._lag_status.start()

    # ------------------------------------------------------------------ properties

    @property
    def _coordinator(self) -> Coordinator | None:
        """The member's control loop (``None`` while it has none: not joined, or left); the
        poll loop holds it, for its hot path reads it on every call."""
        return self._poll_loop.coordinator

    @_coordinator.setter
    def _coordinator(self, c: Coordinator | None) -> None:
        self._poll_loop.coordinator = c

    @property
    def member_id(self) -> str | None:
        return self._coordinator.member_id if self._coordinator else None

    @property
    def generation(self) -> int:
        c = self._coordinator
        return -1 if c is None else c.generation

    @property
    def is_leader(self) -> bool:
        c = self._coordinator
        return False if c is None else c.is_leader

    @property
    def probe(self) -> MemberProbe:
        """A read-only view of this member for observers: config values, topics, owned
        partitions, its standing in the group and its lag (runtime/probe.py)."""
        return self._probe

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
        began = time.monotonic()
        self._ensure_open()
        topics = sorted(set(topics))
        if not topics:
            raise ConfigError("subscribe needs at least one topic")
        # A topic starting with ^ is a pattern (runtime/patterns.py): the member subscribes to
        # the topics it matches, and follows them as topics come and go.
        sub = Subscription(topics, self._cfg.data_consumer.get("topic.blacklist"))
        # A new member's catch-up on the control log starts now, while the topics are checked
        # (one metadata round trip off the join's path); it joins once they are.
        joining = self._coordinator is None
        if joining:
            self._topics = list(sub.names)
            self._join(hold=True)
        c = self._coordinator
        assert c is not None
        try:
            resolved = self._check_topics(sub)
        except BaseException:
            if joining:  # nothing written yet (the join was held): it waits for the next try
                self._coordinator, self._standby = None, c
            raise
        self._set_callbacks(on_assign, on_revoke, on_lost)
        self._watch(sub, resolved)
        self._topics = resolved
        c.set_subscription(resolved)  # (a joiner's join record names the patterns' topics)
        if joining:
            c.may_join()
            _log.debug("hop.subscribed", member=c.member_id,
                       ms=round((time.monotonic() - began) * 1000, 1))  # fmt: skip

    def _check_topics(self, sub: Subscription) -> list[str]:
        """The topics ``sub`` names and matches; :class:`ConfigError` unless every named one
        exists (or appears within ``topic.metadata.propagation.max.ms``). Asked of the data
        consumer, so it knows the topics before its first assign (no ~500 ms metadata wait for
        a new owner's first record). A named topic is asked for by name: librdkafka then keeps
        it as a local topic with its partitions on their leaders' threads, and a first assign
        fetches at once. Known only from a look-up of the whole cluster, the topic and its
        partitions are made by the first assign, on librdkafka's main thread, before any
        fetch: 1 ms more on an idle machine, a further wait for a core on a loaded one, at the
        end of a newcomer's join."""
        handle = self._data.handle
        topics = dict(handle.list_topics(timeout=10).topics) if sub.patterns else {}
        for name in sub.names:
            topics.update(handle.list_topics(name, timeout=10).topics)

        def missing() -> list[str]:
            return [t for t in sub.names if t not in topics or topics[t].error is not None]

        # A topic created a moment ago (or by this very look-up, where the data consumer's
        # allow.auto.create.topics and the broker allow it) may not be in the answering
        # broker's metadata yet: waited for within topic.metadata.propagation.max.ms, as for
        # the control topic (config.TOPIC_PROPAGATION_MS), before it is said not to exist.
        wait_s = self._cfg.topic_propagation_ms / 1000
        deadline = time.monotonic() + wait_s
        for name in missing():
            found = appeared_topic(handle, name, max(0.0, deadline - time.monotonic()))
            if found is not None:
                topics[name] = found
        if absent := missing():
            raise ConfigError(
                f"topic(s) {', '.join(absent)} do not exist on the cluster "
                "(or this principal lacks DESCRIBE on them; waited "
                f"{wait_s:g} s for them to appear: topic.metadata.propagation.max.ms)"
            )
        return sub.resolve(topics)

    def _set_callbacks(
        self, on_assign: Callback | None, on_revoke: Callback | None, on_lost: Callback | None
    ) -> None:
        h = self._handoffs
        h.on_assign, h.on_revoke, h.on_lost = on_assign, on_revoke, on_lost

    def _watch(self, sub: Subscription, topics: list[str]) -> None:
        """Follow ``sub``'s patterns (if any) from ``topics``, instead of any earlier ones."""
        with self._watch_lock:
            old, self._watcher = self._watcher, None
            if old is not None:
                old.stop(0)  # (its last call, if any, sees it replaced: see changed)
            interval_ms = int(self._cfg.connection.get("topic.metadata.refresh.interval.ms",
                                                       DEFAULT_REFRESH_MS))  # fmt: skip
            if not sub.patterns or interval_ms <= 0:
                return
            admin = self._admin
            assert admin is not None

            def changed(new: list[str]) -> None:
                with self._watch_lock:
                    if self._watcher is not watcher:  # replaced (or stopped) meanwhile
                        return
                    self._topics = new
                    c = self._coordinator
                    if c is not None:
                        c.set_subscription(new)  # the next member record says so

            watcher = TopicWatcher(sub, topics, lambda: admin.list_topics(timeout=10).topics,
                                   changed, interval_ms / 1000, self._peer_topics)  # fmt: skip
            self._watcher = watcher
            watcher.start()

    def _peer_topics(self) -> set[str]:
        """The topics the group's live members subscribe to, as the log says."""
        c = self._coordinator
        if c is None:
            return set()
        with c.lock:
            return {t for m in c.state.live_members().values() for t in m.topics}

    def _stop_watching(self) -> None:
        with self._watch_lock:
            old, self._watcher = self._watcher, None
        if old is not None:
            old.stop()

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
            propagation_timeout=cfg.topic_propagation_ms / 1000,
        )
        self._control_partition = partition_for_group(cfg.group_id, partitions)
        if self._control is None:
            self._control = ControlClients(cfg, cfg.control_topic)
        self._control.bind(self._control_partition)
        bind_liveness_log(self._admin, cfg, self._control)  # (protocol version 2)
        self._liveness = self._control.liveness

    def _join(self, hold: bool = False) -> None:
        """Start a new member: the standby the constructor started, else (a member joining
        again after it left) a new one. ``hold``: it writes nothing (its join record first)
        until :meth:`Coordinator.may_join`."""
        self._poll_loop.fence_until = 0.0  # a new member: nothing of ours is confirmed yet
        # max.poll.interval.ms counts from the join, not from GroupConsumer()
        self._poll_loop.last_poll = time.monotonic()
        c, self._standby = self._standby, None
        if c is None:
            c = self._new_member()
        self._coordinator = c
        c.set_subscription(self._topics)
        if not hold:
            c.may_join()

    def _new_member(self) -> Coordinator:
        """A new member's control loop, started: it catches up on the control log, then keeps
        up, and writes nothing until :meth:`Coordinator.may_join`. It takes the control clients
        the constructor opened, else new ones (a member joining again after it left replays
        its partition anew)."""
        control, self._control = self._control, None
        if control is None:
            control = ControlClients(self._cfg, self._cfg.control_topic, self._control_partition)
            if self._liveness is not None:
                control.bind_liveness(*self._liveness)
        try:
            assert self._admin is not None
            c = Coordinator(
                self._cfg,
                self._topics,
                self._admin,
                on_handoff=self._poll_loop.wake.set,
                poll_age=lambda: time.monotonic() - self._poll_loop.last_poll,
                observers=self.observers,
                control=control,
            )
        except BaseException:
            control.close(0)
            raise
        c.start()
        return c

    def unsubscribe(self) -> None:
        self._stop_watching()
        self._leave()

    # ------------------------------------------------------------------ consuming

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next message of an owned partition, or ``None`` after ``timeout`` seconds."""
        return self._poll_loop.poll(timeout)

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        return self._poll_loop.consume(num_messages, timeout)

    def _unassign_failed(self) -> None:
        """An unassign failed: from now on every fetch is filtered by ownership."""
        self._poll_loop.fast_path_off()

    def _lose(self, parts: Partitions, why: str) -> None:
        """Stop ``parts`` without a commit (``on_lost``): see ``HandoffExecutor.lose``."""
        self._handoffs.lose(parts, why)

    # ------------------------------------------------------------------ offsets

    def commit(
        self,
        message: Message | None = None,
        offsets: Sequence[KTopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[KTopicPartition] | None:
        """Commit like ``Consumer.commit``, but only partitions this member owns, unfenced."""
        self._ensure_open()
        return self._poll_loop.commit(message, offsets, asynchronous)

    def store_offsets(
        self, message: Message | None = None, offsets: Sequence[KTopicPartition] | None = None
    ) -> None:
        if message is not None:
            self._data.handle.store_offsets(message=message)
        elif offsets is not None:
            self._data.handle.store_offsets(offsets=list(offsets))

    def position(self, partitions: Sequence[KTopicPartition]) -> list[KTopicPartition]:
        return list(self._data.handle.position(list(partitions)))

    def committed(
        self, partitions: Sequence[KTopicPartition], timeout: float | None = None
    ) -> list[KTopicPartition]:
        return list(self._data.handle.committed(list(partitions), timeout=timeout or 10))

    def assignment(self) -> list[KTopicPartition]:
        return ktps(self._data.owned)

    # ------------------------------------------------------------------ the rest of Consumer

    # ``Consumer``'s other methods, with its signatures, on the partitions this member owns
    # (tests/test_consumer_parity.py keeps the list complete). Call them from the thread that
    # polls, as with ``Consumer``: they act on the data consumer, which belongs to that thread.

    def pause(self, partitions: Sequence[KTopicPartition]) -> None:
        """Stop fetching ``partitions`` until :meth:`resume` (``Consumer.pause``).

        A paused partition stays paused across rebalances that move other partitions (with the
        cooperative protocol they are not touched). One that this member gives up (revoked or
        lost) and is granted again later comes back **resumed**, as in Kafka; so does every
        partition with the eager protocol, which revokes everything at each rebalance. Pause
        again in ``on_assign`` to keep it paused. Partitions the member does not own are
        ignored (``Consumer.pause`` ignores partitions it has not assigned, too).
        """
        self._ensure_open()
        self._data.pause(_tps(partitions))

    def resume(self, partitions: Sequence[KTopicPartition]) -> None:
        """Fetch paused ``partitions`` again (``Consumer.resume``); others are ignored."""
        self._ensure_open()
        self._data.resume(_tps(partitions))

    def seek(self, partition: KTopicPartition) -> None:
        """Fetch ``partition`` from ``partition.offset`` on (``Consumer.seek``).

        Only an owned partition can be sought: for any other, librdkafka's own answer for a
        partition that is not assigned is raised (``KafkaException``: ``_STATE``, or
        ``_UNKNOWN_PARTITION``). The next ``poll`` returns records from the offset sought, and
        until it does, the offset sought is what a commit of that partition commits (auto-commit,
        and the commit when it is revoked, which the next owner starts from), as Kafka commits
        the position after a seek. Allowed in ``on_assign``.
        """
        self._ensure_open()
        if TopicPartition(partition.topic, partition.partition) in self._data.owned:
            self._data.seek(partition)
        else:
            self._data.handle.seek(partition)  # not assigned in it: it raises as Consumer does

    def get_watermark_offsets(
        self, partition: KTopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int] | None:
        """``Consumer.get_watermark_offsets`` (any partition, as it: a read)."""
        self._ensure_open()
        kw: dict[str, Any] = {"cached": cached}
        if timeout is not None:
            kw["timeout"] = timeout
        result: Any = self._data.handle.get_watermark_offsets(partition, **kw)
        return None if result is None else (int(result[0]), int(result[1]))

    def offsets_for_times(
        self, partitions: Sequence[KTopicPartition], timeout: float | None = None
    ) -> list[KTopicPartition]:
        """``Consumer.offsets_for_times`` (any partition, as it: a read)."""
        self._ensure_open()
        kw: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        return list(self._data.handle.offsets_for_times(list(partitions), **kw))

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """``Consumer.list_topics``: the cluster's metadata (``ClusterMetadata``)."""
        self._ensure_open()
        return self._data.handle.list_topics(topic, timeout)

    def memberid(self) -> str | None:
        """This member's id in its groupkit group (``None`` until it joins): the broker's
        group never sees the data consumer, so its ``memberid()`` would always be ``None``."""
        self._ensure_open()
        return self.member_id

    def cluster_id(self, timeout: float = -1) -> str | None:
        """``Consumer.cluster_id``."""
        self._ensure_open()
        result: Any = self._data.handle.cluster_id(timeout)
        return None if result is None else str(result)

    def consumer_group_metadata(self) -> Any:
        """The data consumer's ``ConsumerGroupMetadata``, for
        ``Producer.send_offsets_to_transaction``.

        Limitation: the broker does not know groupkit's group, so this names ``group.id`` with
        no generation and no member id, and the broker cannot fence a zombie member's
        transactional offset commit by generation (KIP-447) with it. Offsets sent with it are
        committed, but exactly-once across rebalances needs a fencing of its own:
        ``groupkit.eos`` fences by ``transactional.id``, one per input partition.
        """
        self._ensure_open()
        return self._data.handle.consumer_group_metadata()

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """New SASL username and password for every client of this member (the data consumer,
        the control reader and writer, the admin client and the telemetry producer) and for
        the clients it opens later (``Consumer.set_sasl_credentials``: used at the next
        connection; a connection already up keeps its session)."""
        self._ensure_open()
        # The settings later clients are made from (a renewed data handle, a rejoin's control
        # clients, the telemetry producer, the admin's companion consumer of runtime/lag.py).
        settings: list[dict[str, Any]] = [self._cfg.connection, self._cfg.data_consumer]
        if isinstance(self._admin, GroupkitAdmin):
            settings.append(self._admin.settings)
        for conf in settings:
            conf["sasl.username"] = username
            conf["sasl.password"] = password
        self._data.handle.set_sasl_credentials(username, password)
        if self._admin is not None:
            self._admin.set_sasl_credentials(username, password)
        c = self._coordinator
        standby = self._standby
        for control in (self._control, *(x.control for x in (c, standby) if x is not None)):
            if control is not None:
                control.set_sasl_credentials(username, password)
        for x in (c, standby):  # a judge's reader of the liveness topic (protocol version 2)
            if x is not None and x.v2 is not None:
                x.v2.set_sasl_credentials(username, password)
        if self._telemetry is not None:
            self._telemetry.set_sasl_credentials(username, password)

    def assign(self, partitions: Sequence[KTopicPartition]) -> None:
        """Refused (:class:`~groupkit.errors.AssignmentOwnedError`): groupkit owns the
        assignment."""
        raise _owned("assign")

    def unassign(self) -> None:
        """Refused: groupkit owns the assignment (``unsubscribe`` leaves the group)."""
        raise _owned("unassign")

    def incremental_assign(self, partitions: Sequence[KTopicPartition]) -> None:
        """Refused: groupkit owns the assignment."""
        raise _owned("incremental_assign")

    def incremental_unassign(self, partitions: Sequence[KTopicPartition]) -> None:
        """Refused: groupkit owns the assignment."""
        raise _owned("incremental_unassign")

    # ------------------------------------------------------------------ exactly-once

    def add_ownership_hook(self, hook: OwnershipHook) -> None:
        """Tell ``hook`` of every assignment, revocation and loss, where it must act (see
        runtime/handoff.py, "Ownership hooks"); ``groupkit.eos`` installs one.

        A hook that owns the offsets must be their only committer: groupkit's own commits of
        them (auto-commit, its commit on revoke, the offset keep-alive) must be off."""
        cfg = self._cfg
        if hook.owns_offsets and (cfg.enable_auto_commit or cfg.offsets_keepalive_ms):
            raise ConfigError(
                "offsets committed in transactions need groupkit's own commits off: set "
                "'enable.auto.commit': False and 'groupkit.offsets.keepalive.interval.ms': 0 "
                "(a commit outside the transaction could move an offset the broker's fencing "
                "does not guard)"
            )
        self._handoffs.hooks.append(hook)

    # ------------------------------------------------------------------ closing

    def _leave(self) -> None:
        c = self._coordinator
        if c is None:
            return
        if c.failure is not None:
            self._abandon(c)
        if c.superseded:  # fenced by a newer process with our instance id: nothing to say
            for h in c.take_handoffs():
                self._handoffs.apply(h)
            self._coordinator = None
            c.close(5)
            return
        # Nothing taken from here on: the leaving record holds only what it still claims.
        c.stop_taking()
        self._poll_loop.service()
        # Revoke everything on this thread (commit first), then say goodbye through the log.
        owned = frozenset(self._data.owned)
        if owned:
            # Released and left in one step (Coordinator.released), unless the commit is slow.
            self._handoffs.revoke(owned, owned, wait=10.0, leave=True)
        c.leave()
        # Written with the release above; else one more turn of the loop writes them.
        deadline = time.monotonic() + 5
        while not c.has_left and time.monotonic() < deadline:
            time.sleep(0.01)  # the control thread's next turn takes the leave
        c.close(5)
        self._coordinator = None

    def _abandon(self, c: Coordinator) -> None:
        """Leave after the control loop failed: nothing can go through the log any more.

        What we own is lost (``on_lost``, no commit: the group may have moved on without us),
        the control clients are closed, and the failure is raised, as every ``poll`` did.
        """
        self._coordinator = None
        try:
            self._lose(frozenset(self._data.owned), "control_loop_failed")
        finally:
            c.close(1)
            # The failure's traceback holds the loop's frame, which holds the coordinator (and
            # the admin), which holds the failure: a cycle only a garbage collection frees, so
            # the admin kept reconnecting meanwhile. The loop has ended: its frames' locals can
            # go (the traceback still says where it failed).
            if c.failure is not None:
                traceback.clear_frames(c.failure.__traceback__)
        assert c.failure is not None  # _leave abandons only a failed loop
        raise ControlLoopError(c.failure) from c.failure

    def close(self, leave: bool | None = None) -> None:
        """Leave the group (revoke, commit, tombstone) and close the clients.

        A static member (``group.instance.id``) does not leave by default, as in Kafka: it
        revokes and commits everything, and writes a last record owning nothing but no
        tombstone, so its seat and partitions wait ``session.timeout.ms`` for the next process
        with its instance id, which takes them back without a rebalance. ``leave=True`` leaves
        anyway (its partitions move at once, as ``removeMembersFromConsumerGroup`` would);
        ``leave=False`` keeps the seat; ``None``: ``groupkit.leave.group.on.close``.
        """
        if self._closed:
            return
        c = self._coordinator
        if c is not None:
            _log.debug("hop.closing", member=c.member_id)  # (bench/trace_joins.py: a leave)
        if c is not None and leave is not None:
            c.keep_seat = self._cfg.instance_id is not None and not leave
        try:
            self._stop_watching()
            self._leave()
        finally:
            self._closed = self._poll_loop.closed = True
            self._poll_loop.fast_path_off()  # poll's fast path is off: the next call raises
            self._close_clients()

    def _close_clients(self) -> None:
        """Close every client this consumer still holds (none after a failed constructor)."""
        control, self._control = self._control, None
        standby, self._standby = getattr(self, "_standby", None), None
        telemetry, self._telemetry = getattr(self, "_telemetry", None), None
        sampler, self._lag_status = getattr(self, "_lag_status", None), None
        try:
            if sampler is not None:  # it reads through the admin: stopped before it goes
                sampler.close()
            if telemetry is not None:  # it borrows the admin and owns a producer
                telemetry.close()
            if standby is not None:  # never joined: nothing was written
                standby.close(0)
            if control is not None:
                control.close(0)
            data = getattr(self, "_data", None)
            if data is not None:
                data.close()
        finally:
            # AdminClient has no close(): the last reference going destroys it (the control
            # loop's and the telemetry publisher's are gone by now).
            self._admin = None
            probe = getattr(self, "_probe", None)
            if probe is not None:  # its reader of committed offsets, once no read can start
                probe.close()

    def _ensure_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
