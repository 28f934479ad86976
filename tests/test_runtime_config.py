"""GroupConsumer configuration: what is taken over, what is passed on, what is refused."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from groupkit.errors import ConfigError, UnknownAssignorError
from groupkit.runtime.config import GroupConfig

BASE = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "groupkit.assignor": "range"}


def test_defaults() -> None:
    cfg = GroupConfig.from_dict(BASE)
    assert cfg.protocol == "cooperative"
    assert cfg.control_topic == "__groupkit"
    assert cfg.session_timeout_ms == 10_000
    assert cfg.heartbeat_interval_ms < cfg.session_timeout_ms
    assert cfg.rebalance_timeout_ms == cfg.max_poll_interval_ms


def test_librdkafka_never_auto_commits_but_groupkit_does() -> None:
    cfg = GroupConfig.from_dict({**BASE, "enable.auto.commit": True})
    assert cfg.enable_auto_commit is True
    assert cfg.data_consumer["enable.auto.commit"] is False


def test_the_data_consumer_gives_up_a_commit_within_groupkits_session() -> None:
    """librdkafka holds a commit that finds no coordinator for its session.timeout.ms (the data
    consumer uses it for nothing else): groupkit's, not librdkafka's 45 s
    (tests/test_stale_commits.py shows it on a broker)."""
    cfg = GroupConfig.from_dict({**BASE, "session.timeout.ms": 3000})
    assert cfg.data_consumer["session.timeout.ms"] == 3000 == cfg.session_timeout_ms
    assert GroupConfig.from_dict(BASE).data_consumer["session.timeout.ms"] == 10_000
    # A static member's session may be longer than librdkafka accepts of a consumer whose
    # max.poll.interval.ms is its default, 300 s: the handle must still be made.
    long = GroupConfig.from_dict({**BASE, "session.timeout.ms": 600_000,
                                  "max.poll.interval.ms": 900_000})  # fmt: skip
    assert long.session_timeout_ms == 600_000
    assert long.data_consumer["session.timeout.ms"] == 300_000
    Consumer(long.data_consumer).close()


def test_security_settings_reach_every_internal_client() -> None:
    secure = {
        **BASE,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "p",
        "ssl.ca.location": "/ca.pem",
        "fetch.min.bytes": 1,
    }
    cfg = GroupConfig.from_dict(secure)
    for key in (
        "security.protocol",
        "sasl.mechanism",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "bootstrap.servers",
    ):
        assert cfg.client_config()[key] == secure[key]
        assert cfg.data_consumer[key] == secure[key]
    assert "fetch.min.bytes" not in cfg.client_config()  # a data-consumer setting only
    assert cfg.client_config(**{"acks": "all"})["acks"] == "all"


def test_only_the_data_consumer_may_have_the_broker_create_topics() -> None:
    """Internal clients never ask the broker to create a topic they look up (librdkafka's
    producer-type handles would by default); the user's setting is the data consumer's."""
    for user in ({}, {"allow.auto.create.topics": True}):
        cfg = GroupConfig.from_dict({"bootstrap.servers": "b:9092", "group.id": "g", **user})
        for role in (None, "admin", "control-writer", "telemetry"):
            assert cfg.client_config(role)["allow.auto.create.topics"] is False
        assert cfg.data_consumer.get("allow.auto.create.topics") == user.get(
            "allow.auto.create.topics"
        )


def test_internal_clients_have_their_own_client_id() -> None:
    """Each internal client says what it is (a fault proxy cuts one by its client.id); the data
    consumer keeps the user's client.id."""
    cfg = GroupConfig.from_dict({**BASE, "client.id": "app"})
    assert cfg.client_config("control-writer")["client.id"] == "app.control-writer"
    assert cfg.client_config()["client.id"] == "app"
    assert cfg.data_consumer["client.id"] == "app"
    plain = GroupConfig.from_dict(BASE)
    assert plain.client_config("admin")["client.id"] == "groupkit.admin"
    assert "client.id" not in plain.client_config()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"groupkit.asignor": "range"}, "unknown groupkit setting"),
        ({"groupkit.rebalance.protocol": "fast"}, "must be one of eager, cooperative"),
        ({"session.timeout.ms": 1000, "heartbeat.interval.ms": 1000}, "must be lower"),
        ({"session.timeout.ms": "soon"}, "expected int"),
        ({"auto.offset.reset": "middle"}, "auto.offset.reset"),
        ({"groupkit.control.topic.partitions": 0}, ">= 1"),
    ],
)
def test_bad_settings_are_clear_errors(extra: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GroupConfig.from_dict({**BASE, **extra})


def test_unknown_assignor_lists_the_known_ones() -> None:
    with pytest.raises(UnknownAssignorError, match=r"known: .*range"):
        GroupConfig.from_dict({**BASE, "groupkit.assignor": "nope"})


@pytest.mark.parametrize("missing", ["group.id", "bootstrap.servers"])
def test_required(missing: str) -> None:
    conf = dict(BASE)
    del conf[missing]
    with pytest.raises(ConfigError, match=missing):
        GroupConfig.from_dict(conf)


def test_reset_aliases() -> None:
    assert GroupConfig.from_dict({**BASE, "auto.offset.reset": "smallest"}).lag_reset == (
        "earliest"
    )


def test_clock_skew_allowance_default_and_bounds() -> None:
    assert GroupConfig.from_dict(BASE).max_clock_skew_ms == 1_000  # 10 s session
    tuned = {**BASE, "session.timeout.ms": 1_000, "heartbeat.interval.ms": 100}
    assert GroupConfig.from_dict(tuned).max_clock_skew_ms == 200  # a fifth of the session
    assert GroupConfig.from_dict({**tuned, "groupkit.max.clock.skew.ms": 0}).max_clock_skew_ms == 0
    for bad in (-1, 500, 900):
        with pytest.raises(ConfigError, match=r"max\.clock\.skew"):
            GroupConfig.from_dict({**tuned, "groupkit.max.clock.skew.ms": bad})


def test_assignor_timeout_defaults_to_half_the_session_and_must_be_positive() -> None:
    base = {"bootstrap.servers": "x:1", "group.id": "g", "session.timeout.ms": 6000}
    assert GroupConfig.from_dict(base).assignor_timeout_ms == 3000
    cfg = GroupConfig.from_dict({**base, "groupkit.assignor.timeout.ms": 250})
    assert cfg.assignor_timeout_ms == 250
    with pytest.raises(ConfigError, match=r"groupkit\.assignor\.timeout\.ms"):
        GroupConfig.from_dict({**base, "groupkit.assignor.timeout.ms": 0})


def test_offsets_keepalive_defaults_to_a_day_and_zero_turns_it_off() -> None:
    """Unset, it is read from the broker's retention (runtime/retention.py); a day until then,
    and where the read fails. Set, it wins, whatever the retention."""
    base = {"bootstrap.servers": "x:1", "group.id": "g"}
    unset = GroupConfig.from_dict(base)
    assert unset.offsets_keepalive_ms == 86_400_000 and unset.offsets_keepalive_from_retention
    off = GroupConfig.from_dict({**base, "groupkit.offsets.keepalive.interval.ms": 0})
    assert off.offsets_keepalive_ms == 0 and not off.offsets_keepalive_from_retention
    day = GroupConfig.from_dict({**base, "groupkit.offsets.keepalive.interval.ms": "86400000"})
    assert day.offsets_keepalive_ms == 86_400_000 and not day.offsets_keepalive_from_retention
    with pytest.raises(ConfigError, match=r"groupkit\.offsets\.keepalive\.interval\.ms"):
        GroupConfig.from_dict({**base, "groupkit.offsets.keepalive.interval.ms": -1})


def test_a_missing_control_topic_is_waited_for_as_librdkafka_waits_for_a_new_topic() -> None:
    """``topic.metadata.propagation.max.ms`` bounds the wait for a control topic the metadata
    does not show yet (librdkafka's default, 30 s), and still reaches the data consumer."""
    assert GroupConfig.from_dict(BASE).topic_propagation_ms == 30_000
    cfg = GroupConfig.from_dict({**BASE, "topic.metadata.propagation.max.ms": "2000"})
    assert cfg.topic_propagation_ms == 2000
    assert cfg.data_consumer["topic.metadata.propagation.max.ms"] == "2000"
    assert (
        GroupConfig.from_dict({**BASE, "topic.metadata.propagation.max.ms": 0}).topic_propagation_ms
        == 0
    )
    with pytest.raises(ConfigError, match=r"topic\.metadata\.propagation\.max\.ms"):
        GroupConfig.from_dict({**BASE, "topic.metadata.propagation.max.ms": -1})
