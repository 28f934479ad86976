"""A read-only view of one member, for observers at the edge (metrics, diagnostics).

``GroupConsumer.probe`` is a :class:`MemberProbe`. It answers what an observer may ask of a
member without reaching into the consumer: a few config values, the subscribed topics, the
partitions the data consumer has assigned, the member's standing in the group (under the
coordinator's lock, through ``Coordinator.status``), and the sources of lag: the group's
end and committed offsets (through the consumer's AdminClient and a long-lived reader of the
committed offsets the probe keeps until the consumer closes: :func:`~groupkit.runtime.lag.
read_offsets`), the time lag they make (``time_lag``: a reader of its own, never the data
consumer), the data consumer's own positions (``records_lag``; poll thread only) and the
Burrow status of its partitions (``lag_status``: runtime/lag_status.py's sampler).
It changes nothing, and it never blocks the ``poll`` thread: it takes no lock the hot path takes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka.admin import AdminClient

from groupkit.runtime.admin import GroupkitAdmin
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.data_consumer import DataConsumer, ktps
from groupkit.runtime.lag import (
    TIME_LAG_REREAD_S,
    CommittedReader,
    GroupOffsets,
    TimeLagReader,
    read_offsets,
)
from groupkit.runtime.lag_status import LagStatusView
from groupkit.types import TopicPartition

__all__ = ["GroupOffsets", "LagStatusView", "MemberProbe", "MemberStatus"]


@dataclass(frozen=True, slots=True)
class MemberStatus:
    """The member's standing in its group at one moment (``Coordinator.status``)."""

    member_id: str
    #: the generation its partitions belong to
    generation: int
    is_leader: bool
    #: live members of the group as the leader's replay sees them (0 unless it leads)
    live_members: int
    #: monotonic ms since the send of the own record its session runs from (``None``: nothing
    #: of ours read back yet; see ``Member.session_age_ms``)
    session_age_ms: int | None


class StatusSource(Protocol):
    """What the probe reads of a member's control loop (a ``Coordinator``). A protocol, not
    the class: the coordinator tells observers what happens (runtime/hooks.py), and an
    observer's hooks are handed this probe, so naming the class here would close a cycle."""

    @property
    def member_id(self) -> str: ...

    def status(self) -> MemberStatus: ...


