"""Replay one group's lag history through assignors: the pure core of ``groupkit replay``.

Spark's ``applyInPandas`` calls :func:`replay_frame` once per consumer group; the benchmark's
single-process baseline calls :func:`replay_group` directly. Both run exactly this code, and
this code only calls :mod:`groupkit.assignors`: nothing about assigning is re-implemented.

How one group is replayed:

1. Its :class:`~groupkit.runtime.telemetry.LagSnapshot` records are sorted by time; a
   duplicate (same ``ts_ms``, as at-least-once delivery can produce) is dropped.
2. Every assignor keeps *its own* previous assignment. At a snapshot it rebalances when the
   group would have: on the first snapshot, and whenever the members, their subscriptions or
   the partition counts differ from those of its last rebalance (``rebalance="membership"``,
   what groupkit's planner does). Each member then reports as ``owned`` what this assignor gave
   it last time, with that generation, so sticky assignors are sticky against their own past,
   never against what the real group did. ``rebalance="every"`` rebalances at every snapshot
   instead: an upper bound for lag-aware assignors, as if the group rebalanced on every
   lag reading. ``rebalance="load"`` rebalances as ``membership`` does, and between those
   asks the leader's load re-plan (``groupkit.protocol.placement.decide``, the function the
   leader runs, with its default policy) at every snapshot whether to move a few partitions:
   the produce rates from the end offsets of consecutive snapshots, each member's rate from
   step 4 as its capacity.
3. The snapshot's per-partition lags are the demand every assignor is judged against (the
   lag the group really had at that moment; how lag would have evolved under another
   assignment is not simulated). Per snapshot and assignor it records each member's lag, the
   largest member lag, imbalance (largest / mean member lag), the lower bound no assignment
   can beat (:func:`~groupkit.assignors.invariants.lag_lower_bound`), the partitions moved
   from owners that are still members (what a cooperative rebalance revokes), the partitions
   an eager rebalance would revoke (everything such owners held), and the time to drain: the
   largest member lag divided by that member's rate.
4. A member's rate is its configured ``capacity`` when it has one, else the highest rate it
   was ever seen committing in this history (telemetry rates are lower bounds, see
   :mod:`groupkit.runtime.telemetry`), else the mean of the other members' rates. With no rate
   known at all the time to drain is left empty.

The real assignment (``owner`` in each snapshot) is evaluated alongside as ``actual``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from groupkit.assignors import get_assignor
from groupkit.assignors.invariants import (
    lag_lower_bound,
    member_loads,
    moved_partitions,
    previous_owners,
)
from groupkit.errors import MalformedTelemetry
from groupkit.protocol.placement import LoadPolicy, decide
from groupkit.runtime.telemetry import LagSnapshot, decode
from groupkit.types import MemberSubscription, PartitionLoad, TopicPartition

ACTUAL = "actual"
REBALANCE_MODES = ("membership", "every", "load")
#: the load re-plans of the ``load`` mode: the leader's own defaults
LOAD_POLICY = LoadPolicy()

#: Columns of the replay's result, with their Spark SQL types (also the Parquet schema).
RESULT_SCHEMA: tuple[tuple[str, str], ...] = (
    ("group", "string"),
    ("snapshot", "int"),
    ("ts_ms", "long"),
    ("assignor", "string"),
    ("rebalanced", "boolean"),
    ("members", "int"),
    ("partitions", "int"),
    ("total_lag", "long"),
    ("max_member_lag", "long"),
    ("mean_member_lag", "double"),
    ("imbalance", "double"),
    ("lag_lower_bound", "double"),
    ("moved", "int"),
    ("revoked_eager", "int"),
    ("time_to_drain_s", "double"),
    ("member_lags", "string"),  # JSON object {member: lag}
    ("error", "string"),  # set on the one row of a group whose replay failed
)
RESULT_COLUMNS = tuple(c for c, _ in RESULT_SCHEMA)
RESULT_DDL = ", ".join(f"`{c}` {t}" for c, t in RESULT_SCHEMA)


@dataclass
class _Track:
    """One assignor's own history within a group."""

    assignment: dict[str, list[TopicPartition]]
    generation: int
    key: tuple[object, ...]
    #: ``ts_ms`` of its last load re-plan (mode ``load``)
    replanned_at: int | None = None


