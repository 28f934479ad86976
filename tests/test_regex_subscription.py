"""Regex subscriptions as librdkafka spells them, ``^...``.

Each member resolves its patterns against the cluster's topics and announces the concrete
topics as its subscription (runtime/patterns.py); the leader plans for what changed. On the
real broker: a topic created later joins within ``topic.metadata.refresh.interval.ms`` and is
consumed, a deleted one leaves, and only the partitions of the topic that came or went move
(the others keep their owners, never revoked); names and patterns mix.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import TopicPartition as KTP

from groupkit import ConfigError, GroupConsumer
from groupkit.runtime.patterns import Subscription, TopicWatcher, is_pattern
from tests.conftest import delete_topics, unique_name
from tests.groupharness import partitions, produce, pump

# ------------------------------------------------------------------ resolving (no broker)

_OK = SimpleNamespace(error=None)
_BAD = SimpleNamespace(error="UNKNOWN_TOPIC_OR_PART")


def test_names_and_patterns_resolve_to_concrete_topics() -> None:
    sub = Subscription(["^orders-.*", "audit", "^pay(ments|outs)$"])
    assert sub.names == ["audit"] and len(sub.patterns) == 2
    cluster = {"orders-eu": _OK, "orders-us": _OK, "orders-bad": _BAD, "old-orders-x": _OK,
               "payments": _OK, "payouts": _OK, "payments-dlq": _OK, "audit": _OK}  # fmt: skip
    assert sub.resolve(cluster) == ["audit", "orders-eu", "orders-us", "payments", "payouts"]
    # a name is subscribed whether or not it exists (as in librdkafka); patterns match nothing
    assert sub.resolve({}) == ["audit"]


def test_topic_blacklist_and_bad_patterns() -> None:
    sub = Subscription(["^o.*"], blacklist="^orders-internal$, ^o.*-dlq")
    assert sub.resolve({"orders": _OK, "orders-internal": _OK, "orders-dlq": _OK}) == ["orders"]
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        Subscription(["^orders-("])
    assert is_pattern("^x") and not is_pattern("x^")


def test_the_watcher_tells_only_changes() -> None:
    cluster: dict[str, Any] = {"a-1": _OK}
    told: list[list[str]] = []
    w = TopicWatcher(Subscription(["^a-"]), ["a-1"], lambda: cluster, told.append, 3600)
    assert not w.check() and told == []
    cluster["a-2"] = _OK
    assert w.check() and told == [["a-1", "a-2"]]
    del cluster["a-1"]
    assert w.check() and told[-1] == ["a-2"]

    def down() -> dict[str, Any]:
        raise RuntimeError("broker away")

    w._list_topics = down  # a failed look-up changes nothing
    assert not w.check() and len(told) == 2


# ------------------------------------------------------------------ on the broker

_REFRESH_MS = 500


class _App:
    def __init__(self, conf: dict[str, Any], topics: list[str],
                 consumers: list[GroupConsumer]) -> None:  # fmt: skip
        self.got: list[tuple[str, int, int]] = []
        self.revoked: list[tuple[str, int]] = []
        self.lost: list[tuple[str, int]] = []
        self.c = GroupConsumer(conf)
        consumers.append(self.c)

        def on_revoke(_c: Any, parts: list[KTP]) -> None:
            self.revoked += [(p.topic, p.partition) for p in parts]

        def on_lost(_c: Any, parts: list[KTP]) -> None:
            self.lost += [(p.topic, p.partition) for p in parts]

        self.c.subscribe(topics, on_revoke=on_revoke, on_lost=on_lost)

    def poll(self, timeout: float = 0.01) -> None:
        m = self.c.poll(timeout)
        if m is not None and m.error() is None:
            self.got.append((m.topic(), m.partition(), m.offset()))

    def owned(self) -> set[tuple[str, int]]:
        return {(p.topic, p.partition) for p in self.c.assignment()}

    def topics(self) -> tuple[str, ...]:
        c = self.c.coordinator
        assert c is not None
        return c.member.topics  # what its member record in the control log says


def _claimed(app: _App) -> set[tuple[str, int]]:
    """What the member's record in the control log claims."""
    c = app.c.coordinator
    assert c is not None
    with c.lock:
        return set(c.member.owned)


