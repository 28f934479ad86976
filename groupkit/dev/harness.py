"""The one harness of the multi-process tests and benches: member processes, their audit, a load.

A member process (``tests/group_worker.py`` for the tests and the chaos run, ``bench/_worker.py``
for the benches) writes an **audit**: one JSON line per fact, line-buffered so a kill -9 loses
nothing written before it (:class:`Audit`). Every fact has ``e`` (what) and ``t``
(``time.monotonic()``: CLOCK_MONOTONIC, comparable across the processes of one machine). The
facts this module reads:

- ``{"e": "assign" | "revoke" | "lost", "tps": [[topic, partition], ...]}``: ownership as the
  application sees it, one line per rebalance callback, written inside the callback;
- ``{"e": "state", "member": id, "generation": n, "leader": bool}`` when one of them changes;
- ``{"e": "closed"}`` after ``close()`` returned: the member owns nothing from then on.

Each worker adds its own facts (the records it processed, the first record of a partition, ...),
documented in its module. The harness side:

- :class:`AuditLog` tails one audit file incrementally and keeps what the member owns;
- :class:`MemberProcess` is the handle of one worker process (its audit, kill -9, SIGSTOP and
  SIGCONT, commands on stdin, CPU time);
- :class:`Group` holds the processes of one group: who runs, who owns what, whether the group is
  stable, who leads; and the **invariant checker**: :meth:`Group.intervals` turns the audits into
  ownership intervals, :func:`overlaps` finds a partition owned by two members at once (the
  safety invariant), :func:`missing` finds acknowledged records never processed;
- :class:`LoadProducer` produces in a thread, either keyed records at a rate (remembering every
  acknowledged offset, for :func:`missing`) or one record to every partition every period;
- :func:`wait_for` waits on a condition with a deadline (no sleeps where a condition will do).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from confluent_kafka import KafkaError, Message, Producer

from groupkit.assignors.invariants import check_owned_once

TP = tuple[str, int]
#: an ownership interval of one partition: (start, end, member name)
Interval = tuple[float, float, str]
#: the facts that change what a member owns
OWNERSHIP = ("assign", "revoke", "lost")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def wait_for(cond: Callable[[], bool], timeout: float, what: str, step: float = 0.05) -> float:
    """Wait until ``cond()``; return the seconds it took, or fail (AssertionError) saying
    ``what``."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        if cond():
            return time.monotonic() - t0
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


# --------------------------------------------------------------------------- the audit


class Audit:
    """The worker's side: appends facts to an audit file, one JSON line each, from any thread."""

    def __init__(self, path: str | Path) -> None:
        self._f = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
        self._lock = threading.Lock()

    def write(self, e: str, **fact: Any) -> None:
        fact["e"] = e
        fact.setdefault("t", time.monotonic())
        line = json.dumps(fact, separators=(",", ":")) + "\n"
        with self._lock:
            self._f.write(line)  # line-buffered: on its way to the file at once

    def ownership(self, e: str, tps: Iterable[tuple[str, int]]) -> None:
        """``assign`` / ``revoke`` / ``lost`` of ``tps`` (from inside the callback)."""
        self.write(e, tps=[[topic, partition] for topic, partition in tps])


