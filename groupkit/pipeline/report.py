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

With the counterfactual (``--policies``, on by default) the report opens with **What if**:
per group, the assignor and policy whose *simulated* lag is lowest (mean largest member lag;
ties to fewer unowned partition-seconds), and by how much it beats what the group ran, both
simulated by the same model (the calibration track: the recorded assignments) and as
recorded; the model's calibration error per group and overall; ``whatif.csv`` has every
group; ``whatif-<n>.png`` charts the recorded lag, the calibration and each policy's best
assignor for the most lagging groups.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from groupkit.pipeline import counterfactual as cfm
from groupkit.pipeline.replay import ACTUAL
from groupkit.pipeline.spark import JobResult

MAX_TABLE_ROWS = 200
#: a group's model error (median, percent of its recorded peak) the report calls calibrated
CALIBRATED_PCT = 20.0


def best_combinations(cf: Any) -> Any:
    """One row per group: the best simulated assignor and policy, what the group ran, the
    margins in percent, and the calibration error."""
    import pandas as pd

    rows = []
    ok = cf[cf["error"].isna()]
    for group, g in ok.groupby("group", sort=True):
        sims = g[~g["assignor"].isin([cfm.ACTUAL, cfm.RECORDED])].sort_values(
            ["mean_max_member_lag", "unowned_ps", "moves", "assignor", "policy"]
        )
        actual = g[g["assignor"] == cfm.ACTUAL]
        recorded = g[g["assignor"] == cfm.RECORDED]
        if sims.empty or actual.empty or recorded.empty:
            continue
        best, act, rec = sims.iloc[0], actual.iloc[0], recorded.iloc[0]
        ran = sims[sims["ran"]]
        rows.append(
            {
                "group": group,
                "best_assignor": best["assignor"],
                "best_policy": best["policy"],
                "best_mean_max_member_lag": float(best["mean_max_member_lag"]),
                "best_p95_max_member_lag": float(best["p95_max_member_lag"]),
                "best_peak_max_member_lag": float(best["peak_max_member_lag"]),
                "best_moves": int(best["moves"]),
                "best_unowned_ps": float(best["unowned_ps"]),
                "best_drain_s": _num(best["drain_s"]),
                "best_peak_time_lag_s": _num(best["peak_time_lag_s"]),
                "recorded_peak_time_lag_s": _num(rec["peak_time_lag_s"]),
                "recorded_drain_s": _num(rec["drain_s"]),
                "ran": None if ran.empty else f"{ran.iloc[0]['assignor']}/{ran.iloc[0]['policy']}",
                "actual_mean_max_member_lag": float(act["mean_max_member_lag"]),
                "recorded_mean_max_member_lag": float(rec["mean_max_member_lag"]),
                "recorded_peak_max_member_lag": float(rec["peak_max_member_lag"]),
                "vs_actual_pct": _pct(best["mean_max_member_lag"], act["mean_max_member_lag"]),
                "vs_recorded_pct": _pct(best["mean_max_member_lag"], rec["mean_max_member_lag"]),
                "calibration_pct": _num(act["calibration_pct"]),
                "ran_replay_pct": None if ran.empty else _num(ran.iloc[0]["calibration_pct"]),
            }
        )
    return pd.DataFrame(rows)


def calibration(best: Any) -> dict[str, Any]:
    """The model's error across groups: median and worst percent, groups within target."""
    pct = [float(x) for x in best["calibration_pct"] if _num(x) is not None] if len(best) else []
    ran = [float(x) for x in best["ran_replay_pct"] if _num(x) is not None] if len(best) else []
    return {
        "ran_replay_median_pct": round(statistics.median(ran), 2) if ran else None,
        "groups": len(pct),
        "median_pct": round(statistics.median(pct), 2) if pct else None,
        "worst_pct": round(max(pct), 2) if pct else None,
        "within_target": sum(1 for x in pct if x <= CALIBRATED_PCT),
        "target_pct": CALIBRATED_PCT,
    }


