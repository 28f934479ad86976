"""Benchmark: the steady-state cost of a groupkit group as it grows.

1. **Simulated** (``GroupSim``, shared replay state, the runtime's defaults: cooperative,
   cooperative-sticky, 10 s session / 1 s heartbeat, a 1 s clock-skew allowance, a snapshot
   every half session as the runtime's leader writes them; one topic of 2 partitions per
   member), for each protocol version of ``--versions``: version 1 (every record in one control
   log) and version 2 (docs/protocol-v2.md: heartbeats in a liveness log that only the leader
   and its successors read; the main log carries member records on change, verdicts and the
   leader's lease). Groups of 10, 100, 1,000 and 5,000 members settle, then run ``--stretch``
   simulated seconds. Measured over the stretch: records/s and bytes/s appended to the main log,
   broken down into member records, assignment records, snapshots, tombstones, verdicts and
   leases, and to the liveness log (key + value bytes, no Kafka batch overhead); what a follower
   fetches per second (version 1: the whole log; version 2: the main log), what the leader and
   each successor fetch (version 2: both logs), and the broker's bytes out computed from them
   (main bytes × members + liveness bytes × its readers); a member's replay CPU per simulated
   second (the shared state's replay of the stretch, which every member does alike); one
   follower's Node calls (its step, and in version 2 whether it judges and its heartbeats'
   delivery reports) and the leader's (its step: heartbeat, planner check, snapshot encoding,
   tombstones, verdicts and lease; and in version 2 its reading of the liveness log). The
   report checks the simulated targets at 1,000 members: the broker's bytes out at most
   5 MB/s, a follower's protocol CPU at most 0.2 % of a core, the leader's at most 5 %. Then a
   newcomer joins with bounded catch-up (``GroupSim.join(..., bounded=True)``): the records it
   replays, the newest snapshot's size and its catch-up CPU. CPU is process time, so a shared
   machine inflates it less than wall time. Version 2 at 5,000 members takes hours of CPU on a
   small machine (every simulated member decides at every step whether it judges, sorting the
   live members): run it apart and merge with ``--sim-from``, as below.
2. **Real** (one local broker, members as ``bench/_worker.py`` processes via
   ``bench/_harness.py``, each group on its own control topic): groups of ``--real-sizes``
   members, per setting (``tuned``: 1 s / 100 ms, ``default``: 10 s / 1 s). No data records
   are produced: the cost is the group's own. Once every partition is owned once, over
   ``--window`` seconds: control records/s (the group's control partition's end offset at both
   ends), the control records' payload bytes/s (read back after the window), the broker's bytes
   out/s for the control topic (its JMX ``BytesOutPerSec`` count at both ends, read through the
   Attach API by ``bench/JmxCount.java``: librdkafka statistics of the control readers are not
   reachable, groupkit does not pass ``statistics.interval.ms`` to its internal clients) and
   each member process's CPU from ``/proc`` (the whole process: control thread, data consumer,
   the worker's ``poll()`` loop).

    python bench/scale.py            # full: sim 10..5,000; real 10 and 50 members (hours:
                                     # version 2 at 5,000 simulated members)
    python bench/scale.py --quick    # seconds; for CI (sim 10 and 100, real 3 members)
    # the sim alone (entry "sim"), version 2 without its 5,000 members, merged:
    python bench/scale.py --no-real --versions 1 --results-dir /tmp/v1
    python bench/scale.py --no-real --versions 2 --sim-sizes 10,100,1000 --results-dir /tmp/v2
    python bench/scale.py --sim-from /tmp/v1/scale.json /tmp/v2/scale.json
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient

from bench._common import Chart, begin, load_results, median, write_results
from bench._harness import Group, broker, broker_pid, create_topic, load, versions
from bench.join_age import log_end
from bench.rebalance import GK_DEFAULT, broker_properties
from groupkit.dev.harness import wait_for
from groupkit.protocol.keys import (
    KIND_ASSIGNMENT,
    KIND_HEARTBEAT,
    KIND_LEASE,
    KIND_MEMBER,
    KIND_SNAPSHOT,
    KIND_VERDICT,
)
from groupkit.protocol.node import Node
from groupkit.protocol.state import GroupState
from groupkit.runtime.config import default_clock_skew_ms
from groupkit.runtime.control_topic import partition_for_group
from groupkit.testing.logs import LogRecord
from groupkit.testing.sim import GroupSim

HERE = Path(__file__).resolve().parent
TICK_MS = 100  # GroupSim's default tick: how often every simulated member steps
KINDS = ("member", "assignment", "snapshot", "tombstone", "verdict", "lease", "heartbeat", "other")
#: the runtime's clock-skew allowance at the default session (config.py: a fifth of the session,
#: at most a second); version 2's members need one below the session
SKEW_MS = default_clock_skew_ms(GK_DEFAULT[0])
#: the issue's simulated targets, at 1,000 members: broker bytes out for groupkit's topics
#: (B/s), a follower's and the leader's protocol CPU (ms per second: 2 ms/s is 0.2 % of a core)
TARGET_MEMBERS = 1000
TARGET_BROKER_OUT = 5e6
TARGET_FOLLOWER_MS = 2.0
TARGET_LEADER_MS = 50.0


def kind_of(key: bytes | None, value: bytes | None) -> str:
    """Which of KINDS a control record is, from its key's kind byte (keys.encode_key)."""
    if not key or len(key) < 2:
        return "other"
    if value is None:
        return "tombstone"
    return {KIND_MEMBER: "member", KIND_ASSIGNMENT: "assignment", KIND_SNAPSHOT: "snapshot",
            KIND_VERDICT: "verdict", KIND_LEASE: "lease",
            KIND_HEARTBEAT: "heartbeat"}.get(key[1], "other")  # fmt: skip


def breakdown(records: list[tuple[bytes | None, bytes | None]], seconds: float,
              prefix: str = "") -> dict[str, Any]:  # fmt: skip
    """Records/s and bytes/s (key + value) of ``records`` over ``seconds``, total and by kind,
    each key prefixed with ``prefix``."""
    out: dict[str, Any] = {f"{prefix}records_s": len(records) / seconds,
                           f"{prefix}bytes_s": sum(len(k or b"") + len(v or b"")
                                                   for k, v in records) / seconds}  # fmt: skip
    for kind in KINDS:
        rs = [(k, v) for k, v in records if kind_of(k, v) == kind]
        out[f"{prefix}{kind}_records_s"] = len(rs) / seconds
        out[f"{prefix}{kind}_bytes_s"] = sum(len(k or b"") + len(v or b"") for k, v in rs) / seconds
    return out


