"""A simulated group of 1,000 members converges, in both protocols."""

from __future__ import annotations

import pytest

from groupkit.testing.sim import GroupSim


@pytest.mark.parametrize("protocol", ["cooperative", "eager"])
def test_thousand_members_converge(protocol: str) -> None:
    sim = GroupSim(
        {f"t{i}": 1_000 for i in range(10)},
        protocol=protocol,
        assignor="roundrobin",
        shared_state=True,
        session_timeout_ms=30_000,
        heartbeat_interval_ms=3_000,
    )
    for batch in range(10):  # joins spread over ten ticks
        for i in range(100):
            sim.join(f"m{batch * 100 + i:04d}")
        sim.tick()
        assert not sim.violations()
    sim.settle(max_ticks=200)
    owners = sim.owners()
    assert len(owners) == 10_000 and all(len(m) == 1 for m in owners.values())
    counts = sorted(len(sm.member.owned) for sm in sim.running())
    assert len(counts) == 1_000 and counts[0] == counts[-1] == 10
    gen = sim.view().generation
    # churn: 50 crash, 50 join; the group converges again within a few generations
    for i in range(0, 1_000, 20):
        sim.crash(f"m{i:04d}")
    for i in range(50):
        sim.join(f"n{i:04d}")
    sim.settle(max_ticks=600)
    assert sim.view().generation - gen <= 6
    owners = sim.owners()
    assert len(owners) == 10_000 and all(len(m) == 1 for m in owners.values())
