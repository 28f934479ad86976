"""Lag telemetry: the leader publishes what its group lives through, for ``groupkit replay``.

With ``groupkit.telemetry.enable=true`` every member carries a :class:`TelemetryPublisher`
(a :class:`~groupkit.runtime.hooks.GroupObserver`), but only the member that leads publishes,
to the non-compacted topic ``groupkit.telemetry.topic`` (default ``__groupkit_telemetry``,
created on first use with ``cleanup.policy=delete``). Records are keyed by group id, so one
group's records keep their order on one partition.

Two record types, both JSON objects with ``"schema": "groupkit.telemetry"``, an integer
``version`` (this module writes :data:`SCHEMA_VERSION`; readers accept every version up to it
and reject newer ones) and ``type``:

``lag_snapshot`` — every ``groupkit.telemetry.interval.ms`` (default 10 s)::

    {"schema": "groupkit.telemetry", "version": 2, "type": "lag_snapshot",
     "group": "orders", "ts_ms": 1767225600000,     # leader's wall clock, ms since epoch
     "leader": "m-1", "generation": 7, "protocol": "cooperative", "assignor": "sticky",
     "interval_ms": 10012, "load_interval_ms": 30000,
     "members": {"m-1": {"topics": ["t0"], "rate": 812.5, "processed": 8135,
                         "capacity": null, "rack": null}},
     "topics": {"t0": {"end": [120, 80], "committed": [100, null], "lag": [20, 0],
                       "owner": ["m-1", null], "time_lag": [4.25, 0.0],
                       "status": ["WARN", "OK"]}}}

- ``members``: the live members, their subscriptions, configured ``capacity``
  (``groupkit.capacity``, records/s) and ``rack``, and ``rate``: records/s this member
  *committed* over the last interval. The leader approximates it from committed-offset deltas
  between two snapshots, summed over the partitions the member owned at both (``null`` when it
  owned none of them, e.g. just joined, or on the first snapshot of a leader). A member that
  keeps up shows the produce rate of its partitions, so ``rate`` is a lower bound of what it
  could consume, not its capacity. (The alternative, each member reporting its own rate in
  its control record's ``client`` info, would put a metric into the group's replicated state.)
  ``processed`` (version 2): the records behind ``rate``, counted exactly: what the member
  committed since the previous snapshot on the partitions it owned at both (``null`` as
  ``rate`` is). With ``interval_ms`` it is what a model of the group's processing is fitted to
  (``groupkit replay``'s counterfactual): busy intervals show each member's capacity.
- ``interval_ms`` (version 2): ms since this leadership's previous snapshot (``null`` on its
  first): the interval ``rate`` and ``processed`` cover. ``load_interval_ms`` (version 2): the
  leader's ``groupkit.load.rebalance.interval.ms`` (0: it does not follow the load), so a
  replay knows which rebalancing policy the group really ran.
- ``topics``: per topic, lists indexed by partition number: ``end`` (high watermark),
  ``committed`` (``null``: nothing committed), ``lag`` (read by :func:`~groupkit.runtime.lag.
  read_offsets`, so ``auto.offset.reset`` decides the lag of uncommitted partitions),
  ``owner`` (the live member whose record claims it, ``null`` while it is unowned) and
  ``time_lag``: seconds since the timestamp of the first unconsumed record (runtime/lag.py's
  :class:`~groupkit.runtime.lag.TimeLagReader`, read directly once per commit move), 0 without
  lag, ``null`` where unknown (an empty partition, an undated record). ``time_lag`` is optional:
  records written before it existed have none, and readers that predate it ignore it, so it
  needs no new version.
- ``status``, optional in the same way: Burrow's status of each partition (``OK``, ``WARN``,
  ``STOP``, ``STALL``, ``REWIND``: groupkit/lagstatus.py), as the leader judges it over its
  last :data:`~groupkit.runtime.lag_status.LAG_STATUS_WINDOW` snapshots of this leadership
  (:func:`~groupkit.runtime.lag_status.sampled_status`: it sees every partition, owned or
  not, but committed offsets only, never a commit, so an offset that does not move while
  the partition lags is STOP, and STALL never shows). A new leader starts a fresh window.

Version 1 records (no ``processed``, ``interval_ms``, ``load_interval_ms``) still decode,
with those ``None``.

``rebalance`` — one per rebalance the leader finished
(:class:`~groupkit.protocol.node.RebalanceSummary`)::

    {"schema": "groupkit.telemetry", "version": 2, "type": "rebalance", "group": "orders",
     "ts_ms": ..., "leader": "m-1", "reason": "membership_changed", "protocol": "cooperative",
     "assignor": "sticky", "first_generation": 6, "generation": 7, "generations": 2,
     "moved": 4, "revoked": 4, "duration_ms": 35.2, "outcome": "completed"}

Publishing never blocks the control loop: ``turn`` only copies what it needs from the group
state and hands it to one worker thread, which fetches offsets, produces and flushes. If the
worker is still busy when the next snapshot is due, that snapshot is skipped and counted.
The worker exits when idle for a while and is started again on demand, so a consumer that
stops leading (or is closed) leaves no thread behind for long.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from groupkit.errors import BrokerError, MalformedTelemetry
from groupkit.lagstatus import PartitionStatus
from groupkit.log import get_logger
from groupkit.protocol import GroupState
from groupkit.protocol.node import RebalanceSummary
from groupkit.runtime.admin import create_topic
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.hooks import GroupObserver
from groupkit.runtime.lag import GroupOffsets, TimeLagReader, read_offsets
from groupkit.runtime.lag_status import LAG_STATUS_WINDOW, sampled_status
from groupkit.types import TopicPartition

_log = get_logger("groupkit.telemetry")

SCHEMA = "groupkit.telemetry"
SCHEMA_VERSION = 2
LAG_SNAPSHOT = "lag_snapshot"
REBALANCE = "rebalance"
TYPES = (LAG_SNAPSHOT, REBALANCE)

#: records kept on the telemetry topic when groupkit creates it
RETENTION_MS = 7 * 24 * 3600 * 1000


# --------------------------------------------------------------------------- the schema


@dataclass(frozen=True, slots=True)
class MemberInfo:
    topics: tuple[str, ...]
    rate: float | None = None
    capacity: float | None = None
    rack: str | None = None
    #: records committed over the snapshot's interval (version 2; ``None``: not measured)
    processed: int | None = None


@dataclass(frozen=True, slots=True)
class TopicOffsets:
    """One topic of a snapshot; every list is indexed by partition number."""

    end: tuple[int, ...]
    committed: tuple[int | None, ...]
    lag: tuple[int, ...]
    owner: tuple[str | None, ...]
    #: seconds, ``None`` where unknown; the whole list is ``None`` in records without it
    time_lag: tuple[float | None, ...] | None = None
    #: Burrow's status of each partition (``None``: not judged); ``None`` in records without it
    status: tuple[PartitionStatus | None, ...] | None = None


@dataclass(frozen=True, slots=True)
class LagSnapshot:
    group: str
    ts_ms: int
    leader: str
    generation: int
    protocol: str
    assignor: str
    members: Mapping[str, MemberInfo]
    topics: Mapping[str, TopicOffsets]
    version: int = SCHEMA_VERSION
    #: ms since this leadership's previous snapshot (version 2; ``None``: first or unknown)
    interval_ms: int | None = None
    #: the leader's load re-plan interval (version 2; 0: off, ``None``: unknown)
    load_interval_ms: int | None = None

    def to_json(self) -> bytes:
        doc = {
            "schema": SCHEMA,
            "version": self.version,
            "type": LAG_SNAPSHOT,
            "group": self.group,
            "ts_ms": self.ts_ms,
            "leader": self.leader,
            "generation": self.generation,
            "protocol": self.protocol,
            "assignor": self.assignor,
            "interval_ms": self.interval_ms,
            "load_interval_ms": self.load_interval_ms,
            "members": {
                m: {
                    "topics": list(i.topics),
                    "rate": i.rate,
                    "processed": i.processed,
                    "capacity": i.capacity,
                    "rack": i.rack,
                }
                for m, i in sorted(self.members.items())
            },
            "topics": {
                t: {
                    "end": list(o.end),
                    "committed": list(o.committed),
                    "lag": list(o.lag),
                    "owner": list(o.owner),
                    **({} if o.time_lag is None else {"time_lag": list(o.time_lag)}),
                    **({} if o.status is None else {"status": [x and str(x) for x in o.status]}),
                }
                for t, o in sorted(self.topics.items())
            },
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @property
    def partitions_per_topic(self) -> dict[str, int]:
        return {t: len(o.end) for t, o in self.topics.items()}

    def lags(self) -> dict[TopicPartition, int]:
        return {
            TopicPartition(t, p): lag for t, o in self.topics.items() for p, lag in enumerate(o.lag)
        }

    def time_lags(self) -> dict[TopicPartition, float | None]:
        """Time lag (s) of every partition of topics that carry it (``None``: unknown)."""
        return {
            TopicPartition(t, p): s
            for t, o in self.topics.items()
            if o.time_lag is not None
            for p, s in enumerate(o.time_lag)
        }

    def statuses(self) -> dict[TopicPartition, PartitionStatus | None]:
        """Burrow's status of every partition of topics that carry it (``None``: not judged)."""
        return {
            TopicPartition(t, p): s
            for t, o in self.topics.items()
            if o.status is not None
            for p, s in enumerate(o.status)
        }

    def owners(self) -> dict[TopicPartition, str]:
        return {
            TopicPartition(t, p): m
            for t, o in self.topics.items()
            for p, m in enumerate(o.owner)
            if m is not None
        }


