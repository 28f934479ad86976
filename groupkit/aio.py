"""``AIOGroupConsumer``: :class:`~groupkit.GroupConsumer` for asyncio, shaped like
``confluent_kafka.aio.AIOConsumer``.

Every method is awaitable and runs its call into the ``GroupConsumer`` (and so into librdkafka)
on an executor thread, never on the event loop. The executor is a single thread by default
(``max_workers=1``), and every call also holds a gate (a ``threading.Lock``) on that thread: a
consumer's calls must not race (``GroupConsumer`` is used by one thread at a time, like
``Consumer``), and the thread that polls is the one the group's hand-offs and rebalance
callbacks run on (runtime/handoff.py). With a shared or wider executor the gate still makes
the calls one at a time; waiting for it happens on an executor thread, never on the loop.

``poll``/``consume`` with a long or no timeout are run as slices of at most 0.1 s on the
executor, so a ``commit`` or ``close`` from another task waits at most one slice, and a
cancelled ``poll`` stops within one. A cancelled ``poll``/``consume`` loses no record: what the
slice in flight fetched is returned first by the next ``poll``/``consume`` (librdkafka has
already stored those records' offsets as handed out), unless its partition was given up in
between (``unsubscribe``); such records are dropped, never handed out by a member that no
longer owns them.

Callbacks
---------
``on_assign``, ``on_revoke`` and ``on_lost`` may be coroutine functions or plain functions;
both kinds run **on the event loop**, with this ``AIOGroupConsumer`` as first argument (as
``AIOConsumer`` does), so they may touch the application's asyncio state. ``GroupConsumer``
calls them on its poll thread, which is the executor thread running ``poll``; that thread
hands the callback to the loop (``asyncio.run_coroutine_threadsafe``) and waits for it. This
cannot deadlock on the loop: the loop is never blocked on the executor (every call is awaited,
not waited for), so it is free to run the callback while ``poll`` waits.

A callback usually calls the consumer back (``await consumer.commit(...)`` in ``on_revoke``).
Such a call cannot go to the executor, whose thread is the one waiting for the callback; it is
served by that waiting thread itself: while a callback runs, the poll thread runs the calls the
callback (and the tasks it awaits) make on this consumer, one at a time, and returns their
results to the loop. So a callback's calls happen inside the hand-off, as with the synchronous
class (the revoke's commit lands before the partition is released). A task the callback starts
and does not await, calling the consumer after the callback returned, goes to the executor like
any other call (after the ``poll`` in flight).

What can still deadlock: a callback that waits for something only the executor can do, other
than through this consumer (e.g. another consumer sharing the same single-thread executor).

``on_commit``, ``error_cb``, ``stats_cb`` and ``throttle_cb`` in the config, when they are
coroutine functions, run on the loop the same way; plain ones are left as they are (run on the
thread the synchronous consumer calls them on, as with ``Consumer``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from confluent_kafka import Message
from confluent_kafka import TopicPartition as KTopicPartition

from groupkit.errors import ConfigError, ConsumerClosedError
from groupkit.runtime.consumer import GroupConsumer
from groupkit.runtime.hooks import GroupObserver

__all__ = ["AIOGroupConsumer"]

T = TypeVar("T")

#: The longest a poll/consume holds the executor (and so delays a commit or close).
_SLICE_S = 0.1

#: Config keys whose callback, if a coroutine function, runs on the loop.
_CONF_CALLBACKS = ("on_commit", "error_cb", "stats_cb", "throttle_cb")


class Inbox:
    """Calls a running callback makes on its consumer, served by the thread that waits for it."""

    def __init__(self, owner: AIOGroupConsumer, loop: asyncio.AbstractEventLoop) -> None:
        self.owner = owner
        self._loop = loop
        self._lock = threading.Lock()
        self._closed = False
        self._q: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any]] | None] = (
            queue.SimpleQueue()
        )

    def submit(self, fn: Callable[[], T]) -> asyncio.Future[T] | None:
        """On the loop: queue ``fn`` for the waiting thread; ``None`` once the callback ended."""
        with self._lock:
            if self._closed:
                return None
            fut: asyncio.Future[T] = self._loop.create_future()
            self._q.put((fn, fut))
            return fut

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._q.put(None)

    def serve(self) -> None:
        """On the waiting thread: run what is submitted until :meth:`close`.

        Raises if the loop is closed meanwhile (``asyncio.run`` ended while a ``poll`` was on
        the executor): the callback can never run, and waiting would hang the executor's
        thread, and so the interpreter's exit, for ever."""
        while True:
            try:
                item = self._q.get(timeout=0.5)
            except queue.Empty:
                if self._loop.is_closed():
                    raise RuntimeError(
                        "the event loop was closed while a groupkit callback waited for it"
                    ) from None
                continue
            if item is None:
                return
            fn, fut = item
            try:
                result = fn()
            except BaseException as e:  # handed to the awaiting task, like any call's error
                self._loop.call_soon_threadsafe(_settle, fut, None, e)
            else:
                self._loop.call_soon_threadsafe(_settle, fut, result, None)


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():  # the awaiting task was cancelled
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


