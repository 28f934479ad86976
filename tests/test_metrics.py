"""groupkit's Prometheus metrics move as the group moves: real broker, real GroupConsumers.

One group lives through a join, a lag change, a rebalance to two members, a rejected control
record, a loss of its session and a leave; after each step the registries of its members are
scraped (the text exposition format, as Prometheus reads it) and checked against the state.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from groupkit import GroupConsumer
from groupkit.dev.harness import wait_for
from groupkit.metrics import KAFKA_EXPORTER_METRICS, METRICS, PrometheusObserver, Rate, serve
from tests.conftest import unique_name
from tests.groupharness import produce

pytestmark = pytest.mark.broker

Labels = dict[str, str]


def scrape(registry: CollectorRegistry) -> dict[str, list[tuple[Labels, float]]]:
    """Every sample by name, parsed back from the exposition text."""
    out: dict[str, list[tuple[Labels, float]]] = {}
    text = generate_latest(registry).decode()
    for fam in text_string_to_metric_families(text):
        out.setdefault(fam.name, [])
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """The sum of ``name``'s samples matching ``labels`` (``None``: no such series)."""
    hits = [v for lab, v in scrape(registry).get(name, []) if labels.items() <= lab.items()]
    return sum(hits) if hits else None


def partitions_of(registry: CollectorRegistry, name: str) -> set[int]:
    return {int(lab["partition"]) for lab, _ in scrape(registry).get(name, [])}


class Driver:
    """Polls consumers on one background thread, as an app's poll loop would."""

    def __init__(self) -> None:
        self.consumers: list[GroupConsumer] = []
        self.consumed: dict[int, int] = {}
        self.paused = threading.Event()
        #: set by the poll loop once it saw ``paused``: no poll runs until ``resume()``
        self.idle = threading.Event()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def add(self, c: GroupConsumer) -> None:
        with self._lock:
            self.consumers.append(c)

    def pause(self) -> None:
        """Stop polling, and return once the poll loop's current call is over."""
        self.idle.clear()
        self.paused.set()
        wait_for(self.idle.is_set, 10, "the poll loop to pause")

    def resume(self) -> None:
        self.paused.clear()

    def remove(self, c: GroupConsumer) -> None:
        with self._lock:
            self.consumers.remove(c)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.paused.is_set():
                self.idle.set()
                time.sleep(0.02)  # the paused loop's pace: nothing to wait for but resume()
                continue
            # Under the lock, so that remove() returns only once its consumer is no longer
            # being polled: closed while this thread polled it, the poll would raise, the thread
            # would die, and nobody would poll the others again.
            with self._lock:
                for c in self.consumers:
                    n = len([m for m in c.consume(100, 0.02) if m.error() is None])
                    self.consumed[id(c)] = self.consumed.get(id(c), 0) + n
                none = not self.consumers
            if none:
                time.sleep(0.02)  # the pace of a loop with no consumer yet

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def driver() -> Iterator[Driver]:
    d = Driver()
    yield d
    d.stop()
    for c in d.consumers:
        c.close()


