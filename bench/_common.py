"""Shared plumbing of the benchmarks: timing, machine facts, the stamp and the results files.

Every bench keeps ONE result set, ``bench/results/<bench>.{json,md,png}``, holding every setting
it has run (a shape such as ``10x48``, tuned or default, ...), each stamped with the commit, the
machine, the 1-minute load at its start and end, and the date. A run of one setting replaces
that setting's entry and keeps the others; the Markdown and the chart are drawn again from the
whole JSON. A bench calls::

    started = begin()                    # as the run starts: date, load
    ...
    write_results("mybench", "10x48 tuned", columns, rows, started=started,
                  title=..., notes=[...], chart=Chart(...))
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict[str, Any]:
    """CPU model, cores, memory, Python and platform, recorded beside every result."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gb: float | None = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": memory_gb,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def commit() -> str:
    """The checked-out commit the bench ran (``+dirty`` with uncommitted changes to anything
    but the results, which a run of several settings writes as it goes)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, timeout=10).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":(exclude)bench/results"],
                               cwd=ROOT, text=True, capture_output=True,
                               timeout=10).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def begin() -> dict[str, Any]:
    """The first half of a result's stamp, taken as the run starts: the date and the load."""
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load1_start": load1()}


def stamp(started: dict[str, Any] | None = None) -> dict[str, Any]:
    """A whole stamp: ``started`` (from :func:`begin`) completed with the load now, the commit
    and the machine. Keys ``started`` already has are kept, so a result converted from an
    older file keeps the stamp it had."""
    out = dict(started or begin())
    out.setdefault("load1_end", load1())
    out.setdefault("commit", commit())
    out.setdefault("machine", machine())
    return out


@dataclass
class Chart:
    """One setting's grouped bar chart: one group per category, one bar per series (NaN: no
    bar). ``errors`` gives, per series, the top of an error bar (e.g. p95 over bars of p50);
    ``hline`` draws a labelled reference line (a target)."""

    categories: list[str]
    series: dict[str, list[float]]
    ylabel: str
    title: str = ""
    errors: dict[str, list[float]] | None = None
    log: bool = False
    hline: tuple[float, str] | None = None


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


def pct(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` (linear between ranks; NaNs left out)."""
    ys = sorted(x for x in xs if x == x)
    if not ys:
        return float("nan")
    k = (len(ys) - 1) * q
    f = math.floor(k)
    c = min(f + 1, len(ys) - 1)
    return ys[f] + (ys[c] - ys[f]) * (k - f)


def write_results(
    name: str,
    setting: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    started: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    title: str = "",
    results_dir: Path | str | None = None,
    notes: Sequence[str] = (),
    chart: Chart | None = None,
) -> Path:
    """Print the table, and put it as ``setting``'s entry into ``<name>.json`` under
    ``bench/results/`` (or ``results_dir``), replacing that setting's earlier entry and keeping
    the others; then write ``<name>.md`` and ``<name>.png`` again from every entry. ``started``
    is the run's :func:`begin` (or a whole stamp); ``notes`` are lines printed and written
    under the table. Returns the folder written to."""
    print(f"{title or name} [{setting}]")
    for line in _table_lines(columns, rows):
        print(line)
    for n in notes:
        print(n)
    out = Path(results_dir) if results_dir else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    doc = load_results(path) if path.exists() else {"name": name, "settings": {}}
    doc["name"], doc["title"] = name, title or doc.get("title") or name
    entry = {
        "stamp": stamp(started),
        "columns": list(columns),
        "rows": [list(r) for r in rows],
        "notes": list(notes),
        **({"chart": asdict(chart)} if chart else {}),
        **(extra or {}),
    }
    doc["settings"][setting] = entry
    doc["settings"] = dict(sorted(doc["settings"].items()))
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    render(doc, out)
    return out


def load_results(path: Path) -> dict[str, Any]:
    """A results file; one written before result sets held settings counts as one entry."""
    doc: dict[str, Any] = json.loads(path.read_text())
    if "settings" not in doc:
        raise ValueError(f"{path}: not a result set (no 'settings')")
    return doc


def render(doc: dict[str, Any], out: Path) -> None:
    """``<name>.md`` and (when an entry has a chart) ``<name>.png`` from the whole result set."""
    name = doc["name"]
    md = [f"# {doc.get('title') or name}", ""]
    md.append(
        "One entry per setting, each from its own run: `python bench/"
        f"{name}.py --help` says how to run each. Every entry's stamp gives the commit, "
        "the machine, and the 1-minute load at the run's start and end."
    )
    for setting, e in doc["settings"].items():
        md += ["", f"## {setting}", "", _stamp_line(e["stamp"]), ""]
        md += _md_table(e["columns"], e["rows"])
        for note in e.get("notes") or ():
            md += ["", note] if note else []
    (out / f"{name}.md").write_text("\n".join(md) + "\n")
    charts = [(s, e["chart"]) for s, e in doc["settings"].items() if e.get("chart")]
    if charts:
        _draw(out / f"{name}.png", charts)


