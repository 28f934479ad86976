"""Benchmark: the protocol core at 1,000 members.

1. Planner time per rebalance: a stable 1,000-member group (10 topics x 1,000 partitions) is
   replayed into a ``GroupState``; one member joins; we time ``Planner.plan`` (the assignor run,
   the cooperative filter, the record built), then the follow-up generation once revocations
   are acknowledged (cooperative) or phase 2 (eager).
2. Replay of that assignment record by a member (decode + the safety check).
3. Records at 100,000 partitions x 1,000 members: encoded size and encode / decode time, for a
   contiguous (range) and a scattered (round-robin) assignment.

    python bench/protocol.py           # writes bench/results/protocol.{json,md}
    python bench/protocol.py --quick   # seconds; for CI
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import begin, median, time_runs, write_results
from groupkit.protocol.planner import Planner
from groupkit.protocol.records import (
    assignment_record,
    covered_member,
    decode,
    encode,
)
from groupkit.protocol.vocab import DecisionAction
from groupkit.testing.sim import GroupSim


def stable_group(members: int, protocol: str, assignor: str, topics: int, parts: int) -> GroupSim:
    sim = GroupSim(
        {f"t{i}": parts for i in range(topics)},
        protocol=protocol,
        assignor=assignor,
        shared_state=True,
        session_timeout_ms=30_000,
        heartbeat_interval_ms=3_000,
    )
    for i in range(members):
        sim.join(f"m{i:04d}")
    sim.settle(max_ticks=300)
    return sim


def bench_planner(members: int, runs: int, quick: bool) -> list[list[object]]:
    rows: list[list[object]] = []
    topics, parts = (10, 1_000) if not quick else (4, 250)
    for protocol in ("cooperative", "eager"):
        for assignor in ("range", "roundrobin", "sticky", "cooperative-sticky"):
            sim = stable_group(members, protocol, assignor, topics, parts)
            sim.join("zz-new")
            # The plan for the join: once the newcomer's record is in the log, or (a sticky
            # assignor admitting it, cooperative) once it claims its admitted share. The
            # group's own leader waits a heartbeat more (Planner.cover_after_ms), so this
            # planner, which does not, plans first.
            planner = Planner(assignor, protocol)
            for _ in range(200):
                sim.tick()
                st = sim.view()
                d = planner.plan(st, sim.partitions)
                if d.action == DecisionAction.WRITE:
                    break
            assert d.action == DecisionAction.WRITE, d
            counts = dict(sim.partitions)
            times = time_runs(lambda p=planner, s=st, c=counts: p.plan(s, c), runs)
            k, v = d.encode()
            _REPLAY.clear()
            for _ in range(max(1, runs // 2)):
                _replay_copy(sim, k, v)
            replay = list(_REPLAY)
            sim.settle(max_ticks=300)
            rows.append([
                f"plan {protocol} {assignor}", members + 1, topics * parts,
                median(times) * 1e3, median(replay) * 1e3, len(v or b""),
                sim.view().generation - 1,
            ])  # fmt: skip
    return rows


def _replay_copy(sim: GroupSim, k: bytes, v: bytes | None) -> None:
    st = sim.new_state()
    for r in sim.log.records:
        st.replay(r.offset, r.key, r.value, r.timestamp)
    t0 = time.perf_counter()
    res = st.replay(st.offset + 1, k, v, sim.clock)
    _REPLAY.append(time.perf_counter() - t0)
    assert res.kind == "assignment", res


_REPLAY: list[float] = []


def bench_records(members: int, partitions: int, runs: int) -> list[list[object]]:
    rows: list[list[object]] = []
    for shape in ("contiguous", "scattered"):
        per = partitions // members
        cov = {}
        for i in range(members):
            ps = (
                range(i * per, (i + 1) * per)
                if shape == "contiguous"
                else range(i, partitions, members)
            )
            cov[f"m{i:04d}"] = covered_member(f"i{i}", ["t0"], [("t0", p) for p in ps])
        key, rec = assignment_record(
            "g", generation=9, leader_id="m0000", leader_incarnation="i0", leader_joined_at=1,
            protocol="cooperative", phase="complete", assignor="roundrobin",
            partition_counts={"t0": partitions}, members=cov,
        )  # fmt: skip
        enc = time_runs(lambda key=key, rec=rec: encode(key, rec), runs)
        rk, rv = encode(key, rec)
        dec = time_runs(lambda rk=rk, rv=rv: decode(rk, rv), runs)
        rows.append([
            f"record {shape}", members, partitions, median(enc) * 1e3, median(dec) * 1e3,
            len(rv or b""), "",
        ])  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, for CI")
    args = ap.parse_args()
    started = begin()
    members = 100 if args.quick else 1_000
    runs = 3 if args.quick else 7
    rows = bench_planner(members, runs, args.quick)
    # the replay column of planner rows: the assignment record's replay alone
    rows += bench_records(members, 10_000 if args.quick else 100_000, runs)
    write_results(
        "protocol",
        "quick" if args.quick else "full",
        [
            "case",
            "members",
            "partitions",
            "plan/encode ms",
            "replay/decode ms",
            "bytes",
            "generations",
        ],
        rows,
        started=started,
        extra={"quick": args.quick, "replay_only_ms": median(_REPLAY) * 1e3 if _REPLAY else None},
        title="Protocol core: planner per rebalance, record replay, record size",
    )


if __name__ == "__main__":
    main()
