"""The control loop of one member: a background thread between the control topic and the protocol.

The thread owns the control-topic reader and writer and the protocol's
:class:`~groupkit.protocol.node.Node` (replay, the member's step, when to lead: the rules the
simulator runs too); this module only does the I/O around it. Each turn:

1. Read what the control partition has (at start-up: everything up to the high watermark
   before acting, so a newcomer is planned into the group only once it can follow it: joining
   before, it would have partitions revoked for it that it cannot take until it has read the
   history, and be dropped as lagging if that takes a rebalance timeout) and ``replay`` every
   record into the :class:`~groupkit.protocol.state.GroupState`; rejections are counted by
   reason and logged, never applied.
2. Ask the :class:`~groupkit.protocol.member.Member` what to do. Partitions to assign, revoke or
   mark lost are handed to the thread that calls ``GroupConsumer.poll`` (callbacks and commits
   run there, as in confluent-kafka); records are produced at once, except that a record which
   no longer claims a revoked partition is only produced after ``poll`` has committed and
   stopped it (the member keeps claiming it until then; see ``Member.revoked``), and then at
   once, from :meth:`Coordinator.released`, not at the next turn.
3. If the node is ready to lead, fetch partition counts and let it plan (fetching lags first
   for a lag-aware assignor); produce the record it answers and tell it the offset from the
   delivery report (it plans again only once that record has been replayed). The assignor
   itself runs on a worker thread (runtime/planning.py), within ``groupkit.assignor.timeout.ms``:
   the node asks for a plan, the turns go on (heartbeats, replay) and hand it the outcome once
   made; a failed assignor is logged once per generation and counted (``assignor_failed``).

The first turn runs as soon as the history is read, so the join record goes out at once.

Protocol version 2 (docs/protocol-v2.md; runtime/liveness_io.py): the member's heartbeats go
to the liveness log, their delivery reports to the node; a judge's turn reads the liveness log
before the step, and writes its verdicts and the lease into the main log after it.

Shared with the ``poll`` thread under one lock: the member's state machine (``owned``, the
fencing clock) and the queue of hand-offs. The ``poll`` thread (runtime/consumer.py and
runtime/handoff.py) goes through the methods under "the poll thread's side" only, never through
the lock or the member: ``Coordinator.needs_service`` (a flag read without the lock, for the
hot path),
:meth:`~Coordinator.take_handoffs`, :meth:`~Coordinator.fence` (the session deadline),
:meth:`~Coordinator.check_commit`, :meth:`~Coordinator.released` and :meth:`~Coordinator.lost`
(what it stopped), and :meth:`~Coordinator.leave`, :meth:`~Coordinator.close`. Observers
read :meth:`~Coordinator.status` (through ``GroupConsumer.probe``).
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Set
from typing import NamedTuple

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

from groupkit.errors import BrokerError
from groupkit.log import get_logger
from groupkit.protocol import GroupState, Member, Planner, default_cover_after_ms
from groupkit.protocol.actions import Actions, Write
from groupkit.protocol.assign import PlanOutcome
from groupkit.protocol.member import ACK_DELAY_MS
from groupkit.protocol.node import Lead, Node, RebalanceSummary
from groupkit.protocol.records import HmacSigner, MemberKey, Partitions, Signer
from groupkit.protocol.vocab import AssignorFailure, DecisionAction, MemberPhase, ReplayKind
from groupkit.runtime.background import Background
from groupkit.runtime.catch_up import bounded_catch_up, until_answered
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.control_log import (
    ControlClients,
    ControlReader,
    ControlWriter,
    ReaderStall,
)
from groupkit.runtime.control_topic import ensure_control_topic, partition_for_group
from groupkit.runtime.counts import PartitionCounts
from groupkit.runtime.handoff_queue import Handoff, HandoffQueue, awaited
from groupkit.runtime.hooks import Observers
from groupkit.runtime.lag import fetch_lags
from groupkit.runtime.liveness_io import LivenessIO, bind_liveness_log
from groupkit.runtime.load import LoadFollower
from groupkit.runtime.member_stats import Stats
from groupkit.runtime.planning import PlanRunner
from groupkit.runtime.probe import MemberStatus
from groupkit.runtime.racks import RackCache
from groupkit.runtime.version_guard import VersionGuard
from groupkit.types import TopicPartition

#: How long after a record that changes the group (a join or leave, an assignment, a verdict,
#: a reset; in version 2 any member record) the group counts as busy (Coordinator.busy_until)
BUSY_S = 2.0
_BUSY_KINDS = frozenset((ReplayKind.LEAVE, ReplayKind.ASSIGNMENT, ReplayKind.REASSERT,
                         ReplayKind.RESET, ReplayKind.VERDICT))  # fmt: skip

_log = get_logger("groupkit.runtime")


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Fence(NamedTuple):
    """What :meth:`Coordinator.fence` tells the ``poll`` thread about its session."""

    #: monotonic seconds before which the session cannot have lapsed; ``None``: it has lapsed
    #: (or nothing of ours was read back yet)
    until: float | None
    #: what of the partitions asked about the member no longer claims: it lost them
    gone: Partitions


#: The control loop's wait for records between turns, (at most, heartbeat interval / n), at
#: least 20 ms: busy, idle (timed steps have seconds of allowance), and a version-2 member that
#: does not judge, whose one timed step is its own heartbeat (verdicts and leases are judges').
_TURN_SLICES = ((0.1, 10_000), (0.25, 4_000), (0.5, 2_000))


class Coordinator:
    """Runs the member's side of the protocol (and the leader's, when it leads) in a thread."""

    def __init__(
        self,
        cfg: GroupConfig,
        topics: Iterable[str],
        admin: AdminClient,
        member_id: str | None = None,
        on_handoff: Callable[[], None] | None = None,
        poll_age: Callable[[], float] | None = None,
        observers: Observers | None = None,
        control: ControlClients | None = None,
    ) -> None:
        """``control``: the member's control clients, opened (and the topic checked) by
        ``GroupConsumer()``; the coordinator owns them from here. Without, it opens its own."""
        self.cfg = cfg
        self.admin = admin
        # A static member's id is its group.instance.id: the seat the group keeps for it.
        self.member_id = (
            cfg.instance_id
            or member_id
            or f"{cfg.connection.get('client.id', 'groupkit')}-{uuid.uuid4().hex[:12]}"
        )
        #: a close keeps the static seat (Member.park) instead of leaving: see ``leave``
        self.keep_seat = cfg.instance_id is not None and not cfg.leave_on_close
        self.incarnation = uuid.uuid4().hex
        self.signer: Signer | None = (
            HmacSigner(cfg.signing_key.encode()) if cfg.signing_key else None
        )
        self.lock = threading.RLock()
        self.state = GroupState(cfg.group_id, cfg.session_timeout_ms, cfg.rebalance_timeout_ms,
                                verifier=self.signer, version=cfg.protocol_version)  # fmt: skip
        self.member = Member(
            cfg.group_id,
            self.member_id,
            self.incarnation,
            topics,
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            rack=cfg.rack,
            capacity=cfg.capacity,
            # what kafka-consumer-groups shows as HOST and CLIENT-ID (groupkit describe)
            client={
                "lib": "groupkit",
                "host": socket.gethostname(),
                "client.id": str(cfg.connection.get("client.id", "rdkafka")),
            },
            signer=self.signer,
            defer_revocations=True,  # revocations are done by the poll thread, then released
            max_clock_skew_ms=cfg.max_clock_skew_ms,
            instance_id=cfg.instance_id,
            version=cfg.protocol_version,
            process_lease_ms=cfg.process_lease_ms,
            ack_delay_ms=min(ACK_DELAY_MS, cfg.rebalance_timeout_ms // 4),  # (rule L9)
        )
        cover_after = default_cover_after_ms(cfg.protocol_version, cfg.heartbeat_interval_ms)
        self.planner = Planner(cfg.assignor, cfg.protocol, cover_after_ms=cover_after)
        #: the protocol's rules (replay, the member's step, when to lead); this class does I/O
        self.node = Node(self.member, self.state, self.planner, defer_plans=True,
                         lease_interval_ms=cfg.lease_interval_ms)  # fmt: skip
        self.plans = PlanRunner(self.planner.assignor, cfg.assignor_timeout_ms,
                                name=f"groupkit-plan-{self.member_id}")  # fmt: skip
        self._racks = RackCache()  # the leader's cache of the partitions' replica racks
        #: (generation, reason) of the newest assignor failure logged
        self._failure_logged: tuple[int, str] | None = None
        self.stats = Stats()
        self._handoffs = HandoffQueue()
        self._revoking: set[TopicPartition] = set()
        #: what the member lost that the poll thread has not stopped yet, and the member's
        #: records held back meanwhile (see _carry_out)
        self._stopping: set[TopicPartition] = set()
        self._held: list[Write] = []
        self._on_handoff = on_handoff
        self._poll_age = poll_age
        self.observers = observers if observers is not None else Observers()
        self.load = LoadFollower.of(cfg, admin, self.member_id, self.planner)  # or None: off
        #: set when the app did not poll within max.poll.interval.ms and the member left
        self.abandoned = False
        #: whether the ``poll`` thread has work from us: a hand-off queued, or ``abandoned``. Set
        #: under the lock; read without it by the hot path (a change it misses, the next sees)
        self.needs_service = False
        #: monotonic s until which the group is busy (:meth:`busy`); the poll thread reads it
        self.busy_until = 0.0
        self._stop = threading.Event()
        self._caught_up = threading.Event()
        #: set by may_join: until then the loop catches up but writes nothing
        self._may_join = threading.Event()
        self._failure: BaseException | None = None
        #: the newest offset one of our own records was appended at, and when (monotonic s):
        #: see _watch_reader
        self._appended = -1
        self._appended_at = 0.0
        self._reader_stall = ReaderStall(cfg.session_timeout_ms)
        #: when the reader last returned a record (monotonic s): see _watch_writer
        self._read_at = 0.0
        self._counts = PartitionCounts(admin, self.member_id)
        if control is None:
            partitions = ensure_control_topic(
                admin,
                cfg.control_topic,
                cfg.control_partitions,
                cfg.control_replication_factor,
                create=cfg.create_control_topic,
                session_timeout_ms=cfg.session_timeout_ms,
                propagation_timeout=cfg.topic_propagation_ms / 1000,
            )
            partition = partition_for_group(cfg.group_id, partitions)
            control = ControlClients(cfg, cfg.control_topic, partition)
            bind_liveness_log(admin, cfg, control)
        if control.partition < 0:
            raise ValueError("the control clients are not bound to a partition (bind)")
        self.control = control
        self.control_partition = control.partition
        self.reader: ControlReader = control.reader
        self.writer: ControlWriter = control.writer
        #: protocol version 2's heartbeats and judging (``None``: version 1)
        self.v2 = LivenessIO.of(cfg, self.node, self.lock, control)
        self.versions = VersionGuard(cfg.group_id, cfg.protocol_version, cfg.session_timeout_ms)
        self._thread = threading.Thread(
            target=self._run, name=f"groupkit-{self.member_id}", daemon=True
        )

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        self._thread.start()

    def may_join(self) -> None:
        """Let the loop write the member's join record once it has caught up (the caller has
        checked what it must first; until then a stopped coordinator leaves no trace)."""
        self._may_join.set()

    def wait_caught_up(self, timeout: float) -> bool:
        return self._caught_up.wait(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    def _run(self) -> None:
        try:
            # The reader's warm-up (GroupConsumer() started it) is done before it is used; the
            # writer's (metadata, producer id: ControlWriter.warm) before the first write.
            self.control.wait_warm(writer=False)
            started = monotonic_ms()

            def warm_writer() -> None:
                self.control.wait_warm()  # the warm-up GroupConsumer() started, then ours
                self.writer.warm()
                self.writer.warm_liveness()  # (version 2's first heartbeat)

            warm = Background(warm_writer, "groupkit-warm")
            hw = until_answered(self._catch_up, self._stop, self._unanswered)  # None: stopped
            while hw is not None and self.reader.position < hw and not self._stop.is_set():
                self._replay(self.reader.poll(0.1))
            until_answered(warm.result, self._stop, self._unanswered, again=warm_writer)
            self.stats.catch_up_replayed = self.stats.records_read
            self._caught_up.set()
            # hop events (debug): one join traced from catch-up to the first record handed out
            _log.debug("hop.caught_up", member=self.member_id, end=hw, how=self.stats.catch_up,
                       ms=monotonic_ms() - started)  # fmt: skip
            # A standby (GroupConsumer() started it) keeps up until the app subscribes.
            while not self._may_join.wait(0.05) and not self._stop.is_set():
                self._replay(self.reader.poll(0))  # keep up meanwhile (no turn: no record)
            # The first turn at once, on what arrived meanwhile: it writes our join record,
            # which says the generation we have seen (a wait for the poll timer only delays it).
            if not self._stop.is_set():
                self.turn(self.reader.poll(0))
            # A turn runs on every record at once; without, often enough for the timed steps
            # (a heartbeat due, our session lapsing: see PollLoop.fence too) (_TURN_SLICES).
            hb = self.cfg.heartbeat_interval_ms
            wait, idle, quiet = (min(top, max(0.02, hb / n)) for top, n in _TURN_SLICES)
            while not self._stop.is_set():  # (a plan being made: taken soon after it is done)
                rest = self._quiet_wait(quiet, wait) \
                    if self.v2 is not None and not self.v2.judging else idle  # fmt: skip
                rest = 0.02 if self.plans.busy else wait if self.busy() else rest
                self.turn(self.reader.poll(rest))
        except BaseException as e:  # the loop must never die silently
            self._failure = e
            _log.exception("control_loop.failed", member=self.member_id)
            self._caught_up.set()
        finally:
            self.writer.flush(5.0)

    def _quiet_wait(self, quiet: float, report: float) -> float:
        """How long a version-2 member that does not judge waits for records between turns:
        until its next heartbeat is due, at least ``quiet``; but only ``report`` while a
        heartbeat's delivery report is to come. Records wake it at once, a report does not
        (the turn serves it), and the member's deadline moves only once the report is served:
        a static member fences a process lease less the skew allowance after its basis, as
        little as one heartbeat interval (the lease's third) after the next heartbeat is
        sent, so a report left for the turn of the heartbeat after it raced its own fence."""
        with self.lock:
            if self.member.clock.awaiting_report:
                return report
            now = monotonic_ms()
            due = [d for d in (self.member.beat_due_in_ms(now), self.member.ack_due_in_ms(now))
                   if d is not None]  # fmt: skip
        return quiet if not due else max(quiet, min(due) / 1000)

    def _unanswered(self, e: BaseException) -> None:
        self.stats.unanswered += 1
        _log.warning("control_log.unanswered", group=self.cfg.group_id, member=self.member_id,
                     error=str(e), times=self.stats.unanswered)  # fmt: skip

    def _catch_up(self) -> int:
        """Start from the group's newest snapshot near the log's end, if there is one (bounded
        replay: runtime/catch_up.py); else the caller replays the log from its beginning. The
        log's end as of now, up to which the caller replays."""
        got = bounded_catch_up(
            self.reader, self.cfg.group_id, self.cfg.session_timeout_ms,
            self.cfg.rebalance_timeout_ms, self.signer, self._stop.is_set,
            snapshots=None if self.v2 is None else self.v2.snapshot_reader,
        )  # fmt: skip
        self.stats.catch_up_scanned = got.scanned
        if got.state is None:  # the reader is rewound: _run replays the whole log
            self.stats.catch_up = "full"
            return got.end
        with self.lock:
            self.state = got.state
            self.node.restored(got.state)
            self.stats.records_read += got.replayed
            self.stats.catch_up = "snapshot"
        _log.info("control_log.caught_up", group=self.cfg.group_id, member=self.member_id,
                  how="snapshot", scanned=got.scanned, replayed=got.replayed,
                  offset=got.state.offset)  # fmt: skip
        return got.end

    # ------------------------------------------------------------------ one turn

    def busy(self) -> bool:
        """A record that changed the group was read within :data:`BUSY_S`, or a plan, a
        hand-off or a revocation is under way: this loop and the poll thread wake fast."""
        if self.needs_service or self._revoking or self.plans.busy:
            self.busy_until = max(self.busy_until, time.monotonic() + BUSY_S)
            return True
        return time.monotonic() < self.busy_until

    def _replay(self, batch: list) -> None:  # type: ignore[type-arg]
        if not batch:
            return
        self._read_at = time.monotonic()
        busy = False
        with self.lock:
            for r in batch:
                self._check_clock(self.state.log_time - r.timestamp_ms, "log_time_went_back")
                res = self.node.feed(r.offset, r.key, r.value, r.timestamp_ms)
                self.stats.records_read += 1
                if res.kind in _BUSY_KINDS or (
                    res.kind == ReplayKind.MEMBER and (self.v2 is not None or res.new_membership)
                ):  # (version 1's heartbeats are member records too: a new membership only)
                    busy = True
                if isinstance(res.key, MemberKey) and res.key.member_id == self.member_id:
                    _log.debug("hop.read_own", member=self.member_id, offset=r.offset,
                               kind=res.kind, new_membership=res.new_membership)  # fmt: skip
                elif res.kind in (ReplayKind.ASSIGNMENT, ReplayKind.REASSERT):
                    _log.debug("hop.read_assignment", member=self.member_id, offset=r.offset,
                               generation=self.state.generation)  # fmt: skip
                self.observers.record_read(self.state, res.kind)
                if res.kind == ReplayKind.REJECTED:  # counted by reason in state.rejections
                    self.versions.rejected(res, r.timestamp_ms)
                    self.observers.record_rejected(self.state, res.reason or "", res.detail or "")
                    _log.warning(
                        "control_record.rejected",
                        group=self.cfg.group_id,
                        member=self.member_id,
                        offset=r.offset,
                        reason=res.reason,
                        detail=res.detail,
                    )
        if busy:
            self.busy_until = time.monotonic() + BUSY_S

    def _check_clock(self, skew_ms: int, how: str) -> None:
        """Log broker clock skew beyond the allowance, where it can be seen: a record stamped
        before the log time (the partition moved to a broker whose clock is behind), or the
        member's own records read back further apart than sent (``Member._measure_skew``)."""
        if skew_ms > self.cfg.max_clock_skew_ms and skew_ms > self.stats.clock_skew_ms:
            self.stats.clock_skew_ms = skew_ms
            _log.warning(
                "control_log.clock_skew",
                group=self.cfg.group_id,
                member=self.member_id,
                how=how,
                skew_ms=skew_ms,
                allowed_ms=self.cfg.max_clock_skew_ms,
                hint="raise groupkit.max.clock.skew.ms or fix the brokers' clocks",
            )

    def turn(self, batch: list) -> None:  # type: ignore[type-arg]
        self._replay(batch)
        # Delivery reports first: the step then knows every heartbeat the broker confirmed. A
        # newcomer reads its join back about when the report of the heartbeat sent with it
        # arrives; seen in this step, its next record acknowledges the generation along with
        # echoing its join, one record that every member reads instead of two.
        self.writer.service(0)
        now = monotonic_ms()
        self._take_plan(self.plans.poll(now))
        # before our join, and at every turn: a member of the other protocol version
        self.versions.check(self.state.log_time)
        if self.v2 is not None:  # a judge reads the liveness log (runtime/liveness_io.py)
            self.v2.judge(now)
        with self.lock:
            if self.member.state == MemberPhase.LEFT:
                return
            self._check_poll_interval()
            if self._stop.is_set():
                return
            # Partition counts are fetched (metadata I/O) only if the node plans, and outside
            # the lock: see _lead.
            step = self.node.step(now)
            acts = self._carry_out(step.actions)
            if step.snapshot is not None:  # version 2: on the liveness log (for newcomers)
                (self._write if self.v2 is None else self.v2.write_snapshot)(*step.snapshot)
            for k, v in (*step.tombstones, *step.judged):  # (judged: version 2's verdicts, lease)
                self._write(k, v)
        if (acts.lost or acts.revoke or acts.assign) and self._on_handoff is not None:
            self._on_handoff()
        if step.ready:
            self._lead(now)
        elif step.rebalance_done is not None:  # abandoned: we lost the lead mid-rebalance
            self._rebalance_done(step.rebalance_done)
        self._follow_load(now, step.leader)
        self.observers.turn(self.state, self.member_id, now)
        self.writer.service(0)
        self._watch_reader()
        self._watch_writer()

    def _watch_writer(self) -> None:
        """Renew the control writer when it has stopped delivering: a record queued a session
        ago (at least 2 s) has no delivery report, and the reader has read since it was queued
        (so the broker is up: during an outage nothing is read either, and the records wait
        for the broker, as they should). ControlWriter.renew says when librdkafka does that.
        A whole session, not half as for the reader: a fresh producer's first record waits for
        its producer id, so renewing one that is only slow costs more than it saves."""
        since = self.writer.waiting_since()
        if since is None or self._read_at <= since:
            return
        stalled = time.monotonic() - since
        if stalled < max(2.0, self.cfg.session_timeout_ms / 1000):
            return
        _log.warning("control_writer.stalled", group=self.cfg.group_id, member=self.member_id,
                     seconds=round(stalled, 1))  # fmt: skip
        self.writer.renew()
        self.stats.writer_renewals += 1

    def _watch_reader(self) -> None:
        """Renew the control reader when it has stopped fetching (``ReaderStall``): one that
        does not would leave the member unable to see its own records, lapsing again and
        again."""
        stalled = self._reader_stall.due(self._appended, self._appended_at, self.reader.position)
        if stalled is None:
            return
        _log.warning("control_reader.stalled", group=self.cfg.group_id, member=self.member_id,
                     position=self.reader.position, appended=self._appended,
                     seconds=round(stalled, 1))  # fmt: skip
        self.reader.renew()
        self.stats.reader_renewals += 1

    def _check_poll_interval(self) -> None:
        """Leave the group when the app stopped polling, as Kafka's max.poll.interval.ms does.

        The partitions are then reassigned; the app's next poll finds them lost (no commit)
        and rejoins as a new member. Until then its commits are refused (``abandoned``).

        A static member does not leave (as in Kafka since KIP-345, where only its session
        ends a static membership): the loop stops writing, so its seat keeps its partitions
        until its session runs out, as after a crash. If the app polls again before that, its
        next poll finds them lost and rejoins with the same instance id, which takes the seat
        back (its partitions once the stopped process's session has ended, as a successor's
        after a kill): no other member is rebalanced.
        """
        if (
            self._poll_age is None
            or self.abandoned
            or self.member.state in (MemberPhase.LEAVING, MemberPhase.LEFT)
        ):
            return
        age = self._poll_age()
        if age * 1000 > self.cfg.max_poll_interval_ms:
            self.abandoned = True
            self.needs_service = True
            _log.warning("max_poll_interval_exceeded", group=self.cfg.group_id,
                         member=self.member_id, seconds_since_poll=round(age, 3),
                         keeps_seat=self.keep_seat)  # fmt: skip
            if self.keep_seat:
                self._stop.set()  # no record from now on: not even this turn's (see turn)
            else:
                self.member.leave()

    def _act(self, now: int, service: bool = True) -> Actions:
        """The member's step alone (under ``self.lock``), carried out."""
        return self._carry_out(self.node.poll(now), service)

    def _carry_out(self, acts: Actions, service: bool = True) -> Actions:
        """Queue the hand-offs of the member's ``acts`` and produce its records (under lock)."""
        self._check_clock(self.member.skew_seen_ms, "own_records")
        new_revoke = acts.revoke - self._revoking
        if acts.lost or new_revoke or acts.assign or acts.reset:
            self._revoking |= new_revoke
            self._revoking -= acts.lost
            h = Handoff(acts.lost, new_revoke, acts.assign, acts.generation, acts.offsets,
                        acts.reset, acts.reset_at)  # fmt: skip
            owned = self.member.owned
            self._handoffs.put(h, owned, awaited(self.state, self.member_id, owned))
            self.needs_service = True
            _log.debug("hop.handoff", member=self.member_id, assign=len(acts.assign),
                       revoke=len(new_revoke), lost=len(acts.lost))  # fmt: skip
            for e in acts.events:
                _log.info("member.event", group=self.cfg.group_id, member=self.member_id,
                          what=e, generation=acts.generation)  # fmt: skip
        # A record written after a loss may end our claims where it lands (a lapsed member's
        # has no prev_ts), and others are granted them at once. So it waits until the poll
        # thread has stopped the lost partitions (``lost``), as the protocol's member stops
        # owning in the step that writes it. Safety loses nothing: without it the log expires
        # us a session after our last heartbeat, later than our own fence.
        self._stopping |= acts.lost
        for w in acts.writes:
            if self._stopping:
                _log.debug("hop.held", member=self.member_id, stopping=len(self._stopping))
                self._held.append(w)
            else:
                self._send(w, service)
        return acts

    def _send(self, w: Write, service: bool) -> None:
        """A record of the member's: a heartbeat to the liveness log, else to the main log."""
        if w.liveness and self.v2 is not None:
            self.v2.beat(w, service)
        else:
            self._write(w.raw_key, w.raw_value, service=service)

    def _stopped(self, partitions: Partitions) -> None:
        """The poll thread stopped ``partitions``: once it stopped everything lost, produce the
        records held back meanwhile (under lock, on the poll thread)."""
        self._stopping -= partitions
        if self._stopping or not self._held:
            return
        held, self._held = self._held, []
        _log.debug("hop.unheld", member=self.member_id, records=len(held))
        for w in held:
            self._send(w, service=False)

    # ------------------------------------------------------------------ the poll thread's side

    def take_handoffs(self) -> list[Handoff]:
        """The queued hand-offs, oldest first, for the ``poll`` thread to carry out (none
        without taking the lock, when none is queued)."""
        if not self._handoffs:
            return []
        with self.lock:
            handoffs = self._handoffs.take(time.monotonic())
            self.needs_service = self.abandoned or bool(self._handoffs)  # held: look again
        return handoffs

    def fence(self, owned: Set[TopicPartition]) -> Fence:
        """Where the member's session stands, for the ``poll`` thread's fence over ``owned``.

        The session lapses ``session.timeout`` (less the clock-skew allowance) after the send
        of the own record it runs from (``Member.session_age_ms``); that send time never moves
        back, so the deadline returned is never later than the true one and may be cached
        until it passes. ``gone``: what of ``owned`` the member itself no longer claims (a
        revoked partition stays claimed until released): the control thread fenced it and may
        since have confirmed a newer heartbeat, so the age alone says nothing of it.
        """
        session = self.member.fence_after_ms  # the session less the clock-skew allowance
        with self.lock:
            now_ms = monotonic_ms()
            age = self.member.session_age_ms(now_ms)
            gone = frozenset(owned - self.member.owned)
        if age is None or age >= session:
            return Fence(None, gone)
        # monotonic_ms() floors monotonic_ns(); -1 ms keeps the float deadline early.
        return Fence((now_ms - age + session - 1) / 1000, gone)

    def check_commit(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Raise :class:`~groupkit.errors.FencedError` unless the member may commit
        ``partitions`` now (its session is current and it claims them)."""
        with self.lock:
            self.member.check_commit(partitions, monotonic_ms())

    def set_subscription(self, topics: Iterable[str]) -> None:
        """Change the member's topics; its next record says so."""
        with self.lock:
            self.member.set_subscription(topics)

    # generation and is_leader read one attribute each, which the GIL makes atomic: no lock,
    # so an application that asks on every poll never waits for a turn of the control loop.
    @property
    def generation(self) -> int:
        """The generation the member's partitions belong to."""
        return self.member.generation

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.member_id

    def status(self) -> MemberStatus:
        """Where the member stands now, read at once under the lock (for observers)."""
        with self.lock:
            leader = self.state.leader == self.member_id
            return MemberStatus(
                member_id=self.member_id,
                generation=self.member.generation,
                is_leader=leader,
                live_members=len(self.state.live_members()) if leader else 0,
                session_age_ms=self.member.session_age_ms(monotonic_ms()),
            )

    def leave(self) -> None:
        """Start a clean leave (unless one is under way): the next turn revokes all still
        claimed and writes the tombstone; ``keep_seat``: no tombstone (``Member.park``)."""
        with self.lock:
            if self.member.state not in (MemberPhase.LEAVING, MemberPhase.LEFT):
                self._leave_or_park()

    def stop_taking(self) -> None:
        """The process is closing: its member takes nothing more (``Member.stop_taking``), and
        what it was handed starts now, to be given up with the rest."""
        with self.lock:
            self.node.stop_taking()
            self._handoffs.release()

    def _leave_or_park(self) -> None:
        if self.keep_seat:
            self.node.park()
        else:
            self.node.leave()

    @property
    def superseded(self) -> bool:
        """A newer process with our ``group.instance.id`` took our seat (newest join wins):
        we own nothing and write nothing more."""
        return self.member.superseded

    @property
    def has_left(self) -> bool:
        """The member's tombstone is written (or it left for good)."""
        return self.member.state == MemberPhase.LEFT

    def close(self, timeout: float) -> None:
        """Stop the loop and close the control clients, flushing for up to ``timeout`` s.

        Called by the closing ``poll`` thread, which hands nothing out any more: records held
        back for a loss it has not carried out (a leave's tombstone, say) go out now."""
        with self.lock:
            self._stopped(frozenset(self._stopping))
        self.stop()
        if self.load is not None:  # its worker's clients go before the control clients
            self.load.join(timeout)
        if self.v2 is not None:
            self.v2.close()
        self.control.close(timeout)

    def released(
        self,
        partitions: Partitions,
        leave: bool = False,
        committed: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """Called by the ``poll`` thread once revoked partitions are committed and stopped.

        The record that no longer claims them is produced right here: the leader grants them
        to their next owner as soon as it reads it, so waiting for the control thread's next
        turn would only add to the time they are without an owner. It carries ``committed``,
        the offsets whose synchronous commit just succeeded, so that the next owner starts
        there without looking them up (docs/protocol.md, "Handoffs": offset hints).

        ``leave``: the member is closing, and this record is its last, produced together with
        its tombstone. Apart, a leader reading the record first sees a member that acknowledged
        its generation yet claims less than it grants (``partitions_lost``) and grants them to
        it again; the tombstone then has to hold those grants, which it never took, until its
        session would have expired (test_clean_close_rebalances_at_once caught it).
        """
        with self.lock:
            self._revoking -= partitions
            self.node.released(partitions, committed)
            if leave and self.member.state not in (MemberPhase.LEAVING, MemberPhase.LEFT):
                self._leave_or_park()
            if self.member.state == MemberPhase.LEFT:
                return
            # Delivery callbacks stay on the control thread (its next writer.service).
            acts = self._act(monotonic_ms(), service=False)
        if (acts.lost or acts.revoke or acts.assign) and self._on_handoff is not None:
            self._on_handoff()

    def reset_applied(self, at: int, partitions: Iterable[TopicPartition]) -> None:
        """Called by the ``poll`` thread once it started ``partitions`` at the offsets of the
        reset record at offset ``at`` and committed them (``Handoff.reset``): the record that
        acknowledges the reset is produced at once (the operator's command waits for it)."""
        with self.lock:
            if self.member.state == MemberPhase.LEFT:
                return
            self.member.reset_applied(at, partitions)
            _log.info("offsets.reset_applied", group=self.cfg.group_id, member=self.member_id,
                      reset_at=at)  # fmt: skip
            acts = self._act(monotonic_ms(), service=False)
        if (acts.lost or acts.revoke or acts.assign) and self._on_handoff is not None:
            self._on_handoff()

    def lost(self, partitions: Partitions) -> None:
        """Called by the ``poll`` thread once it stopped ``partitions`` as lost (no commit).

        Usually the member's own fence took them first and this does nothing. But ``poll``
        fences by itself too (its session deadline passed before this thread's next turn), and
        if that turn then confirms a newer heartbeat, the member never fences: it would go on
        claiming, record after record, partitions nobody processes, and the leader, whose
        target for it already matches that claim, would never grant them again. So the claim
        is dropped here, and the record that says so is produced at once (the leader then
        re-plans them: ``partitions_lost``).

        The records held back since the member lost partitions (``_carry_out``) go out here,
        once the poll thread has stopped all of them.
        """
        with self.lock:
            self._revoking -= partitions
            self._stopped(partitions)
            if (
                not self.member.owned & partitions
                or self.member.state == MemberPhase.LEFT
                # a stopped loop writes nothing more: its session ends its claims (a static
                # member's seat keeps them meanwhile, see _check_poll_interval)
                or self._stop.is_set()
            ):
                return
            _log.warning("member.unclaimed_lost", group=self.cfg.group_id, member=self.member_id,
                         partitions=len(self.member.owned & partitions))  # fmt: skip
            self.node.released(partitions)
            acts = self._act(monotonic_ms(), service=False)
        if (acts.lost or acts.revoke or acts.assign) and self._on_handoff is not None:
            self._on_handoff()

    def _lead(self, now: int) -> None:
        """Plan (the node decides whether it still may), fetching lags if asked; produce it."""
        counts = self._partition_counts()
        with self.lock:
            lead = self.node.plan(now, counts)
        if lead is not None and lead.action == DecisionAction.NEED_LAGS:
            parts = [TopicPartition(t, p) for t in lead.lag_topics for p in range(counts.get(t, 0))]
            try:
                lags = fetch_lags(self.admin, self.cfg.group_id, parts, self.cfg.lag_reset)
                self.observers.lags_fetched(lags)
            except BrokerError as e:
                _log.warning("lags.unavailable", error=str(e))
                lags = {tp: 0 for tp in parts}
            with self.lock:
                lead = self.node.plan(now, counts, lags)
        if lead is not None and lead.request is not None:
            racks = self._racks.for_request(self.admin, self.plans.assignor, lead.request)
            self.plans.start(lead.request, now, racks)
            # a quick assignor's plan is written in this turn; a slow one in a later turn
            self.plans.wait(0.05)
            if not self._take_plan(self.plans.poll(monotonic_ms())):
                return
            with self.lock:
                lead = self.node.plan(now, counts)
        self._write_lead(lead)

    def _write_lead(self, lead: Lead | None) -> int | None:
        """Write the node's answer if it is a record; the generation written, if any."""
        if lead is None:
            return None
        if lead.rebalance_done is not None:  # superseded by the one this record starts, or done
            self._rebalance_done(lead.rebalance_done)
        decision, record = lead.decision, lead.decision.record
        if lead.action == DecisionAction.WRITE and record is not None and lead.key is not None:
            _log.info("rebalance.generation", group=self.cfg.group_id, leader=self.member_id,
                      reason=decision.reason, generation=record.generation, phase=record.phase,
                      protocol=record.protocol)  # fmt: skip
            self.stats.rebalances[decision.reason] += 1
            self._write(lead.key, lead.value, assignment=True)
            self.observers.generation_written(
                self.state, record.generation, record.phase, decision.reason
            )
            return record.generation
        return None

    def _follow_load(self, now: int, leader: bool) -> None:
        """The leader's re-plans for the load (runtime/load.py), read and decided on its worker
        thread; the node writes one only while the group is stable at the generation it saw."""
        if (lf := self.load) is None:
            return
        got = lf.take()
        if not leader:
            return lf.stop_leading()
        if got is not None and (r := got[1].replan) is not None:
            with self.lock:
                lead = self.node.replan(now, self._partition_counts(), r, got[0])
            if self._write_lead(lead) is not None:  # logged as a generation for the load
                self.observers.load_replanned(r.reason, r.gain, len(r.moves))
        if lf.due(now):
            counts = self._partition_counts()
            with self.lock:
                lf.start(self.state, now, counts, self.node.ready(now))

    def _take_plan(self, outcome: PlanOutcome | None) -> bool:
        """Hand a made plan to the node (it uses it at its next plan if the membership it was
        made for still holds); log and count an assignor failure once per generation."""
        if outcome is None:
            return False
        with self.lock:
            self.node.planned(outcome)
            generation = self.state.generation + 1
        why = outcome.fallback
        if why is not None and self._failure_logged != (generation, why.reason):
            self._failure_logged = (generation, why.reason)
            _log.warning("assignor.failed", group=self.cfg.group_id, member=self.member_id,
                         assignor=self.cfg.assignor, reason=why.reason, detail=why.detail,
                         fallback=why.assignor, generation=generation)  # fmt: skip
            # the leader's own outcome (fallback_outcome): always one of AssignorFailure
            reason = AssignorFailure(why.reason)
            self.observers.assignor_failed(self.cfg.assignor, reason, why.detail)
        return True

    # ------------------------------------------------------------------ rebalance summaries

    def _rebalance_done(self, summary: RebalanceSummary) -> None:
        """A rebalance we led ended (the node follows it: ``Node.step``, ``Node.plan``)."""
        # One summary line per rebalance (the observability contract).
        _log.info("rebalance", group=summary.group, leader=summary.leader, reason=summary.reason,
                  protocol=summary.protocol, generation=summary.generation,
                  generations=summary.generations, moved=summary.moved,
                  revoked=summary.revoked, duration_ms=round(summary.duration_s * 1000, 1),
                  outcome=summary.outcome)  # fmt: skip
        self.observers.rebalance_done(summary)

    def _partition_counts(self) -> dict[str, int]:
        """Partition counts of every topic a live member subscribes to (runtime/counts.py)."""
        with self.lock:
            topics = {t for m in self.state.live_members().values() for t in m.topics}
        return self._counts.of(topics)

    def _write(
        self, key: bytes, value: bytes | None, assignment: bool = False, service: bool = True
    ) -> None:
        kind = "assignment" if assignment else "member" if value is not None else "tombstone"
        sent = monotonic_ms()

        def delivered(err: KafkaError | None, offset: int) -> None:
            _log.debug("hop.appended", member=self.member_id, kind=kind, offset=offset,
                       ms=monotonic_ms() - sent, failed=err is not None)  # fmt: skip
            if err is not None:
                self.stats.write_errors += 1
                self.observers.record_written("assignment" if assignment else "member", False)
                _log.warning("control_record.write_failed", error=str(err))
                if assignment:
                    with self.lock:
                        self.node.write_failed()  # plan again
                return
            self.stats.records_written += 1
            self._appended = max(self._appended, offset)
            self._appended_at = time.monotonic()
            self.observers.record_written("assignment" if assignment else "member", True)
            if assignment:
                with self.lock:
                    self.node.written(offset)

        _log.debug("hop.sent", member=self.member_id, kind=kind)
        self.writer.write(key, value, delivered, service=service)
