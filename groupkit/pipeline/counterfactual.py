"""What if the group had run another assignor or policy? Lag simulated forward, per group.

:mod:`~groupkit.pipeline.replay` judges every assignor against the lag the group *really had*.
Lag depends on the assignment, though: a hot partition on a member with spare capacity drains,
and the recorded lag never shows that. This module simulates it instead. Pure: values in,
values out; Spark's ``applyInPandas`` calls :func:`counterfactual_frame` once per group.

1. **Recover** (:func:`recover`) from the group's lag snapshots, in time order:
   - per partition and interval, the records appended: the log-end offset's delta (exact);
   - per member, its capacity (records/s): what it committed over the intervals in which it
     was *busy* (a backlog of at least :data:`BUSY_RECORDS` at both ends: it worked flat out,
     so its commits show what it can do; telemetry version 2 counts them in ``processed``,
     older records give the committed-offset deltas of the partitions it owned at both ends).
     A member never seen busy gets its declared ``capacity``, else the median of the busy
     members' (members of one group tend to run one code on one kind of machine), and at
     least the highest rate it was seen to commit. With nobody ever busy the highest rate
     any member committed stands for all: lag never built, so more is unknown;
   - the unowned time of a moved partition: the group's own rebalances' median duration
     (``rebalance`` telemetry), else what ``bench/rebalance.py`` measures for groupkit
     (:data:`MOVE_COST_S`, ``unowned p·s moved`` over the partitions moved).
2. **Simulate** (:func:`simulate`) interval by interval, from the lag of the first snapshot,
   with the membership each snapshot shows. At the start of an interval the policy may
   change the assignment; then every partition receives its recorded appends and every
   member processes up to ``capacity × interval``, shared over its partitions in proportion to
   their backlog. A moved partition is unowned for the move's cost: cooperative, only the
   partitions that change owner; eager, every partition of a member that stays (all are
   revoked first). The policies:
   - ``membership``: the assignor runs when the members or their subscriptions change, as
     groupkit's planner does; each member reports what the simulation gave it as ``owned``;
   - ``load``: as ``membership``, and at every snapshot in between the leader's load re-plan,
     :func:`groupkit.protocol.placement.decide` (the very function the leader runs, with the
     inputs the leader has: simulated lag, appended and committed rates, declared capacity);
   - ``every``: the assignor runs at every snapshot, on the simulated lag (an upper bound of
     what rebalancing can buy, its moves paid for).
   The recorded assignments simulated the same way are the **calibration** (:data:`ACTUAL`):
   the model's error is its predicted largest member lag against the recorded one.
3. **Score** (:func:`score`) each track: peak, p95 and mean of the largest member lag over the
   snapshots, the largest predicted time lag (backlog / append rate; only where the telemetry
   carries time lag, to set beside it), the time to drain after each burst (appends above
   :data:`BURST_FACTOR` × the median: seconds from the burst's end until the largest member
   lag is back within 10 % of where it was before it, or the end of the history), partitions
   moved and their unowned partition-seconds.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from groupkit.assignors import get_assignor
from groupkit.assignors.base import Assignor
from groupkit.errors import MalformedTelemetry
from groupkit.protocol.placement import LoadPolicy, decide
from groupkit.runtime.telemetry import LagSnapshot, RebalanceEvent, decode
from groupkit.types import MemberSubscription, PartitionLoad, TopicPartition

POLICIES = ("membership", "load", "every")
#: the calibration track: the recorded assignments, simulated
ACTUAL = "actual"
#: the recorded history itself, scored like a track
RECORDED = "recorded"
#: a member whose backlog holds this many records at both ends of an interval worked flat out
BUSY_RECORDS = 100
#: unowned seconds per moved partition, groupkit's join and leave in ``bench/rebalance.py``
#: (``unowned p·s moved`` / ``moved``; eager: every partition of a member that stays, too)
MOVE_COST_S = {"cooperative": 0.04, "eager": 0.1}
#: an interval whose appends exceed this many times the median is part of a burst
BURST_FACTOR = 1.5
#: within this much of the lag before a burst (or :data:`BUSY_RECORDS`), it is drained
DRAINED = 1.1

#: Columns of the counterfactual's result, one row per group and track, with Spark SQL types.
CF_SCHEMA: tuple[tuple[str, str], ...] = (
    ("group", "string"),
    ("assignor", "string"),
    ("policy", "string"),
    ("ran", "boolean"),  # the combination the group really ran
    ("snapshots", "int"),
    ("mean_max_member_lag", "double"),
    ("p95_max_member_lag", "double"),
    ("peak_max_member_lag", "double"),
    ("peak_time_lag_s", "double"),
    ("drain_s", "double"),
    ("bursts", "int"),
    ("undrained", "int"),
    ("moves", "int"),
    ("unowned_ps", "double"),
    ("rebalances", "int"),
    ("calibration_mae", "double"),  # median |predicted - recorded| largest member lag
    ("calibration_pct", "double"),  # that, in percent of the recorded peak
    ("timeline", "string"),  # JSON list: the largest member lag at every snapshot
    ("error", "string"),
)
CF_COLUMNS = tuple(c for c, _ in CF_SCHEMA)
CF_DDL = ", ".join(f"`{c}` {t}" for c, t in CF_SCHEMA)


# --------------------------------------------------------------------------- 1. recover


@dataclass(frozen=True)
class History:
    """What the simulation needs of one group, recovered from its telemetry."""

    group: str
    snaps: tuple[LagSnapshot, ...]
    #: per interval ``i`` (from snapshot ``i - 1`` to ``i``; index 0 is empty): records appended
    appended: tuple[Mapping[TopicPartition, int], ...]
    #: records/s each member can process (every member of any snapshot)
    capacity: Mapping[str, float]
    #: unowned seconds of a moved partition
    move_cost_s: float
    protocol: str
    assignor: str
    #: the leader's load re-plan interval (0: off)
    load_interval_ms: int
    has_time_lag: bool

    def dt(self, i: int) -> float:
        return max(0.0, (self.snaps[i].ts_ms - self.snaps[i - 1].ts_ms) / 1000)


def _ordered(snapshots: Iterable[LagSnapshot]) -> list[LagSnapshot]:
    by_ts: dict[int, LagSnapshot] = {}
    for s in snapshots:
        by_ts.setdefault(s.ts_ms, s)  # at-least-once delivery repeats a record
    return [by_ts[t] for t in sorted(by_ts)]


def _ends(s: LagSnapshot) -> dict[TopicPartition, int]:
    return {TopicPartition(t, p): e for t, o in s.topics.items() for p, e in enumerate(o.end)}


def _committed(s: LagSnapshot) -> dict[TopicPartition, int | None]:
    return {TopicPartition(t, p): c for t, o in s.topics.items() for p, c in enumerate(o.committed)}


def member_lags(
    owners: Mapping[TopicPartition, str], lags: Mapping[TopicPartition, float]
) -> dict[str, float]:
    out: dict[str, float] = {}
    for tp, m in owners.items():
        out[m] = out.get(m, 0.0) + lags.get(tp, 0.0)
    return out


def estimate_capacity(snaps: Sequence[LagSnapshot]) -> dict[str, float]:
    """Each member's capacity, records/s (module docstring, step 1)."""
    busy_n: dict[str, float] = {}
    busy_s: dict[str, float] = {}
    seen: dict[str, float] = {}
    declared: dict[str, float] = {}
    for s in snaps:
        for m, i in s.members.items():
            if i.capacity:
                declared[m] = i.capacity
    for k in range(1, len(snaps)):
        a, b = snaps[k - 1], snaps[k]
        dt = (b.ts_ms - a.ts_ms) / 1000
        if dt <= 0:
            continue
        oa, ob = a.owners(), b.owners()
        ca, cb = _committed(a), _committed(b)
        la, lb = a.lags(), b.lags()
        done: dict[str, int] = {}
        before: dict[str, int] = {}
        after: dict[str, int] = {}
        for tp, m in ob.items():
            if oa.get(tp) != m:
                continue
            c0, c1 = ca.get(tp), cb.get(tp)
            done[m] = done.get(m, 0) + (max(0, c1 - c0) if c0 is not None and c1 is not None else 0)
            before[m] = before.get(m, 0) + la.get(tp, 0)
            after[m] = after.get(m, 0) + lb.get(tp, 0)
        for m, n in done.items():
            info = b.members.get(m)
            if info is not None and info.processed is not None and b.interval_ms:
                n, dt_m = info.processed, b.interval_ms / 1000  # counted by the leader
            else:
                dt_m = dt
            seen[m] = max(seen.get(m, 0.0), n / dt_m)
            if before[m] >= BUSY_RECORDS and after[m] >= BUSY_RECORDS:
                busy_n[m] = busy_n.get(m, 0.0) + n
                busy_s[m] = busy_s.get(m, 0.0) + dt_m
    measured = {m: busy_n[m] / busy_s[m] for m in busy_n if busy_s[m] > 0 and busy_n[m] > 0}
    pooled = statistics.median(measured.values()) if measured else None
    floor = max(seen.values(), default=0.0)
    out: dict[str, float] = {}
    for m in sorted({m for s in snaps for m in s.members}):
        if m in measured:
            out[m] = measured[m]
        elif m in declared:
            out[m] = max(declared[m], seen.get(m, 0.0))
        elif pooled is not None:
            out[m] = max(pooled, seen.get(m, 0.0))
        else:
            out[m] = floor
    return out


