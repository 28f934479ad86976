"""One invariant checker for assignments, shared by the example tests, the property tests, the
protocol-core tests and the benchmarks.

Every ``check_*`` function returns a list of violations, each a one-line human-readable string
(empty when all is well); ``assert_valid`` runs the chosen checks and raises ``AssertionError``
listing all of them. The checks, and what they guarantee:

- ``check_complete``: every member is present with a sorted list; every partition of a topic
  some member subscribes to is assigned exactly once, and only to a member subscribed to its
  topic; nothing else is assigned. Holds for every assignor. Its core, ``check_owned_once`` (no
  partition held twice, every expected one held), is also the multi-process harness's check of
  a running group at one moment (groupkit.dev.harness).
- ``check_balanced``: the strong balance rule of KIP-54: no single move of a partition to
  another member subscribed to its topic would make the counts more even (a member holding a
  partition of topic ``t`` has at most one more partition than any subscriber of ``t``). With
  equal subscriptions this is "counts differ by at most one". Holds for sticky, balanced, fair
  on equal subscriptions; not for range, roundrobin or lag, which balance per topic or not at all.
- ``check_sticky``: no owned partition moved unless balance required it: a partition taken
  from its (still subscribed) owner went to a member that ends with no more partitions than the
  owner. Plus ``check_no_swaps``: no two members got each other's partitions.

The previous owner of a partition is decided here by an independent, deliberately simple
implementation of the generation rules (``previous_owners``), so the checker does not trust
the code it checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from groupkit.types import MemberSubscription, TopicPartition

Assignmentish = Mapping[str, Sequence[tuple[str, int]]]


def previous_owners(
    partitions_per_topic: Mapping[str, int], members: Mapping[str, MemberSubscription]
) -> dict[TopicPartition, str]:
    """Who owns what before the rebalance, under the generation rules.

    A claim counts if the partition exists and its member still subscribes to the topic; the
    newest generation wins (``None`` is older than any number); a tie for newest means nobody.
    """
    claims: dict[TopicPartition, list[tuple[float, str]]] = {}
    for mid, sub in members.items():
        gen = float("-inf") if sub.generation is None else float(sub.generation)
        for t, p in sub.owned:
            if t in sub.topics and 0 <= p < partitions_per_topic.get(t, 0):
                claims.setdefault(TopicPartition(t, p), []).append((gen, mid))
    out = {}
    for tp, cs in claims.items():
        newest = max(g for g, _ in cs)
        top = [m for g, m in cs if g == newest]
        if len(top) == 1:
            out[tp] = top[0]
    return out


def check_complete(
    partitions_per_topic: Mapping[str, int],
    members: Mapping[str, MemberSubscription],
    assignment: Assignmentish,
) -> list[str]:
    """Every subscribed partition exactly once, to a subscriber; every member present, sorted."""
    out = []
    missing = sorted(set(members) - set(assignment))
    extra = sorted(set(assignment) - set(members))
    if missing:
        out.append(f"members missing from the assignment: {missing}")
    if extra:
        out.append(f"assignment names members that are not in the group: {extra}")
    existing: dict[str, list[tuple[str, int]]] = {}
    for mid, tps in sorted(assignment.items()):
        if list(tps) != sorted(tps):
            out.append(f"{mid}: partitions are not sorted")
        topics = members[mid].topics if mid in members else ()
        existing[mid] = []
        for t, p in tps:
            if not 0 <= p < partitions_per_topic.get(t, 0):
                out.append(f"{mid} holds {t}-{p}, which does not exist")
                continue
            if t not in topics:
                out.append(f"{mid} holds {t}-{p} but does not subscribe to {t}")
            existing[mid].append((t, p))
    subscribed = {t for s in members.values() for t in s.topics}
    every = [(t, p) for t in sorted(subscribed) for p in range(partitions_per_topic.get(t, 0))]
    return out + check_owned_once(existing, every)


def check_owned_once(
    holders: Mapping[str, Iterable[tuple[str, int]]], partitions: Iterable[tuple[str, int]]
) -> list[str]:
    """No partition held by two members, and each of ``partitions`` held by one: of an
    assignment (``check_complete``), or of the members of a running group at one moment
    (groupkit.dev.harness, where the same partition held twice breaks the safety invariant)."""
    out = []
    holder: dict[tuple[str, int], str] = {}
    for mid, tps in sorted(holders.items()):
        for t, p in tps:
            if (t, p) in holder:
                out.append(f"{t}-{p} is assigned twice: to {holder[(t, p)]} and {mid}")
            holder[(t, p)] = mid
    for t, p in partitions:
        if (t, p) not in holder:
            out.append(f"{t}-{p} is subscribed but not assigned")
    return out


def check_balanced(
    partitions_per_topic: Mapping[str, int],
    members: Mapping[str, MemberSubscription],
    assignment: Assignmentish,
) -> list[str]:
    """The strong balance rule: no single move to a subscribed member evens the counts."""
    count = {m: len(assignment.get(m, ())) for m in members}
    holders: dict[str, set[str]] = {}
    for mid, tps in assignment.items():
        for t, _ in tps:
            holders.setdefault(t, set()).add(mid)
    out = []
    for t in sorted(holders):
        subs = [m for m, s in members.items() if t in s.topics]
        if not subs:
            continue
        light = min(subs, key=lambda m: (count[m], m))
        heavy = max(holders[t], key=lambda m: (count.get(m, 0), m))
        if count.get(heavy, 0) > count[light] + 1:
            out.append(
                f"unbalanced: {heavy} holds {count.get(heavy, 0)} partitions (some of {t}), "
                f"{light} subscribes to {t} and holds {count[light]}"
            )
    return out


def moved_partitions(
    partitions_per_topic: Mapping[str, int],
    members: Mapping[str, MemberSubscription],
    assignment: Assignmentish,
) -> list[tuple[TopicPartition, str, str]]:
    """``(partition, previous owner, new holder)`` for every owned partition that changed hands.

    Partitions whose owner left the group or dropped the topic are not counted: they had to move.
    """
    holder = {(t, p): m for m, tps in assignment.items() for t, p in tps}
    out = []
    for tp, owner in sorted(previous_owners(partitions_per_topic, members).items()):
        now = holder.get(tp)
        if now is not None and now != owner:
            out.append((tp, owner, now))
    return out


def check_no_swaps(
    partitions_per_topic: Mapping[str, int],
    members: Mapping[str, MemberSubscription],
    assignment: Assignmentish,
) -> list[str]:
    """No two members received each other's owned partitions."""
    pairs: dict[tuple[str, str], TopicPartition] = {}
    for tp, owner, now in moved_partitions(partitions_per_topic, members, assignment):
        pairs.setdefault((owner, now), tp)
    return [
        f"swap: {a} gave {tp} to {b}, and {b} gave {pairs[(b, a)]} to {a}"
        for (a, b), tp in sorted(pairs.items())
        if a < b and (b, a) in pairs
    ]


