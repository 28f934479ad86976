"""Placement that follows the load: whether the leader should move a few partitions, and which.

The lag-aware assignors place partitions by lag when the membership changes; load moves all the
time. :func:`decide` is the leader's rule for a stable group, asked every
``groupkit.load.rebalance.interval.ms``: it answers a :class:`Replan` (a few partitions to
move, the reason, the predicted gain) or why not (:class:`~groupkit.protocol.vocab.ReplanSkip`).
The planner turns a replan into a cooperative generation like any other (planner.py), so every
rule of the protocol holds for it. The pipeline's counterfactual calls the same function.

The inputs, per partition (:class:`PartitionLoad`): its lag, the rate records are appended to
it, and the rate its owner commits it; per member (``MemberSubscription``): what it owns, its
topics and its declared ``groupkit.capacity``. The runtime measures the rates from log-end
and committed offsets over time (runtime/load.py); nothing here reads a clock.

The model, per member ``m`` of a plan:

- ``A_m``, its arrivals: the sum of its partitions' append rates; ``B_m``, its backlog: the
  sum of their lags (a partition's lag moves with it).
- ``mu_m``, its processing rate (:func:`member_rates`). Commits only show a lower bound of it
  while a member keeps up (it processes what arrives), and the true rate while it is *busy*
  (its backlog holds more than ``busy_s`` of its arrivals and ``busy_records``: it reads full
  batches and works flat out). So: busy, ``mu_m`` is what it is measured to do, whatever it
  declared (a member slower than its capacity is planned by what it does); not busy, its
  declared capacity (or the measured rate, if higher); without either, the mean of the
  members whose rate is known, or its measured rate if higher. And a member without such a
  backlog keeps up, as it shows: it counts as at most 90 % utilized (``KEEPING_UP``).
- Its utilization ``rho_m = A_m / mu_m``, and its predicted *delay* at the horizon ``H``
  (``horizon_ms``, a minute): the backlog it is predicted to hold then,
  ``max(0, B_m + (A_m - mu_m) * H)``, in seconds of its work (divided by ``mu_m``): how long
  a record arriving then waits. A member that drains its lag within ``H`` has none; one that
  falls behind has more the more it falls behind; a partition's backlog moves with it.

The forecast of a plan (:class:`Forecast`) is its largest ``rho`` and its largest delay. The
decision, in order (the hysteresis that keeps the group from oscillating):

1. Off when the interval is 0; never while a rebalance is in flight (the caller says so: a
   generation not yet complete and acknowledged, a plan or write of the leader's own under
   way); never within ``interval_ms`` of the last re-plan (log time).
2. No pressure, no move: the largest delay is below ``min_delay_ms`` (5 s). Else the reason
   is ``overload`` when some member has ``rho >= 1`` (its lag only grows), else ``drain``
   (it drains, but not within the horizon); the goal is the largest delay either way.
3. Greedy moves, at most ``max_moves`` (the cap, 2 by default): each step moves one partition
   of the worst member to one of the ``receivers`` least loaded members subscribed to its
   topic, the move that lowers the sorted vector of the members' delays (largest first) the
   most; it stops when no move lowers it.
4. ``gain = 1 - delay(after) / delay(before)`` of the largest delays. Below ``min_gain``
   (20 %): no move. Else the shortest prefix of the moves whose gain is at least ``enough``
   (80 %) of the full gain and at least ``min_gain``: as few partitions as give most of it.

Deterministic: the same input in any dict order gives the same answer (members and partitions
are visited sorted, ties broken by id). Pure: values in, values out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from groupkit.assignors.base import Assignor
from groupkit.errors import ConfigError
from groupkit.protocol.vocab import ReplanReason, ReplanSkip
from groupkit.types import MemberSubscription, PartitionLoad, TopicPartition

__all__ = [
    "Forecast",
    "LoadDecision",
    "LoadPolicy",
    "Move",
    "PartitionLoad",
    "Replan",
    "decide",
    "member_rates",
]

#: a busy member measured at (nearly) nothing still counts as this slow, not infinitely
MIN_RATE = 1e-3
#: a member that is not busy keeps up: it is planned as at most this utilized, whatever its
#: commits (a lower bound then) or its declared capacity say
KEEPING_UP = 0.9


@dataclass(frozen=True, slots=True)
class LoadPolicy:
    """The hysteresis of :func:`decide` (module docstring)."""

    #: how often the leader asks, and the least log time between two re-plans; 0: off
    interval_ms: int = 30_000
    #: the least predicted gain (relative) of a re-plan
    min_gain: float = 0.2
    #: the most partitions moved by one re-plan
    max_moves: int = 2
    #: a re-plan moves the fewest partitions that give this share of its full gain
    enough: float = 0.8
    #: how far ahead the forecast looks
    horizon_ms: int = 60_000
    #: below this predicted delay of the worst member at the horizon: no move
    min_delay_ms: int = 5_000
    #: a member whose backlog holds this many seconds of its arrivals ...
    busy_s: float = 1.0
    #: ... and at least this many records works flat out: commits show its true rate
    busy_records: int = 100
    #: members a partition may go to in a step (the least loaded first)
    receivers: int = 8

    def __post_init__(self) -> None:
        if self.interval_ms < 0:
            raise ConfigError(f"load rebalance interval must be >= 0, got {self.interval_ms!r}")
        if not 0 < self.min_gain < 1 or not 0 < self.enough <= 1:
            raise ConfigError("min_gain must be in (0, 1) and enough in (0, 1]")
        if self.max_moves < 1 or self.receivers < 1:
            raise ConfigError("max_moves and receivers must be >= 1")


@dataclass(frozen=True, slots=True)
class Forecast:
    """What a plan is predicted to do: its worst member's utilization and delay."""

    #: the largest ``arrivals / rate`` of a member (>= 1: its lag only grows)
    utilization: float
    #: the largest predicted delay of a member at the horizon, in seconds: the backlog it is
    #: predicted to hold then, in seconds of its work
    delay_s: float


