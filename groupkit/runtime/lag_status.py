"""Who evaluates Burrow's status (groupkit/lagstatus.py), and from what: each member, for the
partitions it owns.

Every ``groupkit.lag.status.interval.ms`` (default 10 s; 0: off) a member's sampler thread:

1. reads the end and committed offsets of the partitions its data consumer has assigned
   (runtime/lag.py's :func:`~groupkit.runtime.lag.read_offsets`, through the consumer's
   AdminClient and the member's long-lived :class:`~groupkit.runtime.lag.CommittedReader`,
   never the data consumer);
2. adds to each partition's window of :data:`LAG_STATUS_WINDOW` commits (Burrow's default
   ten) one :class:`~groupkit.lagstatus.Commit` when the member committed the partition since
   the last sample, or its committed offset moved without it (an operator's reset): the
   committed offset read, dated by the member's own clock when it sent its newest commit (the
   broker keeps no commit time a client can read), and its lag then. A member that commits
   many times an interval adds one commit an interval: Burrow's ``min-distance`` at the
   interval. A member that stops committing adds none, and the window ages into STOP;
3. keeps the partition's last :data:`LAG_STATUS_WINDOW` log-end offsets beside it, and
   judges each partition with :func:`~groupkit.lagstatus.partition_status`.

What a member cannot see, and why it does not try:

- **A window does not follow its partition.** A partition that moves starts a fresh window
  at its new owner (a partition its member did not own at two samples in a row has lost
  its window): the old owner's samples could only travel in the control log, whose
  records carry no such field. Until a window holds :data:`LAG_STATUS_MINIMUM_COMPLETE` of
  its commits, the partition is OK (Burrow's ``minimum-complete``), so a newly assigned
  partition is judged after a few of its new owner's commits, never on a window of one.
- **A partition nobody owns has no status here.** Its owner died or was never granted it:
  no member samples it. The alerts on a stopped member and on a missing leader
  (``deploy/prometheus/groupkit-alerts.yml``) catch that group, and ``groupkit describe
  --status`` judges every partition from what it reads during its own run.
- **A partition its owner never committed** has no window: nothing is judged on it.

The statuses are what :meth:`StatusSampler.view` returns; the metrics read them there, through
``MemberProbe.lag_status``. Onlookers that see no commits, only offsets read over time
(``groupkit describe --status``, the leader's telemetry), judge with :func:`sampled_status`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from groupkit.errors import BrokerError
from groupkit.lagstatus import Commit, GroupStatus, PartitionStatus, group_status, partition_status
from groupkit.log import get_logger
from groupkit.runtime.lag import GroupOffsets
from groupkit.types import TopicPartition

__all__ = [
    "LAG_STATUS_MINIMUM_COMPLETE",
    "LAG_STATUS_WINDOW",
    "LagStatusView",
    "StatusSampler",
    "StatusWindows",
    "sampled_status",
]

_log = get_logger("groupkit.lag_status")

#: commits (and log-end offsets) a partition's window holds: Burrow's ``intervals`` default
LAG_STATUS_WINDOW = 10
#: the fraction of a full window below which a partition is OK, not judged yet
LAG_STATUS_MINIMUM_COMPLETE = 0.5


@dataclass(frozen=True, slots=True)
class LagStatusView:
    """The statuses of a member's owned partitions at one sample (wall ms ``at_ms``)."""

    at_ms: int
    partitions: Mapping[TopicPartition, PartitionStatus]
    #: Burrow's group status over these partitions (the group as this member sees it)
    group: GroupStatus
    #: each partition's window, oldest first
    commits: Mapping[TopicPartition, tuple[Commit, ...]] = field(default_factory=dict)
    #: each partition's log-end offsets beside it, oldest first
    ends: Mapping[TopicPartition, tuple[int, ...]] = field(default_factory=dict)


class _Window:
    __slots__ = ("commits", "ends", "lag", "seen_commit_ms")

    def __init__(self, size: int) -> None:
        self.commits: deque[Commit] = deque(maxlen=size)
        self.ends: deque[int] = deque(maxlen=size)
        self.lag: int | None = None
        #: the member's commit time the newest commit of the window was dated by
        self.seen_commit_ms: int | None = None


