"""A simulated liveness log (protocol version 2, docs/protocol-v2.md): members that heartbeat
into it and learn where each heartbeat landed from delivery reports, and a judge that replays it.

Time is real time in ms, advanced in steps of :attr:`LivenessSim.tick_ms`. What can go wrong:

- the partition's leadership moves between brokers whose clocks are offset from real time by up
  to ``max_skew_ms`` apart (``LogAppendTime`` may then step back);
- a heartbeat takes a while to be appended, and its report a while more (each member's in
  order, as an idempotent producer keeps them), now and then seconds;
- a report fails, and the heartbeat may or may not have been appended (a timeout);
- a member freezes (a GC pause, a stopped VM): it sends nothing and reads no report meanwhile;
- a process crashes, and a new process (a new incarnation) starts in its place;
- the judge reads the log late.

:meth:`LivenessSim.violations` says what broke the two properties of rules L1, L2 and L6:

- **fenced first**: no verdict ends a run while the member still counts itself running in it
  (its own deadline has not passed by its own clock);
- **agreement**: the member and the judge put every heartbeat in the same run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from groupkit.protocol.liveness import (
    Confirmed,
    Heartbeat,
    HeartbeatClock,
    LivenessJudge,
    Verdict,
)

__all__ = ["LivenessSim", "SimMember"]


@dataclass(slots=True)
class _InFlight:
    seq: int
    hb: Heartbeat
    append_at: int
    report_at: int
    #: the report says it failed; ``lands``: it was appended all the same
    fails: bool
    lands: bool
    ts: int | None = None


@dataclass(slots=True)
class SimMember:
    """One process of a member id: its own clock and what it has on its way."""

    name: str
    inc: str
    clock: HeartbeatClock
    interval_ms: int
    seq: int = 0
    next_send: int = 0
    frozen_until: int = 0
    alive: bool = True
    flight: list[_InFlight] = field(default_factory=list)
    #: seq -> run start, as this process's reports told it
    runs: dict[int, int] = field(default_factory=dict)
    #: when it last sent a heartbeat without prev_ts
    restarted_at: int = -1


class LivenessSim:
    """Members heartbeating into one liveness log, and one judge replaying it.

    ``members``: name -> (lease ms, skew allowance ms, heartbeat interval ms). ``max_skew_ms``:
    how far apart the brokers' clocks may be (within every member's allowance, the properties
    hold; beyond it, the schedules find where they break)."""

    def __init__(
        self,
        members: dict[str, tuple[int, int, int]],
        session_ms: int,
        max_skew_ms: int,
        seed: int,
        tick_ms: int = 10,
        max_append_ms: int = 60,
        max_report_ms: int = 60,
        max_read_ms: int = 80,
        slow_rate: float = 0.05,
        max_slow_ms: int = 4000,
        fail_rate: float = 0.02,
        freeze_rate: float = 0.003,
        max_freeze_ms: int = 5000,
        crash_rate: float = 0.001,
        move_rate: float = 0.01,
    ) -> None:
        self.rng = random.Random(seed)
        self.tick_ms = tick_ms
        self.session_ms = session_ms
        self.max_skew_ms = max_skew_ms
        self.max_append_ms, self.max_report_ms = max_append_ms, max_report_ms
        self.max_read_ms = max_read_ms
        self.slow_rate, self.max_slow_ms = slow_rate, max_slow_ms
        self.fail_rate, self.freeze_rate = fail_rate, freeze_rate
        self.max_freeze_ms, self.crash_rate, self.move_rate = max_freeze_ms, crash_rate, move_rate
        self.now = 0
        self.specs = dict(members)
        self.members: dict[str, SimMember] = {}
        self.dead: list[SimMember] = []
        self._incs = 0
        for name in members:
            self._start(name)
        #: the leading broker's clock offset from real time
        self.clock_offset = 0
        #: (append real time, stamp, heartbeat or None for another group's record)
        self.log: list[tuple[int, int, Heartbeat | None]] = []
        self.judge = LivenessJudge(session_ms)
        self.read = 0  # log records the judge has replayed
        self.read_lag = 0
        #: seq -> run start per incarnation, as the judge put each heartbeat
        self.judged: dict[str, dict[int, int]] = {}
        self.verdicts: list[tuple[int, Verdict]] = []
        self.problems: list[str] = []

    # ------------------------------------------------------------------ the run

    def _start(self, name: str) -> None:
        lease, skew, interval = self.specs[name]
        self._incs += 1
        m = SimMember(name, f"{name}#{self._incs}", HeartbeatClock(lease, skew), interval)
        m.next_send = self.now + self.rng.randrange(interval)
        self.members[name] = m

    def _stamp(self) -> int:
        return self.now + self.clock_offset

    def step(self) -> None:
        self.now += self.tick_ms
        rng = self.rng
        if rng.random() < self.move_rate:  # leadership moves to a broker with another clock
            self.clock_offset = rng.randint(-self.max_skew_ms // 2, self.max_skew_ms // 2)
        if rng.random() < 0.2:  # another group's record: the clock moves for everyone
            self.log.append((self.now, self._stamp(), None))
        for m in list(self.members.values()):
            self._member_step(m)
        self._judge_step()

    def _member_step(self, m: SimMember) -> None:
        rng = self.rng
        # what reaches the broker now is appended, stamped by the broker that leads now
        for f in m.flight:
            if f.ts is None and f.append_at <= self.now and (f.lands or not f.fails):
                f.ts = self._stamp()
                self.log.append((self.now, f.ts, f.hb))
        if rng.random() < self.crash_rate:
            m.alive = False
            self.dead.append(m)
            self._start(m.name)  # the orchestrator starts a new process at once
            return
        if self.now < m.frozen_until:
            return
        if rng.random() < self.freeze_rate:
            m.frozen_until = self.now + rng.randrange(self.tick_ms, self.max_freeze_ms)
            return
        while (
            m.flight
            and m.flight[0].report_at <= self.now
            and (m.flight[0].ts is not None or m.flight[0].fails)
        ):
            f = m.flight.pop(0)
            if f.fails:
                m.clock.failed(f.seq, maybe_landed=f.lands)
            else:
                assert f.ts is not None
                got = m.clock.confirmed(f.seq, f.ts)
                if got != Confirmed.UNKNOWN:
                    assert m.clock.run_start is not None
                    m.runs[f.seq] = m.clock.run_start
        if self.now >= m.next_send:
            lease = m.clock.lease_ms
            if m.clock.restarting and self.now - m.restarted_at < lease:
                return  # wait for the restart's report (or a lease) before the next one
            m.seq += 1
            prev_ts = m.clock.heartbeat(m.seq, self.now)
            if prev_ts is None:
                m.restarted_at = self.now
            hb = Heartbeat(m.name, m.inc, m.seq, prev_ts, lease, m.clock.skew_ms)
            last_append = m.flight[-1].append_at if m.flight else self.now
            append_at = max(last_append, self.now + self._delay(self.max_append_ms))
            last_report = m.flight[-1].report_at if m.flight else self.now
            report_at = max(last_report, append_at + self._delay(self.max_report_ms))
            fails = rng.random() < self.fail_rate
            m.flight.append(_InFlight(m.seq, hb, append_at, report_at, fails,
                                      lands=fails and rng.random() < 0.5))  # fmt: skip
            m.next_send = self.now + m.interval_ms

    def _delay(self, usual_ms: int) -> int:
        """Usually up to ``usual_ms``; now and then (``slow_rate``) up to ``max_slow_ms``: a
        request stuck behind a leader election, a report behind a retry."""
        if self.rng.random() < self.slow_rate:
            return self.rng.randrange(self.max_slow_ms + 1)
        return self.rng.randrange(usual_ms + 1)

    def _judge_step(self) -> None:
        if self.rng.random() < 0.05:
            self.read_lag = self.rng.randrange(self.max_read_ms + 1)
        while self.read < len(self.log) and self.log[self.read][0] <= self.now - self.read_lag:
            _at, ts, hb = self.log[self.read]
            offset = self.read
            self.read += 1
            if hb is None:
                found = self.judge.advance(offset, ts)
            else:
                found = self.judge.replay(offset, ts, hb)
                run = self.judge.runs.get((hb.member, hb.inc))
                if run is not None and run.seq == hb.seq:
                    self.judged.setdefault(hb.inc, {})[hb.seq] = run.start
            for v in found:
                self.verdicts.append((self.now, v))
                self._check_fenced(v)

    def _check_fenced(self, v: Verdict) -> None:
        """The member whose run ``v`` ends must have stopped counting itself running in it."""
        for m in [*self.members.values(), *self.dead]:
            if m.inc != v.inc or not m.alive:
                continue
            if m.clock.run_start == v.run_start and not m.clock.lapsed(self.now):
                self.problems.append(
                    f"t={self.now}: {v.kind} of {v.inc} run {v.run_start} at offset {v.offset}, "
                    f"but the member runs until {m.clock.deadline()}"
                )

    def run(self, ms: int) -> None:
        for _ in range(ms // self.tick_ms):
            self.step()

    # ------------------------------------------------------------------ the properties

    def violations(self) -> list[str]:
        """Both properties' failures so far (module docstring)."""
        out = list(self.problems)
        for m in [*self.members.values(), *self.dead]:
            judged = self.judged.get(m.inc, {})
            for seq, start in m.runs.items():
                if seq in judged and judged[seq] != start:
                    out.append(f"{m.inc} heartbeat {seq}: the member's run {start}, the judge's "
                               f"{judged[seq]}")  # fmt: skip
        if self.judge.late_continuations:
            out.append(f"{self.judge.late_continuations} heartbeat(s) continued an ended run")
        return out
