"""The compacted control topic (and protocol version 2's liveness topic): created if missing,
checked if present, one partition a group.

A group's records all go to one partition, chosen by a stable hash of the group id, so they have
one total order, and every member replays the same sequence.

A topic that is present is refused if its settings break the protocol (:data:`REQUIRED_CONFIG`),
and a warning names each setting that keeps its log large (:func:`large_log_settings`): a topic
an operator pre-created with the broker's defaults works, but every join replays days of
heartbeats instead of minutes.
"""

from __future__ import annotations

import time
import zlib
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

from groupkit.errors import BrokerError, ControlTopicError
from groupkit.log import get_logger
from groupkit.runtime.admin import appeared_topic, create_topic, wait_for_topic
from groupkit.runtime.config import TOPIC_PROPAGATION_MS

#: What the control topic must be: compaction keeps each member's and group's latest record,
#: and the broker's clock stamps every record, so log time is a fact all members agree on.
REQUIRED_CONFIG = {
    "cleanup.policy": "compact",
    "message.timestamp.type": "LogAppendTime",
}

#: Settings that make compaction actually run on a live group's log within minutes, not weeks:
#: small segments roll, and a little dirt is enough for the cleaner to act. A member that starts
#: replays the whole log, and a live group writes a heartbeat per member per interval: a segment
#: rolled every 5 minutes bounds that replay at any age of the group (1 h held up to 36,000
#: records of 10 members at 1 s heartbeats). Readers of a compacted log agree with readers of the
#: whole log at any cleaning point (state.py; tests/test_protocol_compaction.py).
TUNING_CONFIG = {
    "segment.ms": str(5 * 60 * 1000),
    "segment.bytes": str(16 * 1024 * 1024),
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": str(24 * 60 * 60 * 1000),
}

#: How long :func:`ensure_control_topic` waits for a control topic the metadata does not show
#: yet, by default (why: :data:`groupkit.runtime.config.TOPIC_PROPAGATION_MS`)
PROPAGATION_TIMEOUT_S = TOPIC_PROPAGATION_MS / 1000

_log = get_logger("groupkit.runtime")


class LargeLogSetting(NamedTuple):
    """A setting of the control topic that keeps its log (and so every join's replay) large."""

    setting: str
    value: str
    groupkit_value: str
    effect: str


def _num(configs: dict[str, Any], key: str) -> float | None:
    entry = configs.get(key)
    value = entry.value if entry is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def large_log_settings(
    configs: dict[str, Any], session_timeout_ms: int | None = None
) -> list[LargeLogSetting]:
    """The settings among ``configs`` (``describe_configs`` entries) that keep the log large.

    The active segment is never cleaned, so a newcomer replays all of it: ``segment.ms``
    bounds that replay. The cleaner waits for ``min.cleanable.dirty.ratio`` of the log to be
    superseded and leaves records younger than ``min.compaction.lag.ms`` alone. The first two
    are flagged above twice groupkit's own (:data:`TUNING_CONFIG`), so a topic tuned near them
    is left in peace, the third above groupkit's ``segment.ms``.
    ``delete.retention.ms`` below the session timeout does not keep the log large but breaks
    what compaction promises: a tombstone must outlive a session (protocol/state.py).
    """
    out: list[LargeLogSetting] = []

    def check(key: str, ours: float, limit: float, effect: str, below: bool = False) -> None:
        have = _num(configs, key)
        if have is not None and (have < limit if below else have > limit):
            value = configs[key].value
            want = TUNING_CONFIG.get(key, f"{ours:g}")
            out.append(LargeLogSetting(key, str(value), str(want), effect))

    segment_ms = float(TUNING_CONFIG["segment.ms"])
    check("segment.ms", segment_ms, 2 * segment_ms,
          "the active segment is never compacted: a join replays up to this much of every "
          "heartbeat on the partition")  # fmt: skip
    ratio = float(TUNING_CONFIG["min.cleanable.dirty.ratio"])
    check("min.cleanable.dirty.ratio", ratio, 2 * ratio,
          "the cleaner waits until this share of the log is superseded heartbeats")  # fmt: skip
    check("min.compaction.lag.ms", 0, segment_ms,
          "records younger than this are never compacted: a join replays them all")  # fmt: skip
    if session_timeout_ms is not None:
        check("delete.retention.ms", float(TUNING_CONFIG["delete.retention.ms"]),
              session_timeout_ms, "a tombstone must outlive a session, or a reader starting "
              "after the cleaner removed it misses the hold it started", below=True)  # fmt: skip
    return out


