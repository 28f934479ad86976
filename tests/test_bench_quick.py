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
    "bench",
    ["rebalance", "throughput", "failover", "join_age", "scale", "aio_loop_lag", "rolling_restart"],
)
def test_bench_quick(bench: str, bench_broker: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if bench == "rebalance":  # the members' hop events kept, for trace_joins below
        env.update(GK_BENCH_LOGS="1", GK_BENCH_KEEP=str(tmp_path / "kept"))
    proc = subprocess.run(
        [sys.executable, f"bench/{bench}.py", "--quick", "--bootstrap", bench_broker,
         "--results-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    if bench == "rebalance":
        _check_join_trace(tmp_path / "kept")
    doc = json.loads((tmp_path / f"{bench}.json").read_text())
    assert doc["rows"], doc
    assert doc["machine"]["cores"]
    assert (tmp_path / f"{bench}.md").read_text().startswith("# ")
    assert (tmp_path / f"{bench}.png").stat().st_size > 1000


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
