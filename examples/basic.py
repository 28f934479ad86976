"""A plain groupkit worker: subscribe, poll, commit, close cleanly on Ctrl-C or SIGTERM.

It prints one line per record (``record <topic>-<partition>@<offset> <value>``) and what each
rebalance moves (``assigned: ...``, ``revoked: ...``). Offsets are committed after each record
is handled (at-least-once), and synchronously in ``on_revoke``, so the next owner of a revoked
partition starts after the last record handled here.

Run it against the local broker (``groupkit broker start`` first, see README.md), e.g. several
at once with the same ``--group`` to watch partitions move between them::

    python examples/basic.py --topic orders --group orders-workers
"""

from __future__ import annotations

import argparse
import signal

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from groupkit import GroupConsumer


def names(partitions: list[TopicPartition]) -> str:
    return " ".join(f"{p.topic}-{p.partition}" for p in partitions)


def on_assign(consumer: GroupConsumer, partitions: list[TopicPartition]) -> None:
    print(f"assigned: {names(partitions)}", flush=True)


def on_revoke(consumer: GroupConsumer, partitions: list[TopicPartition]) -> None:
    # Runs before the partitions are released: commit what was handled so far.
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as e:
        if e.args[0].code() != KafkaError._NO_OFFSET:  # _NO_OFFSET: all committed already
            raise
    print(f"revoked: {names(partitions)}", flush=True)


def on_lost(consumer: GroupConsumer, partitions: list[TopicPartition]) -> None:
    # Lost (the session lapsed): they may already be someone else's, so no commit.
    print(f"lost: {names(partitions)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--group", default="groupkit-example")
    parser.add_argument("--topic", default="groupkit-example")
    parser.add_argument("--max-records", type=int, default=0, help="stop after N (0: never)")
    args = parser.parse_args()

    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    consumer = GroupConsumer({
        "bootstrap.servers": args.bootstrap_servers,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,  # we commit ourselves, after handling each record
    })  # fmt: skip
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    handled = 0
    with consumer:  # closing leaves the group: revoke (on_revoke commits), then goodbye
        while not stopping and (args.max_records == 0 or handled < args.max_records):
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                print(f"error: {msg.error()}", flush=True)
                continue
            value = msg.value().decode() if msg.value() is not None else None
            print(f"record {msg.topic()}-{msg.partition()}@{msg.offset()} {value}", flush=True)
            handled += 1
            consumer.commit(message=msg, asynchronous=True)
    print(f"done: {handled} records", flush=True)


if __name__ == "__main__":
    main()
