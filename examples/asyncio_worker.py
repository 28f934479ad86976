"""The basic worker for asyncio: ``AIOGroupConsumer`` with ``async with``, an awaited poll and
coroutine callbacks.

It prints one line per record (``record <topic>-<partition>@<offset> <value>``) and what each
rebalance moves (``assigned: ...``, ``revoked: ...``). Every call into the consumer runs on an
executor thread, so the event loop stays free for the rest of the application; the callbacks
run on the loop and may await the consumer (``on_revoke`` commits before the partitions are
released). Ctrl-C or SIGTERM stops it cleanly: ``async with`` leaves the group.

Run it against the local broker (``groupkit broker start`` first, see README.md)::

    python examples/asyncio_worker.py --topic orders --group orders-workers
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from groupkit.aio import AIOGroupConsumer


def names(partitions: list[TopicPartition]) -> str:
    return " ".join(f"{p.topic}-{p.partition}" for p in partitions)


async def on_assign(consumer: AIOGroupConsumer, partitions: list[TopicPartition]) -> None:
    print(f"assigned: {names(partitions)}", flush=True)


async def on_revoke(consumer: AIOGroupConsumer, partitions: list[TopicPartition]) -> None:
    try:
        await consumer.commit(asynchronous=False)  # lands before the partitions are released
    except KafkaException as e:
        if e.args[0].code() != KafkaError._NO_OFFSET:  # _NO_OFFSET: all committed already
            raise
    print(f"revoked: {names(partitions)}", flush=True)


async def on_lost(consumer: AIOGroupConsumer, partitions: list[TopicPartition]) -> None:
    print(f"lost: {names(partitions)}", flush=True)  # maybe someone else's already: no commit


async def run(args: argparse.Namespace) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)

    config = {
        "bootstrap.servers": args.bootstrap_servers,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,  # we commit ourselves, after handling each record
    }
    handled = 0
    async with AIOGroupConsumer(config) as consumer:
        await consumer.subscribe(
            [args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost
        )
        while not stopping.is_set() and (args.max_records == 0 or handled < args.max_records):
            msg = await consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                print(f"error: {msg.error()}", flush=True)
                continue
            value = msg.value().decode() if msg.value() is not None else None
            print(f"record {msg.topic()}-{msg.partition()}@{msg.offset()} {value}", flush=True)
            handled += 1
            await consumer.commit(message=msg, asynchronous=True)
    print(f"done: {handled} records", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--group", default="groupkit-example")
    parser.add_argument("--topic", default="groupkit-example")
    parser.add_argument("--max-records", type=int, default=0, help="stop after N (0: never)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