def recover(
    group: str,
    snapshots: Iterable[LagSnapshot],
    rebalances: Iterable[RebalanceEvent] = (),
) -> History:
    """The group's :class:`History` (module docstring, step 1)."""
    snaps = _ordered(snapshots)
    if not snaps:
        raise ValueError(f"group {group!r} has no lag snapshots")
    appended: list[dict[TopicPartition, int]] = [{}]
    for k in range(1, len(snaps)):
        e0, e1 = _ends(snaps[k - 1]), _ends(snaps[k])
        appended.append({tp: max(0, e - e0.get(tp, e)) for tp, e in e1.items()})
    last = snaps[-1]
    durations = [r.duration_ms / 1000 for r in rebalances if r.outcome in ("completed", "")]
    protocol = last.protocol if last.protocol in MOVE_COST_S else "cooperative"
    cost = statistics.median(durations) if durations else MOVE_COST_S[protocol]
    return History(
        group=group,
        snaps=tuple(snaps),
        appended=tuple(appended),
        capacity=estimate_capacity(snaps),
        move_cost_s=cost,
        protocol=protocol,
        assignor=last.assignor,
        load_interval_ms=max((s.load_interval_ms or 0) for s in snaps),
        has_time_lag=any(o.time_lag is not None for s in snaps for o in s.topics.values()),
    )


