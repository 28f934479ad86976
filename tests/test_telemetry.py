"""The telemetry schema: round trips, typed rejections, and the leader's rate approximation.

Publishing on a real broker is tested end to end in ``test_pipeline_kafka.py``.
"""

from __future__ import annotations

import json

import pytest

from groupkit.errors import MalformedTelemetry
from groupkit.lagstatus import PartitionStatus
from groupkit.protocol.node import RebalanceSummary
from groupkit.runtime.telemetry import (
    SCHEMA_VERSION,
    LagSnapshot,
    MemberInfo,
    RebalanceEvent,
    TopicOffsets,
    decode,
    member_processed,
    member_rates,
)
from groupkit.types import TopicPartition as TP


def snapshot() -> LagSnapshot:
    return LagSnapshot(
        group="g",
        ts_ms=123,
        leader="a",
        generation=3,
        protocol="cooperative",
        assignor="sticky",
        members={
            "a": MemberInfo(("t0",), 12.5, None, "r1", processed=25),
            "b": MemberInfo(("t0", "t1"), None, 400.0, None),
        },
        topics={
            "t0": TopicOffsets(
                (10, 20),
                (5, None),
                (5, 0),
                ("a", "b"),
                (4.25, 0.0),
                (PartitionStatus.WARN, PartitionStatus.OK),
            ),
            # as a record written before time lag and status existed
            "t1": TopicOffsets((7,), (7,), (0,), (None,)),
            "t2": TopicOffsets((0,), (None,), (0,), ("b",), (None,)),
        },
        interval_ms=2000,
        load_interval_ms=0,
    )


def test_round_trips() -> None:
    s = snapshot()
    assert decode(s.to_json()) == s
    doc = json.loads(s.to_json())
    assert doc["schema"] == "groupkit.telemetry" and doc["version"] == SCHEMA_VERSION
    assert doc["type"] == "lag_snapshot"
    assert s.lags() == {TP("t0", 0): 5, TP("t0", 1): 0, TP("t1", 0): 0, TP("t2", 0): 0}
    assert s.owners() == {TP("t0", 0): "a", TP("t0", 1): "b", TP("t2", 0): "b"}
    # time lag is optional: absent from a topic written without it, null where unknown
    assert s.time_lags() == {TP("t0", 0): 4.25, TP("t0", 1): 0.0, TP("t2", 0): None}
    assert "time_lag" not in doc["topics"]["t1"]
    # so is the status, written as Burrow's word
    assert doc["topics"]["t0"]["status"] == ["WARN", "OK"]
    assert s.statuses() == {TP("t0", 0): PartitionStatus.WARN, TP("t0", 1): PartitionStatus.OK}
    assert "status" not in doc["topics"]["t1"] and "status" not in doc["topics"]["t2"]
    summary = RebalanceSummary(
        "g", "a", "membership_changed", "eager", "range", 4, 5, 2, 3, 6, 0.0421, "completed"
    )
    e = RebalanceEvent.from_summary(summary, 999)
    assert e.duration_ms == pytest.approx(42.1)
    assert decode(e.to_json()) == e
    assert decode(e.to_json().decode()) == e  # str or bytes


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "empty"),
        (b"", "empty"),
        (b"\xff\xfe", "not_json"),
        (b"[1, 2]", "not_telemetry"),
        (b'{"schema": "other"}', "not_telemetry"),
        (
            b'{"schema": "groupkit.telemetry", "version": 3, "group": "g", "ts_ms": 1}',
            "future_version",
        ),
        (
            b'{"schema": "groupkit.telemetry", "version": true, "group": "g", "ts_ms": 1}',
            "bad_field",
        ),
        (
            b'{"schema": "groupkit.telemetry", "version": 1, "type": "x", "group": "g",'
            b' "ts_ms": 1}',
            "unknown_type",
        ),
    ],
)
def test_rejections_are_typed(raw: bytes | None, reason: str) -> None:
    with pytest.raises(MalformedTelemetry) as e:
        decode(raw)
    assert e.value.reason == reason


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        (("topics", "t0", "lag"), [5], "inconsistent"),
        (("topics", "t0", "time_lag"), [1.5], "inconsistent"),
        (("topics", "t0", "time_lag"), [1.5, -2], "bad_field"),
        (("topics", "t0", "time_lag"), [1.5, "x"], "bad_field"),
        (("topics", "t0", "time_lag"), 1.5, "bad_field"),
        (("topics", "t0", "status"), ["OK"], "inconsistent"),
        (("topics", "t0", "status"), ["OK", "ERR"], "bad_field"),
        (("topics", "t0", "status"), "OK", "bad_field"),
        (("topics", "t0", "owner"), ["a", "zed"], "inconsistent"),
        (("topics", "t0", "end"), [10, -1], "bad_field"),
        (("topics", "t0", "committed"), [5, "x"], "bad_field"),
        (("members", "a", "rate"), -3, "bad_field"),
        (("members", "a", "topics"), "t0", "bad_field"),
        (("generation",), None, "bad_field"),
    ],
)
def test_broken_snapshots_are_rejected(path: tuple[str, ...], value: object, reason: str) -> None:
    doc = json.loads(snapshot().to_json())
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    with pytest.raises(MalformedTelemetry) as e:
        decode(json.dumps(doc))
    assert e.value.reason == reason


def test_member_rates_from_committed_deltas() -> None:
    prev = {
        TP("t", 0): ("a", 100),
        TP("t", 1): ("a", 0),
        TP("t", 2): ("b", 50),
        TP("t", 3): (None, 0),
    }
    cur = {
        TP("t", 0): ("a", 300),
        TP("t", 1): ("a", None),
        TP("t", 2): ("c", 90),
        TP("t", 3): ("b", 10),
    }
    # a: only partition 0 counts (1 has no commit now); 2 and 3 changed hands.
    assert member_rates(prev, cur, 2.0) == {"a": 100.0}
    assert member_rates(prev, cur, 0) == {}
    # A committed offset going back (a reset) is not negative throughput.
    assert member_rates({TP("t", 0): ("a", 10)}, {TP("t", 0): ("a", 5)}, 1.0) == {"a": 0.0}
    # the records behind the rates, counted exactly
    assert member_processed(prev, cur) == {"a": 200}


def test_version_1_snapshots_still_decode() -> None:
    """A version 1 record has no processed counts, interval or load interval: ``None``."""
    doc = json.loads(snapshot().to_json())
    doc["version"] = 1
    for k in ("interval_ms", "load_interval_ms"):
        del doc[k]
    for m in doc["members"].values():
        del m["processed"]
    s = decode(json.dumps(doc))
    assert isinstance(s, LagSnapshot) and s.version == 1
    assert s.interval_ms is None and s.load_interval_ms is None
    assert all(i.processed is None for i in s.members.values())
    assert s.members["a"].rate == 12.5


@pytest.mark.parametrize(
    ("path", "value"),
    [(("interval_ms",), -1), (("load_interval_ms",), 1.5), (("members", "a", "processed"), "x")],
)
def test_version_2_fields_are_checked(path: tuple[str, ...], value: object) -> None:
    doc = json.loads(snapshot().to_json())
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    with pytest.raises(MalformedTelemetry) as e:
        decode(json.dumps(doc))
    assert e.value.reason == "bad_field"
