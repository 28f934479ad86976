"""A simulated member (:class:`SimMember`), and what :class:`~groupkit.testing.sim.GroupSim`
does for protocol version 2's second log (docs/protocol-v2.md): members' heartbeats produced to
the liveness log and their delivery reports handed back, judges reading the liveness log, and a
newcomer's catch-up from the snapshot there."""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

from groupkit.protocol.actions import Actions, Write
from groupkit.protocol.assign import PlanOutcome
from groupkit.protocol.member import Member
from groupkit.protocol.node import Node
from groupkit.protocol.records import HeartbeatRecord, Signer
from groupkit.protocol.snapshot import from_snapshot, newest_snapshot
from groupkit.protocol.state import GroupState
from groupkit.testing.logs import ControlLog, LogRecord
from groupkit.types import TopicPartition


@dataclass(slots=True)
class SimMember:
    node: Node
    read_rate: int | None = None
    pos: int = 0
    crashed: bool = False
    paused_until: int = 0
    actions: list[Actions] = field(default_factory=list)
    #: how it caught up at start (``bounded`` joins): "state" (from a snapshot), "full", or ""
    catch_up: str = ""
    #: records it replayed to catch up (after the snapshot's ``as_of``, or all of them)
    replayed: int = 0
    #: deferred revocations under way: (when the commit is done, partitions)
    releasing: list[tuple[int, frozenset[TopicPartition]]] = field(default_factory=list)
    #: with deferred revocation, a leave waits for the commit of what it owns (runtime: close)
    leave_at: int | None = None
    #: the next record to process of each partition it owns (the data consumer's position)
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    #: revoked, not released yet: no longer processed (the runtime unassigns it first)
    stopped: set[TopicPartition] = field(default_factory=set)
    #: a plan being made for its node: (when it is reported, the outcome)
    plan_due: tuple[int, PlanOutcome] | None = None
    #: its assignor is still running (past its budget) until then
    assignor_busy_until: int = 0
    #: its (deferred) leave is a static member's park: it keeps its seat (Member.park)
    parks: bool = False
    #: protocol version 2: where this member reads the liveness log while it judges (``None``:
    #: it does not), and its heartbeats' delivery reports due: (time, seq, stamp or ``None``
    #: for a failed report of a heartbeat that may have landed)
    live_pos: int | None = None
    reports: list[tuple[int, int, int | None]] = field(default_factory=list)
    #: per position, the offset of the reset record it descends from (-1: none), see
    #: "Offset resets" in the module docstring
    lineage: dict[TopicPartition, int] = field(default_factory=dict)

    @property
    def member(self) -> Member:
        return self.node.member

    @property
    def state(self) -> GroupState:
        return self.node.state

    @property
    def member_id(self) -> str:
        return self.node.member_id


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