@dataclass(frozen=True, slots=True)
class Move:
    partition: TopicPartition
    source: str
    target: str


@dataclass(frozen=True, slots=True)
class Replan:
    """A few partitions to move, and why."""

    reason: ReplanReason
    moves: tuple[Move, ...]
    #: ``1 - delay(after) / delay(before)`` of the worst members, at least the policy's ``min_gain``
    gain: float
    before: Forecast
    after: Forecast

    def apply(
        self, owned: Mapping[str, Iterable[TopicPartition]]
    ) -> dict[str, frozenset[TopicPartition]]:
        """``owned`` (member -> partitions) with the moves made."""
        out = {m: set(ps) for m, ps in owned.items()}
        for mv in self.moves:
            out[mv.source].discard(mv.partition)
            out.setdefault(mv.target, set()).add(mv.partition)
        return {m: frozenset(ps) for m, ps in sorted(out.items())}


@dataclass(frozen=True, slots=True)
class LoadDecision:
    """:func:`decide`'s answer: a re-plan, or why none."""

    replan: Replan | None = None
    skip: ReplanSkip | None = None
    #: the current plan's forecast, when it was made
    forecast: Forecast | None = None


def member_rates(
    members: Mapping[str, MemberSubscription],
    loads: Mapping[TopicPartition, PartitionLoad],
    policy: LoadPolicy = LoadPolicy(),
) -> dict[str, float]:
    """Each member's processing rate (records/s) as the plan assumes it (module docstring)."""
    known: dict[str, float] = {}
    measured: dict[str, float] = {}
    arrivals: dict[str, float] = {}
    behind: set[str] = set()  # its backlog says it works flat out (or would, if measured)
    busy: set[str] = set()  # behind, and measured: what it does is its rate
    for m, sub in sorted(members.items()):
        own = [loads[tp] for tp in sub.owned if tp in loads]
        arrival = sum(pl.produce_rate for pl in own)
        backlog = sum(pl.lag for pl in own)
        rates = [pl.consume_rate for pl in own if pl.consume_rate is not None]
        got = sum(rates) if rates else None
        if got is not None:
            measured[m] = got
        arrivals[m] = arrival
        if backlog >= policy.busy_records and backlog >= arrival * policy.busy_s:
            behind.add(m)
        if m in behind and got is not None:
            busy.add(m)
            known[m] = max(got, MIN_RATE)  # what it does, whatever it declared
        elif sub.capacity is not None:
            known[m] = max(float(sub.capacity), got or 0.0)
    ref = sum(known.values()) / len(known) if known else 0.0
    out: dict[str, float] = {}
    for m in sorted(members):
        # Nothing says how fast it could go: as fast as the others on average, and at least
        # as fast as it was seen to go.
        rate = known[m] if m in known else max(ref, measured.get(m, 0.0), MIN_RATE)
        # A member with no backlog to speak of keeps up, whatever its numbers say.
        out[m] = rate if m in behind else max(rate, arrivals[m] / KEEPING_UP)
    return out


