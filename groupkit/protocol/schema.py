"""Control records, the schema: keys, values and their named factories; no bytes.

What each record kind and field means is told in :mod:`groupkit.protocol.records` (the module
everyone imports them from); how they become bytes, and how bytes are checked and become records
again, is :mod:`groupkit.protocol.codec`. The two are split so that a reader of the protocol
(state.py, planner.py, member.py) meets the records without the decoder's bounds, memo and
signing, and a change of wire format touches one module.

Records are built only through the named factories (:func:`member_record`,
:func:`assignment_record`, :func:`covered_member`, :func:`member_tombstone`,
:func:`reset_record`), which check what a writer may write; the codec checks what a reader
accepts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from groupkit.protocol.vocab import Phase, RebalanceProtocol
from groupkit.types import TopicPartition

Protocol_ = Literal["eager", "cooperative"]
#: the plain strings (error messages show them as such); ``RebalanceProtocol`` members are equal
PROTOCOLS: tuple[str, ...] = tuple(p.value for p in RebalanceProtocol)

PHASES: tuple[str, ...] = tuple(p.value for p in Phase)

Partitions = frozenset[TopicPartition]
EMPTY: Partitions = frozenset()


# --------------------------------------------------------------------------- keys and values


class MemberRef(NamedTuple):
    """One process of a member, as assignments name it: member id and incarnation.

    A ``NamedTuple`` so that it is the ``(member_id, incarnation)`` pair it replaces: it
    compares, hashes and unpacks like one, and encodes as a JSON array."""

    member_id: str
    incarnation: str


@dataclass(frozen=True, slots=True)
class MemberKey:
    """Key of a member record or tombstone."""

    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class AssignmentKey:
    """Key of the group's assignment record (one per group)."""

    group: str


@dataclass(frozen=True, slots=True)
class SnapshotKey:
    """Key of the group's snapshot record (one per group: compaction keeps the newest)."""

    group: str


@dataclass(frozen=True, slots=True)
class ResetKey:
    """Key of the group's offset-reset record (one per group: compaction keeps the newest)."""

    group: str


@dataclass(frozen=True, slots=True)
class VerdictKey:
    """Key of a member's newest verdict of one kind (protocol version 2; one per member id and
    kind: compaction keeps the newest, which is all a reader needs, see :class:`VerdictRecord`).
    The kinds have keys of their own so that a process's end, written late by a second judge,
    cannot take the place of the verdict that ended a membership."""

    group: str
    member_id: str
    kind: str = "expired"


@dataclass(frozen=True, slots=True)
class LeaseKey:
    """Key of the group's lease record (protocol version 2; one per group)."""

    group: str


@dataclass(frozen=True, slots=True)
class HeartbeatKey:
    """Key of a member's heartbeat on the group's liveness log (protocol version 2)."""

    group: str
    member_id: str


RecordKey = (
    MemberKey | AssignmentKey | SnapshotKey | ResetKey | VerdictKey | LeaseKey | HeartbeatKey
)