class AuditLog:
    """The harness's side: one audit file, read incrementally (each call reads only what was
    appended since the last), and what its member owns according to it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.facts: list[dict[str, Any]] = []
        self.owned: set[TP] = set()
        self.closed = False
        self._pos = 0
        self._partial = ""

    def refresh(self) -> list[dict[str, Any]]:
        """Read what was appended; return the new facts."""
        try:
            with open(self.path) as f:
                f.seek(self._pos)
                chunk = f.read()
                self._pos = f.tell()
        except FileNotFoundError:
            return []
        if not chunk:
            return []
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()
        new = []
        for line in lines:
            try:
                fact = json.loads(line)
            except json.JSONDecodeError:  # a line cut by kill -9
                continue
            new.append(fact)
            self._apply(fact)
        self.facts.extend(new)
        return new

    def _apply(self, fact: dict[str, Any]) -> None:
        e = fact["e"]
        if e == "assign":
            self.owned.update(tps(fact))
        elif e in ("revoke", "lost"):
            self.owned.difference_update(tps(fact))
        elif e == "closed":
            self.closed = True
            self.owned.clear()


def tps(fact: Mapping[str, Any]) -> list[TP]:
    """The partitions of an ownership fact."""
    return [(topic, partition) for topic, partition in fact["tps"]]


# --------------------------------------------------------------------------- a member process


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far (Linux /proc); NaN once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return float("nan")


@dataclass
class MemberProcess:
    """One worker process and its audit."""

    name: str
    proc: subprocess.Popen[str]
    audit: AuditLog
    out: Path
    killed_at: float | None = None
    paused: bool = False
    #: (stopped, continued) monotonic times of every SIGSTOP
    pauses: list[tuple[float, float]] = field(default_factory=list)

    def refresh(self) -> list[dict[str, Any]]:
        return self.audit.refresh()

    def facts(self) -> list[dict[str, Any]]:
        self.refresh()
        return self.audit.facts

    def fact(self, kind: str) -> dict[str, Any] | None:
        """The last fact of ``kind``, if any."""
        return next((f for f in reversed(self.facts()) if f["e"] == kind), None)

    def events(self, kind: str) -> list[TP]:
        """The partitions of every ``kind`` ownership fact, in order."""
        return [tp for f in self.facts() if f["e"] == kind for tp in tps(f)]

    def owned(self) -> set[TP]:
        """What the member owns now: nothing once it is dead or closed."""
        self.refresh()
        return set(self.audit.owned) if self.alive else set()

    def state(self) -> dict[str, Any]:
        """The last ``state`` fact (member, generation, leader), or ``{}``."""
        return self.fact("state") or {}

    def is_leader(self) -> bool:
        return bool(self.state().get("leader"))

    @property
    def alive(self) -> bool:
        return self.killed_at is None and not self.audit.closed and self.proc.poll() is None

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def kill(self) -> float:
        """kill -9; return when."""
        self.killed_at = time.monotonic()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        return self.killed_at

    def pause(self) -> float:
        """SIGSTOP: the process freezes mid-whatever, as a long GC pause or a VM stall would."""
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True
        self.pauses.append((time.monotonic(), float("inf")))
        return self.pauses[-1][0]

    def resume(self) -> float:
        """SIGCONT; the time is read before the signal: the process may run (and report what it
        did on waking) before this one reads the clock again."""
        resumed = time.monotonic()
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False
        self.pauses[-1] = (self.pauses[-1][0], resumed)
        return resumed

    def close(self, timeout: float = 30) -> None:
        self.send("close")
        self.proc.wait(timeout)

    def cpu_seconds(self) -> float:
        """User + system CPU of the process so far (Linux /proc)."""
        return cpu_seconds(self.proc.pid)

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the process's stdout and stderr."""
        return self.out.read_text(errors="replace")[-chars:] if self.out.exists() else ""


M = TypeVar("M", bound=MemberProcess)


# --------------------------------------------------------------------------- a group