class _Plan:
    """A plan's members with their arrivals, backlog and rate, moves made in place."""

    def __init__(
        self,
        owned: Mapping[str, Iterable[TopicPartition]],
        loads: Mapping[TopicPartition, PartitionLoad],
        rates: Mapping[str, float],
        horizon_s: float,
    ) -> None:
        self.loads = loads
        self.horizon_s = horizon_s
        self.rate = dict(rates)
        self.parts = {m: set(ps) for m, ps in owned.items()}
        self.arrivals = {m: sum(self.arrivals_of(tp) for tp in ps) for m, ps in self.parts.items()}
        self.backlog = {m: sum(self.backlog_of(tp) for tp in ps) for m, ps in self.parts.items()}

    def arrivals_of(self, tp: TopicPartition) -> float:
        pl = self.loads.get(tp)
        return pl.produce_rate if pl is not None else 0.0

    def backlog_of(self, tp: TopicPartition) -> float:
        pl = self.loads.get(tp)
        return float(pl.lag) if pl is not None else 0.0

    def value(self, m: str, da: float = 0.0, db: float = 0.0) -> float:
        """Member ``m``'s predicted delay (s), with ``da`` more arrivals and ``db`` more backlog."""
        a, b, mu = self.arrivals[m] + da, self.backlog[m] + db, self.rate[m]
        return max(0.0, b + (a - mu) * self.horizon_s) / mu

    def forecast(self) -> Forecast:
        util = max((self.arrivals[m] / self.rate[m] for m in self.parts), default=0.0)
        delay = max((self.value(m) for m in self.parts), default=0.0)
        return Forecast(util, delay)

    def move(self, tp: TopicPartition, source: str, target: str) -> None:
        self.parts[source].discard(tp)
        self.parts[target].add(tp)
        a, b = self.arrivals_of(tp), self.backlog_of(tp)
        self.arrivals[source] -= a
        self.backlog[source] -= b
        self.arrivals[target] += a
        self.backlog[target] += b


def _greedy(
    plan: _Plan, topics: Mapping[str, frozenset[str]], policy: LoadPolicy
) -> list[tuple[Move, Forecast]]:
    """Up to ``max_moves`` moves, each the best single move from the worst member."""
    out: list[tuple[Move, Forecast]] = []
    ids = sorted(plan.parts)
    for _ in range(policy.max_moves):
        values = {m: plan.value(m) for m in ids}
        current = sorted(values.values(), reverse=True)
        worst = max(ids, key=lambda m: (values[m], m))
        # the receivers: the least loaded members, whoever takes a partition of the worst
        others = sorted((m for m in ids if m != worst), key=lambda m: (values[m], m))
        best: tuple[list[float], TopicPartition, str] | None = None
        for tp in sorted(plan.parts[worst]):
            a, b = plan.arrivals_of(tp), plan.backlog_of(tp)
            if a == 0 and b == 0:
                continue  # moving an idle partition changes nothing
            takers = [m for m in others if tp.topic in topics[m]][: policy.receivers]
            for m in takers:
                rest = [v for k, v in values.items() if k not in (worst, m)]
                vec = sorted(
                    [*rest, plan.value(worst, -a, -b), plan.value(m, a, b)],
                    reverse=True,
                )
                if vec < current and (best is None or (vec, tp, m) < best):
                    best = (vec, tp, m)
        if best is None:
            break
        _, tp, m = best
        plan.move(tp, worst, m)
        out.append((Move(tp, worst, m), plan.forecast()))
    return out


def _gain(before: Forecast, after: Forecast) -> float:
    return 1 - after.delay_s / before.delay_s if before.delay_s > 0 else 0.0


