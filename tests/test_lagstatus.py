"""Burrow's status: the evaluator's own cases, then properties of the rules.

The table is Burrow's (``core/internal/evaluator/caching_test.go``, the cases of its
``calculatePartitionStatus``, and the two groups of its storage fixture), in groupkit's
representation: commits ``(offset, timestamp_ms, lag)``, recent log-end offsets, the lag now,
and ``now`` in milliseconds (Burrow's cases give it in seconds). Each case is named by what it
shows rather than by its number there.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import groupkit
import groupkit.lagstatus
from groupkit.errors import ConfigError
from groupkit.lagstatus import (
    Commit,
    GroupStatus,
    PartitionStatus,
    group_status,
    partition_status,
)

OK, WARN, STOP, STALL, REWIND = (
    PartitionStatus.OK,
    PartitionStatus.WARN,
    PartitionStatus.STOP,
    PartitionStatus.STALL,
    PartitionStatus.REWIND,
)
ERRORS = {STOP, STALL, REWIND}

#: raise for a deeper search: GROUPKIT_HYPOTHESIS_SCALE=25 runs 25 times the examples
SCALE = int(os.environ.get("GROUPKIT_HYPOTHESIS_SCALE", "1"))
FAST = settings(
    max_examples=100 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


class Case(NamedTuple):
    commits: Sequence[tuple[int, int, int | None]]
    end_offsets: Sequence[int]
    current_lag: int
    now_s: int
    allowed_lag: int
    status: PartitionStatus


def _every_100s(offsets: list[int], lags: list[int | None]) -> list[tuple[int, int, int | None]]:
    """Commits at 100 s, 200 s, ... (the shape of most of Burrow's cases)."""
    return [(o, (i + 1) * 100_000, lg) for i, (o, lg) in enumerate(zip(offsets, lags, strict=True))]


_STEADY = [1000, 2000, 3000, 4000, 5000]
_REWOUND = [1000, 2000, 3000, 2000, 4000]  # back by 1000, then past where it was
_REWINDING = [1000, 2000, 3000, 2000, 2500]  # back by 1000, not yet where it was
_REWIND_LAGS: list[int | None] = [100, 150, 200, 1250, 300]
_GAPPY = [  # Burrow's case 0 with commits of unknown lag between
    (500 * k, 50_000 * k, 25 * k - 50 if k % 2 == 0 else None) for k in range(2, 12)
]
_QUIET = [  # one record a second, each read at once; then silence
    (792748079 + i, t, 0)
    for i, t in enumerate([
        1512224618356, 1512224619362, 1512224620366, 1512224621367, 1512224622370,
        1512224623373, 1512224624378, 1512224625379, 1512224626383, 1512224627383,
        1512224628383, 1512224629388, 1512224630391, 1512224631394, 1512224632397,
    ])
]  # fmt: skip

BURROW_CASES: dict[str, Case] = {
    # 0: lag was zero in the window, so a slow-looking window is OK
    "zero_lag_in_window_is_ok": Case(
        _every_100s(_STEADY, [0, 50, 100, 150, 200]), [5200], 200, 600, 0, OK
    ),
    # 1: 400 s since the last commit equals the window's 400 s span: not longer, so not STOP
    "gap_equal_to_span_is_not_stop": Case(
        _every_100s(_STEADY, [0, 50, 100, 150, 200]), [5200], 200, 900, 0, OK
    ),
    # 2: 500 s since the last commit over a 400 s span is STOP, zero lag long ago or not
    "stop_despite_zero_lag_earlier": Case(
        _every_100s(_STEADY, [0, 50, 100, 150, 200]), [5200], 200, 1000, 0, STOP
    ),
    # 3
    "stop_with_lag_all_along": Case(
        _every_100s(_STEADY, [50, 100, 150, 200, 250]), [5250], 250, 1000, 0, STOP
    ),
    # 4: the offset never moves, but lag was zero in the window: not yet STALL
    "unmoving_offset_after_zero_lag_is_ok": Case(
        _every_100s([1000] * 5, [0, 50, 100, 150, 200]), [1200], 200, 600, 0, OK
    ),
    # 5
    "unmoving_offset_with_lag_is_stall": Case(
        _every_100s([1000] * 5, [100, 150, 200, 250, 300]), [1300], 300, 600, 0, STALL
    ),
    # 6: the same offset, the same lag: still STALL (not WARN)
    "stall_when_lag_holds_steady": Case(
        _every_100s([1000] * 5, [100] * 5), [1100], 100, 600, 0, STALL
    ),
    # 7: the offset went back, then passed where it was: the rewind is forgiven
    "recovered_rewind_is_ok": Case(_every_100s(_REWOUND, _REWIND_LAGS), [4300], 300, 600, 0, OK),
    # 8: no lag now: OK, even though the commits alone would say STOP
    "no_lag_now_is_ok_even_if_stopped": Case(
        _every_100s(_STEADY, [50, 100, 150, 200, 250]), [5250], 0, 1000, 0, OK
    ),
    # 9: caught up with every commit, then records arrived and nobody commits: STOP
    "stop_when_records_arrive_after_quiet": Case(
        _QUIET, [792749024, 792749000, 792748800, 792748600, 792748500], 931, 1512224650, 0, STOP
    ),
    # 10: as 9, but a recent log end was at the last commit: caught up moments ago, not STOP
    "recent_end_at_last_commit_is_not_stop": Case(
        _QUIET, [792748094, 792748093, 792748093, 792748093], 1, 1512224650, 0, OK
    ),
    # 11: as 0, with commits of unknown lag in between: they change nothing
    "unknown_lags_are_skipped": Case(_GAPPY, [5700], 200, 600, 0, OK),
    # 12: a lag within the allowed lag is no lag, however long since the last commit
    "lag_within_allowed_lag_is_ok": Case(
        [(1000, 100_000, 2), (2000, 200_000, 1), (2000, 300_000, 1)], [2001], 1, 550, 1, OK
    ),
    # 13: as 5: lags all above the allowed lag, offset unmoving
    "stall_above_allowed_lag": Case(
        _every_100s([1000] * 5, [100, 150, 200, 250, 300]), [1300], 300, 600, 99, STALL
    ),
    # 14: as 7, with an allowed lag
    "recovered_rewind_above_allowed_lag_is_ok": Case(
        _every_100s(_REWOUND, _REWIND_LAGS), [4300], 300, 600, 99, OK
    ),
    # 15: the offset went back and has not come up to where it was
    "unrecovered_rewind": Case(_every_100s(_REWINDING, _REWIND_LAGS), [4300], 300, 600, 0, REWIND),
}


@pytest.mark.parametrize("case", BURROW_CASES.values(), ids=BURROW_CASES.keys())
def test_burrows_evaluator_cases(case: Case) -> None:
    got = partition_status(
        case.commits, case.end_offsets, case.current_lag, case.now_s * 1000,
        allowed_lag=case.allowed_lag,
    )  # fmt: skip
    assert got == case.status
    assert type(got) is PartitionStatus


def _fixture_group(commits: int, window: int, minimum_complete: float) -> PartitionStatus:
    """Burrow's storage fixture: commits of 1000, 1100, ... every 10 s from 100 s ago, into a
    window of 10; the log end is 4321 and every lag is taken against it."""
    now = 1_700_000_000_000
    start = now - 100_000
    window_commits = [(1000 + i * 100, start + i * 10_000, 4321 - (1000 + i * 100))
                      for i in range(commits)]  # fmt: skip
    lag = 4321 - window_commits[-1][0]
    return partition_status(window_commits, [4321], lag, now, window=window,
                            minimum_complete=minimum_complete)  # fmt: skip


def test_burrows_full_fixture_group_is_ok() -> None:
    """Ten commits in ten seconds' steps, lag falling: OK, and the group OK."""
    status = _fixture_group(10, 10, 0.0)
    assert status == OK
    assert group_status([status]) == GroupStatus.OK


def test_burrows_half_window_is_judged_by_default() -> None:
    """Five commits of a window of ten, the last 60 s ago over a 40 s span: Burrow's default
    ``minimum-complete`` is 0, so the half window is judged, STOP, and the group ERR."""
    status = _fixture_group(5, 10, 0.0)
    assert status == STOP
    assert group_status([status]) == GroupStatus.ERR


def test_a_window_below_minimum_complete_is_not_judged() -> None:
    assert _fixture_group(5, 10, 0.6) == OK
    assert _fixture_group(5, 10, 0.5) == STOP  # half of it is half complete: enough


def test_a_rewind_counts_even_after_zero_lag() -> None:
    """Burrow checks REWIND before the zero-lag rule: a consumer reset to the start after being
    caught up is in trouble, however well it did before."""
    commits = _every_100s([5000, 5100, 0, 100, 200], [0, 0, 5300, 5300, 5300])
    assert partition_status(commits, [5500], 5300, 600_000) == REWIND


def test_nothing_to_judge_is_ok() -> None:
    assert partition_status([], [100], 100, 10**12) == OK
    assert partition_status([(0, 0, 5)], [100], None, 10**12) == OK  # lag now unknown


def test_a_single_commit_stops_once_time_passes() -> None:
    """One commit spans no time: any time since it, with lag, is longer than the window; and
    its offset never moved, so until then it is STALL (hence ``minimum_complete``)."""
    assert partition_status([Commit(10, 1000, 5)], [15], 5, 1000) == STALL
    assert partition_status([Commit(10, 1000, 5)], [15], 5, 1001) == STOP
    assert partition_status([Commit(10, 1000, 5)], [10, 15], 5, 1001) == STALL  # caught up
    assert partition_status([Commit(10, 1000, 5)], [15], 5, 1001, window=10,
                            minimum_complete=0.2) == OK  # fmt: skip


def test_a_window_with_no_known_lag_is_warn_unless_stalled() -> None:
    """Without two known lags nothing shows the lag going down (Burrow's rule, as it is)."""
    assert partition_status([(1, 0, None), (2, 10, None)], [9], 7, 10) == WARN
    assert partition_status([(1, 0, None), (1, 10, None)], [9], 8, 10) == STALL


@pytest.mark.parametrize(
    "kwargs",
    [
        {"allowed_lag": -1},
        {"current_lag": -1},
        {"minimum_complete": 1.5},
        {"minimum_complete": -0.1},
        {"window": 0},
        {"window": 1},  # holds fewer than the two commits
    ],
    ids=lambda k: "-".join(f"{a}={b}" for a, b in k.items()),
)
def test_bad_arguments_are_a_config_error(kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"commits": [(1, 0, 3), (2, 10, 2)], "end_offsets": [4],
                            "current_lag": 2, "now_ms": 10, **kwargs}  # fmt: skip
    with pytest.raises(ConfigError):
        partition_status(**args)


# ------------------------------------------------------------------------- group


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([], GroupStatus.OK),
        ([OK, OK], GroupStatus.OK),
        ([OK, WARN], GroupStatus.WARN),
        ([WARN, STOP], GroupStatus.ERR),
        ([STALL], GroupStatus.ERR),
        ([OK, REWIND, WARN], GroupStatus.ERR),
    ],
)
def test_group_status(statuses: list[PartitionStatus], expected: GroupStatus) -> None:
    assert group_status(statuses) == expected


