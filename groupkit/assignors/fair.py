"""The fair assignor of KIP-49, for groups whose members subscribe to different topics.

1. Topics are taken in order of fewest subscribed members, then most partitions, then name:
   the most constrained partitions are placed while the most choice is left.
2. Each partition, in partition order, goes to the subscribed member with the fewest
   partitions so far (over all topics), ties by member id.

Not sticky: it ignores what members own.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from groupkit.assignors.base import Assignor
from groupkit.types import MemberSubscription, TopicPartition


class FairAssignor(Assignor):
    """KIP-49: most constrained topics first, each partition to the least loaded member."""

    name = "fair"

    def _assign(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],
        lags: dict[TopicPartition, int],
    ) -> Mapping[str, list[TopicPartition]]:
        ids = list(members)
        out: dict[str, list[TopicPartition]] = {m: [] for m in ids}
        subscribers: dict[str, list[int]] = {t: [] for t in partitions_per_topic}
        for i, m in enumerate(ids):
            for t in members[m].topics:
                if t in subscribers:
                    subscribers[t].append(i)
        order = sorted(
            (t for t in partitions_per_topic if subscribers[t]),
            key=lambda t: (len(subscribers[t]), -partitions_per_topic[t], t),
        )
        count = [0] * len(ids)
        for t in order:
            # A heap of (count, index) over this topic's subscribers; counts change only by
            # what this topic adds while it is being placed, so the heap stays exact.
            heap = [(count[i], i) for i in subscribers[t]]
            heapq.heapify(heap)
            for p in range(partitions_per_topic[t]):
                c, i = heap[0]
                out[ids[i]].append(TopicPartition(t, p))
                count[i] = c + 1
                heapq.heapreplace(heap, (c + 1, i))
        return out
