"""Benchmark: a newcomer's join latency and control-log replay against the age of its group's log.

One local broker, one topic (48 partitions) with a producer writing one record to every
partition every 10 ms, groupkit groups of ``--members`` cooperative member processes
(``bench/_worker.py``), each group on its own control topic so its log holds only its own
records. Per setting (``tuned``: ``--session-ms`` / ``--heartbeat-ms``, 1 s / 100 ms;
``default``: groupkit's 10 s / 1 s), two groups run one after the other:

- ``auto``: the control topic as groupkit creates it (``segment.ms`` 5 min, see
  ``groupkit/runtime/control_topic.py``);
- ``pre-created``: the control topic created beforehand, as an operator would, with only
  ``cleanup.policy=compact`` and ``message.timestamp.type=LogAppendTime`` (the broker's default
  segments: ``segment.ms`` 7 days, so nothing is ever cleaned within the run).

Each group gets newcomers at two log ages (the time since the group's first member subscribed):
``young`` (20 s) and ``old`` (5 min). Per trial a newcomer process is started and left idle,
then calls ``subscribe()``; measured from that call, as ``bench/rebalance.py`` measures a join:

- ``join``: until every partition is owned and consuming again (rebalance.py's join);
- ``first record``: until the newcomer's own first record;
- ``caught up``: until the newcomer has replayed its control partition up to where it was at
  start-up (``GroupConsumer()`` starts that: usually done before ``subscribe()``, then ~0),
  and ``replayed``: how many control records that took (``Coordinator.stats
  .catch_up_replayed``), from the newest snapshot near the log's end or, where there was none
  (a log younger than its first snapshot), the whole log: the trial line says so;
- ``log end``: the control partition's end offset when the newcomer subscribed.

The newcomer then leaves cleanly and the group settles before the next trial. The ``young``
trials run one every ``--slot`` seconds from the young age on; the ``old`` trials run in the
``trials × slot`` seconds *before* the old age: the ``auto`` topic rolls its active segment at
5 min and the cleaner then compacts it, so just before 5 min is the largest log a newcomer of
that topic replays (the worst case) and just after it a small one. Each trial's actual age is
recorded. The settings run side by side, the second started ``young + trials × slot`` seconds
after the first, so that their starts and trials do not meet (until load delays them: a
trial waits for the group to settle, so read each trial's age); only one group of a setting is
alive at a time, to keep the bench's own load down (still ~1.4 of 2 cores: the broker and 20
member processes). Each trial's 1-min load average is recorded beside it.

    python bench/join_age.py            # full: 10 members, 5 trials, 20 s and 5 min (~12 min)
    python bench/join_age.py --quick    # seconds; for CI
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient

from bench._common import Chart, begin, median, versions_note, write_results
from bench._harness import (
    Group,
    Member,
    load,
    measure,
    pct,
    versions,
)
from bench.rebalance import GK_DEFAULT, paced_topic, wait_fact
from groupkit.dev.harness import wait_for
from groupkit.runtime.admin import create_topic as create_config_topic
from groupkit.runtime.control_topic import REQUIRED_CONFIG, partition_for_group

KINDS = ("auto", "pre-created")
POINTS = ("young", "old")


@dataclass
class AgedGroup:
    """One group of one setting on one kind of control topic, and its trials."""

    setting: str
    kind: str
    group: Group
    started: float = 0.0  # monotonic time the first member subscribed
    trials: dict[str, list[dict[str, float]]] = field(
        default_factory=lambda: {p: [] for p in POINTS}
    )


def log_end(boot: str, topic: str, group_id: str) -> int:
    """End offset of the group's control partition (how many records a full replay reads)."""
    admin = AdminClient({"bootstrap.servers": boot})
    parts = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    c = Consumer({"bootstrap.servers": boot, "group.id": "bench-join-age-probe"})
    try:
        _, hi = c.get_watermark_offsets(KTP(topic, partition_for_group(group_id, parts)), 10)
        return int(hi)
    finally:
        c.close()


