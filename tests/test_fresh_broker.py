"""A member against a freshly started broker: its first control write is as fast as its
second, and a worker that configures no logging prints nothing.

A broker that has just started has no block of producer ids yet: it refuses the first
producer-id request ("coordinator load in progress") while it takes one from its controller,
and librdkafka would ask again only 500 ms later. The control writer's warm-up asks again at
once (runtime/control_log.py, ``ControlWriter.warm``), and librdkafka's warning about the
refusal goes to groupkit's logger, not to stderr (runtime/client_log.py). Each test starts its
own broker, since only the first request a broker serves shows either.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from groupkit import GroupConsumer
from groupkit.dev.broker import LocalBroker
from groupkit.dev.harness import wait_for
from groupkit.log import capture
from tests.conftest import create_topic, local_version, unique_name

pytestmark = pytest.mark.broker

#: a first write slower than its second by this much waited for librdkafka's 500 ms retry
_RETRY_QUANTUM_MS = 400


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[str]:
    broker = LocalBroker(tmp_path / "broker", version=local_version())
    try:
        yield broker.start()
    finally:
        broker.stop()


def _create_topic(bootstrap: str, topic: str) -> None:
    """Create ``topic`` with one record, from a producer that asks for no producer id (which
    would spend the broker's first one)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(admin, topic)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "log_level": 0})
    p.produce(topic, b"one")
    assert p.flush(30) == 0


def _appended(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("event") == "hop.appended" and not e.get("failed")]


def test_first_control_write_is_as_fast_as_the_second(fresh_broker: str) -> None:
    conf = {
        "bootstrap.servers": fresh_broker,
        "group.id": unique_name("g"),
        "session.timeout.ms": 3000,
        "heartbeat.interval.ms": 100,
        "groupkit.control.topic": unique_name("ctl"),
    }
    topic = unique_name("t")
    _create_topic(fresh_broker, topic)
    with capture(logging.DEBUG) as events:
        c = GroupConsumer(conf)
        try:
            c.subscribe([topic])
            wait_for(lambda: len(_appended(events)) >= 2, 30, "two control writes")
        finally:
            c.close()
    first, second = (e["ms"] for e in _appended(events)[:2])
    assert first < second + _RETRY_QUANTUM_MS, (first, second)
    # The broker was fresh: it refused the first producer id, so the retry path ran.
    refused = [
        e
        for e in events
        if e.get("event") == "librdkafka"
        and e.get("fac") == "GETPID"
        and e["log_level"] == "warning"
    ]
    assert refused, "the broker gave a producer id at once: the test did not see a fresh broker"


def test_a_worker_that_configures_no_logging_prints_nothing(fresh_broker: str) -> None:
    topic = unique_name("t")
    _create_topic(fresh_broker, topic)
    worker = textwrap.dedent(
        f"""
        from groupkit import GroupConsumer
        c = GroupConsumer({{
            "bootstrap.servers": {fresh_broker!r},
            "group.id": {unique_name("g")!r},
            "auto.offset.reset": "earliest",
            "groupkit.control.topic": {unique_name("ctl")!r},
        }})
        c.subscribe([{topic!r}])
        while True:
            msg = c.poll(1.0)
            if msg is not None and msg.error() is None:
                break
        c.close()
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", worker], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert (out.stdout, out.stderr) == ("", "")
