"""Burrow's status of a real group's partitions, as its member judges them and as
``groupkit describe --status`` does: real broker, an in-process ``GroupConsumer`` whose app the
test thread plays, sampling every :data:`INTERVAL_MS` (``groupkit.lag.status.interval.ms``).

Each test starts from a healthy app: it has read and committed every record of its one
partition, so the window it sampled is full of commits without lag. Then the app stops, stalls,
is rewound or falls behind, and the test follows every status the member shows, in order, until
the one it expects: the first that is not OK must be exactly that one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KTP

from groupkit import GroupConsumer
from groupkit.cli import main
from groupkit.dev.harness import wait_for
from groupkit.lagstatus import Commit, GroupStatus, PartitionStatus
from groupkit.runtime.describe import describe_group, render
from groupkit.runtime.lag_status import LAG_STATUS_WINDOW
from groupkit.types import TopicPartition as TP

pytestmark = pytest.mark.broker

INTERVAL_MS = 200
#: records the healthy app has read and committed when a test starts
FIRST = 20

OK, WARN, STOP = PartitionStatus.OK, PartitionStatus.WARN, PartitionStatus.STOP
STALL, REWIND = PartitionStatus.STALL, PartitionStatus.REWIND


class App:
    """A member's app, played by the test thread: it reads its partition and commits."""

    def __init__(self, consumer: GroupConsumer, bootstrap: str, topic: str) -> None:
        self.c = consumer
        self.topic = topic
        self.tp = TP(topic, 0)
        #: the offset after the last record handed to the app
        self.next = 0
        #: records produced so far
        self.end = 0
        self._producer = Producer({"bootstrap.servers": bootstrap})

    def close(self) -> None:
        self._producer = None  # type: ignore[assignment]  # (a Producer closes when dropped)

    def produce(self, n: int) -> None:
        for i in range(n):
            self._producer.produce(self.topic, value=b"%d" % i, partition=0)
        assert self._producer.flush(30) == 0
        self.end += n

    def read(self, limit: int | None = None) -> int:
        """Poll once (up to ``limit`` records); how many the app was handed."""
        got = 0
        for m in self.c.consume(limit or 100, 0.05):
            if m.error() is None:
                self.next = (m.offset() or 0) + 1
                got += 1
        return got

    def read_exactly(self, n: int) -> None:
        target = self.next + n
        wait_for(lambda: self.next >= target or (self.read(target - self.next) >= 0
                                                 and self.next >= target),
                 30, f"the app to read up to {target}")  # fmt: skip
        assert self.next == target

    def commit(self, offset: int | None = None) -> None:
        at = self.next if offset is None else offset
        self.c.commit(offsets=[KTP(self.topic, 0, at)], asynchronous=False)

    def work_until(self, cond: Callable[[], bool], what: str) -> None:
        """A healthy app: reads what there is and commits it, until ``cond()``."""

        def step() -> bool:
            self.read()
            if self.next:  # (nothing to commit before the first record: nor owned, maybe)
                self.commit()
            return cond()

        wait_for(step, 30, what, step=0)

    def status(self) -> PartitionStatus | None:
        view = self.c.probe.lag_status()
        return None if view is None else view.partitions.get(self.tp)

    def group_status(self) -> GroupStatus | None:
        view = self.c.probe.lag_status()
        return None if view is None else view.group

    def window(self) -> tuple[Commit, ...]:
        view = self.c.probe.lag_status()
        return () if view is None else tuple(view.commits.get(self.tp, ()))

    def ends(self) -> tuple[int, ...]:
        view = self.c.probe.lag_status()
        return () if view is None else tuple(view.ends.get(self.tp, ()))

    def follow(self, until: PartitionStatus, doing: Callable[[], object], what: str) -> list[str]:
        """Run ``doing()`` over and over until the member shows ``until``; every status it
        showed meanwhile, in order, each once."""
        seen: list[str] = []

        def step() -> bool:
            doing()
            s = self.status()
            if s is not None and (not seen or seen[-1] != s):
                seen.append(s)
            return s is until or (s is not None and s is not OK)

        wait_for(step, 30, what, step=0.02)
        return seen


@pytest.fixture
def app(
    bootstrap: str,
    topic_factory: Callable[..., str],
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
) -> Iterator[App]:
    """A healthy app that has read and committed :data:`FIRST` records, its window full."""
    topic = topic_factory(partitions=1)
    # A session that a loaded machine does not end by accident: no test here is about one
    # (the tests that read conf after this fixture see the same).
    conf.update({"session.timeout.ms": 10_000, "heartbeat.interval.ms": 500})
    c = GroupConsumer({**conf, "enable.auto.commit": False,
                       "groupkit.lag.status.interval.ms": INTERVAL_MS})  # fmt: skip
    consumers.append(c)
    c.subscribe([topic])
    a = App(c, bootstrap, topic)
    a.produce(FIRST)
    a.work_until(lambda: a.next == FIRST and len(a.window()) == LAG_STATUS_WINDOW
                 and all(x.lag == 0 for x in a.window()) and a.status() is OK,
                 "the app to read everything and its window to fill")  # fmt: skip
    assert a.group_status() is GroupStatus.OK
    yield a
    a.close()


