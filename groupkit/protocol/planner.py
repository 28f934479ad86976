"""The leader's planner: from the replayed group state to the next assignment record.

The leader calls :meth:`Planner.plan` after replaying records, and again only once something
the plan reads may have changed: a record that changed the group, or a log time the planner
names (:meth:`Planner.recheck_at`, used by ``Node.plan``). The planner never writes; it
returns a :class:`Decision`, and the runtime produces ``decision.record`` and waits until that
record is replayed (accepted or rejected) before it plans again. The group it plans for is
the *active* members: live, and not lagging (covered by a generation they have not
acknowledged for ``rebalance.timeout``; a lagging member gets nothing new but keeps what it
holds until its record lets go or it expires).

A rebalance is needed when the current assignment does not cover exactly the active members
with their incarnations and subscriptions, or was planned for other partition counts (joins,
leaves, expiries, restarts, subscription and partition-count changes all show up this way).

Eager protocol:

1. Phase 1 (``revoke``): every active member that may hold anything is asked to revoke
   everything. Members joining or leaving meanwhile do not restart the phase.
2. Once no active member may hold anything (its record shows nothing owned and it acknowledged
   the revoke generation, or it expired, or it became lagging and was dropped), phase 2: the
   assignor's plan, granted whole (``complete``). Partitions a dropped member still holds are
   ``pending`` (``partial``) and granted in a follow-up generation once let go.
   Phase 1 is skipped when nobody holds anything (the first join of a group).

Cooperative protocol (KIP-429), for any assignor:

1. The assignor plans a target from the members' subscriptions and what they own (so sticky
   assignors stay sticky).
2. :func:`adjust_cooperative` filters it: a partition stays with a member that holds it; a
   partition whose target owner differs from a current holder is revoked from the holder and
   ``pending`` for the target owner. Partitions that do not move are never revoked or paused.
3. When a revocation is acknowledged (the old owner's record no longer claims it, or the old
   owner expired), a follow-up generation grants the pending partitions whose holders let go.
   Follow-ups reuse the target of the record (``assigned`` + ``pending``): the assignor is not
   run again, so the group converges even with an assignor that is not sticky. The target
   does not wait for it: it takes a pending partition as soon as replay shows nobody else may
   hold it (``ownership.handoffs``); the follow-up then grants what it already processes.
   Until then the partition is *reserved* for the target (``ownership.reserved``): it blocks
   a grant to anyone else, but is not the target's own (``adjust_cooperative``'s
   ``reserved``), so its grant still waits for the owner.

The replay checks every grant, so a plan that would grant a held partition is a bug that the
group rejects (``unsafe_grant``), never a double ownership.

The assignor is the user's code, so it is contained (protocol/assign.py): its answer is checked
before anything is written, and if it raises, answers something invalid or runs out of time,
the built-in fallback plans instead and the record says so (``AssignmentRecord.fallback``;
follow-up generations carry it on). With ``defer`` the planner does not run the assignor
itself: it answers ``need_plan`` with the :class:`~groupkit.protocol.assign.AssignRequest`, and
the caller runs it where it cannot delay the leader's heartbeats and calls again with the
outcome (``planned``), which is used only while the membership it was made for still holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import groupkit.protocol.ownership as ownership
from groupkit.assignors import (
    Assignor,
    CooperativeStickyAssignor,
    StickyAssignor,
    get_assignor,
)
from groupkit.protocol.assign import AssignRequest, PlanOutcome, basis_of, run_assignor
from groupkit.protocol.group import MemberState
from groupkit.protocol.placement import Replan
from groupkit.protocol.records import (
    EMPTY,
    PROTOCOLS,
    AssignmentKey,
    AssignmentRecord,
    AssignorFallback,
    CoveredMember,
    LoadReplan,
    MemberRef,
    Partitions,
    Signer,
    assignment_record,
    encode,
)
from groupkit.protocol.state import GroupState
from groupkit.protocol.vocab import DecisionAction, DecisionReason, Phase, RebalanceProtocol
from groupkit.types import MemberSubscription, TopicPartition


@dataclass(frozen=True, slots=True)
class Decision:
    """What the leader should do now."""

    action: DecisionAction
    reason: DecisionReason
    record: AssignmentRecord | None = None
    key: AssignmentKey | None = None
    lag_topics: tuple[str, ...] = ()
    #: what to run, for ``need_plan`` (``run_assignor(planner.assignor, request)``)
    request: AssignRequest | None = None

    def encode(self, signer: Signer | None = None) -> tuple[bytes, bytes | None]:
        """The record's bytes, for the control-topic producer."""
        assert self.key is not None and self.record is not None, "only a WRITE has a record"
        return encode(self.key, self.record, signer)


