"""Drive groups of ``bench._worker`` processes on one broker and measure what their audits say.

Built on groupkit's one harness (groupkit.dev.harness: the audit, the member handle, the group,
the producer thread); what is the benches' own:

- :class:`Member` also keeps which assigned partitions have not yielded a record yet;
- :class:`Group` spawns ``bench._worker`` members (idle until told to ``subscribe``) and calls
  a group stable only when every partition is consuming again;
- :func:`measure` turns the facts around one event into the numbers the benches report. The
  load is ``LoadProducer.every_partition`` (in its own process, ``bench._pacer``): a partition
  that is owned and fetching yields a record within its period (consuming again), as long as
  the machine carries that rate (:func:`append_gaps` says whether it did).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from bench._common import commit
from bench._common import pct as pct  # the benches import it from here too
from groupkit.dev import harness
from groupkit.dev.harness import TP, AuditLog, MemberProcess, tps, wait_for
from groupkit.runtime import admin

ROOT = Path(__file__).resolve().parent.parent


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` (replication factor 1) and wait until its partitions are usable.

    Its records are stamped with the broker's append time (``LogAppendTime``), so a record's
    age when a member gets it (``bench/_worker.py``) counts from when the broker had it, not
    from the producer's call (on a loaded machine a record can wait in the producer's queue
    for seconds before it is sent)."""
    admin.create_topic(AdminClient({"bootstrap.servers": bootstrap}), topic, partitions,
                       config={"message.timestamp.type": "LogAppendTime"})  # fmt: skip


@dataclass
class Member(MemberProcess):
    waiting: set[TP] = field(default_factory=set)  # assigned, not yet consuming
    subscribed: bool = False

    def refresh(self) -> list[dict[str, Any]]:
        new = super().refresh()
        for fact in new:
            e = fact["e"]
            if e == "assign":
                self.waiting.update(tps(fact))
            elif e in ("revoke", "lost"):
                self.waiting.difference_update(tps(fact))
            elif e == "first":
                self.waiting.discard((fact["tp"][0], fact["tp"][1]))
            elif e == "sub":
                self.subscribed = True
            elif e == "closed":
                self.waiting.clear()
        return new


