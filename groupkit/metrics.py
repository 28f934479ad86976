"""Prometheus metrics of groupkit members.

The app builds the observer and passes it in, as franz-go's ``kprom`` plugs into a client::

    metrics = PrometheusObserver(registry)        # a prometheus_client CollectorRegistry
    consumer = GroupConsumer(conf, observers=[metrics])

:class:`PrometheusObserver` registers everything below on ``registry``; nothing is registered on
prometheus-client's global registry unless you pass it, and no HTTP server starts unless the app
calls :func:`serve`. One observer per consumer; several may share a registry (their series differ
by ``member``). Every series is labelled by ``group`` and ``member`` (the member id).

Two sources, so that nothing goes stale:

1. **Gauges read at scrape time** (:class:`GroupkitCollector`): lag, offsets, assignment,
   generation, leadership, heartbeat age. They come from the member's live state and its
   assignment, read through its probe (``GroupConsumer.probe``, a read-only
   :class:`~groupkit.runtime.probe.MemberProbe`: this module never touches the consumer), so a
   revoked partition's series is simply not produced by the next scrape, and a closed consumer
   produces none at all.
2. **Counters and a histogram** fed by the runtime's hooks (:class:`PrometheusObserver` is a
   :class:`~groupkit.runtime.hooks.GroupObserver`): rebalances, paused partition-seconds,
   hand-offs, control records, consumed records.

Lag follows kafka_exporter and Burrow: log end offset minus committed offset (a partition without
a committed offset lags by what ``auto.offset.reset`` would make the member read), so the sum over
members equals what ``kafka-consumer-groups --describe`` or an AdminClient computes. Like
kafka_exporter, a scrape asks the brokers (one ListOffsets and one OffsetFetch through the
consumer's AdminClient, reused for :data:`OFFSETS_MIN_INTERVAL_S`). It never calls the data
consumer: confluent-kafka admits one thread at a time into a ``Consumer``, and a scrape waiting
behind a busy poll loop could wait for ever. ``groupkit_consumer_records_lag`` is the Java
client's ``records-lag`` (high watermark minus the position handed to the app); only the poll
thread can read it, so it is sampled there, when ``poll`` hands out records.

Time lag (``groupkit_consumergroup_lag_seconds``, kafka-lag-exporter's ``…_group_lag_seconds``)
is the age of each owned partition's first unconsumed record (runtime/lag.py). The scrape that
asks for the offsets also reads, with a short-lived consumer of the probe's, the timestamp of
each record at a committed offset it has not dated yet: a timestamp is kept until the commit
moves, so a partition costs one read per commit move, not per scrape, and at most one per
:data:`~groupkit.runtime.lag.TIME_LAG_REREAD_S` where earlier scrapes' (end offset, time)
samples can interpolate in between (and have been seen to agree with a read). What a read
does not answer within :data:`~groupkit.runtime.lag.TIME_LAG_READ_TIMEOUT_S` is interpolated
too. A partition whose time lag is unknown (empty, or its record undated) has no series; the
member's maximum is over the partitions that have one.

Burrow's status (``groupkit_consumergroup_partition_status``, ``groupkit_consumergroup_status``)
is an enum as Prometheus exporters write one: a series per status value, 1 for the current one
and 0 for the others, so ``== 1`` selects it and ``max_over_time`` shows any past one. It is
what the member's own sampler judged at its newest sample (runtime/lag_status.py, every
``groupkit.lag.status.interval.ms``); a scrape reads it and asks nothing. While sampling is off,
or before the first sample, neither series exists.

The names, their types and labels are the table :data:`METRICS`; the dashboard test checks
panels against it and the metrics tests check a live scrape against it.

**kafka_exporter's names** (``PrometheusObserver(registry, kafka_exporter_names=True)``, off by
default): the same lag and offsets also as ``kafka_consumergroup_*`` with kafka_exporter's labels,
and the time lag as kafka-lag-exporter's ``kafka_consumergroup_group_lag_seconds{group,topic,
partition}`` and ``kafka_consumergroup_group_max_lag_seconds{group}``
(:data:`KAFKA_EXPORTER_METRICS`), so the dashboards and alert rules written for them work
unchanged. Off by default because a kafka_exporter that already scrapes the cluster exports
these very series (from the committed offsets), and a dashboard summing both would count the
group twice. Like the ``groupkit_`` series, each member exports only the partitions its data
consumer has assigned and only the leader exports ``members``, so sums over members are the
group's numbers, and ``max by (group)`` over the members' ``…_max_lag_seconds`` (each the
largest of its own partitions) is the group's largest time lag. Where several observers share
a registry, their series are combined by label set (the labels carry no member): added up for
``*_sum``, the largest kept for ``…_max_lag_seconds``. One difference to kafka_exporter: a
partition without a committed offset lags by what ``auto.offset.reset`` would make the member
read, where kafka_exporter reports ``-1``.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from groupkit.lagstatus import GroupStatus, PartitionStatus
from groupkit.log import get_logger
from groupkit.protocol import GroupState
from groupkit.protocol.node import RebalanceSummary
from groupkit.protocol.records import Partitions
from groupkit.protocol.vocab import AssignorFailure, RebalanceOutcome, RejectReason, ReplanReason
from groupkit.runtime.hooks import GroupObserver
from groupkit.runtime.probe import MemberProbe
from groupkit.types import TopicPartition

__all__ = [
    "KAFKA_EXPORTER_METRICS",
    "METRICS",
    "GroupkitCollector",
    "KafkaExporterCollector",
    "MetricSpec",
    "PrometheusObserver",
    "serve",
]

_log = get_logger("groupkit.metrics")

#: end and committed offsets are asked at most this often per member, whatever the scrape rate
OFFSETS_MIN_INTERVAL_S = 0.5
#: window of ``groupkit_records_consumed_rate`` (the Java client's default is 30 s; shorter
#: shows a rebalance's pause in a demo)
RATE_WINDOW_S = 10.0

_M = ("group", "member")
_TP = (*_M, "topic", "partition")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One exported metric: its name as scraped (counters with ``_total``), type and labels."""

    name: str
    kind: str  # gauge | counter | histogram
    labels: tuple[str, ...]
    help: str
    #: the Kafka tool or client metric it mirrors, for the README
    like: str = ""


