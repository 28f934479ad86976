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
6. **Racks** (KIP-881). With members' racks and the partitions' replica racks, the plan is
   then made more rack-local by the exchanges of ``_racks.improve_locality``, each only where
   no member's load ends more than ``tolerance`` above the plan's largest: counts are as
   without racks, and the largest member lag within the slack stickiness has too.

How:

1. ``S``: the sticky plan (count-balanced, keeps the most owned partitions).
2. Two fresh candidates that ignore ownership: ``L``, longest-processing-time first (heaviest
   partition to the least loaded member that still has room under ``S``'s counts), and ``K``,
   KIP-169's own answer when its counts happen to be as balanced as ``S``'s.
3. A local search improves ``L`` and ``K``: while the most loaded member ``H`` can hand a
   partition to a member with one partition fewer, or swap one for a lighter one, so that both
   end below ``H``'s load, do the best such step. Counts stay balanced (a hand-over between
   counts ``c`` and ``c - 1`` only swaps them). Each step strictly lowers the sorted vector of
   loads, so it ends; it also stops once the largest load is within ``_CLOSE`` (0.5 %) of a
   lower bound (the fluid share, and the heaviest partition plus the lightest others its
   holder must take to reach its count), where no step can matter.
4. ``best`` = the lower largest load of the two. If ``S`` is already within ``tolerance`` of
   ``best``, return ``S``: no partition moves for lag. (Checked first against the lower
   bound, which is below any ``best``: then no candidate is built at all. When nothing is
   owned the tolerance is zero, and ``S`` is not searched: there is no placement to
   protect.) Otherwise return the shortest prefix of ``S``'s local search that gets within
   tolerance, and only if ``S``'s search cannot, the fresh candidate within tolerance that
   moves the fewest partitions.

Speed (the target: 40,000 partitions x 800 members in 0.5 s, a million x 2,000 in 2 s). Pure
Python costs an object and a dict lookup per partition per candidate, and the search sorted a
member's partitions for every member it compared. So everything between the sticky plan and
the result works on numpy arrays indexed by a *global partition number* ``g`` (topics sorted,
then partition: the order of ``TopicPartition``), built once per call (``_Space``):

- a candidate is one integer owner per partition (``_Plan.own``); loads and counts are
  ``bincount``s, and a member's partitions sorted by lag are built only when the search first
  compares that member, then kept sorted through its moves;
- ``L`` with equal subscriptions is dealt in rounds (each round, the heaviest partitions left
  go to the members with room in increasing load, one each), ``K`` is KIP-169 dealt in the
  same rounds per topic (exact: within a round every subscriber holds as many of the topic);
- a search step compares a candidate ``B`` in a few array operations (``searchsorted`` of all
  of ``H``'s partitions in ``B``'s), and skips ``B`` at once when even an exact split of the
  pair's load could not beat the best step found so far;
- the result reuses the sticky plan's ``TopicPartition`` objects, in ``g`` order (so the final
  sort is linear); ``S`` returned as it is keeps the sticky plan's own lists. Fresh, with
  equal subscriptions, ``S`` is not built at all (only when every lag is zero, and then it
  is the answer): its counts are known, and there is nothing to stick to;
- ``_CLOSE`` and the early return on the lower bound cut the searches short where they could
  only gain a fraction of a percent.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from functools import partial
from itertools import chain, repeat
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from groupkit.assignors._balance import balance_counts
from groupkit.assignors._racks import Move, improve_locality
from groupkit.assignors.base import Assignor, ReplicaRacks
from groupkit.assignors.sticky import gc_paused, prepare, sticky_plan
from groupkit.errors import ConfigError
from groupkit.types import MemberSubscription, TopicPartition

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]

#: a search step: (pair maximum after it, the other member, h's partition, the other's or None)
_Step = tuple[float, int, int, int | None]

#: members compared per step before the search widens to all (the least loaded come first)
_NEAREST = 8
#: a fresh candidate's search stops this close to the lower bound: a tenth of the default
#: tolerance, and each step beyond it is a pass over every member for a fraction of a percent
_CLOSE = 5e-3