def start_group(boot: str, topic: str, work: Path, setting: str, kind: str,
                args: argparse.Namespace) -> AgedGroup:  # fmt: skip
    """Spawn the members (idle) and, for ``pre-created``, create the control topic as an
    operator would; the group starts in :func:`subscribe_all`."""
    session, heartbeat = (args.session_ms, args.heartbeat_ms) if setting == "tuned" else GK_DEFAULT
    gid = f"bench-age-{setting}-{kind[:3]}-{uuid.uuid4().hex[:6]}"
    control = f"__gk_{gid}"
    if kind == "pre-created":
        # Only what groupkit requires: every other setting is the broker's default.
        create_config_topic(AdminClient({"bootstrap.servers": boot}), control, 1,
                            config=REQUIRED_CONFIG)  # fmt: skip
    group = Group(boot, gid, topic, args.partitions, work, "gk", "cooperative", session,
                  heartbeat, control_topic=control)  # fmt: skip
    members = [group.spawn() for _ in range(args.members)]
    group.wait_ready(members)
    return AgedGroup(setting, kind, group)


def subscribe_all(ag: AgedGroup) -> None:
    members = list(ag.group.members.values())
    for m in members:
        m.send("subscribe")
    for m in members:
        wait_fact(ag.group, m, "sub")
    ag.started = min(m.fact("sub")["t"] for m in members)  # type: ignore[index]


#: how long before its trial a newcomer's process is started (and catches up)
START_AHEAD_S = 5.0


def trial(ag: AgedGroup, joiner: Member, boot: str, timeout: float) -> dict[str, float]:
    """One newcomer (started, idle): join (measured), then a clean leave and the group settled."""
    group = ag.group
    group.wait_stable(timeout)
    end = log_end(boot, group.control_topic, group.group)
    joiner.send("subscribe")
    wait_fact(group, joiner, "sub")
    t0: float = joiner.fact("sub")["t"]  # type: ignore[index]
    group.wait_stable(timeout)
    r = measure(group, t0, time.monotonic())
    wait_fact(group, joiner, "caught", timeout)
    caught = joiner.fact("caught")
    assert caught is not None
    firsts = [f["t"] for f in joiner.facts() if f["e"] == "first" and f["t"] >= t0]
    r.update(
        age_s=t0 - ag.started,
        first_s=min(firsts) - t0 if firsts else float("nan"),
        caught_s=caught["t"] - t0,
        replayed=float(caught["n"]),
        # 1: no snapshot near the log's end at GroupConsumer() (a young log): replayed whole
        full_replay=float(caught.get("how") == "full"),
        log_end=float(end),
        load1=load()["load1"],
    )
    joiner.send("close")
    wait_fact(group, joiner, "closed", timeout)
    joiner.proc.wait(30)
    group.wait_stable(timeout)
    return r


def run_group(boot: str, topic: str, work: Path, setting: str, kind: str,
              args: argparse.Namespace) -> AgedGroup:  # fmt: skip
    """One group from its start to its last trial, then stopped (its CPU freed for the next)."""
    window = args.trials * args.slot
    timeout = (args.session_ms if setting == "tuned" else GK_DEFAULT[0]) / 1000 + 60
    ag = start_group(boot, topic, work, setting, kind, args)
    try:
        subscribe_all(ag)
        ag.group.wait_stable(timeout=120)
        print(f"  {setting} {kind}: {args.members} members stable "
              f"{time.monotonic() - ag.started:.1f} s after start", flush=True)  # fmt: skip
        due = sorted((ag.started + at, p, n) for n in range(args.trials)
                     for p, at in (("young", args.young + n * args.slot),
                                   ("old", args.old - window + n * args.slot)))  # fmt: skip
        for at, point, n in due:
            # Started ahead of its time, so a loaded machine's slow Python start-up does not
            # push the trial (and the ones after it) to a later log age; but not long before it:
            # GroupConsumer() catches up at once, and a newcomer started right after the group
            # formed caught up from a log with no snapshot yet (it replayed the whole log, 219
            # records in one run, not the log of the age it was meant to join at).
            time.sleep(max(0.0, at - START_AHEAD_S - time.monotonic()))
            joiner = ag.group.spawn()
            ag.group.wait_ready([joiner])
            time.sleep(max(0.0, at - time.monotonic()))
            r = trial(ag, joiner, boot, timeout)
            ag.trials[point].append(r)
            print(f"  {setting} {kind} {point} trial {n + 1}/{args.trials}: age "
                  f"{r['age_s']:.0f} s, join {r['stable_s'] * 1000:.0f} ms, first record "
                  f"{r['first_s'] * 1000:.0f} ms, caught up {r['caught_s'] * 1000:.0f} ms "
                  f"after replaying {r['replayed']:.0f} of {r['log_end']:.0f} records"
                  f"{' (whole log)' if r['full_replay'] else ''}, "
                  f"load {r['load1']}", flush=True)  # fmt: skip
    finally:
        ag.group.stop_all()
    return ag


