"""GroupConsumer's hot path keeps every promise of the slow one: real broker, real clients.

``poll``/``consume`` do not filter each record by ownership, store each offset themselves or
take the coordinator lock on every call (see ``groupkit/runtime/consumer.py``). These tests hold
it to the rules such steps would enforce, including the librdkafka behaviour the hot path
relies on instead:

- a fetch started after an unassign never returns a record of the unassigned partitions, and
  unassigning drops their stored offsets;
- a member never hands out a record of a partition it does not own, through rebalances;
- stored and committed offsets never pass the records handed to the user (a revocation's commit
  leaves no gap for the next owner);
- a fenced member hands out nothing: no record from a call that starts after its session lapsed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as KTP

from groupkit import GroupConsumer
from groupkit.dev.harness import LoadProducer, wait_for
from groupkit.errors import FencedError
from groupkit.runtime.hooks import GroupObserver
from tests.conftest import unique_name
from tests.groupharness import subscribed

pytestmark = pytest.mark.broker

TP = tuple[str, int]


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    """``per_partition`` records into each partition, in few large batches (so one fetch brings
    many records of a partition into the consumer's queue at once)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100, "batch.size": 1_000_000})
    for i in range(per_partition):
        for part in range(partitions):
            p.produce(topic, value=b"v" * 100, key=str(i).encode(), partition=part)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(30) == 0


def records(msgs: list[Message]) -> list[Message]:
    return [m for m in msgs if m.error() is None]


def tp(m: Message) -> TP:
    return (m.topic() or "", m.partition() or 0)


# ---------------------------------------------------------------------- librdkafka, as relied on


@pytest.mark.parametrize("how", ["incremental_unassign", "assign"])
@pytest.mark.parametrize("read", ["poll", "consume"])
def test_a_fetch_after_unassign_returns_no_record_of_the_unassigned_partition(
    how: str, read: str, bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    """The data consumer's guarantee the hot path stands on (librdkafka's version barrier)."""
    topic = topic_factory(partitions=2)
    n = 2000
    produce(bootstrap, topic, 2, n)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"),
                  "enable.auto.commit": False, "enable.auto.offset.store": True,
                  "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        both = [KTP(topic, 0, OFFSET_BEGINNING), KTP(topic, 1, OFFSET_BEGINNING)]
        if how == "assign":
            c.assign(both)
        else:
            c.incremental_assign(both)
        # Read until the first record of partition 1: the rest of the fetch that brought it
        # (librdkafka enqueues a fetch response's records in one go) waits in the queue.
        # Partition 0's records read meanwhile count too (unless partition 0 is assigned again
        # from its beginning below): librdkafka may have handed out all of them before the
        # first of partition 1 (a run may read 0 of them after the unassign).
        first_of_1: int | None = None
        seen0: set[int] = set()
        deadline = time.monotonic() + 60
        while first_of_1 is None:
            assert time.monotonic() < deadline, "no record of partition 1"
            m = c.poll(1.0)
            if m is not None and m.error() is None and m.partition() == 1:
                first_of_1 = m.offset()
            elif m is not None and m.error() is None:
                seen0.add(m.offset() or 0)
        assert first_of_1 is not None and first_of_1 < n - 1  # more of partition 1 is queued
        if how == "assign":
            c.assign([KTP(topic, 0, OFFSET_BEGINNING)])
            seen0.clear()  # partition 0 is read again from its beginning
        else:
            c.incremental_unassign([KTP(topic, 1)])
        deadline = time.monotonic() + 60
        while len(seen0) < n:
            assert time.monotonic() < deadline, f"read {len(seen0)} of partition 0's {n}"
            if read == "poll":
                m = c.poll(0.5)
                batch = [] if m is None else [m]
            else:
                batch = c.consume(500, 0.5)
            for m in records(batch):
                assert m.partition() == 0, f"record {m.offset()} of unassigned partition 1"
                seen0.add(m.offset() or 0)
        # Unassigning dropped partition 1's stored offset: a commit of what is stored commits
        # partition 0 only, never the record of partition 1 that auto-store stored.
        c.commit(asynchronous=False)
        committed = {p.partition: p.offset for p in c.committed([KTP(topic, 0), KTP(topic, 1)],
                                                                 timeout=10)}  # fmt: skip
        assert committed[0] == n
        assert committed[1] < 0, committed  # nothing committed
    finally:
        c.close()


# ---------------------------------------------------------------------- GroupConsumer


class Reader:
    """Plays one app: reads through ``poll`` or ``consume(7)`` and audits each record at once."""

    def __init__(self, c: GroupConsumer, read: str) -> None:
        self.c = c
        self.read = read
        self.got: dict[TP, list[int]] = {}

    def step(self) -> int:
        if self.read == "poll":
            m = self.c.poll(0.01)
            batch = [] if m is None else [m]
        else:
            batch = self.c.consume(7, 0.01)
        owned = {(p.topic, p.partition) for p in self.c.assignment()}
        for m in records(batch):
            assert tp(m) in owned, f"{self.c.member_id} got {tp(m)}@{m.offset()}, owns {owned}"
            self.got.setdefault(tp(m), []).append(m.offset() or 0)
        return len(batch)


@pytest.mark.parametrize("protocol", ["cooperative", "eager"])
@pytest.mark.parametrize("read", ["poll", "consume"])
def test_records_only_of_owned_partitions_and_no_gap_across_a_rebalance(
    protocol: str,
    read: str,
    conf: dict[str, Any],
    bootstrap: str,
    topic_factory: Callable[..., str],
    consumers: list[GroupConsumer],
) -> None:
    topic = topic_factory(partitions=4)
    n = 3000
    produce(bootstrap, topic, 4, n)
    cfg = {**conf, "groupkit.rebalance.protocol": protocol}
    a = subscribed(consumers, cfg, [topic])
    ra = Reader(a, read)
    # a owns and fetches all four: each has records queued when b joins.
    wait_for(lambda: ra.step() >= 0 and len(ra.got) == 4, 60, "a to read every partition", 0)
    b = subscribed(consumers, cfg, [topic])
    rb = Reader(b, read)

    def shared() -> bool:
        ra.step()
        rb.step()
        return len(a.assignment()) == 2 == len(b.assignment())

    wait_for(shared, 60, "a and b to share the partitions", 0)

    def done() -> bool:
        ra.step()
        rb.step()
        for p in range(4):
            got = set(ra.got.get((topic, p), [])) | set(rb.got.get((topic, p), []))
            if len(got) < n:
                return False
        return True

    wait_for(done, 120, "every record to be read", 0)
    for p in range(4):
        offsets = set(ra.got.get((topic, p), [])) | set(rb.got.get((topic, p), []))
        # The next owner starts at the commit of the last: a commit past a record never
        # handed out would show as a gap here (duplicates are allowed: at-least-once).
        assert offsets == set(range(n)), (p, sorted(set(range(n)) - offsets)[:10])
    moved = {(topic, p.partition) for p in b.assignment()}
    assert moved and all(m in ra.got for m in moved)  # a did read what moved to b


@pytest.mark.parametrize("read", ["poll", "consume"])
def test_stored_offsets_stop_at_the_records_handed_out(
    read: str,
    conf: dict[str, Any],
    bootstrap: str,
    topic_factory: Callable[..., str],
    consumers: list[GroupConsumer],
) -> None:
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, 2, 1000)
    c = subscribed(consumers, {**conf, "enable.auto.commit": False}, [topic])
    r = Reader(c, read)
    wait_for(lambda: r.step() >= 0 and sum(map(len, r.got.values())) >= 300, 60, "300 records", 0)
    c.commit(asynchronous=False)  # what librdkafka stored: exactly what was handed out
    committed = c.committed([KTP(topic, 0), KTP(topic, 1)])
    for p in committed:
        got = r.got.get((topic, p.partition))
        assert p.offset == (max(got) + 1 if got else -1001), (p, got and max(got))


def test_with_auto_offset_store_off_only_the_user_stores(
    conf: dict[str, Any],
    bootstrap: str,
    topic_factory: Callable[..., str],
    consumers: list[GroupConsumer],
) -> None:
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, 1, 100)
    cfg = {**conf, "enable.auto.commit": False, "enable.auto.offset.store": "false"}
    c = subscribed(consumers, cfg, [topic])
    got: list[Message] = []

    def read() -> bool:
        got.extend(records(c.consume(10, 0.05)))
        return len(got) >= 50

    wait_for(read, 60, "50 records", 0)
    with pytest.raises(KafkaException):  # nothing stored, nothing to commit
        c.commit(asynchronous=False)
    c.store_offsets(message=got[9])
    c.commit(asynchronous=False)
    assert c.committed([KTP(topic, 0)])[0].offset == 10


