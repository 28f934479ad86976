"""The group, replayed from its control records: the one place group state changes.

Every member feeds every record of the control partition, in offset order, with its broker
timestamp (``LogAppendTime``) into :meth:`GroupState.replay`, both when it starts (reading the
compacted topic from the beginning) and while it follows the topic live. There is no second path,
so every member that has replayed to the same offset holds the same state.

What one ``replay`` does:

1. Advance the log time to the record's broker timestamp (the newest one wins). Every record
   counts, even one that is then rejected: the broker wrote the timestamp, not the sender.
2. If the leader is no longer live at that time, elect the live member with the smallest
   ``(joined_at, member_id)``. The leader is always that member: when a member record changes
   one membership, that member takes the lead if it now sorts first (a newcomer's ``joined_at``
   is the newest, so it can only tie), and the leader's own restart re-elects. So the leader is a
   function of the live memberships, and readers that agree on those agree on it.
3. Decode the record (a bad record is rejected with the decoder's reason). Records of other
   groups sharing the partition only move the clock: their key bytes name another group, so
   their value is never decoded nor its signature checked (``records.other_group_key``).
4. Apply it, or reject it with a short reason counted in :attr:`GroupState.rejections`:

   - **member record**: it *continues* the membership or starts a *new* one, and the record
     itself decides which, so that every reader decides alike, whatever compaction left it of
     the member's earlier records. It continues if it names ``prev_ts``, the broker time of the
     own record the member's session runs from (member.py), with ``ts - prev_ts <
     session.timeout``, unless this reader knows a live membership of another incarnation or an
     expired one of the same. A continuation takes ``joined_at`` and ``since_generation`` from
     the record: the member echoes the log's view of its membership as of that ``prev_ts``
     record. Anything else starts a *new membership*: ``joined_at`` = this record's time, the
     first generation to cover it the next one, and its owned partitions void. Voiding is safe:
     the member's own fence deadline ran from the send of the ``prev_ts`` record, no later than
     ``prev_ts``, so it has fenced itself by now (a member without one owns nothing); and a new
     incarnation's predecessor may still be running, so what it may hold stays *held* until it
     would have expired. A record that continues the membership may only claim what the member
     owned or was granted (``unowned_claim``), its sequence must grow (``stale_member_record``;
     so must a same-incarnation restart's, or a copy of an old record could void the claims of a
     running member), its acked generation must not go back (``acked_regressed``), and the
     generation it says it has seen (never below the acked one) must not be ahead of the log's
     (``future_generation``). A member whose latest record has no ``prev_ts`` (it has not read
     its own records back: just joined, or lapsed) is *not ready* and counts as lagging, so the
     leader does not plan for it, unless that record is a newcomer's first (``seq`` 1) written
     with the current generation seen (:meth:`GroupState.is_newcomer_ready`): the leader then
     plans for it at its join record.
   - **handoffs**: a partition pending for member ``T`` in a generation is *reserved* for
     ``T`` (:meth:`GroupState.reserved`) from that generation's record until ``T``'s record
     says it has seen a newer one: :meth:`GroupState.may_hold` counts it for ``T``, so nobody
     else is granted it meanwhile. Once no one else may hold it any more (its owner's record
     let go, or it expired, and no other reservation or hold has it), it is handed to ``T``
     at that offset (:meth:`GroupState.handoffs`): ``T`` takes it without the leader's
     follow-up. The reservation reads only assignment records and members' newest records,
     so every reader agrees on it, compacted or restored; the handoff also reads holds,
     which a reader that started from the compacted topic may lack, so such a reader hands
     nothing over for a session.
   - **tombstone**: the member left. If its last record still claimed partitions, they stay held
     until its session would have expired (a tombstone cannot be signed, so it must not be able
     to free partitions a running process still has).
   - **leaving**: a member record with ``leaving`` (the last record of a clean leave, written
     just before the tombstone) is applied as a member record and then as the tombstone, at
     once: the tombstone is a second produce request, and a leader that read the record alone
     saw a member that acknowledged its generation yet claims less than it was granted
     (``partitions_lost``), granted those again, and the tombstone then had to hold the
     grants it never took until its session would have expired. The tombstone that follows
     finds no member and changes nothing. The record frees nothing the tombstone would not: a
     forged one is a forged member record and a forged tombstone, which signing shuts out
     for the record and holds cover for the tombstone, as before.
   - **assignment record**: accepted only from the leader at this offset (``not_leader``), with a
     newer generation (``stale_generation``), a phase the previous phase may go to
     (``bad_phase``, see :data:`ASSIGNMENT_TRANSITIONS`), self-consistent (``inconsistent``), and
     granting no partition that another live member may still hold (``unsafe_grant``). So even a
     buggy or forged leader cannot make two members own one partition.

Admission (issue 14). A join takes partitions from their owners without the leader's turn:

- A complete cooperative generation planned by a built-in sticky assignor names, per member,
  what it gives the next newcomer (``CoveredMember.admit``: the newcomer's share, taken from
  the members that own the most; ``planner.admit_newcomer``).
- The first join record in that generation of a dynamic newcomer written caught up to it
  (``seq`` 1, no ``prev_ts``, the current generation seen), subscribing to what every member
  it covers subscribes to, and whose id the generation does not name, *admits* it
  (:meth:`GroupState._admits_join`; ``MemberState.admitted_in``). At most one per generation.
- From that record every member gives what its entry ``admit``s as it gives a partition a new
  generation takes away (:meth:`GroupState.admitted_away`: it revokes, commits and lets go),
  and the newcomer takes each at its owner's release, as a handoff
  (:meth:`GroupState.admission_handoffs`). That is one hop: the owners read the join record
  when the leader would, and do not wait for the leader's generation. The leader's plan that
  covers the newcomer counts what it was admitted as its own (``planner._previous``), so the
  sticky assignor keeps it there, and nothing else moves.
- Safety is the handoff's: what the newcomer is admitted is *reserved* for it from its join
  until its record says it has seen a newer generation (:meth:`GroupState.reserved`), so a
  grant of it to anyone else is ``unsafe_grant``, its claim is no ``unowned_claim``, and a
  hold its restart or leave starts covers it; it takes one only once nobody else may hold it.
  Owners give only while the admitting generation is current; a newer one, planned with or
  without the newcomer, says what they own from then on.
- Every reader decides alike: the rule reads the join record, the current assignment and the
  live members' ``admitted_in``, and the newcomer's later records echo its ``admitted_in``
  (``MemberRecord.admitted_in``, like ``joined_at``), so a reader of the compacted topic that
  never saw the join still reserves alike while the admitting generation is current (its
  record is then the newest assignment record, which compaction keeps).
  ``tests/test_protocol_admission.py`` proves it over random schedules.

Inheritance (issue 14). A clean leave hands its partitions over without the leader's turn:

- A complete cooperative generation planned by a built-in sticky assignor names, per member,
  what it *inherits* (``CoveredMember.inherit``): every partition of every other member has one
  heir, the member that owns the fewest once the owner's earlier partitions went to their
  heirs (``planner.name_heirs``): what a sticky plan without the owner keeps.
- While that generation is current, once a partition's owner is *gone* (its membership ended:
  the id is no member's any more, as after its ``leaving`` record, or names another
  incarnation or a newer membership: :meth:`GroupState._owner_gone`), its heir takes it as
  soon as nobody else may hold it, as a handoff (:meth:`GroupState.inheritance_handoffs`),
  at the offset the leave's record committed. That is one hop: the heirs read the leave
  when the leader would. The leader's plan without the owner counts what an heir inherits
  as its own (``planner._previous``), so the sticky assignor keeps it there.
- Safety is the handoff's: what a member inherits is *reserved* for it (it may hold it:
  :meth:`GroupState.reserved`) in every generation it may still act on, from the moment
  the owner is gone until its record says it has seen a newer generation. A crashed owner
  is not gone (it is a member until the leader tombstones it), so its partitions wait for
  the leader's plan as before; once gone, an owner never comes back under that membership.
- Every reader decides alike, and needs no echo: the rule reads the assignment records of
  the history and the members' newest records, as the pending reservations do. A reader of
  the compacted topic that never saw the leave never saw the owner either: gone alike.
- A partition both admitted and inherited (its giver left after the newcomer's join) is
  reserved for both, so neither is handed it while the other may hold it; the one that holds
  it keeps it (``Member.poll`` keeps what it owns that a generation makes pending for it),
  and the leader's plan counts it for its holder, else for the newcomer.

Static membership (KIP-345, issue 16). A member configured with ``group.instance.id`` is
*static*: its member id is its instance id, the *seat* the group keeps for it, and its records
carry ``instance_id``. Each process is still a new incarnation. Rules:

- A new process's **join** (``seq`` 1, no ``prev_ts``) that saw its seat live in its own replay
  echoes it: ``seat`` (the incarnation the seat is known by), ``joined_at``, ``since_generation``
  and ``seat_ts`` (the time of the seat's newest record it replayed). Appended within a session
  of ``seat_ts``, it **takes the seat over**: the membership continues (its ``joined_at``, so the
  leader does not move, and its coverage: :attr:`MemberState.incarnation` stays the seat's and
  assignments keep naming it; :attr:`MemberState.process` is the new process), so the current
  generation's grant to the seat is the new process's: no new generation, no revoke or assign
  for anyone else. The record decides, so a reader that never saw the seat decides alike.
- What the replaced process may still hold (:meth:`GroupState.may_hold` of it: claims, grants
  not acknowledged, reservations) is **held** until its session would have ended (its last
  record + ``session.timeout``), exactly as for a restarted dynamic member: it may still run (a
  duplicate, or a zombie), and its own fence (member.py) stops it by then. The new process takes
  a held partition only once the hold ends (``Member.poll``, :meth:`GroupState.held`). A member
  that closed without leaving (``Member.park``) wrote a last record owning nothing, so its
  successor takes everything at once; one that crashed is waited for until its session ends.
- **Newest join wins**: once a join took the seat, records of any other process in it (but a
  newer join) are rejected (``fenced_instance``); the replaced process, seeing another process
  in the seat it held, stops for good without writing again (``Member.superseded``, Kafka's
  ``FENCED_INSTANCE_ID``). Two processes with one instance id therefore never both own a
  partition: the newer one takes only what the hold released.
- A static seat that acknowledged a generation but claims less than its grant (its process
  closed) is not ``partitions_lost`` for the planner: the seat's grant waits for it a session.
  A static seat that sends nothing for a session expires like any member, and its partitions
  go to the others; a join after that (or without the echo) starts a new membership.
- ``Member.leave`` (``close`` with leave) writes the tombstone and ends the seat at once.

Compaction. A reader starting from a compacted topic has lost the earlier records of every key
below the cleaner's point: the first records of long-lived members and every assignment record
but the newest. Four rules keep its replay agreeing with the replay of a member that saw
everything (``tests/test_protocol_compaction.py`` checks it after every step of random
schedules, at random cleaning points):

1. Generations may skip (only *newer* is required), because the ones between were compacted away.
2. Whether a member record continues a membership is decided by the record (``prev_ts``, above),
   not by what the reader saw before it, and a continuation carries the membership's
   ``joined_at`` and ``since_generation``. So a member record first seen that continues a
   membership whose start was compacted away yields what the full replay holds, and its claims
   are trusted.
3. An assignment record from a leader the reader has never seen is accepted if that leader, by
   the ``joined_at`` the record carries, outranks the reader's leader at that offset. A forged
   record could use the same door; signing (:class:`~groupkit.protocol.records.Signer`) shuts it.
4. Nothing that decides whether a record is accepted reads holds through a handoff: what may
   be handed to a member is *reserved* for it from the generation that makes it pending
   (:meth:`GroupState.reserved`), whether or not it has been handed yet, so a reader that lost
   a hold still reserves alike (and starts the same hold at the member's leave). Only taking a
   handoff reads holds, and a reader that may lack some takes none (:meth:`GroupState.
   knows_holds`).

Snapshots (issue 14). :meth:`GroupState.snapshot` captures this whole state (rejection counters
aside) as a :class:`~groupkit.protocol.records.SnapshotRecord` as of :attr:`GroupState.offset`,
and :meth:`GroupState.from_snapshot` restores an equal state, which then replays the records
after that offset exactly as the state it was taken from would. ``replay`` of a snapshot record
changes nothing but what every record changes (offset, log time, expiry): it is a copy of a
past state, not an event, and its value is not even parsed (``tests/test_protocol_snapshot.py``).
A restored state also *knows its holds* (:meth:`GroupState.knows_holds`), as a reader that
started from the compacted topic does not for a session: a snapshot is written only by a reader
that does (``Node.snapshot_due``), so a newcomer that caught up from one takes handoffs at once.

Offset hints (issue 14). A member's record that lets partitions go may carry the offsets it
committed for them just before (``MemberRecord.committed``: only offsets whose synchronous
commit succeeded; none when they are unknown: auto-commit off, offsets stored by the user,
transactional commits). The replay keeps, per partition, the offset of the newest record that
released it (:attr:`GroupState.offset_hints`), and the member that takes the partition next
starts there instead of looking its committed offset up (:meth:`GroupState.hints_for`). Rules:

- A hint is taken only from a record that *continues* a membership and releases the partition
  in that record: the membership claimed it before and the record no longer does. Anything else
  is ignored and counted in :attr:`GroupState.hints_ignored` (never rejects the record).
- It is for the *first* member that receives the partition after that release: the member it
  was pending for at the release (the target that may take it at once, by handoff), else the
  first accepted generation that assigns it (or makes it pending for a member) names its
  receiver (member id and incarnation). It is dropped when a later generation neither assigns
  the partition to that receiver nor makes it pending for it, and when any member's record
  (accepted or not) claims the partition: from then on an owner may have committed further, so
  a later owner looks the offset up.
- It is used within a session (by log time) of the release, and dropped when the group has
  no live member left. The committed offsets of a group whose members do not join the broker's
  group can be rewritten at any time (``kafka-consumer-groups --reset-offsets`` finds it empty);
  an operator who stops the group, or leaves a topic unconsumed, and resets its offsets must
  find them used when it starts again, not a hint from before. A reset while a partition is
  between two owners (milliseconds) is overridden by the hint.

Why a hint never loses a record, and at worst repeats some:

1. Nothing below a hint is unprocessed. The releasing owner committed it after it had been
   handed every record below it (the runtime commits the positions of what ``poll`` returned,
   and only offsets whose synchronous commit succeeded go in the record), and it had itself
   started no further than its predecessor's progress. This holds whatever happens to the
   committed offset later, and only depends on the record being genuine (signing).
2. A hint only lags the group's progress, never leads it. Once the releasing owner has written
   the record it no longer owns the partition and commits nothing more for it
   (``Member.check_commit``); nobody else owns it until the receiver takes it (a grant needs the
   release: ``_check_safe``); so when the receiver takes it, the committed offset *is* the hint
   and the receiver starts exactly where its predecessor stopped. Only someone outside the
   group can have changed it meanwhile: an operator's reset during those milliseconds (the hint
   wins), or a zombie of an earlier owner whose refused-too-late commit lands (an older offset:
   the records in between were processed, by point 1).
3. Anyone else looks up. The receiver's own commits come after it started, so once it may have
   committed further the hint is gone: its claim drops it, and if it crashes before its claim
   is in the log, the next member granted the partition is not the receiver. A receiver granted
   the partition again in an unbroken run of generations (it lost it by a fence, and was never
   seen to claim it) restarts at the hint: duplicates, never a loss.

Hints are not in snapshots, and a reader of a compacted log seldom sees both records of a
release (a hint is taken only from a record that continues a membership whose claims the reader
knows): a hint a reader does not have only means a look-up. Hints are no part of what members
must agree on (``fingerprint``): each member uses its own only for what it takes itself.

Offset resets (issue 16, ``groupkit reset-offsets``). An operator's reset is a record of its
own (``ResetKey``, one per group: compaction keeps the newest), signed like the others, naming
the new committed offset of each partition. Its identity is its offset ``R`` in the log, which
every reader agrees on. The replay keeps the newest one (:attr:`GroupState.reset`):

- It is refused (``stale_reset``) unless it is based on (``ResetRecord.based_on``: the offset
  its issuer had read up to) a log no older than the newest reset accepted before, so a copy of
  an old reset replayed into the log cannot reset the group again; and refused
  (``reset_of_empty_group``) when no member is live: nobody would carry it out, so the operator
  commits an empty group's offsets directly. A newer reset supersedes an older one.
- The members live at ``R`` must acknowledge it (:meth:`GroupState.reset_waiting`): a record of
  the same membership (one the record continues, as for hints) with ``reset_at == R``. One that
  expires, leaves or restarts its membership needs not: it has fenced itself and commits nothing
  more. Every live member acknowledges once it has read ``R`` and is healthy (member.py).
- A partition is *settled* once a member's record names it in ``reset_done``: that member
  started it at the new offset and committed it. Until then its next owner must do so: a member
  that takes an unsettled partition starts it at the new offset, whatever hint it has, and
  commits it (``Actions.reset``). Hints for the reset's partitions from before ``R`` are dropped
  at ``R``, and hints given since for a partition still unsettled come from an owner that let it
  go before carrying the reset out (it was slow to read ``R``, or was releasing it): dropped too.

Why nothing from before ``R`` is committed once a partition's new offset is: that commit is
made by the partition's one owner (the safety invariant), after everything it committed
before (in order, on one connection); its later commits follow on from the new offset. An
earlier owner committed before its release record, which precedes the grant to the next owner.
So the committed offset of each partition steps once from its old lineage to the new offset and
never back (``tests/test_protocol_reset.py`` checks this on every commit of random schedules, in
the simulator, which tags each position with the reset it descends from). The reset is in snapshots
(a newcomer that catches up from one resets what it takes, as a full reader would), but not in
what members must agree on; a reader that started from the compacted topic may
miss the record that settled a partition whose owner has since let it go, and its member would
then reset that partition again if it took it: duplicates, never a loss. The state forgets the
reset when the group empties, as it forgets hints.

Where agreement cannot be had: if the newest record of a key below the cleaner's point is one
the full replay rejected (a copy of an old record, an assignment of a deposed leader),
compaction kept it and dropped the one that counted. The protocol repairs that: the leader
re-asserts a clobbered assignment (:attr:`GroupState.assignment_clobbered`), and the member's
next heartbeat supersedes its record. Two processes running with one member id at once are
not told apart by a reader that sees only the newest record of that id: that includes two
processes started with one ``group.instance.id`` while both run (their safety does not rest on
agreement: the newer one takes only what holds released, and the older one stops). And
tombstones must outlive a session (``delete.retention.ms`` >= ``session.timeout.ms``; Kafka's
default is a day): the hold a tombstone starts is unknown to a reader that never saw it.

Re-assertion. The re-asserted record equals the one it repeats, and names where and when that
one was written (``AssignmentRecord.origin``: its offset and log time;
:meth:`GroupState.reassertion`). A reader of the compacted topic that never saw the first
record meets the generation only at the re-assertion, later in the log, and takes the origin as
the generation's time and place. Two things depend on it. A laggard is one a generation covered
for ``rebalance.timeout`` (:meth:`GroupState.is_lagging`), counted from the generation's
time. And a membership that started between the two records started, for the full replay, under
that generation: it is covered only from the next one (``since_generation``), and only that
generation could have admitted its join. The compacted reader saw it start under an older
generation, so it corrects both when the re-assertion arrives (found by the random compaction
schedules: the compacted reader counted an old grant as still takeable by the restarted member,
and rejected the leader's next generation as ``unsafe_grant``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TypeGuard

from groupkit.errors import RecordRejected
from groupkit.protocol.records import (
    EMPTY,
    KIND_SNAPSHOT,
    AssignmentKey,
    AssignmentRecord,
    CoveredMember,
    MemberKey,
    MemberRecord,
    MemberRef,
    Partitions,
    RecordKey,
    ResetKey,
    ResetRecord,
    Signer,
    SnapshotHold,
    SnapshotMember,
    SnapshotRecord,
    SnapshotReset,
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


@dataclass(slots=True, kw_only=True)
class MemberState:
    """One membership as the log knows it. Built with keywords (:func:`_from_record`)."""

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
    #: (see :meth:`GroupState.is_lagging`)
    ready: bool = True
    #: Static seats only ("Static membership" in the module docstring). ``incarnation`` is then
    #: the incarnation the seat is known by (its first process's: assignments name it), and
    #: ``process`` the incarnation of the process that holds the seat now; ``None``: a dynamic
    #: member, whose process is its incarnation.
    process: str | None = None
    instance_id: str | None = None
    #: log time of the seat's current process's first record (its lag clock starts there)
    process_since: int = 0
    #: the generation that admitted this membership's join (module docstring, "Admission");
    #: 0: none
    admitted_in: int = 0

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


@dataclass(frozen=True, slots=True)
class Hold:
    """Partitions of a void membership, held back from every grant until ``until``."""

    holder: str
    partitions: Partitions
    until: int


@dataclass(frozen=True, slots=True)
class OffsetHint:
    """The offset committed for a partition by the member that released it (module docstring)."""

    offset: int
    #: log time of the record that released the partition
    at: int
    #: (member id, incarnation) of the member the partition was pending for at its release
    #: (a handoff's target), or else of the first member granted it since, once one is
    receiver: MemberRef | None = None


@dataclass(slots=True)
class ResetState:
    """The group's newest offset reset, as replayed (module docstring, "Offset resets")."""

    #: offset of the reset record: what members acknowledge (``MemberRecord.reset_at``)
    at: int
    reset_id: str
    #: the new committed offset of each partition
    offsets: dict[TopicPartition, int]
    #: partitions whose new offset a member committed itself (``MemberRecord.reset_done``)
    settled: set[TopicPartition] = field(default_factory=set)
    #: member id -> incarnation of the members live at the reset record, until each of them
    #: acknowledges it (:meth:`GroupState.reset_waiting` leaves out those no longer live)
    waiting: dict[str, str] = field(default_factory=dict)

    def unsettled(self) -> dict[TopicPartition, int]:
        """The partitions whose next owner must still start at, and commit, the new offset."""
        return {p: o for p, o in self.offsets.items() if p not in self.settled}


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


