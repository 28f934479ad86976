"""Benchmark: a rolling restart of every member of a 5-member group (static membership).

One local broker, one topic (20 partitions), a producer writing one record to every partition
every 10 ms. A group of 5 member processes (``bench/_worker.py``), then, member after member: a
replacement process is started and built (idle: ``ready``), the member is closed (``close()``),
and the replacement subscribes at once with the same ``group.instance.id``; the next member
goes once every partition is owned and consuming again. Each member is back well within its
session (30 s), as a rolling deploy would be. What is measured, from the ownership the
application sees (the rebalance callbacks) and the first record of each assigned partition:

- **partitions moved**: partitions whose owner (by instance id) after the whole rolling restart
  differs from before, and the partitions that went to another member on the way (target: 0);
- **unavailability per partition**: seconds without an owner over the whole rolling restart
  (median and max over partitions): with static membership a partition is unowned only while
  its own member restarts; a dynamic group moves partitions at every leave and join;
- **others disturbed**: revoke/assign/lost callbacks of members that were not restarting;
- per restart: close → every partition owned and consuming again (median).

Contenders, same broker, same run, the same 30 s session / 1 s heartbeat:

- ``groupkit static``: ``GroupConsumer`` with ``group.instance.id`` (cooperative, the
  ``cooperative-sticky`` assignor; ``close()`` keeps the seat);
- ``groupkit dynamic``: the same without an instance id (``close()`` leaves);
- ``native classic static``: ``confluent_kafka.Consumer`` ``subscribe()``, classic protocol,
  ``cooperative-sticky``, ``group.instance.id`` (``close()`` of a static member sends no leave);
- ``native KIP-848 static``: ``group.protocol=consumer`` with ``group.instance.id`` (session and
  heartbeat as group configs).

The replacement's Python start-up is not counted (it is started, and its consumer built,
before the member it replaces closes), nor the old process's exit (the replacement subscribes
as soon as the old one's ``close()`` has returned): what is measured is the group protocol's
part of a restart, for every contender alike.

``--crash``: the same, but each member in turn is killed (-9) and its replacement subscribes
2 s later (``--restart-after``), as an orchestrator restarts a crashed pod: 4 members, one
trial (every member killed once). The groupkit contenders speak protocol version 2
(``groupkit.protocol.version=2``, the default ``groupkit.process.lease.ms``): a static member's
successor takes its partitions once the killed process's lease has run out, not its session.
A native classic static member's successor gets the seat at its JoinGroup (the broker fences
the old member id); the KIP-848 broker refuses the instance id while the killed process's
member holds it, until its session ends (librdkafka takes that refusal as a fatal error, which
the bench reports as the contender's result). What is measured per kill, beside the numbers
above:

- **restart → consuming again**: the replacement's ``subscribe()`` → every partition owned and
  consuming again (p50 and p90 over the kills; the target for a static member: 5 s);
- **kill → consuming again**: the same from the kill.

    python bench/rolling_restart.py --trials 3
    python bench/rolling_restart.py --crash
    python bench/rolling_restart.py --quick
    python bench/rolling_restart.py --crash --quick
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import Chart, begin, median, versions_note, write_results
from bench._harness import Group, Member, measure, pct, versions
from bench.rebalance import paced_topic, set_group_timeouts, wait_fact
from groupkit.dev.harness import TP, wait_for

# name -> (kind, protocol, static)
CONTENDERS: dict[str, tuple[str, str, bool]] = {
    "groupkit static": ("gk", "cooperative", True),
    "groupkit dynamic": ("gk", "cooperative", False),
    "native classic static": ("native", "cooperative-sticky", True),
    "native KIP-848 static": ("native", "consumer", True),
}


def _gaps(ivs: list[tuple[float, float, str]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] covered by no interval."""
    total, cur = 0.0, lo
    for s, e, _ in sorted(ivs):
        if e <= cur:
            continue
        if s > cur:
            total += min(s, hi) - cur
        cur = max(cur, e)
        if cur >= hi:
            break
    return total + max(0.0, hi - cur)


def _owners(group: Group, instance: dict[str, str], t: float) -> dict[TP, str]:
    """Each partition's owner at ``t``, by instance id (the member's seat)."""
    out = {}
    # (intervals still open end at the time they are computed for: compute them later)
    for p, ivs in group.intervals(time.monotonic() + 1).items():
        for s, e, name in ivs:
            if s <= t < e:
                out[p] = instance[name]
    return out


