"""A GroupConsumer worker process for the multi-process tests.

Run as ``python -m tests.group_worker --bootstrap B --group G --topics t1,t2 --audit FILE``.
It appends one JSON line per fact to ``FILE`` (flushed at once, so a kill -9 loses nothing
written before it):

- ``{"e": "assign" | "revoke" | "lost", "tps": [[topic, partition], ...], "t": monotonic}``:
  ownership, logged inside the callbacks, i.e. while the poll thread does nothing else (the
  audit format of groupkit.dev.harness, which reads it);
- ``{"e": "msg", "tp": [...], "o": offset, "ts": create_time_ms, "t": ...}``: a processed
  record (``ts`` is the producer's timestamp, epoch ms);
- ``{"e": "state", "member": id, "generation": n, "leader": bool, "t": ...}`` when it changes;
- ``{"e": "commit_refused" | "committed", "tp": [...], "o": offset, "error": ...}``: the outcome
  of the ``commit`` command, per partition; ``{"e": "closed"}``;
- ``{"e": "failed", "error": ...}`` when ``consume`` raised (the control loop failed): the worker
  closes and exits with status 3, so the harness sees it dead instead of silently idle;
- with ``GK_LOG_LEVEL=debug``, groupkit's debug events too (the hop events) in its ``.out`` file;
- with ``GK_TRACE_BATCHES=1``: ``{"e": "batch", "n": ..., "age_ms": ..., "fence_until": ...}``
  before each batch's records (the member's session age as the batch was handed out).

groupkit's own log events go to stdout (the harness's ``NAME.out``) as JSON lines.

Commands on stdin, one per line: ``subscribe t1,t2``, ``close`` (``close-leave``,
``close-stay``: ``close(leave=True)``, ``close(leave=False)``), and ``commit``: commit,
synchronously and one partition at a time, the offset after the last record processed of every
partition this worker ever processed (a fenced member's commits must all be refused).
``time.monotonic`` is the machine's CLOCK_MONOTONIC, comparable across processes here.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from confluent_kafka import KafkaException, Message
from confluent_kafka import TopicPartition as KTP

from groupkit import GroupConsumer
from groupkit.dev.harness import Audit
from groupkit.errors import FencedError, GroupkitError
from groupkit.log import configure as configure_logs
from groupkit.protocol import GroupState
from groupkit.runtime.hooks import GroupObserver


class SlowControl(GroupObserver):
    """Sleeps in every control-loop turn, so this member sees the log late."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def turn(self, state: GroupState, member_id: str, now_ms: int) -> None:
        time.sleep(self.seconds)  # the slowness under test


def parser() -> argparse.ArgumentParser:
    """The arguments the multi-process tests pass (``tests.groupharness.WorkerGroup``); the
    asyncio worker takes the same."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topics", required=True)
    ap.add_argument("--audit", required=True)
    ap.add_argument("--protocol", default="cooperative")
    ap.add_argument("--assignor", default="range")
    ap.add_argument("--session-timeout-ms", type=int, default=3000)
    ap.add_argument("--heartbeat-ms", type=int, default=300)
    ap.add_argument("--control-topic", default="__groupkit")
    ap.add_argument("--reset", default="earliest")
    ap.add_argument("--extra", default="{}", help="JSON of extra config")
    ap.add_argument("--client-id", default=None, help="client.id (a fault proxy cuts by it)")
    ap.add_argument(
        "--slow-control-ms",
        type=int,
        default=0,
        help="delay every control-loop turn: a member that reads its log slowly",
    )
    return ap


def consumer_config(args: argparse.Namespace) -> dict[str, Any]:
    """The member's configuration from its arguments (both workers)."""
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": args.reset,
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": args.heartbeat_ms,
        "auto.commit.interval.ms": 200,
        "groupkit.rebalance.protocol": args.protocol,
        "groupkit.assignor": args.assignor,
        "groupkit.control.topic": args.control_topic,
        **json.loads(args.extra),
    }
    if args.client_id:
        conf["client.id"] = args.client_id
    return conf