@dataclass(frozen=True, slots=True)
class HeldEcho:
    """A hold on another process of the writer's member id, as the writer's replay has it
    (:attr:`MemberRecord.held`; docs/protocol.md, "Membership and continuation")."""

    #: the incarnation of the process the hold is on
    process: str
    partitions: Partitions
    #: version 1: the log time the hold ends; ``None`` in version 2, where a verdict ends it
    until: int | None
    #: version 2: the liveness run of that process (``Hold.run``)
    run: int = 0


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """A member's whole current state. Build with :func:`member_record`."""

    incarnation: str
    seq: int
    topics: tuple[str, ...]
    owned: Partitions
    owned_generation: int
    acked_generation: int
    joined_at: int | None
    rack: str | None
    capacity: float | None
    client: tuple[tuple[str, str], ...]
    #: the newest generation the member had replayed when it wrote this record; it never
    #: applies an older one, so the log stops reserving older grants for it (state.may_hold)
    seen_generation: int = 0
    #: broker time of the own record the member's session runs from (its fence basis, see
    #: member.py), or ``None``: it has none, or it has lapsed. Decides, for every reader alike,
    #: whether this record continues the membership (state.py); ``joined_at`` and
    #: ``since_generation`` then echo the log's view of the membership as of that record.
    prev_ts: int | None = None
    #: the first generation that covers the membership, echoed with ``prev_ts``
    since_generation: int = 0
    #: the offsets the member committed, synchronously and successfully, for partitions this
    #: record no longer claims, just before writing it: the next owner starts there instead of
    #: looking them up (``GroupState.offset_hints``). Sorted; never a partition in ``owned``.
    #: Absent (empty) in records of members that predate it, and whenever the offsets are not
    #: known (auto-commit off, offsets stored by the user, transactional commits).
    committed: tuple[tuple[TopicPartition, int], ...] = ()
    #: ``group.instance.id`` of a static member (KIP-345), or ``None``: a dynamic member. A
    #: static member's member id *is* its instance id (the seat the group keeps for it), and a
    #: new process with it takes the seat over (docs/protocol.md, "Static seats"). Absent in
    #: records of dynamic members and of members that predate it.
    instance_id: str | None = None
    #: a static member's echo of the incarnation the group knows its seat by (the seat's
    #: first process's: assignments name it, so a takeover changes none), learned from its own
    #: replay like ``joined_at``, so that a reader of the compacted topic covers the seat alike.
    #: ``None``: its own incarnation (a join, or a dynamic member).
    seat: str | None = None
    #: only in a static member's *join* (its first record, no ``prev_ts``): the broker time of
    #: the newest record of its seat's previous process that it had replayed, which it saw
    #: live; ``seat``, ``joined_at`` and ``since_generation`` then echo that seat. The join
    #: takes the seat over if it is appended within a session of it (state.py).
    seat_ts: int | None = None
    #: the offset of the newest reset record (:class:`ResetRecord`) the member has carried out
    #: (-1: none), and the partitions of it whose new offset it committed itself (state.py,
    #: "Offset resets"). Absent in records that predate it.
    reset_at: int = -1
    reset_done: Partitions = frozenset()
    #: the member's last record before its tombstone (a clean leave): the membership ends at this
    #: record, as if the tombstone followed it at once (docs/protocol.md, "Expiry and tombstones":
    #: leaving), so no reader ever plans for the member between the two, which are two produce
    #: requests. Absent (false) in every other record and in records that predate it; a reader that
    #: predates it ignores it and ends the membership at the tombstone, as before.
    leaving: bool = False
    #: the generation in which the member's join was *admitted* (docs/protocol.md, "Admission"),
    #: echoed from its own replay like ``joined_at``, so that a reader of the compacted topic
    #: that never saw the join reserves the admitted partitions alike; 0: none. Absent (0) in
    #: records that predate it.
    admitted_in: int = 0
    #: Protocol version 2 only (docs/protocol-v2.md), where it replaces ``prev_ts``: the ``seq``
    #: of the heartbeat that started the liveness run this membership lives in (rule L1). A
    #: membership lives in one run: a verdict that ends the run ends it. ``None``: a version-1
    #: record.
    run: int | None = None
    #: the holds the writer's replay has on other processes of its member id (a restart's or a
    #: seat takeover's), or on the live membership of another process its record replaces:
    #: a reader of the compacted topic, which never saw the record that started them, builds
    #: them from here (docs/protocol.md, "Membership and continuation"). Absent (empty) in
    #: records that predate it.
    held: tuple[HeldEcho, ...] = ()

    @property
    def version(self) -> int:
        """The protocol version the record was written for."""
        return 1 if self.run is None else 2

    @property
    def first(self) -> bool:
        """Whether it is its process's first member record: ``seq`` 1 in version 1; in version
        2, a start (no ``joined_at``) in the process's first run, which its first heartbeat
        (``seq`` 1) started."""
        return self.seq == 1 if self.run is None else self.run == 1 and self.joined_at is None


