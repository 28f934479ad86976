"""One member's side of the protocol: from the replayed group state to what to do now.

:class:`Member` is sans-I/O, like h11's ``Connection``: the runtime tells it the member's
monotonic clock (``now_ms``) and hands it the replayed :class:`~groupkit.protocol.state.GroupState`;
it answers with :class:`Actions`, which the runtime carries out **in this order**:

1. ``lost``: stop processing these at once and do **not** commit them (``on_lost``).
2. ``revoke``: stop processing, **commit** their offsets, call ``on_revoke``.
3. ``assign``: call ``on_assign`` and start processing (``incremental_assign`` in cooperative),
   at ``offsets`` where given: the offsets their previous owner committed and named in the
   record that released them (``ownership.hints_for``), so no look-up is needed; the others
   start at their committed offsets, looked up.
4. ``writes``: produce these records, in order, only after 1-3 are done. A record that says a
   partition is gone is written after its offsets are committed, because the leader grants it
   to the next owner as soon as that record is in the log.

The member side is a diff: ``diff(owned, target) -> (added, revoked)``; eager and cooperative
differ only in the targets the leader writes. The target is what the current generation grants the
member, plus its *handoffs*: partitions pending for it whose owner has let go, which replay shows
nobody else may hold (``ownership.handoffs``); it takes those at the owner's release record,
without waiting for the leader's follow-up grant. Less what it gives a newcomer the current
generation admitted (``ownership.admitted_away``), which it revokes at once. A newcomer so admitted
is covered by no generation yet: its target is what its givers have let go
(``ownership.admission_handoffs``; docs/protocol.md, "Admission"). A member takes what it inherits
from an owner that left the same way, as a handoff (``ownership.inheritance_handoffs``;
docs/protocol.md, "Inheritance").

Self-fencing, step by step (why the member can drop its partitions before anyone gets them):

1. The member remembers the monotonic time at which it sent each of its records (by ``seq``).
2. When its replay shows its own record ``seq = n``, record ``n`` is *confirmed*; its send time
   ``s`` is before the broker's append time ``T``, so ``s <= T``. Each record it writes names, as
   ``prev_ts``, the ``T`` of its newest confirmed record (and echoes ``joined_at`` and
   ``since_generation`` as the log had them after it), or nothing once its session has lapsed.
3. The log frees the member's partitions only (a) when it expires the member, at log time
   ``T + session.timeout`` at the earliest, or (b) when a record of it starts a new membership:
   one without ``prev_ts``, or appended a session or more after its ``prev_ts`` (state.py).
   Only then may the leader grant them to another member.
4. The member fences itself at its own time ``s + session.timeout`` (less the clock-skew
   allowance, below), where ``s`` is the send time of its newest confirmed record, except that
   while a record written with an older ``prev_ts`` is still on its way, ``s`` is the send time
   of that older record (and while one without ``prev_ts`` is, the member stays lapsed). Either
   way ``s + session.timeout`` is no later than the log time at which (a) or (b) can happen: it
   has stopped before the grant can exist. ``s`` never moves back, so the runtime may cache the
   deadline. A process frozen longer than that (a zombie) is fenced by the first
   :meth:`Member.poll` after it resumes, before it processes anything; ``check_commit`` refuses
   its commits.
5. After fencing it writes a fresh record without ``prev_ts``: a *new* membership that owns
   nothing, so it only gets partitions again through a new generation. It writes no other until
   it has read that one back (or a session has passed), since each would restart the membership
   again; the leader plans for it only once its record says ``prev_ts`` again (``is_lagging``):
   a member that lapsed likely reads too slowly to take what it would be given. Its record
   says ``prev_ts`` again only once it has read an own record back within half its fence
   time (:meth:`Member._basis`), so a rebalance's own records do not put it behind again.
   Such a record, written while its session holds, restarts the membership all the same:
   until it has read it back the member takes no grant, since the membership the grants were
   for ends where that record lands.
   A member that has just joined writes no ``prev_ts`` either, but its first record (``seq`` 1)
   says which generation it has seen: if that is the current one, the leader plans for it at
   once (``ownership.is_newcomer_ready``). That is as safe as any grant: the log reserves it
   for this membership (``may_hold``), and the member takes it only once it has read its own
   record back within its session (steps 2-4).

Clock skew (docs/protocol.md, "Clock skew"): the log's times come from whichever broker leads
the control partition, so with brokers ``k`` = ``max_clock_skew_ms`` apart the member fences at
``s + session.timeout - k`` (:attr:`Member.fence_after_ms`), and step 4 holds for any skew up to
``k``; it measures larger ones (:meth:`Member._measure_skew`) for the runtime to log.

Static members (``instance_id``: KIP-345; docs/protocol.md, "Static seats"): the member id is
the instance id. A new process's join echoes its seat and takes it over, and the seat's grant once
no hold covers it. :meth:`Member.park` is a static member's close: revoke everything, write a
record owning nothing, no tombstone. A process that sees another in its seat was replaced by a
newer join: it drops everything and stops for good (``superseded``), writing nothing more.

Member states and the events that move them: :data:`~groupkit.protocol.vocab.MEMBER_TRANSITIONS`
(an event missing from the table raises :class:`ProtocolError`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import groupkit.protocol.holds as holds
import groupkit.protocol.ownership as ownership
from groupkit.errors import FencedError, ProtocolError
from groupkit.protocol.actions import Actions, Write, diff
from groupkit.protocol.liveness import Confirmed, HeartbeatClock
from groupkit.protocol.records import (
    EMPTY,
    MemberRecord,
    Partitions,
    Signer,
    encode,
    heartbeat_record,
    member_record,
    member_tombstone,
)
from groupkit.protocol.state import GroupState
from groupkit.protocol.vocab import MEMBER_TRANSITIONS, LossReason, MemberEvent, MemberPhase
from groupkit.types import TopicPartition

#: How long a member's acknowledgement that changes nothing else of its waits (rule L9), at
#: most: a rebalance's hand-off, from the first release to the new owners' first records, takes
#: 50-150 ms on a loaded machine; the acknowledgements then come after it, not in its way.
ACK_DELAY_MS = 250


@dataclass(frozen=True, slots=True)
class _Basis:
    """One own record as the member's replay saw it: what a later record's ``prev_ts`` names."""

    seq: int
    sent: int  # monotonic send time
    ts: int  # broker time
    joined_at: int  # the membership as the log had it after this record
    since: int


class Member:
    """The member's protocol state machine. Call :meth:`poll` after replaying, and on a timer."""

    def __init__(
        self,
        group: str,
        member_id: str,
        incarnation: str,
        topics: Iterable[str],
        *,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        rack: str | None = None,
        capacity: float | None = None,
        client: Mapping[str, str] | None = None,
        signer: Signer | None = None,
        defer_revocations: bool = False,
        max_clock_skew_ms: int = 0,
        instance_id: str | None = None,
        version: int = 1,
        process_lease_ms: int | None = None,
        ack_delay_ms: int = 0,
    ) -> None:
        """``version``: the protocol version it speaks (docs/protocol-v2.md). Version 2 writes
        heartbeats for the liveness log, learns its liveness from their delivery reports
        (:meth:`heartbeat_confirmed`) and writes member records only when they change.
        ``process_lease_ms``: version 2, a static member: how long its process may process
        after its newest confirmed heartbeat (rule L7; its seat still lasts the session).
        ``ack_delay_ms``: version 2, how long a record that would only acknowledge a generation
        that changes nothing of ours may wait (rule L9; 0: it goes at once)."""
        if instance_id is not None and instance_id != member_id:
            raise ValueError(f"a static member's id is its instance id {instance_id!r}")
        self.group = group
        #: ``group.instance.id``: a static member (module docstring, "Static membership")
        self.instance_id = instance_id
        #: the incarnation the log knows our seat by (ours, unless we took a seat over)
        self._seat: str | None = None
        #: the offset of the rejected record under our key we last wrote ours again after
        self._rewrote = -1
        #: a newer process with our instance id took our seat: we stop for good
        self.superseded = False
        #: our replay has had this process in its static seat (set by ``Node.feed``; also when
        #: we read a record of ours back): from then on, another process there superseded us
        self.seated = False
        #: :meth:`park` rather than :meth:`leave`: say goodbye without the tombstone
        self._park = False
        self.closing = False  # stop_taking(): a closing process takes nothing more
        self.member_id = member_id
        self.incarnation = incarnation
        self.topics = tuple(sorted(set(topics)))
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        if not 0 <= max_clock_skew_ms < session_timeout_ms:
            raise ValueError(
                f"max_clock_skew_ms must be in [0, session_timeout_ms), got {max_clock_skew_ms}"
            )
        #: How far the clocks of the brokers that may lead the control partition can differ: a
        #: move to one ahead by this much may expire us (or restart our membership) that much
        #: early, so we fence ourselves that much early ("Clock skew" in the module docstring).
        self.max_clock_skew_ms = max_clock_skew_ms
        #: the session, by our own clock, after which we hold ourselves fenced
        self.fence_after_ms = session_timeout_ms - max_clock_skew_ms
        #: the largest change of the broker clock's offset seen between two of our own records
        #: (a lower bound, from our send and read-back times; see :meth:`_measure_skew`)
        self.skew_seen_ms = 0
        self.rack = rack
        self.capacity = capacity
        self.client = dict(client or {})
        self.signer = signer
        #: A runtime that revokes on another thread (commit, ``on_revoke``) sets this: revoked
        #: partitions stay claimed until :meth:`revoked` says they are committed and stopped, so
        #: the leader cannot grant them while in use (the simulator revokes before the write).
        self.defer_revocations = defer_revocations
        self.state = MemberPhase.UNJOINED
        #: what this process owns and processes now (local truth)
        self.owned: Partitions = EMPTY
        #: the generation ``owned`` belongs to
        self.generation = 0
        #: the newest generation this member has processed
        self.acked = 0
        self._seq = 0
        #: seq -> (monotonic send time, the basis it was written with, the latest send time the
        #: session may run from until it is read back; see _refence) of unconfirmed records
        self._sent: dict[int, tuple[int, _Basis | None, int | None]] = {}
        self._newest: _Basis | None = None  # the newest confirmed own record
        self._newest_confirmed = 0  # monotonic time at which _newest was read back
        #: send time of the fence basis: the session runs from there (see _refence)
        self._confirmed_at: int | None = None
        self._last_send: int | None = None
        self._joined_at: int | None = None
        #: the newest record sent said "no prev_ts"; when that changes, write at once
        self._unready_sent: int | None = None
        #: the newest record sent said "no prev_ts" and was not our first: we are back from a
        #: lapse, and say ``prev_ts`` again only once our records come back quickly (_basis)
        self._rejoining = False
        self._dirty = True  # something the log should hear about at once
        #: offsets committed for released partitions, for the next record (then forgotten)
        self._committed: dict[TopicPartition, int] = {}
        #: the newest reset carried out (its record's offset; -1: none), and the partitions
        #: whose new offset we committed for it: our records say so (state.py "Offset resets")
        self.reset_at = -1
        self._reset_done: set[TopicPartition] = set()
        #: a reset handed to the runtime and not reported done yet (``defer_revocations``)
        self._resetting: int | None = None
        #: what the generation we acknowledged gives us (our target then); what we handed the
        #: runtime to revoke (``defer_revocations``) and it has not released yet; and what of
        #: those a newer grant gives us again, once released (:meth:`revoked`): taken back
        self._granted: Partitions = EMPTY
        self._revoking: Partitions = EMPTY
        self._retake: Partitions = EMPTY
        self.version = version
        #: version 2: our liveness as our heartbeats' delivery reports tell it (liveness.py)
        lease = session_timeout_ms
        if version == 2 and instance_id is not None and process_lease_ms is not None:
            lease = min(lease, process_lease_ms)
        self.clock = HeartbeatClock(lease, max_clock_skew_ms)
        #: version 2: how often we heartbeat: a process lease is renewed three times within
        #: itself, whatever heartbeat.interval.ms is (rule L7)
        self._beat_every = min(heartbeat_interval_ms, max(1, lease // 3))
        #: version 2: how long we heartbeat while the main log shows nothing new (L4.5; set by
        #: ``Node`` from its lease interval), and (offset read, our clock then)
        self.read_timeout_ms = 2 * session_timeout_ms
        self._read_at: tuple[int, int] | None = None
        #: version 2: the liveness run our membership lives in (the seq of the heartbeat that
        #: started it), and our clock when we last sent a heartbeat
        self._run: int | None = None
        self._last_beat: int | None = None
        #: version 2: a heartbeat reported a run we did not start: ours ended
        self._run_broken = False
        #: version 2: member records written by this process (its first may take a seat over),
        #: and the newest generation one of them said we had seen
        self._records = 0
        self._seen_written = 0
        #: version 2: (run, our clock, seq) of the newest record that started a membership:
        #: until we read it back, another would only start one again where it lands
        self._start_sent: tuple[int, int, int] | None = None
        #: version 2: our clock when we took part of our admitted share unclaimed (_claim_later)
        self._claim_held: int | None = None
        #: version 2: how long an acknowledgement that changes nothing else may wait (L9), and
        #: our clock when the one waiting is due
        self.ack_delay_ms = ack_delay_ms if version == 2 else 0
        self._ack_due: int | None = None

    def _ack_soon(self, now_ms: int, quiet: bool) -> None:
        """Write our record now, or, for an acknowledgement that changes nothing else of ours
        (``quiet``), within :attr:`ack_delay_ms` (L9); whatever we write first carries it."""
        if not quiet:
            self._dirty = True
        elif self._ack_due is None:
            self._ack_due = now_ms + self.ack_delay_ms

    def ack_due_in_ms(self, now_ms: int) -> int | None:
        """Version 2: ms until an acknowledgement that waits (:attr:`ack_delay_ms`) is due."""
        return None if self._ack_due is None else max(0, self._ack_due - now_ms)

    def _claim_later(self, group: GroupState, revoked: Partitions, now_ms: int) -> bool:
        """Version 2: what we just took is part of our admitted share and more is to come: claim
        it with the rest, a heartbeat interval later at most (docs/protocol.md, rule 6.6)."""
        held = self.version == 2 and not revoked and self.state == MemberPhase.JOINING and \
            ownership.share_awaited(group, self.member_id, self.owned)  # fmt: skip
        self._claim_held = now_ms if held and self._claim_held is None else self._claim_held
        return held

    # ------------------------------------------------------------------ inputs

    def set_subscription(self, topics: Iterable[str]) -> None:
        """Change the topics; the next :meth:`poll` writes the record."""
        topics = tuple(sorted(set(topics)))
        if topics != self.topics:
            self.topics = topics
            self._dirty = True

    def revoked(
        self,
        partitions: Iterable[tuple[str, int]],
        committed: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """The runtime has committed and stopped ``partitions``: stop claiming them.

        Only meaningful with ``defer_revocations``; the next :meth:`poll` writes the record
        that lets the leader grant them to their next owner. ``committed``: the offsets whose
        synchronous commit just succeeded (only those: the next owner starts there without a
        look-up, see state.py "Offset hints"); that record carries them.
        """
        gone = self.owned & frozenset(TopicPartition(t, p) for t, p in partitions)
        if gone:
            self.owned -= gone
            self._dirty = True
            # Taken back by the next healthy poll, if still granted: what a generation we acked
            # mid-revocation granted us again (the log reserves it: no record of ours let go),
            # and a static seat's lost grant (Coordinator.lost), which nobody plans again (rule
            # 9.7); a dynamic member's lost ones go, for the leader to plan (partitions_lost).
            lost = gone - self._revoking if self.instance_id is not None else EMPTY
            self._retake |= (gone & self._revoking | lost) & self._granted
            self._revoking -= gone
            if committed:
                self._committed.update((p, o) for p, o in committed.items() if p in gone)

    def leave(self) -> None:
        """Start a clean leave; the next :meth:`poll` revokes everything and says goodbye."""
        self._fire(MemberEvent.LEAVE)

    def stop_taking(self) -> None:
        """Take nothing more (the process is closing): its leaving record holds its claims."""
        self.closing = True

    def park(self) -> None:
        """Stop without leaving (a static member's close, as Kafka's): the next :meth:`poll`
        revokes everything (commit) and writes a record owning nothing, but no tombstone, so
        the seat and its grants wait a session for the next process with our instance id."""
        if self.instance_id is None:
            raise ProtocolError(f"member {self.member_id} is not static: it can only leave")
        self._park = True
        self._fire(MemberEvent.LEAVE)

    def session_age_ms(self, now_ms: int) -> int | None:
        """Monotonic ms since the send of the own record the session runs from (``None``:
        nothing of ours read back yet).

        That is the newest own record seen in the log, or an older one while a record written
        in its time is still on its way (:meth:`_refence`). That send time never moves back, so
        ``now - age + session.timeout`` is a deadline the session cannot lapse before: a caller
        may cache it until then.
        """
        if self.version == 2:
            d = self.clock.deadline()
            return None if d is None else now_ms - (d - self.fence_after_ms)
        return None if self._confirmed_at is None else now_ms - self._confirmed_at

    # ------------------------------------------------------------------ version 2's reports

    def heartbeat_confirmed(self, seq: int, ts: int) -> None:
        """Version 2: heartbeat ``seq``'s delivery report: appended at liveness time ``ts``."""
        got = self.clock.confirmed(seq, ts)
        if got == Confirmed.RESTARTED and seq != self._run:
            # a heartbeat meant to continue our run landed too late: the judge ends the run
            # our membership lives in, so we have fenced (the clock kept us to its deadline)
            # and join again in the run this one started
            self._run_broken = True
            self._run = seq
            self._joined_at = None
            self._dirty = True

    def heartbeat_failed(self, seq: int, maybe_landed: bool) -> None:
        """Version 2: heartbeat ``seq``'s delivery report is an error (``maybe_landed``: it may
        have been appended all the same, a timeout)."""
        self.clock.failed(seq, maybe_landed)

    def check_commit(self, partitions: Iterable[tuple[str, int]], now_ms: int) -> None:
        """Raise :class:`FencedError` unless this member may commit ``partitions`` now."""
        age = self.session_age_ms(now_ms)
        if age is None or age >= self.fence_after_ms:
            raise FencedError(
                f"member {self.member_id}: own heartbeat not seen in the log for "
                f"{age if age is not None else 'ever'} ms >= session timeout less the clock "
                f"skew allowance ({self.fence_after_ms} ms); commit refused"
            )
        foreign = sorted(str(TopicPartition(t, p)) for t, p in partitions
                         if TopicPartition(t, p) not in self.owned)  # fmt: skip
        if foreign:
            raise FencedError(
                f"member {self.member_id} does not own {', '.join(foreign)} in generation "
                f"{self.generation}; commit refused"
            )

    # ------------------------------------------------------------------ the step

    def poll(self, group: GroupState, now_ms: int) -> Actions:
        """Decide what to do now, given the replayed ``group`` and the monotonic ``now_ms``."""
        if self.state == MemberPhase.LEFT:
            raise ProtocolError(f"member {self.member_id} has left; poll is not allowed")
        events: list[str] = []
        me = group.members.get(self.member_id)
        mine = me is not None and me.proc == self.incarnation
        if mine:
            self.seated = True
        if self.instance_id is not None and not mine and me is not None and self.seated:
            # The log has our seat (we have read a record of ours in it) and another process
            # holds it now: a newer join with our instance id. Newest join wins (KIP-345's
            # FENCED_INSTANCE_ID): drop everything, write nothing more, not even a tombstone
            # (it would end the seat of the process that replaced us).
            return self._supersede()
        if mine and group.rewrite.get(self.member_id, self._rewrote) != self._rewrote:
            # compaction may keep a record under our key that the log rejected: say ours again
            self._rewrote, self._dirty = group.rewrite[self.member_id], True
        if mine and me is not None:
            self._seat = me.incarnation
            if self.instance_id is not None and me.acked_generation > self.acked:
                # we took a static seat over: the log counts us as having acknowledged what
                # the seat had (GroupState._take_seat); our records must not go back on it
                self.acked = me.acked_generation
        if self.version == 2:
            if (mine and me is not None and me.run == self._run and self._joined_at is None
                    and (self._start_sent is None or me.seq >= self._start_sent[2])):  # fmt: skip
                # our membership's start, read back: the newest we sent. An older one started
                # a membership that the newer start ended, whatever the older one was granted.
                self._joined_at = me.joined_at
                # a start is not "ready" (ownership.is_lagging): the next record, which echoes
                # joined_at, is; a newcomer's first is planned for at once all the same
                self._dirty = self._dirty or not me.ready
        elif mine and me is not None:
            # Step 2 of the fencing argument: confirm the newest own record we see. Never
            # an older one (the runtime caches the fence deadline on that), even if handed a
            # state that has only replayed an older record of ours.
            sent = self._sent.get(me.seq)
            if sent is not None and (self._newest is None or me.seq > self._newest.seq):
                newest = _Basis(me.seq, sent[0], me.last_seen, me.joined_at, me.since_generation)
                self._measure_skew(newest, now_ms)
                self._newest, self._newest_confirmed = newest, now_ms
                for s in [s for s in self._sent if s <= me.seq]:
                    del self._sent[s]
                self._refence()
            if self._joined_at is None:
                self._joined_at = me.joined_at
        age = self.session_age_ms(now_ms)
        lapsed = age is None or age >= self.fence_after_ms
        lost: Partitions = EMPTY
        if self.owned:
            why = None
            if lapsed:
                why = LossReason.SESSION_LAPSED  # step 4: by our own clock, the log may expire us
            elif not mine:
                why = LossReason.REPLACED  # another incarnation with our id, or a tombstone
            elif not group.is_live(self.member_id):
                why = LossReason.EXPIRED
            elif self.version == 2 and (self._run_broken or me is None or me.run != self._run):
                why = LossReason.MEMBERSHIP_RESTARTED  # our run ended: the membership with it
            elif self.version == 1 and me is not None and me.joined_at != self._joined_at:
                why = LossReason.MEMBERSHIP_RESTARTED  # the log saw us return after expiry
            if why is not None:
                lost, self.owned = self.owned, EMPTY
                self._revoking = EMPTY
                events.append(why)
                self._fire(MemberEvent.FENCED)
                self._dirty = True
        self._run_broken = False
        if self.version == 2 and (
            (mine and me is not None and me.ended and me.run == self._run)
            or (me is None and self._joined_at is not None)
        ):
            # A verdict ended our run (or the leader's tombstone followed it, which is all a
            # reader of the compacted log sees): start another run, and join again in it.
            self.clock.restart()
            self._joined_at = None
        if self.version == 1 and mine and me is not None and me.joined_at != self._joined_at:
            self._joined_at = me.joined_at

        # A record of ours without prev_ts still on its way restarts our membership where it
        # lands (state.py): every grant of the membership it replaces is void there, so none is
        # taken (nor acknowledged) before we have read it back. Only a member back from a
        # lapse writes one while its session holds (_basis); it owns nothing then.
        if self.version == 2:
            # version 2: until we read back the record that starts our membership in our run,
            # the grants the log has for us are an earlier membership's (void where it lands)
            restarting = (
                me is None or me.run != self._run or self._run is None or self._joined_at is None
            )
        else:
            restarting = any(basis is None for _, basis, _ in self._sent.values())
        healthy = mine and not lapsed and not restarting and group.is_live(self.member_id)
        if self._unready_sent is not None and self._basis(now_ms) is not None:
            self._dirty = True  # our record can say prev_ts now: the leader waits for that
        covered = healthy and group.covers(self.member_id) and self.state != MemberPhase.LEAVING
        target = handed = EMPTY
        if covered:
            assert group.assignment is not None
            # pending partitions their owner has let go, handed to us without a leader turn,
            # and what we inherit from an owner that left (docs/protocol.md, "Inheritance")
            handed = ownership.handoffs(group, self.member_id) | ownership.inheritance_handoffs(
                group, self.member_id
            )
            # what we give the newcomer this generation admitted goes as a revocation would
            away = ownership.admitted_away(group, self.member_id)
            # What we own that the generation makes pending for us we keep: it is ours to
            # take, and another's reservation of it (an heir's of a partition we were
            # admitted) only blocks its handoff to us, which we hold already.
            entry = group.assignment.members.get(self.member_id)
            keep = self.owned & entry.pending if entry is not None else EMPTY
            target = (group.assignment.assigned(self.member_id) - away) | handed | keep
            if self.state in (MemberPhase.JOINING, MemberPhase.ACTIVE):
                self._fire(MemberEvent.COVERED)
        else:
            if self.state == MemberPhase.ACTIVE:
                self._fire(MemberEvent.UNCOVERED)
            if healthy and self.state == MemberPhase.JOINING:
                # a newcomer the current generation admitted takes what its members give it as
                # they let go, before any generation covers it (docs/protocol.md, "Admission")
                handed = target = ownership.admission_handoffs(group, self.member_id)
        # Held: a process we replaced in our seat may still run them: take, ack only when free
        blocked = (
            ownership.held(group) & target if self.instance_id is not None and target else EMPTY
        )
        fresh = group.generation != self.acked
        added, revoked = diff(self.owned, target)
        added = EMPTY if self.closing else added - blocked
        if not (healthy and fresh):
            # Never take anything while our session is in doubt, and take a generation's grants
            # only in the poll that acknowledges it: once our record says "acked g" the log stops
            # reserving g's grants for us (ownership.may_hold), so a grant of g not taken then
            # may be someone else's. What we lost the leader re-plans (partitions_lost). A
            # handoff of the current generation may be taken in any healthy poll: the log
            # reserves it for us until our record says we have seen a newer one (reserved).
            added = added & (handed | self._retake) if healthy else EMPTY
        if added or revoked:
            kept = revoked if self.defer_revocations else EMPTY
            self._revoking |= kept
            owned = (self.owned - revoked) | added | kept
            if owned != self.owned:  # a deferred revocation repeats until done: no new record
                self.owned = owned
                self._dirty = self._dirty or not self._claim_later(group, revoked, now_ms)
                events.append(f"generation {group.generation}")
        if self._claim_held is not None and now_ms - self._claim_held >= self._beat_every:
            self._dirty = True  # the rest of the share is late: claim what we took
        if covered:
            self.generation = group.generation
        # An acknowledgement that changes nothing of ours waits a little (L9): every member
        # writes one per generation and every member reads them all, which would crowd the
        # broker and the cores just as the partitions that moved start at their new owners.
        quiet = (self.ack_delay_ms > 0 and self.state == MemberPhase.ACTIVE and not self._dirty
                 and not (added or revoked or lost))  # fmt: skip
        if fresh and healthy and not blocked and not self.closing:  # acked with its grants taken
            self.acked = group.generation
            self._ack_soon(now_ms, quiet)
        self._granted = target if covered and self.acked == group.generation else EMPTY
        self._retake = (self._retake - added) & self._granted

        resets = self._reset_step(group, healthy, added)
        at = self.reset_at if self._resetting is None else self._resetting
        hints = (ownership.hints_for(group, self.member_id, self._seat or self.incarnation, added)
                 if added else {})  # fmt: skip

        writes: list[Write] = []
        if self.version == 2:
            # heartbeats go to the liveness log; member records only on a change, or a newer
            # generation seen: the log reserves older grants for us until our record says we
            # have seen past them (may_hold), so a silent member would pin the history
            if self._read_at is None or group.offset != self._read_at[0]:
                self._read_at = (group.offset, now_ms)
            if now_ms - self._read_at[1] < self.read_timeout_ms:  # else cut off: lapse (L4.5)
                writes.extend(self._beat(now_ms))
            if group.generation > self._seen_written:
                self._ack_soon(now_ms, quiet)
            if self._ack_due is not None and now_ms >= self._ack_due:
                self._dirty = True
        due = self.version == 1 and (
            self._last_send is None or now_ms - self._last_send >= self.heartbeat_interval_ms
        )
        # A record without prev_ts starts a new membership (state.py), so while one is on its
        # way another would only restart it again: wait until we read it back (the next record
        # then says prev_ts, and goes out at once, whole), or resend once a session has passed.
        hold_back = (
            lapsed
            and self._unready_sent is not None
            and now_ms - self._unready_sent < self.session_timeout_ms
        )
        if self.version == 2:
            hold_back = (
                self._joined_at is None
                and self._start_sent is not None
                and self._start_sent[0] == self._run
                and now_ms - self._start_sent[1] < self.session_timeout_ms
            )
        if self.state == MemberPhase.LEAVING:
            # a leave's last record says so: it ends the membership by itself, in case a
            # reader sees it before the tombstone (schema.MemberRecord.leaving)
            # (one that echoes holds goes without its tombstone: compaction keeps the echo)
            writes.append(last := self._record(now_ms, group, leaving=not self._park))
            if not self._park and not (isinstance(last.value, MemberRecord) and last.value.held):
                key, none = member_tombstone(self.group, self.member_id)
                rk, rv = encode(key, none)
                writes.append(Write(key, None, rk, rv))
            self._fire(MemberEvent.LEFT)
        elif (
            not hold_back
            and (self.version == 1 or self._run is not None)
            and (self._dirty or due or self.state in (MemberPhase.UNJOINED, MemberPhase.FENCED))
        ):
            writes.append(self._record(now_ms, group))
            self._fire(MemberEvent.SEND_RECORD)
        return Actions(
            lost=lost,
            revoke=revoked,
            assign=added,
            # a pending reset's offset wins over any hint
            offsets={**hints, **{p: o for p, o in resets.items() if p in added}}
            if resets
            else hints,
            writes=tuple(writes),
            generation=self.generation,
            state=self.state,
            events=tuple(events),
            reset=resets,
            reset_at=-1 if not resets else at,
        )

    # ------------------------------------------------------------------ helpers

    def _supersede(self) -> Actions:
        lost, self.owned = self.owned, EMPTY
        self.superseded = True
        self.state = MemberPhase.LEFT
        return Actions(lost=lost, generation=self.generation, state=MemberPhase.LEFT,
                       events=(LossReason.INSTANCE_FENCED,))  # fmt: skip

    def _refence(self) -> None:
        """Recompute the fence basis: the send time the session runs from.

        Normally the newest confirmed record's. But a record still on its way was written with
        the basis of its time (its ``prev_ts``), and the log restarts our membership if it is
        appended a session or more after that basis (state.py): until we read it back, the
        session runs from no later than that basis's send. A record without ``prev_ts`` is only
        written once lapsed, and keeps us lapsed (the session runs from no later than where it
        ran then) until we read it back. So the log never voids what we own before our own
        clock has fenced us. This time never moves back: confirming drops the oldest records on
        their way and moves the newest confirmed forward, and a new record's limit is never
        earlier than the time in force when it is written.

        The cost: a record's basis is already one read-back delay old when it is written, and
        it binds until that record is read back, so a member lapses once it reads its own
        records back about half a session late (the newest confirmed record alone allowed a
        whole session). Learning a record's append time from the producer's delivery report
        would end its bind earlier; the runtime does not pass that in (yet).
        """
        limits = [limit for _, _, limit in self._sent.values()]
        if self._newest is None or None in limits:
            self._confirmed_at = None
        else:
            self._confirmed_at = min([self._newest.sent, *(x for x in limits if x is not None)])

    def _measure_skew(self, newer: _Basis, now_ms: int) -> None:
        """Bound how far the broker clock's offset moved between two of our own records.

        Between the newest confirmed record ``i`` and the newer ``j`` just read back, the
        broker's clock offset (``LogAppendTime`` minus real time) changed by at least
        ``(T_j - T_i) - (read_j - sent_i)`` forward (record ``i`` was appended after it was
        sent, ``j`` before it was read) and ``(T_i - T_j) + (sent_j - read_i)`` backward. Either
        one above ``max_clock_skew_ms`` is skew the fence does not allow for: the runtime logs it.
        """
        old = self._newest
        if old is None:
            return
        forward = (newer.ts - old.ts) - (now_ms - old.sent)
        backward = (old.ts - newer.ts) + (newer.sent - self._newest_confirmed)
        self.skew_seen_ms = max(self.skew_seen_ms, forward, backward)

    def _basis(self, now_ms: int) -> _Basis | None:
        """What our next record's ``prev_ts`` names: the newest own record we have read back,
        unless our session has lapsed, or we are back from a lapse and read that record back
        more than half our fence time after sending it.

        Why the second: a member lapses because it reads too slowly to see its own records
        within a session. Said ready again as soon as it sees one, it is planned for, and the
        rebalance's own records (a generation, everyone's acknowledgements, a follow-up) put
        it behind again: it lapses, is planned out, catches up, and so on, three generations
        each way (a reader at 4 records a tick in the schedules needed 35 generations to settle,
        against a bound of 24). Waiting until our records come back in half the time leaves
        room for that burst. Liveness only: a member that is not ready gets nothing new, and
        one back from a lapse owns nothing (it fenced itself). Never while we own something:
        a record without prev_ts voids our claims where it lands (so, in :meth:`poll`, nothing
        is taken while one is on its way)."""
        age = self.session_age_ms(now_ms)
        basis = self._newest if age is not None and age < self.fence_after_ms else None
        if (basis is not None and self._rejoining and not self.owned
                and self._newest_confirmed - basis.sent > self.fence_after_ms // 2):  # fmt: skip
            return None
        return basis

    def beat_due_in_ms(self, now_ms: int) -> int | None:
        """Version 2: ms until our next heartbeat is due (:meth:`_beat`); else ``None``."""
        last = self._last_beat if self.version == 2 else None
        return None if last is None else max(0, self._beat_every - now_ms + last)

    def _beat(self, now_ms: int) -> list[Write]:
        """Version 2: a heartbeat, if one is due (rule L1). One that names no ``prev_ts`` (we
        have lapsed, or never ran) starts a run, and our membership moves to it; while one is
        on its way another would only start a run again where it lands, so we wait for its
        report, or a session."""
        if self.beat_due_in_ms(now_ms):  # (None: none sent yet)
            return []
        last = self._last_beat
        if last is not None and self.clock.restarting and now_ms - last < self.session_timeout_ms:
            return []
        self._seq += 1
        prev = self.clock.heartbeat(self._seq, now_ms)
        if prev is None:
            self._run, self._joined_at, self._dirty = self._seq, None, True
        self._last_beat = now_ms
        key, value = heartbeat_record(
            self.group, self.member_id, incarnation=self.incarnation, seq=self._seq,
            prev_ts=prev, lease_ms=self.clock.lease_ms, skew_ms=self.clock.skew_ms,
            acked_generation=self.acked,
        )  # fmt: skip
        rk, rv = encode(key, value, self.signer)
        return [Write(key, value, rk, rv)]

    def _record(self, now_ms: int, group: GroupState, leaving: bool = False) -> Write:
        if self.version == 2:
            return self._record_v2(now_ms, group, leaving)
        self._seq += 1
        basis = self._basis(now_ms)
        self._sent[self._seq] = (now_ms, basis, self._confirmed_at if basis is None else basis.sent)
        self._refence()
        self._unready_sent = now_ms if basis is None else None
        self._rejoining = basis is None and self._seq > 1
        self._last_send = now_ms
        self._dirty = False
        joined_at = self._joined_at if basis is None else basis.joined_at
        since = 0 if basis is None else basis.since
        me = group.members.get(self.member_id)
        # the generation that admitted our membership, echoed like joined_at (state.py)
        admitted = me.admitted_in if basis is not None and me is not None and \
            me.proc == self.incarnation else 0  # fmt: skip
        return self._encode_record(
            group,
            first=self._seq == 1,
            joined_at=joined_at,
            since=since,
            seat=self._seat if self.instance_id is not None and basis is not None else None,
            admitted=admitted,
            leaving=leaving,
            prev_ts=None if basis is None else basis.ts,
        )

    def _record_v2(self, now_ms: int, group: GroupState, leaving: bool) -> Write:
        """Version 2's member record: it names our run, and echoes ``joined_at`` once we have
        read back the record that started our membership in it (none: this one starts one)."""
        assert self._run is not None
        self._seq += 1
        self._records += 1
        self._seen_written, self._claim_held, self._ack_due = group.generation, None, None
        if self._joined_at is None:
            self._start_sent = (self._run, now_ms, self._seq)
        self._dirty = False
        me = group.members.get(self.member_id)
        ours = me is not None and me.proc == self.incarnation and me.run == self._run
        joined_at = self._joined_at
        started = ours and me is not None and joined_at is not None
        return self._encode_record(
            group,
            first=self._records == 1,
            joined_at=joined_at,
            since=me.since_generation if started and me is not None else 0,
            seat=self._seat if self.instance_id is not None and joined_at is not None else None,
            admitted=me.admitted_in if started and me is not None else 0,
            leaving=leaving,
            run=self._run,
        )

    def _encode_record(
        self,
        group: GroupState,
        *,
        first: bool,
        joined_at: int | None,
        since: int,
        seat: str | None,
        admitted: int,
        leaving: bool,
        prev_ts: int | None = None,
        run: int | None = None,
    ) -> Write:
        """The member record both versions write: what we own and have seen, the offsets
        committed for what we let go, and, on our join while our seat is live, the takeover
        of that seat."""
        committed = {p: o for p, o in self._committed.items() if p not in self.owned}
        self._committed = {}
        seat_ts = None
        me = group.members.get(self.member_id)
        if (first and self.instance_id is not None and me is not None
                and me.instance_id is not None and self.incarnation not in (me.proc, me.incarnation)
                and group.is_live(self.member_id)):  # fmt: skip
            # our join, and our seat is live: take it over, echoing it as we saw it (state.py)
            seat, seat_ts, joined_at, since = me.incarnation, me.last_seen, me.joined_at, \
                me.since_generation  # fmt: skip
        key, value = member_record(
            self.group,
            self.member_id,
            incarnation=self.incarnation,
            seq=self._seq,
            topics=self.topics,
            owned=self.owned,
            owned_generation=self.generation if self.owned else 0,
            acked_generation=min(self.acked, group.generation),
            seen_generation=group.generation,
            joined_at=joined_at,
            prev_ts=prev_ts,
            run=run,
            since_generation=since,
            rack=self.rack,
            capacity=self.capacity,
            client=self.client,
            committed=committed,
            instance_id=self.instance_id,
            seat=seat,
            seat_ts=seat_ts,
            reset=(self.reset_at, self._reset_done) if self.reset_at >= 0 else None,
            leaving=leaving,
            admitted_in=admitted,
            held=holds.echo(group, self.member_id, self.incarnation),
        )
        rk, rv = encode(key, value, self.signer)
        return Write(key, value, rk, rv)

    # ------------------------------------------------------------------ offset resets

    def _reset_step(
        self, group: GroupState, healthy: bool, added: Partitions
    ) -> dict[TopicPartition, int]:
        """What of the group's reset to carry out now (docs/protocol.md, "Resets").

        A reset not carried out yet: every partition of it we own whose new offset nobody has
        committed yet (we owned them before it, or just took them). One carried out (or under
        way): the unsettled partitions just taken, whose previous owner let go without having
        carried it out. Outside a healthy step nothing: what we own is about to be lost, and
        the next owner carries it out. With no partition of it to move, a new reset is
        acknowledged at once; else once done (:meth:`reset_applied`, at once when revocations
        are not deferred: the caller carries actions out before it writes)."""
        rs = group.reset
        if rs is None or not healthy or self.state == MemberPhase.LEAVING:
            return {}
        seen = self.reset_at if self._resetting is None else max(self.reset_at, self._resetting)
        unsettled = rs.unsettled()
        if rs.at > seen:
            out = {p: unsettled[p] for p in self.owned if p in unsettled}
            if not out or not self.defer_revocations:
                self.reset_at, self._resetting, self._reset_done = rs.at, None, set(out)
                self._dirty = True
            else:
                self._resetting = rs.at
            return out
        if rs.at != seen or not added:
            return {}
        out = {p: unsettled[p] for p in added if p in unsettled}
        if out and not self.defer_revocations and self.reset_at == rs.at:
            self._reset_done |= out.keys()
            self._dirty = True
        return out

    def reset_applied(self, at: int, partitions: Iterable[tuple[str, int]]) -> None:
        """The runtime has started ``partitions`` at reset ``at``'s offsets and committed them
        (``Actions.reset``): the next record acknowledges it and names them."""
        done = {TopicPartition(t, p) for t, p in partitions}
        if self._resetting == at:
            self.reset_at, self._resetting, self._reset_done = at, None, done
        elif self.reset_at == at:
            self._reset_done |= done
        else:
            return  # superseded by a newer reset meanwhile
        self._dirty = True

    def _fire(self, event: MemberEvent) -> None:
        try:
            self.state = MEMBER_TRANSITIONS[(self.state, event)]
        except KeyError:
            raise ProtocolError(
                f"member {self.member_id}: event {event.value!r} is not allowed in state "
                f"{self.state!r}"
            ) from None
