"""Kafka's RangeAssignor: per topic, contiguous ranges over the members sorted by id."""

from __future__ import annotations

from collections.abc import Mapping

from groupkit.assignors.base import Assignor
from groupkit.types import MemberSubscription, TopicPartition


class RangeAssignor(Assignor):
    """Per topic, sorted members take contiguous ranges; the first ``P mod N`` take one more."""

    name = "range"

    def _assign(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],
        lags: dict[TopicPartition, int],
    ) -> Mapping[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in members}
        for topic, count in partitions_per_topic.items():
            consumers = [m for m, s in members.items() if topic in s.topics]
            if not consumers:
                continue
            per, extra = divmod(count, len(consumers))
            start = 0
            for i, m in enumerate(consumers):
                n = per + (1 if i < extra else 0)
                out[m].extend(TopicPartition(topic, p) for p in range(start, start + n))
                start += n
        return out