# --------------------------------------------------------------------------- 2. simulate


@dataclass
class Track:
    """One simulated history: the largest member lag at every snapshot, and its moves."""

    assignor: str
    policy: str
    max_member_lag: list[float] = field(default_factory=list)
    time_lag: list[float | None] = field(default_factory=list)
    moves: int = 0
    unowned_ps: float = 0.0
    rebalances: int = 0


def _membership(s: LagSnapshot) -> tuple[object, ...]:
    return (
        tuple((m, i.topics) for m, i in sorted(s.members.items())),
        tuple(sorted(s.partitions_per_topic.items())),
    )


def _process(
    lag: dict[TopicPartition, float],
    owners: Mapping[TopicPartition, str],
    capacity: Mapping[str, float],
    dt: float,
    unowned: Mapping[TopicPartition, float],
) -> dict[TopicPartition, float]:
    """Each member processes up to ``capacity × dt``, shared over its partitions in proportion
    to their backlog; a partition unowned for ``u`` s takes at most ``capacity × (dt - u)``.
    Updates ``lag``; returns what was processed per partition."""
    by_member: dict[str, list[TopicPartition]] = {}
    for tp, m in owners.items():
        by_member.setdefault(m, []).append(tp)
    done: dict[TopicPartition, float] = {}
    for m, tps in by_member.items():
        mu = capacity.get(m, 0.0)
        budget = mu * dt
        room = {tp: min(lag.get(tp, 0.0), mu * max(0.0, dt - unowned.get(tp, 0.0))) for tp in tps}
        # water-filling: what a capped partition cannot take goes to the others
        open_ = [tp for tp in tps if room[tp] > 0]
        while budget > 1e-9 and open_:
            total = sum(lag[tp] - done.get(tp, 0.0) for tp in open_)
            if total <= 0:
                break
            spent = 0.0
            still = []
            for tp in open_:
                want = budget * (lag[tp] - done.get(tp, 0.0)) / total
                got = min(want, room[tp] - done.get(tp, 0.0))
                done[tp] = done.get(tp, 0.0) + got
                spent += got
                if room[tp] - done[tp] > 1e-9:
                    still.append(tp)
            budget -= spent
            if spent <= 1e-9 or len(still) == len(open_):
                break
            open_ = still
    for tp, n in done.items():
        lag[tp] = max(0.0, lag[tp] - n)
    return done