@dataclass(frozen=True, slots=True)
class Adjusted:
    """:func:`adjust_cooperative`'s answer, per member of the plan."""

    assigned: dict[str, Partitions] = field(default_factory=dict)
    revoke: dict[str, Partitions] = field(default_factory=dict)
    pending: dict[str, Partitions] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return not any(self.pending.values())


def adjust_cooperative(
    plan: Mapping[str, Iterable[tuple[str, int]]],
    owned: Mapping[str, Iterable[tuple[str, int]]],
    reserved: Mapping[str, Iterable[tuple[str, int]]] | None = None,
) -> Adjusted:
    """Filter a target ``plan`` so that no partition is granted while someone else owns it.

    ``owned`` maps every holder (members of the plan and others, e.g. a member that is
    dropped or an old incarnation) to what it owns or may still take. ``reserved`` maps
    members to partitions they may be handed without a grant (``ownership.reserved``):
    those block a grant to anyone else, but are not the member's own (its grant still waits
    for their owner). Per member ``m`` of the plan: ``assigned`` = the planned partitions that
    ``m`` holds already or nobody else holds; ``pending`` = the rest of its plan; ``revoke`` =
    what it holds outside its plan. Pure.
    """
    holders: dict[TopicPartition, set[str]] = {}
    for h, parts in [*owned.items(), *(reserved or {}).items()]:
        for t, p in parts:
            holders.setdefault(TopicPartition(t, p), set()).add(h)
    out = Adjusted()
    for m in sorted(plan):
        target = frozenset(TopicPartition(t, p) for t, p in plan[m])
        mine = frozenset(TopicPartition(t, p) for t, p in owned.get(m, ()))
        free = frozenset(p for p in target if p in mine or not holders.get(p, set()) - {m})
        out.assigned[m] = free
        out.pending[m] = target - free
        out.revoke[m] = mine - target
    return out


def default_cover_after_ms(version: int, heartbeat_interval_ms: int) -> int:
    """The runtime's :attr:`Planner.cover_after_ms`: a heartbeat interval on protocol version 1;
    none on version 2. Its wait is in log time, and version 2's main log has no heartbeats:
    its clock moves by the leader's lease, a third of a session apart. A wait of a heartbeat
    there lasted up to a lease interval (3.3 s at the default session), and a newcomer that
    left meanwhile, before a generation covered it, held its admitted share for a session."""
    return heartbeat_interval_ms if version == 1 else 0


