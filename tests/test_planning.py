"""The leader's plan runner (runtime/planning.py): which plans are made inline, on the control
thread, and which on a worker thread.

A built-in assignor's plan for a small group is made at once (two GIL hand-overs fewer on the
path of every rebalance); a user's assignor, a subclass of a built-in one included, and a
large group's plan always run on a worker, within the budget.
"""

from __future__ import annotations

import threading

import pytest

from groupkit.assignors import CooperativeStickyAssignor, get_assignor
from groupkit.protocol.assign import AssignRequest, basis_of, run_assignor
from groupkit.runtime.planning import INLINE_MAX_PAIRS, PlanRunner
from groupkit.types import MemberSubscription


def request(assignor: str, partitions: int, members: int) -> AssignRequest:
    subs = {f"m{i:03d}": MemberSubscription(("t",)) for i in range(members)}
    counts = {"t": partitions}
    basis = basis_of(assignor, {m: ("inc", s.topics) for m, s in subs.items()}, counts)
    return AssignRequest(assignor, counts, subs, None, basis)


class Mine(CooperativeStickyAssignor):
    """A user's assignor that reuses a built-in one: it is user code all the same."""

    name = "mine"


def plan_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("test-plan"))


@pytest.mark.parametrize(
    "name", ["range", "roundrobin", "sticky", "cooperative-sticky", "fair", "lag", "balanced"]
)
def test_a_built_in_assignors_small_plan_is_made_at_once_without_a_thread(name: str) -> None:
    runner = PlanRunner(get_assignor(name), timeout_ms=1_000, name="test-plan")
    req = request(name, 48, 11)
    assert runner.inline(req)
    before = threading.active_count()
    runner.start(req, now_ms=0)
    assert threading.active_count() == before
    outcome = runner.poll(now_ms=0)  # no wait: it is made already
    assert outcome is not None and not outcome.failed
    assert outcome == run_assignor(get_assignor(name), req)
    assert not runner.busy


def test_a_large_plan_runs_on_a_worker() -> None:
    runner = PlanRunner(get_assignor("balanced"), timeout_ms=10_000, name="test-plan")
    req = request("balanced", INLINE_MAX_PAIRS // 10 + 1, 10)
    assert not runner.inline(req)
    runner.start(req, now_ms=0)
    runner.wait(10)
    outcome = runner.poll(now_ms=0)
    assert outcome is not None and not outcome.failed
    assert sum(map(len, outcome.assignment.values())) == INLINE_MAX_PAIRS // 10 + 1


def test_a_users_assignor_runs_on_a_worker_even_when_it_reuses_a_built_in_one() -> None:
    runner = PlanRunner(Mine(), timeout_ms=1_000, name="test-plan")
    req = request("mine", 4, 2)
    assert not runner.inline(req)
    entered, release = threading.Event(), threading.Event()

    class Blocking(Mine):
        def _assign(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            entered.set()
            release.wait(5)
            return super()._assign(*args, **kwargs)

    runner = PlanRunner(Blocking(), timeout_ms=1_000, name="test-plan")
    runner.start(req, now_ms=0)
    # start() returned while the assignor still runs: it is on another thread
    assert entered.wait(5)
    assert plan_threads() == 1
    assert runner.poll(now_ms=0) is None
    release.set()
    runner.wait(5)
    outcome = runner.poll(now_ms=0)
    assert outcome is not None and not outcome.failed
