"""Protocol version 2's settings: the version, the liveness topic and the lease interval."""

from __future__ import annotations

from typing import Any

import pytest

from groupkit.errors import ConfigError
from groupkit.runtime.config import GroupConfig

BASE: dict[str, Any] = {"bootstrap.servers": "localhost:9092", "group.id": "g"}


def test_version_2_by_default_and_the_liveness_topic_follows_the_control_topic() -> None:
    cfg = GroupConfig.from_dict(BASE)
    assert cfg.protocol_version == 2
    assert cfg.liveness_topic == "__groupkit.liveness"
    assert cfg.lease_interval_ms == cfg.session_timeout_ms // 3
    cfg = GroupConfig.from_dict({**BASE, "groupkit.control.topic": "ctl"})
    assert cfg.liveness_topic == "ctl.liveness"
    cfg = GroupConfig.from_dict({**BASE, "groupkit.protocol.version": "1"})
    assert cfg.protocol_version == 1


def test_named_liveness_topic_and_lease_interval() -> None:
    cfg = GroupConfig.from_dict({**BASE, "groupkit.liveness.topic": "alive",
                                 "session.timeout.ms": 9000,
                                 "groupkit.lease.interval.ms": 1500})  # fmt: skip
    assert (cfg.liveness_topic, cfg.lease_interval_ms) == ("alive", 1500)


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("groupkit.protocol.version", 3, r"groupkit\.protocol\.version must be 1 or 2"),
        ("groupkit.protocol.version", "two", r"groupkit\.protocol\.version: expected int"),
        ("groupkit.liveness.topic", "", r"groupkit\.liveness\.topic"),
        ("groupkit.liveness.topic", "__groupkit", r"other than the control topic"),
        ("groupkit.lease.interval.ms", 0, r"groupkit\.lease\.interval\.ms must be > 0"),
        ("groupkit.lease.interval.ms", 6000, r"at most half of session\.timeout\.ms"),
    ],
)
def test_bad_values_are_refused_by_name(setting: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        GroupConfig.from_dict({**BASE, "session.timeout.ms": 10_000, setting: value})
    assert isinstance(e.value, ValueError)


def test_the_process_lease_is_three_seconds_at_most_the_session_and_above_twice_the_skew() -> None:
    cfg = GroupConfig.from_dict(BASE)
    assert cfg.process_lease_ms == 3_000
    short = GroupConfig.from_dict({**BASE, "session.timeout.ms": 2_500})
    assert short.process_lease_ms == 2_500  # a lease longer than the seat means nothing
    wide = GroupConfig.from_dict({**BASE, "groupkit.max.clock.skew.ms": 1_500})
    assert wide.process_lease_ms == 4_500  # three allowances when the allowance is wider
    static_v2 = {**BASE, "group.instance.id": "pod-0", "groupkit.protocol.version": 2}
    with pytest.raises(ConfigError, match=r"groupkit\.process\.lease\.ms must be above twice"):
        GroupConfig.from_dict({**static_v2, "groupkit.process.lease.ms": 2_000,
                               "groupkit.max.clock.skew.ms": 1_000})  # fmt: skip
    # a dynamic member has no lease of its own: the setting is not in its way
    GroupConfig.from_dict({**BASE, "groupkit.process.lease.ms": 2_000,
                           "groupkit.max.clock.skew.ms": 1_000})  # fmt: skip