class Group(Generic[M]):
    """The member processes of one group, and what their audits say together.

    A subclass says how to start one worker (:meth:`start`)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.members: dict[str, M] = {}

    def popen(self, name: str, cmd: list[str], cwd: Path) -> tuple[subprocess.Popen[str], Path]:
        """Start ``cmd`` with stdin a pipe (its commands) and its output to ``<name>.out``."""
        out = self.workdir / f"{name}.out"
        with open(out, "w") as f:
            proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=f,
                                    stderr=subprocess.STDOUT, text=True,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
        return proc, out

    def add(self, member: M) -> M:
        self.members[member.name] = member
        return member

    def refresh(self) -> None:
        for m in self.members.values():
            if m.killed_at is None:
                m.refresh()

    def live(self) -> list[M]:
        """Running members: alive and not frozen."""
        return [m for m in self.members.values() if m.alive and not m.paused]

    def owned_once(self, partitions: set[TP], members: Iterable[M] | None = None) -> bool:
        """Every one of ``partitions``, and nothing else, owned by exactly one of ``members``
        (default: the live ones): the assignors' check (``check_owned_once``) on this moment."""
        held = {m.name: m.owned() for m in (self.live() if members is None else members)}
        return not check_owned_once(held, partitions) and set().union(*held.values()) <= partitions

    def is_stable(self, partitions: set[TP]) -> bool:
        """Every partition owned by exactly one live member, and no live member idle that
        could have a partition."""
        live = self.live()
        return self.owned_once(partitions, live) and (
            len(live) > len(partitions) or all(m.owned() for m in live)
        )

    def leader(self) -> M | None:
        for m in self.live():
            if m.is_leader():
                return m
        return None

    def describe(self) -> str:
        return "; ".join(
            f"{m.name}{'' if m.alive else '(dead)'}: {sorted(m.owned())}"
            for m in self.members.values()
        )

    def intervals(self, now: float | None = None) -> dict[TP, list[Interval]]:
        """Ownership intervals per partition, of every member that ever ran: an interval opens
        at an ``assign`` and ends at its ``revoke`` or ``lost``, the member's ``closed``, its
        kill -9, or ``now`` (default: the time of the call)."""
        end_now = time.monotonic() if now is None else now
        out: dict[TP, list[Interval]] = defaultdict(list)
        for m in self.members.values():
            open_: dict[TP, float] = {}
            end = m.killed_at
            for f in m.facts():
                e = f["e"]
                if e == "assign":
                    for tp in tps(f):
                        open_.setdefault(tp, f["t"])
                elif e in ("revoke", "lost"):
                    for tp in tps(f):
                        if tp in open_:
                            out[tp].append((open_.pop(tp), f["t"], m.name))
                elif e == "closed":
                    end = f["t"]
            for tp, start in open_.items():
                out[tp].append((start, end_now if end is None else end, m.name))
        return out

    def overlaps(self, ignore: Iterable[str] = ()) -> list[str]:
        """:func:`overlaps` of this group's intervals."""
        return overlaps(self.intervals(), ignore)

    def processed(self) -> dict[TP, Counter[int]]:
        """Partition -> offset -> how many times a member processed it (``msg`` facts)."""
        out: dict[TP, Counter[int]] = defaultdict(Counter)
        for m in self.members.values():
            for f in m.facts():
                if f["e"] == "msg":
                    out[(f["tp"][0], f["tp"][1])][f["o"]] += 1
        return out

    def stop_all(self) -> None:
        for m in self.members.values():
            if m.proc.poll() is None:
                with contextlib.suppress(OSError):
                    m.proc.kill()
                m.proc.wait(10)


# --------------------------------------------------------------------------- the invariants


def overlaps(intervals: Mapping[TP, list[Interval]], ignore: Iterable[str] = ()) -> list[str]:
    """The safety invariant: pairs of ownership intervals of one partition, by two members, that
    overlap (none is allowed between running members).

    ``ignore``: members whose overlap is expected and checked apart (a frozen zombie cannot
    fence itself while it is stopped)."""
    skip = set(ignore)
    bad = []
    for tp, all_ivs in intervals.items():
        ivs = sorted(iv for iv in all_ivs if iv[2] not in skip)
        reach: Interval = (float("-inf"), float("-inf"), "")  # the one reaching furthest so far
        for iv in ivs:
            s, _e, name = iv
            if name != reach[2] and s < reach[1]:
                bad.append(f"{tp}: {reach[2]} {reach[:2]} overlaps {name} {iv[:2]}")
            if iv[1] > reach[1]:
                reach = iv
    return bad


def missing(ends: Mapping[TP, int], processed: Mapping[TP, Counter[int]]) -> dict[TP, set[int]]:
    """No lost records: per partition, the offsets below its acknowledged end (``ends``, from
    :meth:`LoadProducer.end_offsets`) that no member processed; only partitions missing some."""
    out = {}
    for tp, end in ends.items():
        gone = set(range(end)) - set(processed.get(tp, {}))
        if gone:
            out[tp] = gone
    return out


# --------------------------------------------------------------------------- load


