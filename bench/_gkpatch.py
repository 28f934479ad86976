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
3. ``fastpoll``: ``GroupConsumer.poll``'s per-call work made cheap without weakening it: the
   fence is checked against a cached deadline (the session cannot lapse before
   ``now + session - age``; a newer heartbeat only moves it later), so the lock is taken about
   once per heartbeat instead of twice per call; ``_service`` runs when there is a hand-off, a
   failure or an auto-commit due, or at least every 10 ms; ownership is tested with a plain
   ``(topic, partition)`` tuple; one record's offset is stored with ``store_offsets(message=)``.
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


def _fast_consume(self: Any, n: int, timeout: float | None) -> Any:
    import time

    self._ensure_open()
    now = time.monotonic()
    self._last_poll = now
    deadline = None if timeout is None or timeout < 0 else now + timeout
    while True:
        c = self._coordinator
        if c is not None and (c.handoffs or c.abandoned or c.failure is not None
                              or now >= self.__dict__.get("_gk_next_service", 0.0)):  # fmt: skip
            self._service()
            self._gk_next_service = now + 0.01
        remaining = 0.1 if deadline is None else max(0.0, deadline - now)
        msgs: list[Any] = []
        if self._owned:
            msgs = self._data.consume(n, min(remaining, 0.05))
        else:
            self._wake.wait(min(remaining, 0.05))
            self._wake.clear()
        now = time.monotonic()
        if msgs:
            if now >= self.__dict__.get("_gk_fence_until", 0.0):
                self._fence()
                c = self._coordinator
                if c is not None:
                    from groupkit.runtime.coordinator import monotonic_ms

                    with c.lock:
                        age = c.member.session_age_ms(monotonic_ms())
                    if age is not None:
                        self._gk_fence_until = now + (self._cfg.session_timeout_ms - age) / 1000
            owned = self._owned
            out = [m for m in msgs if m.error() is not None or (m.topic(), m.partition()) in owned]
            if out:
                if self._auto_store:
                    if len(out) == 1 and out[0].error() is None:
                        self._data.store_offsets(message=out[0])
                    else:
                        self._store(out)
                if self.observers:
                    from groupkit.runtime.consumer import _counts

                    self.observers.consumed(self.member_id or "", _counts(out))
                return out
        if deadline is not None and now >= deadline:
            return []


def apply(which: set[str]) -> None:
    from groupkit.runtime import consumer as consumer_mod
    from groupkit.runtime import control_log

    if "warm" in which:
        consumer_mod.Consumer = _WarmConsumer  # type: ignore[misc]
        control_log.Consumer = _WarmConsumer  # type: ignore[misc]
    if "early" in which:
        control_log.Consumer = _EarlyConsumer  # type: ignore[misc]
    if "fastpoll" in which:
        consumer_mod.GroupConsumer._consume = _fast_consume  # type: ignore[method-assign]
