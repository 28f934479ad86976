"""Assignors from the Kafka literature, pure and deterministic, found by name.

``get_assignor(name).assign(partitions_per_topic, members, lags=None)`` returns
``{member_id: [TopicPartition, ...]}`` with every member present and lists sorted.
"""

from groupkit.assignors.base import (
    Assignor,
    assignor_names,
    get_assignor,
    register_assignor,
)
from groupkit.assignors.range import RangeAssignor
from groupkit.types import MemberSubscription, TopicPartition

register_assignor(RangeAssignor.name, RangeAssignor)

__all__ = [
    "Assignor",
    "MemberSubscription",
    "RangeAssignor",
    "TopicPartition",
    "assignor_names",
    "get_assignor",
    "register_assignor",
]
