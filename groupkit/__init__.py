"""groupkit: consumer groups for confluent-kafka, coordinated over a compacted control topic.

The public surface is what this module exports: the consumer, the observer base class, the
value types, the assignor registry and every exception (the tree is in ``groupkit.errors``).
Importing groupkit starts no thread and configures no logging. The asyncio flavour is its own
public module: ``from groupkit.aio import AIOGroupConsumer``.
"""

from groupkit.assignors import Assignor, assignor_names, get_assignor, register_assignor
from groupkit.errors import (
    AssignmentOwnedError,
    BrokerError,
    ConfigError,
    ConsumerClosedError,
    ControlLoopError,
    ControlTopicError,
    DevBrokerError,
    FencedError,
    GroupkitError,
    InputError,
    MalformedTelemetry,
    PipelineError,
    ProtocolError,
    RecordRejected,
    ResetFailed,
    UnknownAssignorError,
)
from groupkit.runtime.consumer import GroupConsumer
from groupkit.runtime.hooks import GroupObserver
from groupkit.types import MemberSubscription, TopicPartition

__version__ = "0.1.0"

__all__ = [
    "AssignmentOwnedError",
    "Assignor",
    "BrokerError",
    "ConfigError",
    "ConsumerClosedError",
    "ControlLoopError",
    "ControlTopicError",
    "DevBrokerError",
    "FencedError",
    "GroupConsumer",
    "GroupObserver",
    "GroupkitError",
    "InputError",
    "MalformedTelemetry",
    "MemberSubscription",
    "PipelineError",
    "ProtocolError",
    "RecordRejected",
    "ResetFailed",
    "TopicPartition",
    "UnknownAssignorError",
    "__version__",
    "assignor_names",
    "get_assignor",
    "register_assignor",
]