@dataclass(frozen=True, slots=True)
class RebalanceEvent:
    group: str
    ts_ms: int
    leader: str
    reason: str
    protocol: str
    assignor: str
    first_generation: int
    generation: int
    generations: int
    moved: int
    revoked: int
    duration_ms: float
    outcome: str
    version: int = SCHEMA_VERSION

    @classmethod
    def from_summary(cls, s: RebalanceSummary, ts_ms: int) -> RebalanceEvent:
        return cls(
            group=s.group,
            ts_ms=ts_ms,
            leader=s.leader,
            reason=s.reason,
            protocol=s.protocol,
            assignor=s.assignor,
            first_generation=s.first_generation,
            generation=s.generation,
            generations=s.generations,
            moved=s.moved,
            revoked=s.revoked,
            duration_ms=round(s.duration_s * 1000, 3),
            outcome=s.outcome,
        )

    def to_json(self) -> bytes:
        doc = {"schema": SCHEMA, "type": REBALANCE, **asdict(self)}
        return json.dumps(doc, separators=(",", ":")).encode()


Telemetry = LagSnapshot | RebalanceEvent


def _need(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    v = doc.get(key)
    if not isinstance(v, kind) or (isinstance(v, bool) and kind in (int, float, (int, float))):
        raise MalformedTelemetry("bad_field", f"{what}{key}: {type(v).__name__}")
    return v


def _opt_num(v: Any, what: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0:
        raise MalformedTelemetry("bad_field", f"{what}: {v!r}")
    return float(v)


def _opt_int(v: Any, what: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise MalformedTelemetry("bad_field", f"{what}: {v!r}")
    return v


def _int_list(v: Any, what: str, nullable: bool = False) -> tuple[Any, ...]:
    if not isinstance(v, list):
        raise MalformedTelemetry("bad_field", f"{what}: not a list")
    for x in v:
        if x is None and nullable:
            continue
        if isinstance(x, bool) or not isinstance(x, int) or x < 0:
            raise MalformedTelemetry("bad_field", f"{what}: {x!r}")
    return tuple(v)


def decode(raw: bytes | str | None) -> Telemetry:
    """Parse and validate one telemetry record; raise :class:`MalformedTelemetry` if it is not
    one (``reason`` in: ``empty``, ``not_json``, ``not_telemetry``, ``future_version``,
    ``unknown_type``, ``bad_field``, ``inconsistent``)."""
    if raw is None or len(raw) == 0:
        raise MalformedTelemetry("empty")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise MalformedTelemetry("not_json", str(e)[:80]) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise MalformedTelemetry("not_telemetry")
    version = _need(doc, "version", int, "")
    if version > SCHEMA_VERSION or version < 1:
        raise MalformedTelemetry("future_version", str(version))
    kind = doc.get("type")
    group = _need(doc, "group", str, "")
    ts = _need(doc, "ts_ms", int, "")
    if kind == REBALANCE:
        return RebalanceEvent(
            group=group,
            ts_ms=ts,
            leader=_need(doc, "leader", str, ""),
            reason=str(doc.get("reason", "")),
            protocol=_need(doc, "protocol", str, ""),
            assignor=_need(doc, "assignor", str, ""),
            first_generation=_need(doc, "first_generation", int, ""),
            generation=_need(doc, "generation", int, ""),
            generations=_need(doc, "generations", int, ""),
            moved=_need(doc, "moved", int, ""),
            revoked=_need(doc, "revoked", int, ""),
            duration_ms=float(_need(doc, "duration_ms", (int, float), "")),
            outcome=str(doc.get("outcome", "")),
            version=version,
        )
    if kind != LAG_SNAPSHOT:
        raise MalformedTelemetry("unknown_type", str(kind)[:40])
    members_doc = _need(doc, "members", dict, "")
    members: dict[str, MemberInfo] = {}
    for m, info in members_doc.items():
        if not isinstance(info, dict):
            raise MalformedTelemetry("bad_field", f"members.{m}")
        subscribed = _need(info, "topics", list, f"members.{m}.")
        if not all(isinstance(t, str) for t in subscribed):
            raise MalformedTelemetry("bad_field", f"members.{m}.topics")
        rack = info.get("rack")
        members[str(m)] = MemberInfo(
            topics=tuple(sorted(set(subscribed))),
            rate=_opt_num(info.get("rate"), f"members.{m}.rate"),
            capacity=_opt_num(info.get("capacity"), f"members.{m}.capacity"),
            rack=None if rack is None else str(rack),
            processed=_opt_int(info.get("processed"), f"members.{m}.processed"),
        )
    topics_doc = _need(doc, "topics", dict, "")
    topics: dict[str, TopicOffsets] = {}
    for t, o in topics_doc.items():
        if not isinstance(o, dict):
            raise MalformedTelemetry("bad_field", f"topics.{t}")
        end = _int_list(o.get("end"), f"topics.{t}.end")
        committed = _int_list(o.get("committed"), f"topics.{t}.committed", nullable=True)
        lag = _int_list(o.get("lag"), f"topics.{t}.lag")
        owner = o.get("owner")
        if not isinstance(owner, list) or not all(x is None or isinstance(x, str) for x in owner):
            raise MalformedTelemetry("bad_field", f"topics.{t}.owner")
        time_lag = o.get("time_lag")
        if time_lag is not None:
            if not isinstance(time_lag, list):
                raise MalformedTelemetry("bad_field", f"topics.{t}.time_lag: not a list")
            time_lag = tuple(_opt_num(x, f"topics.{t}.time_lag") for x in time_lag)
        status = o.get("status")
        if status is not None:
            if not isinstance(status, list) or not all(
                x is None or (isinstance(x, str) and x in PartitionStatus.__members__)
                for x in status
            ):
                raise MalformedTelemetry("bad_field", f"topics.{t}.status")
            status = tuple(None if x is None else PartitionStatus(x) for x in status)
            if len(status) != len(end):
                raise MalformedTelemetry("inconsistent", f"topics.{t}: list lengths differ")
        if not len(end) == len(committed) == len(lag) == len(owner):
            raise MalformedTelemetry("inconsistent", f"topics.{t}: list lengths differ")
        if time_lag is not None and len(time_lag) != len(end):
            raise MalformedTelemetry("inconsistent", f"topics.{t}: list lengths differ")
        if any(x is not None and x not in members for x in owner):
            raise MalformedTelemetry("inconsistent", f"topics.{t}: owner is not a member")
        topics[str(t)] = TopicOffsets(end, committed, lag, tuple(owner), time_lag, status)
    return LagSnapshot(
        group=group,
        ts_ms=ts,
        leader=_need(doc, "leader", str, ""),
        generation=_need(doc, "generation", int, ""),
        protocol=_need(doc, "protocol", str, ""),
        assignor=_need(doc, "assignor", str, ""),
        members=members,
        topics=topics,
        version=version,
        interval_ms=_opt_int(doc.get("interval_ms"), "interval_ms"),
        load_interval_ms=_opt_int(doc.get("load_interval_ms"), "load_interval_ms"),
    )


def member_processed(
    prev: Mapping[TopicPartition, tuple[str | None, int | None]],
    cur: Mapping[TopicPartition, tuple[str | None, int | None]],
) -> dict[str, int]:
    """Records each member committed between two snapshots of ``{partition: (owner,
    committed)}``, over the partitions it owned at both; members with none are absent."""
    out: dict[str, int] = {}
    for tp, (owner, c1) in cur.items():
        o0, c0 = prev.get(tp, (None, None))
        if owner is None or owner != o0:
            continue
        delta = max(0, c1 - c0) if c1 is not None and c0 is not None else 0
        out[owner] = out.get(owner, 0) + delta
    return out


def member_rates(
    prev: Mapping[TopicPartition, tuple[str | None, int | None]],
    cur: Mapping[TopicPartition, tuple[str | None, int | None]],
    seconds: float,
) -> dict[str, float]:
    """Records/s each member committed between two snapshots of ``{partition: (owner,
    committed)}``, over the partitions it owned at both; members with none are absent."""
    if seconds <= 0:
        return {}
    return {m: n / seconds for m, n in member_processed(prev, cur).items()}


# --------------------------------------------------------------------------- the publisher


@dataclass(frozen=True)
class _Capture:
    """What ``turn`` copies from the group state for the worker (no state is shared)."""

    group: str
    leader: str
    generation: int
    protocol: str
    assignor: str
    members: dict[str, MemberInfo]
    counts: dict[str, int]
    owners: dict[TopicPartition, str]
    epoch: int
    at: float  # wall clock (s) when the state was copied: the snapshot's time


@dataclass
class TelemetryStats:
    snapshots: int = 0
    rebalances: int = 0
    skipped: int = 0  # a snapshot came due while the worker was still busy
    errors: int = 0
    last_error: str = ""
    by_type: dict[str, int] = field(default_factory=dict)


class TelemetryPublisher(GroupObserver):
    """Publishes :class:`LagSnapshot` and :class:`RebalanceEvent` records while leading."""

    def __init__(
        self,
        cfg: GroupConfig,
        admin: AdminClient,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        #: the consumer's admin, borrowed until :meth:`close`
        self.admin: AdminClient | None = admin
        self.topic = cfg.telemetry_topic
        self.interval_ms = cfg.telemetry_interval_ms
        self.stats = TelemetryStats()
        self._clock = clock
        self._next_due = 0
        self._lock = threading.Lock()
        #: ``None`` wakes the worker to stop (see close)
        self._queue: queue.Queue[_Capture | RebalanceEvent | None] = queue.Queue(maxsize=64)
        self._closed = False
        self._thread: threading.Thread | None = None
        self._producer: Producer | None = None
        self._topic_ready = False
        # previous snapshot of this leadership: {partition: (owner, committed)}, time (s)
        self._prev: dict[TopicPartition, tuple[str | None, int | None]] = {}
        self._prev_at = 0.0
        self._prev_epoch = 0
        self._epoch = 0  # bumped whenever this member stops leading
        self._time_lag = TimeLagReader(cfg.client_config("timelag"))
        #: this leadership's last reads (wall ms, offsets), oldest first: the status window
        self._reads: deque[tuple[int, GroupOffsets]] = deque(maxlen=LAG_STATUS_WINDOW)

    # ---------------------------------------------------------------- hooks (control thread)

    def turn(self, state: GroupState, member_id: str, now_ms: int) -> None:
        if state.leader != member_id:
            if self._next_due:  # leadership lost: a later one starts without rates
                self._next_due = 0
                self._epoch += 1
            return
        a = state.assignment
        if a is None or now_ms < self._next_due:
            return
        self._next_due = now_ms + self.interval_ms
        live = state.live_members()
        capture = _Capture(
            group=state.group,
            leader=member_id,
            generation=a.generation,
            protocol=a.protocol,
            assignor=a.assignor,
            members={
                m: MemberInfo(tuple(ms.topics), None, ms.capacity, ms.rack)
                for m, ms in live.items()
            },
            counts=dict(a.partition_counts),
            owners={tp: m for m, ms in live.items() for tp in ms.claims},
            epoch=self._epoch,
            at=self._clock(),
        )
        if not self._submit(capture, drop_if_busy=True):
            self.stats.skipped += 1

    def rebalance_done(self, summary: RebalanceSummary) -> None:
        event = RebalanceEvent.from_summary(summary, int(self._clock() * 1000))
        if not self._submit(event, drop_if_busy=False):
            self.stats.skipped += 1

    # ---------------------------------------------------------------- the worker

    def _submit(self, item: _Capture | RebalanceEvent, drop_if_busy: bool) -> bool:
        with self._lock:
            if self._closed:
                return False
            if drop_if_busy and self._queue.unfinished_tasks > 0:
                return False
            try:
                self._queue.put_nowait(item)
            except queue.Full:
                return False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="groupkit-telemetry", daemon=True
                )
                self._thread.start()
        return True

    def _work(self) -> None:
        idle_s = max(5.0, 3 * self.interval_ms / 1000)
        while True:
            try:
                item = self._queue.get(timeout=idle_s)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        self._producer = None  # flushed after each record; let it go
                        return
                continue
            if item is None:  # close()
                self._queue.task_done()
                return
            try:
                if isinstance(item, RebalanceEvent):
                    self._publish(item.group, item.to_json(), REBALANCE)
                    self.stats.rebalances += 1
                else:
                    snap = self._snapshot(item)
                    self._publish(snap.group, snap.to_json(), LAG_SNAPSHOT)
                    self.stats.snapshots += 1
            except Exception as e:  # telemetry must never hurt the group
                self.stats.errors += 1
                self.stats.last_error = str(e)
                _log.warning("telemetry.failed", error=str(e), topic=self.topic)
            finally:
                self._queue.task_done()

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """New SASL credentials for the producer, if there is one yet (a later one takes them
        from the settings, which ``GroupConsumer.set_sasl_credentials`` updates)."""
        producer = self._producer
        if producer is not None:
            producer.set_sasl_credentials(username, password)

    def close(self, timeout: float = 10.0) -> None:
        """Stop publishing (what is queued is dropped, the record in hand finishes within
        ``timeout``) and let go of the producer and the borrowed admin, so that neither
        outlives the consumer, whose closed object may still hold this observer."""
        with self._lock:
            self._closed = True
            thread = self._thread
            while True:
                try:
                    self._queue.get_nowait()
                    self._queue.task_done()
                except queue.Empty:
                    break
            self._queue.put_nowait(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._lock:
            self._thread = None
            self._producer = None  # flushed after each record: the last reference goes
            self.admin = None

    def _admin(self) -> AdminClient:
        admin = self.admin
        if admin is None:
            raise BrokerError("telemetry publisher closed")
        return admin

    def _snapshot(self, c: _Capture) -> LagSnapshot:
        parts = [TopicPartition(t, p) for t, n in sorted(c.counts.items()) for p in range(n)]
        offsets = read_offsets(self._admin(), c.group, parts, self.cfg.lag_reset)
        ends, committed, lag = offsets.end, offsets.committed, offsets.lag
        self._time_lag.forget(parts)
        ages = self._time_lag.time_lag(offsets)
        now = c.at
        cur = {tp: (c.owners.get(tp), committed.get(tp)) for tp in parts}
        # Rates need two snapshots of the same leadership.
        same = self._prev and self._prev_epoch == c.epoch
        processed = member_processed(self._prev, cur) if same else {}
        seconds = now - self._prev_at
        rates = {m: n / seconds for m, n in processed.items()} if same and seconds > 0 else {}
        interval_ms = round(seconds * 1000) if same else None
        if not same:  # a new leadership judges from its own reads only
            self._reads.clear()
        self._reads.append((int(now * 1000), offsets))
        statuses = sampled_status(list(self._reads))
        self._prev, self._prev_at, self._prev_epoch = cur, now, c.epoch
        topics = {
            t: TopicOffsets(
                end=tuple(ends.get(TopicPartition(t, p), 0) for p in range(n)),
                committed=tuple(committed.get(TopicPartition(t, p)) for p in range(n)),
                lag=tuple(lag.get(TopicPartition(t, p), 0) for p in range(n)),
                owner=tuple(c.owners.get(TopicPartition(t, p)) for p in range(n)),
                time_lag=tuple(ages.get(TopicPartition(t, p)) for p in range(n)),
                status=tuple(statuses.get(TopicPartition(t, p)) for p in range(n)),
            )
            for t, n in sorted(c.counts.items())
        }
        members = {
            m: MemberInfo(
                i.topics,
                None if m not in rates else round(rates[m], 3),
                i.capacity,
                i.rack,
                processed.get(m) if m in rates else None,
            )
            for m, i in c.members.items()
        }
        return LagSnapshot(
            group=c.group,
            ts_ms=int(now * 1000),
            leader=c.leader,
            generation=c.generation,
            protocol=c.protocol,
            assignor=c.assignor,
            members=members,
            topics=topics,
            interval_ms=interval_ms,
            load_interval_ms=self.cfg.load_interval_ms,
        )

    def _publish(self, key: str, value: bytes, kind: str) -> None:
        if not self._topic_ready:
            create_topic(
                self._admin(),
                self.topic,
                1,
                self.cfg.control_replication_factor,
                config={"cleanup.policy": "delete", "retention.ms": str(RETENTION_MS)},
                exist_ok=True,
            )
            self._topic_ready = True
        if self._producer is None:
            self._producer = Producer(
                self.cfg.client_config(
                    "telemetry", **{"linger.ms": 5, "acks": "all", "compression.type": "lz4"}
                )
            )
        errors: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        try:
            self._producer.produce(self.topic, value=value, key=key.encode(), on_delivery=delivered)
        except (KafkaException, BufferError) as e:
            raise BrokerError(f"could not produce telemetry to {self.topic!r}: {e}") from e
        # Flushed per record: there is no close hook, and one record per interval is cheap.
        if self._producer.flush(10.0) > 0:
            raise BrokerError(f"telemetry to {self.topic!r} not delivered within 10s")
        if errors:
            raise BrokerError(f"telemetry to {self.topic!r} failed: {errors[0]}")
        self.stats.by_type[kind] = self.stats.by_type.get(kind, 0) + 1
