"""Shared plumbing of the benchmarks: timing, machine facts, the table and the results files.

Every bench prints a table of medians with ratios against the anchor measured in the same run,
and writes ``bench/results/<name>.json`` plus ``bench/results/<name>.md``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """Cores, CPU model, Python and platform, recorded beside every result."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def time_runs(fn: Callable[[], object], runs: int) -> list[float]:
    """Wall-clock seconds of ``runs`` calls of ``fn``."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def write_results(
    name: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    extra: dict[str, Any] | None = None,
    title: str = "",
) -> None:
    """Print the table and write it as JSON and Markdown under ``bench/results/``."""
    widths = [max(len(str(c)), *(len(_fmt(r[i])) for r in rows)) for i, c in enumerate(columns)]
    line = "  ".join(str(c).ljust(w) for c, w in zip(columns, widths, strict=True))
    print(title or name)
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(_fmt(v).ljust(w) for v, w in zip(r, widths, strict=True)))
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {
        "name": name,
        "machine": machine(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "columns": list(columns),
        "rows": [list(r) for r in rows],
        **(extra or {}),
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    md = [
        f"# {title or name}",
        "",
        f"Machine: {doc['machine']['cores']} cores, {doc['machine']['cpu']}",
        "",
    ]
    md.append("| " + " | ".join(columns) + " |")
    md.append("|" + "---|" * len(columns))
    md += ["| " + " | ".join(_fmt(v) for v in r) + " |" for r in rows]
    (RESULTS / f"{name}.md").write_text("\n".join(md) + "\n")


def _fmt(v: object) -> str:
    if isinstance(v, float):
        if v != v:
            return "n/a"
        return f"{v:.4g}"
    return str(v)
