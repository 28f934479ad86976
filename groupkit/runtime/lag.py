"""Per-partition lag of a group, as lag-aware assignors, the metrics and the telemetry need it.

:func:`read_offsets` is the one place that reads it (end, committed and, where needed, log
start offsets); the others call it.

Lag = end offset − committed offset. A partition with no committed offset lags by what a
consumer would read from where ``auto.offset.reset`` puts it: nothing for ``latest``, the
whole retained log (end − beginning) for ``earliest`` (KIP-169's rule).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from groupkit.errors import BrokerError
from groupkit.runtime.admin import GroupkitAdmin
from groupkit.types import TopicPartition

# confluent-kafka leaves these two factories unannotated.
_EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]


def end_offsets(
    admin: AdminClient,
    partitions: Iterable[TopicPartition],
    earliest: bool = False,
    timeout: float = 10.0,
) -> dict[TopicPartition, int]:
    """High watermarks (or log start offsets with ``earliest``) of ``partitions``."""
    spec = _EARLIEST if earliest else _LATEST
    request = {KTopicPartition(tp.topic, tp.partition): spec for tp in partitions}
    if not request:
        return {}
    out: dict[TopicPartition, int] = {}
    try:
        futures = admin.list_offsets(request, request_timeout=timeout)
        for ktp, fut in futures.items():
            out[TopicPartition(ktp.topic, ktp.partition)] = int(fut.result(timeout=timeout).offset)
    except KafkaException as e:
        raise BrokerError(f"could not list offsets: {e}") from e
    return out


def committed_offsets(
    admin: AdminClient, group_id: str, partitions: Iterable[TopicPartition], timeout: float = 10.0
) -> dict[TopicPartition, int | None]:
    """The group's committed offsets; ``None`` where nothing is committed.

    With a :class:`~groupkit.runtime.admin.GroupkitAdmin` (what ``GroupConsumer`` and
    ``describe_group`` use) the offsets are read by a short-lived consumer of the group that
    joins nothing, not by ``AdminClient.list_consumer_group_offsets``: librdkafka (2.16 and
    earlier, librdkafka#5040) crashes the whole process with SIGSEGV when an admin client's
    OffsetFetch is answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, as on a cluster whose
    group coordinator is not loaded yet or has just moved (a broker restart).
    """
    tps = [KTopicPartition(tp.topic, tp.partition) for tp in partitions]
    if not tps:
        return {}
    if isinstance(admin, GroupkitAdmin):
        return _committed_by_consumer(admin.settings, group_id, tps, timeout)
    try:
        futures = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id, tps)], request_timeout=timeout
        )
        result = futures[group_id].result(timeout=timeout)
    except KafkaException as e:
        raise BrokerError(f"could not read committed offsets of group {group_id!r}: {e}") from e
    out: dict[TopicPartition, int | None] = {}
    for ktp in result.topic_partitions:
        off = int(ktp.offset)
        out[TopicPartition(ktp.topic, ktp.partition)] = off if off >= 0 else None
    return out


def _committed_by_consumer(
    settings: dict[str, object], group_id: str, tps: list[KTopicPartition], timeout: float
) -> dict[TopicPartition, int | None]:
    conf = {k: v for k, v in settings.items() if k != "error_cb"}
    try:
        consumer = Consumer(
            {**conf, "group.id": group_id, "enable.auto.commit": False, "log_level": 0}
        )
    except KafkaException as e:
        raise BrokerError(f"could not read committed offsets of group {group_id!r}: {e}") from e
    try:
        result = consumer.committed(tps, timeout=timeout)
    except KafkaException as e:
        raise BrokerError(f"could not read committed offsets of group {group_id!r}: {e}") from e
    finally:
        consumer.close()
    out: dict[TopicPartition, int | None] = {}
    for ktp in result:
        if ktp.error is not None:
            raise BrokerError(
                f"could not read committed offsets of group {group_id!r}: {ktp.error}"
            )
        off = int(ktp.offset)
        out[TopicPartition(ktp.topic, ktp.partition)] = off if off >= 0 else None
    return out


def compute_lag(
    end: int, committed: int | None, beginning: int | None, auto_offset_reset: str
) -> int:
    """Lag of one partition; see the module docstring for the rule without a commit."""
    if committed is None:
        if auto_offset_reset == "latest":
            return 0
        return max(0, end - (beginning or 0))
    return max(0, end - committed)


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    """End and committed offsets of some partitions of a group, and the lag they make."""

    #: high watermarks
    end: Mapping[TopicPartition, int]
    #: the group's committed offsets; ``None`` where nothing is committed
    committed: Mapping[TopicPartition, int | None]
    #: :func:`compute_lag` of every partition asked (an end the broker did not give counts 0)
    lag: Mapping[TopicPartition, int]


def read_offsets(
    admin: AdminClient,
    group_id: str,
    partitions: Iterable[TopicPartition],
    auto_offset_reset: str = "latest",
    timeout: float = 10.0,
) -> GroupOffsets:
    """The one reader of a group's lag: end offsets, committed offsets and, for partitions
    without a commit when ``auto_offset_reset`` is not ``latest``, the log start offsets.

    Used by the lag-aware assignors (:func:`fetch_lags`), the metrics and the telemetry.
    Raises :class:`~groupkit.errors.BrokerError` when the brokers do not answer.
    """
    parts = sorted(set(partitions))
    ends = end_offsets(admin, parts, timeout=timeout)
    committed = committed_offsets(admin, group_id, parts, timeout=timeout)
    missing = [tp for tp in parts if committed.get(tp) is None]
    beginnings = (
        end_offsets(admin, missing, earliest=True, timeout=timeout)
        if missing and auto_offset_reset != "latest"
        else {}
    )
    lag = {
        tp: compute_lag(ends.get(tp, 0), committed.get(tp), beginnings.get(tp), auto_offset_reset)
        for tp in parts
    }
    return GroupOffsets(ends, {tp: committed.get(tp) for tp in parts}, lag)


def fetch_lags(
    admin: AdminClient,
    group_id: str,
    partitions: Iterable[TopicPartition],
    auto_offset_reset: str = "latest",
    timeout: float = 10.0,
) -> dict[TopicPartition, int]:
    """Lag of every partition in ``partitions`` for ``group_id``."""
    return dict(read_offsets(admin, group_id, partitions, auto_offset_reset, timeout).lag)