class StatusWindows:
    """The windows of the partitions one member owns, and their statuses. No I/O, no clock:
    :meth:`sample` takes what one read said and when."""

    def __init__(
        self,
        size: int = LAG_STATUS_WINDOW,
        minimum_complete: float = LAG_STATUS_MINIMUM_COMPLETE,
    ) -> None:
        self.size = size
        self.minimum_complete = minimum_complete
        self._windows: dict[TopicPartition, _Window] = {}
        #: partitions with a window that were not owned at the last sample
        self._absent: set[TopicPartition] = set()
        self._owned: set[TopicPartition] = set()

    def sample(
        self,
        owned: Iterable[TopicPartition],
        offsets: GroupOffsets,
        commit_times: Mapping[TopicPartition, int],
        now_ms: int,
    ) -> None:
        """Add one read of the brokers (``offsets``) for the partitions ``owned`` now; a
        partition not owned at two samples in a row loses its window, one newly owned starts
        a fresh one. (One sample is forgiven: an offset reset restarts a partition by an
        unassign and an assign in a row, and a sample may fall in between.)"""
        owned = set(owned)
        gone = set(self._windows) - owned
        for tp in gone & self._absent:
            del self._windows[tp]
        self._absent = gone - self._absent
        self._owned = owned
        for tp in owned:
            end = offsets.end.get(tp)
            if end is None:  # not answered this time
                continue
            w = self._windows.get(tp)
            if w is None:
                w = self._windows[tp] = _Window(self.size)
            w.ends.append(end)
            w.lag = offsets.lag.get(tp)
            committed = offsets.committed.get(tp)
            if committed is None:
                continue
            at = commit_times.get(tp)
            fresh_commit = at is not None and (w.seen_commit_ms is None or at > w.seen_commit_ms)
            moved = not w.commits or w.commits[-1].offset != committed
            if fresh_commit and not moved and at is not None and at <= w.commits[-1].timestamp_ms:
                # the commit that moved it, seen moved before its stamp was: already there
                w.seen_commit_ms = at
            elif fresh_commit or moved:
                w.commits.append(
                    Commit(committed, at if fresh_commit and at is not None else now_ms,
                           max(0, end - committed))
                )  # fmt: skip
                if fresh_commit:
                    w.seen_commit_ms = at

    def view(self, now_ms: int) -> LagStatusView:
        """The statuses of the partitions owned at the last sample, judged at ``now_ms``."""
        shown = sorted(
            ((tp, w) for tp, w in self._windows.items() if tp in self._owned), key=lambda x: x[0]
        )
        statuses = {
            tp: partition_status(
                w.commits,
                w.ends,
                w.lag,
                now_ms,
                window=self.size,
                minimum_complete=self.minimum_complete,
            )
            for tp, w in shown
        }
        return LagStatusView(
            now_ms,
            statuses,
            group_status(statuses.values()),
            {tp: tuple(w.commits) for tp, w in shown},
            {tp: tuple(w.ends) for tp, w in shown},
        )


def sampled_status(
    reads: list[tuple[int, GroupOffsets]],
) -> dict[TopicPartition, PartitionStatus]:
    """Burrow's status of each partition of the newest read, judged by an onlooker from reads
    of the offsets, oldest first, each with its wall time (ms): ``groupkit describe --status``
    over its run, the telemetry's leader over its last snapshots.

    An onlooker sees committed offsets move, never a commit: its window holds each committed
    offset seen, dated when it was first seen, with its lag then; beside it the log ends read,
    and the lag of the newest read. So a partition that lags and whose committed offset did
    not move over the reads is STOP (whether its owner stopped, stalls on one record, or
    commits less often than the reads span), and STALL never shows. What it sees that a
    member cannot: every partition, owned or not."""
    out: dict[TopicPartition, PartitionStatus] = {}
    if not reads:
        return out
    newest_ms, newest = reads[-1]
    for tp in newest.lag:
        commits: list[Commit] = []
        ends: list[int] = []
        for at, offsets in reads:
            end = offsets.end.get(tp)
            if end is None:
                continue
            ends.append(end)
            c = offsets.committed.get(tp)
            if c is not None and (not commits or commits[-1].offset != c):
                commits.append(Commit(c, at, max(0, end - c)))
        lag = newest.lag.get(tp) if tp in newest.end else None
        out[tp] = partition_status(commits, ends, lag, newest_ms)
    return out


class StatusSampler:
    """Samples a member's owned partitions every ``interval_s`` on a daemon thread of its own
    (a member whose app stopped polling must still be seen to stop), from :meth:`start` until
    :meth:`close`. ``owned``, ``read_offsets`` and ``commit_times`` are the member's (through
    its probe and data consumer); ``read_offsets`` answers ``None`` once the member is closed.
    """

    def __init__(
        self,
        interval_s: float,
        owned: Callable[[], Iterable[TopicPartition]],
        read_offsets: Callable[[Iterable[TopicPartition]], GroupOffsets | None],
        commit_times: Callable[[], Mapping[TopicPartition, int]],
        windows: StatusWindows | None = None,
    ) -> None:
        self.interval_s = interval_s
        self._owned = owned
        self._read = read_offsets
        self._commit_times = commit_times
        self._windows = windows or StatusWindows()
        self._lock = threading.Lock()
        self._view: LagStatusView | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="groupkit-lag-status", daemon=True
            )
            self._thread.start()

    def view(self) -> LagStatusView | None:
        """The statuses of the newest sample (``None`` before the first)."""
        with self._lock:
            return self._view

    def sample_once(self) -> None:
        """Take one sample now (what the thread does every interval)."""
        # The commit times first: a commit stamped by now is one the offsets read next show.
        times = self._copy_times()
        owned = sorted(set(self._owned()))
        offsets = GroupOffsets({}, {}, {})
        if owned:
            try:
                got = self._read(owned)
            except BrokerError as e:  # judged again at the next interval
                _log.debug("lag_status.offsets_unavailable", error=str(e))
                return
            if got is None:  # the member is closed
                return
            offsets = got
        now_ms = int(time.time() * 1000)
        with self._lock:
            self._windows.sample(owned, offsets, times, now_ms)
            self._view = self._windows.view(now_ms)

    def _copy_times(self) -> dict[TopicPartition, int]:
        source = self._commit_times()
        for _ in range(10):
            try:
                return dict(source)
            except RuntimeError:  # the poll thread committed a new partition meanwhile
                continue
        return {}

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample_once()
            except Exception:  # a sample must never end the sampling
                _log.exception("lag_status.sample_failed")

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
