"""A group of ``tests.group_worker`` processes on groupkit's one harness (groupkit.dev.harness),
with what only the tests ask of it: whether the group consumes again after a fault, whether the
others took over from a member cut off, and how to cut one off through the fault proxy.

Every wait here is on a condition (an audit fact, a process state), bounded by a deadline.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient

from groupkit import GroupConsumer
from groupkit.dev.harness import (
    TP,
    AuditLog,
    Group,
    LoadProducer,
    MemberProcess,
    missing,
    wait_for,
)
from groupkit.runtime.control_topic import partition_for_group
from groupkit.runtime.hooks import GroupObserver

ROOT = Path(__file__).resolve().parent.parent

#: Ways to cut a member off through the fault proxy (groupkit.dev.proxy): what it can
#: still do -> the client.ids to hold, as a pattern of its own client.id (groupkit names its
#: internal clients ``<client.id>.<role>``, the data consumer ``<client.id>``: runtime/config.py).
CUTS = {
    "both-ways": r"{id}(\..+)?",
    "read-not-write": r"{id}\.control-writer",
    "write-not-read": r"{id}(\.control-reader)?",
}


def cut_pattern(kind: str, client_id: str) -> str:
    """The client.id pattern that cuts member ``client_id`` off as ``kind`` (see CUTS)."""
    return CUTS[kind].replace("{id}", re.escape(client_id))


class WorkerGroup(Group[MemberProcess]):
    """Members of one group, each a ``tests.group_worker`` process subscribed at start."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: list[str],
        workdir: Path,
        protocol: str = "cooperative",
        assignor: str = "range",
        session_timeout_ms: int = 3000,
        control_topic: str = "__groupkit",
        extra: dict[str, Any] | None = None,
        worker: str = "tests.group_worker",
    ) -> None:
        """``worker``: the module each member runs (``tests.aio_group_worker``: the asyncio
        flavour, same arguments and audit)."""
        super().__init__(workdir)
        self.worker = worker
        self.bootstrap, self.group, self.topics = bootstrap, group, topics
        self.protocol, self.assignor = protocol, assignor
        self.session_timeout_ms, self.control_topic = session_timeout_ms, control_topic
        self.extra = extra or {}

    def dump_stacks(self, timeout: float = 5.0) -> None:
        """Every live member writes the stacks of all its threads to its ``.out`` file
        (``tests.group_worker`` registers ``faulthandler`` on SIGUSR1): for a run that failed
        waiting for a member that may hang."""
        asked = []
        for m in self.live():
            with contextlib.suppress(OSError):
                m.proc.send_signal(signal.SIGUSR1)
                asked.append(m)
        with contextlib.suppress(AssertionError):
            wait_for(lambda: all("most recent call first" in m.log_tail(20_000) for m in asked),
                     timeout, "the members' stacks")  # fmt: skip

    def spawn(
        self,
        name: str | None = None,
        topics: Iterable[str] | None = None,
        slow_control_ms: int = 0,
        bootstrap: str | None = None,
        client_id: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> MemberProcess:
        """``bootstrap``: this worker's own (e.g. through a fault proxy); ``client_id``: its
        ``client.id`` (its internal clients append ``.<role>``); ``extra``: config of this
        worker on top of the group's (e.g. its ``group.instance.id``)."""
        name = name or f"w{len(self.members)}"
        audit = self.workdir / f"{name}.jsonl"
        cmd = [
            sys.executable, "-m", self.worker,
            "--bootstrap", bootstrap or self.bootstrap, "--group", self.group,
            "--topics", ",".join(topics or self.topics), "--audit", str(audit),
            "--protocol", self.protocol, "--assignor", self.assignor,
            "--session-timeout-ms", str(self.session_timeout_ms),
            "--heartbeat-ms", str(max(100, self.session_timeout_ms // 10)),
            "--control-topic", self.control_topic,
            "--extra", json.dumps({**self.extra, **(extra or {})}),
            "--slow-control-ms", str(slow_control_ms),
            *(["--client-id", client_id] if client_id else []),
        ]  # fmt: skip
        proc, out = self.popen(name, cmd, ROOT)
        return self.add(MemberProcess(name, proc, AuditLog(audit), out))

    def wait_stable(self, partitions: set[TP], timeout: float = 60) -> float:
        return wait_for(lambda: self.is_stable(partitions), timeout,
                        f"every partition owned once: {self.describe()}")  # fmt: skip

    def consumed_since(self, members: Iterable[MemberProcess], since: float) -> set[TP]:
        """The partitions each of ``members`` owns and has processed a record of after
        ``since``."""
        fresh: set[TP] = set()
        for m in members:
            mine = m.owned()
            for f in m.facts():
                if f["e"] == "msg" and f["t"] > since:
                    tp: TP = (f["tp"][0], f["tp"][1])
                    if tp in mine:
                        fresh.add(tp)
        return fresh

    def consuming_since(self, partitions: set[TP], since: float) -> bool:
        """Stable, and every partition's owner has processed one of its records after ``since``
        (the producer must be writing to every partition)."""
        return self.is_stable(partitions) and self.consumed_since(self.live(), since) >= partitions

    def taken_over(self, w: MemberProcess, partitions: set[TP], since: float) -> bool:
        """``w`` (still running, e.g. cut off) owns nothing, and the other live workers own
        every partition once and have each consumed one of their records after ``since``."""
        if w.owned():
            return False
        others = [o for o in self.live() if o is not w]
        return (self.owned_once(partitions, others)
                and self.consumed_since(others, since) >= partitions)  # fmt: skip

    def stale(self, since: float) -> str:
        """Per live worker: owned partitions without a record processed since ``since``."""
        out = []
        for w in self.live():
            idle = sorted(w.owned() - self.consumed_since([w], since))
            if idle:
                out.append(f"{w.name} owns but has not consumed {idle}")
        return "; ".join(out) or "every owned partition consumed"


def control_partition(admin: AdminClient, group: WorkerGroup) -> tuple[str, int]:
    """The group's partition of its control topic (from the topic's partition count, once the
    topic exists)."""
    ctl = group.control_topic
    wait_for(lambda: ctl in admin.list_topics(timeout=10).topics, 30, f"topic {ctl}")
    count = len(admin.list_topics(ctl, timeout=10).topics[ctl].partitions)
    return ctl, partition_for_group(group.group, count)


def partitions(topic: str, n: int) -> set[TP]:
    """Partitions 0..n-1 of ``topic``."""
    return {(topic, p) for p in range(n)}


def churn(g: WorkerGroup, parts: set[TP], producer: LoadProducer) -> tuple[MemberProcess, set[TP]]:
    """Under ``producer``'s load (stopped at the end): two members join, a third joins, one
    leaves cleanly, one is killed (-9), a fourth joins; the group is stable over ``parts`` after
    each step. The first member (still running), and what the killed one owned."""
    try:
        w0, w1 = g.spawn(), g.spawn()
        g.wait_stable(parts)
        w2 = g.spawn()
        g.wait_stable(parts)
        w1.close()
        g.wait_stable(parts)
        crashed_owned = w2.owned()
        w2.kill()
        g.wait_stable(parts, timeout=60)
        g.spawn()
        g.wait_stable(parts)
    finally:
        producer.stop()
    return w0, crashed_owned


def check_at_least_once(g: WorkerGroup, ends: dict[TP, int], crashed_owned: set[TP]) -> None:
    """Every record up to ``ends`` processed, twice only on a partition a crashed member owned
    (the commits at each revoke were honoured), and no partition owned by two at once."""
    assert sum(ends.values()) >= 100
    wait_for(lambda: not missing(ends, g.processed()), 60, "every produced record processed")
    done = g.processed()
    assert missing(ends, done) == {}
    for tp in ends:
        dups = {o for o, n in done[tp].items() if n > 1}
        if dups:
            assert tp in crashed_owned, (
                f"{tp} processed {sorted(dups)[:10]} twice, owner did not crash"
            )
    assert g.overlaps() == []


class Frozen(NamedTuple):
    """A member frozen past its session and woken again (:func:`freeze_and_wake`)."""

    zombie: MemberProcess
    #: what it owned when frozen
    owned: set[TP]
    paused_at: float
    resumed_at: float
    #: wall clock just before the freeze: a record created later was fetched after it
    paused_wall: float


def freeze_and_wake(g: WorkerGroup, parts: set[TP], producer: LoadProducer) -> Frozen:
    """Under ``producer``'s load (stopped at the end): two members share ``parts``; one is
    frozen (SIGSTOP) until the other owns them all (the group expired it), then woken
    (SIGCONT) and waited for until it reports them lost."""
    try:
        a, z = g.spawn(), g.spawn()
        g.wait_stable(parts)
        frozen = z.owned()
        paused_wall = time.time()
        paused_at = z.pause()
        # The group reassigns the zombie's partitions once the log expires it.
        wait_for(lambda: a.owned() == parts, 30, f"a to take over: {g.describe()}")
        resumed_at = z.resume()
        wait_for(lambda: set(z.events("lost")) >= frozen, 30, "the zombie to report them lost")
    finally:
        producer.stop()
    return Frozen(z, frozen, paused_at, resumed_at, paused_wall)


# --------------------------------------------------------------------------- in-process apps


def produce(bootstrap: str, topic: str, per_partition: Mapping[int, int]) -> None:
    """``n`` records ``b"0"``, ``b"1"``... into each ``partition: n`` of ``per_partition``, all
    delivered on return."""
    p = Producer({"bootstrap.servers": bootstrap})
    for partition, n in per_partition.items():
        for i in range(n):
            p.produce(topic, value=b"%d" % i, partition=partition)
    assert p.flush(30) == 0


class Polls(Protocol):
    """A consumer, or a test's app around one, that the test thread polls."""

    def poll(self, timeout: float) -> object: ...


def pump(apps: Iterable[Polls], cond: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll every app in turn (10 ms each) until ``cond()``: one thread plays all the apps.
    The seconds it took."""
    apps = list(apps)

    def step() -> bool:
        for a in apps:
            a.poll(0.01)
        return cond()

    return wait_for(step, timeout, what, step=0)


def subscribed(
    consumers: list[GroupConsumer],
    conf: dict[str, Any],
    topics: list[str],
    observers: Sequence[GroupObserver] = (),
    **callbacks: Any,
) -> GroupConsumer:
    """A member on ``conf`` subscribed to ``topics`` (``callbacks``: ``on_assign=``...), put in
    ``consumers`` (conftest's fixture, which closes them after the test)."""
    c = GroupConsumer(conf, observers=list(observers))
    consumers.append(c)
    c.subscribe(topics, **callbacks)
    return c


#: What a broker answers a read of committed offsets with while it loads the group's
#: coordinator (just started, or restarted); librdkafka's ``committed()`` does not retry them.
COORDINATOR_MOVING = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
)


def committed_offsets(
    bootstrap: str, group: str, topic: str, partitions: int, **conf: Any
) -> dict[TP, int]:
    """The group's committed offset of each of ``topic``'s partitions ``0..partitions-1``
    (-1001: none), as a consumer with the group's id that joins nothing reads them (``conf``:
    more of its configuration, e.g. ``**{"isolation.level": "read_committed"}``), once the
    group's coordinator answers (:data:`COORDINATOR_MOVING`)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **conf})
    got: list[KTP] = []

    def read() -> bool:
        try:
            got[:] = c.committed([KTP(topic, p) for p in range(partitions)], timeout=10)
        except KafkaException as e:
            if e.args[0].code() not in COORDINATOR_MOVING:
                raise
            return False
        return True

    try:
        wait_for(read, 60, f"the committed offsets of group {group}", step=0.2)
        return {(p.topic, p.partition): p.offset for p in got}
    finally:
        c.close()
