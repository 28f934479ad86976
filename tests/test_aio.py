"""``groupkit.aio.AIOGroupConsumer`` on the real broker.

Focused tests (one event loop each, ``asyncio.run``): the loop keeps running while ``poll``
waits, callbacks (coroutine or plain) run on the loop and may call the consumer back, ``async
with`` closes, the assignment is refused. Then a group of three asyncio members as separate
processes (tests/aio_group_worker.py) with joins, a clean leave and a ``kill -9``, and a zombie
frozen past its session, audited like the synchronous consumer's group
(tests/test_group_consumer.py).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.aio import AIOConsumer

from groupkit import GroupConsumer
from groupkit.aio import AIOGroupConsumer
from groupkit.dev.harness import TP, LoadProducer, wait_for
from groupkit.errors import ConfigError, ConsumerClosedError
from tests.chaos import late_records
from tests.groupharness import WorkerGroup, check_at_least_once, churn, freeze_and_wake


def test_every_method_of_group_consumer_is_awaitable_here() -> None:
    """What ``GroupConsumer`` can do, ``AIOGroupConsumer`` can await; and of confluent's
    ``AIOConsumer`` methods, those ``GroupConsumer`` has. A method added to ``GroupConsumer``
    fails this until its one line (``name = _delegate("name")``) is added."""

    def awaitable(name: str) -> bool:
        return inspect.iscoroutinefunction(getattr(AIOGroupConsumer, name, None))

    sync = {n for n, v in vars(GroupConsumer).items()
            if not n.startswith("_") and inspect.isfunction(v)}  # fmt: skip
    assert sorted(n for n in sync if not awaitable(n)) == []
    confluent = {n for n, v in vars(AIOConsumer).items()
                 if not n.startswith("_") and inspect.iscoroutinefunction(v)}  # fmt: skip
    assert {"poll", "consume", "commit", "close", "subscribe", "assignment"} <= confluent
    assert sorted(n for n in confluent if hasattr(GroupConsumer, n) and not awaitable(n)) == []
    # assign & co. are refused, awaitably, whether or not GroupConsumer has them yet.
    for n in ("assign", "unassign", "incremental_assign", "incremental_unassign"):
        assert inspect.iscoroutinefunction(getattr(AIOGroupConsumer, n)), n


def _produce(bootstrap: str, topic: str, n: int, partitions: int = 1) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


class Ticker:
    """A task that wakes every 10 ms and counts its wake-ups (the loop's heartbeat)."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.ticks += 1

    def __enter__(self) -> Ticker:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


def test_poll_waits_off_the_loop(conf: dict[str, Any], topic_factory: Callable[..., str]) -> None:
    """While ``poll(1.0)`` waits for records that never come, the loop keeps running."""
    topic = topic_factory(partitions=1)

    async def main() -> None:
        async with AIOGroupConsumer(conf) as c:
            assigned = asyncio.Event()

            async def on_assign(_c: AIOGroupConsumer, parts: list[KTP]) -> None:
                assigned.set()

            await c.subscribe([topic], on_assign=on_assign)
            while not assigned.is_set():
                msg = await c.poll(0.1)
                assert msg is None or msg.error() is not None  # no record; an event may come
            while True:
                with Ticker() as t:
                    pending = asyncio.ensure_future(c.poll(1.0))
                    # Ticks while poll is pending, counted on the loop itself.
                    await asyncio.wait([pending])
                    msg = await pending
                if msg is None:  # it waited its whole second
                    break
                assert msg.error() is not None  # an error event ended it early: again
            # 1 s of 10 ms ticks is ~100; a loop blocked by poll would tick about once.
            assert t.ticks > 20, t.ticks

    asyncio.run(main())


def test_callbacks_run_on_the_loop_and_call_back(
    conf: dict[str, Any], topic_factory: Callable[..., str], bootstrap: str
) -> None:
    """Coroutine and plain callbacks run on the loop's thread, with the AIO consumer; a
    coroutine ``on_revoke`` that awaits ``commit`` (a call back into the consumer while its
    poll thread waits for the callback) commits before the partitions are released."""
    topic = topic_factory(partitions=2)
    _produce(bootstrap, topic, 20, partitions=2)
    conf = {**conf, "enable.auto.commit": False}
    seen: list[tuple[str, bool, bool]] = []

    async def main() -> None:
        loop_thread = threading.get_ident()
        c = AIOGroupConsumer(conf)

        async def on_assign(cb_c: AIOGroupConsumer, parts: list[KTP]) -> None:
            assert cb_c is c
            seen.append(("assign", threading.get_ident() == loop_thread,
                         asyncio.current_task() is not None))  # fmt: skip
            # A call back into the consumer from inside the callback.
            assert {(p.topic, p.partition) for p in await c.assignment()} >= {
                (p.topic, p.partition) for p in parts
            }

        async def on_revoke(cb_c: AIOGroupConsumer, parts: list[KTP]) -> None:
            seen.append(("revoke", threading.get_ident() == loop_thread,
                         asyncio.current_task() is not None))  # fmt: skip
            await cb_c.commit(offsets=[KTP(p.topic, p.partition, 10) for p in parts],
                              asynchronous=False)  # fmt: skip

        def on_lost(cb_c: AIOGroupConsumer, parts: list[KTP]) -> None:  # plain: on the loop too
            seen.append(("lost", threading.get_ident() == loop_thread, False))

        async with c:
            await c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
            got = 0
            deadline = time.monotonic() + 60
            while got < 20 and time.monotonic() < deadline:
                got += len(await c.consume(10, 0.5))
            assert got == 20
        with pytest.raises(ConsumerClosedError):
            await c.poll(0)

    asyncio.run(main())
    assert ("assign", True, True) in seen
    assert ("revoke", True, True) in seen  # close revoked, on the loop
    assert all(on_loop for _, on_loop, _ in seen), seen
    # The commit made inside on_revoke is the group's committed offset.
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": conf["group.id"]})
    try:
        committed = check.committed([KTP(topic, 0), KTP(topic, 1)], timeout=10)
    finally:
        check.close()
    assert [p.offset for p in committed] == [10, 10]


def test_plain_callbacks_and_async_with_close(
    conf: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    """A plain ``on_assign`` runs on the loop; leaving ``async with`` closes the member (its
    partitions revoked on the loop, the executor's thread gone)."""
    topic = topic_factory(partitions=1)
    events: list[tuple[str, bool]] = []

    async def main() -> None:
        loop_thread = threading.get_ident()

        def on_assign(_c: AIOGroupConsumer, parts: list[KTP]) -> None:
            events.append(("assign", threading.get_ident() == loop_thread))

        def on_revoke(_c: AIOGroupConsumer, parts: list[KTP]) -> None:
            events.append(("revoke", threading.get_ident() == loop_thread))

        async with AIOGroupConsumer(conf) as c:
            await c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
            while not events:
                await c.poll(0.1)
            assert [(p.topic, p.partition) for p in await c.assignment()] == [(topic, 0)]
            executor = c.executor
        assert events == [("assign", True), ("revoke", True)]
        with pytest.raises(ConsumerClosedError):
            await c.commit()
        with pytest.raises(RuntimeError):  # shut down
            executor.submit(lambda: None)

    asyncio.run(main())


def test_two_members_on_one_loop_hand_over_through_async_callbacks(
    conf: dict[str, Any], topic_factory: Callable[..., str], bootstrap: str
) -> None:
    """Two members on one event loop, polling at once: when the second joins, the first's
    coroutine ``on_revoke`` commits (synchronously, awaiting the consumer from inside its own
    hand-off) what it consumed of the partitions it gives up, and the second starts exactly
    there. No partition is ever owned by both (checked at every assign, on the loop), and every
    record is consumed exactly once (auto-commit off: only the callbacks commit)."""
    topic = topic_factory(partitions=4)
    _produce(bootstrap, topic, 20, partitions=4)  # a reads these alone, b the next 20 with it
    conf = {**conf, "enable.auto.commit": False}
    owned: dict[str, set[tuple[str, int]]] = {"a": set(), "b": set()}
    seen: dict[tuple[int, int], int] = {}
    by: dict[str, int] = {"a": 0, "b": 0}
    committed_at_revoke: list[KTP] = []
    overlaps: list[str] = []

    async def member(name: str, stop: asyncio.Event, joined: asyncio.Event) -> None:
        last: dict[tuple[str, int], int] = {}

        async def on_assign(c: AIOGroupConsumer, parts: list[KTP]) -> None:
            other = owned["b" if name == "a" else "a"]
            for p in parts:
                if (p.topic, p.partition) in other:
                    overlaps.append(f"{name} assigned {p.partition} still owned by the other")
                owned[name].add((p.topic, p.partition))

        async def on_revoke(c: AIOGroupConsumer, parts: list[KTP]) -> None:
            mine = [KTP(p.topic, p.partition, last[(p.topic, p.partition)] + 1)
                    for p in parts if (p.topic, p.partition) in last]  # fmt: skip
            if mine:
                await c.commit(offsets=mine, asynchronous=False)
                committed_at_revoke.extend(mine)
            for p in parts:
                owned[name].discard((p.topic, p.partition))

        async with AIOGroupConsumer(conf) as c:
            await c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
            while not stop.is_set():
                for m in await c.consume(10, 0.1):
                    if m.error() is None:
                        key = (m.partition() or 0, m.offset() or 0)
                        seen[key] = seen.get(key, 0) + 1
                        last[(m.topic() or "", m.partition() or 0)] = m.offset() or 0
                        by[name] += 1
                if owned[name]:
                    joined.set()

    async def main() -> None:
        stop = asyncio.Event()
        a_in, b_in = asyncio.Event(), asyncio.Event()
        a = asyncio.ensure_future(member("a", stop, a_in))
        await asyncio.wait_for(a_in.wait(), 60)
        while len(seen) < 20:  # a has consumed the first 20 before b joins
            await asyncio.sleep(0.01)
        b = asyncio.ensure_future(member("b", stop, b_in))
        await asyncio.wait_for(b_in.wait(), 60)
        await asyncio.to_thread(_produce, bootstrap, topic, 20, 4)
        deadline = time.monotonic() + 60
        while len(seen) < 40 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(a, b)

    asyncio.run(main())
    assert overlaps == []
    assert sorted(seen) == [(p, o) for p in range(4) for o in range(10)]
    # b started at a's commits in on_revoke (else it re-read them from the earliest offset)
    assert {k: n for k, n in seen.items() if n > 1} == {}
    assert committed_at_revoke and by["b"] > 0, (committed_at_revoke, by)


def test_a_coroutine_on_commit_runs_on_the_loop(
    conf: dict[str, Any], topic_factory: Callable[..., str], bootstrap: str
) -> None:
    topic = topic_factory(partitions=1)
    _produce(bootstrap, topic, 5)
    heard: list[tuple[bool, list[int]]] = []

    async def main() -> None:
        loop_thread = threading.get_ident()

        async def on_commit(err: Any, partitions: list[KTP]) -> None:
            assert err is None
            heard.append((threading.get_ident() == loop_thread, [p.offset for p in partitions]))

        cfg = {**conf, "enable.auto.commit": False, "on_commit": on_commit}
        async with AIOGroupConsumer(cfg) as c:
            await c.subscribe([topic])
            got = 0
            while got < 5:
                got += len(await c.consume(5, 0.5))
            await c.commit(asynchronous=True)
            while not heard:  # librdkafka reports the async commit from a later poll
                await c.poll(0.1)

    asyncio.run(main())
    assert heard == [(True, [5])]


def test_a_callback_waiting_on_a_closed_loop_gives_up() -> None:
    """The poll thread waiting for a callback raises once the loop is closed (``asyncio.run``
    ended without closing the consumer), instead of hanging the process's exit."""
    from groupkit.aio import Inbox

    loop = asyncio.new_event_loop()
    loop.close()
    inbox = Inbox(None, loop)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="closed"):
        inbox.serve()


def test_assignment_is_groupkits_and_bad_config_raises_at_enter(conf: dict[str, Any]) -> None:
    async def main() -> None:
        async with AIOGroupConsumer(conf) as c:
            for call in (c.assign([KTP("t", 0)]), c.unassign(),
                         c.incremental_assign([KTP("t", 0)]),
                         c.incremental_unassign([KTP("t", 0)])):  # fmt: skip
                with pytest.raises(ConfigError, match="groupkit owns the assignment"):
                    await call
        with pytest.raises(ConfigError):
            async with AIOGroupConsumer({**conf, "groupkit.assignor": "no-such-assignor"}):
                pass

    asyncio.run(main())


def test_a_cancelled_poll_loses_no_record(
    conf: dict[str, Any], topic_factory: Callable[..., str], bootstrap: str
) -> None:
    """Polls cancelled at every moment (``wait_for`` with tiny timeouts) lose no record: what a
    cancelled slice fetched is handed out by the next poll, in order. (Without that, this
    test loses records: checked by dropping them.)"""
    topic = topic_factory(partitions=1)
    _produce(bootstrap, topic, 200)

    async def main() -> list[int]:
        offsets: list[int] = []
        async with AIOGroupConsumer({**conf, "enable.auto.commit": False}) as c:
            await c.subscribe([topic])
            deadline = time.monotonic() + 60
            i = 0
            while len(offsets) < 200 and time.monotonic() < deadline:
                i += 1
                try:
                    # Every other call cancelled after a few hundred microseconds.
                    limit = 0.0003 * (i % 7) if i % 2 else 1.0
                    msgs = await asyncio.wait_for(c.consume(3, 1.0), limit)
                except TimeoutError:
                    continue
                offsets.extend(m.offset() or 0 for m in msgs)
        return offsets

    # In order, each once (a repeat from the start is the data consumer's repair of a failed
    # offset look-up on a new group, which re-reads from the committed offset: none here).
    assert list(dict.fromkeys(asyncio.run(main()))) == list(range(200))


# --------------------------------------------------------------------------- a group of processes


@pytest.fixture
def make_group(make_group: Callable[..., WorkerGroup]) -> Callable[..., WorkerGroup]:
    """conftest's, with asyncio members (tests.aio_group_worker)."""
    return functools.partial(make_group, worker="tests.aio_group_worker")


def test_aio_group_owns_once_and_consumes_everything(
    make_group: Callable[..., WorkerGroup], topic_factory: Callable[..., str], bootstrap: str
) -> None:
    """Three asyncio members with joins, a clean leave and a kill -9: no partition owned by two
    at once, every record processed, duplicates only where a member crashed (so the commits at
    each revoke were honoured: the next owner started after them), and a member's own
    ``commit`` is the group's committed offset (auto-commit only moves it on)."""
    topic = topic_factory(partitions=6)
    parts: set[TP] = {(topic, p) for p in range(6)}
    g = make_group([topic], session_timeout_ms=3000)
    producer = LoadProducer.keyed(bootstrap, topic, 300).start()
    w0, crashed_owned = churn(g, parts, producer)
    check_at_least_once(g, producer.end_offsets(), crashed_owned)
    # Every callback ran on the event loop's thread.
    wheres = [f for m in g.members.values() for f in m.facts() if f["e"] == "cb_thread"]
    assert {f["kind"] for f in wheres} >= {"assign", "revoke"}
    assert all(f["on_loop"] for f in wheres), wheres
    assert not [f for m in g.members.values() for f in m.facts() if f["e"] == "assign_not_owned"]

    # Commits honoured: w0 commits what it processed; the group's committed offsets are
    # exactly those (w0 owns its partitions, so none is refused).
    w0.send("commit")
    wait_for(lambda: w0.fact("commit_done") is not None, 30, "w0's commit")
    committed = {tuple(f["tp"]): f["o"] for f in w0.facts() if f["e"] == "committed"}
    refused = [f for f in w0.facts() if f["e"] == "commit_refused"]
    assert committed
    assert all(not f["fenced"] or tuple(f["tp"]) not in w0.owned() for f in refused), refused
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": g.group})
    try:
        got = check.committed([KTP(t, p) for (t, p) in sorted(w0.owned())], timeout=10)
    finally:
        check.close()
    for p in got:
        # Auto-commit moves on after our commit, never back before it.
        assert p.offset >= committed.get((p.topic, p.partition), 0)


def test_an_aio_zombie_fences_itself_when_it_wakes(
    make_group: Callable[..., WorkerGroup], topic_factory: Callable[..., str], bootstrap: str
) -> None:
    """An asyncio member frozen past its session (SIGSTOP, then SIGCONT) finds its partitions
    lost the moment it runs again, through its coroutine ``on_lost`` on the loop, before it
    processes anything more of them (tests/test_group_consumer.py's zombie, asyncio flavour)."""
    topic = topic_factory(partitions=4)
    parts: set[TP] = {(topic, p) for p in range(4)}
    g = make_group([topic], session_timeout_ms=2000)
    producer = LoadProducer.keyed(bootstrap, topic, 100).start()
    z, frozen, paused_at, resumed_at, paused_wall = freeze_and_wake(g, parts, producer)
    lost_at = min(f["t"] for f in z.facts() if f["e"] == "lost")
    assert lost_at >= resumed_at
    assert late_records(z, frozen, paused_at, paused_wall) == []
    assert {"kind": "lost", "on_loop": True} in [
        {k: f[k] for k in ("kind", "on_loop")} for f in z.facts() if f["e"] == "cb_thread"
    ]
    g.wait_stable(parts)
    assert g.overlaps(ignore=[z.name]) == []
