"""The group, replayed from its control records: the one place group state changes.

Every member feeds every record of its group's control partition, in offset order, with its
broker timestamp, into :meth:`GroupState.replay`, from the start (or a snapshot) and then live:
one path, so readers at one offset hold one state. One ``replay``:

1. advances the log time to the record's timestamp, drops holds that ran out, and re-elects if
   the leader expired: for every record, even one then rejected;
2. skips, undecoded, the records of other groups sharing the partition (``other_group``) and
   snapshot records (``snapshot``: a copy of a past state, not an event);
3. applies a member record (``member``: it continues a membership or starts one; a static
   seat's join may take the seat over; a ``leaving`` record is its tombstone at once), a
   tombstone (``leave``), an assignment record (``assignment``, or ``reassert`` of the current
   one) or an operator's offset reset (``reset``);
4. rejects without applying, and counts in :attr:`GroupState.rejections` by
   :class:`~groupkit.protocol.vocab.RejectReason`: a record that does not decode or verify or
   comes out of order; a member record that claims what it was never granted, goes back in
   ``seq`` or acknowledged generation, has seen a future one, or is of a process a newer join
   replaced in its seat; an assignment record not from the leader at its offset, not newer,
   in a phase :data:`ASSIGNMENT_TRANSITIONS` does not allow, inconsistent, or granting what
   another member may still hold; a stale reset, or one of an empty group.

Who may hold what is derived in :mod:`~groupkit.protocol.ownership`; snapshot conversion is in
:mod:`~groupkit.protocol.snapshot`. The rules, each with its proof, are in docs/protocol.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from operator import attrgetter

import groupkit.protocol.holds as holds
import groupkit.protocol.ownership as ownership
from groupkit.errors import RecordRejected
from groupkit.protocol.consistent import check_consistent
from groupkit.protocol.group import GroupData, MemberState, OffsetHint, ResetState
from groupkit.protocol.records import (
    EMPTY,
    KIND_SNAPSHOT,
    AssignmentKey,
    AssignmentRecord,
    LeaseKey,
    LeaseRecord,
    MemberKey,
    MemberRecord,
    MemberRef,
    Partitions,
    RecordKey,
    ResetKey,
    ResetRecord,
    VerdictKey,
    VerdictRecord,
    decode,
    decode_key,
    other_group_key,
)
from groupkit.protocol.vocab import Phase, RebalanceProtocol, RejectReason, ReplayKind
from groupkit.types import TopicPartition

_EAGER, _COOPERATIVE = RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE

#: Which phase an assignment record may have, given the protocol and the phase of the
#: current assignment (``None``: no assignment yet). Anything else is rejected as ``bad_phase``.
#:
#: - ``revoke`` (eager only): every covered member gives up everything. Exits: ``complete`` or
#:   ``partial`` once every live member's record shows nothing owned; ``revoke`` again if the
#:   leader changed and restarts the rebalance.
#: - ``partial``: the grant of some target partitions waits for their old owner to let go.
#:   Exits: ``partial`` (some freed partitions granted), ``complete`` (all granted), or a new
#:   rebalance (``revoke`` for eager).
#: - ``complete``: the assignment is the whole plan; the group is stable once every member
#:   has acknowledged it. Exits: a new rebalance.
ASSIGNMENT_TRANSITIONS: Mapping[tuple[str, str | None], frozenset[str]] = {
    (_EAGER, None): frozenset({Phase.REVOKE, Phase.PARTIAL, Phase.COMPLETE}),
    (_EAGER, Phase.REVOKE): frozenset({Phase.REVOKE, Phase.PARTIAL, Phase.COMPLETE}),
    (_EAGER, Phase.PARTIAL): frozenset({Phase.REVOKE, Phase.PARTIAL, Phase.COMPLETE}),
    (_EAGER, Phase.COMPLETE): frozenset({Phase.REVOKE, Phase.PARTIAL, Phase.COMPLETE}),
    (_COOPERATIVE, None): frozenset({Phase.PARTIAL, Phase.COMPLETE}),
    (_COOPERATIVE, Phase.REVOKE): frozenset({Phase.PARTIAL, Phase.COMPLETE}),
    (_COOPERATIVE, Phase.PARTIAL): frozenset({Phase.PARTIAL, Phase.COMPLETE}),
    (_COOPERATIVE, Phase.COMPLETE): frozenset({Phase.PARTIAL, Phase.COMPLETE}),
}


@dataclass(frozen=True, slots=True)
class Replayed:
    """What one :meth:`GroupState.replay` did: facts for the runtime's logs and metrics."""

    offset: int
    kind: ReplayKind
    key: RecordKey | None = None
    reason: str | None = None
    detail: str = ""
    #: a member record that started a new membership (join, restart, return after expiry)
    new_membership: bool = False
    #: a rejected record of the other protocol version that carries the incarnation of a live
    #: member of this one: no member of the other version wrote it (that process writes this
    #: version's records only), so it says nothing of one being in the group
    posing: bool = False


