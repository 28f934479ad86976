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
from typing import Any, TypeVar

T = TypeVar("T")

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


def timed_runs(fn: Callable[[], T], runs: int) -> tuple[list[float], T]:
    """:func:`time_runs` (at least one), and what the last call returned."""
    last: list[T] = []
    times = time_runs(lambda: last.append(fn()), max(runs, 1))
    return times, last[-1]


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def write_results(
    name: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    extra: dict[str, Any] | None = None,
    title: str = "",
    results_dir: Path | str | None = None,
    notes: Sequence[str] = (),
) -> Path:
    """Print the table and write it as JSON and Markdown under ``bench/results/`` (or
    ``results_dir``); ``notes`` are lines printed and written under the table. Returns the
    folder written to."""
    widths = [max(len(str(c)), *(len(_fmt(r[i])) for r in rows)) for i, c in enumerate(columns)]
    line = "  ".join(str(c).ljust(w) for c, w in zip(columns, widths, strict=True))
    print(title or name)
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(_fmt(v).ljust(w) for v, w in zip(r, widths, strict=True)))
    for n in notes:
        print(n)
    out = Path(results_dir) if results_dir else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "name": name,
        "machine": machine(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "columns": list(columns),
        "rows": [list(r) for r in rows],
        **(extra or {}),
    }
    (out / f"{name}.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    md = [
        f"# {title or name}",
        "",
        f"Machine: {doc['machine']['cores']} cores, {doc['machine']['cpu']}",
        "",
    ]
    md.append("| " + " | ".join(columns) + " |")
    md.append("|" + "---|" * len(columns))
    md += ["| " + " | ".join(_fmt(v) for v in r) + " |" for r in rows]
    if notes:
        md += ["", *notes]
    (out / f"{name}.md").write_text("\n".join(md) + "\n")
    return out


def bar_chart(
    path: Path | str,
    categories: Sequence[str],
    series: dict[str, Sequence[float]],
    ylabel: str,
    title: str = "",
    errors: dict[str, Sequence[float]] | None = None,
    log: bool = False,
    hline: tuple[float, str] | None = None,
) -> None:
    """A grouped bar chart as PNG: one group per category, one bar per series (NaN: no bar).

    ``errors`` gives, per series, the top of an error bar (e.g. p95 over bars of p50);
    ``hline`` draws a labelled reference line (a target)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(series), 1)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(categories) * max(1, n / 3)), 4.5))
    for i, (label, values) in enumerate(series.items()):
        xs = [c + (i - (n - 1) / 2) * width for c in range(len(categories))]
        vals = [v if v == v else 0.0 for v in values]
        yerr = None
        if errors and label in errors:
            tops = errors[label]
            yerr = [[0.0] * len(vals), [max(0.0, (t if t == t else v) - v)
                                       for t, v in zip(tops, vals, strict=True)]]  # fmt: skip
        ax.bar(xs, vals, width, label=label, yerr=yerr, capsize=2)
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    if hline is not None:
        ax.axhline(hline[0], color="red", linestyle="--", linewidth=1)
        ax.text(len(categories) - 0.5, hline[0], hline[1], color="red", ha="right",
                va="bottom", fontsize=8)  # fmt: skip
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        if v != v:
            return "n/a"
        return f"{v:.4g}"
    return str(v)