def _owners(assignment: Mapping[str, Iterable[tuple[str, int]]]) -> dict[TopicPartition, str]:
    return {TopicPartition(t, p): m for m, tps in assignment.items() for t, p in tps}


def _time_lag(
    lag: Mapping[TopicPartition, float], appended: Mapping[TopicPartition, int], dt: float
) -> float | None:
    """The largest backlog / append rate: how old its oldest unprocessed record is, at a
    steady append rate."""
    worst = 0.0
    for tp, n in lag.items():
        if n <= 0:
            continue
        rate = appended.get(tp, 0) / dt if dt > 0 else 0.0
        if rate <= 0:
            continue
        worst = max(worst, n / rate)
    return worst


def simulate(
    h: History,
    assignor: str | None,
    policy: str = "membership",
    load_policy: LoadPolicy | None = None,
) -> Track:
    """Lag forward under ``assignor`` and ``policy``; ``assignor=None``: the recorded
    assignments (the calibration)."""
    if policy not in POLICIES and assignor is not None:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    impl: Assignor | None = get_assignor(assignor) if assignor is not None else None
    if load_policy is None:
        load_policy = LoadPolicy(interval_ms=h.load_interval_ms or LoadPolicy().interval_ms)
    first = h.snaps[0]
    lag: dict[TopicPartition, float] = {tp: float(v) for tp, v in first.lags().items()}
    track = Track(assignor or ACTUAL, policy if assignor is not None else RECORDED)
    owners = first.owners()
    generation = 1
    if impl is not None:  # it starts from the recorded owners, as if it had always run
        subs = {
            m: MemberSubscription(i.topics, [tp for tp, o in owners.items() if o == m], 1)
            for m, i in first.members.items()
        }
        owners = _owners(impl.assign(first.partitions_per_topic, subs, first.lags()))
    key = _membership(first)
    last_replan: int | None = None
    consumed: dict[TopicPartition, float] = {}
    rates_dt = 0.0
    track.max_member_lag.append(max(member_lags(owners, lag).values(), default=0.0))
    track.time_lag.append(None)
    for i in range(1, len(h.snaps)):
        s, prev = h.snaps[i], h.snaps[i - 1]
        dt = h.dt(i)
        unowned: dict[TopicPartition, float] = {}
        if impl is None:
            recorded_prev, recorded = prev.owners(), s.owners()
            new_owners = {tp: recorded.get(tp) or m for tp, m in recorded_prev.items()}
            new_owners.update(recorded)
            new_owners = {tp: m for tp, m in new_owners.items() if m is not None}
            for tp in new_owners:
                if recorded_prev.get(tp) != recorded.get(tp):
                    unowned[tp] = h.move_cost_s
            moved = sum(1 for tp in unowned if tp in recorded_prev and tp in recorded)
            if moved:
                track.rebalances += 1
            track.moves += moved
            owners = new_owners
        else:
            k = _membership(s)
            counts = s.partitions_per_topic
            replanned = None
            if k != key or policy == "every":
                subs = {
                    m: MemberSubscription(
                        info.topics, [tp for tp, o in owners.items() if o == m], generation
                    )
                    for m, info in s.members.items()
                }
                lags_now = {tp: round(v) for tp, v in lag.items()}
                new = _owners(impl.assign(counts, subs, lags_now if impl.uses_lag else None))
                replanned = _moves(owners, new, s, h, unowned)
                owners = new
                key = k
            elif policy == "load" and rates_dt > 0:
                loads = {
                    tp: PartitionLoad(
                        round(lag.get(tp, 0.0)),
                        h.appended[i - 1].get(tp, 0) / rates_dt,
                        consumed.get(tp, 0.0) / rates_dt if tp in owners else None,
                    )
                    for tp in lag
                }
                subs = {
                    m: MemberSubscription(
                        info.topics,
                        [tp for tp, o in owners.items() if o == m],
                        generation,
                        capacity=info.capacity,
                    )
                    for m, info in s.members.items()
                }
                d = decide(subs, loads, prev.ts_ms, last_replan, policy=load_policy, assignor=impl)
                if d.replan is not None:
                    last_replan = prev.ts_ms
                    new = dict(owners)
                    for mv in d.replan.moves:
                        new[mv.partition] = mv.target
                    replanned = _moves(owners, new, s, h, unowned, cooperative=True)
                    owners = new
            if replanned:
                generation += 1
                track.rebalances += 1
                track.moves += replanned
        for tp, n in h.appended[i].items():
            lag[tp] = lag.get(tp, 0.0) + n
        track.unowned_ps += sum(unowned.values())
        consumed = _process(lag, owners, h.capacity, dt, unowned)
        rates_dt = dt
        ml = member_lags(owners, lag)
        track.max_member_lag.append(max((ml.get(m, 0.0) for m in s.members), default=0.0))
        track.time_lag.append(_time_lag(lag, h.appended[i], dt) if h.has_time_lag else None)
    return track