@dataclass(frozen=True, slots=True)
class CoveredMember:
    """One member's part of an assignment record."""

    incarnation: str
    topics: tuple[str, ...]
    assigned: Partitions
    revoke: Partitions
    pending: Partitions
    #: of ``assigned``, what the member gives the next newcomer the group *admits* in this
    #: generation, without a leader's turn (docs/protocol.md, "Admission"); only in a complete
    #: cooperative generation. Absent (empty) in records that predate it.
    admit: Partitions = frozenset()
    #: of other members' ``assigned``, what this member *inherits* at once if their owner
    #: leaves the group in this generation, without a leader's turn (state.py,
    #: "Inheritance"); only in a complete cooperative generation. Absent (empty) in records
    #: that predate it.
    inherit: Partitions = frozenset()


@dataclass(frozen=True, slots=True)
class AssignorFallback:
    """Why a generation was planned by the built-in fallback instead of the group's assignor."""

    #: an ``AssignorFailure`` (protocol/assign.py); a reader accepts any string, so a newer
    #: writer's reason is shown rather than rejected
    reason: str
    #: what was wrong, one line, bounded (:data:`MAX_FALLBACK_DETAIL`)
    detail: str
    #: the built-in assignor that planned it
    assignor: str


#: characters of :attr:`AssignorFallback.detail` written (an exception's text can be long)
MAX_FALLBACK_DETAIL = 300


@dataclass(frozen=True, slots=True)
class LoadReplan:
    """The newest generation the leader planned to follow the load (protocol/placement.py).

    Information only, for ``groupkit describe`` and the next leader's interval: the replay
    reads nothing else of it, and a generation is safe or not whatever it says."""

    #: a ``ReplanReason``; a reader accepts any string
    reason: str
    #: the predicted gain, ``1 - after / before`` of the goal (in [0, 1])
    gain: float
    #: partitions the re-plan moved
    moved: int
    #: the generation that started it
    generation: int
    #: the log time it was planned at
    at: int


@dataclass(frozen=True, slots=True)
class AssignmentRecord:
    """One generation of the group. Build with :func:`assignment_record`."""

    generation: int
    leader_id: str
    leader_incarnation: str
    leader_joined_at: int
    protocol: str
    phase: str
    assignor: str
    partition_counts: tuple[tuple[str, int], ...]
    members: Mapping[str, CoveredMember]
    #: set when the built-in fallback planned it (the group's assignor failed); ``None``: not
    fallback: AssignorFallback | None = None
    #: the newest re-plan for the load, carried on by the generations that follow it
    replan: LoadReplan | None = None
    #: A re-assertion's (docs/protocol.md, "Generations": re-assertion): ``(offset, log time)`` of
    #: the record that first wrote this generation. A reader that never saw that record (compacted
    #: away) takes the generation's time and place from it. Not part of the generation: a
    #: re-assertion equals the record it repeats. ``None`` in every first record of a generation.
    origin: tuple[int, int] | None = field(default=None, compare=False)

    def assigned(self, member_id: str) -> Partitions:
        c = self.members.get(member_id)
        return c.assigned if c is not None else EMPTY

    def target(self, member_id: str) -> Partitions:
        """What the member will own once every pending partition is granted."""
        c = self.members.get(member_id)
        return c.assigned | c.pending if c is not None else EMPTY


@dataclass(frozen=True, slots=True)
class SnapshotMember:
    """One membership inside a snapshot: every field of ``state.MemberState``, same order."""

    member_id: str
    incarnation: str
    seq: int
    topics: tuple[str, ...]
    claims: Partitions
    owned_generation: int
    acked_generation: int
    seen_generation: int
    joined_at: int
    last_seen: int
    since_generation: int
    rack: str | None
    capacity: float | None
    client: tuple[tuple[str, str], ...]
    ready: bool
    #: static seats only (docs/protocol.md, "Static seats"); absent in snapshots that predate
    #: them
    process: str | None = None
    instance_id: str | None = None
    process_since: int = 0
    #: docs/protocol.md, "Admission"; absent (0) in snapshots that predate it
    admitted_in: int = 0
    #: protocol version 2 only (``MemberState.run`` and ``.ended``)
    run: int = 0
    ended: bool = False


