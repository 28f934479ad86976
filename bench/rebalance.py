"""Benchmark: rebalance latency and unavailability, groupkit against the broker's own protocols.

One local broker, one topic (48 partitions), a group of 10 member processes, a producer (a
process of its own) writing one record to every partition every 10 ms (``--period``). Per
trial, three events:

- ``join``: an 11th member (already started and idle) calls ``subscribe()``;
- ``leave``: that member calls ``close()`` (a clean leave);
- ``kill``: after one more member joined (not measured), it is killed with SIGKILL.

Each member is its own process (``bench/_worker.py``) and audits ownership as the application
sees it (the rebalance callbacks) and the first record of every newly assigned partition. From
those facts, per event: the time from the event until every partition is owned *and consuming
again* (p50 / p90 / p95), the longest any partition was without an owner, partition-seconds
without an owner (partitions that moved vs partitions that stayed with their owner), partitions
moved and the records/s dip (lowest 100 ms bin until stable, against the second before the event).

Contenders, all in the same run on the same broker:

- native ``subscribe()``, classic protocol, ``range`` (eager) and ``cooperative-sticky``;
- native ``group.protocol=consumer`` (KIP-848, the broker's ``uniform`` assignor);
- groupkit ``eager`` and ``cooperative`` (``cooperative-sticky`` assignor).

Settings, each its own entry of ``bench/results/rebalance.*`` (named by shape and setting,
e.g. ``10x48 tuned``; a run replaces the entries of the settings it ran): ``default`` (each
protocol's defaults: classic 45 s session / 3 s heartbeat, KIP-848 45 s / 5 s, groupkit 10 s /
1 s) and ``tuned`` (everyone at the same ``--session-ms`` / ``--heartbeat-ms``, the broker's
minimums lowered to allow it; for KIP-848 set as group configs).
``group.initial.rebalance.delay.ms=0``.

    python bench/rebalance.py            # full: 10 members, 48 partitions, 10 trials
    python bench/rebalance.py --members 4 --partitions 16 --settings tuned   # the 4x16 entry
    python bench/rebalance.py --quick    # seconds; for CI
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from bench._common import Chart, begin, median, versions_note, write_results
from bench._harness import (
    Group,
    append_gaps,
    broker,
    broker_pid,
    create_topic,
    measure,
    pct,
    settle_load,
    versions,
)
from bench._pacer import Pacer
from groupkit.dev.harness import cpu_seconds, wait_for

# name -> (kind, protocol)
CONTENDERS: dict[str, tuple[str, str]] = {
    "native range": ("native", "range"),
    "native coop-sticky": ("native", "cooperative-sticky"),
    "native KIP-848": ("native", "consumer"),
    "groupkit eager": ("gk", "eager"),
    "groupkit cooperative": ("gk", "cooperative"),
}
QUICK_CONTENDERS = "native coop-sticky,groupkit cooperative"
EVENTS = ("join", "leave", "kill")
GK_DEFAULT = (10_000, 1_000)


def broker_properties(session_ms: int, heartbeat_ms: int) -> dict[str, str]:
    """Lower the broker's minimums so the tuned settings are allowed; defaults stay Kafka's."""
    return {
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": str(min(session_ms, 6000)),
        "group.consumer.min.session.timeout.ms": str(min(session_ms, 45000)),
        "group.consumer.min.heartbeat.interval.ms": str(min(heartbeat_ms, 5000)),
    }


@contextlib.contextmanager
def paced_topic(args: argparse.Namespace, name: str) -> Iterator[tuple[Path, str, str, Pacer]]:
    """The bench's broker (``args.bootstrap``, else a local one that allows the tuned
    settings) with a new topic of ``args.partitions`` under a steady load on every partition:
    ``(work dir, bootstrap, topic, producer)``; the producer stops on exit.
    ``GK_BENCH_KEEP=<dir>``: keep the workers' output there (with GK_BENCH_LOGS, to trace
    hops)."""
    with tempfile.TemporaryDirectory(prefix=f"gk-bench-{name}-") as tmp:
        work = Path(os.environ.get("GK_BENCH_KEEP") or tmp)
        work.mkdir(parents=True, exist_ok=True)
        props = broker_properties(args.session_ms, args.heartbeat_ms)
        props.update(kv.split("=", 1) for kv in getattr(args, "broker_property", None) or ())
        with broker(args.bootstrap, work / "broker", props) as boot:
            topic = f"bench-{name}-{uuid.uuid4().hex[:6]}"
            create_topic(boot, topic, args.partitions)
            period = getattr(args, "period", 0.01)  # join_age and rolling_restart: the default
            with Pacer(boot, topic, args.partitions, period) as pacer:
                yield work, boot, topic, pacer


def settings_for(
    kind: str, protocol: str, setting: str, args: argparse.Namespace
) -> tuple[int, int]:
    """(session_ms, heartbeat_ms) a member is configured with; 0 means the client's default."""
    if setting == "tuned":
        return args.session_ms, args.heartbeat_ms
    if kind == "gk":
        return GK_DEFAULT
    return 0, 0


