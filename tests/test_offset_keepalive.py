"""``OffsetKeepAlive`` (runtime/data_consumer.py, "Keep-alive"): when an owned partition's
committed offset is committed again, and at what, and how often by default
(runtime/retention.py); no broker (the retention itself is shown on a real one in
tests/test_offset_retention.py, a refused read of it in tests/test_security.py)."""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient

from groupkit.dev.broker import free_port
from groupkit.dev.harness import wait_for
from groupkit.log import capture
from groupkit.runtime.config import OFFSETS_KEEPALIVE_DEFAULT_MS
from groupkit.runtime.data_consumer import OffsetKeepAlive
from groupkit.runtime.retention import RetentionRead, keepalive_interval_ms
from groupkit.types import TopicPartition as TP

DAY_MS = 86_400_000


def _offsets(ps: list[KTP]) -> list[tuple[str, int, int]]:
    return [(p.topic, p.partition, p.offset) for p in ps]


def test_an_idle_partition_is_due_once_per_interval_at_its_committed_offset() -> None:
    ka = OffsetKeepAlive(100.0)
    a, b = TP("t", 0), TP("t", 1)
    ka.assigned([a, b], {a: 7}, now=0.0)  # a's hint: what its previous owner committed
    assert ka.next_at == 100.0 and ka.take_due(99.0) == ([], [])
    known, unknown = ka.take_due(100.0)
    assert _offsets(known) == [("t", 0, 7)] and unknown == [b]  # b: to be read back
    assert ka.take_due(100.5) == ([], [])  # sent: not again before a retry
    # the answer comes: a whole interval from the answer on
    ka.committed([KTP("t", 0, 7), KTP("t", 1, 3)], now=101.0)
    assert ka.next_at == 201.0
    known, unknown = ka.take_due(201.0)
    assert _offsets(known) == [("t", 0, 7), ("t", 1, 3)] and unknown == []


def test_a_commit_restarts_the_clock_and_a_failed_one_is_retried() -> None:
    ka = OffsetKeepAlive(100.0)
    a = TP("t", 0)
    ka.assigned([a], {}, now=0.0)
    ka.committed([KTP("t", 0, 42)], now=50.0)  # the app's own commit: nothing due till 150
    assert ka.take_due(149.0) == ([], []) and ka.next_at == 150.0
    assert _offsets(ka.take_due(150.0)[0]) == [("t", 0, 42)]
    # no good answer (failed, or none at all): sent again after `retry`, not before
    assert ka.next_at == 150.0 + ka.retry and ka.take_due(150.0 + ka.retry - 0.1) == ([], [])
    assert _offsets(ka.take_due(150.0 + ka.retry)[0]) == [("t", 0, 42)]


def test_only_owned_partitions_are_kept_and_zero_keeps_nothing() -> None:
    ka = OffsetKeepAlive(100.0)
    a = TP("t", 0)
    ka.assigned([a], {a: 1}, now=0.0)
    ka.unassigned([a])
    ka.committed([KTP("t", 0, 5)], now=1.0)  # an answer after the revocation: not kept
    assert ka.take_due(1e9) == ([], []) and ka.next_at == float("inf")
    off = OffsetKeepAlive(0.0)
    off.assigned([a], {a: 1}, now=0.0)
    assert off.take_due(1e9) == ([], [])


def test_the_default_interval_is_a_quarter_of_the_retention_at_most_a_day() -> None:
    assert OFFSETS_KEEPALIVE_DEFAULT_MS == DAY_MS
    assert keepalive_interval_ms(60_000, DAY_MS) == 15_000  # Kafka's shortest: a minute
    assert keepalive_interval_ms(DAY_MS, DAY_MS) == DAY_MS // 4  # Kafka's default before 2.0
    assert keepalive_interval_ms(7 * DAY_MS, DAY_MS) == DAY_MS  # since 2.0: the default stays
    assert keepalive_interval_ms(None, DAY_MS) == DAY_MS  # unknown: the default
    assert keepalive_interval_ms(0, DAY_MS) == DAY_MS
    assert keepalive_interval_ms(1_000, DAY_MS) == 5_000  # never below the floor


def test_retuning_moves_each_partitions_next_commit_by_when_its_clock_started() -> None:
    ka = OffsetKeepAlive(86_400.0)
    a, b, c = TP("t", 0), TP("t", 1), TP("t", 2)
    ka.assigned([a, b], {a: 1, b: 2}, now=0.0)
    ka.committed([KTP("t", 1, 2)], now=4.0)  # b's clock starts again at 4
    ka.retune(15.0)  # the retention was read: a minute
    assert ka.due == {a: 15.0, b: 19.0} and ka.next_at == 15.0
    assert ka.retry == 1.5
    assert ka.take_due(14.9) == ([], [])
    assert _offsets(ka.take_due(15.0)[0]) == [("t", 0, 1)]
    ka.assigned([c], {}, now=16.0)  # assigned later: a whole new interval
    assert ka.due[c] == 31.0
    off = OffsetKeepAlive(0.0)  # set to 0 by the user: the retention changes nothing
    off.retune(15.0)
    off.assigned([a], {a: 1}, now=0.0)
    assert off.interval == 0.0 and off.take_due(1e9) == ([], [])


def test_an_unreachable_broker_leaves_the_default_and_says_so_once() -> None:
    """The read fails (no broker answers): the setting's default, one warning naming it."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{free_port()}"})
    with capture() as logs:
        read = RetentionRead(admin, [1], DAY_MS, "g", timeout=1.0)
        got: list[int] = []

        def answered() -> bool:  # as the poll thread asks, until there is an answer
            interval = read.interval_ms(time.monotonic())
            got.extend([] if interval is None else [interval])
            return bool(got)

        wait_for(answered, 10, "the read to give up")
    assert got == [DAY_MS]
    unknown = [e for e in logs if e["event"] == "offsets.retention_unknown"]
    assert len(unknown) == 1 and unknown[0]["log_level"] == "warning", logs
    assert unknown[0]["assumed_keepalive_interval_ms"] == DAY_MS and unknown[0]["group"] == "g"
    assert RetentionRead(admin, [], DAY_MS, "g").interval_ms(time.monotonic()) == DAY_MS