def run_lane(boot: str, topic: str, work: Path, setting: str, delay: float,
             args: argparse.Namespace) -> list[AgedGroup]:  # fmt: skip
    """One setting's groups, one after the other, after ``delay`` seconds."""
    time.sleep(delay)
    return [run_group(boot, topic, work, setting, k, args) for k in args.kinds]


def summarize(ts: list[dict[str, float]]) -> dict[str, float]:
    ok = [t for t in ts if t.get("ok")]

    def col(k: str) -> list[float]:
        return [t[k] for t in ok]

    return {
        "n": len(ok), "failed": len(ts) - len(ok),
        "age": median(col("age_s")), "p50": pct(col("stable_s"), 0.5),
        "p90": pct(col("stable_s"), 0.9), "p95": pct(col("stable_s"), 0.95),
        "first": pct(col("first_s"), 0.5),
        "caught": pct(col("caught_s"), 0.5), "replayed": median(col("replayed")),
        "log_end": median(col("log_end")),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="3 members, ages 5 s and 15 s, one trial, tuned only")  # fmt: skip
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=48)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--young", type=float, default=20.0, help="young log age, seconds")
    ap.add_argument("--old", type=float, default=300.0, help="old log age, seconds")
    ap.add_argument("--slot", type=float, default=8.0, help="seconds between a point's trials")
    ap.add_argument("--session-ms", type=int, default=1000, help="tuned session timeout")
    ap.add_argument("--heartbeat-ms", type=int, default=100, help="tuned heartbeat interval")
    ap.add_argument("--settings", default="tuned,default")
    ap.add_argument("--kinds", default=",".join(KINDS), help="control topics: auto,pre-created")
    ap.add_argument("--bootstrap", help="use this broker (its minimums must allow --session-ms)")
    ap.add_argument("--results-dir", type=Path, default=None)
    args = ap.parse_args()
    if args.quick:
        args.members, args.partitions, args.trials = 3, 4, 1
        args.young, args.old, args.slot, args.settings = 5.0, 15.0, 4.0, "tuned"
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    started = begin()
    t_start = time.monotonic()
    runs: list[AgedGroup] = []
    with paced_topic(args, "join-age") as (work, boot, topic, pacer):
        wait_for(lambda: pacer.stats().count > 0, 30, "the producer")
        # One lane per setting, side by side, each offset by a young point's trials so
        # that no start or trial of one lane meets one of another (at least at first).
        stagger = args.young + args.trials * args.slot + 2.0
        with ThreadPoolExecutor(len(settings)) as pool:
            lanes = [pool.submit(run_lane, boot, topic, work, s, i * stagger, args)
                     for i, s in enumerate(settings)]  # fmt: skip
            for lane in lanes:
                runs += lane.result()
    kept = [{"setting": r.setting, "kind": r.kind, "session_ms": r.group.session_ms,
             "heartbeat_ms": r.group.heartbeat_ms, "trials": r.trials} for r in runs]  # fmt: skip
    report(kept, args, started, time.monotonic() - t_start, pacer.stats().dropped_rounds)


def report(runs: list[dict[str, Any]], args: argparse.Namespace, started: dict[str, Any],
           seconds: float, dropped_rounds: int,
           vers: dict[str, str] | None = None) -> None:  # fmt: skip
    """Write one entry per setting. ``runs``: per group, its setting, kind, session_ms,
    heartbeat_ms and trials (as the JSON keeps them); ``vers``: else this checkout's."""
    vers = vers or versions()
    for setting in dict.fromkeys(r["setting"] for r in runs):
        report_setting([r for r in runs if r["setting"] == setting], setting, args, started,
                       seconds, dropped_rounds, vers)  # fmt: skip