def _whatif_lines(res: JobResult, best: Any, charts: list[Path]) -> list[str]:
    cal = calibration(best)
    cf = res.counterfactual
    sims = cf[cf["error"].isna() & ~cf["assignor"].isin([cfm.ACTUAL, cfm.RECORDED])]
    lines = [
        "## What if: simulated lag under every assignor and policy",
        "",
        "Each group's lag simulated forward from its first snapshot, with its recorded appends "
        "and membership and each member's capacity recovered from its busy intervals, under "
        f"every assignor and policy ({', '.join(res.policies)}: rebalancing on membership "
        "changes, also following the load with the leader's own re-plan, or at every "
        "snapshot), each move paying its unowned time. **Read the `best` column**: the "
        "combination whose simulated largest member lag is lowest on average; `better than "
        "ran` compares it with the group's recorded assignments simulated by the same model, "
        "`vs recorded` with the lag the group really had. Trust a group's line as far as its "
        "`model error` allows: the median gap between the simulated and the recorded largest "
        "member lag, in percent of the recorded peak.",
        "",
        f"Calibration over {cal['groups']:,} groups: median model error "
        f"{_fmt(cal['median_pct'], 1)} %, worst {_fmt(cal['worst_pct'], 1)} %; "
        f"{cal['within_target']:,} groups within {CALIBRATED_PCT:.0f} %. The combination "
        "each group ran, simulated from scratch (its assignor and policy deciding, not its "
        "recorded assignments), is off by a median "
        f"{_fmt(cal['ran_replay_median_pct'], 1)} %: how far the policies' replay, beyond the "
        "lag model, can be trusted.",
        "",
    ]
    if len(sims):
        wins = best.groupby(["best_assignor", "best_policy"]).size() if len(best) else {}
        combos = sims.groupby(["assignor", "policy"]).agg(
            mean_max_member_lag=("mean_max_member_lag", "mean"),
            p95=("p95_max_member_lag", "mean"),
            moves=("moves", "sum"),
            unowned_ps=("unowned_ps", "sum"),
            drain_s=("drain_s", "mean"),
        )
        combos = combos.sort_values("mean_max_member_lag").reset_index()
        lines += [
            "| assignor | policy | groups won | mean largest member lag | mean p95 | moves "
            "| unowned p·s | mean drain after bursts (s) |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for _, r in combos.iterrows():
            w = int(wins.get((r["assignor"], r["policy"]), 0)) if len(best) else 0
            lines.append(
                f"| {r['assignor']} | {r['policy']} | {w} | {_fmt(r['mean_max_member_lag'])} "
                f"| {_fmt(r['p95'])} | {_fmt(r['moves'])} | {_fmt(r['unowned_ps'], 2)} "
                f"| {_fmt(r['drain_s'], 1)} |"
            )
        lines.append("")
    if len(best):
        shown = best.sort_values("recorded_mean_max_member_lag", ascending=False)
        if len(shown) > MAX_TABLE_ROWS:
            lines += [
                f"The {MAX_TABLE_ROWS} groups with the most lag; all are in `whatif.csv`.",
                "",
            ]
            shown = shown.head(MAX_TABLE_ROWS)
        lines += [
            "| group | ran | best | simulated lag (mean / p95 / peak) | better than ran "
            "| vs recorded | moves | peak time lag, s (recorded) | drain after bursts, s "
            "(recorded) | model error |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for _, r in shown.iterrows():
            lines.append(
                f"| {r['group']} | {r['ran'] or '–'} | **{r['best_assignor']}/{r['best_policy']}**"
                f" | {_fmt(r['best_mean_max_member_lag'])} / {_fmt(r['best_p95_max_member_lag'])}"
                f" / {_fmt(r['best_peak_max_member_lag'])} | {_fmt(r['vs_actual_pct'], 1)} % "
                f"| {_fmt(r['vs_recorded_pct'], 1)} % | {r['best_moves']} "
                f"| {_fmt(r['best_peak_time_lag_s'], 1)} ({_fmt(r['recorded_peak_time_lag_s'], 1)})"
                f" | {_fmt(r['best_drain_s'], 1)} ({_fmt(r['recorded_drain_s'], 1)}) "
                f"| {_fmt(r['calibration_pct'], 1)} % |"
            )
        lines.append("")
    lines += [f"![{c.stem}]({c.name})" for c in charts] + [""]
    return lines


def _whatif_charts(res: JobResult, best: Any) -> list[Path]:
    tl = res.counterfactual_timelines
    if tl is None or not len(tl) or not len(best):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    cal = best.set_index("group")
    for n, group in enumerate(sorted(tl["group"].unique())):
        g = tl[tl["group"] == group]
        sims = res.counterfactual[(res.counterfactual["group"] == group)
                                  & res.counterfactual["error"].isna()]  # fmt: skip
        fig, ax = plt.subplots(figsize=(10, 3.4))
        for _, r in g.iterrows():
            series = json.loads(r["timeline"])
            if r["assignor"] == cfm.RECORDED:
                ax.plot(series, color="black", lw=2.4, label="recorded")
            elif r["assignor"] == cfm.ACTUAL:
                ax.plot(series, "--", color="black", lw=1.2, label="ran, simulated")
        for policy in res.policies:  # each policy's best assignor
            p = sims[(sims["policy"] == policy)].sort_values("mean_max_member_lag")
            if not len(p):
                continue
            name = p.iloc[0]["assignor"]
            row = g[(g["assignor"] == name) & (g["policy"] == policy)]
            if len(row):
                ax.plot(json.loads(row.iloc[0]["timeline"]), lw=1.3, label=f"{name}/{policy}")
        err = _num(cal.loc[group, "calibration_pct"]) if group in cal.index else None
        ax.set_title(f"{group}: largest member lag (model error {_fmt(err, 1)} %)")
        ax.set_xlabel("snapshot")
        ax.set_ylabel("records")
        ax.legend(fontsize=7, ncol=3)
        fig.tight_layout()
        path = res.out / f"whatif-{n}.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        made.append(path)
    return made


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
    whatif = None
    whatif_lines: list[str] = []
    if res.counterfactual is not None and len(res.counterfactual):
        whatif = best_combinations(res.counterfactual)
        whatif.to_csv(out / "whatif.csv", index=False)
        whatif_lines = _whatif_lines(res, whatif, _whatif_charts(res, whatif))

    lines = [f"# {title}", ""]
    lines += [
        f"Source: {res.source}. {res.records:,} telemetry records, "
        f"{sum(res.malformed.values()):,} malformed (skipped), {res.groups:,} groups, "
        f"{res.evaluations:,} snapshot × assignor evaluations "
        f"(assignors: {', '.join(res.assignors)}; rebalancing on "
        f"{'every snapshot' if res.rebalance_mode == 'every' else 'membership changes'}).",
        "",
        *whatif_lines,
        "## Against the recorded lag",
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
        f"Spark master: {res.master or '–'}. Timings (s): "
        + ", ".join(f"{k} {v:.1f}" for k, v in res.seconds.items()),
        "",
    ]
    (out / "report.md").write_text("\n".join(lines))
    doc = {
        "source": res.source,
        "master": res.master,
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
        "policies": res.policies,
        "whatif": [] if whatif is None else json.loads(whatif.to_json(orient="records")),
        "calibration": None if whatif is None else calibration(whatif),
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