#: The inbox of the callback running in this task (and the tasks it awaits), if any.
_INBOX: contextvars.ContextVar[Inbox | None] = contextvars.ContextVar(
    "groupkit_aio_inbox", default=None
)

Callback = Callable[["AIOGroupConsumer", list[KTopicPartition]], Awaitable[None] | None]


def _delegate(name: str) -> Callable[..., Awaitable[Any]]:
    """An awaitable method running ``GroupConsumer.<name>`` on the executor."""

    async def method(self: AIOGroupConsumer, *args: Any, **kwargs: Any) -> Any:
        return await self._call(lambda c: getattr(c, name)(*args, **kwargs))

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``GroupConsumer.{name}``, awaitable (run on the executor)."
    return method


def _refuse_assignment(name: str) -> Callable[..., Awaitable[Any]]:
    """``assign`` & co.: the synchronous class's refusal where it has one (it says groupkit owns
    the assignment), else the same refusal here."""

    async def method(self: AIOGroupConsumer, *args: Any, **kwargs: Any) -> Any:
        if hasattr(GroupConsumer, name):
            return await self._call(lambda c: getattr(c, name)(*args, **kwargs))
        raise ConfigError(
            f"{name}() is not available on a groupkit consumer: groupkit owns the assignment "
            "(the group grants each member its partitions); use subscribe()"
        )

    method.__name__ = method.__qualname__ = name
    return method


