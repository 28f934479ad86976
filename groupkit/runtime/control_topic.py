"""The compacted control topic: created if missing, checked if present, one partition a group.

A group's records all go to one partition, chosen by a stable hash of the group id, so they have
one total order, and every member replays the same sequence.
"""

from __future__ import annotations

import zlib

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

from groupkit.errors import BrokerError, ControlTopicError
from groupkit.runtime.admin import create_topic, wait_for_topic

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
) -> int:
    """Create the control topic if missing, or check its settings; return its partition count.

    An existing topic with the wrong ``cleanup.policy`` or ``message.timestamp.type`` is a
    ``ControlTopicError`` naming the setting: replaying a deleted or producer-stamped log would
    silently break the group's agreement on membership and time.
    """
    try:
        md = admin.list_topics(topic=name, timeout=timeout)
    except KafkaException as e:
        raise BrokerError(f"cannot reach the cluster to look up {name!r}: {e}") from e
    topic = md.topics.get(name)
    if topic is None or topic.error is not None:
        if not create:
            raise ControlTopicError(
                f"control topic {name!r} does not exist and groupkit.control.topic.create is false"
            )
        create_topic(
            admin,
            name,
            partitions,
            replication_factor,
            config={**REQUIRED_CONFIG, **TUNING_CONFIG},
            timeout=timeout,
            exist_ok=True,  # another member may create it at the same moment
        )
        md = admin.list_topics(topic=name, timeout=timeout)
        topic = md.topics[name]
    else:
        wait_for_topic(admin, name, 1, timeout)
    check_control_topic(admin, name, timeout)
    return len(topic.partitions)


def check_control_topic(admin: AdminClient, name: str, timeout: float = 30.0) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    try:
        configs = admin.describe_configs([resource])[resource].result(timeout=timeout)
    except KafkaException as e:
        raise BrokerError(f"cannot read the settings of control topic {name!r}: {e}") from e
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
