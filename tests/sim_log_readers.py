"""Helpers shared by the protocol tests: read the simulated log back as plain values."""

from __future__ import annotations

from groupkit.protocol.records import AssignmentRecord, decode
from groupkit.testing.sim import GroupSim


def parts(ps: object) -> str:
    """``"t0-0 t0-1"``: partitions as a short sorted string."""
    assert isinstance(ps, frozenset | set | list | tuple)
    return " ".join(
        sorted((str(p) for p in ps), key=lambda s: (s.split("-")[0], int(s.split("-")[1])))
    )


def assignment_records(sim: GroupSim) -> list[AssignmentRecord]:
    """Every assignment record in the log that the group accepted, in order."""
    from groupkit.protocol.state import GroupState

    st = GroupState(sim.group, sim.session_timeout_ms, sim.rebalance_timeout_ms)
    out = []
    for r in sim.log.records:
        res = st.replay(r.offset, r.key, r.value, r.timestamp)
        if res.kind == "assignment":
            _, v = decode(r.key, r.value)
            assert isinstance(v, AssignmentRecord)
            out.append(v)
    return out


def summary(a: AssignmentRecord) -> tuple[int, str, dict[str, tuple[str, str, str]]]:
    """``(generation, phase, {member: (assigned, revoke, pending)})``."""
    return (
        a.generation,
        a.phase,
        {m: (parts(c.assigned), parts(c.revoke), parts(c.pending)) for m, c in a.members.items()},
    )


def summaries(
    sim: GroupSim, since: int = 0
) -> list[tuple[int, str, dict[str, tuple[str, str, str]]]]:
    return [summary(a) for a in assignment_records(sim) if a.generation > since]
