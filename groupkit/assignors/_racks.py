"""Rack awareness (KIP-881): read from a replica in the member's own rack, never at balance's cost.

A partition is *rack-local* to a member when the member has a rack (``client.rack``) and one
of the partition's replicas is on a broker of that rack: the member can then fetch from that
replica (KIP-392) instead of across racks. Kafka's assignors order their goals as balance
first, then rack, then stickiness, and so do ours.

``improve_locality`` takes a plan that is already balanced and sticky and raises its number of
rack-local partitions by moves that leave every member's partition count where it was, so the
balance is exactly the rack-blind plan's:

1. **Swap.** Member ``a`` holds ``p``, not local to it; member ``b`` of a rack that has a
   replica of ``p`` gives ``a`` one of its partitions ``q`` in return. The swap is made when it
   adds local partitions: ``p`` becomes local, and ``q`` either was not local to ``b`` or is
   local to ``a`` as well. Among the ``q`` that do, one that becomes local at ``a`` too is taken
   first (two more local), then one ``b`` did not own before the plan (keeping ``b``'s own).
2. **Neutral move.** If ``b`` holds one partition fewer than ``a``, ``p`` moves alone: the two
   counts only trade places.

Every step adds at least one local partition, so the loop ends, and the result is never less
local than the plan it started from. It is a local search, not an optimum: a gain that needs a
cycle through three members is not looked for.

Each member's partitions are bucketed by their set of replica racks: the racks of a cluster
are few, so are the distinct sets, and finding ``q`` is a look at a few buckets, not a scan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from groupkit.assignors.base import ReplicaRacks
from groupkit.types import MemberSubscription, TopicPartition

_NONE: frozenset[str] = frozenset()

#: ``accept(a, p, b, q)``: may ``p`` go from member ``a`` to ``b`` and ``q`` (``None``: nothing)
#: from ``b`` to ``a``? Lets an assignor with goals beyond counts (``balanced``'s lag) veto.
#: Asked of candidates that may not be taken: it must not change anything.
Accept = Callable[[int, TopicPartition, int, TopicPartition | None], bool]
#: ``moved(a, p, b, q)``: told of each step made, in the same terms
Moved = Callable[[int, TopicPartition, int, TopicPartition | None], None]


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
) -> list[list[TopicPartition]]:
    """``held`` (per member index) with more rack-local partitions, counts unchanged.

    ``owned[i]``: what member ``i`` owned before the plan, kept where a choice allows.
    """
    n = len(held)
    mr = [r or None for r in member_racks]
    by_rack: dict[str, list[int]] = {}
    for i, r in enumerate(mr):
        if r is not None:
            by_rack.setdefault(r, []).append(i)
    if not by_rack:
        return held
    was_owned = [set(owned[i]) if i < len(owned) else set() for i in range(n)]
    count = [len(h) for h in held]
    where: dict[TopicPartition, int] = {}
    # buckets[i][S]: the partitions member i holds whose replica racks are S (an ordered set)
    buckets: list[dict[frozenset[str], dict[TopicPartition, None]]] = [{} for _ in range(n)]
    for i, tps in enumerate(held):
        for tp in tps:
            where[tp] = i
            buckets[i].setdefault(replica_racks_of(racks, tp), {})[tp] = None

    def move(tp: TopicPartition, src: int, dst: int) -> None:
        s = replica_racks_of(racks, tp)
        del buckets[src][s][tp]
        buckets[dst].setdefault(s, {})[tp] = None
        where[tp] = dst
        count[src] -= 1
        count[dst] += 1

    def best_return(a: int, b: int) -> tuple[int, TopicPartition | None]:
        """The best ``q`` for ``b`` to give ``a`` back, and how many locals it adds with ``p``."""
        ra, rb = mr[a], mr[b]
        best: tuple[int, int, TopicPartition | None] = (0, 0, None)
        for s in sorted(buckets[b], key=sorted):
            gain = 1 + (ra is not None and ra in s) - (rb is not None and rb in s)
            if gain < best[0] or gain <= 0:
                continue
            for q in buckets[b][s]:
                if q[0] not in topics_of[a]:
                    continue
                keeps = 0 if q in was_owned[b] else 1
                if (gain, keeps) > best[:2]:
                    best = (gain, keeps, q)
                if keeps:
                    break
        return best[0], best[2]

    changed = True
    while changed:
        changed = False
        for p in sorted(where):
            a = where[p]
            reps = replica_racks_of(racks, p)
            if mr[a] in reps or not reps:
                continue
            choice: tuple[int, int, TopicPartition | None] = (0, -1, None)  # (gain, b, q)
            for b in [b for r in sorted(reps & by_rack.keys()) for b in by_rack[r]]:
                if b == a or p[0] not in topics_of[b]:
                    continue
                gain, q = best_return(a, b)
                if q is not None and gain > choice[0] and (accept is None or accept(a, p, b, q)):
                    choice = (gain, b, q)
                elif (choice[0] < 1 and count[b] + 1 == count[a]
                      and (accept is None or accept(a, p, b, None))):  # fmt: skip
                    choice = (1, b, None)
                if choice[0] == 2:
                    break
            if choice[0] == 0:
                continue
            _, b, q = choice
            move(p, a, b)
            if q is not None:
                move(q, b, a)
            if moved is not None:
                moved(a, p, b, q)
            changed = True
    out: list[list[TopicPartition]] = [[] for _ in range(n)]
    for tp, i in where.items():
        out[i].append(tp)
    return out
