"""bench/replay.py: ``groupkit replay`` on Spark against the same replay in one Python process.

What is measured, for each engine, end to end on the same synthetic histories
(:mod:`groupkit.pipeline.synthetic`, the same seed): generating the telemetry, decoding it
(malformed rows counted), replaying every group's snapshots through every assignor plus the
actual assignment (:func:`groupkit.pipeline.replay.replay_group`), writing the per-snapshot
results as Parquet, and aggregating them per group and assignor. The report (Markdown, PNG)
is left out: it is the same driver-side code for both.

- ``python``: one plain process, no Spark: generate, decode, replay, ``pyarrow`` writes.
- ``spark local[1]`` and ``spark local[2]``: :func:`groupkit.pipeline.spark.run_job` on a
  synthetic source generated on the executors. Session start-up is timed apart and left out
  of the rate; a small warm-up job runs first (JVM JIT, Python workers).

The rate is *snapshot × assignor evaluations per second* (one evaluation: an assignor's
assignment at one snapshot, with its metrics; rebalancing, as groupkit does, only when the
membership changed). The full run is 1,000 groups × 100 snapshots; ``--quick`` is 60 × 20.

Usage: ``python -m bench.replay [--quick] [--groups N] [--snapshots N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import begin, write_results


def python_replay(groups: int, snapshots: int, assignors: list[str], out: Path) -> dict[str, Any]:
    """The whole job in this process; returns evaluations and seconds."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from groupkit.pipeline.replay import RESULT_COLUMNS, decode_snapshots, replay_group
    from groupkit.pipeline.synthetic import synthetic_history

    t0 = time.perf_counter()
    writer: pq.ParquetWriter | None = None
    evaluations = malformed = 0
    summaries = []
    for index in range(groups):
        records = list(synthetic_history(index, snapshots, seed=0))
        snaps, bad = decode_snapshots(v for _, v in records)
        malformed += bad
        rows = replay_group(records[0][0], snaps, assignors)
        evaluations += len(rows)
        frame = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if writer is None:
            writer = pq.ParquetWriter(out / "replay.parquet", table.schema)
        writer.write_table(table)
        summaries.append(
            frame.groupby(["group", "assignor"]).agg(
                mean_max_member_lag=("max_member_lag", "mean"),
                moved=("moved", "sum"),
                mean_time_to_drain_s=("time_to_drain_s", "mean"),
            )
        )
    if writer is not None:
        writer.close()
    pd.concat(summaries).to_parquet(out / "summary.parquet")
    return {"evaluations": evaluations, "seconds": time.perf_counter() - t0, "bad": malformed}


def spark_replay(
    master: str, groups: int, snapshots: int, assignors: list[str], out: Path
) -> dict[str, Any]:
    from groupkit.pipeline.spark import run_job, spark_session, synthetic_source

    cores = int(master[len("local[") : -1])
    t0 = time.perf_counter()
    spark = spark_session(
        master, kafka=False, shuffle_partitions=2 * cores, app=f"bench-replay-{cores}"
    )
    started = time.perf_counter() - t0
    master_seen = str(spark.sparkContext.master)
    try:
        # Warm-up: JIT, Python workers, Arrow paths.
        run_job(spark, synthetic_source(spark, 2 * cores, 5, seed=1), out / "warmup", assignors)
        t0 = time.perf_counter()
        res = run_job(
            spark, synthetic_source(spark, groups, snapshots, seed=0), out / "run", assignors
        )
        seconds = time.perf_counter() - t0
    finally:
        spark.stop()
    return {
        "evaluations": res.evaluations,
        "seconds": seconds,
        "start_s": started,
        "master": master_seen,
        "stages": res.seconds,
        "bad": sum(res.malformed.values()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="60 groups x 20 snapshots")
    ap.add_argument("--groups", type=int, default=None)
    ap.add_argument("--snapshots", type=int, default=None)
    ap.add_argument("--results-dir", default=None, help="default bench/results")
    args = ap.parse_args()
    groups = args.groups or (60 if args.quick else 1000)
    snapshots = args.snapshots or (20 if args.quick else 100)

    from groupkit.assignors import assignor_names

    assignors = assignor_names()
    work = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    started = begin()
    load_before = os.getloadavg()
    runs: dict[str, dict[str, Any]] = {}
    try:
        (work / "python").mkdir()
        runs["python (1 process)"] = python_replay(groups, snapshots, assignors, work / "python")
        for cores in (1, 2):
            runs[f"spark local[{cores}]"] = spark_replay(
                f"local[{cores}]", groups, snapshots, assignors, work / f"spark{cores}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()

    base = runs["python (1 process)"]
    base_rate = base["evaluations"] / base["seconds"]
    one = runs["spark local[1]"]
    one_rate = one["evaluations"] / one["seconds"]
    rows = []
    for name, r in runs.items():
        rate = r["evaluations"] / r["seconds"]
        rows.append(
            [
                name,
                f"{groups:,} x {snapshots}",
                r["evaluations"],
                round(r["seconds"], 1),
                round(rate),
                round(rate / base_rate, 2),
                round(rate / one_rate, 2) if name.startswith("spark") else "",
                round(r["start_s"], 1) if "start_s" in r else "",
            ]
        )
    notes = [
        f"Assignors replayed: {', '.join(assignors)}, plus the actual assignment "
        f"({len(assignors) + 1} evaluations per snapshot).",
        "Evaluations/s is end to end: generate, decode, replay, write Parquet, aggregate. "
        "Spark session start-up is excluded from the rate and shown apart (local[2] reuses "
        "the JVM that local[1] started, so its start-up is only a new SparkContext).",
        "Load average (1 min) before/after: "
        f"{load_before[0]:.1f} / {load_after[0]:.1f} on {os.cpu_count()} cores "
        "(a shared machine: other jobs ran meanwhile).",
    ]
    for name, r in runs.items():
        if "stages" in r:
            notes.append(
                f"{name} stages (s): " + ", ".join(f"{k} {v:.1f}" for k, v in r["stages"].items())
            )
    write_results(
        "replay",
        "quick" if args.quick else f"{groups} groups x {snapshots} snapshots",
        [
            "engine",
            "groups x snapshots",
            "evaluations",
            "seconds",
            "evaluations/s",
            "vs python",
            "vs local[1]",
            "spark start s",
        ],
        rows,
        started=started,
        extra={
            "groups": groups,
            "snapshots": snapshots,
            "quick": args.quick,
            "runs": runs,
            "load_before": load_before,
            "load_after": load_after,
        },
        title="groupkit replay: Spark local[1]/local[2] vs one Python process",
        results_dir=args.results_dir,
        notes=notes,
    )


if __name__ == "__main__":
    main()
