"""The one exception hierarchy of groupkit.

::

    GroupkitError                      base of everything groupkit raises on purpose
    ├── ConfigError(ValueError)        bad configuration or argument; fix the input, not retriable
    │   └── UnknownAssignorError(KeyError-like message)  assignor name not registered
    ├── RecordRejected                 a control record that must not be applied (bad bytes,
    │                                  unknown version, wrong field, not from the leader, stale
    │                                  generation). Never fatal: the reader logs, counts, skips.
    ├── BrokerError                    the broker could not be reached or refused; retriable,
    │                                  the object stays usable
    ├── ControlTopicError(ConfigError) the control topic exists with the wrong settings
    ├── ProtocolError                  an event the member state table does not allow: a bug in
    │                                  the caller, not retriable
    ├── FencedError                    the member has lost its partitions (session expired by its
    │                                  own clock, or it is not the owner): commit refused;
    │                                  the consumer stays usable and rejoins
    └── DevBrokerError                 the local development broker could not start or stop;
                                       the message says what to install or where the log is
"""

from __future__ import annotations


class GroupkitError(Exception):
    """Base class of every error groupkit raises on purpose."""


class ConfigError(GroupkitError, ValueError):
    """A configuration value or argument is wrong. Not retriable: fix the input."""


class UnknownAssignorError(ConfigError):
    """No assignor is registered under the given name."""


class RecordRejected(GroupkitError):
    """A control record was rejected; ``reason`` is a short stable label for metrics."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class BrokerError(GroupkitError):
    """The broker could not be reached or refused a request. Retriable."""


class ControlTopicError(ConfigError):
    """The control topic exists with settings groupkit cannot work with."""


class ProtocolError(GroupkitError):
    """An event the member's state table does not allow: a bug in the caller, not retriable."""


class FencedError(GroupkitError):
    """The member may not act on these partitions (not owned, or its session lapsed)."""


class DevBrokerError(GroupkitError):
    """The local development broker failed; the message says how to fix it."""
