"""The one exception hierarchy of groupkit: every class groupkit raises on purpose is here.

::

    GroupkitError                    base of everything groupkit raises on purpose
    ├── ConfigError(ValueError)      a bad setting or argument
    │   ├── UnknownAssignorError     no assignor registered under that name
    │   ├── ControlTopicError        the control topic is missing or has the wrong settings
    │   ├── AssignmentOwnedError     ``assign``/``unassign``/``incremental_*`` on a GroupConsumer
    │   └── InputError               bad input to the ``groupkit`` command line (exit code 2)
    ├── BrokerError                  the cluster could not be reached or refused a request
    ├── FencedError                  the member may not act on these partitions
    ├── ConsumerClosedError          a closed ``GroupConsumer`` was used
    ├── ControlLoopError             the consumer's control loop failed (``cause`` says why)
    ├── ProtocolError                an event the member's state table does not allow
    ├── RecordRejected               a control record that must not be applied
    ├── MalformedTelemetry(ValueError)  a telemetry record that does not follow the schema
    ├── PipelineError                the replay job cannot run (no Spark, unreadable input)
    ├── ResetFailed                  an offset reset was not carried out by the group in time
    └── DevBrokerError               the local development broker could not start or stop

Each class says two things a caller needs to decide what to do: whether the same call may
succeed if retried (*retriable*), and whether the object that raised it can still be used
(*usable*). ``ConfigError`` and ``MalformedTelemetry`` are also ``ValueError``: code that
catches ``ValueError`` keeps working.

This module imports nothing from groupkit, so every layer (the pure ones too) can raise from it.
"""

from __future__ import annotations

__all__ = [
    "AssignmentOwnedError",
    "BrokerError",
    "ConfigError",
    "ConsumerClosedError",
    "ControlLoopError",
    "ControlTopicError",
    "DevBrokerError",
    "FencedError",
    "GroupkitError",
    "InputError",
    "MalformedTelemetry",
    "PipelineError",
    "ProtocolError",
    "RecordRejected",
    "ResetFailed",
    "UnknownAssignorError",
]


class GroupkitError(Exception):
    """Base class of every error groupkit raises on purpose.

    Catch it to handle "anything groupkit refused"; anything else that escapes groupkit (a
    ``KafkaException`` of the client, say) is not one of these.
    """


# ----------------------------------------------------------------------- bad input


class ConfigError(GroupkitError, ValueError):
    """A configuration value or argument is wrong.

    Not retriable: the same input fails again; fix it. The object that refused it (a consumer
    that refused ``subscribe([])``, an assignor given a negative lag) stays usable. Raised
    from a constructor, there is no object.
    """


class UnknownAssignorError(ConfigError):
    """No assignor is registered under the given name; the message lists the known names.

    Not retriable until the name is registered (``register_assignor``); the registry stays
    usable.
    """


class ControlTopicError(ConfigError):
    """The control topic does not exist, or exists with settings groupkit cannot work with
    (not compacted, not stamped with ``LogAppendTime``).

    Not retriable: an operator must fix or recreate the topic. Nothing is left usable: the
    ``GroupConsumer`` constructor (or ``describe``) that raised it returned no object.
    """


class AssignmentOwnedError(ConfigError):
    """``assign``, ``unassign``, ``incremental_assign`` or ``incremental_unassign`` was called
    on a ``GroupConsumer``: groupkit owns the assignment (the group grants each member its
    partitions), so the application cannot set it.

    Not retriable: the same call fails again (use ``subscribe``, ``pause``/``resume`` and
    ``seek``). The consumer stays usable and its assignment is unchanged.
    """


class InputError(ConfigError):
    """Bad input on stdin or in the arguments of the ``groupkit`` command line.

    Not retriable; the command prints one line and exits with code 2 (a process, not an
    object: nothing stays usable).
    """


# ----------------------------------------------------------------------- the cluster


class BrokerError(GroupkitError):
    """The cluster could not be reached, or refused or timed out a request.

    Retriable: the cause is outside the process (a broker down, a partition moving). The
    object stays usable; retry the call, or let the control loop retry it on its next turn.
    """


class ResetFailed(GroupkitError):
    """``groupkit reset-offsets --execute`` wrote its reset, but the group did not carry it out
    in time (the command's exit code 1): the message says who did not acknowledge, or that a
    newer reset superseded it.

    Retriable: the reset record stays in the control log, and the members still carry it out
    as they catch up; ``groupkit describe`` and the committed offsets show when they have. Not
    raised by an object: there is nothing left to be usable (the command has ended).
    """


# ----------------------------------------------------------------------- the consumer


class FencedError(GroupkitError):
    """The member may not act on these partitions: it does not own them, or its session
    lapsed by its own clock, so another member may own them already.

    Not retriable for these partitions (the commit is refused so that no two members commit
    the same partition). The consumer stays usable: it rejoins by itself, and its next
    assignment arrives through ``on_assign``.
    """


class ConsumerClosedError(GroupkitError):
    """The ``GroupConsumer`` was used after ``close()``.

    Not retriable and not usable: a closed consumer stays closed; create a new one.
    """


class ControlLoopError(GroupkitError):
    """The consumer's control loop failed, so it cannot take part in the group any more.

    ``cause`` is the exception that ended the loop (also ``__cause__``). Its partitions were
    given up (``on_lost``, no commit). Not retriable and not usable: every later ``poll``
    raises it again; ``close()`` the consumer and create a new one.
    """

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"the control loop failed: {cause}")
        self.cause = cause


class ProtocolError(GroupkitError):
    """An event the member's state table does not allow in its current state.

    A bug in the caller, not a condition of the cluster: not retriable. The member stays
    usable in the state it had (the event was not applied), but the caller's logic is wrong.
    """


# ----------------------------------------------------------------------- records


class RecordRejected(GroupkitError):
    """A control record must not be applied (bad bytes, unknown version, a wrong field, not
    from the leader, a stale generation); ``reason`` is a short stable label for metrics.

    Never fatal and not retriable: the reader logs it, counts it and skips the record; the
    group state stays usable and unchanged by it.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class MalformedTelemetry(GroupkitError, ValueError):
    """A telemetry record does not follow the schema; ``reason`` is a short category.

    Not retriable (the bytes stay bad). Readers skip the record and count it; the reader
    stays usable.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


# ----------------------------------------------------------------------- tools


class PipelineError(GroupkitError):
    """The replay job cannot run: no PySpark, no Kafka connector, unreadable input.

    Not retriable as it stands; the message says what to install or fix. The job did not
    run, so there is nothing left usable; run it again once fixed.
    """


class DevBrokerError(GroupkitError):
    """The local development broker could not start or stop.

    Not retriable as it stands; the message says what to install or where its log is. The
    ``LocalBroker`` stays usable: ``stop()`` cleans up what did start.
    """
