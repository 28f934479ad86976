"""Benchmark: groupkit's sticky, balanced and lag assignors against Apache Kafka's (Java)
sticky and kafka-python's.

Shapes (from Kafka's and franz-go's own benchmarks), each timed fresh and then after one
follow-up rebalance where every remaining member owns what the fresh assignment gave it:

- ``large-equal``: 500 topics x 2,000 partitions (1,000,000) x 2,000 members, equal
  subscriptions; then one member joins.
- ``unequal-40k``: 50 topics x 800 partitions (40,000) x 800 members, plus one member
  subscribed only to the first topic (unequal: the general path); then one member joins.
- ``librdkafka``: librdkafka's large group: 200 members, 40 topics where topic i has i+1
  partitions, member i subscribes to the first ((i+1)*17 mod 40) topics; then every 4th member
  leaves.
- ``quick-equal`` / ``quick-unequal``: small versions for CI (``--quick``).

The lag-aware assignors (``balanced``, ``lag``) get one skewed lag per partition (Pareto,
shape 1.5, scale 1,000 records; seeded, built before the clock starts), as the runtime fetches
lags only for them; ``sticky`` and the anchors see no lags. Every groupkit row also reports the
largest member lag of its result under those lags, over the lower bound
``max(total / members, heaviest partition)``: the quality ``balanced`` buys with its time.

Every implementation runs in its own process (``--worker``), so the peak resident memory of
that process (inputs included) is reported beside its times. The anchors run in the same
invocation: ``bench/anchors/StickyBench.java`` drives Kafka's ``StickyAssignor`` and
``CooperativeStickyAssignor`` from ``org.apache.kafka:kafka-clients`` (resolved with ``mvn``
into ``~/.cache/groupkit/bench-jars``), and kafka-python's ``StickyAssignmentExecutor`` runs
where it finishes within ``--kafka-python-timeout`` (install with ``pip install -e .[bench]``).

    python bench/assignors.py            # full run, writes bench/results/assignors.{json,md}
    python bench/assignors.py --quick    # seconds; for CI
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import begin, median, timed_runs, write_results

HERE = Path(__file__).resolve().parent
KAFKA_CLIENTS = "4.1.1"
JARS = Path(os.environ.get("GROUPKIT_BENCH_JARS", Path.home() / ".cache/groupkit/bench-jars"))

Shape = tuple[dict[str, int], dict[str, list[str]]]


def _topic(i: int) -> str:
    return f"topic{i:03d}"


def _member(i: int) -> str:
    return f"member{i:04d}"


def _equal(topics: int, parts: int, members: int) -> Shape:
    p = {_topic(t): parts for t in range(topics)}
    return p, {_member(i): list(p) for i in range(members)}


def _plus_one(topics: int, parts: int, members: int) -> Shape:
    p, m = _equal(topics, parts, members)
    m[_member(members)] = [_topic(0)]
    return p, m


def _librdkafka(members: int, topics: int) -> Shape:
    p = {_topic(t): t + 1 for t in range(topics)}
    m = {_member(i): [_topic(t) for t in range(((i + 1) * 17) % topics)] for i in range(members)}
    return p, m


# Must stay identical to StickyBench.shape().
SHAPES: dict[str, Callable[[], Shape]] = {
    "large-equal": lambda: _equal(500, 2000, 2000),
    "unequal-40k": lambda: _plus_one(50, 800, 800),
    "librdkafka": lambda: _librdkafka(200, 40),
    "quick-equal": lambda: _equal(50, 200, 200),
    "quick-unequal": lambda: _plus_one(10, 80, 80),
}
FULL = ["large-equal", "unequal-40k", "librdkafka"]
#: groupkit's assignors in the table: the sticky one, and the two lag-aware ones beside it
GROUPKIT = ["sticky", "balanced", "lag"]
QUICK = ["quick-equal", "quick-unequal", "librdkafka"]


def _follow_up(shape: str, members: dict[str, list[str]]) -> tuple[str, dict[str, list[str]]]:
    """The second rebalance of a shape: every 4th member leaves, or one member joins."""
    if shape == "librdkafka":
        return "every-4th-leaves", {m: t for k, (m, t) in enumerate(members.items()) if k % 4}
    partitions_topics = sorted({t for ts in members.values() for t in ts})
    return "one-joins", {**members, "member9999": partitions_topics}


# -- workers (one process per implementation and shape) --------------------------------------


def _moved(before: dict[str, list[Any]], after: dict[str, list[Any]]) -> int:
    prev = {tuple(tp): m for m, tps in before.items() for tp in tps}
    return sum(
        1
        for m, tps in after.items()
        for tp in tps
        if prev.get(tuple(tp), m) != m and prev[tuple(tp)] in after
    )


def _emit(
    impl: str,
    shape: str,
    phase: str,
    parts: int,
    members: int,
    moved: int,
    times: list[float],
    extra: dict[str, Any] | None = None,
) -> None:
    doc = {"assignor": impl, "shape": shape, "phase": phase, "partitions": parts}
    doc |= {"members": members, "moved": moved, "times": times, **(extra or {})}
    print(json.dumps(doc), flush=True)


def _lags(parts: dict[str, int]) -> dict[Any, int]:
    """One skewed lag per partition: Pareto (shape 1.5) times 1,000 records, seeded."""
    import random

    from groupkit.assignors import TopicPartition

    rng = random.Random(19)
    return {
        TopicPartition(t, p): int(rng.paretovariate(1.5) * 1000)
        for t, n in sorted(parts.items())
        for p in range(n)
    }


def _largest_over_bound(assignment: dict[str, list[Any]], lags: dict[Any, int]) -> float:
    """The largest member lag of ``assignment`` over ``max(total / members, heaviest)``."""
    from groupkit.assignors.invariants import lag_lower_bound, member_loads

    bound = lag_lower_bound(lags.values(), len(assignment))
    return max(member_loads(assignment, lags).values()) / bound if bound else 1.0


def _worker_groupkit(name: str, shape: str, runs: int) -> None:
    from groupkit.assignors import MemberSubscription, get_assignor

    assignor = get_assignor(name)
    parts, members = SHAPES[shape]()
    total = sum(parts.values())
    lags = _lags(parts)
    given = lags if assignor.uses_lag else None
    subs = {m: MemberSubscription(ts) for m, ts in members.items()}
    times, first = timed_runs(lambda: assignor.assign(parts, subs, given), runs)
    quality = {"largest_over_bound": _largest_over_bound(first, lags)}
    _emit(f"groupkit {name}", shape, "fresh", total, len(subs), 0, times, quality)

    phase, nxt = _follow_up(shape, members)
    subs = {
        m: MemberSubscription(ts, owned=first.get(m, ()), generation=1) for m, ts in nxt.items()
    }
    times, after = timed_runs(lambda: assignor.assign(parts, subs, given), runs)
    quality = {"largest_over_bound": _largest_over_bound(after, lags)}
    moved = _moved(first, after)
    _emit(f"groupkit {name}", shape, phase, total, len(subs), moved, times, quality)


def _worker_kafka_python(shape: str, runs: int) -> None:
    from kafka.coordinator.assignors.sticky.sticky_assignor import (
        StickyAssignmentExecutor,
        StickyAssignorMemberMetadataV1,
    )
    from kafka.structs import TopicPartition as KTP

    parts, members = SHAPES[shape]()
    total = sum(parts.values())

    class Cluster:
        """The two calls the executor makes on kafka-python's ClusterMetadata."""

        def topics(self) -> set[str]:
            return set(parts)

        def partitions_for_topic(self, topic: str) -> set[int] | None:
            return set(range(parts[topic])) if topic in parts else None

    def run(meta: dict[str, Any]) -> tuple[float, dict[str, list[Any]]]:
        t0 = time.perf_counter()
        ex = StickyAssignmentExecutor(Cluster(), meta)
        ex.perform_initial_assignment()
        ex.balance()
        # get_final_assignment answers [(topic, [partition, ...]), ...]
        out = {m: [(t, p) for t, ps in ex.get_final_assignment(m) for p in ps] for m in meta}
        return time.perf_counter() - t0, out

    def meta_of(
        subs: dict[str, list[str]], owned: dict[str, list[Any]], gen: int
    ) -> dict[str, Any]:
        return {
            m: StickyAssignorMemberMetadataV1(
                partitions=[KTP(t, p) for t, p in owned.get(m, [])],
                generation=gen,
                subscription=ts,
            )
            for m, ts in subs.items()
        }

    times, first = [], {}
    for _ in range(runs):
        dt, first = run(meta_of(members, {}, -1))
        times.append(dt)
    _emit("kafka-python sticky", shape, "fresh", total, len(members), 0, times)
    phase, nxt = _follow_up(shape, members)
    times, after = [], {}
    for _ in range(runs):
        dt, after = run(meta_of(nxt, first, 1))
        times.append(dt)
    _emit("kafka-python sticky", shape, phase, total, len(nxt), _moved(first, after), times)