@dataclass(frozen=True, slots=True)
class SnapshotHold:
    """One ``state.Hold`` inside a snapshot."""

    holder: str
    partitions: Partitions
    until: int
    #: version 2 only (``Hold.run``)
    run: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    """The deterministic ``GroupState`` as of offset ``as_of`` of the writer's replay.

    Built by ``snapshot.to_snapshot`` and restored by ``snapshot.from_snapshot``; the
    rejection counters are not part of it. ``history`` is ``(generation time, assignment)``
    per generation the state still keeps, oldest first.
    """

    group: str
    as_of: int
    log_time: int
    writer_id: str
    writer_incarnation: str
    leader: str | None
    members: tuple[SnapshotMember, ...]
    assignment: AssignmentRecord | None
    assignment_offset: int
    history: tuple[tuple[int, AssignmentRecord], ...]
    holds: tuple[SnapshotHold, ...]
    assignment_clobbered: bool
    #: the group's pending offset reset (``state.ResetState``) and the offset of the newest
    #: reset accepted (docs/protocol.md, "Resets"); absent in snapshots that predate them
    reset: SnapshotReset | None = None
    reset_floor: int = -1
    #: the protocol version of the state (docs/protocol-v2.md), and version 2's verdicts and
    #: lease; absent: version 1
    version: int = 1
    verdicts: tuple[tuple[str, VerdictRecord], ...] = ()
    lease: LeaseRecord | None = None
    #: version 2: ``GroupData.echoed``, as ``(member id, processes)`` in order
    echoed: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class SnapshotReset:
    """One ``state.ResetState`` inside a snapshot."""

    at: int
    reset_id: str
    offsets: tuple[tuple[TopicPartition, int], ...]
    settled: Partitions
    waiting: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class ResetRecord:
    """An operator's offset reset (``groupkit reset-offsets --execute``). Build with
    :func:`reset_record`. Its identity is its offset in the log: members acknowledge it by
    that offset (:attr:`MemberRecord.reset_at`), so every reader agrees on it."""

    #: the issuer's id for it (for logs and the CLI's report; not what members acknowledge)
    reset_id: str
    #: the new committed offset of each partition, sorted
    offsets: tuple[tuple[TopicPartition, int], ...]
    #: who asked (the CLI's host and user), for logs
    requested_by: str = ""
    #: the offset of the control log its issuer had read up to when it wrote it: the replay
    #: refuses a reset based on a log older than the newest reset it knows (a copy of an old
    #: reset record, replayed into the log, must not reset the group again)
    based_on: int = -1


@dataclass(frozen=True, slots=True)
class VerdictRecord:
    """A judge's verdict on one member's liveness (protocol version 2, rule L3). Build with
    :func:`verdict_record`.

    ``expired``: the liveness run ``run`` of the member's process ``process`` has ended, and
    every run of that process before it: the memberships that live in them are over.
    ``process_ended``: only the process's right to process has (a static seat's process:
    rule L7). A verdict is a fact about the liveness log, true whoever writes it and whenever
    it is read, so a reader applies it as it comes. A member's newest verdict of each kind is
    all a reader needs, so one key per member and kind suffices: a membership that starts
    after it names a newer run."""

    process: str
    run: int
    kind: str
    #: who judged (for logs)
    writer: MemberRef
    #: ``expired`` only: the runs ``(process, run)`` of the member's other processes that
    #: earlier verdicts ended and that its newest member record still echoes a hold on. The
    #: verdict restates them, since it takes their key (docs/protocol-v2.md, L3.9)
    ended: tuple[tuple[str, int], ...] = ()

    def ends(self, process: str, run: int) -> bool:
        """Whether this verdict ends run ``run`` of ``process`` (its own run and every earlier
        one, and the same for each run it restates)."""
        if process == self.process:
            return run <= self.run
        return any(p == process and run <= r for p, r in self.ended)