# Builds a TopicPartition from a (topic, partition) tuple without NamedTuple's Python __new__.
_tp_from_pair = partial(tuple.__new__, TopicPartition)
_first = itemgetter(0)
_second = itemgetter(1)


class BalancedAssignor(Assignor):
    """Count-balanced, then lowest largest member lag across all topics, sticky within 5 %."""

    name = "balanced"
    uses_lag = True
    uses_racks = True

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

    def _assign_racks(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],
        lags: dict[TopicPartition, int],
        racks: ReplicaRacks,
    ) -> Mapping[str, list[TopicPartition]]:
        with gc_paused(sum(partitions_per_topic.values())):
            plan = self._plan(partitions_per_topic, members, lags)
            ids = list(members)
            held = [list(plan.get(m, ())) for m in ids]
            cap = _capacities([members[m].capacity for m in ids])
            load = [sum(lags.get(tp, 0) for tp in h) / c for h, c in zip(held, cap, strict=True)]
            # Racks may spend the slack stickiness has: the largest load stays within
            # ``tolerance`` of the plan's.
            ceiling = max(load, default=0.0) * (1 + self.tolerance)

            def after(moves: Sequence[Move]) -> dict[int, float]:
                new: dict[int, float] = {}
                for tp, src, dst in moves:
                    w = lags.get(tp, 0)
                    new[src] = new.get(src, load[src]) - w / cap[src]
                    new[dst] = new.get(dst, load[dst]) + w / cap[dst]
                return new

            def accept(moves: Sequence[Move]) -> bool:
                return max(after(moves).values()) <= ceiling

            def moved(moves: Sequence[Move]) -> None:
                for i, v in after(moves).items():
                    load[i] = v

            owned = [members[m].owned for m in ids]
            topics = [frozenset(members[m].topics).intersection(partitions_per_topic) for m in ids]
            held = improve_locality(held, [members[m].rack for m in ids], topics, racks, owned,
                                    accept, moved, lambda tp: lags.get(tp, 0))  # fmt: skip
            return dict(zip(ids, held, strict=True))

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
        capacity = _capacities([members[m].capacity for m in ids])
        space = _Space(partitions_per_topic, prepared.topics_of, lags, capacity)
        owned = any(prepared.ownership.owned)
        if space.size == 0 or (not owned and space.equal and not space.w.any()):
            # Nothing to balance lag by: the sticky plan is the answer.
            return dict(zip(ids, sticky_plan(partitions_per_topic, prepared), strict=True))

        # 1. The sticky plan. Fresh with equal subscriptions there is nothing to stick to and
        # its counts are known (q + 1 for the first P mod N members by id, as in the quota
        # path), so it is not built: that saves a million TopicPartitions at 1M x 2,000.
        sticky: list[list[TopicPartition]] | None = None
        s_plan: _Plan | None = None
        if owned or not space.equal:
            sticky = sticky_plan(partitions_per_topic, prepared)
            s_plan = _Plan(space, space.owners(sticky))
            counts = s_plan.count
        else:
            quota, extra = divmod(space.size, space.n)
            counts = np.full(space.n, quota, dtype=np.int64)
            counts[:extra] += 1
        bound = space.lower_bound(counts)
        # Within tolerance of the lower bound, so of any best: the usual steady state (a
        # member joins or leaves, lags drift), answered without any candidate.
        close = s_plan is not None and s_plan.largest() <= bound * (1 + self.tolerance)
        if owned and close and sticky is not None:
            return dict(zip(ids, sticky, strict=True))

        # 2.-3. The two fresh candidates, improved by the local search.
        lpt = _lpt(space, counts)
        if (np.bincount(lpt, minlength=space.n) != counts).any():
            # Unequal subscriptions can leave LPT a partition with no eligible room.
            repaired = balance_counts(
                partitions_per_topic,
                prepared.topics_of,
                space.parts(lpt),
                {tp: i for i, tps in enumerate(prepared.ownership.owned) for tp in tps},
            )
            lpt = space.owners(repaired)
        floor = bound * (1 + _CLOSE)
        fresh = [_Plan(space, lpt)]
        fresh[0].search(stop_at=floor)
        # KIP-169's answer is a candidate so that we never do worse than ``lag``. It is only
        # searched when ``L`` did not reach the floor: then nothing can do materially better.
        k_plan = _Plan(space, _kip(space))
        if sorted(k_plan.count.tolist()) == sorted(counts.tolist()):
            if fresh[0].largest() > floor:
                k_plan.search(stop_at=floor)
            fresh.append(k_plan)
        best = min(f.largest() for f in fresh)

        # 4. Stay sticky within tolerance of the best. With nothing owned there is nothing
        # to stick to, so the best result is taken as it is.
        threshold = best * (1 + self.tolerance) if owned else best
        if sticky is not None and s_plan is not None:
            if s_plan.largest() <= threshold:
                return dict(zip(ids, sticky, strict=True))
            if owned:
                s_plan.search(stop_at=threshold)
                if s_plan.largest() <= threshold:
                    return dict(zip(ids, s_plan.apply_moves(sticky), strict=True))
        ok = [f for f in fresh if f.largest() <= threshold]
        if owned:
            # Who owned each partition before, per g: the ownership rules' per-topic table.
            table = prepared.ownership.owner_index
            owner = np.concatenate([np.asarray(table[t], dtype=np.int64) for t in space.topics])
            ok.sort(key=lambda f: f.moved(owner))
        return dict(zip(ids, space.parts(ok[0].own), strict=True))