# --------------------------------------------------------------------------- simulated


class TimedSim(GroupSim):
    """A GroupSim that times, while ``timing``, its shared state's replay of the main log (what
    every member replays; see :func:`time_node` for the rest)."""

    timing = False
    replay_cpu = 0.0

    def view(self) -> GroupState:
        st = self._view
        if not self.timing or st.offset + 1 >= self.visible():
            return super().view()
        t0 = time.process_time()
        st = super().view()
        self.replay_cpu += time.process_time() - t0
        return st


#: the Node calls a member makes as the simulator drives it: its step (heartbeat, planner
#: check, snapshot, tombstones, and in version 2 verdicts and the lease), and in version 2
#: whether it judges, the liveness log it reads while it does, and its heartbeats' reports
TIMED = ("step", "liveness_wanted", "feed_liveness", "heartbeat_confirmed")


def time_node(node: Node, cpu: dict[str, float], role: str) -> None:
    """Wrap ``node``'s :data:`TIMED` calls (instance attributes: the library is untouched) so
    their CPU adds to ``cpu[f"{role} {call}"]``."""
    for call in TIMED:
        fn = getattr(node, call)

        def timed(*args: Any, _fn: Any = fn, _at: str = f"{role} {call}", **kw: Any) -> Any:
            t0 = time.process_time()
            out = _fn(*args, **kw)
            cpu[_at] = cpu.get(_at, 0.0) + time.process_time() - t0
            return out

        setattr(node, call, timed)


