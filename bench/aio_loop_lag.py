"""Benchmark: how late an asyncio loop runs while an ``AIOGroupConsumer`` polls, rebalances and
commits on it, beside the same loop driving ``confluent_kafka.aio.AIOConsumer`` (a broker
``subscribe()`` group) in the same run as the anchor.

One broker, one topic (``--partitions``) with a producer writing one record to every partition
every 10 ms. In the bench process, one event loop runs a ticker task (wakes every 10 ms and
records how late it woke: actual sleep minus 10 ms) and one consumer task: ``consume(100,
0.1)`` in a loop, a synchronous ``commit()`` every 0.5 s. Per consumer kind, phases:

- ``steady``: the member alone owns every partition (``--hold`` seconds);
- ``join``: a second member (a separate process of the same kind, synchronous: groupkit's
  ``GroupConsumer`` or confluent's ``Consumer``) joins; from its start until our member owns
  fewer partitions, then ``--hold`` seconds more;
- ``leave``: the second member closes; until our member owns every partition again, then
  ``--hold`` seconds more.

A third kind, ``GroupConsumer on a thread``, polls and commits the synchronous consumer on a
thread of its own while the loop only ticks: groupkit's own threads' cost to the loop (they
share the GIL with it), without the asyncio wrapper.

Before each kind, ``baseline``: the ticker alone on the loop (``--hold`` seconds), the
machine's own scheduling noise. ``start`` (construction, subscribe, first assignment) and
``close`` are counted too. Reported per kind and phase: the ticks, the lag's p50 / p99 / max,
and the 1-min load average (the machine is shared: read the anchor beside it). A lag of ~0
means nothing blocked the loop; what remains is the scheduling of a 2-core machine shared
with the broker and the producer.

    python bench/aio_loop_lag.py            # ~1 min
    python bench/aio_loop_lag.py --quick    # seconds
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.aio import AIOConsumer

from bench._common import Chart, begin, write_results
from bench._harness import broker, create_topic, load
from bench._pacer import Pacer
from bench.rebalance import broker_properties
from groupkit import GroupConsumer, GroupkitError
from groupkit.aio import AIOGroupConsumer
from groupkit.dev.harness import wait_for

KINDS = (
    "confluent AIOConsumer (anchor)",
    "groupkit AIOGroupConsumer",
    "groupkit GroupConsumer on a thread",
)
TICK_S = 0.01


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def conf(kind: int, bootstrap: str, group: str, control: str) -> dict[str, Any]:
    base: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "latest",
        "session.timeout.ms": 3000,
        "heartbeat.interval.ms": 300,
    }
    if kind != 0:
        base["groupkit.control.topic"] = control
    return base


class ThreadedMember:
    """Kind 2: the synchronous ``GroupConsumer`` polled and committed on its own thread, the
    loop only ticking (and reading how many partitions the thread last saw owned). It shows
    what groupkit's own threads cost the loop, without the asyncio wrapper."""

    def __init__(self, cfg: dict[str, Any], stats: dict[str, int]) -> None:
        self._cfg, self._stats = cfg, stats
        self._stop = threading.Event()
        self._owned = 0
        self._thread: threading.Thread | None = None

    async def subscribe(self, topics: list[str]) -> None:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(topics, ready), daemon=True)
        self._thread.start()
        await asyncio.to_thread(ready.wait)

    def _run(self, topics: list[str], ready: threading.Event) -> None:
        c = GroupConsumer(self._cfg)
        c.subscribe(topics)
        ready.set()
        last_commit = time.monotonic()
        while not self._stop.is_set():
            self._stats["records"] += len(c.consume(100, 0.1))
            self._stats["calls"] += 1
            self._owned = len(c.assignment())
            if time.monotonic() - last_commit >= 0.5:
                last_commit = time.monotonic()
                with contextlib.suppress(KafkaException, GroupkitError):
                    c.commit(asynchronous=False)
                    self._stats["commits"] += 1
        c.close()

    async def assignment(self) -> list[None]:
        return [None] * self._owned

    async def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)


