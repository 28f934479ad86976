"""Resource limits of the protocol: record sizes, decode times, memory.

Cases, each run in a fresh subprocess so its peak RSS is its own:

- ``group1000``: a simulated group of 1,000 members (``GroupSim``, shared replay state, the
  runtime's default ``cooperative-sticky``, 10,000 partitions) joins and settles. Measured: the
  control log (records, bytes), the largest member and assignment records, what compaction
  leaves, the time and Python heap for a newcomer to replay the compacted log, and the RSS.
- ``assign100k-rr`` / ``assign100k-sticky`` / ``assign100k-10``: one assignment record of
  100,000 partitions: over 1,000 members scattered round-robin (the worst case for range
  encoding), as cooperative-sticky plans it over 100 topics x 1,000 partitions, and over 10
  members. Measured: encoded and JSON size, encode and decode time, heap, RSS.
- ``worst-accepted``: the largest record the decoder accepts (``MAX_PARTITIONS`` partitions):
  what one forged record can cost each member of a group without a signing key.
- ``bombs``: what the rejected allocation bombs cost (range, zlib, container bombs).

Run: ``python -m bench.limits`` (about a minute on 2 cores). Writes
``bench/results/limits.{json,md}``.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
import tracemalloc
import zlib
from collections.abc import Callable
from typing import Any

from groupkit.assignors import get_assignor
from groupkit.errors import RecordRejected
from groupkit.protocol.records import (
    MAX_CONTAINERS,
    MAX_PARTITIONS,
    MAX_PAYLOAD,
    AssignmentRecord,
    assignment_record,
    covered_member,
    decode,
    encode,
    member_record,
    member_tombstone,
)
from groupkit.protocol.state import GroupState
from groupkit.testing.sim import GroupSim
from groupkit.types import MemberSubscription, TopicPartition


def rss_mb() -> float:
    """Peak RSS of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def heap(fn: Callable[[], Any]) -> tuple[Any, float, float, float]:
    """``(result, CPU seconds, peak MB, retained MB)`` of ``fn`` under tracemalloc.

    Timed separately first: tracemalloc slows allocation-heavy code several times over. CPU
    time (``process_time``), not wall time, so other work on a shared machine barely moves it."""
    t0 = time.process_time()
    fn()
    seconds = time.process_time() - t0
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    result = fn()
    now, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, seconds, (peak - base) / 2**20, (now - base) / 2**20


def json_size(value: bytes) -> int:
    payload = value[2:]
    return len(zlib.decompress(payload)) if value[1] & 1 else len(payload)


# ------------------------------------------------------------------ cases


def case_group1000() -> dict[str, Any]:
    n, parts = 1000, 10_000
    sim = GroupSim({"t0": parts}, assignor="cooperative-sticky", shared_state=True,
                   session_timeout_ms=30_000, heartbeat_interval_ms=3_000,
                   rebalance_timeout_ms=60_000)  # fmt: skip
    t0 = time.process_time()
    for i in range(n):
        sim.join(f"member-{i:04d}")
    ticks = sim.settle(max_ticks=5_000)
    settle_s = time.process_time() - t0
    sim.tick(int(sim.heartbeat_interval_ms / sim.tick_ms) * 3)  # steady heartbeats
    records = sim.log.records
    members = [r for r in records if r.key and r.key[1:2] == b"M" and r.value]
    assignments = [r for r in records if r.key and r.key[1:2] == b"A" and r.value]
    compacted = sim.log.compacted()

    def catch_up() -> GroupState:
        st = sim.new_state()
        for r in compacted:
            st.replay(r.offset, r.key, r.value, r.timestamp)
        return st

    st, replay_s, peak, kept = heap(catch_up)
    assert st.assignment is not None and len(st.live_members()) == n
    return {
        "members": n,
        "partitions": parts,
        "settle_ticks": ticks,
        "settle_s": settle_s,
        "generations": st.generation,
        "log_records": len(records),
        "log_bytes": sum(len(r.key or b"") + len(r.value or b"") for r in records),
        "member_record_max_bytes": max(len(r.value or b"") for r in members),
        "member_record_median_bytes": sorted(len(r.value or b"") for r in members)[
            len(members) // 2
        ],
        "assignment_record_max_bytes": max(len(r.value or b"") for r in assignments),
        "assignment_json_max_bytes": max(json_size(r.value or b"") for r in assignments),
        "compacted_records": len(compacted),
        "compacted_bytes": sum(len(r.key or b"") + len(r.value or b"") for r in compacted),
        "catch_up_replay_s": replay_s,
        "catch_up_heap_peak_mb": peak,
        "group_state_retained_mb": kept,
        "rss_mb": rss_mb(),
    }


