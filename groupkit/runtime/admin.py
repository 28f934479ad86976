"""Topic administration the runtime, the demo and the tests share.

``CreateTopics`` returns once the controller has accepted a topic, but a broker may answer
``UNKNOWN_TOPIC_OR_PART`` for a moment afterwards, until its metadata cache has caught up. So
``create_topic`` waits until the topic's metadata shows every partition with a leader.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from groupkit.errors import BrokerError


def wait_for_topic(admin: AdminClient, name: str, partitions: int, timeout: float = 30.0) -> None:
    """Block until ``name`` has ``partitions`` partitions, each with a leader."""
    deadline = time.monotonic() + timeout
    last = "no metadata yet"
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=max(0.5, min(5.0, deadline - time.monotonic())))
        t = md.topics.get(name)
        if t is not None and t.error is None:
            ready = [p for p in t.partitions.values() if p.leader >= 0 and p.error is None]
            if len(ready) >= partitions:
                return
            last = f"{len(ready)} of {partitions} partitions have a leader"
        elif t is not None:
            last = str(t.error)
        time.sleep(0.05)  # metadata refresh is a request per call; no event to wait on
    raise BrokerError(f"topic {name!r} did not become ready within {timeout:.0f}s ({last})")


def create_topic(
    admin: AdminClient,
    name: str,
    partitions: int,
    replication_factor: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    exist_ok: bool = False,
) -> bool:
    """Create ``name`` and wait until it is usable. Returns False if it existed (``exist_ok``)."""
    futures = admin.create_topics(
        [NewTopic(name, partitions, replication_factor, config=dict(config or {}))],
        operation_timeout=timeout,
    )
    created = True
    try:
        futures[name].result(timeout=timeout)
    except KafkaException as e:
        err: Any = e.args[0] if e.args else None
        if (
            exist_ok
            and isinstance(err, KafkaError)
            and err.code() == KafkaError.TOPIC_ALREADY_EXISTS
        ):
            created = False
        else:
            raise BrokerError(f"could not create topic {name!r}: {err}") from e
    wait_for_topic(admin, name, partitions if created else 1, timeout)
    return created
