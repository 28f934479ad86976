"""The Spark side of ``groupkit replay``: session, Kafka connector, sources and the job.

The job, as Spark runs it:

1. **Read** raw telemetry as rows of ``(key, value, where)``: from the telemetry topic with
   Spark's own Kafka source (a batch read, earliest to latest offsets), from JSON-lines files
   (one record a line) or Parquet files (a ``value`` column, e.g. an archive of the topic), or
   generated on the executors (``--synthetic``).
2. **Parse** (``mapInPandas``): every value is decoded by the telemetry schema's own decoder;
   a malformed one is kept as a row with an ``error`` reason, so it is counted and reported,
   never fatal. The parsed rows are cached: the counts and the replay both read them.
3. **Replay** (``groupBy("group").applyInPandas``): each group's snapshots, in time order,
   through every assignor (:mod:`groupkit.pipeline.replay`, which calls
   :mod:`groupkit.assignors`).
4. **Simulate** (the same ``groupBy``, snapshots and rebalance events): each group's lag
   forward under every assignor and policy, and under its recorded assignments for the
   calibration (:mod:`groupkit.pipeline.counterfactual`). One row per group and track.
5. **Write** the results as Parquet, aggregate the per-snapshot ones per group and assignor
   with Spark SQL, and hand the (small) aggregates to :mod:`groupkit.pipeline.report`.

What decides how the job scales on more machines: steps 3 and 4 are pure Python, one group
at a time in Spark's Python workers, so they spread over every executor core; the shuffle
that gathers a group's records (``groupBy``) moves every record once across the network; and
every row crosses the JVM/Python boundary twice, through Arrow (``mapInPandas``,
``applyInPandas``). Few large groups scale worse than many small ones: a group is never split.

Spark's Kafka source is not part of pyspark: ``spark-sql-kafka-0-10_2.13`` at the installed
Spark's version comes from Maven Central. :func:`kafka_connector_jars` resolves it once with
``mvn`` into ``$GROUPKIT_CACHE/spark-jars/<version>`` (default ``~/.cache/groupkit``) and
passes the jars with ``spark.jars``, which also ships them to a cluster's executors; without
``mvn`` it falls back to Spark's own resolver (``spark.jars.packages``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groupkit.errors import PipelineError
from groupkit.pipeline.counterfactual import CF_DDL, counterfactual_frame
from groupkit.pipeline.replay import RESULT_DDL, replay_frame
from groupkit.runtime.telemetry import LAG_SNAPSHOT, REBALANCE

PARSED_DDL = (
    "`group` string, `ts_ms` long, `type` string, `value` string, `error` string, `where` string"
)
RAW_DDL = "`key` string, `value` string, `where` string"
CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>groupkit</groupId><artifactId>spark-kafka-jars</artifactId><version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId><artifactId>spark-sql-kafka-0-10_2.13</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""
# Spark's parent pom names a Google mirror first; where that host does not resolve, Maven
# stops instead of trying the next repository. Retried once with Maven Central only.
_CENTRAL_ONLY = """<settings><mirrors><mirror><id>central-only</id><mirrorOf>*</mirrorOf>
<url>https://repo.maven.apache.org/maven2</url></mirror></mirrors></settings>
"""


def spark_version() -> str:
    try:
        import pyspark
    except ImportError as e:
        raise PipelineError("groupkit replay needs PySpark: pip install 'groupkit[spark]'") from e
    return str(pyspark.__version__)


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.0.jar`` -> ``kafka-clients``."""
    m = re.match(r"^(.*?)-\d[^-]*(-[A-Za-z][\w.]*)?\.jar$", jar)
    return m.group(1) if m else jar


