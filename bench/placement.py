"""Benchmark: placement that follows the load, against placements that do not.

Capacity-limited members under skewed producers. Every member processes at most ``--max-rate``
(100) records a second, paced (it sleeps what a record's work would take, as the demo's
``--max-rate``: a member burning CPU per record would share the machine's cores with the others,
and the bench would measure that). ``--members`` (3) members, ``--partitions`` (12), a total
load of ``--load`` (60 %) of the group's capacity. Scenarios, each ``--duration`` (180 s):

- ``zipf``: partition ``p`` weighs ``1 / (p + 1)``; at a third of the run, a burst of
  ``--burst`` (3000) records into the partition of the member with the most load (time to
  drain: until the group's lag is back under twice what it was before the burst);
- ``moving``: one hot partition takes half the load, the others share the rest; the hot spot
  moves to another member's partition every ``--move-every`` (60) s;
- ``steady`` (not in the default run: ``--scenarios steady --duration 300``): every partition
  the same load; load-following must make no move.

Contenders, all four at once in each scenario on the same broker (each its own topic, group
and producer, the same load): ``balanced`` with load rebalancing (every ``--interval-ms``,
10 s); ``cooperative-sticky``; ``lag`` (KIP-169, at rebalance only); native KIP-848
(``group.protocol=consumer``, the broker's ``uniform`` assignor).

Reported per scenario and contender: the peak and p95 member lag (records, sampled each
second from the group's committed offsets and the members' assignments), the p99 end-to-end
latency of records (broker append time to the member's poll, LogAppendTime topics),
partitions moved per minute, unowned partition-seconds, re-plans, and for ``zipf`` the time to
drain after the burst.

    python bench/placement.py            # two scenarios x 180 s, four contenders at once
    python bench/placement.py --quick    # a short smoke run
    python bench/placement.py --scenarios steady --duration 300 --contenders "balanced + load"
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import Chart, begin, pct, versions_note, write_results
from bench._harness import ROOT, broker, create_topic, load, versions

# name -> (kind, assignor or native protocol, load interval ms)
CONTENDERS: dict[str, tuple[str, str, int]] = {
    "balanced + load": ("gk", "balanced", -1),  # -1: --interval-ms
    "cooperative-sticky": ("gk", "cooperative-sticky", 0),
    "lag (rebalance only)": ("gk", "lag", 0),
    "KIP-848 uniform": ("native", "consumer", 0),
}
LOAD_FOLLOWING = "balanced + load"
ANCHORS = ("cooperative-sticky", "KIP-848 uniform")


# --------------------------------------------------------------------------- a member


def worker(args: argparse.Namespace) -> int:
    """One paced member: one JSON line a second (owned partitions, records, latencies ms)."""
    from confluent_kafka import Consumer

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    base = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "latest",
        "auto.commit.interval.ms": 500,
        "log_level": 3,
    }
    consumer: Any
    if args.kind == "gk":
        from groupkit import GroupConsumer
        from groupkit.log import configure

        configure(json=True, level="info")  # its re-plans are counted from its output

        consumer = GroupConsumer({
            **base, "session.timeout.ms": 6000, "heartbeat.interval.ms": 600,
            "groupkit.assignor": args.assignor, "groupkit.control.topic": args.control_topic,
            "groupkit.load.rebalance.interval.ms": args.interval_ms,
        })  # fmt: skip
    else:
        consumer = Consumer({**base, "group.protocol": "consumer"})
    consumer.subscribe([args.topic])
    out = open(args.audit, "a", buffering=1)  # noqa: SIM115  (closed below, line-buffered)
    batch = max(1, int(args.max_rate / 20))
    n, lats, last = 0, [], time.monotonic()
    try:
        while not stop.is_set():
            t0 = time.monotonic()
            msgs = consumer.consume(batch, 0.05)
            now_ms = time.time() * 1000
            for m in msgs:
                if m.error() is None:
                    n += 1
                    lats.append(round(now_ms - m.timestamp()[1]))
            if msgs:  # the records' work: paced, not burnt
                stop.wait(max(0.0, len(msgs) / args.max_rate - (time.monotonic() - t0)))
            if time.monotonic() - last >= 1.0:
                last = time.monotonic()
                owned = sorted(tp.partition for tp in consumer.assignment())
                out.write(
                    json.dumps({"t": time.time(), "owned": owned, "n": n, "lat": lats}) + "\n"
                )
                n, lats = 0, []
    finally:
        consumer.close()
        out.close()
    return 0


# --------------------------------------------------------------------------- the load


def rates(scenario: str, args: argparse.Namespace, hot: int) -> list[float]:
    """Records/s per partition (``hot``: the hot partition of ``moving``)."""
    total = args.load * args.members * args.max_rate
    n = args.partitions
    if scenario == "zipf":
        w = [1 / (p + 1) for p in range(n)]
    elif scenario == "steady":
        w = [1.0] * n
    else:
        w = [float(n - 1) if p == hot else 1.0 for p in range(n)]
    s = sum(w)
    return [total * x / s for x in w]


class Producer(threading.Thread):
    """Writes ``rates(...)`` into one contender's topic; ``burst`` adds records at once."""

    def __init__(self, boot: str, topic: str, scenario: str, args: argparse.Namespace) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer as KProducer

        self.p = KProducer({"bootstrap.servers": boot, "linger.ms": 20})
        self.topic, self.scenario, self.args = topic, scenario, args
        #: the hot partition of ``moving`` (the bench moves it)
        self.hot = 0
        self.halt = threading.Event()
        self.bursts: list[tuple[int, int]] = []  # (partition, records) to write at once
        self.lock = threading.Lock()

    def run(self) -> None:
        owed = [0.0] * self.args.partitions
        tick = 0.05
        while not self.halt.is_set():
            r = rates(self.scenario, self.args, self.hot)
            with self.lock:
                bursts, self.bursts = self.bursts, []
            for p, k in bursts:
                for _ in range(k):
                    self.p.produce(self.topic, b"x" * 32, partition=p)
                    self.p.poll(0)
            for p, x in enumerate(r):
                owed[p] += x * tick
                while owed[p] >= 1:
                    self.p.produce(self.topic, b"x" * 32, partition=p)
                    owed[p] -= 1
            self.p.poll(0)
            self.halt.wait(tick)
        self.p.flush(5)