@dataclass(slots=True)
class GroupState:
    """The deterministic state of one group, built only by :meth:`replay`."""

    group: str
    session_timeout_ms: int
    rebalance_timeout_ms: int = 60_000
    verifier: Signer | None = None

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
    _history: dict[int, AssignmentRecord] = field(default_factory=dict)
    _gen_time: dict[int, int] = field(default_factory=dict)
    #: memberships started since the current generation was applied:
    #: ``{member id: (offset, the record that started it)}`` ("Re-assertion")
    _started: dict[str, tuple[int, MemberRecord]] = field(
        default_factory=dict, repr=False, compare=False
    )
    #: the generations in ``_history`` that make some partition pending: :meth:`reserved`
    #: reads only those (it runs for every member at every member record and grant check)
    _pending_gens: set[int] = field(default_factory=set)
    #: ``{partition: member ids whose claims had it}``, a superset (:meth:`_may_hold_partition`)
    _claimers: dict[TopicPartition, set[str]] = field(default_factory=dict, repr=False,
                                                      compare=False)  # fmt: skip
    #: the generations in ``_history`` that name heirs (``CoveredMember.inherit``):
    #: :meth:`_inheritance_reserved` and :meth:`_may_hold_partition` read only those
    _inherit_gens: set[int] = field(default_factory=set)
    #: per generation in the history, ``{partition: its heir}`` (:meth:`_heirs_of`)
    _heirs: dict[int, dict[TopicPartition, MemberRef]] = field(
        default_factory=dict, repr=False, compare=False
    )
    #: per generation in the history, what its members ``admit`` (:meth:`_admits`)
    _admit_sets: dict[int, Partitions] = field(default_factory=dict, repr=False, compare=False)
    #: ids of members with ``admitted_in`` (stale entries are dropped when read)
    _admitted_ids: set[str] = field(default_factory=set, repr=False, compare=False)
    #: per admitted newcomer, the log time of its first record that claimed all it was
    #: admitted (:meth:`share_claimed_at`); only the leader's timing reads it, so a state
    #: restored from a snapshot may lack it
    _share_claimed: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    #: per generation in the history, who it assigns each partition to (:meth:`_receivers_of`)
    _receivers: dict[
        int, tuple[dict[TopicPartition, MemberRef], dict[TopicPartition, MemberRef]]
    ] = field(default_factory=dict, repr=False, compare=False)
    #: :meth:`_history_complete`'s answer and the (offset, log time) it was computed at
    _complete_at: tuple[tuple[int, int], bool] | None = field(
        default=None, repr=False, compare=False
    )
    #: per partition, the offset its releasing owner committed (see "Offset hints" above);
    #: not part of snapshots nor of what members must agree on
    offset_hints: dict[TopicPartition, OffsetHint] = field(default_factory=dict)
    #: committed offsets in member records that were not taken as hints, by reason
    #: (``not_released``: the record does not let that partition go; ``not_continued``: the
    #: record starts a membership, or is the first of it this reader sees)
    hints_ignored: Counter[str] = field(default_factory=Counter)
    #: log time of the newest record this reader replayed after a gap in offsets (compaction
    #: dropped records it would have needed): see :meth:`knows_holds`
    _gap_ts: int | None = None
    #: the newest offset reset, while the group has live members ("Offset resets"); not part
    #: of snapshots nor of what members must agree on
    reset: ResetState | None = None
    #: offset of the newest reset record accepted (kept when the group empties): a reset
    #: based on an older log is a copy of an old one ("Offset resets")
    _reset_floor: int = -1

    # ------------------------------------------------------------------ queries

    @property
    def generation(self) -> int:
        return self.assignment.generation if self.assignment is not None else 0

    def is_live(self, member_id: str) -> bool:
        m = self.members.get(member_id)
        return m is not None and m.last_seen + self.session_timeout_ms > self.log_time

    def live_members(self) -> dict[str, MemberState]:
        """Live memberships, sorted by member id."""
        t = self.log_time - self.session_timeout_ms
        return {i: m for i, m in sorted(self.members.items()) if m.last_seen > t}

    def covers(self, member_id: str) -> bool:
        """Whether the current assignment applies to this membership."""
        m = self.members.get(member_id)
        a = self.assignment
        if m is None or a is None:
            return False
        c = a.members.get(member_id)
        return m.named_by(c) and a.generation >= (m.since_generation)

    def may_hold(self, member_id: str) -> Partitions:
        """Every partition a live member owns or may still take.

        That is what it has been granted (:meth:`granted`: its claims plus the grants of
        generations it has not acknowledged yet) and what is reserved for it (:meth:`reserved`:
        pending partitions it may be handed at their owner's release, without a leader turn).
        """
        return self.granted(member_id) | self.reserved(member_id)

    def granted(self, member_id: str) -> Partitions:
        """A live member's claims plus every grant it may still take: a member applies the
        newest assignment it has replayed, so until its record shows a newer acknowledgement
        it may still be about to take a grant of an older generation, but never of one older
        than the newest generation its record says it has seen."""
        m = self.members.get(member_id)
        if m is None or not self.is_live(member_id):
            return EMPTY
        out = m.claims
        first = max(m.acked_generation + 1, m.seen_generation, m.since_generation)
        for g in range(first, self.generation + 1):
            a = self._history.get(g)
            if a is None:
                continue
            c = a.members.get(member_id)
            if m.named_by(c) and c.assigned:
                out = out | c.assigned
        return out

    def reserved(self, member_id: str) -> Partitions:
        """Pending partitions a live member may be handed without a leader turn
        (:meth:`handoffs`): those pending for it in every generation its record says it may
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
        (:meth:`granted` does not include it, ``Planner`` keeps it pending).

        An admitted newcomer's reservation ("Admission") works alike: what the generation that
        admitted it has its members ``admit``, from its join until its record says it has seen
        a newer generation. Every reader agrees on it: the join decides it, and the member's
        later records echo it (``MemberRecord.admitted_in``). So does an heir's
        ("Inheritance"): what a generation has it ``inherit`` from owners who are gone."""
        if not self._pending_gens and not self._admitted_ids and not self._inherit_gens:
            return EMPTY
        m = self.members.get(member_id)
        if m is None or not self.is_live(member_id):
            return EMPTY
        out = self._admission_reserved(m) | self._inheritance_reserved(m)
        if not self._pending_gens:
            return out
        first = max(m.seen_generation, m.since_generation, 1)
        for g in self._pending_gens:
            if g >= first:
                c = self._history[g].members.get(member_id)
                if m.named_by(c) and c.pending:
                    out = out | c.pending
        return out

    def _admission_reserved(self, m: MemberState) -> Partitions:
        """What is reserved for ``m`` (live) by the generation that admitted its join."""
        g = m.admitted_in
        if not g or g < m.seen_generation:
            return EMPTY
        a = self._history.get(g)
        return self._admits(a) if a is not None else EMPTY

    def _admits(self, a: AssignmentRecord) -> Partitions:
        """Everything generation ``a``'s members ``admit`` (built once per generation)."""
        got = self._admit_sets.get(a.generation)
        if got is None:
            got = self._admit_sets[a.generation] = frozenset().union(
                *(c.admit for c in a.members.values())
            )
        return got

    def _heirs_of(self, g: int, a: AssignmentRecord) -> dict[TopicPartition, MemberRef]:
        """``{partition: (member, incarnation) that inherits it}`` in generation ``g``, built
        once per generation ("Inheritance")."""
        got = self._heirs.get(g)
        if got is None:
            got = self._heirs[g] = {
                p: MemberRef(mid, c.incarnation) for mid, c in a.members.items() for p in c.inherit
            }
        return got

    def _owner_gone(self, g: int, a: AssignmentRecord, p: TopicPartition) -> bool:
        """Whether the membership generation ``g`` assigns ``p`` to has ended: its id is no
        member's any more (it left, or was tombstoned), or names another incarnation, or a
        membership that started after ``g`` ("Inheritance"). A function of the assignment
        record and the members' newest records, so readers of the same offset agree."""
        to = self._receivers_of(g, a)[0].get(p)
        if to is None:
            return False
        o = self.members.get(to.member_id)
        return o is None or o.incarnation != to.incarnation or o.since_generation > g

    def _inheritance_reserved(self, m: MemberState) -> Partitions:
        """What ``m`` (live) may inherit ("Inheritance"): in every generation it may still act
        on (none older than the newest it has seen, none older than its membership) that
        names heirs, what it ``inherit``s whose owner is gone."""
        if not self._inherit_gens:
            return EMPTY
        first = max(m.seen_generation, m.since_generation, 1)
        out: set[TopicPartition] = set()
        for g in self._inherit_gens:
            if first <= g <= self.generation:
                a = self._history[g]
                c = a.members.get(m.member_id)
                if m.named_by(c) and c.inherit:
                    out.update(p for p in c.inherit if self._owner_gone(g, a, p))
        return frozenset(out)

    def inherited(self, member_id: str) -> Partitions:
        """What this member inherits in the current generation: what it ``inherit``s whose
        owner is gone, and that no other member claims ("Inheritance"). The leader's plan
        counts it as the member's own (``planner._previous``)."""
        a = self.assignment
        m = self.members.get(member_id)
        if a is None or m is None or a.generation not in self._inherit_gens:
            return EMPTY
        c = a.members.get(member_id)
        if not m.named_by(c) or not c.inherit or m.since_generation > a.generation:
            return EMPTY
        gone = frozenset(p for p in c.inherit if self._owner_gone(a.generation, a, p))
        return self.unclaimed_by_others(member_id, gone)

    def unclaimed_by_others(self, member_id: str, parts: Partitions) -> Partitions:
        """Those of ``parts`` that no member but ``member_id`` claims."""
        out = set()
        for p in parts:
            claimers = self._claimers.get(p, ())
            if all(o == member_id or o not in self.members or p not in self.members[o].claims
                   for o in claimers):  # fmt: skip
                out.add(p)
        return frozenset(out)

    def inheritance_handoffs(self, member_id: str) -> Partitions:
        """What this member may take now as an heir of the current generation: what it
        inherits (:meth:`inherited`) that nobody else may hold any more, exactly as
        :meth:`handoffs` hands pending partitions over, under the same conditions."""
        if not self._inherit_gens or not self.is_live(member_id):
            return EMPTY
        got = self.inherited(member_id)
        return self._handed(member_id, got) if got else EMPTY

    def admission(self) -> tuple[str, Partitions] | None:
        """The newcomer the current generation admitted, and what its members give it
        ("Admission"), or ``None``."""
        a = self.assignment
        if not self._admitted_ids or a is None:
            return None
        g = a.generation
        for mid in list(self._admitted_ids):
            m = self.members.get(mid)
            if m is None or not m.admitted_in or m.admitted_in < m.seen_generation:
                # The index keeps stale entries until read; one whose record has seen a newer
                # generation is done for good (its reservation too: _admission_reserved), so
                # the index holds only the few admissions under way, not every member that
                # was ever admitted (its records echo admitted_in for as long as they run).
                self._admitted_ids.discard(mid)
                self._share_claimed.pop(mid, None)
            elif m.admitted_in == g and self.is_live(mid):
                return mid, self._admits(a)
        return None

    def share_claimed_at(self, member_id: str) -> int | None:
        """Log time of the first record of the newcomer the current generation admitted that
        claimed everything it was admitted, or ``None`` (not yet, another newcomer, or not
        seen by this replay: a state restored from a snapshot)."""
        adm = self.admission()
        if adm is None or adm[0] != member_id:
            return None
        return self._share_claimed.get(member_id)

    def admitted_away(self, member_id: str) -> Partitions:
        """What this member gives the newcomer the current generation admitted: it revokes
        them as it would revoke a partition a new generation takes away ("Admission")."""
        adm = self.admission()
        if adm is None or adm[0] == member_id:
            return EMPTY
        assert self.assignment is not None
        c = self.assignment.members.get(member_id)
        m = self.members.get(member_id)
        return c.admit if c is not None and m is not None and m.named_by(c) else EMPTY

    def admission_handoffs(self, member_id: str) -> Partitions:
        """What the newcomer the current generation admitted may take now: what its members
        give it that nobody else may hold any more (their owner's record let go), exactly as
        :meth:`handoffs` hands pending partitions over, under the same conditions."""
        adm = self.admission()
        if adm is None or adm[0] != member_id:
            return EMPTY
        return self._handed(member_id, adm[1])

    def handoffs(self, member_id: str) -> Partitions:
        """Pending partitions of the current generation the member may take now, without the
        leader's follow-up: nobody else may hold them any more (their owner's record let go,
        or it expired or left and its hold ran out).

        Every other holder counts: live members' claims, unacknowledged grants and
        reservations (:meth:`may_hold`), and holds. So a partition is handed to one member at
        most: two members that may be handed one partition both reserve it, and each blocks
        the other's handoff until its reservation ends. What the member takes stays counted
        for it (:meth:`reserved`) until its record claims it.

        Only a reader that knows what the full replay knows may take one (unlike a grant, no
        leader's record checked by every reader stands behind it). A reader that missed
        records (a gap in offsets: it started from the compacted topic) may lack holds, which
        last a session at most, and the history of older generations: so it answers nothing
        until it :meth:`knows_holds`, and while its history lacks a generation some member may
        still act on. The member then waits for the leader's follow-up grant, as without
        handoffs. A state restored from a snapshot knows what its writer knew, holds and
        history included, and a snapshot is written only by a reader that knows its holds
        (``Node.snapshot_due``): so a newcomer that caught up bounded takes handoffs at once."""
        a = self.assignment
        c = a.members.get(member_id) if a is not None else None
        if c is None or not c.pending or not self.is_live(member_id):
            return EMPTY
        m = self.members[member_id]
        if not m.named_by(c) or self.generation < m.since_generation:
            return EMPTY
        return self._handed(member_id, c.pending)

    def _handed(self, member_id: str, parts: Partitions) -> Partitions:
        """Those of ``parts`` that nobody but ``member_id`` may hold any more, for a reader that
        knows what the full replay knows (:meth:`handoffs`): every handoff, pending, admitted
        or inherited, is decided here alike."""
        if not self.knows_holds() or not self._history_complete():
            return EMPTY
        free = parts
        for h in self.holds:
            if h.until > self.log_time:
                free = free - h.partitions
        # Each partition's possible holders are found through indexes (_may_hold_partition):
        # this runs in every poll of a member with pending partitions, on every reader, so it
        # must not ask every member (members x history per poll; a 1,000-member simulated
        # group spent its time here).
        return frozenset(
            p for p in free if all(o == member_id for o in self._may_hold_partition(p))
        )

    def _history_complete(self) -> bool:
        """For :meth:`handoffs`: whether the history holds every generation a live member may
        still act on. Computed once per replayed record (offset and log time key it): every
        member with pending partitions asks in every poll."""
        key = (self.offset, self.log_time)
        if self._complete_at is not None and self._complete_at[0] == key:
            return self._complete_at[1]
        since = self.log_time - self.session_timeout_ms
        floor = min(
            (
                max(o.since_generation, min(o.acked_generation + 1, o.seen_generation))
                for o in self.members.values()
                if o.last_seen > since
            ),
            default=self.generation,
        )
        complete = all(g in self._history for g in range(max(floor, 1), self.generation + 1))
        self._complete_at = (key, complete)
        return complete

    def _may_hold_partition(self, p: TopicPartition) -> Iterator[str]:
        """The live members whose :meth:`may_hold` has ``p``, found through indexes instead
        of every member's: its claimers (``_claimers``, checked against their current
        claims), and the members that a generation still in the history assigns it to or
        makes it pending for (``_receivers``), by the same rules as :meth:`granted` and
        :meth:`reserved`."""
        claimers = self._claimers.get(p)
        if claimers:
            for mid in list(claimers):
                m = self.members.get(mid)
                if m is None or p not in m.claims:
                    claimers.discard(mid)  # the index keeps stale entries until read
                elif self.is_live(mid):
                    yield mid
        for g, a in self._history.items():
            if g > self.generation:
                continue
            assigned, pending = self._receivers_of(g, a)
            for to, granted in ((assigned.get(p), True), (pending.get(p), False)):
                if to is None:
                    continue
                mid, inc = to
                m = self.members.get(mid)
                if m is None or m.incarnation != inc or not self.is_live(mid):
                    continue
                if granted:
                    first = max(m.acked_generation + 1, m.seen_generation, m.since_generation)
                else:
                    first = max(m.seen_generation, m.since_generation, 1)
                if g >= first:
                    yield mid
        for mid in tuple(self._admitted_ids):
            m = self.members.get(mid)
            if m is not None and self.is_live(mid) and p in self._admission_reserved(m):
                yield mid
        for g in self._inherit_gens:
            if g > self.generation:
                continue
            a = self._history[g]
            heir = self._heirs_of(g, a).get(p)
            if heir is None:
                continue
            m = self.members.get(heir.member_id)
            if m is None or m.incarnation != heir.incarnation or not self.is_live(m.member_id):
                continue
            if g >= max(m.seen_generation, m.since_generation, 1) and self._owner_gone(g, a, p):
                yield m.member_id

    def _receivers_of(
        self, g: int, a: AssignmentRecord
    ) -> tuple[dict[TopicPartition, MemberRef], dict[TopicPartition, MemberRef]]:
        """``({partition: (member, incarnation) assigned it}, {... it is pending for})`` in
        generation ``g``, built once per generation."""
        got = self._receivers.get(g)
        if got is None:
            assigned: dict[TopicPartition, MemberRef] = {}
            pending: dict[TopicPartition, MemberRef] = {}
            for mid, c in a.members.items():
                for q in c.assigned:
                    assigned[q] = MemberRef(mid, c.incarnation)
                for q in c.pending:
                    pending[q] = MemberRef(mid, c.incarnation)
            got = self._receivers[g] = (assigned, pending)
        return got

    def knows_holds(self) -> bool:
        """Whether this reader knows every hold the full replay has: it has replayed every
        record of the last session of log time (holds last a session at most), or it was
        restored from a snapshot of a reader that did (:meth:`from_snapshot`)."""
        return self._gap_ts is None or self.log_time >= self._gap_ts + self.session_timeout_ms

    def holders(self) -> dict[TopicPartition, set[str]]:
        """``{partition: ids that may hold it}`` over live members and holds."""
        out: dict[TopicPartition, set[str]] = {}
        for mid in self.live_members():
            for p in self.may_hold(mid):
                out.setdefault(p, set()).add(mid)
        for h in self.holds:
            if h.until > self.log_time:
                for p in h.partitions:
                    out.setdefault(p, set()).add(h.holder)
        return out

    def in_flight(self) -> Partitions:
        """Partitions revoked from one member and not yet granted to the next."""
        a = self.assignment
        if a is None:
            return EMPTY
        pending: set[TopicPartition] = set()
        for c in a.members.values():
            pending |= c.pending | c.revoke
        granted: set[TopicPartition] = set()
        for c in a.members.values():
            granted |= c.assigned
        return frozenset(pending - granted)

    def is_lagging(self, member_id: str) -> bool:
        """Live, but not keeping up: covered by a generation it has not acknowledged for
        ``rebalance.timeout``, or its latest record says it has not read its own records back
        within its session (no ``prev_ts``) and it is not a caught-up newcomer
        (:meth:`is_newcomer_ready`)."""
        m = self.members.get(member_id)
        if m is None or not self.is_live(member_id):
            return False
        if not m.ready and not self.is_newcomer_ready(member_id):
            return True
        for g in range(max(m.acked_generation + 1, m.since_generation), self.generation + 1):
            a = self._history.get(g)
            if a is None:
                continue
            c = a.members.get(member_id)
            if m.named_by(c):
                start = self._gen_time[g]
                if m.process is not None and m.process != m.incarnation:
                    # A process that took a static seat over has had the time since, and may
                    # have to wait for the hold on what the process it replaced may still run
                    # (a session at most from the takeover) before it can take its grant.
                    start = max(start, m.process_since + self.session_timeout_ms)
                return self.log_time - start >= self.rebalance_timeout_ms
        return False

    def hints_for(
        self, member_id: str, incarnation: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The offsets at which this member may start ``partitions`` it takes now, without
        looking them up: those with a hint whose receiver it is (the target it was pending for
        at its release, or the first member granted it since), or that names no receiver yet.
        The others it looks up."""
        hints = self.offset_hints
        if not hints:
            return {}
        me = MemberRef(member_id, incarnation)
        since = self.log_time - self.session_timeout_ms
        out: dict[TopicPartition, int] = {}
        for p in partitions:
            h = hints.get(p)
            if h is not None and h.at > since and (h.receiver is None or h.receiver == me):
                out[p] = h.offset
        return out

    def _hint_released(self, old: MemberState | None, v: MemberRecord, continues: bool) -> None:
        """Take the offsets ``v`` carries for what it releases as hints (module docstring).

        A partition pending in the current generation names its receiver at once: its target,
        which may take it at this very record (:meth:`handoffs`) before any generation grants
        it. Were the target to die before its claim is in the log, the next member granted
        the partition is not the receiver and looks its offset up."""
        pending_for: dict[TopicPartition, MemberRef] = {}
        if v.committed and self.assignment is not None:
            for mid, c in self.assignment.members.items():
                for p in c.pending:
                    pending_for[p] = MemberRef(mid, c.incarnation)
            adm = self.admission()
            if adm is not None:  # what an admitted newcomer may take at this very record
                for p in adm[1]:
                    pending_for[p] = self.members[adm[0]].ref
            a = self.assignment
            if v.leaving and old is not None and a.generation in self._inherit_gens:
                mine = a.members.get(old.member_id)
                if old.named_by(mine):  # what its heirs inherit at this very record
                    heirs = self._heirs_of(a.generation, a)
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

    def is_newcomer_ready(self, member_id: str) -> bool:
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
        on this rule: grants to it are reserved in :meth:`may_hold` from the generation that
        makes them, and it takes them only once it has read its own record back within its
        session (member.py, self-fencing), as with any grant.

        Every reader decides alike: the rule reads the record (``seq``, ``prev_ts``,
        ``seen_generation``) and the current generation and coverage, which readers of the
        same offset agree on, compacted or not (test_protocol_compaction)."""
        m = self.members.get(member_id)
        if m is None or m.ready or m.seq != 1:
            return False
        return m.seen_generation >= self.generation or self.covers(member_id)

    def fingerprint(self) -> tuple[object, ...]:
        """What members that replayed to the same offset must agree on."""
        return (self.offset, self.leader, self.generation, self.assignment)

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
            self._gap_ts = timestamp_ms
        self.offset = offset
        if timestamp_ms > self.log_time:
            self.log_time = timestamp_ms
        self._expire()
        if other_group_key(key, self.group):
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
                    return self._apply_leave(offset, k)
                assert isinstance(v, MemberRecord)
                return self._apply_member(offset, k, v, timestamp_ms)
            if isinstance(k, ResetKey):
                assert isinstance(v, ResetRecord)
                return self._apply_reset(offset, k, v)
            assert isinstance(k, AssignmentKey) and isinstance(v, AssignmentRecord)
            return self._apply_assignment(offset, k, v, timestamp_ms)
        except RecordRejected as e:
            return self._reject(offset, k, e.reason, e.detail, isinstance(k, AssignmentKey))

    def _skip_snapshot(self, offset: int, key: bytes | None) -> Replayed:
        """A snapshot record changes no state (module docstring). Its value is not decoded:
        that costs a whole group's worth of parsing, for nothing but a rejection count."""
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
        if clobbers:
            self.assignment_clobbered = self.assignment is not None
        return Replayed(offset, ReplayKind.REJECTED, key, reason, detail)

    def _expire(self) -> None:
        """Re-elect if the leader expired; forget holds whose time has passed."""
        if self.leader is not None and not self.is_live(self.leader):
            self._elect()
            if self.leader is None:
                self.offset_hints.clear()  # an empty group (see "Offset hints")
                self.reset = None  # (and "Offset resets")
        if self.holds and any(h.until <= self.log_time for h in self.holds):
            self.holds = [h for h in self.holds if h.until > self.log_time]

    def _elect(self) -> None:
        live = self.live_members()
        self.leader = min(live, key=lambda i: (live[i].joined_at, i)) if live else None

    def _apply_member(self, offset: int, k: MemberKey, v: MemberRecord, ts: int) -> Replayed:
        mid = k.member_id
        old = self.members.get(mid)
        if self.offset_hints and v.owned:
            # someone claims it: it may commit further from here (module docstring)
            for p in v.owned & self.offset_hints.keys():
                del self.offset_hints[p]
        live = old is not None and self.is_live(mid)
        if v.instance_id is not None:
            if v.instance_id != mid:
                raise RecordRejected(
                    RejectReason.BAD_VALUE, f"instance id {v.instance_id!r} of {mid!r}"
                )
            if v.seat_ts is not None and ts - v.seat_ts < self.session_timeout_ms:
                # A new process's join that saw its seat live: it takes the seat over (the
                # record decides, so a reader that never saw the seat decides alike).
                return self._take_seat(offset, k, v, ts, old if live else None)
            if old is not None and live and old.instance_id is not None \
                    and old.proc != v.incarnation and v.seq > 1:  # fmt: skip
                # A record of a process whose seat a newer join took: newest join wins.
                raise RecordRejected(
                    RejectReason.FENCED_INSTANCE,
                    f"process {v.incarnation} was replaced by {old.proc}",
                )
        same = old is not None and old.proc == v.incarnation
        # Decided by the record alone, so every reader decides alike (module docstring).
        continues = (
            v.prev_ts is not None
            and ts - v.prev_ts < self.session_timeout_ms
            and (old is None or (same and live))
        )
        first_sight = continues and old is None
        if continues and old is not None:
            # The same membership continues.
            if v.seq <= old.seq:
                raise RecordRejected(RejectReason.STALE_MEMBER_RECORD, f"seq {v.seq} <= {old.seq}")
            if v.acked_generation < old.acked_generation:
                raise RecordRejected(RejectReason.ACKED_REGRESSED, f"{v.acked_generation}")
            if v.seen_generation > self.generation:  # seen >= acked (records.py)
                raise RecordRejected(RejectReason.FUTURE_GENERATION, f"{v.seen_generation}")
            extra = v.owned - self.may_hold(mid)
            if extra:
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
            m.admitted_in = v.admitted_in  # an echo, like joined_at ("Admission")
            new_membership = False
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
                # First sight of a member whose earlier records were compacted away (see the
                # module docstring): trust its claims and its echoed joined_at.
                assert v.joined_at is not None
                self._started.pop(mid, None)
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
            else:
                # A new membership owns nothing: any claim in the record is void, because a
                # process whose membership the log restarts has fenced itself (member.py).
                m = _from_record(
                    mid, v, ts,
                    claims=EMPTY,
                    owned_generation=0,
                    acked_generation=v.acked_generation,
                    joined_at=ts,
                    since_generation=self.generation + 1,
                )  # fmt: skip
                if v.instance_id is not None:  # a new seat: known by this process
                    m.process, m.instance_id, m.process_since = v.incarnation, v.instance_id, ts
                elif self._admits_join(mid, v):
                    m.admitted_in = self.generation
                self._started[mid] = (offset, v)
                self._share_claimed.pop(mid, None)  # a new membership claims its share anew
            new_membership = not first_sight
        if v.committed:
            self._hint_released(old, v, continues and old is not None)
        if self.reset is not None:
            self._reset_heard(mid, v, continues)
        self.members[mid] = m
        for p in m.claims:
            self._claimers.setdefault(p, set()).add(mid)
        if m.admitted_in:
            self._admitted_ids.add(mid)
            if mid not in self._share_claimed and m.claims:
                adm = self.admission()
                if adm is not None and adm[0] == mid and adm[1] <= m.claims:
                    self._share_claimed[mid] = ts
        elif self._share_claimed:
            self._share_claimed.pop(mid, None)
        if v.leaving:
            # The leave's last record: the tombstone that follows it (another produce request,
            # which a reader may see later) takes effect right here, so nobody plans for the
            # member in between (module docstring, "leaving").
            return self._apply_leave(offset, k)
        if self.leader is None or not self.is_live(self.leader):
            self._elect()
        elif self.leader == mid:
            if old is None or m.joined_at != old.joined_at:
                self._elect()
        else:
            # The leader is the live member with the smallest (joined_at, id): only this one
            # member changed, so it either takes the lead or leaves it where it is.
            lead = self.members[self.leader]
            if (m.joined_at, mid) < (lead.joined_at, self.leader):
                self.leader = mid
        return Replayed(offset, ReplayKind.MEMBER, k, new_membership=new_membership)

    def _admits_join(self, mid: str, v: MemberRecord) -> bool:
        """Whether this member record, which starts a new membership, is a join the current
        generation admits ("Admission"): a dynamic newcomer's first record, written caught up
        to the current generation, which is complete and cooperative and has its members
        ``admit`` something; it subscribes to what every member it covers subscribes to; the
        generation names no membership under its id; and no other live member was admitted in
        it (an earlier membership under the same id does not count: a reader of the compacted
        topic may never have seen it; what it may hold is held, as for any restart). Every
        reader decides alike: the rule reads the record, the current assignment and the live
        members' ``admitted_in``, which readers of the same offset agree on."""
        a = self.assignment
        if (
            a is None
            or v.seq != 1
            or v.prev_ts is not None
            or v.seen_generation < a.generation
            or a.protocol != _COOPERATIVE
            or a.phase != Phase.COMPLETE
            or mid in a.members
            or not self._admits(a)
            or any(c.topics != v.topics for c in a.members.values())
        ):
            return False
        adm = self.admission()
        return adm is None or adm[0] == mid

    def _hold(self, old: MemberState) -> None:
        held = self.may_hold(old.member_id)
        if held:
            until = old.last_seen + self.session_timeout_ms
            self.holds.append(Hold(f"{old.member_id}/{old.proc}", held, until))

    def _take_seat(
        self, offset: int, k: MemberKey, v: MemberRecord, ts: int, seat: MemberState | None
    ) -> Replayed:
        """A new process's join takes over a live static seat (module docstring, "Static
        membership"): the membership, its coverage and its grants carry on; what the replaced
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
        # the seat keeps its joined_at, so the leader stays where it was (as in _apply_member)
        if self.leader is None or not self.is_live(self.leader):
            self._elect()
        elif self.leader == mid:
            if seat is None or m.joined_at != seat.joined_at:
                self._elect()
        elif (m.joined_at, mid) < (self.members[self.leader].joined_at, self.leader):
            self.leader = mid
        return Replayed(offset, ReplayKind.MEMBER, k)

    def held(self) -> Partitions:
        """Partitions in a hold now: nobody may take them, not even a grant made before the
        hold began (a static seat's grant, while the process it replaced may still run)."""
        out: set[TopicPartition] = set()
        for h in self.holds:
            if h.until > self.log_time:
                out |= h.partitions
        return frozenset(out)

    def _apply_leave(self, offset: int, k: MemberKey) -> Replayed:
        old = self.members.pop(k.member_id, None)
        self._started.pop(k.member_id, None)
        if old is not None:
            if old.last_seen + self.session_timeout_ms > self.log_time:
                self.members[k.member_id] = old  # may_hold needs it present and live
                self._hold(old)
                del self.members[k.member_id]
            if self.leader == k.member_id:
                self._elect()
                if self.leader is None:
                    self.offset_hints.clear()  # an empty group (see "Offset hints")
                    self.reset = None  # (and "Offset resets")
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
            raise RecordRejected(
                RejectReason.STALE_GENERATION, f"{a.generation} <= {cur.generation}"
            )
        allowed = ASSIGNMENT_TRANSITIONS[(a.protocol, cur.phase if cur else None)]
        if a.phase not in allowed:
            raise RecordRejected(
                RejectReason.BAD_PHASE, f"{cur.phase if cur else None} -> {a.phase}"
            )
        _check_consistent(a)
        self._check_safe(a)
        self.assignment = a
        self.assignment_offset = offset
        self.assignment_clobbered = False
        self._history[a.generation] = a
        self._gen_time[a.generation] = ts
        if a.origin is not None:
            self._from_origin(a, offset, ts)
        self._started.clear()
        if any(c.pending for c in a.members.values()):
            self._pending_gens.add(a.generation)
        if any(c.inherit for c in a.members.values()):
            self._inherit_gens.add(a.generation)
        self._prune_history()
        if self.offset_hints:
            self._hint_granted(a)
        return Replayed(offset, ReplayKind.ASSIGNMENT, k)

    def _from_origin(self, a: AssignmentRecord, offset: int, ts: int) -> None:
        """A generation first met at its re-assertion ("Re-assertion"): its time and place are
        the origin's (never later than this record's), and a membership that started after
        the origin started under it."""
        assert a.origin is not None
        origin, origin_ts = min(a.origin[0], offset), min(a.origin[1], ts)
        self.assignment_offset = origin
        self._gen_time[a.generation] = origin_ts
        for mid, (at, v) in sorted(self._started.items(), key=lambda kv: kv[1][0]):
            m = self.members.get(mid)
            if at <= origin or m is None or m.incarnation != v.incarnation:
                continue
            m.since_generation = max(m.since_generation, a.generation + 1)
            if m.admitted_in and m.admitted_in < a.generation:
                m.admitted_in = 0  # under an older generation, which the full replay never had
            if not m.admitted_in and m.process is None and self._admits_join(mid, v):
                m.admitted_in = a.generation
                self._admitted_ids.add(mid)

    def reassertion(self) -> AssignmentRecord:
        """The current generation's record as the leader re-asserts it ("Re-assertion")."""
        a = self.assignment
        if a is None:
            raise ValueError("no generation to re-assert")
        if a.origin is not None:
            return a
        return replace(a, origin=(self.assignment_offset, self._gen_time[a.generation]))

    def _check_leader(self, a: AssignmentRecord) -> None:
        lead = self.members.get(self.leader) if self.leader is not None else None
        if lead is not None and a.leader_id == self.leader:
            if a.leader_incarnation != lead.incarnation:
                raise RecordRejected(RejectReason.NOT_LEADER, f"{a.leader_id} wrong incarnation")
            return
        if a.leader_id not in self.members and (
            lead is None or (a.leader_joined_at, a.leader_id) < (lead.joined_at, lead.member_id)
        ):
            return  # a leader whose member records were compacted away (module docstring)
        raise RecordRejected(
            RejectReason.NOT_LEADER, f"{a.leader_id} is not the leader ({self.leader})"
        )

    def _check_safe(self, a: AssignmentRecord) -> None:
        """No grant of a partition another live member (or a hold) may still have."""
        holders = self.holders()
        for mid, c in a.members.items():
            # not its reservation: a grant of a reserved partition still waits for its owner
            mine = self.granted(mid) if self._is_member(mid, c.incarnation) else EMPTY
            for p in c.assigned - mine:
                others = holders.get(p, set()) - {mid}
                if others:
                    raise RecordRejected(
                        RejectReason.UNSAFE_GRANT, f"{p} to {mid} still held by {sorted(others)}"
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
        for g in [g for g in self._history if g < floor]:
            del self._history[g]
            self._pending_gens.discard(g)
            self._receivers.pop(g, None)
            self._admit_sets.pop(g, None)
            self._inherit_gens.discard(g)
            self._heirs.pop(g, None)
            self._gen_time.pop(g, None)  # is_lagging reads it only for generations in history

    def history(self) -> Iterator[AssignmentRecord]:
        """Assignment records still needed to know what members may hold, oldest first."""
        for g in sorted(self._history):
            yield self._history[g]

    # ------------------------------------------------------------------ offset resets

    def _apply_reset(self, offset: int, k: ResetKey, v: ResetRecord) -> Replayed:
        """A new reset supersedes any earlier one; hints from before it are void for its
        partitions ("Offset resets")."""
        if v.based_on < self._reset_floor:
            raise RecordRejected(
                RejectReason.STALE_RESET, f"based on {v.based_on} < {self._reset_floor}"
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
            self._reset_floor = offset
            raise RecordRejected(RejectReason.RESET_OF_EMPTY_GROUP, v.reset_id)
        offsets = dict(v.offsets)
        self._reset_floor = offset
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

    def reset_waiting(self) -> dict[str, str]:
        """The members (id -> incarnation) live at the current reset that have not yet
        acknowledged it and are still live with that incarnation; empty once every one has
        (or when there is no reset)."""
        rs = self.reset
        if rs is None:
            return {}
        return {
            mid: inc
            for mid, inc in rs.waiting.items()
            if self.is_live(mid) and self.members[mid].incarnation == inc
        }

    # ------------------------------------------------------------------ snapshots

    def snapshot(self, writer_id: str, writer_incarnation: str) -> SnapshotRecord:
        """This state as of :attr:`offset`, to be written under ``SnapshotKey(group)``."""
        if self.offset < 0:
            raise ValueError("nothing replayed yet: no offset to snapshot at")
        members = tuple(_member_to_snapshot(m) for m in self.members.values())
        return SnapshotRecord(
            group=self.group,
            as_of=self.offset,
            log_time=self.log_time,
            writer_id=writer_id,
            writer_incarnation=writer_incarnation,
            leader=self.leader,
            members=members,
            assignment=self.assignment,
            assignment_offset=self.assignment_offset,
            history=tuple((self._gen_time[g], self._history[g]) for g in sorted(self._history)),
            holds=tuple(SnapshotHold(h.holder, h.partitions, h.until) for h in self.holds),
            assignment_clobbered=self.assignment_clobbered,
            reset=None if self.reset is None else _reset_to_snapshot(self.reset),
            reset_floor=self._reset_floor,
        )

    @classmethod
    def from_snapshot(
        cls,
        record: SnapshotRecord,
        session_timeout_ms: int,
        rebalance_timeout_ms: int = 60_000,
        verifier: Signer | None = None,
    ) -> GroupState:
        """The state :meth:`snapshot` captured (rejection counters start empty); feed it the
        records after ``record.as_of``."""
        st = cls(record.group, session_timeout_ms, rebalance_timeout_ms, verifier)
        st.offset = record.as_of
        st.log_time = record.log_time
        st.members = {m.member_id: _member_from_snapshot(m) for m in record.members}
        st.leader = record.leader
        st.assignment = record.assignment
        st.assignment_offset = record.assignment_offset
        st.holds = [Hold(h.holder, h.partitions, h.until) for h in record.holds]
        st.assignment_clobbered = record.assignment_clobbered
        st._history = {a.generation: a for _, a in record.history}
        st._gen_time = {a.generation: t for t, a in record.history}
        for m in st.members.values():
            for p in m.claims:
                st._claimers.setdefault(p, set()).add(m.member_id)
            if m.admitted_in:
                st._admitted_ids.add(m.member_id)
        st._pending_gens = {
            g for g, a in st._history.items() if any(c.pending for c in a.members.values())
        }
        st._inherit_gens = {
            g for g, a in st._history.items() if any(c.inherit for c in a.members.values())
        }
        st._reset_floor = record.reset_floor
        if record.reset is not None:
            r = record.reset
            st.reset = ResetState(r.at, r.reset_id, dict(r.offsets), set(r.settled),
                                  dict(r.waiting))  # fmt: skip
        # Its writer knew its holds (Node.snapshot_due writes no snapshot otherwise), and the
        # snapshot carries them: a gap from here on is the reader's own (replay sets it).
        st._gap_ts = None
        return st


def _reset_to_snapshot(r: ResetState) -> SnapshotReset:
    return SnapshotReset(r.at, r.reset_id, tuple(sorted(r.offsets.items())),
                         frozenset(r.settled), tuple(sorted(r.waiting.items())))  # fmt: skip


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
        ready=v.prev_ts is not None if ready is None else ready,
        process=process,
        instance_id=instance_id,
        process_since=process_since,
    )


#: MemberState's fields, which a SnapshotMember carries under the same names
_MEMBER_FIELDS = tuple(f.name for f in fields(MemberState))


def _member_to_snapshot(m: MemberState) -> SnapshotMember:
    return SnapshotMember(**{f: getattr(m, f) for f in _MEMBER_FIELDS})


def _member_from_snapshot(m: SnapshotMember) -> MemberState:
    return MemberState(**{f: getattr(m, f) for f in _MEMBER_FIELDS})


def _is_snapshot(key: bytes | None) -> bool:
    return isinstance(key, bytes) and len(key) > 1 and key[1] == KIND_SNAPSHOT


def _check_consistent(a: AssignmentRecord) -> None:
    counts = dict(a.partition_counts)
    seen: set[TopicPartition] = set()
    for mid, c in a.members.items():
        if c.assigned & c.revoke or c.assigned & c.pending:
            raise RecordRejected(
                RejectReason.INCONSISTENT, f"{mid}: a partition assigned and revoked"
            )
        if a.phase == Phase.REVOKE and (c.assigned or c.pending):
            raise RecordRejected(RejectReason.INCONSISTENT, f"{mid}: revoke phase assigns")
        if a.protocol == _EAGER and a.phase != Phase.REVOKE and c.revoke:
            raise RecordRejected(
                RejectReason.INCONSISTENT, f"{mid}: eager revokes outside the revoke phase"
            )
        if a.phase == Phase.COMPLETE and c.pending:
            raise RecordRejected(RejectReason.INCONSISTENT, f"{mid}: complete phase with pending")
        if c.admit and (
            a.protocol != _COOPERATIVE or a.phase != Phase.COMPLETE or not c.admit <= c.assigned
        ):
            raise RecordRejected(
                RejectReason.INCONSISTENT, f"{mid}: admits outside its complete cooperative grant"
            )
        for p in c.assigned | c.pending:
            if p.partition >= counts.get(p.topic, 0) or p.topic not in c.topics:
                raise RecordRejected(
                    RejectReason.INCONSISTENT, f"{mid}: {p} not subscribed or not there"
                )
            if p in seen:
                raise RecordRejected(RejectReason.INCONSISTENT, f"{p} given to two members")
            seen.add(p)
    heirs: set[TopicPartition] = set()
    for mid, c in a.members.items():
        if not c.inherit:
            continue
        if a.protocol != _COOPERATIVE or a.phase != Phase.COMPLETE or c.inherit & c.assigned:
            raise RecordRejected(
                RejectReason.INCONSISTENT, f"{mid}: inherits outside a complete cooperative one"
            )
        for p in c.inherit:
            if p not in seen or p.topic not in c.topics:
                raise RecordRejected(
                    RejectReason.INCONSISTENT, f"{mid}: inherits {p}, nobody's or not subscribed"
                )
            if p in heirs:
                raise RecordRejected(RejectReason.INCONSISTENT, f"{p} has two heirs")
            heirs.add(p)
