"""Control topic set-up and lag fetching against the real broker."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from groupkit import GroupConsumer
from groupkit.dev.broker import LocalCluster
from groupkit.dev.harness import wait_for
from groupkit.errors import BrokerError, ControlTopicError
from groupkit.log import capture
from groupkit.runtime.admin import create_topic
from groupkit.runtime.control_topic import (
    LIVENESS_CONFIG,
    REQUIRED_CONFIG,
    TUNING_CONFIG,
    check_control_topic,
    ensure_control_topic,
    partition_for_group,
)
from groupkit.runtime.lag import (
    CommittedReader,
    GroupOffsets,
    TimeLagReader,
    committed_offsets,
    compute_lag,
    fetch_lags,
    read_offsets,
    time_lag_of,
)
from groupkit.types import TopicPartition
from tests.conftest import KafkaBackend, delete_topics, unique_name
from tests.groupharness import pump


def test_control_topic_is_created_compacted_with_log_append_time(admin: AdminClient) -> None:
    name = unique_name("ctl")
    try:
        assert ensure_control_topic(admin, name, partitions=3) == 3
        res = ConfigResource(ConfigResource.Type.TOPIC, name)
        conf = admin.describe_configs([res])[res].result(timeout=30)
        assert conf["cleanup.policy"].value == "compact"
        assert conf["message.timestamp.type"].value == "LogAppendTime"
        assert conf["min.cleanable.dirty.ratio"].value == "0.1"
        # A second member finding it in place checks it and goes on.
        assert ensure_control_topic(admin, name, partitions=3) == 3
    finally:
        delete_topics(admin, [name])


@pytest.mark.parametrize(
    ("config", "setting"),
    [
        ({"cleanup.policy": "delete", "message.timestamp.type": "LogAppendTime"}, "cleanup.policy"),
        (
            {"cleanup.policy": "compact", "message.timestamp.type": "CreateTime"},
            "message.timestamp.type",
        ),
    ],
)
def test_control_topic_with_wrong_settings_is_refused(
    admin: AdminClient, topic_factory: Callable[..., str], config: dict[str, str], setting: str
) -> None:
    name = topic_factory(partitions=1, config=config)
    with pytest.raises(ControlTopicError, match=setting):
        ensure_control_topic(admin, name)


def test_missing_control_topic_without_create_is_an_error(admin: AdminClient) -> None:
    with pytest.raises(ControlTopicError, match="does not exist"):
        ensure_control_topic(admin, unique_name("absent"), create=False, propagation_timeout=1.0)


def test_missing_control_topic_fails_the_member_that_may_not_create_it(
    conf: dict[str, Any],
) -> None:
    """A topic no broker's metadata ever shows is, after the wait for a new topic's metadata
    to reach every broker, the same clear error naming the topic and the setting."""
    absent = unique_name("absent")
    with pytest.raises(ControlTopicError, match=rf"{absent}.*groupkit\.control\.topic\.create"):
        GroupConsumer({**conf, "groupkit.control.topic": absent,
                       "groupkit.control.topic.create": False,
                       "topic.metadata.propagation.max.ms": 2000})  # fmt: skip


#: Control topics created, each asked for at once through another broker: one broker's metadata
#: lagging another's is a race, so one try may miss it (on an idle machine a broker asked at
#: once did not know the topic yet in about a third of the tries, for up to half a second)
FRESH_TOPIC_ROUNDS = 8


def _local(backend: KafkaBackend) -> LocalCluster:
    if backend.local is None:
        pytest.skip("GROUPKIT_BOOTSTRAP_SERVERS names a cluster whose brokers this run cannot list")
    lc: LocalCluster = backend.local
    return lc


def _create_as_an_operator(creator: AdminClient, name: str, liveness: bool = False) -> None:
    """Create a control topic as ``kafka-topics.sh --create`` does: done once the controller has
    it, whether or not every broker knows it yet. ``liveness``: and its liveness topic, the
    same way (protocol version 2, README "Security")."""
    new = [NewTopic(name, 3, -1, config={**REQUIRED_CONFIG, **TUNING_CONFIG})]
    if liveness:
        new.append(NewTopic(f"{name}.liveness", 3, -1, config=LIVENESS_CONFIG))
    for f in creator.create_topics(new).values():
        f.result(timeout=30)


def test_a_control_topic_created_a_moment_ago_is_waited_for(cluster: KafkaBackend) -> None:
    """A control topic created through one broker, looked up at once through another that may
    not create it: that broker may not know it yet, which does not make it absent."""
    lc = _local(cluster)
    creator = AdminClient(lc.node(0).client_config())
    askers = [AdminClient(lc.node(i).client_config()) for i in (1, 2)]
    for a in askers:
        a.list_topics(timeout=30)  # connected: asked as soon as the topic is created
    made: list[str] = []
    try:
        for i in range(FRESH_TOPIC_ROUNDS):
            made.append(unique_name("ctl"))
            _create_as_an_operator(creator, made[-1])
            assert ensure_control_topic(askers[i % 2], made[-1], create=False) == 3
    finally:
        delete_topics(creator, made)


def test_a_member_started_right_after_its_control_topic_was_created_joins(
    cluster: KafkaBackend,
) -> None:
    """An operator creates the control topic through one broker and at once starts a member,
    bootstrapped at another, that may not create it: it constructs, then joins."""
    lc = _local(cluster)
    creator = AdminClient(lc.node(0).client_config())
    data = unique_name("data")
    create_topic(creator, data, 2, replication_factor=-1)
    made = [data]
    try:
        for i in range(FRESH_TOPIC_ROUNDS):
            ctl = unique_name("ctl")
            made += [ctl, f"{ctl}.liveness"]
            _create_as_an_operator(creator, ctl, liveness=True)
            c = GroupConsumer({
                "bootstrap.servers": lc.node(1 + i % 2).bootstrap,
                "group.id": unique_name("g"),
                "groupkit.control.topic": ctl,
                "groupkit.control.topic.create": False,
                "session.timeout.ms": 3000,
                "heartbeat.interval.ms": 300,
            })  # fmt: skip
            try:
                c.subscribe([data])
                pump([c], lambda c=c: len(c.assignment()) == 2, 30, "the member owns both")
            finally:
                c.close()
    finally:
        delete_topics(creator, made)


def test_partition_for_group_is_stable_and_spread() -> None:
    assert partition_for_group("orders", 7) == partition_for_group("orders", 7)
    spread = {partition_for_group(f"group-{i}", 8) for i in range(200)}
    assert spread == set(range(8))


def test_fetch_lags_follows_commits_and_auto_offset_reset(
    bootstrap: str, admin: AdminClient, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=3)
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, count in ((0, 10), (1, 4), (2, 6)):
        for _ in range(count):
            producer.produce(topic, b"v", partition=partition)
    assert producer.flush(30) == 0
    group = unique_name("g")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        c.commit(offsets=[KTP(topic, 0, 3), KTP(topic, 1, 4)], asynchronous=False)
    finally:
        c.close()
    tps = [TopicPartition(topic, p) for p in range(3)]
    # Partition 2 has no commit: latest reads nothing, earliest reads all 6.
    assert fetch_lags(admin, group, tps, "latest") == {tps[0]: 7, tps[1]: 0, tps[2]: 0}
    assert fetch_lags(admin, group, tps, "earliest") == {tps[0]: 7, tps[1]: 0, tps[2]: 6}


def test_compute_lag_rules() -> None:
    assert compute_lag(100, 40, 0, "latest") == 60
    assert compute_lag(100, None, 20, "latest") == 0
    assert compute_lag(100, None, 20, "earliest") == 80
    assert compute_lag(100, 120, 0, "earliest") == 0  # a commit past the end (truncation)


def _commit(bootstrap: str, group: str, offsets: list[KTP]) -> None:
    """Commit ``offsets`` for ``group``, waiting out a group coordinator that is still loading
    (a broker no group has used yet answers NOT_COORDINATOR for a moment)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        wait_for(lambda: _committed(c, offsets), 30, "the commit")
    finally:
        c.close()


