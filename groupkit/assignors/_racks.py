"""Rack awareness (KIP-881): read from a replica in the member's own rack, never at balance's cost.

A partition is *rack-local* to a member when the member has a rack (``client.rack``) and one
of the partition's replicas is on a broker of that rack: the member can then fetch from that
replica (KIP-392) instead of across racks. Kafka's assignors order their goals as balance
first, then rack, then stickiness, and so do ours.

``improve_locality`` takes a plan that is already balanced and sticky and raises its number of
rack-local partitions by exchanges that leave the multiset of member partition counts as it
was, so the balance is exactly the rack-blind plan's:

1. **Within a subscription.** Members that subscribe to the same topics may take each other's
   partitions, so only their racks matter. A partition passed from rack ``R`` to rack ``S``
   gains ``local(S) - local(R)``; the search makes the best *cycle* through racks (one member
   per rack gives one partition and takes one) or *path* (from a rack with a member at the
   most partitions to a rack with a member at one fewer: the two trade counts, which moves a
   place at ``q + 1`` to the rack that needs it) while one adds local partitions. When none
   does, no exchange can: that is the most local placement with these counts (tested against
   a max flow; with more than six racks, cycles and paths longer than four racks are not
   looked for). The racks are few,
   so each step looks at a handful of rack pairs: partitions are pooled per rack and per set
   of replica racks, not scanned.
2. **Across subscriptions** (unequal subscriptions only, or when ``accept`` refused a cycle):
   member ``a`` holds ``p``, not local to it; a member ``b`` of a rack with a replica of ``p``,
   subscribed to its topic, takes it and gives ``a`` a partition ``q`` of a topic ``a``
   subscribes to, where that adds local partitions (``q`` was not local to ``b``, or is local
   to ``a`` too), or takes ``p`` alone when ``b`` holds one partition fewer than ``a``.

Among equal choices, a partition its holder did not own before the plan moves first, so what
members owned stays where it can: balance first, then the rack, then stickiness, as in Kafka.
``accept`` lets an assignor with more goals (``balanced``'s lag) veto an exchange; a refused
one is tried again with partitions of like ``weight``. The result is never less local than the
plan it started from: every exchange made adds at least one local partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, pairwise

from groupkit.assignors.base import ReplicaRacks
from groupkit.types import MemberSubscription, TopicPartition

_NONE: frozenset[str] = frozenset()
#: partitions compared when looking for one of a like weight
_SCAN = 256

#: one step of a partition: ``(partition, from member index, to member index)``
Move = tuple[TopicPartition, int, int]
#: ``accept(moves)``: may these moves be made together? Lets an assignor with goals beyond
#: counts (``balanced``'s lag) veto. Asked of candidates that may not be taken: it must not
#: change anything.
Accept = Callable[[Sequence[Move]], bool]
#: ``moved(moves)``: told of each set of moves made
Moved = Callable[[Sequence[Move]], None]


def replica_racks_of(racks: ReplicaRacks, tp: tuple[str, int]) -> frozenset[str]:
    """The racks of ``tp``'s replicas (empty when unknown)."""
    sets = racks.get(tp[0])
    return sets[tp[1]] if sets is not None and 0 <= tp[1] < len(sets) else _NONE


def is_local(racks: ReplicaRacks, tp: tuple[str, int], rack: str | None) -> bool:
    """Whether a member of ``rack`` has a replica of ``tp`` in its rack."""
    return bool(rack) and rack in replica_racks_of(racks, tp)


def local_count(
    assignment: Mapping[str, Iterable[tuple[str, int]]],
    members: Mapping[str, MemberSubscription],
    racks: ReplicaRacks,
) -> int:
    """How many assigned partitions are local to the member they go to."""
    return sum(is_local(racks, tp, members[m].rack) for m, tps in assignment.items() for tp in tps)


