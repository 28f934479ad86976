"""``groupkit replay``: which assignor would have served a group best? A PySpark job.

1. Telemetry comes from the telemetry topic (Spark's Kafka source), from JSON-lines or Parquet
   files, or from the synthetic generator (``--synthetic GROUPS``).
2. Each consumer group's lag snapshots are replayed, in time order, through every assignor
   (``groupBy(group).applyInPandas``), each assignor sticky against its own past, and judged
   against the lag the group really had.
3. The counterfactual: each group's lag is simulated forward under every assignor and every
   rebalancing policy (``--policies``), and under its recorded assignments to calibrate the
   model against the recorded lag (:mod:`~groupkit.pipeline.counterfactual`).
4. Results go to Parquet, and a Markdown report with PNG charts names the best assignor and
   policy of each group and by how much. Malformed telemetry is counted, skipped and reported.

PySpark is an extra: ``pip install 'groupkit[spark]'``. Importing this package does not
import PySpark; the job does. Runs on ``local[*]`` by default; ``--master spark://HOST:7077``
(or ``spark-submit --master ... groupkit/pipeline/submit.py ...``, whose master then holds) runs
the same job on any cluster, whose executors need groupkit installed in the Python that
``PYSPARK_PYTHON`` names.

Modules: :mod:`~groupkit.pipeline.replay` (the pure per-group replay),
:mod:`~groupkit.pipeline.counterfactual` (the pure per-group simulation),
:mod:`~groupkit.pipeline.synthetic` (histories), :mod:`~groupkit.pipeline.spark` (session,
sources, the job), :mod:`~groupkit.pipeline.report` (Markdown, PNG, JSON),
:mod:`~groupkit.pipeline.submit` (the file ``spark-submit`` runs).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--bootstrap-servers",
        "--kafka",
        dest="bootstrap",
        default=None,
        help="read the telemetry topic of this Kafka cluster (Spark's Kafka source)",
    )
    src.add_argument(
        "--input",
        nargs="+",
        default=None,
        metavar="PATH",
        help="JSON-lines or Parquet (a 'value' column) telemetry files or folders",
    )
    src.add_argument(
        "--synthetic",
        type=int,
        default=None,
        metavar="GROUPS",
        help="generate this many realistic group histories instead",
    )
    p.add_argument("--topic", default="__groupkit_telemetry", help="telemetry topic")
    p.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Kafka client setting for the source, e.g. security.protocol=SSL",
    )
    p.add_argument(
        "--format",
        choices=["json", "parquet"],
        default=None,
        help="format of --input (default: from the file names)",
    )
    p.add_argument(
        "--snapshots", type=int, default=100, help="snapshots per synthetic group (default 100)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic histories")
    p.add_argument(
        "--assignors",
        default=None,
        help="comma-separated assignors to replay (default: every registered one)",
    )
    p.add_argument(
        "--rebalance",
        choices=["membership", "every", "load"],
        default="membership",
        help="when each assignor rebalances: on membership changes, as groupkit "
        "does (default), or at every snapshot, or on membership changes and by the leader's "
        "load re-plans in between (load)",
    )
    p.add_argument(
        "--policies",
        default="membership,load,every",
        help="comma-separated rebalancing policies the counterfactual simulates "
        "(membership, load, every; default all; 'none': no counterfactual)",
    )
    p.add_argument("--out", default="replay-out", help="folder for Parquet, report and charts")
    p.add_argument("--open", action="store_true", help="open the report when it is written")
    p.add_argument(
        "--master",
        default=None,
        help="Spark master, e.g. spark://HOST:7077 (default local[*], or spark-submit's)",
    )
    p.add_argument(
        "--shuffle-partitions",
        type=int,
        default=None,
        help="spark.sql.shuffle.partitions (default: 2 x cores)",
    )
    p.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting"
    )


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise ValueError(f"{what} must be KEY=VALUE, got {item!r}")
        out[k] = v
    return out


def run(args: argparse.Namespace) -> int:
    """Run the job from parsed arguments; print where the report is. Returns an exit code."""
    from groupkit.assignors import assignor_names, get_assignor
    from groupkit.pipeline import report, spark

    if args.bootstrap is None and args.input is None and args.synthetic is None:
        raise ValueError(
            "say where telemetry comes from: --bootstrap-servers, --input or --synthetic GROUPS"
        )
    names = assignor_names() if not args.assignors else args.assignors.split(",")
    for n in names:
        get_assignor(n)  # unknown names fail now, listing the known ones
    from groupkit.pipeline.counterfactual import POLICIES

    policies = [] if args.policies in ("", "none") else args.policies.split(",")
    for pol in policies:
        if pol not in POLICIES:
            raise ValueError(f"unknown policy {pol!r}: one of {', '.join(POLICIES)} or none")
    t0 = time.perf_counter()
    # Under spark-submit (its JVM started this Python) the master is spark-submit's.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    session = spark.spark_session(
        args.master or (None if submitted else "local[*]"),
        kafka=args.bootstrap is not None,
        shuffle_partitions=args.shuffle_partitions,
        conf=_pairs(args.conf, "--conf"),
    )
    started = time.perf_counter() - t0
    if args.bootstrap is not None:
        raw = spark.read_kafka(
            session, args.bootstrap, args.topic, _pairs(args.kafka_option, "--kafka-option")
        )
        source = f"Kafka topic {args.topic} at {args.bootstrap}"
    elif args.input is not None:
        raw = spark.read_files(session, args.input, args.format)
        source = "files " + ", ".join(args.input)
    else:
        if args.synthetic < 1 or args.snapshots < 1:
            raise ValueError("--synthetic and --snapshots must be >= 1")
        raw = spark.synthetic_source(session, args.synthetic, args.snapshots, args.seed)
        source = f"{args.synthetic:,} synthetic groups × {args.snapshots} snapshots"
    res = spark.run_job(
        session, raw, Path(args.out), names, args.rebalance, source, policies=policies
    )
    res.seconds = {"spark start": started, **res.seconds}
    path = report.write_report(res)
    bad = sum(res.malformed.values())
    print(
        f"replayed {res.groups:,} groups, {res.evaluations:,} snapshot × assignor evaluations; "
        f"{bad:,} malformed records skipped; report: {path}"
    )
    if args.open:
        import webbrowser

        webbrowser.open(path.resolve().as_uri())
    return 0