class LoadProducer:
    """Produces in a background thread every ``period`` seconds (falling behind, it skips
    rather than bursts):

    - ``partitions=None``: one keyed record, the partitioner choosing; every acknowledged
      offset is remembered (:meth:`end_offsets`), for :func:`missing`; an idempotent producer;
    - ``partitions=n``: one small record to each of partitions ``0..n-1``, so a partition that
      is owned and fetching yields a record within ``period``; nothing remembered (a bench's
      producer must cost little). A round is skipped while two rounds are still undelivered:
      on a machine that cannot carry the asked rate, records reach the broker fresh and
      steadily at a lower rate, rather than seconds old and in bursts (:attr:`queued`).

    :meth:`renew` replaces the client while producing (e.g. after a broker restart)."""

    def __init__(self, bootstrap: str, topic: str, *, period: float,
                 partitions: int | None = None) -> None:  # fmt: skip
        self.topic, self.period, self.partitions = topic, period, partitions
        self.acked: dict[TP, set[int]] = defaultdict(set)
        #: keyed mode: per partition, the monotonic time of its last acknowledgement
        self.last_acked: dict[TP, float] = {}
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
        if partitions is None:
            conf |= {"enable.idempotence": True, "linger.ms": 5}
        else:
            conf |= {"linger.ms": 2, "acks": 1, "socket.nagle.disable": True}
        self._conf = conf
        self._producer: Producer | None = Producer(conf)
        self._renew = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.count = 0
        self.dropped_rounds = 0
        #: ``partitions=n``: the records waiting in the client's queue after each round
        self.queued: list[int] = []

    @classmethod
    def keyed(cls, bootstrap: str, topic: str, rate_per_s: float = 200) -> LoadProducer:
        return cls(bootstrap, topic, period=1 / rate_per_s)

    @classmethod
    def every_partition(cls, bootstrap: str, topic: str, partitions: int,
                        period: float = 0.01) -> LoadProducer:  # fmt: skip
        return cls(bootstrap, topic, period=period, partitions=partitions)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            tp = (msg.topic() or "", msg.partition() or 0)
            self.acked[tp].add(msg.offset() or 0)
            self.last_acked[tp] = time.monotonic()

    def _tick(self, producer: Producer) -> None:
        if self.partitions is None:
            i = self.count
            producer.produce(self.topic, key=f"k{i % 97}".encode(), value=str(i).encode(),
                             on_delivery=self._delivered)  # fmt: skip
            self.count += 1
            return
        value = b"x" * 64
        if len(producer) >= 2 * self.partitions:
            # Two rounds are not delivered yet: the broker (or this machine) is slower than
            # the asked rate. Queueing more would make every record seconds old on arrival and
            # bring them to the broker in bursts; a bench wants fresh records at a lower rate.
            self.dropped_rounds += 1
            return
        try:
            for p in range(self.partitions):
                producer.produce(self.topic, value=value, partition=p)
                self.count += 1
        except BufferError:  # the broker fell behind (a loaded machine): skip this round
            self.dropped_rounds += 1
            producer.poll(self.period)

    def _run(self) -> None:
        producer = self._producer
        assert producer is not None
        nxt = time.monotonic()
        while not self._stop.is_set():
            if self._renew.is_set():
                self._renew.clear()
                producer.flush(1)  # what it cannot deliver now is dropped: never acknowledged
                producer = self._producer = Producer(self._conf)
            # Serve the reports that came while waiting first: ``len(producer)`` counts a
            # delivered record until its report is served, and would skip a round for it.
            producer.poll(0)
            self._tick(producer)
            producer.poll(0)
            if self.partitions is not None:
                self.queued.append(len(producer))
            nxt += self.period
            delay = nxt - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                nxt = time.monotonic()  # fell behind: do not burst
        producer.flush(30)

    def start(self) -> LoadProducer:
        self._thread.start()
        return self

    def renew(self) -> None:
        """Replace the client at the thread's next round. After a broker restart under load,
        librdkafka's idempotent producer can deliver nothing more to some partitions for a minute,
        its records queued: the load stops, not the group.
        Records the old client never had acknowledged are dropped, so :func:`missing` does not
        expect them."""
        self._renew.set()

    def silent_since(self, since: float) -> list[int]:
        """Keyed mode: partitions (of those ever acknowledged) without an acknowledgement after
        ``since``."""
        return sorted(p for (_, p), t in self.last_acked.items() if t <= since)

    def stop(self) -> None:
        """Stop producing; the producer (flushed by the thread) is destroyed here, so it does not
        outlive the broker however long this object lives."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)
        self._producer = None

    def end_offsets(self) -> dict[TP, int]:
        """Per partition, one past the highest acknowledged offset (keyed mode)."""
        return {tp: max(offs) + 1 for tp, offs in self.acked.items()}
