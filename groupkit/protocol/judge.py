"""Protocol version 2's judging (docs/protocol-v2.md, rules L2 to L5): which nodes read the
liveness log, and the verdicts and the lease they write into the main log.

:class:`~groupkit.protocol.liveness.LivenessJudge` replays the liveness log and finds runs that
ended. A :class:`Judge` is one node's use of it:

- **Who judges** (:meth:`Judge.wanted`): the leader, its ``successors`` (the members that
  follow it in ``(joined_at, member id)`` order), and any member that has read no lease for a
  session and a lease interval (the leader and its successors may all be gone).
- **Where it starts** (:meth:`Judge.start`): after the newest lease's ``live_offset``, where
  the leader had judged to; from the log's start if there is none.
- **What it writes** (:meth:`Judge.due`): a verdict for every run it found ended that the main
  log still has a live membership or a hold in, and the lease if it leads. A successor waits
  a lease interval before writing what it found, so that normally the leader's verdict is the
  only one (a second one would be the same fact and change nothing), but not on the leader
  itself, which cannot write its own: the group's failover is then a session and the skew
  allowance after the leader's last heartbeat (rule L5.3), not a lease interval more.
- **Runs the main log names that it has never seen** (rule L5.4): a membership's run whose
  heartbeats a judge that started mid-log has not read within a session (and the skew
  allowance twice) of when it started, and of the membership's newest record, has ended:
  a run that continues has heartbeats less than a lease apart, and the member sent the run's
  first heartbeat before any record naming it, so a late first heartbeat would reach the member
  after its own deadline, and it would never continue that run.

Pure: times are passed in; ``now_ms`` is the node's monotonic clock, ``ts`` a broker's time.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from groupkit.errors import RecordRejected
from groupkit.protocol.group import GroupData
from groupkit.protocol.holds import restated
from groupkit.protocol.keys import KIND_HEARTBEAT
from groupkit.protocol.liveness import Heartbeat, LivenessJudge, VerdictKind
from groupkit.protocol.records import (
    HeartbeatKey,
    HeartbeatRecord,
    Signer,
    decode,
    encode,
    lease_record,
    other_group_key,
    verdict_record,
)

#: a fact a judge found: (member id, process, run, kind)
Fact = tuple[str, str, int, str]


@dataclass(slots=True)
class _Pending:
    #: our clock when we found it
    found: int
    #: our clock when we last wrote it, if we did
    written: int | None = None


class Judge:
    """One node's judging of its group's liveness log (module docstring)."""

    def __init__(
        self,
        group: str,
        member_id: str,
        incarnation: str,
        *,
        session_ms: int,
        skew_ms: int,
        lease_interval_ms: int,
        successors: int = 2,
        signer: Signer | None = None,
    ) -> None:
        self.group = group
        self.member_id = member_id
        self.incarnation = incarnation
        self.session_ms = session_ms
        self.skew_ms = skew_ms
        self.lease_interval_ms = lease_interval_ms
        self.successors = successors
        self.signer = signer
        #: the replay of the liveness log, while this node judges
        self.live: LivenessJudge | None = None
        #: liveness time of the first record read since it started judging
        self._since: int | None = None
        self._pending: dict[Fact, _Pending] = {}
        #: liveness time at which each membership or hold was first noticed in the main log
        self._noticed: dict[tuple[str, str, int], tuple[int, int]] = {}
        self._lease_seq = 0
        self._lease_sent: int | None = None
        #: the newest lease read in the main log, and our clock then
        self._lease_seen: tuple[object, int] | None = None
        #: heartbeats that did not decode or verify (rule L2.4)
        self.rejected = 0
        #: ((state, its changes), the leader and its successors) as last found (:meth:`_first`)
        self._ranked: tuple[tuple[int, int], frozenset[str]] | None = None
        #: ((main-log offset and time, ``LivenessJudge.epoch``), the runs the main log names
        #: that the liveness log had shown no heartbeat of) at the last look (:meth:`_find_unseen`)
        self._unseen: tuple[tuple[int, int, int], list[tuple[str, str, int, int]]] | None = None

    # ------------------------------------------------------------------ who judges

    def wanted(self, state: GroupData, now_ms: int) -> bool:
        """Whether this node should be reading the liveness log now."""
        lease = state.lease
        if self._lease_seen is None or self._lease_seen[0] is not lease:
            self._lease_seen = (lease, now_ms)
        me = state.members.get(self.member_id)
        if me is None or me.ended or me.proc != self.incarnation:
            return False
        if self.member_id in self._first(state):
            return True
        return now_ms - self._lease_seen[1] >= self.session_ms + self.lease_interval_ms

    def _first(self, state: GroupData) -> frozenset[str]:
        """The leader and its successors: the first live members by ``(joined_at, id)``. Every
        member asks at every step, so it is kept until the memberships change
        (``GroupData.changes``): a sort of the group per member and step made a follower's cost
        grow with the group's."""
        key = (id(state), state.changes)
        if self._ranked is None or self._ranked[0] != key:
            live = [m for m in state.members.values() if not m.ended]
            top = heapq.nsmallest(self.successors + 1, live,
                                  key=lambda m: (m.joined_at, m.member_id))  # fmt: skip
            self._ranked = (key, frozenset(m.member_id for m in top))
        return self._ranked[1]

    def start(self, state: GroupData) -> int:
        """Start judging: the liveness-log offset to read from."""
        lease = state.lease
        start = lease.live_offset + 1 if lease is not None else 0
        self.live = LivenessJudge(self.session_ms)
        self._since = None
        self._unseen = None
        return start

    def stop(self) -> None:
        self.live = None
        self._pending.clear()
        self._noticed.clear()
        self._unseen = None

    # ------------------------------------------------------------------ reading

    def feed(self, offset: int, key: bytes | None, value: bytes | None, ts: int) -> None:
        """One record of the liveness log, in offset order."""
        lv = self.live
        if lv is None:
            raise ValueError("not judging: call start() first")
        if self._since is None:
            self._since = ts
        beat = key is not None and len(key) > 1 and key[1] == KIND_HEARTBEAT
        if not beat or other_group_key(key, self.group):
            # a snapshot, or another group's: only the clock (by the key's bytes, undecoded)
            found = lv.advance(offset, ts)
        else:
            try:
                k, v = decode(key, value)
            except RecordRejected:
                self.rejected += 1
                k, v = None, None
            if (
                isinstance(k, HeartbeatKey)
                and isinstance(v, HeartbeatRecord)
                and k.group == self.group
            ):
                hb = Heartbeat(k.member_id, v.incarnation, v.seq, v.prev_ts, v.lease_ms, v.skew_ms)
                found = lv.replay(offset, ts, hb)
            else:
                found = lv.advance(offset, ts)
        for f in found:
            kind = "process_ended" if f.kind == VerdictKind.PROCESS_ENDED else "expired"
            self._pending.setdefault((f.member, f.inc, f.run_start, kind), _Pending(-1))

    # ------------------------------------------------------------------ writing

    def due(self, state: GroupData, now_ms: int, leader: bool) -> list[tuple[bytes, bytes | None]]:
        """The verdicts (and, if ``leader``, the lease) to write into the main log now."""
        out: list[tuple[bytes, bytes | None]] = []
        lv = self.live
        if lv is not None:
            self._find_unseen(state)
            for fact, p in list(self._pending.items()):
                if p.found < 0:
                    p.found = now_ms
                if not _relevant(state, fact):
                    del self._pending[fact]
                    continue
                if p.written is not None and now_ms - p.written < self.session_ms:
                    continue  # written: wait for it to land (or rewrite a lost one later)
                mid, proc, run, kind = fact
                if (
                    not leader
                    and kind == "expired"
                    and now_ms - p.found < self.lease_interval_ms
                    and mid != state.leader
                ):
                    continue  # the leader normally writes it; a successor only if it did not
                # (a process's end is what a static seat's next process waits on, and the
                # leader may be that process, judging blind for a session since it started:
                # every judge writes it at once; a second copy changes nothing)
                ended = restated(state, mid, proc, self._written(mid)) if kind == "expired" else ()
                out.append(encode(*verdict_record(self.group, mid, process=proc, run=run,
                                                  kind=kind, ended=ended,
                                                  writer=(self.member_id, self.incarnation)),
                                  self.signer))  # fmt: skip
                p.written = now_ms
        if leader and (
            self._lease_sent is None or now_ms - self._lease_sent >= self.lease_interval_ms
        ):
            self._lease_seq += 1
            self._lease_sent = now_ms
            live_offset = lv.offset if lv is not None else -1
            out.append(encode(*lease_record(self.group, leader=(self.member_id,
                                                                self.incarnation),
                                            lease_seq=self._lease_seq,
                                            live_offset=max(-1, live_offset)),
                              self.signer))  # fmt: skip
        return out

    def _written(self, member_id: str) -> list[tuple[str, int]]:
        """The runs of ``member_id``'s processes this judge wrote ``expired`` verdicts on that
        its state has not read back yet (their facts are still pending)."""
        return [(proc, run) for (mid, proc, run, kind), p in self._pending.items()
                if mid == member_id and kind == "expired" and p.written is not None]  # fmt: skip

    def _find_unseen(self, state: GroupData) -> None:
        """Rule L5.4: runs the main log names that this judge has seen no heartbeat of, or that
        a run it saw start since has replaced."""
        lv = self.live
        if lv is None or lv.time is None or self._since is None:
            return
        now = lv.time
        wait = self.session_ms + 2 * self.skew_ms
        key = (state.offset, state.log_time, lv.epoch)
        if self._unseen is not None and self._unseen[0] == key:
            # Neither log named or started a run since the last look: only the unseen runs'
            # timers can have moved (every member judges a run at every step: a look at every
            # membership each time made the leader's step grow with the group).
            named = self._unseen[1]
        else:
            # Holds first, oldest first: a verdict is written as it is found, and one on a
            # held process must come before one on the run that echoes its hold, which takes
            # its key (docs/protocol-v2.md, L3.8)
            named = []
            for h in state.holds:
                mid, _, proc = h.holder.partition("/")
                # (the hold's process wrote its newest record before the main log's time now)
                named.append((mid, proc, h.run, state.log_time))
            named += [(mid, m.proc, m.run, m.last_seen) for mid, m in state.members.items()
                      if not m.ended]  # fmt: skip
        unseen: list[tuple[str, str, int, int]] = []
        for mid, proc, run, at in named:
            seen = lv.runs.get((mid, proc))
            if seen is not None:
                if seen.known_start and seen.start > run:
                    self._pending.setdefault((mid, proc, run, "expired"), _Pending(-1))
                continue
            unseen.append((mid, proc, run, at))
            # first noticed: (liveness time, the main log's time of the record it names)
            noticed, at = self._noticed.setdefault((mid, proc, run), (now, at))
            if now >= max(self._since, at, noticed) + wait:
                self._pending.setdefault((mid, proc, run, "expired"), _Pending(-1))
        self._unseen = (key, unseen)


def _relevant(state: GroupData, fact: Fact) -> bool:
    """Whether the main log still has something the fact ends: a live membership of that
    process in that run or an earlier one, or a hold on that process, and no verdict of the
    member's that says as much already."""
    mid, proc, run, kind = fact
    v = state.verdicts.get(mid)
    if v is not None and v.kind == kind and v.ends(proc, run):
        return False
    holder = f"{mid}/{proc}"
    if any(h.holder == holder and h.run <= run for h in state.holds):
        return True
    if kind != "expired":
        return False
    m = state.members.get(mid)
    return m is not None and not m.ended and m.proc == proc and m.run <= run