def _capacities(given: Sequence[float | None]) -> list[float]:
    known = [c for c in given if c is not None]
    for c in known:
        if not (isinstance(c, (int, float)) and math.isfinite(c) and c > 0):
            raise ConfigError(f"capacity must be a finite number > 0, got {c!r}")
    if not known:
        return [1.0] * len(given)
    mean = sum(known) / len(known)
    return [float(c) if c is not None else mean for c in given]


class _Space:
    """The assignable partitions as global numbers ``g``, with their lags and topics.

    Topics nobody subscribes to are left out. ``g`` runs over topics in sorted order, then
    partitions, so ``g`` order is ``TopicPartition`` order.
    """

    def __init__(
        self,
        partitions_per_topic: Mapping[str, int],
        topics_of: Sequence[frozenset[str]],
        lags: Mapping[TopicPartition, int],
        capacity: Sequence[float],
    ) -> None:
        self.n = len(topics_of)
        self.cap: Floats = np.asarray(capacity, dtype=np.float64)
        self.equal = len(set(topics_of)) == 1
        subscribed = set().union(*topics_of)
        self.topics = sorted(t for t in partitions_per_topic if t in subscribed)
        self.topic_index = {t: k for k, t in enumerate(self.topics)}
        sizes = [partitions_per_topic[t] for t in self.topics]
        self.sizes: Ints = np.asarray(sizes, dtype=np.int64)
        self.offset: Ints = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(self.sizes, out=self.offset[1:])
        self.size = int(self.offset[-1])
        self.tid: Ints = np.repeat(np.arange(len(sizes), dtype=np.int64), self.sizes)
        self.pnum: Ints = np.arange(self.size, dtype=np.int64) - self.offset[self.tid]
        # subscribes[i, k]: member i may take topic k. Members usually share one set.
        self.subscribes = np.zeros((self.n, len(sizes)), dtype=bool)
        rows: dict[frozenset[str], npt.NDArray[np.bool_]] = {}
        for i, ts in enumerate(topics_of):
            row = rows.get(ts)
            if row is None:
                row = rows[ts] = np.zeros(len(sizes), dtype=bool)
                row[[self.topic_index[t] for t in ts if t in self.topic_index]] = True
            self.subscribes[i] = row
        self.w = self._weights(lags)
        self._all: npt.NDArray[np.object_] | None = None

    def _weights(self, lags: Mapping[TopicPartition, int]) -> Floats:
        """Lag per ``g`` (0 where none is given), read from the dict in C-speed passes."""
        w = np.zeros(self.size, dtype=np.float64)
        if not lags or not self.size:
            return w
        k = len(lags)
        tix = np.fromiter(
            map(self.topic_index.get, map(_first, lags), repeat(-1)), dtype=np.int64, count=k
        )
        ps = np.fromiter(map(_second, lags), dtype=np.int64, count=k)
        vals = np.fromiter(lags.values(), dtype=np.float64, count=k)
        ok = (tix >= 0) & (ps >= 0)
        ok &= ps < self.sizes[np.where(ok, tix, 0)]
        w[self.offset[tix[ok]] + ps[ok]] = vals[ok]
        return w

    def owners(self, parts: Sequence[Sequence[TopicPartition]]) -> Ints:
        """Owner index per ``g`` (-1: nobody) of an assignment given per member index.

        The first complete assignment seen also lends its ``TopicPartition`` objects to
        ``parts``, so a result is built without making a million new ones.
        """
        own = np.full(self.size, -1, dtype=np.int64)
        sizes = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        total = int(sizes.sum())
        if total:
            start = dict(zip(self.topics, self.offset.tolist(), strict=False))
            tps = list(chain.from_iterable(parts))
            g = np.fromiter(map(start.__getitem__, map(_first, tps)), dtype=np.int64, count=total)
            g += np.fromiter(map(_second, tps), dtype=np.int64, count=total)
            own[g] = np.repeat(np.arange(len(parts), dtype=np.int64), sizes)
            if self._all is None and total == self.size:
                self._all = np.empty(self.size, dtype=object)
                # fromiter first: assigning the list itself converts it element by element.
                self._all[g] = np.fromiter(tps, dtype=object, count=total)
        return own

    def parts(self, own: Ints) -> list[list[TopicPartition]]:
        """Per member index its partitions, in ``g`` order: ``TopicPartition`` order."""
        if self._all is None:
            # No complete assignment was seen: make every TopicPartition, in g order.
            names = chain.from_iterable(
                repeat(t, n) for t, n in zip(self.topics, self.sizes.tolist(), strict=True)
            )
            numbers = chain.from_iterable(range(n) for n in self.sizes.tolist())
            self._all = np.empty(self.size, dtype=object)
            self._all[:] = np.fromiter(
                map(_tp_from_pair, zip(names, numbers, strict=True)), dtype=object, count=self.size
            )
        by_member = self._all[_by_owner(own, self.n)]
        bounds = np.cumsum(np.bincount(own, minlength=self.n))[:-1].tolist()
        return [chunk.tolist() for chunk in np.split(by_member, bounds)]

    def lower_bound(self, counts: Ints) -> float:
        """A load some member must reach in any plan whose counts are a permutation of these.

        The fluid share, and the heaviest partition's holder: it holds at least as many
        partitions as the fewest any of the partition's subscribers holds, so at least that
        many minus one of the lightest others besides it. Without this second bound a group
        with one huge partition searched on in steps of a few records.
        """
        w, cap = self.w, self.cap
        fluid = float(w.sum() / cap.sum())
        heavy = int(np.argmax(w))
        eligible = self.subscribes[:, self.tid[heavy]]
        fewest = int(counts[eligible].min())
        rest = np.delete(w, heavy)
        light = float(np.partition(rest, fewest - 2)[: fewest - 1].sum()) if fewest >= 2 else 0.0
        return max(fluid, (float(w[heavy]) + light) / float(cap[eligible].max()))