def kafka_connector_jars(version: str | None = None) -> list[str]:
    """Jars of Spark's Kafka source at ``version`` that pyspark does not already ship.

    Resolved once with ``mvn`` into the cache; ``[]`` when ``mvn`` is not installed (the caller
    then uses ``spark.jars.packages``).
    """
    from groupkit.cache import cache_root

    version = version or spark_version()
    home = cache_root() / "spark-jars" / version
    lib = home / "lib"
    if not (home / ".complete").exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            return []
        home.mkdir(parents=True, exist_ok=True)
        (home / "pom.xml").write_text(_POM.format(version=version))
        (home / "central-only.xml").write_text(_CENTRAL_ONLY)
        out = ""
        for settings in ([], ["-s", str(home / "central-only.xml")]):
            if lib.exists():
                shutil.rmtree(lib)
            cmd = [
                mvn,
                "-B",
                "-q",
                *settings,
                "-f",
                str(home / "pom.xml"),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={lib}",
                "-DincludeScope=runtime",
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            out = proc.stdout + proc.stderr
            if proc.returncode == 0 and any(lib.glob("spark-sql-kafka-*.jar")):
                break
        else:
            tail = "\n".join(out.strip().splitlines()[-6:])
            raise PipelineError(
                f"could not resolve {CONNECTOR}:{version} from Maven Central with mvn; Spark's "
                f"Kafka source must match the installed Spark ({version}).\n{tail}"
            )
        (home / ".complete").write_text(version + "\n")
    import pyspark

    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(str(p) for p in lib.glob("*.jar") if _artifact(p.name) not in shipped)


def spark_session(
    master: str | None = "local[*]",
    kafka: bool = True,
    shuffle_partitions: int | None = None,
    app: str = "groupkit-replay",
    conf: Mapping[str, str] | None = None,
) -> Any:
    """A SparkSession for the replay: UI off, Arrow on, Kafka's source on the classpath.

    ``PYSPARK_PYTHON`` is set to this interpreter, or workers would import another Python
    (one without groupkit). If a session is already running it is returned as it is.
    ``master=None`` leaves the master to ``spark-submit --master``.
    """
    spark_version()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    cores = _cores(master or "")
    b = SparkSession.builder if master is None else SparkSession.builder.master(master)
    b = (
        b.appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions or max(2, 2 * cores)))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.adaptive.enabled", "true")
        # The replay and the simulation are CPU-bound Python per group over a shuffle of a few
        # MB: coalesced by bytes, it becomes one task on one core (the simulation took 1.6x
        # as long on local[2]). Each shuffle partition stays a task.
        .config("spark.sql.adaptive.coalescePartitions.enabled", "false")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    )
    if kafka:
        jars = kafka_connector_jars()
        if jars:
            b = b.config("spark.jars", ",".join(jars))
        else:
            b = b.config("spark.jars.packages", f"{CONNECTOR}:{spark_version()}")
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _cores(master: str) -> int:
    m = re.match(r"local\[(\d+|\*)", master)
    if m is None:
        return 4 if master.startswith("local") else 8
    return (os.cpu_count() or 2) if m.group(1) == "*" else int(m.group(1))


# --------------------------------------------------------------------------- sources


def read_kafka(
    spark: Any, bootstrap: str, topic: str, options: Mapping[str, str] | None = None
) -> Any:
    """The whole telemetry topic, earliest to latest, through Spark's Kafka source."""
    from pyspark.sql import functions as F

    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("failOnDataLoss", "false")
    )
    for k, v in (options or {}).items():
        reader = reader.option(k if k.startswith("kafka.") else f"kafka.{k}", v)
    return reader.load().select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        F.format_string("%s/%d@%d", "topic", "partition", "offset").alias("where"),
    )


def read_files(spark: Any, paths: Sequence[str], fmt: str | None = None) -> Any:
    """JSON lines (one record per line) or Parquet (a ``value`` column) files or folders."""
    from pyspark.sql import functions as F

    fmt = fmt or _guess_format(paths)
    if fmt == "parquet":
        df = spark.read.parquet(*paths)
        if "value" not in df.columns:
            raise PipelineError("Parquet telemetry needs a 'value' column of telemetry JSON")
        key = F.col("key").cast("string") if "key" in df.columns else F.lit(None).cast("string")
        return df.select(
            key.alias("key"),
            F.col("value").cast("string").alias("value"),
            F.input_file_name().alias("where"),
        )
    if fmt != "json":
        raise PipelineError(f"unknown input format {fmt!r}: json or parquet")
    return spark.read.text(list(paths)).select(
        F.lit(None).cast("string").alias("key"),
        F.col("value"),
        F.input_file_name().alias("where"),
    )