#: Everything groupkit exports, by name.
METRICS: Mapping[str, MetricSpec] = {
    s.name: s
    for s in (
        # -- read at scrape time -----------------------------------------------------------
        MetricSpec("groupkit_consumergroup_lag", "gauge", _TP,
                   "Messages behind: log end offset minus committed offset, per owned partition.",
                   "kafka_exporter kafka_consumergroup_lag"),
        MetricSpec("groupkit_consumergroup_committed_offset", "gauge", _TP,
                   "The group's committed offset of each owned partition.",
                   "kafka_exporter kafka_consumergroup_current_offset"),
        MetricSpec("groupkit_consumer_records_lag", "gauge", _TP,
                   "High watermark minus the position handed to the app, sampled when poll "
                   "hands out records (no broker I/O).",
                   "Java consumer records-lag"),
        MetricSpec("groupkit_consumergroup_lag_seconds", "gauge", _TP,
                   "Age in seconds of the oldest unconsumed record (at the committed offset), "
                   "per owned partition: 0 without lag, absent when unknown.",
                   "kafka-lag-exporter kafka_consumergroup_group_lag_seconds"),
        MetricSpec("groupkit_consumergroup_max_lag_seconds", "gauge", _M,
                   "Largest groupkit_consumergroup_lag_seconds over the member's partitions.",
                   "kafka-lag-exporter kafka_consumergroup_group_max_lag_seconds"),
        MetricSpec("groupkit_consumergroup_partition_status", "gauge", (*_TP, "status"),
                   "Burrow's status of each owned partition as an enum: 1 for its status "
                   "(OK, WARN, STOP, STALL, REWIND), 0 for the others.",
                   "Burrow partition status"),
        MetricSpec("groupkit_consumergroup_status", "gauge", (*_M, "status"),
                   "Burrow's status of the group as this member's partitions make it, as an "
                   "enum: 1 for its status (OK, WARN, ERR), 0 for the others.",
                   "Burrow consumer group status"),
        MetricSpec("groupkit_consumergroup_lag_sum", "gauge", _M,
                   "Sum of groupkit_consumergroup_lag over the member's partitions.",
                   "kafka_exporter kafka_consumergroup_lag_sum, Burrow total_lag"),
        MetricSpec("groupkit_consumergroup_assigned_partitions", "gauge", _M,
                   "Partitions the member's data consumer has assigned.",
                   "Java consumer assigned-partitions"),
        MetricSpec("groupkit_consumergroup_generation", "gauge", _M,
                   "The generation of the assignment the member acts on."),
        MetricSpec("groupkit_consumergroup_is_leader", "gauge", _M,
                   "1 if the member leads the group (plans its generations), else 0."),
        MetricSpec("groupkit_consumergroup_members", "gauge", _M,
                   "Live members of the group as its leader's replay sees them (leader only).",
                   "kafka_exporter kafka_consumergroup_members"),
        MetricSpec("groupkit_consumergroup_paused_partitions", "gauge", _M,
                   "Partitions no live member claims right now (leader only)."),
        MetricSpec("groupkit_consumergroup_heartbeat_age_seconds", "gauge", _M,
                   "Seconds since the member's newest own record was seen in the control log.",
                   "Java consumer last-heartbeat-seconds-ago"),
        MetricSpec("groupkit_records_consumed_rate", "gauge", _M,
                   f"Records handed to the app per second over the last {RATE_WINDOW_S:.0f} s "
                   "(in PromQL prefer rate(groupkit_records_consumed_total[...])).",
                   "Java consumer records-consumed-rate"),
        # -- fed by the runtime's hooks ---------------------------------------------------
        MetricSpec("groupkit_rebalances_total", "counter", (*_M, "protocol", "outcome"),
                   "Rebalances ended, counted by the leader: completed, superseded by a newer "
                   "change, or abandoned on losing the lead.",
                   "Java consumer rebalance-total"),
        MetricSpec("groupkit_rebalance_duration_seconds", "histogram", (*_M, "protocol"),
                   "Duration of completed rebalances, first generation planned until every "
                   "member claims its share (leader).", "Java consumer rebalance-latency-*"),
        MetricSpec("groupkit_rebalance_partitions_moved_total", "counter", _M,
                   "Partitions whose owner changed in a completed rebalance (leader)."),
        MetricSpec("groupkit_paused_partition_seconds_total", "counter", _M,
                   "Integral over time of partitions no live member claimed, in "
                   "partition-seconds (leader)."),
        MetricSpec("groupkit_partitions_assigned_total", "counter", _M,
                   "Partitions this member was granted."),
        MetricSpec("groupkit_partitions_revoked_total", "counter", _M,
                   "Partitions this member gave up in a rebalance (committed first).",
                   "Java consumer partition-revoked-latency-*"),
        MetricSpec("groupkit_partitions_lost_total", "counter", _M,
                   "Partitions this member lost without a commit (session lapsed, expired).",
                   "Java consumer partition-lost-latency-*"),
        MetricSpec("groupkit_control_records_read_total", "counter", (*_M, "kind"),
                   "Control records replayed, by result kind."),
        MetricSpec("groupkit_control_records_written_total", "counter", (*_M, "kind"),
                   "Control records this member wrote and the broker acknowledged."),
        MetricSpec("groupkit_control_record_write_errors_total", "counter", (*_M, "kind"),
                   "Control records this member failed to write."),
        MetricSpec("groupkit_control_records_rejected_total", "counter", (*_M, "reason"),
                   "Control records rejected by the replay (never applied), by reason."),
        MetricSpec("groupkit_assignor_failures_total", "counter", (*_M, "assignor", "reason"),
                   "Plans of the group's assignor replaced by the built-in fallback (leader), "
                   "by reason: raised, invalid, timeout."),
        MetricSpec("groupkit_load_replans_total", "counter", (*_M, "reason"),
                   "Re-plans for the load the leader wrote, by reason: overload, drain."),
        MetricSpec("groupkit_records_consumed_total", "counter", (*_M, "topic"),
                   "Records handed to the app by poll/consume.",
                   "Java consumer records-consumed-total"),
    )
}  # fmt: skip

