"""What :class:`~groupkit.testing.sim.GroupSim` does for protocol version 2's second log
(docs/protocol-v2.md): members' heartbeats produced to the liveness log and their delivery
reports handed back, judges reading the liveness log, and a newcomer's catch-up from the
snapshot there."""

from __future__ import annotations

import bisect
import random
from typing import TYPE_CHECKING

from groupkit.protocol.member import Write
from groupkit.protocol.records import HeartbeatRecord, Signer
from groupkit.protocol.snapshot import from_snapshot, newest_snapshot
from groupkit.testing.logs import ControlLog, LogRecord

if TYPE_CHECKING:
    from groupkit.testing.sim import SimMember


class LivenessLogs:
    """The liveness log's side of a simulated group (a mixin of ``GroupSim``)."""

    group: str
    signer: Signer | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    tick_ms: int
    produce_delay_ms: int
    produce_jitter_ms: int
    report_loss: float
    report_delay_ms: int
    liveness: ControlLog
    _rng: random.Random
    _appends: dict[str, int]
    _beats: list[tuple[int, bytes, bytes | None, SimMember, int]]

    @property
    def clock(self) -> int:
        raise NotImplementedError

    def _catch_up_v2(self, sm: SimMember, records: list[LogRecord]) -> None:
        """Version 2's: the newest snapshot is on the liveness log (docs/protocol-v2.md, L8)."""
        got = newest_snapshot(self.liveness.records, self.group, self.signer, version=2)
        if got is None or got[1].as_of >= len(records):
            sm.catch_up, sm.replayed = "full", len(records)
            return
        snap = got[1]
        state = from_snapshot(snap, self.session_timeout_ms, self.rebalance_timeout_ms, self.signer)
        for r in records[snap.as_of + 1 :]:
            state.replay(r.offset, r.key, r.value, r.timestamp)
        sm.node.restored(state)
        sm.pos, sm.catch_up, sm.replayed = len(records), "state", len(records) - snap.as_of - 1

    def _beat(self, sm: SimMember, w: Write) -> None:
        """A heartbeat for the liveness log, produced as any record (its report: _deliver_beats)."""
        assert isinstance(w.value, HeartbeatRecord)
        at = self.clock + self.produce_delay_ms
        if self.produce_jitter_ms:
            at += self._rng.randint(0, self.produce_jitter_ms // self.tick_ms) * self.tick_ms
            k = f"{sm.member_id}/liveness"
            at = self._appends[k] = max(at, self._appends.get(k, 0))
        beat = (at, w.raw_key, w.raw_value, sm, w.value.seq)
        bisect.insort(self._beats, beat, key=lambda r: r[0])

    def _deliver_beats(self) -> None:
        while self._beats and self._beats[0][0] <= self.clock:
            at, key, value, sm, seq = self._beats.pop(0)
            ts = self.liveness.records[self.liveness.append(key, value, at)].timestamp
            lost = self.report_loss and self._rng.random() < self.report_loss
            due = max([at + self.report_delay_ms] + [r[0] for r in sm.reports[-1:]])  # in order
            sm.reports.append((due, seq, None if lost else ts))

    def _reports(self, sm: SimMember) -> None:
        """Hand a member the delivery reports due (a paused member gets them when it runs), in
        the order its records were appended, as a producer reports one partition's."""
        due = [r for r in sm.reports if r[0] <= self.clock]
        if not due:
            return
        sm.reports = [r for r in sm.reports if r[0] > self.clock]
        for _, seq, ts in due:
            if ts is None:
                sm.node.heartbeat_failed(seq, maybe_landed=True)
            else:
                sm.node.heartbeat_confirmed(seq, ts)

    def _judge(self, sm: SimMember) -> None:
        node = sm.node  # a judge reads the liveness log; one that stops judging stops reading
        if node.liveness_wanted(self.clock):
            if sm.live_pos is None:
                sm.live_pos = node.liveness_start()
            for r in self.liveness.records[sm.live_pos :]:
                node.feed_liveness(r.offset, r.key, r.value, r.timestamp)
            sm.live_pos = len(self.liveness.records)
        elif sm.live_pos is not None:
            node.liveness_stop()
            sm.live_pos = None
