"""Benchmark: the leader's heartbeat gaps while its assignor plans a large group.

The leader's control thread writes its heartbeats; the assignor runs on a worker thread
(runtime/planning.py, ``PlanRunner``). This drives a ``PlanRunner`` exactly as the coordinator
does while a plan is under way (a turn every 20 ms: poll the runner, encode a heartbeat record,
a little replay-sized work) and records the gaps between consecutive turns, i.e. between the
heartbeats the leader could write. Beside it, the gap the same plan made before, when the
assignor ran on the control thread itself (the whole plan is one gap).

A pure-Python assignor holds the GIL; CPython hands it over every switch interval (5 ms), so
the control thread's turns go on, a few ms late. Inputs: ``balanced`` and ``sticky`` on
40,000 partitions x 800 members (the target size) and 10,000 x 200, and a deliberately
slow pure-Python assignor (3 s of busy CPU).

    python bench/assignor_heartbeats.py          # writes bench/results/assignor_heartbeats.*
    python bench/assignor_heartbeats.py --quick  # smaller inputs, seconds
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import begin, write_results
from groupkit.assignors import Assignor, RangeAssignor, get_assignor
from groupkit.protocol.assign import AssignRequest, basis_of
from groupkit.protocol.records import encode, member_record
from groupkit.runtime.planning import PlanRunner
from groupkit.types import Assignment, MemberSubscription, TopicPartition

TURN_S = 0.02  # the coordinator's poll wait while a plan is under way


class BusyAssignor(RangeAssignor):
    """Range after ``seconds`` of pure-Python CPU (holds the GIL as a slow assignor does)."""

    name = "busy"

    def __init__(self, seconds: float = 3.0) -> None:
        self.seconds = seconds

    def assign(self, *args: Any, **kwargs: Any) -> Assignment:
        end = time.perf_counter() + self.seconds
        x = 0
        while time.perf_counter() < end:
            for i in range(1000):
                x += i * i
        return super().assign(*args, **kwargs)


def request(assignor: str, partitions: int, members: int, topics: int = 10) -> AssignRequest:
    counts = {f"t{i}": partitions // topics for i in range(topics)}
    subs = {f"m{i:04d}": MemberSubscription(list(counts)) for i in range(members)}
    lags = {TopicPartition(t, p): (p * 7919) % 10_000 for t, n in counts.items() for p in range(n)}
    basis = basis_of(assignor, {m: ("i", s.topics) for m, s in subs.items()}, counts)
    return AssignRequest(assignor, counts, subs, lags, basis)


def heartbeat() -> None:
    """What a turn costs the control thread: a member record built and encoded."""
    owned = [("t0", p) for p in range(50)]
    key, rec = member_record("g", "m0000", incarnation="i", seq=1, topics=["t0"], owned=owned,
                             owned_generation=1, acked_generation=1, joined_at=1,
                             prev_ts=1)  # fmt: skip
    encode(key, rec)


def threaded(assignor: Assignor, req: AssignRequest) -> tuple[float, list[float], str]:
    """Plan on the runner; turns on this thread. ``(plan seconds, turn gaps, outcome)``."""
    runner = PlanRunner(assignor, timeout_ms=600_000)
    t0 = time.monotonic()
    runner.start(req, int(t0 * 1000))
    gaps: list[float] = []
    last = time.monotonic()
    while True:
        out = runner.poll(int(time.monotonic() * 1000))
        heartbeat()
        now = time.monotonic()
        gaps.append(now - last)
        last = now
        if out is not None:
            return now - t0, gaps, "fallback" if out.failed else "ok"
        time.sleep(TURN_S)


def inline(assignor: Assignor, req: AssignRequest) -> float:
    t0 = time.monotonic()
    assignor.assign(req.partitions_per_topic, req.members, req.lags)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    started = begin()
    cases: list[tuple[str, Assignor, int, int]] = (
        [("balanced", get_assignor("balanced"), 4_000, 80),
         ("busy", BusyAssignor(0.5), 1_000, 10)]
        if args.quick
        else [("balanced", get_assignor("balanced"), 40_000, 800),
              ("balanced", get_assignor("balanced"), 10_000, 200),
              ("sticky", get_assignor("sticky"), 40_000, 800),
              ("busy", BusyAssignor(3.0), 1_000, 10)]
    )  # fmt: skip
    rows = []
    for name, a, parts, members in cases:
        req = request(name if name != "busy" else "busy", parts, members)
        before = inline(a, req)
        seconds, gaps, outcome = threaded(a, req)
        over = [g for g in gaps if g > TURN_S]
        worst = max(gaps)
        rows.append([name, parts, members, round(before, 3), round(seconds, 3), outcome,
                     len(gaps), round(worst * 1000, 1),
                     round(sorted(gaps)[int(0.99 * (len(gaps) - 1))] * 1000, 1),
                     round(sum(over) / max(1, len(over)) * 1000, 1)])  # fmt: skip
    write_results(
        "assignor_heartbeats",
        "quick" if args.quick else "full",
        ["assignor", "partitions", "members", "inline_plan_s (= gap before)", "threaded_plan_s",
         "outcome", "turns", "max_gap_ms", "p99_gap_ms", "mean_gap_ms"],
        rows,
        started=started,
        title="Leader heartbeat gaps while its assignor plans (turn every 20 ms)",
        notes=[
            "inline_plan_s: the assignor run inline on the control thread: no heartbeat for "
            "that long.",
            "threaded: the assignor on PlanRunner's worker thread; gaps between the control "
            "thread's turns (20 ms poll wait + the GIL handed over every 5 ms).",
        ],
    )  # fmt: skip


if __name__ == "__main__":
    main()