def test_every_metric_moves_with_the_group(
    bootstrap: str, topic_factory: Callable[..., str], driver: Driver
) -> None:
    topic = topic_factory(partitions=4)
    group = unique_name("g")
    control = unique_name("ctl")  # a control topic of our own: the garbage record stays here
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 2000,
        "heartbeat.interval.ms": 200,
        "auto.commit.interval.ms": 100,
        "groupkit.control.topic": control,
        "groupkit.lag.status.interval.ms": 200,
    }
    produced = {0: 40, 1: 20, 2: 10, 3: 5}
    produce(bootstrap, topic, produced)

    # -- join: one member owns everything, reads everything, commits ----------------------
    r1 = CollectorRegistry()
    c1 = GroupConsumer({**conf, "client.id": "m1"}, observers=[PrometheusObserver(r1)])
    c1.subscribe([topic])
    driver.add(c1)
    m1 = c1.member_id
    assert m1 is not None
    wait_for(lambda: value(r1, "groupkit_consumergroup_lag_sum") == 0
             and partitions_of(r1, "groupkit_consumergroup_committed_offset") == {0, 1, 2, 3}
             and partitions_of(r1, "groupkit_consumergroup_partition_status") == {0, 1, 2, 3},
             30, "member 1 to own all 4 partitions, commit everything and sample them")  # fmt: skip
    got = scrape(r1)
    missing = [n for n, s in METRICS.items() if not got.get(n if s.kind != "histogram"
                                                            else n + "_count")]  # fmt: skip
    assert not missing, f"declared but not exported: {missing}"
    for name, samples in got.items():
        if name.startswith("groupkit_"):
            assert all(lab["group"] == group and lab["member"] == m1 for lab, _ in samples), name
    assert value(r1, "groupkit_consumergroup_assigned_partitions") == 4
    assert value(r1, "groupkit_consumergroup_is_leader") == 1
    assert value(r1, "groupkit_consumergroup_members") == 1
    assert value(r1, "groupkit_consumergroup_paused_partitions") == 0
    assert value(r1, "groupkit_consumergroup_generation") == c1.generation >= 1
    age = value(r1, "groupkit_consumergroup_heartbeat_age_seconds")
    assert age is not None and 0 <= age < 2.0
    # caught up: every partition OK, one series per status value, the current one 1
    assert value(r1, "groupkit_consumergroup_partition_status", status="OK") == 4
    assert value(r1, "groupkit_consumergroup_partition_status") == 4
    assert len(got["groupkit_consumergroup_partition_status"]) == 4 * 5
    assert value(r1, "groupkit_consumergroup_status", status="OK") == 1
    assert value(r1, "groupkit_consumergroup_status") == 1
    # nothing unconsumed: no time lag
    assert partitions_of(r1, "groupkit_consumergroup_lag_seconds") == {0, 1, 2, 3}
    assert value(r1, "groupkit_consumergroup_lag_seconds") == 0
    assert value(r1, "groupkit_consumergroup_max_lag_seconds") == 0
    committed = {
        int(lab["partition"]): v for lab, v in got["groupkit_consumergroup_committed_offset"]
    }
    assert committed == produced
    assert value(r1, "groupkit_records_consumed_total", topic=topic) == 75
    assert value(r1, "groupkit_partitions_assigned_total") == 4
    # The leader ends a rebalance once every member has acknowledged it: a moment after.
    completed = functools.partial(
        value, r1, "groupkit_rebalances_total", outcome="completed", protocol="cooperative"
    )
    wait_for(lambda: (completed() or 0) >= 1, 15, "a completed rebalance")
    assert (value(r1, "groupkit_rebalance_duration_seconds_count") or 0) >= 1
    assert (value(r1, "groupkit_control_records_written_total", kind="member") or 0) >= 1
    assert (value(r1, "groupkit_control_records_written_total", kind="assignment") or 0) >= 1
    assert (value(r1, "groupkit_control_records_read_total", kind="assignment") or 0) >= 1
    assert value(r1, "groupkit_control_records_rejected_total") == 0

    # -- lag change: new records, not yet polled, then consumed --------------------------
    driver.pause()
    # CreateTimes of our own: the first unconsumed record (offset 40) is 30 s old
    first_ms = int(time.time() * 1000) - 30_000
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(25):
        p.produce(topic, value=b"%d" % i, partition=0, timestamp=first_ms + i * 100)
    assert p.flush(30) == 0
    wait_for(lambda: value(r1, "groupkit_consumergroup_lag", partition="0") == 25, 15,
             "partition 0's lag to show the 25 new records")  # fmt: skip
    assert value(r1, "groupkit_consumergroup_lag_sum") == 25
    before = time.time()
    seconds = value(r1, "groupkit_consumergroup_lag_seconds", partition="0")
    after = time.time()
    assert seconds is not None
    assert before - first_ms / 1000 - 1 <= seconds <= after - first_ms / 1000 + 1
    assert value(r1, "groupkit_consumergroup_lag_seconds", partition="1") == 0
    before = time.time()
    top = value(r1, "groupkit_consumergroup_max_lag_seconds")
    after = time.time()
    assert top is not None
    assert before - first_ms / 1000 - 1 <= top <= after - first_ms / 1000 + 1
    driver.resume()
    wait_for(lambda: value(r1, "groupkit_consumergroup_lag_sum") == 0, 15, "lag back to 0")
    wait_for(lambda: value(r1, "groupkit_consumergroup_max_lag_seconds") == 0, 15,
             "time lag back to 0")  # fmt: skip
    assert value(r1, "groupkit_consumergroup_committed_offset", partition="0") == 65
    assert value(r1, "groupkit_records_consumed_total", topic=topic) == 100
    assert (value(r1, "groupkit_records_consumed_rate") or 0) > 0

    # -- rebalance: a second member; revoked partitions' series vanish --------------------
    rebalances_before = value(r1, "groupkit_rebalances_total") or 0
    generation_before = value(r1, "groupkit_consumergroup_generation") or 0
    r2 = CollectorRegistry()
    c2 = GroupConsumer({**conf, "client.id": "m2"}, observers=[PrometheusObserver(r2)])
    c2.subscribe([topic])
    driver.add(c2)
    m2 = c2.member_id

    def split() -> bool:
        a1 = {tp.partition for tp in c1.assignment()}
        a2 = {tp.partition for tp in c2.assignment()}
        return (len(a1) == 2 and len(a2) == 2
                and partitions_of(r1, "groupkit_consumergroup_lag") == a1
                and partitions_of(r2, "groupkit_consumergroup_lag") == a2
                and value(r1, "groupkit_consumergroup_members") == 2)  # fmt: skip

    wait_for(split, 30, "two members with two partitions each, as their metrics say")
    a1 = {tp.partition for tp in c1.assignment()}
    for name in ("groupkit_consumergroup_lag", "groupkit_consumergroup_committed_offset",
                 "groupkit_consumer_records_lag"):  # fmt: skip
        assert partitions_of(r1, name) == a1, name  # the two revoked partitions are gone
    assert value(r1, "groupkit_consumergroup_assigned_partitions") == 2
    assert value(r1, "groupkit_partitions_revoked_total") == 2
    # The newcomer owns its share before a generation covers it; that one comes a heartbeat
    # after its claim (Planner.cover_after_ms), and the leader counts the rebalance with it.
    wait_for(lambda: (value(r1, "groupkit_consumergroup_generation") or 0) > generation_before
             and (value(r1, "groupkit_rebalances_total") or 0) > rebalances_before, 15,
             "the generation that covers the newcomer")  # fmt: skip
    moved = functools.partial(value, r1, "groupkit_rebalance_partitions_moved_total")
    wait_for(lambda: (moved() or 0) >= 2, 15, "the leader to count 2 moved partitions")
    assert value(r2, "groupkit_consumergroup_is_leader", member=m2 or "") == 0
    assert value(r2, "groupkit_consumergroup_members") is None  # the leader's view only
    assert value(r2, "groupkit_consumergroup_assigned_partitions") == 2
    assert value(r2, "groupkit_partitions_assigned_total") == 2
    wait_for(lambda: value(r2, "groupkit_consumergroup_lag_sum") == 0, 15,
             "member 2 to see its partitions' committed offsets")  # fmt: skip

    # -- a garbage control record: both members reject it, by reason ----------------------
    assert c1.coordinator is not None
    control_partition = c1.coordinator.control_partition  # the one the members read
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(control, b"not a groupkit record", key=b"x", partition=control_partition)
    p.flush(10)
    for r in (r1, r2):
        rejected = functools.partial(
            value, r, "groupkit_control_records_rejected_total", reason="bad_bytes"
        )
        wait_for(lambda: rejected() == 1, 15, "the garbage record rejected")  # noqa: B023
        assert value(r, "groupkit_control_records_read_total", kind="rejected") == 1

    # -- leave: member 2's gauges vanish, member 1 takes its partitions back --------------
    driver.remove(c2)
    c2.close()
    after_close = scrape(r2)
    for name, spec in METRICS.items():
        if spec.kind == "gauge":
            assert not after_close.get(name), f"{name} still exported after close"
    wait_for(lambda: value(r1, "groupkit_consumergroup_assigned_partitions") == 4
             and partitions_of(r1, "groupkit_consumergroup_lag") == {0, 1, 2, 3}
             and value(r1, "groupkit_consumergroup_members") == 1,
             30, "member 1 to own all 4 partitions again")  # fmt: skip
    assert value(r1, "groupkit_partitions_assigned_total") == 6

    # -- loss: the control thread stalls past the session; the member loses everything -----
    coordinator = c1.coordinator
    assert coordinator is not None
    driver.pause()
    with coordinator.lock:  # the control loop can neither heartbeat nor replay meanwhile
        time.sleep(2.5)  # the stall under test: longer than the 2 s session
    driver.resume()
    wait_for(lambda: value(r1, "groupkit_partitions_lost_total") == 4, 15,
             "the 4 partitions counted as lost")  # fmt: skip
    wait_for(lambda: value(r1, "groupkit_consumergroup_assigned_partitions") == 4, 30,
             "member 1 to own the 4 partitions again")  # fmt: skip
    # Partitions were paused between an assignment record and the claim of each of the
    # three assignments above (the join, the split, the loss). The leader integrates what it
    # sees between its control turns: one turn that reads both records of a quick claim sees
    # no pause, but not three times over.
    assert (value(r1, "groupkit_paused_partition_seconds_total") or 0) > 0