def decide(
    members: Mapping[str, MemberSubscription],
    loads: Mapping[TopicPartition, PartitionLoad],
    now_ms: int,
    last_replan_ms: int | None = None,
    in_flight: bool = False,
    policy: LoadPolicy = LoadPolicy(),
    assignor: Assignor | None = None,
) -> LoadDecision:
    """Whether to move partitions for the load now, and which (module docstring).

    ``members``: each member's topics, the partitions it owns now (``owned``) and its declared
    ``capacity``; ``loads``: what is measured of each partition; ``now_ms`` and
    ``last_replan_ms``: log times. ``assignor``: the group's, asked first
    (``Assignor.replan``) once the group is under pressure; its answer, if not ``None``, is
    the plan (within the cap), the forecast only says its gain.
    """
    if policy.interval_ms <= 0:
        return LoadDecision(skip=ReplanSkip.OFF)
    if in_flight:
        return LoadDecision(skip=ReplanSkip.IN_FLIGHT)
    if last_replan_ms is not None and now_ms - last_replan_ms < policy.interval_ms:
        return LoadDecision(skip=ReplanSkip.TOO_SOON)
    owned = {m: frozenset(s.owned) for m, s in members.items()}
    if len(members) < 2 or not any(tp in loads for ps in owned.values() for tp in ps):
        return LoadDecision(skip=ReplanSkip.NO_LOAD)
    plan = _Plan(owned, loads, member_rates(members, loads, policy), policy.horizon_ms / 1000)
    before = plan.forecast()
    if before.delay_s * 1000 < policy.min_delay_ms:
        return LoadDecision(skip=ReplanSkip.NO_PRESSURE, forecast=before)
    reason = ReplanReason.OVERLOAD if before.utilization >= 1 else ReplanReason.DRAIN
    topics = {m: frozenset(s.topics) for m, s in members.items()}
    if assignor is not None:
        try:
            answer = assignor.replan(members, loads)
        except Exception:
            return LoadDecision(skip=ReplanSkip.INVALID, forecast=before)
        if answer is not None:
            return _assignors(plan, owned, topics, answer, before, policy)
    steps = _greedy(plan, topics, policy)
    gains = [_gain(before, f) for _, f in steps]
    full = max(gains, default=-math.inf)
    if full < policy.min_gain:
        return LoadDecision(skip=ReplanSkip.SMALL_GAIN, forecast=before)
    need = max(policy.min_gain, policy.enough * full)
    n = next(i + 1 for i, g in enumerate(gains) if g >= need)
    moves = tuple(mv for mv, _ in steps[:n])
    return LoadDecision(Replan(reason, moves, gains[n - 1], before, steps[n - 1][1]),
                        forecast=before)  # fmt: skip


def _assignors(
    plan: _Plan,
    owned: Mapping[str, frozenset[TopicPartition]],
    topics: Mapping[str, frozenset[str]],
    answer: Mapping[str, Iterable[tuple[str, int]]],
    before: Forecast,
    policy: LoadPolicy,
) -> LoadDecision:
    """The group's assignor's answer as a decision: its moves, if it is a valid assignment of
    what is owned now that moves at most ``max_moves`` partitions; else why not."""
    owner = {tp: m for m, ps in owned.items() for tp in ps}
    seen: set[TopicPartition] = set()
    moves: list[Move] = []
    for m in sorted(answer):
        if m not in owned:
            return LoadDecision(skip=ReplanSkip.INVALID, forecast=before)
        for t, p in sorted(answer[m]):
            tp = TopicPartition(t, p)
            if tp in seen or tp not in owner or t not in topics[m]:
                return LoadDecision(skip=ReplanSkip.INVALID, forecast=before)
            seen.add(tp)
            if owner[tp] != m:
                moves.append(Move(tp, owner[tp], m))
    if seen != set(owner):
        return LoadDecision(skip=ReplanSkip.INVALID, forecast=before)
    if not moves:
        return LoadDecision(skip=ReplanSkip.NO_CHANGE, forecast=before)
    if len(moves) > policy.max_moves:
        return LoadDecision(skip=ReplanSkip.INVALID, forecast=before)
    for mv in moves:
        plan.move(mv.partition, mv.source, mv.target)
    after = plan.forecast()
    gain = min(1.0, max(0.0, _gain(before, after)))
    return LoadDecision(Replan(ReplanReason.ASSIGNOR, tuple(moves), gain, before, after),
                        forecast=before)  # fmt: skip
