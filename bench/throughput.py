"""Benchmark: records/s through ``GroupConsumer`` against a plain ``Consumer`` with ``assign()``.

The same records (``--records`` of 100 bytes over ``--partitions`` partitions, produced once),
the same settings (auto-commit on, ``auto.offset.reset=earliest``, a fresh ``group.id`` per run),
in the same process, runs alternating between the two. Two ways of reading:

- ``poll``: one record per ``poll()`` call (per-call overhead dominates);
- ``consume``: ``consume(500, 1.0)`` batches.

Timed from the first record to the last, so joining and connecting are not counted; CPU
seconds of the process over the same stretch give the CPU cost per record.

    python bench/throughput.py            # full
    python bench/throughput.py --quick    # seconds; for CI
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as KTP

from bench._common import Chart, begin, median, versions_note, write_results
from bench._harness import broker, create_topic, versions
from groupkit import GroupConsumer
from groupkit.log import configure as configure_logs

MODES = ("poll", "consume")
WHO = {
    "plain": "plain Consumer.assign()",
    "groupkit": "GroupConsumer",
}


def produce(boot: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": boot, "linger.ms": 50, "batch.num.messages": 10000,
                  "compression.type": "none"})  # fmt: skip
    value = b"v" * 100
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, key=str(i % 1024).encode())
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    if p.flush(60):
        raise RuntimeError("records not delivered")


#: settings both consumers get on top of conf()'s (--fetch-queue-backoff-ms)
EXTRA: dict[str, Any] = {}


def conf(boot: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": boot,
        "group.id": f"bench-tp-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        **EXTRA,
    }


def drain(c: Any, n: int, mode: str) -> tuple[float, float]:
    """Read ``n`` records; (seconds, CPU seconds) from the first record to the last."""
    got = 0
    t0 = c0 = 0.0
    deadline = time.monotonic() + 300
    while got < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"read {got} of {n} records")
        if mode == "poll":
            m = c.poll(1.0)
            batch = [] if m is None else [m]
        else:
            batch = c.consume(500, 1.0)
        for m in batch:
            if m.error() is not None:
                continue
            if got == 0:
                t0, c0 = time.perf_counter(), time.process_time()
            got += 1
    return time.perf_counter() - t0, time.process_time() - c0


def run_plain(boot: str, topic: str, partitions: int, n: int, mode: str) -> tuple[float, float]:
    c = Consumer(conf(boot))
    c.assign([KTP(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    try:
        return drain(c, n, mode)
    finally:
        c.close()


def run_gk(boot: str, topic: str, n: int, mode: str) -> tuple[float, float]:
    c = GroupConsumer({**conf(boot), "groupkit.control.topic": "__gk_bench_throughput",
                       "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000})  # fmt: skip
    c.subscribe([topic])
    try:
        return drain(c, n, mode)
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--bootstrap")
    ap.add_argument("--results-dir", type=Path, default=None)
    ap.add_argument(
        "--fetch-queue-backoff-ms",
        type=int,
        default=None,
        help="librdkafka fetch.queue.backoff.ms for both consumers (default: "
        "librdkafka's 1000: once a consumer's queue is full its next fetch waits "
        "up to 1 s, which often dominates this bench; 10 measures the consumers)",
    )
    args = ap.parse_args()
    if args.quick:
        args.records, args.partitions, args.runs = 20_000, 2, 1
    if args.fetch_queue_backoff_ms is not None:
        EXTRA["fetch.queue.backoff.ms"] = args.fetch_queue_backoff_ms
    configure_logs(json=False, level="warning")
    started = begin()
    t_start = time.monotonic()
    res: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="gk-bench-tp-") as tmp, \
            broker(args.bootstrap, Path(tmp) / "broker", {}) as boot:  # fmt: skip
        topic = f"bench-throughput-{uuid.uuid4().hex[:6]}"
        create_topic(boot, topic, args.partitions)
        produce(boot, topic, args.records)
        for r in range(args.runs):
            for mode in MODES:
                for who in WHO:
                    if who == "plain":
                        out = run_plain(boot, topic, args.partitions, args.records, mode)
                    else:
                        out = run_gk(boot, topic, args.records, mode)
                    res.setdefault((who, mode), []).append(out)
                    print(f"  run {r + 1}/{args.runs} {mode:8s} {who:15s} "
                          f"{args.records / out[0]:>10,.0f} records/s", flush=True)  # fmt: skip
    report(res, args, started, time.monotonic() - t_start)


def report(res: dict[tuple[str, str], list[tuple[float, float]]], args: argparse.Namespace,
           started: dict[str, Any], seconds: float,
           vers: dict[str, str] | None = None) -> None:  # fmt: skip
    """Write the run's entry (``res``: (seconds, CPU seconds) per run, by (who, mode);
    ``vers``: the versions, else this checkout's)."""
    vers = vers or versions()
    backoff = getattr(args, "fetch_queue_backoff_ms", None)
    rows, rates, cpu_plain = [], {}, {}
    for mode in MODES:
        for who in WHO:
            runs = res[(who, mode)]
            rate = median([args.records / s for s, _ in runs])
            cpu_us = median([c / args.records * 1e6 for _, c in runs])
            rates[(who, mode)] = rate
            cpu_plain.setdefault(mode, cpu_us)
            ratio = rate / rates[("plain", mode)]
            rows.append([mode, WHO[who], round(rate), round(cpu_us, 2), round(ratio, 3),
                         round(cpu_us / cpu_plain[mode], 2)])  # fmt: skip
    targets = {f"ratio_{mode}": round(rates[("groupkit", mode)] / rates[("plain", mode)], 3)
               for mode in MODES}  # fmt: skip
    targets["ratio_ge_0.95"] = all(v >= 0.95 for v in targets.values())
    notes = [
        f"{args.records:,} records of 100 bytes, {args.partitions} partitions, {args.runs} runs "
        "each (median), alternating, one process; timed from the first record to the last; "
        f"fetch.queue.backoff.ms {backoff if backoff is not None else 'default (1000)'}.",
        f"Targets: {targets}",
        # With librdkafka's default fetch.queue.backoff.ms a run often stalls ~1 s (a full
        # queue postpones the next fetch), so runs fall into two rates for either consumer and
        # a median can mix them: each run's ratio to the plain run just before it is shown.
        "Per-run ratios to the plain run before it: "
        + "; ".join(
            f"{mode} "
            + ", ".join(
                f"{p / g:.2f}"
                for (p, _), (g, _) in zip(
                    res[("plain", mode)], res[("groupkit", mode)], strict=True
                )
            )
            for mode in MODES
        )
        + ".",
        versions_note(vers, seconds),
    ]
    label = f"{args.partitions} partitions, {args.records:,} records" + (
        f", fetch.queue.backoff.ms {backoff}" if backoff is not None else ""
    )
    chart = Chart(list(MODES), {lab: [rates[(who, m)] for m in MODES] for who, lab in WHO.items()},
                  "records/s (median)", title="Throughput, one consumer")  # fmt: skip
    write_results(
        "throughput", label, ["read", "consumer", "records/s", "CPU µs/record", "ratio vs plain",
                              "CPU vs plain"], rows, started=started,
        title="Throughput: GroupConsumer vs plain Consumer with assign() (same data, same run)",
        results_dir=args.results_dir, notes=notes, chart=chart,
        extra={"runs": {f"{w} {m}": v for (w, m), v in res.items()}, "targets": targets,
               "versions": vers, "seconds": seconds,
               "args": {k: v for k, v in vars(args).items() if k != "results_dir"}},
    )  # fmt: skip


if __name__ == "__main__":
    main()
