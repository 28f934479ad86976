"""A commit that finds no coordinator gives up within groupkit's session; it never lands later.

librdkafka holds a commit that finds no coordinator (the broker restarting) and sends it when
one is back, for up to its ``session.timeout.ms`` (``rd_kafka_cgrp_defer_offset_commit``; 45 s
by default). groupkit's data consumer joins no group, so nothing else would bound that wait: a
member's commit could land seconds after it was made, through more broker restarts, after the
partition's later owners had committed further, and the next owner would process those records
a second time. So the data consumer gets groupkit's session (``runtime/config.py``).

The module starts its own broker, to stop and start it (nothing here uses the session's
``kafka`` fixture). The handle is made from the config ``GroupConsumer`` gives its data
consumer; the broker and librdkafka are real.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient

from groupkit.dev.broker import LocalBroker
from groupkit.dev.harness import wait_for
from groupkit.runtime.admin import create_topic
from groupkit.runtime.config import GroupConfig
from tests.conftest import local_version, unique_name
from tests.groupharness import committed_offsets

SESSION_MS = 2000
#: librdkafka looks for expired waits once a second (``rd_kafka_cgrp_timeout_scan``)
SCAN_S = 1.0


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    broker = LocalBroker(Path(tmp_path_factory.mktemp("stale-commit-broker")),
                         version=local_version())  # fmt: skip
    with broker:
        yield broker


def test_a_commit_made_while_the_broker_is_down_fails_in_a_session_and_never_lands(
    own_broker: LocalBroker,
) -> None:
    bootstrap = own_broker.bootstrap
    topic, group = unique_name("t"), unique_name("g")
    create_topic(AdminClient({"bootstrap.servers": bootstrap}), topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap})
    for _ in range(3):
        producer.produce(topic, b"x", partition=0)
    assert producer.flush(30) == 0

    cfg = GroupConfig.from_dict({"bootstrap.servers": bootstrap, "group.id": group,
                                 "session.timeout.ms": SESSION_MS})  # fmt: skip
    answers: list[tuple[float, Any, list[int]]] = []

    def on_commit(err: Any, parts: list[KTopicPartition]) -> None:
        answers.append((time.monotonic(), err, [p.offset for p in parts]))

    handle = Consumer({**cfg.data_consumer, "on_commit": on_commit})
    try:
        handle.assign([KTopicPartition(topic, 0, 0)])
        got: list[int] = []

        def consumed_all() -> bool:
            m = handle.poll(0.1)
            if m is not None and m.error() is None:
                got.append(m.offset())
            return len(got) == 3

        wait_for(consumed_all, 30, "the 3 records", step=0)
        handle.commit(offsets=[KTopicPartition(topic, 0, 1)], asynchronous=False)
        answers.clear()

        own_broker.stop()
        made = time.monotonic()
        handle.commit(offsets=[KTopicPartition(topic, 0, 3)], asynchronous=True)

        # librdkafka's default would hold it for 45 s, and send it once the broker is back.
        def answered() -> bool:
            handle.poll(0.1)  # serves on_commit
            return bool(answers)

        wait_for(answered, SESSION_MS / 1000 + SCAN_S + 2.0,
                 "the commit to be given up while the broker is down", step=0)  # fmt: skip
        at, err, offsets = answers[0]
        assert offsets == [3]
        assert err is not None and err.code() == KafkaError._WAIT_COORD, err
        assert at - made >= SESSION_MS / 1000 - 0.1  # it did wait for a coordinator

        own_broker.start(fresh=False)
        # Read back after the broker returned (once its coordinator has loaded the group's
        # offsets): the commit made while it was down is not there.
        assert committed_offsets(bootstrap, group, topic, 1) == {(topic, 0): 1}
        assert len(answers) == 1
    finally:
        handle.close()
