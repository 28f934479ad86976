"""Where a join's time goes, hop by hop, from a kept ``bench/rebalance.py`` run.

Run the bench with the members' debug events kept, then point this at the directory::

    GK_BENCH_LOGS=1 GK_BENCH_KEEP=/tmp/joins python bench/rebalance.py \\
        --contenders "groupkit cooperative" --settings tuned --trials 5
    python bench/trace_joins.py /tmp/joins

Per join (a member's ``hop.subscribed`` event; the first ``--members`` rows are the group
forming, the rest the bench's measured joins and the unmeasured ones before each kill), the
phases on the wall clock of the members' JSON log lines (one machine, one clock):

- ``subscribe``: the ``subscribe()`` call (the topic check; the catch-up runs meanwhile);
- ``caught up``: subscribe's start → the newcomer replayed the log's end (``hop.caught_up``);
  negative when it did before ``subscribe()`` (``GroupConsumer()`` starts catching up);
- ``join read``: → it read its own join record back;
- ``planned``: → the leader's first generation after it (``rebalance.generation``);
- ``first release``, ``last release``: → the owners' release records (``hop.released``);
- ``all assigned``: → the newcomer's last ``hop.assigned`` within the window.

Per clean leave (a member's ``hop.closing`` event, ``close()``'s start), from that call:

- ``released``: → the leaver's release record sent (``hop.released``: the commit before it is
  done; the tombstone goes with it);
- ``appended``: → the broker acknowledged the leaver's last record (``hop.appended``);
- ``planned``: → the leader's generation for the leave (``rebalance.generation``);
- ``first assigned``, ``all assigned``: → the first and last ``hop.assigned`` of the others
  (before the next member's ``subscribe()``).

Then the poll thread's part of each hand-off (``hop.released``, ``hop.assigned``): ``picked``,
from the control thread queueing it to the poll thread starting it; ``stop``, ``on_revoke`` and
the unassign; ``commit``, the commit before the release; ``assign``, the ``incremental_assign``
call (it holds the GIL while librdkafka's main thread serves it).

Slow phases under load usually show a member's control thread not scheduled for a few hundred
ms (no event of it at all meanwhile): look at the raw timeline with ``--raw``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._harness import pct

Event = tuple[float, str, dict[str, Any]]  # (wall time s, member name, the log line)


def load(directory: Path) -> list[Event]:
    events: list[Event] = []
    for f in sorted(directory.glob("bench-gk-*-m*.out")):
        member = f.stem.rsplit("-", 1)[-1]
        for line in f.read_text(errors="replace").splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            ts = e.get("timestamp") if isinstance(e, dict) else None
            if ts:
                t = datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
                events.append((t, member, e))
    events.sort(key=lambda x: x[0])
    return events


def _since(near: list[Event], t0: float, who: str | None, event: str, after: float = 0.0,
           **match: Any) -> list[float]:  # fmt: skip
    """ms after ``t0`` of the ``event`` lines of ``who`` (any member: ``None``; all but ``who``:
    a name prefixed with ``!``) at or after ``after`` that carry ``match``."""
    out = []
    for t, m, x in near:
        if x["event"] != event or t < after or any(x.get(k) != v for k, v in match.items()):
            continue
        if who is None or (who.startswith("!") and m != who[1:]) or m == who:
            out.append((t - t0) * 1000)
    return out


def phases(events: list[Event], window_s: float) -> list[dict[str, Any]]:
    joins = []
    for t_end, who, e in events:
        if e["event"] != "hop.subscribed":
            continue
        t0 = t_end - e.get("ms", 0) / 1000
        near = [(t, m, x) for t, m, x in events if t0 <= t < t0 + window_s]
        read = _since(near, t0, who, "hop.read_own", new_membership=True)[:1]
        t_read = t0 + (read[0] if read else 0) / 1000
        planned = _since(near, t0, None, "rebalance.generation", t_read)[:1]
        releases = _since(near, t0, "!" + who, "hop.released", t_read)
        assigned = _since(near, t0, who, "hop.assigned")
        # the newest catch-up of the newcomer's before the window's end (usually before t0)
        caught = [
            (t - t0) * 1000
            for t, m, x in events
            if m == who and x["event"] == "hop.caught_up" and t < t0 + window_s
        ][-1:]
        joins.append({
            "member": who,
            "t0": t0,
            "subscribe": e.get("ms"),
            "caught up": caught[0] if caught else None,
            "join read": read[0] if read else None,
            "planned": planned[0] if planned else None,
            "first release": min(releases, default=None),
            "last release": max(releases, default=None),
            "all assigned": max(assigned, default=None),
        })  # fmt: skip
    return joins


def leaves(events: list[Event], window_s: float) -> list[dict[str, Any]]:
    out = []
    for t0, who, e in events:
        if e["event"] != "hop.closing":
            continue
        # up to the next join or kill's subscribe (the bench's next event), or the window's end
        end = min((t for t, _, x in events if t > t0 and x["event"] == "hop.subscribed"),
                  default=t0 + window_s)  # fmt: skip
        near = [(t, m, x) for t, m, x in events if t0 <= t < min(end, t0 + window_s)]
        released = _since(near, t0, who, "hop.released")[:1]
        appended = _since(near, t0, who, "hop.appended")[-1:]
        t_rel = t0 + (released[0] if released else 0) / 1000
        planned = _since(near, t0, "!" + who, "rebalance.generation", t_rel)[:1]
        assigned = _since(near, t0, "!" + who, "hop.assigned", t_rel)
        out.append({
            "member": who,
            "t0": t0,
            "released": released[0] if released else None,
            "appended": appended[0] if appended else None,
            "planned": planned[0] if planned else None,
            "first assigned": min(assigned, default=None),
            "all assigned": max(assigned, default=None),
        })  # fmt: skip
    return out


def _table(rows: list[dict[str, Any]], cols: list[str], events: list[Event], what: str,
           window_s: float, raw: bool, skip: int = 0) -> None:  # fmt: skip
    """One row per event; the median row leaves out the first ``skip`` (the group forming)."""
    print("member  " + "  ".join(f"{c:>14}" for c in cols) + f"   (ms from {what})")
    for j in rows:
        cells = [f"{j[c]:14.1f}" if j[c] is not None else f"{'-':>14}" for c in cols]
        print(f"{j['member']:6}  " + "  ".join(cells))
        if raw:
            t0 = j["t0"]
            for t, m, e in events:
                if t0 <= t < t0 + window_s:
                    rest = {k: v for k, v in e.items()
                            if k not in ("timestamp", "event", "group", "level")}  # fmt: skip
                    print(f"    {(t - t0) * 1000:8.1f} {m} {e['event']} {rest}")
    measured = rows[skip:]
    note = f"   (rows after the first {skip})" if skip else ""
    print("median  " + "  ".join(
        f"{statistics.median(v):14.1f}" if (v := [j[c] for j in measured if j[c] is not None])
        else f"{'-':>14}" for c in cols) + note)  # fmt: skip


def handoff_steps(events: list[Event]) -> None:
    """The poll thread's part of every hand-off (all members, the group forming included),
    from the fields of ``hop.released`` and ``hop.assigned``: p50 / p90 / max ms."""
    fields = {"hop.released": ("picked_ms", "stop_ms", "commit_ms"),
              "hop.assigned": ("picked_ms", "assign_ms")}  # fmt: skip
    print("hand-off step                 n      p50      p90      max   (ms)")
    for kind, names in fields.items():
        for name in names:
            v = [float(e[name]) for _, _, e in events if e["event"] == kind and name in e]
            if v:
                print(f"{kind[4:]:>8} {name:<14} {len(v):6} "
                      + " ".join(f"{pct(v, q):8.1f}" for q in (0.5, 0.9, 1.0)))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("directory", type=Path, help="a GK_BENCH_KEEP directory")
    ap.add_argument("--window", type=float, default=1.5, help="seconds after each subscribe")
    ap.add_argument("--raw", action="store_true", help="also print every event of each join")
    ap.add_argument("--members", type=int, default=10,
                    help="the bench's group size: its first joins are the group forming, left "
                         "out of the joins' median")  # fmt: skip
    args = ap.parse_args()
    events = load(args.directory)
    join_cols = ["subscribe", "caught up", "join read", "planned", "first release",
                 "last release", "all assigned"]  # fmt: skip
    _table(phases(events, args.window), join_cols, events, "subscribe()", args.window, args.raw,
           args.members)  # fmt: skip
    leave_cols = ["released", "appended", "planned", "first assigned", "all assigned"]
    print()
    _table(leaves(events, args.window), leave_cols, events, "close()", args.window, args.raw)
    print()
    handoff_steps(events)


if __name__ == "__main__":
    main()
