"""A member whose control loop failed: ``close()`` releases every client and says why.

On the real SASL broker of ``tests/test_security.py`` (its fixtures are reused here): ``carol``
may not write anywhere, so her control writer's idempotent producer is refused its producer id,
a fatal *refusal*: the control loop must fail (never replace the producer and retry forever),
``poll`` must say why, and ``close()`` must then close the control reader too (not re-raise
before closing anything).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient

from groupkit import GroupConsumer
from groupkit.dev.broker import LocalBroker
from groupkit.errors import ConsumerClosedError, ControlLoopError
from groupkit.runtime.admin import create_topic
from tests.test_security import (  # noqa: F401 - names, root and sasl are fixtures
    allow,
    conf_for,
    member_acls,
    names,
    root,
    sasl,
)


def test_close_after_a_failed_control_loop_releases_the_control_clients(
    sasl: LocalBroker,  # noqa: F811
    root: AdminClient,  # noqa: F811
    names: dict[str, str],  # noqa: F811
) -> None:
    data = names["data"]
    create_topic(root, data, 2)
    allow(sasl, root, "carol",
          member_acls(data, names["control"], names["group"], write_control=False))  # fmt: skip
    c = GroupConsumer(conf_for(sasl, "carol", names))
    c.subscribe([data])
    coordinator = c.coordinator
    assert coordinator is not None
    t0 = time.monotonic()
    refused = r"Cluster authorization failed.*WRITE on topic"
    with pytest.raises(ControlLoopError, match=refused) as e:
        while time.monotonic() - t0 < 20:
            c.poll(0.1)
    assert e.value.cause is e.value.__cause__ is coordinator.failure
    assert coordinator.writer.replacements == 0  # a refusal is not retried with a new producer
    with pytest.raises(ControlLoopError, match="the control loop failed"):
        c.close()
    assert c.coordinator is None
    with pytest.raises(RuntimeError):  # the control reader's consumer was closed
        coordinator.reader._consumer.poll(0)
    c.close()  # already closed: nothing left to raise
    with pytest.raises(ConsumerClosedError, match="closed"):
        c.poll(0)
