"""``groupkit reset-offsets`` on a real broker.

A running group: two members in threads, each handing out records of a backlog at a bounded
pace (so that, after a reset far behind, the group cannot get back to where it was within the
test), committing by auto-commit every 100 ms. An auditor reads the group's committed offsets
every few milliseconds, and each member's ``on_commit`` reports its asynchronous commits. A
reset to offset 50 must then show, for every partition:

- in the audit, once an offset from after the reset is committed, no offset from before it is
  committed again (no in-flight auto-commit, release commit or keep-alive of an old position
  lands after it), and none below the new offset;
- in what the members hand out, a restart at exactly 50, and from that restart on, only the
  records that follow it (nothing fetched before the reset).

And the command reports success only once every live member acknowledged it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KTP

from groupkit import GroupConsumer
from groupkit.cli import main
from groupkit.dev.harness import wait_for
from groupkit.types import TopicPartition as TP
from tests.conftest import unique_name
from tests.groupharness import committed_offsets

RECORDS = 3000  # per partition: a backlog the members cannot drain within a test
BEFORE = 150  # committed on every partition before the reset
NEW = 10  # the reset's offset: far behind BEFORE
PARTITIONS = 4


class Worker(threading.Thread):
    """One member, on its own thread (a GroupConsumer is used by one thread at a time)."""

    def __init__(self, conf: dict[str, Any], topic: str, audit: list[Any]) -> None:
        super().__init__(daemon=True)
        self.handed: list[tuple[float, TP, int]] = []
        #: when each of its commits was acknowledged
        self.commits: list[float] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

        def on_commit(err: Any, parts: Any) -> None:
            if err is None:
                now = time.monotonic()
                self.commits.append(now)
                audit.extend((now, TP(p.topic, p.partition), p.offset) for p in parts
                             if p.error is None and p.offset >= 0)  # fmt: skip

        self.c = GroupConsumer({**conf, "auto.commit.interval.ms": 100, "on_commit": on_commit,
                                "max.partition.fetch.bytes": 2048,
                                "queued.max.messages.kbytes": 16})  # fmt: skip
        self.topic = topic

    def run(self) -> None:
        try:
            self.c.subscribe([self.topic])
            while not self.stop.is_set():
                m = self.c.poll(0.05)
                if m is None or m.error() is not None:
                    continue
                self.handed.append((time.monotonic(), TP(m.topic(), m.partition()), m.offset()))
                time.sleep(0.01)  # <= 100 records a second per member
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            self.c.close()


class Auditor(threading.Thread):
    """Reads the group's committed offsets in a loop (a consumer of its id that joins nothing
    and commits nothing)."""

    def __init__(self, bootstrap: str, group: str, topic: str, audit: list[Any]) -> None:
        super().__init__(daemon=True)
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "enable.auto.commit": False})  # fmt: skip
        self.parts = [KTP(topic, p) for p in range(PARTITIONS)]
        self.audit = audit
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    got = self.c.committed(self.parts, timeout=5)
                except Exception:
                    continue
                now = time.monotonic()
                self.audit.extend((now, TP(p.topic, p.partition), p.offset) for p in got
                                  if p.error is None and p.offset >= 0)  # fmt: skip
                time.sleep(0.005)  # the audit's pace: a read every few milliseconds
        finally:
            self.c.close()


@pytest.fixture
def group(
    conf: dict[str, Any], topic_factory: Callable[..., str], bootstrap: str
) -> Iterator[dict[str, Any]]:
    topic = topic_factory(partitions=PARTITIONS)
    # small batches: the members' fetches then interleave the partitions
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 20})
    for i in range(RECORDS * PARTITIONS):
        p.produce(topic, value=b"x", partition=i % PARTITIONS)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    audit: list[Any] = []
    g: dict[str, Any] = {"conf": conf, "topic": topic, "audit": audit, "workers": [],
                         "bootstrap": bootstrap}  # fmt: skip
    g["auditor"] = Auditor(bootstrap, conf["group.id"], topic, audit)
    yield g
    g["auditor"].stop.set()
    for w in g["workers"]:
        w.stop.set()
    for w in g["workers"]:
        w.join(30)


def _start(g: dict[str, Any], n: int) -> list[Worker]:
    ws = [Worker(g["conf"], g["topic"], g["audit"]) for _ in range(n)]
    g["workers"].extend(ws)
    for w in ws:
        w.start()
    return ws


def _committed(g: dict[str, Any]) -> dict[TP, int]:
    got = committed_offsets(g["bootstrap"], g["conf"]["group.id"], g["topic"], PARTITIONS,
                            **{"enable.auto.commit": False})  # fmt: skip
    return {TP(*tp): o for tp, o in got.items() if o >= 0}


def _cli(g: dict[str, Any], *argv: str) -> int:
    c = g["conf"]
    return main(["reset-offsets", "--bootstrap-servers", c["bootstrap.servers"],
                 "--control-topic", c["groupkit.control.topic"], "--group", c["group.id"],
                 "-X", f"session.timeout.ms={c['session.timeout.ms']}", *argv])  # fmt: skip


def _check_audit(g: dict[str, Any], since: float) -> None:
    """Per partition, in time order from ``since``: no pre-reset offset (>= BEFORE) after a
    post-reset one (< BEFORE), and none below the new offset."""
    by: dict[TP, list[tuple[float, int]]] = {}
    for t, p, o in sorted(g["audit"], key=lambda x: x[0]):
        if t >= since:
            by.setdefault(p, []).append((t, o))
    for p, seq in by.items():
        reset_seen = False
        for _t, o in seq:
            assert o >= NEW, (p, o, "below the new offset")
            if o < BEFORE:
                reset_seen = True
            else:
                assert not reset_seen, (p, o, "a pre-reset offset committed after the reset")


def _check_handed(ws: list[Worker], since: float, done: float) -> None:
    """Per partition, from ``since`` on: the first record from after the reset (< BEFORE) is
    exactly NEW, and the records from there on follow it (nothing fetched before the reset).
    librdkafka hands a partition's fetched records out in runs, so a partition may have had
    no turn since; every partition that did restarted, and they cannot all have been
    skipped."""
    handed = sorted((h for w in ws for h in w.handed), key=lambda h: h[0])
    restarted = 0
    for p in range(PARTITIONS):
        tp = TP(ws[0].topic, p)
        seq = [(t, o) for t, q, o in handed if q == tp and t >= since]
        first = next((i for i, (_t, o) in enumerate(seq) if o < BEFORE), None)
        if first is None:
            assert not [o for t, o in seq if t > done + 1], (tp, "handed out, never restarted")
            continue
        restarted += 1
        assert seq[first][1] == NEW, (tp, seq[first], "restarted elsewhere than the new offset")
        after = [o for _t, o in seq[first:]]
        # following on from NEW (a partition that moved between members may repeat some)
        assert all(b <= a + 1 for a, b in itertools.pairwise(after)), (tp, after[:50])
        assert max(after) < BEFORE, (tp, "a record from before the reset after it")
    assert restarted, "no partition was handed out after the reset"


def _wait_commits_after(ws: list[Worker], t: float) -> None:
    """Until each member has had two commits acknowledged after ``t``: the first may have been
    on its way at ``t``, the second was sent after it, and a member's commits land in order.
    Whatever the members had in flight at ``t`` has landed, and the audit has seen it."""
    wait_for(lambda: all(sum(c > t for c in w.commits) >= 2 for w in ws), 30,
             "every member to commit twice more")  # fmt: skip


def _wait_before(g: dict[str, Any]) -> None:
    wait_for(lambda: len(_committed(g)) == PARTITIONS and min(_committed(g).values()) >= BEFORE,
             60, "the group to commit BEFORE on every partition")  # fmt: skip


@pytest.mark.parametrize("protocol", ["cooperative", "eager"])
def test_reset_on_a_running_group(
    group: dict[str, Any], capsys: pytest.CaptureFixture[str], protocol: str
) -> None:
    group["conf"]["groupkit.rebalance.protocol"] = protocol
    ws = _start(group, 2)
    _wait_before(group)
    group["auditor"].start()
    t0 = time.monotonic()
    code = _cli(group, "--all-topics", "--to-offset", str(NEW), "--execute", "--timeout", "30")
    done = time.monotonic()
    out = capsys.readouterr().out
    assert code == 0, out
    assert "GROUP" in out and "CURRENT-OFFSET" in out and "NEW-OFFSET" in out
    assert "acknowledged by 2 live member(s)" in out, out
    _wait_commits_after(ws, done)  # the audit must keep showing post-reset offsets only
    assert all(w.error is None for w in ws), [w.error for w in ws]
    committed = _committed(group)
    assert all(NEW <= o < BEFORE for o in committed.values()), committed
    _check_audit(group, t0)
    _check_handed(ws, t0, done)


def test_reset_during_a_rebalance(
    group: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    ws = _start(group, 2)
    _wait_before(group)
    group["auditor"].start()
    t0 = time.monotonic()
    ws += _start(group, 1)  # a third member joins: partitions move while the reset is applied

    def joined() -> bool:
        new = ws[-1].c.member_id
        return new is not None and any(w.c.coordinator is not None
                                       and new in w.c.coordinator.state.members
                                       for w in ws[:2])  # fmt: skip

    wait_for(joined, 30, "the group to see the third member")
    code = _cli(group, "--topic", group["topic"], "--to-offset", str(NEW), "--execute",
                "--timeout", "30")  # fmt: skip
    done = time.monotonic()
    out = capsys.readouterr().out
    assert code == 0, out
    # the rebalance finishes (each of three members owns something) with the reset kept
    wait_for(lambda: all({q for _t, q, _o in w.handed if _t > done} for w in ws), 30,
             "every member to consume after the rebalance")  # fmt: skip
    _wait_commits_after(ws, time.monotonic())
    committed = _committed(group)
    assert all(NEW <= o < BEFORE for o in committed.values()), committed
    _check_audit(group, t0)
    _check_handed(ws, t0, done)


def test_dry_run_changes_nothing(group: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    ws = _start(group, 1)
    _wait_before(group)
    ws[0].stop.set()  # (stopped and closed: the committed offsets stay put)
    ws[0].join(30)
    before = _committed(group)
    code = _cli(group, "--all-topics", "--to-earliest")
    out = capsys.readouterr().out
    assert code == 0 and "dry run" in out
    lines = out.splitlines()
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]
    rows = [line.split() for line in lines[1 : 1 + PARTITIONS]]
    assert {(r[2], r[3], r[4]) for r in rows} == {
        (str(p.partition), str(o), "0") for p, o in before.items()
    }
    assert _committed(group) == before


def test_an_empty_group_is_committed_directly(
    group: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    ws = _start(group, 1)
    _wait_before(group)
    ws[0].stop.set()
    ws[0].join(30)  # closed: it left the group, which is now empty
    before = _committed(group)
    code = _cli(group, "--topic", f"{group['topic']}:0,2", "--shift-by", "-7", "--execute")
    out = capsys.readouterr().out
    assert code == 0 and "The group is empty" in out, out
    t = group["topic"]
    want = {**before, TP(t, 0): before[TP(t, 0)] - 7, TP(t, 2): before[TP(t, 2)] - 7}
    assert _committed(group) == want


def test_an_empty_group_without_a_control_topic_works_like_kafkas_tool(
    conf: dict[str, Any], topic_factory: Callable[..., str], bootstrap: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    topic = topic_factory(partitions=2)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        p.produce(topic, value=b"x", partition=i % 2)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": conf["group.id"]})
    c.commit(offsets=[KTP(topic, 0, 9), KTP(topic, 1, 4)], asynchronous=False)
    c.close()
    code = main(["reset-offsets", "--bootstrap-servers", bootstrap, "--group", conf["group.id"],
                 "--control-topic", unique_name("absent"), "--topic", topic, "--shift-by", "-3",
                 "--execute"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    g = {"bootstrap": bootstrap, "conf": conf, "topic": topic}
    c2 = Consumer({"bootstrap.servers": bootstrap, "group.id": conf["group.id"]})
    got = {k.partition: k.offset for k in c2.committed([KTP(topic, 0), KTP(topic, 1)], 10)}
    c2.close()
    assert got == {0: 6, 1: 1}, (got, g)


#: bad arguments, and what the error names (exit 2, nothing changed)
BAD_INPUT = [
    (["--all-topics"], "exactly one scenario"),
    (["--all-topics", "--to-earliest", "--to-latest"], "exactly one scenario"),
    (["--to-earliest"], "--topic"),
    (["--topic", "no-such-topic-x", "--to-earliest"], "does not exist"),
    (["--topic", "{topic}:99", "--to-earliest"], "out of range"),
    (["--topic", "{topic}", "--to-datetime", "2001-01-01T00:00:00.000"], "before the log start"),
    (["--topic", "{topic}", "--by-duration", "P9000D"], "before the log start"),
    (["--topic", "{topic}", "--by-duration", "ten minutes"], "PnDTnHnMnS"),
    (["--topic", "{topic}", "--to-datetime", "yesterday"], "YYYY-MM-DD"),
]


def test_bad_input_is_exit_2_and_changes_nothing(
    group: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every case against one running group (a group per case cost 8 s each)."""
    ws = _start(group, 1)
    wait_for(lambda: len(_committed(group)) == PARTITIONS, 60, "a commit on every partition")
    for argv, message in BAD_INPUT:
        argv = [a.replace("{topic}", group["topic"]) for a in argv]
        code = _cli(group, *argv, "--execute", "--timeout", "10")
        err = capsys.readouterr().err
        assert code == 2, (argv, err)
        assert message in err, (argv, err)
    assert ws[0].error is None


