"""The sticky assignor (KIP-54): balance first, then keep partitions where they are.

1. **Balance.** With equal subscriptions the partition counts of any two members differ by at
   most one. In general no single move of a partition to another member subscribed to its
   topic can improve the balance (the general path does better: no chain of moves can).
2. **Stickiness.** Within that, as many owned partitions as possible stay with their owner.
   Which claims count is decided by the generation rules in ``_ownership``.

Two paths:

- **Quota fast path**, when every member subscribes to the same topics (the usual case, and
  the million-partition benchmark). With ``P`` partitions and ``N`` members, every member ends
  with ``q = P // N`` partitions and ``P % N`` of them with ``q + 1``. Steps:

  1. Members owning more than ``q`` compete for the ``P % N`` places at ``q + 1``; those owning
     the most get them (that keeps the most), ties by id. Everyone keeps up to its quota, its
     lowest partitions first, and releases the rest.
  2. The released and unowned partitions, sorted, are dealt round-robin to the members below
     their quota, so each member's new partitions spread over topics.

  This keeps the largest possible number of owned partitions, a member that releases never
  receives, so no two members swap, and a partition is only taken from a member that ends with
  at least as many partitions as the one receiving it. It touches no per-partition object
  except the ones it must return: kept partitions are the caller's own objects, new ones are
  built in bulk from slices.
- **General path** (``_balance``) for unequal subscriptions.

**Racks** (KIP-881), when members have a ``client.rack`` and the partitions' replica racks are
known: the plan above, then ``_racks.improve_locality``, which gives members partitions with a
replica in their rack by exchanges that leave the partition counts as they were (with equal
subscriptions, up to the most local placement those counts allow). So balance comes first,
then the rack, then stickiness, as in Kafka's sticky assignors: an owned partition moves for
its rack only when that makes more partitions local.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from itertools import repeat
from typing import NamedTuple

from groupkit.assignors._balance import balance_counts
from groupkit.assignors._ownership import Ownership, resolve_owned
from groupkit.assignors._racks import improve_locality
from groupkit.assignors.base import Assignor, ReplicaRacks
from groupkit.types import MemberSubscription, TopicPartition

# Builds a TopicPartition from a (topic, partition) tuple without the Python-level __new__ of
# NamedTuple: a third of the cost when a million are made at once.
_tp_from_pair = partial(tuple.__new__, TopicPartition)

#: Above this many partitions the cyclic garbage collector is paused during an assignment:
#: the objects made are acyclic tuples and lists, and a million allocations would otherwise
#: trigger dozens of useless full-generation scans.
_GC_PAUSE_THRESHOLD = 50_000


class Prepared(NamedTuple):
    """Input of a sticky plan in index form: members by sorted id, their topics and claims."""

    member_ids: list[str]
    topics_of: list[frozenset[str]]
    ownership: Ownership


def prepare(
    partitions_per_topic: Mapping[str, int], members: Mapping[str, MemberSubscription]
) -> Prepared:
    """Index the members (sorted by id) and apply the ownership rules."""
    member_ids = sorted(members)
    # Members usually share one subscription tuple; compute its assignable set once per value.
    cache: dict[tuple[str, ...], frozenset[str]] = {}
    topics_of = []
    for mid in member_ids:
        topics = members[mid].topics
        eff = cache.get(topics)
        if eff is None:
            eff = cache[topics] = frozenset(t for t in topics if t in partitions_per_topic)
        topics_of.append(eff)
    ownership = resolve_owned(partitions_per_topic, member_ids, members, topics_of)
    return Prepared(member_ids, topics_of, ownership)


def sticky_plan(
    partitions_per_topic: Mapping[str, int], prepared: Prepared
) -> list[list[TopicPartition]]:
    """The sticky assignment, per member index (lists may be unsorted within a member)."""
    topics_of = prepared.topics_of
    if not topics_of:
        return []
    if len(set(topics_of)) == 1:
        return _quota_plan(partitions_per_topic, sorted(topics_of[0]), prepared.ownership)
    origin: dict[tuple[str, int], int] = {
        tp: i for i, tps in enumerate(prepared.ownership.owned) for tp in tps
    }
    return balance_counts(partitions_per_topic, topics_of, prepared.ownership.owned, origin)


def _quota_plan(
    partitions_per_topic: Mapping[str, int], topics: list[str], ownership: Ownership
) -> list[list[TopicPartition]]:
    owned = ownership.owned
    n_members = len(owned)
    total = sum(partitions_per_topic[t] for t in topics)
    quota, extra = divmod(total, n_members)

    # 1. Keep. Places at quota + 1 go to the members owning the most.
    keep = [0] * n_members
    places = extra
    for i in sorted(range(n_members), key=lambda i: (-len(owned[i]), i)):
        n = len(owned[i])
        if n > quota and places > 0:
            keep[i] = quota + 1
            places -= 1
        else:
            keep[i] = min(n, quota)
    released: list[TopicPartition] = []
    for i in range(n_members):
        if keep[i] < len(owned[i]):
            released.extend(owned[i][keep[i] :])

    # Unowned partitions, found in C: list.index skips over owned slots without a Python loop.
    free: list[TopicPartition] = []
    for t in topics:
        slots = ownership.owner_index[t]
        n_free = slots.count(-1)
        if n_free == len(slots):
            free.extend(map(_tp_from_pair, zip(repeat(t, n_free), range(n_free), strict=True)))
        elif n_free:
            idx = []
            at = -1
            for _ in range(n_free):
                at = slots.index(-1, at + 1)
                idx.append(at)
            free.extend(map(_tp_from_pair, zip(repeat(t, n_free), idx, strict=True)))
    if released:
        free.extend(released)
        free.sort()

    # 2. Deal. Everyone below quota is filled to it; the places left at quota + 1 go to
    # members at quota, by id.
    need = [max(0, quota - k) for k in keep]
    for i in range(n_members):
        if places == 0:
            break
        if keep[i] <= quota:
            need[i] += 1
            places -= 1
    result = [owned[i][: keep[i]] for i in range(n_members)]
    _deal(free, need, result)
    return result


def _deal(free: list[TopicPartition], need: list[int], result: list[list[TopicPartition]]) -> None:
    """Deal ``free`` round-robin to members by ``need``, in blocks of equal-sized rounds.

    In round ``j`` every member needing more than ``j`` takes one partition. Consecutive
    rounds with the same members form a block, and a member's share of a block is one slice
    with a step, so the work is per block, not per partition.
    """
    takers = sorted((i for i in range(len(need)) if need[i] > 0), key=lambda i: (-need[i], i))
    k = len(takers)
    pos = 0
    done = 0  # rounds dealt so far
    while k:
        rounds = need[takers[k - 1]] - done
        block = free[pos : pos + rounds * k]
        for j in range(k):
            result[takers[j]].extend(block[j::k])
        pos += rounds * k
        done += rounds
        while k and need[takers[k - 1]] <= done:
            k -= 1


@contextmanager
def gc_paused(size: int) -> Iterator[None]:
    """Pause the cyclic collector for large assignments (see ``_GC_PAUSE_THRESHOLD``)."""
    if size < _GC_PAUSE_THRESHOLD or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class StickyAssignor(Assignor):
    """KIP-54: the most balanced assignment that moves the fewest owned partitions."""

    name = "sticky"
    uses_racks = True

    def _assign(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],
        lags: dict[TopicPartition, int],
    ) -> Mapping[str, list[TopicPartition]]:
        with gc_paused(sum(partitions_per_topic.values())):
            prepared = prepare(partitions_per_topic, members)
            plan = sticky_plan(partitions_per_topic, prepared)
            return dict(zip(prepared.member_ids, plan, strict=True))

    def _assign_racks(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],
        lags: dict[TopicPartition, int],
        racks: ReplicaRacks,
    ) -> Mapping[str, list[TopicPartition]]:
        with gc_paused(sum(partitions_per_topic.values())):
            prepared = prepare(partitions_per_topic, members)
            plan = sticky_plan(partitions_per_topic, prepared)
            ids = prepared.member_ids
            plan = improve_locality(plan, [members[m].rack for m in ids], prepared.topics_of,
                                    racks, prepared.ownership.owned)  # fmt: skip
            return dict(zip(ids, plan, strict=True))
