"""``balanced``: count balance first, then the smallest largest member lag, and sticky.

Goals, in order:

1. **Counts** are balanced exactly as ``sticky`` balances them (KIP-169 keeps counts first, and
   so do we: an assignment that is only lag-balanced drifts once the lag is consumed).
2. **Largest total lag** of any member, summed over *all* its topics, is as small as we can
   make it. KIP-169 balances each topic alone, so one member can collect the heaviest partition
   of every topic; here all topics share one budget.
3. **Sticky.** A partition stays with its owner unless moving it lowers the group's largest
   member lag by more than ``tolerance`` (5 % by default), so lag noise does not reshuffle.
4. **Unequal subscriptions** are handled by the same machinery as ``sticky`` (most constrained
   first, chain balancing); every lag step below respects who may take what.
5. **Capacity.** With ``MemberSubscription.capacity`` (records/s) a member's load is
   ``lag / capacity``, its time to drain, and that is what gets balanced. Members without a
   capacity, in a group where some have one, count as the mean of the given capacities.

How:

1. ``S``: the sticky plan (count-balanced, keeps the most owned partitions).
2. Two fresh candidates that ignore ownership: ``L``, longest-processing-time first (heaviest
   partition to the least loaded member that still has room under ``S``'s counts), and ``K``,
   KIP-169's own answer when its counts happen to be as balanced as ``S``'s.
3. A local search improves each: while the most loaded member ``H`` can hand a partition to a
   member with one partition fewer, or swap one for a lighter one, so that both end below
   ``H``'s load, do the best such step. Counts stay balanced (a hand-over between counts
   ``c`` and ``c - 1`` only swaps them). Each step strictly lowers the sorted vector of loads,
   so it ends.
4. ``best`` = the lowest largest load of the three results. If ``S`` is already within
   ``tolerance`` of ``best``, return ``S``: no partition moves for lag. (When nothing is owned
   the tolerance is zero: there is no placement to protect.) Otherwise return the
   shortest prefix of ``S``'s local search that gets within tolerance, and only if ``S``'s
   search cannot, the fresh candidate within tolerance that moves the fewest partitions.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence

from groupkit.assignors._balance import balance_counts
from groupkit.assignors.base import Assignor
from groupkit.assignors.lag import LagAssignor
from groupkit.assignors.sticky import gc_paused, prepare, sticky_plan
from groupkit.errors import ConfigError
from groupkit.types import MemberSubscription, TopicPartition

#: members compared per step before the search widens to all (the least loaded come first)
_NEAREST = 8


class BalancedAssignor(Assignor):
    """Count-balanced, then lowest largest member lag across all topics, sticky within 5 %."""

    name = "balanced"
    uses_lag = True

    def __init__(self, tolerance: float = 0.05) -> None:
        if not 0 <= tolerance < 1:
            raise ConfigError(f"tolerance must be in [0, 1), got {tolerance!r}")
        self.tolerance = tolerance

    def _assign(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],
        lags: dict[TopicPartition, int],
    ) -> Mapping[str, list[TopicPartition]]:
        with gc_paused(sum(partitions_per_topic.values())):
            return self._plan(partitions_per_topic, members, lags)

    def _plan(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],
        lags: dict[TopicPartition, int],
    ) -> dict[str, list[TopicPartition]]:
        prepared = prepare(partitions_per_topic, members)
        ids = prepared.member_ids
        if not ids:
            return {}
        topics_of = prepared.topics_of
        capacity = _capacities([members[m].capacity for m in ids])
        owner: dict[tuple[str, int], int] = {
            tp: i for i, tps in enumerate(prepared.ownership.owned) for tp in tps
        }
        sticky = sticky_plan(partitions_per_topic, prepared)

        def state(parts: Sequence[Sequence[TopicPartition]]) -> _Loads:
            return _Loads(parts, lags, capacity, topics_of)

        # 1.-3. The sticky plan and its local search, recording the largest load per step.
        s_trace = state(sticky).search()
        results = [state(sticky)]
        fresh = [_lpt(partitions_per_topic, topics_of, [len(p) for p in sticky], lags, capacity)]
        if _overfull(fresh[0], sticky):
            fresh[0] = balance_counts(partitions_per_topic, topics_of, fresh[0], owner)
        kip = LagAssignor()._assign(partitions_per_topic, members, lags)
        kip_parts = [list(kip[m]) for m in ids]
        if sorted(map(len, kip_parts)) == sorted(map(len, sticky)):
            fresh.append(kip_parts)
        fresh_states = [state(p) for p in fresh]
        for f in fresh_states:
            f.search()
        best = min([s_trace[-1]] + [f.largest() for f in fresh_states])

        # 4. Stay sticky within tolerance of the best. With nothing owned there is nothing
        # to stick to, so the best result is taken as it is.
        threshold = best * (1 + self.tolerance) if owner else best
        chosen = results[0]
        if s_trace[0] > threshold:
            steps = next((k for k, v in enumerate(s_trace) if v <= threshold), None)
            if steps is not None:
                chosen.search(max_steps=steps)
            else:
                ok = [f for f in fresh_states if f.largest() <= threshold]
                chosen = min(ok, key=lambda f: f.moved(owner))
        return dict(zip(ids, chosen.parts, strict=True))


def _capacities(given: Sequence[float | None]) -> list[float]:
    known = [c for c in given if c is not None]
    for c in known:
        if not (isinstance(c, (int, float)) and math.isfinite(c) and c > 0):
            raise ConfigError(f"capacity must be a finite number > 0, got {c!r}")
    if not known:
        return [1.0] * len(given)
    mean = sum(known) / len(known)
    return [float(c) if c is not None else mean for c in given]


def _overfull(
    parts: Sequence[Sequence[TopicPartition]], target: Sequence[Sequence[object]]
) -> bool:
    return any(len(a) != len(b) for a, b in zip(parts, target, strict=True))


def _lpt(
    partitions_per_topic: Mapping[str, int],
    topics_of: Sequence[frozenset[str]],
    counts: Sequence[int],
    lags: Mapping[TopicPartition, int],
    capacity: Sequence[float],
) -> list[list[TopicPartition]]:
    """Heaviest partition first, to the eligible member whose load stays lowest, within counts.

    A partition whose eligible members are all full goes to the least loaded one anyway; the
    caller then repairs the counts.
    """
    subscribers: dict[str, tuple[int, ...]] = {
        t: tuple(i for i, ts in enumerate(topics_of) if t in ts) for t in partitions_per_topic
    }
    order = sorted(
        (
            (-lags.get(TopicPartition(t, p), 0), len(subs), t, p)
            for t, subs in subscribers.items()
            if subs
            for p in range(partitions_per_topic[t])
        )
    )
    parts: list[list[TopicPartition]] = [[] for _ in topics_of]
    room = list(counts)
    load = [0.0] * len(topics_of)
    heaps: dict[tuple[int, ...], list[tuple[float, int]]] = {}
    for neg_w, _, t, p in order:
        subs = subscribers[t]
        heap = heaps.get(subs)
        if heap is None:
            heap = heaps[subs] = [(0.0, i) for i in subs]
            heapq.heapify(heap)
        # Loads only grow, so a stale entry is one below the member's load: refresh it. A
        # member with no room left is dropped from this heap for good.
        pick = -1
        while heap:
            stored, i = heap[0]
            if room[i] <= 0:
                heapq.heappop(heap)
            elif stored != load[i]:
                heapq.heapreplace(heap, (load[i], i))
            else:
                pick = i
                break
        if pick < 0:
            pick = min(subs, key=lambda i: (load[i], i))
        parts[pick].append(TopicPartition(t, p))
        room[pick] -= 1
        load[pick] += -neg_w / capacity[pick]
        if heap and heap[0][1] == pick:
            heapq.heapreplace(heap, (load[pick], pick))
    return parts


class _Loads:
    """An assignment with per-member loads, improved in place by the local search."""

    def __init__(
        self,
        parts: Sequence[Sequence[TopicPartition]],
        lags: Mapping[TopicPartition, int],
        capacity: Sequence[float],
        topics_of: Sequence[frozenset[str]],
    ) -> None:
        self.parts = [list(p) for p in parts]
        self.lags = lags
        self.capacity = capacity
        self.topics_of = topics_of
        self.load = [
            sum(lags.get(tp, 0) for tp in p) / capacity[i] for i, p in enumerate(self.parts)
        ]

    def largest(self) -> float:
        return max(self.load, default=0.0)

    def moved(self, owner: Mapping[tuple[str, int], int]) -> int:
        return sum(1 for i, p in enumerate(self.parts) for tp in p if owner.get(tp, i) != i)

    def search(self, max_steps: int | None = None) -> list[float]:
        """Improve until no step helps (or ``max_steps``); return the largest load per step."""
        limit = 4 * sum(map(len, self.parts)) + 100 if max_steps is None else max_steps
        trace = [self.largest()]
        for _ in range(limit):
            if not self._step():
                break
            trace.append(self.largest())
        return trace

    def _step(self) -> bool:
        load = self.load
        h = min(range(len(load)), key=lambda i: (-load[i], i))
        if load[h] <= 0:
            return False
        others = sorted((i for i in range(len(load)) if i != h), key=lambda i: (load[i], i))
        best = self._best_step(h, others[:_NEAREST]) or self._best_step(h, others[_NEAREST:])
        if best is None:
            return False
        _, b, give, take = best
        self._transfer(h, b, give)
        if take is not None:
            self._transfer(b, h, take)
        return True

    def _best_step(
        self, h: int, others: Sequence[int]
    ) -> tuple[float, int, TopicPartition, TopicPartition | None] | None:
        """The step with ``h`` that leaves the lowest pair maximum, if it is below ``h``'s load."""
        lags, cap, load = self.lags, self.capacity, self.load
        lh = load[h]
        # A step must lower the pair's maximum by more than rounding noise.
        bar = lh - 1e-9 * lh
        best: tuple[float, int, TopicPartition, TopicPartition | None] | None = None
        for b in others:
            lb = load[b]
            if lb >= bar:
                continue
            mine_b = self.topics_of[b]
            give = sorted((lags.get(tp, 0), tp) for tp in self.parts[h] if tp[0] in mine_b)
            if not give or give[-1][0] == 0:
                continue
            # The transfer d of lag that evens the pair: lh - d/ch == lb + d/cb.
            ideal = (lh - lb) / (1 / cap[h] + 1 / cap[b])
            give_w = [w for w, _ in give]

            def pair_max(d: float, lh: float = lh, lb: float = lb, b: int = b) -> float:
                return max(lh - d / cap[h], lb + d / cap[b])

            if len(self.parts[h]) == len(self.parts[b]) + 1:
                k = bisect_left(give_w, ideal)
                for j in (k - 1, k):
                    if 0 <= j < len(give) and give_w[j] > 0:
                        v = pair_max(give_w[j])
                        if v < bar and (best is None or v < best[0]):
                            best = (v, b, give[j][1], None)
            mine_h = self.topics_of[h]
            take = sorted((lags.get(tp, 0), tp) for tp in self.parts[b] if tp[0] in mine_h)
            if not take:
                continue
            take_w = [w for w, _ in take]
            for wp, p in give:
                k = bisect_left(take_w, wp - ideal)
                for j in (k - 1, k):
                    if 0 <= j < len(take) and take_w[j] < wp:
                        v = pair_max(wp - take_w[j])
                        if v < bar and (best is None or v < best[0]):
                            best = (v, b, p, take[j][1])
        return best

    def _transfer(self, giver: int, taker: int, tp: TopicPartition) -> None:
        w = self.lags.get(tp, 0)
        self.parts[giver].remove(tp)
        self.parts[taker].append(tp)
        self.load[giver] -= w / self.capacity[giver]
        self.load[taker] += w / self.capacity[taker]
