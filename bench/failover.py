"""Benchmark: kill -9 the groupkit leader; time until a new leader has a stable assignment.

A group of ``--members`` groupkit member processes (``bench/_worker.py``, cooperative) on one
topic with a producer writing every partition every 10 ms. Per trial the current leader is
killed with SIGKILL; measured from the kill:

- ``new leader``: until another member reports that it leads;
- ``stable``: until every partition is owned by a live member and consuming again.

The bound is ``session.timeout.ms`` + the skew allowance + ``heartbeat.interval.ms``: the dead
leader's last heartbeat is at most one interval old when it dies, a successor judges its run
ended a session and the allowance (``groupkit.max.clock.skew.ms``: a second, at most a fifth of
the session) after that heartbeat and writes its verdict at once (docs/protocol-v2.md, L3.1 and
L5.3), and liveness time only moves on with the survivors' heartbeats (at most one interval
late). A replacement
member then joins (not measured) so every trial starts from the same group size.

    python bench/failover.py            # full: 10 members, sessions 1 s, 3 s and 10 s
    python bench/failover.py --quick    # seconds; for CI
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import Chart, begin, versions_note, write_results
from bench._harness import Group, broker, create_topic, measure, pct, versions
from bench._pacer import Pacer
from groupkit.dev.harness import wait_for
from groupkit.runtime.config import default_clock_skew_ms


def run_setting(boot: str, topic: str, work: Path, session: int, heartbeat: int,
                args: argparse.Namespace) -> list[dict[str, float]]:  # fmt: skip
    gid = f"bench-failover-{session}-{uuid.uuid4().hex[:6]}"
    group = Group(boot, gid, topic, args.partitions, work, "gk", args.protocol, session,
                  heartbeat, control_topic=f"__gk_{gid}")  # fmt: skip
    out = []
    try:
        group.start(args.members)
        timeout = session / 1000 + 30
        for trial in range(args.trials):
            spare = group.spawn()
            group.wait_ready([spare])
            leader = _wait_leader(group, timeout)
            time.sleep(args.gap)
            t0 = leader.kill()
            new = _wait_leader(group, timeout)
            new_t = next(f["t"] for f in reversed(new.facts()) if f["e"] == "state" and f["leader"])
            group.wait_stable(timeout)
            r = measure(group, t0, time.monotonic())
            r["new_leader_s"] = new_t - t0
            out.append(r)
            print(f"  session {session} ms trial {trial + 1}/{args.trials}: new leader "
                  f"{r['new_leader_s'] * 1000:.0f} ms, stable {r['stable_s'] * 1000:.0f} ms",
                  flush=True)  # fmt: skip
            spare.send("subscribe")
            group.wait_stable(timeout)
    finally:
        group.stop_all()
    return out


def _wait_leader(group: Group, timeout: float) -> Any:
    seen: list[Any] = []

    def found() -> bool:
        seen.append(group.leader())
        return seen[-1] is not None

    wait_for(found, timeout, f"{group.group}: a leader", step=0.005)
    return seen[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=48)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--protocol", default="cooperative")
    ap.add_argument(
        "--settings", default="1000/100,3000/300,10000/1000", help="session/heartbeat ms pairs"
    )
    ap.add_argument("--gap", type=float, default=1.0)
    ap.add_argument("--bootstrap")
    ap.add_argument("--results-dir", type=Path, default=None)
    args = ap.parse_args()
    if args.quick:
        args.members, args.partitions, args.trials, args.gap = 2, 4, 1, 0.5
        args.settings = "1000/100"
    settings = [tuple(int(x) for x in s.split("/")) for s in args.settings.split(",")]
    started = begin()
    t_start = time.monotonic()
    res: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="gk-bench-failover-") as tmp:
        work = Path(tmp)
        with broker(args.bootstrap, work / "broker", {}) as boot:
            topic = f"bench-failover-{uuid.uuid4().hex[:6]}"
            create_topic(boot, topic, args.partitions)
            with Pacer(boot, topic, args.partitions, 0.01):
                for session, heartbeat in settings:
                    res[f"{session}/{heartbeat}"] = run_setting(
                        boot, topic, work, session, heartbeat, args
                    )
    report(res, args, started, time.monotonic() - t_start)


def report(res: dict[str, list[dict[str, float]]], args: argparse.Namespace,
           started: dict[str, Any], seconds: float,
           vers: dict[str, str] | None = None) -> None:  # fmt: skip
    """Write the run's entry (``res``: the trials per session/heartbeat; ``vers``: the
    versions, else this checkout's)."""
    vers = vers or versions()
    rows, ok = [], True
    for key, trials in res.items():
        session, heartbeat = (int(x) for x in key.split("/"))
        bound = (session + default_clock_skew_ms(session) + heartbeat) / 1000
        good = [t for t in trials if t.get("ok")]
        # The target: a new leader has a stable assignment (every partition owned by a live
        # member). Consuming again adds the grant's hand-off and first fetch.
        owned = [t["owned_s"] for t in good]
        st = [t["stable_s"] for t in good]
        nl = [t["new_leader_s"] for t in good]
        within = sum(1 for s in owned if s <= bound)
        ok = ok and within == len(trials)
        rows.append([key, len(good), round(pct(nl, 0.5) * 1000), round(pct(owned, 0.5) * 1000),
                     round(pct(owned, 0.9) * 1000), round(pct(owned, 0.95) * 1000),
                     round(max(owned, default=float("nan")) * 1000),
                     round(pct(st, 0.5) * 1000), round(pct(st, 0.9) * 1000), round(bound * 1000),
                     round(pct(owned, 0.5) / bound, 2), f"{within}/{len(trials)}"])  # fmt: skip
    targets = {"all_assigned_within_session_skew_heartbeat": ok}
    notes = [
        f"groupkit {args.protocol}, {args.members} members, {args.partitions} partitions, "
        f"{args.trials} trials per setting; the leader is killed with SIGKILL.",
        "assigned: every partition owned by a live member (the new leader's assignment is in "
        "place); consuming: and each has handed out a record again. Bound: session timeout + "
        "the skew allowance (groupkit's default: a second, at most a fifth of the session) + "
        "one heartbeat interval, against assigned.",
        f"Targets: {targets}",
        versions_note(vers, seconds),
    ]
    chart = Chart(
        list(res),
        {"new leader p50": [r[2] for r in rows], "assigned p50": [r[3] for r in rows],
         "consuming p50": [r[7] for r in rows],
         "bound (session + skew + heartbeat)": [r[9] for r in rows]},
        "ms after kill -9 of the leader", title="Leader failover (groupkit): p50, p90 whisker",
        errors={"assigned p50": [r[4] for r in rows], "consuming p50": [r[8] for r in rows]},
    )  # fmt: skip
    write_results(
        "failover", f"{args.members}x{args.partitions} {args.protocol}",
        ["session/hb ms", "trials", "new leader p50 ms", "assigned p50 ms", "assigned p90 ms",
         "assigned p95 ms", "assigned max ms", "consuming p50 ms", "consuming p90 ms",
         "bound ms", "p50 / bound", "within bound"],
        rows, started=started,
        title="Leader failover: kill -9 the groupkit leader, time to a stable assignment",
        results_dir=args.results_dir, notes=notes, chart=chart,
        extra={"trials": res, "targets": targets, "versions": vers, "seconds": seconds,
               "args": {k: v for k, v in vars(args).items() if k != "results_dir"}},
    )  # fmt: skip


if __name__ == "__main__":
    main()