def _close(group: Group, old: Member, new: Member, args: argparse.Namespace) -> float:
    """``old`` closes and ``new`` (same seat) subscribes once ``close()`` has returned; the
    seconds from the close to every partition owned and consuming again."""
    group.wait_ready([new])
    old.send("close")
    wait_fact(group, old, "closed", timeout=args.session_ms / 1000 + 30)
    t0 = old.fact("leave")["t"]  # type: ignore[index]
    # at once: its close() has returned; the process's exit is not the protocol's
    new.send("subscribe")
    old.proc.wait(30)
    group.wait_stable(timeout=args.session_ms / 1000 + 60)
    return time.monotonic() - t0


def _crash(group: Group, old: Member, respawn: Callable[[], Member],
           args: argparse.Namespace) -> tuple[float, float, float]:  # fmt: skip
    """``old`` is killed (-9); its replacement (``respawn()``: same seat), started after the
    kill as an orchestrator restarts a crashed pod, subscribes ``args.restart_after`` seconds
    after the kill (later if its consumer is not built by then). Seconds from its
    ``subscribe()``, and from the kill, to every partition owned and consuming again (from the
    facts: the first record of every partition owned anew since the kill); and from the kill to
    the ``subscribe()``."""
    t_kill = old.kill()
    new = respawn()
    group.wait_ready([new])
    time.sleep(max(0.0, t_kill + args.restart_after - time.monotonic()))
    new.send("subscribe")
    wait_fact(group, new, "sub")
    t_sub = new.fact("sub")["t"]  # type: ignore[index]
    timeout = args.session_ms / 1000 + 60
    # A client that reports a fatal error (librdkafka's KIP-848 consumer, when the instance id
    # is still held by the killed process's member) never joins: say so instead of waiting.
    wait_for(lambda: group.stable() or bool(_fatal(new)), timeout,
             f"{group.group} stable: {group.describe()}")  # fmt: skip
    if _fatal(new):
        raise RuntimeError(f"the replacement's consumer failed: {_fatal(new)} "
                           f"({group.describe()})")  # fmt: skip
    group.wait_stable(timeout=timeout)
    m = measure(group, t_kill, time.monotonic())
    if not m["ok"]:
        raise RuntimeError(f"stable, but not every partition consuming: {group.describe()}")
    ready = t_kill + m["stable_s"]
    print(f"    {old.name} killed, replacement {new.name} subscribed "
          f"{t_sub - t_kill:.1f} s later: consuming again {ready - t_sub:.2f} s after its "
          f"subscribe()", flush=True)  # fmt: skip
    return ready - t_sub, ready - t_kill, t_sub - t_kill


def _fatal(m: Member) -> str:
    """The client's fatal error, from the member's output ("" if none)."""
    for line in m.log_tail(20_000).splitlines():
        if "Fatal error: " in line:
            return line.split("Fatal error: ", 1)[1]
    return ""