def _moves(
    old: Mapping[TopicPartition, str],
    new: Mapping[TopicPartition, str],
    s: LagSnapshot,
    h: History,
    unowned: dict[TopicPartition, float],
    cooperative: bool = False,
) -> int:
    """Partitions that changed owner between two plans (owners that are still members), with
    their unowned time put in ``unowned``; eager revokes every partition of a member that
    stays."""
    moved = 0
    for tp, m in new.items():
        before = old.get(tp)
        if before == m:
            continue
        unowned[tp] = h.move_cost_s
        if before is not None and before in s.members:
            moved += 1
    if not cooperative and h.protocol == "eager" and (moved or len(unowned)):
        for tp in new:
            if old.get(tp) in s.members:
                unowned[tp] = h.move_cost_s
    return moved


# --------------------------------------------------------------------------- 3. score


def _p95(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(0.95 * (len(ordered) - 1))))
    return ordered[k]


def bursts(h: History) -> list[tuple[int, int]]:
    """``(first, last)`` snapshot index of every burst: intervals whose appends per second
    exceed :data:`BURST_FACTOR` × the median's."""
    rates = [sum(h.appended[i].values()) / h.dt(i) if h.dt(i) > 0 else 0.0
             for i in range(1, len(h.snaps))]  # fmt: skip
    if not rates:
        return []
    base = statistics.median(rates)
    out: list[tuple[int, int]] = []
    start: int | None = None
    for i, r in enumerate(rates, start=1):
        hot = base > 0 and r > BURST_FACTOR * base
        if hot and start is None:
            start = i
        if not hot and start is not None:
            out.append((start, i - 1))
            start = None
    if start is not None:
        out.append((start, len(rates)))
    return out


def drain_times(h: History, series: Sequence[float]) -> tuple[list[float], int]:
    """Seconds from each burst's end until ``series`` is back within :data:`DRAINED` of its
    level before the burst; and how many never were (counted to the history's end)."""
    out: list[float] = []
    undrained = 0
    for first, last in bursts(h):
        target = max(series[first - 1] * DRAINED, BUSY_RECORDS)
        end_ts = h.snaps[last].ts_ms
        for j in range(last, len(series)):
            if series[j] <= target:
                out.append((h.snaps[j].ts_ms - end_ts) / 1000)
                break
        else:
            undrained += 1
            out.append((h.snaps[-1].ts_ms - end_ts) / 1000)
    return out, undrained


