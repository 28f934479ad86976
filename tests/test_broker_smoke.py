"""The broker facts groupkit's design relies on, checked against the real broker.

1. Records produced through confluent-kafka come back to an ``assign()``-ed consumer.
2. A compacted topic with ``message.timestamp.type=LogAppendTime`` stamps records with the
   broker's clock, not the producer's: the control log's notion of time.
3. Offsets can be committed under a ``group.id`` by a consumer that only ever ``assign()``s,
   and read back with ``committed()``: groupkit members never join the broker's group.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.conftest import KafkaBackend, unique_name


def _produce(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]], **kw: object
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err)

    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery, **kw)
    assert producer.flush(30) == 0, "records still in flight after 30 s"
    assert errors == []


def _consume_all(consumer: Consumer, want: int, timeout: float = 30.0) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
    return got


def test_backend_is_a_real_broker(kafka: KafkaBackend, admin: AdminClient) -> None:
    md = admin.list_topics(timeout=10)
    assert md.brokers, "the broker reports no brokers in its metadata"
    assert md.cluster_id
    print(f"served by {kafka.describe()}; cluster id {md.cluster_id}")


def test_produce_and_consume_with_assign(bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=3)
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(30)]
    _produce(bootstrap, topic, records)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_name("g"), "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        got = _consume_all(consumer, len(records))
    finally:
        consumer.close()
    assert sorted((m.key(), m.value()) for m in got) == sorted(records)
    # Keyed records land by key hash: each key always on one partition.
    by_key: dict[bytes, set[int]] = {}
    for m in got:
        by_key.setdefault(m.key(), set()).add(m.partition())
    assert all(len(ps) == 1 for ps in by_key.values())


def test_compacted_topic_stamps_log_append_time(
    bootstrap: str, admin: AdminClient, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(
        partitions=1,
        config={"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"},
    )
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["message.timestamp.type"].value == "LogAppendTime"

    before_ms = int(time.time() * 1000)
    # A producer timestamp far in the past: the broker must overwrite it.
    forged_ms = 1_000_000_000_000
    _produce(
        bootstrap,
        topic,
        [(b"member-a", b"1"), (b"member-a", b"2"), (b"member-b", None)],
        timestamp=forged_ms,
    )
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g")})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = _consume_all(consumer, 3)
    finally:
        consumer.close()
    assert [m.value() for m in got] == [b"1", b"2", None]  # the tombstone reads back as None
    stamps = [m.timestamp() for m in got]
    assert all(kind == TIMESTAMP_LOG_APPEND_TIME for kind, _ in stamps)
    times = [ts for _, ts in stamps]
    assert all(ts != forged_ms for ts in times)
    # Loose bound on the broker's clock, which is this machine's clock on loopback.
    assert all(ts >= before_ms - 5_000 for ts in times)
    assert times == sorted(times), "log append time never goes backwards within a partition"


def test_commit_with_assign_only_reads_back(
    bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    for partition in (0, 1):
        _produce(bootstrap, topic, [(b"k", b"x")] * 10, partition=partition)
    group = unique_name("g")
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    first = Consumer(conf)
    try:
        first.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        first.commit(
            offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 7)], asynchronous=False
        )
    finally:
        first.close()
    # A second consumer of the same group.id, also assign()-only, sees what the first committed.
    second = Consumer(conf)
    try:
        committed = second.committed(
            [TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30
        )
        second.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        first_msgs = _consume_all(second, 1)
    finally:
        second.close()
    assert {(tp.partition, tp.offset) for tp in committed} == {(0, 4), (1, 7)}
    # With no explicit offset, an assigned partition starts from the committed one.
    assert first_msgs and first_msgs[0].offset() in (4, 7)
