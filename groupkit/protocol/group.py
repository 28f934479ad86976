"""The group as replay leaves it: the value classes of a group's state and its fields.

:class:`GroupData` holds what the log says the group is, with the plain queries (who is live,
whom the current generation covers). :class:`~groupkit.protocol.state.GroupState` adds the one
mutator, ``replay``; :mod:`~groupkit.protocol.ownership` derives who may hold what. Both read
these fields, so they live below both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeGuard

from groupkit.protocol.records import (
    AssignmentRecord,
    CoveredMember,
    LeaseRecord,
    MemberRecord,
    MemberRef,
    Partitions,
    Signer,
    VerdictRecord,
)
from groupkit.types import TopicPartition


@dataclass(slots=True, kw_only=True)
class MemberState:
    """One membership as the log knows it."""

    member_id: str
    incarnation: str
    seq: int
    topics: tuple[str, ...]
    #: what the member's latest record says it owns (void claims removed)
    claims: Partitions
    owned_generation: int
    acked_generation: int
    #: the newest generation its latest record says it had replayed (>= acked_generation)
    seen_generation: int
    #: broker time of the first record of this membership
    joined_at: int
    #: broker time of its latest record
    last_seen: int
    #: the membership is covered only by assignments of this generation or newer
    since_generation: int
    rack: str | None
    capacity: float | None
    client: tuple[tuple[str, str], ...]
    #: its latest record says it has read its own records back within its session
    #: (``prev_ts``): only then may the leader plan for it, but for a caught-up newcomer
    #: (see :func:`~groupkit.protocol.ownership.is_lagging`)
    ready: bool = True
    #: Static seats only (docs/protocol.md, "Static seats"). ``incarnation`` is then
    #: the incarnation the seat is known by (its first process's: assignments name it), and
    #: ``process`` the incarnation of the process that holds the seat now; ``None``: a dynamic
    #: member, whose process is its incarnation.
    process: str | None = None
    instance_id: str | None = None
    #: log time of the seat's current process's first record (its lag clock starts there)
    process_since: int = 0
    #: the generation that admitted this membership's join (docs/protocol.md,
    #: "Admission"); 0: none
    admitted_in: int = 0
    #: protocol version 2 (docs/protocol-v2.md): the liveness run the membership lives in
    #: (``MemberRecord.run``), and whether a verdict has ended that run (then the membership is
    #: no longer live)
    run: int = 0
    ended: bool = False

    @property
    def ref(self) -> MemberRef:
        """The membership as assignments name it (its seat's incarnation, for a static one)."""
        return MemberRef(self.member_id, self.incarnation)

    @property
    def proc(self) -> str:
        """The incarnation of the process this membership is (or holds the seat) now."""
        return self.process if self.process is not None else self.incarnation

    def named_by(self, c: CoveredMember | None) -> TypeGuard[CoveredMember]:
        """Whether an assignment's entry ``c`` (for this member id) names this membership,
        not an earlier one under the same id: a grant or revocation applies only then."""
        return c is not None and c.incarnation == self.incarnation


#: a hold's ``until`` in protocol version 2, where a verdict ends it, never the log's time
NEVER = 1 << 62


@dataclass(frozen=True, slots=True)
class Hold:
    """Partitions of a void membership, held back from every grant until ``until``."""

    holder: str
    partitions: Partitions
    until: int
    #: version 2: the liveness run of the holder's process; a verdict on it or a later run
    #: ends the hold
    run: int = 0


@dataclass(frozen=True, slots=True)
class OffsetHint:
    """The offset committed for a partition by the member that released it (docs/protocol.md,
    "Handoffs": offset hints)."""

    offset: int
    #: log time of the record that released the partition
    at: int
    #: (member id, incarnation) of the member the partition was pending for at its release
    #: (a handoff's target), or else of the first member granted it since, once one is
    receiver: MemberRef | None = None


@dataclass(slots=True)
class ResetState:
    """The group's newest offset reset, as replayed (docs/protocol.md, "Resets")."""

    #: offset of the reset record: what members acknowledge (``MemberRecord.reset_at``)
    at: int
    reset_id: str
    #: the new committed offset of each partition
    offsets: dict[TopicPartition, int]
    #: partitions whose new offset a member committed itself (``MemberRecord.reset_done``)
    settled: set[TopicPartition] = field(default_factory=set)
    #: member id -> incarnation of the members live at the reset record, until each of them
    #: acknowledges it (:func:`~groupkit.protocol.ownership.reset_waiting` leaves out those no
    #: longer live)
    waiting: dict[str, str] = field(default_factory=dict)

    def unsettled(self) -> dict[TopicPartition, int]:
        """The partitions whose next owner must still start at, and commit, the new offset."""
        return {p: o for p, o in self.offsets.items() if p not in self.settled}


@dataclass(slots=True)
class GroupData:
    """What the log says one group is. Only ``GroupState.replay`` (state.py) writes it;
    :mod:`~groupkit.protocol.ownership` derives from it who may hold what.

    The fields after ``assignment_clobbered`` are replay's bookkeeping: the history of
    generations some member may still act on, and indexes over it that the derivations read
    so that they need not scan every member and generation on every call."""

    group: str
    session_timeout_ms: int
    rebalance_timeout_ms: int = 60_000
    verifier: Signer | None = None
    #: the protocol version this reader speaks (docs/protocol-v2.md): 1, liveness by the log's
    #: time and every member's heartbeats; 2, liveness by the judge's verdicts
    version: int = 1

    offset: int = -1
    log_time: int = 0
    members: dict[str, MemberState] = field(default_factory=dict)
    leader: str | None = None
    assignment: AssignmentRecord | None = None
    assignment_offset: int = -1
    holds: list[Hold] = field(default_factory=list)
    rejections: Counter[str] = field(default_factory=Counter)
    #: the newest record on the assignment key was rejected: a reader starting from the
    #: compacted topic will not see the accepted one. The leader re-asserts it.
    assignment_clobbered: bool = False
    #: the assignment records some live member may still act on, by generation
    generations: dict[int, AssignmentRecord] = field(default_factory=dict)
    #: the log time each of those generations was written at
    generation_time: dict[int, int] = field(default_factory=dict)
    #: memberships started since the current generation was applied:
    #: ``{member id: (offset, the record that started it)}`` (docs/protocol.md,
    #: "Generations": re-assertion)
    started: dict[str, tuple[int, MemberRecord]] = field(
        default_factory=dict, repr=False, compare=False
    )
    #: the generations in ``generations`` that make some partition pending: ``reserved``
    #: reads only those (it runs for every member at every member record and grant check)
    pending_generations: set[int] = field(default_factory=set)
    #: ``{partition: member ids whose claims had it}``, a superset (``may_hold_partition``)
    claimers: dict[TopicPartition, set[str]] = field(default_factory=dict, repr=False,
                                                      compare=False)  # fmt: skip
    #: the generations in ``generations`` that name heirs (``CoveredMember.inherit``):
    #: the inheritance derivations read only those
    inherit_generations: set[int] = field(default_factory=set)
    #: per generation in the history, ``{partition: its heir}`` (``heirs_of``)
    heirs: dict[int, dict[TopicPartition, MemberRef]] = field(
        default_factory=dict, repr=False, compare=False
    )
    #: per generation in the history, what its members ``admit`` (``admits``)
    admit_sets: dict[int, Partitions] = field(default_factory=dict, repr=False, compare=False)
    #: ids of members with ``admitted_in`` (stale entries are dropped when read)
    admitted_ids: set[str] = field(default_factory=set, repr=False, compare=False)
    #: per admitted newcomer, the log time of its first record that claimed all it was
    #: admitted (``share_claimed_at``); only the leader's timing reads it, so a state
    #: restored from a snapshot may lack it
    share_claimed: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    #: per generation in the history, who it assigns each partition to, makes it pending
    #: for, and revokes it from (``ownership._receivers_of``)
    receivers: dict[int, tuple[dict[TopicPartition, MemberRef], ...]] = field(
        default_factory=dict, repr=False, compare=False
    )
    #: whether the history holds every generation a live member may still act on, and the
    #: (offset, log time) that answer was computed at
    complete_at: tuple[tuple[int, int], bool] | None = field(
        default=None, repr=False, compare=False
    )
    #: per member, what it inherits (``ownership.inherited``) and the (offset, log time) that
    #: was computed at: an heir named for many partitions asks in every poll
    inherited_at: dict[str, tuple[tuple[int, int], Partitions]] = field(
        default_factory=dict, repr=False, compare=False
    )
    #: per partition, the offset its releasing owner committed (docs/protocol.md, "Handoffs":
    #: offset hints); not part of snapshots nor of what members must agree on
    offset_hints: dict[TopicPartition, OffsetHint] = field(default_factory=dict)
    #: committed offsets in member records that were not taken as hints, by reason
    #: (``not_released``: the record does not let that partition go; ``not_continued``: the
    #: record starts a membership, or is the first of it this reader sees)
    hints_ignored: Counter[str] = field(default_factory=Counter)
    #: log time of the newest record this reader replayed after a gap in offsets (compaction
    #: dropped records it would have needed): see ``ownership.knows_holds``
    gap_ts: int | None = None
    #: the newest offset reset, while the group has live members (docs/protocol.md, "Resets"); not
    #: part of snapshots nor of what members must agree on
    reset: ResetState | None = None
    #: offset of the newest reset record accepted (kept when the group empties): a reset
    #: based on an older log is a copy of an old one
    reset_floor: int = -1
    #: counts the replays that may have changed what the leader's planning reads, but for the
    #: log time alone: every record of the group but a heartbeat that repeats its member's
    #: state (only its ``seq`` and ``last_seen`` move), and every expiry, election and gap.
    #: What the log time alone changes, the planner reports by when (``Planner.recheck_at``):
    #: a leader whose count and that time are unchanged need not plan again (``Node.plan``).
    changes: int = field(default=0, repr=False, compare=False)
    #: protocol version 2: each member's newest ``expired`` verdict
    #: (:class:`~groupkit.protocol.records.VerdictRecord`; a ``process_ended`` one only ends
    #: holds), and the newest lease accepted
    verdicts: dict[str, VerdictRecord] = field(default_factory=dict)
    lease: LeaseRecord | None = None
    #: version 2: holders of the holds this reader took from a record's echo alone, never
    #: having seen the record that started them (``holds.echoed``), each with the process and
    #: run of the newest record that echoed it; they end with the membership that echoed them
    #: too, or with that run if the membership had already left (``GroupState._apply_verdict``)
    echo_holders: dict[str, tuple[str, int]] = field(
        default_factory=dict, repr=False, compare=False
    )
    #: version 2: member id -> the processes its newest accepted record echoes a hold on
    #: (``MemberRecord.held``), whose ended runs a verdict on the id restates (``holds.restated``)
    echoed: dict[str, frozenset[str]] = field(default_factory=dict)
    #: member id -> offset of a record under its key that this reader rejected while the
    #: membership lived, until the membership's next accepted record: compaction may keep the
    #: rejected one as the key's newest, so the member writes its record again (version 2,
    #: where no heartbeat does: docs/protocol-v2.md, L7.5)
    rewrite: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    # ------------------------------------------------------------------ queries

    @property
    def generation(self) -> int:
        return self.assignment.generation if self.assignment is not None else 0

    def is_live(self, member_id: str) -> bool:
        m = self.members.get(member_id)
        if m is None:
            return False
        if self.version == 1:
            return m.last_seen + self.session_timeout_ms > self.log_time
        return not m.ended

    def live_members(self) -> dict[str, MemberState]:
        """Live memberships, sorted by member id."""
        if self.version == 1:
            t = self.log_time - self.session_timeout_ms
            return {i: m for i, m in sorted(self.members.items()) if m.last_seen > t}
        return {i: m for i, m in sorted(self.members.items()) if not m.ended}

    def expires_at(self, m: MemberState) -> int | None:
        """The log time at which ``m`` expires unless a record of it comes first; ``None``:
        only a verdict ends it (version 2)."""
        return m.last_seen + self.session_timeout_ms if self.version == 1 else None

    def covers(self, member_id: str) -> bool:
        """Whether the current assignment applies to this membership."""
        m = self.members.get(member_id)
        a = self.assignment
        if m is None or a is None:
            return False
        c = a.members.get(member_id)
        return m.named_by(c) and a.generation >= (m.since_generation)

    def fingerprint(self) -> tuple[object, ...]:
        """What members that replayed to the same offset must agree on."""
        return (self.offset, self.leader, self.generation, self.assignment)

    def history(self) -> Iterator[AssignmentRecord]:
        """Assignment records still needed to know what members may hold, oldest first."""
        for g in sorted(self.generations):
            yield self.generations[g]
