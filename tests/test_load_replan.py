"""Placement that follows the load, on a real broker (runtime/load.py, protocol/placement.py).

Two members, each processing at most ``RATE`` records a second (paced, as the demo's
``--max-rate``), four partitions. A hot skew on the partitions of one member makes it fall
behind: the leader measures it from the offsets alone and writes a re-plan that moves one of
them to the other member (logged, counted, in the assignment record, shown by describe). A
steady, even load makes no move.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from groupkit import GroupConsumer
from groupkit.dev.harness import wait_for
from groupkit.metrics import PrometheusObserver
from groupkit.runtime.describe import describe_group

PARTITIONS = 4
#: records a second a member processes at most
RATE = 150
INTERVAL_MS = 2_000


class Paced:
    """A member polling on its own thread, at most ``RATE`` records a second."""

    def __init__(self, consumer: GroupConsumer) -> None:
        self.consumer = consumer
        self.stop = threading.Event()
        self.processed = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                self.processed += 1
                time.sleep(1 / RATE)


class Load:
    """Produces ``rates[p]`` records a second into partition ``p``, on its own thread."""

    def __init__(self, bootstrap: str, topic: str, rates: dict[int, float]) -> None:
        self.producer: Producer | None = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        self.topic = topic
        self.rates = dict(rates)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        producer = self.producer
        assert producer is not None
        tick = 0.05
        owed = dict.fromkeys(self.rates, 0.0)
        while not self.stop.is_set():
            for p, r in self.rates.items():
                owed[p] += r * tick
                while owed[p] >= 1:
                    producer.produce(self.topic, value=b"x" * 16, partition=p)
                    owed[p] -= 1
            producer.poll(0)
            time.sleep(tick)
        producer.flush(5)


@pytest.fixture
def running() -> Iterator[list[Any]]:
    """Loads and paced members to stop after the test (their consumers closed)."""
    made: list[Any] = []
    yield made
    for x in made:
        x.stop.set()
    for x in made:
        x.thread.join(10)
        if isinstance(x, Paced):
            x.consumer.close()
        else:
            x.producer = None  # its client goes with it, before the broker does
    made.clear()


def _group(
    conf: dict[str, Any], topic: str, running: list[Any], registries: list[CollectorRegistry]
) -> list[Paced]:
    cfg = {
        **conf,
        "groupkit.assignor": "cooperative-sticky",
        "groupkit.load.rebalance.interval.ms": INTERVAL_MS,
        "auto.commit.interval.ms": 300,
    }
    members = [
        Paced(GroupConsumer({**cfg, "client.id": f"c{i}"}, observers=[PrometheusObserver(r)]))
        for i, r in enumerate(registries)
    ]
    running.extend(members)
    for m in members:
        m.consumer.subscribe([topic])
    return members


def _owned(m: Paced) -> list[int]:
    return sorted(tp.partition for tp in m.consumer.assignment())


def _settled(members: list[Paced]) -> Callable[[], bool]:
    def ok() -> bool:
        owned = [p for m in members for p in _owned(m)]
        return sorted(owned) == list(range(PARTITIONS)) and all(
            len(_owned(m)) == 2 for m in members
        )

    return ok


def test_a_hot_skew_moves_a_partition(
    conf: dict[str, Any],
    topic_factory: Callable[..., str],
    bootstrap: str,
    running: list[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="groupkit")
    topic = topic_factory(partitions=PARTITIONS)
    registries = [CollectorRegistry() for _ in range(2)]
    members = _group(conf, topic, running, registries)
    wait_for(_settled(members), 60, "two partitions each")
    hot_member, cold_member = members
    hot = _owned(hot_member)
    # the hot member receives 2 x 120 = 240 records/s and processes 150: it falls behind
    running.append(Load(bootstrap, topic, {p: (120.0 if p in hot else 5.0) for p in range(4)}))

    def replanned() -> bool:
        c = hot_member.consumer.coordinator
        a = c.state.assignment if c is not None else None
        return a is not None and a.replan is not None

    wait_for(replanned, 90, "a re-plan for the load")
    c = hot_member.consumer.coordinator
    assert c is not None and c.state.assignment is not None
    info = c.state.assignment.replan
    assert info is not None and info.reason == "overload" and info.moved == 1, info
    assert info.gain >= 0.2
    # one hot partition moves to the cold member; the other stays where it was, unpaused
    wait_for(lambda: len(_owned(cold_member)) == 3, 30, "the moved partition taken")
    moved = set(_owned(cold_member)) & set(hot)
    assert len(moved) == 1, (_owned(cold_member), hot)
    assert set(_owned(hot_member)) == set(hot) - moved
    # logged, counted by the leader, and shown by describe (which reads only the log)
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("load.replan")]
    assert logged and "reason=overload" in logged[0], logged
    leader = next(i for i, m in enumerate(members) if m.consumer.is_leader)
    counted = registries[leader].get_sample_value(
        "groupkit_load_replans_total",
        {"group": conf["group.id"], "member": members[leader].consumer.member_id or "",
         "reason": "overload"},
    )  # fmt: skip
    assert counted == 1
    desc = describe_group(conf, with_lag=False)
    assert desc["replan"]["reason"] == "overload" and desc["replan"]["moved"] == 1
    assert desc["replan"]["gain"] == pytest.approx(info.gain, abs=1e-3)


def test_a_steady_even_load_makes_no_move(
    conf: dict[str, Any],
    topic_factory: Callable[..., str],
    bootstrap: str,
    running: list[Any],
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    members = _group(conf, topic, running, [CollectorRegistry() for _ in range(2)])
    wait_for(_settled(members), 60, "two partitions each")
    c = members[0].consumer.coordinator
    assert c is not None
    ids = {m.consumer.member_id for m in members}

    # (a newcomer owns its share before the generation that covers it: wait for that one, and
    # for its completion, if it revoked what a giver released after it was planned)
    def covered() -> bool:
        a = c.state.assignment
        return all(c.state.covers(i) for i in ids) and a is not None and a.phase == "complete"

    wait_for(covered, 30, "a complete generation covering both")
    generation = c.state.generation
    # 2 x 30 = 60 records/s a member, which processes 150: it keeps up
    running.append(Load(bootstrap, topic, dict.fromkeys(range(PARTITIONS), 30.0)))
    time.sleep(6 * INTERVAL_MS / 1000)
    leader = next(m for m in members if m.consumer.is_leader).consumer.coordinator
    assert leader is not None and leader.load is not None
    assert leader.load.last is not None, "the leader decided nothing"
    assert leader.load.last.replan is None, leader.load.last
    a = c.state.assignment
    assert a is not None and a.replan is None and c.state.generation == generation
    assert all(m.processed > 0 for m in members)