def effective(kind: str, protocol: str, session: int, heartbeat: int) -> str:
    if session:
        return f"{session}/{heartbeat}"
    return "45000/5000" if protocol == "consumer" else "45000/3000"


def set_group_timeouts(bootstrap: str, group: str, session_ms: int, heartbeat_ms: int) -> None:
    """KIP-848 session and heartbeat are group configs on the broker, not client settings."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", str(session_ms),
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("consumer.heartbeat.interval.ms", str(heartbeat_ms),
                    incremental_operation=AlterConfigOpType.SET),
    ])  # fmt: skip
    admin.incremental_alter_configs([res])[res].result(30)


def run_contender(
    boot: str, topic: str, workdir: Path, name: str, setting: str, args: argparse.Namespace
) -> dict[str, Any]:
    kind, protocol = CONTENDERS[name]
    session, heartbeat = settings_for(kind, protocol, setting, args)
    gid = f"bench-{kind}-{protocol}-{setting}-{uuid.uuid4().hex[:6]}"
    group = Group(boot, gid, topic, args.partitions, workdir, kind, protocol, session, heartbeat,
                  control_topic=f"__gk_{gid}",
                  protocol_version=args.protocol_version)  # fmt: skip
    if protocol == "consumer" and session:
        set_group_timeouts(boot, gid, session, heartbeat)
    # Default sessions make a kill cost ~45 s a trial: fewer trials there (said in the results).
    slow_kill = kill_timeout(kind, protocol, session) > 20
    trials = args.trials
    kill_trials = min(trials, args.default_kill_trials) if slow_kill else trials
    results: dict[str, list[dict[str, float]]] = {e: [] for e in EVENTS}
    timeout = kill_timeout(kind, protocol, session) + 30
    cpu = broker_cpu = float("nan")
    try:
        members = group.start(args.members)
        # idle cost: CPU of the stable group's members over the window, per member, and the
        # broker's (the bench's own: it serves the producer and every fetch too)
        time.sleep(0.5)
        pid = broker_pid(workdir / "broker")  # (paced_topic starts it there)
        c0 = sum(m.cpu_seconds() for m in members)
        b0 = cpu_seconds(pid) if pid else math.nan
        time.sleep(args.cpu_window)
        cpu = (sum(m.cpu_seconds() for m in members) - c0) / args.cpu_window / len(members)
        broker_cpu = (cpu_seconds(pid) - b0) / args.cpu_window if pid else math.nan
        for trial in range(trials):
            do_kill = trial < kill_trials
            extra = [group.spawn() for _ in range(2 if do_kill else 1)]
            group.wait_ready(extra)
            joiner = extra[0]
            time.sleep(args.gap)
            # join
            joiner.send("subscribe")
            wait_fact(group, joiner, "sub")
            t0 = joiner.fact("sub")["t"]  # type: ignore[index]
            group.wait_stable(timeout)
            results["join"].append(measure(group, t0, time.monotonic()))
            time.sleep(args.gap)
            # clean leave
            joiner.send("close")
            wait_fact(group, joiner, "leave")
            t0 = joiner.fact("leave")["t"]  # type: ignore[index]
            group.wait_stable(timeout)
            joiner.proc.wait(30)
            results["leave"].append(measure(group, t0, time.monotonic()))
            if do_kill:
                victim = extra[1]
                victim.send("subscribe")
                group.wait_stable(timeout)
                time.sleep(args.gap)
                t0 = victim.kill()
                group.wait_stable(timeout)
                results["kill"].append(measure(group, t0, time.monotonic()))
            print(f"  {name} [{setting}] trial {trial + 1}/{trials}: "
                  + ", ".join(f"{e} {results[e][-1]['stable_s'] * 1000:.0f} ms"
                              for e in EVENTS if len(results[e]) == trial + 1),
                  flush=True)  # fmt: skip
    finally:
        group.stop_all()
    return {
        "contender": name, "setting": setting, "kind": kind, "protocol": protocol,
        "session_heartbeat_ms": effective(kind, protocol, session, heartbeat),
        "idle_cpu_per_member": cpu, "idle_cpu_broker": broker_cpu, "trials": results,
    }  # fmt: skip


def _property(kv: str) -> str:
    """``KEY=VALUE`` (argparse reports anything else as a bad argument)."""
    key, sep, _ = kv.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{kv!r} is not KEY=VALUE")
    return kv


def kill_timeout(kind: str, protocol: str, session: int) -> float:
    return (session or 45_000) / 1000


def wait_fact(group: Group, m: Any, kind: str, timeout: float = 30) -> None:
    def seen() -> bool:
        if m.fact(kind):
            return True
        if m.proc.poll() is not None and not m.fact(kind):
            raise RuntimeError(f"{m.name} exited: {group.log_tail(m)}")
        return False

    wait_for(seen, timeout, f"{m.name}: a {kind} fact", step=0.005)


def summarize(run: dict[str, Any], event: str) -> dict[str, float]:
    ts = [t for t in run["trials"][event] if t.get("ok")]

    def col(k: str) -> list[float]:
        return [t[k] for t in ts]

    return {
        "n": len(ts),
        "failed": len(run["trials"][event]) - len(ts),
        "p50": pct(col("stable_s"), 0.5),
        "p90": pct(col("stable_s"), 0.9),
        "p95": pct(col("stable_s"), 0.95),
        "owned_p50": pct(col("owned_s"), 0.5),
        "longest": median(col("longest_unowned_s")),
        "ps_moved": median(col("unowned_ps_moved")),
        "ps_stayed": median(col("unowned_ps_stayed")),
        "ps_stayed_max": max(col("unowned_ps_stayed"), default=float("nan")),
        "moved": median(col("moved")),
        "dip": median(col("dip")),
        # (trials measured before the audit had ages have none)
        "first_age": pct([t.get("first_age_max_ms", float("nan")) for t in ts], 0.5),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny group, one trial, tuned only")
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=48)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument(
        "--default-kill-trials",
        type=int,
        default=3,
        help="kill trials with default (45 s) sessions, each costs the session",
    )
    ap.add_argument("--session-ms", type=int, default=1000, help="tuned session timeout")
    ap.add_argument("--heartbeat-ms", type=int, default=100, help="tuned heartbeat interval")
    ap.add_argument("--settings", default="tuned,default")
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--cpu-window", type=float, default=3.0, help="seconds of idle-CPU sampling")
    ap.add_argument("--gap", type=float, default=1.0, help="seconds of steady state before events")
    ap.add_argument(
        "--period",
        type=float,
        default=0.01,
        help="seconds between the producer's records to each partition: the resolution of "
        "'consuming again', and the load (0.01: ~1 core of a local broker at 48 partitions; "
        "on 2 shared cores it writes 70-80 %% of its rounds while a group of 11 fetches)",
    )
    ap.add_argument(
        "--settle-load",
        type=float,
        default=4.0,
        help="before each contender, wait for the 1-min load to fall to this",
    )
    ap.add_argument(
        "--settle-max",
        type=float,
        default=150.0,
        help="seconds to wait for --settle-load at most (0: do not wait)",
    )
    ap.add_argument("--bootstrap", help="use this broker (its minimums must allow --session-ms)")
    ap.add_argument(
        "--broker-property", action="append", metavar="KEY=VALUE", type=_property,
        help="a property of the local broker (again for more), e.g. "
        "group.coordinator.append.linger.ms=0; the results name them",
    )  # fmt: skip
    ap.add_argument(
        "--protocol-version",
        type=int,
        default=None,
        choices=(1, 2),
        help="the groupkit contenders' groupkit.protocol.version (default: groupkit's)",
    )
    ap.add_argument("--results-dir", type=Path, default=None)
    ap.add_argument(
        "--label",
        help="added to the setting's entry name in the results "
        "(e.g. linger0: a run that does not replace the plain setting's entry)",
    )
    args = ap.parse_args()
    if args.quick:
        args.members, args.partitions, args.trials, args.gap = 2, 4, 1, 0.6
        args.settings, args.cpu_window, args.settle_max = "tuned", 0.5, 0.0
        if args.contenders == ",".join(CONTENDERS):
            args.contenders = QUICK_CONTENDERS
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    started = begin()
    t_start = time.monotonic()
    runs = []
    with paced_topic(args, "rebalance") as (work, boot, topic, pacer):
        for setting in settings:
            for name in contenders:
                at_start = settle_load(args.settle_load, args.settle_max)
                print(f"{name} [{setting}] (load {at_start['load1']}) ...", flush=True)
                n0, t0 = pacer.stats().count, time.monotonic()
                wall0 = time.time()
                runs.append(run_contender(boot, topic, work, name, setting, args))
                runs[-1]["load_at_start"] = at_start
                # the share of the asked-for records the producer wrote meanwhile (it skips a
                # round it is late for): how steady the load each contender ran under was
                asked = (time.monotonic() - t0) * args.partitions / args.period
                got = pacer.stats()
                runs[-1]["produced_share"] = round((got.count - n0) / asked, 3)
                queued = [float(q) for q in got.queued] or [0.0]
                runs[-1]["producer_queued"] = {
                    k: round(pct(queued, q)) for k, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))
                }
                sample = range(0, args.partitions, gap_sample_step(args))
                runs[-1]["append_gap_ms"] = append_gaps(boot, topic, sample, wall0, time.time())
    report(runs, args, started, time.monotonic() - t_start)


def gap_sample_step(args: argparse.Namespace) -> int:
    """Every how many partitions the append gaps are read: eight of them describe the load."""
    return max(1, int(args.partitions) // 8)


def setting_label(args: argparse.Namespace, setting: str) -> str:
    """The result set's entry a run of ``setting`` goes to: the shape, the setting, and
    ``--label`` when given (e.g. ``10x48 tuned``)."""
    label = f"{args.members}x{args.partitions} {setting}"
    return f"{label} {args.label}" if getattr(args, "label", None) else label


def report(runs: list[dict[str, Any]], args: argparse.Namespace, started: dict[str, Any],
           seconds: float, vers: dict[str, str] | None = None) -> None:  # fmt: skip
    """Write one entry per setting run (``vers``: the versions, else this checkout's)."""
    vers = vers or versions()
    for setting in dict.fromkeys(r["setting"] for r in runs):
        report_setting([r for r in runs if r["setting"] == setting], setting, args, started,
                       seconds, vers)  # fmt: skip


def report_setting(runs: list[dict[str, Any]], setting: str, args: argparse.Namespace,
                   started: dict[str, Any], seconds: float,
                   vers: dict[str, str]) -> None:  # fmt: skip
    ms = 1000.0
    summ = {(r["contender"], e): summarize(r, e) for r in runs for e in EVENTS}
    gk_ref = {e: summ.get(("groupkit cooperative", e), {}).get("p50", float("nan"))
              for e in EVENTS}  # fmt: skip
    columns = ["event", "contender", "session/hb ms", "trials", "p50 ms", "p90 ms", "p95 ms",
               "owned p50 ms", "first record age ms", "longest unowned ms", "unowned p·s moved",
               "unowned p·s stayed", "moved", "rec/s dip", "p50 / gk coop"]  # fmt: skip
    rows = []
    for e in EVENTS:
        for r in runs:
            s = summ[(r["contender"], e)]
            rows.append([
                e, r["contender"], r["session_heartbeat_ms"],
                f"{s['n']}" + (f" ({s['failed']} failed)" if s["failed"] else ""),
                round(s["p50"] * ms, 1), round(s["p90"] * ms, 1), round(s["p95"] * ms, 1),
                round(s["owned_p50"] * ms, 1), round(s["first_age"], 1),
                round(s["longest"] * ms, 1), round(s["ps_moved"], 3), round(s["ps_stayed"], 3),
                s["moved"], f"{s['dip'] * 100:.0f}%", round(s["p50"] / gk_ref[e], 1),
            ])  # fmt: skip
    # targets
    gk_join = summ.get(("groupkit cooperative", "join"), {})
    natives = [summ[k]["p50"] for k in summ if k[1] == "join" and k[0].startswith("native")
               and summ[k]["p50"] == summ[k]["p50"]]  # fmt: skip
    fastest = min(natives, default=float("nan"))
    coop_stayed = [summ[k]["ps_stayed_max"] for k in summ
                   if k[0] == "groupkit cooperative"]  # fmt: skip
    targets = {
        "gk_coop_join_p50_ms": round(gk_join.get("p50", float("nan")) * ms, 1),
        "gk_coop_join_p50_le_100ms": gk_join.get("p50", 9) <= 0.1,
        "fastest_native_join_p50_ms": round(fastest * ms, 1),
        "speedup_vs_fastest_native": round(fastest / gk_join.get("p50", float("nan")), 1),
        "speedup_ge_10x": fastest / gk_join.get("p50", float("nan")) >= 10,
        "gk_coop_unowned_ps_stayed_max": max(coop_stayed, default=float("nan")),
        "gk_coop_stayed_never_unowned": bool(coop_stayed) and max(coop_stayed) == 0,
    }
    start_loads = ", ".join(f"{r['contender']} {r['load_at_start']['load1']}"
                            for r in runs if "load_at_start" in r)  # fmt: skip
    produced = ", ".join(f"{r['contender']} {r['produced_share'] * 100:.0f}% "
                         f"(queued p50 {r['producer_queued']['p50']}, max "
                         f"{r['producer_queued']['max']})"
                         for r in runs if "produced_share" in r)  # fmt: skip
    gaps = ", ".join(f"{r['contender']} {r['append_gap_ms']['p50']:.0f} / "
                     f"{r['append_gap_ms']['p99']:.0f} / {r['append_gap_ms']['max']:.0f}"
                     for r in runs if "append_gap_ms" in r)  # fmt: skip
    cpu_notes = ", ".join(f"{r['contender']} {r['idle_cpu_per_member'] * 100:.1f}%"
                          for r in runs)  # fmt: skip
    broker_notes = ", ".join(f"{r['contender']} {r['idle_cpu_broker'] * 100:.0f}%" for r in runs
                             if not math.isnan(r.get("idle_cpu_broker", math.nan)))  # fmt: skip
    props = getattr(args, "broker_property", None)
    notes = [
        f"{args.members} members, {args.partitions} partitions, {args.trials} trials "
        f"(kill with default 45 s sessions: {args.default_kill_trials}); producer: one record "
        f"per partition every {args.period * 1000:g} ms. Broker: Kafka's defaults but the "
        f"group minimums the tuned settings need"
        + (f", and {', '.join(props)}" if props else "")
        + ".",
        "p50/p90/p95: event → every partition owned and consuming again. owned: → every "
        "partition owned. first record age: of the moved partitions' first records under their "
        "new owners, the oldest when its member got it (ms after the broker appended it; p50 of "
        "the trials): small while consuming again trails owned means the new owner was "
        "waiting for a record to exist. unowned p·s: partition-seconds without an owner, for "
        "partitions that moved vs stayed with their owner. rec/s dip: lowest 100 ms bin until "
        "stable vs the second before. Ratios against groupkit cooperative in the same run.",
        f"Targets: {targets}",
        f"Idle CPU per member (share of one core): {cpu_notes}"
        + (f"; the broker's over the same seconds: {broker_notes}" if broker_notes else ""),
        f"1-min load as each contender started (after waiting up to {args.settle_max:g} s for "
        f"it to fall to {args.settle_load:g}): {start_loads}",
        f"Records the producer wrote, of those asked for, during each contender (it skips a "
        f"round while two are undelivered), and the records waiting in its queue: {produced}.",
        f"Milliseconds between consecutive records the broker appended to a partition while "
        f"each contender ran (p50 / p99 / max, every {gap_sample_step(args)}th "
        f"partition; the resolution of 'consuming again'): {gaps}.",
        versions_note(vers, seconds),
    ]
    chart = Chart(
        list(EVENTS),
        {r["contender"]: [summ[(r["contender"], e)]["p50"] * ms for e in EVENTS] for r in runs},
        "ms from event to every partition owned and consuming (log)",
        title="Rebalance: p50 (bar) and p90 (whisker)",
        errors={r["contender"]: [summ[(r["contender"], e)]["p90"] * ms for e in EVENTS]
                for r in runs},
        log=True, hline=(100.0, "100 ms target (join)"),
    )  # fmt: skip
    write_results("rebalance", setting_label(args, setting), columns, rows, started=started,
                  title="Rebalance latency and unavailability: groupkit vs the broker's "
                  "protocols (same broker, same run)", results_dir=args.results_dir,
                  notes=notes, chart=chart,
                  extra={"runs": runs, "targets": targets, "versions": vers,
                         "seconds": seconds,
                         "args": {k: v for k, v in vars(args).items()
                                  if k != "results_dir"}})  # fmt: skip


if __name__ == "__main__":
    main()