def test_an_unknown_group_is_exit_2(
    conf: dict[str, Any], topic_factory: Callable[..., str], bootstrap: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    topic = topic_factory(partitions=1)
    code = main(["reset-offsets", "--bootstrap-servers", bootstrap, "--group", unique_name("nope"),
                 "--control-topic", conf["groupkit.control.topic"], "--topic", topic,
                 "--to-earliest", "--execute"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "not found" in err, err


def test_a_member_that_does_not_acknowledge_fails_the_command_with_exit_1(
    conf: dict[str, Any], topic_factory: Callable[..., str], bootstrap: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A member carries a reset out on its poll thread: one whose application stops polling
    (but whose control loop still heartbeats) does not acknowledge, and the command says so
    after its timeout; once the application polls again, the reset is applied."""
    topic = topic_factory(partitions=1)
    p = Producer({"bootstrap.servers": bootstrap})
    for _ in range(100):
        p.produce(topic, value=b"x", partition=0)
    assert p.flush(10) == 0
    c = GroupConsumer({**conf, "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        seen: list[int] = []

        def consumed() -> bool:
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                seen.append(m.offset())
            return len(seen) >= 30

        wait_for(consumed, 60, "30 records handed out", step=0)
        c.commit(offsets=[KTP(topic, 0, 30)], asynchronous=False)
        code = main(["reset-offsets", "--bootstrap-servers", bootstrap, "--group",
                     conf["group.id"], "--control-topic", conf["groupkit.control.topic"],
                     "-X", "session.timeout.ms=3000", "--topic", topic, "--to-offset", "5",
                     "--execute", "--timeout", "3"])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 1, err
        assert "not acknowledged within 3 s by: " + str(c.member_id) in err, err
        # describe shows the reset still pending, and who has not carried it out
        code = main(["describe", "--bootstrap-servers", bootstrap, "--group", conf["group.id"],
                     "--control-topic", conf["groupkit.control.topic"],
                     "-X", "session.timeout.ms=3000", "--no-lag"])  # fmt: skip
        out = capsys.readouterr().out
        assert code == 0, out
        assert "pending: 1 partition(s) not yet restarted" in out, out
        assert "not yet acknowledged by: " + str(c.member_id) in out, out
        # the application polls again: the reset is carried out, from offset 5
        after: list[int] = []

        def restarted() -> bool:
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                after.append(m.offset())
            return 5 in after

        wait_for(restarted, 30, "the partition to restart at 5", step=0)
        assert after[after.index(5) :] == list(range(5, 5 + len(after) - after.index(5)))
        g = {"bootstrap": bootstrap, "conf": conf, "topic": topic}
        cc = Consumer({"bootstrap.servers": bootstrap, "group.id": conf["group.id"]})
        got = cc.committed([KTP(topic, 0)], timeout=10)[0].offset
        cc.close()
        assert got == 5, (got, g)
    finally:
        c.close()