def _lpt(space: _Space, counts: Ints) -> Ints:
    """Heaviest partition first, to the eligible member whose load is lowest, within counts.

    A partition whose eligible members are all full goes to the least loaded one anyway; the
    caller then repairs the counts.
    """
    w, cap = space.w, space.cap
    own = np.full(space.size, -1, dtype=np.int64)
    load = np.zeros(space.n, dtype=np.float64)
    if space.equal:
        # Round r: every member with more than r places takes one partition, the heaviest
        # left going to the least loaded. The same as one-at-a-time LPT but for the rare
        # member light enough to deserve two in a round; the search evens that out. Counts
        # sum to the partitions, so the rounds use them all.
        # Ties in lag need no rule here: equal lags load a member equally, and the order is
        # still a function of the input. (Introsort, not a stable sort: 2.5x faster at 1M.)
        order = np.argsort(-w)
        pos, r = 0, 0
        while pos < space.size:
            active = np.flatnonzero(counts > r)
            by_load = active[np.argsort(load[active], kind="stable")]
            batch = order[pos : pos + len(by_load)]
            who = by_load[: len(batch)]
            own[batch] = who
            load[who] += w[batch] / cap[who]
            pos += len(batch)
            r += 1
        return own
    # Unequal subscriptions: one partition at a time, most constrained first among equals,
    # with one lazy heap of (load, member) per distinct set of subscribers.
    n_subs = space.subscribes.sum(axis=0)
    order = np.lexsort((np.arange(space.size), n_subs[space.tid], -w))
    # Topics with the same subscribers share one heap: ``kind[k]`` numbers topic k's set
    # (a tuple of hundreds of members is too slow a dict key to hash per partition).
    sets: dict[tuple[int, ...], int] = {}
    kind = [
        sets.setdefault(tuple(np.flatnonzero(space.subscribes[:, k]).tolist()), len(sets))
        for k in range(len(n_subs))
    ]
    subs_of = list(sets)
    room = counts.tolist()
    load_l = [0.0] * space.n
    cap_l = space.cap.tolist()
    heaps: list[list[tuple[float, int]] | None] = [None] * len(subs_of)
    tid_l = space.tid.tolist()
    w_l = w.tolist()
    own_l = [-1] * space.size
    for g in order.tolist():
        x = kind[tid_l[g]]
        subs = subs_of[x]
        heap = heaps[x]
        if heap is None:
            heap = heaps[x] = [(0.0, i) for i in subs]
            heapq.heapify(heap)
        # Loads only grow, so a stale entry is one below the member's load: refresh it. A
        # member with no room left is dropped from this heap for good.
        pick = -1
        while heap:
            stored, i = heap[0]
            if room[i] <= 0:
                heapq.heappop(heap)
            elif stored != load_l[i]:
                heapq.heapreplace(heap, (load_l[i], i))
            else:
                pick = i
                break
        if pick < 0:
            pick = min(subs, key=lambda i: (load_l[i], i))
        own_l[g] = pick
        room[pick] -= 1
        load_l[pick] += w_l[g] / cap_l[pick]
        if heap and heap[0][1] == pick:
            heapq.heapreplace(heap, (load_l[pick], pick))
    return np.asarray(own_l, dtype=np.int64)


