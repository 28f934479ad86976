"""One group member for the rebalance and failover benches: groupkit or native confluent-kafka.

Run as ``python -m bench._worker --kind gk|native ...``. The process builds its consumer at once
and waits for commands on stdin (``subscribe``, ``close``), so the time of an event is the time
of the call, not of a Python start-up. It appends one JSON line per fact to ``--audit``
(line-buffered, so a kill -9 loses nothing written before it), all times ``time.monotonic()``
(CLOCK_MONOTONIC, comparable across processes on one machine):

- ``{"e": "start"}`` just before the consumer is built (``--at-once`` only);
  ``{"e": "ready"}`` consumer built; ``{"e": "sub"}`` just before ``subscribe()``;
  ``{"e": "leave"}`` just before ``close()``; ``{"e": "closed"}`` after it;
- ``{"e": "assign" | "revoke" | "lost", "tps": [[topic, partition], ...]}``: written inside the
  rebalance callbacks (ownership as the application sees it, for both kinds alike; the audit
  format of groupkit.dev.harness, which reads it);
- ``{"e": "first", "tp": [topic, partition], "age": ms}``: the first record of a partition after
  it was assigned (the partition is *consuming again*), and how long ago the broker appended it;
- ``{"e": "n", "n": count, "age": ms}``: records polled since the last such fact, at most every
  50 ms (for the records/s dip), and the age of the last (how far behind the broker);
- ``{"e": "state", "leader": bool, "generation": n}`` (groupkit) when either changes;
- ``{"e": "caught", "n": records}`` (groupkit), written after ``subscribe()`` once the member
  has caught up with its control partition (``GroupConsumer()`` starts that, so usually before):
  ``n`` is ``Coordinator.stats.catch_up_replayed``, the control records it replayed to catch up.

Per-process overhead is kept low: one line per 50 ms of records, not per record; groupkit's
info logs off.
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
import time
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KTP

from groupkit.dev.harness import Audit
from groupkit.log import configure as configure_logs


def native_config(args: argparse.Namespace) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "latest",
        "auto.commit.interval.ms": 200,
        "log_level": 3,
    }
    if args.protocol == "consumer":  # KIP-848: session and heartbeat are group configs (broker)
        conf["group.protocol"] = "consumer"
    else:
        conf["group.protocol"] = "classic"
        conf["partition.assignment.strategy"] = args.protocol
        if args.session_ms:
            conf["session.timeout.ms"] = args.session_ms
            conf["heartbeat.interval.ms"] = args.heartbeat_ms
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    conf.update(rdkafka_debug())
    return conf


def rdkafka_debug() -> dict[str, Any]:
    """e.g. GK_BENCH_RDKAFKA_DEBUG=cgrp,fetch: librdkafka's own debug log, to stderr (the
    .out), for either kind of member."""
    d = os.environ.get("GK_BENCH_RDKAFKA_DEBUG")
    return {"debug": d, "log_level": 7} if d else {}


def gk_config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "latest",
        "auto.commit.interval.ms": 200,
        "session.timeout.ms": args.session_ms or 10_000,
        "heartbeat.interval.ms": args.heartbeat_ms or 1_000,
        "groupkit.rebalance.protocol": args.protocol,
        "groupkit.assignor": args.assignor,
        "groupkit.control.topic": args.control_topic,
        **({"groupkit.protocol.version": args.protocol_version} if args.protocol_version else {}),
        "log_level": 3,
        **({"group.instance.id": args.instance_id} if args.instance_id else {}),
        **rdkafka_debug(),
    }


def age_ms(msg: Any) -> float:
    """How long ago the broker appended ``msg`` (ms): the bench topic stamps records with
    their append time (``bench/_harness.create_topic``)."""
    return round(time.time() * 1000 - msg.timestamp()[1], 1)


def audit_catch_up(consumer: Any, audit: Audit) -> None:
    """Write the ``caught`` fact once the member's control loop has replayed its history."""
    c = consumer.coordinator
    if c is None or not c.wait_caught_up(120):
        return
    # how: "snapshot" (bounded) or "full" (no snapshot near the log's end: replayed whole)
    audit.write("caught", n=c.stats.catch_up_replayed, how=c.stats.catch_up)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=("gk", "native"), required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--audit", required=True)
    ap.add_argument(
        "--protocol",
        required=True,
        help="gk: eager|cooperative; native: range|cooperative-sticky|consumer",
    )
    ap.add_argument("--assignor", default="cooperative-sticky")
    ap.add_argument("--session-ms", type=int, default=0, help="0: the client's default")
    ap.add_argument("--heartbeat-ms", type=int, default=0)
    ap.add_argument("--control-topic", default="__groupkit")
    ap.add_argument(
        "--protocol-version",
        type=int,
        default=None,
        help="groupkit.protocol.version (default: groupkit's)",
    )
    ap.add_argument("--timeout", type=float, default=0.1, help="poll() timeout, seconds")
    ap.add_argument("--instance-id", default=None, help="group.instance.id: a static member")
    ap.add_argument("--at-once", action="store_true",
                    help="subscribe as soon as the consumer is built, as a new worker does, "
                         "instead of waiting for the command")  # fmt: skip
    args = ap.parse_args()
    # GK_BENCH_LOGS: JSON lines with ms timestamps, to trace each hop; else warnings only.
    bench_logs = bool(os.environ.get("GK_BENCH_LOGS"))
    configure_logs(json=bench_logs, level="debug" if bench_logs else "warning")
    audit = Audit(args.audit)
    waiting: set[int] = set()  # assigned partitions not yet seen consuming

    def on_assign(_c: Any, parts: list[KTP]) -> None:
        waiting.update(p.partition for p in parts)
        audit.ownership("assign", [(p.topic, p.partition) for p in parts])

    def on_revoke(_c: Any, parts: list[KTP]) -> None:
        waiting.difference_update(p.partition for p in parts)
        audit.ownership("revoke", [(p.topic, p.partition) for p in parts])

    def on_lost(_c: Any, parts: list[KTP]) -> None:
        waiting.difference_update(p.partition for p in parts)
        audit.ownership("lost", [(p.topic, p.partition) for p in parts])

    commands: queue.Queue[str] = queue.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            commands.put(line.strip())
        commands.put("close")  # the harness went away

    threading.Thread(target=read_stdin, daemon=True).start()
    consumer: Any
    if args.at_once:
        audit.write("start")
    if args.kind == "gk":
        from groupkit import GroupConsumer

        consumer = GroupConsumer(gk_config(args))
    else:
        consumer = Consumer(native_config(args))
    audit.write("ready")
    # Idle until told to join: no client activity beyond what construction started.
    cmd = "subscribe" if args.at_once else commands.get()
    if cmd != "subscribe":
        consumer.close()
        return
    audit.write("sub")
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    if args.kind == "gk":
        threading.Thread(target=audit_catch_up, args=(consumer, audit), daemon=True).start()
    lead: tuple[Any, ...] = ()
    count, flushed, checked = 0, time.monotonic(), 0.0
    while True:
        try:
            cmd = commands.get_nowait()
        except queue.Empty:
            cmd = ""
        if cmd == "close":
            audit.write("leave")
            consumer.close()
            audit.write("closed")
            return
        # poll(), one record a call: a record is timed when the application gets it.
        msg = consumer.poll(args.timeout)
        t = time.monotonic()
        if msg is not None and msg.error() is None:
            count += 1
            if waiting:
                p = msg.partition()
                if p in waiting:
                    waiting.discard(p)
                    audit.write("first", tp=[args.topic, p], t=t, age=age_ms(msg))
        if count and t - flushed >= 0.05:
            audit.write("n", n=count, t=t, age=age_ms(msg) if msg is not None else None)
            count, flushed = 0, t
        if args.kind == "gk" and t - checked >= 0.02:
            checked = t
            state = (consumer.is_leader, consumer.generation)
            if state != lead:
                lead = state
                audit.write("state", leader=state[0], generation=state[1])


if __name__ == "__main__":
    main()
