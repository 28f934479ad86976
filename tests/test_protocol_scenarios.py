"""Example scenarios on the simulated group, with the exact assignment records expected.

Each record is summarised as ``(generation, phase, {member: (assigned, revoke, pending)})``.
Members ``a``, ``b``, ``c`` join in that order, so ``a`` leads; the assignor is ``range``.
"""

from __future__ import annotations

from collections import Counter

import pytest

from groupkit.testing.sim import GroupSim
from tests.sim_log_readers import parts, summaries

ALL4 = "t0-0 t0-1 t0-2 t0-3"


def group(protocol: str, n: int = 2, partitions: dict[str, int] | None = None) -> GroupSim:
    sim = GroupSim(partitions or {"t0": 4}, protocol=protocol, keep_actions=True)
    for m in "abc"[:n]:
        sim.join(m)
        sim.settle()
    return sim


def gen(sim: GroupSim) -> int:
    return sim.members["a"].state.generation


#: ``b`` gone from ``a`` and ``b`` (left or expired): ``a`` takes all four
B_GONE = pytest.mark.parametrize(
    ("protocol", "expected"),
    [
        ("cooperative", [(4, "complete", {"a": (ALL4, "", "")})]),
        (
            "eager",
            [(4, "revoke", {"a": ("", "t0-0 t0-1", "")}), (5, "complete", {"a": (ALL4, "", "")})],
        ),
    ],
)


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
def test_first_member_joins_an_empty_group(protocol: str) -> None:
    sim = GroupSim({"t0": 4}, protocol=protocol)
    sim.join("a")
    sim.settle()
    # nobody owns anything, so even eager skips the revoke phase
    assert summaries(sim) == [(1, "complete", {"a": (ALL4, "", "")})]
    assert sim.members["a"].state.leader == "a"


def test_second_member_joins_cooperative() -> None:
    sim = group("cooperative", 1)
    sim.join("b")
    sim.settle()
    assert summaries(sim, 1) == [
        (2, "partial", {"a": ("t0-0 t0-1", "t0-2 t0-3", ""), "b": ("", "", "t0-2 t0-3")}),
        (3, "complete", {"a": ("t0-0 t0-1", "", ""), "b": ("t0-2 t0-3", "", "")}),
    ]
    # a revoked only what moved, and never lost or re-took anything
    acts = sim.members["a"].actions
    assert [parts(x.revoke) for x in acts if x.revoke] == ["t0-2 t0-3"]
    assert not any(x.lost for x in acts)
    assert [parts(x.assign) for x in acts if x.assign] == [ALL4]


def test_second_member_joins_eager() -> None:
    sim = group("eager", 1)
    sim.join("b")
    sim.settle()
    assert summaries(sim, 1) == [
        (2, "revoke", {"a": ("", ALL4, ""), "b": ("", "", "")}),
        (3, "complete", {"a": ("t0-0 t0-1", "", ""), "b": ("t0-2 t0-3", "", "")}),
    ]
    acts = sim.members["a"].actions
    assert [parts(x.revoke) for x in acts if x.revoke] == [ALL4]
    assert [parts(x.assign) for x in acts if x.assign] == [ALL4, "t0-0 t0-1"]


@B_GONE
def test_member_leaves_cleanly(protocol: str, expected: list[object]) -> None:
    sim = group(protocol)
    g = gen(sim)
    sim.leave("b")
    ticks = sim.settle()
    assert summaries(sim, g) == expected
    # a clean leave rebalances at once, not after the session timeout
    assert ticks * sim.tick_ms < sim.session_timeout_ms / 10
    b = sim.members["b"]
    assert [parts(x.revoke) for x in b.actions if x.revoke] == ["t0-2 t0-3"]
    assert not any(x.lost for x in b.actions)