def audit_records(
    audit: Audit, batch: list[Message], last_offset: dict[tuple[str, int], int]
) -> None:
    """Audit each record of ``batch`` (or its error) and note the last offset processed of
    each partition (what the ``commit`` command commits)."""
    for msg in batch:
        if msg.error() is not None:
            audit.write("error", error=str(msg.error()))
            continue
        audit.write("msg", tp=[msg.topic(), msg.partition()], o=msg.offset(),
                    ts=msg.timestamp()[1])  # fmt: skip
        last_offset[(msg.topic() or "", msg.partition() or 0)] = msg.offset() or 0


def main() -> None:
    args = parser().parse_args()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # WorkerGroup.dump_stacks
    # groupkit's own events (JSON lines with UTC timestamps) go to the worker's .out file;
    # GK_LOG_LEVEL=debug adds the hop events (diagnosis).
    configure_logs(json=True, level=os.environ.get("GK_LOG_LEVEL", "info"), stream=sys.stdout)
    audit = Audit(args.audit)
    # GK_TRACE_BATCHES=1: audit each batch with the member's session age (diagnosis).
    trace_batches = os.environ.get("GK_TRACE_BATCHES") == "1"
    conf = consumer_config(args)
    if os.environ.get("GK_DATA_DEBUG"):  # e.g. "cgrp,fetch": librdkafka debug of the data consumer
        conf["debug"] = os.environ["GK_DATA_DEBUG"]

    def on_assign(_c: GroupConsumer, parts: list[KTP]) -> None:
        audit.ownership("assign", [(p.topic, p.partition) for p in parts])

    def on_revoke(_c: GroupConsumer, parts: list[KTP]) -> None:
        audit.ownership("revoke", [(p.topic, p.partition) for p in parts])

    def on_lost(_c: GroupConsumer, parts: list[KTP]) -> None:
        audit.ownership("lost", [(p.topic, p.partition) for p in parts])

    commands: list[str] = []

    def read_stdin() -> None:
        for line in sys.stdin:
            commands.append(line.strip())

    threading.Thread(target=read_stdin, daemon=True).start()
    observers = [SlowControl(args.slow_control_ms / 1000)] if args.slow_control_ms else []
    consumer = GroupConsumer(conf, observers=observers)
    consumer.subscribe(args.topics.split(","), on_assign=on_assign, on_revoke=on_revoke,
                       on_lost=on_lost)  # fmt: skip
    audit.write("started", member=consumer.member_id)
    last_state: tuple[Any, ...] = ()
    last_offset: dict[tuple[str, int], int] = {}
    while True:
        while commands:
            cmd = commands.pop(0)
            if cmd in ("close", "close-leave", "close-stay"):
                # close-leave / close-stay: close(leave=True / False) (static members)
                consumer.close(leave={"close": None, "close-leave": True,
                                      "close-stay": False}[cmd])  # fmt: skip
                audit.write("closed")
                return
            if cmd == "commit":
                for (topic, part), off in sorted(last_offset.items()):
                    try:
                        consumer.commit(offsets=[KTP(topic, part, off + 1)], asynchronous=False)
                        audit.write("committed", tp=[topic, part], o=off + 1)
                    except (GroupkitError, KafkaException) as e:
                        audit.write("commit_refused", tp=[topic, part], o=off + 1,
                                    error=str(e), fenced=isinstance(e, FencedError))  # fmt: skip
                audit.write("commit_done")
            if cmd.startswith("subscribe "):
                consumer.subscribe(cmd.split(" ", 1)[1].split(","), on_assign=on_assign,
                                   on_revoke=on_revoke, on_lost=on_lost)  # fmt: skip
        try:
            batch = consumer.consume(100, 0.05)
        except GroupkitError as e:  # the control loop failed: say so, release, exit
            audit.write("failed", error=str(e))
            with contextlib.suppress(GroupkitError):
                consumer.close()
            sys.exit(3)
        if batch and trace_batches:
            c = consumer.coordinator
            age = None
            if c is not None:
                with c.lock:
                    age = c.member.session_age_ms(time.monotonic_ns() // 1_000_000)
            audit.write("batch", n=len(batch), age_ms=age,
                        fence_until=consumer._poll_loop.fence_until)  # fmt: skip
        audit_records(audit, batch, last_offset)
        state = (consumer.member_id, consumer.generation, consumer.is_leader)
        if state != last_state:
            last_state = state
            audit.write("state", member=state[0], generation=state[1], leader=state[2])


if __name__ == "__main__":
    main()
