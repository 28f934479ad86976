"""``groupkit replay`` on local Spark: a history with a known answer, bad rows, synthetic runs.

The known answer: three topics of two partitions, partition 0 of each heavy. ``range`` and
``lag`` (KIP-169) balance each topic alone, so both hand every topic's heavy partition to the
same member; ``balanced`` shares one lag budget across topics and must spread them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyspark  # noqa: F401 - the spark extra is part of make test
import pytest

from groupkit.assignors import assignor_names
from groupkit.cli import main
from groupkit.pipeline.replay import ACTUAL, replay_group, replay_values
from groupkit.pipeline.synthetic import synthetic_history
from groupkit.runtime.telemetry import LagSnapshot, MemberInfo, TopicOffsets, decode
from tests.spark_fixtures import spark  # noqa: F401  (the session fixture)

HEAVY, LIGHT = 1_000, 10


def skewed_history(group: str = "skewed", snapshots: int = 4) -> list[bytes]:
    """Members a, b on t0..t2 (2 partitions each, p0 heavy); c joins at snapshot 2."""
    out = []
    for i in range(snapshots):
        members = ["a", "b"] + (["c"] if i >= 2 else [])
        lag = HEAVY * (i + 1)
        topics = {
            t: TopicOffsets(
                end=(10_000 + lag, 10_000 + LIGHT),
                committed=(10_000, 10_000),
                lag=(lag, LIGHT),
                owner=("a", "b"),
            )
            for t in ("t0", "t1", "t2")
        }
        snap = LagSnapshot(
            group=group,
            ts_ms=1_000_000 + i * 10_000,
            leader="a",
            generation=1 + (i >= 2),
            protocol="cooperative",
            assignor="range",
            members={m: MemberInfo(("t0", "t1", "t2"), 100.0, None, None) for m in members},
            topics=topics,
        )
        out.append(snap.to_json())
    return out


BAD_ROWS = {
    "not_json": "this is not json {",
    "not_telemetry": json.dumps({"hello": "world"}),
    "future_version": json.dumps(
        {
            "schema": "groupkit.telemetry",
            "version": 99,
            "type": "lag_snapshot",
            "group": "skewed",
            "ts_ms": 1,
        }
    ),
    "unknown_type": json.dumps(
        {
            "schema": "groupkit.telemetry",
            "version": 1,
            "type": "mystery",
            "group": "g",
            "ts_ms": 1,
        }
    ),
    "inconsistent": json.dumps(
        {
            "schema": "groupkit.telemetry",
            "version": 1,
            "type": "lag_snapshot",
            "group": "skewed",
            "ts_ms": 5,
            "leader": "a",
            "generation": 1,
            "protocol": "eager",
            "assignor": "range",
            "members": {"a": {"topics": ["t0"]}},
            "topics": {"t0": {"end": [1, 2], "committed": [0], "lag": [1, 2], "owner": ["a", "a"]}},
        }
    ),
    "bad_field": json.dumps(
        {
            "schema": "groupkit.telemetry",
            "version": 1,
            "type": "lag_snapshot",
            "group": "skewed",
            "ts_ms": "yesterday",
        }
    ),
}


def by_assignor(rows: list[dict[str, Any]], snapshot: int) -> dict[str, dict[str, Any]]:
    return {r["assignor"]: r for r in rows if r["snapshot"] == snapshot}


def test_known_answer_without_spark() -> None:
    """The pure replay, exactly: the numbers every Spark run below must reproduce."""
    snaps = [decode(v) for v in skewed_history()]
    assert all(isinstance(s, LagSnapshot) for s in snaps)
    rows = replay_group("skewed", snaps, assignor_names())  # type: ignore[arg-type]
    first = by_assignor(rows, 0)
    # range and lag give member a every heavy partition; balanced gives it two at most.
    assert first["range"]["max_member_lag"] == 3 * HEAVY
    assert first["lag"]["max_member_lag"] == 3 * HEAVY
    assert first["balanced"]["max_member_lag"] == 2 * HEAVY + LIGHT
    assert first[ACTUAL]["max_member_lag"] == 3 * HEAVY
    assert first["balanced"]["lag_lower_bound"] == pytest.approx(
        max((3 * HEAVY + 3 * LIGHT) / 2, HEAVY)
    )
    assert first["balanced"]["time_to_drain_s"] == pytest.approx((2 * HEAVY + LIGHT) / 100.0)
    # Snapshot 1: nobody changed, so nobody rebalanced and nothing moved.
    assert not any(r["rebalanced"] or r["moved"] for r in by_assignor(rows, 1).values())
    # Snapshot 2: c joined; every assignor rebalanced against its own previous assignment.
    third = by_assignor(rows, 2)
    assert all(r["rebalanced"] for n, r in third.items() if n != ACTUAL)
    assert third["sticky"]["moved"] == 2  # c takes two of the six, sticky moves only those
    assert third["balanced"]["max_member_lag"] < third["range"]["max_member_lag"]


def test_the_load_mode_asks_the_leaders_re_plan_between_rebalances() -> None:
    """``rebalance="load"``: between membership changes, placement.decide (the function the
    leader runs) moves a few partitions of a member that falls behind."""
    snaps = [decode(v) for v in skewed_history()]
    plain = replay_group("skewed", snaps, ["range"], include_actual=False)  # type: ignore[arg-type]
    load = replay_group("skewed", snaps, ["range"], "load", include_actual=False)  # type: ignore[arg-type]
    assert by_assignor(load, 0) == by_assignor(plain, 0)  # the first plan is the assignor's
    # a owns the three heavy partitions, each appended at 100 records/s, and does 100: the
    # next snapshot moves one or two of them (the cap), and no more while the interval runs
    second = by_assignor(load, 1)["range"]
    assert second["rebalanced"] and 1 <= second["moved"] <= 2
    assert second["max_member_lag"] < by_assignor(plain, 1)["range"]["max_member_lag"]


def test_replay_of_a_group_never_raises() -> None:
    rows = replay_values("g", [b"garbage", None], ["range"])
    assert rows == []  # no snapshot, no rows; the bad values are counted by the job
    rows = replay_values("g", skewed_history(), ["no-such-assignor"])
    assert len(rows) == 1 and "UnknownAssignorError" in rows[0]["error"]


def test_synthetic_histories_are_deterministic_and_valid() -> None:
    a = list(synthetic_history(7, snapshots=30, seed=3))
    assert a == list(synthetic_history(7, snapshots=30, seed=3))
    assert a != list(synthetic_history(7, snapshots=30, seed=4))
    decoded = [decode(v) for _, v in a]
    snaps = [d for d in decoded if isinstance(d, LagSnapshot)]
    assert len(snaps) == 30
    assert all(sum(len(o.end) for o in s.topics.values()) > 0 for s in snaps)
    assert any(m.rate for s in snaps[1:] for m in s.members.values())


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_spark_gives_the_known_answer_and_skips_bad_rows(
    spark: Any,  # noqa: F811
    tmp_path: Path,
    fmt: str,
) -> None:
    import pandas as pd

    from groupkit.pipeline.report import best_by_group, write_report
    from groupkit.pipeline.spark import read_files, run_job

    values = [v.decode() for v in skewed_history()] + list(BAD_ROWS.values())
    values += [v.decode() for v in skewed_history("other", 3)]
    if fmt == "json":
        src = tmp_path / "telemetry.jsonl"
        src.write_text("\n".join(values) + "\n\n")  # a blank line is a malformed row too
    else:
        src = tmp_path / "telemetry.parquet"
        pd.DataFrame({"key": ["k"] * len(values), "value": values}).to_parquet(src)
    out = tmp_path / "out"
    raw = read_files(spark, [str(src)])
    res = run_job(spark, raw, out, ["balanced", "lag", "range", "sticky"], source=str(src))
    write_report(res)

    expected_bad = {reason: 1 for reason in BAD_ROWS}
    if fmt == "json":
        expected_bad["empty"] = 1
    assert res.malformed == expected_bad
    assert res.records == len(values) + (1 if fmt == "json" else 0)
    assert res.groups == 2 and not res.failed_groups
    best = best_by_group(res.summary).set_index("group")
    assert best.loc["skewed", "best"] == "balanced"
    s = res.summary[res.summary["group"] == "skewed"].set_index("assignor")
    assert s.loc["balanced", "mean_max_member_lag"] < s.loc["range", "mean_max_member_lag"]
    assert s.loc["balanced", "mean_max_member_lag"] < s.loc["lag", "mean_max_member_lag"]
    assert best.loc["skewed", "vs_actual_pct"] > 0

    # The Parquet results hold the same numbers as the pure replay.
    results = spark.read.parquet(str(out / "replay.parquet")).toPandas()
    first = results[(results["group"] == "skewed") & (results["snapshot"] == 0)]
    got = dict(zip(first["assignor"], first["max_member_lag"], strict=True))
    assert got["range"] == got["lag"] == 3 * HEAVY and got["balanced"] == 2 * HEAVY + LIGHT

    report = (out / "report.md").read_text()
    assert "| skewed | **balanced** |" in report
    assert "not_json" in report and "inconsistent" in report
    assert (out / "assignors.png").stat().st_size > 1000
    doc = json.loads((out / "report.json").read_text())
    assert doc["malformed"] == expected_bad


def test_cli_replay_synthetic(spark: Any, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "synthetic"
    code = main(
        [
            "replay",
            "--synthetic",
            "3",
            "--snapshots",
            "8",
            "--master",
            "local[2]",
            "--out",
            str(out),
            "--assignors",
            "range,sticky,balanced",
        ]
    )
    assert code == 0
    doc = json.loads((out / "report.json").read_text())
    assert doc["groups"] == 3
    assert doc["evaluations"] == 3 * 8 * 4  # three assignors and the actual assignment
    assert doc["malformed"] == {}
    assert {b["best"] for b in doc["best"]} <= {"range", "sticky", "balanced"}
    assert (out / "timelines.png").exists() and (out / "summary.parquet").exists()
    # the counterfactual: on local Spark, the very rows of the pure simulation
    import pandas as pd

    from groupkit.pipeline.counterfactual import counterfactual_values
    from groupkit.pipeline.synthetic import group_name

    got = pd.read_parquet(out / "counterfactual.parquet").set_index(["group", "assignor", "policy"])
    assert len(doc["whatif"]) == 3 and doc["calibration"]["groups"] == 3
    for i in range(3):
        values = [v for _, v in synthetic_history(i, 8, seed=0)]
        want = counterfactual_values(group_name(i), values, ["range", "sticky", "balanced"])
        assert len(want) == 2 + 3 * 3  # recorded, calibration, three assignors x policies
        for r in want:
            g = got.loc[(r["group"], r["assignor"], r["policy"])]
            assert (g["timeline"], g["moves"]) == (r["timeline"], r["moves"])


def test_cli_replay_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--synthetic", "2", "--assignors", "nope"]) == 2
    assert "unknown assignor" in capsys.readouterr().err
    assert main(["replay", "--synthetic", "2", "--policies", "membership,sometimes"]) == 2
    assert "unknown policy 'sometimes'" in capsys.readouterr().err
    assert main(["replay"]) == 2
