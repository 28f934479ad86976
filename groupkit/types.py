"""Value types shared by every layer of groupkit.

They are plain immutable values: no Kafka client types leak into the pure layers, and a
``TopicPartition`` compares equal to the plain ``(topic, partition)`` tuple.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic. A ``NamedTuple``, so ``("t", 0) == TopicPartition("t", 0)``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class MemberSubscription:
    """What a member asks of an assignor: its topics and what it owns now.

    ``owned`` are the partitions the member claims to own, from ``generation`` (``None`` when
    unknown: such claims lose to any claim with a generation). ``capacity`` is an optional rate
    (records/s) used by lag-aware assignors to balance time-to-drain instead of raw lag.
    """

    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...] = ()
    generation: int | None = None
    rack: str | None = None
    capacity: float | None = None

    def __init__(
        self,
        topics: Iterable[str],
        owned: Iterable[tuple[str, int]] = (),
        generation: int | None = None,
        rack: str | None = None,
        capacity: float | None = None,
    ) -> None:
        object.__setattr__(self, "topics", tuple(sorted(set(topics))))
        object.__setattr__(
            self, "owned", tuple(sorted({TopicPartition(t, int(p)) for t, p in owned}))
        )
        object.__setattr__(self, "generation", generation)
        object.__setattr__(self, "rack", rack)
        object.__setattr__(self, "capacity", capacity)


@dataclass(frozen=True, slots=True)
class PartitionLoad:
    """What the leader measures of one partition, for re-plans for the load (runtime/load.py;
    ``Assignor.replan``)."""

    #: records not yet committed by the group
    lag: int
    #: records appended per second
    produce_rate: float
    #: records committed per second by its owner; ``None``: not measured (yet)
    consume_rate: float | None = None


Assignment = dict[str, list[TopicPartition]]
"""``{member_id: sorted partitions}``, every member present."""
