"""Protocol version 2's liveness: heartbeats on a log of their own (docs/protocol-v2.md, rules
L1, L2 and L6), proven here before the runtime runs them; the runtime speaks version 1.

Two sides read the same heartbeats differently:

- :class:`HeartbeatClock` is a member's own side. It learns where each of its heartbeats landed
  from the producer's delivery report (offset and ``LogAppendTime``), never by reading the log,
  and says when the member must stop processing (its *deadline*, by its own monotonic clock).
- :class:`LivenessJudge` is the judge's side (the leader and its successors): it replays the
  liveness log in order and says when a member's process or session has ended, and when a
  heartbeat restarted a member's liveness. Those are the *verdicts* the leader writes into the
  main log, where they free the member's partitions.

The safety argument (docs/protocol-v2.md, "Safety") is that no verdict can end a *run* (an
unbroken chain of continuing heartbeats of one incarnation) before the member's deadline for
that run has passed, and that both sides agree on where every run starts, although the member
never reads the log: a heartbeat continues iff it lands within its lease of the stamp its
``prev_ts`` names, and the judge ends a run only a skew allowance after its lease.
``tests/test_protocol_liveness.py`` checks both over random schedules
(:mod:`groupkit.testing.liveness_sim`).

Pure: every time is passed in, in milliseconds. ``ts`` is a broker's ``LogAppendTime``;
``now_ms`` is the member's monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum, unique

__all__ = [
    "Confirmed",
    "Heartbeat",
    "HeartbeatClock",
    "LivenessJudge",
    "Run",
    "Verdict",
    "VerdictKind",
    "continues",
]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One ``H`` record: a member's "still running" (rule L1)."""

    member: str
    inc: str
    seq: int
    #: the stamp of the own heartbeat this one's liveness runs from; ``None`` after a lapse
    prev_ts: int | None
    #: how long the process may process after its newest confirmed heartbeat (rule L7)
    lease_ms: int
    #: the writer's clock-skew allowance
    skew_ms: int


def continues(hb: Heartbeat, ts: int) -> bool:
    """Whether ``hb``, stamped ``ts``, continues the run its ``prev_ts`` names (rule L1.3), as
    far as its own stamps say. The judge also requires that it has not ended that run first;
    the safety argument shows that it never has when this holds."""
    return hb.prev_ts is not None and ts - hb.prev_ts < hb.lease_ms


@unique
class Confirmed(StrEnum):
    """What a delivery report told the member about one of its heartbeats."""

    CONTINUED = "continued"
    """It continues the member's run: the deadline may move on."""
    RESTARTED = "restarted"
    """It starts a new run: whatever the member owned is void (it had fenced by then)."""
    UNKNOWN = "unknown"
    """A report of a heartbeat the member no longer tracks (a superseded one), or one sent
    after a heartbeat whose report failed although it may have landed: which run it is in,
    the member cannot know."""


@dataclass(slots=True)
class _Sent:
    sent_ms: int
    prev_ts: int | None
    #: send time of the heartbeat ``prev_ts`` names: the deadline's basis while this is on its way
    basis_sent: int | None