def versions_note(vers: dict[str, str], seconds: float) -> str:
    """The notes' line of versions (the commit is in the stamp) and the run's length."""
    listed = ", ".join(f"{k} {v}" for k, v in vers.items() if k != "commit")
    return f"Versions: {listed}; {seconds:.0f} s for the whole run."


def _stamp_line(s: dict[str, Any]) -> str:
    m = s.get("machine") or {}
    mem = f", {m['memory_gb']:g} GB" if m.get("memory_gb") else ", memory not recorded"
    end = s.get("load1_end")
    return (f"Commit {s.get('commit') or 'unknown'}; {s.get('date', 'unknown')}; "
            f"{m.get('cores', '?')} cores ({m.get('cpu') or 'unknown CPU'}){mem}; "
            f"1-minute load {_fmt(s.get('load1_start'))} at the start, "
            f"{_fmt(end)} at the end.")  # fmt: skip


def _table_lines(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    widths = [max(len(str(c)), *(len(_fmt(r[i])) for r in rows)) for i, c in enumerate(columns)]
    line = "  ".join(str(c).ljust(w) for c, w in zip(columns, widths, strict=True))
    return [line, "-" * len(line)] + [
        "  ".join(_fmt(v).ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows
    ]


def _md_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    md = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return md + ["| " + " | ".join(_fmt(v) for v in r) + " |" for r in rows]


def _draw(path: Path, charts: list[tuple[str, dict[str, Any]]]) -> None:
    """One panel per setting, stacked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = max(max(6.0, 1.2 * len(c["categories"]) * max(1, len(c["series"]) / 3))
                for _, c in charts)  # fmt: skip
    fig, axes = plt.subplots(len(charts), 1, figsize=(width, 4.5 * len(charts)), squeeze=False)
    for ax, (setting, c) in zip(axes[:, 0], charts, strict=True):
        _panel(ax, c, f"{c.get('title') or ''} [{setting}]")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _panel(ax: Any, c: dict[str, Any], title: str) -> None:
    categories, series = c["categories"], c["series"]
    errors, hline = c.get("errors"), c.get("hline")
    n = max(len(series), 1)
    width = 0.8 / n
    for i, (label, values) in enumerate(series.items()):
        xs = [k + (i - (n - 1) / 2) * width for k in range(len(categories))]
        vals = [v if v is not None and v == v else 0.0 for v in values]
        yerr = None
        if errors and label in errors:
            tops = [t if t is not None and t == t else v for t, v in zip(errors[label], vals,
                                                                         strict=True)]  # fmt: skip
            yerr = [[0.0] * len(vals), [max(0.0, t - v) for t, v in zip(tops, vals, strict=True)]]
        ax.bar(xs, vals, width, label=label, yerr=yerr, capsize=2)
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories)
    ax.set_ylabel(c["ylabel"])
    if c.get("log"):
        ax.set_yscale("log")
    if hline:
        ax.axhline(hline[0], color="red", linestyle="--", linewidth=1)
        ax.text(len(categories) - 0.5, hline[0], hline[1], color="red", ha="right",
                va="bottom", fontsize=8)  # fmt: skip
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)


def _fmt(v: object) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        if v != v:
            return "n/a"
        return f"{v:.4g}"
    return str(v)