def test_no_registry_no_metrics_and_nothing_global_on_import() -> None:
    """Importing groupkit registers nothing, starts no thread, configures no logging."""
    code = (
        "import threading, structlog, prometheus_client\n"
        "import groupkit, groupkit.metrics, groupkit.log, groupkit.dev.demo\n"
        "names = list(prometheus_client.REGISTRY._names_to_collectors)\n"
        "print({'threads': threading.active_count(), 'configured': structlog.is_configured(),\n"
        "       'groupkit': [n for n in names if n.startswith('groupkit')]})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    doc = eval(out.stdout)  # our own dict literal
    assert doc == {"threads": 1, "configured": False, "groupkit": []}


def test_serve_exposes_a_registry() -> None:
    from prometheus_client import Counter

    r = CollectorRegistry()
    Counter("groupkit_probe", "probe", registry=r).inc(3)
    server, thread = serve(0, r, addr="127.0.0.1")
    try:
        port = server.server_address[1]
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        assert b"groupkit_probe_total 3.0" in body
    finally:
        server.shutdown()
        thread.join(5)


def test_consumed_rate_window() -> None:
    r = Rate(window_s=10)
    t0 = r._samples[0][0]
    for i in range(1, 21):  # 50 records every half second for 10 s: 100/s
        r.add(50, now=t0 + i * 0.5)
    assert r.value(now=t0 + 10) == pytest.approx(100, rel=0.06)
    assert r.value(now=t0 + 30) == 0  # nothing for 20 s
    r.add(10, now=t0 + 31)
    assert r.value(now=t0 + 31) == pytest.approx(1.0)  # 10 records over the 10 s window


def test_one_prometheus_observer_per_consumer() -> None:
    """An observer reads the member the consumer attaches it to; a second consumer needs its
    own observer (one registry may hold both). Unattached, it exports no series of a member."""
    from types import SimpleNamespace

    r = CollectorRegistry()
    metrics = PrometheusObserver(r)
    with pytest.raises(RuntimeError, match="not attached"):
        _ = metrics.probe
    assert not any(samples for samples in scrape(r).values())
    probe: Any = SimpleNamespace(group_id="g", protocol="cooperative", assignor="range")
    metrics.attached(probe)
    assert metrics.probe is probe and metrics.group == "g"
    with pytest.raises(ValueError, match="one per consumer"):
        metrics.attached(probe)
    PrometheusObserver(r).attached(probe)  # a second observer shares the registry


class FakeProbe:
    """A member's probe without a broker: a fixed status, assignment and offsets."""

    protocol = "cooperative"
    assignor = "range"

    def __init__(self, group: str, member: str, leader: bool, live: int,
                 offsets: dict[tuple[str, int], tuple[int, int | None]],
                 ages: dict[tuple[str, int], float | None] | None = None) -> None:  # fmt: skip
        from groupkit.runtime.lag import GroupOffsets
        from groupkit.runtime.probe import MemberStatus
        from groupkit.types import TopicPartition

        self.group_id = group
        self.member_id = member
        self.topics = tuple(sorted({t for t, _ in offsets}))
        self._status = MemberStatus(member, 3, leader, live if leader else 0, 10)
        tps = {TopicPartition(t, p): v for (t, p), v in offsets.items()}
        self._owned = frozenset(tps)
        self._offsets = GroupOffsets(
            end={tp: end for tp, (end, _c) in tps.items()},
            committed={tp: c for tp, (_e, c) in tps.items()},
            lag={tp: end - (c or 0) for tp, (end, c) in tps.items()},
        )
        self._ages = {TopicPartition(t, p): s for (t, p), s in (ages or {}).items()}

    def status(self) -> Any:
        return self._status

    def owned(self) -> Any:
        return self._owned

    def read_offsets(self, partitions: Any, timeout: float = 10.0) -> Any:
        return self._offsets

    def time_lag(self, offsets: Any, read: bool = True) -> Any:
        return self._ages  # seconds; None: unknown

    def lag_status(self) -> Any:
        return None  # not sampled: no status series


def test_kafka_exporter_names_sum_to_the_group() -> None:
    """With ``kafka_exporter_names``, the lag is also exported as kafka_exporter's series, with
    its labels, and the time lag as kafka-lag-exporter's; each member exports only its own
    partitions, so sums over members (here three members: two sharing one registry, one on its
    own) are the group's, and so is the max of their maxima; only the leader exports the member
    count. Without the option, no ``kafka_`` name is even registered."""
    plain = CollectorRegistry()
    # The collectors hold their observers weakly (a consumer's observer lives as long as it):
    # keep every observer referenced.
    observers = [PrometheusObserver(plain)]
    observers[0].attached(FakeProbe("g", "m0", True, 1, {("t", 0): (5, 1)}))  # type: ignore[arg-type]
    assert value(plain, "groupkit_consumergroup_lag_sum") == 4
    assert not [n for n in scrape(plain) if n.startswith("kafka_")]

    shared, alone = CollectorRegistry(), CollectorRegistry()
    probes = [
        (shared, FakeProbe("g", "m1", True, 3, {("t", 0): (100, 40), ("t", 1): (50, 50)},
                           {("t", 0): 12.5, ("t", 1): 0.0})),
        (shared, FakeProbe("g", "m2", False, 0, {("t", 2): (30, 10), ("u", 0): (7, 2)},
                           {("t", 2): 3.0, ("u", 0): None})),
        (alone, FakeProbe("g", "m3", False, 0, {("t", 3): (9, None)}, {("t", 3): 40.0})),
    ]  # fmt: skip
    for registry, probe in probes:
        observers.append(PrometheusObserver(registry, kafka_exporter_names=True))
        observers[-1].attached(probe)  # type: ignore[arg-type]
    both = [scrape(shared), scrape(alone)]

    def samples(name: str) -> list[tuple[Labels, float]]:
        return [s for got in both for s in got.get(name, [])]

    for name, spec in KAFKA_EXPORTER_METRICS.items():
        assert samples(name), name
        assert all(set(lab) == set(spec.labels) for lab, _ in samples(name)), name
    lag = {(lab["topic"], lab["partition"]): v for lab, v in samples("kafka_consumergroup_lag")}
    assert lag == {("t", "0"): 60, ("t", "1"): 0, ("t", "2"): 20, ("u", "0"): 5, ("t", "3"): 9}
    lag_sum: dict[str, float] = {}
    for lab, v in samples("kafka_consumergroup_lag_sum"):
        lag_sum[lab["topic"]] = lag_sum.get(lab["topic"], 0) + v
    assert lag_sum == {"t": 89, "u": 5}
    # The same numbers as groupkit's own series, summed over the members.
    assert sum(v for _, v in samples("groupkit_consumergroup_lag_sum")) == 94
    offsets = {(lab["topic"], lab["partition"]): v
               for lab, v in samples("kafka_consumergroup_current_offset")}  # fmt: skip
    assert offsets == {("t", "0"): 40, ("t", "1"): 50, ("t", "2"): 10, ("u", "0"): 2}
    assert samples("kafka_consumergroup_members") == [({"consumergroup": "g"}, 3)]
    # Time lag under kafka-lag-exporter's names: an unknown one (u-0) has no series; the
    # registry shared by m1 and m2 keeps the larger of their maxima, and the group's largest
    # is the max over the registries, as `max by (group)` over the members' targets takes it.
    seconds = {(lab["group"], lab["topic"], lab["partition"]): v
               for lab, v in samples("kafka_consumergroup_group_lag_seconds")}  # fmt: skip
    assert seconds == {("g", "t", "0"): 12.5, ("g", "t", "1"): 0.0, ("g", "t", "2"): 3.0,
                       ("g", "t", "3"): 40.0}  # fmt: skip
    maxima = [scrape(r)["kafka_consumergroup_group_max_lag_seconds"] for r in (shared, alone)]
    assert maxima == [[({"group": "g"}, 12.5)], [({"group": "g"}, 40.0)]]
    assert max(v for _, v in samples("groupkit_consumergroup_max_lag_seconds")) == 40.0
