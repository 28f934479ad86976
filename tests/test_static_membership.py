"""Static membership (``group.instance.id``, KIP-345) on a real broker, with worker processes.

- A static member closed (``close()`` keeps its seat) or killed, and restarted within its
  session, gets back exactly its partitions; the other members see no revoke, no assign and
  no loss, and their generation does not change. A closed one is back at once; a killed one
  once its old process's session has run out (it might still be running: a zombie).
- Two processes with one instance id: the newest join wins; the old one loses what it owned
  (``on_lost``) and its ``poll`` raises ``FencedError``; no partition is ever owned by both.
- ``close(leave=True)`` of a static member leaves at once: its partitions move.
- A static member whose app stops polling past ``max.poll.interval.ms`` does not leave: its
  seat keeps its partitions (nobody else is rebalanced), and when the app polls again it
  rejoins with its instance id and gets them back.
- ``groupkit describe`` shows each member's instance id.

The protocol's side is proven over random schedules in ``test_protocol_static.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import TopicPartition as KTP

from groupkit import GroupConsumer
from groupkit.dev.harness import TP, LoadProducer, MemberProcess, wait_for
from groupkit.errors import FencedError
from groupkit.runtime.describe import describe_group
from tests.groupharness import WorkerGroup, partitions, pump


def _static(g: WorkerGroup, instance: str, name: str | None = None) -> MemberProcess:
    return g.spawn(name or instance, extra={"group.instance.id": instance})


def _moves(w: MemberProcess) -> int:
    return sum(1 for f in w.facts() if f["e"] in ("assign", "revoke", "lost"))


def _static_group(
    make_group: Callable[..., WorkerGroup], topic: str, parts: set[TP], protocol: str,
    session_ms: int,
) -> tuple[WorkerGroup, list[MemberProcess]]:  # fmt: skip
    g = make_group([topic], protocol=protocol, session_timeout_ms=session_ms)
    ws = []
    for i in range(3):
        ws.append(_static(g, f"pod-{i}"))
        g.wait_stable(parts)
    wait_for(lambda: all(w.state().get("generation") for w in ws), 30, "states written")
    # and the leader done: no follow-up generation to come (a cooperative grant taken by
    # handoff is owned before the leader writes the generation that completes it)
    wait_for(lambda: _describe(g)["state"] == "Stable", 30, "the group Stable")
    return g, ws


def _describe(g: WorkerGroup) -> dict[str, Any]:
    return describe_group({"bootstrap.servers": g.bootstrap, "group.id": g.group,
                           "groupkit.control.topic": g.control_topic}, with_lag=False)  # fmt: skip


@pytest.mark.parametrize(
    ("protocol", "how"),
    [("cooperative", "close"), ("eager", "close"), ("cooperative", "kill"), ("eager", "kill")],
)
def test_static_member_restarted_within_its_session_gets_back_its_partitions(
    protocol: str, how: str, make_group: Callable[..., WorkerGroup],
    topic_factory: Callable[..., str], bootstrap: str,
) -> None:  # fmt: skip
    topic = topic_factory(partitions=9)
    parts = partitions(topic, 9)
    session = 20_000 if how == "close" else 8_000
    producer = LoadProducer.every_partition(bootstrap, topic, 9, period=0.2).start()
    g, (a, b, c) = _static_group(make_group, topic, parts, protocol, session)
    try:
        before = {w.name: w.owned() for w in (a, b, c)}
        moves = {w.name: _moves(w) for w in (a, c)}
        gen = _describe(g)["generation"]
        t0 = time.monotonic()
        if how == "close":
            b.close()  # close() of a static member keeps its seat
        else:
            b.kill()
        b2 = _static(g, "pod-1", "pod-1-again")
        wait_for(lambda: b2.owned() == before["pod-1"], session / 1000 * 2,
                 f"the restarted member to own its partitions: {g.describe()}")  # fmt: skip
        took = time.monotonic() - t0
        # nobody else moved: no revoke, no assign, no loss; same generation
        for w in (a, c):
            assert w.owned() == before[w.name], (w.name, w.owned(), before[w.name])
            assert _moves(w) == moves[w.name], (w.name, w.facts()[-5:])
        desc = _describe(g)
        assert desc["generation"] == gen and desc["state"] == "Stable", desc
        if how == "close":
            # at once: no waiting for the session (the closed process said it let go)
            assert took < session / 1000 / 2, took
        else:
            # the killed process might have been a zombie: its partitions wait for its
            # session, counted from its last heartbeat, never longer than about one session
            assert took < session / 1000 * 1.5, took
        since = time.monotonic()
        wait_for(lambda: g.consuming_since(parts, since), 30, f"consuming: {g.stale(since)}")
    finally:
        producer.stop()
    assert g.overlaps() == []


@pytest.mark.parametrize("protocol", ["cooperative", "eager"])
def test_two_processes_with_one_instance_id_newest_wins(
    protocol: str, make_group: Callable[..., WorkerGroup], topic_factory: Callable[..., str],
    bootstrap: str,
) -> None:  # fmt: skip
    topic = topic_factory(partitions=6)
    parts = partitions(topic, 6)
    session = 6_000
    producer = LoadProducer.every_partition(bootstrap, topic, 6, period=0.2).start()
    g, (a, b, c) = _static_group(make_group, topic, parts, protocol, session)
    try:
        mine = b.owned()
        moves = {w.name: _moves(w) for w in (a, c)}
        dup = _static(g, "pod-1", "pod-1-dup")
        # the old process is fenced: on_lost, then poll raises FencedError and the worker exits
        wait_for(lambda: b.proc.poll() is not None, 30, f"the old process to be fenced: "
                 f"{b.log_tail()}")  # fmt: skip
        failed = b.fact("failed")
        assert failed is not None and "group.instance.id" in failed["error"], b.facts()[-3:]
        assert set(b.events("lost")) == mine
        wait_for(lambda: dup.owned() == mine, session / 1000 * 2,
                 f"the new process to own the seat's partitions: {g.describe()}")  # fmt: skip
        for w in (a, c):
            assert _moves(w) == moves[w.name]
        since = time.monotonic()
        wait_for(lambda: g.consuming_since(parts, since), 30, f"consuming: {g.stale(since)}")
    finally:
        producer.stop()
    # never owned by both processes at once
    assert g.overlaps() == []


def test_close_with_leave_moves_the_partitions_at_once(
    make_group: Callable[..., WorkerGroup], topic_factory: Callable[..., str], bootstrap: str
) -> None:
    topic = topic_factory(partitions=6)
    parts = partitions(topic, 6)
    session = 60_000
    g, (a, b, c) = _static_group(make_group, topic, parts, "cooperative", session)
    desc = _describe(g)
    gen = desc["generation"]
    by_member = {m["member_id"]: m for m in desc["members"]}
    assert {m: by_member[m]["instance_id"] for m in by_member} == {
        "pod-0": "pod-0", "pod-1": "pod-1", "pod-2": "pod-2"}  # fmt: skip
    assert {r["instance_id"] for r in desc["partitions"]} == {"pod-0", "pod-1", "pod-2"}
    t0 = time.monotonic()
    b.send("close-leave")
    b.proc.wait(30)
    g.wait_stable(parts, timeout=30)
    assert time.monotonic() - t0 < 15  # far sooner than the 60 s session: it left
    assert a.owned() | c.owned() == parts and _describe(g)["generation"] > gen
    assert g.overlaps() == []


def test_close_of_a_static_member_keeps_its_seat(
    make_group: Callable[..., WorkerGroup], topic_factory: Callable[..., str]
) -> None:
    """Nobody takes the closed member's partitions while its seat waits (a session), and
    they go to the others once it has run out."""
    topic = topic_factory(partitions=6)
    parts = partitions(topic, 6)
    session = 5_000
    g, (a, b, c) = _static_group(make_group, topic, parts, "cooperative", session)
    mine = b.owned()
    gen = _describe(g)["generation"]
    t0 = time.monotonic()
    b.close()
    g.wait_stable(parts, timeout=30)
    took = time.monotonic() - t0
    assert took >= session / 1000 * 0.9, took  # not before the seat's session ran out
    assert mine <= a.owned() | c.owned() and _describe(g)["generation"] > gen
    assert g.overlaps() == []


def test_a_static_member_past_max_poll_interval_keeps_its_seat(
    conf: dict[str, Any], topic_factory: Callable[..., str], consumers: list[GroupConsumer]
) -> None:
    """As in Kafka (KIP-345), a static member is not removed for not polling: only its
    session ends it. Its app's next poll reports the partitions lost and rejoins; the seat
    takes them back, and the other member never sees a revoke or an assign."""
    topic = topic_factory(partitions=4)
    base = {**conf, "session.timeout.ms": 8000, "heartbeat.interval.ms": 500}
    moves: list[str] = []
    lost: list[KTP] = []
    slow = GroupConsumer({**base, "group.instance.id": "pod-0", "max.poll.interval.ms": 1500})
    consumers.append(slow)
    slow.subscribe([topic], on_lost=lambda _c, ps: lost.extend(ps))
    pump([slow], lambda: len(slow.assignment()) == 4, 30, "the assignment")
    other = GroupConsumer(base)
    consumers.append(other)
    other.subscribe([topic], on_assign=lambda _c, ps: moves.append(f"assign {ps}"),
                    on_revoke=lambda _c, ps: moves.append(f"revoke {ps}"))  # fmt: skip
    pump([slow, other], lambda: len(slow.assignment()) == 2 == len(other.assignment()), 30,
         "the two to share")  # fmt: skip
    mine = sorted(p.partition for p in slow.assignment())
    theirs = sorted(p.partition for p in other.assignment())
    settled = len(moves)

    def others_unmoved() -> bool:
        assert sorted(p.partition for p in other.assignment()) == theirs, moves
        return True

    def abandoned() -> bool:
        c = slow._coordinator
        return c is not None and c.abandoned

    # Only `other` polls: `slow` overruns max.poll.interval.ms (its loop stops writing), and
    # stays stalled for half its session: nobody takes its partitions meanwhile, and the
    # group's generation does not change.
    ctl = {
        "bootstrap.servers": conf["bootstrap.servers"],
        "group.id": conf["group.id"],
        "groupkit.control.topic": conf["groupkit.control.topic"],
    }
    # the leader done: no follow-up generation to come (see _static_group)
    pump([slow, other], lambda: describe_group(ctl, with_lag=False)["state"] == "Stable", 30,
         "the group Stable")  # fmt: skip
    gen = other.generation
    pump([other], lambda: others_unmoved() and abandoned(), 30,
         "slow to overrun max.poll.interval.ms")  # fmt: skip
    stalled = time.monotonic()
    pump([other], lambda: others_unmoved() and time.monotonic() - stalled > 4, 30,
         "half a session of stall")  # fmt: skip
    assert other.generation == gen
    with pytest.raises(FencedError, match=r"max\.poll\.interval\.ms"):
        slow.commit(asynchronous=False)
    # Its next poll reports the partitions lost and rejoins under its instance id, whose seat
    # gets them back once the stopped process's session has ended.
    slow.poll(0.1)
    assert sorted(p.partition for p in lost) == mine
    assert slow.member_id == "pod-0"
    pump([slow, other],
         lambda: others_unmoved() and sorted(p.partition for p in slow.assignment()) == mine,
         30, "the seat to take its partitions back")  # fmt: skip
    assert moves[settled:] == []


def test_config_of_a_static_member() -> None:
    """``group.instance.id`` is kept (not passed to the data consumer, which never joins the
    broker's group); close() keeps the seat by default, and the setting says otherwise."""
    from groupkit.errors import ConfigError
    from groupkit.runtime.config import GroupConfig

    base = {"bootstrap.servers": "localhost:9", "group.id": "g"}
    cfg = GroupConfig.from_dict({**base, "group.instance.id": "pod-1"})
    assert cfg.instance_id == "pod-1" and not cfg.leave_on_close
    assert "group.instance.id" not in cfg.data_consumer
    dynamic = GroupConfig.from_dict(base)
    assert dynamic.instance_id is None and dynamic.leave_on_close
    leaves = GroupConfig.from_dict({**base, "group.instance.id": "pod-1",
                                    "groupkit.leave.group.on.close": "true"})  # fmt: skip
    assert leaves.leave_on_close
    with pytest.raises(ConfigError):
        GroupConfig.from_dict({**base, "group.instance.id": ""})
