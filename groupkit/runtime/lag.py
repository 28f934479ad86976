"""Per-partition lag of a group, as lag-aware assignors, the metrics and the telemetry need it.

:func:`read_offsets` is the one place that reads it (end, committed and, where needed, log
start offsets); the others call it.

Lag = end offset − committed offset. A partition with no committed offset lags by what a
consumer would read from where ``auto.offset.reset`` puts it: nothing for ``latest``, the
whole retained log (end − beginning) for ``earliest`` (KIP-169's rule).

Time lag (:class:`TimeLagReader`) is how old the oldest unconsumed record is: now minus the
timestamp of the first record at or after the committed offset (the log start without a commit,
under ``earliest``), in seconds, as newer Kafka lag exporters define it.

- A partition whose lag is 0 has time lag 0: nothing is unconsumed.
- The timestamp is the record's own, CreateTime or LogAppendTime as the topic's
  ``message.timestamp.type`` says. A record without one (-1), or whose producer-set CreateTime
  is later than now, gives no time lag.
- An empty partition (nothing ever written), or one whose unconsumed record cannot be read or
  dated, has an unknown time lag: ``None``, never a made-up number.

Two ways to date that record, as the lag exporters do:

1. Read it: a short-lived consumer assigned at the committed offsets fetches one record of each
   partition (bounded by a timeout). A record's timestamp never changes, so the reader caches
   it per (partition, offset): a partition costs one read per move of its committed offset.
2. Interpolate (kafka-lag-exporter's way): every read of the end offsets is kept as an
   (end offset, wall time) sample; the record at offset ``c`` was appended after the last time
   the end was seen at or below ``c`` and before the first time it was seen above it, so its
   time is interpolated linearly in between. It dates the append, not the CreateTime, no
   finer than the samples are apart, and only offsets the samples cover: older ones stay
   unknown rather than extrapolated. Used where the read failed or was not asked for.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
)
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from groupkit.errors import BrokerError
from groupkit.runtime.admin import GroupkitAdmin
from groupkit.types import TopicPartition

# confluent-kafka leaves these two factories unannotated.
_EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]


def end_offsets(
    admin: AdminClient,
    partitions: Iterable[TopicPartition],
    earliest: bool = False,
    timeout: float = 10.0,
) -> dict[TopicPartition, int]:
    """High watermarks (or log start offsets with ``earliest``) of ``partitions``."""
    spec = _EARLIEST if earliest else _LATEST
    request = {KTopicPartition(tp.topic, tp.partition): spec for tp in partitions}
    if not request:
        return {}
    out: dict[TopicPartition, int] = {}
    try:
        futures = admin.list_offsets(request, request_timeout=timeout)
        for ktp, fut in futures.items():
            out[TopicPartition(ktp.topic, ktp.partition)] = int(fut.result(timeout=timeout).offset)
    except KafkaException as e:
        raise BrokerError(f"could not list offsets: {e}") from e
    return out


def committed_offsets(
    admin: AdminClient,
    group_id: str,
    partitions: Iterable[TopicPartition],
    timeout: float = 10.0,
    reader: CommittedReader | None = None,
) -> dict[TopicPartition, int | None]:
    """The group's committed offsets; ``None`` where nothing is committed.

    With a :class:`~groupkit.runtime.admin.GroupkitAdmin` (what ``GroupConsumer`` and
    ``describe_group`` use) the offsets are read by a consumer of the group that joins nothing,
    not by ``AdminClient.list_consumer_group_offsets``: librdkafka (2.16 and earlier,
    librdkafka#5040) crashes the whole process with SIGSEGV when an admin client's OffsetFetch
    is answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, as on a cluster whose group
    coordinator is not loaded yet or has just moved (a broker restart). That consumer is
    ``reader``'s long-lived one where the caller keeps one (a member reading its lag again and
    again), else a short-lived one.
    """
    tps = [KTopicPartition(tp.topic, tp.partition) for tp in partitions]
    if not tps:
        return {}
    if reader is not None:
        return reader.committed(tps, timeout)
    if isinstance(admin, GroupkitAdmin):
        return _committed_by_consumer(admin.settings, group_id, tps, timeout)
    try:
        futures = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id, tps)], request_timeout=timeout
        )
        result = futures[group_id].result(timeout=timeout)
    except KafkaException as e:
        raise BrokerError(f"could not read committed offsets of group {group_id!r}: {e}") from e
    out: dict[TopicPartition, int | None] = {}
    for ktp in result.topic_partitions:
        off = int(ktp.offset)
        out[TopicPartition(ktp.topic, ktp.partition)] = off if off >= 0 else None
    return out


def _offsets_consumer(settings: Mapping[str, object], group_id: str) -> Consumer:
    """A consumer of ``group_id`` that only ever reads its committed offsets: it joins nothing
    (never subscribes) and commits nothing."""
    conf = {k: v for k, v in settings.items() if k != "error_cb"}
    try:
        return Consumer({**conf, "group.id": group_id, "enable.auto.commit": False, "log_level": 0})
    except KafkaException as e:
        raise BrokerError(f"could not read committed offsets of group {group_id!r}: {e}") from e


def _committed_by_consumer(
    settings: Mapping[str, object], group_id: str, tps: list[KTopicPartition], timeout: float
) -> dict[TopicPartition, int | None]:
    consumer = _offsets_consumer(settings, group_id)
    try:
        return _committed(consumer, group_id, tps, timeout)
    finally:
        consumer.close()


def _committed(
    consumer: Consumer, group_id: str, tps: list[KTopicPartition], timeout: float
) -> dict[TopicPartition, int | None]:
    try:
        result = consumer.committed(tps, timeout=timeout)
    except KafkaException as e:
        raise BrokerError(f"could not read committed offsets of group {group_id!r}: {e}") from e
    out: dict[TopicPartition, int | None] = {}
    for ktp in result:
        if ktp.error is not None:
            raise BrokerError(
                f"could not read committed offsets of group {group_id!r}: {ktp.error}"
            )
        off = int(ktp.offset)
        out[TopicPartition(ktp.topic, ktp.partition)] = off if off >= 0 else None
    return out


class CommittedReader:
    """Reads a group's committed offsets, again and again, through one long-lived consumer of
    the group that joins nothing (:func:`committed_offsets` says why a consumer): a member's
    status sampler and metrics scrapes ask every few seconds, and a consumer opened per read
    costs a client's start (threads, connections, a coordinator lookup) each time.

    The consumer is opened at the first read and closed by :meth:`close`. confluent-kafka
    admits one thread at a time into a ``Consumer``, so reads from several threads take turns;
    one that cannot get its turn within its timeout fails as the brokers' silence would.
    :meth:`close` never waits for a read: a read in progress when it is called (a broker that
    does not answer may hold one for its whole timeout) closes the consumer as it ends.
    """

    def __init__(self, settings: Mapping[str, object], group_id: str) -> None:
        self._settings = dict(settings)
        self.group_id = group_id
        #: whose turn it is to read (held for a whole read)
        self._turn = threading.Lock()
        #: guards the three below (held for moments)
        self._state = threading.Lock()
        self._consumer: Consumer | None = None
        self._reading = False
        self._closed = False

    def committed(
        self, tps: list[KTopicPartition], timeout: float = 10.0
    ) -> dict[TopicPartition, int | None]:
        """The committed offsets of ``tps`` (``None`` where nothing is committed); raises
        :class:`~groupkit.errors.BrokerError` when the brokers do not answer, or once closed."""
        if not self._turn.acquire(timeout=timeout):
            raise BrokerError(
                f"could not read committed offsets of group {self.group_id!r}: another read "
                f"held the reader for {timeout:g} s"
            )
        try:
            with self._state:
                if self._closed:
                    raise BrokerError(
                        f"the committed offsets reader of {self.group_id!r} is closed"
                    )
                self._reading = True
            consumer: Consumer | None = None
            try:
                consumer = self._consumer or _offsets_consumer(self._settings, self.group_id)
                return _committed(consumer, self.group_id, tps, timeout)
            finally:
                with self._state:
                    self._reading = False
                    keep = not self._closed
                    self._consumer = consumer if keep else None
                if not keep and consumer is not None:  # closed while reading: closed here
                    consumer.close()
        finally:
            self._turn.release()

    def close(self) -> None:
        """Close the consumer now, or as the read in progress ends; later reads raise."""
        with self._state:
            self._closed = True
            if self._reading:
                return
            consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()


def compute_lag(
    end: int, committed: int | None, beginning: int | None, auto_offset_reset: str
) -> int:
    """Lag of one partition; see the module docstring for the rule without a commit."""
    if committed is None:
        if auto_offset_reset == "latest":
            return 0
        return max(0, end - (beginning or 0))
    return max(0, end - committed)


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    """End and committed offsets of some partitions of a group, and the lag they make."""

    #: high watermarks
    end: Mapping[TopicPartition, int]
    #: the group's committed offsets; ``None`` where nothing is committed
    committed: Mapping[TopicPartition, int | None]
    #: :func:`compute_lag` of every partition asked (an end the broker did not give counts 0)
    lag: Mapping[TopicPartition, int]
    #: log start offsets of the partitions without a commit (read unless ``latest``)
    beginning: Mapping[TopicPartition, int] = field(default_factory=dict)

    def first_unconsumed(self, tp: TopicPartition) -> int | None:
        """Offset of the oldest record the group has not consumed in ``tp``: its committed
        offset, else the log start (``None`` when neither is known)."""
        c = self.committed.get(tp)
        return c if c is not None else self.beginning.get(tp)


def read_offsets(
    admin: AdminClient,
    group_id: str,
    partitions: Iterable[TopicPartition],
    auto_offset_reset: str = "latest",
    timeout: float = 10.0,
    reader: CommittedReader | None = None,
) -> GroupOffsets:
    """The one reader of a group's lag: end offsets, committed offsets (through ``reader``
    where the caller keeps one: :func:`committed_offsets`) and, for partitions without a commit
    when ``auto_offset_reset`` is not ``latest``, the log start offsets.

    Used by the lag-aware assignors (:func:`fetch_lags`), the metrics and the telemetry.
    Raises :class:`~groupkit.errors.BrokerError` when the brokers do not answer.
    """
    parts = sorted(set(partitions))
    ends = end_offsets(admin, parts, timeout=timeout)
    committed = committed_offsets(admin, group_id, parts, timeout=timeout, reader=reader)
    missing = [tp for tp in parts if committed.get(tp) is None]
    beginnings = (
        end_offsets(admin, missing, earliest=True, timeout=timeout)
        if missing and auto_offset_reset != "latest"
        else {}
    )
    lag = {
        tp: compute_lag(ends.get(tp, 0), committed.get(tp), beginnings.get(tp), auto_offset_reset)
        for tp in parts
    }
    return GroupOffsets(ends, {tp: committed.get(tp) for tp in parts}, lag, beginnings)


def fetch_lags(
    admin: AdminClient,
    group_id: str,
    partitions: Iterable[TopicPartition],
    auto_offset_reset: str = "latest",
    timeout: float = 10.0,
) -> dict[TopicPartition, int]:
    """Lag of every partition in ``partitions`` for ``group_id``."""
    return dict(read_offsets(admin, group_id, partitions, auto_offset_reset, timeout).lag)


# --------------------------------------------------------------------------- time lag

#: how long a direct read of the unconsumed records may take before interpolation answers
TIME_LAG_READ_TIMEOUT_S = 2.0
#: a scrape reads a partition's record again at most this often, where interpolation is
#: trusted for it (:class:`TimeLagReader`); interpolates in between
TIME_LAG_REREAD_S = 5.0
#: interpolation is trusted for a partition once it dated a record read there this closely
TIME_LAG_TRUST_MS = 1000
#: (end offset, time) samples kept per partition for interpolation
TIME_LAG_SAMPLES = 64


def record_timestamps(
    settings: Mapping[str, Any],
    offsets: Mapping[TopicPartition, int],
    timeout: float = TIME_LAG_READ_TIMEOUT_S,
) -> dict[TopicPartition, int | None]:
    """Timestamp (ms) of the first record at or after each offset, read by a short-lived
    consumer (``settings``: the connection, as ``GroupConfig.client_config`` gives it) that
    joins no group and commits nothing.

    A partition read has its timestamp, or ``None`` when the record carries none; a partition
    with no record there yet, or none read within ``timeout``, is absent. Each partition is
    paused once its record is in, so the read costs about one fetch per partition.
    """
    if not offsets:
        return {}
    conf = {k: v for k, v in settings.items() if k != "error_cb"}
    try:
        consumer = Consumer(
            {
                **conf,
                "group.id": "groupkit-timelag",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                # an offset below the log start: the oldest record retained is the oldest unread
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
                # Fetch as little as the broker allows: it still returns each partition's first
                # batch whole (KIP-74), and one record of it is all that is wanted.
                "queued.min.messages": 1,
                "max.partition.fetch.bytes": 1024,
                "log_level": 0,
            }
        )
    except KafkaException as e:
        raise BrokerError(f"could not read record timestamps: {e}") from e
    out: dict[TopicPartition, int | None] = {}
    pending = set(offsets)
    try:
        consumer.assign([KTopicPartition(tp.topic, tp.partition, o) for tp, o in offsets.items()])
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for msg in consumer.consume(len(pending), min(left, 0.2)):
                tp = TopicPartition(msg.topic() or "", msg.partition() or 0)
                if tp not in pending:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(tp)  # nothing at or after the offset (yet)
                    continue
                kind, ts = msg.timestamp()
                out[tp] = ts if kind != TIMESTAMP_NOT_AVAILABLE and ts >= 0 else None
                pending.discard(tp)
                consumer.pause([KTopicPartition(tp.topic, tp.partition)])
    except KafkaException as e:
        raise BrokerError(f"could not read record timestamps: {e}") from e
    finally:
        consumer.close()
    return out


def time_lag_of(lag: int, end: int, ts_ms: int | None, now_ms: int) -> float | None:
    """Time lag in seconds (to the millisecond) of a partition whose first unconsumed record
    has timestamp ``ts_ms``; ``None`` when unknown (see the module docstring)."""
    if end <= 0:
        return None  # nothing ever written: no record to date
    if lag == 0:
        return 0.0
    if ts_ms is None or ts_ms < 0 or ts_ms > now_ms:
        return None
    return (now_ms - ts_ms) / 1000


class _EndSamples:
    """One partition's (end offset, first seen, last seen) samples, oldest first (wall ms)."""

    __slots__ = ("points",)

    def __init__(self) -> None:
        self.points: deque[list[int]] = deque(maxlen=TIME_LAG_SAMPLES)

    def add(self, end: int, now_ms: int) -> None:
        if self.points and self.points[-1][0] == end:
            self.points[-1][2] = now_ms
        elif not self.points or end > self.points[-1][0]:
            self.points.append([end, now_ms, now_ms])
        else:  # the log was truncated or recreated: the old points date nothing any more
            self.points.clear()
            self.points.append([end, now_ms, now_ms])

    def time_of(self, offset: int) -> int | None:
        """Interpolated append time (ms) of the record at ``offset``, if the samples cover it."""
        pts = self.points
        for (o1, _f1, last1), (o2, first2, _l2) in zip(pts, list(pts)[1:], strict=False):
            if o1 <= offset < o2:
                return round(last1 + (offset - o1 + 1) / (o2 - o1) * (first2 - last1))
        return None


