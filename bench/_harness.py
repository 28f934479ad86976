"""Drive groups of ``bench._worker`` processes on one broker and measure what their audits say.

- :class:`Member` tails one worker's audit file incrementally (no re-reads);
- :class:`Group` spawns members, sends them commands, waits for a stable group;
- :class:`Pacer` produces one record to every partition every ``period`` seconds, so a
  partition that is owned and fetching yields a record within ``period`` (consuming again);
- :func:`measure` turns the facts around one event into the numbers the benches report.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def wait_for(cond: Callable[[], bool], timeout: float, what: str, step: float = 0.02) -> float:
    t0 = time.monotonic()
    while time.monotonic() < t0 + timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(step)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    wait_for(lambda: topic in admin.list_topics(timeout=5).topics
             and len(admin.list_topics(topic, timeout=5).topics[topic].partitions) == partitions,
             30, f"metadata of {topic}")  # fmt: skip


@dataclass
class Member:
    name: str
    proc: subprocess.Popen[str]
    audit: Path
    killed_at: float | None = None
    facts: list[dict[str, Any]] = field(default_factory=list)
    owned: set[int] = field(default_factory=set)
    waiting: set[int] = field(default_factory=set)  # assigned, not yet consuming
    subscribed: bool = False
    closed: bool = False
    _pos: int = 0
    _partial: str = ""

    def refresh(self) -> None:
        try:
            with open(self.audit) as f:
                f.seek(self._pos)
                chunk = f.read()
                self._pos = f.tell()
        except FileNotFoundError:
            return
        if not chunk:
            return
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()
        for line in lines:
            try:
                fact = json.loads(line)
            except json.JSONDecodeError:  # a line cut by kill -9
                continue
            self.facts.append(fact)
            e = fact["e"]
            if e == "a":
                self.owned.update(fact["p"])
                self.waiting.update(fact["p"])
            elif e in ("r", "l"):
                self.owned.difference_update(fact["p"])
                self.waiting.difference_update(fact["p"])
            elif e == "f":
                self.waiting.discard(fact["p"])
            elif e == "sub":
                self.subscribed = True
            elif e == "closed":
                self.closed = True
                self.owned.clear()
                self.waiting.clear()

    @property
    def alive(self) -> bool:
        return self.killed_at is None and not self.closed and self.proc.poll() is None

    def fact(self, kind: str) -> dict[str, Any] | None:
        for f in reversed(self.facts):
            if f["e"] == kind:
                return f
        return None

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def kill(self) -> float:
        t = time.monotonic()
        self.proc.send_signal(signal.SIGKILL)
        self.killed_at = t
        self.proc.wait(10)
        return t

    def cpu_seconds(self) -> float:
        """User + system CPU of the process so far (Linux /proc)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / CLK_TCK
        except (OSError, IndexError, ValueError):
            return float("nan")

    def is_leader(self) -> bool:
        f = self.fact("lead")
        return bool(f and f["v"])


