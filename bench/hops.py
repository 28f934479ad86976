"""Control-log hops of a rebalance, counted in the simulator.

A *hop* is one record written to the control log and read back by another member: with the
simulator's latency model (``produce_delay_ms`` + ``fetch_delay_ms`` per record) every hop costs
their sum, and a rebalance that needs n sequential records costs n hops however fast the
members compute. That count is what a protocol change can remove; the latency follows.

Scenarios, on a stable 3-member group (12 partitions), both protocols, with the range assignor
and, for the cooperative protocol, also with ``cooperative-sticky``, whose complete generations
name what a newcomer would get and who inherits a leaver's partitions, so a join is *admitted*
and a leave *inherited* without the leader's turn (docs/protocol.md, "Admission", "Inheritance"):

- ``join``: a 4th member joins. Hops from its join record's write to a stable group.
- ``join_bounded``: the same, in a group whose leader writes snapshots (every half session)
  and whose log is two sessions old, by a member that catches up bounded as the runtime's
  does (``snapshot.CatchUp``: it restores the newest snapshot and replays what follows).
- ``leave``: a member leaves cleanly. Hops from its goodbye records' write to a stable group.
- ``crash``: a member crashes. Hops from the moment its expiry is visible (the first record
  stamped a session after its last one is read) to a stable group; the latency column counts
  from the crash, so it includes the session timeout and the heartbeat that carries the log
  time past it.

"Owned": from the first moment every running member processes what it processes once the group
is stable, and goes on doing so (a pending partition handed over at its owner's release, a
newcomer's admitted share, an heir's inheritance: all before the leader's generation grants
them). "Stable" is :meth:`GroupSim.is_stable`: every running member processes exactly what the
newest assignment targets for it, every partition is processed, and the leader has nothing
left to plan (so the acknowledgements the planner waits for count as hops). The runtime's leader
waits a heartbeat after an admitted newcomer claimed its share before it plans the generation
that covers it (``Planner.cover_after_ms``: bookkeeping, kept out of the moved partitions'
start); that wait is a timer, not a hop, so the table is counted without it: the join is owned
as soon, and stable that heartbeat later.

    python bench/hops.py    # prints the table, writes bench/results/hops.{json,md}
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from groupkit.testing.sim import GroupSim
from groupkit.types import TopicPartition

SCENARIOS = ("join", "join_bounded", "leave", "crash")
PROTOCOLS = ("eager", "cooperative")
#: (protocol, assignor) of the table's rows
SETUPS = (("eager", "range"), ("cooperative", "range"), ("cooperative", "cooperative-sticky"))


@dataclass(frozen=True, slots=True)
class HopRow:
    protocol: str
    scenario: str
    #: hops until every partition is processed again by its new owner (the assignment done)
    hops_owned: int
    #: hops until the group is stable (the acknowledgements the leader waits for included)
    hops: int
    #: from the event (the crash itself for ``crash``) to a stable group
    latency_ms: int
    assignor: str = "range"


def _stable_group(protocol: str, produce_ms: int, fetch_ms: int, tick_ms: int, session_ms: int,
                  heartbeat_ms: int, snapshots: bool = False,
                  assignor: str = "range") -> GroupSim:  # fmt: skip
    sim = GroupSim(
        {"t0": 12},
        protocol=protocol,
        assignor=assignor,
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=heartbeat_ms,
        tick_ms=tick_ms,
        produce_delay_ms=produce_ms,
        fetch_delay_ms=fetch_ms,
        snapshot_every_ms=session_ms // 2 if snapshots else None,
        cover_after_ms=0,  # hops only (module docstring)
    )
    for m in ("a", "b", "c"):
        sim.join(m)
    sim.settle()
    if snapshots:
        # older than the catch-up window, so a newcomer starts from a snapshot
        sim.tick(2 * session_ms // tick_ms)
    return sim


def measure(
    protocol: str,
    scenario: str,
    *,
    produce_delay_ms: int = 10,
    fetch_delay_ms: int = 10,
    tick_ms: int = 5,
    session_timeout_ms: int = 10_000,
    heartbeat_interval_ms: int = 1_000,
    assignor: str = "range",
) -> HopRow:
    """Hops and latency of one scenario (see the module docstring). Delays must be multiples
    of ``tick_ms`` for the hop count to be exact; it raises if the latency is not a whole
    number of hops (then something waited on a timer, not on a record)."""
    hop = produce_delay_ms + fetch_delay_ms
    sim = _stable_group(protocol, produce_delay_ms, fetch_delay_ms, tick_ms,
                        session_timeout_ms, heartbeat_interval_ms,
                        snapshots=scenario == "join_bounded", assignor=assignor)  # fmt: skip
    t0 = sim.clock
    gen0 = sim.view().generation
    if scenario in ("join", "join_bounded"):
        sm = sim.join("d", bounded=scenario == "join_bounded")
        if scenario == "join_bounded" and sm.catch_up != "state":
            raise AssertionError(f"{protocol} join_bounded: caught up {sm.catch_up!r}")
        start = t0 + tick_ms  # the tick in which it writes its join record
    elif scenario == "leave":
        sim.leave("c")
        start = t0 + tick_ms
    elif scenario == "crash":
        last_seen = sim.view().members["c"].last_seen
        sim.crash("c")
        start = -1
    else:
        raise ValueError(f"unknown scenario {scenario!r}")
    seen: list[tuple[int, dict[TopicPartition, list[str]]]] = []  # (clock, who processes what)
    for _ in range((session_timeout_ms * 4) // tick_ms):
        seen.append((sim.clock, sim.owners()))
        if sim.is_stable():
            break
        sim.tick()
        errs = sim.violations()
        if errs:
            raise AssertionError("; ".join(errs[:5]))
    else:
        raise AssertionError(f"{protocol} {scenario}: not stable\n{sim.describe()}")
    end = sim.clock
    if not _all_owned(sim, gen0):
        raise AssertionError(f"{protocol} {scenario}: stable, yet not owned\n{sim.describe()}")
    # owned from the first moment the running members process what they do once stable,
    # and go on doing so: a pending partition taken at its owner's release, an admitted or
    # inherited one taken before any generation grants it, count from their take
    final = seen[-1][1]
    owned_at = end
    for clock, owners in reversed(seen):
        if owners != final:
            break
        owned_at = clock
    if scenario == "crash":
        deadline = last_seen + session_timeout_ms
        first = next(r for r in sim.log.records if r.timestamp >= deadline)
        start = first.timestamp + fetch_delay_ms  # the expiry is visible to its readers
    hops_owned, rest_owned = divmod(owned_at - start, hop)
    hops, rest = divmod(end - start, hop)
    if rest or rest_owned:
        raise AssertionError(f"{protocol} {scenario}: {end - start} ms is not whole hops of {hop}")
    return HopRow(protocol, scenario, hops_owned, hops, end - t0, assignor)


def _all_owned(sim: GroupSim, after_generation: int) -> bool:
    st = sim.view()
    a = st.assignment
    running = sim.running()
    if a is None or a.phase == "revoke" or a.generation <= after_generation:
        return False
    # its target: a pending partition handed over at its owner's release counts as owned
    if any(sm.member.owned != a.target(sm.member_id) for sm in running):
        return False
    owners = sim.owners()
    return set(owners) == sim.expected_partitions() and all(len(m) == 1 for m in owners.values())


def hop_table(**kw: int) -> list[HopRow]:
    """:func:`measure` for every setup and scenario (keyword arguments as for it)."""
    return [measure(p, s, assignor=a, **kw) for p, a in SETUPS for s in SCENARIOS]


def render(rows: list[HopRow]) -> str:
    """The table as Markdown, for the README."""
    lines = [
        "| protocol | assignor | scenario | hops to owned | hops to stable | latency ms |",
        "|---|---|---|---:|---:|---:|",
    ]
    lines += [
        f"| {r.protocol} | {r.assignor} | {r.scenario} | {r.hops_owned} | {r.hops} "
        f"| {r.latency_ms} |"
        for r in rows
    ]
    return "\n".join(lines)


def main() -> None:
    from bench._common import begin, write_results

    started = begin()
    rows = hop_table()
    write_results(
        "hops",
        "simulated",
        ["protocol", "assignor", "scenario", "hops to owned", "hops to stable", "latency ms"],
        [[r.protocol, r.assignor, r.scenario, r.hops_owned, r.hops, r.latency_ms] for r in rows],
        started=started,
        title="Control-log hops per rebalance (produce 10 ms + fetch 10 ms per hop)",
        notes=["crash latency counts from the crash: session timeout 10 s, heartbeat 1 s"],
    )


if __name__ == "__main__":
    main()
