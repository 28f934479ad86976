"""How often a live group's committed offsets are committed again: from the broker's retention.

The data consumer commits as a simple consumer, so the broker deletes a committed offset
``offsets.retention.minutes`` after its last commit, however alive the group is. The keep-alive
(runtime/data_consumer.py, "Keep-alive") commits an idle owned partition's offset again every
interval; that interval is only safe below the retention, which a user rarely knows (7 days
since Kafka 2.0, 1 day before, and clusters that began before still carry a day). So, unless
``groupkit.offsets.keepalive.interval.ms`` is set, the member reads the retention once:

1. ``GroupConsumer()`` sends a ``DescribeConfigs`` of one broker (the lowest id of the
   metadata the admin client connected with) and goes on without waiting: the request is in
   flight while the control topic is checked and the member catches up, never on the path of
   the constructor, ``subscribe`` or ``poll``. A broker's description gives its effective
   value (``offsets.retention.minutes`` is a static broker setting, the same on every broker
   of a healthy cluster; the group's coordinator is one of them).
2. The ``poll`` thread looks at the answer as it serves the group (at least every 10 ms) and,
   once there is one, moves the keep-alive to :func:`keepalive_interval_ms` of it. Partitions
   assigned before keep their clocks: only their next due time moves closer. The read is
   bounded (10 s: :data:`READ_TIMEOUT_S`); the earliest a keep-alive can be due is a whole
   interval after an assignment (15 s at the shortest retention Kafka allows), later than that.
3. A refused read (no ``DescribeConfigs`` on the cluster), a failed one (a broker down) or an
   answer without the setting leaves the keep-alive at the setting's default, and says so once
   (``offsets.retention_unknown``, a warning naming the interval assumed and why).
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource

from groupkit.log import get_logger

_log = get_logger("groupkit.consumer")

#: The fraction of the retention the keep-alive runs at. A committed offset is at most about
#: two intervals old while its group lives: its previous owner kept it alive until a hand-off,
#: and the next owner's clock starts at the assignment. A quarter keeps that age at half the
#: retention, leaving the other half for retried keep-alives (every tenth of an interval), a
#: ``poll`` that comes late and the broker's expiry check; the cost is one commit per idle
#: partition per interval (every 15 s at Kafka's shortest retention, a minute).
RETENTION_FRACTION = 4
#: Never more often than this, whatever the retention says.
MIN_INTERVAL_MS = 5_000
#: How long the read may take before the default is assumed: librdkafka's request timeout;
#: the ``poll`` thread stops waiting :data:`_GRACE_S` later, should no answer ever come.
READ_TIMEOUT_S = 8.0
_GRACE_S = 2.0

_SETTING = "offsets.retention.minutes"


def keepalive_interval_ms(retention_ms: int | None, default_ms: int) -> int:
    """The keep-alive interval for a broker retention of ``retention_ms`` (``None``: unknown):
    a :data:`RETENTION_FRACTION` of it, never above ``default_ms`` (so a cluster at Kafka's
    default of 7 days keeps the setting's default, 1 day) nor below :data:`MIN_INTERVAL_MS`;
    ``default_ms`` when the retention is unknown."""
    if retention_ms is None or retention_ms <= 0:
        return default_ms
    return max(MIN_INTERVAL_MS, min(default_ms, retention_ms // RETENTION_FRACTION))


class RetentionRead:
    """One read of the broker's ``offsets.retention.minutes``, sent at construction and looked
    at by :meth:`interval_ms` on the ``poll`` thread (see the module docstring)."""

    def __init__(self, admin: AdminClient, broker_ids: list[int], default_ms: int, group: str,
                 timeout: float = READ_TIMEOUT_S) -> None:  # fmt: skip
        self._default_ms = default_ms
        self._group = group
        self._timeout = timeout
        self._deadline = time.monotonic() + timeout + _GRACE_S
        self._future: Future[Any] | None = None
        self._failure: str | None = None
        if not broker_ids:
            self._failure = "the cluster's metadata named no broker"
            return
        resource = ConfigResource(ConfigResource.Type.BROKER, str(min(broker_ids)))
        try:
            self._future = admin.describe_configs([resource], request_timeout=timeout)[resource]
        except Exception as e:  # (refused locally: the admin client is closing)
            self._failure = str(e)

    def interval_ms(self, now: float) -> int | None:
        """The keep-alive interval once the read has an outcome, else ``None``; a failed read
        is logged here (once: the caller stops asking once it has an answer)."""
        retention_ms: int | None = None
        failure = self._failure
        f = self._future
        if failure is None and f is not None:
            if not f.done():
                if now < self._deadline:
                    return None
                failure = f"no answer within {self._timeout + _GRACE_S:g} s"
            else:
                retention_ms, failure = _retention_ms(f)
        interval = keepalive_interval_ms(retention_ms, self._default_ms)
        if failure is not None:
            _log.warning(
                "offsets.retention_unknown",
                group=self._group,
                assumed_keepalive_interval_ms=interval,
                reason=failure,
                advice=f"set groupkit.offsets.keepalive.interval.ms below a quarter of the "
                f"broker's {_SETTING}, or allow this principal DescribeConfigs on the cluster "
                f"where the read was refused",
            )
        else:
            _log.debug(
                "offsets.retention",
                group=self._group,
                retention_ms=retention_ms,
                keepalive_interval_ms=interval,
            )
        return interval


def _retention_ms(f: Future[Any]) -> tuple[int | None, str | None]:
    """The retention of a finished ``describe_configs`` future, or why there is none."""
    try:
        configs = f.result(timeout=0)
    except Exception as e:  # KafkaException: refused, timed out, broker gone
        return None, f"cannot read the broker's {_SETTING}: {e}"
    entry = configs.get(_SETTING)
    try:
        minutes = int(entry.value) if entry is not None and entry.value is not None else None
    except ValueError:
        minutes = None
    if minutes is None or minutes <= 0:
        return None, f"the broker's answer holds no usable {_SETTING} ({entry!r})"
    return minutes * 60_000, None
