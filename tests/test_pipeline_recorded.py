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
from pathlib import Path
from typing import Any

import pytest

from groupkit.pipeline import counterfactual as cf
from groupkit.runtime.telemetry import LagSnapshot, RebalanceEvent, decode
from tests.spark_fixtures import spark  # noqa: F401  (the session fixture)

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


def test_spark_answers_which_assignor_and_policy_for_each_recorded_group(
    spark: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    from groupkit.pipeline.report import best_combinations, write_report
    from groupkit.pipeline.spark import read_files, run_job

    out = tmp_path / "out"
    raw = read_files(spark, [str(DEMO)])
    res = run_job(spark, raw, out, ASSIGNORS, source=str(DEMO), policies=list(cf.POLICIES))
    write_report(res)
    assert res.malformed == {} and not res.failed_groups
    best = best_combinations(res.counterfactual).set_index("group")
    assert sorted(best.index) == sorted(GROUPS)
    for group, (assignor, policy) in GROUPS.items():
        row = best.loc[group]
        assert row["ran"] == f"{assignor}/{policy}"
        assert row["calibration_pct"] <= 20
        # the best combination is at least as good as what ran, by the same model
        assert row["vs_actual_pct"] >= 0
    # the Spark rows are the pure function's, whatever runs them
    got = res.counterfactual.set_index(["group", "assignor", "policy"]).sort_index()
    for group in GROUPS:
        snaps, events = records(group)
        for r in cf.counterfactual_group(group, snaps, ASSIGNORS, rebalances=events):
            g = got.loc[(group, r["assignor"], r["policy"])]
            assert g["mean_max_member_lag"] == pytest.approx(r["mean_max_member_lag"])
            assert g["moves"] == r["moves"]
    report = (out / "report.md").read_text()
    assert "## What if" in report and "model error" in report
    for group in GROUPS:
        assert f"| {group} | {best.loc[group, 'ran']} | **" in report
    doc = json.loads((out / "report.json").read_text())
    assert doc["calibration"]["within_target"] == len(GROUPS)
    assert (out / "whatif-0.png").stat().st_size > 1000
    assert (out / "whatif.csv").exists()