def _guess_format(paths: Sequence[str]) -> str:
    for p in paths:
        path = Path(p)
        files = [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []
        for f in files:
            if f.suffix == ".parquet":
                return "parquet"
            if f.suffix in (".json", ".jsonl", ".ndjson", ".txt"):
                return "json"
    return "json"


def _synthetic_batches(batches: Iterator[Any], snapshots: int, seed: int) -> Iterator[Any]:
    import pandas as pd

    from groupkit.pipeline.synthetic import synthetic_history

    for pdf in batches:
        keys: list[str] = []
        values: list[str] = []
        wheres: list[str] = []
        for index in pdf["id"].tolist():
            for n, (group, value) in enumerate(synthetic_history(int(index), snapshots, seed)):
                keys.append(group)
                values.append(value.decode())
                wheres.append(f"synthetic:{index}#{n}")
        yield pd.DataFrame({"key": keys, "value": values, "where": wheres})


def synthetic_source(
    spark: Any, groups: int, snapshots: int = 100, seed: int = 0, slices: int | None = None
) -> Any:
    """``groups`` synthetic histories, generated on the executors."""
    n = slices or max(1, spark.sparkContext.defaultParallelism * 2)
    return spark.range(0, groups, numPartitions=min(n, max(1, groups))).mapInPandas(
        lambda it: _synthetic_batches(it, snapshots, seed), RAW_DDL
    )


# --------------------------------------------------------------------------- the job


def _parse_batches(batches: Iterator[Any]) -> Iterator[Any]:
    import pandas as pd

    from groupkit.errors import MalformedTelemetry
    from groupkit.runtime.telemetry import LAG_SNAPSHOT, REBALANCE, LagSnapshot, decode

    for pdf in batches:
        out: dict[str, list[Any]] = {k: [] for k in ("group", "ts_ms", "type", "value", "error")}
        for value in pdf["value"].tolist():
            try:
                t = decode(value)
                out["group"].append(t.group)
                out["ts_ms"].append(t.ts_ms)
                out["type"].append(LAG_SNAPSHOT if isinstance(t, LagSnapshot) else REBALANCE)
                out["error"].append(None)
            except MalformedTelemetry as e:
                out["group"].append(None)
                out["ts_ms"].append(None)
                out["type"].append(None)
                out["error"].append(e.reason)
            out["value"].append(value)
        frame = pd.DataFrame(out)
        frame["ts_ms"] = frame["ts_ms"].astype("Int64")
        frame["where"] = pdf["where"].to_numpy()
        yield frame


@dataclass
class JobResult:
    """What the job found, for the report (every table here is small)."""

    out: Path
    source: str
    records: int = 0
    malformed: dict[str, int] = field(default_factory=dict)
    malformed_examples: list[tuple[str, str]] = field(default_factory=list)
    groups: int = 0
    failed_groups: list[tuple[str, str]] = field(default_factory=list)
    evaluations: int = 0
    summary: Any = None  # pandas: one row per group and assignor
    timelines: Any = None  # pandas: per-snapshot rows of the groups charted
    rebalances: Any = None  # pandas: per group, the real rebalances
    seconds: dict[str, float] = field(default_factory=dict)
    assignors: list[str] = field(default_factory=list)
    rebalance_mode: str = "membership"
    policies: list[str] = field(default_factory=list)
    #: the Spark master the job ran on
    master: str = ""
    #: pandas: the counterfactual, one row per group and track (no timelines)
    counterfactual: Any = None
    #: pandas: ``group``, ``assignor``, ``policy``, ``timeline`` of the groups charted
    counterfactual_timelines: Any = None


def run_job(
    spark: Any,
    raw: Any,
    out: Path,
    assignors: Sequence[str],
    rebalance: str = "membership",
    source: str = "",
    chart_groups: int = 4,
    policies: Sequence[str] = (),
) -> JobResult:
    """Parse, replay and aggregate ``raw`` (``key``, ``value``, ``where`` rows); with
    ``policies``, simulate every assignor under each (the counterfactual); write Parquet under
    ``out``. The report is written by the caller from the returned result."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    out.mkdir(parents=True, exist_ok=True)
    res = JobResult(
        out=out,
        source=source,
        assignors=list(assignors),
        rebalance_mode=rebalance,
        policies=list(policies),
        master=str(spark.sparkContext.master),
    )
    t0 = time.perf_counter()
    parsed = raw.mapInPandas(_parse_batches, PARSED_DDL).persist(StorageLevel.MEMORY_AND_DISK)
    counts = parsed.groupBy("error").count().collect()
    res.records = sum(int(r["count"]) for r in counts)
    res.malformed = {str(r["error"]): int(r["count"]) for r in counts if r["error"] is not None}
    if res.malformed:
        res.malformed_examples = [
            (str(r["where"]), str(r["error"]))
            for r in parsed.filter(F.col("error").isNotNull()).select("where", "error").take(10)
        ]
    res.seconds["parse"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    names = list(assignors)
    results = (
        parsed.filter(F.col("type") == LAG_SNAPSHOT)
        .select("group", "value")
        .groupBy("group")
        .applyInPandas(lambda pdf: replay_frame(pdf, names, rebalance), RESULT_DDL)
    )
    results.write.mode("overwrite").parquet(str(out / "replay.parquet"))
    res.seconds["replay"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    written = spark.read.parquet(str(out / "replay.parquet"))
    failed = written.filter(F.col("error").isNotNull()).select("group", "error").collect()
    res.failed_groups = [(str(r["group"]), str(r["error"])) for r in failed]
    ok = written.filter(F.col("error").isNull())
    summary = ok.groupBy("group", "assignor").agg(
        F.count("*").alias("snapshots"),
        F.mean("max_member_lag").alias("mean_max_member_lag"),
        F.max("max_member_lag").alias("peak_max_member_lag"),
        F.mean("lag_lower_bound").alias("mean_lower_bound"),
        F.mean("imbalance").alias("mean_imbalance"),
        F.sum(F.col("rebalanced").cast("int")).alias("rebalances"),
        F.sum("moved").alias("moved"),
        F.sum("revoked_eager").alias("revoked_eager"),
        F.mean("time_to_drain_s").alias("mean_time_to_drain_s"),
        F.max("time_to_drain_s").alias("peak_time_to_drain_s"),
    )
    summary.write.mode("overwrite").parquet(str(out / "summary.parquet"))
    # Read back what was written (small) rather than computing the aggregate twice.
    res.summary = spark.read.parquet(str(out / "summary.parquet")).toPandas()
    res.evaluations = int(res.summary["snapshots"].sum()) if len(res.summary) else 0
    res.groups = int(res.summary["group"].nunique()) if len(res.summary) else 0
    if len(res.summary):
        # chart the groups with the most lag
        top = (
            res.summary[res.summary["assignor"] == "actual"]
            .sort_values("mean_max_member_lag", ascending=False)["group"]
            .head(chart_groups)
            .tolist()
        )
        res.timelines = (
            ok.filter(F.col("group").isin(top))
            .select("group", "snapshot", "ts_ms", "assignor", "max_member_lag", "lag_lower_bound")
            .toPandas()
        )
    rebalances = (
        parsed.filter(F.col("type") == REBALANCE)
        .select(
            "group",
            F.from_json(
                "value",
                "moved long, revoked long, duration_ms double, protocol string, assignor string",
            ).alias("r"),
        )
        .groupBy("group")
        .agg(
            F.count("*").alias("rebalances"),
            F.sum("r.moved").alias("moved"),
            F.sum("r.revoked").alias("revoked"),
            F.mean("r.duration_ms").alias("mean_duration_ms"),
            F.first("r.protocol").alias("protocol"),
            F.first("r.assignor").alias("assignor"),
        )
    )
    res.rebalances = rebalances.toPandas()
    res.seconds["aggregate"] = time.perf_counter() - t0
    if policies:
        _counterfactual(spark, parsed, out, res, names, list(policies), chart_groups)
    parsed.unpersist()
    return res


def _counterfactual(
    spark: Any,
    parsed: Any,
    out: Path,
    res: JobResult,
    assignors: list[str],
    policies: list[str],
    chart_groups: int,
) -> None:
    """Step 4: every group simulated under every assignor and policy, written as Parquet."""
    from pyspark.sql import functions as F

    from groupkit.pipeline.counterfactual import RECORDED

    t0 = time.perf_counter()
    rows = (
        parsed.filter(F.col("error").isNull())
        .select("group", "value")
        .groupBy("group")
        .applyInPandas(lambda pdf: counterfactual_frame(pdf, assignors, policies), CF_DDL)
    )
    rows.write.mode("overwrite").parquet(str(out / "counterfactual.parquet"))
    written = spark.read.parquet(str(out / "counterfactual.parquet"))
    res.counterfactual = written.drop("timeline").toPandas()
    cf = res.counterfactual
    failed = cf[cf["error"].notna()]
    res.failed_groups += [(str(g), f"counterfactual: {e}") for g, e in zip(failed["group"],
                          failed["error"], strict=True)]  # fmt: skip
    recorded = cf[(cf["assignor"] == RECORDED) & cf["error"].isna()]
    top = (
        recorded.sort_values(["mean_max_member_lag", "group"], ascending=[False, True])["group"]
        .head(chart_groups)
        .tolist()
    )
    res.counterfactual_timelines = (
        written.filter(F.col("group").isin(top) & F.col("error").isNull())
        .select("group", "assignor", "policy", "timeline")
        .toPandas()
    )
    res.seconds["counterfactual"] = time.perf_counter() - t0