# --------------------------------------------------------------------------- one scenario


def run_scenario(boot: str, work: Path, scenario: str, args: argparse.Namespace,
                 names: list[str]) -> dict[str, dict[str, Any]]:  # fmt: skip
    from confluent_kafka.admin import AdminClient

    from groupkit.runtime.lag import read_offsets
    from groupkit.types import TopicPartition

    admin = AdminClient({"bootstrap.servers": boot})
    runs: dict[str, dict[str, Any]] = {}
    procs: list[subprocess.Popen[bytes]] = []
    for name in names:
        kind, assignor, interval = CONTENDERS[name]
        tag = uuid.uuid4().hex[:6]
        topic, group = f"bench-placement-{tag}", f"bench-placement-{tag}"
        create_topic(boot, topic, args.partitions)
        audits = [work / f"{scenario}-{tag}-m{i}.jsonl" for i in range(args.members)]
        for a in audits:
            cmd = [sys.executable, str(Path(__file__).resolve()), "worker", "--kind", kind,
                   "--bootstrap", boot, "--group", group, "--topic", topic, "--audit", str(a),
                   "--assignor", assignor, "--max-rate", str(args.max_rate),
                   "--interval-ms", str(args.interval_ms if interval < 0 else interval),
                   "--control-topic", f"__groupkit-{tag}"]  # fmt: skip
            log = open(a.with_suffix(".out"), "wb")  # noqa: SIM115  (the child's output)
            procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
        runs[name] = {"topic": topic, "group": group, "audits": audits, "samples": []}
    time.sleep(args.warmup)  # every group formed before the load starts
    producers = {n: Producer(boot, r["topic"], scenario, args) for n, r in runs.items()}
    for p in producers.values():
        p.start()
    t0 = time.monotonic()
    burst_at = args.duration / 3 if scenario == "zipf" else None
    burst_done = False
    moves = 0
    try:
        while (el := time.monotonic() - t0) < args.duration:
            if scenario == "moving" and el >= (moves + 1) * args.move_every:
                moves += 1
                for n, r in runs.items():  # to the least loaded other member's first partition
                    pr = producers[n]
                    owners = _owners(r["audits"])
                    rs = rates(scenario, args, pr.hot)
                    others = [(sum(rs[p] for p in ps), m) for m, ps in owners.items()
                              if ps and pr.hot not in ps]  # fmt: skip
                    if others:
                        pr.hot = min(owners[min(others)[1]])
                    r.setdefault("hot", []).append((round(el), pr.hot))
            if burst_at is not None and not burst_done and el >= burst_at:
                burst_done = True
                for n, r in runs.items():
                    owners = _owners(r["audits"])
                    rs = rates(scenario, args, producers[n].hot)
                    load_of = {m: sum(rs[p] for p in ps) for m, ps in owners.items()}
                    busiest = max(load_of, key=lambda m: load_of[m], default=None)
                    part = min(owners[busiest]) if busiest is not None and owners[busiest] else 0
                    with producers[n].lock:
                        producers[n].bursts.append((part, args.burst))
                    r["burst_at"] = el
            for r in runs.values():
                parts = [TopicPartition(r["topic"], p) for p in range(args.partitions)]
                try:
                    lag = read_offsets(admin, r["group"], parts, "latest", timeout=5).lag
                except Exception:  # a sample missed is a sample missed
                    continue
                lags = {tp.partition: v for tp, v in lag.items()}
                r["samples"].append({"t": el, "owners": _owners(r["audits"]), "lag": lags})
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t0 - el)))
    finally:
        for p in producers.values():
            p.halt.set()
        for p in producers.values():
            p.join(10)
        for pr in procs:
            pr.send_signal(signal.SIGTERM)
        for pr in procs:
            try:
                pr.wait(30)
            except subprocess.TimeoutExpired:
                pr.kill()
        producers.clear()  # their clients go before the broker does
        del admin
    return {n: summarize(r, args) for n, r in runs.items()}


