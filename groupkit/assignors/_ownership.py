"""Which owned claims an assignor may honour: the generation rules of KIP-341 / KIP-429.

Members report the partitions they own and the generation that gave them. Claims can be stale
(a member that was partitioned away still lists what it had) or contradictory (two members
list the same partition). The rules, applied per partition:

1. A claim counts only if the partition exists and the member still subscribes to its topic.
2. Among the claims on a partition, the one from the newest generation wins; a claim without a
   generation (``None``) is older than any claim with one.
3. If two or more claims tie on the newest generation, nobody owns the partition: it is
   assigned as if new, because there is no way to tell which claim is true.

The common case has no contested partition at all, so the first pass only records who claimed
each partition in a flat per-topic list and defers rule 2 and 3 to the few partitions claimed
twice. That keeps a million owned partitions to one tight loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from groupkit.types import MemberSubscription, TopicPartition

#: rank of a claim without a generation: below any real generation, Kafka's -1 included
_NO_GENERATION = -(2**63)


class Ownership(NamedTuple):
    """The outcome of the rules: who may keep what, and which partitions nobody owns."""

    #: per member index, the partitions it owns (sorted; the input's objects, not copies)
    owned: list[list[TopicPartition]]
    #: per topic, per partition: the index of the owning member, or -1 when nobody owns it
    owner_index: dict[str, list[int]]


def resolve_owned(
    partitions_per_topic: Mapping[str, int],
    member_ids: Sequence[str],
    members: Mapping[str, MemberSubscription],
    topics_of: Sequence[frozenset[str]],
) -> Ownership:
    """Apply the rules. ``topics_of[i]`` are the assignable topics of member ``member_ids[i]``."""
    claimed: dict[str, list[int]] = {t: [-1] * n for t, n in partitions_per_topic.items()}
    valid: list[list[TopicPartition]] = []
    contested: dict[TopicPartition, list[int]] = {}
    for i, mid in enumerate(member_ids):
        mine = topics_of[i]
        keep: list[TopicPartition] = []
        append = keep.append
        for tp in members[mid].owned:
            topic, p = tp
            slots = claimed.get(topic)
            if slots is None or topic not in mine or not 0 <= p < len(slots):
                continue
            prev = slots[p]
            if prev >= 0:
                contested.setdefault(tp, [prev]).append(i)
            else:
                slots[p] = i
            append(tp)
        valid.append(keep)
    if not contested:
        return Ownership(valid, claimed)

    ranks = [_NO_GENERATION if (g := members[mid].generation) is None else g for mid in member_ids]
    losers: dict[int, set[TopicPartition]] = {}
    for tp, claimants in contested.items():
        best = max(ranks[i] for i in claimants)
        top = [i for i in claimants if ranks[i] == best]
        winner = top[0] if len(top) == 1 else -1
        claimed[tp[0]][tp[1]] = winner
        for i in claimants:
            if i != winner:
                losers.setdefault(i, set()).add(tp)
    for i, lost in losers.items():
        valid[i] = [tp for tp in valid[i] if tp not in lost]
    return Ownership(valid, claimed)
