"""Kafka's RoundRobinAssignor.

All partitions of all subscribed topics, sorted by (topic, partition), are dealt one at a time
to the members sorted by id, in a circle. A member not subscribed to a partition's topic is
skipped, and the circle carries on from the member after the one that took it. With unequal
subscriptions this can be badly skewed (see KIP-49); ``fair`` and ``sticky`` fix that.
"""

from __future__ import annotations

from collections.abc import Mapping

from groupkit.assignors.base import Assignor
from groupkit.types import MemberSubscription, TopicPartition


class RoundRobinAssignor(Assignor):
    """Deal sorted partitions circularly over sorted members, skipping the unsubscribed."""

    name = "roundrobin"

    def _assign(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],
        lags: dict[TopicPartition, int],
    ) -> Mapping[str, list[TopicPartition]]:
        ids = list(members)
        out: dict[str, list[TopicPartition]] = {m: [] for m in ids}
        if not ids:
            return out
        subscribed = [frozenset(members[m].topics) for m in ids]
        at = 0  # the member the circle points at
        for topic, count in partitions_per_topic.items():
            takers = [i for i, ts in enumerate(subscribed) if topic in ts]
            if not takers:
                continue
            if len(takers) == len(ids):
                # Everyone takes it: the circle needs no skipping, deal by arithmetic.
                for k in range(len(ids)):
                    m = ids[(at + k) % len(ids)]
                    out[m].extend(TopicPartition(topic, p) for p in range(k, count, len(ids)))
                at = (at + count) % len(ids)
                continue
            for p in range(count):
                while topic not in subscribed[at]:
                    at = (at + 1) % len(ids)
                out[ids[at]].append(TopicPartition(topic, p))
                at = (at + 1) % len(ids)
        return out