def partition_for_group(group_id: str, partitions: int) -> int:
    """The control partition of ``group_id``: stable across processes, versions and hosts."""
    return zlib.crc32(group_id.encode("utf-8")) % partitions


def ensure_control_topic(
    admin: AdminClient,
    name: str,
    partitions: int = 1,
    replication_factor: int = -1,
    create: bool = True,
    timeout: float = 30.0,
    session_timeout_ms: int | None = None,
    propagation_timeout: float = PROPAGATION_TIMEOUT_S,
) -> int:
    """Create the control topic if missing, or check its settings; return its partition count.

    Without ``create``, a topic the metadata does not show is waited for, up to
    ``propagation_timeout`` seconds (:data:`PROPAGATION_TIMEOUT_S`), before it is a
    ``ControlTopicError``: it may have been created a moment ago. An existing topic with the
    wrong ``cleanup.policy`` or ``message.timestamp.type`` is a ``ControlTopicError`` naming
    the setting: replaying a deleted or producer-stamped log would silently break the group's
    agreement on membership and time. Settings that only keep the log large are logged as
    warnings (:func:`check_control_topic`).
    """
    _find_or_create(admin, name, "control topic", {**REQUIRED_CONFIG, **TUNING_CONFIG},
                    partitions, replication_factor, create, timeout,
                    propagation_timeout)  # fmt: skip
    check_control_topic(admin, name, timeout, session_timeout_ms)
    return _partition_count(admin, name, timeout)


def _find_or_create(
    admin: AdminClient,
    name: str,
    what: str,
    config: dict[str, str],
    partitions: int,
    replication_factor: int,
    create: bool,
    timeout: float,
    propagation_timeout: float,
) -> None:
    """One of groupkit's topics, ``what`` it is for: created with ``config`` if missing
    (``create``), else waited for within ``propagation_timeout`` (it may have been created a
    moment ago); returns once a partition of it has a leader."""
    try:
        md = admin.list_topics(topic=name, timeout=timeout)
    except KafkaException as e:
        raise BrokerError(f"cannot reach the cluster to look up {name!r}: {e}") from e
    topic = md.topics.get(name)
    if topic is None or topic.error is not None:
        if not create:
            bound = min(propagation_timeout, timeout)
            if appeared_topic(admin, name, bound) is None:
                raise ControlTopicError(
                    f"{what} {name!r} does not exist and groupkit.control.topic.create "
                    f"is false (not in the cluster's metadata within {bound:g}s, "
                    "topic.metadata.propagation.max.ms)"
                )
        else:
            create_topic(
                admin,
                name,
                partitions,
                replication_factor,
                config=config,
                timeout=timeout,
                exist_ok=True,  # another member may create it at the same moment
            )
    # (one partition with a leader: the rest are counted by _partition_count, whichever
    # broker answers)
    wait_for_topic(admin, name, 1, timeout)


def _partition_count(admin: AdminClient, name: str, timeout: float) -> int:
    """How many partitions ``name`` has, once a broker's answer knows any.

    A topic that was just created (by us, or by another member this moment) can be listed
    before its partitions by a broker that has not heard of them yet, and in a cluster the
    next answer may come from another broker: so one answer after a wait is not enough (none
    yet made partition_for_group divide by zero, twice, in cluster tests)."""
    deadline = time.monotonic() + timeout
    while True:
        wait = max(0.5, min(5.0, deadline - time.monotonic()))
        try:
            t = admin.list_topics(topic=name, timeout=wait).topics.get(name)
        except KafkaException:  # one request timed out, a broker restarting: ask again
            t = None
        if t is not None and t.error is None and t.partitions:
            return len(t.partitions)
        if time.monotonic() >= deadline:
            raise BrokerError(f"control topic {name!r} has no partitions after {timeout:.0f}s")
        time.sleep(0.05)  # metadata refresh is a request per call; no event to wait on


