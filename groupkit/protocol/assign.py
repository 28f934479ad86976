"""The leader's assignor, contained: what it is asked, its answer checked, and the fallback.

A user's assignor must cost a log line and a metric, never the group. So the planner
never writes what an assignor answers until it has passed the one invariant checker the
assignors are tested with (:func:`groupkit.assignors.invariants.check_complete`): every partition
of a subscribed topic exactly once, only to a member subscribed to its topic, every member
present, no unknown member or partition. An assignor that raises, answers something that fails
the check, or takes longer than its budget (the runtime's ``groupkit.assignor.timeout.ms``; the
runtime measures, this module only names the outcome) is treated alike: the plan is made by
:data:`FALLBACK_ASSIGNOR` instead, which is given what every member owns now, so it keeps the
current owners (moving only what the counts need evened out) and places the rest. The
outcome says why (:class:`~groupkit.protocol.records.AssignorFallback`, its reason an
:class:`~groupkit.protocol.vocab.AssignorFailure`), and the record the
planner writes carries it, so every member and ``groupkit describe`` see it.

Why this cannot loop: the fallback's plan is valid by construction (a built-in assignor, checked
by the same tests), so what is written passes replay (``consistent.check_consistent``); and a
generation planned on a fallback covers the group like any other, so the planner calls the group
stable and does not plan again until the group changes.

The assignor may run where it cannot delay the leader's heartbeats (a worker thread: runtime/
planning.py): the planner hands out an :class:`AssignRequest` and takes back a
:class:`PlanOutcome`. ``AssignRequest.basis`` is the membership the plan is for (ids,
incarnations, topics, partition counts); the planner uses an outcome only while the group
still has that basis, and asks again otherwise (a plan that finishes after the membership
changed is discarded). What members own is not part of the basis: it is only advice for
stickiness, and the planner filters every plan by what is held at the moment it writes
(``adjust_cooperative``).

Pure: no clock, no threads, no logging.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from groupkit.assignors import Assignor, get_assignor
from groupkit.assignors.invariants import check_complete
from groupkit.protocol.records import MAX_FALLBACK_DETAIL, AssignorFallback
from groupkit.protocol.vocab import AssignorFailure
from groupkit.types import MemberSubscription, TopicPartition

#: the built-in assignor that plans when the group's own fails
FALLBACK_ASSIGNOR = "cooperative-sticky"

#: violations quoted in an ``invalid`` outcome's detail
_SHOWN = 3

#: ``(assignor, ((member id, incarnation, topics), ...), ((topic, count), ...))``
Basis = tuple[str, tuple[tuple[str, str, tuple[str, ...]], ...], tuple[tuple[str, int], ...]]


@dataclass(frozen=True, slots=True)
class AssignRequest:
    """One run of the assignor: its arguments, and the membership they describe."""

    #: the group's assignor (its registry name)
    assignor: str
    partitions_per_topic: Mapping[str, int]
    members: Mapping[str, MemberSubscription]
    lags: Mapping[TopicPartition, int] | None
    #: what the plan is for (module docstring); an outcome is used only while it still holds
    basis: Basis


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    """A checked plan for ``basis``: the assignor's, or the fallback's and why."""

    basis: Basis
    #: every member of the request, with the partitions it is to own
    assignment: Mapping[str, frozenset[TopicPartition]]
    #: ``None``: the group's assignor planned it
    fallback: AssignorFallback | None = None

    @property
    def failed(self) -> bool:
        return self.fallback is not None


def run_assignor(assignor: Assignor, request: AssignRequest) -> PlanOutcome:
    """Run ``assignor`` on ``request`` and check its answer; on any failure, the fallback.

    Never raises for anything the assignor does (an ``Exception`` it raises, or any answer);
    what it cannot contain is a process-level exit (``BaseException``), which the caller's
    thread does (runtime/planning.py).
    """
    try:
        raw = assignor.assign(request.partitions_per_topic, request.members, request.lags)
    except Exception as e:
        return fallback_outcome(request, AssignorFailure.RAISED, f"{type(e).__name__}: {e}")
    answer, problems = check_answer(request, raw)
    if problems:
        more = f" (and {len(problems) - _SHOWN} more)" if len(problems) > _SHOWN else ""
        return fallback_outcome(
            request, AssignorFailure.INVALID, "; ".join(problems[:_SHOWN]) + more
        )
    return PlanOutcome(request.basis, answer)


def fallback_outcome(request: AssignRequest, reason: AssignorFailure, detail: str) -> PlanOutcome:
    """The built-in plan for ``request``: :data:`FALLBACK_ASSIGNOR` with what members own.

    Checked like any other (a fallback that failed would be a bug of groupkit: it raises).
    """
    plan = get_assignor(FALLBACK_ASSIGNOR).assign(
        request.partitions_per_topic, request.members, request.lags
    )
    answer, problems = check_answer(request, plan)
    if problems:
        raise AssertionError(f"the fallback assignor's plan is invalid: {problems[:_SHOWN]}")
    why = AssignorFallback(reason, " ".join(detail.split())[:MAX_FALLBACK_DETAIL],
                           FALLBACK_ASSIGNOR)  # fmt: skip
    return PlanOutcome(request.basis, answer, why)


def check_answer(
    request: AssignRequest, raw: Any
) -> tuple[dict[str, frozenset[TopicPartition]], list[str]]:
    """``(assignment, violations)``: the answer as the planner uses it, and what is wrong.

    The shape is checked here (a mapping of member ids to ``(topic, partition)`` pairs, with
    a ``str`` topic and an ``int`` partition); the contents by ``check_complete``. The order
    of a member's partitions does not matter to the planner, so it is not a violation.
    """
    if not isinstance(raw, Mapping):
        return {}, [f"the answer is a {type(raw).__name__}, not a mapping of member ids"]
    lists: dict[str, list[TopicPartition]] = {}
    problems: list[str] = []
    for mid, tps in raw.items():
        if not isinstance(mid, str):
            problems.append(f"member id {mid!r} is not a string")
            continue
        if isinstance(tps, str | bytes) or not hasattr(tps, "__iter__"):
            problems.append(f"{mid}: partitions are a {type(tps).__name__}, not a list")
            continue
        out: list[TopicPartition] = []
        for tp in tps:
            if not (isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str)
                    and type(tp[1]) is int):  # fmt: skip
                problems.append(f"{mid}: {tp!r} is not a (topic, partition) pair")
                continue
            out.append(TopicPartition(tp[0], tp[1]))
        lists[mid] = sorted(out)
    if problems:
        return {}, problems
    problems = check_complete(request.partitions_per_topic, request.members, lists)
    return {m: frozenset(tps) for m, tps in lists.items()}, problems


def basis_of(
    assignor: str,
    members: Mapping[str, tuple[str, tuple[str, ...]]],
    partitions_per_topic: Mapping[str, int],
) -> Basis:
    """The basis of a plan for ``members`` (``{id: (incarnation, topics)}``) and counts."""
    return (
        assignor,
        tuple((m, inc, tuple(topics)) for m, (inc, topics) in sorted(members.items())),
        tuple(sorted(partitions_per_topic.items())),
    )