def check_sticky(
    partitions_per_topic: Mapping[str, int],
    members: Mapping[str, MemberSubscription],
    assignment: Assignmentish,
) -> list[str]:
    """Owned partitions only moved when balance required it, and no two members swapped.

    If a partition went from its owner ``a`` to ``b`` while ``b`` ends with more partitions
    than ``a``, giving it back to ``a`` would have balanced the counts at least as well.
    """
    count = {m: len(tps) for m, tps in assignment.items()}
    out = [
        f"{tp} moved from {owner} ({count.get(owner, 0)} partitions) to {now} "
        f"({count.get(now, 0)}) although balance did not require it"
        for tp, owner, now in moved_partitions(partitions_per_topic, members, assignment)
        if count.get(now, 0) > count.get(owner, 0)
    ]
    return out + check_no_swaps(partitions_per_topic, members, assignment)


def violations(
    partitions_per_topic: Mapping[str, int],
    members: Mapping[str, MemberSubscription],
    assignment: Assignmentish,
    *,
    balanced: bool = True,
    sticky: bool = False,
) -> list[str]:
    """All violations of the chosen checks (``check_complete`` always runs)."""
    out = check_complete(partitions_per_topic, members, assignment)
    if balanced:
        out += check_balanced(partitions_per_topic, members, assignment)
    if sticky:
        out += check_sticky(partitions_per_topic, members, assignment)
    return out


def assert_valid(
    partitions_per_topic: Mapping[str, int],
    members: Mapping[str, MemberSubscription],
    assignment: Assignmentish,
    *,
    balanced: bool = True,
    sticky: bool = False,
) -> None:
    """Raise ``AssertionError`` listing every violation of the chosen checks."""
    found = violations(partitions_per_topic, members, assignment, balanced=balanced, sticky=sticky)
    if found:
        shown = found[:20] + ([f"... and {len(found) - 20} more"] if len(found) > 20 else [])
        raise AssertionError("invalid assignment:\n  " + "\n  ".join(shown))


def member_loads(
    assignment: Assignmentish,
    lags: Mapping[TopicPartition, int],
    capacity: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Each member's total lag (divided by its capacity when given): its time to drain."""
    cap = capacity or {}
    return {
        m: sum(lags.get(TopicPartition(t, p), 0) for t, p in tps) / cap.get(m, 1.0)
        for m, tps in assignment.items()
    }


def lag_lower_bound(lags: Iterable[int], n_members: int) -> float:
    """``max(total / members, largest partition)``: no assignment's largest load is lower."""
    values = list(lags)
    if not values or n_members <= 0:
        return 0.0
    return max(sum(values) / n_members, float(max(values)))


def rack_local(
    assignment: Assignmentish,
    members: Mapping[str, MemberSubscription],
    racks: Mapping[str, Sequence[Iterable[str]]],
) -> int:
    """How many assigned partitions have a replica in their member's rack (KIP-881)."""
    sets = {t: [frozenset(rs) for rs in per] for t, per in racks.items()}
    n = 0
    for mid, tps in assignment.items():
        rack = members[mid].rack
        if not rack:
            continue
        for t, p in tps:
            per = sets.get(t, [])
            n += p < len(per) and rack in per[p]
    return n