def test_topics_matching_a_pattern_join_and_leave_and_only_they_move(
    bootstrap: str,
    admin: Any,
    topic_factory: Callable[..., str],
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
) -> None:
    """Two members subscribe to a pattern and a name. Each member finds a new topic by its own
    look, so for a moment their subscriptions differ and the assignor may even the group out
    by moving another partition, legitimately; the topics are sized so that it has nothing to
    even out (the group stays within one partition of even), so what moves is only what the
    change forces."""
    prefix = unique_name("rx")
    first = topic_factory(partitions=2, prefix=prefix)
    named = topic_factory(partitions=2)  # does not match the pattern: subscribed by name
    topic_factory(partitions=1, prefix=unique_name("rx"))  # matches neither
    conf = {**conf, "topic.metadata.refresh.interval.ms": _REFRESH_MS}
    subscription = [f"^{prefix}-.*", named]
    a = _App(conf, subscription, consumers)
    b = _App(conf, subscription, consumers)
    apps = {"a": a, "b": b}

    def owners() -> dict[tuple[str, int], str]:
        out: dict[tuple[str, int], str] = {}
        for name, app in apps.items():
            for tp in app.owned():
                assert tp not in out, f"{tp} owned twice"
                out[tp] = name
        return out

    def settled(want: set[tuple[str, int]], topics: list[str]) -> Callable[[], bool]:
        return lambda: (set(owners()) == want and a.topics() == b.topics() == tuple(sorted(topics))
                        and abs(len(a.owned()) - len(b.owned())) <= 1)  # fmt: skip

    def pump_both(cond: Callable[[], bool], timeout: float, what: str) -> float:
        return pump(list(apps.values()), cond, timeout, what)

    def revoked_since(mark: dict[str, int]) -> set[tuple[str, int]]:
        return {tp for n, x in apps.items() for tp in x.revoked[mark[n] :]}

    want = partitions(first, 2) | partitions(named, 2)
    pump_both(settled(want, [first, named]), 30, "the pattern's topic and the named one shared")
    before = owners()
    mark = {n: len(x.revoked) for n, x in apps.items()}

    # a topic created later joins within the refresh interval (plus a rebalance)
    second = topic_factory(partitions=1, prefix=prefix)
    t0 = time.monotonic()
    want |= partitions(second, 1)
    pump_both(lambda: set(owners()) == want, 30, "the new topic's partition owned")
    joined_s = time.monotonic() - t0
    assert joined_s < _REFRESH_MS / 1000 + 10, joined_s
    pump_both(settled(want, [first, second, named]), 30, "both members subscribed to it")
    # what was owned before kept its owner and was never revoked (nor paused)
    assert revoked_since(mark) <= partitions(second, 1), revoked_since(mark)
    assert {tp: o for tp, o in owners().items() if tp in before} == before
    produce(bootstrap, second, {0: 7})
    pump_both(lambda: sum(1 for x in apps.values() for r in x.got if r[0] == second) == 7, 30,
              "the new topic's records")  # fmt: skip

    # a deleted topic leaves; the others keep their owners. (Of the two matching topics, the
    # one whose going leaves the group within one partition of even: see the docstring.)
    before = owners()
    count = {n: list(before.values()).count(n) for n in apps}
    gone = second if count[before[(second, 0)]] > min(count.values()) else first
    rest = [t for t in (first, second) if t != gone]
    mark = {n: len(x.revoked) for n, x in apps.items()}
    losses = {n: len(x.lost) for n, x in apps.items()}
    delete_topics(admin, [gone])
    want = {tp for tp in want if tp[0] != gone}
    pump_both(settled(want, [*rest, named]), 60, "the deleted topic gone from the group")
    # and released in the log, though its offsets cannot be committed any more
    pump_both(lambda: all(tp[0] != gone for x in apps.values() for tp in _claimed(x)), 30,
              "no member record claims the deleted topic")  # fmt: skip
    assert owners() == {tp: o for tp, o in before.items() if tp[0] != gone}
    gave_up = revoked_since(mark) | {tp for n, x in apps.items() for tp in x.lost[losses[n] :]}
    assert {tp[0] for tp in gave_up} <= {gone}, gave_up
    produce(bootstrap, named, {0: 2, 1: 2})
    pump_both(lambda: sum(1 for x in apps.values() for r in x.got if r[0] == named) == 4, 30,
              "the named topic's records")  # fmt: skip


def test_a_pattern_that_matches_nothing_yet(
    bootstrap: str,
    topic_factory: Callable[..., str],
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
) -> None:
    """Subscribing to a pattern no topic matches is not an error (as in librdkafka; a missing
    *name* still is): the member joins owning nothing and takes the topic once it exists."""
    prefix = unique_name("rx")
    conf = {**conf, "topic.metadata.refresh.interval.ms": _REFRESH_MS}
    a = _App(conf, [f"^{prefix}-"], consumers)
    other = GroupConsumer({**conf, "topic.metadata.propagation.max.ms": 200})
    consumers.append(other)
    with pytest.raises(ConfigError, match="do not exist"):
        other.subscribe([f"^{prefix}-", unique_name("absent")])
    pump([a], lambda: a.c.coordinator is not None and a.c.generation >= 0, 30, "a joined")
    assert a.owned() == set() and a.topics() == ()
    topic = topic_factory(partitions=3, prefix=prefix)
    produce(bootstrap, topic, {0: 1, 1: 1, 2: 1})
    pump([a], lambda: len(a.got) == 3, 30, "the records of the topic created later")
    assert a.owned() == partitions(topic, 3)


def test_a_member_follows_a_peer_that_found_a_topic_first(
    topic_factory: Callable[..., str],
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
) -> None:
    """``b`` would look again only after a minute; ``a`` finds the new topic within half a
    second, and ``b`` looks at once when the log shows ``a`` subscribed to a topic its own
    pattern matches."""
    prefix = unique_name("rx")
    first = topic_factory(partitions=2, prefix=prefix)
    a = _App({**conf, "topic.metadata.refresh.interval.ms": _REFRESH_MS}, [f"^{prefix}-"],
             consumers)  # fmt: skip
    b = _App({**conf, "topic.metadata.refresh.interval.ms": 60_000}, [f"^{prefix}-"], consumers)
    pump([a, b], lambda: len(a.owned()) == len(b.owned()) == 1, 30, "one partition each")
    second = topic_factory(partitions=2, prefix=prefix)
    t0 = time.monotonic()
    pump([a, b], lambda: a.topics() == b.topics() == tuple(sorted([first, second])), 20,
         "b subscribed to the new topic too")  # fmt: skip
    assert time.monotonic() - t0 < 10
    pump([a, b], lambda: len(a.owned()) == len(b.owned()) == 2, 30, "two partitions each")
