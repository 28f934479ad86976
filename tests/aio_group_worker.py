"""The asyncio flavour of ``tests.group_worker``: an :class:`~groupkit.aio.AIOGroupConsumer`
member, with the same arguments (those the multi-process tests use), stdin commands
(``close``, ``commit``, ``subscribe t1,t2``) and audit format (groupkit.dev.harness), so
``WorkerGroup(..., worker="tests.aio_group_worker")`` audits it like the synchronous one.

``on_assign`` and ``on_lost`` are coroutine functions and ``on_revoke`` a plain one: both kinds
run on the event loop. ``on_assign`` awaits ``assignment()`` (a call back into the consumer
during the hand-off) and audits ``assign_not_owned`` if it lacks what was just assigned. Each
callback audits that it runs on the loop's thread (``{"e": "cb_thread", "on_loop": bool}`` once
per kind), and the loop awaits ``consume`` between commands, as an asyncio service would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import threading
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as KTP

from groupkit.aio import AIOGroupConsumer
from groupkit.dev.harness import Audit
from groupkit.errors import FencedError, GroupkitError
from groupkit.log import configure as configure_logs
from tests.group_worker import audit_records, consumer_config, parser


async def run(args: argparse.Namespace, audit: Audit) -> None:
    conf = consumer_config(args)
    loop_thread = threading.get_ident()
    seen_kinds: set[str] = set()

    def where(kind: str) -> None:
        if kind not in seen_kinds:
            seen_kinds.add(kind)
            audit.write("cb_thread", kind=kind, on_loop=threading.get_ident() == loop_thread)

    async def on_assign(c: AIOGroupConsumer, parts: list[KTP]) -> None:
        where("assign")
        # A call back into the consumer, served by its poll thread while this runs.
        owned = {(p.topic, p.partition) for p in await c.assignment()}
        tps = [(p.topic, p.partition) for p in parts]
        if not owned >= set(tps):
            audit.write("assign_not_owned", tps=sorted(set(tps) - owned))
        audit.ownership("assign", tps)

    def on_revoke(_c: AIOGroupConsumer, parts: list[KTP]) -> None:
        where("revoke")
        audit.ownership("revoke", [(p.topic, p.partition) for p in parts])

    async def on_lost(_c: AIOGroupConsumer, parts: list[KTP]) -> None:
        where("lost")
        audit.ownership("lost", [(p.topic, p.partition) for p in parts])

    commands: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def read_stdin() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(commands.put_nowait, line.strip())

    threading.Thread(target=read_stdin, daemon=True).start()
    consumer = AIOGroupConsumer(conf)
    async with consumer:
        await consumer.subscribe(args.topics.split(","), on_assign=on_assign,
                                 on_revoke=on_revoke, on_lost=on_lost)  # fmt: skip
        audit.write("started", member=consumer.member_id)
        last_state: tuple[Any, ...] = ()
        last_offset: dict[tuple[str, int], int] = {}
        while True:
            while not commands.empty():
                cmd = commands.get_nowait()
                if cmd == "close":
                    await consumer.close()
                    audit.write("closed")
                    return
                if cmd == "commit":
                    for (topic, part), off in sorted(last_offset.items()):
                        try:
                            await consumer.commit(offsets=[KTP(topic, part, off + 1)],
                                                  asynchronous=False)  # fmt: skip
                            audit.write("committed", tp=[topic, part], o=off + 1)
                        except (GroupkitError, KafkaException) as e:
                            fenced = isinstance(e, FencedError)
                            audit.write("commit_refused", tp=[topic, part], o=off + 1,
                                        error=str(e), fenced=fenced)  # fmt: skip
                    audit.write("commit_done")
                if cmd.startswith("subscribe "):
                    await consumer.subscribe(cmd.split(" ", 1)[1].split(","), on_assign=on_assign,
                                             on_revoke=on_revoke, on_lost=on_lost)  # fmt: skip
            try:
                batch = await consumer.consume(100, 0.05)
            except GroupkitError as e:  # the control loop failed: say so, release, exit
                audit.write("failed", error=str(e))
                with contextlib.suppress(GroupkitError):
                    await consumer.close()
                sys.exit(3)
            audit_records(audit, batch, last_offset)
            state = (consumer.member_id, await consumer.generation(), await consumer.is_leader())
            if state != last_state:
                last_state = state
                audit.write("state", member=state[0], generation=state[1], leader=state[2])


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    if args.slow_control_ms:
        ap.error("--slow-control-ms is only supported by tests.group_worker")
    configure_logs(json=True, level="info", stream=sys.stdout)
    asyncio.run(run(args, Audit(args.audit)))


if __name__ == "__main__":
    main()