def test_group_status_checks_plain_words() -> None:
    assert group_status(["OK", "WARN"]) == GroupStatus.WARN  # type: ignore[list-item]
    with pytest.raises(ValueError):
        group_status(["ERR"])  # type: ignore[list-item]  # a group word, not a partition's


def test_statuses_are_their_words() -> None:
    assert [str(s) for s in PartitionStatus] == ["OK", "WARN", "STOP", "STALL", "REWIND"]
    assert [str(s) for s in GroupStatus] == ["OK", "WARN", "ERR"]
    assert f"{STOP}" == "STOP"


# -------------------------------------------------------------------- properties


@st.composite
def windows(draw: Any) -> list[tuple[int, int, int | None]]:
    """1-12 commits, times never going back, offsets in a narrow range so that they often
    repeat and go back, lags often equal and sometimes unknown."""
    n = draw(st.integers(1, 12))
    t = draw(st.integers(0, 10**6))
    out: list[tuple[int, int, int | None]] = []
    for _ in range(n):
        t += draw(st.integers(0, 5000))
        lag = draw(st.none() | st.integers(0, 20))
        out.append((draw(st.integers(0, 30)), t, lag))
    return out


ends = st.lists(st.integers(0, 60), max_size=6)
lag_now = st.integers(0, 40)
later = st.integers(0, 20_000)
allowed = st.integers(0, 10)


