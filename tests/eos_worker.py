"""An exactly-once worker process for tests/test_exactly_once.py (groupkit.eos).

Run as ``python -m tests.eos_worker --bootstrap B --group G --input IN --output OUT --audit F``.
It copies every record of ``IN`` to ``OUT`` (same key; the value names the input partition,
offset and the record's own value) one transaction per partition batch, and appends JSON
lines to ``F`` (the audit format of groupkit.dev.harness: ``assign``/``revoke``/``lost``,
``state``, ``closed``) plus:

- ``{"e": "txn", "tp": [...], "first": o, "n": count}`` once a transaction has produced its
  batch, just before it holds for ``--hold-ms`` (so a SIGSTOP or kill -9 of the test lands in
  an open transaction) and commits;
- ``{"e": "committed", "tp": [...], "next": o}``, ``{"e": "fenced", "tp": [...]}`` (the broker
  refused this producer: a newer owner exists) or ``{"e": "aborted", "tp": [...], "error": ...}``.

``--prefix`` is the ``transactional.id`` prefix: a unique one per process turns the broker's
fencing off (the control experiment: each member's producers have their own ids).
Commands on stdin: ``close``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from confluent_kafka import KafkaException

from groupkit import GroupConsumer
from groupkit.dev.harness import Audit
from groupkit.eos import TransactionalProcessor, by_partition
from groupkit.errors import FencedError, GroupkitError


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--audit", required=True)
    ap.add_argument("--control-topic", default="__groupkit")
    ap.add_argument("--session-timeout-ms", type=int, default=3000)
    ap.add_argument("--hold-ms", type=int, default=100)
    ap.add_argument("--prefix", default="groupkit")
    ap.add_argument("--protocol", default="cooperative")
    args = ap.parse_args()
    audit = Audit(args.audit)
    consumer = GroupConsumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": max(100, args.session_timeout_ms // 10),
        "groupkit.control.topic": args.control_topic,
        "groupkit.rebalance.protocol": args.protocol,
        "enable.auto.commit": False,
        "groupkit.offsets.keepalive.interval.ms": 0,
    })  # fmt: skip
    eos = TransactionalProcessor(
        consumer,
        {"bootstrap.servers": args.bootstrap, "transaction.timeout.ms": 60_000},
        transactional_id_prefix=args.prefix,
    )

    def ownership(e: str) -> object:
        return lambda _c, parts: audit.ownership(e, [(p.topic, p.partition) for p in parts])

    commands: list[str] = []
    threading.Thread(target=lambda: commands.extend(ln.strip() for ln in sys.stdin),
                     daemon=True).start()  # fmt: skip
    consumer.subscribe([args.input], on_assign=ownership("assign"),  # type: ignore[arg-type]
                       on_revoke=ownership("revoke"), on_lost=ownership("lost"))  # type: ignore[arg-type]  # fmt: skip
    last_state: tuple[object, ...] = ()
    while "close" not in commands:
        try:
            msgs = consumer.consume(200, 0.1)
        except GroupkitError as e:
            audit.write("failed", error=str(e))
            sys.exit(3)
        for batch in by_partition(msgs):
            tp = [batch[0].topic(), batch[0].partition()]
            try:
                with eos.transaction(batch) as producer:
                    for m in batch:
                        value = {"tp": tp, "o": m.offset(), "v": (m.value() or b"").decode()}
                        producer.produce(args.output, key=m.key(), value=json.dumps(value))
                    audit.write("txn", tp=tp, first=batch[0].offset(), n=len(batch))
                    time.sleep(args.hold_ms / 1000)  # open a while: the faults land inside
                audit.write("committed", tp=tp, next=(batch[-1].offset() or 0) + 1)
            except FencedError as e:
                audit.write("fenced", tp=tp, error=str(e))
            except KafkaException as e:
                audit.write("aborted", tp=tp, error=str(e))
        state = (consumer.member_id, consumer.generation, consumer.is_leader)
        if state != last_state:
            last_state = state
            audit.write("state", member=state[0], generation=state[1], leader=state[2])
    consumer.close()
    eos.close()
    audit.write("closed")


if __name__ == "__main__":
    main()