class TimeLagReader:
    """Time lag of a group's partitions, from what :func:`read_offsets` returned.

    Keeps, across calls, the timestamp of each partition's first unconsumed record (one read
    per move of its committed offset) and the (end offset, time) samples that interpolation
    needs. With ``reread_s``, a partition read less than that long ago is interpolated instead
    of read again, so a caller asked often (a scrape) pays one read per partition per
    ``reread_s`` at most. Only where interpolation is trusted, though: where the samples cover
    the offset, and the partition's last read record was dated by interpolation within
    :data:`TIME_LAG_TRUST_MS` of its own timestamp. A producer that sets CreateTimes far from
    the append time (a mirror, a replay) never earns that trust, and is always read. Safe to
    call from several threads; a call reading records holds the others.
    """

    def __init__(
        self,
        settings: Mapping[str, Any],
        read_timeout: float = TIME_LAG_READ_TIMEOUT_S,
        reread_s: float = 0.0,
    ) -> None:
        self._settings = dict(settings)
        self._timeout = read_timeout
        self._reread_s = reread_s
        self._lock = threading.Lock()
        #: partition -> when it was last read (monotonic s)
        self._read_at: dict[TopicPartition, float] = {}
        #: partitions whose last read record interpolation dated within TIME_LAG_TRUST_MS
        self._trusted: set[TopicPartition] = set()
        #: partition -> (offset, timestamp of the first record at or after it)
        self._dated: dict[TopicPartition, tuple[int, int | None]] = {}
        self._samples: dict[TopicPartition, _EndSamples] = {}

    def time_lag(
        self, offsets: GroupOffsets, read: bool = True, now_ms: int | None = None
    ) -> dict[TopicPartition, float | None]:
        """Time lag (s) of every partition of ``offsets``; ``None`` where it is unknown.

        With ``read``, partitions whose first unconsumed record is not dated yet are read
        (:func:`record_timestamps`); what is not read (or fails to be) is interpolated.
        """
        with self._lock:
            now = int(time.time() * 1000) if now_ms is None else now_ms
            for tp, end in offsets.end.items():
                self._samples.setdefault(tp, _EndSamples()).add(end, now)
            firsts = {tp: offsets.first_unconsumed(tp) for tp in offsets.lag}
            todo = {
                tp: o
                for tp, o in firsts.items()
                if o is not None
                and offsets.lag[tp] > 0
                and offsets.end.get(tp, 0) > 0
                and self._dated.get(tp, (-1, None))[0] != o
            }
            if self._reread_s > 0:
                mono = time.monotonic()
                todo = {
                    tp: o
                    for tp, o in todo.items()
                    if tp not in self._trusted
                    or mono - self._read_at.get(tp, -self._reread_s) >= self._reread_s
                    or self._samples[tp].time_of(o) is None
                }
                if read:
                    self._read_at.update(dict.fromkeys(todo, mono))
            if read and todo:
                try:
                    got = record_timestamps(self._settings, todo, self._timeout)
                except BrokerError:
                    got = {}  # interpolated below
                for tp, read_ts in got.items():
                    self._dated[tp] = (todo[tp], read_ts)
                    guess = self._samples[tp].time_of(todo[tp])
                    if (read_ts is not None and guess is not None
                            and abs(guess - read_ts) <= TIME_LAG_TRUST_MS):  # fmt: skip
                        self._trusted.add(tp)
                    else:
                        self._trusted.discard(tp)
            out: dict[TopicPartition, float | None] = {}
            for tp, lag in offsets.lag.items():
                first = firsts[tp]
                dated = self._dated.get(tp)
                ts: int | None = None
                if dated is not None and dated[0] == first:
                    ts = dated[1]
                elif first is not None and tp in self._samples:
                    ts = self._samples[tp].time_of(first)
                out[tp] = time_lag_of(lag, offsets.end.get(tp, 0), ts, now)
            return out

    def forget(self, keep: Iterable[TopicPartition]) -> None:
        """Drop what is kept of partitions not in ``keep`` (no longer owned)."""
        kept = set(keep)
        with self._lock:
            self._dated = {tp: v for tp, v in self._dated.items() if tp in kept}
            self._samples = {tp: v for tp, v in self._samples.items() if tp in kept}
            self._read_at = {tp: v for tp, v in self._read_at.items() if tp in kept}
            self._trusted &= kept
