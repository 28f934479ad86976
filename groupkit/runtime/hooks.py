"""Hooks at the runtime's edge: metrics, logs and telemetry listen; the core only returns facts.

A ``GroupObserver`` gets told what happened, never asked what to do. The app builds it and
passes it in (``GroupConsumer(config, observers=[...])``, as franz-go's hooks are plugged into a
client): the consumer first hands it the member it observes (``attached``, once, before any other
hook), so nothing below the edge ever names an observer. Its other methods are called on the
control thread (``record_*``, ``rebalance_*``, ``turn``) or on the poll thread (``handoff``,
``consumed``); they must be quick and must not raise (an observer that raises is logged and
skipped, never allowed to break the group).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from groupkit.log import get_logger
from groupkit.protocol import GroupState
from groupkit.protocol.node import RebalanceSummary
from groupkit.protocol.records import Partitions
from groupkit.protocol.vocab import AssignorFailure
from groupkit.runtime.probe import MemberProbe
from groupkit.types import TopicPartition

_log = get_logger("groupkit.hooks")


class GroupObserver:
    """Base class with every hook a no-op; override what you need."""

    def attached(self, probe: MemberProbe) -> None:
        """The consumer this observer was given to is built: ``probe`` is its read-only view
        (runtime/probe.py). Called once, from ``GroupConsumer()``, before any other hook."""

    def record_read(self, state: GroupState, kind: str) -> None:
        """A control record was replayed; ``kind`` is the replay's result kind."""

    def record_rejected(self, state: GroupState, reason: str, detail: str) -> None:
        """A control record was rejected (already counted in ``state.rejections``)."""

    def record_written(self, kind: str, ok: bool) -> None:
        """A record of ``kind`` ("member" | "assignment") was acknowledged or failed."""

    def turn(self, state: GroupState, member_id: str, now_ms: int) -> None:
        """Once per control-loop turn, after replay and planning (cheap checks only)."""

    def lags_fetched(self, lags: Mapping[TopicPartition, int]) -> None:
        """The leader fetched lags for a lag-aware assignor."""

    def generation_written(
        self, state: GroupState, generation: int, phase: str, reason: str
    ) -> None:
        """The leader wrote an assignment record."""

    def rebalance_done(self, summary: RebalanceSummary) -> None:
        """A rebalance ended (on the leader)."""

    def assignor_failed(self, assignor: str, reason: AssignorFailure, detail: str) -> None:
        """The leader's assignor failed (``raised``, ``invalid``, ``timeout``); the fallback
        planned instead. Once per generation and reason (protocol/assign.py)."""

    def load_replanned(self, reason: str, gain: float, moved: int) -> None:
        """The leader wrote a re-plan for the load (protocol/placement.py): its reason
        (``overload`` or ``drain``), predicted gain and partitions moved."""

    def handoff(
        self,
        member_id: str,
        generation: int,
        assigned: Partitions,
        revoked: Partitions,
        lost: Partitions,
        seconds: float,
    ) -> None:
        """The poll thread carried out a hand-off (callbacks and commits included)."""

    def consumed(self, member_id: str, counts: Sequence[tuple[tuple[str, int], int]]) -> None:
        """``poll``/``consume`` handed records to the app: (partition, count) pairs."""


class Observers(GroupObserver):
    """Fans every hook out to several observers, isolating their failures."""

    def __init__(self, observers: Iterable[GroupObserver] = ()) -> None:
        #: the observers, in the order they were given (an empty list: nobody listens, which
        #: the poll loop reads without a call)
        self.registered: list[GroupObserver] = list(observers)

    def add(self, observer: GroupObserver) -> None:
        self.registered.append(observer)

    def __bool__(self) -> bool:
        return bool(self.registered)

    def _each(self, name: str, *args: object) -> None:
        for o in self.registered:
            try:
                getattr(o, name)(*args)
            except Exception:
                _log.exception("observer.failed", observer=type(o).__name__, hook=name)

    def record_read(self, state: GroupState, kind: str) -> None:
        self._each("record_read", state, kind)

    def record_rejected(self, state: GroupState, reason: str, detail: str) -> None:
        self._each("record_rejected", state, reason, detail)

    def record_written(self, kind: str, ok: bool) -> None:
        self._each("record_written", kind, ok)

    def turn(self, state: GroupState, member_id: str, now_ms: int) -> None:
        self._each("turn", state, member_id, now_ms)

    def lags_fetched(self, lags: Mapping[TopicPartition, int]) -> None:
        self._each("lags_fetched", lags)

    def generation_written(
        self, state: GroupState, generation: int, phase: str, reason: str
    ) -> None:
        self._each("generation_written", state, generation, phase, reason)

    def rebalance_done(self, summary: RebalanceSummary) -> None:
        self._each("rebalance_done", summary)

    def assignor_failed(self, assignor: str, reason: AssignorFailure, detail: str) -> None:
        self._each("assignor_failed", assignor, reason, detail)

    def load_replanned(self, reason: str, gain: float, moved: int) -> None:
        self._each("load_replanned", reason, gain, moved)

    def handoff(
        self,
        member_id: str,
        generation: int,
        assigned: Partitions,
        revoked: Partitions,
        lost: Partitions,
        seconds: float,
    ) -> None:
        self._each("handoff", member_id, generation, assigned, revoked, lost, seconds)

    def consumed(self, member_id: str, counts: Sequence[tuple[tuple[str, int], int]]) -> None:
        self._each("consumed", member_id, counts)
