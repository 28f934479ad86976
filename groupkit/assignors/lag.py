"""The lag-aware assignor of KIP-169 (and of kafka-lag-based-assignor), to the letter.

Each topic is assigned on its own:

1. Its partitions are taken in decreasing lag, ties by partition number.
2. Each goes to the subscribed member with the fewest partitions *of this topic*, ties by the
   least lag assigned to it *in this topic*, then by member id.

Counts per topic come first (KIP-169: so the group stays balanced when all lags are zero, and
does not drift once lag is consumed), lag second. Because every topic is balanced alone, one
member can still collect every topic's heaviest partition; ``balanced`` fixes that.

A partition missing from ``lags`` has lag 0. The runtime computes lags, including the
``auto.offset.reset`` rule for partitions without a committed offset (latest: 0; otherwise
end minus beginning offset).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from groupkit.assignors.base import Assignor
from groupkit.types import MemberSubscription, TopicPartition


class LagAssignor(Assignor):
    """KIP-169: per topic, heaviest partition first to the member with fewest, then least lag."""

    name = "lag"
    uses_lag = True

    def _assign(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],
        lags: dict[TopicPartition, int],
    ) -> Mapping[str, list[TopicPartition]]:
        ids = list(members)
        out: dict[str, list[TopicPartition]] = {m: [] for m in ids}
        for topic, count in partitions_per_topic.items():
            subs = [i for i, m in enumerate(ids) if topic in members[m].topics]
            if not subs:
                continue
            weights = [lags.get(TopicPartition(topic, p), 0) for p in range(count)]
            order = sorted(range(count), key=lambda p: (-weights[p], p))
            # (partitions of this topic, lag in this topic, member index): the tie rules.
            heap = [(0, 0, i) for i in subs]
            for p in order:
                n, lag, i = heap[0]
                out[ids[i]].append(TopicPartition(topic, p))
                heapq.heapreplace(heap, (n + 1, lag + weights[p], i))
        return out
