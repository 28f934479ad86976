"""Is a consumer healthy, slow, stuck or stopped? Burrow's status of a partition and a group.

The reference semantics are those of LinkedIn Burrow's caching evaluator
(``core/internal/evaluator/caching.go``, proved by the cases of its ``caching_test.go``): an
operator who knows Burrow's OK, WARN, STOP, STALL and REWIND reads the same words here with the
same meaning. This module is that evaluator and nothing more: a pure function of a window of
samples and a ``now``. It reads no clock, talks to no broker and keeps no state; who samples
the window, and how often, is up to the caller.

The window of a partition is its last few committed offsets, oldest first, each a
:class:`Commit` ``(offset, timestamp_ms, lag)``: ``lag`` is how far the log end was ahead of
that offset when it was committed (``None`` when it was not known), ``timestamp_ms`` when it
was committed. Beside it the evaluator takes the partition's recent log-end offsets (oldest
first, as plain offsets: Burrow keeps a time with each sample but judges by the offsets alone),
the lag now, and ``now_ms``.

:func:`partition_status` answers, in this order:

1. **OK** when there is nothing to judge: no commit in the window; a window less complete than
   ``minimum_complete`` of ``window`` commits (Burrow's ``minimum-complete``, which is 0 unless
   set, so by default no window is too short); or a lag now that is unknown (``None``) or not
   above ``allowed_lag`` (Burrow's ``allowed-lag``, default 0). A partition that is caught up is
   OK whatever its history, and every rule below applies only while it lags.
2. **STOP** when the time since the last commit is longer than the window's span (last commit
   time minus first, strictly longer), unless one of the recent log-end offsets is at or below
   the last committed offset: then the consumer was caught up moments ago and new records have
   only just arrived. STOP comes first because an old window may show zero lag long ago while
   nobody has committed since. A window of one commit spans no time, so it is STOP as soon as
   any time passes with lag (and STALL before: its offset never moved); ``minimum_complete``
   is the way to wait for a fuller window.
3. **REWIND** when the committed offset went back somewhere in the window (the first place it
   did) and no later commit has come back up to the offset before the drop. A rewind the
   consumer has already recovered from is not held against it. This rule holds even if the lag
   was zero earlier in the window: a consumer reset to the earliest offset is in trouble however
   healthy it was before.
4. Only when no known lag in the window is at or below ``allowed_lag`` (lags of ``None`` are
   skipped; a window with zero lag somewhere was keeping up then, and is OK):

   a. **STALL** when the committed offset never moved: the consumer commits, but makes no
      progress.
   b. **WARN** when the known lags never went down from one commit to the next: the consumer
      progresses, but falls behind or only holds its ground. Fewer than two known lags show no
      decrease, so such a window is WARN too.
5. **OK** otherwise.

:func:`group_status` folds the partitions of a group the way Burrow does: **ERR** when any
partition is STOP, STALL or REWIND, else **WARN** when any is WARN, else **OK** (also for a
group of no partitions). A partition skipped under rule 1 counts as OK. Burrow's ``NOTFOUND``
(no such group) is not a status here: a caller that knows of no group has nothing to ask.

Both statuses are ``StrEnum`` s: each member is its word, so it is what JSON, ``str()`` and a
metric label give.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum, unique
from itertools import pairwise
from typing import NamedTuple

from groupkit.errors import ConfigError

__all__ = ["Commit", "GroupStatus", "PartitionStatus", "group_status", "partition_status"]


@unique
class PartitionStatus(StrEnum):
    """The status of one consumed partition, mildest first (Burrow's order)."""

    OK = "OK"
    """Keeping up, catching up, or nothing to judge yet."""
    WARN = "WARN"
    """Committing progress, but the lag never went down over the window: too slow."""
    STOP = "STOP"
    """Lagging, and no commit for longer than the window spans: nobody is consuming."""
    STALL = "STALL"
    """Lagging, and committing the same offset over the whole window: stuck on a record."""
    REWIND = "REWIND"
    """The committed offset went back and has not come up to where it was again."""


@unique
class GroupStatus(StrEnum):
    """The status of a group: its worst partition, with STOP, STALL and REWIND all ``ERR``."""

    OK = "OK"
    """Every partition is OK."""
    WARN = "WARN"
    """Some partition is WARN, none worse."""
    ERR = "ERR"
    """Some partition is STOP, STALL or REWIND."""


class Commit(NamedTuple):
    """One committed offset of a partition's window; a plain ``(offset, timestamp_ms, lag)``
    tuple is as good."""

    offset: int
    timestamp_ms: int
    lag: int | None
    """Log end minus ``offset`` when it was committed; ``None`` when not known."""


#: partition statuses that make a group ``ERR``
_ERRORS = frozenset({PartitionStatus.STOP, PartitionStatus.STALL, PartitionStatus.REWIND})


def partition_status(
    commits: Sequence[tuple[int, int, int | None]],
    end_offsets: Iterable[int],
    current_lag: int | None,
    now_ms: int,
    *,
    allowed_lag: int = 0,
    window: int | None = None,
    minimum_complete: float = 0.0,
) -> PartitionStatus:
    """Burrow's status of one partition (the rules are in this module's docstring).

    ``commits`` is the window, oldest first; ``end_offsets`` the recent log-end offsets of the
    partition; ``current_lag`` its lag now, ``None`` when unknown (then OK: nothing is judged
    without a lag); ``now_ms`` the time now, in the commits' clock. ``window`` is how many
    commits a full window holds and ``minimum_complete`` the fraction of it below which the
    partition is not judged yet (OK); without ``window`` every window counts as full.

    A negative ``allowed_lag`` or ``current_lag``, a ``minimum_complete`` outside [0, 1], or a
    ``window`` that is not positive or holds fewer than ``len(commits)`` is a ``ConfigError``.
    """
    if allowed_lag < 0:
        raise ConfigError(f"allowed_lag must be >= 0, got {allowed_lag!r}")
    if current_lag is not None and current_lag < 0:
        raise ConfigError(f"current_lag must be >= 0 or None, got {current_lag!r}")
    if not 0.0 <= minimum_complete <= 1.0:
        raise ConfigError(f"minimum_complete must be in [0, 1], got {minimum_complete!r}")
    if window is not None and (window < 1 or window < len(commits)):
        raise ConfigError(f"window must be >= 1 and hold all {len(commits)} commits, got {window}")

    if not commits:
        return PartitionStatus.OK
    if window is not None and len(commits) / window < minimum_complete:
        return PartitionStatus.OK
    if current_lag is None or current_lag <= allowed_lag:
        return PartitionStatus.OK

    offsets = [c[0] for c in commits]
    first_ms, last_ms = commits[0][1], commits[-1][1]
    if now_ms - last_ms > last_ms - first_ms and not _caught_up_recently(offsets[-1], end_offsets):
        return PartitionStatus.STOP
    if _unrecovered_rewind(offsets):
        return PartitionStatus.REWIND

    lags = [c[2] for c in commits if c[2] is not None]
    if any(lag <= allowed_lag for lag in lags):
        return PartitionStatus.OK
    if all(o == offsets[0] for o in offsets):
        return PartitionStatus.STALL
    if all(later >= earlier for earlier, later in pairwise(lags)):
        return PartitionStatus.WARN
    return PartitionStatus.OK


def group_status(statuses: Iterable[PartitionStatus]) -> GroupStatus:
    """The status of a group from its partitions' statuses: ERR when any is STOP, STALL or
    REWIND, else WARN when any is WARN, else OK (none at all is OK)."""
    worst = GroupStatus.OK
    for given in statuses:
        status = PartitionStatus(given)  # a plain word is checked, not trusted
        if status in _ERRORS:
            return GroupStatus.ERR
        if status is PartitionStatus.WARN:
            worst = GroupStatus.WARN
    return worst


def _caught_up_recently(last_offset: int, end_offsets: Iterable[int]) -> bool:
    """Whether some recent log end was at or below the last committed offset: the consumer had
    read everything there was then, so a long gap since its last commit may just be a quiet
    topic that has only now received records."""
    return any(end <= last_offset for end in end_offsets)


def _unrecovered_rewind(offsets: Sequence[int]) -> bool:
    """Whether the first drop of the committed offset in the window is still below where it
    dropped from at every later commit."""
    for i in range(1, len(offsets)):
        if offsets[i] < offsets[i - 1]:
            return all(o < offsets[i - 1] for o in offsets[i:])
    return False