@dataclass
class Group:
    """Members of one group (one contender, one setting) on one topic."""

    bootstrap: str
    group: str
    topic: str
    partitions: int
    workdir: Path
    kind: str  # "gk" | "native"
    protocol: str
    session_ms: int = 0
    heartbeat_ms: int = 0
    control_topic: str = "__groupkit"
    members: dict[str, Member] = field(default_factory=dict)
    _n: int = 0

    def spawn(self) -> Member:
        name = f"m{self._n:02d}"
        self._n += 1
        audit = self.workdir / f"{self.group}-{name}.jsonl"
        cmd = [
            sys.executable, "-m", "bench._worker", "--kind", self.kind,
            "--bootstrap", self.bootstrap, "--group", self.group, "--topic", self.topic,
            "--audit", str(audit), "--protocol", self.protocol,
            "--session-ms", str(self.session_ms), "--heartbeat-ms", str(self.heartbeat_ms),
            "--control-topic", self.control_topic,
        ]  # fmt: skip
        out = open(self.workdir / f"{self.group}-{name}.out", "w")  # noqa: SIM115 - the child's
        proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=out,
                                stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
        out.close()
        m = Member(name, proc, audit)
        self.members[name] = m
        return m

    def refresh(self) -> None:
        for m in self.members.values():
            if m.killed_at is None:
                m.refresh()

    def wait_ready(self, ms: Iterable[Member], timeout: float = 120) -> None:
        ms = list(ms)

        def ready() -> bool:
            for m in ms:
                m.refresh()
                if m.proc.poll() is not None:
                    raise RuntimeError(f"{m.name} exited: {self.log_tail(m)}")
            return all(m.fact("ready") for m in ms)

        wait_for(ready, timeout, "members ready", step=0.05)

    def log_tail(self, m: Member) -> str:
        p = self.workdir / f"{self.group}-{m.name}.out"
        return p.read_text(errors="replace")[-2000:] if p.exists() else ""

    def live(self) -> list[Member]:
        return [m for m in self.members.values() if m.alive and m.subscribed]

    def stable(self) -> bool:
        """Every partition owned by exactly one live member and consuming; no live member idle."""
        self.refresh()
        live = self.live()
        seen: set[int] = set()
        for m in live:
            if m.owned & seen or m.waiting:
                return False
            seen |= m.owned
        if len(seen) != self.partitions:
            return False
        return len(live) > self.partitions or all(m.owned for m in live)

    def wait_stable(self, timeout: float, settle: float = 0.3) -> float:
        """Wait until stable and still stable ``settle`` seconds later; return the time."""
        t0 = time.monotonic()
        while True:
            wait_for(self.stable, timeout - (time.monotonic() - t0), f"{self.group} stable: "
                     + self.describe())  # fmt: skip
            t = time.monotonic()
            time.sleep(settle)
            if self.stable():
                return t - t0

    def describe(self) -> str:
        parts = []
        for m in self.live():
            waiting = f" waiting {sorted(m.waiting)}" if m.waiting else ""
            parts.append(f"{m.name}: {sorted(m.owned)}{waiting}")
        return "; ".join(parts)

    def leader(self) -> Member | None:
        for m in self.live():
            if m.is_leader():
                return m
        return None

    def stop_all(self) -> None:
        for m in self.members.values():
            if m.proc.poll() is None:
                with contextlib.suppress(Exception):
                    m.proc.kill()
                m.proc.wait(10)


class Pacer:
    """Produces one small record to every partition every ``period`` seconds, in a thread."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, period: float = 0.01) -> None:
        self.topic, self.partitions, self.period = topic, partitions, period
        self._p: Producer | None = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2,
                                             "acks": 1, "socket.nagle.disable": True})  # fmt: skip
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0
        self.dropped_rounds = 0

    def _run(self) -> None:
        producer = self._p
        assert producer is not None
        nxt = time.monotonic()
        value = b"x" * 64
        while not self._stop.is_set():
            try:
                for p in range(self.partitions):
                    producer.produce(self.topic, value=value, partition=p)
                    self.sent += 1
            except BufferError:  # the broker fell behind (a loaded machine): skip this round
                self.dropped_rounds += 1
                producer.poll(self.period)
            producer.poll(0)
            nxt += self.period
            delay = nxt - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                nxt = time.monotonic()  # fell behind: do not burst
        producer.flush(10)

    def start(self) -> Pacer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop producing and destroy the producer (flushed by the thread; the last reference
        goes here), so it does not outlive the broker: the bench keeps the Pacer object."""
        self._stop.set()
        self._thread.join(30)
        self._p = None


# --------------------------------------------------------------------------- measuring


def intervals(group: Group, now: float) -> dict[int, list[tuple[float, float, str]]]:
    """Ownership intervals per partition: (start, end, member)."""
    out: dict[int, list[tuple[float, float, str]]] = {}
    for m in group.members.values():
        open_: dict[int, float] = {}
        end_all = m.killed_at
        for f in m.facts:
            e = f["e"]
            if e == "a":
                for p in f["p"]:
                    open_.setdefault(p, f["t"])
            elif e in ("r", "l"):
                for p in f["p"]:
                    if p in open_:
                        out.setdefault(p, []).append((open_.pop(p), f["t"], m.name))
            elif e == "closed":
                end_all = f["t"]
        end = end_all if end_all is not None else now
        for p, s in open_.items():
            out.setdefault(p, []).append((s, end, m.name))
    return out


def _owner_at(ivs: list[tuple[float, float, str]], t: float) -> tuple[float, float, str] | None:
    for iv in ivs:
        if iv[0] <= t < iv[1]:
            return iv
    return None