class HeartbeatClock:
    """A member's own liveness, from its delivery reports (rules L1 and L6).

    The member fences itself at ``s + lease − skew``, where ``s`` is the send time of its newest
    confirmed heartbeat that continued, or earlier: while a heartbeat written with an older
    ``prev_ts`` is on its way (it may land too late and restart the run, and the member cannot
    know before its report comes), ``s`` is that older heartbeat's; while one without
    ``prev_ts`` is on its way, the member stays lapsed. A heartbeat whose report failed although
    it may have landed binds as one on its way does, for good: no later report moves the
    deadline on, so the member lapses at it and starts a new run. That deadline never moves
    back within a run.
    """

    def __init__(self, lease_ms: int, skew_ms: int) -> None:
        if not 0 <= skew_ms < lease_ms:
            raise ValueError(f"skew_ms must be in [0, lease_ms), got {skew_ms}")
        self.lease_ms = lease_ms
        self.skew_ms = skew_ms
        self._sent: dict[int, _Sent] = {}
        #: (seq, send time, stamp) of the newest confirmed heartbeat of the current run
        self._basis: tuple[int, int, int] | None = None
        #: the first heartbeat of the current run (runs are named by it, as the judge names them)
        self.run_start: int | None = None
        #: seqs whose report failed and that may have landed: the member cannot know their stamp
        self._unknown: set[int] = set()

    def deadline(self) -> int | None:
        """Monotonic ms after which the member must not process (``None``: lapsed, or nothing
        confirmed yet)."""
        if self._basis is None:
            return None
        # (a heartbeat whose report failed stays in _sent: it binds as if still on its way,
        # and no later report can move the basis on: confirmed())
        basis = self._basis[1]
        for s in self._sent.values():
            if s.basis_sent is None:
                return None  # one without prev_ts on its way: it restarts the run where it lands
            basis = min(basis, s.basis_sent)
        return basis + self.lease_ms - self.skew_ms

    @property
    def awaiting_report(self) -> bool:
        """A heartbeat's delivery report is still to come (not one that failed and may have
        landed: no report will come for it). Until it does, the deadline stays on the basis
        before it: its reader must serve the report well before that deadline."""
        return any(q not in self._unknown for q in self._sent)

    @property
    def restarting(self) -> bool:
        """A heartbeat without ``prev_ts`` is on its way: sending more before its report only
        restarts the run again where each lands (as version 1's rule 10.5, the member waits)."""
        return any(s.prev_ts is None for s in self._sent.values())

    def lapsed(self, now_ms: int) -> bool:
        d = self.deadline()
        return d is None or now_ms >= d

    def heartbeat(self, seq: int, now_ms: int) -> int | None:
        """Note heartbeat ``seq`` sent now; returns the ``prev_ts`` it must carry."""
        if self._sent and seq <= max(self._sent):
            raise ValueError(f"heartbeat {seq} is not newer than one already sent")
        lapsed = self.lapsed(now_ms)
        prev_ts = None if lapsed or self._basis is None else self._basis[2]
        basis_sent = None if prev_ts is None or self._basis is None else self._basis[1]
        self._sent[seq] = _Sent(now_ms, prev_ts, basis_sent)
        return prev_ts

    def confirmed(self, seq: int, ts: int) -> Confirmed:
        """Heartbeat ``seq`` landed, stamped ``ts`` (its delivery report)."""
        s = self._sent.pop(seq, None)
        if s is None:
            return Confirmed.UNKNOWN
        hb = Heartbeat("", "", seq, s.prev_ts, self.lease_ms, self.skew_ms)
        if s.prev_ts is not None and any(q < seq for q in self._unknown):
            # An earlier heartbeat may have landed, where nobody told us: if it restarted the
            # run, this one continues the new run, not ours. We cannot tell which, so we stay
            # lapsed (deadline) until a heartbeat without prev_ts starts a run we know.
            return Confirmed.UNKNOWN
        if continues(hb, ts):
            if self._basis is None or seq > self._basis[0]:
                self._basis = (seq, s.sent_ms, ts)
            return Confirmed.CONTINUED
        # A new run starts here. Everything sent before it landed before it (the producer keeps
        # their order) and belongs to runs that have ended: none binds the deadline any more.
        for older in [q for q in self._sent if q < seq]:
            del self._sent[older]
        self._unknown = {q for q in self._unknown if q > seq}
        self._basis = (seq, s.sent_ms, ts)
        self.run_start = seq
        return Confirmed.RESTARTED

    def restart(self) -> None:
        """Lapse now: the member learned that its run is over (a verdict on it in the main
        log), so its next heartbeat names no ``prev_ts`` and starts a new one. It only makes
        the member more careful."""
        self._basis = None

    def failed(self, seq: int, maybe_landed: bool) -> None:
        """Heartbeat ``seq``'s report is an error. ``maybe_landed``: it may still have been
        appended (a timeout): its stamp is unknown, so the deadline goes no further than its
        bound, and the member starts a new run once it has passed."""
        s = self._sent.pop(seq, None)
        if s is not None and maybe_landed:
            self._unknown.add(seq)
            self._sent[seq] = s  # still bounds the deadline: see deadline()


@unique
class VerdictKind(StrEnum):
    """What the judge found (rule L3)."""

    RESTARTED = "restarted"
    """A heartbeat that did not continue the run: the run's claims are void."""
    PROCESS_ENDED = "process_ended"
    """No continuing heartbeat within the lease and the allowance: the process may be gone."""
    EXPIRED = "expired"
    """No continuing heartbeat within the session and the allowance: the membership ends."""


@dataclass(frozen=True, slots=True)
class Verdict:
    member: str
    inc: str
    #: the run it ends: the seq of that run's first heartbeat (as the judge saw it)
    run_start: int
    kind: VerdictKind
    #: the liveness-log offset of the record at which the judge found it
    offset: int