#: the kinds of :class:`VerdictRecord`
VERDICT_KINDS: tuple[str, ...] = ("expired", "process_ended")


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The leader's lease (protocol version 2, rule L4): written every lease interval, it moves
    the main log's clock and tells a judge where in the liveness log to start reading."""

    leader: MemberRef
    #: grows per leader process: a copy of an older one is stale
    lease_seq: int
    #: the liveness-log offset the leader had judged up to
    live_offset: int


@dataclass(frozen=True, slots=True)
class HeartbeatRecord:
    """A member's heartbeat on the liveness log (protocol version 2, rule L1)."""

    incarnation: str
    seq: int
    #: liveness time of the own heartbeat this one's run continues from; ``None``: a new run
    prev_ts: int | None
    #: how long the process may process after its newest confirmed heartbeat (rule L7)
    lease_ms: int
    #: the writer's clock-skew allowance
    skew_ms: int
    acked_generation: int = 0


RecordValue = (
    MemberRecord
    | AssignmentRecord
    | SnapshotRecord
    | ResetRecord
    | VerdictRecord
    | LeaseRecord
    | HeartbeatRecord
    | None
)


# --------------------------------------------------------------------------- factories


def member_record(
    group: str,
    member_id: str,
    *,
    incarnation: str,
    seq: int,
    topics: Iterable[str],
    owned: Iterable[tuple[str, int]] = (),
    owned_generation: int = 0,
    acked_generation: int = 0,
    joined_at: int | None = None,
    rack: str | None = None,
    capacity: float | None = None,
    client: Mapping[str, str] | None = None,
    seen_generation: int | None = None,
    prev_ts: int | None = None,
    since_generation: int = 0,
    committed: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int] | None = None,
    instance_id: str | None = None,
    seat: str | None = None,
    seat_ts: int | None = None,
    reset: tuple[int, Iterable[tuple[str, int]]] | None = None,
    leaving: bool = False,
    admitted_in: int = 0,
    run: int | None = None,
    held: Iterable[HeldEcho] = (),
) -> tuple[MemberKey, MemberRecord]:
    """The key and value of a member record (join, heartbeat, or any change of what it owns).

    ``prev_ts`` (with ``joined_at`` and ``since_generation``): see :class:`MemberRecord`; the
    default, ``None``, is a record that starts a new membership. ``committed``: offsets
    just committed for partitions the record lets go (:attr:`MemberRecord.committed`).
    ``instance_id``: a static member's ``group.instance.id``, which must be its member id;
    ``seat``: the incarnation its seat is known by (:attr:`MemberRecord.seat`); ``seat_ts``:
    in a join that takes a seat over (:attr:`MemberRecord.seat_ts`). ``leaving``: the last
    record of a clean leave (:attr:`MemberRecord.leaving`). ``admitted_in``: the generation
    that admitted the member's join (:attr:`MemberRecord.admitted_in`). ``run``: a version-2
    record (:attr:`MemberRecord.run`), which names no ``prev_ts``. ``held``: the holds on
    other processes of the member id (:attr:`MemberRecord.held`).
    """
    _check_id("group", group)
    _check_id("member_id", member_id)
    _check_id("incarnation", incarnation)
    seen = acked_generation if seen_generation is None else seen_generation
    if seen < acked_generation:
        raise ValueError(f"seen_generation {seen} < acked_generation {acked_generation}")
    if not 0 <= admitted_in <= seen:
        raise ValueError(f"admitted_in {admitted_in} not in [0, seen_generation {seen}]")
    if run is not None and (prev_ts is not None or not 1 <= run <= seq):
        raise ValueError(f"run {run} needs no prev_ts, and 1 <= run <= seq {seq}")
    if prev_ts is not None and joined_at is None:
        # (joined_at may be after prev_ts: brokers' clocks differ; see _check_prev_ts)
        raise ValueError(f"prev_ts {prev_ts} needs joined_at")
    if instance_id is not None and instance_id != member_id:
        raise ValueError(f"instance_id {instance_id!r} must be the member id {member_id!r}")
    if seat is not None and (instance_id is None or not seat):
        raise ValueError("a seat needs an instance_id, and must not be empty")
    if seat_ts is not None and (seat is None or seat == incarnation or joined_at is None
                                or prev_ts is not None or seat_ts < 0):  # fmt: skip
        raise ValueError("seat_ts needs another seat, joined_at and no prev_ts")
    echoes = tuple(sorted(held, key=lambda h: (h.process, h.run)))
    if any(h.process == incarnation or not h.partitions for h in echoes):
        raise ValueError("a held echo names another process and some partition")
    owned_set = _tps(owned)
    hints = tuple(sorted((TopicPartition(t, int(p)), int(o)) for (t, p), o in
                         (committed or {}).items()))  # fmt: skip
    for tp, o in hints:
        if o < 0 or tp in owned_set:
            raise ValueError(f"committed offset {o} of {tp}: negative, or of a partition owned")
    return MemberKey(group, member_id), MemberRecord(
        incarnation=incarnation,
        seq=seq,
        topics=tuple(sorted(set(topics))),
        owned=owned_set,
        owned_generation=owned_generation,
        acked_generation=acked_generation,
        joined_at=joined_at,
        rack=rack,
        capacity=capacity,
        client=tuple(sorted((client or {}).items())),
        seen_generation=seen,
        prev_ts=prev_ts,
        since_generation=since_generation,
        committed=hints,
        instance_id=instance_id,
        seat=None if seat == incarnation else seat,
        seat_ts=seat_ts,
        reset_at=-1 if reset is None else reset[0],
        reset_done=EMPTY if reset is None else _tps(reset[1]),
        leaving=leaving,
        admitted_in=admitted_in,
        run=run,
        held=echoes,
    )