def other(args: argparse.Namespace) -> None:
    """The second member (``--other``): a synchronous consumer, until stdin closes."""
    cfg = json.loads(args.other)
    kind = cfg.pop("_kind")
    topic = cfg.pop("_topic")
    c: Any = GroupConsumer(cfg) if kind != 0 else Consumer(cfg)
    c.subscribe([topic])
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    while not done.is_set():
        c.consume(100, 0.1)
    c.close()


class Ticker:
    """Wakes every 10 ms and records how late, per phase."""

    def __init__(self) -> None:
        self.phase = "steady"
        self.lags: dict[str, list[float]] = {}

    async def run(self) -> None:
        mono = time.monotonic
        while True:
            t0 = mono()
            await asyncio.sleep(TICK_S)
            self.lags.setdefault(self.phase, []).append(mono() - t0 - TICK_S)


async def run_kind(kind: int, bootstrap: str, topic: str, partitions: int,
                   hold: float) -> dict[str, Any]:  # fmt: skip
    group = f"bench-aio-lag-{uuid.uuid4().hex[:6]}"
    cfg = conf(kind, bootstrap, group, f"__gk-bench-aio-{uuid.uuid4().hex[:6]}")
    ticker = Ticker()
    ticker.phase = "baseline"  # the loop with no consumer: the machine's own noise
    tick_task = asyncio.ensure_future(ticker.run())
    await asyncio.sleep(hold)
    load_at: dict[str, float] = {"baseline": load()["load1"]}
    ticker.phase = "start"
    stats = {"records": 0, "commits": 0, "calls": 0}
    c: Any
    if kind == 0:
        c = AIOConsumer(dict(cfg))
    elif kind == 1:
        c = AIOGroupConsumer(cfg)
        await c.__aenter__()  # construction on the executor
    else:
        c = ThreadedMember(cfg, stats)

    async def owned() -> int:
        return len(await c.assignment())

    async def consume() -> None:
        last_commit = time.monotonic()
        while True:
            stats["records"] += len(await c.consume(100, 0.1))
            stats["calls"] += 1
            if time.monotonic() - last_commit >= 0.5:
                last_commit = time.monotonic()
                with contextlib.suppress(KafkaException, GroupkitError):  # nothing to commit yet
                    await c.commit(asynchronous=False)
                    stats["commits"] += 1

    async def until(cond_owned: Any, timeout: float) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if cond_owned(await owned()):
                return time.monotonic() - t0
            await asyncio.sleep(0.05)
        raise AssertionError(f"{KINDS[kind]}: timed out in phase {ticker.phase}")

    await c.subscribe([topic])
    # (kind 2 consumes on its own thread)
    consume_task = asyncio.ensure_future(consume() if kind != 2 else asyncio.sleep(0))
    took: dict[str, float] = {}
    proc = None
    try:
        await until(lambda n: n == partitions, 60)
        ticker.phase = "steady"
        await asyncio.sleep(hold)
        load_at["steady"] = load()["load1"]
        ticker.phase = "join"
        spec = json.dumps({**cfg, "_kind": kind, "_topic": topic})
        proc = subprocess.Popen([sys.executable, __file__, "--other", spec],
                                stdin=subprocess.PIPE, text=True)  # fmt: skip
        took["join"] = await until(lambda n: 0 < n < partitions, 60)
        await asyncio.sleep(hold)
        load_at["join"] = load()["load1"]
        ticker.phase = "leave"
        t0 = time.monotonic()
        assert proc.stdin is not None
        proc.stdin.close()
        await until(lambda n: n == partitions, 60)
        took["leave"] = time.monotonic() - t0
        await asyncio.sleep(hold)
        load_at["leave"] = load()["load1"]
    finally:
        consume_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consume_task
        ticker.phase = "close"
        await c.close()
        tick_task.cancel()
        if proc is not None:
            proc.wait(30)
    return {"lags": ticker.lags, "load": load_at, "took": took, **stats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 s holds")
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--hold", type=float, default=8.0, help="seconds per phase after it settles")
    ap.add_argument("--bootstrap", help="use this broker")
    ap.add_argument("--results-dir", type=Path, default=None)
    ap.add_argument("--other", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.other:
        other(args)
        return
    if args.quick:
        args.hold = 1.0
    started = begin()
    results: list[dict[str, Any]] = []
    props = broker_properties(3000, 300)
    with tempfile.TemporaryDirectory(prefix="gk-bench-aio-lag-") as tmp, \
            broker(args.bootstrap, Path(tmp) / "broker", props) as boot:  # fmt: skip
        topic = f"bench-aio-lag-{uuid.uuid4().hex[:6]}"
        create_topic(boot, topic, args.partitions)
        with Pacer(boot, topic, args.partitions, 0.01) as pacer:
            wait_for(lambda: pacer.stats().count > 0, 30, "the producer")
            for kind in range(len(KINDS)):
                results.append(asyncio.run(run_kind(kind, boot, topic, args.partitions,
                                                    args.hold)))  # fmt: skip
    rows = []
    for kind, r in enumerate(results):
        for phase in ("baseline", "start", "steady", "join", "leave", "close"):
            lags = [x * 1000 for x in r["lags"].get(phase, [])]
            rows.append([KINDS[kind], phase, len(lags), round(pct(lags, 0.5), 2),
                         round(pct(lags, 0.9), 2), round(pct(lags, 0.99), 2),
                         round(max(lags, default=float("nan")), 2),
                         r["load"].get(phase, float("nan"))])  # fmt: skip
        every = [x * 1000 for p, xs in r["lags"].items() if p != "baseline" for x in xs]
        rows.append([KINDS[kind], "all but baseline", len(every), round(pct(every, 0.5), 2),
                     round(pct(every, 0.9), 2), round(pct(every, 0.99), 2),
                     round(max(every, default=float("nan")), 2),
                     float("nan")])  # fmt: skip
    notes = [
        f"Ticker: a task sleeping {TICK_S * 1000:.0f} ms; lag = how much later than that it "
        "woke. One consumer task on the same loop: consume(100, 0.1), commit(asynchronous="
        "False) every 0.5 s; a second member (a process) joins, then leaves.",
        f"{args.partitions} partitions, one record per partition every 10 ms; session 3 s, "
        "heartbeat 300 ms for both kinds; load average (1 min) per phase in the last column.",
        *(f"{KINDS[k]}: {r['records']} records in {r['calls']} consume calls, {r['commits']} "
          "commits; rebalance took "
          f"join {r['took'].get('join', float('nan')):.2f} s, leave "
          f"{r['took'].get('leave', float('nan')):.2f} s" for k, r in enumerate(results)),
    ]  # fmt: skip
    phases = ["baseline", "start", "steady", "join", "leave"]
    series: dict[str, list[float]] = {}
    tops: dict[str, list[float]] = {}
    for kind, r in enumerate(results):
        label = KINDS[kind].split(" (")[0].replace(" on a thread", " (thread)")
        lags = [[x * 1000 for x in r["lags"].get(p, [])] for p in phases]
        series[f"{label} p50"] = [pct(xs, 0.5) for xs in lags]
        tops[f"{label} p50"] = [pct(xs, 0.99) for xs in lags]
    write_results(
        "aio_loop_lag",
        f"{args.partitions} partitions, hold {args.hold:g} s",
        [
            "consumer",
            "phase",
            "ticks",
            "lag p50 ms",
            "lag p90 ms",
            "lag p99 ms",
            "lag max ms",
            "load1",
        ],
        rows,
        started=started,
        extra={"hold_s": args.hold, "took": [r["took"] for r in results]},
        title="Event-loop lag while a member polls, rebalances and commits (same run, same loop)",
        results_dir=args.results_dir,
        notes=notes,
        chart=Chart(
            phases,
            series,
            "loop lag, ms (bar p50, whisker p99)",
            title="Event-loop lag: AIOGroupConsumer vs confluent AIOConsumer (same run)",
            errors=tops,
            log=True,
        ),
    )


if __name__ == "__main__":
    main()
