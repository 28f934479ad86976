"""GroupConsumer edges on the real broker, in one process: bad input, describe, garbage in the
control topic, lag-aware assignment, max.poll.interval.ms."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KTP

from groupkit import GroupConsumer
from groupkit.dev.broker import live_client_handles
from groupkit.dev.harness import wait_for
from groupkit.errors import (
    BrokerError,
    ConfigError,
    ControlTopicError,
    FencedError,
    UnknownAssignorError,
)
from groupkit.runtime.describe import describe_group
from tests.conftest import create_topic, delete_topics, unique_name
from tests.groupharness import pump


def test_wrong_bootstrap_address_is_a_clear_error() -> None:
    with pytest.raises(BrokerError, match=r"cannot reach Kafka at 127\.0\.0\.1:1"):
        GroupConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g",
                       "socket.timeout.ms": 1000})  # fmt: skip


def test_missing_topic_and_unknown_assignor(conf: dict[str, Any]) -> None:
    with pytest.raises(UnknownAssignorError, match="known: balanced, cooperative-sticky"):
        GroupConsumer({**conf, "groupkit.assignor": "nope"})
    c = GroupConsumer({**conf, "topic.metadata.propagation.max.ms": 300})
    try:
        t0 = time.monotonic()
        with pytest.raises(ConfigError, match=r"do not exist.*waited 0\.3 s"):
            c.subscribe([unique_name("absent")])
        assert time.monotonic() - t0 >= 0.3  # asked again until the bound, then refused
    finally:
        c.close()


def test_subscribe_waits_for_a_topic_created_meanwhile(
    conf: dict[str, Any], admin: Any, consumers: list[GroupConsumer]
) -> None:
    """A topic the metadata does not show yet (created a moment ago elsewhere, or by the
    look-up itself with allow.auto.create.topics) is waited for, not refused at once."""
    topic = unique_name("late")
    c = GroupConsumer(conf)
    consumers.append(c)
    errors: list[BaseException] = []

    def subscribe() -> None:
        try:
            c.subscribe([topic])
        except BaseException as e:  # reported below
            errors.append(e)

    waiter = threading.Thread(target=subscribe)
    waiter.start()
    try:
        # half a second with the topic absent (the scenario, not a wait for a condition):
        # subscribe() is still asking, where it used to refuse at its first answer
        time.sleep(0.5)
        assert waiter.is_alive(), errors
        create_topic(admin, topic, 2)
        waiter.join(30)
        assert not waiter.is_alive() and not errors, errors
        pump([c], lambda: len(c.assignment()) == 2, 30, "both partitions owned")
    finally:
        waiter.join(30)
        delete_topics(admin, [topic])


def test_control_topic_with_wrong_config(
    conf: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    bad = topic_factory(partitions=1, config={"cleanup.policy": "delete"})
    gc.collect()
    before = _librdkafka_handles()
    with pytest.raises(ControlTopicError, match=r"cleanup\.policy=delete"):
        GroupConsumer({**conf, "groupkit.control.topic": bad})  # checked before any subscribe
    wait_for(lambda: _librdkafka_handles() <= before, 10, "the failed consumer's admin destroyed")


# Live librdkafka clients in this process (one ``rdk:main`` thread per handle); more paths in
# tests/test_client_leaks.py.
_librdkafka_handles = live_client_handles


def test_control_clients_are_opened_by_the_constructor_and_closed_on_every_path(
    conf: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    """GroupConsumer() opens the control reader and writer and warms them (a reader that
    warmed before the control topic was created learns it again on first use, in the standby's
    catch-up); close() without a subscribe (or after a failed one), and a constructor that
    fails, leave no client alive."""
    gc.collect()
    before = _librdkafka_handles()
    c = GroupConsumer({**conf, "topic.metadata.propagation.max.ms": 200})
    assert c._control is None and c._standby is not None  # the standby member took them
    ctl = c._standby.control
    ctl.wait_warm()
    assert c._standby.wait_caught_up(30)
    assert ctl.reader._warm and ctl.writer._warm
    # admin, data consumer, control reader and writer (>=: other tests' handles may be closing)
    assert _librdkafka_handles() >= before + 4
    with pytest.raises(ConfigError, match="do not exist"):
        c.subscribe([unique_name("absent")])
    c.close()
    assert ctl.reader._closed and ctl.writer._closed
    wait_for(lambda: _librdkafka_handles() <= before, 10, "every client of the consumer closed")

    # the data consumer refuses its settings
    with pytest.raises(ConfigError, match="data consumer refused"):
        GroupConsumer({**conf, "fetch.wait.max.ms": "soon"})
    wait_for(lambda: _librdkafka_handles() <= before, 10, "the failed consumer's clients closed")


def test_subscribe_joins_with_the_clients_the_constructor_warmed(
    conf: dict[str, Any], topic_factory: Callable[..., str], consumers: list[GroupConsumer]
) -> None:
    topic = topic_factory(partitions=3)
    gc.collect()
    before = _librdkafka_handles()
    c = GroupConsumer(conf)
    consumers.append(c)
    standby = c._standby
    assert standby is not None
    ctl = standby.control
    ctl.wait_warm()
    t0 = time.monotonic()
    c.subscribe([topic])
    subscribed = time.monotonic() - t0
    assert c.coordinator is standby and c._standby is None  # the standby joined
    del standby  # (a coordinator holds the consumer's admin client: counted below)
    assert (c.coordinator.reader, c.coordinator.writer) == (ctl.reader, ctl.writer)
    assert c._control is None  # handed over: the coordinator owns and closes them
    pump([c], lambda: len(c.assignment()) == 3, 30, "the lone member to own everything")
    joined = time.monotonic() - t0
    print(f"subscribe() {subscribed * 1000:.0f} ms, first assignment {joined * 1000:.0f} ms")
    # Generous for a shared 2-core machine; a cold control writer alone took 0.5-1 s.
    assert subscribed < 1.0 and joined < 3.0, (subscribed, joined)
    c.unsubscribe()  # the coordinator closed the clients it was handed
    assert ctl.reader._closed and ctl.writer._closed
    c.subscribe([topic])  # a new member: new clients
    assert c.coordinator is not None and c.coordinator.reader is not ctl.reader
    pump([c], lambda: len(c.assignment()) == 3, 30, "the member to own everything again")
    c.close()
    wait_for(lambda: _librdkafka_handles() <= before, 10, "every client of both members closed")


def test_a_consumer_keeps_up_with_the_log_before_subscribe_and_writes_nothing(
    conf: dict[str, Any], topic_factory: Callable[..., str], consumers: list[GroupConsumer]
) -> None:
    """GroupConsumer() starts its member's control loop at once: it catches up on the control
    log and follows it while the app gets ready, so subscribe() joins without a catch-up. It
    writes nothing before subscribe(), and max.poll.interval.ms counts from the join, not from
    the constructor."""
    topic = topic_factory(partitions=2)
    a = GroupConsumer(conf)
    consumers.append(a)
    a.subscribe([topic])
    pump([a], lambda: len(a.assignment()) == 2, 30, "a to own both partitions")
    b = GroupConsumer({**conf, "max.poll.interval.ms": 1500})
    consumers.append(b)
    made = time.monotonic()
    standby = b._standby
    assert standby is not None and b.coordinator is None and b.member_id is None
    assert standby.wait_caught_up(30)
    # it follows a's heartbeats as they come
    seen = standby.state.offset
    wait_for(lambda: standby.state.offset > seen + 3, 30, "the standby to keep reading")
    assert standby.state.leader == a.member_id
    # Longer than max.poll.interval.ms since the constructor, without a poll: nothing to
    # wait for but the time itself.
    time.sleep(max(0.0, 1.6 - (time.monotonic() - made)))
    seen = standby.state.offset
    wait_for(lambda: standby.state.offset > seen + 3, 30, "the standby to read on")
    # nothing written: a record of its own would be in its replay by now, and in a's
    assert standby.member_id not in standby.state.members
    assert a.coordinator is not None and standby.member_id not in a.coordinator.state.members
    read_before = standby.stats.records_read
    b.subscribe([topic])
    assert b.coordinator is standby
    pump([a, b], lambda: len(a.assignment()) == 1 == len(b.assignment()), 30,
         "a and b to share")  # fmt: skip
    # the join replayed nothing anew (the standby had caught up), and was not taken for a
    # member that stopped polling: the same member, never abandoned
    assert standby.stats.catch_up in ("snapshot", "full") and read_before > 0
    assert b.member_id == standby.member_id and not standby.abandoned


def test_commit_of_a_partition_not_owned_is_refused(
    conf: dict[str, Any], topic_factory: Callable[..., str], consumers: list[GroupConsumer]
) -> None:
    topic = topic_factory(partitions=2)
    c = GroupConsumer(conf)
    consumers.append(c)
    c.subscribe([topic])
    pump([c], lambda: len(c.assignment()) == 2, 30, "the assignment")
    with pytest.raises(FencedError, match="does not own"):
        c.commit(offsets=[KTP(unique_name("other"), 0, 1)], asynchronous=False)
    c.commit(offsets=[KTP(topic, 0, 0)], asynchronous=False)  # owned: accepted


def test_garbage_in_the_control_topic_is_rejected_counted_and_harmless(
    conf: dict[str, Any],
    topic_factory: Callable[..., str],
    consumers: list[GroupConsumer],
    bootstrap: str,
) -> None:
    topic = topic_factory(partitions=4)
    a, b = GroupConsumer(conf), GroupConsumer(conf)
    consumers += [a, b]
    a.subscribe([topic])
    pump([a], lambda: len(a.assignment()) == 4, 30, "a to own everything")
    ctl = conf["groupkit.control.topic"]
    assert a.coordinator is not None
    part = a.coordinator.control_partition  # the one the members read
    p = Producer({"bootstrap.servers": bootstrap})
    group_bytes = conf["group.id"].encode()
    garbage = [
        (b"\x00\xff", b"\x01\x02\x03"),  # undecodable key
        (b"\x01A" + len(group_bytes).to_bytes(2, "big") + group_bytes, b"\x63junk"),  # bad version
        (b"\x01A" + len(group_bytes).to_bytes(2, "big") + group_bytes, b"\x01\x00{not json"),
        (b"\x01M" + len(group_bytes).to_bytes(2, "big") + group_bytes + b"forged", b"\x01\x00{}"),
    ]
    for k, v in garbage:
        p.produce(ctl, key=k, value=v, partition=part)
    assert p.flush(10) == 0
    b.subscribe([topic])
    # (b owns its share before a generation covers it: that one comes a heartbeat later,
    # Planner.cover_after_ms)
    pump([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2
         and a.generation == b.generation, 30, "a and b to share the topic, covered")  # fmt: skip
    for c in (a, b):
        assert c.coordinator is not None
        rejected = c.coordinator.state.rejections
        assert sum(rejected.values()) >= len(garbage) - 1, rejected  # the bad key may be foreign
    desc = describe_group(conf)
    assert desc["generation"] == a.generation == b.generation
    assert sum(desc["rejected"].values()) >= len(garbage) - 1


def test_describe_shows_members_leader_and_lag(
    conf: dict[str, Any],
    topic_factory: Callable[..., str],
    consumers: list[GroupConsumer],
    bootstrap: str,
) -> None:
    topic = topic_factory(partitions=2)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        p.produce(topic, value=b"x", partition=i % 2)
    assert p.flush(10) == 0
    c = GroupConsumer({**conf, "auto.offset.reset": "latest"})  # nothing read: all lag stays
    consumers.append(c)
    c.subscribe([topic])
    pump([c], lambda: len(c.assignment()) == 2, 30, "the assignment")
    c.commit(offsets=[KTP(topic, 0, 5), KTP(topic, 1, 5)], asynchronous=False)
    res = subprocess.run(
        [sys.executable, "-m", "groupkit.cli", "describe", "--bootstrap-servers", bootstrap,
         "--group", conf["group.id"], "--control-topic", conf["groupkit.control.topic"], "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    desc = json.loads(res.stdout)
    (member,) = desc["members"]
    assert member["member_id"] == c.member_id and member["leader"] and member["live"]
    assert sorted(map(tuple, member["assigned"])) == [(topic, 0), (topic, 1)]
    assert member["lag"] == desc["total_lag"] == 20  # 15 - 5 on each partition


def test_lag_assignor_balances_skewed_lag_on_a_real_topic(
    conf: dict[str, Any],
    topic_factory: Callable[..., str],
    consumers: list[GroupConsumer],
    bootstrap: str,
) -> None:
    topic = topic_factory(partitions=3)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    # The seeds' example scaled down: lags 1000, 500, 600 with nothing committed.
    for partition, n in ((0, 1000), (1, 500), (2, 600)):
        for _ in range(n):
            p.produce(topic, value=b"x", partition=partition)
    assert p.flush(30) == 0
    # Members named so the assignor's id order is known; they must not consume meanwhile.
    # No commits: lag stays end - beginning (auto.offset.reset=earliest) however much is polled.
    lag_conf = {**conf, "groupkit.assignor": "lag", "groupkit.rebalance.protocol": "eager",
                "enable.auto.commit": False}  # fmt: skip
    c0 = GroupConsumer({**lag_conf, "client.id": "c0"})
    consumers.append(c0)
    c1 = GroupConsumer({**lag_conf, "client.id": "c1"})
    consumers.append(c1)
    c0.subscribe([topic])
    c1.subscribe([topic])

    # Both apps poll (eager revocations happen in poll) until a complete plan covers both.
    def settled() -> bool:
        for c in (c0, c1):
            a = c.coordinator.state.assignment if c.coordinator else None
            if a is None or a.phase != "complete" or len(a.members) != 2:
                return False
        return True

    pump([c0, c1], settled, 30, "a complete assignment covering both")
    assert c0.coordinator is not None
    a = c0.coordinator.state.assignment
    assert a is not None and a.assignor == "lag"
    plans = {
        m: sorted(p.partition for p in cm.assigned | cm.pending) for m, cm in a.members.items()
    }
    # One member takes partition 0 (lag 1000), the other 1 and 2 (1100): not range's 1500/600.
    assert sorted(plans.values()) == [[0], [1, 2]], plans


def test_not_polling_within_max_poll_interval_leaves_and_rejoins(
    conf: dict[str, Any], topic_factory: Callable[..., str], consumers: list[GroupConsumer]
) -> None:
    topic = topic_factory(partitions=2)
    lost: list[KTP] = []
    slow = GroupConsumer({**conf, "max.poll.interval.ms": 1500})
    consumers.append(slow)
    slow.subscribe([topic], on_lost=lambda _c, ps: lost.extend(ps))
    pump([slow], lambda: len(slow.assignment()) == 2, 30, "the assignment")
    first_id = slow.member_id
    other = GroupConsumer(conf)
    consumers.append(other)
    other.subscribe([topic])
    # Only `other` polls now: `slow` overruns max.poll.interval.ms and leaves the group.
    pump([other], lambda: len(other.assignment()) == 2, 30, "other to take everything")
    with pytest.raises(FencedError, match=r"max\.poll\.interval\.ms"):
        slow.commit(asynchronous=False)
    # Its next poll reports the partitions lost and rejoins as a new member.
    slow.poll(0.1)
    assert sorted((p.topic, p.partition) for p in lost) == [(topic, 0), (topic, 1)]
    assert slow.member_id != first_id
    pump([slow, other], lambda: len(slow.assignment()) == 1 == len(other.assignment()), 30,
         "the two to share again")  # fmt: skip