def _committed(c: Consumer, offsets: list[KTP]) -> bool:
    try:
        c.commit(offsets=offsets, asynchronous=False)
    except KafkaException:
        return False
    return True


def test_committed_reader_keeps_one_consumer_until_closed(
    bootstrap: str, admin: AdminClient, topic_factory: Callable[..., str]
) -> None:
    """A member's reader of committed offsets answers what a one-off read does, through one
    consumer kept from read to read; once closed, it raises. A GroupConsumer's probe keeps one
    such reader, and its close closes it."""
    topic = topic_factory(partitions=2)
    group = unique_name("g")
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    ktps = [KTP(topic, 0), KTP(topic, 1)]
    _commit(bootstrap, group, [KTP(topic, 0, 3)])
    reader = CommittedReader({"bootstrap.servers": bootstrap}, group)
    try:
        assert reader.committed(ktps) == {tps[0]: 3, tps[1]: None}
        assert committed_offsets(admin, group, tps) == {tps[0]: 3, tps[1]: None}
        first = reader._consumer
        _commit(bootstrap, group, [KTP(topic, 1, 7)])
        assert reader.committed(ktps) == {tps[0]: 3, tps[1]: 7}
        assert reader._consumer is first is not None
    finally:
        reader.close()
    with pytest.raises(BrokerError, match="closed"):
        reader.committed(ktps)

    consumer = GroupConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    probe = consumer.probe
    offsets = probe.read_offsets(tps)
    assert offsets is not None and dict(offsets.committed) == {tps[0]: 3, tps[1]: 7}
    kept = probe._committed
    assert kept is not None and kept._consumer is not None
    probe.read_offsets(tps)
    assert probe._committed is kept
    consumer.close()
    assert probe._committed is None and kept._consumer is None
    assert probe.read_offsets(tps) is None


