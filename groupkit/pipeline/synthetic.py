"""Synthetic telemetry: realistic group histories, to measure the pipeline at scale.

Each group is simulated on its own, deterministically from ``(seed, group index)``, so Spark
executors generate their share in parallel and a plain Python process generates the very same
records. What a history has, and why:

1. **Skewed partitions.** 1–4 topics of 4–32 partitions. Produce rates per partition are
   log-normal, and about one partition in ten is hot (3–8× its topic's base rate): the skew
   that makes count-balancing assignors pile lag onto one member.
2. **Bursts.** Now and then a topic's produce rate jumps 3–10× for 3–10 intervals.
3. **Moving hot spots.** In half the groups one partition takes 4–10× its rate on top, and
   every 8–20 intervals the hot spot moves to another partition (a key that goes viral, then
   the next): an assignment placed for yesterday's load is wrong today.
4. **Members joining and leaving.** 2–8 members to start; each interval a member may leave
   (3 %) or one may join (3 %). In a third of the groups some members subscribe to only part
   of the topics. Members differ in capacity (records/s), which decides how fast they drain.
5. **The group's real behaviour.** The group runs one real assignor (``range``,
   ``roundrobin``, ``sticky`` or ``cooperative-sticky``, the common defaults) through
   ``groupkit.assignors`` whenever its membership changes. Each member consumes up to its
   capacity per interval, spread over its partitions in proportion to their backlog; the
   snapshot reports committed offsets, the lag, the owners and the members' rates and
   processed records computed exactly as the telemetry publisher computes them
   (committed-offset deltas).

The records are the telemetry topic's JSON (:mod:`groupkit.runtime.telemetry`), snapshots and
one ``rebalance`` event per membership change.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from groupkit.assignors import get_assignor
from groupkit.assignors.invariants import moved_partitions
from groupkit.protocol.vocab import DecisionReason
from groupkit.runtime.telemetry import (
    LagSnapshot,
    MemberInfo,
    RebalanceEvent,
    TopicOffsets,
    member_processed,
)
from groupkit.types import MemberSubscription, TopicPartition

REAL_ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")
#: 2026-01-01T00:00:00Z: synthetic histories start here, one interval apart
EPOCH_MS = 1_767_225_600_000


def group_name(index: int) -> str:
    return f"synthetic-{index:06d}"


def synthetic_history(
    index: int, snapshots: int = 100, seed: int = 0, interval_ms: int = 10_000
) -> Iterator[tuple[str, bytes]]:
    """``(group, telemetry JSON)`` records of one synthetic group, in time order."""
    rng = random.Random(f"groupkit-synthetic:{seed}:{index}")
    group = group_name(index)
    dt = interval_ms / 1000
    counts = {f"t{j}": rng.choice((4, 6, 8, 12, 16, 24, 32)) for j in range(rng.randint(1, 4))}
    base = {t: rng.uniform(20, 400) for t in counts}
    rate = {
        TopicPartition(t, p): base[t]
        * rng.lognormvariate(0, 0.6)
        * (rng.uniform(3, 8) if rng.random() < 0.1 else 1.0)
        for t, n in counts.items()
        for p in range(n)
    }
    total_rate = sum(rate.values())
    topics = sorted(counts)
    parts = sorted(rate)
    # the moving hot spot: (partition, extra factor, intervals until it moves), or None
    spot: tuple[TopicPartition, float, int] | None = None
    if rng.random() < 0.5:
        spot = (rng.choice(parts), rng.uniform(4, 10), rng.randint(8, 20))
    partial = rng.random() < 1 / 3 and len(topics) > 1
    real = get_assignor(rng.choice(REAL_ASSIGNORS))
    protocol = (
        "cooperative" if real.name == "cooperative-sticky" else rng.choice(("eager", "cooperative"))
    )

    serial = 0

    members: dict[str, MemberInfo] = {}
    capacity: dict[str, float] = {}

    def join(n_expected: int) -> None:
        nonlocal serial
        serial += 1
        subs = tuple(topics)
        if partial and serial > 1 and rng.random() < 0.5:
            subs = tuple(sorted(rng.sample(topics, rng.randint(1, len(topics) - 1))))
        m = f"{group}-m{serial:03d}"
        members[m] = MemberInfo(subs, None, None, None)
        # In all about 1.8x the mean produce rate, unevenly spread: bursts build lag.
        capacity[m] = total_rate * 1.8 / n_expected * rng.uniform(0.6, 1.5)

    n0 = rng.randint(2, 8)
    for _ in range(n0):
        join(n0)
    end = {tp: rng.randint(0, 10_000) for tp in rate}
    committed = {tp: max(0, e - int(rate[tp] * rng.uniform(0, 3) * dt)) for tp, e in end.items()}
    burst: dict[str, tuple[float, int]] = {}  # topic -> (factor, intervals left)
    assignment: dict[str, list[TopicPartition]] = {}
    generation = 0
    key: object = None
    prev: dict[TopicPartition, tuple[str | None, int | None]] = {}
    for i in range(snapshots):
        ts = EPOCH_MS + i * interval_ms
        # 1. membership changes
        if i > 0 and len(members) > 1 and rng.random() < 0.03:
            gone = rng.choice(sorted(members))
            del members[gone]
        if i > 0 and len(members) < 12 and rng.random() < 0.03:
            join(len(members) + 1)
        # 2. the real group rebalances when its membership changed
        if key != tuple(sorted(members)):
            key = tuple(sorted(members))
            subs = {
                m: MemberSubscription(
                    info.topics,
                    owned=assignment.get(m, ()),
                    generation=generation or None,
                )
                for m, info in members.items()
            }
            new = real.assign(counts, subs)
            moved = len(moved_partitions(counts, subs, new))
            held = sum(len(assignment.get(m, ())) for m in members)
            generation += 1 if protocol == "eager" or not moved else 2
            assignment = new
            if i > 0:
                event = RebalanceEvent(
                    group=group,
                    ts_ms=ts - rng.randint(100, 2000),
                    leader=min(members),
                    reason=DecisionReason.MEMBERSHIP_CHANGED,
                    protocol=protocol,
                    assignor=real.name,
                    first_generation=generation
                    - (1 if protocol == "eager" or not moved else 2)
                    + 1,
                    generation=generation,
                    generations=1 if protocol == "eager" or not moved else 2,
                    moved=moved,
                    revoked=held if protocol == "eager" else moved,
                    duration_ms=round(rng.uniform(20, 400), 3),
                    outcome="completed",
                )
                yield group, event.to_json()
        owner = {tp: m for m, tps in assignment.items() for tp in tps}
        # 3. an interval of producing and consuming
        for t in topics:
            if t in burst:
                f, left = burst[t]
                burst[t] = (f, left - 1)
                if left <= 1:
                    del burst[t]
            elif rng.random() < 0.04:
                burst[t] = (rng.uniform(3, 10), rng.randint(3, 10))
        if spot is not None:
            hot, factor, left = spot
            spot = (hot, factor, left - 1) if left > 1 else (
                rng.choice(parts), rng.uniform(4, 10), rng.randint(8, 20))  # fmt: skip
        if i > 0:
            for tp, r in rate.items():
                f = burst[tp.topic][0] if tp.topic in burst else 1.0
                if spot is not None and tp == spot[0]:
                    f += spot[1]
                end[tp] += int(r * f * dt * rng.uniform(0.7, 1.3))
            for m, tps in assignment.items():
                backlog = {tp: end[tp] - committed[tp] for tp in tps}
                total = sum(backlog.values())
                budget = capacity[m] * dt * rng.uniform(0.85, 1.0)
                if total <= 0:
                    continue
                share = min(1.0, budget / total)
                for tp, b in backlog.items():
                    committed[tp] += int(b * share)
        cur: dict[TopicPartition, tuple[str | None, int | None]] = {
            tp: (owner.get(tp), committed[tp]) for tp in rate
        }
        processed = member_processed(prev, cur) if prev else {}
        prev = cur
        snap = LagSnapshot(
            group=group,
            ts_ms=ts,
            leader=min(members),
            generation=generation,
            protocol=protocol,
            assignor=real.name,
            members={
                m: MemberInfo(
                    info.topics,
                    None if m not in processed else round(processed[m] / dt, 3),
                    None,
                    None,
                    processed.get(m),
                )
                for m, info in members.items()
            },
            interval_ms=interval_ms if i > 0 else None,
            load_interval_ms=0,
            topics={
                t: TopicOffsets(
                    end=tuple(end[TopicPartition(t, p)] for p in range(n)),
                    committed=tuple(committed[TopicPartition(t, p)] for p in range(n)),
                    lag=tuple(
                        end[TopicPartition(t, p)] - committed[TopicPartition(t, p)]
                        for p in range(n)
                    ),
                    owner=tuple(owner.get(TopicPartition(t, p)) for p in range(n)),
                )
                for t, n in counts.items()
            },
        )
        yield group, snap.to_json()


def synthetic_records(
    groups: range, snapshots: int = 100, seed: int = 0
) -> Iterator[tuple[str, bytes]]:
    """Every record of the groups numbered ``groups``."""
    for index in groups:
        yield from synthetic_history(index, snapshots, seed)
