"""A clean leave ends the membership at the leaver's own last record (``MemberRecord.leaving``).

A leave writes two records: the last member record (claims nothing, carries the offsets just
committed) and the tombstone. They are two produce requests, and a reader may see the first
alone. Without the ``leaving`` flag, such a leader would see a member that acknowledged its
generation yet claimed less than it was granted (``partitions_lost``), grant those partitions to
the leaver again, and the tombstone would then hold that grant (never taken) until the leaver's
session would have expired: the partitions would wait a session for an owner. The window is
wide: three leaves of ten at 10 members x 48 partitions land in it (``bench/trace_joins.py``).

Over random groups (both protocols, every assignor, slow readers, produce and fetch delays,
deferred revocation, produce requests that take different times, so that a generation may land
between the leave's two records), after a clean leave from a stable group:

1. a reader that has replayed up to the leaver's last record, and not its tombstone, no longer
   counts the leaver (a member nor the leader) and agrees with the reader that also read the
   tombstone;
2. no partition is owned by two running members meanwhile, and the group is stable again
   well within a session (the tombstone's hold never delays it).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from groupkit.assignors import assignor_names
from groupkit.protocol.codec import decode
from groupkit.protocol.schema import MemberKey, MemberRecord
from groupkit.testing.sim import GroupSim

EXAMPLES = max(20, int(os.environ.get("GROUPKIT_PROTOCOL_EXAMPLES", "1000")) // 4)
SESSION_MS = 3_000


LEAVE_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    # as schedule_settings (test_protocol_hypothesis.py): a fixed seed unless asked otherwise
    derandomize=os.environ.get("GROUPKIT_PROTOCOL_RANDOM") != "1",
)


def _stable(sim: GroupSim, members: int, rates: list[int | None]) -> list[str]:
    """``members`` members m0, m1, ... join ``sim`` (reading ``rates[i]`` records a tick) and
    settle; their ids."""
    sim.lags = {}
    ids = [f"m{i}" for i in range(members)]
    for i, mid in enumerate(ids):
        # read_rate: records a member replays per tick; 1 is a leader that may see the leave's
        # last record alone, a tick before its tombstone
        sim.join(mid, read_rate=rates[i])
    sim.settle()
    assert sim.is_stable(), sim.describe()
    return ids


def _leave_and_settle(sim: GroupSim, gone: str) -> None:
    """``gone`` leaves cleanly: no partition has two running owners meanwhile, and the group is
    stable again, without it, within half a session."""
    t0 = sim.clock
    sim.leave(gone)
    for _ in range(SESSION_MS // 10):
        if sim.is_stable() and sim.members[gone].member.state == "left":
            break
        sim.tick()
        assert not sim.violations(), sim.violations()
    else:
        raise AssertionError(f"not stable a session after the leave\n{sim.describe()}")
    assert sim.clock - t0 < SESSION_MS // 2, sim.describe()


def _leave_offsets(sim: GroupSim, member_id: str) -> tuple[int, int]:
    """The offsets of the leaver's last record (the one that says ``leaving``) and of the
    tombstone after it."""
    at = None
    for r in sim.log.records:
        k, v = decode(r.key, r.value)
        if not isinstance(k, MemberKey) or k.member_id != member_id:
            continue
        if at is None and isinstance(v, MemberRecord) and v.leaving:
            at = r.offset
        elif at is not None and v is None:
            return at, r.offset
    raise AssertionError(f"{member_id} wrote no leaving record and tombstone after it")


@LEAVE_SETTINGS
@given(
    protocol=st.sampled_from(["eager", "cooperative"]),
    assignor=st.sampled_from(assignor_names()),
    members=st.integers(2, 5),
    leaver=st.integers(0, 4),
    rates=st.lists(st.sampled_from([None, 1, 2, 4]), min_size=5, max_size=5),
    produce=st.sampled_from([0, 10, 20]),
    fetch=st.sampled_from([0, 0, 10, 30]),
    release=st.sampled_from([None, 0, 20, 100]),
    jitter=st.sampled_from([10, 30, 60, 100]),
    seed=st.integers(0, 2**16),
)
def test_a_clean_leave_ends_the_membership_at_its_last_record(
    protocol: str,
    assignor: str,
    members: int,
    leaver: int,
    rates: list[int | None],
    produce: int,
    fetch: int,
    release: int | None,
    jitter: int,
    seed: int,
) -> None:
    sim = GroupSim(
        {"t0": 6, "t1": 3}, protocol=protocol, assignor=assignor,
        session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300, tick_ms=10,
        produce_delay_ms=produce, fetch_delay_ms=fetch, release_delay_ms=release,
        produce_jitter_ms=jitter, seed=seed,
    )  # fmt: skip
    ids = _stable(sim, members, rates)
    gone = ids[leaver % members]
    _leave_and_settle(sim, gone)

    # (1) the leave's last record alone ends the membership, as record + tombstone do
    at, tomb = _leave_offsets(sim, gone)
    before, after = sim.new_state(), sim.new_state()
    for r in sim.log.records:
        if r.offset <= at:
            before.replay(r.offset, r.key, r.value, r.timestamp)
        if r.offset <= tomb:
            after.replay(r.offset, r.key, r.value, r.timestamp)
    assert gone not in before.members and before.leader != gone
    assert before.live_members().keys() == after.live_members().keys()
    assert before.leader == after.leader and before.holds == after.holds


@LEAVE_SETTINGS
@given(
    version=st.sampled_from([1, 2]),
    assignor=st.sampled_from(["cooperative-sticky", "sticky"]),
    members=st.integers(2, 4),
    rates=st.lists(st.sampled_from([None, 1, 2, 4]), min_size=5, max_size=5),
    produce=st.sampled_from([0, 10, 20]),
    fetch=st.sampled_from([0, 0, 10, 30]),
    release=st.sampled_from([None, 0, 20, 100]),
    leave_after=st.integers(0, 40),
    seed=st.integers(0, 2**16),
)
def test_a_newcomer_that_leaves_before_a_generation_covers_it_holds_only_its_claims(
    version: int,
    assignor: str,
    members: int,
    rates: list[int | None],
    produce: int,
    fetch: int,
    release: int | None,
    leave_after: int,
    seed: int,
) -> None:
    """A newcomer admitted into a stable group leaves cleanly while it takes its share, before
    any generation covers it. Its leaving record holds
    only what it claims, which is nothing once its releases are done: the partitions it was
    admitted, taken or not, are the leader's to plan at once, not after its session. No
    partition has two running owners meanwhile, and the group is stable again well within a
    session."""
    sim = GroupSim(
        {"t0": 6, "t1": 3}, protocol="cooperative", assignor=assignor, version=version,
        session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300, tick_ms=10,
        produce_delay_ms=produce, fetch_delay_ms=fetch, release_delay_ms=release, seed=seed,
    )  # fmt: skip
    _stable(sim, members, rates)
    g = sim.view().generation
    sim.join("new", read_rate=rates[-1])
    ticks = 0
    while "new" not in sim.view().members or ticks < leave_after:  # its join record, then more
        sim.tick()
        ticks += 1
        assert not sim.violations(), sim.violations()
        assert ticks < SESSION_MS // 10, sim.describe()
    assume(sim.view().members["new"].admitted_in == g)  # (a slow reader may join unadmitted)
    assume(sim.view().generation == g)  # nothing covers it yet
    _leave_and_settle(sim, "new")
    at, _tomb = _leave_offsets(sim, "new")
    last = decode(sim.log.records[at].key, sim.log.records[at].value)[1]
    assert isinstance(last, MemberRecord)
    st_at = sim.new_state()
    for r in sim.log.records[: at + 1]:
        st_at.replay(r.offset, r.key, r.value, r.timestamp)
    held = {p for h in st_at.holds if h.holder.startswith("new/") for p in h.partitions}
    assert held == set(last.owned), (held, last.owned)
