"""The protocol's closed vocabularies, as ``StrEnum``\\ s: every word the core writes or answers.

Why one leaf module and not one enum per owner: each word crosses layers. The rebalance protocol
and the phase are written by the planner, checked by the decoder (records.py) and the replay
(state.py); rejection reasons are raised by the decoder and the replay alike and become metric
label values (metrics.py), as assignor failures do; member states, loss reasons and replay kinds
are read by the runtime. Every module imports the words from here (``Phase.REVOKE``,
``MemberPhase.LEFT``, ``DecisionAction.WRITE`` ...), none re-exports them under another name,
and this module imports nothing of groupkit, so no import circle can form around a word.

Each member *is* its string (``StrEnum``): it compares and hashes equal to it, and
``json.dumps``, ``str()``, f-strings and prometheus label values give the bare string. So the
control-record wire format, metric label values and every JSON/CLI output are what they were
with plain strings; a value decoded from the wire may be either the member or the plain string.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum, unique

__all__ = [
    "AssignorFailure",
    "DecisionAction",
    "DecisionReason",
    "LossReason",
    "MemberEvent",
    "MemberPhase",
    "Phase",
    "RebalanceProtocol",
    "RejectReason",
    "ReplayKind",
]


@unique
class RebalanceProtocol(StrEnum):
    """How a generation moves partitions (``groupkit.rebalance.protocol``; assignment records)."""

    EAGER = "eager"
    """Every covered member gives up everything first (a ``revoke`` generation)."""
    COOPERATIVE = "cooperative"
    """Only what moves is revoked; the rest stays put (``adjust_cooperative``)."""


@unique
class Phase(StrEnum):
    """An assignment record's phase (state.ASSIGNMENT_TRANSITIONS says which may follow which)."""

    REVOKE = "revoke"
    """Eager phase 1: every covered member gives up everything it owns."""
    PARTIAL = "partial"
    """Some target partitions are still ``pending``: a follow-up generation will grant them."""
    COMPLETE = "complete"
    """The assignment is the whole target plan."""


@unique
class MemberPhase(StrEnum):
    """A member's state in its own state machine (MEMBER_TRANSITIONS)."""

    UNJOINED = "unjoined"
    JOINING = "joining"
    ACTIVE = "active"
    FENCED = "fenced"
    LEAVING = "leaving"
    LEFT = "left"


@unique
class MemberEvent(StrEnum):
    """What moves a member from one state to the next (MEMBER_TRANSITIONS): an event
    its table does not list for the current state is a ``ProtocolError``."""

    SEND_RECORD = "send_record"
    """The member writes its record (a join, a heartbeat, a change of what it owns)."""
    COVERED = "covered"
    """The current assignment covers the member, and its session holds."""
    UNCOVERED = "uncovered"
    """A new assignment no longer covers it."""
    FENCED = "fenced"
    """It lost what it owned (a ``LossReason``)."""
    LEAVE = "leave"
    """``Member.leave`` or ``Member.park`` was called."""
    LEFT = "left"
    """It wrote its last record (and, unless parked, its tombstone)."""


@unique
class LossReason(StrEnum):
    """Why a member lost what it owned (``Actions.events``; logged as ``member.event``)."""

    SESSION_LAPSED = "session_lapsed"
    """Its own clock says the log may have expired it (member.py, self-fencing step 4)."""
    REPLACED = "replaced"
    """The log has another incarnation under its id, or its tombstone."""
    EXPIRED = "expired"
    """The log expired it."""
    MEMBERSHIP_RESTARTED = "membership_restarted"
    """The log saw it return after an expiry: a new membership, which owns nothing."""
    INSTANCE_FENCED = "instance_fenced"
    """A newer process with its ``group.instance.id`` took its static seat (KIP-345)."""


@unique
class DecisionAction(StrEnum):
    """What the leader's planner answers (``planner.Decision.action``)."""

    NONE = "none"
    """Nothing to do: stable, or not the leader."""
    WAIT = "wait"
    """A rebalance is under way; waiting for members (revocations, acknowledgements)."""
    WRITE = "write"
    """Produce ``record``."""
    NEED_LAGS = "need_lags"
    """Call again with ``lags`` for ``lag_topics`` (lag-aware assignor)."""
    NEED_PLAN = "need_plan"
    """Run ``request`` (off the heartbeat path), call again with its outcome."""