_CG = ("consumergroup",)
_CGT = (*_CG, "topic")
_CGTP = (*_CGT, "partition")
#: kafka-lag-exporter labels the group ``group``, not ``consumergroup``
_LG = ("group",)
_LGTP = (*_LG, "topic", "partition")

#: The lag metrics under kafka_exporter's names and labels (``kafka_exporter_names=True``), and
#: the time lag under kafka-lag-exporter's; the help texts are theirs, ``like`` names the
#: groupkit series each mirrors. kafka-lag-exporter's ``cluster_name``, ``member_host``,
#: ``consumer_id`` and ``client_id`` labels are left out: a member knows no cluster name, and
#: member labels would split a partition's series whenever it changes owner.
KAFKA_EXPORTER_METRICS: Mapping[str, MetricSpec] = {
    s.name: s
    for s in (
        MetricSpec("kafka_consumergroup_lag", "gauge", _CGTP,
                   "Current Approximate Lag of a ConsumerGroup at Topic/Partition",
                   "groupkit_consumergroup_lag"),
        MetricSpec("kafka_consumergroup_lag_sum", "gauge", _CGT,
                   "Current Approximate Lag of a ConsumerGroup at Topic for all partitions",
                   "groupkit_consumergroup_lag_sum"),
        MetricSpec("kafka_consumergroup_current_offset", "gauge", _CGTP,
                   "Current Offset of a ConsumerGroup at Topic/Partition",
                   "groupkit_consumergroup_committed_offset"),
        MetricSpec("kafka_consumergroup_current_offset_sum", "gauge", _CGT,
                   "Current Offset of a ConsumerGroup at Topic for all partitions",
                   "groupkit_consumergroup_committed_offset"),
        MetricSpec("kafka_consumergroup_members", "gauge", _CG,
                   "Amount of members in a consumer group", "groupkit_consumergroup_members"),
        MetricSpec("kafka_consumergroup_group_lag_seconds", "gauge", _LGTP,
                   "Group time lag of a partition", "groupkit_consumergroup_lag_seconds"),
        MetricSpec("kafka_consumergroup_group_max_lag_seconds", "gauge", _LG,
                   "Max group time lag", "groupkit_consumergroup_max_lag_seconds"),
    )
}  # fmt: skip

