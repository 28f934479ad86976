"""Faults a single broker cannot show, on the session's three-broker ``cluster``.

Each test runs a group of three GroupConsumer members, each its own process
(``tests/group_worker.py``), on a topic with replication factor 3 while a keyed, idempotent
producer writes, injects one fault, and audits as the chaos harness does (``tests.chaos.audit``):
0 overlapping ownership between running members, 0 lost records, no record a frozen member was
handed after its fence should have stopped it, and the group stable again (every partition owned
once and consumed) within session timeout + ``MARGIN_S`` of the fault.

- the broker leading the group's control partition is killed (-9) and restarted;
- a broker leading data partitions (and not the control partition) is killed and restarted;
- broker clock skew: one broker runs with its wall clock ``SKEW_S`` ahead
  (``groupkit.dev.broker.skewed_clock_jvm_args``); the control partition's
  leadership moves to it (the leader's controlled shutdown) and back (preferred-leader election)
  while a member is frozen for just under its session, with ``groupkit.max.clock.skew.ms`` above
  the skew. The test first shows the skew is real: a LogAppendTime record led by that broker is
  stamped ``SKEW_S`` ahead of this machine's clock (measured 0.98-1.00 s). With the allowance
  set to 0 instead, the same run fails: the frozen member processed 348 records produced after
  the moment its session had ended by the skewed log's time (``zombie_late_records``).

A member cut off from every broker by a fault proxy: tests/test_cluster_partition.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from groupkit.dev.broker import LocalCluster
from groupkit.dev.harness import TP, LoadProducer, wait_for
from groupkit.runtime.admin import create_topic
from groupkit.runtime.control_topic import REQUIRED_CONFIG, TUNING_CONFIG
from tests.chaos import ChaosReport, FaultRun
from tests.conftest import KafkaBackend, delete_topics, unique_name
from tests.groupharness import WorkerGroup, control_partition

PARTITIONS = 6
SESSION_MS = 3000
#: Re-stabilisation allowance beyond the session: the controller fences a killed broker after
#: 4 s (conftest.CLUSTER_PROPERTIES), clients then refresh metadata, and a member whose session
#: lapsed meanwhile rejoins.
MARGIN_S = 15.0

SKEW_S = 1
SKEW_SESSION_MS = 6000
SKEW_ALLOWANCE_MS = 1500
#: Just under the session, where skew bites (as a member frozen 8.5-9 s of a 10 s session).
PAUSE_S = SKEW_SESSION_MS / 1000 - 0.5


def local_cluster(backend: KafkaBackend) -> LocalCluster:
    if backend.local is None:
        pytest.skip("GROUPKIT_BOOTSTRAP_SERVERS names a cluster whose brokers this run cannot kill")
    lc: LocalCluster = backend.local
    # A failed test may have left a node killed or stopped: the next one starts whole.
    for n in lc.nodes:
        if n.status().state != "running":
            lc.restart(n.node_id)
    return lc


class Run(FaultRun):
    """A group on the cluster under one test's faults (tests.chaos.FaultRun); stable within
    session + ``MARGIN_S`` of each fault."""

    deadline_from_since = True

    def __init__(self, lc: LocalCluster, admin: AdminClient, group: WorkerGroup,
                 producer: LoadProducer, topic: str, session_s: float,
                 parts: set[TP]) -> None:  # fmt: skip
        super().__init__(group, producer, parts, session_s, MARGIN_S)
        self.lc, self.admin, self.topic = lc, admin, topic

    def control_partition(self) -> TopicPartition:
        """The group's partition of its control topic (from the topic's partition count)."""
        return TopicPartition(*control_partition(self.admin, self.group))

    def leader(self, tp: TopicPartition) -> int:
        return self.lc.leader(tp.topic, tp.partition)

    def finish(self) -> ChaosReport:
        dead = [w for w in self.group.members.values() if not w.alive]
        assert not dead, "members died:\n" + "\n".join(
            f"--- {w.name} (exit {w.proc.poll()}):\n{w.log_tail()}" for w in dead
        )
        super().finish()
        print(self.report.summary(), self.stable_after)
        return self.report


@contextmanager
def running_group(
    lc: LocalCluster,
    workdir: Path,
    session_ms: int = SESSION_MS,
    control_topic: str | None = None,
    extra: dict[str, object] | None = None,
    first_via: str | None = None,
) -> Iterator[Run]:
    """Three members on a fresh RF-3 topic of ``PARTITIONS`` partitions, a producer writing.

    ``first_via``: the first member (``w0``, ``client.id`` ``w0``) bootstraps from there, e.g.
    through a fault proxy."""
    admin = AdminClient(lc.client_config())
    # -1: the brokers' default.replication.factor, 3 (tests.conftest.create_topic makes RF 1)
    topic = unique_name("data")
    create_topic(admin, topic, PARTITIONS, replication_factor=-1)
    ctl = control_topic or unique_name("ctl")
    group = WorkerGroup(lc.bootstrap, unique_name("g"), [topic], workdir,
                        session_timeout_ms=session_ms, control_topic=ctl,
                        extra=dict(extra or {}))  # fmt: skip
    producer = LoadProducer.keyed(lc.bootstrap, topic, 100)
    run = Run(lc, admin, group, producer, topic, session_ms / 1000,
              {(topic, p) for p in range(PARTITIONS)})  # fmt: skip
    try:
        producer.start()
        t0 = time.monotonic()
        group.spawn(bootstrap=first_via, client_id="w0" if first_via else None)
        for _ in range(2):
            group.spawn()
        run.stable("start", t0)
        yield run
        # A member that died of a fault (its control loop failed) would hide in "stable".
        assert [w.name for w in group.members.values() if not w.alive] == []
    finally:
        producer.stop()
        group.stop_all()
        delete_topics(admin, [topic, ctl])


def assert_clean(report: ChaosReport) -> None:
    assert report.produced > 300
    assert report.lost == 0
    assert report.running_overlaps == []
    assert report.unexplained_duplicates == []
    assert report.zombie_late_records == []


def test_cluster_shape(cluster: KafkaBackend) -> None:
    """Three brokers on racks r0..r2; a topic gets three replicas and needs two in sync."""
    lc = local_cluster(cluster)
    admin = AdminClient(lc.client_config())
    assert sorted(admin.list_topics(timeout=10).brokers) == [0, 1, 2]
    name = unique_name("shape")
    create_topic(admin, name, 3, replication_factor=-1)
    try:
        # Any broker may answer, and a fresh cluster's may not know the topic yet (seen once:
        # no partitions at all, right after create_topic saw every one led), or not yet its
        # leaders (-1) nor all of its replicas: wait for one answer that knows them all.
        parts: list[Any] = []

        def described() -> bool:
            nonlocal parts
            parts = list(admin.list_topics(name, timeout=10).topics[name].partitions.values())
            return len(parts) == 3 and all(p.leader >= 0 and len(p.isrs) == 3 for p in parts)

        wait_for(described, 30, f"every broker to describe {name}")
        shape = [(p.id, p.leader, p.replicas, p.isrs) for p in parts]
        assert all(sorted(p.replicas) == [0, 1, 2] for p in parts), shape
        assert len({p.leader for p in parts}) == 3, shape  # leadership spread over the brokers
        res = ConfigResource(ConfigResource.Type.TOPIC, name)
        conf: dict[str, Any] = {}

        def configs() -> bool:
            # the broker that answers may not know the new topic yet either (it can say
            # UNKNOWN_TOPIC_OR_PART right after every broker described it): ask again
            nonlocal conf
            try:
                conf = admin.describe_configs([res])[res].result(timeout=10)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
                return False
            return True

        wait_for(configs, 30, f"a broker to describe the configs of {name}")
        assert conf["min.insync.replicas"].value == "2"
        for node in (0, 1, 2):
            res = ConfigResource(ConfigResource.Type.BROKER, str(node))
            conf = admin.describe_configs([res])[res].result(timeout=30)
            assert conf["broker.rack"].value == f"r{node}"
            assert conf["offsets.topic.replication.factor"].value == "3"
    finally:
        delete_topics(admin, [name])


def test_kill_control_partition_leader(cluster: KafkaBackend, tmp_path: Path) -> None:
    lc = local_cluster(cluster)
    with running_group(lc, tmp_path) as run:
        ctl = run.control_partition()
        victim = run.leader(ctl)
        # Until the controller fences the dead leader no heartbeat lands: every member may lose
        # its session and its partitions may be processed again from their last commit.
        run.dup_allowed |= run.parts
        t0 = time.monotonic()
        lc.kill(victim)
        run.stable(f"kill -9 of node {victim}", t0)
        assert run.leader(ctl) not in (victim, -1)
        lc.restart(victim)
        run.stable(f"restart of node {victim}", time.monotonic())
        report = run.finish()
    assert_clean(report)
    assert all(t <= SESSION_MS / 1000 + MARGIN_S for t in run.stable_after.values())


def test_kill_data_partition_leader(cluster: KafkaBackend, tmp_path: Path) -> None:
    lc = local_cluster(cluster)
    with running_group(lc, tmp_path) as run:
        control_leader = run.leader(run.control_partition())
        leaders = {p: lc.leader(run.topic, p) for p in range(PARTITIONS)}
        victim = next(n for n in leaders.values() if n != control_leader)
        # The control partition stays led, so ownership need not change: only fetches and
        # produces move to another replica, and a partition that keeps its owner must not
        # have a record processed twice. (On a loaded machine a member may still miss its own
        # session while the brokers fail over; a partition that changes hands after the kill
        # is then re-read from its last commit, as at-least-once allows.)
        t0 = time.monotonic()
        lc.kill(victim)
        run.stable(f"kill -9 of node {victim}", t0)
        moved = [p for p, n in leaders.items() if n == victim]
        assert all(lc.leader(run.topic, p) not in (victim, -1) for p in moved)
        lc.restart(victim)
        run.stable(f"restart of node {victim}", time.monotonic())
        handed_over = {tp for tp, spans in run.group.intervals().items()
                       if any(start > t0 for start, _, _ in spans)}  # fmt: skip
        run.dup_allowed |= handed_over
        report = run.finish()
    assert_clean(report)  # no duplicate on a partition that kept its owner
    assert all(t <= SESSION_MS / 1000 + MARGIN_S for t in run.stable_after.values())


# --- broker clock skew ------------------------------------------------------------------


def log_append_lead_s(lc: LocalCluster, node: int) -> tuple[float, float]:
    """How far ahead of this machine's clock ``node`` stamps a LogAppendTime record: bounds
    (stamp - time after the ack, stamp - time before the send), in seconds."""
    admin = AdminClient(lc.client_config())
    name = unique_name("clock")
    others = [n.node_id for n in lc.nodes if n.node_id != node]
    admin.create_topics([NewTopic(name, 1, replica_assignment=[[node, *others]],
                                  config={"message.timestamp.type": "LogAppendTime"})]
                        )[name].result(30)  # fmt: skip
    try:
        wait_for(lambda: lc.leader(name, 0) == node, 30, f"node {node} to lead {name}")
        producer = Producer({**lc.client_config(), "acks": "all", "linger.ms": 0})
        best = (float("-inf"), float("inf"))
        # On a loaded machine one round trip can take seconds: keep the tightest of a few.
        stamps: list[tuple[int, int]] = []
        for _ in range(20):
            stamps.clear()
            before = time.time()
            producer.produce(name, b"x", on_delivery=lambda e, m: stamps.append(m.timestamp()))
            assert producer.flush(30) == 0
            after = time.time()
            ((kind, ts_ms),) = stamps
            assert kind == 2  # TIMESTAMP_LOG_APPEND_TIME: the leader's clock, not ours
            if after - before < best[1] - best[0]:
                best = (ts_ms / 1000 - after, ts_ms / 1000 - before)
            if after - before < 0.1:
                break
        return best
    finally:
        delete_topics(admin, [name])


def test_broker_clock_skew(cluster: KafkaBackend, tmp_path: Path) -> None:
    lc = local_cluster(cluster)
    home, skewed = 0, 2  # the control partition's replicas, in preference order: home, skewed
    third = 1
    lc.restart(skewed, clock_offset_s=SKEW_S)
    try:
        lo, hi = log_append_lead_s(lc, skewed)
        print(f"node {skewed} stamps {lo:.3f}..{hi:.3f} s ahead")
        assert lo > SKEW_S - 0.3 and hi < SKEW_S + 0.3
        base_lo, base_hi = log_append_lead_s(lc, home)
        assert base_lo > -0.3 and base_hi < 0.3

        admin = AdminClient(lc.client_config())
        ctl = unique_name("ctl")
        admin.create_topics([NewTopic(ctl, 1, replica_assignment=[[home, skewed, third]],
                                      config={**REQUIRED_CONFIG, **TUNING_CONFIG})]
                            )[ctl].result(30)  # fmt: skip
        extra = {"groupkit.max.clock.skew.ms": SKEW_ALLOWANCE_MS,
                 "groupkit.control.topic.partitions": 1}  # fmt: skip
        with running_group(lc, tmp_path, SKEW_SESSION_MS, ctl, extra) as run:
            tp = run.control_partition()
            assert run.leader(tp) == home

            def to_skewed() -> None:
                # A controlled shutdown hands the leadership over at once (no outage).
                lc.node(home).stop()
                wait_for(lambda: run.leader(tp) == skewed, 3, f"node {skewed} to lead {tp}")

            first = next(w for w in run.group.live() if w.owned())
            run.freeze_through(first, to_skewed, PAUSE_S, f"leadership to the +{SKEW_S}s node")

            lc.restart(home)
            wait_for(lambda: home in run.admin.list_topics(tp.topic, timeout=10)
                     .topics[tp.topic].partitions[tp.partition].isrs, 30,
                     f"node {home} back in the ISR")  # fmt: skip

            def to_home() -> None:
                run.admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(timeout=10)
                wait_for(lambda: run.leader(tp) == home, 3, f"node {home} to lead {tp} again")

            second = next(w for w in run.group.live() if w.owned() and w is not first)
            run.freeze_through(second, to_home, PAUSE_S, "leadership back to the true-clock node")
            report = run.finish()
        assert_clean(report)
        assert all(t <= SKEW_SESSION_MS / 1000 + MARGIN_S for t in run.stable_after.values())
    finally:
        with suppress(Exception):
            lc.restart(skewed, clock_offset_s=0)
        if lc.node(home).status().state != "running":
            lc.restart(home)