def _owners(audits: list[Path]) -> dict[str, list[int]]:
    """Each member's partitions as its newest line says."""
    out: dict[str, list[int]] = {}
    for a in audits:
        last = None
        if a.exists():
            lines = a.read_text().splitlines()
            last = json.loads(lines[-1]) if lines else None
        out[a.stem] = list(last["owned"]) if last else []
    return out


def summarize(r: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    samples = r["samples"]
    member_lags: list[float] = []
    moved = 0
    unowned = 0.0
    prev: dict[int, str] = {}
    group_lag: list[tuple[float, float]] = []
    for s in samples:
        owner = {p: m for m, ps in s["owners"].items() for p in ps}
        for ps in s["owners"].values():
            member_lags.append(sum(s["lag"].get(p, 0) for p in ps))
        unowned += sum(1 for p in range(args.partitions) if p not in owner)
        moved += sum(1 for p, m in owner.items() if p in prev and prev[p] != m)
        prev = owner
        group_lag.append((s["t"], sum(s["lag"].values())))
    lats: list[float] = []
    for a in r["audits"]:
        if a.exists():
            for line in a.read_text().splitlines():
                lats.extend(json.loads(line)["lat"])
    drain = None
    if "burst_at" in r:
        before = [v for t, v in group_lag if t < r["burst_at"]][-5:]
        base = max(1.0, sum(before) / len(before)) if before else 1.0
        after = [(t, v) for t, v in group_lag if t >= r["burst_at"] + 2]
        done = next((t for t, v in after if v <= 2 * base), None)
        drain = None if done is None else round(done - r["burst_at"], 1)
    replans = 0
    for a in r["audits"]:
        out = a.with_suffix(".out")
        if out.exists():
            replans += out.read_text(errors="replace").count("load.replan")
    minutes = max(1e-9, (samples[-1]["t"] - samples[0]["t"]) / 60) if samples else 1.0
    return {
        "peak_member_lag": max(member_lags, default=0),
        "p95_member_lag": round(pct(member_lags, 0.95), 1) if member_lags else 0,
        "p99_latency_ms": round(pct(lats, 0.99)) if lats else None,
        "records": len(lats),
        "moved_per_min": round(moved / minutes, 2),
        "unowned_partition_s": unowned,
        "drain_s": drain,
        "replans": replans,
        "samples": len(samples),
    }


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    w = sub.add_parser("worker")
    for k in ("--kind", "--bootstrap", "--group", "--topic", "--audit", "--assignor",
              "--control-topic"):  # fmt: skip
        w.add_argument(k, required=True)
    w.add_argument("--max-rate", type=float, required=True)
    w.add_argument("--interval-ms", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="60 s scenarios")
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--max-rate", type=float, default=100.0, help="records/s a member processes")
    ap.add_argument("--load", type=float, default=0.6, help="share of the group's capacity")
    ap.add_argument("--duration", type=float, default=180.0, help="seconds a scenario")
    ap.add_argument("--move-every", type=float, default=60.0)
    ap.add_argument("--burst", type=int, default=3000)
    ap.add_argument("--interval-ms", type=int, default=10_000)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--scenarios", default="zipf,moving")
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--bootstrap", help="use this broker")
    ap.add_argument("--results-dir", type=Path, default=None)
    args = ap.parse_args()
    if args.cmd == "worker":
        sys.exit(worker(args))
    if args.quick:
        args.duration, args.move_every, args.warmup = 60.0, 20.0, 10.0
    names = [c.strip() for c in args.contenders.split(",") if c.strip()]
    started, t_start = begin(), time.monotonic()
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="gk-bench-placement-") as tmp:
        work = Path(os.environ.get("GK_BENCH_KEEP") or tmp)
        work.mkdir(parents=True, exist_ok=True)
        with broker(
            args.bootstrap, work / "broker", {"group.initial.rebalance.delay.ms": "0"}
        ) as boot:
            for scenario in [s.strip() for s in args.scenarios.split(",") if s.strip()]:
                print(f"{scenario}: {', '.join(names)} at once (load {load()['load1']}) ...",
                      flush=True)  # fmt: skip
                results[scenario] = run_scenario(boot, work, scenario, args, names)
    report(results, args, started, time.monotonic() - t_start)