#: Rejection reasons (decoder and replay: the one list, ``RejectReason``); each starts at 0 so a
#: dashboard has a series before the first rejection. A reason not listed is still counted.
KNOWN_REJECTIONS: tuple[str, ...] = tuple(r.value for r in RejectReason)
REBALANCE_OUTCOMES: tuple[str, ...] = tuple(o.value for o in RebalanceOutcome)
RECORD_KINDS = ("member", "assignment")
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def _base(name: str) -> str:
    """prometheus-client adds ``_total`` to a counter's name itself."""
    return name.removesuffix("_total") if METRICS[name].kind == "counter" else name


class _Instruments:
    """The hook-fed metrics of one registry, shared by every consumer registered on it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str) -> Counter:
            s = METRICS[name]
            return Counter(_base(name), s.help, s.labels, registry=registry)

        self.rebalances = counter("groupkit_rebalances_total")
        s = METRICS["groupkit_rebalance_duration_seconds"]
        self.rebalance_seconds = Histogram(
            s.name, s.help, s.labels, buckets=DURATION_BUCKETS, registry=registry
        )
        self.moved = counter("groupkit_rebalance_partitions_moved_total")
        self.paused_seconds = counter("groupkit_paused_partition_seconds_total")
        self.assigned = counter("groupkit_partitions_assigned_total")
        self.revoked = counter("groupkit_partitions_revoked_total")
        self.lost = counter("groupkit_partitions_lost_total")
        self.read = counter("groupkit_control_records_read_total")
        self.written = counter("groupkit_control_records_written_total")
        self.write_errors = counter("groupkit_control_record_write_errors_total")
        self.rejected = counter("groupkit_control_records_rejected_total")
        self.consumed = counter("groupkit_records_consumed_total")
        self.assignor_failures = counter("groupkit_assignor_failures_total")
        self.load_replans = counter("groupkit_load_replans_total")
        self.collector = GroupkitCollector()
        registry.register(self.collector)
        self._registry = registry
        self._kafka_collector: KafkaExporterCollector | None = None

    def kafka_collector(self) -> KafkaExporterCollector:
        """The registry's kafka_exporter-named gauges, registered by the first observer that
        asks for them (under ``_INSTRUMENTS_LOCK``): a registry without such an observer never
        holds those names."""
        if self._kafka_collector is None:
            self._kafka_collector = KafkaExporterCollector()
            self._registry.register(self._kafka_collector)
        return self._kafka_collector


_INSTRUMENTS: weakref.WeakKeyDictionary[CollectorRegistry, _Instruments] = (
    weakref.WeakKeyDictionary()
)
_INSTRUMENTS_LOCK = threading.Lock()


def _instruments(registry: CollectorRegistry, kafka_exporter_names: bool = False) -> _Instruments:
    """The hook-fed metrics of ``registry``, registered on it by its first observer."""
    with _INSTRUMENTS_LOCK:
        inst = _INSTRUMENTS.get(registry)
        if inst is None:
            inst = _INSTRUMENTS[registry] = _Instruments(registry)
        if kafka_exporter_names:
            inst.kafka_collector()
        return inst


def serve(
    port: int, registry: CollectorRegistry | None = None, addr: str = "0.0.0.0"
) -> tuple[Any, threading.Thread]:
    """Serve ``registry`` (default: prometheus-client's global one) on ``http://addr:port/``.

    For apps; the library never starts a server itself. Returns the server and its thread
    (``server.shutdown()`` stops it).
    """
    if registry is None:
        from prometheus_client import REGISTRY

        registry = REGISTRY
    server, thread = start_http_server(port, addr=addr, registry=registry)
    return server, thread


class Rate:
    """Events per second over a sliding window, from cumulative totals sampled as they grow.

    Samples are taken at most every half second; the oldest one kept is the newest at or
    before the window's start, so the count covers the window (give or take half a second).
    """

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self.total = 0
        self._samples: deque[tuple[float, int]] = deque([(time.monotonic(), 0)])
        self._lock = threading.Lock()

    def add(self, n: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            self.total += n
            if now - self._samples[-1][0] >= 0.5:
                self._samples.append((now, self.total))
            elif len(self._samples) > 1:  # fold into the newest sample (< 0.5 s earlier)
                self._samples[-1] = (self._samples[-1][0], self.total)
            self._trim(now)

    def _trim(self, now: float) -> None:
        while len(self._samples) > 1 and self._samples[1][0] <= now - self.window_s:
            self._samples.popleft()

    def value(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        with self._lock:
            self._trim(now)
            t0, n0 = self._samples[0]
            elapsed = min(now - t0, self.window_s)
            return (self.total - n0) / elapsed if elapsed > 0 else 0.0


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """What one scrape reads of one member."""

    group: str
    member: str
    generation: int
    is_leader: bool
    live_members: int
    paused: int
    heartbeat_age_s: float | None
    partitions: tuple[TopicPartition, ...]
    lag: Mapping[TopicPartition, int]
    committed: Mapping[TopicPartition, int]
    #: seconds; partitions whose time lag is unknown are absent
    time_lag: Mapping[TopicPartition, float]
    records_lag: Mapping[TopicPartition, int]
    consumed_rate: float
    #: Burrow's status of the owned partitions at the newest sample (runtime/lag_status.py)
    status: Mapping[TopicPartition, PartitionStatus]
    #: the group's, from them; ``None`` while the member samples none (off, or not yet)
    group_status: GroupStatus | None


class _Offsets(NamedTuple):
    """What one read of the brokers says of the owned partitions (monotonic ``at``)."""

    at: float
    lag: dict[TopicPartition, int]
    committed: dict[TopicPartition, int]
    #: seconds; partitions whose time lag is unknown are absent
    time_lag: dict[TopicPartition, float]


class PrometheusObserver(GroupObserver):
    """One consumer's metrics on ``registry``: hook-fed counters, and the scrape-time reading of
    its state (all of it through the member's read-only
    :class:`~groupkit.runtime.probe.MemberProbe`, which the consumer hands it: ``attached``).

    Pass it to one ``GroupConsumer`` (``observers=[...]``); several observers, one per
    consumer, may share a registry.

    ``kafka_exporter_names=True`` also exports the lag under kafka_exporter's names and labels,
    and the time lag under kafka-lag-exporter's (:data:`KAFKA_EXPORTER_METRICS`), for the
    dashboards and alert rules written for them. Leave it off where a kafka_exporter already
    scrapes the cluster: both would export the group's lag.
    """

    def __init__(self, registry: CollectorRegistry, *, kafka_exporter_names: bool = False) -> None:
        self._i = _instruments(registry, kafka_exporter_names)
        self.kafka_exporter_names = kafka_exporter_names
        self._probe: MemberProbe | None = None
        self.group = ""
        self.protocol = ""
        self.assignor = ""
        self._initialised: str | None = None
        self._rate = Rate()
        # lag and committed offsets, asked of the brokers at scrape time
        self._offsets_cache: _Offsets | None = None
        self._offsets_lock = threading.Lock()
        # the Java client's records-lag, sampled on the poll thread
        self._records_lag: dict[TopicPartition, int] = {}
        self._positions_at = 0.0
        # paused partition-seconds, integrated on the leader's control thread
        self._paused_offset = -2
        self._paused_now = 0
        self._paused_prev = 0
        self._paused_at: int | None = None

    def attached(self, probe: MemberProbe) -> None:
        """Observe the member behind ``probe``; its scrape-time gauges join the registry's."""
        if self._probe is not None:
            raise ValueError(
                "this PrometheusObserver already observes a consumer: build one per consumer "
                "(they may share a registry)"
            )
        self._probe = probe
        self.group = probe.group_id
        self.protocol = probe.protocol
        self.assignor = probe.assignor
        self._i.collector.add(self)
        if self.kafka_exporter_names:
            self._i.kafka_collector().add(self)

    @property
    def probe(self) -> MemberProbe:
        """The observed member's probe (``RuntimeError`` before a consumer attached it)."""
        probe = self._probe
        if probe is None:
            raise RuntimeError("this PrometheusObserver is not attached to a consumer yet")
        return probe

    # ------------------------------------------------------------------ labels

    def _member(self) -> str:
        member = self.probe.member_id or ""
        if member != self._initialised and member:
            self._initialise(member)
        return member

    def _initialise(self, member: str) -> None:
        """Create each known label set at 0, so dashboards have series before the first event."""
        self._initialised = member
        i, g = self._i, self.group
        for outcome in REBALANCE_OUTCOMES:
            i.rebalances.labels(g, member, self.protocol, outcome)
        i.rebalance_seconds.labels(g, member, self.protocol)
        for c in (i.moved, i.paused_seconds, i.assigned, i.revoked, i.lost):
            c.labels(g, member)
        for kind in RECORD_KINDS:
            i.written.labels(g, member, kind)
            i.write_errors.labels(g, member, kind)
        for reason in KNOWN_REJECTIONS:
            i.rejected.labels(g, member, reason)
        for reason in AssignorFailure:
            i.assignor_failures.labels(g, member, self.assignor, reason)
        for why in ReplanReason:
            i.load_replans.labels(g, member, why)
        for topic in self.probe.topics:
            i.consumed.labels(g, member, topic)

    # ------------------------------------------------------------------ hooks

    def record_read(self, state: GroupState, kind: str) -> None:
        self._i.read.labels(self.group, self._member(), kind).inc()

    def record_rejected(self, state: GroupState, reason: str, detail: str) -> None:
        self._i.rejected.labels(self.group, self._member(), reason).inc()

    def record_written(self, kind: str, ok: bool) -> None:
        c = self._i.written if ok else self._i.write_errors
        c.labels(self.group, self._member(), kind).inc()

    def turn(self, state: GroupState, member_id: str, now_ms: int) -> None:
        """Integrate the leader's count of unclaimed partitions over (monotonic) time.

        Called on the control thread, the only writer of ``state``; the count is recomputed only
        when a record was replayed, since claims and liveness change only then.
        """
        if state.leader != member_id:
            self._paused_at = None
            self._paused_now = self._paused_prev = 0
            self._paused_offset = -2
            return
        if state.offset != self._paused_offset:
            self._paused_offset = state.offset
            self._paused_now = len(unclaimed(state))
        if self._paused_at is not None and self._paused_prev:
            seconds = self._paused_prev * (now_ms - self._paused_at) / 1000
            self._i.paused_seconds.labels(self.group, self._member()).inc(max(0.0, seconds))
        self._paused_at = now_ms
        self._paused_prev = self._paused_now

    def rebalance_done(self, summary: RebalanceSummary) -> None:
        member = self._member()
        self._i.rebalances.labels(self.group, member, summary.protocol, summary.outcome).inc()
        if summary.outcome == RebalanceOutcome.COMPLETED:
            self._i.rebalance_seconds.labels(self.group, member, summary.protocol).observe(
                summary.duration_s
            )
            self._i.moved.labels(self.group, member).inc(summary.moved)

    def assignor_failed(self, assignor: str, reason: AssignorFailure, detail: str) -> None:
        self._i.assignor_failures.labels(self.group, self._member(), assignor, reason).inc()

    def load_replanned(self, reason: str, gain: float, moved: int) -> None:
        self._i.load_replans.labels(self.group, self._member(), reason).inc()

    def handoff(
        self,
        member_id: str,
        generation: int,
        assigned: Partitions,
        revoked: Partitions,
        lost: Partitions,
        seconds: float,
    ) -> None:
        member = self._member()
        for counter, parts in ((self._i.assigned, assigned), (self._i.revoked, revoked),
                               (self._i.lost, lost)):  # fmt: skip
            if parts:
                counter.labels(self.group, member).inc(len(parts))

    def consumed(self, member_id: str, counts: Sequence[tuple[tuple[str, int], int]]) -> None:
        member = self._member()
        per_topic: dict[str, int] = {}
        for (topic, _p), n in counts:
            per_topic[topic] = per_topic.get(topic, 0) + n
        for topic, n in per_topic.items():
            self._i.consumed.labels(self.group, member, topic).inc(n)
        self._rate.add(sum(per_topic.values()))
        self._sample_positions()

    # ------------------------------------------------------------------ scrape time

    def _sample_positions(self) -> None:
        """On the poll thread: the data consumer's positions and cached high watermarks.

        confluent-kafka lets one thread at a time into a ``Consumer`` (a call from another
        thread waits at a gate, and a busy poll loop can starve it for good), so the scrape
        thread never touches the data consumer: what only it knows is sampled here, at most
        twice a second, right after a ``poll`` handed out records (``MemberProbe.records_lag``).
        """
        now = time.monotonic()
        if now - self._positions_at < 0.5:
            return
        self._positions_at = now
        try:
            out = self.probe.records_lag()
        except Exception as e:  # never break poll for a metric
            _log.debug("metrics.positions_unavailable", group=self.group, error=str(e))
            return
        self._records_lag = out

    def snapshot(self) -> _Snapshot | None:
        """The member's gauges now, or ``None`` once it has closed (its series then vanish)."""
        status = self.probe.status()
        if status is None:
            return None
        leader = status.is_leader
        age = status.session_age_ms
        paused = self._paused_now if leader else 0
        # What the data consumer has assigned right now: a revoked partition leaves this set
        # (on the poll thread) before the member's record frees it for its next owner.
        parts = tuple(sorted(self.probe.owned()))
        offsets = self._offsets(parts)
        records_lag = self._records_lag
        statuses = self.probe.lag_status()
        return _Snapshot(
            group=self.group,
            member=status.member_id,
            generation=status.generation,
            is_leader=leader,
            live_members=status.live_members,
            paused=paused,
            heartbeat_age_s=None if age is None else age / 1000,
            partitions=parts,
            lag=offsets.lag,
            committed=offsets.committed,
            time_lag=offsets.time_lag,
            records_lag={tp: n for tp, n in records_lag.items() if tp in parts},
            consumed_rate=self._rate.value(),
            status=(
                {}
                if statuses is None
                else {tp: s for tp, s in statuses.partitions.items() if tp in parts}
            ),
            group_status=None if statuses is None else statuses.group,
        )

    def _offsets(self, parts: tuple[TopicPartition, ...]) -> _Offsets:
        """Lag, committed offset and time lag of ``parts``, asked of the brokers
        (kafka_exporter's way; time lag as the module docstring says).

        One ListOffsets and one OffsetFetch through the consumer's AdminClient, reused for
        :data:`OFFSETS_MIN_INTERVAL_S` whatever the scrape rate. If the brokers do not answer
        in time, the partitions have no lag series this scrape rather than a wrong one.
        """
        with self._offsets_lock:
            now = time.monotonic()
            cached = self._offsets_cache
            if cached is not None and now - cached.at < OFFSETS_MIN_INTERVAL_S:
                lag, committed, time_lag = cached.lag, cached.committed, cached.time_lag
                if all(tp in lag for tp in parts):
                    return _Offsets(
                        cached.at,
                        {tp: lag[tp] for tp in parts},
                        {tp: committed[tp] for tp in parts if tp in committed},
                        {tp: time_lag[tp] for tp in parts if tp in time_lag},
                    )
            if not parts:
                return _Offsets(now, {}, {}, {})
            try:
                offsets = self.probe.read_offsets(parts, timeout=3.0)
            except Exception as e:  # a scrape must not fail because a broker is slow
                _log.debug("metrics.offsets_unavailable", group=self.group, error=str(e))
                return _Offsets(now, {}, {}, {})
            if offsets is None:  # the consumer is closed
                return _Offsets(now, {}, {}, {})
            try:
                ages = self.probe.time_lag(offsets) or {}
            except Exception as e:  # nor because a record could not be read
                _log.debug("metrics.time_lag_unavailable", group=self.group, error=str(e))
                ages = {}
            got = _Offsets(
                now,
                {tp: n for tp, n in offsets.lag.items() if tp in offsets.end},
                {tp: o for tp, o in offsets.committed.items() if o is not None},
                {tp: s for tp, s in ages.items() if s is not None and tp in offsets.end},
            )
            self._offsets_cache = got
            return got


def unclaimed(state: GroupState) -> set[TopicPartition]:
    """Partitions of the current assignment's topics that no live member claims: paused."""
    a = state.assignment
    if a is None:
        return set()
    claimed: set[TopicPartition] = set()
    for m in state.live_members().values():
        claimed |= m.claims
    return {TopicPartition(t, p) for t, n in a.partition_counts for p in range(n)} - claimed


class GroupkitCollector(Collector):
    """Yields the scrape-time gauges of every consumer registered on one registry."""

    def __init__(self) -> None:
        self._observers: weakref.WeakSet[PrometheusObserver] = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, observer: PrometheusObserver) -> None:
        with self._lock:
            self._observers.add(observer)

    def describe(self) -> Iterable[Metric]:
        # Without describe(), registering would call collect() (and fetch offsets) at once.
        return list(self._families().values())

    @staticmethod
    def _families() -> dict[str, GaugeMetricFamily]:
        return {
            name: GaugeMetricFamily(name, s.help, labels=list(s.labels))
            for name, s in METRICS.items()
            if s.kind == "gauge"
        }

    def _snapshots(self) -> Iterator[_Snapshot]:
        """A snapshot of every registered consumer that has one."""
        with self._lock:
            observers = list(self._observers)
        for o in observers:
            try:
                snap = o.snapshot()
            except Exception:  # never let one member break the whole scrape
                _log.exception("metrics.snapshot_failed", group=o.group)
                continue
            if snap is not None:
                yield snap

    def collect(self) -> Iterator[Metric]:
        f = self._families()
        for snap in self._snapshots():
            m = [snap.group, snap.member]
            for tp in snap.partitions:
                tpl = [*m, tp.topic, str(tp.partition)]
                if tp in snap.lag:
                    f["groupkit_consumergroup_lag"].add_metric(tpl, snap.lag[tp])
                if tp in snap.committed:
                    f["groupkit_consumergroup_committed_offset"].add_metric(tpl, snap.committed[tp])
                if tp in snap.time_lag:
                    f["groupkit_consumergroup_lag_seconds"].add_metric(tpl, snap.time_lag[tp])
                if tp in snap.records_lag:
                    f["groupkit_consumer_records_lag"].add_metric(tpl, snap.records_lag[tp])
                if tp in snap.status:
                    for ps in PartitionStatus:
                        f["groupkit_consumergroup_partition_status"].add_metric(
                            [*tpl, ps.value], 1 if snap.status[tp] is ps else 0
                        )
            if snap.group_status is not None:
                for gs in GroupStatus:
                    f["groupkit_consumergroup_status"].add_metric(
                        [*m, gs.value], 1 if snap.group_status is gs else 0
                    )
            f["groupkit_consumergroup_lag_sum"].add_metric(m, sum(snap.lag.values()))
            if snap.time_lag:
                f["groupkit_consumergroup_max_lag_seconds"].add_metric(
                    m, max(snap.time_lag.values())
                )
            f["groupkit_consumergroup_assigned_partitions"].add_metric(m, len(snap.partitions))
            f["groupkit_consumergroup_generation"].add_metric(m, snap.generation)
            f["groupkit_consumergroup_is_leader"].add_metric(m, 1 if snap.is_leader else 0)
            if snap.is_leader:
                f["groupkit_consumergroup_members"].add_metric(m, snap.live_members)
                f["groupkit_consumergroup_paused_partitions"].add_metric(m, snap.paused)
            if snap.heartbeat_age_s is not None:
                f["groupkit_consumergroup_heartbeat_age_seconds"].add_metric(
                    m, snap.heartbeat_age_s
                )
            f["groupkit_records_consumed_rate"].add_metric(m, snap.consumed_rate)
        yield from f.values()


