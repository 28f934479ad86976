"""Drive a group of ``tests.group_worker`` processes and audit what they did.

Every wait here is on a condition (an audit fact, a process state), bounded by a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient

from groupkit.runtime.control_topic import partition_for_group

TP = tuple[str, int]
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


def wait_for(cond: Callable[[], bool], timeout: float, what: str, step: float = 0.05) -> float:
    """Wait until ``cond()``; return the seconds it took, or fail saying ``what``."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        if cond():
            return time.monotonic() - t0
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[str]
    audit: Path
    killed_at: float | None = None
    paused: bool = False
    #: (stopped, continued) monotonic times of every SIGSTOP
    pauses: list[tuple[float, float]] = field(default_factory=list)

    def facts(self) -> list[dict[str, Any]]:
        if not self.audit.exists():
            return []
        out = []
        for line in self.audit.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line cut by kill -9
                out.append(json.loads(line))
        return out

    def owned(self) -> set[TP]:
        if self.killed_at is not None or self.proc.poll() is not None:
            return set()
        cur: set[TP] = set()
        for f in self.facts():
            if f["e"] == "assign":
                cur.add(tuple(f["tp"]))  # type: ignore[arg-type]
            elif f["e"] in ("revoke", "lost"):
                cur.discard(tuple(f["tp"]))  # type: ignore[arg-type]
        return cur

    def state(self) -> dict[str, Any]:
        states = [f for f in self.facts() if f["e"] == "state"]
        return states[-1] if states else {}

    def events(self, kind: str) -> list[TP]:
        return [tuple(f["tp"]) for f in self.facts() if f["e"] == kind]  # type: ignore[misc]

    @property
    def alive(self) -> bool:
        return self.killed_at is None and self.proc.poll() is None

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.killed_at = time.monotonic()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def pause(self) -> float:
        """SIGSTOP: the process freezes mid-whatever, as a long GC pause or a VM stall would."""
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True
        self.pauses.append((time.monotonic(), float("inf")))
        return self.pauses[-1][0]

    def resume(self) -> float:
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False
        self.pauses[-1] = (self.pauses[-1][0], time.monotonic())
        return self.pauses[-1][1]

    def close(self, timeout: float = 30) -> None:
        self.send("close")
        self.proc.wait(timeout)


