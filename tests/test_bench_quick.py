"""The benches' ``--quick`` modes run, exit 0 and write their results, so the benches never rot.

Each bench runs as a subprocess, as ``make bench`` runs it, against one broker started here with
the lowered group minimums the benches' tuned settings need (1 s sessions), writing its results
to a temporary folder instead of ``bench/results/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupkit.dev.broker import LocalBroker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rebalance import broker_properties  # noqa: E402


@pytest.fixture(scope="module")
def bench_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with LocalBroker(tmp_path_factory.mktemp("bench-broker"),
                     extra_properties=broker_properties(1000, 100)) as b:  # fmt: skip
        yield b.bootstrap


@pytest.mark.parametrize(
    "run",
    ["rebalance", "throughput", "failover", "join_age", "scale", "aio_loop_lag", "rolling_restart",
     "rolling_restart --crash", "newcomer"],
)  # fmt: skip
def test_bench_quick(run: str, bench_broker: str, tmp_path: Path) -> None:
    """``run``: the bench, and the arguments of one of its modes."""
    bench, *mode = run.split()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if bench == "rebalance":  # the members' hop events kept, for trace_joins below
        env.update(GK_BENCH_LOGS="1", GK_BENCH_KEEP=str(tmp_path / "kept"))
    proc = subprocess.run(
        [sys.executable, f"bench/{bench}.py", *mode, "--quick", "--bootstrap", bench_broker,
         "--results-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    if bench == "rebalance":
        _check_join_trace(tmp_path / "kept")
    doc = json.loads((tmp_path / f"{bench}.json").read_text())
    assert doc["name"] == bench and doc["settings"], doc
    for setting, entry in doc["settings"].items():
        assert entry["rows"], (setting, entry)
        stamp = entry["stamp"]
        assert stamp["commit"] and stamp["date"], stamp
        assert stamp["machine"]["cores"] and stamp["machine"]["cpu"], stamp
        assert stamp["load1_start"] >= 0 and stamp["load1_end"] >= 0, stamp
    if bench in ("rebalance", "join_age", "failover", "rolling_restart", "aio_loop_lag",
                 "newcomer"):  # fmt: skip
        for entry in doc["settings"].values():  # an event's p90 beside its p50
            assert any("p90" in c for c in entry["columns"]), entry["columns"]
    md = (tmp_path / f"{bench}.md").read_text()
    assert md.startswith("# ") and all(f"## {s}" in md for s in doc["settings"]), md
    assert (tmp_path / f"{bench}.png").stat().st_size > 1000


def test_results_keep_other_settings(tmp_path: Path) -> None:
    """A run of one setting replaces that setting's entry and keeps the others'."""
    from bench._common import Chart, begin, write_results

    chart = Chart(["join"], {"a": [1.0]}, "ms")
    for setting, value in (("10x48 tuned", 1), ("4x16 tuned", 2), ("10x48 tuned", 3)):
        write_results("demo", setting, ["event", "p50 ms"], [["join", value]], started=begin(),
                      results_dir=tmp_path, chart=chart)  # fmt: skip
    doc = json.loads((tmp_path / "demo.json").read_text())
    assert {s: e["rows"] for s, e in doc["settings"].items()} == {
        "10x48 tuned": [["join", 3]],
        "4x16 tuned": [["join", 2]],
    }
    md = (tmp_path / "demo.md").read_text()
    assert "## 10x48 tuned" in md and "## 4x16 tuned" in md
    assert (tmp_path / "demo.png").stat().st_size > 1000


def test_results_in_tree_are_one_set_per_bench() -> None:
    """bench/results holds one stamped result set per bench, under the bench's own name."""
    results = ROOT / "bench" / "results"
    benches = {p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.startswith("_")}
    for path in sorted(results.glob("*.json")):
        assert path.stem in benches, f"{path.name}: not named after a bench"
        doc = json.loads(path.read_text())
        assert doc["settings"], path
        for setting, entry in doc["settings"].items():
            stamp = entry["stamp"]
            for key in ("commit", "date", "machine", "load1_start", "load1_end"):
                assert key in stamp, (path.name, setting, key)
    for path in sorted(results.iterdir()):
        assert path.stem in benches, f"{path.name}: not named after a bench"


def _check_join_trace(kept: Path) -> None:
    """bench/trace_joins.py finds every phase of the measured join in the members' events."""
    sys.path.insert(0, str(ROOT))
    from bench.trace_joins import load, phases

    joins = phases(load(kept), window_s=5.0)
    assert len(joins) >= 3, joins  # two members form the group, then the measured join
    newcomer = joins[2]
    for phase in ("caught up", "join read", "planned", "first release", "all assigned"):
        assert newcomer[phase] is not None, (phase, newcomer)
    assert newcomer["caught up"] <= newcomer["join read"] <= newcomer["all assigned"], newcomer
