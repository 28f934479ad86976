"""Assignors from the Kafka literature, pure and deterministic, found by name.

``get_assignor(name).assign(partitions_per_topic, members, lags=None)`` returns
``{member_id: [TopicPartition, ...]}`` with every member present and lists sorted.
"""

from groupkit.assignors.balanced import BalancedAssignor
from groupkit.assignors.base import (
    Assignor,
    assignor_names,
    get_assignor,
    register_assignor,
    unregister_assignor,
)
from groupkit.assignors.cooperative_sticky import CooperativeStickyAssignor
from groupkit.assignors.fair import FairAssignor
from groupkit.assignors.lag import LagAssignor
from groupkit.assignors.range import RangeAssignor
from groupkit.assignors.roundrobin import RoundRobinAssignor
from groupkit.assignors.sticky import StickyAssignor
from groupkit.types import MemberSubscription, TopicPartition

for _cls in (
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    CooperativeStickyAssignor,
    FairAssignor,
    LagAssignor,
    BalancedAssignor,
):
    register_assignor(_cls.name, _cls)
del _cls

__all__ = [
    "Assignor",
    "BalancedAssignor",
    "CooperativeStickyAssignor",
    "FairAssignor",
    "LagAssignor",
    "MemberSubscription",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "TopicPartition",
    "assignor_names",
    "get_assignor",
    "register_assignor",
    "unregister_assignor",
]