def _now(commits: list[tuple[int, int, int | None]], after: int) -> int:
    return commits[-1][1] + after


@FAST
@given(windows(), ends, lag_now, later, allowed)
def test_no_lag_beyond_the_allowed_is_ok(commits: Any, end: Any, lag: int, after: int,
                                         allowed_lag: int) -> None:  # fmt: skip
    lag = min(lag, allowed_lag)
    assert partition_status(commits, end, lag, _now(commits, after), allowed_lag=allowed_lag) == OK
    assert partition_status(commits, end, None, _now(commits, after)) == OK


@FAST
@given(windows(), ends, lag_now, later, allowed)
def test_each_status_has_its_evidence(commits: Any, end: Any, lag: int, after: int,
                                      allowed_lag: int) -> None:  # fmt: skip
    """What each status claims can be read off the window."""
    now = _now(commits, after)
    status = partition_status(commits, end, lag, now, allowed_lag=allowed_lag)
    offsets = [c[0] for c in commits]
    lags = [c[2] for c in commits if c[2] is not None]
    if status != OK:
        assert lag > allowed_lag
    if status == STOP:
        assert now - commits[-1][1] > commits[-1][1] - commits[0][1]
        assert all(e > offsets[-1] for e in end)
    if status == REWIND:
        assert any(b < a for a, b in pairwise(offsets))
    if status in (STALL, WARN):  # a window that reached the allowed lag is neither
        assert all(x > allowed_lag for x in lags)
    if status == STALL:
        assert len(set(offsets)) == 1
    if status == WARN:
        assert lags == sorted(lags)


