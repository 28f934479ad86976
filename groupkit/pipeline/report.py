"""The replay's report: which assignor would have served each group best, and by how much.

The score of an assignor in a group is its **mean largest member lag** over the group's
snapshots: the backlog of the member that holds the group back (what a lag alert sees). Ties
are broken by fewer partitions moved. "By how much" is the best score against the runner-up's
and against what the group actually ran (``actual``), in percent.

Written next to the Parquet results:

- ``report.md``: the verdict per group (every group up to :data:`MAX_TABLE_ROWS`; all of them
  in ``best_by_group.csv``), the assignors across groups, the real rebalances, and the
  malformed telemetry that was skipped;
- ``assignors.png``: per assignor, the median over groups of its score divided by the lower
  bound no assignment can beat, and how many groups it wins;
- ``timelines.png``: the largest member lag over time, per assignor, of the most lagging
  groups;
- ``report.json``: the same numbers for machines (and tests).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from groupkit.pipeline.replay import ACTUAL
from groupkit.pipeline.spark import JobResult

MAX_TABLE_ROWS = 200


def best_by_group(summary: Any) -> Any:
    """One row per group: the best assignor, runner-up, actual, and the margins in percent."""
    import pandas as pd

    rows = []
    for group, g in summary.groupby("group", sort=True):
        cands = g[g["assignor"] != ACTUAL].sort_values(["mean_max_member_lag", "moved", "assignor"])
        if cands.empty:
            continue
        best = cands.iloc[0]
        second = cands.iloc[1] if len(cands) > 1 else None
        actual = g[g["assignor"] == ACTUAL]
        act = actual.iloc[0] if len(actual) else None
        rows.append(
            {
                "group": group,
                "best": best["assignor"],
                "best_mean_max_member_lag": float(best["mean_max_member_lag"]),
                "lower_bound": float(best["mean_lower_bound"]),
                "best_moved": int(best["moved"]),
                "runner_up": None if second is None else second["assignor"],
                "vs_runner_up_pct": None
                if second is None
                else _pct(best["mean_max_member_lag"], second["mean_max_member_lag"]),
                "actual_mean_max_member_lag": None
                if act is None
                else float(act["mean_max_member_lag"]),
                "vs_actual_pct": None
                if act is None
                else _pct(best["mean_max_member_lag"], act["mean_max_member_lag"]),
                "best_mean_time_to_drain_s": _num(best["mean_time_to_drain_s"]),
            }
        )
    return pd.DataFrame(rows)


def _pct(better: float, other: float) -> float:
    """How much lower ``better`` is than ``other``, in percent of ``other``."""
    return 0.0 if other <= 0 else round(100.0 * (other - better) / other, 2)


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _fmt(v: Any, digits: int = 0) -> str:
    f = _num(v)
    if f is None:
        return "–"
    return f"{f:,.{digits}f}"


def across_groups(summary: Any) -> Any:
    """Per assignor: median score / lower bound, wins, moved and drain time across groups."""
    import pandas as pd

    s = summary.copy()
    s["vs_bound"] = s["mean_max_member_lag"] / s["mean_lower_bound"].where(
        s["mean_lower_bound"] > 0
    )
    best = best_by_group(summary)
    wins = best["best"].value_counts() if len(best) else pd.Series(dtype=int)
    out = s.groupby("assignor").agg(
        groups=("group", "nunique"),
        median_vs_bound=("vs_bound", "median"),
        mean_max_member_lag=("mean_max_member_lag", "mean"),
        moved=("moved", "sum"),
        revoked_eager=("revoked_eager", "sum"),
        rebalances=("rebalances", "sum"),
        mean_time_to_drain_s=("mean_time_to_drain_s", "mean"),
    )
    out["wins"] = [int(wins.get(a, 0)) for a in out.index]
    return out.sort_values(["median_vs_bound", "moved"]).reset_index()


def write_report(res: JobResult, title: str = "groupkit replay") -> Path:
    """Write ``report.md``, the charts, ``best_by_group.csv`` and ``report.json``."""
    out = res.out
    best = best_by_group(res.summary) if res.summary is not None and len(res.summary) else None
    table = across_groups(res.summary) if best is not None else None
    charts = _charts(res, table)
    if best is not None:
        best.to_csv(out / "best_by_group.csv", index=False)

    lines = [f"# {title}", ""]
    lines += [
        f"Source: {res.source}. {res.records:,} telemetry records, "
        f"{sum(res.malformed.values()):,} malformed (skipped), {res.groups:,} groups, "
        f"{res.evaluations:,} snapshot × assignor evaluations "
        f"(assignors: {', '.join(res.assignors)}; rebalancing on "
        f"{'every snapshot' if res.rebalance_mode == 'every' else 'membership changes'}).",
        "",
        "Score: the mean over a group's snapshots of its **largest member lag** (records), "
        "with each assignor keeping its own previous assignment. `actual` is what the group "
        "really ran. Lower is better; ties go to fewer partitions moved, then to the name.",
        "",
    ]
    if table is not None and best is not None:
        lines += ["## Across groups", ""]
        lines += [
            "| assignor | groups won | median score / lower bound | mean largest member lag "
            "| partitions moved | revoked if eager | mean time to drain (s) |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for _, r in table.iterrows():
            lines.append(
                f"| {r['assignor']} | {r['wins'] if r['assignor'] != ACTUAL else '–'} "
                f"| {_fmt(r['median_vs_bound'], 3)} | {_fmt(r['mean_max_member_lag'])} "
                f"| {_fmt(r['moved'])} | {_fmt(r['revoked_eager'])} "
                f"| {_fmt(r['mean_time_to_drain_s'], 1)} |"
            )
        lines += [""] + [f"![{c.stem}]({c.name})" for c in charts] + [""]
        lines += ["## Best assignor per group", ""]
        shown = best.sort_values("actual_mean_max_member_lag", ascending=False, na_position="last")
        if len(shown) > MAX_TABLE_ROWS:
            lines += [
                f"The {MAX_TABLE_ROWS} groups with the most lag; all {len(shown):,} are in "
                "`best_by_group.csv`.",
                "",
            ]
            shown = shown.head(MAX_TABLE_ROWS)
        lines += [
            "| group | best | score | lower bound | runner-up | better than runner-up "
            "| better than actual | moved |",
            "|---|---|---:|---:|---|---:|---:|---:|",
        ]
        for _, r in shown.iterrows():
            lines.append(
                f"| {r['group']} | **{r['best']}** | {_fmt(r['best_mean_max_member_lag'])} "
                f"| {_fmt(r['lower_bound'])} | {r['runner_up'] or '–'} "
                f"| {_fmt(r['vs_runner_up_pct'], 1)} % | {_fmt(r['vs_actual_pct'], 1)} % "
                f"| {r['best_moved']} |"
            )
        lines.append("")
    else:
        lines += ["No lag snapshots to replay.", ""]
    if res.rebalances is not None and len(res.rebalances):
        rb = res.rebalances
        lines += [
            "## Real rebalances",
            "",
            f"{int(rb['rebalances'].sum()):,} rebalance events in {len(rb):,} groups; "
            f"{_fmt(rb['moved'].sum())} partitions moved, {_fmt(rb['revoked'].sum())} revoked, "
            f"mean duration {_fmt(rb['mean_duration_ms'].mean(), 1)} ms.",
            "",
        ]
    lines += ["## Malformed telemetry", ""]
    if res.malformed:
        lines += [f"{sum(res.malformed.values()):,} records were skipped:", ""]
        lines += [f"- `{k}`: {v:,}" for k, v in sorted(res.malformed.items())]
        lines += ["", "First examples:", ""]
        lines += [f"- {w}: `{e}`" for w, e in res.malformed_examples]
    else:
        lines.append("None.")
    lines.append("")
    if res.failed_groups:
        lines += ["## Groups whose replay failed", ""]
        lines += [f"- {g}: {e}" for g, e in res.failed_groups[:50]]
        lines.append("")
    lines += [
        "Timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in res.seconds.items()),
        "",
    ]
    (out / "report.md").write_text("\n".join(lines))
    doc = {
        "source": res.source,
        "records": res.records,
        "malformed": res.malformed,
        "groups": res.groups,
        "evaluations": res.evaluations,
        "failed_groups": res.failed_groups,
        "assignors": res.assignors,
        "rebalance_mode": res.rebalance_mode,
        "seconds": res.seconds,
        "best": [] if best is None else json.loads(best.to_json(orient="records")),
        "across_groups": [] if table is None else json.loads(table.to_json(orient="records")),
        "charts": [c.name for c in charts],
    }
    (out / "report.json").write_text(json.dumps(doc, indent=1))
    return out / "report.md"


def _charts(res: JobResult, table: Any) -> list[Path]:
    if table is None or not len(table):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    t = table.sort_values("median_vs_bound")
    colors = ["#888888" if a == ACTUAL else "#3070b0" for a in t["assignor"]]
    a1.barh(t["assignor"], t["median_vs_bound"], color=colors)
    a1.invert_yaxis()
    a1.axvline(1.0, color="black", lw=0.8)
    a1.set_xlabel("largest member lag / lower bound (median over groups)")
    a1.set_title("Lag (lower is better)")
    w = t[t["assignor"] != ACTUAL]
    a2.barh(w["assignor"], w["wins"], color="#40a060")
    a2.invert_yaxis()
    a2.set_xlabel("groups where it is best")
    a2.set_title("Wins")
    fig.tight_layout()
    path = res.out / "assignors.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    made.append(path)

    tl = res.timelines
    if tl is not None and len(tl):
        groups = sorted(tl["group"].unique())
        fig, axes = plt.subplots(len(groups), 1, figsize=(10, 2.6 * len(groups)), squeeze=False)
        for ax, group in zip(axes[:, 0], groups, strict=True):
            g = tl[tl["group"] == group].sort_values("snapshot")
            for name, s in g.groupby("assignor"):
                ax.plot(
                    s["snapshot"],
                    s["max_member_lag"],
                    label=str(name),
                    lw=2.2 if name == ACTUAL else 1.2,
                    color="black" if name == ACTUAL else None,
                )
            bound = g.drop_duplicates("snapshot")
            ax.plot(
                bound["snapshot"], bound["lag_lower_bound"], ":", color="gray", label="lower bound"
            )
            ax.set_title(f"{group}: largest member lag")
            ax.set_xlabel("snapshot")
        axes[0, 0].legend(fontsize=7, ncol=3)
        fig.tight_layout()
        path = res.out / "timelines.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        made.append(path)
    return made