def improve_locality(
    held: list[list[TopicPartition]],
    member_racks: Sequence[str | None],
    topics_of: Sequence[frozenset[str]],
    racks: ReplicaRacks,
    owned: Sequence[Iterable[TopicPartition]] = (),
    accept: Accept | None = None,
    moved: Moved | None = None,
    weight: Callable[[TopicPartition], float] | None = None,
) -> list[list[TopicPartition]]:
    """``held`` (per member index) with more rack-local partitions, counts unchanged.

    ``owned[i]``: what member ``i`` owned before the plan, kept where a choice allows.
    ``weight``: what ``accept`` weighs a partition by; a refused exchange is tried again with
    partitions of like weight.
    """
    if not any(member_racks):
        return held
    if len(set(topics_of)) > 1:
        held = _within_classes(held, member_racks, topics_of, racks, owned, accept, moved, weight)
    search = _Search(held, member_racks, topics_of, racks, owned, accept, moved, weight)
    while True:
        while search.equal and search.cycle():
            pass
        # Without a veto the cycles reached the optimum, and no swap can add anything; with
        # one, a swap between two members may still pass where a whole cycle did not.
        if (search.equal and accept is None) or not search.swaps():
            return search.result()


def _within_classes(
    held: list[list[TopicPartition]],
    member_racks: Sequence[str | None],
    topics_of: Sequence[frozenset[str]],
    racks: ReplicaRacks,
    owned: Sequence[Iterable[TopicPartition]],
    accept: Accept | None,
    moved: Moved | None,
    weight: Callable[[TopicPartition], float] | None,
) -> list[list[TopicPartition]]:
    """First improve among the members of each subscription, which may take each other's
    partitions, with the fast cycles of equal subscriptions; the member-by-member swaps
    across subscriptions that follow then have little left to do."""
    classes: dict[frozenset[str], list[int]] = {}
    for i, ts in enumerate(topics_of):
        classes.setdefault(ts, []).append(i)
    out = list(held)
    for idx in classes.values():
        if len(idx) < 2 or not any(member_racks[i] for i in idx):
            continue

        sub = improve_locality(
            [held[i] for i in idx],
            [member_racks[i] for i in idx],
            [topics_of[i] for i in idx],
            racks,
            [owned[i] if i < len(owned) else () for i in idx],
            None if accept is None else _Renumbered(accept, idx).accept,
            None if moved is None else _Renumbered(moved, idx).moved,
            weight,
        )
        for i, tps in zip(idx, sub, strict=True):
            out[i] = tps
    return out


class _Renumbered:
    """``accept`` or ``moved`` of the whole group, called with a class's member indices."""

    def __init__(self, fn: Accept | Moved, idx: list[int]) -> None:
        self.fn, self.idx = fn, idx

    def _global(self, moves: Sequence[Move]) -> list[Move]:
        return [(tp, self.idx[a], self.idx[b]) for tp, a, b in moves]

    def accept(self, moves: Sequence[Move]) -> bool:
        return bool(self.fn(self._global(moves)))

    def moved(self, moves: Sequence[Move]) -> None:
        self.fn(self._global(moves))


