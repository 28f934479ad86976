"""``OffsetKeepAlive`` (runtime/data_consumer.py, "Keep-alive"): when an owned partition's
committed offset is committed again, and at what; no broker (the retention itself is shown on a
real one in tests/test_offset_retention.py)."""

from __future__ import annotations

from confluent_kafka import TopicPartition as KTP

from groupkit.runtime.data_consumer import OffsetKeepAlive
from groupkit.types import TopicPartition as TP


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