class MemberProbe:
    """What observers may read of one ``GroupConsumer``; built by the consumer itself."""

    def __init__(
        self,
        cfg: GroupConfig,
        topics: Callable[[], Sequence[str]],
        data: DataConsumer,
        coordinator: Callable[[], StatusSource | None],
        admin: Callable[[], AdminClient | None],
        lag_status: Callable[[], LagStatusView | None] = lambda: None,
    ) -> None:
        self._cfg = cfg
        self._lag_status = lag_status
        self._topics = topics
        self._data = data
        self._coordinator = coordinator
        self._admin = admin
        self._time_lag: TimeLagReader | None = None
        #: the committed offsets' long-lived reader, opened at the first read (read_offsets)
        self._committed: CommittedReader | None = None
        self._committed_lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ configuration

    @property
    def group_id(self) -> str:
        return self._cfg.group_id

    @property
    def protocol(self) -> str:
        """The rebalance protocol: "eager" or "cooperative"."""
        return self._cfg.protocol

    @property
    def assignor(self) -> str:
        """The configured assignor's registry name (the metric label of its failures)."""
        return self._cfg.assignor

    @property
    def lag_reset(self) -> str:
        """What the lag of a partition without a committed offset counts from
        (:func:`~groupkit.runtime.lag.compute_lag`)."""
        return self._cfg.lag_reset

    # ------------------------------------------------------------------ the member

    @property
    def member_id(self) -> str | None:
        """The member id, while the consumer is a member (``None`` before and after)."""
        c = self._coordinator()
        return c.member_id if c is not None else None

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics the consumer subscribed to when it joined."""
        return tuple(self._topics())

    def owned(self) -> frozenset[TopicPartition]:
        """What the data consumer has assigned right now (a copy; from any thread). A revoked
        partition leaves it (on the poll thread) before the member's record frees it."""
        s = self._data.owned
        for _ in range(10):
            try:
                return frozenset(s)
            except RuntimeError:  # "Set changed size during iteration": the poll thread
                continue
        return frozenset()

    def status(self) -> MemberStatus | None:
        """The member's standing in the group now, or ``None`` when it is not a member
        (closed, or not subscribed)."""
        c = self._coordinator()
        return None if c is None else c.status()

    # ------------------------------------------------------------------ lag

    def read_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float = 10.0
    ) -> GroupOffsets | None:
        """End and committed offsets and lag of ``partitions``, asked of the brokers through
        the consumer's AdminClient and, for the committed offsets, one long-lived consumer of
        the group that joins nothing (never the data consumer: :class:`~groupkit.runtime.lag.
        CommittedReader`, shared by the status sampler and the metrics and closed with the
        consumer); ``None`` once it is closed. Raises :class:`~groupkit.errors.BrokerError`
        when the brokers do not answer."""
        admin = self._admin()
        if admin is None:
            return None
        return read_offsets(
            admin, self.group_id, partitions, self.lag_reset, timeout, self._reader(admin)
        )

    def _reader(self, admin: AdminClient) -> CommittedReader | None:
        if not isinstance(admin, GroupkitAdmin):
            return None  # an admin without settings to copy: read_offsets asks it itself
        with self._committed_lock:
            if self._committed is None and not self._closed:
                self._committed = CommittedReader(admin.settings, self.group_id)
            return self._committed

    def close(self) -> None:
        """Close what the probe opened (the committed offsets' reader): the consumer's close
        calls it once its admin is gone, so no later read reaches it."""
        with self._committed_lock:
            self._closed = True
            reader, self._committed = self._committed, None
        if reader is not None:
            reader.close()

    def time_lag(
        self, offsets: GroupOffsets, read: bool = True
    ) -> dict[TopicPartition, float | None] | None:
        """Time lag (s) of the partitions of ``offsets`` (:meth:`read_offsets`' answer): the
        age of each one's first unconsumed record, ``None`` where unknown; ``None`` once the
        consumer is closed. Reads those records' timestamps with a short-lived consumer of its
        own (once per move of a committed offset, ``read``, and at most every
        :data:`~groupkit.runtime.lag.TIME_LAG_REREAD_S` per partition where interpolation can
        answer instead: :class:`~groupkit.runtime.lag.TimeLagReader`)."""
        if self._admin() is None:
            return None
        reader = self._time_lag
        if reader is None:
            reader = self._time_lag = TimeLagReader(
                self._cfg.client_config("timelag"), reread_s=TIME_LAG_REREAD_S
            )
        reader.forget(offsets.lag)
        return reader.time_lag(offsets, read=read)

    def lag_status(self) -> LagStatusView | None:
        """Burrow's status of each owned partition at the newest sample, and of the group as
        this member sees its partitions; ``None`` when sampling is off
        (``groupkit.lag.status.interval.ms=0``) or before the first sample."""
        return self._lag_status()

    def records_lag(self) -> dict[TopicPartition, int]:
        """High watermark (librdkafka's cached one) minus the position handed to the app, of
        each owned partition with both: the Java client's ``records-lag``.

        On the ``poll`` thread only (an observer's ``consumed`` hook): confluent-kafka lets
        one thread at a time into a ``Consumer``, and a call from another thread may wait
        behind a busy poll loop for good. Raises what the client raises.
        """
        handle = self._data.handle
        out: dict[TopicPartition, int] = {}
        for k in handle.position(ktps(self.owned())):
            _low, high = handle.get_watermark_offsets(k, cached=True)
            if k.offset >= 0 and high >= 0:
                out[TopicPartition(k.topic, k.partition)] = max(0, high - k.offset)
        return out
