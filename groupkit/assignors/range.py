"""Kafka's RangeAssignor: per topic, contiguous ranges over the members sorted by id.

**Racks** (KIP-881), as Kafka's RangeAssignor takes them. Per topic every member may take
``P // N`` partitions, and the first ``P mod N`` members to reach that one more, so the counts
per topic are those of the plain ranges. Steps:

1. **Rack pass.** Topics with the same subscribers and the same number of partitions are
   co-partitioned: partition ``i`` of all of them goes to the first member (by id) with room
   that is local to partition ``i`` of every one of them, so joins by partition still meet in
   one member. Any other topic: each member, by id, takes the lowest partitions local to it,
   up to its room. A member without a rack counts as local everywhere, as in Kafka.
2. **Fill.** What is left goes in ranges, members by id, each up to its room.

The rack pass runs only where racks can matter (Kafka's rule): some subscriber of the topic
has a rack that holds replicas, and not every partition has replicas in the same racks. A plan
with fewer rack-local partitions than the plain ranges is not used: the plain ranges are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from groupkit.assignors._racks import local_count
from groupkit.assignors.base import Assignor, ReplicaRacks
from groupkit.types import MemberSubscription, TopicPartition


class RangeAssignor(Assignor):
    """Per topic, sorted members take contiguous ranges; the first ``P mod N`` take one more."""

    name = "range"
    uses_racks = True

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

    def _assign_racks(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],
        lags: dict[TopicPartition, int],
        racks: ReplicaRacks,
    ) -> Mapping[str, list[TopicPartition]]:
        plain = self._assign(partitions_per_topic, members, lags)
        states = [
            _Topic(t, n, [m for m, s in members.items() if t in s.topics], members, racks)
            for t, n in partitions_per_topic.items()
        ]
        states = [s for s in states if s.consumers]
        if not any(s.rack_aware for s in states):
            return plain
        out: dict[str, list[TopicPartition]] = {m: [] for m in members}
        groups: dict[tuple[tuple[str, ...], int], list[_Topic]] = {}
        for s in states:
            groups.setdefault((tuple(s.consumers), s.count), []).append(s)
        for (consumers, count), group in groups.items():
            if len(group) > 1:
                _co_partitioned(list(consumers), count, group, out)
            elif group[0].rack_aware:
                _ranges(group[0], group[0].local, out)
        for s in states:
            _ranges(s, lambda c, p: True, out)
        if local_count(out, members, racks) < local_count(plain, members, racks):
            return plain
        return out


class _Topic:
    """One topic's assignment in progress: who may take how many more, what is left."""

    def __init__(
        self,
        topic: str,
        count: int,
        consumers: list[str],
        members: Mapping[str, MemberSubscription],
        racks: ReplicaRacks,
    ) -> None:
        self.topic = topic
        self.count = count
        self.consumers = consumers
        self.rack = {m: members[m].rack or None for m in consumers}
        self.replicas = racks.get(topic, [frozenset()] * count)
        self.left = list(range(count))
        self.taken = dict.fromkeys(consumers, 0)
        self.per, self.extra = divmod(count, len(consumers)) if consumers else (0, 0)
        member_racks = {r for r in self.rack.values() if r is not None}
        partition_racks = set().union(*self.replicas) if self.replicas else set()
        self.rack_aware = bool(member_racks & partition_racks) and any(
            s != partition_racks for s in self.replicas
        )

    def local(self, consumer: str, p: int) -> bool:
        r = self.rack[consumer]
        return r is None or r in self.replicas[p]

    def room(self, consumer: str) -> int:
        return max(0, self.per + (1 if self.extra > 0 else 0) - self.taken[consumer])

    def take(self, consumer: str, ps: list[int], out: dict[str, list[TopicPartition]]) -> None:
        out[consumer].extend(TopicPartition(self.topic, p) for p in ps)
        self.taken[consumer] += len(ps)
        if self.taken[consumer] > self.per:
            self.extra -= 1
        gone = set(ps)
        self.left = [p for p in self.left if p not in gone]


def _ranges(
    state: _Topic, may: Callable[[str, int], bool], out: dict[str, list[TopicPartition]]
) -> None:
    """Each member by id takes the lowest partitions left that ``may`` allows, up to its room."""
    for c in state.consumers:
        if not state.left:
            return
        room = state.room(c)
        ps = [p for p in state.left if may(c, p)][:room]
        if ps:
            state.take(c, ps, out)


def _co_partitioned(
    consumers: list[str], count: int, group: list[_Topic], out: dict[str, list[TopicPartition]]
) -> None:
    """Partition ``i`` of every topic of ``group`` to the first member local to all of them."""
    remaining = list(consumers)
    for p in range(count):
        for c in remaining:
            if all(s.local(c, p) and s.room(c) > 0 for s in group):
                for s in group:
                    s.take(c, [p], out)
                if not any(s.room(c) > 0 for s in group):
                    remaining.remove(c)
                break
        if not remaining:
            return