@unique
class DecisionReason(StrEnum):
    """Why the planner decided what it did (``planner.Decision.reason``; logged, never written)."""

    # nothing to plan
    NO_LEADER = "no_leader"
    NO_ACTIVE_MEMBERS = "no_active_members"
    STABLE = "stable"
    # a rebalance under way
    AWAITING_REVOCATION = "awaiting_revocation"
    AWAITING_ACKNOWLEDGEMENT = "awaiting_acknowledgement"
    AWAITING_ADMISSION = "awaiting_admission"
    """A newcomer is taking its share from its givers (docs/protocol.md, "Admission"): the plan that
    covers it waits until it owns it (``Planner.admission_under_way``)."""
    REVOCATION_ACKNOWLEDGED = "revocation_acknowledged"
    REASSERT = "reassert"
    """The current assignment again, under this leader (a leader that restarted)."""
    REBALANCE = "rebalance"
    # why the current assignment no longer fits (Planner.rebalance_reason)
    FIRST_ASSIGNMENT = "first_assignment"
    MEMBERSHIP_CHANGED = "membership_changed"
    SUBSCRIPTION_CHANGED = "subscription_changed"
    PARTITIONS_LOST = "partitions_lost"
    PARTITION_COUNT_CHANGED = "partition_count_changed"
    PROTOCOL_CHANGED = "protocol_changed"
    LOAD = "load"
    """The group is stable, and moving a few partitions follows the load (placement.py)."""


@unique
class AssignorFailure(StrEnum):
    """Why the built-in fallback planned a generation instead of the group's assignor
    (protocol/assign.py; ``AssignorFallback.reason``, the ``reason`` label of
    ``groupkit_assignor_failures_total``)."""

    RAISED = "raised"
    """The assignor raised."""
    INVALID = "invalid"
    """Its answer failed the invariant checker (``assignors.invariants.check_complete``)."""
    TIMEOUT = "timeout"
    """It took longer than ``groupkit.assignor.timeout.ms``."""


@unique
class ReplayKind(StrEnum):
    """What one ``GroupState.replay`` did with a record (``state.Replayed.kind``)."""

    MEMBER = "member"
    LEAVE = "leave"
    ASSIGNMENT = "assignment"
    REASSERT = "reassert"
    """An assignment record that restates the current generation (no new generation)."""
    SNAPSHOT = "snapshot"
    RESET = "reset"
    VERDICT = "verdict"
    """A judge's verdict on a member's liveness (protocol version 2)."""
    LEASE = "lease"
    """The leader's lease, which moves the main log's clock (protocol version 2)."""
    OTHER_GROUP = "other_group"
    REJECTED = "rejected"


@unique
class RejectReason(StrEnum):
    """Why a control record was rejected (``RecordRejected.reason``, ``GroupState.rejections``).

    The one list: the decoder's and the replay's reasons, and the ``reason`` label values of
    ``groupkit_control_records_rejected_total`` (metrics.py starts a series for each).
    """

    # the decoder (records.py)
    BAD_BYTES = "bad_bytes"
    UNKNOWN_VERSION = "unknown_version"
    UNKNOWN_KIND = "unknown_kind"
    MISSING_FIELD = "missing_field"
    WRONG_TYPE = "wrong_type"
    BAD_VALUE = "bad_value"
    TOO_LARGE = "too_large"
    UNSIGNED = "unsigned"
    BAD_SIGNATURE = "bad_signature"
    # the replay (state.py)
    OFFSET_REGRESSED = "offset_regressed"
    STALE_MEMBER_RECORD = "stale_member_record"
    ACKED_REGRESSED = "acked_regressed"
    FUTURE_GENERATION = "future_generation"
    UNOWNED_CLAIM = "unowned_claim"
    STALE_GENERATION = "stale_generation"
    BAD_PHASE = "bad_phase"
    NOT_LEADER = "not_leader"
    UNSAFE_GRANT = "unsafe_grant"
    INCONSISTENT = "inconsistent"
    FENCED_INSTANCE = "fenced_instance"
    STALE_RESET = "stale_reset"
    RESET_OF_EMPTY_GROUP = "reset_of_empty_group"
    OTHER_VERSION = "other_version"
    """A record of the other protocol version than the reader's (docs/protocol-v2.md)."""


# ------------------------------------------------------------------ rebalance outcomes
# (a block of its own, with its own export: each vocabulary here is added independently)

__all__ += ["RebalanceOutcome"]


@unique
class RebalanceOutcome(StrEnum):
    """How a rebalance ended, as its leader saw it (``node.RebalanceSummary.outcome``): the
    ``outcome`` label values of ``groupkit_rebalances_total`` (metrics.py starts a series for
    each)."""

    #: the planner found the group stable again
    COMPLETED = "completed"
    #: a new change of the group started another rebalance before this one completed
    SUPERSEDED = "superseded"
    #: the leader lost the lead mid-rebalance
    ABANDONED = "abandoned"


# ------------------------------------------------------------------ load re-plans
# (protocol/placement.py: the leader's decision to move partitions because of the load)

__all__ += ["ReplanReason", "ReplanSkip"]


@unique
class ReplanReason(StrEnum):
    """Why the leader moved partitions for the load (``placement.Replan.reason``): written in
    the assignment record's ``replan``, shown by ``groupkit describe``, and the ``reason``
    label values of ``groupkit_load_replans_total``."""

    OVERLOAD = "overload"
    """A member receives more records than it processes: its lag grows without end. The plan
    lowers the largest member's predicted delay (placement.py)."""
    DRAIN = "drain"
    """Every member keeps up, but one would not drain its lag within the horizon. The plan
    lowers the largest member's predicted delay."""
    ASSIGNOR = "assignor"
    """The group's assignor asked for it (``Assignor.replan``); the gain is groupkit's forecast
    of its plan."""


