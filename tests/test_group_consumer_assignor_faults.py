"""A user's assignor cannot take a running group down, on a real broker.

Three buggy assignors, registered through ``register_assignor`` as a user would (one raises,
one assigns a partition twice, one leaves a partition out), and a slow one. Unguarded, the first
would end the leader's control loop (and the next leader's, member by member), the second would
make the leader rewrite a rejected record for ever, the third would leave partitions unconsumed,
and the slow one would delay the leader's heartbeats for as long as it ran. The group stays
fully assigned and consuming, on the built-in fallback, and says why: in the assignment record
every member replays, in ``groupkit describe``, in the leader's
``groupkit_assignor_failures_total`` and its ``assignor.failed`` log line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from groupkit import GroupConsumer
from groupkit.assignors import register_assignor, unregister_assignor
from groupkit.dev.harness import wait_for
from groupkit.metrics import PrometheusObserver
from groupkit.protocol.vocab import AssignorFailure
from groupkit.runtime.describe import describe_group
from tests.test_protocol_assignor_faults import FaultyAssignor

PARTITIONS = 4
#: the slow assignor's budget, and how long it takes
BUDGET_MS = 400
SLOW_S = 4.0


class SlowAssignor(FaultyAssignor):
    """Range, after a long think (longer than its budget and than the session)."""

    def assign(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(SLOW_S)  # the slowness under test
        return super().assign(*args, **kwargs)


@pytest.fixture
def registered() -> Iterator[Callable[[str], str]]:
    names: list[str] = []

    def register(mode: str) -> str:
        name = f"buggy-{mode}"

        def make() -> FaultyAssignor:
            a = SlowAssignor() if mode == "slow" else FaultyAssignor((mode,))
            a.name = name  # the name the record and the metric carry
            return a

        register_assignor(name, make)
        names.append(name)
        return name

    yield register
    for n in names:
        unregister_assignor(n)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("raise", AssignorFailure.RAISED),
        ("duplicate", AssignorFailure.INVALID),
        ("omit_partition", AssignorFailure.INVALID),
        ("slow", AssignorFailure.TIMEOUT),
    ],
)
def test_a_buggy_assignor_leaves_the_group_assigned_consuming_and_saying_why(
    conf: dict[str, Any],
    topic_factory: Callable[..., str],
    consumers: list[GroupConsumer],
    bootstrap: str,
    registered: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
    mode: str,
    reason: str,
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    name = registered(mode)
    cfg = {**conf, "groupkit.assignor": name, "groupkit.assignor.timeout.ms": BUDGET_MS}
    registries = [CollectorRegistry() for _ in range(3)]
    caplog.set_level(logging.WARNING, logger="groupkit")
    group = [GroupConsumer({**cfg, "client.id": f"c{i}"}, observers=[PrometheusObserver(r)])
             for i, r in enumerate(registries)]  # fmt: skip
    consumers.extend(group)
    for c in group:
        c.subscribe([topic])
    producer = Producer({"bootstrap.servers": bootstrap})
    seen: set[int] = set()

    def fully_assigned_and_consuming() -> bool:
        for p in range(PARTITIONS):
            producer.produce(topic, value=b"x", partition=p)
        producer.flush(5)
        for c in group:
            for _ in range(5):
                msg = c.poll(0.02)
                if msg is not None and msg.error() is None:
                    seen.add(msg.partition())
        owned = [tp for c in group for tp in c.assignment()]
        # Newcomers own their admitted shares before a generation covers them (the covering
        # one waits a heartbeat after their claims, Planner.cover_after_ms): the generation
        # counted below is the one that covers every member, as each member replays it.
        ids = {c.member_id for c in group}
        return (
            sorted(tp.partition for tp in owned) == list(range(PARTITIONS))
            and len(seen) == PARTITIONS
            and all(c.coordinator is not None
                    and all(c.coordinator.state.covers(i) for i in ids) for c in group)
        )  # fmt: skip

    wait_for(fully_assigned_and_consuming, 60, "every partition owned once and consumed", step=0)
    for c in group:
        assert c.coordinator is not None and c.coordinator.failure is None
    # every member replays the record that says the fallback planned, and why
    for c in group:
        assert c.coordinator is not None
        a = c.coordinator.state.assignment
        assert a is not None and a.assignor == name
        assert a.fallback is not None and a.fallback.reason == reason, a.fallback
    (leader,) = [i for i, c in enumerate(group) if c.is_leader]
    value = registries[leader].get_sample_value(
        "groupkit_assignor_failures_total",
        {"group": conf["group.id"], "member": group[leader].member_id or "", "assignor": name,
         "reason": reason},
    )  # fmt: skip
    assert value is not None and value >= 1
    desc = describe_group(cfg, with_lag=False)
    assert desc["assignor"] == name and desc["fallback"]["reason"] == reason
    # logged with the assignor's name and reason, once per generation at most
    failed = [r.getMessage() for r in caplog.records
              if r.getMessage().startswith("assignor.failed")]  # fmt: skip
    assert failed and all(name in m and f"reason={reason}" in m for m in failed), failed
    assert len(failed) <= desc["generation"], failed
    # Nothing the assignor answered reached the log (its bad answers would be rejected as
    # "inconsistent"), and the log is not rewritten in a loop: the group is stable. A grant may
    # still be refused as unsafe_grant when a member's record lands between the leader's plan
    # and its record (the replay's safety net, possible at the group's start; not the
    # assignor's doing): a few at most, then the group settles.
    assert "inconsistent" not in desc["rejected"], desc["rejected"]
    assert sum(desc["rejected"].values()) <= 2, desc["rejected"]
    generation = desc["generation"]
    # A rewrite loop shows within a few planning turns: wait until every member has replayed
    # the log (its clock: the broker's time of each record) two assignor budgets and a second
    # further on, the leader planning on each record meanwhile.
    window_ms = 2 * BUDGET_MS + 1000
    since = max(c.coordinator.state.log_time for c in group if c.coordinator is not None)
    wait_for(lambda: all(c.coordinator is not None
                         and c.coordinator.state.log_time >= since + window_ms for c in group),
             30, "the members to replay the log two budgets and a second on")  # fmt: skip
    for c in group:
        c.poll(0.05)
    # not rewritten in a loop (an unguarded buggy assignor writes a record every tick): at
    # most a follow-up or two after the wait (late joins' follow-ups), no more
    after = describe_group(cfg, with_lag=False)
    assert generation <= after["generation"] <= generation + 2, (generation, after["generation"])
    assert "inconsistent" not in after["rejected"], after["rejected"]
    if mode == "slow":
        # the leader kept heartbeating while its assignor ran past the session
        assert all(c.coordinator is not None and not c.coordinator.failure for c in group)
        assert group[leader].is_leader