def verdict_record(
    group: str,
    member_id: str,
    *,
    process: str,
    run: int,
    writer: MemberRef | tuple[str, str],
    kind: str = "expired",
    ended: Iterable[tuple[str, int]] = (),
) -> tuple[VerdictKey, VerdictRecord]:
    """The key and value of a verdict on run ``run`` of ``member_id``'s process ``process``;
    ``ended``: the runs of other processes it restates (``VerdictRecord.ended``)."""
    _check_id("group", group)
    _check_id("member_id", member_id)
    _check_id("process", process)
    if kind not in VERDICT_KINDS:
        raise ValueError(f"kind must be one of {VERDICT_KINDS}, got {kind!r}")
    if run < 1:
        raise ValueError(f"run must be >= 1, got {run}")
    w = MemberRef(*writer)
    _check_id("writer", w.member_id)
    _check_id("writer incarnation", w.incarnation)
    restated = tuple(sorted(set(ended)))
    for p, r in restated:
        _check_id("ended process", p)
        if p == process or r < 1 or kind != "expired":
            raise ValueError(f"ended: {p!r} run {r} is this verdict's process, < 1, or not "
                             "on an expired verdict")  # fmt: skip
    if len({p for p, _ in restated}) != len(restated):
        raise ValueError("ended: a process named twice")
    return VerdictKey(group, member_id, kind), VerdictRecord(process, run, kind, w, restated)


def lease_record(
    group: str, *, leader: MemberRef | tuple[str, str], lease_seq: int, live_offset: int = -1
) -> tuple[LeaseKey, LeaseRecord]:
    """The key and value of the leader's lease."""
    _check_id("group", group)
    ref = MemberRef(*leader)
    _check_id("leader", ref.member_id)
    _check_id("leader incarnation", ref.incarnation)
    if lease_seq < 1 or live_offset < -1:
        raise ValueError(f"lease_seq {lease_seq} must be >= 1, live_offset {live_offset} >= -1")
    return LeaseKey(group), LeaseRecord(ref, lease_seq, live_offset)


