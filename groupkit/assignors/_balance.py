"""Count balancing for unequal subscriptions, keeping as many partitions with their owners.

This is the general path of the sticky assignor (and the count repair of ``balanced``). It
works on any subscription pattern; when every member subscribes to the same topics the sticky
assignor takes its quota fast path instead.

The steps:

1. **Keep.** Every partition whose claim survived the ownership rules stays with its owner.
2. **Fill.** The remaining partitions, most constrained topic first (fewest subscribers, as
   KIP-49 teaches), each go to the eligible member with the fewest partitions, ties by id.
   One lazy heap per distinct subscriber set finds that member in O(log n).
3. **Balance.** While some member ``s`` can pass one partition along a chain of members
   ``s -> m1 -> ... -> r`` (each hop a partition the giver holds of a topic the taker
   subscribes to) to a member ``r`` with at least two fewer partitions than ``s``, shift one
   partition along the shortest such chain. Every shift lowers the sum of squared counts, so
   the loop ends, and it ends exactly when no chain exists: the count vector is then the most
   balanced one possible, which in particular satisfies KIP-54's rule that no single move to
   an eligible member improves the balance. (A single move is a chain of length one; Kafka
   only looks for those, so it can stop at a worse balance.)
4. **Return neutral moves.** A partition taken from its owner ``a`` that now sits with a
   member holding exactly one more partition than ``a`` can go back: the counts only swap
   places, so the balance is the same and one partition fewer moves.
5. **Undo swaps.** If ``a``'s partition went to ``b`` while ``b``'s went to ``a``, both go
   home; counts do not change.

Which partition a giver hands over: first one the taker owned (it goes home), then one the giver
did not own (it was just placed there, moving it costs no stickiness), then its highest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from functools import partial

from groupkit.types import TopicPartition

# Builds a TopicPartition from a (topic, partition) tuple without the Python-level __new__ of
# NamedTuple: a third of the cost when many are made at once.
_tp_from_pair = partial(tuple.__new__, TopicPartition)


class CountBalancer:
    """Mutable working state of one general-path assignment. Not shared, not reused."""

    def __init__(
        self,
        partitions_per_topic: Mapping[str, int],
        topics_of: Sequence[frozenset[str]],
        held: Sequence[Sequence[TopicPartition]],
        origin: Mapping[tuple[str, int], int],
    ) -> None:
        """Start from ``held`` (per member index); ``origin`` maps owned partitions to owners."""
        n = len(topics_of)
        self.counts_per_topic = dict(partitions_per_topic)
        self.topics_of = topics_of
        self.origin = origin
        self.subscribers: dict[str, list[int]] = {t: [] for t in sorted(partitions_per_topic)}
        for i, ts in enumerate(topics_of):
            for t in ts:
                if t in self.subscribers:
                    self.subscribers[t].append(i)
        self.held: list[dict[str, list[int]]] = [{} for _ in range(n)]
        # Where each owned partition is now, kept up to date by every move, so the stickiness
        # repairs look only at owned partitions.
        self.where: dict[tuple[str, int], int] = dict(origin)
        self.count = [0] * n
        for i, tps in enumerate(held):
            mine = self.held[i]
            for t, p in tps:
                mine.setdefault(t, []).append(p)
            self.count[i] = len(tps)

    # -- 2. fill -----------------------------------------------------------------------------

    def fill(self) -> None:
        """Give every partition nobody holds to its least loaded eligible member."""
        taken: dict[str, set[int]] = {}
        for mine in self.held:
            for t, ps in mine.items():
                taken.setdefault(t, set()).update(ps)
        count = self.count
        order = sorted(self.subscribers, key=lambda t: (len(self.subscribers[t]), t))
        for t in order:
            subs = self.subscribers[t]
            if not subs:
                continue
            have = taken.get(t)
            n = self.counts_per_topic[t]
            free = [p for p in range(n) if p not in have] if have else list(range(n))
            if not free:
                continue
            takers = _least_loaded_first(subs, count, len(free))
            for i, p in zip(takers, free, strict=True):
                got = self.held[i].get(t)
                if got is None:
                    self.held[i][t] = [p]
                else:
                    got.append(p)
                count[i] += 1

    # -- 3. balance --------------------------------------------------------------------------

    def balance(self) -> None:
        """Shift partitions along chains until no chain can improve the balance."""
        count = self.count
        while True:
            low = min(count, default=0)
            shifted = False
            for s in sorted(range(len(count)), key=lambda i: (-count[i], i)):
                if count[s] < low + 2:
                    break
                chain = self._find_chain(s)
                if chain:
                    for giver, topic, taker in chain:
                        self._move(giver, topic, taker)
                    shifted = True
                    break
            if not shifted:
                return

    def _find_chain(self, s: int) -> list[tuple[int, str, int]]:
        """Shortest chain from ``s`` to a member with at most ``count[s] - 2`` partitions."""
        count = self.count
        target = count[s] - 2
        parent: dict[int, tuple[int, str]] = {s: (-1, "")}
        # A topic expanded once has enqueued all its subscribers; expanding it again from
        # another member could only find longer chains, so each topic is expanded once.
        seen_topics: set[str] = set()
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for t in sorted(self.held[u]):
                if t in seen_topics:
                    continue
                seen_topics.add(t)
                for r in self.subscribers[t]:
                    if r in parent:
                        continue
                    parent[r] = (u, t)
                    if count[r] <= target:
                        chain = []
                        while r != s:
                            u2, t2 = parent[r]
                            chain.append((u2, t2, r))
                            r = u2
                        chain.reverse()
                        return chain
                    queue.append(r)
        return []

    def _move(self, giver: int, topic: str, taker: int) -> None:
        ps = self.held[giver][topic]
        origin = self.origin
        best = 0
        best_key = (2, 0)
        for k, p in enumerate(ps):
            o = origin.get((topic, p), -1)
            key = (0 if o == taker else 1 if o != giver else 2, -p)
            if key < best_key:
                best, best_key = k, key
        p = ps.pop(best)
        if not ps:
            del self.held[giver][topic]
        self.held[taker].setdefault(topic, []).append(p)
        self.count[giver] -= 1
        self.count[taker] += 1
        if (topic, p) in self.where:
            self.where[(topic, p)] = taker

    # -- 4. and 5. stickiness repairs --------------------------------------------------------

    def return_neutral_moves(self) -> None:
        """Send a moved partition home when that only swaps two members' counts."""
        changed = True
        while changed:
            changed = False
            for (t, p), holder, owner in self._moved():
                if self.count[holder] == self.count[owner] + 1:
                    self._move_exact(holder, t, p, owner)
                    changed = True

    def undo_swaps(self) -> None:
        """Where two members got each other's partitions, give both back."""
        by_pair: dict[tuple[int, int], list[tuple[str, int]]] = {}
        for tp, holder, owner in self._moved():
            by_pair.setdefault((owner, holder), []).append(tp)
        for (a, b), there in sorted(by_pair.items()):
            back = by_pair.get((b, a))
            if a > b or not back:
                continue
            for (t1, p1), (t2, p2) in zip(there, back, strict=False):
                self._move_exact(b, t1, p1, a)
                self._move_exact(a, t2, p2, b)

    def _moved(self) -> list[tuple[tuple[str, int], int, int]]:
        """``((topic, partition), holder, owner)`` of every partition away from its owner."""
        where = self.where
        return sorted((tp, where[tp], o) for tp, o in self.origin.items() if where[tp] != o)

    def _move_exact(self, giver: int, topic: str, p: int, taker: int) -> None:
        ps = self.held[giver][topic]
        ps.remove(p)
        if not ps:
            del self.held[giver][topic]
        self.held[taker].setdefault(topic, []).append(p)
        self.count[giver] -= 1
        self.count[taker] += 1
        if (topic, p) in self.where:
            self.where[(topic, p)] = taker

    # -- result ------------------------------------------------------------------------------

    def result(self) -> list[list[TopicPartition]]:
        """Per member index, its partitions (unsorted: ``Assignor.assign`` sorts them)."""
        return [
            list(map(_tp_from_pair, [(t, p) for t, ps in mine.items() for p in ps]))
            for mine in self.held
        ]


