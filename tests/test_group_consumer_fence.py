"""Partitions that ``poll``'s own fence took must not stay claimed by the member.

``poll`` fences by itself (``PollLoop.fence``: its cached session deadline passed) as well
as through the control loop's ``Member``. Under load the poll thread can get there first; if
the control loop's next turn then confirms a newer heartbeat, the member never fences itself.
Were its records to go on claiming the partitions ``poll`` had dropped, the leader's target
for it would already match that claim, and nobody would process them again: a slow member
that lost partitions at start-up would leave them unowned. Here the poll thread's fence is
made to fire first by calling what it calls, on a real broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import TopicPartition as KTP

from groupkit import GroupConsumer
from groupkit.dev.harness import wait_for
from groupkit.types import TopicPartition
from tests.conftest import unique_name


def _conf(bootstrap: str) -> dict[str, Any]:
    """A member of its own group and control topic, with a short session."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": unique_name("g"),
        "session.timeout.ms": 3000,
        "heartbeat.interval.ms": 300,
        "groupkit.control.topic": unique_name("ctl"),
    }


def owns(c: GroupConsumer, n: int) -> Callable[[], bool]:
    """Polls ``c`` once; whether it owns ``n`` partitions."""

    def step() -> bool:
        c.poll(0.01)
        return len(c.assignment()) == n

    return step


def test_partitions_lost_by_polls_fence_are_granted_again(
    bootstrap: str, topic_factory: Callable[..., str], consumers: list[GroupConsumer]
) -> None:
    topic = topic_factory(partitions=4)
    conf = _conf(bootstrap)
    c = GroupConsumer(conf)
    consumers.append(c)
    c.subscribe([topic])

    wait_for(owns(c, 4), 30, "the member to own all 4 partitions", step=0)
    generation = c.generation
    lost = frozenset(TopicPartition(topic, p) for p in (0, 1))
    c._lose(lost, "session_lapsed")  # what poll's fence does when it is first
    assert sorted(tp.partition for tp in c.assignment()) == [2, 3]
    coordinator = c.coordinator
    assert coordinator is not None
    with coordinator.lock:
        assert not coordinator.member.owned & lost  # no longer claimed
    wait_for(owns(c, 4), 30, "the lost partitions to be granted again", step=0)
    assert c.generation > generation


def test_a_static_member_takes_back_what_polls_fence_lost_without_a_new_generation(
    bootstrap: str, topic_factory: Callable[..., str], consumers: list[GroupConsumer]
) -> None:
    """A static seat's grant stays the seat's (nobody plans it again): the member itself takes
    back what its ``poll`` thread stopped as lost, once its session is current (docs/protocol.md,
    rule 9.7), with no new generation."""
    topic = topic_factory(partitions=4)
    c = GroupConsumer({**_conf(bootstrap), "group.instance.id": "pod-0"})
    consumers.append(c)
    c.subscribe([topic])

    wait_for(owns(c, 4), 30, "the member to own all 4 partitions", step=0)
    generation = c.generation
    lost = frozenset(TopicPartition(topic, p) for p in (0, 1))
    c._lose(lost, "session_lapsed")  # what poll's fence does when it is first
    assert sorted(tp.partition for tp in c.assignment()) == [2, 3]
    wait_for(owns(c, 4), 30, "the lost partitions to be taken back", step=0)
    assert c.generation == generation


def test_a_reader_that_stops_fetching_is_renewed_before_the_member_lapses(
    bootstrap: str, topic_factory: Callable[..., str], consumers: list[GroupConsumer]
) -> None:
    """After a broker restart librdkafka can leave the control reader's partition idle for good:
    the member's heartbeats are appended, none is read back, and it lapses again and again.
    Pausing the reader's partition puts it in that state here; the coordinator sees its own
    record appended and nothing read for half a session, and swaps in a fresh reader before
    the member's fence (a session less the skew allowance) takes its partitions."""
    topic = topic_factory(partitions=2)
    conf = _conf(bootstrap)
    lost: list[object] = []
    c = GroupConsumer(conf)
    consumers.append(c)
    c.subscribe([topic], on_lost=lambda _c, parts: lost.append(parts))

    wait_for(owns(c, 2), 30, "the member to own both partitions", step=0)
    coordinator = c.coordinator
    assert coordinator is not None
    reader = coordinator.reader
    read = coordinator.stats.records_read
    # (the control thread polls the reader: pausing is safe from here, and a renewal replaces
    # the paused handle)
    reader._consumer.pause([KTP(reader.topic, reader.partition)])

    def renewed_and_reading() -> bool:
        c.poll(0.01)
        return coordinator.stats.reader_renewals >= 1 and coordinator.stats.records_read > read

    wait_for(renewed_and_reading, 20, "the stalled reader to be renewed and read on", step=0)
    wait_for(owns(c, 2), 5, "the member to keep its partitions", step=0)
    assert lost == []