def test_a_fenced_member_hands_out_nothing(
    conf: dict[str, Any],
    bootstrap: str,
    topic_factory: Callable[..., str],
    consumers: list[GroupConsumer],
) -> None:
    """Its control loop frozen (no heartbeat reaches the log), the member keeps polling a full
    queue on the hot path: no call that starts after ``session.timeout`` returns a record."""
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, 2, 20_000)
    session_s = 2.0
    lost: list[KTP] = []
    cfg = {**conf, "session.timeout.ms": int(session_s * 1000), "heartbeat.interval.ms": 200,
           "auto.commit.interval.ms": 100}  # fmt: skip
    c = subscribed(consumers, cfg, [topic], on_lost=lambda _c, ps: lost.extend(ps))
    handed: dict[TP, int] = {}

    def step() -> list[Message]:
        m = c.poll(0.01)
        out = [] if m is None else records([m])
        for x in out:
            handed[tp(x)] = max(handed.get(tp(x), -1), x.offset() or 0)
        return out

    wait_for(lambda: bool(step()) and len(handed) == 2, 60, "records of both partitions", 0)
    coordinator = c.coordinator
    assert coordinator is not None
    for _ in range(200):  # warm: the cached fence deadline is in use
        step()
    coordinator.stop()  # no more heartbeats: the member's own last one ages from here
    lapsed_at = time.monotonic() + session_s  # no earlier than the true deadline
    after = 0
    while after < 300:
        started = time.monotonic()
        got = step()
        if started >= lapsed_at:
            assert got == [], f"a record {started - lapsed_at:.3f}s after the session lapsed"
            after += 1
        else:
            time.sleep(0.002)  # a steady poll loop, records always queued
    assert sorted((p.topic, p.partition) for p in lost) == [(topic, 0), (topic, 1)]
    assert c.assignment() == []
    with pytest.raises(FencedError):
        c.commit(asynchronous=False)
    # Nothing committed (by auto-commit, before the fence) passes what was handed out.
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": conf["group.id"]})
    try:
        for p in probe.committed([KTP(topic, 0), KTP(topic, 1)], timeout=10):
            assert p.offset <= handed[(topic, p.partition)] + 1, (p, handed)
    finally:
        probe.close()


