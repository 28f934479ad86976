"""Reading and writing a group's control partition.

The reader ``assign()``s the group's one control partition from the beginning and returns raw
records with their offsets and broker (``LogAppendTime``) timestamps; it never interprets them:
decoding and every decision belong to the protocol layer, which replays what this returns.

The writer is an idempotent producer (``acks=all``, no linger): a record is either in the log
once, in the order written, or its delivery callback reports the error.

A refusal that no retry can cure (the principal may not read or write the control topic, or the
producer hit a fatal error) is raised as a :class:`~groupkit.errors.BrokerError` naming the ACL
to grant, so the control loop fails, and ``GroupConsumer.poll`` says why, instead of waiting
for an assignment that can never come.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from groupkit.errors import BrokerError
from groupkit.runtime.config import GroupConfig

#: Errors no retry cures: the principal lacks an ACL. (An authentication failure is not here:
#: librdkafka retries it, e.g. across a credential rotation; ``GroupConsumer()`` reports it.)
_DENIED = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)


def _denied(err: KafkaError | None) -> bool:
    return err is not None and (err.fatal() or err.code() in _DENIED)


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One control record as the broker stored it."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


class ControlReader:
    """Follows one control partition from its beginning."""

    def __init__(self, cfg: GroupConfig, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._consumer = Consumer(
            cfg.client_config(
                **{
                    "group.id": cfg.group_id,  # required by librdkafka; nothing is committed
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "enable.partition.eof": False,
                    # Low fetch latency: a rebalance is as fast as members see each other.
                    "fetch.wait.max.ms": 10,
                    "fetch.min.bytes": 1,
                    "fetch.error.backoff.ms": 50,
                    "socket.nagle.disable": True,
                }
            )
        )
        self.position = 0  # the offset of the next record to read
        self._open = False

    def _assign(self) -> None:
        """Start reading, on first use (so constructing a reader never blocks on the broker)."""
        if self._open:
            return
        # Warm the consumer's metadata first: assigned a topic it knows nothing of, librdkafka
        # waits ~500 ms before its first fetch (measured in bench/rebalance.py).
        self._consumer.list_topics(self.topic, timeout=10)
        self._consumer.assign([TopicPartition(self.topic, self.partition, OFFSET_BEGINNING)])
        self._open = True

    def high_watermark(self, timeout: float = 10.0) -> int:
        self._assign()
        try:
            _low, high = self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, self.partition), timeout=timeout
            )
        except KafkaException as e:
            raise BrokerError(f"cannot read the end of the control topic: {e}") from e
        return int(high)

    def poll(self, timeout: float) -> list[RawRecord]:
        """Records available within ``timeout`` seconds (a batch, maybe empty).

        Returns as soon as one record is there: ``consume(n, timeout)`` alone would wait for
        ``n`` records or the whole timeout, adding its timeout to every hop of a rebalance.
        """
        self._assign()
        first = self._consumer.poll(timeout)
        if first is None:
            return []
        msgs = [first, *self._consumer.consume(num_messages=500, timeout=0)]
        out: list[RawRecord] = []
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                # (GROUP_AUTHORIZATION_FAILED is librdkafka looking up a coordinator the reader
                # never uses: it commits nothing. Harmless, so ignored like other transients.)
                if err.fatal() or err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise BrokerError(
                        f"cannot read control topic {self.topic!r}: {err.str()}; the principal "
                        f"needs READ on topic {self.topic}"
                    )
                continue  # transient errors: librdkafka retries on its own
            raw = _raw(msg)
            out.append(raw)
            self.position = raw.offset + 1
        return out

    def close(self) -> None:
        self._consumer.close()


def _raw(msg: Message) -> RawRecord:
    kind, ts = msg.timestamp()
    offset = msg.offset()
    # LogAppendTime is guaranteed by the topic's config; a record without a broker timestamp is
    # passed on with -1 and the protocol layer rejects it.
    return RawRecord(
        offset=int(offset if offset is not None else -1),
        key=msg.key(),
        value=msg.value(),
        timestamp_ms=int(ts) if kind != TIMESTAMP_NOT_AVAILABLE else -1,
    )


DeliveryCallback = Callable[[KafkaError | None, int], None]


class ControlWriter:
    """Produces control records to one partition, idempotently and in order."""

    def __init__(self, cfg: GroupConfig, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        #: set by the first refusal no retry cures; raised by :meth:`service`
        self.failure: BrokerError | None = None
        user_error_cb = cfg.connection.get("error_cb")

        def on_error(err: KafkaError) -> None:
            # A producer that went fatal (e.g. no ACL for its producer id) before our first
            # write: produce() then says only "Fatal error"; keep the reason to report.
            if err.fatal() and self.failure is None:
                self.failure = self._refused(err)
            if user_error_cb is not None:
                user_error_cb(err)

        self._producer = Producer(
            cfg.client_config(
                **{
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 0,
                    "socket.nagle.disable": True,
                    "message.max.bytes": 8 * 1024 * 1024,
                    "error_cb": on_error,
                }
            )
        )

    def warm(self, timeout: float = 10.0) -> None:
        """Learn the topic's metadata before the first write.

        A cold idempotent producer delivered its first record 0.5-1 s after ``produce``
        (librdkafka 2.16, loopback broker); after this call (~60 ms) it takes a few ms. The
        first record is a member's join, so this is most of a join's latency.
        """
        try:
            self._producer.list_topics(self.topic, timeout=timeout)
        except KafkaException as e:
            raise BrokerError(f"cannot reach the control topic {self.topic!r}: {e}") from e
        self.service(0)  # a refusal that came with the connection is raised here
    def _refused(self, err: KafkaError) -> BrokerError:
        return BrokerError(
            f"cannot write to control topic {self.topic!r}: {err.str()}; the principal needs "
            f"WRITE on topic {self.topic} (with WRITE on some topic, the idempotent producer "
            "needs no cluster ACL)"
        )

    def write(
        self,
        key: bytes,
        value: bytes | None,
        on_delivery: DeliveryCallback,
        service: bool = True,
    ) -> None:
        """Queue one record; ``on_delivery(error, offset)`` runs from :meth:`service`.

        ``service=False`` only queues (thread-safe): callbacks then run in the owner's next
        :meth:`service`, on the owner's thread.
        """

        def done(err: KafkaError | None, msg: Message) -> None:
            if err is not None and self.failure is None and _denied(err):
                self.failure = self._refused(err)
            off = msg.offset()
            on_delivery(err, int(off) if off is not None and err is None else -1)

        try:
            self._producer.produce(
                self.topic, key=key, value=value, partition=self.partition, on_delivery=done
            )
        except BufferError:
            self._producer.poll(0.1)
            self._producer.produce(
                self.topic, key=key, value=value, partition=self.partition, on_delivery=done
            )
        except KafkaException as e:
            self._producer.poll(0)  # serve the error callback that says why
            if self.failure is not None:
                raise self.failure from e
            raise BrokerError(f"cannot write to the control topic: {e}") from e
        if service:
            self.service(0)

    def service(self, timeout: float = 0.0) -> None:
        """Run delivery callbacks that are due; raise a refusal no retry can cure."""
        try:
            self._producer.poll(timeout)
        except KafkaException as e:  # a fatal producer error, e.g. no idempotence PID
            err: Any = e.args[0] if e.args else None
            if self.failure is None and isinstance(err, KafkaError):
                self.failure = self._refused(err)
            if self.failure is None:
                raise BrokerError(f"control topic writer failed: {e}") from e
        if self.failure is not None:
            raise self.failure

    def flush(self, timeout: float) -> int:
        """Wait for queued records; returns how many are still in flight."""
        remaining: Any = self._producer.flush(timeout)
        return int(remaining)