def _describe(admin: AdminClient, name: str, timeout: float, what: str) -> dict[str, Any]:
    """The topic's settings (``describe_configs`` entries)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    deadline = time.monotonic() + timeout
    while True:
        try:
            configs: dict[str, Any] = admin.describe_configs([resource])[resource].result(
                timeout=max(0.5, deadline - time.monotonic())
            )
            return configs
        except KafkaException as e:
            # On a cluster, the broker asked may not know yet of a topic that another member
            # just created through another broker, or may be restarting: ask again, until
            # the deadline.
            err = e.args[0] if e.args else None
            again = isinstance(err, KafkaError) and (
                err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART or err.retriable()
            )
            if not again or time.monotonic() >= deadline:
                raise BrokerError(f"cannot read the settings of {what} {name!r}: {e}") from e
            time.sleep(0.1)  # metadata reaches every broker within moments; nothing to wait on


def check_control_topic(
    admin: AdminClient, name: str, timeout: float = 30.0, session_timeout_ms: int | None = None
) -> list[LargeLogSetting]:
    """Refuse settings that break the protocol; warn of, and return, those that keep the log
    large (one ``control_topic.large_log_setting`` warning each)."""
    configs = _describe(admin, name, timeout, "control topic")
    for key, want in REQUIRED_CONFIG.items():
        entry = configs.get(key)
        have = entry.value if entry is not None else None
        ok = have is not None and (
            want in have.split(",") if key == "cleanup.policy" else have == want
        )
        if not ok:
            raise ControlTopicError(
                f"control topic {name!r} has {key}={have}, groupkit needs {key}={want}; "
                f"alter the topic or choose another with groupkit.control.topic"
            )
    found = large_log_settings(configs, session_timeout_ms)
    for f in found:
        _log.warning("control_topic.large_log_setting", topic=name, setting=f.setting,
                     value=f.value, groupkit_value=f.groupkit_value, effect=f.effect)  # fmt: skip
    return found


# ---------------------------------------------------------------------- protocol version 2

#: What the liveness topic must be (docs/protocol-v2.md, "Logs"): the broker's clock stamps
#: every heartbeat, and the writer learns that stamp from its delivery report, so a member and
#: its judge agree on when each heartbeat landed.
LIVENESS_REQUIRED_CONFIG = {"message.timestamp.type": "LogAppendTime"}

#: The least retention that keeps a judge's start (the newest lease's ``live_offset``, written
#: every lease interval) and the newest snapshot in the log, with a wide margin.
LIVENESS_MIN_RETENTION_MS = 60 * 60 * 1000

#: How groupkit creates it: deleted by time, not compacted (a judge replays heartbeats in
#: order, and only the recent ones matter), in small segments so that retention acts.
LIVENESS_CONFIG = {
    "cleanup.policy": "delete",
    **LIVENESS_REQUIRED_CONFIG,
    "retention.ms": str(LIVENESS_MIN_RETENTION_MS),
    "segment.ms": str(10 * 60 * 1000),
    "segment.bytes": str(16 * 1024 * 1024),
}


def ensure_liveness_topic(
    admin: AdminClient,
    name: str,
    partitions: int = 1,
    replication_factor: int = -1,
    create: bool = True,
    timeout: float = 30.0,
    propagation_timeout: float = PROPAGATION_TIMEOUT_S,
) -> int:
    """Protocol version 2's liveness topic, as :func:`ensure_control_topic` does the control
    topic: created if missing (``create``; :data:`LIVENESS_CONFIG`), else waited for within
    ``propagation_timeout`` when the metadata does not show it yet, then checked
    (:func:`check_liveness_topic`). Its partition count."""
    _find_or_create(admin, name, "liveness topic", LIVENESS_CONFIG, partitions,
                    replication_factor, create, timeout, propagation_timeout)  # fmt: skip
    check_liveness_topic(admin, name, timeout)
    return _partition_count(admin, name, timeout)


def check_liveness_topic(admin: AdminClient, name: str, timeout: float = 30.0) -> None:
    """Refuse a liveness topic whose records the producer stamps (a member could not trust its
    delivery report's time); warn of a retention under :data:`LIVENESS_MIN_RETENTION_MS`."""
    configs = _describe(admin, name, timeout, "liveness topic")
    for key, want in LIVENESS_REQUIRED_CONFIG.items():
        entry = configs.get(key)
        have = entry.value if entry is not None else None
        if have != want:
            raise ControlTopicError(
                f"liveness topic {name!r} has {key}={have}, groupkit needs {key}={want}; "
                f"alter the topic or choose another with groupkit.liveness.topic"
            )
    retention = _num(configs, "retention.ms")
    if retention is not None and 0 <= retention < LIVENESS_MIN_RETENTION_MS:
        _log.warning("liveness_topic.short_retention", topic=name, retention_ms=int(retention),
                     groupkit_value=LIVENESS_MIN_RETENTION_MS,
                     effect="a judge may find its start offset deleted")  # fmt: skip
