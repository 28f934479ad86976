#!/usr/bin/env python
"""Exactly-once read-process-write with groupkit: upper-case every record of one topic into another.

    python examples/exactly_once.py --bootstrap localhost:9092 --group upper \\
        --input words --output WORDS

Run several: the group shares the input's partitions. Each partition's batch is one transaction
holding its output records and the input offset after them, produced through that partition's
own transactional producer (``groupkit.eos``): when a partition moves, its new owner's
``init_transactions()`` fences the old one at the broker, so a crashed or frozen member can
never commit a batch twice. Read the output with ``isolation.level=read_committed``.
"""

from __future__ import annotations

import argparse
import time

from groupkit import GroupConsumer
from groupkit.eos import TransactionalProcessor, by_partition
from groupkit.errors import FencedError


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", default="localhost:9092")
    ap.add_argument("--group", default="upper")
    ap.add_argument("--input", default="words")
    ap.add_argument("--output", default="WORDS")
    ap.add_argument(
        "--stop-after-idle",
        type=float,
        default=None,
        metavar="SECONDS",
        help="exit after owning partitions this long without a record (default: run until Ctrl-C)",
    )
    args = ap.parse_args()

    consumer = GroupConsumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            # The offsets are committed in the transactions, and only there.
            "enable.auto.commit": False,
            "groupkit.offsets.keepalive.interval.ms": 0,
        }
    )
    eos = TransactionalProcessor(consumer, {"bootstrap.servers": args.bootstrap})
    consumer.subscribe([args.input])
    last_record = time.monotonic()
    try:
        while args.stop_after_idle is None or time.monotonic() - last_record < args.stop_after_idle:
            batches = by_partition(consumer.consume(500, timeout=1.0))
            if batches or not consumer.assignment():
                last_record = time.monotonic()
            for batch in batches:  # one transaction per partition's batch
                try:
                    with eos.transaction(batch) as producer:
                        for msg in batch:
                            producer.produce(
                                args.output, key=msg.key(), value=(msg.value() or b"").upper()
                            )
                except FencedError:
                    pass  # the partition has a newer owner: it will redo what we did not commit
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()  # revokes: each partition's producer closes before it is released
        eos.close()


if __name__ == "__main__":
    main()