class _Search:
    """The working state of one ``improve_locality``: who holds what, bucketed by rack set."""

    def __init__(
        self,
        held: list[list[TopicPartition]],
        member_racks: Sequence[str | None],
        topics_of: Sequence[frozenset[str]],
        racks: ReplicaRacks,
        owned: Sequence[Iterable[TopicPartition]],
        accept: Accept | None,
        moved: Moved | None,
        weight: Callable[[TopicPartition], float] | None = None,
    ) -> None:
        n = len(held)
        self.weight = weight
        self.racks = racks
        self.topics_of = topics_of
        self.equal = len(set(topics_of)) <= 1
        self.accept, self.moved = accept, moved
        self.mr: list[str | None] = [r or None for r in member_racks]
        #: the members of each rack; rackless members form the group ``None``
        self.groups: dict[str | None, list[int]] = {}
        for i, r in enumerate(self.mr):
            self.groups.setdefault(r, []).append(i)
        self.by_rack = {r: ms for r, ms in self.groups.items() if r is not None}
        self.was_owned = [set(owned[i]) if i < len(owned) else set() for i in range(n)]
        self.count = [len(h) for h in held]
        self.where: dict[TopicPartition, int] = {}
        # buckets[i][S]: the partitions member i holds whose replica racks are S (ordered sets)
        self.buckets: list[dict[frozenset[str], dict[TopicPartition, None]]] = [
            {} for _ in range(n)
        ]
        #: pools[g][S]: (partitions the members of rack group g hold with replica racks S and
        #: did not own before, those they did), each partition -> its member
        self.pools: dict[str | None, dict[frozenset[str], tuple[dict[TopicPartition, int],
                                                               dict[TopicPartition, int]]]] = {
            g: {} for g in self.groups
        }  # fmt: skip
        for i, tps in enumerate(held):
            for tp in tps:
                self.where[tp] = i
                s = replica_racks_of(racks, tp)
                self.buckets[i].setdefault(s, {})[tp] = None
                self._pool(i, s)[tp in self.was_owned[i]][tp] = i

        self.hi, self.lo = max(self.count, default=0), min(self.count, default=0)
        #: levels[g][c]: the members of rack group g holding c partitions
        self.levels: dict[str | None, dict[int, dict[int, None]]] = {g: {} for g in self.groups}
        for i, c in enumerate(self.count):
            self.levels[self.mr[i]].setdefault(c, {})[i] = None

    def _pool(self, i: int, s: frozenset[str]) -> tuple[dict[TopicPartition, int], ...]:
        return self.pools[self.mr[i]].setdefault(s, ({}, {}))

    def result(self) -> list[list[TopicPartition]]:
        out: list[list[TopicPartition]] = [[] for _ in self.count]
        for tp, i in self.where.items():
            out[i].append(tp)
        return out

    def _apply(self, moves: Sequence[Move]) -> bool:
        if self.accept is not None and not self.accept(moves):
            return False
        for tp, src, dst in moves:
            s = replica_racks_of(self.racks, tp)
            del self.buckets[src][s][tp]
            self.buckets[dst].setdefault(s, {})[tp] = None
            del self._pool(src, s)[tp in self.was_owned[src]][tp]
            self._pool(dst, s)[tp in self.was_owned[dst]][tp] = dst
            self.where[tp] = dst
            for i, d in ((src, -1), (dst, 1)):
                level = self.levels[self.mr[i]]
                del level[self.count[i]][i]
                self.count[i] += d
                level.setdefault(self.count[i], {})[i] = None
        if self.moved is not None:
            self.moved(moves)
        return True

    def _pick(
        self, i: int, s: frozenset[str], topics: frozenset[str] | None
    ) -> TopicPartition | None:
        """A partition of member ``i`` with rack set ``s`` (of ``topics`` when given), one it
        did not own before if it has one: moving that one keeps what it owned."""
        first = None
        for q in self.buckets[i].get(s, ()):
            if topics is not None and q[0] not in topics:
                continue
            if q not in self.was_owned[i]:
                return q
            if first is None:
                first = q
        return first

    # -- 1. and 2.: swaps and neutral moves between two members ---------------------------------

    def _best_return(self, a: int, b: int) -> tuple[int, TopicPartition | None]:
        """The best ``q`` for ``b`` to give ``a`` back, and how many locals it adds with ``p``."""
        ra, rb = self.mr[a], self.mr[b]
        best: tuple[int, int, TopicPartition | None] = (0, 0, None)
        for s in sorted(self.buckets[b], key=sorted):
            gain = 1 + (ra is not None and ra in s) - (rb is not None and rb in s)
            if gain <= 0 or gain < best[0]:
                continue
            q = self._pick(b, s, self.topics_of[a])
            if q is not None:
                keeps = 0 if q in self.was_owned[b] else 1
                if (gain, keeps) > best[:2]:
                    best = (gain, keeps, q)
        return best[0], best[2]

    def swaps(self) -> bool:
        """Swaps and neutral moves until none adds a local partition; whether any was made."""
        any_made = False
        changed = True
        while changed:
            changed = False
            for p in sorted(self.where):
                a = self.where[p]
                reps = replica_racks_of(self.racks, p)
                if not reps or self.mr[a] in reps:
                    continue
                for moves in self._candidates(p, a, reps):
                    if self._apply(moves):
                        changed = any_made = True
                        break
        return any_made

    def _candidates(self, p: TopicPartition, a: int, reps: frozenset[str]) -> list[list[Move]]:
        """Ways to bring ``p`` into a rack of its replicas, best first."""
        found: list[tuple[int, int, list[Move]]] = []
        for b in [b for r in sorted(reps & self.by_rack.keys()) for b in self.by_rack[r]]:
            if b == a or p[0] not in self.topics_of[b]:
                continue
            gain, q = self._best_return(a, b)
            if q is not None:
                found.append((-gain, len(found), [(p, a, b), (q, b, a)]))
            if self.count[b] + 1 == self.count[a]:
                found.append((-1, len(found), [(p, a, b)]))
        found.sort(key=lambda f: (f[0], len(f[2]), f[1]))
        return [f[2] for f in found]

    # -- 3. cycles through racks (equal subscriptions) -----------------------------------------

    def cycle(self) -> bool:
        """Make the best chain of moves through racks that adds local partitions, if any.

        With equal subscriptions any member may take any partition, so only racks matter: a
        partition moved from rack ``R`` to rack ``S`` gains ``local(S) - local(R)``. Two shapes
        leave the counts as they were:

        - a *cycle*: one member per rack on it gives one partition and takes one;
        - a *path* from a rack with a member holding the most partitions to a rack with a member
          holding one fewer, every member between giving one and taking one: the two ends'
          counts trade places. (The first rack's giver, if it is not that member, first takes
          one of its partitions: within a rack nothing changes for locality.) This moves a
          place at ``q + 1`` to the rack that needs it.

        When neither adds anything, no exchange at all can: the placement is the rack-level
        optimum for these counts (a swap is a cycle of two, a neutral move a path of one).
        """
        keys = sorted(self.groups, key=lambda r: (r is None, r or ""))
        edges: dict[tuple[int, int], tuple[int, int, TopicPartition, frozenset[str]]] = {}
        #: per rack, a member with the most partitions (a path's start) and one with one
        #: fewer (a path's end); counts differ by at most one here (equal subscriptions)
        tops: dict[int, int] = {}
        ends: dict[int, int] = {}
        for x, r in enumerate(keys):
            if self.hi == self.lo + 1:
                highs, lows = self.levels[r].get(self.hi), self.levels[r].get(self.lo)
                if highs:
                    tops[x] = next(iter(highs))
                if lows:
                    ends[x] = next(iter(lows))
            for y, t in enumerate(keys):
                if x != y:
                    e = self._edge(r, t)
                    if e is not None:
                        edges[(x, y)] = e
        found: list[tuple[int, int, list[int], bool]] = []  # (-gain, length, racks, is a path)
        limit = len(keys) if len(keys) <= 6 else 4

        def walk(path: list[int], gain: int, opened: bool) -> None:
            # opened: the path began with a start edge (a member at the most partitions)
            last = path[-1]
            for y in range(len(keys)):
                e = edges.get((last, y))
                if e is None:
                    continue
                g = gain + e[0]
                if y == path[0]:
                    if not opened and len(path) > 1 and g > 0:
                        found.append((-g, len(path), list(path), False))
                    continue
                if y in path or (not opened and y < path[0]):
                    continue
                if opened and y in ends and g > 0:
                    found.append((-g, len(path), [*path, y], True))
                if len(path) < limit:
                    walk([*path, y], g, opened)

        for start in range(len(keys)):
            walk([start], 0, False)
            if start in tops:
                walk([start], 0, True)
        for _, _, path, is_path in sorted(found, key=lambda f: (f[0], f[1], f[3], f[2])):
            hops = list(pairwise(path if is_path else [*path, path[0]]))
            top, end = (tops[path[0]], ends[path[-1]]) if is_path else (-1, -1)
            picks = {h: (edges[h][1], edges[h][2]) for h in hops}
            moves = self._chain(hops, picks, top, end)
            if moves is not None and self._apply(moves):
                return True
            if self.weight is not None:
                # Refused (balanced's lag): try partitions of like weight, so that what each
                # member gives and takes nearly cancel out.
                picks = self._matched(keys, hops, edges, is_path)
                moves = self._chain(hops, picks, top, end)
                if moves is not None and self._apply(moves):
                    return True
        return False

    def _chain(
        self,
        hops: list[tuple[int, int]],
        picks: Mapping[tuple[int, int], tuple[int, TopicPartition]],
        top: int,
        end: int,
    ) -> list[Move] | None:
        """The moves of a cycle (``top`` -1) or of a path from member ``top`` to ``end``."""
        givers = [picks[h][0] for h in hops]
        parts = [picks[h][1] for h in hops]
        if top < 0:
            return list(zip(parts, givers, [*givers[1:], givers[0]], strict=True))
        moves = list(zip(parts, givers, [*givers[1:], end], strict=True))
        if top != givers[0]:
            extra = self._pick_any(top, parts[0])
            if extra is None:
                return None
            moves.insert(0, (extra, top, givers[0]))
        return moves

    def _matched(
        self,
        keys: list[str | None],
        hops: list[tuple[int, int]],
        edges: Mapping[tuple[int, int], tuple[int, int, TopicPartition, frozenset[str]]],
        is_path: bool,
    ) -> dict[tuple[int, int], tuple[int, TopicPartition]]:
        """Per hop, a partition of the hop's rack set whose weight is nearest the first hop's
        (a cycle), or the lightest (a path: its end only takes)."""
        weight = self.weight
        assert weight is not None
        target = 0.0 if is_path else weight(edges[hops[0]][2])
        out: dict[tuple[int, int], tuple[int, TopicPartition]] = {}
        for h in hops:
            free, kept = self.pools[keys[h[0]]][edges[h][3]]
            best: tuple[float, int, TopicPartition] | None = None
            for n, (tp, i) in enumerate(chain(free.items(), kept.items())):
                if n >= _SCAN:
                    break
                d = abs(weight(tp) - target)
                if best is None or d < best[0]:
                    best = (d, i, tp)
            assert best is not None  # the edge's own pick is in the pool
            out[h] = (best[1], best[2])
        return out

    def _pick_any(self, i: int, exclude: TopicPartition) -> TopicPartition | None:
        """Any partition of member ``i`` but ``exclude``: one it did not own if it can, and with
        weights, the one nearest ``exclude``'s weight (what member ``i``'s taker gives on)."""
        target = None if self.weight is None else self.weight(exclude)
        first: tuple[float, TopicPartition] | None = None
        n = 0
        for bucket in self.buckets[i].values():
            for tp in bucket:
                if tp == exclude:
                    continue
                n += 1
                if target is None or self.weight is None:
                    if tp not in self.was_owned[i]:
                        return tp
                    if first is None:
                        first = (0.0, tp)
                    continue
                d = abs(self.weight(tp) - target)
                if first is None or d < first[0]:
                    first = (d, tp)
                if n >= _SCAN:
                    return first[1]
        return None if first is None else first[1]

    def _edge(
        self, r: str | None, t: str | None
    ) -> tuple[int, int, TopicPartition, frozenset[str]] | None:
        """The best partition rack ``r`` can pass to rack ``t``: ``(gain, its member, it, its
        rack set)``, one its member did not own before if there is one of the best gain."""
        best: tuple[int, int, frozenset[str]] | None = None
        for s, (free, kept) in self.pools[r].items():
            if not free and not kept:
                continue
            gain = (t is not None and t in s) - (r is not None and r in s)
            key = (gain, 1 if free else 0, s)
            if (
                best is None
                or key[:2] > best[:2]
                or (key[:2] == best[:2] and sorted(s) < sorted(best[2]))
            ):
                best = key
        if best is None:
            return None
        free, kept = self.pools[r][best[2]]
        tp, i = next(iter(free.items())) if free else next(iter(kept.items()))
        return best[0], i, tp, best[2]