@B_GONE
def test_member_crashes_and_expires(protocol: str, expected: list[object]) -> None:
    sim = group(protocol)
    g = gen(sim)
    start = sim.clock
    sim.crash("b")
    sim.tick(sim.session_timeout_ms // sim.tick_ms - 20)
    assert summaries(sim, g) == []  # still within b's session: nothing moves
    sim.settle()
    assert summaries(sim, g) == expected
    assert sim.clock - start < sim.session_timeout_ms + 3 * sim.heartbeat_interval_ms


@pytest.mark.parametrize(
    ("protocol", "expected"),
    [
        (
            "cooperative",
            [
                (2, "partial", {
                    "a": ("t0-0 t0-1", "t0-2 t0-3", ""),
                    "b": ("", "", "t0-2"),
                    "c": ("", "", "t0-3"),
                }),
                (3, "complete", {
                    "a": ("t0-0 t0-1", "", ""), "b": ("t0-2", "", ""), "c": ("t0-3", "", ""),
                }),
            ],
        ),
        (
            "eager",
            [
                (2, "revoke", {"a": ("", ALL4, ""), "b": ("", "", ""), "c": ("", "", "")}),
                (3, "complete", {
                    "a": ("t0-0 t0-1", "", ""), "b": ("t0-2", "", ""), "c": ("t0-3", "", ""),
                }),
            ],
        ),
    ],
)  # fmt: skip
def test_two_members_join_at_once(protocol: str, expected: list[object]) -> None:
    sim = group(protocol, 1)
    sim.join("b")
    sim.join("c")
    sim.settle()
    assert summaries(sim, 1) == expected


@pytest.mark.parametrize(
    ("protocol", "expected"),
    [
        (
            "cooperative",
            [
                (4, "partial", {
                    "a": ("t0-0 t0-1 t1-0", "", "t0-2 t0-3"), "b": ("t1-1", "t0-2 t0-3", ""),
                }),
                (5, "complete", {"a": ("t0-0 t0-1 t0-2 t0-3 t1-0", "", ""), "b": ("t1-1", "", "")}),
            ],
        ),
        (
            "eager",
            [
                (4, "revoke", {"a": ("", "t0-0 t0-1 t1-0", ""), "b": ("", "t0-2 t0-3 t1-1", "")}),
                (5, "complete", {"a": ("t0-0 t0-1 t0-2 t0-3 t1-0", "", ""), "b": ("t1-1", "", "")}),
            ],
        ),
    ],
)  # fmt: skip
def test_subscription_changes(protocol: str, expected: list[object]) -> None:
    sim = group(protocol, 2, {"t0": 4, "t1": 2})
    g = gen(sim)
    sim.subscribe("b", ["t1"])
    sim.settle()
    assert summaries(sim, g) == expected


@pytest.mark.parametrize(
    ("protocol", "expected"),
    [
        (
            "cooperative",
            [
                (4, "partial", {
                    "a": ("t0-0 t0-1", "", "t0-2"), "b": ("t0-3 t0-4 t0-5", "t0-2", ""),
                }),
                (5, "complete", {"a": ("t0-0 t0-1 t0-2", "", ""), "b": ("t0-3 t0-4 t0-5", "", "")}),
            ],
        ),
        (
            "eager",
            [
                (4, "revoke", {"a": ("", "t0-0 t0-1", ""), "b": ("", "t0-2 t0-3", "")}),
                (5, "complete", {"a": ("t0-0 t0-1 t0-2", "", ""), "b": ("t0-3 t0-4 t0-5", "", "")}),
            ],
        ),
    ],
)  # fmt: skip
def test_topic_gains_partitions(protocol: str, expected: list[object]) -> None:
    sim = group(protocol)
    g = gen(sim)
    sim.set_partitions("t0", 6)
    sim.settle()
    assert summaries(sim, g) == expected


@pytest.mark.parametrize(
    ("protocol", "expected"),
    [
        (
            "cooperative",
            [
                (4, "partial", {
                    "a": ("t0-0 t0-1", "", ""), "b": ("t0-2", "t0-3", ""), "c": ("", "", "t0-3"),
                }),
                # a expired: b leads now; a's partitions are free at once, t0-2 must move first
                (5, "partial", {"b": ("t0-0 t0-1", "t0-2", ""), "c": ("t0-3", "", "t0-2")}),
                (6, "complete", {"b": ("t0-0 t0-1", "", ""), "c": ("t0-2 t0-3", "", "")}),
            ],
        ),
        (
            "eager",
            [
                (4, "revoke", {
                    "a": ("", "t0-0 t0-1", ""), "b": ("", "t0-2 t0-3", ""), "c": ("", "", ""),
                }),
                (5, "complete", {"b": ("t0-0 t0-1", "", ""), "c": ("t0-2 t0-3", "", "")}),
            ],
        ),
    ],
)  # fmt: skip
def test_leader_crashes_mid_rebalance(protocol: str, expected: list[object]) -> None:
    sim = group(protocol)
    g = gen(sim)
    sim.join("c")
    while sim.members["b"].state.generation == g:
        sim.tick()
    sim.crash("a")  # right after writing generation g+1, before its follow-up
    sim.settle()
    assert summaries(sim, g) == expected
    assert sim.members["b"].state.leader == "b"


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
def test_newcomer_never_takes_leadership(protocol: str) -> None:
    sim = group(protocol, 1)
    sim.join("0")  # sorts before "a", joins later
    sim.settle()
    assert sim.members["0"].state.leader == "a"
    sim.leave("a")
    sim.settle()
    assert sim.members["0"].state.leader == "0"


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
def test_restart_with_new_incarnation_is_a_new_membership(protocol: str) -> None:
    sim = group(protocol)
    g = gen(sim)
    b_joined = sim.members["a"].state.members["b"].joined_at
    sim.crash("b")
    sim.tick(5)
    sim.join("b")  # the same id, a new process
    sim.settle()
    st = sim.members["a"].state
    assert st.members["b"].joined_at > b_joined
    # the old incarnation's partitions were held until it would have expired, then handed on
    assert sim.clock - b_joined >= sim.session_timeout_ms
    assert sorted(parts(sim.members[m].member.owned) for m in "ab") == ["t0-0 t0-1", "t0-2 t0-3"]
    assert summaries(sim, g)[-1][1] == "complete"


@pytest.mark.parametrize("assignor", ["sticky", "cooperative-sticky", "balanced"])
def test_eager_join_stays_sticky_across_revoke_all(assignor: str) -> None:
    # Phase 2 runs after everyone revoked everything; the assignor must still see who owned
    # what (from the revoke record), or a sticky assignor reshuffles the whole group.
    sim = GroupSim({"t0": 12}, protocol="eager", assignor=assignor)
    for m in "abc":
        sim.join(m)
        sim.settle()
    before = {p: ms[0] for p, ms in sim.owners().items()}
    sim.join("d")
    sim.settle()
    after = {p: ms[0] for p, ms in sim.owners().items()}
    moved = sum(before[p] != after[p] for p in after)
    assert sorted(n for n in Counter(after.values()).values()) == [3, 3, 3, 3]
    assert moved == 3, f"{moved} of 12 partitions moved; only d's 3 had to"


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
def test_a_leader_that_reads_the_last_record_before_the_tombstone_frees_at_once(
    protocol: str,
) -> None:
    """The runtime produces a leaving member's last record and its tombstone together,
    but a reader may still get them in two fetches and plan in between (``partitions_lost``:
    the leaver claims less than it was granted). That generation lands after the tombstone,
    which therefore holds none of its grants: the partitions are free at once. Apart by a
    control turn, the generation could land first and be held for a session."""
    sim = group(protocol)
    a, b = sim.members["a"], sim.members["b"]
    sim.leave("b")
    sim.log.clock += sim.tick_ms
    last = len(sim.log.records)
    sim._step(b)  # writes its last record and its tombstone
    assert b.member.state == "left" and len(sim.log.records) == last + 2
    a.read_rate = last + 1 - a.pos  # a reads up to the last record, plans, then the tombstone
    sim.log.clock += sim.tick_ms
    sim._step(a)
    a.read_rate = None
    ticks = sim.settle()
    assert a.member.owned == frozenset(sim.expected_partitions())
    assert ticks * sim.tick_ms < sim.session_timeout_ms / 10, sim.describe()


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
def test_deferred_revocation_keeps_the_partition_claimed_until_released(protocol: str) -> None:
    # As the runtime runs a member (defer_revocations): a revoked partition stays owned, and
    # claimed in the member's records, until its commit is done; only then is it granted on.
    sim = GroupSim({"t0": 4}, protocol=protocol, release_delay_ms=700)
    sim.join("a")
    sim.settle()
    sim.join("b")
    released_at = None
    while not sim.is_stable():
        sim.tick()
        assert not sim.violations()
        a, b = sim.members["a"], sim.members["b"]
        if a.releasing and released_at is None:
            released_at = a.releasing[0][0]
        if released_at is not None and sim.clock < released_at:
            # a's record still claims what it is revoking: nobody may be granted it
            claimed = sim.view().members["a"].claims
            assert not (b.member.owned & claimed)
            assert len(a.member.owned) == 4 or protocol == "eager"
    assert released_at is not None
    assert sim.members["b"].member.owned == {("t0", 2), ("t0", 3)}
    sim.leave("a")  # the close commits first, then leaves
    sim.settle()
    assert sim.members["b"].member.owned == {("t0", p) for p in range(4)}