# -- the parent: run every worker, collect, tabulate ------------------------------------------


def ensure_jars() -> Path | None:
    """kafka-clients and its dependencies, resolved once with mvn into the cache folder."""
    if (JARS / f"kafka-clients-{KAFKA_CLIENTS}.jar").exists():
        return JARS
    mvn = shutil.which("mvn")
    if mvn is None:
        print("mvn not found: skipping the Java anchor", file=sys.stderr)
        return None
    pom = f"""<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>groupkit</groupId><artifactId>bench-anchor</artifactId><version>1</version>
<dependencies><dependency><groupId>org.apache.kafka</groupId>
<artifactId>kafka-clients</artifactId><version>{KAFKA_CLIENTS}</version></dependency>
</dependencies></project>"""
    JARS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "pom.xml").write_text(pom)
        subprocess.run(
            [
                mvn,
                "-q",
                "-f",
                str(Path(d) / "pom.xml"),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={JARS}",
            ],
            check=True,
        )
    return JARS


def run_worker(cmd: list[str], timeout: float) -> tuple[list[dict[str, Any]], float, str]:
    """Run one worker; return its JSON lines, its peak RSS in MiB, and why it failed if it did."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        deadline = time.monotonic() + timeout
        failure = ""
        # Reap the child with wait4 (not Popen.wait) to read its resource usage; ru_maxrss is
        # the peak resident set in KiB on Linux.
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                failure = f"over {timeout:.0f} s"
                break
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read(), err.read()
    if not failure and proc.returncode != 0:
        failure = (errors.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    lines = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
    return lines, usage.ru_maxrss / 1024, failure


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small shapes only (seconds)")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per phase")
    ap.add_argument("--no-java", action="store_true")
    ap.add_argument("--no-kafka-python", action="store_true")
    ap.add_argument("--kafka-python-timeout", type=float, default=300.0)
    ap.add_argument("--worker", nargs=2, metavar=("IMPL", "SHAPE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    runs = args.runs or (3 if args.quick else 5)

    if args.worker:
        impl, shape = args.worker
        if impl == "kafka-python":
            _worker_kafka_python(shape, runs)
        else:
            _worker_groupkit(impl, shape, runs)
        return 0

    shapes = QUICK if args.quick else FULL
    # The machine is shared: the load around the run says how far absolute times can be
    # trusted; the ratios between implementations in one run are the numbers to quote.
    started = begin()
    load_before = os.getloadavg()
    jars = None if args.no_java else ensure_jars()
    me = [sys.executable, str(Path(__file__).resolve())]
    results: dict[tuple[str, str, str], dict[str, Any]] = {}
    failures: dict[tuple[str, str], str] = {}

    def collect(impl: str, shape: str, cmd: list[str], timeout: float) -> None:
        print(f"... {impl} on {shape}", file=sys.stderr, flush=True)
        lines, rss, failure = run_worker(cmd, timeout)
        if failure:
            failures[(impl, shape)] = failure
        for doc in lines:
            doc["peak_rss_mib"] = rss
            results[(impl, shape, doc["phase"])] = doc

    for shape in shapes:
        for name in GROUPKIT:
            cmd = [*me, "--worker", name, shape, "--runs", str(runs)]
            collect(f"groupkit {name}", shape, cmd, 3600)
        if jars is not None:
            for name in ("sticky", "cooperative-sticky"):
                cmd = [
                    "java",
                    "-Xmx12g",
                    "-cp",
                    f"{jars}/*",
                    str(HERE / "anchors/StickyBench.java"),
                    name,
                    shape,
                    str(runs),
                    "2",
                ]
                collect(f"java {name}", shape, cmd, 3600)
        if not args.no_kafka_python and shape != "large-equal":
            collect(
                "kafka-python sticky",
                shape,
                [
                    *me,
                    "--worker",
                    "kafka-python",
                    shape,
                    "--runs",
                    str(1 if shape == "unequal-40k" else runs),
                ],
                args.kafka_python_timeout,
            )
        elif not args.no_kafka_python:
            failures[("kafka-python sticky", shape)] = "not run: hours at this size"

    columns = [
        "shape",
        "phase",
        "partitions",
        "members",
        "sticky s",
        "balanced s",
        "lag s",
        "java sticky s",
        "java coop s",
        "kafka-python s",
        "balanced / sticky",
        "balanced / java",
        "sticky / java",
        "kafka-python / sticky",
        "largest lag / bound: sticky / lag / balanced",
        "RSS MiB sticky / balanced / java / kp",
        "moved sticky / balanced / java",
    ]
    rows = []
    phases = sorted(
        {(s, p) for _, s, p in results}, key=lambda sp: (shapes.index(sp[0]), sp[1] != "fresh")
    )
    for shape, phase in phases:

        def get(impl: str, shape: str = shape, phase: str = phase) -> dict[str, Any] | None:
            return results.get((impl, shape, phase))

        gk, bal, lag, js, jc, kp = (
            get(i)
            for i in (
                "groupkit sticky",
                "groupkit balanced",
                "groupkit lag",
                "java sticky",
                "java cooperative-sticky",
                "kafka-python sticky",
            )
        )
        docs = {"gk": gk, "bal": bal, "lag": lag, "js": js, "jc": jc, "kp": kp}
        t = {k: median(d["times"]) if d else float("nan") for k, d in docs.items()}
        ref = gk or bal or js or kp
        assert ref is not None
        rss = " / ".join(f"{d['peak_rss_mib']:.0f}" if d else "-" for d in (gk, bal, js, kp))
        moved = " / ".join(str(d["moved"]) if d else "-" for d in (gk, bal, js))
        quality = " / ".join(
            f"{d['largest_over_bound']:.3f}" if d and "largest_over_bound" in d else "-"
            for d in (gk, lag, bal)
        )
        rows.append(
            [
                shape,
                phase,
                ref["partitions"],
                ref["members"],
                t["gk"],
                t["bal"],
                t["lag"],
                t["js"],
                t["jc"],
                t["kp"],
                t["bal"] / t["gk"],
                t["bal"] / t["js"],
                t["gk"] / t["js"],
                t["kp"] / t["gk"],
                quality,
                rss,
                moved,
            ]
        )
    load_after = os.getloadavg()
    notes = [
        "Load average (1 / 5 / 15 min) before the run: "
        + " / ".join(f"{x:.2f}" for x in load_before)
        + "; after: "
        + " / ".join(f"{x:.2f}" for x in load_after)
        + ". Absolute times move with the load; ratios are within one run.",
        "balanced and lag get one skewed lag per partition (Pareto 1.5 x 1,000, seeded);"
        " sticky and the anchors get none. Largest lag / bound: the largest member lag of the"
        " result over max(total / members, heaviest partition), under the same lags.",
    ]
    write_results(
        "assignors",
        "quick" if args.quick else "full",
        columns,
        rows,
        started=started,
        extra={
            "runs": runs,
            "kafka_clients": KAFKA_CLIENTS,
            "load_before": load_before,
            "load_after": load_after,
            "not_measured": {f"{i} on {s}": why for (i, s), why in failures.items()},
            "raw": [v for v in results.values()],
        },
        title="Assignors: median seconds per assignment, groupkit sticky / balanced / lag vs "
        "Kafka (Java) sticky vs kafka-python",
        notes=notes,
    )
    for (impl, shape), why in failures.items():
        print(f"not measured: {impl} on {shape}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
