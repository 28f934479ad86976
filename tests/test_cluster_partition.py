"""A member cut off from the brokers while its process runs, on the session's 3-broker ``cluster``,
through the fault proxy (``groupkit.dev.proxy``).

A group of three member processes reads an RF-3 topic while a keyed producer writes. Member
``w0`` bootstraps through the proxy, so every connection of its four clients goes through it
(``client.id`` ``w0`` for the data consumer, ``w0.control-reader``, ``w0.control-writer``,
``w0.admin``); the other members and the producer talk to the brokers directly. Then, for longer
than a session, the proxy holds (as an iptables DROP would) the traffic of:

- every client of ``w0``: cut off both ways;
- only its control producer: it can read but not write (its heartbeats stop landing);
- only its consumers (control reader and data consumer): it can write but not read (its
  heartbeats land, but it cannot see them, so it cannot know its session holds);
- one direction of every client of ``w0``: its requests reach the brokers but no answer comes
  back (``answers-lost``: its heartbeats land, unacknowledged, and it reads nothing).

Each case must show, within session timeout + ``MARGIN_S`` of the cut: ``w0`` reports everything
it owned lost (it fenced itself), the other two own and consume every partition, and no
partition is owned by two members at once (audited at the end, over the whole run, ``w0``
included: it keeps running throughout). While cut off and fenced, every commit ``w0`` tries is
refused as fenced. After the heal ``w0`` rejoins and the group is whole again within session
timeout + ``MARGIN_S``; finally ``tests.chaos.audit``: 0 lost records, duplicates only on
partitions ``w0`` owned when it was cut off.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient

from groupkit import GroupConsumer
from groupkit.dev.harness import MemberProcess, wait_for
from groupkit.dev.proxy import FaultProxy
from groupkit.runtime.admin import create_topic
from groupkit.runtime.coordinator import monotonic_ms
from tests.conftest import KafkaBackend, delete_topics, unique_name
from tests.groupharness import CUTS, cut_pattern
from tests.test_cluster_faults import (
    MARGIN_S,
    SESSION_MS,
    Run,
    assert_clean,
    local_cluster,
    running_group,
)


@pytest.fixture
def proxy(cluster: KafkaBackend) -> Iterator[FaultProxy]:
    lc = local_cluster(cluster)
    with FaultProxy.for_cluster(lc) as p:
        yield p


def fenced_after(w: MemberProcess, since: float) -> float:
    return max(f["t"] for f in w.facts() if f["e"] == "lost" and f["t"] > since) - since


def granted_after(run: Run, w: MemberProcess, since: float) -> float:
    return max(f["t"] for o in run.group.members.values() if o is not w for f in o.facts()
               if f["e"] == "assign" and f["t"] > since) - since  # fmt: skip


#: case -> (the clients held, as a groupharness.CUTS kind; the direction held)
CASES = {kind: (kind, "both") for kind in CUTS} | {"answers-lost": ("both-ways", "down")}


@pytest.mark.parametrize("case", list(CASES))
def test_member_cut_off_then_healed(
    case: str, cluster: KafkaBackend, proxy: FaultProxy, tmp_path: Path
) -> None:
    lc = local_cluster(cluster)
    with running_group(lc, tmp_path, first_via=lc.proxy_bootstrap) as run:
        w = run.group.members["w0"]
        # Every client of w0 really goes through the proxy (and nobody else's does).
        seen = set(proxy.clients())
        assert {"w0", "w0.control-reader", "w0.control-writer"} <= seen, seen
        assert all(c is not None and c.startswith("w0") for c in seen), seen
        owned = w.owned()
        assert owned
        run.dup_allowed |= owned  # what it processed but could not commit is read again
        lost_before = len(w.events("lost"))

        t0 = time.monotonic()
        clients, direction = CASES[case]
        cut = proxy.cut(direction, cut_pattern(clients, "w0"))  # type: ignore[arg-type]
        try:
            wait_for(lambda: run.group.taken_over(w, run.parts, t0), run.session_s + MARGIN_S,
                     f"the others to take over w0's partitions ({case})")  # fmt: skip
        except AssertionError as e:
            raise AssertionError(f"{e}: {run.group.describe()}") from None
        run.stable_after[f"cut {case}"] = round(time.monotonic() - t0, 2)
        assert set(w.events("lost")[lost_before:]) >= owned, "w0 did not fence itself"
        print(f"{case}: w0 lost its partitions {fenced_after(w, t0):.2f}s after the cut, the "
              f"others owned them all {granted_after(run, w, t0):.2f}s after")  # fmt: skip
        assert w.alive

        # A fenced member's commits are refused (by groupkit, before anything is sent).
        facts = len(w.facts())
        w.send("commit")
        wait_for(lambda: any(f["e"] == "commit_done" for f in w.facts()[facts:]), 30,
                 "w0 to try its commits")  # fmt: skip
        tries = [f for f in w.facts()[facts:] if f["e"] in ("committed", "commit_refused")]
        assert tries, "w0 processed nothing to commit"
        assert all(f["e"] == "commit_refused" and f["fenced"] for f in tries), tries

        proxy.heal(cut)
        t1 = time.monotonic()
        run.stable(f"heal {case}", t1)
        assert w.owned(), "w0 did not rejoin"
        report = run.finish()
    assert_clean(report)
    assert all(t <= SESSION_MS / 1000 + MARGIN_S for t in run.stable_after.values())


@contextmanager
def proxied_pair(
    cluster: KafkaBackend, partitions: int, settings: dict[str, Any]
) -> Iterator[tuple[GroupConsumer, GroupConsumer, str]]:
    """Two members of one new group on a fresh topic of ``partitions``: ``a`` (``client.id``
    ``a0``) reaches the cluster through the fault proxy, ``b`` directly; closed and the topics
    deleted at the end."""
    lc = local_cluster(cluster)
    admin = AdminClient(lc.client_config())
    topic = unique_name("data")
    create_topic(admin, topic, partitions, replication_factor=-1)
    conf: dict[str, Any] = {
        "group.id": unique_name("g"), "groupkit.control.topic": unique_name("ctl"), **settings,
    }  # fmt: skip
    a = GroupConsumer({**conf, "bootstrap.servers": lc.proxy_bootstrap, "client.id": "a0"})
    b = GroupConsumer({**conf, "bootstrap.servers": lc.bootstrap})
    try:
        yield a, b, topic
    finally:
        a.close()
        b.close()
        ctl = conf["groupkit.control.topic"]
        delete_topics(admin, [topic, ctl, f"{ctl}.liveness"])


#: session and clock-skew allowance of the lapse test: the member fences itself 2.5 s after its
#: newest confirmed heartbeat; its "processing" outlasts that by 0.7 s
LAPSE_SESSION_MS = 4000
LAPSE_SKEW_MS = 1500
PROCESSING_S = 3.2


def test_a_lapsed_member_lets_go_only_once_its_poll_stopped(
    cluster: KafkaBackend, proxy: FaultProxy
) -> None:
    """A member that cannot read its own heartbeats back lapses by its own clock while its app
    is busy between two polls. Its next record ends its claims where it lands, and the others
    are granted them at once; so that record must wait until the app polls again and the
    member's ``on_lost`` has run. The writer is not cut: were the record written at the lapse,
    the other member would own the partitions while ``on_lost`` is still to come.

    Protocol version 1: a version-2 member confirms its heartbeats by their delivery reports,
    not by reading them back, so a cut reader does not lapse it (docs/protocol-v2.md, L1)."""
    settings = {
        "groupkit.protocol.version": 1,
        "session.timeout.ms": LAPSE_SESSION_MS,
        "heartbeat.interval.ms": 100,
        "groupkit.max.clock.skew.ms": LAPSE_SKEW_MS,
    }
    with proxied_pair(cluster, 4, settings) as (a, b, topic):
        events: list[tuple[float, str, str, frozenset[int]]] = []  # (monotonic, member, what, ps)

        def record(who: str, what: str) -> Callable[[GroupConsumer, list[KTP]], None]:
            def callback(_c: GroupConsumer, parts: list[KTP]) -> None:
                events.append((time.monotonic(), who, what, frozenset(p.partition for p in parts)))

            return callback

        def owned(who: str) -> frozenset[int]:
            held: set[int] = set()
            for _t, w, what, ps in list(events):
                if w == who:
                    held = held | ps if what == "assign" else held - ps
            return frozenset(held)

        stop = threading.Event()

        def run_b() -> None:
            while not stop.is_set():
                b.poll(0.05)

        b_thread = threading.Thread(target=run_b, daemon=True)
        try:
            a.subscribe([topic], on_assign=record("a", "assign"), on_revoke=record("a", "revoke"),
                        on_lost=record("a", "lost"))  # fmt: skip
            wait_for(lambda: a.poll(0.05) is None and len(owned("a")) == 4, 60, "a to own all 4")
            b.subscribe([topic], on_assign=record("b", "assign"), on_revoke=record("b", "revoke"),
                        on_lost=record("b", "lost"))  # fmt: skip
            b_thread.start()
            wait_for(lambda: a.poll(0.05) is None and len(owned("a")) == len(owned("b")) == 2, 60,
                     "a and b to own 2 each")  # fmt: skip
            mine = owned("a")
            cut = proxy.cut("both", cut_pattern("write-not-read", "a0"))
            try:
                t0 = time.monotonic()
                # a's app is busy with a batch past its fence (not a wait for anything)
                time.sleep(PROCESSING_S)
                coordinator = a.coordinator
                assert coordinator is not None
                with coordinator.lock:
                    age = coordinator.member.session_age_ms(monotonic_ms())
                assert age is None or age >= LAPSE_SESSION_MS - LAPSE_SKEW_MS, "a has not lapsed"
                assert owned("a") == mine, "a lost its partitions before it polled"
                assert not owned("b") & mine, "b was granted a's partitions while a still held them"
                wait_for(lambda: a.poll(0.05) is None and not owned("a"), 10, "a's on_lost")
                lost_at = max(t for t, w, what, _ in events if w == "a" and what == "lost")
                wait_for(lambda: owned("b") == frozenset(range(4)), 30, "b to own all 4")
                granted_at = min(
                    t for t, w, what, ps in events
                    if w == "b" and what == "assign" and ps & mine and t > t0
                )  # fmt: skip
                assert granted_at > lost_at
                print(f"a lapsed and lost its partitions {lost_at - t0:.2f}s after the cut; b was "
                      f"granted them {granted_at - lost_at:.3f}s after that")  # fmt: skip
            finally:
                proxy.heal(cut)
        finally:
            stop.set()
            if b_thread.is_alive():
                b_thread.join(10)


def test_a_writer_whose_records_go_unanswered_while_the_log_moves_is_renewed(
    cluster: KafkaBackend, proxy: FaultProxy
) -> None:
    """A member whose control writer gets no answer while its reader reads the group (after a
    broker restart librdkafka's idempotent producer can wait so for good) swaps in a fresh
    producer a session later, and writes again once the broker answers it. The proxy holds
    the writer's traffic here; the other member's heartbeats keep the log moving."""
    settings = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 300}
    with proxied_pair(cluster, 2, settings) as (a, b, topic):
        a.subscribe([topic])
        b.subscribe([topic])

        def both_own() -> bool:
            a.poll(0.02)
            b.poll(0.02)
            return len(a.assignment()) + len(b.assignment()) == 2 and bool(a.assignment())

        wait_for(both_own, 60, "a and b to share the partitions", step=0)
        coordinator = a.coordinator
        assert coordinator is not None
        cut = proxy.cut("both", cut_pattern("read-not-write", "a0"))
        try:

            def renewed() -> bool:
                a.poll(0.02)
                b.poll(0.02)
                return coordinator.stats.writer_renewals >= 1

            wait_for(renewed, 30, "a's writer to be renewed", step=0)
        finally:
            proxy.heal(cut)
        written = coordinator.stats.records_written
        wait_for(lambda: both_own() and coordinator.stats.records_written > written, 60,
                 "a to write again and own its share", step=0)  # fmt: skip


def test_a_member_whose_catch_up_goes_unanswered_asks_again_and_joins(
    cluster: KafkaBackend, proxy: FaultProxy
) -> None:
    """A member whose control log readers get no answer while it catches up (a broker stalled
    or cut off for longer than a request's bound) keeps asking, as Kafka's consumers keep
    asking for metadata, and joins once the cluster answers: its control loop does not end.
    The proxy holds the readers' traffic from before ``GroupConsumer()`` to well past that
    bound; the member's admin client, writer and data consumer reach the cluster."""
    lc = local_cluster(cluster)
    admin = AdminClient(lc.client_config())
    topic = unique_name("data")
    create_topic(admin, topic, 2, replication_factor=-1)
    ctl = unique_name("ctl")
    conf = {"group.id": unique_name("g"), "groupkit.control.topic": ctl,
            "bootstrap.servers": lc.proxy_bootstrap, "client.id": "a0"}  # fmt: skip
    cut = proxy.cut("both", r"a0\.(control|liveness)-reader")
    a = GroupConsumer(conf)
    try:
        a.subscribe([topic])
        coordinator = a.coordinator
        assert coordinator is not None

        def unanswered() -> bool:
            a.poll(0.05)  # raises if the control loop ended
            return coordinator.stats.unanswered >= 1

        wait_for(unanswered, 60, "the catch-up to go unanswered", step=0)
        assert not a.assignment()
        proxy.heal(cut)
        cut = None

        def owns_all() -> bool:
            a.poll(0.05)
            return len(a.assignment()) == 2

        wait_for(owns_all, 60, "a to join and own both partitions once answered", step=0)
        assert coordinator.failure is None
    finally:
        if cut is not None:
            proxy.heal(cut)
        a.close()
        delete_topics(admin, [topic, ctl, f"{ctl}.liveness"])