def rolling_restart(boot: str, topic: str, workdir: Path, name: str,
                    args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    kind, protocol, static = CONTENDERS[name]
    gid = f"bench-rr-{kind}-{protocol}-{'s' if static else 'd'}-{uuid.uuid4().hex[:6]}"
    # A crash is version 2's case: its static process lease (version 1 waits the session).
    group = Group(boot, gid, topic, args.partitions, workdir, kind, protocol, args.session_ms,
                  args.heartbeat_ms, control_topic=f"__gk_{gid}",
                  protocol_version=2 if args.crash else 1)  # fmt: skip
    if protocol == "consumer":
        set_group_timeouts(boot, gid, args.session_ms, args.heartbeat_ms)
    instance: dict[str, str] = {}  # member name -> seat (its instance id, or its own name)

    def spawn(seat: str) -> Member:
        m = group.spawn(seat if static else None)
        instance[m.name] = seat
        return m

    trials = []
    try:
        members = [spawn(f"pod-{i}") for i in range(args.members)]
        group.wait_ready(members)
        for m in members:
            m.send("subscribe")
        group.wait_stable(timeout=120)
        for trial in range(args.trials):
            time.sleep(args.gap)
            t_start = time.monotonic()
            before = _owners(group, instance, t_start)
            restarts: list[float] = []
            from_kill: list[float] = []  # (--crash) kill -> consuming again
            to_sub: list[float] = []  # (--crash) kill -> the replacement's subscribe()
            disturbed = 0
            for old in group.live()[: args.kills or None]:
                seat = instance[old.name]
                others = [m for m in group.live() if m is not old]
                seen = {m.name: len([f for f in m.facts()
                                     if f["e"] in ("assign", "revoke", "lost")])
                        for m in others}  # fmt: skip
                if args.crash:
                    restart, kill, sub = _crash(group, old, functools.partial(spawn, seat), args)
                    restarts.append(restart)
                    from_kill.append(kill)
                    to_sub.append(sub)
                else:
                    restarts.append(_close(group, old, spawn(seat), args))
                disturbed += sum(
                    len([f for f in m.facts() if f["e"] in ("assign", "revoke", "lost")])
                    - seen[m.name]
                    for m in others
                )
                time.sleep(args.gap)
            t_end = time.monotonic()
            after = _owners(group, instance, t_end)
            ivs = group.intervals(t_end + 1)
            unowned = {p: _gaps(ivs.get(p, []), t_start, t_end) for p in group.parts}
            # partitions that went to another seat at any point during the rolling restart
            wandered = sum(
                1 for p in group.parts
                if any(instance[n] != before.get(p) for s, e, n in ivs.get(p, [])
                       if e > t_start and s < t_end)
            )  # fmt: skip
            assert len(before) == len(after) == len(group.parts), (before, after)
            moved = sum(1 for p in group.parts if before.get(p) != after.get(p))
            trials.append({
                "moved": moved, "wandered": wandered, "disturbed": disturbed,
                "restart_s": restarts,
                **({"kill_s": from_kill, "sub_s": to_sub} if args.crash else {}),
                "unowned_median_s": median(list(unowned.values())),
                "unowned_max_s": max(unowned.values()),
                "unowned_total_ps": sum(unowned.values()),
                "seconds": t_end - t_start,
            })  # fmt: skip
            print(f"  {name} trial {trial + 1}/{args.trials}: moved {moved}, wandered "
                  f"{wandered}, others disturbed {disturbed}, restart p50 "
                  f"{median(restarts) * 1000:.0f} ms, unowned per partition median "
                  f"{trials[-1]['unowned_median_s']:.2f} s max "
                  f"{trials[-1]['unowned_max_s']:.2f} s", flush=True)  # fmt: skip
    finally:
        group.stop_all()
    return {"contender": name, "kind": kind, "protocol": protocol, "static": static,
            "trials": trials}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true",
        help="one trial, 3 members, 6 partitions, two contenders; with --crash: 2 members, "
             "4 partitions, groupkit static, one kill",
    )  # fmt: skip
    ap.add_argument(
        "--crash",
        action="store_true",
        help="kill -9 each member in turn and restart it (protocol version 2)",
    )
    ap.add_argument(
        "--restart-after",
        type=float,
        default=2.0,
        help="--crash: seconds from the kill to the replacement's subscribe()",
    )
    ap.add_argument("--members", type=int, default=None, help="default 5; --crash: 4")
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--trials", type=int, default=None, help="default 3; --crash: 1")
    ap.add_argument(
        "--kills", type=int, default=0, help="--crash: members killed per trial (0: every member)"
    )
    ap.add_argument("--session-ms", type=int, default=30_000)
    ap.add_argument("--heartbeat-ms", type=int, default=1_000)
    ap.add_argument("--gap", type=float, default=1.0, help="seconds between restarts")
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--bootstrap", help="use this broker (its minimums must allow the session)")
    ap.add_argument("--results-dir", type=Path, default=None)
    args = ap.parse_args()
    args.members = args.members or (4 if args.crash else 5)
    args.trials = args.trials or (1 if args.crash else 3)
    if args.quick and args.crash:  # one kill of groupkit's static member, for CI
        args.trials, args.members, args.partitions, args.gap, args.kills = 1, 2, 4, 0.3, 1
        if args.contenders == ",".join(CONTENDERS):
            args.contenders = "groupkit static"
    elif args.quick:  # seconds, for CI (tests/test_bench_quick.py)
        args.trials, args.members, args.partitions, args.gap = 1, 3, 6, 0.3
        if args.contenders == ",".join(CONTENDERS):
            args.contenders = "groupkit static,native classic static"
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    started = begin()
    t_start = time.monotonic()
    runs = []
    with paced_topic(args, "rolling") as (work, boot, topic, _pacer):
        for name in contenders:
            print(f"{name} ...", flush=True)
            try:
                runs.append(rolling_restart(boot, topic, work, name, args))
            except Exception as e:  # a contender that fails is reported, not fatal
                print(f"  {name} failed: {e}", flush=True)
                runs.append({"contender": name, "error": str(e)[:500], "trials": []})
    (report_crash if args.crash else report)(runs, args, started, time.monotonic() - t_start)