def _loads(prev: LagSnapshot, s: LagSnapshot) -> dict[TopicPartition, PartitionLoad]:
    """Each partition's lag and produce rate between two snapshots (the commit rates are the
    real owners', not a counterfactual's: left out, members are planned by their rates)."""
    dt = (s.ts_ms - prev.ts_ms) / 1000
    out: dict[TopicPartition, PartitionLoad] = {}
    for t, o in s.topics.items():
        before = prev.topics.get(t)
        for p, lag in enumerate(o.lag):
            rate = 0.0
            if before is not None and p < len(before.end) and dt > 0:
                rate = max(0.0, (o.end[p] - before.end[p]) / dt)
            out[TopicPartition(t, p)] = PartitionLoad(lag, rate)
    return out


def _replan(
    tr: _Track, prev: LagSnapshot, s: LagSnapshot, rates: Mapping[str, float]
) -> tuple[dict[str, list[TopicPartition]], int] | None:
    """The leader's load re-plan of ``tr``'s assignment at ``s``: (assignment, moved), or
    ``None``."""
    members = {
        m: MemberSubscription(i.topics, tr.assignment.get(m, ()), tr.generation,
                              capacity=rates.get(m) or i.capacity)
        for m, i in s.members.items()
    }  # fmt: skip
    d = decide(members, _loads(prev, s), s.ts_ms, tr.replanned_at, policy=LOAD_POLICY)
    if d.replan is None:
        return None
    new = d.replan.apply({m: tr.assignment.get(m, ()) for m in s.members})
    return {m: sorted(ps) for m, ps in new.items()}, len(d.replan.moves)


def _membership_key(s: LagSnapshot) -> tuple[object, ...]:
    return (
        tuple((m, i.topics, i.rack, i.capacity) for m, i in sorted(s.members.items())),
        tuple(sorted(s.partitions_per_topic.items())),
    )


def _rates(s: LagSnapshot, best: dict[str, float]) -> dict[str, float]:
    """Each member's rate for time-to-drain (see the module docstring, step 4)."""
    for m, i in s.members.items():
        if i.rate is not None and i.rate > best.get(m, 0.0):
            best[m] = i.rate
    out = {}
    for m, i in s.members.items():
        if i.capacity:
            out[m] = i.capacity
        elif best.get(m, 0.0) > 0:
            out[m] = best[m]
    if out:
        fallback = sum(out.values()) / len(out)
        for m in s.members:
            out.setdefault(m, fallback)
    return out


def _row(
    group: str,
    index: int,
    s: LagSnapshot,
    assignor: str,
    assignment: Mapping[str, Sequence[tuple[str, int]]],
    lags: Mapping[TopicPartition, int],
    rates: Mapping[str, float],
    rebalanced: bool,
    moved: int,
    revoked_eager: int,
) -> dict[str, Any]:
    loads = {m: int(v) for m, v in member_loads(assignment, lags).items()}
    n = len(loads)
    covered = {t for i in s.members.values() for t in i.topics}
    demand = [lag for tp, lag in lags.items() if tp.topic in covered]
    total = sum(loads.values())
    biggest = max(loads.values(), default=0)
    mean = total / n if n else 0.0
    drain: float | None = None
    if rates and n:
        drain = max(
            (lag / rates[m] if rates.get(m) else float("inf")) if lag else 0.0
            for m, lag in loads.items()
        )
        if drain == float("inf"):
            drain = None
    return {
        "group": group,
        "snapshot": index,
        "ts_ms": s.ts_ms,
        "assignor": assignor,
        "rebalanced": rebalanced,
        "members": n,
        "partitions": sum(s.partitions_per_topic.values()),
        "total_lag": sum(demand),
        "max_member_lag": biggest,
        "mean_member_lag": mean,
        "imbalance": biggest / mean if mean > 0 else 1.0,
        "lag_lower_bound": lag_lower_bound(demand, n),
        "moved": moved,
        "revoked_eager": revoked_eager,
        "time_to_drain_s": drain,
        "member_lags": json.dumps(loads, separators=(",", ":"), sort_keys=True),
        "error": None,
    }