@dataclass(slots=True)
class Run:
    """The judge's view of one incarnation's current run."""

    start: int
    seq: int
    #: liveness time at its newest continuing heartbeat
    last_seen: int
    lease_ms: int
    skew_ms: int
    process_ended: bool = False
    #: ``start`` is the run's first heartbeat; false when the judge first saw the run at a
    #: heartbeat that continued it (it started mid-log): the run started earlier
    known_start: bool = True


@dataclass(slots=True)
class LivenessJudge:
    """The judge's replay of the liveness log (rule L2). ``session_ms``: the group's session.

    A judge that starts mid-log knows nobody's ``last_seen`` until their next heartbeat: it ends
    only the runs it has seen a heartbeat of, whose later heartbeats it reads all of, as any
    judge does; the runs it has not seen are the main log's to find (rule L5.4,
    ``Judge._find_unseen``)."""

    session_ms: int
    runs: dict[tuple[str, str], Run] = field(default_factory=dict)
    time: int | None = None
    offset: int = -1
    #: heartbeats ignored: not newer than their run's newest
    stale: int = 0
    #: heartbeats that continued a run by their stamps after the run's process had ended
    late_continuations: int = 0
    #: no run ends before this liveness time (a lower bound: a run that continues only moves
    #: its end later), so a heartbeat before it needs no look at every run (:meth:`_expire`)
    _next_end: int | None = None
    #: counts the runs started, restarted and ended: while it and the main log stand still, a
    #: judge's look for runs it has not seen finds what it found (``Judge._find_unseen``)
    epoch: int = 0

    def replay(self, offset: int, ts: int, hb: Heartbeat) -> list[Verdict]:
        """Feed one heartbeat in log order; the verdicts it and the clock's advance bring."""
        if offset <= self.offset:
            raise ValueError(f"offset {offset} is not above {self.offset}")
        self.offset = offset
        self.time = ts if self.time is None else max(self.time, ts)
        out = self._expire(offset)
        key = (hb.member, hb.inc)
        run = self.runs.get(key)
        if run is not None and hb.seq <= run.seq:
            self.stale += 1
            return out
        if run is not None and continues(hb, ts):
            if not run.process_ended:
                run.seq, run.last_seen = hb.seq, self.time
                run.lease_ms, run.skew_ms = hb.lease_ms, hb.skew_ms
                end = self._end_of(run)  # (later, unless its lease or allowance shrank)
                if self._next_end is not None and end < self._next_end:
                    self._next_end = end
                return out
            # After an end, the allowance makes every later heartbeat late by its own stamps,
            # as long as the brokers' skew is within the writer's allowance: this counts the
            # times it was not, and the run restarts (the safe way).
            self.late_continuations += 1
        if run is not None:
            out.append(Verdict(hb.member, hb.inc, run.start, VerdictKind.RESTARTED, offset))
        known = run is not None or not continues(hb, ts)
        new = self.runs[key] = Run(hb.seq, hb.seq, self.time, hb.lease_ms, hb.skew_ms, False, known)
        self.epoch += 1
        end = self._end_of(new)
        if self._next_end is not None and end < self._next_end:
            self._next_end = end
        return out

    def advance(self, offset: int, ts: int) -> list[Verdict]:
        """Another record of the liveness log (another group's, a snapshot): only the clock."""
        if offset <= self.offset:
            raise ValueError(f"offset {offset} is not above {self.offset}")
        self.offset = offset
        self.time = ts if self.time is None else max(self.time, ts)
        return self._expire(offset)

    def _expire(self, offset: int) -> list[Verdict]:
        now = self.time
        if now is None:
            return []
        if self._next_end is not None and now < self._next_end:
            return []
        out: list[Verdict] = []
        next_end: int | None = None
        for key, run in list(self.runs.items()):
            if now >= run.last_seen + self.session_ms + run.skew_ms:
                out.append(Verdict(key[0], key[1], run.start, VerdictKind.EXPIRED, offset))
                del self.runs[key]
                self.epoch += 1
                continue
            if not run.process_ended and now >= run.last_seen + run.lease_ms + run.skew_ms:
                run.process_ended = True
                out.append(Verdict(key[0], key[1], run.start, VerdictKind.PROCESS_ENDED, offset))
            end = self._end_of(run)
            next_end = end if next_end is None else min(next_end, end)
        self._next_end = next_end
        return out

    def _end_of(self, run: Run) -> int:
        """The liveness time at which ``run``'s next end (its process's, else its session's)
        falls, unless it continues."""
        if run.process_ended:
            return run.last_seen + self.session_ms + run.skew_ms
        return run.last_seen + min(run.lease_ms, self.session_ms) + run.skew_ms