def _least_loaded_first(subs: Sequence[int], count: Sequence[int], n: int) -> list[int]:
    """Who takes each of ``n`` partitions when each goes to the least loaded, ties by index.

    That sequence is the ``n`` smallest "slots" ``(level, member)``, where a member with ``c``
    partitions offers the levels ``c, c + 1, ...``: level by level, every member already at or
    below the level takes one, in index order. Computed per level, not per partition.
    """
    by_level = sorted(subs, key=lambda i: (count[i], i))
    out: list[int] = []
    level = count[by_level[0]]
    k = 0  # members at or below the current level, a prefix of by_level
    while len(out) < n:
        while k < len(by_level) and count[by_level[k]] <= level:
            k += 1
        # Members at or below this level, in index order (subs is sorted by index).
        at_level = list(subs) if k == len(by_level) else sorted(by_level[:k])
        out.extend(at_level[: n - len(out)])
        level += 1
    return out


def balance_counts(
    partitions_per_topic: Mapping[str, int],
    topics_of: Sequence[frozenset[str]],
    held: Sequence[Sequence[TopicPartition]],
    origin: Mapping[tuple[str, int], int],
) -> list[list[TopicPartition]]:
    """Run all five steps from ``held`` and return the partitions per member index."""
    b = CountBalancer(partitions_per_topic, topics_of, held, origin)
    b.fill()
    b.balance()
    b.return_neutral_moves()
    b.undo_swaps()
    return b.result()
