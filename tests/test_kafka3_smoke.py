"""A group on the oldest Kafka release groupkit claims: a 3.x broker in KRaft mode.

Every other broker test runs against ``DEFAULT_KAFKA_VERSION`` (4.x). This one starts a broker
of its own from ``OLDEST_KAFKA_VERSION``'s jars (``groupkit broker fetch`` resolves both) and runs
the group's life on it: two members share a topic's partitions and both consume; one leaves
and the other takes its partitions over, reading on from what the leaver committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Message
from confluent_kafka.admin import AdminClient

from groupkit import GroupConsumer
from groupkit.dev.broker import (
    OLDEST_KAFKA_VERSION,
    LocalBroker,
    version_tuple,
    wait_clients_closed,
)
from groupkit.runtime.admin import create_topic
from tests.conftest import unique_name
from tests.groupharness import produce, pump

PARTITIONS = 4
PER_PARTITION = 10


class Member:
    """A GroupConsumer and the records it handed out, as (partition, offset)."""

    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        self.c = GroupConsumer(conf)
        self.c.subscribe([topic])
        self.got: list[tuple[int, int]] = []

    def poll(self, timeout: float) -> Message | None:
        m = self.c.poll(timeout)
        if m is not None and m.error() is None:
            self.got.append((m.partition(), m.offset()))
        return m

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}


@pytest.fixture(scope="module")
def old_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert version_tuple(OLDEST_KAFKA_VERSION) < (4, 0)
    with LocalBroker(tmp_path_factory.mktemp("kafka3"), version=OLDEST_KAFKA_VERSION) as broker:
        assert f"Kafka version: {OLDEST_KAFKA_VERSION}" in broker.log_path.read_text()
        yield broker.bootstrap
        wait_clients_closed()  # (a client that outlives its broker retries it for ever)


def test_two_members_share_then_one_takes_over(old_bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": old_bootstrap, "log_level": 0})
    topic = unique_name("t")
    create_topic(admin, topic, PARTITIONS)
    del admin
    conf = {
        "bootstrap.servers": old_bootstrap,
        "group.id": unique_name("g"),
        # A member whose session it cannot confirm refuses to commit (at-least-once: its
        # partitions' next owner reads them again). The session leaves a starved machine
        # seconds of room, so a clean leave is one.
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        "auto.offset.reset": "earliest",
        "groupkit.control.topic": unique_name("ctl"),
    }
    a = Member({**conf, "client.id": "a"}, topic)
    b = Member({**conf, "client.id": "b"}, topic)
    try:

        def shared() -> bool:
            return (
                len(a.owned()) == len(b.owned()) == PARTITIONS // 2
                and not a.owned() & b.owned()
                and a.c.is_leader != b.c.is_leader
            )

        pump([a, b], shared, 60, "two members with two partitions each, one of them leading")
        produce(old_bootstrap, topic, dict.fromkeys(range(PARTITIONS), PER_PARTITION))
        everything = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
        pump([a, b], lambda: set(a.got) | set(b.got) >= everything, 30,
             "every record, handed out by the members")  # fmt: skip
        assert a.got and b.got, "both members consumed"
        b_owned = b.owned()
        b.c.close()  # a clean leave: revoke, commit what it handed out, tombstone

        pump([a], lambda: a.owned() == set(range(PARTITIONS)) and a.c.is_leader, 30,
             "the remaining member to take every partition over, and lead")  # fmt: skip
        a.got.clear()
        produce(old_bootstrap, topic, dict.fromkeys(range(PARTITIONS), 5))
        more = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION, PER_PARTITION + 5)}
        pump([a], lambda: set(a.got) >= more, 30, "the new records, on every partition")
        # b's partitions go on from b's commit: nothing b handed out is handed out again
        assert not [(p, o) for p, o in a.got if p in b_owned and o < PER_PARTITION], a.got
    finally:
        for m in (a, b):
            m.c.close()