def report(runs: list[dict[str, Any]], args: argparse.Namespace, started: dict[str, Any],
           seconds: float, vers: dict[str, str] | None = None) -> None:  # fmt: skip
    """Write the run's entry (``vers``: the versions, else this checkout's)."""
    vers = vers or versions()

    def col(r: dict[str, Any], k: str) -> list[float]:
        return [float(t[k]) for t in r["trials"]]

    ref = next((r for r in runs if r["contender"] == "groupkit static" and r["trials"]), None)
    ref_unowned = median(col(ref, "unowned_median_s")) if ref else float("nan")
    columns = ["contender", "trials", "partitions moved", "moved on the way",
               "others' callbacks", "restart p50 ms", "restart p90 ms", "restart p95 ms",
               "unowned/partition median s", "unowned/partition max s",
               "unowned median / gk static"]  # fmt: skip
    rows = []
    for r in runs:
        if not r["trials"]:
            rows.append([r["contender"], f"failed: {r.get('error', '')[:60]}", *["-"] * 9])
            continue
        restarts = [x for t in r["trials"] for x in t["restart_s"]]
        um = median(col(r, "unowned_median_s"))
        rows.append([
            r["contender"], len(r["trials"]), median(col(r, "moved")),
            median(col(r, "wandered")), median(col(r, "disturbed")),
            round(pct(restarts, 0.5) * 1000, 1), round(pct(restarts, 0.9) * 1000, 1),
            round(pct(restarts, 0.95) * 1000, 1),
            round(um, 3), round(median(col(r, "unowned_max_s")), 3),
            round(um / ref_unowned, 2) if ref_unowned else "-",
        ])  # fmt: skip
    notes = [
        f"{args.members} members, {args.partitions} partitions, {args.trials} rolling restart(s) "
        f"of every member; session {args.session_ms} ms, heartbeat {args.heartbeat_ms} ms for "
        "every contender; producer: one record per partition every 10 ms.",
        "partitions moved: owner (by instance id) after the rolling restart differs from "
        "before; moved on the way: partitions that had another seat's member as owner at any "
        "moment; others' callbacks: revoke/assign/lost callbacks of members not restarting; "
        "restart: close() of the old process → every partition owned and consuming again (the "
        "replacement is started and built beforehand, and subscribes when close() returns); "
        "unowned/partition: seconds without an owner over the whole rolling restart, median "
        "and max over partitions (medians over trials).",
        versions_note(vers, seconds),
    ]
    done = [r for r in runs if r["trials"]]
    chart = Chart(
        ["unowned per partition: median", "max", "restart p50"],
        {r["contender"]: [median(col(r, "unowned_median_s")), median(col(r, "unowned_max_s")),
                          pct([x for t in r["trials"] for x in t["restart_s"]], 0.5)]
         for r in done},
        "seconds", title=f"Rolling restart of {args.members} members: unavailability",
    )  # fmt: skip
    write_results("rolling_restart", f"{args.members}x{args.partitions}", columns, rows,
                  started=started, title="Rolling restart: static membership",
                  results_dir=args.results_dir, notes=notes, chart=chart,
                  extra={"runs": runs, "versions": vers, "seconds": seconds,
                         "args": {k: str(v) for k, v in vars(args).items()
                                  if k != "results_dir"}})  # fmt: skip


