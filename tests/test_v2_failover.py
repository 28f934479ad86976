"""Protocol version 2 on the real broker, members as processes: a killed member is expired by a
judge's verdict within about a session, the leader's by a successor's, and a static member's
clean restart gets back its seat and its partitions with nobody else moving.

Every test audits ownership: no two workers' ownership intervals of a partition overlap.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from groupkit.dev.harness import MemberProcess, wait_for
from groupkit.runtime.describe import describe_group
from tests.groupharness import WorkerGroup, partitions

V2 = {"groupkit.protocol.version": 2}


def _describe(g: WorkerGroup) -> dict[str, Any]:
    # (no version named: describe tells it from the records)
    return describe_group({"bootstrap.servers": g.bootstrap, "group.id": g.group,
                           "groupkit.control.topic": g.control_topic}, with_lag=False)  # fmt: skip


def _moves(w: MemberProcess) -> int:
    return sum(1 for f in w.facts() if f["e"] in ("assign", "revoke", "lost"))


def test_v2_kill_follower_then_leader_expires_them_by_verdict(
    make_group: Callable[..., WorkerGroup], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=6)
    parts = partitions(topic, 6)
    session_s = 3.0
    g = make_group([topic], session_timeout_ms=int(session_s * 1000), extra=V2)
    for _ in range(3):
        g.spawn()
        g.wait_stable(parts)
    wait_for(lambda: sum(w.is_leader() for w in g.live()) == 1, 30, "one leader")
    leader = next(w for w in g.live() if w.is_leader())
    follower = next(w for w in g.live() if w is not leader)
    follower.kill()
    took = g.wait_stable(parts, timeout=30)
    # Not before its session ended (the judge's verdict), and within about a session after.
    assert session_s * 0.9 <= took < session_s * 3, took
    leader.kill()
    took = g.wait_stable(parts, timeout=30)
    assert took < session_s * 3, took  # a successor's verdict, written as soon as it finds it
    (survivor,) = g.live()
    wait_for(survivor.is_leader, 15, "the survivor to lead")
    assert survivor.owned() == parts
    assert g.overlaps() == []


def test_v2_static_member_restarted_cleanly_gets_back_its_partitions(
    make_group: Callable[..., WorkerGroup], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=6)
    parts = partitions(topic, 6)
    session_ms = 10_000
    g = make_group([topic], session_timeout_ms=session_ms, extra=V2)
    ws = []
    for i in range(3):
        ws.append(g.spawn(f"pod-{i}", extra={"group.instance.id": f"pod-{i}"}))
        g.wait_stable(parts)
    wait_for(lambda: _describe(g)["state"] == "Stable", 30, "the group Stable")
    a, b, c = ws
    before = {w.name: w.owned() for w in ws}
    moves = {w.name: _moves(w) for w in (a, c)}
    gen = _describe(g)["generation"]
    t0 = time.monotonic()
    b.close()  # a static member's close keeps its seat
    b2 = g.spawn("pod-1-again", extra={"group.instance.id": "pod-1"})
    wait_for(lambda: b2.owned() == before["pod-1"], session_ms / 1000,
             f"the restarted member to own its partitions: {g.describe()}")  # fmt: skip
    assert time.monotonic() - t0 < session_ms / 1000 / 2  # at once, not after its session
    for w in (a, c):  # nobody else moved
        assert w.owned() == before[w.name], (w.name, w.owned(), before[w.name])
        assert _moves(w) == moves[w.name], (w.name, w.facts()[-5:])
    desc = _describe(g)
    assert desc["protocol_version"] == 2 and desc["generation"] == gen, desc
    assert g.overlaps() == []


def test_v2_static_member_killed_and_restarted_is_back_a_lease_after_not_a_session(
    make_group: Callable[..., WorkerGroup], topic_factory: Callable[..., str]
) -> None:
    """A static member killed -9 and started again 2 s later owns its partitions again once
    its old process's lease (3 s) has run out: the judges' process_ended verdict ends the hold
    on them. Its 30 s session would have kept them unconsumed until it ended. Nobody else
    moves, and no two workers ever own one partition."""
    topic = topic_factory(partitions=6)
    parts = partitions(topic, 6)
    session_ms = 30_000
    g = make_group([topic], session_timeout_ms=session_ms, extra=V2)
    ws = []
    for i in range(3):
        ws.append(g.spawn(f"pod-{i}", extra={"group.instance.id": f"pod-{i}"}))
        g.wait_stable(parts)
    wait_for(lambda: _describe(g)["state"] == "Stable", 30, "the group Stable")
    a, b, c = ws
    before = {w.name: w.owned() for w in ws}
    moves = {w.name: _moves(w) for w in (a, c)}
    t0 = time.monotonic()
    b.kill()
    wait_for(lambda: time.monotonic() - t0 >= 2.0, 5, "2 s away")
    b2 = g.spawn("pod-1-again", extra={"group.instance.id": "pod-1"})
    wait_for(lambda: b2.owned() == before["pod-1"], session_ms / 1000,
             f"the restarted member to own its partitions: {g.describe()}")  # fmt: skip
    back = time.monotonic() - t0
    print(f"\nkilled -> owned again by the restarted process: {back:.1f} s")
    assert back < 10, back  # the lease and a few heartbeats, not the 30 s session
    for w in (a, c):  # nobody else moved
        assert w.owned() == before[w.name], (w.name, w.owned(), before[w.name])
        assert _moves(w) == moves[w.name], (w.name, w.facts()[-5:])
    assert g.overlaps() == []


def test_v2_static_follower_keeps_its_partitions_while_its_group_is_quiet(
    make_group: Callable[..., WorkerGroup], topic_factory: Callable[..., str]
) -> None:
    """A static member fences a process lease less the skew allowance after its newest
    confirmed heartbeat, and heartbeats every third of the lease: here 1.8 s after one, 0.8 s
    after the next is sent. A follower that does not judge sleeps between heartbeats while
    nothing is written to the main log; its heartbeat's delivery report must still be served
    before that deadline, or it loses its partitions to a session that never lapsed."""
    topic = topic_factory(partitions=8)
    parts = partitions(topic, 8)
    tight = {**V2, "groupkit.process.lease.ms": 3_000, "groupkit.max.clock.skew.ms": 1_200}
    g = make_group([topic], session_timeout_ms=30_000, extra=tight)
    ws = []
    for i in range(4):  # the leader and two successors judge; the fourth only follows
        ws.append(g.spawn(f"pod-{i}", extra={"group.instance.id": f"pod-{i}"}))
        g.wait_stable(parts)
    follower = ws[-1]
    owned = follower.owned()
    assert owned
    t0 = time.monotonic()
    # Ten heartbeats of a quiet group (a lease record every 10 s is all the main log gets):
    # nothing to wait for but time.
    wait_for(lambda: time.monotonic() - t0 >= 10.0 or bool(follower.events("lost")), 15,
             "ten heartbeats")  # fmt: skip
    assert follower.events("lost") == [], follower.facts()[-5:]
    assert follower.owned() == owned
    assert g.overlaps() == []
