"""Protocol version 2 on the real broker (docs/protocol-v2.md): a group whose heartbeats go to
the liveness topic, read by the leader and its successors only.

In one process, where a member's clients can be looked at: who judges, what each member reads,
``groupkit describe``. The kill -9 and restart tests run members as processes
(tests/test_v2_failover.py).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from groupkit import GroupConsumer
from groupkit.dev.broker import live_client_handles
from groupkit.dev.harness import wait_for
from groupkit.errors import ControlLoopError
from groupkit.protocol.vocab import Phase
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.control_log import ControlClients
from groupkit.runtime.control_topic import partition_for_group
from groupkit.runtime.describe import describe_group, group_state, list_groups
from groupkit.runtime.liveness_io import LivenessIO, bind_liveness_log
from tests.groupharness import pump, subscribed


def v2(conf: dict[str, Any]) -> dict[str, Any]:
    return {**conf, "groupkit.protocol.version": 2, "groupkit.control.topic.partitions": 2}


def v1(conf: dict[str, Any]) -> dict[str, Any]:
    return {**v2(conf), "groupkit.protocol.version": 1}


def owned(c: GroupConsumer) -> set[tuple[str, int]]:
    return {(p.topic, p.partition) for p in c.assignment()}


def once(members: list[GroupConsumer], parts: set[tuple[str, int]]) -> bool:
    """Every partition owned by exactly one of ``members``, each owning some."""
    got = [owned(c) for c in members]
    return all(got) and sum(len(o) for o in got) == len(parts) and set().union(*got) == parts


def _pump_for(members: list[GroupConsumer], seconds: float) -> None:
    """Poll every member for ``seconds`` (a span whose traffic is counted, not a wait)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for c in members:
            c.poll(0.01)


def io(c: GroupConsumer) -> LivenessIO:
    co = c._coordinator
    assert co is not None and co.v2 is not None
    return co.v2


def test_v2_group_judges_reads_and_describes(
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
    topic_factory: Callable[..., str],
    admin: AdminClient,
) -> None:
    topic = topic_factory(partitions=8)
    parts = {(topic, p) for p in range(8)}
    gc.collect()
    baseline = live_client_handles()
    conf = v2(conf)
    members: list[GroupConsumer] = []
    for i in range(4):  # one by one: the join order makes the first three the judges
        members.append(subscribed(consumers, {**conf, "client.id": f"m{i}"}, [topic]))
        pump(members, lambda: once(members, parts), 30, f"{len(members)} members stable")
    leaders = [c for c in members if c.is_leader]
    assert [c.member_id for c in leaders] == [members[0].member_id]

    # Every member confirms its heartbeats from their delivery reports alone.
    pump(members, lambda: all(io(c).confirmed >= 3 for c in members), 10, "heartbeats confirmed")
    assert all(io(c).failed == 0 for c in members)

    # The leader and its two successors judge; the fourth reads nothing of the liveness topic.
    liveness = f"{conf['groupkit.control.topic']}.liveness"
    judges = [c for c in members if io(c).reader is not None]
    assert judges == members[:3]
    follower = members[3]
    co = follower._coordinator
    assert co is not None and io(follower).judging_starts == 0
    assigned = [tp.topic for tp in co.reader._consumer.assignment()]
    assigned += [tp.topic for tp in follower._data.handle.assignment()]
    assert liveness not in assigned and assigned.count(conf["groupkit.control.topic"]) == 1
    # A member runs four clients (admin, data consumer, control reader and writer: heartbeats
    # go through the control writer); a judge one more, its reader of the liveness topic.
    wait_for(lambda: live_client_handles() - baseline == 4 * 4 + 3, 10,
             f"librdkafka clients: {live_client_handles() - baseline}")  # fmt: skip
    # ... and reads about one lease per lease interval (a third of the session), where version
    # 1 read every member's heartbeats (4 members, every 300 ms: 27 records in 2 s).
    lease_s = conf["session.timeout.ms"] / 3 / 1000
    pump(members, lambda: group_state(co.state) == "Stable", 10, "every member acknowledged")
    before, judged = co.stats.records_read, io(members[0]).judged
    _pump_for(members, 2.0)
    assert co.stats.records_read - before <= 2.0 / lease_s + 3, co.stats.records_read - before
    assert io(members[0]).judged - judged >= 4 * 2.0 / 0.3 - 8  # the leader reads them

    # The group's partition of the liveness topic: crc32 % its partitions.
    md = admin.list_topics(topic=liveness, timeout=10).topics[liveness]
    assert io(follower).partition == partition_for_group(conf["group.id"], len(md.partitions))

    # describe and list show the version-2 group.
    desc = describe_group(conf, with_lag=False, timeout=20)
    assert desc["protocol_version"] == 2
    assert desc["leader"] == members[0].member_id
    assert sorted(m["member_id"] for m in desc["members"] if m["live"]) == sorted(
        c.member_id for c in members
    )
    assert desc["state"] == "Stable"
    # ... also when the tool's config does not name the version (told from the records)
    plain = {k: v for k, v in conf.items() if k != "groupkit.protocol.version"}
    assert describe_group(plain, with_lag=False, timeout=20)["protocol_version"] == 2
    (row,) = [g for g in list_groups(plain, timeout=20) if g["group"] == conf["group.id"]]
    assert row["members"] == 4

    # A clean leave: its partitions are owned again at once, by the others.
    leaving = members.pop(1)
    leaving.close()
    consumers.remove(leaving)
    pump(members, lambda: once(members, parts), 15, "stable after a leave")

    # A newcomer catches up from the leader's newest snapshot on the liveness log, and replays
    # the control log only from there.
    leader = members[0]
    pump(members, lambda: io(leader).snapshots >= 1, 15, "a snapshot on the liveness log")
    members.append(subscribed(consumers, {**conf, "client.id": "m4"}, [topic]))
    pump(members, lambda: once(members, parts), 30, "stable with a newcomer")
    newcomer = members[-1]._coordinator
    assert newcomer is not None and newcomer.stats.catch_up == "snapshot", newcomer.stats
    assert newcomer.state.version == 2 and newcomer.state.rejections == {}
    assert all(io(c).failed == 0 for c in members)


