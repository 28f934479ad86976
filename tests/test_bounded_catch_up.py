"""Bounded catch-up on the real broker: a newcomer restores the group from the leader's newest
snapshot near the log's end and replays only what came after it; the protocol's
property is in test_protocol_bounded_replay.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from groupkit import GroupConsumer
from groupkit.dev.harness import wait_for


def _poll_until(cs: list[GroupConsumer], cond: Callable[[], bool], timeout: float,
                what: str) -> None:  # fmt: skip
    """Poll every member (hand-offs run on the polling thread) until ``cond`` holds."""
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            for c in list(cs):
                c.poll(0.01)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        wait_for(cond, timeout, what)
    finally:
        stop.set()
        t.join()


def test_a_newcomer_restores_from_the_newest_snapshot(
    conf: dict[str, Any], consumers: list[GroupConsumer], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=6)
    first = [GroupConsumer(conf) for _ in range(2)]
    consumers.extend(first)
    for c in first:
        c.subscribe([topic])
    _poll_until(first, lambda: sum(len(c.assignment()) for c in first) == 6, 30, "two own all")
    # let the log age past the catch-up window (1.5 sessions of 3 s), with snapshots in it
    session_s = conf["session.timeout.ms"] / 1000
    t0 = threading.Event()
    threading.Timer(2.5 * session_s, t0.set).start()
    _poll_until(first, t0.is_set, 4 * session_s, "the log to age")
    end_before = first[0].coordinator.reader.position if first[0].coordinator else 0  # type: ignore[union-attr]
    late = GroupConsumer(conf)
    consumers.append(late)
    late.subscribe([topic])
    everyone = [*first, late]
    _poll_until(everyone, lambda: all(c.assignment() for c in everyone)
                and sum(len(c.assignment()) for c in everyone) == 6, 30, "three share")  # fmt: skip
    c = late.coordinator
    assert c is not None
    assert c.stats.catch_up == "snapshot"
    # it replayed only the tail after the snapshot, never the log from its start (in protocol
    # version 2 the tail may be empty: no heartbeats follow the snapshot in the main log)
    assert c.stats.catch_up_replayed < end_before, (c.stats, end_before)
    # and sees the same group as the members that replayed everything
    with c.lock:
        mine = (c.state.leader, c.state.generation, c.state.assignment)
    old = first[0].coordinator
    assert old is not None
    wait_for(lambda: (old.state.leader, old.state.generation, old.state.assignment) == mine
             or old.state.offset > c.state.offset, 10, "the same view")  # fmt: skip
