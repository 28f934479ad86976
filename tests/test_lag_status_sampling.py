"""How a member's samples become Burrow's windows (runtime/lag_status.py), and how an onlooker's
reads do (``sampled_status``): plain values, no broker. A real group turning each status is
in tests/test_lag_status_group.py."""

from __future__ import annotations

from groupkit.lagstatus import Commit, GroupStatus, PartitionStatus
from groupkit.runtime.lag import GroupOffsets
from groupkit.runtime.lag_status import (
    LAG_STATUS_MINIMUM_COMPLETE,
    LAG_STATUS_WINDOW,
    StatusWindows,
    sampled_status,
)
from groupkit.types import TopicPartition as TP

A = TP("t", 0)


def read(end: int, committed: int | None) -> GroupOffsets:
    lag = end - committed if committed is not None else 0
    return GroupOffsets({A: end}, {A: committed}, {A: lag})


def fill(w: StatusWindows, n: int, t0: int = 0, step: int = 1000) -> int:
    """``n`` samples of a member that commits a caught-up offset before each; the time now."""
    now = t0
    for i in range(n):
        now = t0 + i * step
        w.sample([A], read(10 * i, 10 * i), {A: now - 10}, now)
    return now


def test_the_defaults_are_burrows_window_judged_once_half_full() -> None:
    assert LAG_STATUS_WINDOW == 10 and LAG_STATUS_MINIMUM_COMPLETE == 0.5


def test_one_commit_per_sample_dated_by_the_members_commit_time() -> None:
    w = StatusWindows()
    now = fill(w, 12)
    v = w.view(now)
    assert v.partitions == {A: PartitionStatus.OK} and v.group is GroupStatus.OK
    commits = v.commits[A]
    assert len(commits) == LAG_STATUS_WINDOW  # the oldest two dropped out
    assert commits[-1] == Commit(110, now - 10, 0)


def test_a_member_that_stops_committing_ages_into_stop() -> None:
    w = StatusWindows()
    now = fill(w, 6)  # six commits over 5 s, caught up
    for i in range(1, LAG_STATUS_WINDOW + 1):  # records come; nobody commits any more
        w.sample([A], read(100 + i, 50), {A: now - 10}, now + i * 1000)
        status = w.view(now + i * 1000).partitions[A]
        # until the last log end it saw caught up leaves the window, a quiet topic may only
        # just have got records: OK (its window kept lag 0)
        assert status is (PartitionStatus.STOP if i == LAG_STATUS_WINDOW else PartitionStatus.OK)
    assert len(w.view(now).commits[A]) == 6  # no commit, nothing added


def test_the_same_offset_committed_every_sample_while_lag_grows_is_stall() -> None:
    w = StatusWindows()
    for i in range(LAG_STATUS_WINDOW):
        w.sample([A], read(60 + i, 50), {A: i * 1000 - 10}, i * 1000)
    assert w.view(9_000).partitions[A] is PartitionStatus.STALL


def test_an_offset_that_moves_without_a_commit_of_ours_is_dated_when_seen() -> None:
    w = StatusWindows()
    fill(w, 6)
    w.sample([A], read(60, 20), {A: 4_990}, 6_000)  # an operator's reset, say
    v = w.view(6_000)
    assert v.commits[A][-1] == Commit(20, 6_000, 40)
    assert v.partitions[A] is PartitionStatus.REWIND and v.group is GroupStatus.ERR


def test_a_window_starts_fresh_on_assignment_and_is_ok_until_half_full() -> None:
    w = StatusWindows()
    fill(w, 6)
    # revoked: not shown; not owned at a second sample either, its window goes (one sample
    # is forgiven: an offset reset unassigns and assigns again in a row)
    w.sample([], GroupOffsets({}, {}, {}), {A: 4_990}, 6_000)
    assert w.view(6_000).partitions == {}
    w.sample([A], read(60, 50), {A: 4_990}, 6_500)
    assert len(w.view(6_500).commits[A]) == 6  # back at once: the same window
    w.sample([], GroupOffsets({}, {}, {}), {A: 4_990}, 6_600)
    w.sample([], GroupOffsets({}, {}, {}), {A: 4_990}, 6_700)
    # assigned to a member that does not commit it: each offset is dated when first seen,
    # and a window of under five commits is not judged, however bad it looks
    for i in range(4):
        w.sample([A], read(100 + i, 50 - i), {}, 7_000 + i * 1000)
    assert [c.timestamp_ms for c in w.view(10_000).commits[A]] == [7_000, 8_000, 9_000, 10_000]
    assert w.view(60_000).partitions[A] is PartitionStatus.OK


def test_an_onlooker_sees_offsets_move_not_commits() -> None:
    def reads(*points: tuple[int, int]) -> list[tuple[int, GroupOffsets]]:
        return [(i * 1000, read(end, c)) for i, (end, c) in enumerate(points)]

    # the committed offset did not move while the partition lagged: STOP (stopped or stalled)
    assert sampled_status(reads((20, 10), (30, 10), (40, 10)))[A] is PartitionStatus.STOP
    # it moved, but the lag never went down: WARN
    assert sampled_status(reads((20, 10), (40, 15), (60, 20)))[A] is PartitionStatus.WARN
    # it moved and caught up, or lags less: OK
    assert sampled_status(reads((20, 10), (30, 30), (40, 40)))[A] is PartitionStatus.OK
    assert sampled_status(reads((20, 10), (30, 25), (40, 38)))[A] is PartitionStatus.OK
    # it went back
    assert sampled_status(reads((20, 10), (30, 20), (40, 5)))[A] is PartitionStatus.REWIND
    # a partition with no commit and a lag from auto.offset.reset: no window, OK
    assert sampled_status([(0, GroupOffsets({A: 9}, {A: None}, {A: 9}))])[A] is PartitionStatus.OK
    assert sampled_status([]) == {}
