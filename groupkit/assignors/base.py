"""The assignor interface, input validation and the registry of assignors by name.

An assignor is a stateless object with a deterministic ``assign``: the same input, in any
dict or set order, gives the same output. Everything it needs comes in as arguments.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

from groupkit.errors import ConfigError, UnknownAssignorError
from groupkit.log import get_logger
from groupkit.types import Assignment, MemberSubscription, PartitionLoad, TopicPartition

_log = get_logger("groupkit.assignors")

Lags = Mapping[TopicPartition, int]


class Assignor(ABC):
    """Maps partitions to members. Subclasses implement ``_assign`` on validated input."""

    #: the registry name, e.g. ``"range"``
    name: str = ""
    #: whether the assignor reads ``lags`` (the runtime fetches them only for these)
    uses_lag: bool = False

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        members: Mapping[str, MemberSubscription],
        lags: Lags | None = None,
    ) -> Assignment:
        """Return ``{member_id: sorted partitions}`` with every member present."""
        counts = validate_input(partitions_per_topic, members, lags)
        result = self._assign(counts, dict(sorted(members.items())), dict(lags or {}))
        out: Assignment = {m: sorted(result.get(m, ())) for m in sorted(members)}
        return out

    def replan(
        self,
        members: Mapping[str, MemberSubscription],
        loads: Mapping[TopicPartition, PartitionLoad],
    ) -> Assignment | None:
        """Take part in the leader's re-plans for the load (``groupkit.load.rebalance.
        interval.ms``).

        Called on the leader's load worker (never on its heartbeat path), only while the group
        is stable and the interval has passed since the last re-plan. It receives:

        - ``members``: each member's topics, the partitions it owns now (``owned``, of the
          current generation) and its declared ``capacity`` (records/s, or ``None``);
        - ``loads``: what the leader measured of each partition (:class:`PartitionLoad`).

        It answers ``None`` (this default) to leave the decision to groupkit's own rule
        (``groupkit.protocol.placement.decide``); every member's ``owned`` to say "no change";
        or the assignment to move to, every partition of ``owned`` once, each to a member
        subscribed to its topic. That is written as a cooperative generation if it moves at
        most the policy's cap (2 partitions), and otherwise ignored and logged.
        """
        return None

    @abstractmethod
    def _assign(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],
        lags: dict[TopicPartition, int],
    ) -> Mapping[str, list[TopicPartition]]:
        """Assign on validated input: only topics with partitions, members sorted by id."""


def validate_input(
    partitions_per_topic: Mapping[str, int],
    members: Mapping[str, MemberSubscription],
    lags: Lags | None,
) -> dict[str, int]:
    """Check the input and return the partition counts of topics that can be assigned.

    Negative counts or lags are a ``ConfigError`` (a ``ValueError``). A topic some member
    subscribes to but that has no partitions (unknown, or zero) is skipped and logged, as
    Kafka's assignors do.
    """
    counts: dict[str, int] = {}
    for topic, n in sorted(partitions_per_topic.items()):
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ConfigError(f"partition count of topic {topic!r} must be an int >= 0, got {n!r}")
        if n > 0:
            counts[topic] = n
    values = (lags or {}).values()
    # The usual input, plain ints >= 0, is checked in C (a million lags in milliseconds); the
    # loop below then only runs to name the bad entry.
    plain = not values or (set(map(type, values)) == {int} and min(values) >= 0)
    for tp, lag in () if plain else (lags or {}).items():
        if not isinstance(lag, int) or isinstance(lag, bool) or lag < 0:
            raise ConfigError(f"lag of {tp[0]}-{tp[1]} must be an int >= 0, got {lag!r}")
    missing = sorted({t for s in members.values() for t in s.topics} - counts.keys())
    if missing:
        _log.warning("assignor.topics_skipped", topics=missing, reason="no partitions")
    return counts


AssignorFactory = Callable[[], Assignor]
_REGISTRY: dict[str, AssignorFactory] = {}


def register_assignor(name: str, factory: AssignorFactory) -> None:
    """Register ``factory`` (a class or callable returning an ``Assignor``) under ``name``.

    Users add their own assignors this way, the idea of Kafka's ``ConsumerPartitionAssignor``.
    Registering a name again replaces it.
    """
    if not name:
        raise ConfigError("assignor name must not be empty")
    _REGISTRY[name] = factory


def unregister_assignor(name: str) -> None:
    """Remove ``name`` from the registry (a no-op if it is not there)."""
    _REGISTRY.pop(name, None)


def get_assignor(name: str) -> Assignor:
    """Return a new assignor registered under ``name``; unknown names list the known ones."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise UnknownAssignorError(f"unknown assignor {name!r}; known: {known}") from None
    return factory()


def assignor_names() -> list[str]:
    """The registered assignor names, sorted."""
    return sorted(_REGISTRY)
