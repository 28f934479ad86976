"""Protocol version 2's liveness topic on the real broker: created deleted-by-time and
``LogAppendTime``, refused when the producer stamps it, and waited for, then named, when a
member may not create it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from groupkit import GroupConsumer
from groupkit.errors import ControlTopicError
from groupkit.runtime.control_topic import (
    LIVENESS_MIN_RETENTION_MS,
    ensure_control_topic,
    ensure_liveness_topic,
)
from tests.conftest import delete_topics, unique_name


def test_created_deleted_by_time_with_the_brokers_clock(admin: AdminClient) -> None:
    name = unique_name("live")
    try:
        assert ensure_liveness_topic(admin, name, partitions=3) == 3
        res = ConfigResource(ConfigResource.Type.TOPIC, name)
        got = admin.describe_configs([res])[res].result(timeout=30)
        assert got["cleanup.policy"].value == "delete"
        assert got["message.timestamp.type"].value == "LogAppendTime"
        assert int(got["retention.ms"].value) >= LIVENESS_MIN_RETENTION_MS
        assert ensure_liveness_topic(admin, name, partitions=5) == 3  # an existing one is kept
    finally:
        delete_topics(admin, [name])


def test_a_liveness_topic_the_producer_stamps_is_refused(
    admin: AdminClient, topic_factory: Callable[..., str]
) -> None:
    name = topic_factory(partitions=1, config={"message.timestamp.type": "CreateTime"})
    with pytest.raises(ControlTopicError, match=r"message\.timestamp\.type=CreateTime"):
        ensure_liveness_topic(admin, name)


def test_a_missing_liveness_topic_fails_a_member_that_may_not_create_it(
    conf: dict[str, Any], admin: AdminClient
) -> None:
    """The control topic is there, its liveness topic not: waited for (a topic created a moment
    ago may not be in every broker's metadata yet), then named."""
    ensure_control_topic(admin, conf["groupkit.control.topic"])
    absent = unique_name("absent")
    try:
        with pytest.raises(ControlTopicError, match=rf"liveness topic '{absent}' does not exist"):
            GroupConsumer({**conf, "groupkit.protocol.version": 2,
                           "groupkit.liveness.topic": absent,
                           "groupkit.control.topic.create": False,
                           "topic.metadata.propagation.max.ms": 1000})  # fmt: skip
    finally:
        delete_topics(admin, [conf["groupkit.control.topic"]])