@dataclass
class Group:
    bootstrap: str
    group: str
    topics: list[str]
    workdir: Path
    protocol: str = "cooperative"
    assignor: str = "range"
    session_timeout_ms: int = 3000
    control_topic: str = "__groupkit"
    extra: dict[str, Any] = field(default_factory=dict)
    workers: dict[str, Worker] = field(default_factory=dict)

    def spawn(
        self,
        name: str | None = None,
        topics: Iterable[str] | None = None,
        slow_control_ms: int = 0,
        bootstrap: str | None = None,
        client_id: str | None = None,
    ) -> Worker:
        """``bootstrap``: this worker's own (e.g. through a fault proxy); ``client_id``: its
        ``client.id`` (its internal clients append ``.<role>``)."""
        name = name or f"w{len(self.workers)}"
        audit = self.workdir / f"{name}.jsonl"
        cmd = [
            sys.executable, "-m", "tests.group_worker",
            "--bootstrap", bootstrap or self.bootstrap, "--group", self.group,
            "--topics", ",".join(topics or self.topics), "--audit", str(audit),
            "--protocol", self.protocol, "--assignor", self.assignor,
            "--session-timeout-ms", str(self.session_timeout_ms),
            "--heartbeat-ms", str(max(100, self.session_timeout_ms // 10)),
            "--control-topic", self.control_topic, "--extra", json.dumps(self.extra),
            "--slow-control-ms", str(slow_control_ms),
            *(["--client-id", client_id] if client_id else []),
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=open(self.workdir / f"{name}.out", "w"),  # noqa: SIM115 - the child's
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        w = Worker(name, proc, audit)
        self.workers[name] = w
        return w

    def live(self) -> list[Worker]:
        """Running workers: alive and not frozen."""
        return [w for w in self.workers.values() if w.alive and not w.paused]

    def ownership(self) -> dict[TP, list[str]]:
        out: dict[TP, list[str]] = defaultdict(list)
        for w in self.live():
            for tp in w.owned():
                out[tp].append(w.name)
        return out

    def is_stable(self, partitions: set[TP]) -> bool:
        """Every partition owned by exactly one live worker, and no live worker idle that
        could have a partition."""
        own = self.ownership()
        once = set(own) == partitions and all(len(ws) == 1 for ws in own.values())
        live = self.live()
        return once and (len(live) > len(partitions) or all(w.owned() for w in live))

    def wait_stable(self, partitions: set[TP], timeout: float = 60) -> float:
        return wait_for(lambda: self.is_stable(partitions), timeout,
                        f"every partition owned once: {self.describe()}")  # fmt: skip

    def consuming_since(self, partitions: set[TP], since: float) -> bool:
        """Stable, and every partition's owner has processed one of its records after ``since``
        (the producer must be writing to every partition)."""
        if not self.is_stable(partitions):
            return False
        fresh: set[TP] = set()
        for w in self.live():
            mine = w.owned()
            for f in w.facts():
                if f["e"] == "msg" and f["t"] > since:
                    tp: TP = tuple(f["tp"])  # type: ignore[assignment]
                    if tp in mine:
                        fresh.add(tp)
        return fresh >= partitions

    def taken_over(self, w: Worker, partitions: set[TP], since: float) -> bool:
        """``w`` (still running, e.g. cut off) owns nothing, and the other live workers own
        every partition once and have each consumed one of their records after ``since``."""
        if w.owned():
            return False
        others = [o for o in self.live() if o is not w]
        own: dict[TP, list[str]] = defaultdict(list)
        for o in others:
            for tp in o.owned():
                own[tp].append(o.name)
        if set(own) != partitions or any(len(ws) != 1 for ws in own.values()):
            return False
        fresh: set[TP] = set()
        for o in others:
            mine = o.owned()
            for f in o.facts():
                if f["e"] == "msg" and f["t"] > since and tuple(f["tp"]) in mine:
                    fresh.add(tuple(f["tp"]))  # type: ignore[arg-type]
        return fresh >= partitions

    def describe(self) -> str:
        return "; ".join(
            f"{w.name}{'' if w.alive else '(dead)'}: {sorted(w.owned())}"
            for w in self.workers.values()
        )

    def intervals(self) -> dict[TP, list[tuple[float, float, str]]]:
        """Ownership intervals per partition: (start, end, worker)."""
        now = time.monotonic()
        out: dict[TP, list[tuple[float, float, str]]] = defaultdict(list)
        for w in self.workers.values():
            open_: dict[TP, float] = {}
            for f in w.facts():
                if f["e"] == "assign":
                    open_[tuple(f["tp"])] = f["t"]  # type: ignore[index]
                elif f["e"] in ("revoke", "lost"):
                    tp: TP = tuple(f["tp"])  # type: ignore[assignment]
                    if tp in open_:
                        out[tp].append((open_.pop(tp), f["t"], w.name))
            end = w.killed_at if w.killed_at is not None else now
            for tp, start in open_.items():
                out[tp].append((start, end, w.name))
        return out

    def overlaps(self, ignore: Iterable[str] = ()) -> list[str]:
        """Pairs of ownership intervals of one partition, by two workers, that overlap.

        ``ignore``: workers whose overlap is expected and checked apart (a paused zombie
        cannot fence itself while it is stopped)."""
        skip = set(ignore)
        bad = []
        for tp, all_ivs in self.intervals().items():
            ivs = sorted(iv for iv in all_ivs if iv[2] not in skip)
            reach = (float("-inf"), float("-inf"), "")  # the interval reaching furthest so far
            for iv in ivs:
                s, _e, w = iv
                if w != reach[2] and s < reach[1]:
                    bad.append(f"{tp}: {reach[2]} {reach[:2]} overlaps {w} {iv[:2]}")
                if iv[1] > reach[1]:
                    reach = iv
        return bad

    def processed(self) -> dict[TP, Counter[int]]:
        out: dict[TP, Counter[int]] = defaultdict(Counter)
        for w in self.workers.values():
            for f in w.facts():
                if f["e"] == "msg":
                    out[tuple(f["tp"])][f["o"]] += 1  # type: ignore[index]
        return out

    def stop_all(self) -> None:
        for w in self.workers.values():
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait(10)


class KeyedProducer:
    """Produces keyed records in a background thread and remembers every acknowledged offset."""

    def __init__(self, bootstrap: str, topic: str, rate_per_s: float = 200) -> None:
        self.topic = topic
        self.rate = rate_per_s
        self.acked: dict[TP, set[int]] = defaultdict(set)
        conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
        self._producer: Producer | None = Producer(conf)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.count = 0

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.acked[(msg.topic() or "", msg.partition() or 0)].add(msg.offset() or 0)

    def _run(self) -> None:
        producer = self._producer
        assert producer is not None
        i = 0
        while not self._stop.is_set():
            producer.produce(self.topic, key=f"k{i % 97}".encode(), value=str(i).encode(),
                             on_delivery=self._delivered)  # fmt: skip
            i += 1
            self.count = i
            producer.poll(0)
            self._stop.wait(1 / self.rate)
        producer.flush(30)

    def start(self) -> KeyedProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop producing; the producer (flushed by the thread) is destroyed here, so it does not
        outlive the broker however long this object lives."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)
        self._producer = None

    def end_offsets(self) -> dict[TP, int]:
        return {tp: max(offs) + 1 for tp, offs in self.acked.items()}


def control_partition(admin: AdminClient, group: Group) -> tuple[str, int]:
    """The group's partition of its control topic (from the topic's partition count, once the
    topic exists)."""
    ctl = group.control_topic
    wait_for(lambda: ctl in admin.list_topics(timeout=10).topics, 30, f"topic {ctl}")
    count = len(admin.list_topics(ctl, timeout=10).topics[ctl].partitions)
    return ctl, partition_for_group(group.group, count)