def test_closing_the_committed_reader_does_not_wait_for_a_read() -> None:
    """A read that the brokers leave unanswered holds the reader for its timeout; close()
    returns at once all the same (a member's close must not wait on it), and the read closes
    the consumer as it ends."""
    import threading

    reader = CommittedReader({"bootstrap.servers": "127.0.0.1:9"}, unique_name("g"))  # no one
    failed: list[BrokerError] = []

    def read() -> None:
        try:
            reader.committed([KTP("t", 0)], timeout=2.0)
        except BrokerError as e:
            failed.append(e)

    t = threading.Thread(target=read)
    t.start()
    wait_for(lambda: reader._reading, 10, "the read to begin")
    reader.close()
    assert reader._reading  # close() returned while the read went on
    t.join(30)
    assert not t.is_alive() and failed, failed
    assert reader._consumer is None and not reader._reading
    with pytest.raises(BrokerError, match="closed"):
        reader.committed([KTP("t", 0)])


def test_time_lag_is_the_age_of_the_first_unconsumed_record(
    bootstrap: str, admin: AdminClient, topic_factory: Callable[..., str]
) -> None:
    """Records with known CreateTimes; the group committed at record 3 of partition 0, at the
    end of partition 1; partition 2 is empty; partition 3's record is dated in the future."""
    topic = topic_factory(partitions=4, config={"message.timestamp.type": "CreateTime"})
    base = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, b"v", partition=0, timestamp=base + i * 1000)
    for i in range(4):
        producer.produce(topic, b"v", partition=1, timestamp=base + i * 1000)
    producer.produce(topic, b"v", partition=3, timestamp=int(time.time() * 1000) + 600_000)
    assert producer.flush(30) == 0
    group = unique_name("g")
    _commit(bootstrap, group, [KTP(topic, 0, 3), KTP(topic, 1, 4), KTP(topic, 3, 0)])
    tps = [TopicPartition(topic, p) for p in range(4)]
    offsets = read_offsets(admin, group, tps, "earliest")
    reader = TimeLagReader({"bootstrap.servers": bootstrap})
    before = time.time()
    got = reader.time_lag(offsets)
    after = time.time()
    # now − the timestamp of record 3, where "now" is when the reader looked
    lag0 = got[tps[0]]
    assert lag0 is not None
    assert before - (base + 3000) / 1000 - 1 <= lag0 <= after - (base + 3000) / 1000 + 1
    assert got[tps[1]] == 0.0  # committed at the end: nothing unconsumed
    assert got[tps[2]] is None  # empty: nothing to date
    assert got[tps[3]] is None  # a CreateTime in the future dates nothing
    # the timestamp is kept per committed offset: no read needed while the commit stays
    again = reader.time_lag(offsets, read=False)
    assert again[tps[0]] is not None and again[tps[0]] >= lag0
    # A reader that re-reads rarely still reads where its samples cannot date the record:
    # the commit moved to record 5, and one sample of the end (10) dates nothing.
    rare = TimeLagReader({"bootstrap.servers": bootstrap}, reread_s=3600)
    assert rare.time_lag(offsets)[tps[0]] == pytest.approx(lag0, abs=1.0)
    moved = GroupOffsets(offsets.end, {**offsets.committed, tps[0]: 5}, {**offsets.lag, tps[0]: 5})
    before = time.time()
    lag5 = rare.time_lag(moved)[tps[0]]
    after = time.time()
    assert lag5 is not None
    assert before - (base + 5000) / 1000 - 1 <= lag5 <= after - (base + 5000) / 1000 + 1