def test_a_version_2_member_refuses_a_group_with_a_version_1_member(
    conf: dict[str, Any], consumers: list[GroupConsumer], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    old = subscribed(consumers, v1(conf), [topic])
    pump([old], lambda: len(old.assignment()) == 2, 20, "the version-1 member owns all")
    new = subscribed(consumers, v2(conf), [topic])
    with pytest.raises(ControlLoopError, match=r"version-1 member record.*speaks version 2"):
        pump([old, new], lambda: False, 20, "the version-2 member refuses")
    assert not new.assignment()  # it never took a partition
    consumers.remove(new)
    with pytest.raises(ControlLoopError):  # (close says so again)
        new.close()
    assert len(old.assignment()) == 2  # and the version-1 member went on as before


def test_a_version_1_member_refuses_a_group_with_a_version_2_member(
    conf: dict[str, Any], consumers: list[GroupConsumer], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    new = subscribed(consumers, v2(conf), [topic])
    pump([new], lambda: len(new.assignment()) == 2, 20, "the version-2 member owns all")
    old = subscribed(consumers, v1(conf), [topic])
    with pytest.raises(ControlLoopError, match=r"version-2 .*speaks version 1"):
        pump([new, old], lambda: False, 20, "the version-1 member refuses")
    assert not old.assignment()  # it never took a partition
    consumers.remove(old)
    with pytest.raises(ControlLoopError):  # (close says so again)
        old.close()
    assert len(new.assignment()) == 2  # and the version-2 member went on as before


def test_a_member_is_busy_while_its_group_changes_and_idle_after(
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
    topic_factory: Callable[..., str],
) -> None:
    """An idle member's poll thread and control loop wake at their slow rates, a busy one's at
    their fast rates (runtime/coordinator.py, ``Coordinator.busy``): a newcomer's join makes
    the owner busy at once, and the group is idle again once it settled."""
    topic = topic_factory(partitions=4)
    parts = {(topic, p) for p in range(4)}
    conf = v2(conf)
    members = [subscribed(consumers, {**conf, "client.id": "m0"}, [topic])]
    pump(members, lambda: once(members, parts), 30, "one member stable")
    owner = members[0]._coordinator
    assert owner is not None
    # The leases (every session / 3) keep coming, but change nothing: the owner turns idle.
    pump(members, lambda: not owner.busy(), 15, "the owner idle")
    assert members[0]._poll_loop._service_due(time.monotonic()) - time.monotonic() > 0.02
    members.append(subscribed(consumers, {**conf, "client.id": "m1"}, [topic]))
    pump(members, owner.busy, 15, "the owner busy with the newcomer's join")
    assert members[0]._poll_loop._service_due(time.monotonic()) - time.monotonic() <= 0.01
    pump(members, lambda: once(members, parts), 30, "two members stable")
    coordinators = [c._coordinator for c in members]
    pump(members, lambda: not any(c is not None and c.busy() for c in coordinators), 15,
         "both idle again")  # fmt: skip


def test_the_catch_up_reads_snapshots_through_a_client_warmed_with_the_others(
    conf: dict[str, Any],
    admin: AdminClient,
    consumers: list[GroupConsumer],
    topic_factory: Callable[..., str],
) -> None:
    """A version-2 newcomer's catch-up starts on the liveness log (its snapshots): the client
    for that read is opened and warmed with the control clients, not when the catch-up needs
    it; closed with them if the catch-up never takes it."""
    cfg = GroupConfig.from_dict(v2(conf))
    # One member creates the control and liveness topics.
    subscribed(consumers, v2(conf), [topic_factory(partitions=2)])
    control = ControlClients(cfg, cfg.control_topic)
    try:
        control.bind(0)
        bind_liveness_log(admin, cfg, control)
        assert control.liveness is not None
        reader = control.take_snapshot_reader()
        assert reader is not None and control.take_snapshot_reader() is None
        assert (reader.topic, reader.partition) == control.liveness
        assert reader.warmed, "the liveness topic's metadata was not learned"
        reader.close()
    finally:
        control.close(0)
    # Not taken: closed with the others.
    control = ControlClients(cfg, cfg.control_topic)
    untaken = control._snapshot_reader
    assert untaken is not None and not untaken._closed
    control.close(0)
    assert untaken._closed


def three_of_eight(
    conf: dict[str, Any], consumers: list[GroupConsumer], topic_factory: Callable[..., str]
) -> tuple[str, set[tuple[str, int]], dict[str, Any], list[GroupConsumer]]:
    """A stable version-2 group of 3 members sharing a topic of 8 partitions, at a 30 s session
    and 1 s heartbeat: its topic, partitions, configuration and members."""
    topic = topic_factory(partitions=8)
    parts = {(topic, p) for p in range(8)}
    conf = {**v2(conf), "session.timeout.ms": 30_000, "heartbeat.interval.ms": 1_000}
    members = [subscribed(consumers, {**conf, "client.id": f"m{i}"}, [topic]) for i in range(3)]
    # Owned once is not yet covered: the third member owns its share by admission handoffs
    # before a complete generation names it (and what each member gives the next newcomer).
    pump(members, lambda: once(members, parts) and covered(members), 30, "3 members stable")
    return topic, parts, conf, members


def covered(members: list[GroupConsumer]) -> bool:
    """The first member's newest assignment is complete and names every one of ``members``."""
    co = members[0]._coordinator
    if co is None:
        return False
    with co.lock:
        a = co.state.assignment
        return (
            a is not None
            and a.phase == Phase.COMPLETE
            and all(c.member_id in a.members for c in members)
        )


def test_a_generation_covers_a_newcomer_once_it_claims_its_share_and_its_leave_moves_at_once(
    conf: dict[str, Any], consumers: list[GroupConsumer], topic_factory: Callable[..., str]
) -> None:
    """A newcomer owns its share by admission handoffs; then a generation covers it. Version 2's
    main log has no heartbeats: its clock moves by the leader's lease, a third of a session
    apart, so a plan that waited a heartbeat of log time to cover the newcomer waited up to a
    lease (10 s here). A newcomer that left meanwhile left its share held for a session."""
    topic, parts, conf, members = three_of_eight(conf, consumers, topic_factory)
    for trial in range(3):
        newcomer = subscribed(consumers, {**conf, "client.id": f"n{trial}"}, [topic])
        group = [*members, newcomer]
        pump(group, lambda g=group: once(g, parts), 30, "the newcomer claims its share")
        took = pump(group, lambda n=newcomer: n.generation > 0, 30, "a generation covers it")
        assert took < 3, f"trial {trial}: covered {took:.1f} s after it claimed its share"
        newcomer.close()
        took = pump(members, lambda: once(members, parts), 30, "its share back with the others")
        assert took < 5, f"trial {trial}: its share came back {took:.1f} s after its leave"


def test_a_newcomer_that_leaves_while_it_takes_its_share_holds_none_of_it(
    conf: dict[str, Any], consumers: list[GroupConsumer], topic_factory: Callable[..., str]
) -> None:
    """A newcomer closes once it owns the part of its share one giver handed over, before the
    other giver's part and before any generation covers it. It takes nothing more while it
    closes, and its leaving record holds only what it claims (nothing, once released), so its
    share goes back to the others at once, not after its session (30 s here)."""
    topic, parts, conf, members = three_of_eight(conf, consumers, topic_factory)
    for trial in range(3):
        co = members[0]._coordinator
        assert co is not None
        with co.lock:
            a = co.state.assignment
            assert a is not None
            givers = [c for c in members if a.members[c.member_id].admit]
        assert len(givers) == 2  # 3, 3 and 2 partitions: the two owners of 3 give one each
        newcomer = subscribed(consumers, {**conf, "client.id": f"n{trial}"}, [topic])
        # Only the first giver polls beside it: a giver releases on its poll thread, so the
        # newcomer gets that part alone, and nothing covers it before it claims its share.
        pump([givers[0], newcomer], lambda n=newcomer: bool(owned(n)), 30, "the first part")
        assert len(owned(newcomer)) == 1 and newcomer.generation == 0, trial
        newcomer.close()
        took = pump(members, lambda: once(members, parts), 30, "its share back with the others")
        assert took < 5, f"trial {trial}: its share came back {took:.1f} s after its leave"
