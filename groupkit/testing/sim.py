"""A simulated group: an in-memory control log with a fake broker clock, and members that
read it at their own speed, crash, pause (zombies), leave and change subscriptions.

Each member is a :class:`~groupkit.protocol.node.Node`, the same driver the runtime's control
thread runs, with no Kafka and no threads, so the tests, the hypothesis schedules and the benches
exercise the runtime's rules. One :meth:`GroupSim.tick`:

1. The broker clock advances by ``tick_ms``; every member's monotonic clock moves with it.
2. Each running member, in id order: feeds its node up to ``read_rate`` new records (all if
   ``None``), steps it, carries out its actions (its ``owned`` set is the ground truth of what it
   processes) and appends its records to the log, stamped with the broker clock.
3. If the node leads and plans a new generation (:meth:`Node.step`), the member appends that
   record too and tells the node its offset.

Latency (``produce_delay_ms``, ``fetch_delay_ms``; both 0 by default, which makes every record
visible the moment it is written): a record a member writes at ``t`` is appended at
``t + produce_delay`` (stamped with that broker time; the writer learns its offset then, as from
a delivery report) and readers see it from ``t + produce_delay + fetch_delay`` on. One *hop* of
the control log (a record written and read back by another member) then takes their sum.
``produce_jitter_ms`` (with ``seed``) adds to each record's produce delay a random whole number
of ticks up to it, as separate produce requests take different times: other writers' records
may then land between two records of one writer, whose own records keep their order.

Deferred revocation (``release_delay_ms``, default ``None``: off): members run as the runtime
runs them, with ``Member(defer_revocations=True)``: a revoked partition stays owned (and claimed
in the member's records) until its commit is done, which takes ``release_delay_ms`` after the
poll that revoked it; then the sim calls :meth:`Node.released` and polls at once, as the
runtime's poll thread does (``Coordinator.released``). Without it, revocations are carried out
between the poll and the write.

Committed offsets. Each partition is a stream of records 0, 1, 2, ...; every tick
each running member processes the next record of every partition it owns and has not stopped
(its ``positions``), and commits them every :data:`COMMIT_EVERY_TICKS` ticks (the group's
``committed`` offsets, as the broker keeps them). A revoked partition is stopped at once; with
deferred revocation it is committed when its release is due, and the release passes the offsets
just committed (:meth:`Node.released`), as the runtime does, so the record that lets it go
carries them; without, it is committed at once and its record carries none. Lost partitions are
not committed. A member that takes a partition starts at the offset its actions give
(``Actions.offsets``: a hint, no look-up) or at the committed one. :meth:`violations` reports a
start beyond every record processed so far (a record skipped, never processed: a loss; the
records before a reset's offset count as processed, skipped on purpose) and a
hint ahead of the committed offset; ``hint_starts`` lists every start at a hint with the
committed offset at that moment.

Offset resets: :meth:`GroupSim.reset` appends an operator's reset record. A member
carries out ``Actions.reset`` as the runtime does: each partition of it that it still processes
starts at the new offset, which is committed at once; one under deferred revocation is left to
its release (its next owner resets it); then ``Member.reset_applied``. Every position and every
commit is tagged with the reset it descends from (``lineage``): :meth:`violations` reports a
commit descending from an older reset than the partition's committed offset already does, and
a first commit after a reset that is not its offset (``commits`` lists every commit).

The assignor: leaders run as the runtime runs them, with ``Node(defer_plans=True)``:
a plan is asked for (``need_plan``), made, and reported to the node ``plan_ms`` later
(default 0: at once, in the same step, so the logs are as when the planner ran it inline); the
node keeps heartbeating meanwhile. A plan that would take longer than ``assignor_timeout_ms`` is
reported at that budget as a ``timeout`` fallback, and the leader's assignor stays busy until
``plan_ms`` has passed: a plan asked for meanwhile is a ``timeout`` fallback at once, as in the
runtime (runtime/planning.py). ``plan_ms`` may be a function of the request (a slow assignor
for some inputs only).

A paused member does nothing (no reads, no polls, no writes) until it resumes; a crashed member
is gone for good. :meth:`GroupSim.violations` checks the safety invariants after a tick.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterable, Mapping

import groupkit.protocol.ownership as ownership
from groupkit.protocol.actions import Actions
from groupkit.protocol.assign import AssignRequest, PlanOutcome, fallback_outcome, run_assignor
from groupkit.protocol.member import Member
from groupkit.protocol.node import Lead, Node, RebalanceSummary
from groupkit.protocol.placement import Replan
from groupkit.protocol.planner import Planner, default_cover_after_ms
from groupkit.protocol.records import Signer, encode, reset_record
from groupkit.protocol.snapshot import CatchUp
from groupkit.protocol.state import GroupState, Replayed
from groupkit.protocol.vocab import (
    AssignorFailure,
    DecisionAction,
    MemberPhase,
    RebalanceProtocol,
    ReplayKind,
)
from groupkit.testing.logs import ControlLog
from groupkit.testing.sim_liveness import LivenessLogs, SimMember
from groupkit.types import TopicPartition

#: every member commits the positions of what it owns every this many ticks (and on revocation)
COMMIT_EVERY_TICKS = 3


class GroupSim(LivenessLogs):
    """A whole simulated group on one in-memory control log."""

    def __init__(
        self,
        partitions: Mapping[str, int],
        *,
        group: str = "g",
        protocol: str = RebalanceProtocol.COOPERATIVE,
        assignor: str = "range",
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 1_000,
        rebalance_timeout_ms: int = 30_000,
        tick_ms: int = 100,
        signer: Signer | None = None,
        keep_actions: bool = False,
        shared_state: bool = False,
        max_clock_skew_ms: int = 0,
        produce_delay_ms: int = 0,
        fetch_delay_ms: int = 0,
        snapshot_every_ms: int | None = None,
        release_delay_ms: int | None = None,
        plan_ms: int | Callable[[AssignRequest], int] = 0,
        assignor_timeout_ms: int | None = None,
        produce_jitter_ms: int = 0,
        seed: int = 0,
        cover_after_ms: int | None = None,
        version: int = 1,
        report_loss: float = 0.0,
        report_delay_ms: int = 0,
        process_lease_ms: int | None = None,
        ack_delay_ms: int = 0,
    ) -> None:
        self.group = group
        #: the protocol version members speak (docs/protocol-v2.md). Version 2 adds the group's
        #: liveness log (:attr:`liveness`, its own broker clock: set ``liveness.skew``), where
        #: heartbeats go with the same produce delay and jitter; each heartbeat's delivery
        #: report reaches its writer ``report_delay_ms`` after the append, and is lost (a
        #: failed report of a record that may have landed) with probability ``report_loss``.
        #: Judges read the liveness log at full speed.
        self.version = version
        self.report_loss = report_loss
        self.report_delay_ms = report_delay_ms
        #: version 2: a static member's process lease (docs/protocol-v2.md, L7)
        self.process_lease_ms = process_lease_ms
        #: version 2: how long a member's acknowledgement that changes nothing else of its may
        #: wait (rule L9); members started later take it as it is then
        self.ack_delay_ms = ack_delay_ms
        self.liveness = ControlLog()
        self.partitions = dict(partitions)
        # Planner.cover_after_ms: by default the runtime's
        if cover_after_ms is None:
            cover_after_ms = default_cover_after_ms(version, heartbeat_interval_ms)
        self.planner = Planner(assignor, protocol, cover_after_ms=cover_after_ms)
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.tick_ms = tick_ms
        self.signer = signer
        self.keep_actions = keep_actions
        #: each member's clock-skew allowance (Member.max_clock_skew_ms); ``log.skew`` is the
        #: skew the brokers actually have
        self.max_clock_skew_ms = max_clock_skew_ms
        #: members that read at full speed share one replayed state (they would hold equal
        #: copies anyway); this is what makes a 1,000-member group cheap to simulate
        self.shared_state = shared_state
        self.produce_delay_ms = produce_delay_ms
        #: how often the leader writes a snapshot (Node); off by default, so the logs of the
        #: older tests stay as they were (a snapshot changes no replayed state)
        self.snapshot_every_ms = snapshot_every_ms
        self.fetch_delay_ms = fetch_delay_ms
        #: deferred revocation (module docstring); ``None``: revocations are immediate
        self.release_delay_ms = release_delay_ms
        #: how long the assignor takes (module docstring), and its budget (default: half a
        #: session, as the runtime's groupkit.assignor.timeout.ms)
        self.plan_ms = plan_ms
        self.assignor_timeout_ms = (
            session_timeout_ms // 2 if assignor_timeout_ms is None else assignor_timeout_ms
        )
        #: every outcome reported to a node (the tests read the fallbacks off it)
        self.plans: list[PlanOutcome] = []
        #: every rebalance a leader finished, as the runtime hands them to its observers
        self.rebalances: list[RebalanceSummary] = []
        self.log = ControlLog()
        #: records written but not appended yet: (append time, key, value, writer's node if it
        #: is an assignment record, which learns the offset on append)
        self._in_flight: list[tuple[int, bytes | None, bytes | None, Node | None]] = []
        #: heartbeats written but not appended yet (version 2): (append time, key, value,
        #: writer, seq)
        self._beats: list[tuple[int, bytes, bytes | None, SimMember, int]] = []
        self.produce_jitter_ms = produce_jitter_ms
        self._rng = random.Random(seed)
        #: per writer, the append time of its newest record in flight (produce_jitter_ms)
        self._appends: dict[str, int] = {}
        self._visible = 0  # records[:_visible] are visible to readers (with a fetch delay)
        self.members: dict[str, SimMember] = {}
        self.lags: dict[TopicPartition, int] = {}
        self.rejected: list[Replayed] = []
        self._incarnations = 0
        #: processes that still run with the id of a newer one (static members started twice)
        self.displaced: list[SimMember] = []
        self.errors: list[str] = []
        self._view = self.new_state()
        #: the group's committed offsets (next record to process), as the broker keeps them
        self.committed: dict[TopicPartition, int] = {}
        #: per partition, one past the highest record any member has processed
        self.processed: dict[TopicPartition, int] = {}
        #: (member, partition, hint, committed offset then) of every start at a hint
        self.hint_starts: list[tuple[str, TopicPartition, int, int]] = []
        #: per partition, the reset its committed offset descends from (-1: none)
        self.lineage: dict[TopicPartition, int] = {}
        #: every commit: (tick, member, partition, offset, lineage)
        self.commits: list[tuple[int, str, TopicPartition, int, int]] = []
        #: the resets written: (offset of the record, new offsets)
        self.resets: list[tuple[int, dict[TopicPartition, int]]] = []
        self._ticks = 0

    # ------------------------------------------------------------------ schedule

    @property
    def clock(self) -> int:
        return self.log.clock

    def new_state(self) -> GroupState:
        return GroupState(
            self.group,
            self.session_timeout_ms,
            self.rebalance_timeout_ms,
            verifier=self.signer,
            version=self.version,
        )

    def join(
        self,
        member_id: str,
        topics: Iterable[str] | None = None,
        read_rate: int | None = None,
        *,
        compacted: bool = False,
        bounded: bool = False,
        static: bool = False,
    ) -> SimMember:
        """Start a process (a new incarnation) with this member id.

        ``compacted``: it starts by reading the log as compaction would leave it now
        (:meth:`ControlLog.compacted`), then follows the log from its end.
        ``bounded``: it catches up as the runtime does (:class:`~groupkit.protocol.snapshot.
        CatchUp`): from the newest snapshot near the log's end, else from the beginning.
        ``static``: a static member (``group.instance.id`` = ``member_id``). If a process with
        that id still runs, it keeps running (two processes with one instance id, as when a
        pod is started twice): it is in :attr:`displaced`, and the log decides which one keeps
        the seat.
        """
        self._incarnations += 1
        m = Member(
            self.group,
            member_id,
            f"i{self._incarnations}",
            topics if topics is not None else sorted(self.partitions),
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            signer=self.signer,
            max_clock_skew_ms=self.max_clock_skew_ms,
            defer_revocations=self.release_delay_ms is not None,
            instance_id=member_id if static else None,
            version=self.version,
            process_lease_ms=self.process_lease_ms,
            ack_delay_ms=self.ack_delay_ms,
        )
        old = self.members.get(member_id)
        if old is not None and not old.crashed and old.member.state != MemberPhase.LEFT:
            if not static:
                raise ValueError(f"{member_id} is running; crash or leave it first")
            self.displaced.append(old)
        shared = self.shared_state and read_rate is None and not compacted and not bounded
        node = Node(m, self._view if shared else self.new_state(), self.planner,
                    snapshot_every_ms=self.snapshot_every_ms, defer_plans=True)  # fmt: skip
        sm = SimMember(node, read_rate)
        if bounded:
            self._catch_up(sm)
        if compacted:
            end = self.visible()
            for r in self.log.compacted():
                if r.offset < end:
                    node.feed(r.offset, r.key, r.value, r.timestamp)
            sm.pos = end
        self.members[member_id] = sm
        return sm

    def _catch_up(self, sm: SimMember) -> None:
        """A bounded catch-up, as the runtime's: read from the first record stamped within the
        window (Kafka's ``offsets_for_times``), restore, or replay from the beginning."""
        end = self.visible()
        records = self.log.records[:end]
        if self.version == 2:
            self._catch_up_v2(sm, records)
            return
        since = CatchUp.window_start_ms(self.clock, self.session_timeout_ms)
        start = next((r.offset for r in records if r.timestamp >= since), end)
        cu = CatchUp(self.group, self.session_timeout_ms, self.rebalance_timeout_ms, self.signer,
                     self.version)  # fmt: skip
        state = cu.run(start, end, lambda at: (
            (r.offset, r.key, r.value, r.timestamp) for r in records[at:]))  # fmt: skip
        if state is not None:
            sm.node.restored(state)
            sm.pos, sm.catch_up, sm.replayed = end, "state", cu.replayed
        else:  # from the beginning, at its read rate, as before snapshots
            sm.catch_up, sm.replayed = "full", end

    def leave(self, member_id: str) -> None:
        sm = self.members[member_id]
        if self.release_delay_ms is None:
            sm.member.leave()
        elif sm.leave_at is None:
            # as the runtime's close: take nothing more, commit what it owns, then release it
            # with the leave
            sm.node.stop_taking()
            sm.releasing.append((self.clock + self.release_delay_ms, sm.member.owned))
            sm.stopped |= sm.member.owned
            sm.leave_at = self.clock + self.release_delay_ms

    def park(self, member_id: str) -> None:
        """A static member's close: as :meth:`leave`, but it keeps its seat (Member.park)."""
        sm = self.members[member_id]
        sm.parks = True
        if self.release_delay_ms is None:
            sm.member.park()
        else:
            self.leave(member_id)

    def crash(self, member_id: str) -> None:
        self.members[member_id].crashed = True

    def pause(self, member_id: str, ms: int) -> None:
        self.members[member_id].paused_until = self.clock + ms

    def subscribe(self, member_id: str, topics: Iterable[str]) -> None:
        self.members[member_id].member.set_subscription(topics)

    def set_partitions(self, topic: str, count: int) -> None:
        self.partitions[topic] = count

    def replan(self, replan: Replan) -> bool:
        """Have the leader write ``replan`` (a re-plan for the load, protocol/placement.py) now,
        as the runtime's leader does between its turns (``Node.replan``): only if it is ready
        and the group stable at the generation it sees. Whether it wrote one."""
        for sm in self.running():
            if not sm.node.is_leader(self.clock):
                continue
            lead = sm.node.replan(self.clock, self.partitions, replan, sm.state.generation)
            if lead is None or lead.key is None:
                return False
            if lead.rebalance_done is not None:
                self.rebalances.append(lead.rebalance_done)
            self._produce(lead.key, lead.value, sm.member_id, sm.node)
            return True
        return False

    def inject(self, key: bytes | None, value: bytes | None) -> int:
        """Append raw bytes to the log, as a foreign or broken writer would."""
        return self.log.append(key, value)

    # ------------------------------------------------------------------ running

    def running(self) -> list[SimMember]:
        return [
            s for s in [s for _, s in sorted(self.members.items())] + self.displaced
            if not s.crashed and s.paused_until <= self.clock and s.member.state != MemberPhase.LEFT
        ]  # fmt: skip

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            self.log.clock += self.tick_ms
            self.liveness.clock = self.log.clock
            self._ticks += 1
            self._deliver()
            for sm in self.running():
                self._step(sm)

    def _step(self, sm: SimMember) -> None:
        if sm.state is self._view:
            self.view()
        else:
            self._read(sm)
        if self.version == 2:
            self._reports(sm)
            self._judge(sm)
        self._act(sm)
        self._release(sm)
        self._process(sm)

    def _process(self, sm: SimMember) -> None:
        """Process one record of each partition it owns and has not stopped; commit now and
        then (module docstring)."""
        commit = self._ticks % COMMIT_EVERY_TICKS == 0
        for p in sm.member.owned - sm.stopped:
            pos = sm.positions.get(p)
            if pos is None:
                continue
            sm.positions[p] = pos = pos + 1
            if pos > self.processed.get(p, 0):
                self.processed[p] = pos
            if commit:
                self._set_committed(sm, p, pos)

    def _commit(
        self, sm: SimMember, parts: Iterable[TopicPartition], owned: bool = True
    ) -> dict[TopicPartition, int]:
        """Commit the positions of ``parts`` (that it still owns, if ``owned``); the offsets
        committed."""
        out: dict[TopicPartition, int] = {}
        for p in parts:
            pos = sm.positions.get(p)
            if pos is not None and (not owned or p in sm.member.owned):
                self._set_committed(sm, p, pos)
                out[p] = pos
            sm.positions.pop(p, None)
            sm.lineage.pop(p, None)
        return out

    def _take(self, sm: SimMember, acts: Actions) -> None:
        """Start what it is assigned: at the hint if given, else at the committed offset."""
        for p in acts.assign:
            committed = self.committed.get(p, 0)
            hint = acts.offsets.get(p)
            start = committed if hint is None else hint
            sm.lineage[p] = self.lineage.get(p, -1)
            if p in acts.reset:  # a reset's offset, not a hint (_apply_reset checks it)
                sm.positions[p] = start
                sm.stopped.discard(p)
                self._skipped_to(p, start)
                continue
            if hint is not None:
                self.hint_starts.append((sm.member_id, p, hint, committed))
                if hint > committed:
                    self.errors.append(f"{sm.member_id} took {p} at hint {hint} > {committed}")
            if start > self.processed.get(p, 0):
                self.errors.append(f"{sm.member_id} took {p} at {start}, beyond every record "
                                   f"processed ({self.processed.get(p, 0)}): a loss")  # fmt: skip
            sm.positions[p] = start
            sm.stopped.discard(p)
        for p in set(acts.offsets) - acts.assign:
            self.errors.append(f"{sm.member_id}: offset for {p}, which it does not take")

    def _read(self, sm: SimMember) -> None:
        records = self.log.records
        visible = self.visible()
        end = visible if sm.read_rate is None else min(visible, sm.pos + sm.read_rate)
        for r in records[sm.pos : end]:
            res = sm.node.feed(r.offset, r.key, r.value, r.timestamp)
            if res.kind == ReplayKind.REJECTED and sm is self._observer():
                self.rejected.append(res)
        sm.pos = end

    def _act(self, sm: SimMember) -> None:
        node = sm.node
        if sm.plan_due is not None and sm.plan_due[0] <= self.clock:
            self._planned(sm, sm.plan_due[1])
        step = node.step(self.clock, self.partitions)
        if step.rebalance_done is not None:
            self.rebalances.append(step.rebalance_done)
        self._carry_out(sm, step.actions)
        lead = step.lead
        if lead is not None and lead.action == DecisionAction.NEED_LAGS:
            lead = node.plan(self.clock, self.partitions, self.lags_for(lead.lag_topics))
        if lead is not None and lead.request is not None:
            lead = self._make_plan(sm, lead.request)
        if lead is not None and lead is not step.lead and lead.rebalance_done is not None:
            self.rebalances.append(lead.rebalance_done)
        if lead is not None and lead.key is not None:
            self._produce(lead.key, lead.value, sm.member_id, node)
        if step.snapshot is not None:
            if self.version == 2:  # where only newcomers and judges read it (rule L8)
                self.liveness.append(*step.snapshot)
            else:
                self._produce(*step.snapshot, sm.member_id)
        for k, v in step.tombstones:
            self._produce(k, v, sm.member_id)
        for k, v in step.judged:
            self._produce(k, v, sm.member_id)

    def _make_plan(self, sm: SimMember, request: AssignRequest) -> Lead | None:
        """Make the plan its node asked for; if it takes no time, the node plans again at once
        (its answer is returned), else it is reported when due (:meth:`_act`)."""
        budget = self.assignor_timeout_ms
        if sm.assignor_busy_until > self.clock:
            outcome = fallback_outcome(
                request, AssignorFailure.TIMEOUT, "still running a previous plan"
            )
            due = self.clock
        else:
            outcome = run_assignor(self.planner.assignor, request)
            ms = self.plan_ms(request) if callable(self.plan_ms) else self.plan_ms
            due = self.clock + min(ms, budget)
            if ms > budget:
                sm.assignor_busy_until = self.clock + ms
                outcome = fallback_outcome(
                    request, AssignorFailure.TIMEOUT, f"no plan within {budget} ms"
                )
        if due > self.clock:
            sm.plan_due = (due, outcome)
            return None
        self._planned(sm, outcome)
        lead = sm.node.plan(self.clock, self.partitions)
        if (
            lead is not None and lead.action == DecisionAction.NEED_PLAN
        ):  # cannot be: the basis is the same
            raise AssertionError(f"{sm.member_id} asked for a plan twice in one step")
        return lead

    def _planned(self, sm: SimMember, outcome: PlanOutcome) -> None:
        sm.plan_due = None
        self.plans.append(outcome)
        sm.node.planned(outcome)

    def _carry_out(self, sm: SimMember, acts: Actions) -> None:
        if self.keep_actions and not acts.idle:
            sm.actions.append(acts)
        self._check_actions(sm, acts)
        for p in acts.lost:
            sm.positions.pop(p, None)
        sm.stopped -= acts.lost
        if self.release_delay_ms is not None:
            # as the runtime's coordinator: a revocation is handed to the poll thread once
            # (it repeats in every poll until released); what is lost is not committed
            under_way = frozenset[TopicPartition]().union(*(p for _, p in sm.releasing))
            new = acts.revoke - under_way
            if new:
                sm.releasing.append((self.clock + self.release_delay_ms, new))
                sm.stopped |= new
            if acts.lost:
                sm.releasing = [(t, p - acts.lost) for t, p in sm.releasing if p - acts.lost]
        else:
            # revoked between the poll and its write: committed now (the record, written in
            # the poll, carries no offsets)
            self._commit(sm, acts.revoke, owned=False)  # (no longer in member.owned)
            sm.stopped -= acts.revoke
        self._take(sm, acts)
        if acts.reset:
            self._apply_reset(sm, acts)
        for w in acts.writes:
            if w.liveness:
                self._beat(sm, w)
            else:
                self._produce(w.raw_key, w.raw_value, sm.member_id)

    # ------------------------------------------------------------------ offset resets

    def reset(self, offsets: Mapping[TopicPartition, int], signer: Signer | None = None) -> int:
        """An operator's ``reset-offsets --execute``: append a reset record now (signed with
        the group's key unless ``signer`` says otherwise); its offset."""
        key, value = reset_record(self.group, f"r{len(self.resets)}", offsets,
                                  based_on=len(self.log.records) - 1)  # fmt: skip
        rk, rv = encode(key, value, self.signer if signer is None else signer)
        off = self.log.append(rk, rv)
        self.resets.append((off, dict(offsets)))
        return off

    def _apply_reset(self, sm: SimMember, acts: Actions) -> None:
        """As the runtime does: each partition of ``acts.reset`` it still processes starts at
        the new offset, which is committed at once; one under revocation is left to its release
        (its next owner carries the reset out). Then reported done, as the runtime reports."""
        done = []
        for p, o in acts.reset.items():
            if p in sm.stopped or p not in sm.member.owned:
                continue
            if p not in acts.assign and p not in sm.positions:
                continue
            sm.positions[p] = o
            sm.lineage[p] = acts.reset_at
            self._set_committed(sm, p, o)
            self._skipped_to(p, o)
            done.append(p)
        if sm.member.defer_revocations:
            sm.node.member.reset_applied(acts.reset_at, done)

    def _skipped_to(self, p: TopicPartition, offset: int) -> None:
        """A reset forward skips the records before its offset on purpose: a later start at
        its committed offset is no loss, whether or not anyone processed a record since."""
        if offset > self.processed.get(p, 0):
            self.processed[p] = offset

    def _set_committed(self, sm: SimMember, p: TopicPartition, pos: int) -> None:
        """The broker stores a commit: checked against the resets (module docstring)."""
        lineage = sm.lineage.get(p, -1)
        before = self.lineage.get(p, -1)
        if lineage < before:
            self.errors.append(f"{sm.member_id} committed {p} at {pos}, descending from reset "
                               f"{lineage}, after a commit of reset {before}")  # fmt: skip
        elif lineage > before:
            want = next((o[p] for at, o in self.resets if at == lineage and p in o), None)
            if want != pos:
                self.errors.append(f"{sm.member_id}: first commit of {p} after reset {lineage} "
                                   f"is {pos}, not {want}")  # fmt: skip
        self.committed[p] = pos
        self.lineage[p] = max(lineage, before)
        self.commits.append((self._ticks, sm.member_id, p, pos, lineage))

    def _release(self, sm: SimMember) -> None:
        """Deferred revocations whose commit is done: released, and a poll at once."""
        due = [p for t, p in sm.releasing if t <= self.clock]
        leave = sm.leave_at is not None and sm.leave_at <= self.clock
        if not due and not leave:
            return
        sm.releasing = [(t, p) for t, p in sm.releasing if t > self.clock]
        released = frozenset[TopicPartition]().union(*due)
        # committed first, then released with the offsets just committed (as the runtime)
        sm.node.released(released, self._commit(sm, released))
        sm.stopped -= released
        if leave and sm.member.state not in (MemberPhase.LEAVING, MemberPhase.LEFT):
            sm.leave_at = None
            if sm.parks:
                sm.node.park()
            else:
                sm.node.leave()
        if sm.member.state != MemberPhase.LEFT:
            self._carry_out(sm, sm.node.poll(self.clock))

    def _produce(
        self, key: bytes | None, value: bytes | None, writer: str, node: Node | None = None
    ) -> None:
        if self.produce_delay_ms == 0 and self.produce_jitter_ms == 0:
            off = self.log.append(key, value)
            if node is not None:
                node.written(off)
            return
        at = self.clock + self.produce_delay_ms
        if self.produce_jitter_ms:
            # each record its own produce request: another writer's may land in between, but
            # one writer's records keep their order (one idempotent producer, one partition)
            at += self._rng.randint(0, self.produce_jitter_ms // self.tick_ms) * self.tick_ms
            at = max(at, self._appends.get(writer, 0))
            self._appends[writer] = at
        bisect.insort(self._in_flight, (at, key, value, node), key=lambda r: r[0])

    def _deliver(self) -> None:
        """Append the records whose produce delay has passed, at the time it passed."""
        self._deliver_beats()
        while self._in_flight and self._in_flight[0][0] <= self.clock:
            at, key, value, node = self._in_flight.pop(0)
            off = self.log.append(key, value, at)
            if node is not None:
                node.written(off)

    def visible(self) -> int:
        """How many records of the log readers can see now (all of them without a fetch delay)."""
        records = self.log.records
        if self.fetch_delay_ms == 0:
            return len(records)
        v = self._visible
        at = self.log.appended_at
        while v < len(records) and at[v] + self.fetch_delay_ms <= self.clock:
            v += 1
        self._visible = v
        return v

    def lags_for(self, topics: Iterable[str]) -> dict[TopicPartition, int]:
        return {
            TopicPartition(t, p): self.lags.get(TopicPartition(t, p), 0)
            for t in topics
            for p in range(self.partitions.get(t, 0))
        }

    def _observer(self) -> SimMember | None:
        """The member whose rejections are collected (the first running one)."""
        for _, s in sorted(self.members.items()):
            if not s.crashed:
                return s
        return None

    def _check_actions(self, sm: SimMember, acts: Actions) -> None:
        # invariant 4: cooperative never revokes a partition that stays with its owner
        a = sm.state.assignment
        leaving = sm.member.state in (MemberPhase.LEAVING, MemberPhase.LEFT)
        if (
            acts.revoke
            and a is not None
            and a.protocol == RebalanceProtocol.COOPERATIVE
            and not leaving
        ):
            # (what it gives a newcomer the generation admitted goes: docs/protocol.md, "Admission")
            kept = acts.revoke & (
                a.target(sm.member_id) - ownership.admitted_away(sm.state, sm.member_id)
            )
            if kept:
                self.errors.append(f"{sm.member_id} revoked {sorted(kept)} it keeps")

    # ------------------------------------------------------------------ observing

    def owners(self) -> dict[TopicPartition, list[str]]:
        """Ground truth: which running processes process which partition."""
        out: dict[TopicPartition, list[str]] = {}
        for sm in self.running():
            for p in sm.member.owned:
                out.setdefault(p, []).append(sm.member_id)
        return out

    def violations(self) -> list[str]:
        """Safety invariants that must hold after every tick."""
        errs = list(self.errors)
        self.errors.clear()
        # 1. no partition is owned by two running members
        for p, ms in self.owners().items():
            if len(ms) > 1:
                errs.append(f"{p} owned by {ms}")
        # 2. members that have replayed to the same offset agree
        seen: dict[int, tuple[object, ...]] = {}
        for sm in [*self.members.values(), *self.displaced]:
            if sm.crashed:
                continue
            fp = sm.state.fingerprint()
            prev = seen.setdefault(sm.state.offset, fp)
            if prev != fp:
                errs.append(f"{sm.member_id} disagrees at offset {sm.state.offset}")
        return errs

    def view(self) -> GroupState:
        """The group as replayed by an observer that has read the whole log."""
        st = self._view
        for r in self.log.records[st.offset + 1 : self.visible()]:
            st.replay(r.offset, r.key, r.value, r.timestamp)
        return st

    def expected_partitions(self) -> set[TopicPartition]:
        """Every partition of a topic some running member subscribes to."""
        topics = {t for sm in self.running() for t in sm.member.topics}
        return {TopicPartition(t, p) for t in topics for p in range(self.partitions.get(t, 0))}

    def is_stable(self) -> bool:
        """Quiet and done: every running member active and covered, owning what the current
        assignment gives it; everything expected owned exactly once, by a subscriber; the
        leader has nothing left to do."""
        obs = self.running()
        if not obs:
            return True
        if any(sm.releasing or sm.leave_at is not None for sm in obs):
            return False  # deferred revocations (or a leave) still under way
        st = self.view()
        if st.assignment is None:
            return False
        for sm in obs:
            m = st.members.get(sm.member_id)
            if (
                sm.member.state != MemberPhase.ACTIVE
                or m is None
                or m.proc != sm.member.incarnation
                or not st.covers(sm.member_id)
                or sm.member.owned != st.assignment.assigned(sm.member_id)
            ):
                return False
        owners = self.owners()
        if set(owners) != self.expected_partitions():
            return False
        by_id = {sm.member_id: sm for sm in obs}
        for p, ms in owners.items():
            if len(ms) != 1 or p.topic not in by_id[ms[0]].member.topics:
                return False
        d = self.planner.plan(st, self.partitions, self.lags_for(self.partitions))
        return d.action == DecisionAction.NONE

    def settle(self, max_ticks: int = 2_000) -> int:
        """Tick until stable; returns the ticks taken (raises if it never settles)."""
        for i in range(max_ticks):
            if self.is_stable():
                return i
            self.tick()
            errs = self.violations()
            if errs:
                raise AssertionError("; ".join(errs[:5]))
        raise AssertionError(f"not stable after {max_ticks} ticks: {self.describe()}")

    def describe(self) -> str:
        st = self.view()
        lines = [f"clock={self.clock} log={len(self.log.records)}"]
        lines.append(
            f"leader={st.leader} gen={st.generation} "
            f"phase={st.assignment.phase if st.assignment else None} "
            f"rejections={dict(st.rejections)}"
        )
        if st.holds or st.verdicts:
            holds = [(h.holder, sorted(map(str, h.partitions)), h.run) for h in st.holds]
            verdicts = {m: (v.process, v.run, v.kind) for m, v in st.verdicts.items()}
            lines.append(f"holds={holds} verdicts={verdicts}")
        lines.append(
            f"plan={self.planner.plan(st, self.partitions, self.lags_for(self.partitions))}"
        )
        procs = sorted(self.members.values(), key=lambda s: s.member_id) + self.displaced
        for sm in procs:
            m = st.members.get(sm.member_id)
            log = (
                f"log: inc={m.incarnation} proc={m.proc} seq={m.seq} last_seen={m.last_seen} "
                f"live={st.is_live(m.member_id)} lagging={ownership.is_lagging(st, m.member_id)} "
                f"acked={m.acked_generation} since={m.since_generation}"
                if m is not None
                else "log: -"
            )
            mem = sm.member
            if mem.version == 2:  # the run the log has it in, and its own run and deadline
                log += f" run={m and m.run} own run={mem._run} deadline={mem.clock.deadline()}"
            if sm.actions:  # (keep_actions) its last losses
                log += f" losses={[(a.events, sorted(a.lost)) for a in sm.actions if a.lost][-3:]}"
            lines.append(
                f"  {sm.member_id} {sm.member.state} inc={sm.member.incarnation} "
                f"crashed={sm.crashed} paused_until={sm.paused_until} "
                f"owned={sorted(map(str, sm.member.owned))} {log}"
            )
        return "\n".join(lines)
