"""End to end on the real broker: a group of GroupConsumers with telemetry on writes its lag;
the pipeline reads it back through Spark's Kafka source and produces a report.

Two members (threads of this process, each its own GroupConsumer) consume a topic whose
partition 0 is hot, slower than it is produced, so there is lag to see. The second member
joins after a few snapshots: a rebalance event, and snapshots with both members.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KTP

from groupkit import GroupConsumer
from groupkit.dev.harness import wait_for
from groupkit.lagstatus import PartitionStatus
from groupkit.runtime.telemetry import LagSnapshot, RebalanceEvent, Telemetry, decode
from groupkit.types import TopicPartition
from tests.conftest import delete_topics, unique_name
from tests.spark_fixtures import spark  # noqa: F401  (the session fixture)

pytestmark = pytest.mark.broker

PARTITIONS = 4
INTERVAL_MS = 400


@dataclass
class Run:
    group: str
    topic: str
    telemetry_topic: str
    members: list[str] = field(default_factory=list)
    records: list[Telemetry] = field(default_factory=list)


def _member(conf: dict[str, Any], topic: str, stop: threading.Event, ids: list[str]) -> None:
    c = GroupConsumer(conf)
    try:
        c.subscribe([topic])
        while not stop.is_set():
            c.consume(200, 0.05)
            if c.member_id and c.member_id not in ids:
                ids.append(c.member_id)
            time.sleep(0.05)  # slower than the hot partition is produced: lag builds
    finally:
        c.close()


def _read_all(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("reader"),
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([KTP(topic, 0, 0)])
        _, high = c.get_watermark_offsets(KTP(topic, 0), timeout=10)
        out: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(out) < high and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    out.append(m.value() or b"")
        return out
    finally:
        c.close()


def _timestamp_at(bootstrap: str, topic: str, partition: int, offset: int) -> int:
    """CreateTime (ms) of the record at ``offset``, read directly."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("reader")})
    try:
        c.assign([KTP(topic, partition, offset)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                assert m.offset() == offset
                return int(m.timestamp()[1])
        raise AssertionError(f"no record at {topic}/{partition}@{offset}")
    finally:
        c.close()


@pytest.fixture(scope="module")
def group_run(bootstrap: str, admin: Any) -> Iterator[Run]:
    from tests.conftest import create_topic

    run = Run(unique_name("g"), unique_name("t"), unique_name("telemetry"))
    control = unique_name("ctl")
    create_topic(admin, run.topic, PARTITIONS)
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": run.group,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 3000,
        "heartbeat.interval.ms": 300,
        "auto.commit.interval.ms": 200,
        "groupkit.assignor": "range",
        "groupkit.control.topic": control,
        "groupkit.telemetry.enable": True,
        "groupkit.telemetry.topic": run.telemetry_topic,
        "groupkit.telemetry.interval.ms": INTERVAL_MS,
    }
    # The follower stops first, so the lead never changes hands (asserted below).
    stop_produce, stop_first, stop_second = threading.Event(), threading.Event(), threading.Event()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def produce() -> None:
        while not stop_produce.is_set():
            for _ in range(300):
                producer.produce(run.topic, b"x" * 20, partition=0)
            for p in range(1, PARTITIONS):
                for _ in range(10):
                    producer.produce(run.topic, b"y" * 20, partition=p)
            producer.poll(0)
            time.sleep(0.05)  # the load's pace
        producer.flush(10)

    threads = [threading.Thread(target=produce, daemon=True)]
    threads.append(
        threading.Thread(
            target=_member, daemon=True, args=(conf, run.topic, stop_first, run.members)
        )
    )
    for t in threads:
        t.start()
    try:

        def first_snapshots() -> bool:
            if run.telemetry_topic not in admin.list_topics(timeout=5).topics:
                return False  # the leader creates it with its first record
            return len(_read_all(bootstrap, run.telemetry_topic)) >= 3

        wait_for(first_snapshots, 60, "the first leader's snapshots", step=0.3)
        second = threading.Thread(
            target=_member, daemon=True, args=(conf, run.topic, stop_second, run.members)
        )
        second.start()
        threads.append(second)

        def enough() -> bool:
            recs = [decode(v) for v in _read_all(bootstrap, run.telemetry_topic)]
            snaps = [r for r in recs if isinstance(r, LagSnapshot) and len(r.members) == 2]
            return len(snaps) >= 4 and any(isinstance(r, RebalanceEvent) for r in recs)

        wait_for(enough, 60, "snapshots of both members and a rebalance event", step=0.5)
    finally:
        stop_produce.set()
        stop_second.set()
        for t in reversed(threads):
            t.join(20)
            stop_first.set()
    run.records = [decode(v) for v in _read_all(bootstrap, run.telemetry_topic)]
    yield run
    delete_topics(admin, [run.topic, run.telemetry_topic, control])


def test_only_the_leader_publishes_snapshots_and_rebalances(group_run: Run, bootstrap: str) -> None:
    snaps = [r for r in group_run.records if isinstance(r, LagSnapshot)]
    events = [r for r in group_run.records if isinstance(r, RebalanceEvent)]
    assert len(group_run.members) == 2
    first = group_run.members[0]
    # The first member leads throughout; a follower publishing would name itself.
    assert {s.leader for s in snaps} == {first}
    assert {e.leader for e in events} == {first}
    assert all(s.group == group_run.group for s in snaps)
    ts = [s.ts_ms for s in snaps]
    assert ts == sorted(ts) and min(b - a for a, b in itertools.pairwise(ts)) >= (INTERVAL_MS * 0.5)
    both = [s for s in snaps if len(s.members) == 2]
    assert both, "no snapshot shows both members"
    last = both[-1]
    assert set(last.members) == set(group_run.members)
    assert set(last.owners().values()) == set(group_run.members)
    hot = TopicPartition(group_run.topic, 0)
    assert last.lags()[hot] > 0  # the hot partition lags
    # ...by the age of its first unconsumed record, at the snapshot's time
    committed = last.topics[group_run.topic].committed[0]
    assert committed is not None
    created = _timestamp_at(bootstrap, group_run.topic, 0, committed)
    age = last.time_lags()[hot]
    assert age is not None and age == pytest.approx((last.ts_ms - created) / 1000, abs=1.0)
    for tp, lag in last.lags().items():
        assert lag > 0 or last.time_lags()[tp] == 0.0, tp
    # Burrow's status of every partition, as the leader judged it over its snapshots: a
    # partition without lag is OK whatever its history
    statuses = last.statuses()
    assert set(statuses) == set(last.lags())
    for tp, lag in last.lags().items():
        assert lag > 0 or statuses[tp] is PartitionStatus.OK, tp
    assert any(m.rate for s in snaps for m in s.members.values()), "no rate ever measured"
    # version 2: the records behind each rate, the interval they cover, the load policy
    for s in snaps:
        assert s.version == 2 and s.load_interval_ms == 0  # range does not follow the load
        for m in s.members.values():
            assert (m.rate is None) == (m.processed is None)
            if m.processed is not None and s.interval_ms:
                assert m.rate == pytest.approx(m.processed / (s.interval_ms / 1000), rel=0.01)
    assert any(s.interval_ms for s in snaps)
    joined = [e for e in events if e.moved > 0]
    assert joined and all(e.protocol == "cooperative" and e.assignor == "range" for e in events)


def test_pipeline_reads_the_telemetry_topic_with_spark(
    group_run: Run,
    spark: Any,  # noqa: F811
    bootstrap: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from groupkit.cli import main

    out = tmp_path / "report"
    code = main(
        [
            "replay",
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            group_run.telemetry_topic,
            "--out",
            str(out),
            "--master",
            "local[2]",
        ]
    )
    assert code == 0, capsys.readouterr().err
    doc = json.loads((out / "report.json").read_text())
    snaps = sum(isinstance(r, LagSnapshot) for r in group_run.records)
    assert doc["records"] == len(group_run.records)
    assert doc["malformed"] == {}
    assert doc["groups"] == 1
    from groupkit.assignors import assignor_names

    assert doc["evaluations"] == snaps * (len(assignor_names()) + 1)
    assert [b["group"] for b in doc["best"]] == [group_run.group]
    report = (out / "report.md").read_text()
    assert f"| {group_run.group} | **" in report
    assert "Kafka topic" in report and "## Real rebalances" in report
    results = spark.read.parquet(str(out / "replay.parquet")).toPandas()
    actual = results[results["assignor"] == "actual"].sort_values("snapshot")
    assert (actual["max_member_lag"] > 0).any()