@FAST
@given(windows(), ends, lag_now, later)
def test_offsets_that_never_go_back_are_never_rewind(commits: Any, end: Any, lag: int,
                                                     after: int) -> None:  # fmt: skip
    commits = [(o, t, lg) for (_, t, lg), o in zip(commits, sorted(c[0] for c in commits),
                                                    strict=True)]  # fmt: skip
    assert partition_status(commits, end, lag, _now(commits, after)) != REWIND


@FAST
@given(windows(), ends, lag_now, later, later)
def test_waiting_longer_can_only_stop(commits: Any, end: Any, lag: int, after: int,
                                      more: int) -> None:  # fmt: skip
    """Time matters only to STOP, the first rule: a later ``now`` keeps the status or makes it
    STOP, and a STOP stays STOP."""
    before = partition_status(commits, end, lag, _now(commits, after))
    then = partition_status(commits, end, lag, _now(commits, after + more))
    assert then in (before, STOP)
    if before == STOP:
        assert then == STOP


@FAST
@given(windows(), ends, lag_now, later, st.integers(0, 60))
def test_a_recent_end_at_the_commit_only_lifts_stop(commits: Any, end: Any, lag: int,
                                                    after: int, extra: int) -> None:  # fmt: skip
    """Another log-end sample can only tell that the consumer was caught up: a status that is
    not STOP stays what it was, and one at or below the last commit rules STOP out."""
    now = _now(commits, after)
    before = partition_status(commits, end, lag, now)
    then = partition_status(commits, [*end, extra], lag, now)
    if before != STOP:
        assert then == before
    if extra <= commits[-1][0]:
        assert then != STOP


@FAST
@given(windows(), ends, lag_now, later, allowed, st.integers(0, 10))
def test_a_larger_allowed_lag_keeps_ok(commits: Any, end: Any, lag: int, after: int,
                                       allowed_lag: int, more: int) -> None:  # fmt: skip
    """Allowing more lag can excuse a partition, never accuse one."""
    now = _now(commits, after)
    if partition_status(commits, end, lag, now, allowed_lag=allowed_lag) == OK:
        assert partition_status(commits, end, lag, now, allowed_lag=allowed_lag + more) == OK


@FAST
@given(windows(), ends, lag_now, later, st.integers(0, 8))
def test_unknown_lags_change_nothing_but_warn(commits: Any, end: Any, lag: int, after: int,
                                              salt: int) -> None:  # fmt: skip
    """Forgetting some commits' lags can only hide a zero or a fall: STOP and REWIND never
    read the lags, STALL and WARN still hold of fewer lags, and OK may turn STALL or WARN."""
    now = _now(commits, after)
    before = partition_status(commits, end, lag, now)
    blind = [(o, t, None if (i + salt) % 3 == 0 else lg) for i, (o, t, lg) in enumerate(commits)]
    then = partition_status(blind, end, lag, now)
    if before in (STOP, REWIND, STALL, WARN):
        assert then == before
    else:
        assert then in (OK, STALL, WARN)


@FAST
@given(st.lists(st.sampled_from(list(PartitionStatus)), max_size=8), st.randoms())
def test_group_is_err_exactly_when_a_partition_errs(statuses: list[PartitionStatus],
                                                    rnd: Any) -> None:  # fmt: skip
    got = group_status(statuses)
    assert (got == GroupStatus.ERR) == any(s in ERRORS for s in statuses)
    assert (got == GroupStatus.WARN) == (WARN in statuses and not ERRORS & set(statuses))
    shuffled = list(statuses)
    rnd.shuffle(shuffled)
    assert group_status(iter(shuffled)) == got  # order-free, and any iterable will do


# ------------------------------------------------------------------ the module


def test_the_module_is_public_beside_the_package() -> None:
    """``groupkit.lagstatus`` is a public module of its own, as ``groupkit.aio`` is: importing
    groupkit does not need it and does not re-export it."""
    assert groupkit.lagstatus.__all__ == [
        "Commit", "GroupStatus", "PartitionStatus", "group_status", "partition_status",
    ]  # fmt: skip
    for name in groupkit.lagstatus.__all__:
        assert getattr(groupkit.lagstatus, name).__module__ == "groupkit.lagstatus"
        assert name not in groupkit.__all__


def test_the_module_is_pure() -> None:
    """No broker, thread, clock or logging: every import is one of these."""
    tree = ast.parse(Path(groupkit.lagstatus.__file__).read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "collections.abc", "enum", "itertools", "typing",
                        "groupkit.errors"}  # fmt: skip
