"""Proposed runtime changes, applied by monkeypatching, to measure what they would buy.

The runtime (``groupkit/runtime``) is not changed by the benches; ``bench/rebalance.py
--contenders "groupkit cooperative +fixes"`` runs members with these patches so the report can
say, measured side by side, what each proposed change is worth. Each patch is one change:

1. ``warm``: a consumer learns a topic's metadata before it first assigns one of its partitions.
   librdkafka (2.16) otherwise starts the partition with no known leader and retries the offset
   lookup after a fixed 500 ms ("no current leader for partition"): every groupkit join waited
   ~500 ms in the control log's catch-up read, and a new owner ~100-500 ms for its first record.
2. ``early``: the control reader returns as soon as one record is there (``poll`` then drain with
   ``consume(n, 0)``), instead of ``consume(500, timeout=0.02)``, which always waits the whole
   20 ms unless 500 records come: every hop of a rebalance (join → plan → revoke → release →
   grant) paid up to 20 ms.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer


class _WarmConsumer(Consumer):  # type: ignore[misc]
    """Fetches a topic's metadata once before first assigning any of its partitions."""

    def _warm(self, parts: Any) -> None:
        known = self.__dict__.setdefault("_gk_warm", set())
        for t in {p.topic for p in parts} - known:
            self.list_topics(t, timeout=10)
            known.add(t)

    def assign(self, partitions: Any) -> Any:
        self._warm(partitions)
        return super().assign(partitions)

    def incremental_assign(self, partitions: Any) -> Any:
        self._warm(partitions)
        return super().incremental_assign(partitions)


class _EarlyConsumer(_WarmConsumer):
    """``consume(n, timeout)`` that returns as soon as one record is there."""

    def consume(self, num_messages: int = 1, timeout: float = -1) -> Any:
        first = super().poll(timeout)
        if first is None:
            return []
        if num_messages <= 1:
            return [first]
        return [first, *super().consume(num_messages - 1, 0)]


def apply(which: set[str]) -> None:
    from groupkit.runtime import consumer as consumer_mod
    from groupkit.runtime import control_log

    if "warm" in which:
        consumer_mod.Consumer = _WarmConsumer  # type: ignore[misc]
        control_log.Consumer = _WarmConsumer  # type: ignore[misc]
    if "early" in which:
        control_log.Consumer = _EarlyConsumer  # type: ignore[misc]