def heartbeat_record(
    group: str,
    member_id: str,
    *,
    incarnation: str,
    seq: int,
    prev_ts: int | None,
    lease_ms: int,
    skew_ms: int,
    acked_generation: int = 0,
) -> tuple[HeartbeatKey, HeartbeatRecord]:
    """The key and value of a heartbeat for the liveness log."""
    _check_id("group", group)
    _check_id("member_id", member_id)
    _check_id("incarnation", incarnation)
    if seq < 1 or (prev_ts is not None and prev_ts < 0) or acked_generation < 0:
        raise ValueError("seq must be >= 1; prev_ts and acked_generation >= 0")
    if not 0 <= skew_ms < lease_ms:
        raise ValueError(f"skew_ms {skew_ms} must be in [0, lease_ms {lease_ms})")
    return HeartbeatKey(group, member_id), HeartbeatRecord(
        incarnation, seq, prev_ts, lease_ms, skew_ms, acked_generation
    )


def member_tombstone(group: str, member_id: str) -> tuple[MemberKey, None]:
    """The key and (``None``) value of a clean leave."""
    _check_id("group", group)
    _check_id("member_id", member_id)
    return MemberKey(group, member_id), None


def assignment_record(
    group: str,
    *,
    generation: int,
    leader_id: str,
    leader_incarnation: str,
    leader_joined_at: int,
    protocol: str,
    phase: str,
    assignor: str,
    partition_counts: Mapping[str, int],
    members: Mapping[str, CoveredMember],
    fallback: AssignorFallback | None = None,
    replan: LoadReplan | None = None,
) -> tuple[AssignmentKey, AssignmentRecord]:
    """The key and value of the assignment record of one generation (``fallback``: see
    :class:`AssignorFallback`; ``replan``: :class:`LoadReplan`)."""
    _check_id("group", group)
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    return AssignmentKey(group), AssignmentRecord(
        generation=generation,
        leader_id=leader_id,
        leader_incarnation=leader_incarnation,
        leader_joined_at=leader_joined_at,
        protocol=protocol,
        phase=phase,
        assignor=assignor,
        partition_counts=tuple(sorted(partition_counts.items())),
        members=dict(sorted(members.items())),
        fallback=None
        if fallback is None
        else AssignorFallback(
            _nonempty("fallback reason", fallback.reason),
            fallback.detail[:MAX_FALLBACK_DETAIL],
            _nonempty("fallback assignor", fallback.assignor),
        ),
        replan=replan,
    )


def covered_member(
    incarnation: str,
    topics: Iterable[str],
    assigned: Iterable[tuple[str, int]] = (),
    revoke: Iterable[tuple[str, int]] = (),
    pending: Iterable[tuple[str, int]] = (),
    admit: Iterable[tuple[str, int]] = (),
    inherit: Iterable[tuple[str, int]] = (),
) -> CoveredMember:
    """One member's entry of an assignment record."""
    return CoveredMember(
        incarnation,
        tuple(sorted(set(topics))),
        _tps(assigned),
        _tps(revoke),
        _tps(pending),
        _tps(admit),
        _tps(inherit),
    )


def _tps(items: Iterable[tuple[str, int]]) -> Partitions:
    return frozenset(TopicPartition(t, int(p)) for t, p in items)


def _nonempty(what: str, value: str) -> str:
    _check_id(what, value)
    return value


def _check_id(what: str, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")


# --------------------------------------------------------------------------- offset resets
# (``groupkit reset-offsets`` on a running group; the rules are in docs/protocol.md,
# "Offset resets")

#: characters of :attr:`ResetRecord.requested_by` and ``reset_id`` a record may carry
MAX_RESET_TEXT = 200


def reset_record(
    group: str,
    reset_id: str,
    offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
    requested_by: str = "",
    based_on: int = -1,
) -> tuple[ResetKey, ResetRecord]:
    """The key and value of an offset reset: the new committed offset of each partition."""
    _check_id("group", group)
    _check_id("reset_id", reset_id)
    if not offsets:
        raise ValueError("a reset names at least one partition")
    out = tuple(sorted((TopicPartition(t, int(p)), int(o)) for (t, p), o in offsets.items()))
    for tp, o in out:
        if o < 0 or tp.partition < 0:
            raise ValueError(f"reset of {tp} to {o}: negative")
    return ResetKey(group), ResetRecord(
        reset_id[:MAX_RESET_TEXT], out, requested_by[:MAX_RESET_TEXT], based_on
    )