def _kip(space: _Space) -> Ints:
    """KIP-169 (``LagAssignor``), in rounds per topic.

    Per topic, heaviest partition first to the subscriber with the fewest of the topic, ties by
    least lag of the topic, then index. Within a round every subscriber holds as many of the
    topic, so a round gives one partition each, the heaviest to the least lag: one sort.
    """
    w = space.w
    own = np.full(space.size, -1, dtype=np.int64)
    for k in range(len(space.topics)):
        subs = np.flatnonzero(space.subscribes[:, k])
        lo, hi = int(space.offset[k]), int(space.offset[k + 1])
        order = lo + np.argsort(-w[lo:hi], kind="stable")
        # Round one needs no sort: nobody has lag of the topic yet, so it goes by index.
        first = order[: len(subs)]
        own[first] = subs[: len(first)]
        if hi - lo <= len(subs):
            continue
        lag = np.zeros(len(subs), dtype=np.float64)
        lag[: len(first)] = w[first]
        for r0 in range(len(subs), hi - lo, len(subs)):
            batch = order[r0 : r0 + len(subs)]
            who = np.argsort(lag, kind="stable")[: len(batch)]
            own[batch] = subs[who]
            lag[who] += w[batch]
    return own


class _Plan:
    """A candidate with per-member loads, improved in place by the local search."""

    def __init__(self, space: _Space, own: Ints) -> None:
        self.space = space
        self.own = own
        self.count: Ints = np.bincount(own, minlength=space.n)
        self.load: Floats = np.bincount(own, weights=space.w, minlength=space.n) / space.cap
        #: per member, its partitions sorted by (lag, g), built when the search first needs it
        self._mine: list[tuple[Ints, Floats] | None] = [None] * space.n
        self._by_member: list[Ints] | None = None
        #: (g, giver, taker) of every transfer, in order
        self.moves: list[tuple[int, int, int]] = []

    def largest(self) -> float:
        return float(self.load.max())

    def moved(self, owner: Ints) -> int:
        return int(np.count_nonzero((owner >= 0) & (owner != self.own)))

    def mine(self, i: int) -> tuple[Ints, Floats]:
        """Member ``i``'s partitions sorted by (lag, g), and their lags between -inf and inf.

        Built the first time the search compares ``i``; the sentinels let a ``searchsorted``
        index one below and one above without bounds checks.
        """
        got = self._mine[i]
        if got is None:
            if self._by_member is None:
                # One stable sort groups every member's partitions in g order.
                order = _by_owner(self.own, self.space.n)
                bounds = np.cumsum(self.count)[:-1]
                self._by_member = np.split(order, bounds)
            got = self._mine[i] = _sorted_by_lag(self._by_member[i], self.space.w)
        return got

    def search(self, stop_at: float = 0.0) -> None:
        """Improve until no step helps, or the largest load is at most ``stop_at``."""
        for _ in range(4 * self.space.size + 100):
            if self.largest() <= stop_at or not self._step():
                return

    def _step(self) -> bool:
        load = self.load
        h = int(np.argmax(load))  # the first of the most loaded: ties by index
        if load[h] <= 0:
            return False
        by_load = np.argsort(load, kind="stable")
        others = by_load[by_load != h].tolist()
        best = self._best_step(h, others[:_NEAREST]) or self._best_step(h, others[_NEAREST:])
        if best is None:
            return False
        _, b, give, take = best
        self._transfer(h, b, give)
        if take is not None:
            self._transfer(b, h, take)
        return True

    def _best_step(self, h: int, others: Sequence[int]) -> _Step | None:
        """The step with ``h`` that leaves the lowest pair maximum, if it is below ``h``'s load.

        Ties go to the first member in ``others``, then a hand-over before a swap.
        """
        space, load, count = self.space, self.load, self.count
        cap = space.cap
        lh, ch = float(load[h]), float(cap[h])
        # A step must lower the pair's maximum by more than rounding noise: it moves a lag d
        # with lh - d/ch < bar and lb + d/cb < bar.
        bar = lh - 1e-9 * lh
        d_min = max((lh - bar) * ch, 0.0)
        best: _Step | None = None
        h_g, h_w = self.mine(h)
        for b in others:
            lb, cb = float(load[b]), float(cap[b])
            if lb >= bar:
                continue
            # The transfer d of lag that evens the pair: lh - d/ch == lb + d/cb. No step can
            # leave the pair below that even load, so b cannot beat the best so far if it is
            # not below it.
            ideal = (lh - lb) / (1 / ch + 1 / cb)
            even = lh - ideal / ch
            if best is not None and even >= best[0]:
                continue
            d_max = (bar - lb) * cb
            give_g, give_w = h_g, h_w
            if not space.equal:
                give_g, give_w = _eligible(h_g, space.subscribes[b], space)
            if len(give_g) == 0 or give_w[-2] == 0:
                continue
            if count[h] == count[b] + 1:
                # Hand over the partition of h nearest to the even split.
                k = int(np.searchsorted(give_w, ideal))  # give_w[k] >= ideal > give_w[k - 1]
                for j in (k - 1, k):
                    d = float(give_w[j])
                    if d_min < d < d_max:
                        v = max(lh - d / ch, lb + d / cb)
                        if best is None or v < best[0]:
                            best = (v, b, int(give_g[j - 1]), None)
            take_g, take_w = self.mine(b)
            if not space.equal:
                take_g, take_w = _eligible(take_g, space.subscribes[h], space)
            if len(take_g) == 0:
                continue
            # Swap p of h for q of b: d = w_p - w_q. For every p, the q just below and just
            # above w_p - ideal: the one below leaves d >= ideal, where the pair maximum is
            # lb + d/cb (smallest d wins), the one above d <= ideal, where it is lh - d/ch
            # (largest d wins).
            gw = give_w[1:-1]
            at = take_w[1:-1].searchsorted(gw - ideal)
            d_lo = gw - take_w[at]  # take_w[at] is the q below (-inf: none, d = inf)
            d_hi = gw - take_w[at + 1]  # the q above (inf: none, d = -inf)
            a = int(d_lo.argmin())
            z = int(d_hi.argmax())
            found: tuple[float, int, int] | None = None  # (v, p's rank, q's rank)
            if d_lo[a] < d_max:
                found = (lb + float(d_lo[a]) / cb, a, int(at[a]) - 1)
            if d_hi[z] > d_min:
                v = lh - float(d_hi[z]) / ch
                if found is None or v < found[0] or (v == found[0] and z < found[1]):
                    found = (v, z, int(at[z]))
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], b, int(give_g[found[1]]), int(take_g[found[2]]))
        return best

    def _transfer(self, giver: int, taker: int, g: int) -> None:
        w = self.space.w
        cap = self.space.cap
        self._mine[giver] = _without(self.mine(giver), g)
        self._mine[taker] = _with(self.mine(taker), g, float(w[g]))
        self.own[g] = taker
        self.count[giver] -= 1
        self.count[taker] += 1
        self.load[giver] -= w[g] / cap[giver]
        self.load[taker] += w[g] / cap[taker]
        self.moves.append((g, giver, taker))

    def apply_moves(self, parts: Sequence[Sequence[TopicPartition]]) -> list[list[TopicPartition]]:
        """``parts`` (this plan's start) with the search's transfers applied."""
        out = [list(p) for p in parts]
        space = self.space
        for g, giver, taker in self.moves:
            tp = _tp_from_pair((space.topics[int(space.tid[g])], int(space.pnum[g])))
            out[giver].remove(tp)
            out[taker].append(tp)
        return out