class GroupState(GroupData):
    """The deterministic state of one group (its fields: :class:`GroupData`), changed only
    by :meth:`replay`."""

    __slots__ = ()

    def _hint_released(self, old: MemberState | None, v: MemberRecord, continues: bool) -> None:
        """Take the offsets ``v`` carries for what it releases as hints (docs/protocol.md,
        "Handoffs": offset hints).

        A partition pending in the current generation names its receiver at once: its target,
        which may take it at this very record (``ownership.handoffs``) before any generation grants
        it. Were the target to die before its claim is in the log, the next member granted
        the partition is not the receiver and looks its offset up."""
        pending_for: dict[TopicPartition, MemberRef] = {}
        if v.committed and self.assignment is not None:
            for mid, c in self.assignment.members.items():
                for p in c.pending:
                    pending_for[p] = MemberRef(mid, c.incarnation)
            adm = ownership.admission(self)
            if adm is not None:  # what an admitted newcomer may take at this very record
                for p in adm[1]:
                    pending_for[p] = self.members[adm[0]].ref
            a = self.assignment
            if v.leaving and old is not None and a.generation in self.inherit_generations:
                mine = a.members.get(old.member_id)
                if old.named_by(mine):  # what its heirs inherit at this very record
                    heirs = ownership.heirs_of(self, a.generation, a)
                    for p in mine.assigned & heirs.keys():
                        pending_for[p] = heirs[p]
        for p, o in v.committed:
            if not continues or old is None:
                self.hints_ignored["not_continued"] += 1
            elif p not in old.claims:  # (never in v.owned: the decoder refuses that)
                self.hints_ignored["not_released"] += 1
            else:
                self.offset_hints[p] = OffsetHint(o, self.log_time, pending_for.get(p))

    def _hint_granted(self, a: AssignmentRecord) -> None:
        """Name each hint's receiver at the first generation that assigns its partition or
        makes it pending for a member; drop it when a later one does neither for that receiver
        (a partial generation after a release keeps the partition pending for its target)."""
        hints = self.offset_hints
        to: dict[TopicPartition, MemberRef] = {}
        for mid, c in a.members.items():
            for p in (c.assigned | c.pending) & hints.keys():
                to[p] = MemberRef(mid, c.incarnation)
        since = self.log_time - self.session_timeout_ms
        for p, h in list(hints.items()):
            r = to.get(p)
            if h.at <= since or (h.receiver is not None and r != h.receiver):
                del hints[p]  # (an old one is no use: hints_for; and they would pile up)
            elif h.receiver is None and r is not None:
                hints[p] = OffsetHint(h.offset, h.at, r)

    # ------------------------------------------------------------------ replay

    def replay(
        self, offset: int, key: bytes | None, value: bytes | None, timestamp_ms: int
    ) -> Replayed:
        """Apply one control record. Never raises for a bad record: rejects and counts it."""
        if offset <= self.offset:
            # an impossible order: the reader went back, or a record was fed twice
            return self._reject(
                offset, None, RejectReason.OFFSET_REGRESSED, f"{offset} <= {self.offset}"
            )
        if offset != self.offset + 1:
            self.gap_ts = timestamp_ms
            self.changes += 1
        self.offset = offset
        # Every record moves the clock, even one then rejected: the broker wrote its
        # timestamp, not the sender.
        if timestamp_ms > self.log_time:
            self.log_time = timestamp_ms
        self._expire()
        if other_group_key(key, self.group):
            # Another group sharing the partition: its key names that group, so its value is
            # never decoded nor its signature checked; it only moved the clock.
            return Replayed(offset, ReplayKind.OTHER_GROUP)
        if _is_snapshot(key):
            return self._skip_snapshot(offset, key)
        try:
            k, v = decode(key, value, self.verifier)
        except RecordRejected as e:
            return self._reject(offset, None, e.reason, e.detail, clobbers=_is_assignment(key))
        if k.group != self.group:
            return Replayed(offset, ReplayKind.OTHER_GROUP, k)
        try:
            if isinstance(k, MemberKey):
                if v is None:
                    self.changes += 1
                    m = self.members.get(k.member_id)
                    if self.version == 2 and m is not None and m.instance_id is not None \
                            and self.is_live(k.member_id):  # fmt: skip
                        # A live seat's process leaves by its leaving record, which ends the
                        # seat at once: this is a replaced process's, or a forged one (L7.5)
                        raise RecordRejected(
                            RejectReason.FENCED_INSTANCE, "a live seat's tombstone"
                        )
                    holds.note_echo(self, k.member_id, None)
                    return self._apply_leave(offset, k)
                assert isinstance(v, MemberRecord)
                if v.version != self.version:
                    detail = (
                        f"a version-{v.version} member record in a version-{self.version} group"
                    )
                    m = self.members.get(k.member_id)  # (Replayed.posing)
                    if (m is not None and self.is_live(k.member_id)
                            and v.incarnation in (m.incarnation, m.process)):  # fmt: skip
                        res = self._reject(offset, k, RejectReason.OTHER_VERSION, detail)
                        return replace(
                            res, detail=f"{detail}, posing as a live member", posing=True
                        )
                    raise RecordRejected(RejectReason.OTHER_VERSION, detail)
                res = self._apply_member(offset, k, v, timestamp_ms)  # (counts its changes)
                holds.note_echo(self, k.member_id, v)
                return res
            if isinstance(k, VerdictKey | LeaseKey):
                if self.version == 1:
                    raise RecordRejected(
                        RejectReason.OTHER_VERSION, "a version-2 record in a version-1 group"
                    )
                if isinstance(k, LeaseKey):
                    assert isinstance(v, LeaseRecord)
                    return self._apply_lease(offset, k, v)
                if v is None:  # the leader forgets a member's verdict with the member
                    self.verdicts.pop(k.member_id, None)
                    return Replayed(offset, ReplayKind.VERDICT, k)
                assert isinstance(v, VerdictRecord)
                return self._apply_verdict(offset, k, v)
            if not isinstance(k, AssignmentKey | ResetKey):
                raise RecordRejected(RejectReason.BAD_VALUE, "a liveness record in the main log")
            self.changes += 1
            if isinstance(k, ResetKey):
                assert isinstance(v, ResetRecord)
                return self._apply_reset(offset, k, v)
            assert isinstance(k, AssignmentKey) and isinstance(v, AssignmentRecord)
            return self._apply_assignment(offset, k, v, timestamp_ms)
        except RecordRejected as e:
            return self._reject(offset, k, e.reason, e.detail, isinstance(k, AssignmentKey))

    def _skip_snapshot(self, offset: int, key: bytes | None) -> Replayed:
        """A snapshot record changes no state: it is a copy of a past state, not an event. Its
        value is not decoded: that costs a whole group's worth of parsing, for nothing but a
        rejection count."""
        try:
            k = decode_key(key)
        except RecordRejected as e:
            return self._reject(offset, None, e.reason, e.detail)
        kind = ReplayKind.SNAPSHOT if k.group == self.group else ReplayKind.OTHER_GROUP
        return Replayed(offset, kind, k)

    def _reject(
        self, offset: int, key: RecordKey | None, reason: str, detail: str, clobbers: bool = False
    ) -> Replayed:
        self.rejections[reason] += 1
        self.changes += 1  # (a rejected record may have changed the state before its check)
        if isinstance(key, MemberKey) and self.is_live(key.member_id):
            self.rewrite[key.member_id] = offset
        if clobbers:
            self.assignment_clobbered = self.assignment is not None
        return Replayed(offset, ReplayKind.REJECTED, key, reason, detail)

    def _expire(self) -> None:
        """Re-elect if the leader expired; forget holds whose time has passed."""
        if self.leader is not None and not self.is_live(self.leader):
            self.changes += 1
            self._elect()
            if self.leader is None:
                # An empty group forgets its hints and its reset: the committed offsets of a
                # group whose members do not join the broker's group may be rewritten at any
                # time (kafka-consumer-groups finds it empty), and an operator who resets them
                # while the group is stopped must find them used when it starts again.
                self.offset_hints.clear()
                self.reset = None
        if self.holds and any(h.until <= self.log_time for h in self.holds):
            self.changes += 1
            self.holds = [h for h in self.holds if h.until > self.log_time]

    def _elect(self) -> None:
        live = self.live_members()
        self.leader = min(live, key=lambda i: (live[i].joined_at, i)) if live else None

    def _apply_member(self, offset: int, k: MemberKey, v: MemberRecord, ts: int) -> Replayed:
        mid = k.member_id
        old = self.members.get(mid)
        if self.offset_hints and v.owned:
            # someone claims it: it may commit further from here, so a later owner looks it up
            for p in v.owned & self.offset_hints.keys():
                del self.offset_hints[p]
        live = old is not None and self.is_live(mid)
        if v.instance_id is not None:
            if v.instance_id != mid:
                raise RecordRejected(
                    RejectReason.BAD_VALUE, f"instance id {v.instance_id!r} of {mid!r}"
                )
            if v.seat_ts is not None and (
                self.version == 2 or ts - v.seat_ts < self.session_timeout_ms
            ):
                # A new process's join that saw its seat live: it takes the seat over (the
                # record decides, so a reader that never saw the seat decides alike).
                self.changes += 1
                return self._take_seat(offset, k, v, ts, old if live else None)
            if old is not None and live and old.instance_id is not None \
                    and old.proc != v.incarnation and not v.first:  # fmt: skip
                # A record of a process whose seat a newer join took: newest join wins.
                raise RecordRejected(
                    RejectReason.FENCED_INSTANCE,
                    f"process {v.incarnation} was replaced by {old.proc}",
                )
        same = old is not None and old.proc == v.incarnation
        leader, share_claimed = self.leader, self.share_claimed.get(mid)
        #: a heartbeat that repeats the membership: only its seq and last_seen move
        repeat = False
        # Decided by the record alone (and in version 2 by the member's newest verdict, which
        # compaction keeps too), so every reader decides alike whatever compaction left it of
        # the member's earlier records.
        if v.run is None:
            # Another process's continuation while a membership lives (a stale copy, or a
            # process a restart replaced) is taken as at first sight: its record says what
            # it is, as it does for a reader of the compacted log that never saw the other
            # (docs/protocol.md, "Membership and continuation")
            continues = (
                v.prev_ts is not None
                and ts - v.prev_ts < self.session_timeout_ms
                and (old is None or live)
            )
            first_sight = continues and not same
        else:
            # Version 2 (docs/protocol-v2.md, L3): a record continues the membership of its run
            # until a verdict ends that run; one that names no joined_at starts a membership.
            if old is not None and same and live and v.seq <= old.seq:
                raise RecordRejected(RejectReason.STALE_MEMBER_RECORD, f"seq {v.seq} <= {old.seq}")
            if self._covered(mid, v.incarnation, v.run):
                return self._apply_ended(offset, k, v, ts, old if live and not same else None)
            if self.holds:
                # The process says it runs, in this run: what it holds now is what it claims,
                # and a hold on it from this run or an earlier one (a tombstone that raced its
                # record) guards nothing more
                holder = f"{mid}/{v.incarnation}"
                self.holds = [h for h in self.holds if h.holder != holder or h.run > v.run]
            cont = (
                old is not None and same and live and v.run == old.run and v.joined_at is not None
            )
            continues = cont or v.joined_at is not None  # (as version 1's: first sight)
            first_sight = continues and not cont
        if continues and not first_sight:
            assert old is not None
            # The same membership continues.
            if v.seq <= old.seq:
                raise RecordRejected(RejectReason.STALE_MEMBER_RECORD, f"seq {v.seq} <= {old.seq}")
            if v.acked_generation < old.acked_generation:
                raise RecordRejected(RejectReason.ACKED_REGRESSED, f"{v.acked_generation}")
            if v.seen_generation > self.generation:  # seen >= acked (records.py)
                raise RecordRejected(RejectReason.FUTURE_GENERATION, f"{v.seen_generation}")
            extra = v.owned - ownership.may_hold(self, mid)
            if extra and not self._compacted_away(old, v.owned_generation):
                raise RecordRejected(
                    RejectReason.UNOWNED_CLAIM, f"{len(extra)} partitions never granted"
                )
            # the member's own view of its membership, as of the record prev_ts names
            assert v.joined_at is not None
            joined_at, since = v.joined_at, v.since_generation
            m = _from_record(
                mid, v, ts,
                claims=v.owned,
                owned_generation=v.owned_generation,
                acked_generation=v.acked_generation,
                joined_at=joined_at,
                since_generation=since,
            )  # fmt: skip
            if v.instance_id is not None:
                # the seat is known by the incarnation the record echoes (like joined_at)
                m.incarnation = v.seat or v.incarnation
                m.process, m.instance_id = v.incarnation, v.instance_id
                m.process_since = old.process_since
            m.admitted_in = v.admitted_in  # an echo, like joined_at (docs/protocol.md, "Admission")
            m.run = old.run
            new_membership = False
            # (a first record's seq of 1 is read by ownership.is_newcomer_ready)
            repeat = old.seq != 1 and _repeats(old, m)
        else:
            if v.seen_generation > self.generation and old is not None:
                raise RecordRejected(RejectReason.FUTURE_GENERATION, f"{v.seen_generation}")
            if old is not None and same and live and v.seq <= old.seq:
                # a copy of an old record must not void what the member owns now
                raise RecordRejected(RejectReason.STALE_MEMBER_RECORD, f"seq {v.seq} <= {old.seq}")
            if old is not None and live and not same:
                # A new incarnation of a live member: the old process may still run, so what it
                # may hold stays held until the old incarnation would have expired.
                self._hold(old)
            if first_sight:
                # First sight of a member whose earlier records were compacted away: trust its
                # claims and its echoed joined_at and since_generation, which carry what the
                # full replay holds of the membership.
                assert v.joined_at is not None
                self.started.pop(mid, None)
                m = _from_record(
                    mid, v, ts,
                    claims=v.owned,
                    owned_generation=v.owned_generation,
                    acked_generation=v.acked_generation,
                    joined_at=v.joined_at,
                    since_generation=v.since_generation,
                )  # fmt: skip
                if v.instance_id is not None:
                    m.incarnation = v.seat or v.incarnation
                    m.process, m.instance_id, m.process_since = v.incarnation, v.instance_id, ts
                m.admitted_in = v.admitted_in
                m.run = v.run or 0
            else:
                # A new membership owns nothing: any claim in the record is void, because a
                # process whose membership the log restarts has fenced itself (member.py): its
                # fence deadline ran from the send of its prev_ts record, no later than
                # prev_ts (a member without one owns nothing).
                m = _from_record(
                    mid, v, ts,
                    claims=EMPTY,
                    owned_generation=0,
                    acked_generation=v.acked_generation,
                    joined_at=ts,
                    since_generation=self.generation + 1,
                )  # fmt: skip
                m.run = v.run or 0
                if v.instance_id is not None:  # a new seat: known by this process
                    m.process, m.instance_id, m.process_since = v.incarnation, v.instance_id, ts
                elif ownership.admits_join(self, mid, v):
                    m.admitted_in = self.generation
                self.started[mid] = (offset, v)
                self.share_claimed.pop(mid, None)  # a new membership claims its share anew
            new_membership = not first_sight
        if v.committed:
            self._hint_released(old, v, continues and not first_sight)
        if self.reset is not None:
            self._reset_heard(mid, v, continues)
        self.members[mid] = m
        self.rewrite.pop(mid, None)
        if v.held:
            self._take_echo(mid, v, ts)
        for p in m.claims:
            self.claimers.setdefault(p, set()).add(mid)
        if m.admitted_in:
            self.admitted_ids.add(mid)
            if mid not in self.share_claimed and m.claims:
                adm = ownership.admission(self)
                if adm is not None and adm[0] == mid and adm[1] <= m.claims:
                    self.share_claimed[mid] = ts
        elif self.share_claimed:
            self.share_claimed.pop(mid, None)
        if v.leaving:
            self.changes += 1
            # The leave's last record: the tombstone that follows it (another produce request,
            # which a reader may see later) takes effect right here, so nobody plans for the
            # member in between. A leader that read this record alone would see a member that
            # acknowledged its generation yet claims less than its grant (partitions_lost),
            # grant those again, and the tombstone would then hold them a session. It holds
            # only what it claims: its writer takes nothing more (holds.hold_on). A forged one
            # is a forged member record, which signing shuts out.
            return self._apply_leave(offset, k, leaving=True)
        if self.leader is None or not self.is_live(self.leader):
            self._elect()
        elif self.leader == mid:
            if old is None or m.joined_at != old.joined_at:
                self._elect()
        else:
            # The leader is the live member with the smallest (joined_at, id): only this one
            # member changed, so it either takes the lead or leaves it where it is (a
            # newcomer's joined_at is the newest: it can only tie). So the leader is a function
            # of the live memberships, on which readers of the same offset agree.
            lead = self.members[self.leader]
            if (m.joined_at, mid) < (lead.joined_at, self.leader):
                self.leader = mid
        if not repeat or self.leader != leader or self.share_claimed.get(mid) != share_claimed:
            self.changes += 1
        return Replayed(offset, ReplayKind.MEMBER, k, new_membership=new_membership)

    def _hold(self, old: MemberState, leaving: bool = False) -> None:
        h = holds.hold_on(self, old, leaving)  # version 2: until a verdict on its run
        if h is not None:
            self.holds.append(h)
            self.echo_holders.pop(h.holder, None)  # this reader saw the hold start

    def _take_echo(self, mid: str, v: MemberRecord, ts: int) -> None:
        """The holds record ``v`` echoes that this reader lacks, or has less of (holds.py)."""
        for h in holds.echoed(self, mid, v, ts):
            had = [o for o in self.holds if (o.holder, o.run) == (h.holder, h.run)]
            self.holds = [o for o in self.holds if o not in had] + [h]
            if not had and self.version == 2:
                self.echo_holders[h.holder] = (v.incarnation, v.run or 0)
            self.changes += 1
        for e in v.held:  # the newest record that echoes a hold is what compaction keeps
            holder = f"{mid}/{e.process}"
            if holder in self.echo_holders:
                self.echo_holders[holder] = (v.incarnation, v.run or 0)

    def _covered(self, member_id: str, process: str, run: int) -> bool:
        """Version 2: whether the member's newest verdict ended run ``run`` of ``process``
        (docs/protocol-v2.md, L3)."""
        v = self.verdicts.get(member_id)
        return v is not None and v.kind == "expired" and v.ends(process, run)

    def _apply_ended(
        self, offset: int, k: MemberKey, v: MemberRecord, ts: int, other: MemberState | None
    ) -> Replayed:
        """Version 2: a record of a run a verdict has ended (one on its way when the verdict
        landed). It is the member's newest record, as compaction keeps it, so it is what the
        group knows of the member: a membership that is over, claiming nothing. ``other``: a
        live membership of another process it replaces, whose partitions stay held."""
        if other is not None:
            self._hold(other)
        mid = k.member_id
        m = _from_record(
            mid, v, ts,
            claims=EMPTY,
            owned_generation=0,
            acked_generation=v.acked_generation,
            joined_at=v.joined_at if v.joined_at is not None else ts,
            since_generation=self.generation + 1,
            ready=False,
        )  # fmt: skip
        m.run, m.ended = v.run or 0, True
        self.members[mid] = m
        self.started.pop(mid, None)
        self.changes += 1
        if self.leader == mid:
            self._elect()
        return Replayed(offset, ReplayKind.MEMBER, k, new_membership=True)

    def _apply_verdict(self, offset: int, k: VerdictKey, v: VerdictRecord) -> Replayed:
        """Version 2: a judge's verdict (docs/protocol-v2.md, L3). True whoever wrote it (a
        judge states what the liveness log shows), so every reader applies it as it comes:
        its membership ends if it lives in the run, and so do holds on the process."""
        mid = k.member_id
        if v.kind == "expired":
            self.verdicts[mid] = v  # the newest, as compaction keeps it
        self.changes += 1
        for proc, run in ((v.process, v.run), *v.ended):  # (L3.9: the runs it restates too)
            holder = f"{mid}/{proc}"
            if any(h.holder == holder and h.run <= run for h in self.holds):
                self.holds = [h for h in self.holds if not (h.holder == holder and h.run <= run)]
            if v.kind == "expired":  # what the run echoed alone ends with it (holds.end_echoed)
                holds.end_echoed(self, mid, (proc, run))
        m = self.members.get(mid)
        if m is not None and not m.ended and self._covered(mid, m.proc, m.run):
            m.ended = True
            holds.end_echoed(self, mid)  # what it echoed alone, this reader holds no longer
            if mid == self.leader:
                self._elect()
                if self.leader is None:
                    self.offset_hints.clear()  # an empty group forgets them (see _expire)
                    self.reset = None
        return Replayed(offset, ReplayKind.VERDICT, k)

    def _apply_lease(self, offset: int, k: LeaseKey, v: LeaseRecord) -> Replayed:
        """Version 2: the leader's lease (docs/protocol-v2.md, L4). It changes nothing the
        members agree on: it moves the clock, which every record does, and tells a judge where
        the leader had judged the liveness log to."""
        self.lease = v
        return Replayed(offset, ReplayKind.LEASE, k)

    def _take_seat(
        self, offset: int, k: MemberKey, v: MemberRecord, ts: int, seat: MemberState | None
    ) -> Replayed:
        """A new process's join takes over a live static seat (docs/protocol.md, "Static seats"):
        the membership, its coverage and its grants carry on; what the replaced
        process may still hold is held until its session would have ended."""
        if v.seen_generation > self.generation:
            raise RecordRejected(RejectReason.FUTURE_GENERATION, f"{v.seen_generation}")
        if seat is not None and seat.proc == v.incarnation:
            raise RecordRejected(
                RejectReason.STALE_MEMBER_RECORD, f"a copy of {v.incarnation}'s join"
            )
        if seat is not None:
            self._hold(seat)
        mid = k.member_id
        assert v.joined_at is not None and v.seat is not None  # (the decoder checks)
        # The new process counts as having acknowledged the generation before the newest it
        # had seen: it takes that one's grant (granted() starts there) and no older one, and
        # the history the group keeps need not reach further back for it (a floor of 0 would
        # leave a hole where generations were pruned, and stop every handoff: _history_complete).
        acked = max(v.acked_generation, v.seen_generation - 1)
        self.members[mid] = m = _from_record(
            mid, v, ts,
            claims=EMPTY,
            owned_generation=0,
            acked_generation=acked,
            joined_at=v.joined_at,
            since_generation=v.since_generation,
            incarnation=v.seat,
            ready=False,
            process=v.incarnation,
            instance_id=v.instance_id,
            process_since=ts,
        )  # fmt: skip
        m.run = v.run or 0
        self.rewrite.pop(mid, None)
        if v.held:
            self._take_echo(mid, v, ts)
        # the seat keeps its joined_at, so the leader stays where it was (as in _apply_member)
        if self.leader is None or not self.is_live(self.leader):
            self._elect()
        elif self.leader == mid:
            if seat is None or m.joined_at != seat.joined_at:
                self._elect()
        elif (m.joined_at, mid) < (self.members[self.leader].joined_at, self.leader):
            self.leader = mid
        return Replayed(offset, ReplayKind.MEMBER, k)

    def _apply_leave(self, offset: int, k: MemberKey, leaving: bool = False) -> Replayed:
        old = self.members.pop(k.member_id, None)
        self.started.pop(k.member_id, None)
        if old is not None:
            ends = self.expires_at(old)
            if not old.ended and (ends is None or ends > self.log_time):
                # What it may still hold stays held until its session would have expired: a
                # tombstone cannot be signed, so it must not free what a running process has.
                # (So tombstones must outlive a session: delete.retention.ms >= the session.)
                self.members[k.member_id] = old  # may_hold needs it present and live
                self._hold(old, leaving)  # a leaving record holds only its claims
                del self.members[k.member_id]
            if self.leader == k.member_id:
                self._elect()
                if self.leader is None:
                    self.offset_hints.clear()  # an empty group forgets them (see _expire)
                    self.reset = None
        return Replayed(offset, ReplayKind.LEAVE, k)

    def _apply_assignment(
        self, offset: int, k: AssignmentKey, a: AssignmentRecord, ts: int
    ) -> Replayed:
        self._check_leader(a)
        cur = self.assignment
        if cur is not None and a.generation <= cur.generation:
            if a == cur:
                # the leader re-asserting the current generation after its record was
                # clobbered by a rejected one (compaction would otherwise lose it)
                self.assignment_clobbered = False
                return Replayed(offset, ReplayKind.REASSERT, k)
            # Only newer is required: the generations between may have been compacted away.
            raise RecordRejected(
                RejectReason.STALE_GENERATION, f"{a.generation} <= {cur.generation}"
            )
        allowed = ASSIGNMENT_TRANSITIONS[(a.protocol, cur.phase if cur else None)]
        if a.phase not in allowed:
            raise RecordRejected(
                RejectReason.BAD_PHASE, f"{cur.phase if cur else None} -> {a.phase}"
            )
        check_consistent(a)
        self._check_safe(a)  # so even a buggy or forged leader cannot give a partition twice
        self.assignment = a
        self.assignment_offset = offset
        self.assignment_clobbered = False
        self.generations[a.generation] = a
        self.generation_time[a.generation] = ts
        if a.origin is not None:
            self._from_origin(a, offset, ts)
        self.started.clear()
        if any(c.pending for c in a.members.values()):
            self.pending_generations.add(a.generation)
        if any(c.inherit for c in a.members.values()):
            self.inherit_generations.add(a.generation)
        self._prune_history()
        if self.offset_hints:
            self._hint_granted(a)
        return Replayed(offset, ReplayKind.ASSIGNMENT, k)

    def _from_origin(self, a: AssignmentRecord, offset: int, ts: int) -> None:
        """A generation first met at its re-assertion (:meth:`reassertion`), as by a reader of
        the compacted topic that never saw its first record: its time and place are
        the origin's (never later than this record's), and a membership that started after
        the origin started under it."""
        assert a.origin is not None
        origin, origin_ts = min(a.origin[0], offset), min(a.origin[1], ts)
        self.assignment_offset = origin
        self.generation_time[a.generation] = origin_ts
        for mid, (at, v) in sorted(self.started.items(), key=lambda kv: kv[1][0]):
            m = self.members.get(mid)
            if at <= origin or m is None or m.incarnation != v.incarnation:
                continue
            m.since_generation = max(m.since_generation, a.generation + 1)
            if m.admitted_in and m.admitted_in < a.generation:
                m.admitted_in = 0  # under an older generation, which the full replay never had
            if not m.admitted_in and m.process is None and ownership.admits_join(self, mid, v):
                m.admitted_in = a.generation
                self.admitted_ids.add(mid)

    def reassertion(self) -> AssignmentRecord:
        """The current generation's record as the leader re-asserts it after a rejected
        record clobbered it on the assignment key; it names where and when it was first
        written (``origin``), for readers that meet the generation only here."""
        a = self.assignment
        if a is None:
            raise ValueError("no generation to re-assert")
        if a.origin is not None:
            return a
        return replace(a, origin=(self.assignment_offset, self.generation_time[a.generation]))

    def _check_leader(self, a: AssignmentRecord) -> None:
        lead = self.members.get(self.leader) if self.leader is not None else None
        if lead is not None and a.leader_id == self.leader:
            if a.leader_incarnation != lead.incarnation:
                raise RecordRejected(RejectReason.NOT_LEADER, f"{a.leader_id} wrong incarnation")
            return
        if a.leader_id not in self.members and (
            lead is None or (a.leader_joined_at, a.leader_id) < (lead.joined_at, lead.member_id)
        ):
            # A leader whose member records were compacted away, accepted as it outranks ours
            # by the joined_at it carries. A forged record could use the same door: signing
            # shuts it.
            return
        raise RecordRejected(
            RejectReason.NOT_LEADER, f"{a.leader_id} is not the leader ({self.leader})"
        )

    def _check_safe(self, a: AssignmentRecord) -> None:
        """No grant of a partition another live member (or a hold) may still have.

        An entry that names no membership of this replay (no member by its id, or one of
        another incarnation: a leader that planned before a restart or a leave landed) grants
        nothing anyone takes, and is held only to what the live members may hold, which every
        reader agrees on. Not to holds, which a reader of the compacted topic lacks: a leader
        grants what a hold covers only to the membership the hold is of, having planned before
        the record that ended it, so the entry names no membership where it lands
        (docs/protocol.md, "Generations")."""
        holders = ownership.holders(self)
        live: dict[TopicPartition, set[str]] | None = None
        for mid, c in a.members.items():
            if not c.assigned:
                continue
            if self._is_member(mid, c.incarnation):
                # not its reservation: a grant of a reserved partition still waits for its owner
                mine, held = ownership.granted(self, mid), holders
            else:
                if live is None:
                    live = ownership.holders(self, holds=False)
                mine, held = EMPTY, live
            # a static seat's process takes nothing a hold on the seat's other processes covers
            # (ownership.held, rule 9.3): such a hold waits in the seat's grant, not before it
            seat = held is holders and self.members[mid].instance_id is not None
            for p in c.assigned - mine:
                others = held.get(p, set()) - {mid}
                if seat:
                    others = {o for o in others if holds.process_of(o, mid) is None}
                if others:
                    raise RecordRejected(
                        RejectReason.UNSAFE_GRANT, f"{p} to {mid} still held by {sorted(others)}"
                    )

    def _compacted_away(self, old: MemberState, generation: int) -> bool:
        """Whether a claim from ``generation`` is one this reader cannot check: it started
        from the compacted log (it skipped records), and the generation's record, which the
        membership may still take grants of, was compacted away. Such a claim is trusted as
        a membership this reader never saw is: a member claims only what it was granted, and
        the full reader, which has the generation, checks it."""
        first = max(old.acked_generation + 1, old.seen_generation, old.since_generation)
        return (
            self.gap_ts is not None
            and first <= generation <= self.generation
            and generation not in self.generations
        )

    def _is_member(self, mid: str, incarnation: str) -> bool:
        m = self.members.get(mid)
        return m is not None and m.incarnation == incarnation

    def _prune_history(self) -> None:
        live = self.live_members()
        # a member may still take grants of generations it has not acknowledged, and handoffs
        # of those it has not seen past (reserved)
        floor = min((min(m.acked_generation + 1, m.seen_generation) for m in live.values()),
                    default=self.generation)  # fmt: skip
        floor = min(floor, self.generation)
        for g in [g for g in self.generations if g < floor]:
            del self.generations[g]
            self.pending_generations.discard(g)
            self.receivers.pop(g, None)
            self.admit_sets.pop(g, None)
            self.inherit_generations.discard(g)
            self.heirs.pop(g, None)
            self.generation_time.pop(g, None)  # is_lagging reads it only for generations in history

    # ------------------------------------------------------------------ offset resets

    def _apply_reset(self, offset: int, k: ResetKey, v: ResetRecord) -> Replayed:
        """A new reset supersedes any earlier one; hints from before it are void for its
        partitions."""
        if v.based_on < self.reset_floor:
            raise RecordRejected(
                RejectReason.STALE_RESET, f"based on {v.based_on} < {self.reset_floor}"
            )
        if v.based_on >= offset:
            raise RecordRejected(
                RejectReason.STALE_RESET, f"based on {v.based_on} >= its own offset"
            )
        live = self.live_members()
        if not live:
            # Nobody would carry it out, and the state forgets it when the group empties:
            # the operator's tool commits an empty group's offsets itself. A copy of it that
            # lands later (a retried produce, a replay) must not be carried out then, when
            # members live again: it is as stale as the copy of an accepted reset.
            self.reset_floor = offset
            raise RecordRejected(RejectReason.RESET_OF_EMPTY_GROUP, v.reset_id)
        offsets = dict(v.offsets)
        self.reset_floor = offset
        self.reset = ResetState(offset, v.reset_id, offsets,
                                waiting={i: m.incarnation for i, m in live.items()})  # fmt: skip
        for p in offsets.keys() & self.offset_hints.keys():
            del self.offset_hints[p]
            self.hints_ignored["reset"] += 1
        return Replayed(offset, ReplayKind.RESET, k)

    def _reset_heard(self, mid: str, v: MemberRecord, continues: bool) -> None:
        """A member record acknowledges the current reset (``reset_at``) and names the
        partitions whose new offset it committed (``reset_done``): only from a membership the
        record continues, as hints are. Hints this record (or any since the reset) gave for a
        partition still unsettled predate its reset: dropped."""
        rs = self.reset
        assert rs is not None
        if continues and v.reset_at == rs.at:
            if rs.waiting.get(mid) == v.incarnation:
                del rs.waiting[mid]
            rs.settled |= v.reset_done & rs.offsets.keys()
        elif not continues and mid in rs.waiting:
            # a new membership (a restart, or a return after a lapse) owns nothing from
            # before: the process fenced itself, committing nothing since
            del rs.waiting[mid]
        if self.offset_hints:
            for p in [p for p in self.offset_hints if p in rs.offsets and p not in rs.settled]:
                del self.offset_hints[p]
                self.hints_ignored["reset_pending"] += 1