class Counting(GroupObserver):
    def __init__(self) -> None:
        self.counts: dict[TP, int] = {}

    def consumed(self, member_id: str, counts: Any) -> None:
        for key, k in counts:
            self.counts[key] = self.counts.get(key, 0) + k


def test_observers_count_exactly_the_records_handed_out(
    conf: dict[str, Any],
    bootstrap: str,
    topic_factory: Callable[..., str],
    consumers: list[GroupConsumer],
) -> None:
    topic = topic_factory(partitions=3)
    produce(bootstrap, topic, 3, 500)
    obs = Counting()
    c = subscribed(consumers, conf, [topic], observers=[obs])
    handed: dict[TP, int] = {}

    def read() -> bool:
        batch = records(c.consume(50, 0.01))
        m = c.poll(0.01)
        if m is not None:
            batch += records([m])
        for x in batch:
            handed[tp(x)] = handed.get(tp(x), 0) + 1
        return sum(handed.values()) >= 1500

    wait_for(read, 60, "all 1500 records", 0)
    assert obs.counts == handed


@pytest.mark.parametrize("read", ["poll", "consume"])
def test_a_member_frozen_inside_a_fetch_hands_out_nothing_fetched_after(
    read: str,
    conf: dict[str, Any],
    bootstrap: str,
    topic_factory: Callable[..., str],
    consumers: list[GroupConsumer],
) -> None:
    """A zombie: the process stops inside ``poll``/``consume`` (here: in a librdkafka callback
    that the fetch serves) for longer than the session and resumes with records queued. The
    call it was frozen in must fence and drop them, whatever the cached deadline said."""
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, 2, 20_000)
    session_s = 2.0
    freeze = {"armed": False, "fired": False}

    def stats_cb(_stats: str) -> None:  # served by the data consumer's fetch, on our thread
        if freeze["armed"]:
            freeze["armed"] = False
            time.sleep(session_s + 0.5)  # the freeze under test, past the session
            freeze["fired"] = True

    lost: list[KTP] = []
    cfg = {**conf, "session.timeout.ms": int(session_s * 1000), "heartbeat.interval.ms": 200,
           "statistics.interval.ms": 20, "stats_cb": stats_cb}  # fmt: skip
    c = subscribed(consumers, cfg, [topic], on_lost=lambda _c, ps: lost.extend(ps))
    r = Reader(c, read)
    wait_for(lambda: r.step() >= 0 and len(r.got) == 2, 60, "records of both partitions", 0)
    for _ in range(100):  # warm: the cached fence deadline is in use
        r.step()
    coordinator = c.coordinator
    assert coordinator is not None
    # A live topic: records keep arriving, so the frozen call finds some queued when it wakes.
    producer = LoadProducer.keyed(bootstrap, topic, 1000).start()
    try:
        coordinator.stop()  # the whole process freezes: no heartbeat either
        freeze["armed"] = True
        deadline = time.monotonic() + 60
        while not freeze["fired"]:
            assert time.monotonic() < deadline, "the data consumer served no statistics"
            before = sum(map(len, r.got.values()))
            r.step()
            if freeze["fired"]:
                handed = sum(map(len, r.got.values())) - before
                assert handed == 0, f"{handed} record(s) handed out by the call frozen too long"
    finally:
        producer.stop()
    assert sorted((p.topic, p.partition) for p in lost) == [(topic, 0), (topic, 1)]
    assert c.assignment() == []
