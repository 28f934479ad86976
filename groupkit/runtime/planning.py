"""The leader's assignor, run off the control thread and within its budget.

The control thread writes the member's heartbeats and replays the log, so it must never wait
for an assignor: ``balanced`` takes seconds on a large group, and a user's assignor can take
any time at all. :class:`PlanRunner` runs each plan the node asks for
(:class:`~groupkit.protocol.assign.AssignRequest`) on a worker thread; the control thread polls
it every turn and hands the outcome to the node (protocol/node.py decides what to do with it;
this module only waits).

A thread, not a process: a process would have to receive the user's assignor (registered by
name in this process, possibly a closure), every member's subscription and the result by
pickling, and forking a process that runs librdkafka's threads is unsafe. A pure-Python
assignor holds the GIL, but CPython hands it over every ``sys.getswitchinterval()`` (5 ms), so
the control thread still runs its turns; ``bench/assignor_heartbeats.py`` measures the
leader's heartbeat gaps while it plans.

But for a built-in assignor's plan for a small group (:data:`INLINE_MAX_PAIRS`), made at once on
the control thread: it takes well under a few ms, less than the two hand-overs of the GIL the
worker would cost on the path of every rebalance.

Budget (``groupkit.assignor.timeout.ms``): a plan not made in time is answered by the fallback
(reason ``timeout``), itself computed on a worker thread. A thread cannot be stopped, so the
late one runs on, and is abandoned: its answer is never used. While it still runs, any new
plan is answered by the fallback at once (``timeout``: the assignor is still busy), so a
stuck assignor never piles up threads.

Racks: the runtime looks up the replicas' racks (runtime/racks.py) and hands them to
:meth:`PlanRunner.start`; an assignor that reads them (``uses_racks``) is run with them bound
(:class:`WithRacks`), so the plan's request and its checks stay what they are without racks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from groupkit.assignors import (
    Assignor,
    BalancedAssignor,
    CooperativeStickyAssignor,
    FairAssignor,
    LagAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    TopicPartition,
)
from groupkit.assignors.base import Racks, reads_racks
from groupkit.protocol.assign import AssignRequest, PlanOutcome, fallback_outcome, run_assignor
from groupkit.protocol.vocab import AssignorFailure
from groupkit.types import Assignment


class _Job:
    """One plan on a daemon thread, or made at once on the caller's (``inline``)."""

    def __init__(self, fn: Callable[[], PlanOutcome], request: AssignRequest, now_ms: int,
                 name: str, budgeted: bool, inline: bool = False) -> None:  # fmt: skip
        self.request = request
        #: the user's assignor runs in it (the fallback's job has no budget: it is built in)
        self.budgeted = budgeted
        self.started_ms = now_ms
        self.outcome: PlanOutcome | None = None
        self.done = threading.Event()
        if inline:
            self._run(fn)
            return
        self.thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], PlanOutcome]) -> None:
        try:
            self.outcome = fn()
        except BaseException as e:  # SystemExit and the like from the user's code
            self.outcome = fallback_outcome(
                self.request, AssignorFailure.RAISED, f"{type(e).__name__}: {e}"
            )
        finally:
            self.done.set()


#: The built-in assignors, whose plans for a small group are made on the control thread.
BUILT_IN: frozenset[type[Assignor]] = frozenset({
    RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor, FairAssignor,
    LagAssignor, BalancedAssignor,
})  # fmt: skip
#: A built-in assignor's plan for at most this many partitions x members is made inline, on
#: the control thread, without a worker (the slowest, ``balanced``, took 2.5 ms for 100
#: partitions x 20 members here, the others under 0.2 ms). Handing a plan to a thread and
#: back costs two GIL hand-overs, each up to ``sys.getswitchinterval()`` (5 ms) while the
#: ``poll`` thread is busy, on the path of every rebalance: a tenth of a tuned join at 10
#: members. A user's assignor (a subclass of a built-in one too) always runs on a
#: worker: it can take any time.
INLINE_MAX_PAIRS = 2_000


class PlanRunner:
    """Runs the leader's plans, one at a time, each within ``timeout_ms``."""

    def __init__(self, assignor: Assignor, timeout_ms: int, name: str = "groupkit-plan") -> None:
        self.assignor = assignor
        self.timeout_ms = timeout_ms
        self.name = name
        #: the plan whose outcome is awaited
        self._job: _Job | None = None
        #: the assignor's job abandoned past its budget, while it still runs
        self._late: _Job | None = None

    @property
    def busy(self) -> bool:
        """A plan is awaited."""
        return self._job is not None

    def start(
        self,
        request: AssignRequest,
        now_ms: int,
        racks: Racks | None = None,
    ) -> None:
        """Start making ``request``'s plan (the previous one's outcome must have been taken);
        ``racks``: the partitions' replica racks, for an assignor that reads them."""
        late = self._late
        if late is not None and late.done.is_set():
            self._late = late = None
        if late is not None:
            detail = (f"{self.assignor.name} is still running a plan started "
                      f"{now_ms - late.started_ms} ms ago")  # fmt: skip
            self._job = self._fallback(request, detail, now_ms)
        else:
            assignor = self.assignor
            if racks and reads_racks(assignor):
                assignor = WithRacks(assignor, racks)
            self._job = _Job(lambda: run_assignor(assignor, request), request, now_ms,
                             self.name, budgeted=True, inline=self.inline(request))  # fmt: skip

    def inline(self, request: AssignRequest) -> bool:
        """Whether ``request``'s plan is made at once, on the caller's thread: a built-in
        assignor's, for a small group (:data:`INLINE_MAX_PAIRS`)."""
        if type(self.assignor) not in BUILT_IN:
            return False
        partitions = sum(request.partitions_per_topic.values())
        return partitions * max(1, len(request.members)) <= INLINE_MAX_PAIRS

    def _fallback(self, request: AssignRequest, detail: str, now_ms: int) -> _Job:
        return _Job(lambda: fallback_outcome(request, AssignorFailure.TIMEOUT, detail), request,
                    now_ms, f"{self.name}-fallback", budgeted=False)  # fmt: skip

    def poll(self, now_ms: int) -> PlanOutcome | None:
        """The outcome of the awaited plan once it is made (or its budget is spent: then the
        fallback's, once made); ``None`` meanwhile."""
        job = self._job
        if job is None:
            return None
        if job.done.is_set():
            self._job = None
            return job.outcome
        if job.budgeted and now_ms - job.started_ms > self.timeout_ms:
            self._late = job
            detail = f"no plan from {self.assignor.name} within {self.timeout_ms} ms"
            self._job = self._fallback(job.request, detail, now_ms)
        return None

    def wait(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the awaited plan (a quick assignor's plan is then written
        in the same turn, without waiting for the next)."""
        job = self._job
        if job is not None:
            job.done.wait(seconds)


class WithRacks(Assignor):
    """``inner``, given the replica racks at every ``assign`` (the protocol layer's request
    carries no racks: they are the runtime's lookup, like the partition counts)."""

    def __init__(self, inner: Assignor, racks: Racks) -> None:
        self.inner = inner
        self.racks = racks
        self.name = inner.name
        self.uses_lag = inner.uses_lag
        self.uses_racks = True

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        members: Mapping[str, MemberSubscription],
        lags: Mapping[TopicPartition, int] | None = None,
        racks: Racks | None = None,
    ) -> Assignment:
        return self.inner.assign(partitions_per_topic, members, lags, racks=racks or self.racks)

    def _assign(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],
        lags: dict[TopicPartition, int],
    ) -> Mapping[str, list[TopicPartition]]:
        return self.assign(partitions_per_topic, members, lags)