def _record(members: dict[str, list[TopicPartition]], counts: dict[str, int]) -> tuple[
    Any, AssignmentRecord
]:  # fmt: skip
    return assignment_record(
        "g", generation=7, leader_id="m0000", leader_incarnation="i", leader_joined_at=1,
        protocol="cooperative", phase="complete", assignor="cooperative-sticky",
        partition_counts=counts,
        members={m: covered_member("i", sorted(counts), ps) for m, ps in members.items()},
    )  # fmt: skip


def case_assign100k(kind: str) -> dict[str, Any]:
    total = 100_000
    if kind == "rr":
        n, counts = 1000, {"t0": total}
        plan = {f"m{i:04d}": [TopicPartition("t0", p) for p in range(i, total, n)]
                for i in range(n)}  # fmt: skip
    elif kind == "sticky":
        n, counts = 1000, {f"t{t:03d}": 1000 for t in range(100)}
        subs = {f"m{i:04d}": MemberSubscription(tuple(counts)) for i in range(n)}
        t0 = time.process_time()
        plan = {
            m: list(ps) for m, ps in get_assignor("cooperative-sticky").assign(counts, subs).items()
        }
        plan_s = time.process_time() - t0
    else:
        n, counts = 10, {"t0": total}
        plan = {f"m{i:04d}": [TopicPartition("t0", p) for p in range(i, total, n)]
                for i in range(n)}  # fmt: skip
    key, rec = _record(plan, counts)
    t0 = time.process_time()
    rk, rv = encode(key, rec)
    encode_s = time.process_time() - t0
    assert rv is not None
    decoded, decode_s, peak, kept = heap(lambda: decode(rk, rv))
    assert decoded[1] == rec

    out = {
        "members": n,
        "partitions": total,
        "topics": len(counts),
        "encoded_bytes": len(rv),
        "json_bytes": json_size(rv),
        "containers": zlib.decompress(rv[2:]).count(b"{") + zlib.decompress(rv[2:]).count(b"["),
        "encode_s": encode_s,
        "decode_s": decode_s,
        "decode_heap_peak_mb": peak,
        "decoded_record_mb": kept,
        "rss_mb": rss_mb(),
    }
    if kind == "sticky":
        out["plan_s"] = plan_s
    return out


def case_crashed_ids() -> dict[str, Any]:
    """Members that crash never write a tombstone, and the runtime draws a new member id per
    process: every crashed id stays in ``GroupState.members`` and in the compacted log."""
    out: dict[str, Any] = {}
    for n in (1_000, 10_000):
        recs = [encode(*member_record("g", f"groupkit-{i:012x}", incarnation=f"{i:032x}",
                                      seq=1, topics=["t0"], joined_at=i * 1000))
                for i in range(n)]  # fmt: skip

        def build(recs: list[tuple[bytes, bytes | None]] = recs) -> GroupState:
            st = GroupState("g", 10_000)
            for i, (k, v) in enumerate(recs):
                st.replay(i, k, v, 1000 * i + 1)
            return st

        st, replay_s, _, kept = heap(build)
        t0 = time.process_time()
        for _ in range(100):
            st.live_members()
        live_ms = (time.process_time() - t0) * 10
        out[str(n)] = {
            "members_kept": len(st.members),
            "live": len(st.live_members()),
            "state_mb": kept,
            "replay_s": replay_s,
            "live_members_ms": live_ms,
            "compacted_bytes": sum(len(k) + len(v or b"") for k, v in recs),
        }
    out["rss_mb"] = rss_mb()
    return out


