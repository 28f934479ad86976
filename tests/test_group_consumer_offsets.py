"""A committed-offset look-up that librdkafka gave up on does not strand partitions.

librdkafka (2.16) does not retry a look-up that failed at the request level (such as
"Failed to fetch committed offsets for 0 partition(s) ...: Coordinator load in progress" right
after a broker restart): the partitions stay on its "queried" list, never start, and block the
look-ups of every later assignment (``rd_kafka_assignment_handle_OffsetFetch``,
``rd_kafka_assignment_serve_pending``). ``GroupConsumer`` watches for that error and assigns
again what has not started. The broker cannot be made to fail a look-up on cue, so the error
is handed to the consumer as librdkafka words it; everything else here is real.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message
from confluent_kafka import TopicPartition as KTopicPartition

from groupkit import GroupConsumer
from groupkit.dev.harness import wait_for
from groupkit.log import capture
from tests.groupharness import produce


@pytest.mark.parametrize("protocol", ["cooperative", "eager"])
def test_a_failed_offset_lookup_reassigns_only_what_has_not_started(
    bootstrap: str,
    topic_factory: Callable[..., str],
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
    protocol: str,
) -> None:
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, {0: 5})
    c = GroupConsumer({**conf, "groupkit.rebalance.protocol": protocol})
    consumers.append(c)
    c.subscribe([topic])
    got: Counter[tuple[int, int]] = Counter()

    def pump(cond: Callable[[], bool]) -> Callable[[], bool]:
        def step() -> bool:
            m = c.poll(0.01)
            if m is not None and m.error() is None:
                got[(m.partition(), m.offset())] += 1
            return cond()

        return step

    wait_for(pump(lambda: len(got) == 5), 30, "the 5 records of partition 0", step=0)
    failed = Message(error=KafkaError(
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        f'Failed to fetch committed offsets for 0 partition(s) in group "{conf["group.id"]}": '
        "Broker: Coordinator load in progress"))  # fmt: skip
    with capture() as logs:
        c._data.watch_offset_errors([failed])
        wait_for(pump(lambda: any(e["event"] == "offsets.refetch" for e in logs)), 10,
                 "the re-assignment after its back-off", step=0)  # fmt: skip
    refetch = [e for e in logs if e["event"] == "offsets.refetch"]
    # Partition 1 had handed out nothing, so it is assigned again; partition 0 is left alone.
    assert [e["partitions"] for e in refetch] == [1], logs
    assert sorted(tp.partition for tp in c.assignment()) == [0, 1]

    produce(bootstrap, topic, {0: 5, 1: 5})
    wait_for(pump(lambda: len(got) == 15), 30, "5 more records of each partition", step=0)
    assert sorted(got) == [(0, o) for o in range(10)] + [(1, o) for o in range(5)]
    assert set(got.values()) == {1}, "a record was handed out twice"


def test_the_users_on_commit_hears_each_auto_commit(
    bootstrap: str,
    topic_factory: Callable[..., str],
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
) -> None:
    """``on_commit`` is the user's, as on a ``Consumer`` (groupkit also counts the commits in
    flight through it, to keep auto-commit at one at a time)."""
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, {0: 3, 1: 4})
    heard: list[tuple[Any, list[tuple[int, int]]]] = []

    def on_commit(err: Any, partitions: list[Any]) -> None:
        heard.append((err, sorted((tp.partition, tp.offset) for tp in partitions)))

    c = GroupConsumer({**conf, "auto.commit.interval.ms": 100, "on_commit": on_commit})
    consumers.append(c)
    c.subscribe([topic])
    got = 0

    def step() -> bool:
        nonlocal got
        m = c.poll(0.01)
        got += m is not None and m.error() is None
        # librdkafka's auto-commit sends only the offsets that moved since its last commit, so
        # the two partitions may be reported in one callback or in two; a report lists every
        # assigned partition, those not in that commit at INVALID (-1001)
        reported = {p: o for err, parts in heard if err is None for p, o in parts if o >= 0}
        return got == 7 and reported == {0: 3, 1: 4}

    try:
        wait_for(step, 30, "a commit of all 7 records reported to on_commit", step=0)
    except AssertionError as e:
        ok = [parts for err, parts in heard if err is None]
        raise AssertionError(
            f"{e}: got {got}, reported {ok}, in flight {list(c._data.commits.sent)}"
        ) from None
    # (before the first records, librdkafka answers an auto-commit with _NO_OFFSET)
    assert all(e is None or e.code() == KafkaError._NO_OFFSET for e, _ in heard), heard
    assert len(c._data.commits.sent) <= 1  # never more than one auto-commit waiting


class _Member:
    """A ``GroupConsumer`` polled by the test, recording what it was handed and, from
    librdkafka's statistics, how many committed-offset look-ups (OffsetFetch) its data consumer
    sent."""

    def __init__(self, conf: dict[str, Any], topic: str, consumers: list[GroupConsumer]) -> None:
        self.got: dict[int, list[int]] = {}
        self.offset_fetches = -1  # no statistics yet
        self.stats_seen = 0
        self.c = GroupConsumer({**conf, "statistics.interval.ms": 100, "stats_cb": self._stats})
        consumers.append(self.c)
        self.c.subscribe([topic])

    def _stats(self, raw: str) -> None:
        brokers = json.loads(raw).get("brokers", {}).values()
        self.offset_fetches = sum(b.get("req", {}).get("OffsetFetch", 0) for b in brokers)
        self.stats_seen += 1

    def poll(self, timeout: float = 0.01) -> None:
        m = self.c.poll(timeout)
        if m is not None and m.error() is None:
            self.got.setdefault(m.partition() or 0, []).append(m.offset() or 0)
            if not self.c._cfg.enable_auto_commit:
                self.c.commit(message=m, asynchronous=False)  # the user commits each record

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}


def _move_one_partition(
    bootstrap: str, topic: str, conf: dict[str, Any], consumers: list[GroupConsumer]
) -> tuple[_Member, _Member, int]:
    """``a`` consumes part of both partitions of ``topic``, then ``b`` joins and one partition
    moves to it; returns ``(a, b, the partition that moved)`` once ``b`` had its first record
    of it (and a statistics report after that)."""
    produce(bootstrap, topic, {0: 30, 1: 30})
    a = _Member(conf, topic, consumers)
    wait_for(lambda: a.poll() or all(len(a.got.get(p, [])) >= 5 for p in (0, 1)), 30,
             "a's first records of both partitions", step=0)  # fmt: skip
    b = _Member(conf, topic, consumers)

    def pump(cond: Callable[[], bool]) -> Callable[[], bool]:
        def step() -> bool:
            a.poll()
            b.poll()
            return cond()

        return step

    wait_for(pump(lambda: len(a.partitions()) == len(b.partitions()) == 1), 30,
             "a partition moved from a to b", step=0)  # fmt: skip
    produce(bootstrap, topic, {0: 10, 1: 10})  # (a may have had every record before)
    wait_for(pump(lambda: bool(b.got)), 30, "b's first record", step=0)
    (p,) = b.got
    seen = b.stats_seen
    wait_for(lambda: b.poll() or b.stats_seen > seen + 1, 10, "b's statistics", step=0)
    return a, b, p


@pytest.mark.parametrize("protocol", ["cooperative", "eager"])
def test_the_new_owner_starts_at_the_offset_the_release_carried(
    bootstrap: str,
    topic_factory: Callable[..., str],
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
    protocol: str,
) -> None:
    """The owner that gives a partition up commits its position, and the record by
    which it lets go carries that offset; the new owner is assigned the partition at it, so it
    starts right after the last record the old owner was handed, without asking the group
    coordinator for the committed offset (its data consumer sends no OffsetFetch at all)."""
    topic = topic_factory(partitions=2)
    conf = {**conf, "groupkit.rebalance.protocol": protocol}
    a, b, p = _move_one_partition(bootstrap, topic, conf, consumers)
    assert b.got[p][0] == a.got[p][-1] + 1, (a.got[p][-3:], b.got[p][:3])
    assert b.got[p] == list(range(b.got[p][0], b.got[p][0] + len(b.got[p])))
    assert b.offset_fetches == 0, "the new owner looked its committed offset up"
    # the hint was what the broker holds: the committed offset is where b started (or later)
    (committed,) = b.c.committed([KTopicPartition(topic, p)])
    assert committed.offset >= b.got[p][0]


def test_without_auto_commit_the_new_owner_looks_the_offset_up(
    bootstrap: str,
    topic_factory: Callable[..., str],
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
) -> None:
    """With ``enable.auto.commit`` off the user commits (here: each record, synchronously), so
    groupkit cannot know the offsets when it lets go: the release carries none, and the new
    owner looks the committed offset up, which is still right after the last record."""
    topic = topic_factory(partitions=2)
    conf = {**conf, "enable.auto.commit": False}
    a, b, p = _move_one_partition(bootstrap, topic, conf, consumers)
    assert b.got[p][0] == a.got[p][-1] + 1, (a.got[p][-3:], b.got[p][:3])
    assert b.offset_fetches >= 1, "the new owner started without looking its offset up"