#: What a membership is but for the time and number of its latest record (``_repeats``)
_MEMBERSHIP = attrgetter(
    *(f.name for f in fields(MemberState) if f.name not in ("seq", "last_seen"))
)


def _repeats(old: MemberState, new: MemberState) -> bool:
    """Whether ``new`` is ``old`` but for its ``seq`` and ``last_seen``: its record was a
    heartbeat that changed nothing but the time the membership lasts to (``GroupData.changes``)."""
    return bool(_MEMBERSHIP(old) == _MEMBERSHIP(new))


def _is_assignment(key: bytes | None) -> bool:
    return isinstance(key, bytes) and len(key) > 1 and key[1] == ord("A")


def _from_record(
    member_id: str,
    v: MemberRecord,
    ts: int,
    *,
    claims: Partitions,
    owned_generation: int,
    acked_generation: int,
    joined_at: int,
    since_generation: int,
    incarnation: str | None = None,
    ready: bool | None = None,
    process: str | None = None,
    instance_id: str | None = None,
    process_since: int = 0,
) -> MemberState:
    """A membership as member record ``v``, appended at ``ts``, leaves it; the keywords are
    what the replay decides rather than copies from the record. ``incarnation``: the record's
    own unless given (a seat's); ``ready``: whether the record names ``prev_ts`` unless given."""
    return MemberState(
        member_id=member_id,
        incarnation=v.incarnation if incarnation is None else incarnation,
        seq=v.seq,
        topics=v.topics,
        claims=claims,
        owned_generation=owned_generation,
        acked_generation=acked_generation,
        seen_generation=v.seen_generation,
        joined_at=joined_at,
        last_seen=ts,
        since_generation=since_generation,
        rack=v.rack,
        capacity=v.capacity,
        client=v.client,
        ready=_continues(v) if ready is None else ready,
        process=process,
        instance_id=instance_id,
        process_since=process_since,
    )


def _continues(v: MemberRecord) -> bool:
    """Whether the member wrote ``v`` as a continuation of its membership: it names
    ``prev_ts`` (version 1), or ``joined_at`` (version 2)."""
    return v.prev_ts is not None if v.run is None else v.joined_at is not None


def _is_snapshot(key: bytes | None) -> bool:
    return isinstance(key, bytes) and len(key) > 1 and key[1] == KIND_SNAPSHOT
