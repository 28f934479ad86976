"""Reading and writing a group's control partition.

The reader ``assign()``s the group's one control partition from the beginning and returns raw
records with their offsets and broker (``LogAppendTime``) timestamps; it never interprets them:
decoding and every decision belong to the protocol layer, which replays what this returns.

The writer is an idempotent producer (``acks=all``, no linger): a record is either in the log
once, in the order written, or its delivery callback reports the error.

A refusal that no retry can cure (the principal may not read or write the control topic) is
raised as a :class:`~groupkit.errors.BrokerError` naming the ACL to grant, so the control loop
fails, and ``GroupConsumer.poll`` says why, instead of waiting for an assignment that can never
come.

Any other fatal error of the idempotent producer (its producer id, epoch or sequence state no
longer matches the broker's, e.g. after a broker restart) is not a refusal: the writer replaces
its producer at the next :meth:`ControlWriter.service` and carries on. Records still queued in
the old one are reported failed to their delivery callbacks; nothing is lost to the protocol,
because every member record is the member's whole state (its next one supersedes it) and a
failed assignment record makes the leader plan again. Only a producer that keeps failing fatally
without delivering anything in between (``_MAX_REPLACEMENTS`` times) fails the control loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from groupkit.errors import BrokerError
from groupkit.log import get_logger
from groupkit.runtime.client_log import ClientLog
from groupkit.runtime.config import GroupConfig

_T = TypeVar("_T")
_log = get_logger("groupkit.runtime")

#: Errors no retry cures: the principal lacks an ACL. (An authentication failure is not here:
#: librdkafka retries it, e.g. across a credential rotation; ``GroupConsumer()`` reports it.)
_DENIED = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)


#: A partition whose leadership is still being taken over (librdkafka does not always mark
#: these retriable on a watermark query), or that the client's metadata does not know yet
#: (``_UNKNOWN_PARTITION``, a local error: on a three-broker cluster a member's catch-up can
#: ask before its metadata names the partition, which must not end its control loop).
_NOT_LED = frozenset(
    {
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)

#: The cluster did not answer in time: a broker down, stalled or cut off. Retried within a
#: request's bound like the errors above; past it, :func:`unanswered` tells the caller so.
_UNANSWERED = frozenset(
    {
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.REQUEST_TIMED_OUT,
    }
)


def unanswered(e: BaseException) -> bool:
    """``e`` (or what it was raised from) says the cluster did not answer, or that a partition
    had no leader to answer, as opposed to refusing the request: worth asking again later."""
    cause: BaseException | None = e
    while cause is not None:
        err = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
        if (
            isinstance(err, KafkaError)
            and err.code() not in _DENIED
            and (err.retriable() or err.code() in _UNANSWERED or err.code() in _NOT_LED)
        ):
            return True
        cause = cause.__cause__
    return False


#: Fatal producer errors in a row, with no record delivered in between, after which the writer
#: stops replacing its producer and fails (e.g. a broker that cannot do idempotence at all).
_MAX_REPLACEMENTS = 5

#: How long :meth:`ControlWriter.warm` waits for the producer id once a learned broker is up:
#: two of librdkafka's own retries (500 ms each), after which the first write waits as it would.
_PID_WAIT_S = 1.0
#: The bound of the warm-up ``GroupConsumer()`` runs in the background. It only saves time:
#: one that does not finish leaves the client to its first use, with the full timeouts. And a
#: ``GroupConsumer()`` that fails (a refused password) waits for it before it closes the
#: clients (a handle is never closed under a request), so it must be short.
_BACKGROUND_WARM_S = 3.0
#: The pause before asking again after a broker refused a producer id (its controller hands it
#: a block of ids within a few ms of the refusal).
_PID_RETRY_S = 0.02


def _control_timeouts(cfg: GroupConfig, request: bool = False) -> dict[str, int]:
    """How long a control client waits for a connection to come up, and the writer for a
    produce request's answer: half a session, within [2 s, 30 s] (librdkafka's defaults are
    30 s each). A member that waits longer than its session lapses anyway. After a broker
    restart a request can sit unanswered on a connection the broker took while it was going
    down or coming up: the idempotent writer then holds every later record back ("partition
    drain") until that request times out, and the member lapses again and again meanwhile
    (seen in the chaos runs: no record delivered for over 40 s).

    And how long a control client waits between tries to reconnect: at most 1 s, as Kafka's
    Java clients do, not librdkafka's 10 s: after a broker's outage of a few seconds the
    writer otherwise came back seconds after the reader, every member lapsing meanwhile.
    The user's own settings win."""
    bound = max(2_000, min(30_000, cfg.session_timeout_ms // 2))
    keys = ["socket.connection.setup.timeout.ms"] + (["request.timeout.ms"] if request else [])
    out = {k: bound for k in keys if k not in cfg.connection}
    if "reconnect.backoff.max.ms" not in cfg.connection:
        out["reconnect.backoff.max.ms"] = 1_000
    return out


def _denied(err: KafkaError | None) -> bool:
    """A refusal no retry cures: the principal lacks an ACL (fatal or not)."""
    return err is not None and err.code() in _DENIED


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One control record as the broker stored it."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


class ControlReader:
    """Follows one control partition from its beginning."""

    def __init__(
        self, cfg: GroupConfig, topic: str, partition: int, role: str = "control-reader"
    ) -> None:
        """``role``: the client's name (``GroupConfig.client_config``). A reader of the liveness
        log (``liveness-reader``) that asks for an offset retention has deleted starts at the
        log's start, not at its end (a control reader only ever asks for offsets it has)."""
        self.topic = topic
        self.partition = partition
        self._conf = cfg.client_config(
            role,
            **{
                "group.id": cfg.group_id,  # required by librdkafka; nothing is committed
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
                # Low fetch latency: a rebalance is as fast as members see each other.
                # fetch.min.bytes=1 makes the broker answer a waiting fetch as soon as a
                # record is appended; fetch.wait.max.ms only bounds an idle fetch. At 10 ms
                # ten idle members kept 42% of a broker core busy answering empty fetches;
                # at 500 ms, 26%, and no hop is slower (bench/rebalance.py). Version 2's
                # main log is quiet for up to a third of a session (the leader's lease), and
                # a second halves what an idle follower receives from it. (A seek waits for
                # the fetch in flight: only catch-up and reset-offsets seek. Version 2's
                # catch-up seeks once, before any fetch, but after a snapshot whose records
                # the cleaner has been through; version 1's re-reads from the log's end.)
                "fetch.wait.max.ms": 1000 if cfg.protocol_version == 2 else 500,
                "fetch.min.bytes": 1,
                "fetch.error.backoff.ms": 50,
                "socket.nagle.disable": True,
                **({"auto.offset.reset": "earliest"} if role == "liveness-reader" else {}),
                **_control_timeouts(cfg),
            },
        )
        self._consumer = Consumer(self._conf)
        #: fresh consumers swapped in for one that stopped fetching (:meth:`renew`)
        self.renewals = 0
        self.position = 0  # the offset of the next record to read
        self._open = False
        self._warm = False
        self._closed = False

    def warm(self, timeout: float = 10.0) -> None:
        """Learn the topic's metadata: assigned a topic it knows nothing of, librdkafka waits
        ~500 ms before its first fetch (measured in bench/rebalance.py)."""
        if not self._warm:
            md = self._consumer.list_topics(self.topic, timeout=timeout)
            topic = md.topics.get(self.topic)
            # A topic not created yet (GroupConsumer() warms the clients while it checks the
            # topic) leaves the reader cold: its first use learns it again.
            self._warm = topic is not None and topic.error is None

    @property
    def warmed(self) -> bool:
        """The topic's metadata is known (:meth:`warm`)."""
        return self._warm

    def _assign(self) -> None:
        """Start reading, on first use (so constructing a reader never blocks on the broker)."""
        if not self._open:
            self.rewind()

    def high_watermark(self, timeout: float = 10.0) -> int:
        """The end of the partition, asked of its leader."""
        tp = TopicPartition(self.topic, self.partition)
        _low, high = self._ask(
            lambda left: self._consumer.get_watermark_offsets(tp, timeout=left),
            "cannot read the end of the control topic", timeout,
        )  # fmt: skip
        return int(high)

    def offset_for_time(self, timestamp_ms: int, timeout: float = 10.0) -> int | None:
        """The first offset stamped at or after ``timestamp_ms`` (Kafka's ListOffsets by
        timestamp), or ``None`` if no record is that recent."""
        tp = TopicPartition(self.topic, self.partition, timestamp_ms)
        got = self._ask(
            lambda left: self._consumer.offsets_for_times([tp], timeout=left),
            "cannot look up the control topic by time", timeout,
        )  # fmt: skip
        if not got or got[0].error is not None or got[0].offset < 0:
            return None
        return int(got[0].offset)

    def _ask(self, call: Callable[[float], _T], what: str, timeout: float) -> _T:
        """One ListOffsets-style request to the partition's leader, retried while the error is
        retriable. A partition just created (the control topic is created by
        ``GroupConsumer()``, so its first member asks at once) or whose leadership just moved
        answers NOT_LEADER until its broker has taken it over, although the metadata already
        names that broker."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                # asking needs no assignment (reading may start elsewhere: seek), only the
                # topic's metadata, which an unanswered metadata request leaves to ask again
                self.warm(max(0.1, deadline - time.monotonic()))
                return call(max(0.1, deadline - time.monotonic()))
            except KafkaException as e:
                if not unanswered(e) or time.monotonic() >= deadline:
                    raise BrokerError(f"{what}: {e}") from e
                time.sleep(0.05)  # librdkafka refreshes the leader meanwhile; no event to await

    def seek(self, offset: int) -> None:
        """Read from ``offset`` next (what was fetched beyond is dropped)."""
        self.warm()
        # assign() replaces the assignment and its fetch position; seek() would need the
        # partition to be fetching already
        self._consumer.assign([TopicPartition(self.topic, self.partition, offset)])
        self._open = True
        self.position = offset

    def rewind(self) -> None:
        """Read from the beginning of the log next (its first offset may be above 0)."""
        self.warm()
        self._consumer.assign([TopicPartition(self.topic, self.partition, OFFSET_BEGINNING)])
        self._open = True
        self.position = 0

    def poll(self, timeout: float) -> list[RawRecord]:
        """Records available within ``timeout`` seconds (a batch, maybe empty).

        Returns as soon as one record is there: ``consume(n, timeout)`` alone would wait for
        ``n`` records or the whole timeout, adding its timeout to every hop of a rebalance. The
        wait is ``consume(1, timeout)``, not ``poll``: confluent-kafka wakes a ``poll`` longer
        than 200 ms every 200 ms to look for signals, twice the wake-ups of an idle member's
        control loop.
        """
        self._assign()
        first = self._consumer.consume(num_messages=1, timeout=timeout)
        if not first:
            return []
        msgs = [*first, *self._consumer.consume(num_messages=500, timeout=0)]
        out: list[RawRecord] = []
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                # (GROUP_AUTHORIZATION_FAILED is librdkafka looking up a coordinator the reader
                # never uses: it commits nothing. Harmless, so ignored like other transients.)
                if err.fatal() or err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise BrokerError(
                        f"cannot read control topic {self.topic!r}: {err.str()}; the principal "
                        f"needs READ on topic {self.topic}"
                    )
                continue  # transient errors: librdkafka retries on its own
            raw = _raw(msg)
            out.append(raw)
            self.position = raw.offset + 1
        return out

    def renew(self) -> None:
        """Swap in a fresh consumer that reads on from :attr:`position`.

        For a consumer that stopped fetching: after a broker restart, librdkafka (2.x) can leave
        an assigned partition idle for good, its connection up and nothing asked (seen in the
        chaos runs: the member's own records appended, none read back for minutes). A fresh
        handle starts the partition's fetch state over. The old one is closed in the
        background: a stuck handle may take its time to close.
        """
        old, self._consumer = self._consumer, Consumer(self._conf)
        self._warm = False
        self.renewals += 1
        if self._open:
            self._consumer.assign([TopicPartition(self.topic, self.partition, self.position)])
        threading.Thread(target=old.close, name="groupkit-close-reader", daemon=True).start()

    def set_sasl_credentials(self, username: str, password: str) -> None:
        self._consumer.set_sasl_credentials(username, password)
        self._conf = {**self._conf, "sasl.username": username, "sasl.password": password}

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._consumer.close()


class ReaderStall:
    """When a reader has stopped fetching and should be renewed (``ControlReader.renew`` says
    when librdkafka does that): a record of our own has been appended (its delivery report
    says where) for half a session, at least a second, the reader has not got to it, and
    another of ours was appended since, so the broker is up (during an outage nothing is read,
    and nothing is appended either). A reader that merely lags reads it within that time."""

    def __init__(self, session_timeout_ms: int) -> None:
        self.after_s = max(1.0, session_timeout_ms / 2000)
        #: since when (monotonic s) the reader has owed us one of our records
        self._since: float | None = None

    def reset(self) -> None:
        """The reader returned records: whatever it owes, it may only lag."""
        self._since = None

    def due(self, appended: int, appended_at: float, position: int) -> float | None:
        """How long the reader has stalled, if it is time to renew it (the wait then starts
        again), else ``None``. ``appended``: the newest offset of ours appended, at monotonic
        ``appended_at``; ``position``: the reader's."""
        if appended < position:
            self._since = None
            return None
        now = time.monotonic()
        if self._since is None:
            self._since = now
            return None
        stalled = now - self._since
        if stalled < self.after_s or appended_at <= self._since:
            return None
        self._since = now
        return stalled


def _raw(msg: Message) -> RawRecord:
    kind, ts = msg.timestamp()
    offset = msg.offset()
    # LogAppendTime is guaranteed by the topic's config; a record without a broker timestamp is
    # passed on with -1 and the protocol layer rejects it.
    return RawRecord(
        offset=int(offset if offset is not None else -1),
        key=msg.key(),
        value=msg.value(),
        timestamp_ms=int(ts) if kind != TIMESTAMP_NOT_AVAILABLE else -1,
    )


DeliveryCallback = Callable[[KafkaError | None, int], None]
#: a liveness record's delivery report: (error, offset, the broker's LogAppendTime or -1)
LivenessCallback = Callable[[KafkaError | None, int, int], None]


class ControlWriter:
    """Produces control records to one partition, idempotently and in order.

    Owned by one thread (the control loop), which calls :meth:`service`; :meth:`write` with
    ``service=False`` may also be called from another thread.
    """

    def __init__(self, cfg: GroupConfig, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._cfg = cfg
        #: set by the first refusal no retry cures; raised by :meth:`service`
        self.failure: BrokerError | None = None
        #: how many times a fatal error made the writer replace its producer
        self.replacements = 0
        self._fatal_in_a_row = 0
        #: the fatal error of the current producer that is not a refusal: replace it
        self._broken: KafkaError | None = None
        #: delivery callbacks of records no producer took, run by the next :meth:`service`
        self._failed: list[tuple[Callable[[KafkaError | None, Message | None], None],
                                 KafkaError]] = []  # fmt: skip
        #: protocol version 2: (topic, partition) of the group's liveness log
        self.liveness: tuple[str, int] | None = None
        self._lock = threading.Lock()  # the producer, _broken and _failed
        self._warm = False
        #: set while the current producer holds a producer id (see :meth:`warm`)
        self._pid = threading.Event()
        #: set when a producer-id request failed and librdkafka will retry on its own timer
        self._pid_refused = threading.Event()
        self._closed = False
        #: queue times of the current producer's records still without a delivery report
        self._unanswered: deque[float] = deque()
        #: producers swapped in for one that stopped delivering (:meth:`renew`)
        self.renewals = 0
        self._producer = self._new_producer()

    def _new_producer(self) -> Producer:
        user_error_cb = self._cfg.connection.get("error_cb")
        producer: Producer | None = None

        def on_error(err: KafkaError) -> None:
            # A producer that went fatal (e.g. no ACL for its producer id) before our first
            # write: produce() then says only "Fatal error"; keep the reason to report.
            if err.fatal() and producer is self._producer:  # not a replaced one's late news
                self._fatal(err)
            if user_error_cb is not None:
                user_error_cb(err)

        self._pid.clear()
        debug = str(self._cfg.connection.get("debug") or "")
        producer = Producer(
            self._cfg.client_config(
                "control-writer",
                **{
                    "logger": ClientLog(
                        self._watch_pid, forward=self._cfg.connection.get("logger")
                    ),
                    # The eos context's few lines (state changes of the producer id) are how
                    # warm() learns the id is assigned: nothing else of librdkafka's says so.
                    "debug": ",".join(c for c in (debug, "eos") if c),
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 0,
                    "socket.nagle.disable": True,
                    "message.max.bytes": 8 * 1024 * 1024,
                    "error_cb": on_error,
                    **_control_timeouts(self._cfg, request=True),
                },
            )
        )
        return producer

    def _watch_pid(self, level: int, fac: str, message: str) -> None:
        """Follow the producer id through librdkafka's log (its ``eos`` debug context)."""
        if fac == "IDEMPSTATE":
            if message.endswith("-> Assigned"):
                self._pid.set()
            elif "Assigned ->" in message:  # an epoch bump or a reset: the id is asked again
                self._pid.clear()
        elif fac == "GETPID" and level >= logging.WARNING:  # "Failed to acquire ...: retrying"
            self._pid_refused.set()

    def _fatal(self, err: KafkaError) -> None:
        """Note a fatal error: a refusal fails the writer, anything else replaces the producer."""
        if self.failure is not None:
            return
        if _denied(err):
            self.failure = self._refused(err)
        elif self._broken is None:
            self._broken = err

    def warm(self, timeout: float = 10.0) -> None:
        """Make the producer ready to write: the topic's metadata known and a producer id held.

        An idempotent producer sends nothing before the broker gives it a producer id, and
        librdkafka asks for one in three cases only: when the producer starts (no broker is
        connected yet, so it cannot), when a metadata response arrives, and on a 500 ms timer.
        It asks only a broker it learned from metadata, not the bootstrap connection. So:

        1. Metadata is requested until a learned broker answers it (``orig_broker_id`` >= 0).
           An answer from the bootstrap connection arrives while no learned broker is up; the
           request it triggers finds none, and the producer id would then wait for the timer:
           a first record delivered 0.5-1 s after ``produce`` (librdkafka 2.16, a loopback
           broker, one start in five to two in three, more often on a loaded machine). An
           answer from a learned broker triggers the request on a connection that is up.
        2. The producer id is awaited (its state change, in the ``eos`` debug log), within
           :data:`_PID_WAIT_S`. A broker that has just started answers the first request
           "coordinator load in progress" while it takes a block of ids from the controller;
           librdkafka would retry 500 ms later, so each refusal asks for metadata again, which
           asks for the id again at once.

        A member's first record is its join, so this is most of a join's latency. Once done
        (e.g. by :class:`ControlClients` before the member joins), only the refusal check is
        left. If the producer id does not come within the bound, the first write waits for it
        as librdkafka's own retries allow; nothing else changes.
        """
        if not self._warm:
            deadline = time.monotonic() + timeout
            self._learn_metadata(deadline)
            pid_deadline = min(deadline, time.monotonic() + _PID_WAIT_S)
            while not self._pid.is_set() and self.failure is None and self._broken is None:
                left = pid_deadline - time.monotonic()
                if left <= 0:
                    break
                # serves the log lines that say where the producer id is, and raises a refusal
                # (nothing is written before the warm-up ends: no delivery callback runs here)
                self.service(min(left, 0.005))
                if self._pid_refused.is_set():
                    self._pid_refused.clear()
                    time.sleep(min(max(0.0, pid_deadline - time.monotonic()), _PID_RETRY_S))
                    self._learn_metadata(deadline)
            self._warm = True
        self.service(0)  # a refusal that came with the connection is raised here

    def warm_liveness(self, timeout: float = 5.0) -> None:
        """Learn the liveness topic's metadata before the first heartbeat (protocol version 2),
        so that it does not wait for a metadata round trip; a failure only leaves it to that."""
        if self.liveness is not None:
            try:
                self._producer.list_topics(self.liveness[0], timeout=timeout)
            except KafkaException as e:
                _log.debug("liveness_writer.warm_failed", error=str(e))

    def _learn_metadata(self, deadline: float) -> None:
        """Ask for the topic's metadata until a learned broker (not bootstrap) answers."""
        while True:
            try:
                md = self._producer.list_topics(
                    self.topic, timeout=max(0.001, deadline - time.monotonic())
                )
            except KafkaException as e:
                raise BrokerError(f"cannot reach the control topic {self.topic!r}: {e}") from e
            if md.orig_broker_id >= 0 or time.monotonic() >= deadline:
                return
            # The learned broker's connection is not up yet (after a broker restart it may take
            # a reconnect backoff): ask again shortly, not in a tight loop.
            time.sleep(min(_PID_RETRY_S, max(0.0, deadline - time.monotonic())))

    def _refused(self, err: KafkaError) -> BrokerError:
        return BrokerError(
            f"cannot write to control topic {self.topic!r}: {err.str()}; the principal needs "
            f"WRITE on topic {self.topic} (with WRITE on some topic, the idempotent producer "
            "needs no cluster ACL)"
        )

    def write(
        self,
        key: bytes,
        value: bytes | None,
        on_delivery: DeliveryCallback,
        service: bool = True,
    ) -> None:
        """Queue one record; ``on_delivery(error, offset)`` runs from :meth:`service`.

        ``service=False`` only queues (thread-safe): callbacks then run in the owner's next
        :meth:`service`, on the owner's thread.
        """

        def report(err: KafkaError | None, msg: Message | None) -> None:
            off = msg.offset() if msg is not None and err is None else None
            on_delivery(err, int(off) if off is not None else -1)

        self._produce(self.topic, self.partition, key, value, report, service)

    def write_liveness(
        self,
        key: bytes,
        value: bytes | None,
        on_delivery: LivenessCallback,
        service: bool = True,
    ) -> None:
        """Protocol version 2: queue one record for the group's liveness log (:attr:`liveness`),
        through the same producer (records keep their order per partition, which is all either
        log needs); ``on_delivery(error, offset, timestamp)`` gets the broker's
        ``LogAppendTime`` of the record (-1 without one)."""
        if self.liveness is None:
            raise ValueError("the writer is not bound to a liveness log (bind_liveness)")
        topic, partition = self.liveness

        def report(err: KafkaError | None, msg: Message | None) -> None:
            off = msg.offset() if msg is not None and err is None else None
            ts = -1
            if off is not None and msg is not None:
                kind, stamp = msg.timestamp()
                ts = int(stamp) if kind == TIMESTAMP_LOG_APPEND_TIME else -1
            on_delivery(err, int(off) if off is not None else -1, ts)

        self._produce(topic, partition, key, value, report, service)

    def bind_liveness(self, topic: str, partition: int) -> None:
        """Name the group's partition of the liveness topic (protocol version 2)."""
        self.liveness = (topic, partition)

    def _produce(
        self,
        topic: str,
        partition: int,
        key: bytes,
        value: bytes | None,
        report: Callable[[KafkaError | None, Message | None], None],
        service: bool,
    ) -> None:
        producer: Producer  # the one this record went to (bound below, under the lock)
        unanswered = self._unanswered  # the current producer's (see renew)

        def done(err: KafkaError | None, msg: Message) -> None:
            if unanswered:  # (reports come in the order the records were queued)
                unanswered.popleft()
            if err is None:
                self._fatal_in_a_row = 0
            elif _denied(err) or (err.fatal() and producer is self._producer):
                self._fatal(err)  # (a replaced producer's fatal news is old news)
            report(err, msg)

        with self._lock:
            if self._closed:
                return  # the member is gone (a late release on the commit thread): nothing to say
            producer = self._producer
            try:
                try:
                    producer.produce(topic, key=key, value=value, partition=partition,
                                     on_delivery=done)  # fmt: skip
                except BufferError:
                    producer.poll(0.1)
                    producer.produce(topic, key=key, value=value, partition=partition,
                                     on_delivery=done)  # fmt: skip
                unanswered.append(time.monotonic())
            except KafkaException as e:
                try:
                    producer.poll(0)  # serve the error callback that says why
                except KafkaException as why:  # ... or be told by poll itself
                    if isinstance(why.args[0] if why.args else None, KafkaError):
                        self._fatal(why.args[0])
                if self.failure is not None:
                    raise self.failure from e
                err: Any = e.args[0] if e.args else None
                if not isinstance(err, KafkaError) or not err.fatal():
                    raise BrokerError(f"cannot write to the control topic: {e}") from e
                # The producer is fatal: this record fails like the ones it had queued; the
                # next service() replaces the producer (the next record supersedes this one).
                self._fatal(err)
                self._failed.append((report, err))
                if self.failure is not None:
                    raise self.failure from e
        if service:
            self.service(0)

    def service(self, timeout: float = 0.0) -> None:
        """Run delivery callbacks that are due; raise a refusal no retry can cure; replace a
        producer that hit any other fatal error."""
        try:
            self._producer.poll(timeout)
        except KafkaException as e:  # a fatal producer error, e.g. no idempotence PID
            err: Any = e.args[0] if e.args else None
            if isinstance(err, KafkaError):
                self._fatal(err)
            elif self.failure is None:
                raise BrokerError(f"control topic writer failed: {e}") from e
        if self.failure is not None:
            raise self.failure
        with self._lock:
            failed, self._failed = self._failed, []
        for report, err in failed:
            report(err, None)
        if self._broken is not None:
            self._replace()

    def waiting_since(self) -> float | None:
        """When (monotonic s) the oldest record still without a delivery report was queued."""
        unanswered = self._unanswered
        return unanswered[0] if unanswered else None

    def renew(self) -> None:
        """Swap in a fresh producer for one that stopped delivering; its records fail to their
        callbacks (the member's next record supersedes a member record; a failed assignment is
        planned again), and a copy that still lands late is refused by replay as stale.

        For an idempotent producer stuck after a broker restart: librdkafka (2.x) can leave
        the partition in its "drain" state for good, waiting for requests it never sees
        answered, and it asks the broker nothing more (seen in the chaos runs). Unlike a fatal
        error's replacement (:meth:`_replace`), this does not count towards failing the
        writer: the producer did nothing wrong that a new one would repeat."""
        with self._lock:
            if self._closed:
                return
            old = self._swap()
            self.renewals += 1
        self._drop(old)

    def _replace(self) -> None:
        """Swap the fatal producer for a new one; its queued records fail to their callbacks."""
        with self._lock:
            err = self._broken
            assert err is not None
            self._fatal_in_a_row += 1
            if self._fatal_in_a_row > _MAX_REPLACEMENTS:
                self.failure = BrokerError(
                    f"control topic writer failed: {_MAX_REPLACEMENTS} producers in a row hit a "
                    f"fatal error before delivering a record; the last: {err.str()}"
                )
                raise self.failure
            _log.warning("control_writer.replaced", topic=self.topic, error=err.str(),
                         code=err.name(), in_a_row=self._fatal_in_a_row)  # fmt: skip
            old = self._swap()
            self.replacements += 1
        self._drop(old)
        if self._fatal_in_a_row > 1:
            time.sleep(min(1.0, 0.1 * 2**self._fatal_in_a_row))  # a fatal loop: back off

    def _swap(self) -> Producer:
        """A fresh producer in place of the current one, which is returned (under the lock)."""
        old = self._producer
        self._producer = self._new_producer()
        self._unanswered = deque()
        self._broken = None
        return old

    @staticmethod
    def _drop(old: Producer) -> None:
        """Fail a swapped-out producer's records to their callbacks. Outside the lock: the
        callbacks (they run here, on the owner's thread) may queue new records on the new
        producer."""
        old.purge(in_queue=True, in_flight=True, blocking=False)
        old.flush(2.0)  # serves every purged record's callback (an assignment's unblocks planning)

    def flush(self, timeout: float) -> int:
        """Wait for queued records; returns how many are still in flight."""
        if self._closed:
            return 0
        remaining: Any = self._producer.flush(timeout)
        return int(remaining)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """New SASL credentials for the current producer (a replacement producer takes them
        from the settings, which ``GroupConsumer.set_sasl_credentials`` updates)."""
        self._producer.set_sasl_credentials(username, password)

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued within ``timeout``, drop the rest, destroy the producer."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        producer = self._producer
        if producer.flush(timeout):
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer.flush(1.0)  # serves the purged records' callbacks
        producer.close()


class ControlClients:
    """The reader and writer of one member's control partition: opened together, warmed in
    the background, closed together.

    ``GroupConsumer()`` opens them first, so their connections, metadata and producer id are
    ready by the time the app subscribes (the warm-up is most of a cold join's latency; see
    :meth:`ControlWriter.warm`), and hands them to the member's control loop, which owns them
    from then on. It opens them before it knows the group's partition of the control topic
    (``partition`` ``None``), so the warm-up runs while the admin client connects and checks
    the topic; :meth:`bind` then names the partition, before any read or write. A warm-up that
    fails leaves its client cold, and the control loop's own first use tries again and reports
    what it finds, as before.
    """

    def __init__(self, cfg: GroupConfig, topic: str, partition: int | None = None) -> None:
        self._cfg = cfg
        self.partition = -1 if partition is None else partition
        #: protocol version 2: (topic, partition) of the group's liveness log (bind_liveness)
        self.liveness: tuple[str, int] | None = None
        #: protocol version 2: a reader of the liveness log for the catch-up, until taken, and
        #: its warm-up
        self._snapshot_reader: ControlReader | None = None
        self._snapshot_warming: threading.Thread | None = None
        self.reader = ControlReader(cfg, topic, self.partition)
        try:
            self.writer = ControlWriter(cfg, topic, self.partition)
        except BaseException:
            self.reader.close()
            raise
        self._warming = [
            threading.Thread(target=self._warm, args=(w,), name=f"groupkit-warm-{n}", daemon=True)
            for n, w in (("reader", self.reader.warm), ("writer", self.writer.warm))
        ]
        for t in self._warming:
            t.start()
        if cfg.protocol_version == 2:  # (its partition, too, is named by bind_liveness)
            self._open_snapshot_reader(cfg.liveness_topic, self.partition)

    @staticmethod
    def _warm(warm: Callable[[float], None]) -> None:
        try:
            warm(_BACKGROUND_WARM_S)
        except Exception as e:  # the control loop's first use retries and reports it
            _log.debug("control_client.warm_failed", error=str(e))

    def bind(self, partition: int) -> None:
        """Name the group's partition of the control topic (the warm-up needs none)."""
        self.partition = self.reader.partition = self.writer.partition = partition

    def bind_liveness(self, topic: str, partition: int) -> None:
        """Protocol version 2: name the group's partition of the liveness topic, which the
        writer also writes to (heartbeats, snapshots); readers of it are the judge's
        (``LivenessIO``)."""
        self.liveness = (topic, partition)
        self.writer.bind_liveness(topic, partition)
        reader = self._snapshot_reader
        if reader is not None and reader.topic == topic:
            reader.partition = partition
            return
        if reader is not None:  # (opened for another topic: never used, so closed here)
            self.take_snapshot_reader()
            reader.close()
        self._open_snapshot_reader(topic, partition)

    def _open_snapshot_reader(self, topic: str, partition: int) -> None:
        """The catch-up reads the group's newest snapshot on the liveness log first. A fresh
        client's first request waits for its connection and metadata (~65 ms on a loopback
        broker, more than the rest of the catch-up): it is opened and warmed with the others."""
        reader = ControlReader(self._cfg, topic, partition, "liveness-reader")
        self._snapshot_reader = reader
        self._snapshot_warming = threading.Thread(
            target=self._warm, args=(reader.warm,), name="groupkit-warm-snapshots", daemon=True
        )
        self._snapshot_warming.start()

    def take_snapshot_reader(self) -> ControlReader | None:
        """The liveness log's reader :meth:`bind_liveness` opened, warmed, for the caller to
        close; ``None`` once taken (or for protocol version 1)."""
        if self._snapshot_warming is not None:  # (a handle is never used under its warm-up)
            self._snapshot_warming.join()
        reader, self._snapshot_reader = self._snapshot_reader, None
        return reader

    def wait_warm(self, writer: bool = True) -> None:
        """Wait for the warm-up (bounded by its requests' timeouts): the reader's, and the
        writer's unless ``writer`` is false."""
        for t in self._warming if writer else self._warming[:1]:
            t.join()

    def set_sasl_credentials(self, username: str, password: str) -> None:
        self.reader.set_sasl_credentials(username, password)
        self.writer.set_sasl_credentials(username, password)

    def close(self, flush_timeout: float = 5.0) -> None:
        """Close both clients (after the warm-up: a handle is never closed under a request)."""
        self.wait_warm()
        try:
            self.writer.close(flush_timeout)
        finally:
            snapshots = self.take_snapshot_reader()
            if snapshots is not None:
                snapshots.close()
            self.reader.close()