def sim_run(members: int, stretch_s: float, session_ms: int, heartbeat_ms: int,
            version: int = 1) -> dict[str, Any]:  # fmt: skip
    partitions = 2 * members
    sim = TimedSim({"t0": partitions}, protocol="cooperative", assignor="cooperative-sticky",
                   shared_state=True, session_timeout_ms=session_ms,
                   heartbeat_interval_ms=heartbeat_ms, snapshot_every_ms=session_ms // 2,
                   max_clock_skew_ms=SKEW_MS, version=version)  # fmt: skip
    t0 = time.process_time()
    for i in range(members):
        sim.join(f"m{i:05d}")
    ticks = sim.settle(max_ticks=5_000)
    # one session more: every member heartbeats on its own timer, and by the newcomer's join
    # (after the stretch) the log is older than the catch-up window (1.5 sessions), as a
    # steady group's is; a younger log is replayed whole. In version 2 the judges have chosen
    # themselves by then and the lease runs.
    sim.tick(session_ms // sim.tick_ms)
    settle_cpu = time.process_time() - t0
    leader = sim.view().leader
    # version 2: who reads the liveness log (the leader and its successors); version 1: nobody
    # (every member reads the heartbeats in the one log)
    judges = sorted(m for m, sm in sim.members.items() if sm.live_pos is not None)
    # an ordinary follower: the middle one by id (the oldest members after the leader are its
    # successors and the heirs of its partitions, and step more)
    ordinary = [m for m in sorted(sim.members) if m != leader and m not in judges]
    probe = ordinary[len(ordinary) // 2]
    cpu: dict[str, float] = {}
    for m, sm in sim.members.items():
        role = "leader" if m == leader else "judge" if m in judges else "probe" if m == probe \
            else None  # fmt: skip
        if role is not None:
            time_node(sm.node, cpu, role)
    start, live_start = len(sim.log.records), len(sim.liveness.records)
    sim.timing = True
    wall0 = time.process_time()
    sim.tick(round(stretch_s * 1000 / sim.tick_ms))
    stretch_cpu = time.process_time() - wall0
    sim.timing = False
    assert not sim.violations()
    assert sim.view().leader == leader, "the leader changed during the stretch"
    stretch: list[LogRecord] = sim.log.records[start:]
    live: list[LogRecord] = sim.liveness.records[live_start:]
    seconds = stretch_s

    def ms_s(role: str, *calls: str) -> float:
        return sum(cpu.get(f"{role} {c}", 0.0) for c in calls or TIMED) / seconds * 1000

    replay = sim.replay_cpu / seconds * 1000
    others = [j for j in judges if j != leader]
    out: dict[str, Any] = {
        "version": version, "members": members, "partitions": partitions,
        "settle_ticks": ticks, "settle_cpu_s": settle_cpu, "stretch_s": seconds,
        "stretch_cpu_s": stretch_cpu, "generation": sim.view().generation,
        **breakdown([(r.key, r.value) for r in stretch], seconds),
        **breakdown([(r.key, r.value) for r in live], seconds, "live_"),
        "judges": len(judges),
        "replay_cpu_ms_per_s": replay,
        # the leader's Node.step alone, as measured before version 2 (planner check, snapshot
        # encoding, tombstones; version 2: verdicts and the lease too)
        "leader_cpu_ms_per_s": ms_s("leader", "step"),
        "leader_liveness_cpu_ms_per_s": ms_s("leader", "feed_liveness"),
        "leader_total_cpu_ms_per_s": replay + ms_s("leader"),
        "judge_total_cpu_ms_per_s": replay + ms_s("judge") / len(others) if others
        else float("nan"),
        "member_step_cpu_ms_per_s": ms_s("probe", "step"),
        "member_judge_check_cpu_ms_per_s": ms_s("probe", "liveness_wanted"),
        "follower_total_cpu_ms_per_s": replay + ms_s("probe"),
    }  # fmt: skip
    out["cpu_ms_per_s"] = {k: v / seconds * 1000 for k, v in sorted(cpu.items())}
    # what one member fetches: version 1, the one log; version 2, a follower the main log, the
    # leader and each successor the liveness log too
    out["member_fetch_bytes_s"] = out["bytes_s"]
    out["judge_fetch_bytes_s"] = out["bytes_s"] + out["live_bytes_s"]
    out["broker_out_bytes_s"] = out["bytes_s"] * members + out["live_bytes_s"] * len(judges)
    snaps = [r for r in sim.log.records if r.key and len(r.key) > 1 and r.key[1] == KIND_SNAPSHOT]
    out["snapshot_bytes"] = len(snaps[-1].value or b"") if snaps else 0
    log_bytes = sum(len(r.key or b"") + len(r.value or b"") for r in sim.log.records)
    out["log_records"], out["log_bytes"] = len(sim.log.records), log_bytes
    t1 = time.process_time()
    newcomer = sim.join("zz-newcomer", bounded=True)
    out["newcomer_catch_up_cpu_ms"] = (time.process_time() - t1) * 1000
    out["newcomer_catch_up"] = newcomer.catch_up
    out["newcomer_replayed"] = newcomer.replayed
    # version 1's bound: every member's heartbeats over the catch-up window
    out["replay_bound"] = members * 1.5 * session_ms / heartbeat_ms if version == 1 \
        else float("nan")  # fmt: skip
    return out


# --------------------------------------------------------------------------- real


def bytes_out(pid: int | None, topic: str) -> float:
    """The broker's BytesOutPerSec count for ``topic`` (bytes served to fetchers since start)."""
    if pid is None:
        return float("nan")
    name = f"kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec,topic={topic}"
    proc = subprocess.run(["java", str(HERE / "JmxCount.java"), str(pid), name],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    if proc.returncode != 0:
        print(f"  JMX read failed: {proc.stderr[-500:]}", flush=True)
        return float("nan")
    return float(proc.stdout.strip().rsplit("\t", 1)[1])


def received(pid: int) -> dict[str, int]:
    """The kernel's ``bytes_received`` of each TCP socket of process ``pid`` (``ss``), by the
    socket's local and peer address: what the member received over all of its clients."""
    out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=False).stdout
    got: dict[str, int] = {}
    sock: str | None = None
    for line in out.splitlines():
        if not line.startswith((" ", "\t")):
            fields = line.split()
            sock = f"{fields[3]}>{fields[4]}" if f"pid={pid}," in line else None
        elif sock is not None and "bytes_received:" in line:
            got[sock] = int(line.split("bytes_received:", 1)[1].split()[0])
    return got


def received_since(before: dict[str, int], after: dict[str, int]) -> int:
    """Bytes received between two :func:`received` reads (a socket opened since counts whole)."""
    return sum(n - before.get(k, 0) for k, n in after.items() if n >= before.get(k, 0))


def read_control(boot: str, topic: str, group_id: str, lo: int, hi: int) -> list[
    tuple[bytes | None, bytes | None]
]:  # fmt: skip
    """The records [lo, hi) of the group's control partition (every group's records on it)."""
    parts = len(AdminClient({"bootstrap.servers": boot}).list_topics(topic, timeout=10)
                .topics[topic].partitions)  # fmt: skip
    c = Consumer({"bootstrap.servers": boot, "group.id": "bench-scale-probe",
                  "enable.auto.commit": False})  # fmt: skip
    out: list[tuple[bytes | None, bytes | None]] = []
    try:
        c.assign([KTP(topic, partition_for_group(group_id, parts), lo)])
        deadline = time.monotonic() + 60
        while len(out) < hi - lo and time.monotonic() < deadline:
            for msg in c.consume(1000, 1.0):
                if msg.error() is None and msg.offset() < hi:
                    out.append((msg.key(), msg.value()))
    finally:
        c.close()
    return out


def settled(group: Group) -> bool:
    """Every member caught up, every partition owned by exactly one live member (no data is
    produced, so "consuming again" cannot be waited for as Group.stable does)."""
    group.refresh()
    live = group.live()
    for m in group.members.values():
        if m.proc.poll() is not None:
            raise RuntimeError(f"{m.name} exited: {group.log_tail(m)}")
    if len(live) != len(group.members) or not all(m.fact("caught") for m in live):
        return False
    return group.owned_once(group.parts, live)


def native_settled(group: Group) -> bool:
    """Every member of the native group alive and every partition owned by exactly one."""
    group.refresh()
    for m in group.members.values():
        if m.proc.poll() is not None:
            raise RuntimeError(f"{m.name} exited: {group.log_tail(m)}")
    live = group.live()
    return len(live) == len(group.members) and group.owned_once(group.parts, live)


def real_run(boot: str, pid: int | None, work: Path, members: int, setting: str,
             args: argparse.Namespace, version: int = 1) -> dict[str, Any]:  # fmt: skip
    """One real group of ``members`` at ``setting``, speaking protocol ``version``."""
    session, heartbeat = (args.session_ms, args.heartbeat_ms) if setting == "tuned" else GK_DEFAULT
    gid = f"bench-scale-{setting}-v{version}-{members}-{uuid.uuid4().hex[:6]}"
    control = f"__gk_{gid}"
    topic = f"bench-scale-{uuid.uuid4().hex[:6]}"
    create_topic(boot, topic, members)
    group = Group(boot, gid, topic, members, work, "gk", "cooperative", session, heartbeat,
                  control_topic=control, protocol_version=version)  # fmt: skip
    # The anchor: a native classic group (cooperative-sticky) of the same size and session,
    # on a topic of its own, idle over the same window.
    native = None
    if not args.no_native:
        ntopic = f"bench-scale-native-{uuid.uuid4().hex[:6]}"
        create_topic(boot, ntopic, members)
        native = Group(boot, f"{gid}-native", ntopic, members, work, "native",
                       "cooperative-sticky", session, heartbeat)  # fmt: skip
    # version 2's heartbeats and snapshots (config.py: the control topic's name, ".liveness")
    topics = [control, f"{control}.liveness"] if version == 2 else [control]
    t_start = time.monotonic()
    nms: list[Any] = []
    try:
        if native is not None:  # settled first, so that its join does not load our start
            nms = [native.spawn() for _ in range(members)]
            native.wait_ready(nms, timeout=args.start_timeout)
            for m in nms:
                m.send("subscribe")
            wait_for(lambda: native_settled(native), args.start_timeout,
                     f"{members} native members settled", step=0.2)  # fmt: skip
        ms = [group.spawn() for _ in range(members)]
        group.wait_ready(ms, timeout=args.start_timeout)
        for m in ms:
            m.send("subscribe")
        try:
            wait_for(lambda: settled(group), args.start_timeout, f"{members} members settled",
                     step=0.2)  # fmt: skip
        except AssertionError as e:  # say how far it got
            live = group.live()
            owned = [p for m in live for p in m.owned()]
            raise TimeoutError(
                f"{e}: {sum(bool(m.fact('caught')) for m in live)} of {members} caught up, "
                f"{len(set(owned))} of {members} partitions owned ({len(owned)} holdings), "
                f"{sum(m.is_leader() for m in live)} leading, "
                f"{len(live)} alive"
            ) from e
        start_s = time.monotonic() - t_start
        time.sleep(min(2.0, session / 1000))  # let the join's burst of records pass
        alive = [m for m in ms if m.alive]
        nalive = [m for m in nms if m.alive]
        cpu0, c0 = {m.name: m.cpu_seconds() for m in alive}, time.monotonic()
        ncpu0 = {m.name: m.cpu_seconds() for m in nalive}
        rx0 = {m.name: received(m.proc.pid) for m in alive}
        nrx0 = {m.name: received(m.proc.pid) for m in nalive}
        off0, t0 = log_end(boot, control, gid), time.monotonic()
        out0 = sum(bytes_out(pid, t) for t in topics)
        load0 = load()["load1"]
        time.sleep(args.window)
        off1, t1 = log_end(boot, control, gid), time.monotonic()
        rx1 = {m.name: received(m.proc.pid) for m in alive}
        nrx1 = {m.name: received(m.proc.pid) for m in nalive}
        out1 = sum(bytes_out(pid, t) for t in topics)
        # the CPU over its own interval: the JMX reads take seconds on a loaded machine
        cpu1, c1 = {m.name: m.cpu_seconds() for m in alive}, time.monotonic()
        ncpu1 = {m.name: m.cpu_seconds() for m in nalive}
        load1 = load()["load1"]
        seconds = t1 - t0
        group.refresh()
        leader = group.leader()
        cpus = {n: (cpu1[n] - cpu0[n]) / (c1 - c0) for n in cpu0}
        others = [c for n, c in cpus.items() if leader is None or n != leader.name]
        rx = {n: received_since(rx0[n], rx1[n]) / (t1 - t0) for n in rx0}
        rx_others = [b for n, b in rx.items() if leader is None or n != leader.name]
        ncpus = [(ncpu1[n] - ncpu0[n]) / (c1 - c0) for n in ncpu0]
        nrx = [received_since(nrx0[n], nrx1[n]) / (t1 - t0) for n in nrx0]
        records = read_control(boot, control, gid, off0, off1)
        settled_still = settled(group)
    finally:
        group.stop_all()
        if native is not None:
            native.stop_all()
    out: dict[str, Any] = {
        "members": members, "setting": setting, "session_ms": session, "heartbeat_ms": heartbeat,
        "version": version,
        # kernel counters, every client of the process (data consumer, control clients, admin)
        "follower_rx_bytes_s": median(rx_others) if rx_others else float("nan"),
        "follower_rx_bytes_s_max": max(rx_others, default=float("nan")),
        "leader_rx_bytes_s": rx[leader.name] if leader else float("nan"),
        "start_s": start_s, "window_s": seconds, "settled_after_window": settled_still,
        "control_records_s": (off1 - off0) / seconds,
        **breakdown(records, seconds),
        "broker_out_bytes_s": (out1 - out0) / seconds,
        "member_cpu_pct_median": median(others) * 100,
        "member_cpu_pct_max": max(others, default=float("nan")) * 100,
        "leader_cpu_pct": cpus[leader.name] * 100 if leader else float("nan"),
        "members_cpu_pct_total": sum(cpus.values()) * 100,
        "load1_window": [load0, load1],
        # the native classic group's members, over the same window (nan: not run)
        "native_cpu_pct_median": median(ncpus) * 100 if ncpus else float("nan"),
        "native_cpu_pct_max": max(ncpus, default=float("nan")) * 100,
        "native_rx_bytes_s": median(nrx) if nrx else float("nan"),
    }  # fmt: skip
    out["follower_native_cpu"] = out["member_cpu_pct_median"] / out["native_cpu_pct_median"] \
        if ncpus and out["native_cpu_pct_median"] > 0 else float("nan")  # fmt: skip
    out["follower_native_rx"] = out["follower_rx_bytes_s"] / out["native_rx_bytes_s"] \
        if nrx and out["native_rx_bytes_s"] > 0 else float("nan")  # fmt: skip
    out["broker_out_per_log_byte"] = out["broker_out_bytes_s"] / out["bytes_s"] / members \
        if out["bytes_s"] else float("nan")  # fmt: skip
    return out


# --------------------------------------------------------------------------- growth


def exponent(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of log(y) on log(x): y ∝ x^slope."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    var = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / var if var else float("nan")


def shape(k: float) -> str:
    if k != k:
        return "(one size only)"
    return "linearly" if abs(k - 1) < 0.05 else ("faster than linearly" if k > 1 else
                                                  "slower than linearly")  # fmt: skip


def growth(sim: list[dict[str, Any]], real: list[dict[str, Any]]) -> list[str]:
    """The "how the cost grows" paragraph of version 1, from the numbers (``sim``: version 1's
    runs)."""
    if not sim:
        return []

    def k(key: str) -> float:
        return exponent([(r["members"], r[key]) for r in sim])

    big, small = sim[-1], sim[0]
    n = big["members"]
    per_member_hb = big["member_records_s"] / n
    hb_bytes = big["member_bytes_s"] / max(big["member_records_s"], 1e-9)
    lines = [
        "### How the cost grows: version 1",
        "",
        f"Fitted exponents over the simulated sizes ({', '.join(str(r['members']) for r in sim)} "
        f"members; cost ∝ members^k): control records/s k = {k('records_s'):.2f}, log "
        f"bytes/s (what every member fetches) k = {k('bytes_s'):.2f}, broker bytes out "
        f"k = {k('broker_out_bytes_s'):.2f}, a member's replay CPU k = "
        f"{k('replay_cpu_ms_per_s'):.2f}, the leader's step CPU k = "
        f"{k('leader_cpu_ms_per_s'):.2f}, snapshot size k = {k('snapshot_bytes'):.2f}, "
        f"records a newcomer replays k = {k('newcomer_replayed'):.2f}.",
        "",
        f"- Records/s ∝ members / heartbeat: each member writes one heartbeat a heartbeat "
        f"interval ({per_member_hb:.2f} records/s a member at {n:,}, {hb_bytes:.0f} B each); "
        f"assignment records are {big['assignment_records_s']:.2f}/s and snapshots "
        f"{big['snapshot_records_s']:.2f}/s (one per half session) whatever the size.",
        f"- Log bytes/s (what each member fetches) grow {shape(k('bytes_s'))}: heartbeats are "
        f"∝ members and so is the snapshot written every half session ({small['snapshot_bytes']:,}"
        f" B at {small['members']:,}, {big['snapshot_bytes']:,} B at {n:,}); snapshots are "
        f"{big['snapshot_bytes_s'] / big['bytes_s'] * 100:.0f}% of the log's bytes at {n:,}.",
        f"- Broker bytes out ∝ members²: every member fetches every record of its group "
        f"({big['broker_out_bytes_s'] / 1e6:,.1f} MB/s at {n:,} members, "
        f"{small['broker_out_bytes_s'] / 1e3:,.1f} kB/s at {small['members']}). This is the "
        "term that limits a group's size: a member's fetch is ∝ members, the broker's ∝ members².",
        f"- A member's replay CPU ∝ members (it decodes every heartbeat): "
        f"{big['replay_cpu_ms_per_s']:.0f} ms per second at {n:,} members, i.e. "
        f"{big['replay_cpu_ms_per_s'] / 10:.1f}% of a core for the control thread alone. The "
        f"leader's step adds {big['leader_cpu_ms_per_s']:.0f} ms/s at {n:,} (its heartbeat and "
        f"planner check at every step, a simulated tick of {TICK_MS} ms, and the snapshot "
        "encoding every half session); an ordinary follower's step (its heartbeat) is "
        f"{small['member_step_cpu_ms_per_s']:.2f} ms/s at {small['members']:,} and "
        f"{big['member_step_cpu_ms_per_s']:.2f} ms/s at {n:,}.",
        f"- A newcomer replays the records after the snapshot it restores: ∝ members, and set by "
        f"the snapshot's age, not the log's: {big['newcomer_replayed']:,} at {n:,} "
        f"({big['newcomer_replayed'] / big['records_s']:.1f} s of the log: this run's join came "
        f"that long after a snapshot; a snapshot is at most half a session old, "
        f"{n * GK_DEFAULT[0] // 2 // GK_DEFAULT[1]:,} records; the replay bound members × 1.5 × "
        f"session / heartbeat = {big['replay_bound']:,.0f}).",
    ]
    if real:
        for setting in sorted({r["setting"] for r in real}):
            rs = sorted((r for r in real if r["setting"] == setting), key=lambda r: r["members"])
            if len(rs) < 2:
                continue
            a, b = rs[0], rs[-1]
            ratio = b["members"] / a["members"]
            lines.append(
                f"- Real, {setting} ({a['session_ms']}/{a['heartbeat_ms']} ms): from "
                f"{a['members']} to {b['members']} members (×{ratio:.3g}) control records/s "
                f"×{b['control_records_s'] / a['control_records_s']:.1f}, broker bytes out "
                f"×{b['broker_out_bytes_s'] / a['broker_out_bytes_s']:.1f} (members² would be "
                f"×{ratio ** 2:.3g}), a member's CPU ×"
                f"{b['member_cpu_pct_median'] / a['member_cpu_pct_median']:.1f}.")  # fmt: skip
    for r in real:
        lines.append(
            f"- Real, {r['setting']}, {r['members']} members: the broker served "
            f"{r['broker_out_per_log_byte']:.2f} × (log bytes × members) (1: each member "
            "fetched each record once, Kafka's framing aside); "
            f"{r['control_records_s']:.0f} records/s, "
            f"{r['broker_out_bytes_s'] / 1e3:.0f} kB/s out, a member "
            f"{r['member_cpu_pct_median']:.1f}% of a core.")  # fmt: skip
    return lines


def growth_v2(sim: list[dict[str, Any]]) -> list[str]:
    """The "how the cost grows" paragraph of version 2 (``sim``: its runs)."""
    if not sim:
        return []

    def k(key: str) -> float:
        return exponent([(r["members"], r[key]) for r in sim])

    big, small = sim[-1], sim[0]
    n = big["members"]
    hb_bytes = big["live_bytes_s"] / max(big["live_records_s"], 1e-9)
    return [
        "### How the cost grows: version 2",
        "",
        f"Fitted exponents over the simulated sizes ({', '.join(str(r['members']) for r in sim)} "
        f"members; cost ∝ members^k): main-log bytes/s (what a follower fetches) k = "
        f"{k('bytes_s'):.2f}, liveness-log bytes/s k = {k('live_bytes_s'):.2f}, broker bytes "
        f"out k = {k('broker_out_bytes_s'):.2f}, a follower's protocol CPU k = "
        f"{k('follower_total_cpu_ms_per_s'):.2f}, the leader's k = "
        f"{k('leader_total_cpu_ms_per_s'):.2f}.",
        "",
        f"- The main log carries a lease every session / 3 "
        f"({big['lease_records_s']:.2f}/s), a snapshot every half session "
        f"({big['snapshot_records_s']:.2f}/s, {big['snapshot_bytes']:,} B at {n:,}), and "
        f"member records and verdicts only on change ({big['member_records_s']:.2f} and "
        f"{big['verdict_records_s']:.2f}/s in the steady stretch): "
        f"{small['bytes_s'] / 1e3:.2f} kB/s at {small['members']:,} members, "
        f"{big['bytes_s'] / 1e3:.2f} kB/s at {n:,}, "
        f"{big['snapshot_bytes_s'] / max(big['bytes_s'], 1e-9) * 100:.0f}% of it snapshots.",
        f"- Heartbeats go to the liveness log, one a member a heartbeat interval "
        f"({big['live_records_s']:,.0f}/s at {n:,}, {hb_bytes:.0f} B each), read by "
        f"{big['judges']} members (the leader and its successors) instead of all of them.",
        f"- Broker bytes out = main bytes × members + liveness bytes × judges: "
        f"{big['broker_out_bytes_s'] / 1e3:,.1f} kB/s at {n:,} members "
        f"(main {big['bytes_s'] * n / 1e3:,.1f}, liveness "
        f"{big['live_bytes_s'] * big['judges'] / 1e3:,.1f}): every member still fetches the "
        "snapshots, whose size is ∝ members, so the main term grows as members².",
        f"- A follower's CPU at {n:,}: replay {big['replay_cpu_ms_per_s']:.2f} ms/s, its step "
        f"{big['member_step_cpu_ms_per_s']:.2f} ms/s, and its check of whether it judges "
        f"(Node.liveness_wanted, every step) {big['member_judge_check_cpu_ms_per_s']:.2f} ms/s. "
        f"The leader's: step {big['leader_cpu_ms_per_s']:.2f} ms/s, reading the liveness log "
        f"{big['leader_liveness_cpu_ms_per_s']:.2f} ms/s.",
    ]


def targets(sim: list[dict[str, Any]]) -> list[str]:
    """The simulated targets at :data:`TARGET_MEMBERS` members, one pass/fail line each per
    version run."""
    out = []
    for v in sorted({r["version"] for r in sim}):
        r = next((r for r in sim if r["version"] == v and r["members"] == TARGET_MEMBERS), None)
        if r is None:
            out.append(f"- Target, version {v}: {TARGET_MEMBERS:,} members not simulated.")
            continue
        checks = [
            ("broker bytes out for groupkit's topics", r["broker_out_bytes_s"] / 1e6,
             TARGET_BROKER_OUT / 1e6, "MB/s"),
            ("a follower's protocol CPU (replay + Node calls)",
             r["follower_total_cpu_ms_per_s"] / 10, TARGET_FOLLOWER_MS / 10, "% of a core"),
            ("the leader's protocol CPU (replay + Node calls)",
             r["leader_total_cpu_ms_per_s"] / 10, TARGET_LEADER_MS / 10, "% of a core"),
        ]  # fmt: skip
        for what, got, limit, unit in checks:
            verdict = "PASS" if got <= limit else "FAIL"
            out.append(f"- Target, version {v}, {TARGET_MEMBERS:,} simulated members, {what}: "
                       f"{got:.3g} {unit} (at most {limit:g}): {verdict}")  # fmt: skip
    return out


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="sim 10 and 100, real 3 members, seconds")
    ap.add_argument("--sim-sizes", default="10,100,1000,5000")
    ap.add_argument("--versions", default="1,2",
                    help="the protocol versions simulated at each size")  # fmt: skip
    ap.add_argument("--stretch", type=float, default=10.0, help="simulated seconds measured")
    ap.add_argument("--real-sizes", default="10,50")
    ap.add_argument("--settings", default="tuned,default")
    ap.add_argument("--real-versions", default="1",
                    help="the protocol versions of the real groups, each size run for each "
                    "in the same run (e.g. 1,2)")  # fmt: skip
    ap.add_argument("--window", type=float, default=60.0, help="real seconds measured")
    ap.add_argument("--start-timeout", type=float, default=300.0)
    ap.add_argument("--session-ms", type=int, default=1000, help="tuned session timeout")
    ap.add_argument("--heartbeat-ms", type=int, default=100, help="tuned heartbeat interval")
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument(
        "--no-native",
        action="store_true",
        help="no native classic group beside each real group (the anchor)",
    )
    ap.add_argument("--no-sim", action="store_true")
    ap.add_argument("--sim-from", type=Path, nargs="*", default=[],
                    help="report the sim results of these scale.json files (a later file's "
                    "version and size replaces an earlier's) instead of running the sim: the "
                    "sim and the real runs may run as separate processes at once")  # fmt: skip
    ap.add_argument("--real-from", type=Path, nargs="*", default=[],
                    help="likewise for the real results")  # fmt: skip
    ap.add_argument("--bootstrap", help="use this broker (no JMX bytes out then)")
    ap.add_argument("--results-dir", type=Path, default=None)
    ap.add_argument("--label", help="the result set's entry (default: default, quick, or sim or "
                    "real when only that part is run or merged, so a part alone never replaces "
                    "the entry that holds both)")  # fmt: skip
    ap.add_argument("--note", action="append", default=[], help="a line for the notes")
    args = ap.parse_args()
    if args.quick:
        args.sim_sizes, args.stretch, args.real_sizes = "10,100", 5.0, "3"
        args.settings, args.window = "tuned", 5.0
    sizes = [int(s) for s in args.sim_sizes.split(",") if s.strip()]
    protocol_versions = [int(v) for v in args.versions.split(",") if v.strip()]
    real_sizes = [int(s) for s in args.real_sizes.split(",") if s.strip()]
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    real_versions = [int(v) for v in args.real_versions.split(",") if v.strip()]
    started = begin()
    load_before = load()
    t_start = time.monotonic()
    sim: list[dict[str, Any]] = []
    real: list[dict[str, Any]] = []
    real_failed: list[str] = []
    if args.sim_from or args.real_from:
        sim_docs = [e for p in args.sim_from for e in _entries(p)]
        real_docs = [e for p in args.real_from for e in _entries(p)]
        sim = list({(r["version"], r["members"]): r for d in sim_docs for r in d["sim"]}
                   .values())  # fmt: skip
        real = list({(r["setting"], r.get("version", 1), r["members"]): r
                     for d in real_docs for r in d["real"]}.values())  # fmt: skip
        real_failed = [f for d in real_docs for f in d.get("real_failed", [])]
        first = sim_docs[0] if sim_docs else {}
        report(sorted(sim, key=lambda r: (r["members"], r["version"])), real, real_failed, args,
               first.get("stamp", started), first.get("load_after_sim", load_before),
               sum(d.get("seconds", 0.0) for d in sim_docs + real_docs),
               [x for d in real_docs for x in d.get("load_during_real", [])])  # fmt: skip
        return
    for n in sizes if not args.no_sim else []:
        for v in protocol_versions:
            r = sim_run(n, args.stretch, *GK_DEFAULT, version=v)
            sim.append(r)
            print(f"  sim v{v} {n:,}: main {r['records_s']:.1f} records/s "
                  f"{r['bytes_s'] / 1e3:.2f} kB/s, liveness {r['live_records_s']:.0f} records/s, "
                  f"broker out {r['broker_out_bytes_s'] / 1e3:.1f} kB/s, leader "
                  f"{r['leader_total_cpu_ms_per_s']:.1f} ms/s, follower "
                  f"{r['follower_total_cpu_ms_per_s']:.2f} ms/s, newcomer replayed "
                  f"{r['newcomer_replayed']} ({r['settle_cpu_s'] + r['stretch_cpu_s']:.0f} s "
                  f"CPU), load {load()['load1']}", flush=True)  # fmt: skip
    load_sim = load()
    if not args.no_real:
        with tempfile.TemporaryDirectory(prefix="gk-bench-scale-") as tmp:
            work = Path(tmp)
            props = broker_properties(args.session_ms, args.heartbeat_ms)
            with broker(args.bootstrap, work / "broker", props) as boot:
                pid = None if args.bootstrap else broker_pid(work / "broker")
                for setting, n, v in [(s, n, v) for s in settings for n in real_sizes
                                      for v in real_versions]:  # fmt: skip
                    try:
                        r = real_run(boot, pid, work, n, setting, args, v)
                    except (AssertionError, TimeoutError, RuntimeError) as e:
                        real_failed.append(f"{setting} v{v} {n}: {e}"[:300])
                        print(f"  real {setting} v{v} {n}: FAILED {e}"[:300], flush=True)
                        continue
                    real.append(r)
                    print(f"  real {setting} v{v} {n}: {r['control_records_s']:.0f} records/s, "
                          f"broker out {r['broker_out_bytes_s'] / 1e3:.1f} kB/s, follower rx "
                          f"{r['follower_rx_bytes_s'] / 1e3:.2f} kB/s (leader "
                          f"{r['leader_rx_bytes_s'] / 1e3:.2f}), member CPU "
                          f"{r['member_cpu_pct_median']:.1f}% (leader "
                          f"{r['leader_cpu_pct']:.1f}%; native "
                          f"{r['native_cpu_pct_median']:.2f}%, ×{r['follower_native_cpu']:.1f}), "
                          f"started in {r['start_s']:.0f} s, "
                          f"load {r['load1_window']}", flush=True)  # fmt: skip
    report(sim, real, real_failed, args, started, load_sim, time.monotonic() - t_start)


def _entries(path: Path) -> list[dict[str, Any]]:
    """The entries of a scale result set (each with its ``sim`` and ``real`` runs), their runs
    in today's terms: a run written before version 2 was simulated is version 1's, and its
    ``heartbeat_*`` counts are of its member records."""
    entries = list(load_results(path)["settings"].values())
    for r in [r for e in entries for r in (*e.get("sim", ()), *e.get("real", ()))]:
        if "member_records_s" not in r and "heartbeat_records_s" in r:
            r["member_records_s"] = r.pop("heartbeat_records_s")
            r["member_bytes_s"] = r.pop("heartbeat_bytes_s")
    for r in [r for e in entries for r in e.get("sim", ())]:
        if "version" not in r:  # version 1's: no liveness log; a follower's CPU is its replay
            r.update(version=1, live_records_s=0.0, live_bytes_s=0.0, judges=0,
                     judge_fetch_bytes_s=r["bytes_s"],
                     follower_total_cpu_ms_per_s=r["replay_cpu_ms_per_s"]
                     + r["member_step_cpu_ms_per_s"],
                     leader_total_cpu_ms_per_s=r["replay_cpu_ms_per_s"]
                     + r["leader_cpu_ms_per_s"])  # fmt: skip
    return entries


def label(args: argparse.Namespace) -> str:
    """The entry a run writes: ``--label``, else "quick", else "default" for a run (or merge)
    of both parts and "sim" or "real" for one part alone, so that a run of the sim alone keeps
    the real measurements of the "default" entry."""
    if args.label:
        return str(args.label)
    if args.quick:
        return "quick"
    merged = bool(args.sim_from or args.real_from)
    has_sim = bool(args.sim_from) if merged else not args.no_sim
    has_real = bool(args.real_from) if merged else not args.no_real
    return "default" if has_sim == has_real else "sim" if has_sim else "real"


def native_cells(r: dict[str, Any]) -> list[object]:
    """The native anchor's cells of a real row: its median member's CPU and received kB/s,
    and the groupkit follower's over them ("" for a run without the anchor)."""
    if math.isnan(r.get("native_cpu_pct_median", float("nan"))):
        return ["", "", "", ""]
    return [f"{r['native_cpu_pct_median']:.2f}% (max {r['native_cpu_pct_max']:.2f}%)",
            f"{r['follower_native_cpu']:.1f}×", round(r["native_rx_bytes_s"] / 1e3, 2),
            f"{r['follower_native_rx']:.1f}×"]  # fmt: skip


def report(sim: list[dict[str, Any]], real: list[dict[str, Any]], real_failed: list[str],
           args: argparse.Namespace, started: dict[str, Any], load_sim: dict[str, float],
           seconds: float, loads: list[float] | None = None,
           vers: dict[str, str] | None = None) -> None:  # fmt: skip
    """Write the run's entry (``vers``: the versions, else this checkout's)."""
    vers = vers or versions()
    columns = ["run", "members", "session/hb ms", "main rec/s", "member rec/s",
               "assignment rec/s", "snapshot rec/s", "verdict rec/s", "lease rec/s",
               "main kB/s", "liveness rec/s", "liveness kB/s", "follower fetch kB/s",
               "judge fetch kB/s", "broker out kB/s", "leader CPU", "follower CPU",
               "replay CPU", "snapshot B", "newcomer replayed", "follower rx kB/s",
               "leader rx kB/s", "native CPU", "follower / native CPU", "native rx kB/s",
               "follower / native rx"]  # fmt: skip
    rows: list[list[object]] = []
    for r in sim:
        rows.append([f"sim v{r['version']}", r["members"], f"{GK_DEFAULT[0]}/{GK_DEFAULT[1]}",
                     round(r["records_s"], 1), round(r["member_records_s"], 1),
                     round(r["assignment_records_s"], 2), round(r["snapshot_records_s"], 2),
                     round(r.get("verdict_records_s", 0.0), 2),
                     round(r.get("lease_records_s", 0.0), 2), round(r["bytes_s"] / 1e3, 2),
                     round(r["live_records_s"], 1), round(r["live_bytes_s"] / 1e3, 2),
                     round(r["member_fetch_bytes_s"] / 1e3, 2),
                     round(r["judge_fetch_bytes_s"] / 1e3, 2),
                     round(r["broker_out_bytes_s"] / 1e3, 1),
                     f"{r['leader_total_cpu_ms_per_s']:.2f} ms/s",
                     f"{r['follower_total_cpu_ms_per_s']:.2f} ms/s",
                     f"{r['replay_cpu_ms_per_s']:.2f} ms/s", r["snapshot_bytes"],
                     f"{r['newcomer_replayed']} ({r['newcomer_catch_up']})", "", "",
                     "", "", "", ""])  # fmt: skip
    for r in real:
        rx = [
            round(r.get(k, float("nan")) / 1e3, 2)
            for k in ("follower_rx_bytes_s", "leader_rx_bytes_s")
        ]
        rows.append([f"real {r['setting']} v{r.get('version', 1)}", r["members"],
                     f"{r['session_ms']}/{r['heartbeat_ms']}", round(r["control_records_s"], 1),
                     round(r["member_records_s"], 1), round(r["assignment_records_s"], 2),
                     round(r["snapshot_records_s"], 2), "", "", round(r["bytes_s"] / 1e3, 2),
                     "", "", round(r["bytes_s"] / 1e3, 2), round(r["bytes_s"] / 1e3, 2),
                     round(r["broker_out_bytes_s"] / 1e3, 1), f"{r['leader_cpu_pct']:.1f}%",
                     f"{r['member_cpu_pct_median']:.1f}% (max {r['member_cpu_pct_max']:.1f}%)",
                     "", "", "", *rx, *native_cells(r)])  # fmt: skip
    if not rows:  # every run failed: the table still says so
        rows.append(["none", 0, "", *[""] * (len(columns) - 3)])
    loads = loads if loads is not None else [x for r in real for x in r["load1_window"]]
    real_note = (
        f"real: one local broker (Kafka {vers['kafka_broker']}), members are "
        "bench/_worker.py processes (cooperative, cooperative-sticky), one data partition a "
        "member and no data produced; each group on its own control topic. records/s: the "
        "control partition's end offset over the window; kB/s by kind: the window's records "
        "read back (key + value); broker out: the broker's JMX BytesOutPerSec count for the "
        "control topic (Attach API, bench/JmxCount.java; n/a with --bootstrap), i.e. record "
        "batches served to fetchers, the members' control readers; leader / member CPU: "
        "/proc utime + stime of the whole process over the window, % of one core (median of "
        f"the non-leaders, and their max). Window {args.window:.0f} s after settling. "
        "real v2: protocol version 2 (docs/protocol-v2.md); broker out adds its liveness "
        "topic. follower / leader rx: the kernel's bytes_received (ss) over every TCP socket "
        "of the member's process (all of its clients), per second of the window; follower: "
        "the median of the non-leaders (in version 2 the leader's two successors, which read "
        "the liveness topic too, are among them). native: a native classic group "
        "(confluent-kafka Consumer, cooperative-sticky, the same session and heartbeat, one "
        "partition a member of a topic of its own), started and settled before the groupkit "
        "group and idle over the same window; its CPU and rx are the median member's; "
        "follower / native: the groupkit follower's median over the native member's (the "
        "bench's workers are alike: poll(0.1) in a loop, auto-commit every 200 ms)."
    )
    notes = [
        f"sim: GroupSim, shared replay state, cooperative / cooperative-sticky, session "
        f"{GK_DEFAULT[0]} ms, heartbeat {GK_DEFAULT[1]} ms, clock-skew allowance {SKEW_MS} ms "
        f"(the runtime's defaults), a snapshot every {GK_DEFAULT[0] // 2} ms, 2 partitions a "
        "member, protocol version 1 (sim v1: every record in one control log) and 2 (sim v2, "
        "docs/protocol-v2.md: heartbeats in a liveness log that the leader and its successors "
        "read; member records on change, verdicts and the lease every session / 3 in the main "
        f"log); settled plus one session, then {args.stretch:.0f} simulated s measured. Bytes "
        "are key + value (no Kafka batch overhead). main: the control log every member reads; "
        "liveness: version 2's heartbeat log. follower fetch: what a follower reads (version 1: "
        "the one log; version 2: the main log); judge fetch: what the leader and each successor "
        "read (version 2: main + liveness); broker out = main bytes × members + liveness bytes "
        "× the members reading it (version 2: the leader and its successors). CPU is process "
        "time per simulated second: replay = one member's replay of the main log (every member "
        "does it alike); follower = replay + one ordinary member's Node calls (the middle one "
        "by id: the leader's successors are the heirs of its partitions and step more; step: its "
        "heartbeat; version 2 also liveness_wanted, whether it judges, at every step, and its "
        "heartbeats' delivery reports); leader = replay + the leader's Node calls (step: "
        "heartbeat, planner check, snapshot encoding, tombstones, version 2's verdicts and "
        "lease; version 2 also feed_liveness, its reading of the liveness log). newcomer "
        "replayed: records after the snapshot a bounded join (GroupSim.join(bounded=True)) "
        "restores ('state'), or the whole log ('full').",
        *([real_note] if real or real_failed else []),
        *(f"real run failed: {f}" for f in real_failed),
        *args.note,
        "",
        *targets(sim),
        "",
        *growth(
            [r for r in sim if r["version"] == 1], [r for r in real if r.get("version", 1) == 1]
        ),
        "",
        *growth_v2([r for r in sim if r["version"] == 2]),
        "",
        "Versions: "
        + ", ".join(f"{k} {v}" for k, v in vers.items() if k != "commit")
        + f". Load (1 min) after the sim {load_sim['load1']}"
        + (f", during the real windows {loads}" if real else "")
        + f"; {seconds:.0f} s.",
    ]
    sizes = sorted({r["members"] for r in sim})
    by = {(r["version"], r["members"]): r for r in sim}
    series: dict[str, list[float]] = {}
    for v in sorted({r["version"] for r in sim}):
        for name, key, scale in (
            ("broker bytes out/s", "broker_out_bytes_s", 1.0),
            ("follower fetch B/s", "member_fetch_bytes_s", 1.0),
            ("follower CPU µs/s", "follower_total_cpu_ms_per_s", 1000.0),
        ):
            series[f"{name} v{v}"] = [by[v, n][key] * scale if (v, n) in by else float("nan")
                                       for n in sizes]  # fmt: skip
    chart = (
        Chart(
            [f"{n:,}" for n in sizes],
            series,
            "per simulated second (log)",
            title="Steady-state cost against group size (sim), protocol versions 1 and 2",
            log=True,
        )
        if sim
        else None
    )
    write_results("scale", label(args), columns, rows,
                  started=started, title="Steady-state cost of a groupkit group against its "
                  "size (simulated and real)", results_dir=args.results_dir, notes=notes,
                  chart=chart,
                  extra={"sim": sim, "real": real, "real_failed": real_failed,
                         "versions": vers, "load_after_sim": load_sim,
                         "load_during_real": loads, "seconds": seconds,
                         "args": {k: str(v) for k, v in vars(args).items()
                                  if k != "results_dir"}})  # fmt: skip


if __name__ == "__main__":
    main()