def case_worst_accepted() -> dict[str, Any]:
    half = MAX_PARTITIONS // 2
    key, rec = _record(
        {"m0": [TopicPartition("t0", p) for p in range(half)],
         "m1": [TopicPartition("t1", p) for p in range(half)]},
        {"t0": half, "t1": half},
    )  # fmt: skip
    rk, rv = encode(key, rec)
    assert rv is not None
    _, decode_s, peak, kept = heap(lambda: decode(rk, rv))
    return {
        "partitions": MAX_PARTITIONS,
        "encoded_bytes": len(rv),
        "decode_s": decode_s,
        "decode_heap_peak_mb": peak,
        "decoded_record_mb": kept,
        "rss_mb": rss_mb(),
    }


def case_bombs() -> dict[str, Any]:
    mkey = encode(*member_tombstone("g", "m"))[0]

    def doc(**kw: Any) -> bytes:
        d = {
            "inc": "i",
            "seq": 1,
            "topics": ["t"],
            "owned": {},
            "owned_gen": 0,
            "acked_gen": 0,
            "joined_at": None,
            "rack": None,
            "capacity": None,
            "client": {},
            "prev_ts": None,
            "since_gen": 0,
        }
        d.update(kw)
        return json.dumps(d).encode()  # fmt: skip

    bombs = {
        "range bomb (64 x 1M partitions)": b"\x01\x00" + doc(owned={"t": [[0, 2**20 - 1]] * 64}),
        "zlib bomb (> MAX_PAYLOAD inflated)": b"\x01\x01"
        + zlib.compress(doc(client={"p": " " * (MAX_PAYLOAD + 1)}), 9),
        "container bomb (MAX_CONTAINERS + 1 dicts)": b"\x01\x01"
        + zlib.compress(b'{"x":[' + b"{}," * MAX_CONTAINERS + b"{}]}", 9),
    }
    out: dict[str, Any] = {}
    for name, value in bombs.items():

        def attempt(value: bytes = value) -> str:
            try:
                decode(mkey, value)
            except RecordRejected as e:
                return e.reason
            return "accepted"

        reason, seconds, peak, _ = heap(attempt)
        out[name] = {"bytes": len(value), "reason": reason, "s": seconds, "heap_peak_mb": peak}
    out["rss_mb"] = rss_mb()
    return out


CASES: dict[str, Callable[[], dict[str, Any]]] = {
    "group1000": case_group1000,
    "assign100k-rr": lambda: case_assign100k("rr"),
    "assign100k-sticky": lambda: case_assign100k("sticky"),
    "assign100k-10": lambda: case_assign100k("10"),
    "crashed-ids": case_crashed_ids,
    "worst-accepted": case_worst_accepted,
    "bombs": case_bombs,
}


# ------------------------------------------------------------------ driver