class KafkaExporterCollector(GroupkitCollector):
    """Yields the lag of every opted-in consumer of one registry under kafka_exporter's names.

    Its labels carry no member, so observers sharing the registry are added up by label set:
    sums for ``*_sum``, the largest for ``*_max_lag_seconds``; a partition is one member's (its
    data consumer's assignment), and the group's member count comes from its leader alone.
    """

    @staticmethod
    def _families() -> dict[str, GaugeMetricFamily]:
        return {
            name: GaugeMetricFamily(name, s.help, labels=list(s.labels))
            for name, s in KAFKA_EXPORTER_METRICS.items()
        }

    def collect(self) -> Iterator[Metric]:
        lag: dict[tuple[str, str, str], int] = {}
        offset: dict[tuple[str, str, str], int] = {}
        lag_sum: dict[tuple[str, str], int] = {}
        offset_sum: dict[tuple[str, str], int] = {}
        members: dict[str, int] = {}
        seconds: dict[tuple[str, str, str], float] = {}
        max_seconds: dict[str, float] = {}
        for snap in self._snapshots():
            g = snap.group
            for tp in snap.partitions:
                key = (g, tp.topic, str(tp.partition))
                if tp in snap.lag:
                    lag[key] = snap.lag[tp]
                    lag_sum[g, tp.topic] = lag_sum.get((g, tp.topic), 0) + snap.lag[tp]
                if tp in snap.committed:
                    offset[key] = snap.committed[tp]
                    offset_sum[g, tp.topic] = offset_sum.get((g, tp.topic), 0) + snap.committed[tp]
                if tp in snap.time_lag:
                    seconds[key] = snap.time_lag[tp]
                    max_seconds[g] = max(max_seconds.get(g, 0.0), snap.time_lag[tp])
            if snap.is_leader:
                members[g] = snap.live_members
        f = self._families()
        for tpl, n in lag.items():
            f["kafka_consumergroup_lag"].add_metric(list(tpl), n)
        for tpl, n in offset.items():
            f["kafka_consumergroup_current_offset"].add_metric(list(tpl), n)
        for gt, n in lag_sum.items():
            f["kafka_consumergroup_lag_sum"].add_metric(list(gt), n)
        for gt, n in offset_sum.items():
            f["kafka_consumergroup_current_offset_sum"].add_metric(list(gt), n)
        for g, n in members.items():
            f["kafka_consumergroup_members"].add_metric([g], n)
        for tpl, age in seconds.items():
            f["kafka_consumergroup_group_lag_seconds"].add_metric(list(tpl), age)
        for g, age in max_seconds.items():
            f["kafka_consumergroup_group_max_lag_seconds"].add_metric([g], age)
        yield from f.values()
