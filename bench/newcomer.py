"""Benchmark: how soon a new worker consumes, as the worker sees it.

A group of ``--members`` (8) stable members shares a topic of ``--partitions`` (48) under a
producer writing one record to every partition every ``--period`` (50 ms). Then ``--newcomers``
(20) new workers start one after another, each a new process that builds its consumer and
subscribes at once (``bench/_worker.py --at-once``), as a pod that autoscaling starts does.
Per newcomer:

- ``subscribe → first record``: from the ``subscribe()`` call to the first record its
  ``poll()`` returns;
- ``built → first record``: from just before the consumer is built (``GroupConsumer()`` or
  ``Consumer()``) to that record.

Once the group is stable again the newcomer closes (a clean leave), the group settles, and the
next one starts, so every newcomer joins a group of the same size.

Contenders, on the same broker in the same run, both at ``--session-ms`` / ``--heartbeat-ms``
(3 s / 100 ms): groupkit cooperative (``cooperative-sticky``), and native KIP-848
(``group.protocol=consumer``, its session and heartbeat set as group configs). ``--runs`` (3)
repeats the whole comparison; every run's p50, p90 and load are kept.

    python bench/newcomer.py            # 3 runs x 20 newcomers per contender
    python bench/newcomer.py --quick    # seconds; for CI
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import Chart, begin, versions_note, write_results
from bench._harness import Group, load, pct, settle_load, versions
from bench.rebalance import paced_topic, set_group_timeouts
from groupkit.dev.harness import wait_for

# name -> (kind, protocol)
CONTENDERS: dict[str, tuple[str, str]] = {
    "native KIP-848": ("native", "consumer"),
    "groupkit cooperative": ("gk", "cooperative"),
}
ANCHOR = "native KIP-848"


def newcomer_times(group: Group, timeout: float) -> dict[str, float]:
    """Start one newcomer, wait for its first record and a stable group; close it and wait for
    the group to settle. Its times in ms."""
    m = group.spawn(at_once=True)

    def first() -> bool:
        if m.proc.poll() is not None:
            raise RuntimeError(f"{m.name} exited: {m.log_tail()}")
        return m.fact("first") is not None

    wait_for(first, timeout, f"{m.name}: a first record", step=0.01)
    start, sub, got = (m.fact(k) for k in ("start", "sub", "first"))
    assert start is not None and sub is not None and got is not None
    times = {
        "subscribe_ms": (got["t"] - sub["t"]) * 1000,
        "built_ms": (got["t"] - start["t"]) * 1000,
        "construct_ms": (sub["t"] - start["t"]) * 1000,
    }
    group.wait_stable(timeout)
    m.send("close")
    m.proc.wait(30)
    group.wait_stable(timeout)
    return times


def run_contender(boot: str, topic: str, workdir: Path, name: str,
                  args: argparse.Namespace) -> list[dict[str, float]]:  # fmt: skip
    kind, protocol = CONTENDERS[name]
    gid = f"bench-newcomer-{kind}-{protocol}-{uuid.uuid4().hex[:6]}"
    group = Group(boot, gid, topic, args.partitions, workdir, kind, protocol, args.session_ms,
                  args.heartbeat_ms, control_topic=f"__gk_{gid}")  # fmt: skip
    if protocol == "consumer":
        set_group_timeouts(boot, gid, args.session_ms, args.heartbeat_ms)
    timeout = args.session_ms / 1000 + 30
    out = []
    try:
        group.start(args.members)
        for i in range(args.newcomers):
            out.append(newcomer_times(group, timeout))
            print(f"  {name} newcomer {i + 1}/{args.newcomers}: subscribe -> first record "
                  f"{out[-1]['subscribe_ms']:.0f} ms", flush=True)  # fmt: skip
    finally:
        group.stop_all()
    return out


def summarize(trials: list[dict[str, float]], key: str) -> dict[str, float]:
    xs = [t[key] for t in trials]
    return {"p50": pct(xs, 0.5), "p90": pct(xs, 0.9), "max": max(xs, default=float("nan"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny group, 2 newcomers, one run")
    ap.add_argument("--members", type=int, default=8)
    ap.add_argument("--partitions", type=int, default=48)
    ap.add_argument("--newcomers", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--period", type=float, default=0.05, help="producer period per partition, s")
    ap.add_argument("--session-ms", type=int, default=3000)
    ap.add_argument("--heartbeat-ms", type=int, default=100)
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument(
        "--settle-load",
        type=float,
        default=2.0,
        help="wait for the 1-min load to fall to this before each contender",
    )
    ap.add_argument("--settle-max", type=float, default=60.0, help="... for at most this, s")
    ap.add_argument("--bootstrap", help="use this broker (its minimums must allow --session-ms)")
    ap.add_argument("--results-dir", type=Path, default=None)
    args = ap.parse_args()
    if args.quick:
        args.members, args.partitions, args.newcomers, args.runs = 2, 4, 2, 1
        args.settle_max = 0.0
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    started, t_start = begin(), time.monotonic()
    runs: list[dict[str, Any]] = []
    with paced_topic(args, "newcomer") as (work, boot, topic, _pacer):
        for run in range(1, args.runs + 1):
            for name in contenders:
                at_start = settle_load(args.settle_load, args.settle_max)
                print(f"run {run}: {name} (load {at_start['load1']}) ...", flush=True)
                trials = run_contender(boot, topic, work, name, args)
                runs.append({"run": run, "contender": name, "trials": trials,
                             "load_at_start": at_start, "load_at_end": load()})  # fmt: skip
    report(runs, args, started, time.monotonic() - t_start)


def report(runs: list[dict[str, Any]], args: argparse.Namespace, started: dict[str, Any],
           seconds: float) -> None:  # fmt: skip
    columns = ["run", "contender", "newcomers", "subscribe→first p50 ms", "p90 ms", "p90 / p50",
               "max ms", "built→first p50 ms", "p90 ms", "p50 / KIP-848", "load start",
               "load end"]  # fmt: skip
    anchor = {r["run"]: summarize(r["trials"], "subscribe_ms")["p50"]
              for r in runs if r["contender"] == ANCHOR}  # fmt: skip
    rows = []
    for r in runs:
        sub = summarize(r["trials"], "subscribe_ms")
        built = summarize(r["trials"], "built_ms")
        rows.append([
            r["run"], r["contender"], len(r["trials"]), round(sub["p50"], 1),
            round(sub["p90"], 1), round(sub["p90"] / sub["p50"], 2), round(sub["max"], 1),
            round(built["p50"], 1), round(built["p90"], 1),
            round(sub["p50"] / anchor.get(r["run"], float("nan")), 2),
            r["load_at_start"]["load1"], r["load_at_end"]["load1"],
        ])  # fmt: skip
    gk = [summarize(r["trials"], "subscribe_ms") for r in runs
          if r["contender"] == "groupkit cooperative"]  # fmt: skip
    targets = {
        "gk_p50_le_120ms_every_run": bool(gk) and all(s["p50"] <= 120 for s in gk),
        "gk_p90_le_2x_p50_every_run": bool(gk) and all(s["p90"] <= 2 * s["p50"] for s in gk),
    }
    notes = [
        f"{args.members} members, {args.partitions} partitions, {args.newcomers} newcomers a "
        f"contender a run, {args.runs} run(s); session {args.session_ms} ms, heartbeat "
        f"{args.heartbeat_ms} ms; producer: one record per partition every "
        f"{args.period * 1000:g} ms (so up to that long between an assignment and a record "
        "to consume).",
        "subscribe→first: a new worker process's subscribe() call to the first record its "
        "poll() returns. built→first: from just before the consumer was built. Ratios against "
        f"{ANCHOR} in the same run. Loads are the 1-minute load average.",
        f"Targets: {targets}",
        versions_note(versions(), seconds),
    ]
    labels = [f"{r['contender']} run {r['run']}" for r in runs]
    subs = [summarize(r["trials"], "subscribe_ms") for r in runs]
    chart = Chart(
        ["subscribe → first record"],
        {lab: [s["p50"]] for lab, s in zip(labels, subs, strict=True)},
        "ms", title="A new worker: p50 (bar) and p90 (whisker)",
        errors={lab: [s["p90"]] for lab, s in zip(labels, subs, strict=True)},
        hline=(120.0, "120 ms target"),
    )  # fmt: skip
    setting = f"{args.members}x{args.partitions} {args.session_ms}/{args.heartbeat_ms} ms"
    write_results("newcomer", setting, columns, rows, started=started,
                  title="A new worker's first record: groupkit vs KIP-848 (same broker, same "
                  "run)", results_dir=args.results_dir, notes=notes, chart=chart,
                  extra={"runs": runs, "targets": targets, "versions": versions(),
                         "seconds": seconds,
                         "args": {k: v for k, v in vars(args).items()
                                  if k != "results_dir"}})  # fmt: skip


if __name__ == "__main__":
    main()