def test_an_app_that_stops_committing_while_records_come_turns_stop_then_ok(app: App) -> None:
    app.produce(10)  # the app neither polls nor commits any more
    # STOP once nothing was committed for longer than the window spans and no log end in the
    # window shows the app caught up; OK until then (its window kept lag 0), never STALL:
    # no commit means no sample of the same offset
    assert app.follow(STOP, lambda: None, "the partition to turn STOP") == [OK, STOP]
    assert app.group_status() is GroupStatus.ERR
    assert app.window()[-1].offset == FIRST
    app.work_until(lambda: app.next == FIRST + 10 and app.status() is OK, "OK again")
    assert app.group_status() is GroupStatus.OK


def test_an_app_that_commits_the_same_offset_while_lag_grows_turns_stall(app: App) -> None:
    def stuck() -> None:  # stuck on one record: it commits where it is, and reads nothing
        app.produce(1)
        app.commit(FIRST)

    assert app.follow(STALL, stuck, "the partition to turn STALL") == [OK, STALL]
    assert {x.offset for x in app.window()} == {FIRST}
    assert all(x.lag for x in app.window())  # every commit of the window lagged
    assert app.group_status() is GroupStatus.ERR
    app.work_until(lambda: app.next == app.end and app.status() is OK, "OK again")


def test_an_app_that_commits_an_older_offset_turns_rewind(app: App) -> None:
    assert app.follow(REWIND, lambda: app.commit(5), "the partition to turn REWIND") == [
        OK, REWIND,
    ]  # fmt: skip
    assert app.window()[-1] == Commit(5, app.window()[-1].timestamp_ms, FIRST - 5)
    assert app.group_status() is GroupStatus.ERR
    # committed back up to where it went back from: recovered
    app.work_until(lambda: app.status() is OK, "OK again")


def test_groupkit_reset_offsets_rewinds_the_partition(app: App, conf: dict[str, Any]) -> None:
    """An operator's reset to an older offset: the member restarts the partition there and
    commits it, and the sampler sees the offset go back."""
    codes: list[int] = []
    reset = threading.Thread(target=lambda: codes.append(main([
        "reset-offsets", "--bootstrap-servers", conf["bootstrap.servers"],
        "--group", conf["group.id"], "--control-topic", conf["groupkit.control.topic"],
        "-X", f"session.timeout.ms={conf['session.timeout.ms']}", "--topic", app.topic,
        "--to-offset", "5", "--execute", "--timeout", "30",
    ])), daemon=True)  # fmt: skip
    reset.start()
    # The app polls (it must, to carry the reset out) but commits nothing of its own.
    assert app.follow(REWIND, app.read, "the partition to turn REWIND") == [OK, REWIND]
    wait_for(lambda: app.read() >= 0 and not reset.is_alive(), 40, "the reset to be done")
    assert codes == [0]
    assert app.window()[-1].offset == 5
    app.work_until(lambda: app.next == FIRST and app.status() is OK, "OK again")


def test_an_app_slower_than_its_producer_turns_warn_then_ok_once_caught_up(app: App) -> None:
    """Each step the producer writes 20 records and the app reads and commits 10, so every
    commit lags 10 more than the one before. Each step waits for the sampler: to see the
    records (so that no sample reads the new commit beside an older log end), then to take
    the commit into the window."""
    seen: list[str] = []
    for _ in range(2 * LAG_STATUS_WINDOW):
        end = app.end + 20
        app.produce(20)
        wait_for(lambda: app.ends()[-1:] == (end,), 10, "a sample of the new log end")  # noqa: B023
        app.read_exactly(10)
        app.commit()
        wait_for(lambda: app.window()[-1].offset == app.next, 10, "a sample of the commit")
        s = app.status()
        assert s is not None
        if not seen or seen[-1] != s:
            seen.append(s)
        if s is not OK:
            break
    # OK while the window still held commits without lag; then WARN: progress, but the lag
    # never went down
    assert seen == [OK, WARN]
    lags = [x.lag for x in app.window()]
    assert all(lag and lag > 0 for lag in lags) and lags == sorted(lags)
    assert app.group_status() is GroupStatus.WARN
    app.work_until(lambda: app.next == app.end and app.status() is OK, "OK once caught up")
    assert app.group_status() is GroupStatus.OK


def test_describe_status_judges_the_partition_over_its_samples(
    app: App, conf: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["describe", "--bootstrap-servers", conf["bootstrap.servers"], "--group",
            conf["group.id"], "--control-topic", conf["groupkit.control.topic"],
            "-X", f"session.timeout.ms={conf['session.timeout.ms']}", "--status",
            "--status-samples", "3", "--status-interval", "0.5"]  # fmt: skip
    # caught up: OK
    assert main(args) == 0
    out = capsys.readouterr().out
    header, row = out.splitlines()[:2]
    assert header.split()[-1] == "STATUS" and row.split()[-1] == "OK", out
    assert "status: OK" in out.splitlines(), out
    # lagging, and its committed offset does not move during describe's run: STOP
    app.produce(10)
    t0 = time.monotonic()
    desc = describe_group(conf, status_samples=3, status_interval=0.5)
    assert time.monotonic() - t0 >= 1.0  # three reads, half a second apart
    assert [r["status"] for r in desc["partitions"]] == [STOP]
    assert desc["status"] == GroupStatus.ERR
    assert render(desc).splitlines()[-1] == "status: ERR"
    # without --status: no column, no status
    plain = describe_group(conf)
    assert plain["status"] is None and plain["partitions"][0]["status"] is None
    assert "STATUS" not in render(plain).splitlines()[0].split()
