"""Who may hold what: the read-only ownership derivations of a replayed group.

Functions of a :class:`~groupkit.protocol.group.GroupData` (a
:class:`~groupkit.protocol.state.GroupState`), in the way Kafka's group coordinator keeps its
handlers apart from ``replay``: replay (state.py) calls them to decide whether a record is
accepted (``unowned_claim``, ``unsafe_grant``, what a hold keeps), and the member, the planner
and the runtime call them to decide what to take, grant or report.

- what a member owns or may still take: :func:`may_hold` = :func:`granted` | :func:`reserved`;
  over the whole group, :func:`holders`, :func:`held`, :func:`in_flight`;
- handoffs without the leader's turn: :func:`handoffs` (pending partitions),
  :func:`admission_handoffs` (a newcomer's share), :func:`inheritance_handoffs` (a leaver's);
- admission and inheritance: :func:`admission`, :func:`admits_join`, :func:`admitted_away`,
  :func:`inherited`, :func:`share_claimed_at`;
- who the leader plans for: :func:`is_lagging` (:func:`lag_clock`), :func:`is_newcomer_ready`;
- offsets: :func:`hints_for`, :func:`reset_waiting`.

They change nothing that is the group's: their only writes go to the state's lazy indexes (built
on first read, stale entries dropped when read), which change no answer. Every reader of the
same offset gets the same answers (but for :func:`handoffs`, which a reader that may lack holds
answers with nothing). The rules, each with its proof, are in docs/protocol.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from groupkit.protocol.group import GroupData, MemberState
from groupkit.protocol.records import (
    EMPTY,
    AssignmentRecord,
    MemberRecord,
    MemberRef,
    Partitions,
)
from groupkit.protocol.vocab import Phase, RebalanceProtocol
from groupkit.types import TopicPartition


def may_hold(state: GroupData, member_id: str) -> Partitions:
    """Every partition a live member owns or may still take.

    That is what it has been granted (:func:`granted`: its claims plus the grants of
    generations it has not acknowledged yet) and what is reserved for it (:func:`reserved`:
    pending partitions it may be handed at their owner's release, without a leader turn).
    """
    return granted(state, member_id) | reserved(state, member_id)


def granted(state: GroupData, member_id: str) -> Partitions:
    """A live member's claims plus every grant it may still take: a member applies the
    newest assignment it has replayed, so until its record shows a newer acknowledgement
    it may still be about to take a grant of an older generation, but never of one older
    than the newest generation its record says it has seen."""
    m = state.members.get(member_id)
    if m is None or not state.is_live(member_id):
        return EMPTY
    out = m.claims
    first = max(m.acked_generation + 1, m.seen_generation, m.since_generation)
    for g in range(first, state.generation + 1):
        a = state.generations.get(g)
        if a is None:
            continue
        c = a.members.get(member_id)
        if m.named_by(c) and (c.assigned or c.revoke):
            # what it revokes is what the leader found it may still hold: a grant of an older
            # generation it may still take, which a reader of the compacted log knows only
            # from here (the older generation's record was compacted away)
            out = out | c.assigned | c.revoke
    return out


def reserved(state: GroupData, member_id: str) -> Partitions:
    """Pending partitions a live member may be handed without a leader turn
    (:func:`handoffs`): those pending for it in every generation its record says it may
    still act on (none older than the newest generation it has seen, none older than its
    membership).

    The reservation starts with the generation that makes the partition pending, whether
    or not its owner has let go yet, and ends once the member's record says it has seen a
    newer generation (by then that record claims what it took). So it is a function of the
    assignment records and the members' newest records alone, which every reader of the
    same offset agrees on: unlike a handoff, it does not depend on holds, which a reader
    that started from the compacted topic may lack. Every reader thus counts a partition a
    member may have taken by handoff for that member (a grant of it to anyone else is
    ``unsafe_grant``; its claim by that member is no ``unowned_claim``; a hold started by
    that member's restart or leave covers it). Counting it before the owner lets go is
    only conservative: the member's own grant of it still waits for the owner
    (:func:`granted` does not include it, ``Planner`` keeps it pending).

    An admitted newcomer's reservation (docs/protocol.md, "Admission") works alike: what the
    generation that admitted it has its members ``admit``, from its join until its record says it
    has seen a newer generation. Every reader agrees on it: the join decides it, and the member's
    later records echo it (``MemberRecord.admitted_in``). So does an heir's (docs/protocol.md,
    "Inheritance"): what a generation has it ``inherit`` from owners who are gone."""
    if not state.pending_generations and not state.admitted_ids and not state.inherit_generations:
        return EMPTY
    m = state.members.get(member_id)
    if m is None or not state.is_live(member_id):
        return EMPTY
    out = _admission_reserved(state, m) | _inheritance_reserved(state, m)
    if not state.pending_generations:
        return out
    first = max(m.seen_generation, m.since_generation, 1)
    for g in state.pending_generations:
        if g >= first:
            c = state.generations[g].members.get(member_id)
            if m.named_by(c) and c.pending:
                out = out | c.pending
    return out


def _admission_reserved(state: GroupData, m: MemberState) -> Partitions:
    """What is reserved for ``m`` (live) by the generation that admitted its join."""
    g = m.admitted_in
    if not g or g < m.seen_generation:
        return EMPTY
    a = state.generations.get(g)
    return admits(state, a) if a is not None else EMPTY


def admits(state: GroupData, a: AssignmentRecord) -> Partitions:
    """Everything generation ``a``'s members ``admit`` (built once per generation)."""
    got = state.admit_sets.get(a.generation)
    if got is None:
        got = state.admit_sets[a.generation] = frozenset().union(
            *(c.admit for c in a.members.values())
        )
    return got


def heirs_of(state: GroupData, g: int, a: AssignmentRecord) -> dict[TopicPartition, MemberRef]:
    """``{partition: (member, incarnation) that inherits it}`` in generation ``g``, built
    once per generation (docs/protocol.md, "Inheritance")."""
    got = state.heirs.get(g)
    if got is None:
        got = state.heirs[g] = {
            p: MemberRef(mid, c.incarnation) for mid, c in a.members.items() for p in c.inherit
        }
    return got


def _owner_gone(state: GroupData, g: int, a: AssignmentRecord, p: TopicPartition) -> bool:
    """Whether the membership generation ``g`` assigns ``p`` to has ended: its id is no
    member's any more (it left, or was tombstoned), or names another incarnation, or a membership
    that started after ``g`` (docs/protocol.md, "Inheritance"). A function of the assignment record
    and the members' newest records, so readers of the same offset agree."""
    to = _receivers_of(state, g, a)[0].get(p)
    if to is None:
        return False
    o = state.members.get(to.member_id)
    return o is None or o.incarnation != to.incarnation or o.since_generation > g


def _inheritance_reserved(state: GroupData, m: MemberState) -> Partitions:
    """What ``m`` (live) may inherit (docs/protocol.md, "Inheritance"): in every generation it may
    still act on (none older than the newest it has seen, none older than its membership) that
    names heirs, what it ``inherit``s whose owner is gone."""
    if not state.inherit_generations:
        return EMPTY
    first = max(m.seen_generation, m.since_generation, 1)
    out: set[TopicPartition] = set()
    for g in state.inherit_generations:
        if first <= g <= state.generation:
            a = state.generations[g]
            c = a.members.get(m.member_id)
            if m.named_by(c) and c.inherit:
                out.update(p for p in c.inherit if _owner_gone(state, g, a, p))
    return frozenset(out)


def inherited(state: GroupData, member_id: str) -> Partitions:
    """What this member inherits in the current generation: what it ``inherit``s whose
    owner is gone, and that no other member claims (docs/protocol.md, "Inheritance"). The leader's
    plan counts it as the member's own (``planner._previous``). Computed once per replayed
    record (offset and log time key it, as :func:`_history_complete`): the leader is often
    the heir of most partitions, and asks in every poll."""
    a = state.assignment
    m = state.members.get(member_id)
    if a is None or m is None or a.generation not in state.inherit_generations:
        return EMPTY
    c = a.members.get(member_id)
    if not m.named_by(c) or not c.inherit or m.since_generation > a.generation:
        return EMPTY
    key = (state.offset, state.log_time)
    memo = state.inherited_at.get(member_id)
    if memo is not None and memo[0] == key:
        return memo[1]
    gone = frozenset(p for p in c.inherit if _owner_gone(state, a.generation, a, p))
    got = unclaimed_by_others(state, member_id, gone)
    if len(state.inherited_at) > len(state.members):  # (members that left)
        state.inherited_at.clear()
    state.inherited_at[member_id] = (key, got)
    return got


def unclaimed_by_others(state: GroupData, member_id: str, parts: Partitions) -> Partitions:
    """Those of ``parts`` that no member but ``member_id`` claims."""
    out = set()
    for p in parts:
        claimers = state.claimers.get(p, ())
        if all(o == member_id or o not in state.members or p not in state.members[o].claims
               for o in claimers):  # fmt: skip
            out.add(p)
    return frozenset(out)


def inheritance_handoffs(state: GroupData, member_id: str) -> Partitions:
    """What this member may take now as an heir of the current generation: what it
    inherits (:func:`inherited`) that nobody else may hold any more, exactly as
    :func:`handoffs` hands pending partitions over, under the same conditions."""
    if not state.inherit_generations or not state.is_live(member_id):
        return EMPTY
    got = inherited(state, member_id)
    return _handed(state, member_id, got) if got else EMPTY


def admission(state: GroupData) -> tuple[str, Partitions] | None:
    """The newcomer the current generation admitted, and what its members give it
    (docs/protocol.md, "Admission"), or ``None``."""
    a = state.assignment
    if not state.admitted_ids or a is None:
        return None
    g = a.generation
    for mid in list(state.admitted_ids):
        m = state.members.get(mid)
        if m is None or not m.admitted_in or m.admitted_in < m.seen_generation:
            # The index keeps stale entries until read; one whose record has seen a newer
            # generation is done for good (its reservation too: _admission_reserved), so
            # the index holds only the few admissions under way, not every member that
            # was ever admitted (its records echo admitted_in for as long as they run).
            state.admitted_ids.discard(mid)
            state.share_claimed.pop(mid, None)
        elif m.admitted_in == g and state.is_live(mid):
            return mid, admits(state, a)
    return None


def share_claimed_at(state: GroupData, member_id: str) -> int | None:
    """Log time of the first record of the newcomer the current generation admitted that
    claimed everything it was admitted, or ``None`` (not yet, another newcomer, or not
    seen by this replay: a state restored from a snapshot)."""
    adm = admission(state)
    if adm is None or adm[0] != member_id:
        return None
    return state.share_claimed.get(member_id)


def admitted_away(state: GroupData, member_id: str) -> Partitions:
    """What this member gives the newcomer the current generation admitted: it revokes
    them as it would revoke a partition a new generation takes away (docs/protocol.md,
    "Admission")."""
    adm = admission(state)
    if adm is None or adm[0] == member_id:
        return EMPTY
    assert state.assignment is not None
    c = state.assignment.members.get(member_id)
    m = state.members.get(member_id)
    return c.admit if c is not None and m is not None and m.named_by(c) else EMPTY


def admission_handoffs(state: GroupData, member_id: str) -> Partitions:
    """What the newcomer the current generation admitted may take now: what its members
    give it that nobody else may hold any more (their owner's record let go), exactly as
    :func:`handoffs` hands pending partitions over, under the same conditions."""
    adm = admission(state)
    if adm is None or adm[0] != member_id:
        return EMPTY
    return _handed(state, member_id, adm[1])


def share_awaited(state: GroupData, member_id: str, owned: Partitions) -> bool:
    """Whether the current generation admitted ``member_id`` and part of what its members give
    it is still to come: a newcomer then claims what it took together with the rest
    (docs/protocol.md, "Admission", rule 6)."""
    adm = admission(state)
    return adm is not None and adm[0] == member_id and not adm[1] <= owned


def handoffs(state: GroupData, member_id: str) -> Partitions:
    """Pending partitions of the current generation the member may take now, without the
    leader's follow-up: nobody else may hold them any more (their owner's record let go,
    or it expired or left and its hold ran out).

    Every other holder counts: live members' claims, unacknowledged grants and
    reservations (:func:`may_hold`), and holds. So a partition is handed to one member at
    most: two members that may be handed one partition both reserve it, and each blocks
    the other's handoff until its reservation ends. What the member takes stays counted
    for it (:func:`reserved`) until its record claims it.

    Only a reader that knows what the full replay knows may take one (unlike a grant, no
    leader's record checked by every reader stands behind it). A reader that missed
    records (a gap in offsets: it started from the compacted topic) may lack holds, which
    last a session at most, and the history of older generations: so it answers nothing
    until it :func:`knows_holds`, and while its history lacks a generation some member may
    still act on. The member then waits for the leader's follow-up grant, as without
    handoffs. A state restored from a snapshot knows what its writer knew, holds and
    history included, and a snapshot is written only by a reader that knows its holds
    (``Node.snapshot_due``): so a newcomer that caught up bounded takes handoffs at once."""
    a = state.assignment
    c = a.members.get(member_id) if a is not None else None
    if c is None or not c.pending or not state.is_live(member_id):
        return EMPTY
    m = state.members[member_id]
    if not m.named_by(c) or state.generation < m.since_generation:
        return EMPTY
    return _handed(state, member_id, c.pending)


def _handed(state: GroupData, member_id: str, parts: Partitions) -> Partitions:
    """Those of ``parts`` that nobody but ``member_id`` may hold any more, for a reader that
    knows what the full replay knows (:func:`handoffs`): every handoff, pending, admitted
    or inherited, is decided here alike."""
    if not knows_holds(state) or not _history_complete(state):
        return EMPTY
    free = parts
    for h in state.holds:
        if h.until > state.log_time:
            free = free - h.partitions
    # Each partition's possible holders are found through indexes (_may_hold_partition):
    # this runs in every poll of a member with pending partitions, on every reader, so it
    # must not ask every member (members x history per poll; a 1,000-member simulated
    # group spent its time here).
    return frozenset(p for p in free if all(o == member_id for o in may_hold_partition(state, p)))


def _history_complete(state: GroupData) -> bool:
    """For :func:`handoffs`: whether the history holds every generation a live member may
    still act on. Computed once per replayed record (offset and log time key it): every
    member with pending partitions asks in every poll."""
    key = (state.offset, state.log_time)
    if state.complete_at is not None and state.complete_at[0] == key:
        return state.complete_at[1]
    floor = min(
        (
            max(o.since_generation, min(o.acked_generation + 1, o.seen_generation))
            for mid, o in state.members.items()
            if state.is_live(mid)
        ),
        default=state.generation,
    )
    complete = all(g in state.generations for g in range(max(floor, 1), state.generation + 1))
    state.complete_at = (key, complete)
    return complete


def may_hold_partition(state: GroupData, p: TopicPartition) -> Iterator[str]:
    """The live members whose :func:`may_hold` has ``p``, found through indexes instead
    of every member's: its claimers (``_claimers``, checked against their current
    claims), and the members that a generation still in the history assigns it to or
    makes it pending for (``_receivers``), by the same rules as :func:`granted` and
    :func:`reserved`."""
    claimers = state.claimers.get(p)
    if claimers:
        for mid in list(claimers):
            m = state.members.get(mid)
            if m is None or p not in m.claims:
                claimers.discard(mid)  # the index keeps stale entries until read
            elif state.is_live(mid):
                yield mid
    for g, a in state.generations.items():
        if g > state.generation:
            continue
        assigned, pending, revoked = _receivers_of(state, g, a)
        for to, granted in ((assigned.get(p), True), (revoked.get(p), True),
                            (pending.get(p), False)):  # fmt: skip
            if to is None:
                continue
            mid, inc = to
            m = state.members.get(mid)
            if m is None or m.incarnation != inc or not state.is_live(mid):
                continue
            if granted:
                first = max(m.acked_generation + 1, m.seen_generation, m.since_generation)
            else:
                first = max(m.seen_generation, m.since_generation, 1)
            if g >= first:
                yield mid
    for mid in tuple(state.admitted_ids):
        m = state.members.get(mid)
        if m is not None and state.is_live(mid) and p in _admission_reserved(state, m):
            yield mid
    for g in state.inherit_generations:
        if g > state.generation:
            continue
        a = state.generations[g]
        heir = heirs_of(state, g, a).get(p)
        if heir is None:
            continue
        m = state.members.get(heir.member_id)
        if m is None or m.incarnation != heir.incarnation or not state.is_live(m.member_id):
            continue
        if g >= max(m.seen_generation, m.since_generation, 1) and _owner_gone(state, g, a, p):
            yield m.member_id


_Receivers = dict[TopicPartition, MemberRef]


def _receivers_of(
    state: GroupData, g: int, a: AssignmentRecord
) -> tuple[_Receivers, _Receivers, _Receivers]:
    """``({partition: (member, incarnation) assigned it}, {... it is pending for}, {... that
    revokes it})`` in generation ``g``, built once per generation."""
    got = state.receivers.get(g)
    if got is not None:
        return got[0], got[1], got[2]
    assigned: dict[TopicPartition, MemberRef] = {}
    pending: dict[TopicPartition, MemberRef] = {}
    revoked: dict[TopicPartition, MemberRef] = {}
    for mid, c in a.members.items():
        for q in c.assigned:
            assigned[q] = MemberRef(mid, c.incarnation)
        for q in c.pending:
            pending[q] = MemberRef(mid, c.incarnation)
        for q in c.revoke:
            revoked[q] = MemberRef(mid, c.incarnation)
    state.receivers[g] = (assigned, pending, revoked)
    return assigned, pending, revoked


def knows_holds(state: GroupData) -> bool:
    """Whether this reader knows every hold the full replay has: it has replayed every
    record of the last session of log time (holds last a session at most), or it was
    restored from a snapshot of a reader that did (``snapshot.from_snapshot``)."""
    return state.gap_ts is None or state.log_time >= state.gap_ts + state.session_timeout_ms


def holders(state: GroupData, holds: bool = True) -> dict[TopicPartition, set[str]]:
    """``{partition: ids that may hold it}`` over live members and (unless ``holds`` is
    false) holds. Without holds, every reader of the same offset gets the same answer, one
    that started from the compacted topic too (:func:`knows_holds`)."""
    out: dict[TopicPartition, set[str]] = {}
    for mid in state.live_members():
        for p in may_hold(state, mid):
            out.setdefault(p, set()).add(mid)
    if not holds:
        return out
    for h in state.holds:
        if h.until > state.log_time:
            for p in h.partitions:
                out.setdefault(p, set()).add(h.holder)
    return out


def in_flight(state: GroupData) -> Partitions:
    """Partitions revoked from one member and not yet granted to the next."""
    a = state.assignment
    if a is None:
        return EMPTY
    pending: set[TopicPartition] = set()
    for c in a.members.values():
        pending |= c.pending | c.revoke
    granted: set[TopicPartition] = set()
    for c in a.members.values():
        granted |= c.assigned
    return frozenset(pending - granted)


def is_lagging(state: GroupData, member_id: str) -> bool:
    """Live, but not keeping up: covered by a generation it has not acknowledged for
    ``rebalance.timeout``, or its latest record says it has not read its own records back
    within its session (no ``prev_ts``) and it is not a caught-up newcomer
    (:func:`is_newcomer_ready`)."""
    m = state.members.get(member_id)
    if m is None or not state.is_live(member_id):
        return False
    if not m.ready and not is_newcomer_ready(state, member_id):
        return True
    start = lag_clock(state, m)
    return start is not None and state.log_time - start >= state.rebalance_timeout_ms


def lag_clock(state: GroupData, m: MemberState) -> int | None:
    """Log time from which ``m`` has had to acknowledge the oldest generation that covers it
    and that it has not acknowledged (:func:`is_lagging`: it lags ``rebalance.timeout``
    later), or ``None`` when it acknowledged every one."""
    for g in range(max(m.acked_generation + 1, m.since_generation), state.generation + 1):
        a = state.generations.get(g)
        if a is None:
            continue
        c = a.members.get(m.member_id)
        if m.named_by(c):
            start = state.generation_time[g]
            if m.process is not None and m.process != m.incarnation:
                # A process that took a static seat over has had the time since, and may
                # have to wait for the hold on what the process it replaced may still run
                # (a session at most from the takeover) before it can take its grant.
                start = max(start, m.process_since + state.session_timeout_ms)
            return start
    return None


def hints_for(
    state: GroupData, member_id: str, incarnation: str, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The offsets at which this member may start ``partitions`` it takes now, without
    looking them up: those with a hint whose receiver it is (the target it was pending for
    at its release, or the first member granted it since), or that names no receiver yet.
    The others it looks up."""
    hints = state.offset_hints
    if not hints:
        return {}
    me = MemberRef(member_id, incarnation)
    since = state.log_time - state.session_timeout_ms
    out: dict[TopicPartition, int] = {}
    for p in partitions:
        h = hints.get(p)
        if h is not None and h.at > since and (h.receiver is None or h.receiver == me):
            out[p] = h.offset
    return out


def is_newcomer_ready(state: GroupData, member_id: str) -> bool:
    """A member whose latest record has no ``prev_ts`` may be planned for at once if that
    record is its incarnation's first (``seq`` 1: a newcomer, not a member that lapsed and
    wrote again) and it had replayed the current generation when it wrote it, or the
    current generation covers it (it was planned for so; until it acknowledges, the
    ``rebalance.timeout`` rule applies as to anyone).

    Why a newcomer and not a lapsed member: a member lapses because it reads or runs too
    slowly to see its own records within a session, so planning for it before it has read
    one back would move partitions to a member that likely cannot take them (they wait a
    rebalance timeout). A newcomer that wrote while caught up to the current generation
    reads its own record back within one hop, as the leader reads it. Safety does not rest
    on this rule: grants to it are reserved in :func:`may_hold` from the generation that
    makes them, and it takes them only once it has read its own record back within its
    session (member.py, self-fencing), as with any grant.

    Every reader decides alike: the rule reads the record (``seq``, ``prev_ts``,
    ``seen_generation``) and the current generation and coverage, which readers of the
    same offset agree on, compacted or not (test_protocol_compaction)."""
    m = state.members.get(member_id)
    if m is None or m.ready or (m.seq != 1 if state.version == 1 else m.run != 1):
        return False
    return m.seen_generation >= state.generation or state.covers(member_id)


def admits_join(state: GroupData, mid: str, v: MemberRecord) -> bool:
    """Whether this member record, which starts a new membership, is a join the current
    generation admits (docs/protocol.md, "Admission"): a dynamic newcomer's first record, written
    caught up to the current generation, which is complete and cooperative and has its members
    ``admit`` something; it subscribes to what every member it covers subscribes to; the generation
    names no membership under its id; and no other live member was admitted in it (an earlier
    membership under the same id does not count: a reader of the compacted topic may never have
    seen it; what it may hold is held, as for any restart). Every reader decides alike: the rule
    reads the record, the current assignment and the live members' ``admitted_in``, which readers
    of the same offset agree on."""
    a = state.assignment
    if (
        a is None
        or not v.first
        or v.prev_ts is not None
        or v.seen_generation < a.generation
        or a.protocol != RebalanceProtocol.COOPERATIVE
        or a.phase != Phase.COMPLETE
        or mid in a.members
        or not admits(state, a)
        or any(c.topics != v.topics for c in a.members.values())
    ):
        return False
    adm = admission(state)
    return adm is None or adm[0] == mid


def held(state: GroupData) -> Partitions:
    """Partitions in a hold now: nobody may take them, not even a grant made before the
    hold began (a static seat's grant, while the process it replaced may still run)."""
    out: set[TopicPartition] = set()
    for h in state.holds:
        if h.until > state.log_time:
            out |= h.partitions
    return frozenset(out)


def reset_waiting(state: GroupData) -> dict[str, str]:
    """The members (id -> incarnation) live at the current reset that have not yet
    acknowledged it and are still live with that incarnation; empty once every one has
    (or when there is no reset)."""
    rs = state.reset
    if rs is None:
        return {}
    return {
        mid: inc
        for mid, inc in rs.waiting.items()
        if state.is_live(mid) and state.members[mid].incarnation == inc
    }
