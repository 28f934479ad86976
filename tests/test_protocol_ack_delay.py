"""Rule L9 of protocol version 2 (docs/protocol-v2.md): an acknowledgement that changes nothing
else of its member's waits up to ``ack_delay_ms``, so that a rebalance's hand-off is not crowded
by every member's acknowledgement, each read by every member.

The schedules of ``test_protocol_v2_schedules`` draw the delay (its ``ack_delays`` rule) and
hold every invariant under it; these show what the rule is for, in one simulated join and one
leave per setting: the hand-off is no slower, the members it does not touch write nothing while
it runs, the group is stable a delay later at most, and the leader's measure of the rebalance
does not count the wait.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from groupkit.protocol.codec import decode
from groupkit.protocol.schema import MemberKey
from groupkit.testing.sim import GroupSim

DELAY = 1_000
HEARTBEAT = 300
TICK = 100


@dataclass(frozen=True)
class Outcome:
    #: ms from the event until the moved partitions are owned again
    moved_ms: int
    #: members the event does not touch (what they own is what they owned before)
    untouched: int
    #: member records the members the event does not touch wrote by then, and for half the
    #: delay after
    untouched_records: int
    #: ms from the event until the group is stable (every member acknowledged)
    stable_ms: int
    #: the leader's measure of the rebalance (``RebalanceSummary.duration_s``), ms
    reported_ms: int


def _moved(sim: GroupSim, event: str) -> bool:
    """Every partition owned by one running member, the newcomer's share taken, or nothing
    left with the leaver."""
    owners = sim.owners()
    if len(owners) != 12 or any(len(o) != 1 for o in owners.values()):
        return False
    if event == "join":
        return len(sim.members["g"].member.owned) >= 1
    return not sim.members["f"].member.owned


def _run(event: str, protocol: str, assignor: str, delay: int) -> Outcome:
    sim = GroupSim({"t0": 12}, protocol=protocol, assignor=assignor, version=2,
                   heartbeat_interval_ms=HEARTBEAT, ack_delay_ms=delay, tick_ms=TICK)  # fmt: skip
    for mid in ("a", "b", "c", "d", "e", "f"):
        sim.join(mid)
    sim.settle()
    before = {i: sm.member.owned for i, sm in sim.members.items()}
    start, since, gen = sim.clock, len(sim.log.records), sim.view().generation
    if event == "join":
        sim.join("g")
    else:
        sim.leave("f")
    while not _moved(sim, event):
        sim.tick()
        assert not sim.violations(), sim.describe()
        assert sim.clock - start < 10_000, sim.describe()
    moved_ms = sim.clock - start
    # the members the event does not touch: what they own is what they owned before
    untouched = {i for i, sm in sim.members.items() if before.get(i) == sm.member.owned}
    while sim.clock - start < moved_ms + DELAY // 2:
        sim.tick()
        assert not sim.violations(), sim.describe()
    written = 0
    for r in sim.log.records[since:]:
        key, _ = decode(r.key, r.value)
        written += isinstance(key, MemberKey) and key.member_id in untouched
    stable_ms = sim.settle() * sim.tick_ms + sim.clock - start

    def done() -> list[float]:
        return [r.duration_s for r in sim.rebalances
                if r.outcome == "completed" and r.first_generation > gen]  # fmt: skip

    while not done():  # the leader ends it at its next step
        sim.tick()
        assert sim.clock - start < stable_ms + 10 * TICK, sim.describe()
    return Outcome(moved_ms, len(untouched), written, stable_ms, int(done()[-1] * 1000))


@pytest.mark.parametrize("event", ["join", "leave"])
@pytest.mark.parametrize(
    ("protocol", "assignor"),
    [("cooperative", "cooperative-sticky"), ("cooperative", "range"), ("eager", "range")],
)
def test_an_acknowledgement_that_changes_nothing_waits_and_the_hand_off_does_not(
    event: str, protocol: str, assignor: str
) -> None:
    at_once = _run(event, protocol, assignor, 0)
    waits = _run(event, protocol, assignor, DELAY)
    assert waits.moved_ms <= at_once.moved_ms, (at_once, waits)
    if protocol == "cooperative":  # (eager: every member revokes all it owns, then takes)
        # a sticky assignor moves only what it must: most members are untouched (range moves
        # every member's partitions)
        assert at_once.untouched > 0 or assignor != "cooperative-sticky", at_once
        assert at_once.untouched_records >= at_once.untouched, at_once
        assert waits.untouched_records == 0, waits
    assert waits.stable_ms <= at_once.stable_ms + DELAY + 2 * HEARTBEAT, (at_once, waits)
    # the leader's measure of the rebalance (a metric, and what the pipeline prices a move at)
    # ends when every member claims its share (the leader sees it a step later at most), not
    # at the acknowledgements that wait
    assert waits.reported_ms <= at_once.reported_ms + TICK, (at_once, waits)
