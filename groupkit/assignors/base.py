"""The assignor interface, input validation and the registry of assignors by name.

An assignor is a stateless object with a deterministic ``assign``: the same input, in any
dict or set order, gives the same output. Everything it needs comes in as arguments.

What an assignor receives (``Assignor.assign``):

- ``partitions_per_topic``: ``{topic: partition count}``;
- ``members``: ``{member id: MemberSubscription}``, with each member's topics, what it owns
  and from which generation, its rack (``client.rack``) and its capacity;
- ``lags``: ``{TopicPartition: lag}``, given to assignors with ``uses_lag``;
- ``racks``: ``{topic: [racks of partition 0's replicas, of partition 1's, ...]}``, the racks
  of the brokers holding each partition's replicas (KIP-881), given to assignors with
  ``uses_racks`` by keyword, and only while some member has a rack. An assignor written
  against the three arguments above is never passed it.

A subclass implements ``_assign``; a rack-aware one also ``_assign_racks``, which ``assign``
calls instead when the racks can matter (some member has a rack, some partition has racks).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence

from groupkit.errors import ConfigError, UnknownAssignorError
from groupkit.log import get_logger
from groupkit.types import Assignment, MemberSubscription, PartitionLoad, TopicPartition

_log = get_logger("groupkit.assignors")

Lags = Mapping[TopicPartition, int]
#: per topic, per partition index, the racks of the brokers holding the partition's replicas
Racks = Mapping[str, Sequence[Iterable[str]]]
#: ``Racks`` as assignors receive it: partitions listed to the topic's count, racks as sets
#: (a partition whose racks are unknown has the empty set)
ReplicaRacks = dict[str, list[frozenset[str]]]


class Assignor(ABC):
    """Maps partitions to members. Subclasses implement ``_assign`` on validated input."""

    #: the registry name, e.g. ``"range"``
    name: str = ""
    #: whether the assignor reads ``lags`` (the runtime fetches them only for these)
    uses_lag: bool = False
    #: whether the assignor reads ``racks`` (the runtime fetches the replicas' racks, and
    #: passes ``racks=``, only for these, and only while some member has a rack)
    uses_racks: bool = False

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        members: Mapping[str, MemberSubscription],
        lags: Lags | None = None,
        racks: Racks | None = None,
    ) -> Assignment:
        """Return ``{member_id: sorted partitions}`` with every member present."""
        counts = validate_input(partitions_per_topic, members, lags)
        ordered = dict(sorted(members.items()))
        replica_racks = validate_racks(racks, counts) if racks else {}
        if (
            any(any(r) for r in replica_racks.values())
            and any(s.rack for s in ordered.values())
            and _racks_current(type(self))
        ):
            result = self._assign_racks(counts, ordered, dict(lags or {}), replica_racks)
        else:
            result = self._assign(counts, ordered, dict(lags or {}))
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

    def _assign_racks(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],
        lags: dict[TopicPartition, int],
        racks: ReplicaRacks,
    ) -> Mapping[str, list[TopicPartition]]:
        """``_assign`` knowing each partition's replica racks; called instead of it when some
        member has a rack and some partition has racks. By default the racks are ignored."""
        return self._assign(partitions_per_topic, members, lags)


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


def _owner(cls: type, name: str) -> type:
    return next(c for c in cls.__mro__ if name in c.__dict__)


def _racks_current(cls: type) -> bool:
    """Whether ``cls._assign_racks`` belongs with its ``_assign``: a user's subclass of a
    rack-aware assignor that overrides ``_assign`` alone must be asked through ``_assign``."""
    return issubclass(_owner(cls, "_assign_racks"), _owner(cls, "_assign"))


def reads_racks(assignor: object) -> bool:
    """Whether ``assignor`` is to be given the replicas' racks: it sets ``uses_racks``, its
    ``_assign_racks`` is not overridden by an ``_assign`` below it, and an ``assign`` of its
    own takes ``racks``. So a user's assignor written without racks is called as ever."""
    if not getattr(assignor, "uses_racks", False):
        return False
    cls = type(assignor)
    if isinstance(assignor, Assignor) and not _racks_current(cls):
        return False
    if isinstance(assignor, Assignor) and _owner(cls, "assign") is Assignor:
        return True
    try:
        return "racks" in inspect.signature(assignor.assign).parameters  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return False


def validate_racks(racks: Racks, counts: Mapping[str, int]) -> ReplicaRacks:
    """``racks`` for the topics of ``counts``, one set per partition (unknown ones empty).

    A rack that is not a non-empty string, or more partitions than the topic has, is a
    ``ConfigError``.
    """
    out: ReplicaRacks = {}
    for topic, n in counts.items():
        given = racks.get(topic)
        if given is None:
            continue
        if isinstance(given, str | bytes) or len(given) > n:
            raise ConfigError(
                f"racks of topic {topic!r} must list at most its {n} partitions, got {given!r}"
            )
        sets: list[frozenset[str]] = []
        for p, replicas in enumerate(given):
            names = () if isinstance(replicas, str | bytes) else tuple(replicas)
            if (not names and replicas) or not all(isinstance(r, str) and r for r in names):
                raise ConfigError(
                    f"racks of {topic}-{p} must be a list of non-empty strings, got {replicas!r}"
                )
            sets.append(frozenset(names))
        sets.extend([frozenset()] * (n - len(sets)))
        out[topic] = sets
    return out


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
