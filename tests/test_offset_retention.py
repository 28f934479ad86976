"""A live group's committed offsets outlive the broker's ``offsets.retention.minutes``; a dead
group's expire as usual.

The data consumer commits as a simple consumer, so the broker expires each committed offset
``offsets.retention.minutes`` after its commit, group alive or not. An owner commits again,
unchanged, the offsets of its idle partitions every ``groupkit.offsets.keepalive.interval.ms``
(runtime/data_consumer.py, "Keep-alive"). The module starts its own broker at one minute of
retention, checked every 5 s (it is the only broker this module starts: nothing here uses the
session's ``kafka`` fixture). Four groups commit ``[100, 100]`` and then idle for over two
minutes: a member with groupkit's defaults keeps them (it reads the retention and keeps alive
at a quarter of it, runtime/retention.py), and so does one with the keep-alive set; the same
member with it off loses them while it runs (what the keep-alive is for), and so does a closed
group.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient

from groupkit import GroupConsumer
from groupkit.dev.broker import LocalBroker
from groupkit.dev.harness import wait_for
from groupkit.runtime.admin import create_topic
from tests.conftest import local_version, unique_name

RETENTION_S = 60
IDLE_S = 130  # "more than two minutes of idleness"
PER_PARTITION = 100


@pytest.fixture(scope="module")
def short_retention(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    props = {"offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "5000"}
    broker = LocalBroker(Path(tmp_path_factory.mktemp("retention-broker")),
                         version=local_version(), extra_properties=props)  # fmt: skip
    with broker:
        yield broker.bootstrap


def _committed(reader: Consumer, topic: str) -> list[int]:
    parts = [KTopicPartition(topic, p) for p in range(2)]
    return [p.offset for p in reader.committed(parts, timeout=10)]


def test_a_live_group_keeps_its_offsets_past_retention_and_a_dead_one_loses_them(
    short_retention: str,
) -> None:
    bootstrap = short_retention
    admin: Any = AdminClient({"bootstrap.servers": bootstrap})
    topic = unique_name("t")
    create_topic(admin, topic, 2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(2):
        for i in range(PER_PARTITION):
            producer.produce(topic, value=b"%d" % i, partition=p)
    assert producer.flush(30) == 0

    def member(group: str, keepalive_ms: int | None) -> GroupConsumer:
        """(``keepalive_ms=None``: groupkit's default)"""
        conf = {
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "session.timeout.ms": 3000, "heartbeat.interval.ms": 300,
            "auto.commit.interval.ms": 500,
            "groupkit.control.topic": unique_name("ctl"),
        }  # fmt: skip
        if keepalive_ms is not None:
            conf["groupkit.offsets.keepalive.interval.ms"] = keepalive_ms
        c = GroupConsumer(conf)
        c.subscribe([topic])
        return c

    groups = {name: unique_name(name) for name in ("default", "kept", "unkept", "dead")}
    members = {
        "default": member(groups["default"], None),
        "kept": member(groups["kept"], 12_000),
        "unkept": member(groups["unkept"], 0),
        "dead": member(groups["dead"], 15_000),
    }
    readers = {
        name: Consumer({"bootstrap.servers": bootstrap, "group.id": g})
        for name, g in groups.items()
    }
    full = [PER_PARTITION, PER_PARTITION]
    try:
        consumed = dict.fromkeys(members, 0)

        def pump() -> None:
            for name, c in members.items():
                m = c.poll(0.02)
                if m is not None and m.error() is None:
                    consumed[name] += 1

        def all_committed() -> bool:
            pump()
            return all(n == 2 * PER_PARTITION for n in consumed.values()) and all(
                _committed(r, topic) == full for r in readers.values()
            )

        wait_for(all_committed, 60, "every group to consume and commit [100, 100]", step=0)
        idle_from = time.monotonic()
        members.pop("dead").close()  # the dead group: nothing of it runs any more

        gone: dict[str, float] = {}
        last_check = 0.0

        def idled_and_expired() -> bool:
            nonlocal last_check
            pump()
            now = time.monotonic()
            if now - last_check < 2:
                return False
            last_check = now
            for name in ("unkept", "dead"):
                if name not in gone and _committed(readers[name], topic) != full:
                    gone[name] = now - idle_from
            for name in ("default", "kept"):
                kept = _committed(readers[name], topic)
                # Checked all along: an offset that expired and came back would be a fluke.
                assert kept == full, (
                    f"the live group {name!r} lost its offsets after {now - idle_from:.0f} s"
                )
            return now - idle_from > IDLE_S and len(gone) == 2

        wait_for(idled_and_expired, IDLE_S + 60, "two minutes of idleness and the expiries",
                 step=0)  # fmt: skip
        # idle all along: the live members read nothing new
        assert consumed["default"] == consumed["kept"] == consumed["unkept"] == 2 * PER_PARTITION
        # The default member read the retention: a quarter of a minute, not a day (what a
        # failed read assumes); a set interval is kept as it is.
        assert members["default"]._data.keepalive.interval == RETENTION_S / 4
        assert members["kept"]._data.keepalive.interval == 12.0
        print(f"expired after (s of idleness): {gone}")
        # Expired as the broker's retention says: not before a minute, within its check.
        for name, after in gone.items():
            assert RETENTION_S - 15 <= after <= IDLE_S + 60, (name, after)
        assert _committed(readers["default"], topic) == _committed(readers["kept"], topic) == full
    finally:
        for c in members.values():
            c.close()
        for r in readers.values():
            r.close()