_EDGES = np.array([-np.inf, np.inf])


def _sorted_by_lag(g: Ints, w: Floats) -> tuple[Ints, Floats]:
    """``g`` sorted by (lag, g), and their lags with -inf before and inf after."""
    g = g[np.lexsort((g, w[g]))]
    return g, np.concatenate((_EDGES[:1], w[g], _EDGES[1:]))


def _eligible(g: Ints, topics: npt.NDArray[np.bool_], space: _Space) -> tuple[Ints, Floats]:
    """The partitions of ``g`` (sorted by lag) of the given topics, as ``_sorted_by_lag``."""
    g = g[topics[space.tid[g]]]
    return g, np.concatenate((_EDGES[:1], space.w[g], _EDGES[1:]))


def _without(mine: tuple[Ints, Floats], g: int) -> tuple[Ints, Floats]:
    """``mine`` (as ``_sorted_by_lag``) without partition ``g``."""
    gs, ws = mine
    at = int(np.flatnonzero(gs == g)[0])
    return np.delete(gs, at), np.delete(ws, at + 1)


def _with(mine: tuple[Ints, Floats], g: int, wg: float) -> tuple[Ints, Floats]:
    """``mine`` (as ``_sorted_by_lag``) with partition ``g`` of lag ``wg``, kept in order."""
    gs, ws = mine
    lo = int(np.searchsorted(ws, wg, side="left")) - 1  # ws has -inf in front
    hi = int(np.searchsorted(ws, wg, side="right")) - 1
    at = lo + int(np.searchsorted(gs[lo:hi], g))  # among equal lags, by g
    return np.insert(gs, at, g), np.insert(ws, at + 1, wg)


def _by_owner(own: Ints, n: int) -> Ints:
    """The ``g``s grouped by owner, each group in ``g`` order (a stable argsort).

    Owners fit 16 bits in any real group, where numpy's stable sort is a radix sort: five
    times faster than the merge sort it uses on 64-bit keys.
    """
    if n < 2**15:
        return np.argsort(own.astype(np.int16), kind="stable")
    return np.argsort(own, kind="stable")