@unique
class ReplanSkip(StrEnum):
    """Why the leader did not move partitions for the load (``placement.LoadDecision.skip``)."""

    OFF = "off"
    """``groupkit.load.rebalance.interval.ms`` is 0, or the protocol is eager."""
    IN_FLIGHT = "in_flight"
    """A rebalance is under way: a re-plan waits until the group is stable."""
    TOO_SOON = "too_soon"
    """The last re-plan was less than the interval ago (log time)."""
    NO_LOAD = "no_load"
    """Nothing measured yet (or nothing assigned)."""
    NO_PRESSURE = "no_pressure"
    """No member's predicted delay reaches ``min_delay_ms``."""
    SMALL_GAIN = "small_gain"
    """No few moves improve the forecast by ``min_gain``."""
    NO_CHANGE = "no_change"
    """The group's assignor answered the current assignment (``Assignor.replan``)."""
    INVALID = "invalid"
    """The group's assignor raised, or answered an assignment that is not one of what is owned
    now, or that moves more partitions than the cap."""


# ------------------------------------------------------------------ the member's state table

__all__ += ["MEMBER_TRANSITIONS"]

#: A member's states (:class:`MemberPhase`) and the events (:class:`MemberEvent`) that move
#: them (``member.Member``); an event the table does not list for the state is a
#: ``ProtocolError``:
#:
#: - ``unjoined``: created, no record sent. Action: send the join record. Exits: ``send_record``
#:   → ``joining``; ``leave`` → ``left``.
#: - ``joining``: record sent, not covered by an assignment. Action: heartbeat; own nothing.
#:   Exits: ``covered`` → ``active``; ``fenced`` → ``fenced``; ``leave`` → ``leaving``.
#: - ``active``: covered by the current assignment. Action: apply its diff, heartbeat.
#:   Exits: ``covered`` (a new generation) → ``active``; ``uncovered`` → ``joining``;
#:   ``fenced`` → ``fenced``; ``leave`` → ``leaving``.
#: - ``fenced``: its session lapsed by its own clock, or the log replaced or expired it; all it
#:   owned is lost. Action: send a fresh record. Exits: ``send_record`` → ``joining``;
#:   ``leave`` → ``leaving``.
#: - ``leaving``: ``Member.leave`` was called. Action: revoke everything (commit), send a
#:   record owning nothing, then the tombstone. Exits: ``left`` → ``left``; ``fenced`` →
#:   ``leaving`` (what it owned is lost instead of revoked, and it still says goodbye).
#: - ``left``: terminal. No event is valid.
MEMBER_TRANSITIONS: Mapping[tuple[MemberPhase, MemberEvent], MemberPhase] = {
    (MemberPhase.UNJOINED, MemberEvent.SEND_RECORD): MemberPhase.JOINING,
    (MemberPhase.UNJOINED, MemberEvent.LEAVE): MemberPhase.LEFT,
    (MemberPhase.JOINING, MemberEvent.SEND_RECORD): MemberPhase.JOINING,
    (MemberPhase.JOINING, MemberEvent.COVERED): MemberPhase.ACTIVE,
    (MemberPhase.JOINING, MemberEvent.UNCOVERED): MemberPhase.JOINING,
    (MemberPhase.JOINING, MemberEvent.FENCED): MemberPhase.FENCED,
    (MemberPhase.JOINING, MemberEvent.LEAVE): MemberPhase.LEAVING,
    (MemberPhase.ACTIVE, MemberEvent.SEND_RECORD): MemberPhase.ACTIVE,
    (MemberPhase.ACTIVE, MemberEvent.COVERED): MemberPhase.ACTIVE,
    (MemberPhase.ACTIVE, MemberEvent.UNCOVERED): MemberPhase.JOINING,
    (MemberPhase.ACTIVE, MemberEvent.FENCED): MemberPhase.FENCED,
    (MemberPhase.ACTIVE, MemberEvent.LEAVE): MemberPhase.LEAVING,
    (MemberPhase.FENCED, MemberEvent.FENCED): MemberPhase.FENCED,
    (MemberPhase.FENCED, MemberEvent.SEND_RECORD): MemberPhase.JOINING,
    (MemberPhase.FENCED, MemberEvent.LEAVE): MemberPhase.LEAVING,
    (MemberPhase.LEAVING, MemberEvent.SEND_RECORD): MemberPhase.LEAVING,
    (MemberPhase.LEAVING, MemberEvent.FENCED): MemberPhase.LEAVING,
    (MemberPhase.LEAVING, MemberEvent.LEFT): MemberPhase.LEFT,
}
