"""A newcomer's catch-up on the control partition: bounded by the newest snapshot, or whole.

The protocol side is :class:`groupkit.protocol.snapshot.CatchUp` (sans-I/O; the simulator drives
the same object); this module does its I/O: find where the last
``CATCH_UP_WINDOW_SESSIONS`` sessions of the log begin (``offsets_for_times`` from the wall
clock: a broker clock off by up to half a session still leaves a snapshot in the window, and
beyond that the catch-up only falls back to the whole log), read from there to the high
watermark, and read again from the snapshot's ``as_of`` if the window began after it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from groupkit.protocol.records import Signer, SnapshotRecord
from groupkit.protocol.snapshot import CatchUp, from_snapshot, newest_snapshot
from groupkit.protocol.state import GroupState
from groupkit.runtime.background import Background
from groupkit.runtime.control_log import ControlReader, unanswered

_T = TypeVar("_T")

#: the pauses before a catch-up the cluster did not answer is tried again: doubling, at most
UNANSWERED_PAUSE_S = (0.5, 5.0)


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """The outcome: the restored state (``None``: replay the whole log), and what it cost."""

    state: GroupState | None
    #: records fetched from the window (and the re-read)
    scanned: int
    #: records replayed into the restored state
    replayed: int
    #: the high watermark the catch-up restored the group at (the caller replays on from there)
    end: int


def until_answered(
    call: Callable[[], _T],
    stop: threading.Event,
    counted: Callable[[BaseException], None],
    again: Callable[[], _T] | None = None,
) -> _T | None:
    """``call()``, then ``again()`` (or ``call()``) after a pause, each time it fails because the
    cluster did not answer (:func:`unanswered`: a broker down, stalled or cut off for longer
    than a request's bound), until it succeeds; ``None`` once ``stop`` is set meanwhile.

    A member that has not joined has nothing to lose by waiting, and Kafka's own consumers
    keep asking for metadata while no broker answers; ending the member's control loop for
    good would leave the application a consumer that never joins. ``counted(error)`` logs and
    counts each failure. A refusal (an ACL, a missing topic) is raised at once.
    """
    pause, top = UNANSWERED_PAUSE_S
    attempt = call
    while True:
        try:
            return attempt()
        except Exception as e:
            if not unanswered(e):
                raise
            counted(e)
            if stop.wait(pause):
                return None
        pause, attempt = min(top, 2 * pause), again or call


def log_ends(
    reader: ControlReader, session_timeout_ms: int, now_ms: int, timeout: float = 10.0
) -> tuple[int, int | None]:
    """The high watermark and the first offset of the catch-up window, asked of the broker at
    once: two ListOffsets round trips in flight together instead of one after the other (they
    are the first two hops of every join)."""
    since = CatchUp.window_start_ms(now_ms, session_timeout_ms)
    window = Background(lambda: reader.offset_for_time(since, timeout), "groupkit-catch-up-window")
    end = reader.high_watermark(timeout)
    start = window.result()
    return end, start if end > 0 else None


def bounded_catch_up(
    reader: ControlReader,
    group: str,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    verifier: Signer | None,
    stopped: Callable[[], bool] = lambda: False,
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    timeout: float = 10.0,
    snapshots: Callable[[], ControlReader] | None = None,
    version: int = 1,
) -> CaughtUp:
    """Restore the group at the log's end (its high watermark, asked now) from its newest
    snapshot, if it can. ``snapshots``: protocol version 2's, opens a reader of the group's
    partition of the liveness topic, where its snapshots are (:func:`liveness_snapshot`); it
    is closed after.

    On ``state=None`` the reader is rewound: the caller replays the log from its beginning up
    to ``end``.
    """
    if snapshots is not None:
        return _from_liveness_snapshot(reader, group, session_timeout_ms, rebalance_timeout_ms,
                                       verifier, snapshots, stopped, timeout)  # fmt: skip
    end, window_start = log_ends(reader, session_timeout_ms, now_ms(), timeout)

    def read(offset: int) -> Iterator[tuple[int, bytes | None, bytes | None, int]]:
        reader.seek(offset)
        while reader.position < end and not stopped():
            for r in reader.poll(0.1):
                yield r.offset, r.key, r.value, r.timestamp_ms

    cu = CatchUp(group, session_timeout_ms, rebalance_timeout_ms, verifier, version)
    state = cu.run(window_start, end, read)
    if state is None:
        reader.rewind()
        return CaughtUp(None, cu.read, 0, end)
    return CaughtUp(state, cu.read, cu.replayed, end)


def liveness_snapshot(
    reader: ControlReader,
    group: str,
    session_timeout_ms: int,
    verifier: Signer | None,
    now_ms: int,
    timeout: float = 10.0,
) -> SnapshotRecord | None:
    """Protocol version 2: the group's newest valid snapshot on the liveness log
    (docs/protocol-v2.md, L8), read from the same window as version 1's catch-up reads the
    control log (the leader writes one every half session)."""
    end, start = log_ends(reader, session_timeout_ms, now_ms, timeout)
    if start is None or start >= end:
        return None
    deadline = time.monotonic() + timeout
    found: SnapshotRecord | None = None
    reader.seek(start)
    while reader.position < end and time.monotonic() < deadline:
        got = newest_snapshot(reader.poll(0.1), group, verifier, version=2)
        if got is not None and (found is None or got[1].as_of > found.as_of):
            found = got[1]
    return found


def _from_liveness_snapshot(
    reader: ControlReader,
    group: str,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    verifier: Signer | None,
    snapshots: Callable[[], ControlReader],
    stopped: Callable[[], bool],
    timeout: float,
) -> CaughtUp:
    """Version 2's catch-up (as ``GroupSim._catch_up_v2``): the newest snapshot of the liveness
    log, then the main log from its ``as_of + 1`` to the high watermark. Without one, or when
    the records after it are not whole (the cleaner has been past ``as_of``), the reader is
    rewound to replay the main log from its beginning."""
    now = int(time.time() * 1000)
    end = reader.high_watermark(timeout)
    liveness = snapshots()
    try:
        snap = liveness_snapshot(liveness, group, session_timeout_ms, verifier, now, timeout)
    finally:  # a consumer's close may take a while: not on the join's path
        threading.Thread(target=liveness.close, name="groupkit-close-reader", daemon=True).start()
    scanned = 0
    if snap is not None and snap.as_of < end:
        state = from_snapshot(snap, session_timeout_ms, rebalance_timeout_ms, verifier)
        reader.seek(snap.as_of + 1)
        whole = True
        while whole and reader.position < end and not stopped():
            for r in reader.poll(0.1):
                scanned += 1
                if r.offset != state.offset + 1:
                    whole = False  # a gap: compacted past as_of
                    break
                state.replay(r.offset, r.key, r.value, r.timestamp_ms)
        if whole and reader.position >= end:
            return CaughtUp(state, scanned, scanned, end)
    reader.rewind()
    return CaughtUp(None, scanned, 0, end)


def read_to_end(
    reader: ControlReader,
    group: str,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    verifier: Signer | None,
    timeout: float,
    version: int = 1,
) -> tuple[GroupState, bool]:
    """A group's state at the log end, for a one-shot tool (``describe``, ``reset-offsets``):
    caught up as a newcomer is (:func:`bounded_catch_up`), then replayed on to the high
    watermark it was asked at. Gives up after ``timeout`` seconds; the flag says whether the
    state reached that end (a caller that must act on a complete state refuses one that did
    not). ``version``: the protocol version the group speaks; a version-2 group's snapshots
    are on the liveness log, which a tool does not read: it replays the whole control log."""
    deadline = time.monotonic() + timeout
    got = bounded_catch_up(reader, group, session_timeout_ms, rebalance_timeout_ms, verifier,
                           lambda: time.monotonic() >= deadline, timeout=timeout,
                           version=version)  # fmt: skip
    state = got.state
    if state is None:
        state = GroupState(group, session_timeout_ms, rebalance_timeout_ms, verifier=verifier,
                           version=version)  # fmt: skip
    while reader.position < got.end and time.monotonic() < deadline:
        for r in reader.poll(0.2):
            state.replay(r.offset, r.key, r.value, r.timestamp_ms)
    return state, reader.position >= got.end
