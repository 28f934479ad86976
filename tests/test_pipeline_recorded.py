"""``groupkit replay`` on telemetry a real group wrote: the demo's, recorded.

``tests/data/demo-telemetry.jsonl`` is the telemetry topic of two runs of ``groupkit demo``
(3 members of 80 records/s, 200 records/s Zipf-skewed over 12 partitions, a member added or
removed every 20 s, telemetry every 2 s), read back from the topic one record a line:

- ``demo-rec``: ``balanced`` following the load (the demo's default), 130 s;
- ``demo-sticky``: ``cooperative-sticky``, no load-following, 100 s.

Recorded with::

    groupkit broker start
    groupkit demo --topic demo-rec --group demo-rec --duration 130 --no-table
    groupkit demo --topic demo-sticky --group demo-sticky --assignor cooperative-sticky \\
        --duration 100 --no-table
    # then every record of __groupkit_telemetry, one value a line

The model must reproduce what these groups really did (the calibration), and the job must
answer, for each, which assignor and policy would have done better and by how much.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from groupkit.pipeline import counterfactual as cf
from groupkit.runtime.telemetry import LagSnapshot, RebalanceEvent, decode
from tests.spark_fixtures import spark_cluster  # noqa: F401  (the cluster fixture)

DEMO = Path(__file__).parent / "data" / "demo-telemetry.jsonl"
GROUPS = {"demo-rec": ("balanced", "load"), "demo-sticky": ("cooperative-sticky", "membership")}
ASSIGNORS = ["balanced", "cooperative-sticky", "lag", "range"]


def records(group: str) -> tuple[list[LagSnapshot], list[RebalanceEvent]]:
    recs = [decode(line) for line in DEMO.read_text().splitlines() if line]
    mine = [r for r in recs if r.group == group]
    snaps = [r for r in mine if isinstance(r, LagSnapshot)]
    return snaps, [r for r in mine if isinstance(r, RebalanceEvent)]


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_the_model_reproduces_the_recorded_demo(group: str) -> None:
    """Calibration: the recorded assignments, simulated, give the recorded largest member
    lag within 20 % of its peak (median absolute error)."""
    snaps, events = records(group)
    assert len(snaps) >= 40 and all(s.version == 2 for s in snaps)
    assert {s.interval_ms for s in snaps[1:]} - {None} <= set(range(1500, 4000))
    h = cf.recover(group, snaps, events)
    # the demo's members process 80 records/s each; the busy intervals show it
    assert all(70 <= c <= 95 for c in h.capacity.values()), h.capacity
    assert (h.assignor, cf.ran_policy(h)) == GROUPS[group]
    rows = cf.counterfactual_group(group, snaps, ASSIGNORS, rebalances=events)
    actual = next(r for r in rows if r["assignor"] == cf.ACTUAL)
    recorded = next(r for r in rows if r["assignor"] == cf.RECORDED)
    assert recorded["peak_max_member_lag"] > 300  # there was lag to reproduce
    assert actual["calibration_pct"] <= 20, actual
    assert [r for r in rows if r["ran"]] != []


def test_a_standalone_cluster_answers_which_assignor_and_policy_for_each_group(
    spark_cluster: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The recorded demo through ``groupkit replay --master spark://...`` on a real standalone
    cluster (one worker): the same rows as the pure function, which is what ``local[*]`` runs
    too; a best combination and a calibrated model for each group."""
    import pandas as pd

    from groupkit.pipeline.report import best_combinations

    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "groupkit.cli", "replay", "--input", str(DEMO),
        "--master", spark_cluster.master_url, "--out", str(out),
        "--assignors", ",".join(ASSIGNORS), "--shuffle-partitions", "2",
        "--conf", "spark.executor.memory=512m",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    apps = (spark_cluster.state() or {}).get("completedapps", [])
    assert [a["name"] for a in apps] == ["groupkit-replay"]  # it ran on the cluster
    assert apps[0]["state"] == "FINISHED"
    doc = json.loads((out / "report.json").read_text())
    assert doc["master"] == spark_cluster.master_url
    assert doc["malformed"] == {} and not doc["failed_groups"] and doc["groups"] == len(GROUPS)
    assert doc["calibration"]["within_target"] == len(GROUPS)

    rows = pd.read_parquet(out / "counterfactual.parquet")
    assert rows["error"].isna().all()
    best = best_combinations(rows.drop(columns=["timeline"])).set_index("group")
    assert sorted(best.index) == sorted(GROUPS)
    got = rows.set_index(["group", "assignor", "policy"]).sort_index()
    for group, (assignor, policy) in GROUPS.items():
        assert best.loc[group, "ran"] == f"{assignor}/{policy}"
        assert best.loc[group, "calibration_pct"] <= 20
        assert best.loc[group, "vs_actual_pct"] >= 0  # at least as good as what ran
        snaps, events = records(group)
        expected = cf.counterfactual_group(group, snaps, ASSIGNORS, rebalances=events)
        assert len(got.loc[group]) == len(expected)
        for r in expected:
            g = got.loc[(group, r["assignor"], r["policy"])]
            assert round(g["mean_max_member_lag"], 3) == round(r["mean_max_member_lag"], 3)
            assert (g["moves"], g["timeline"]) == (r["moves"], r["timeline"])
    report = (out / "report.md").read_text()
    assert "## What if" in report and "model error" in report
    for group in GROUPS:
        assert f"| {group} | {best.loc[group, 'ran']} | **" in report
    assert (out / "whatif-0.png").stat().st_size > 1000
    assert (out / "whatif.csv").exists()