def report_setting(runs: list[dict[str, Any]], setting: str, args: argparse.Namespace,
                   started: dict[str, Any], seconds: float, dropped_rounds: int,
                   vers: dict[str, str]) -> None:  # fmt: skip
    ms = 1000.0
    summ = {(r["kind"], p): summarize(r["trials"][p]) for r in runs for p in POINTS}
    columns = ["session/hb ms", "control topic", "point", "age s", "trials", "join p50 ms",
               "join p90 ms", "join p95 ms", "first record p50 ms", "caught up p50 ms",
               "replayed p50", "log end p50", "join p50 / young"]  # fmt: skip
    rows = []
    for r in runs:
        young = summ[(r["kind"], "young")]["p50"]
        for p in POINTS:
            s = summ[(r["kind"], p)]
            rows.append([
                f"{r['session_ms']}/{r['heartbeat_ms']}", r["kind"], p, round(s["age"], 0),
                f"{s['n']}" + (f" ({s['failed']} failed)" if s["failed"] else ""),
                round(s["p50"] * ms, 1), round(s["p90"] * ms, 1), round(s["p95"] * ms, 1),
                round(s["first"] * ms, 1), round(s["caught"] * ms, 1), s["replayed"],
                s["log_end"], round(s["p50"] / young, 2),
            ])  # fmt: skip
    # Targets: flat in log age (<= 1.2x old / young, the same on a pre-created topic) and a
    # replay bounded by members x 1.5 x session / heartbeat + a small constant.
    targets: dict[str, Any] = {}
    for r in runs:
        key = r["kind"].replace("-", "_")
        young, old = summ[(r["kind"], "young")], summ[(r["kind"], "old")]
        auto_young = summ.get(("auto", "young"), young)
        bound = args.members * 1.5 * r["session_ms"] / r["heartbeat_ms"]
        targets[f"{key}_old_over_young"] = round(old["p50"] / young["p50"], 2)
        targets[f"{key}_old_over_auto_young"] = round(old["p50"] / auto_young["p50"], 2)
        targets[f"{key}_flat_le_1.2x"] = old["p50"] / auto_young["p50"] <= 1.2
        targets[f"{key}_replay_bound"] = bound
        targets[f"{key}_replay_max"] = max((t["replayed"] for p in POINTS
                                            for t in r["trials"][p]),
                                           default=float("nan"))  # fmt: skip
    loads = [t["load1"] for r in runs for p in POINTS for t in r["trials"][p]]
    load_during = {"median": median(loads), "max": max(loads, default=float("nan"))}
    notes = [
        f"{args.members} members (cooperative, cooperative-sticky), {args.partitions} "
        f"partitions, {args.trials} trials a point; young {args.young:.0f} s, old "
        f"{args.old:.0f} s (old trials in the {args.trials * args.slot:.0f} s before it); "
        f"producer: one record per partition every 10 ms ({dropped_rounds} rounds skipped while "
        "two were undelivered). Each group on its own control topic.",
        "join: subscribe() → every partition owned and consuming again (as rebalance.py). first "
        "record: → the newcomer's first record. caught up: → the newcomer has replayed its control "
        "partition; replayed: control records replayed to catch up "
        "(Coordinator.stats.catch_up_replayed). "
        "log end: the control partition's end offset at subscribe(). join p50 / young: against "
        "the same group's young point.",
        "auto: control topic created by groupkit (segment.ms 5 min); pre-created: created first "
        "with only cleanup.policy=compact, message.timestamp.type=LogAppendTime (segment.ms 7 d).",
        f"Targets: {targets}",
        f"1-minute load during this setting's trials: median {load_during['median']}, max "
        f"{load_during['max']}.",
        versions_note(vers, seconds),
    ]
    chart = Chart(
        [f"{p} ({getattr(args, p):.0f} s)" for p in POINTS],
        {r["kind"]: [summ[(r["kind"], p)]["p50"] * ms for p in POINTS] for r in runs},
        "ms from subscribe() to every partition consuming (log)",
        title=f"Join against log age: p50 (bar) and p90 (whisker), {args.members} members",
        errors={r["kind"]: [summ[(r["kind"], p)]["p90"] * ms for p in POINTS] for r in runs},
        log=True,
    )  # fmt: skip
    label = f"{args.members}x{args.partitions} {setting}"
    write_results("join_age", label, columns, rows, started=started,
                  title="Join latency and control replay against log age (groupkit, one "
                  "broker, same run)", results_dir=args.results_dir, notes=notes, chart=chart,
                  extra={"runs": runs, "targets": targets, "versions": vers,
                         "load_during": load_during, "seconds": seconds,
                         "producer_dropped_rounds": dropped_rounds,
                         "args": {k: v for k, v in vars(args).items()
                                  if k != "results_dir"}})  # fmt: skip


if __name__ == "__main__":
    main()