class Planner:
    """Plans generations for a group with one assignor and one protocol. Stateless."""

    def __init__(
        self,
        assignor: str | Assignor = "range",
        protocol: str = RebalanceProtocol.COOPERATIVE,
        cover_after_ms: int = 0,
    ) -> None:
        """``cover_after_ms``: how long (log time) the plan that covers an admitted newcomer
        waits after the newcomer claimed its share (:meth:`admission_under_way`); the runtime
        gives the heartbeat interval."""
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        self.assignor = get_assignor(assignor) if isinstance(assignor, str) else assignor
        #: the name it was configured by (a registered assignor's ``name`` may differ)
        self.assignor_name = assignor if isinstance(assignor, str) else assignor.name
        self.protocol = protocol
        self.cover_after_ms = cover_after_ms

    # ------------------------------------------------------------------ queries

    def active_members(self, state: GroupState) -> dict[str, MemberState]:
        """Live members that are not lagging, sorted by id."""
        return {i: m for i, m in state.live_members().items() if not ownership.is_lagging(state, i)}

    def rebalance_reason(
        self, state: GroupState, partition_counts: Mapping[str, int]
    ) -> DecisionReason | None:
        """Why the current assignment no longer fits the group, or ``None``."""
        active = self.active_members(state)
        cur = state.assignment
        if not active:
            return None
        if cur is None:
            return DecisionReason.FIRST_ASSIGNMENT
        if {i: (m.incarnation, m.topics) for i, m in active.items()} != {
            i: (c.incarnation, c.topics) for i, c in cur.members.items()
        }:
            if set(active) != set(cur.members):
                return DecisionReason.MEMBERSHIP_CHANGED
            if not all(active[i].named_by(c) for i, c in cur.members.items()):
                return DecisionReason.MEMBERSHIP_CHANGED
            return DecisionReason.SUBSCRIPTION_CHANGED
        if not all(state.covers(i) for i in active):
            # same id and incarnation, but the log expired it and it came back: a new
            # membership that the current generation does not cover
            return DecisionReason.MEMBERSHIP_CHANGED
        for i, m in active.items():
            # A member that acknowledged this generation took all it grants (member.py); if its
            # record no longer claims them, it fenced itself while the log still had it live.
            # Not a static seat: its grant is kept for it while it lives, whether or not a
            # process holds it (a closed member's seat waits for its restart, state.py).
            if (m.instance_id is None and m.acked_generation >= cur.generation
                    and cur.members[i].assigned - m.claims):  # fmt: skip
                return DecisionReason.PARTITIONS_LOST
        if dict(cur.partition_counts) != _counts(active, partition_counts):
            return DecisionReason.PARTITION_COUNT_CHANGED
        if cur.protocol != self.protocol:
            return DecisionReason.PROTOCOL_CHANGED
        return None

    def admission_under_way(self, state: GroupState, active: Mapping[str, MemberState]) -> bool:
        """Whether the plan for a join waits: the current generation admitted the newcomer
        (docs/protocol.md, "Admission"), which does not own its share yet, and nothing else changed.

        The plan that covers the newcomer keeps what it was admitted, so it is not needed for
        the newcomer to own that; made meanwhile, it only raced the givers' releases. A giver
        whose release came after it no longer gave by admission (the new generation says what
        it owns) but by that generation's revocation, which the newcomer takes only once it
        acknowledged the generation and read its acknowledgement back: 100-250 ms more at the
        bench's load, in about half the traced joins (bench/trace_joins.py). So the plan
        waits until the newcomer's record claims its share, or another member joins or leaves,
        or half a session passed since the join (a giver that cannot let go holds the group's
        plan back no longer than that; the plan would take the same partitions from it
        anyway). ``active``: :meth:`active_members`, as the caller has it.

        And once the newcomer claims its share, the plan still waits ``cover_after_ms`` of log
        time (the heartbeat interval): the plan, its record, and every member's record that
        acknowledges it are a burst of control-plane work in every member, and made at once
        they competed with the start of the partitions that just moved, whose first records
        came after the plan in most joins of the bench (the plan changes nothing the newcomer
        owns). Any other change of the group ends the wait, as above."""
        adm = ownership.admission(state)
        cur = state.assignment
        if adm is None or cur is None:
            return False
        mid, share = adm
        newcomer = state.members[mid]
        if set(active) != set(cur.members) | {mid} or not all(
            active[i].named_by(c) and active[i].topics == c.topics for i, c in cur.members.items()
        ):
            return False
        if state.log_time - newcomer.joined_at >= state.session_timeout_ms // 2:
            return False
        if share <= newcomer.claims:
            claimed = ownership.share_claimed_at(state, mid)
            return claimed is not None and state.log_time - claimed < self.cover_after_ms
        return True

    def recheck_at(self, state: GroupState) -> int | None:
        """The earliest log time at which :meth:`plan` may answer otherwise than now with no
        other change of the group (``GroupData.changes``), or ``None``: never.

        The plan reads the log time only through these conditions, each of which flips once
        the log time reaches a point set by the state: a member's session ends (who is live,
        active, a holder, what its records still claim; ``last_seen + session``); a hold runs
        out (``until``); a member covered by a generation it has not acknowledged starts to lag
        (``ownership.lag_clock`` + ``rebalance.timeout``); an admission's wait ends (half a
        session after the newcomer's join, ``cover_after_ms`` after it claimed its share); a
        reader that missed records knows its holds again (``gap_ts`` + session). A heartbeat
        that repeats its membership moves only the first of these, and only later."""
        now = state.log_time
        session = state.session_timeout_ms
        due: list[int] = [h.until for h in state.holds]
        for m in state.members.values():
            if not state.is_live(m.member_id):
                continue  # expired: only a record of it makes it live, or lag, again
            ends = state.expires_at(m)
            if ends is not None:
                due.append(ends)
            start = ownership.lag_clock(state, m)
            if start is not None:
                due.append(start + state.rebalance_timeout_ms)
        if state.gap_ts is not None:
            due.append(state.gap_ts + session)
        adm = ownership.admission(state)
        if adm is not None:
            due.append(state.members[adm[0]].joined_at + session // 2)
            claimed = ownership.share_claimed_at(state, adm[0])
            if claimed is not None:
                due.append(claimed + self.cover_after_ms)
        return min((t for t in due if t > now), default=None)

    def needs_lags(self, state: GroupState, partition_counts: Mapping[str, int]) -> bool:
        """Whether :meth:`plan` would run a lag-aware assignor now (fetch lags first)."""
        return self.plan(state, partition_counts, defer=True).action == DecisionAction.NEED_LAGS

    # ------------------------------------------------------------------ planning

    def plan(
        self,
        state: GroupState,
        partition_counts: Mapping[str, int],
        lags: Mapping[TopicPartition, int] | None = None,
        planned: PlanOutcome | None = None,
        defer: bool = False,
    ) -> Decision:
        """The leader's next step. ``partition_counts``: counts of the subscribed topics.

        ``defer``: answer ``need_plan`` instead of running the assignor; ``planned``: the
        outcome of such a request (used if its basis still holds, else asked for again).
        """
        if state.leader is None:
            return Decision(DecisionAction.NONE, DecisionReason.NO_LEADER)
        cur = state.assignment
        if state.assignment_clobbered and cur is not None:
            lead = state.members[state.leader]
            if MemberRef(cur.leader_id, cur.leader_incarnation) == lead.ref:
                return Decision(
                    DecisionAction.WRITE,
                    DecisionReason.REASSERT,
                    state.reassertion(),
                    AssignmentKey(state.group),
                )
            # Another leader wrote it: carry it over as a new generation of ours, unless the
            # group changed since. Then the generation planned below supersedes it (compaction
            # keeps that one), and a carried-over grant may no longer be safe: a member that
            # left gave its partitions to one a newer join admitted, and every copy of its
            # grant would be rejected as unsafe and clobber the assignment again: a leader that
            # did nothing else for good (tests/test_protocol_jitter.py).
            if self.rebalance_reason(state, partition_counts) is None:
                return self._record(state, cur.phase, cur.members, dict(cur.partition_counts),
                                    DecisionReason.REASSERT, cur.fallback)  # fmt: skip
        active = self.active_members(state)
        if not active:
            return Decision(DecisionAction.NONE, DecisionReason.NO_ACTIVE_MEMBERS)
        reason = self.rebalance_reason(state, partition_counts)
        counts = _counts(active, partition_counts)
        # Who holds and who is reserved what is asked only when a plan needs it: a leader
        # asks at every control turn, and a stable cooperative group needs neither.
        if self.protocol == RebalanceProtocol.EAGER:
            holders, reserved = _holders(state), _reserved(state)
            in_revoke = cur is not None and cur.phase == Phase.REVOKE
            holding = [m for m in active if holders.get(m)]
            if reason is not None or in_revoke:
                if holding:
                    if in_revoke and cur is not None and all(m in cur.members for m in holding):
                        # Phase 1 is under way; a join or leave does not restart it.
                        return Decision(DecisionAction.WAIT, DecisionReason.AWAITING_REVOCATION)
                    return self._revoke_all(
                        state, active, holders, counts, reason or DecisionReason.REBALANCE
                    )
                # Phase 2: nobody active holds anything.
                return self._assign(
                    state, active, holders, reserved, counts, lags,
                    reason or DecisionReason.REVOCATION_ACKNOWLEDGED, planned, defer,
                )  # fmt: skip
        elif reason is not None:
            joining = reason == DecisionReason.MEMBERSHIP_CHANGED
            if joining and self.admission_under_way(state, active):
                return Decision(DecisionAction.WAIT, DecisionReason.AWAITING_ADMISSION)
            return self._assign(
                state, active, _holders(state), _reserved(state), counts, lags, reason, planned,
                defer,
            )  # fmt: skip

        assert cur is not None
        if cur.phase == Phase.PARTIAL:
            holders, reserved = _holders(state), _reserved(state)
            target = {m: cur.target(m) for m in cur.members}
            adj = adjust_cooperative(target, holders, reserved)
            if any(adj.assigned[m] != cur.members[m].assigned for m in cur.members):
                if _handed_off(state, cur, adj):
                    return Decision(DecisionAction.WAIT, DecisionReason.AWAITING_REVOCATION)
                return self._emit(state, cur.members, adj, dict(cur.partition_counts),
                                  DecisionReason.REVOCATION_ACKNOWLEDGED, cur.fallback)  # fmt: skip
            return Decision(DecisionAction.WAIT, DecisionReason.AWAITING_REVOCATION)
        if not all(m.acked_generation >= cur.generation for m in active.values()):
            return Decision(DecisionAction.WAIT, DecisionReason.AWAITING_ACKNOWLEDGEMENT)
        return Decision(DecisionAction.NONE, DecisionReason.STABLE)

    def load_plan(
        self, state: GroupState, partition_counts: Mapping[str, int], replan: Replan
    ) -> Decision:
        """A cooperative generation that makes ``replan``'s moves (protocol/placement.py), if
        the group is stable (:meth:`plan` answers ``stable``) and every move still starts at
        the partition's owner in the current generation and ends at a member of it subscribed
        to its topic; else ``none`` (with :meth:`plan`'s reason when the group is not stable:
        what it needs is planned by :meth:`plan`, not here).

        The target is the current generation with the moves made, filtered like any plan
        (:func:`adjust_cooperative`): a moved partition is revoked from its owner and pending
        for its new one, granted by the follow-up once let go; nothing else is paused. Eager
        groups never re-plan for the load: their every generation revokes everything."""
        d = self.plan(state, partition_counts, defer=True)
        if not (d.action == DecisionAction.NONE and d.reason == DecisionReason.STABLE):
            return Decision(DecisionAction.NONE, d.reason)
        cur = state.assignment
        if self.protocol != RebalanceProtocol.COOPERATIVE or cur is None or not replan.moves:
            return d
        target = {m: set(c.assigned) for m, c in cur.members.items()}
        for mv in replan.moves:
            dest = cur.members.get(mv.target)
            if mv.partition not in target.get(mv.source, ()) or dest is None:
                return d
            if mv.partition.topic not in dest.topics:
                return d
            target[mv.source].discard(mv.partition)
            target[mv.target].add(mv.partition)
        adj = adjust_cooperative(target, _holders(state), _reserved(state))
        info = LoadReplan(replan.reason, min(1.0, max(0.0, replan.gain)), len(replan.moves),
                          state.generation + 1, state.log_time)  # fmt: skip
        return self._emit(state, cur.members, adj, dict(cur.partition_counts),
                          DecisionReason.LOAD, cur.fallback, info)  # fmt: skip

    # ------------------------------------------------------------------ records

    def _assign(
        self,
        state: GroupState,
        active: Mapping[str, MemberState],
        holders: Mapping[str, Partitions],
        reserved: Mapping[str, Partitions],
        counts: Mapping[str, int],
        lags: Mapping[TopicPartition, int] | None,
        reason: DecisionReason,
        planned: PlanOutcome | None,
        defer: bool,
    ) -> Decision:
        # topics without partitions are left out: the assignors would skip them anyway
        topics = {i: tuple(t for t in m.topics if counts.get(t, 0) > 0) for i, m in active.items()}
        basis = basis_of(
            self.assignor.name, {i: (m.incarnation, topics[i]) for i, m in active.items()}, counts
        )
        if planned is None or planned.basis != basis:  # none yet, or made for another group
            if self.assignor.uses_lag and lags is None:
                return Decision(DecisionAction.NEED_LAGS, reason, lag_topics=tuple(sorted(counts)))
            subs = {
                i: MemberSubscription(topics[i], *_previous(state, i, m), m.rack, m.capacity)
                for i, m in active.items()
            }
            request = AssignRequest(self.assignor.name, counts, subs, lags, basis)
            if defer:
                return Decision(DecisionAction.NEED_PLAN, reason, request=request)
            planned = run_assignor(self.assignor, request)
        adj = adjust_cooperative(planned.assignment, holders, reserved)
        covered = {i: CoveredMember(m.incarnation, m.topics, EMPTY, EMPTY, EMPTY)
                   for i, m in active.items()}  # fmt: skip
        return self._emit(state, covered, adj, counts, reason, planned.fallback)

    def _revoke_all(
        self,
        state: GroupState,
        active: Mapping[str, MemberState],
        holders: Mapping[str, Partitions],
        counts: Mapping[str, int],
        reason: DecisionReason,
    ) -> Decision:
        members = {
            i: CoveredMember(m.incarnation, m.topics, EMPTY, holders.get(i, EMPTY), EMPTY)
            for i, m in active.items()
        }
        return self._record(state, Phase.REVOKE, members, counts, reason)

    def _emit(
        self,
        state: GroupState,
        covered: Mapping[str, CoveredMember],
        adj: Adjusted,
        counts: Mapping[str, int],
        reason: DecisionReason,
        fallback: AssignorFallback | None = None,
        replan: LoadReplan | None = None,
    ) -> Decision:
        members = {
            i: CoveredMember(
                c.incarnation,
                c.topics,
                adj.assigned.get(i, EMPTY),
                # eager revokes only in phase 1; what a member still holds then is pending
                adj.revoke.get(i, EMPTY)
                if self.protocol == RebalanceProtocol.COOPERATIVE
                else EMPTY,
                adj.pending.get(i, EMPTY),
            )
            for i, c in covered.items()
        }
        phase = Phase.COMPLETE if adj.complete else Phase.PARTIAL
        if phase == Phase.COMPLETE and self._admits(fallback):
            members = name_heirs(admit_newcomer(members, counts, state.leader))
        return self._record(state, phase, members, counts, reason, fallback, replan)

    def _admits(self, fallback: AssignorFallback | None) -> bool:
        """Whether this planner's complete generations name what a newcomer would get
        (:func:`admit_newcomer`) and who inherits what a leaver owns (:func:`name_heirs`):
        cooperative, and the group's own assignor is a built-in sticky one, whose plan for
        the newcomer, or without the leaver, keeps that (it keeps what members own while the
        group is balanced). A user's assignor, or any other, plans every join and leave
        itself."""
        return (
            self.protocol == RebalanceProtocol.COOPERATIVE
            and fallback is None
            and type(self.assignor) in (StickyAssignor, CooperativeStickyAssignor)
        )

    def _record(
        self,
        state: GroupState,
        phase: str,
        members: Mapping[str, CoveredMember],
        counts: Mapping[str, int],
        reason: DecisionReason,
        fallback: AssignorFallback | None = None,
        replan: LoadReplan | None = None,
    ) -> Decision:
        assert state.leader is not None
        cur = state.assignment
        if replan is None and cur is not None:
            replan = cur.replan  # information that outlives its generation: describe shows it
        lead = state.members[state.leader]
        key, rec = assignment_record(
            state.group,
            generation=state.generation + 1,
            leader_id=lead.member_id,
            leader_incarnation=lead.incarnation,
            leader_joined_at=lead.joined_at,
            protocol=self.protocol,
            phase=phase,
            assignor=self.assignor.name,
            partition_counts=counts,
            members=members,
            fallback=fallback,
            replan=replan,
        )
        return Decision(DecisionAction.WRITE, reason, rec, key)


def admit_newcomer(
    members: Mapping[str, CoveredMember],
    counts: Mapping[str, int],
    leader: str | None = None,
) -> dict[str, CoveredMember]:
    """``members`` with what each gives the next newcomer (``CoveredMember.admit``).

    The newcomer's share of a group whose members all subscribe to the same topics:
    ``partitions // (members + 1)``, taken one at a time from a member that owns the most,
    its highest partition first. That is what a sticky assignor's plan for the larger group
    keeps once the newcomer owns it: every member then owns within one of every other.
    Nothing when the members' topics differ, or a newcomer's share is none.

    Among the members that own the most, a partition is taken from one that already gives,
    then from one that is not ``leader``, then from the larger id. The newcomer owns its
    share only once the slowest of its givers released, so the fewer givers the sooner
    (9 members owning 6, 6, 6, 5, ... give a tenth 4 partitions from 3 givers, not 4); and
    the leader is the busiest of them at that moment, planning the generation that covers
    the newcomer (bench/results/trace_joins.md: it was a giver in every traced join, and
    the last to release in 8 of 20). The result's sizes are the same whichever of the
    tied members gives.
    """
    if not members or len({c.topics for c in members.values()}) != 1:
        return dict(members)
    share = sum(counts.values()) // (len(members) + 1)
    left = {m: sorted(c.assigned) for m, c in members.items()}
    give: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for _ in range(share):
        m = max(left, key=lambda i: (len(left[i]), bool(give[i]), i != leader, i))
        if not left[m]:
            break
        give[m].append(left[m].pop())
    return {m: replace(c, admit=frozenset(give[m])) for m, c in members.items()}


def name_heirs(members: Mapping[str, CoveredMember]) -> dict[str, CoveredMember]:
    """``members`` with what each inherits if another leaves (``CoveredMember.inherit``).

    Per member, its partitions in order, each to the other member that owns the fewest
    counting what it inherits from that member so far (ties: the smaller id). That is what a
    sticky assignor's plan without the leaver keeps: every member then owns within one of
    every other, if it did before. Nothing when the members' topics differ.
    """
    if len(members) < 2 or len({c.topics for c in members.values()}) != 1:
        return dict(members)
    inherit: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for leaver in sorted(members):
        load = {m: len(c.assigned) for m, c in members.items() if m != leaver}
        for p in sorted(members[leaver].assigned):
            heir = min(load, key=lambda i: (load[i], i))
            inherit[heir].add(p)
            load[heir] += 1
    return {m: replace(c, inherit=frozenset(inherit[m])) for m, c in members.items()}


def _previous(state: GroupState, mid: str, m: MemberState) -> tuple[Partitions, int | None]:
    """What the assignor should see as the member's ``(owned, generation)``.

    Its claims, except in eager phase 2: after revoke-all nobody claims anything, and a sticky
    assignor would start from scratch. The revoke record says what each member gave up, so
    that is what it owned (only advice for stickiness: phase 2 runs once nobody holds it).
    And while the current generation has admitted a newcomer (docs/protocol.md, "Admission"): what
    its members give it counts as the newcomer's already, so that the plan that covers it
    keeps it there rather than moving other partitions. So does what a member inherits from
    an owner that left (docs/protocol.md, "Inheritance").
    """
    cur = state.assignment
    if cur is not None and cur.phase == Phase.REVOKE and not m.claims:
        c = cur.members.get(mid)
        if m.named_by(c) and c.revoke:
            return c.revoke, cur.generation - 1 or None
    adm = ownership.admission(state)
    if adm is not None:
        # a partition both admitted and inherited (its owner left after the join) counts
        # for whoever claims it, else for the newcomer: never for two members
        if adm[0] == mid:
            return m.claims | ownership.unclaimed_by_others(
                state, mid, adm[1]
            ), m.owned_generation or None
        owned = m.claims | (ownership.inherited(state, mid) - adm[1])
        return owned - ownership.admitted_away(state, mid), m.owned_generation or None
    return m.claims | ownership.inherited(state, mid), m.owned_generation or None


def _handed_off(state: GroupState, cur: AssignmentRecord, adj: Adjusted) -> bool:
    """Whether a cooperative follow-up may wait for the revocations still under way: all that
    it would grant now, its targets take without it (they claim it, or replay hands it to them
    at its owner's release: ``ownership.handoffs``), it takes nothing back, and it would not
    complete the rebalance. One follow-up for several releasing owners instead of one each:
    every generation is a record every member reads and acknowledges, a burst of work on
    every member in the middle of the rebalance. Nobody waits for it: a target that cannot
    take a handoff (its replay lacks holds) gets its grant when the last owner lets go, or
    when the rebalance is planned again (an owner that never lets go lags, or expires)."""
    if not any(adj.pending.values()):
        return False
    for m, c in cur.members.items():
        new = adj.assigned[m] - c.assigned
        if not c.assigned <= adj.assigned[m]:
            return False
        if not new:
            continue
        ms = state.members.get(m)
        if ms is None or not new <= ownership.handoffs(state, m) | ms.claims:
            return False
    return True


def _holders(state: GroupState) -> dict[str, Partitions]:
    """``{holder: partitions it owns or was granted}``: live members (lagging ones too) and
    holds. Not reservations (:func:`_reserved`): a member must not be granted what is only
    reserved for it, and nobody need revoke it."""
    out = {i: ownership.granted(state, i) for i in state.live_members()}
    for h in state.holds:
        if h.until > state.log_time:
            out[h.holder] = out.get(h.holder, EMPTY) | h.partitions
    return {i: p for i, p in out.items() if p}


def _reserved(state: GroupState) -> dict[str, Partitions]:
    """``{member: partitions reserved for it}`` (``ownership.reserved``)."""
    out = {i: ownership.reserved(state, i) for i in state.live_members()}
    return {i: p for i, p in out.items() if p}


def _counts(
    active: Mapping[str, MemberState], partition_counts: Mapping[str, int]
) -> dict[str, int]:
    topics = {t for m in active.values() for t in m.topics}
    return {t: int(partition_counts.get(t, 0)) for t in sorted(topics)}