def test_time_lag_rereads_rarely_where_interpolation_agreed_with_a_read(
    bootstrap: str, admin: AdminClient, topic_factory: Callable[..., str]
) -> None:
    """A reader that may re-read every hour trusts interpolation for a partition once it dated
    a read record within a second of its timestamp; until then, and for another reader that
    may re-read at once, the record is read."""
    topic = topic_factory(partitions=1, config={"message.timestamp.type": "CreateTime"})
    tp = TopicPartition(topic, 0)
    producer = Producer({"bootstrap.servers": bootstrap})
    rare = TimeLagReader({"bootstrap.servers": bootstrap}, reread_s=3600)
    often = TimeLagReader({"bootstrap.servers": bootstrap})

    def step(n: int, committed: int, timestamp: int = 0) -> dict[str, float | None]:
        for _ in range(n):
            producer.produce(topic, b"v", partition=0, timestamp=timestamp)
        assert producer.flush(30) == 0
        end = read_offsets(admin, unique_name("g"), [tp]).end[tp]
        offsets = GroupOffsets({tp: end}, {tp: committed}, {tp: end - committed})
        return {"rare": rare.time_lag(offsets)[tp], "often": often.time_lag(offsets)[tp]}

    step(5, 0)  # read: no samples yet to interpolate with
    time.sleep(0.2)
    step(5, 6)  # read again (not trusted yet); interpolation dates record 6 within the 0.2 s
    # Records backdated a minute: the trusting reader interpolates their append time, the
    # other reads their CreateTime.
    got = step(5, 12, timestamp=int(time.time() * 1000) - 60_000)
    assert got["rare"] is not None and got["rare"] < 1.0
    assert got["often"] == pytest.approx(60.0, abs=1.0)


def test_time_lag_rules_and_interpolation() -> None:
    assert time_lag_of(5, 10, 1_000, 4_500) == 3.5
    assert time_lag_of(0, 10, None, 4_500) == 0.0  # no lag: 0 whatever the timestamp
    assert time_lag_of(0, 0, None, 4_500) is None  # empty partition
    assert time_lag_of(5, 10, None, 4_500) is None  # no timestamp
    assert time_lag_of(5, 10, -1, 4_500) is None
    assert time_lag_of(5, 10, 5_000, 4_500) is None  # a CreateTime in the future
    # Interpolation from (end offset, time) samples: the end was 100 until t=10 s, then 200
    # from t=20 s, so record 150 was appended at about t=15 s.
    tp = TopicPartition("t", 0)
    reader = TimeLagReader({})

    def offsets(end: int, committed: int) -> GroupOffsets:
        return GroupOffsets({tp: end}, {tp: committed}, {tp: end - committed})

    assert reader.time_lag(offsets(100, 100), read=False, now_ms=10_000) == {tp: 0.0}
    # offsets the samples do not cover stay unknown
    assert reader.time_lag(offsets(200, 50), read=False, now_ms=20_000) == {tp: None}
    got = reader.time_lag(offsets(200, 149), read=False, now_ms=30_000)[tp]
    assert got is not None and abs(got - 15.0) < 0.1


def test_a_precreated_control_topic_with_broker_default_segments_is_warned_of(
    admin: AdminClient, topic_factory: Callable[..., str]
) -> None:
    """A control topic pre-created with only what groupkit requires (the broker's defaults
    for the rest: 7-day segments, dirty ratio 0.5) is accepted, with one warning per setting
    that keeps its log large, naming the value found and groupkit's."""
    name = topic_factory(partitions=2, config=dict(REQUIRED_CONFIG))
    with capture() as logs:
        assert ensure_control_topic(admin, name, session_timeout_ms=10_000) == 2
    found = {e["setting"]: e for e in logs if e["event"] == "control_topic.large_log_setting"}
    assert set(found) == {"segment.ms", "min.cleanable.dirty.ratio"}, logs
    assert found["segment.ms"]["value"] == str(7 * 24 * 3600 * 1000)  # the broker's default
    assert found["segment.ms"]["groupkit_value"] == TUNING_CONFIG["segment.ms"]
    assert found["min.cleanable.dirty.ratio"]["value"] == "0.5"
    assert found["min.cleanable.dirty.ratio"]["groupkit_value"] == "0.1"
    assert all(e["log_level"] == "warning" and e["topic"] == name for e in found.values())


def test_control_topic_settings_that_keep_the_log_large_or_lose_tombstones(
    admin: AdminClient, topic_factory: Callable[..., str]
) -> None:
    tuned = {**REQUIRED_CONFIG, **TUNING_CONFIG}
    bad = topic_factory(config={**tuned, "min.compaction.lag.ms": str(3600_000),
                                "delete.retention.ms": "1000"})  # fmt: skip
    with capture() as logs:
        found = check_control_topic(admin, bad, session_timeout_ms=10_000)
    assert {(f.setting, f.value, f.groupkit_value) for f in found} == {
        ("min.compaction.lag.ms", "3600000", "0"),
        ("delete.retention.ms", "1000", TUNING_CONFIG["delete.retention.ms"]),
    }
    assert sorted(e["setting"] for e in logs) == ["delete.retention.ms", "min.compaction.lag.ms"]
    # groupkit's own settings (a topic it created) draw no warning
    name = unique_name("ctl")
    try:
        with capture() as logs:
            ensure_control_topic(admin, name, session_timeout_ms=10_000)
            ensure_control_topic(admin, name, session_timeout_ms=10_000)  # found in place
        assert not [e for e in logs if e["event"] == "control_topic.large_log_setting"], logs
    finally:
        delete_topics(admin, [name])