def report_crash(runs: list[dict[str, Any]], args: argparse.Namespace, started: dict[str, Any],
                 seconds: float, vers: dict[str, str] | None = None) -> None:  # fmt: skip
    """Write the crash run's entry (``vers``: the versions, else this checkout's)."""
    vers = vers or versions()

    def col(r: dict[str, Any], k: str) -> list[float]:
        return [float(t[k]) for t in r["trials"]]

    def each(r: dict[str, Any], k: str) -> list[float]:
        return [x for t in r["trials"] for x in t[k]]

    ref = next((r for r in runs if r["contender"] == "groupkit static" and r["trials"]), None)
    ref_restart = pct(each(ref, "restart_s"), 0.5) if ref else float("nan")
    columns = ["contender", "kills", "partitions moved", "moved on the way", "others' callbacks",
               "restart → consuming p50 s", "restart → consuming p90 s",
               "kill → subscribe p50 s", "kill → consuming p50 s", "unowned/partition median s",
               "unowned/partition max s", "restart p50 / gk static"]  # fmt: skip
    rows = []
    for r in runs:
        if not r["trials"]:
            rows.append([r["contender"], "failed (below)", *["-"] * 10])
            continue
        restarts = each(r, "restart_s")
        p50 = pct(restarts, 0.5)
        rows.append([
            r["contender"], len(restarts), median(col(r, "moved")),
            median(col(r, "wandered")), median(col(r, "disturbed")),
            round(p50, 2), round(pct(restarts, 0.9), 2),
            round(pct(each(r, "sub_s"), 0.5), 2), round(pct(each(r, "kill_s"), 0.5), 2),
            round(median(col(r, "unowned_median_s")), 2),
            round(median(col(r, "unowned_max_s")), 2),
            round(p50 / ref_restart, 2) if ref_restart == ref_restart else "-",
        ])  # fmt: skip
    notes = [
        f"{args.members} members, {args.partitions} partitions; {args.trials} trial(s); a trial "
        f"kills -9 {f'{args.kills} member(s)' if args.kills else 'each member'} in turn and "
        "subscribes its replacement "
        f"(same seat, started after the kill) {args.restart_after:g} s after the kill, or once "
        "its consumer is built if later (kill → subscribe); session "
        f"{args.session_ms} ms, heartbeat {args.heartbeat_ms} ms for every contender; groupkit "
        "speaks protocol version 2 with the default process lease "
        "(`groupkit.process.lease.ms`, 3 s), cooperative; producer: one record per partition "
        "every 10 ms.",
        "partitions moved: owner (by seat) after the trial differs from before; moved on the "
        "way: partitions that had another seat's member as owner at any moment; others' "
        "callbacks: assign/revoke/lost callbacks of members not killed (sum over the kills); "
        "restart → consuming: the replacement's subscribe() → every partition owned and "
        "consuming again (p50, p90 over the kills; target for a static member: 5 s); kill → "
        "consuming: the same from the kill; unowned/partition: seconds without a running "
        "owner over the whole trial, median and max over partitions.",
        "After a kill -9: native classic static: the broker hands the seat to the new "
        "process at its JoinGroup (the old member id is fenced), so it is back at once; native "
        "KIP-848 static: the broker refuses the instance id while the killed process's member "
        "holds it (until its session ends), and librdkafka treats that refusal as fatal; "
        "groupkit static (version 2): the new process takes the seat's partitions once the "
        "killed process's lease has run out; a dynamic member's partitions wait for its "
        "session, then move.",
        *(f"{r['contender']} failed at its first kill: {r.get('error', '')[:400]}"
          for r in runs if not r["trials"]),
        versions_note(vers, seconds),
    ]  # fmt: skip
    done = [r for r in runs if r["trials"]]
    chart = Chart(
        ["restart → consuming p50", "p90", "unowned per partition: median"],
        {r["contender"]: [pct(each(r, "restart_s"), 0.5), pct(each(r, "restart_s"), 0.9),
                          median(col(r, "unowned_median_s"))]
         for r in done},
        "seconds", title=f"Crash (kill -9) and restart of {args.members} members",
        hline=(5.0, "target: 5 s"),
    )  # fmt: skip
    write_results("rolling_restart", f"crash {args.members}x{args.partitions}", columns, rows,
                  started=started, title="Rolling restart: static membership",
                  results_dir=args.results_dir, notes=notes, chart=chart,
                  extra={"runs": runs, "versions": vers, "seconds": seconds,
                         "args": {k: str(v) for k, v in vars(args).items()
                                  if k != "results_dir"}})  # fmt: skip


if __name__ == "__main__":
    main()
