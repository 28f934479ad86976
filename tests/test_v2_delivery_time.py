"""The broker fact protocol version 2 rests on: a member confirms its own heartbeat from the
producer's delivery report alone (docs/protocol-v2.md, L1.2). For a ``LogAppendTime`` topic the
broker returns the append time in its produce response, and librdkafka must hand it to the
delivery report as ``TIMESTAMP_LOG_APPEND_TIME`` with the broker's stamp, not the producer's."""

from __future__ import annotations

import time

from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from tests.conftest import unique_name


def test_delivery_report_carries_the_brokers_log_append_time(bootstrap: str, topic_factory) -> None:  # type: ignore[no-untyped-def]
    topic = topic_factory(1, {"message.timestamp.type": "LogAppendTime",
                              "cleanup.policy": "delete"})  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 0})  # fmt: skip
    reports: list[tuple[int, int, int]] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        kind, ts = msg.timestamp()
        reports.append((_offset(msg), kind, ts))

    # a producer timestamp far in the past: the report must not echo it
    stale = int(time.time() * 1000) - 3_600_000
    before = int(time.time() * 1000)
    for i in range(3):
        producer.produce(topic, key=b"k%d" % i, value=b"v", partition=0, timestamp=stale,
                         on_delivery=on_delivery)  # fmt: skip
    assert producer.flush(30) == 0
    after = int(time.time() * 1000)
    assert [r[0] for r in reports] == [0, 1, 2]
    for _off, kind, ts in reports:
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert before - 1_000 <= ts <= after + 1_000  # the broker's clock, on this machine

    # ... and it is the very stamp a reader of the log sees
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"),
                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        read: list[tuple[int, int, int]] = []
        deadline = time.monotonic() + 30
        while len(read) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                kind, ts = msg.timestamp()
                read.append((_offset(msg), kind, ts))
        assert read == reports
    finally:
        consumer.close()


def _offset(msg: Message) -> int:
    off = msg.offset()
    return -1 if off is None else int(off)
