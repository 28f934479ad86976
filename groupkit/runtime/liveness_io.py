"""Protocol version 2's I/O around one member's node: its heartbeats and the judge's reader.

The rules are the node's (``Node``, ``Judge``, ``Member``; docs/protocol-v2.md); the
simulator's ``GroupSim._beat``, ``_reports`` and ``_judge`` drive them over an in-memory log,
and this module over the real one:

1. **Heartbeats** (``Write.liveness``) and the leader's snapshots go to the group's partition
   of the liveness topic, through the control writer's producer (one idempotent producer
   writes both logs, in order per partition: a member keeps its three clients). A heartbeat's
   delivery report carries the broker's ``LogAppendTime`` (checked against the broker:
   tests/test_v2_delivery_time.py); it goes to ``Node.heartbeat_confirmed``, a failed one to
   ``Node.heartbeat_failed``, under the coordinator's lock, on the thread that serves the
   writer (the control thread).
2. **Judging**: while ``Node.liveness_wanted`` (the node leads, follows the leader closely, or
   has read no lease for too long), a reader of the liveness partition, opened at
   ``Node.liveness_start``, feeds every record to ``Node.feed_liveness``, a non-blocking poll
   each turn. When no longer wanted, the node stops judging and the reader is closed: a
   follower that does not judge reads nothing of the liveness topic, which is what keeps its
   cost independent of the group's size.
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

from groupkit.log import get_logger
from groupkit.protocol.actions import Write
from groupkit.protocol.node import Node
from groupkit.protocol.records import HeartbeatRecord
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.control_log import ControlClients, ControlReader, ReaderStall
from groupkit.runtime.control_topic import ensure_liveness_topic, partition_for_group

_log = get_logger("groupkit.runtime")

#: Delivery errors that prove the record was not appended: it never left the client, or the
#: broker refused it as a whole. Any other error (a timeout above all) may hide an append, and
#: binds the member as a heartbeat on its way does (docs/protocol-v2.md, L1.5).
_NOT_APPENDED = frozenset(
    {
        KafkaError._PURGE_QUEUE,
        KafkaError._QUEUE_FULL,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.INVALID_RECORD,
    }
)


def maybe_landed(err: KafkaError) -> bool:
    """Whether a failed delivery may still have been appended."""
    return err.code() not in _NOT_APPENDED


class LivenessIO:
    """One member's heartbeats and judging (module docstring); owned by its coordinator."""

    @classmethod
    def of(
        cls,
        cfg: GroupConfig,
        node: Node,
        lock: AbstractContextManager[object],
        control: ControlClients,
    ) -> LivenessIO | None:
        """The member's, for protocol version 2 (``None`` for version 1)."""
        if cfg.protocol_version != 2:
            return None
        if control.liveness is None:
            raise ValueError("the control clients are not bound to a liveness log")
        return cls(cfg, node, lock, control)

    def __init__(
        self,
        cfg: GroupConfig,
        node: Node,
        lock: AbstractContextManager[object],
        control: ControlClients,
    ) -> None:
        assert control.liveness is not None
        self.cfg = cfg
        self.node = node
        self.lock = lock
        self.writer = control.writer
        self.topic, self.partition = control.liveness
        self._control = control
        #: the judge's reader, while the node judges
        self.reader: ControlReader | None = None
        #: heartbeats written, confirmed, and failed (for stats and tests)
        self.beats = 0
        self.confirmed = 0
        self.failed = 0
        #: liveness records fed to the judge
        self.judged = 0
        #: snapshots delivered to the liveness log
        self.snapshots = 0
        #: the newest offset one of our heartbeats was appended at, and when (monotonic s);
        #: whether the judge's reader has stalled, and its renewals (_watch_reader)
        self._appended: tuple[int, float] = (-1, 0.0)
        self._stall = ReaderStall(cfg.session_timeout_ms)
        self.renewals = 0
        #: times this member started judging
        self.judging_starts = 0

    # ------------------------------------------------------------------ writing

    def beat(self, w: Write, service: bool = True) -> None:
        """Produce heartbeat ``w``; its delivery report goes to the node."""
        assert isinstance(w.value, HeartbeatRecord) and w.raw_value is not None
        seq = w.value.seq

        def delivered(err: KafkaError | None, offset: int, ts: int) -> None:
            with self.lock:
                if err is None and ts >= 0:
                    self.confirmed += 1
                    self._appended = (max(self._appended[0], offset), time.monotonic())
                    self.node.heartbeat_confirmed(seq, ts)
                    return
                self.failed += 1
                # (no broker stamp, which a LogAppendTime topic always gives: as a timeout)
                landed = err is None or maybe_landed(err)
                self.node.heartbeat_failed(seq, landed)
            _log.warning("heartbeat.write_failed", group=self.cfg.group_id,
                         member=self.node.member_id, seq=seq, maybe_landed=landed,
                         error=str(err) if err is not None else "no LogAppendTime")  # fmt: skip

        self.beats += 1
        self.writer.write_liveness(w.raw_key, w.raw_value, delivered, service=service)

    def write_snapshot(self, key: bytes, value: bytes | None) -> None:
        """The leader's snapshot, for newcomers (docs/protocol-v2.md, L8)."""

        def delivered(err: KafkaError | None, offset: int, ts: int) -> None:
            if err is not None:
                _log.warning("snapshot.write_failed", group=self.cfg.group_id, error=str(err))
            else:
                self.snapshots += 1

        self.writer.write_liveness(key, value, delivered)

    @property
    def judging(self) -> bool:
        """Whether the node judges now (its reader of the liveness log is open)."""
        return self.reader is not None

    def snapshot_reader(self) -> ControlReader:
        """A reader of the liveness partition, for a newcomer's catch-up (catch_up.py): the
        one the control clients opened and warmed, else (a second catch-up) a new one."""
        reader = self._control.take_snapshot_reader()
        if reader is None:
            reader = ControlReader(self.cfg, self.topic, self.partition, "liveness-reader")
        return reader

    # ------------------------------------------------------------------ judging

    def judge(self, now_ms: int) -> None:
        """Read the liveness log while the node judges (module docstring, 2); called at every
        turn of the control loop, before the node's step, outside the lock (a reader's I/O
        must not hold up the poll thread)."""
        with self.lock:
            wanted = self.node.liveness_wanted(now_ms)
            start = self.node.liveness_start() if wanted and self.reader is None else None
            if not wanted and self.reader is not None:
                self.node.liveness_stop()
        if not wanted:
            self._close_reader()
            return
        if start is not None:
            self.reader = ControlReader(self.cfg, self.topic, self.partition, "liveness-reader")
            self.reader.seek(start)
            self.judging_starts += 1
            _log.info("liveness.judging", group=self.cfg.group_id, member=self.node.member_id,
                      start=start)  # fmt: skip
        assert self.reader is not None
        batch = self.reader.poll(0)
        if not batch:
            self._watch_reader()
            return
        self._stall.reset()  # it reads: it may lag (a judge that starts mid-log)
        with self.lock:
            if self.node.judge is None or self.node.judge.live is None:
                return  # stopped meanwhile (a leave): the next turn closes the reader
            for r in batch:
                self.node.feed_liveness(r.offset, r.key, r.value, r.timestamp_ms)
            self.judged += len(batch)

    def _watch_reader(self) -> None:
        """Renew the judge's reader when it has stopped fetching (``ReaderStall``, our own
        heartbeats being the records it owes us). A judge that reads nothing finds no end of
        anybody's run: safe, but the group would keep a dead member's partitions."""
        reader = self.reader
        appended, at = self._appended
        if reader is None:
            self._stall.reset()
            return
        stalled = self._stall.due(appended, at, reader.position)
        if stalled is None:
            return
        _log.warning("liveness_reader.stalled", group=self.cfg.group_id,
                     member=self.node.member_id, position=reader.position, appended=appended,
                     seconds=round(stalled, 1))  # fmt: skip
        reader.renew()
        self.renewals += 1

    def _close_reader(self) -> None:
        reader, self.reader = self.reader, None
        self._stall.reset()
        if reader is not None:
            _log.info("liveness.judging_stopped", group=self.cfg.group_id,
                      member=self.node.member_id)  # fmt: skip
            # a consumer's close may take a while: not on the control thread
            threading.Thread(target=reader.close, name="groupkit-close-reader",
                             daemon=True).start()  # fmt: skip

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """New SASL credentials for the judge's reader, if open (a later one is made from the
        settings, which ``GroupConsumer.set_sasl_credentials`` updates)."""
        reader = self.reader
        if reader is not None:
            reader.set_sasl_credentials(username, password)

    def close(self) -> None:
        reader, self.reader = self.reader, None
        if reader is not None:
            reader.close()


def bind_liveness_log(admin: AdminClient, cfg: GroupConfig, control: ControlClients) -> None:
    """Protocol version 2: create or check the liveness topic (``ensure_liveness_topic``, with
    the control topic's settings for creating it) and bind the member's control clients to the
    group's partition of it. Nothing for version 1."""
    if cfg.protocol_version != 2:
        return
    partitions = ensure_liveness_topic(
        admin,
        cfg.liveness_topic,
        cfg.control_partitions,
        cfg.control_replication_factor,
        create=cfg.create_control_topic,
        propagation_timeout=cfg.topic_propagation_ms / 1000,
    )
    control.bind_liveness(cfg.liveness_topic, partition_for_group(cfg.group_id, partitions))