def replay_group(
    group: str,
    snapshots: Iterable[LagSnapshot],
    assignors: Sequence[str],
    rebalance: str = "membership",
    include_actual: bool = True,
) -> list[dict[str, Any]]:
    """Rows of :data:`RESULT_SCHEMA`: one per snapshot and assignor (plus ``actual``)."""
    if rebalance not in REBALANCE_MODES:
        raise ValueError(f"rebalance must be one of {REBALANCE_MODES}, got {rebalance!r}")
    by_ts: dict[int, LagSnapshot] = {}
    for s in snapshots:
        by_ts.setdefault(s.ts_ms, s)
    ordered = [by_ts[t] for t in sorted(by_ts)]
    impls = {name: get_assignor(name) for name in assignors}
    tracks: dict[str, _Track] = {}
    best_rates: dict[str, float] = {}
    prev_owners: dict[TopicPartition, str] | None = None
    rows: list[dict[str, Any]] = []
    for index, s in enumerate(ordered):
        counts = s.partitions_per_topic
        lags = s.lags()
        rates = _rates(s, best_rates)
        key = _membership_key(s)
        for name, impl in impls.items():
            tr = tracks.get(name)
            if tr is not None and rebalance != "every" and tr.key == key:
                got = _replan(tr, ordered[index - 1], s, rates) if rebalance == "load" else None
                if got is not None:  # a cooperative generation: only the moved are revoked
                    tracks[name] = _Track(got[0], tr.generation + 1, key, s.ts_ms)
                    rows.append(_row(group, index, s, name, got[0], lags, rates, True, got[1],
                                     got[1]))  # fmt: skip
                    continue
                rows.append(_row(group, index, s, name, tr.assignment, lags, rates, False, 0, 0))
                continue
            generation = tr.generation + 1 if tr is not None else 1
            subs = {
                m: MemberSubscription(
                    i.topics,
                    owned=tr.assignment.get(m, ()) if tr is not None else (),
                    generation=tr.generation if tr is not None else None,
                    rack=i.rack,
                    capacity=i.capacity,
                )
                for m, i in s.members.items()
            }
            new = impl.assign(counts, subs, lags if impl.uses_lag else None)
            moved = len(moved_partitions(counts, subs, new))
            owners = previous_owners(counts, subs)
            tracks[name] = _Track(new, generation, key, tr.replanned_at if tr else None)
            rows.append(_row(group, index, s, name, new, lags, rates, True, moved, len(owners)))
        if include_actual:
            owners_now = s.owners()
            actual: dict[str, list[TopicPartition]] = {m: [] for m in s.members}
            for tp, m in sorted(owners_now.items()):
                actual[m].append(tp)
            moved = revoked = 0
            changed = prev_owners is None
            if prev_owners is not None:
                kept = {tp: m for tp, m in prev_owners.items() if m in s.members}
                moved = sum(1 for tp, m in kept.items() if owners_now.get(tp, m) != m)
                changed = moved > 0 or owners_now != prev_owners
                revoked = len(kept) if changed else 0
            prev_owners = owners_now
            rows.append(_row(group, index, s, ACTUAL, actual, lags, rates, changed, moved, revoked))
    return rows


def decode_snapshots(values: Iterable[bytes | str | None]) -> tuple[list[LagSnapshot], int]:
    """Lag snapshots among ``values``, and how many values were not valid telemetry."""
    out: list[LagSnapshot] = []
    bad = 0
    for v in values:
        try:
            t = decode(v)
        except MalformedTelemetry:
            bad += 1
            continue
        if isinstance(t, LagSnapshot):
            out.append(t)
    return out, bad


def error_row(group: str, error: str) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(RESULT_COLUMNS)
    row.update(group=group, snapshot=-1, ts_ms=0, assignor="", rebalanced=False, error=error)
    return row


def replay_values(
    group: str,
    values: Iterable[bytes | str | None],
    assignors: Sequence[str],
    rebalance: str = "membership",
) -> list[dict[str, Any]]:
    """Decode one group's telemetry values and replay them; a group whose replay fails gives
    one row with ``error`` set instead of failing the whole job."""
    snaps, _ = decode_snapshots(values)
    try:
        return replay_group(group, snaps, assignors, rebalance)
    except Exception as e:  # one bad group must not sink a job over thousands
        return [error_row(group, f"{type(e).__name__}: {e}"[:500])]


def replay_frame(pdf: Any, assignors: Sequence[str], rebalance: str) -> Any:
    """``applyInPandas`` body: a pandas frame of one group's ``group``/``value`` rows in, a frame
    of :data:`RESULT_SCHEMA` out."""
    import pandas as pd

    if len(pdf) == 0:
        return pd.DataFrame({c: [] for c in RESULT_COLUMNS})
    group = str(pdf["group"].iloc[0])
    rows = replay_values(group, pdf["value"].tolist(), assignors, rebalance)
    return pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