def report(results: dict[str, dict[str, dict[str, Any]]], args: argparse.Namespace,
           started: dict[str, Any], seconds: float) -> None:  # fmt: skip
    columns = ["scenario", "contender", "peak member lag", "p95 member lag", "p99 latency ms",
               "time to drain s", "moved / min", "unowned partition-s", "re-plans",
               "records"]  # fmt: skip
    rows = []
    targets: dict[str, bool] = {}
    for scenario, by in results.items():
        for name, s in by.items():
            rows.append([scenario, name, s["peak_member_lag"], s["p95_member_lag"],
                         s["p99_latency_ms"], s["drain_s"], s["moved_per_min"],
                         s["unowned_partition_s"], s["replans"], s["records"]])  # fmt: skip
        lf = by.get(LOAD_FOLLOWING)
        if scenario == "moving" and lf is not None:
            for anchor in ANCHORS:
                a = by.get(anchor)
                if a is None:
                    continue
                targets[f"moving: peak lag <= half of {anchor}"] = (
                    lf["peak_member_lag"] <= a["peak_member_lag"] / 2
                )
                targets[f"moving: p99 latency <= half of {anchor}"] = (
                    lf["p99_latency_ms"] is not None and a["p99_latency_ms"] is not None
                    and lf["p99_latency_ms"] <= a["p99_latency_ms"] / 2
                )  # fmt: skip
            per_interval = args.duration / (args.interval_ms / 1000)
            targets["moving: at most one re-plan per interval"] = lf["replans"] <= per_interval
        if scenario == "steady" and lf is not None:
            targets[f"steady: no move in {args.duration:g} s"] = (
                lf["replans"] == 0 and lf["moved_per_min"] == 0
            )
    notes = [
        f"{args.members} members each processing at most {args.max_rate:g} records/s (paced), "
        f"{args.partitions} partitions, load {args.load:.0%} of the group's capacity; "
        f"{args.duration:g} s a scenario, its contenders at once on one broker. "
        f"zipf: partition p weighs 1/(p+1), a burst of {args.burst} records into the busiest "
        f"member's partition at a third of the run. moving: one partition takes half the load, "
        f"the hot spot moves to another member's partition every {args.move_every:g} s.",
        f"Load following: balanced, groupkit.load.rebalance.interval.ms={args.interval_ms}, at "
        "most 2 partitions a re-plan. Member lag: the sum of its partitions' lag (end − "
        "committed), sampled each second. Latency: broker append time (LogAppendTime) to the "
        "member's poll. Time to drain: from the burst until the group's lag is back under "
        "twice what it was before.",
        f"Targets: {targets}",
        versions_note(versions(), seconds),
    ]
    charts_series: dict[str, list[float]] = {}
    cats = [f"{sc}: peak member lag" for sc in results]
    for name in CONTENDERS:
        vals = [float(results[sc][name]["peak_member_lag"]) if name in results[sc]
                else float("nan") for sc in results]  # fmt: skip
        charts_series[name] = vals
    chart = Chart(cats, charts_series, "records", title="Peak member lag (lower is better)")
    setting = f"{args.members}x{args.partitions} {args.load:.0%} load {args.duration:g}s"
    write_results("placement", setting, columns, rows, started=started,
                  title="Placement that follows the load: balanced + load re-plans vs "
                  "cooperative-sticky, lag and KIP-848 uniform (same broker, same run)",
                  results_dir=args.results_dir, notes=notes, chart=chart,
                  extra={"results": results, "targets": targets, "versions": versions(),
                         "seconds": seconds,
                         "args": {k: v for k, v in vars(args).items()
                                  if k not in ("results_dir", "cmd")}})  # fmt: skip


if __name__ == "__main__":
    main()