class AIOGroupConsumer:
    """A member of a groupkit group, for asyncio. Create it inside a running event loop.

    ``config`` is ``GroupConsumer``'s; ``max_workers`` and ``executor`` are
    ``AIOConsumer``'s (one worker is right: the consumer's calls run one at a time anyway);
    ``observers`` are passed to ``GroupConsumer``. Construction (which reaches the cluster) also
    runs on the executor: a bad config raises from ``async with`` or the first call.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        max_workers: int = 1,
        executor: concurrent.futures.Executor | None = None,
        *,
        observers: Iterable[GroupObserver] = (),
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._owns_executor = executor is None
        if executor is None:
            if max_workers < 1:
                raise ValueError("max_workers must be at least 1")
            executor = concurrent.futures.ThreadPoolExecutor(
                max_workers, thread_name_prefix="groupkit-aio"
            )
        self.executor = executor
        self._gate = threading.Lock()
        self._closed = False
        self._sync: GroupConsumer | None = None
        #: records of a cancelled poll/consume, for the next one (see the module docstring)
        self._stash: list[Message] = []
        self._orphan: asyncio.Future[list[Message]] | None = None
        conf = dict(config)
        for key in _CONF_CALLBACKS:
            cb = conf.get(key)
            if cb is not None and inspect.iscoroutinefunction(cb):
                conf[key] = self._on_loop(cb)
        observers = list(observers)
        self._started = self._loop.run_in_executor(
            executor, lambda: self._gated(lambda: GroupConsumer(conf, observers=observers))
        )

    # ------------------------------------------------------------------ dispatch

    def _gated(self, fn: Callable[[], T]) -> T:
        with self._gate:
            return fn()

    async def _consumer(self) -> GroupConsumer:
        if self._sync is None:
            self._sync = await asyncio.shield(self._started)
        return self._sync

    async def _call(self, fn: Callable[[GroupConsumer], T]) -> T:
        """Run ``fn(consumer)`` on the executor, or on the poll thread when a callback of this
        consumer is running and makes the call (see the module docstring)."""
        if self._sync is None and not self._closed:
            await self._consumer()
        return await self._submit(fn)

    def _submit(self, fn: Callable[[GroupConsumer], T]) -> asyncio.Future[T]:
        """:meth:`_call`'s future, once the consumer is constructed (no task of its own: a
        ``poll`` slice costs the loop one executor future)."""
        sync = self._sync
        inbox = _INBOX.get()
        if inbox is not None and inbox.owner is self and sync is not None:
            fut = inbox.submit(lambda: fn(sync))
            if fut is not None:
                return fut
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")
        assert sync is not None
        return self._loop.run_in_executor(self.executor, self._gated, lambda: fn(sync))

    def _on_loop(self, cb: Callable[..., Any]) -> Callable[..., Any]:
        """``cb`` as the synchronous consumer calls it, on some thread: run on the loop (a
        coroutine awaited there), the calling thread serving the callback's calls on this
        consumer until it returns."""

        def run(*args: Any) -> Any:
            if threading.get_ident() == self._loop_thread:
                raise RuntimeError("a groupkit callback was called on the event loop's thread")
            inbox = Inbox(self, self._loop)

            async def invoke() -> Any:
                _INBOX.set(inbox)  # this task's context only (and the tasks it starts)
                result = cb(*args)
                if inspect.isawaitable(result):
                    result = await result
                return result

            fut = asyncio.run_coroutine_threadsafe(invoke(), self._loop)
            fut.add_done_callback(lambda _: inbox.close())
            try:
                inbox.serve()
            except RuntimeError:
                fut.cancel()
                raise
            return fut.result()

        return run

    def _rebalance_cb(self, cb: Callback | None) -> Callable[[GroupConsumer, Any], None] | None:
        if cb is None:
            return None
        on_loop = self._on_loop(cb)

        def run(_sync: GroupConsumer, partitions: list[KTopicPartition]) -> None:
            on_loop(self, partitions)

        return run

    # ------------------------------------------------------------------ membership

    async def subscribe(
        self,
        topics: Sequence[str],
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
        on_lost: Callback | None = None,
    ) -> None:
        """``GroupConsumer.subscribe``; the callbacks run on the loop (module docstring)."""
        a, r, lost = map(self._rebalance_cb, (on_assign, on_revoke, on_lost))
        topics = list(topics)
        await self._call(lambda c: c.subscribe(topics, on_assign=a, on_revoke=r, on_lost=lost))

    async def unsubscribe(self) -> None:
        await self._call(lambda c: c.unsubscribe())

    # ------------------------------------------------------------------ consuming

    async def poll(self, timeout: float | None = None) -> Message | None:
        """The next message of an owned partition, or ``None`` after ``timeout`` seconds
        (``None`` or negative: until there is one)."""
        msgs = await self._fetch(1, timeout)
        return msgs[0] if msgs else None

    async def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        """Up to ``num_messages`` messages; ``[]`` after ``timeout`` seconds."""
        return await self._fetch(num_messages, timeout)

    async def _fetch(self, n: int, timeout: float | None) -> list[Message]:
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        while True:
            if self._sync is None and not self._closed:
                await self._consumer()
            if self._orphan is not None:  # its records go first, in order (they are older)
                await asyncio.wait((self._orphan,))
                self._orphan = None
            stash, self._stash = self._stash, []
            left = _SLICE_S if deadline is None else deadline - time.monotonic()
            wait = min(_SLICE_S, max(0.0, left))
            fut = self._submit(functools.partial(_take, stash=stash, n=n, wait=wait))
            try:
                msgs = await asyncio.shield(fut)
            except asyncio.CancelledError:
                # The slice goes on without us: what it fetches is the next fetch's.
                self._orphan = fut
                fut.add_done_callback(self._keep)
                raise
            if len(msgs) > n:  # a larger cancelled batch: the rest waits for the next fetch
                self._stash[:0], msgs = msgs[n:], msgs[:n]
            if msgs or (deadline is not None and time.monotonic() >= deadline):
                return msgs

    def _keep(self, fut: asyncio.Future[list[Message]]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self._stash[:0] = fut.result()

    # ------------------------------------------------------------------ offsets

    async def commit(
        self,
        message: Message | None = None,
        offsets: Sequence[KTopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[KTopicPartition] | None:
        """``GroupConsumer.commit``: only partitions this member owns, unfenced."""
        return await self._call(lambda c: c.commit(message, offsets, asynchronous))

    # Methods that only forward to GroupConsumer's of the same name, on the executor. A method
    # GroupConsumer gains is one line here (tests/test_aio.py fails until it is added).
    store_offsets = _delegate("store_offsets")
    position = _delegate("position")
    committed = _delegate("committed")
    assignment = _delegate("assignment")
    pause = _delegate("pause")
    add_ownership_hook = _delegate("add_ownership_hook")
    resume = _delegate("resume")
    seek = _delegate("seek")
    get_watermark_offsets = _delegate("get_watermark_offsets")
    offsets_for_times = _delegate("offsets_for_times")
    list_topics = _delegate("list_topics")
    memberid = _delegate("memberid")
    cluster_id = _delegate("cluster_id")
    consumer_group_metadata = _delegate("consumer_group_metadata")
    set_sasl_credentials = _delegate("set_sasl_credentials")

    # groupkit owns the assignment: refused, as by GroupConsumer
    assign = _refuse_assignment("assign")
    unassign = _refuse_assignment("unassign")
    incremental_assign = _refuse_assignment("incremental_assign")
    incremental_unassign = _refuse_assignment("incremental_unassign")

    # ------------------------------------------------------------------ the member

    @property
    def member_id(self) -> str | None:
        """This member's id (``None`` before ``subscribe``); an attribute read, no I/O."""
        return None if self._sync is None else self._sync.member_id

    async def generation(self) -> int:
        """The generation the member's partitions belong to (the control loop's lock)."""
        return await self._call(lambda c: c.generation)

    async def is_leader(self) -> bool:
        return await self._call(lambda c: c.is_leader)

    @property
    def consumer(self) -> GroupConsumer | None:
        """The synchronous consumer (``None`` until constructed): for observers and
        diagnostics, not to be called from the loop."""
        return self._sync

    # ------------------------------------------------------------------ closing

    async def close(self) -> None:
        """Leave the group (revoke with ``on_revoke`` on the loop, commit, tombstone), close the
        clients and, if this consumer made its executor, shut it down."""
        if self._closed:
            return
        try:
            try:
                await self._consumer()
            except Exception:
                return  # never constructed: nothing to leave (the finally below still runs)
            # Through _call: from inside a callback, the poll thread waiting for it closes.
            await self._call(lambda c: c.close())
        finally:
            self._closed = True
            if self._owns_executor:
                self.executor.shutdown(wait=False)

    async def __aenter__(self) -> AIOGroupConsumer:
        try:
            await self._consumer()
        except BaseException:
            await self.close()  # the executor's thread goes too
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _take(c: GroupConsumer, stash: list[Message], n: int, wait: float) -> list[Message]:
    """On the executor: a cancelled fetch's records still owned, else one slice of polling
    (``poll`` for one, which has the synchronous consumer's fast path)."""
    if stash:
        owned = {(p.topic, p.partition) for p in c.assignment()}
        kept = [m for m in stash if m.error() is not None or (m.topic(), m.partition()) in owned]
        if kept:
            return kept
    if n == 1:
        msg = c.poll(wait)
        return [] if msg is None else [msg]
    return c.consume(n, wait)