def score(h: History, t: Track, recorded: Sequence[float] | None = None) -> dict[str, Any]:
    """One row of :data:`CF_SCHEMA` for a track; with ``recorded``, its calibration error."""
    series = t.max_member_lag
    drains, undrained = drain_times(h, series)
    tl = [x for x in t.time_lag if x is not None]
    row: dict[str, Any] = {
        "group": h.group,
        "assignor": t.assignor,
        "policy": t.policy,
        "ran": False,
        "snapshots": len(series),
        "mean_max_member_lag": round(statistics.fmean(series), 3) if series else 0.0,
        "p95_max_member_lag": round(_p95(series), 3),
        "peak_max_member_lag": round(max(series, default=0.0), 3),
        "peak_time_lag_s": round(max(tl), 3) if tl else None,
        "drain_s": round(statistics.fmean(drains), 3) if drains else None,
        "bursts": len(drains),
        "undrained": undrained,
        "moves": t.moves,
        "unowned_ps": round(t.unowned_ps, 4),
        "rebalances": t.rebalances,
        "calibration_mae": None,
        "calibration_pct": None,
        "timeline": json.dumps([round(x, 1) for x in series], separators=(",", ":")),
        "error": None,
    }
    if recorded is not None:
        errors = [abs(a - b) for a, b in zip(series, recorded, strict=True)]
        mae = statistics.median(errors) if errors else 0.0
        peak = max(recorded, default=0.0)
        row["calibration_mae"] = round(mae, 3)
        row["calibration_pct"] = round(100 * mae / peak, 3) if peak > 0 else 0.0
    return row


def recorded_track(h: History) -> Track:
    """The recorded history as a track: its largest member lag and its recorded moves."""
    t = Track(RECORDED, RECORDED)
    prev: dict[TopicPartition, str] | None = None
    for s in h.snaps:
        owners = s.owners()
        ml = member_lags(owners, {tp: float(v) for tp, v in s.lags().items()})
        t.max_member_lag.append(max((ml.get(m, 0.0) for m in s.members), default=0.0))
        tls = [x for x in s.time_lags().values() if x is not None]
        t.time_lag.append(max(tls) if tls else None)
        if prev is not None:
            moved = sum(1 for tp, m in owners.items() if prev.get(tp) not in (None, m))
            t.moves += moved
            t.rebalances += 1 if moved else 0
        prev = owners
    return t


def ran_policy(h: History) -> str:
    """The policy the group really ran: ``load`` when its leader followed the load."""
    return "load" if h.load_interval_ms > 0 else "membership"


def counterfactual_group(
    group: str,
    snapshots: Iterable[LagSnapshot],
    assignors: Sequence[str],
    policies: Sequence[str] = POLICIES,
    rebalances: Iterable[RebalanceEvent] = (),
) -> list[dict[str, Any]]:
    """Rows of :data:`CF_SCHEMA`: the recorded history, its calibration, and every assignor
    under every policy."""
    h = recover(group, snapshots, rebalances)
    rec = recorded_track(h)
    rows = [score(h, rec)]
    rows.append(score(h, simulate(h, None), rec.max_member_lag))
    for name in assignors:
        for policy in policies:
            row = score(h, simulate(h, name, policy), rec.max_member_lag)
            row["ran"] = name == h.assignor and policy == ran_policy(h)
            rows.append(row)
    return rows


def counterfactual_values(
    group: str,
    values: Iterable[bytes | str | None],
    assignors: Sequence[str],
    policies: Sequence[str] = POLICIES,
) -> list[dict[str, Any]]:
    """Decode one group's telemetry values and simulate them; a group that fails gives one
    row with ``error`` set instead of failing the whole job."""
    snaps: list[LagSnapshot] = []
    events: list[RebalanceEvent] = []
    for v in values:
        try:
            t = decode(v)
        except MalformedTelemetry:
            continue  # counted by the job's parse stage
        (snaps if isinstance(t, LagSnapshot) else events).append(t)  # type: ignore[arg-type]
    if not snaps:
        return []
    try:
        return counterfactual_group(group, snaps, assignors, policies, events)
    except Exception as e:  # one bad group must not sink a job over thousands
        row: dict[str, Any] = dict.fromkeys(CF_COLUMNS)
        row.update(group=group, assignor="", policy="", ran=False, snapshots=0,
                   error=f"{type(e).__name__}: {e}"[:500])  # fmt: skip
        return [row]


def counterfactual_frame(pdf: Any, assignors: Sequence[str], policies: Sequence[str]) -> Any:
    """``applyInPandas`` body: one group's ``group``/``value`` rows in, :data:`CF_SCHEMA` out."""
    import pandas as pd

    if len(pdf) == 0:
        return pd.DataFrame({c: [] for c in CF_COLUMNS})
    group = str(pdf["group"].iloc[0])
    rows = counterfactual_values(group, pdf["value"].tolist(), assignors, policies)
    return pd.DataFrame(rows, columns=list(CF_COLUMNS))
