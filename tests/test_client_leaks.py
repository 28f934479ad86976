"""Every librdkafka client a GroupConsumer opens is closed, on every path.

A client that outlives its use keeps retrying its brokers (``Connect to ipv4#... failed:
Connection refused`` once they are gone). Each test counts the live librdkafka handles of this
process (``dev.broker.live_client_handles``: one ``rdk:main`` thread per handle) before and after
a path, with the consumer object still referenced, so what is counted is what ``close()`` (or the
path itself) closed, not what garbage collection happened to destroy. The constructor's own
paths (a failed subscribe, a constructor that fails half-way) are in
tests/test_group_consumer_edges.py.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from groupkit import GroupConsumer
from groupkit.dev.broker import free_port, live_client_handles
from groupkit.dev.harness import wait_for
from groupkit.errors import BrokerError, GroupkitError
from groupkit.protocol import GroupState
from groupkit.runtime.hooks import GroupObserver

#: admin, data consumer, control reader, control writer
PER_MEMBER = 4


def clients_of(c: GroupConsumer) -> int:
    """The librdkafka clients ``c`` runs now: :data:`PER_MEMBER`, and in protocol version 2
    the liveness log's reader while it judges (the leader and its successors; a lone member
    leads)."""
    co = c.coordinator
    return PER_MEMBER + (co is not None and co.v2 is not None and co.v2.reader is not None)


@pytest.fixture
def baseline() -> Iterator[int]:
    """The handles alive before the test (other tests' may still be closing: wait for them)."""
    gc.collect()
    before = live_client_handles()
    yield before


def settled(n: int, what: str, timeout: float = 10) -> None:
    """Wait until ``n`` handles live, without collecting garbage: an AdminClient has no close(),
    it is destroyed with its last reference, so one held in a reference cycle would live on
    until a collection (a failed control loop's error was such a cycle)."""
    wait_for(lambda: live_client_handles() == n, timeout,
             f"{what}: {n} live librdkafka clients (now {live_client_handles()})")  # fmt: skip


def pump(c: GroupConsumer, cond: Callable[[], bool], timeout: float, what: str) -> None:
    def step() -> bool:
        c.poll(0.01)
        return cond()

    wait_for(step, timeout, what, step=0)


def test_unreachable_cluster_leaves_no_client(baseline: int) -> None:
    """The admin that could not reach the cluster is destroyed although the error (and its
    traceback) is still held."""
    with pytest.raises(BrokerError, match="cannot reach Kafka") as info:
        GroupConsumer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "group.id": "g",
                       "socket.timeout.ms": 1000})  # fmt: skip
    assert info.value is not None  # held
    settled(baseline, "the unreachable cluster's admin destroyed")


def test_failed_control_loop_then_close(
    conf: dict[str, Any], topic_factory: Callable[..., str], baseline: int
) -> None:
    topic = topic_factory(partitions=2)
    c = GroupConsumer(conf)
    c.subscribe([topic])
    pump(c, lambda: len(c.assignment()) == 2, 30, "the assignment")
    settled(baseline + clients_of(c), "the member's clients open")
    coordinator = c.coordinator
    assert coordinator is not None

    def boom(_records: object) -> None:
        raise RuntimeError("injected: the control loop fails")

    coordinator.turn = boom  # type: ignore[method-assign]
    wait_for(lambda: coordinator.failure is not None, 10, "the control loop to fail")
    with pytest.raises(GroupkitError, match="control loop failed"):
        c.poll(0.1)
    with pytest.raises(GroupkitError, match="control loop failed"):
        c.close()  # close() after the error: says why, and still closes everything
    c.close()  # closing again is a no-op
    coordinator = None  # (it shares the consumer's admin, which has no close())
    settled(baseline, "every client of the failed member closed")


class StallOnce(GroupObserver):
    """Stalls the control loop once, for ``seconds``, when armed: heartbeats stop, the member's
    session lapses while its process runs."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.armed = threading.Event()
        self.done = threading.Event()

    def turn(self, state: GroupState, member_id: str, now_ms: int) -> None:
        if self.armed.is_set() and not self.done.is_set():
            self.done.set()
            threading.Event().wait(self.seconds)  # the fault: a control loop that stalls


def test_lost_session_renews_the_data_consumer_and_closes_the_old_one(
    conf: dict[str, Any], topic_factory: Callable[..., str], baseline: int
) -> None:
    topic = topic_factory(partitions=2)
    stall = StallOnce(seconds=conf["session.timeout.ms"] / 1000 * 1.5)
    lost: list[object] = []
    c = GroupConsumer(conf, observers=[stall])
    c.subscribe([topic], on_lost=lambda _c, ps: lost.extend(ps))
    pump(c, lambda: len(c.assignment()) == 2, 30, "the assignment")
    old_data = c._data.handle
    stall.armed.set()
    pump(c, lambda: len(lost) == 2, 30, "the member to lose its session and its partitions")
    assert c._data.handle is not old_data  # renewed once it owned nothing
    settled(baseline + clients_of(c), "the old data consumer closed, the new one open")
    pump(c, lambda: len(c.assignment()) == 2, 30, "the member to own everything again")
    c.close()
    settled(baseline, "every client closed")


def test_max_poll_interval_rejoin_closes_the_old_control_clients(
    conf: dict[str, Any], topic_factory: Callable[..., str], baseline: int
) -> None:
    topic = topic_factory(partitions=1)
    c = GroupConsumer({**conf, "max.poll.interval.ms": 1500})
    c.subscribe([topic])
    pump(c, lambda: len(c.assignment()) == 1, 30, "the assignment")
    first = c.coordinator
    assert first is not None
    wait_for(lambda: first.abandoned, 10, "the member to leave for not polling")
    pump(c, lambda: c.coordinator is not first and len(c.assignment()) == 1, 30,
         "the member to rejoin")  # fmt: skip
    assert first.reader._closed and first.writer._closed
    first = None
    settled(baseline + clients_of(c), "the old control clients closed, the new ones open")
    c.close()
    settled(baseline, "every client closed")


def test_close_with_telemetry_closes_its_clients(
    conf: dict[str, Any], topic_factory: Callable[..., str], baseline: int
) -> None:
    """The telemetry publisher's producer and admin go with close(), while the closed consumer
    object (and its observers) are still referenced."""
    topic = topic_factory(partitions=1)
    tel = f"{conf['groupkit.control.topic']}-tel"
    c = GroupConsumer({**conf, "groupkit.telemetry.enable": True,
                       "groupkit.telemetry.interval.ms": 200,
                       "groupkit.telemetry.topic": tel})  # fmt: skip
    c.subscribe([topic])
    pump(c, lambda: len(c.assignment()) == 1, 30, "the assignment")
    pump(c, lambda: live_client_handles() > baseline + clients_of(c), 30,
         "the leader to open its telemetry producer")  # fmt: skip
    c.close()
    settled(baseline, "every client closed, telemetry's too")