def _gaps(ivs: list[tuple[float, float, str]], lo: float, hi: float) -> list[float]:
    """Lengths of the stretches of [lo, hi] covered by no interval."""
    gaps, cur = [], lo
    for s, e, _ in sorted(ivs):
        if e <= cur:
            continue
        if s > cur:
            gaps.append(min(s, hi) - cur)
        cur = max(cur, e)
        if cur >= hi:
            break
    if cur < hi:
        gaps.append(hi - cur)
    return [g for g in gaps if g > 0]


def measure(group: Group, t0: float, t_end: float, baseline_s: float = 1.0,
            bin_s: float = 0.1) -> dict[str, float]:  # fmt: skip
    """The numbers of one event at ``t0``, from every member's facts up to ``t_end``."""
    group.refresh()
    ivs = intervals(group, t_end)
    firsts: dict[tuple[str, int], list[float]] = {}
    counts: list[tuple[float, int]] = []
    for m in group.members.values():
        for f in m.facts:
            if f["e"] == "f":
                firsts.setdefault((m.name, f["p"]), []).append(f["t"])
            elif f["e"] == "n":
                counts.append((f["t"], f["n"]))
    ready_at, owned_at = t0, t0
    moved = 0
    unowned = {"moved": 0.0, "stayed": 0.0}
    longest = 0.0
    for p in range(group.partitions):
        pv = ivs.get(p, [])
        before = _owner_at(pv, t0 - 1e-6)
        final = _owner_at(pv, t_end - 1e-6)
        if final is None:
            return {"ok": 0.0}
        is_moved = before is None or before[2] != final[2]
        moved += is_moved
        if final[0] > t0:
            owned_at = max(owned_at, final[0])
            fs = [t for t in firsts.get((final[2], p), []) if t >= final[0]]
            ready_at = max(ready_at, min(fs) if fs else math.inf)
        g = _gaps(pv, t0, t_end)
        unowned["moved" if is_moved else "stayed"] += sum(g)
        longest = max(longest, max(g, default=0.0))
    # records/s: baseline over the second before the event, lowest bin until stable
    base = sum(n for t, n in counts if t0 - baseline_s <= t < t0) / baseline_s
    lo = base
    stable_t = ready_at if ready_at < math.inf else t_end
    b = t0
    while b < max(stable_t, t0 + bin_s):
        got = sum(n for t, n in counts if b <= t < b + bin_s) / bin_s
        lo = min(lo, got)
        b += bin_s
    return {
        "ok": 1.0 if ready_at < math.inf else 0.0,
        "stable_s": ready_at - t0,
        "owned_s": owned_at - t0,
        "longest_unowned_s": longest,
        "unowned_ps_moved": unowned["moved"],
        "unowned_ps_stayed": unowned["stayed"],
        "moved": float(moved),
        "base_rps": base,
        "dip": 1 - lo / base if base > 0 else float("nan"),
    }


def pct(xs: list[float], q: float) -> float:
    xs = sorted(x for x in xs if x == x)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    f = math.floor(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def commit() -> str:
    """The checked-out commit the bench ran (``+dirty`` with uncommitted changes)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, timeout=10).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, text=True, capture_output=True,
                               timeout=10).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def versions() -> dict[str, str]:
    import confluent_kafka

    import groupkit
    from groupkit.dev.broker import DEFAULT_KAFKA_VERSION

    return {
        "groupkit": groupkit.__version__,
        "confluent_kafka": confluent_kafka.version(),
        "librdkafka": confluent_kafka.libversion()[0],
        "kafka_broker": DEFAULT_KAFKA_VERSION,
        "commit": commit(),
    }


def load() -> dict[str, float]:
    one, five, fifteen = os.getloadavg()
    return {"load1": round(one, 2), "load5": round(five, 2), "load15": round(fifteen, 2)}


@contextlib.contextmanager
def broker(bootstrap: str | None, state_dir: Path, extra: dict[str, str]) -> Any:
    """The bench's one broker: ``bootstrap`` if given, else a local one with ``extra``."""
    if bootstrap:
        yield bootstrap
        return
    from groupkit.dev.broker import LocalBroker, wait_clients_closed

    b = LocalBroker(state_dir, extra_properties=extra)
    boot = b.start()
    try:
        yield boot
    finally:
        # Every client of the bench must be gone first, or it retries the stopped broker for
        # the rest of the run ("Connect to ipv4#127.0.0.1:... failed").
        left = wait_clients_closed(10.0)
        if left:
            print(f"bench: {left} librdkafka client(s) outlived the run", file=sys.stderr)
        b.stop()