class Group(harness.Group[Member]):
    """Members of one group (one contender, one setting) on one topic."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int, workdir: Path,
                 kind: str, protocol: str, session_ms: int = 0, heartbeat_ms: int = 0,
                 control_topic: str = "__groupkit",
                 protocol_version: int | None = None) -> None:  # fmt: skip
        super().__init__(workdir)
        self.protocol_version = protocol_version
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.partitions, self.kind, self.protocol = partitions, kind, protocol  # kind: gk|native
        self.session_ms, self.heartbeat_ms = session_ms, heartbeat_ms
        self.control_topic = control_topic
        self.parts: set[TP] = {(topic, p) for p in range(partitions)}
        self._n = 0

    def spawn(self, instance_id: str | None = None, at_once: bool = False) -> Member:
        """``instance_id``: its ``group.instance.id`` (a static member). ``at_once``: it
        subscribes as soon as its consumer is built (a new worker), not when told to."""
        name = f"m{self._n:02d}"
        self._n += 1
        audit = self.workdir / f"{self.group}-{name}.jsonl"
        cmd = [
            sys.executable, "-m", "bench._worker", "--kind", self.kind,
            "--bootstrap", self.bootstrap, "--group", self.group, "--topic", self.topic,
            "--audit", str(audit), "--protocol", self.protocol,
            "--session-ms", str(self.session_ms), "--heartbeat-ms", str(self.heartbeat_ms),
            "--control-topic", self.control_topic,
            *(["--protocol-version", str(self.protocol_version)]
              if self.protocol_version is not None else []),
            *(["--instance-id", instance_id] if instance_id else []),
            *(["--at-once"] if at_once else []),
        ]  # fmt: skip
        proc, out = self.popen(f"{self.group}-{name}", cmd, ROOT)
        return self.add(Member(name, proc, AuditLog(audit), out))

    def start(self, n: int, timeout: float = 120) -> list[Member]:
        """Spawn ``n`` members, subscribe them once all are built, and wait until the group is
        stable; the members."""
        members = [self.spawn() for _ in range(n)]
        self.wait_ready(members, timeout)
        for m in members:
            m.send("subscribe")
        self.wait_stable(timeout=timeout)
        return members

    def wait_ready(self, ms: Iterable[Member], timeout: float = 120) -> None:
        ms = list(ms)

        def ready() -> bool:
            for m in ms:
                m.refresh()
                if m.proc.poll() is not None:
                    raise RuntimeError(f"{m.name} exited: {m.log_tail()}")
            return all(m.fact("ready") for m in ms)

        wait_for(ready, timeout, "members ready", step=0.05)

    def log_tail(self, m: Member) -> str:
        return m.log_tail()

    def live(self) -> list[Member]:
        return [m for m in super().live() if m.subscribed]

    def stable(self) -> bool:
        """Every partition owned by exactly one live member and consuming; no live member idle."""
        self.refresh()
        return self.is_stable(self.parts) and not any(m.waiting for m in self.live())

    def wait_stable(self, timeout: float, settle: float = 0.3) -> float:
        """Wait until stable and still stable ``settle`` seconds later; return the time."""
        t0 = time.monotonic()
        while True:
            wait_for(self.stable, timeout - (time.monotonic() - t0), f"{self.group} stable: "
                     + self.describe(), step=0.02)  # fmt: skip
            t = time.monotonic()
            time.sleep(settle)
            if self.stable():
                return t - t0

    def describe(self) -> str:
        parts = []
        for m in self.live():
            waiting = f" waiting {sorted(p for _, p in m.waiting)}" if m.waiting else ""
            parts.append(f"{m.name}: {sorted(p for _, p in m.owned())}{waiting}")
        return "; ".join(parts)


# --------------------------------------------------------------------------- measuring


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
    ivs = group.intervals(t_end)
    # (time the member got it, its age then in ms: how long after the broker appended it)
    firsts: dict[tuple[str, TP], list[tuple[float, float]]] = {}
    counts: list[tuple[float, int]] = []
    for m in group.members.values():
        for f in m.facts():
            if f["e"] == "first":
                age = f.get("age")
                firsts.setdefault((m.name, (f["tp"][0], f["tp"][1])), []).append(
                    (f["t"], math.nan if age is None else age)
                )
            elif f["e"] == "n":
                counts.append((f["t"], f["n"]))
    ready_at, owned_at = t0, t0
    moved = 0
    unowned = {"moved": 0.0, "stayed": 0.0}
    longest = 0.0
    ages: list[float] = []  # of each moved partition's first record under its new owner
    for p in sorted(group.parts):
        pv = ivs.get(p, [])
        before = _owner_at(pv, t0 - 1e-6)
        final = _owner_at(pv, t_end - 1e-6)
        if final is None:
            return {"ok": 0.0}
        is_moved = before is None or before[2] != final[2]
        moved += is_moved
        if final[0] > t0:
            owned_at = max(owned_at, final[0])
            fs = [f for f in firsts.get((final[2], p), []) if f[0] >= final[0]]
            first = min(fs) if fs else None
            ready_at = max(ready_at, first[0] if first else math.inf)
            if first is not None:
                ages.append(first[1])
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
        # The oldest of those first records, when its member got it (ms since the broker
        # appended it): the longest a record waited because of the event. Small while
        # "consuming again" is late: the new owner was waiting for a record to exist.
        "first_age_max_ms": max(ages) if ages else math.nan,
    }


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


def settle_load(below: float, at_most: float) -> dict[str, float]:
    """Wait (up to ``at_most`` seconds) for the 1-min load to fall to ``below``; the load then.

    Contenders run one after another: without this, each inherits the load the one before it
    left (1-min average 6 to 15 at the start of a 10 x 48 run's later contenders, against 1 to
    7 at the first), and the last one measured, groupkit, paid for it."""
    deadline = time.monotonic() + at_most
    while os.getloadavg()[0] > below and time.monotonic() < deadline:
        time.sleep(1.0)  # the kernel's average; no event to wait on
    return load()


@contextlib.contextmanager
def broker(bootstrap: str | None, state_dir: Path, extra: dict[str, str]) -> Any:
    """The bench's one broker: ``bootstrap`` if given, else a local one with ``extra``."""
    if bootstrap:
        yield bootstrap
        return
    from groupkit.dev.broker import LocalBroker, wait_clients_closed

    with LocalBroker(state_dir, extra_properties=extra) as b:
        try:
            yield b.bootstrap
        finally:
            # Every client of the bench must be gone first, or it retries the stopped broker for
            # the rest of the run ("Connect to ipv4#127.0.0.1:... failed").
            left = wait_clients_closed(10.0)
            if left:
                print(f"bench: {left} librdkafka client(s) outlived the run", file=sys.stderr)


def broker_pid(state_dir: Path) -> int | None:
    """The local broker's pid (None for a broker given by ``--bootstrap``)."""
    from groupkit.dev.broker import LocalBroker

    return LocalBroker(state_dir).status().pid if state_dir.exists() else None


def append_gaps(bootstrap: str, topic: str, partitions: Iterable[int], t0: float,
                t1: float) -> dict[str, float]:  # fmt: skip
    """Milliseconds between consecutive records of each of ``partitions`` that the broker
    appended between wall times ``t0`` and ``t1`` (the topic stamps append time): p50, p99 and
    max over all of them. A new owner is consuming again only once a record follows its
    position, so these gaps are the resolution of "consuming again" while that load ran."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-append-gaps",
                  "enable.auto.commit": False, "enable.partition.eof": True})  # fmt: skip
    try:
        asked = [TopicPartition(topic, p, int(t0 * 1000)) for p in partitions]
        starts = [tp for tp in c.offsets_for_times(asked, timeout=10) if tp.offset >= 0]
        c.assign(starts)
        last: dict[int, int] = {}
        gaps: list[float] = []
        open_parts = {tp.partition for tp in starts}
        end_ms = int(t1 * 1000)
        deadline = time.monotonic() + 60
        while open_parts and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                p = m.partition()
                if m.error() is not None or p not in open_parts:
                    open_parts.discard(p)  # end of the partition (or an error): done with it
                    continue
                ts = m.timestamp()[1]
                if ts > end_ms:
                    open_parts.discard(p)
                    continue
                if p in last:
                    gaps.append(float(ts - last[p]))
                last[p] = ts
    finally:
        c.close()
    if not gaps:
        return {"p50": math.nan, "p99": math.nan, "max": math.nan, "n": 0}
    return {"p50": pct(gaps, 0.5), "p99": pct(gaps, 0.99), "max": max(gaps), "n": len(gaps)}