def run_case(name: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "bench.limits", "--case", name],
                          capture_output=True, text=True, check=False, timeout=1800)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"case {name} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    from bench._common import begin, write_results

    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        print(json.dumps(CASES[sys.argv[2]]()))
        return
    started = begin()
    results = {name: run_case(name) for name in CASES}
    g = results["group1000"]
    rows: list[list[object]] = [
        ["1,000-member group: settle (sim)", f"{g['settle_ticks']} ticks, {g['settle_s']:.1f} s",
         f"{g['generations']} generations, {g['log_records']:,} records"],
        ["member record (median / max)", f"{g['member_record_median_bytes']} / "
         f"{g['member_record_max_bytes']} B", "whole state of one member"],
        ["assignment record, 1,000 x 10,000", f"{g['assignment_record_max_bytes']:,} B",
         f"{g['assignment_json_max_bytes']:,} B of JSON before zlib"],
        ["compacted control log", f"{g['compacted_records']:,} records, "
         f"{g['compacted_bytes'] / 1024:.0f} KiB", "what a newcomer reads"],
        ["newcomer catch-up replay", f"{g['catch_up_replay_s'] * 1000:.0f} ms",
         f"heap peak {g['catch_up_heap_peak_mb']:.1f} MB, GroupState "
         f"{g['group_state_retained_mb']:.1f} MB"],
        ["process RSS, 1,000 simulated members", f"{g['rss_mb']:.0f} MB",
         "all members in one process (shared state)"],
    ]  # fmt: skip
    for name, label in (("assign100k-rr", "100k partitions / 1,000 members, scattered"),
                        ("assign100k-sticky", "100k partitions (100 topics) / 1,000, sticky"),
                        ("assign100k-10", "100k partitions / 10 members, scattered")):  # fmt: skip
        a = results[name]
        rows.append([label, f"{a['encoded_bytes']:,} B",
                     f"JSON {a['json_bytes']:,} B, {a['containers']:,} containers; encode "
                     f"{a['encode_s'] * 1000:.0f} ms, decode {a['decode_s'] * 1000:.0f} ms, "
                     f"heap peak {a['decode_heap_peak_mb']:.0f} MB, record "
                     f"{a['decoded_record_mb']:.0f} MB, RSS {a['rss_mb']:.0f} MB"])  # fmt: skip
    for n, c in results["crashed-ids"].items():
        if n == "rss_mb":
            continue
        rows.append([f"{int(n):,} crashed member ids (never pruned)",
                     f"{c['compacted_bytes'] / 1024:.0f} KiB compacted",
                     f"GroupState {c['state_mb']:.1f} MB, {c['members_kept']:,} kept, "
                     f"{c['live']} live; replay of them {c['replay_s']:.2f} s; "
                     f"live_members() {c['live_members_ms']:.2f} ms"])  # fmt: skip
    w = results["worst-accepted"]
    rows.append([f"largest accepted record ({MAX_PARTITIONS:,} partitions)",
                 f"{w['encoded_bytes']:,} B",
                 f"decode {w['decode_s']:.2f} s, heap peak {w['decode_heap_peak_mb']:.0f} MB, "
                 f"RSS {w['rss_mb']:.0f} MB"])  # fmt: skip
    for name, b in results["bombs"].items():
        if name == "rss_mb":
            continue
        rows.append([name, f"{b['bytes']:,} B",
                     f"rejected {b['reason']} in {b['s'] * 1000:.0f} ms, heap peak "
                     f"{b['heap_peak_mb']:.1f} MB"])  # fmt: skip
    bounds = {"MAX_PAYLOAD": MAX_PAYLOAD, "MAX_CONTAINERS": MAX_CONTAINERS,
              "MAX_PARTITIONS": MAX_PARTITIONS}  # fmt: skip
    notes = [
        f"Decoder bounds: a payload inflates to at most {MAX_PAYLOAD:,} bytes, holds at most "
        f"{MAX_CONTAINERS:,} JSON objects and arrays, and expands to at most "
        f"{MAX_PARTITIONS:,} partitions (counted before expanding). Anything larger is "
        "rejected as `too_large`.",
        "Heap figures are tracemalloc (Python allocations); RSS is the peak of the case's "
        "own process, interpreter and imports included. Times are CPU seconds of one run "
        "(`process_time`), so a busy shared machine does not inflate them.",
        "Run: `python -m bench.limits`.",
    ]
    write_results("limits", "full", ["what", "size", "cost"], rows, started=started,
                  extra={"cases": results, "bounds": bounds}, notes=notes,
                  title="groupkit resource limits (protocol layer, a process per case)",
                  )  # fmt: skip


if __name__ == "__main__":
    main()
