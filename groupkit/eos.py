"""Exactly-once read-process-write on a groupkit group: one transactional producer per partition.

With a broker-coordinated group, ``send_offsets_to_transaction(offsets,
consumer.consumer_group_metadata())`` lets the broker fence a zombie by the group's generation
(KIP-447). A groupkit group is unknown to the broker: its data consumer commits as a simple
consumer (generation -1), so the broker would accept a zombie's transactional offset commit. The
fencing here is the broker's own, the pre-KIP-447 one: **one transactional producer per input
partition**, ``transactional.id = f"{prefix}-{group}-{topic}-{partition}"``, the same on every
member. Whoever owns a partition produces its results and commits its offsets only through that
``transactional.id``:

1. On assignment, *before* the data consumer looks its committed offset up (the ``assigning``
   ownership hook; runtime/handoff.py), the new owner calls ``init_transactions()``. The
   transaction coordinator bumps the id's epoch, and first completes any transaction of an older
   epoch: an open one is aborted, one whose commit had begun is committed. From then on every
   produce, ``TxnOffsetCommit`` and ``EndTxn`` of an older epoch is refused (``PRODUCER_FENCED``
   / ``INVALID_PRODUCER_EPOCH``), whatever that process believes about its ownership.
2. Then the committed offset is looked up: ``init_transactions()`` returned only once every
   older epoch's transaction was settled, markers written, so it is exactly what the last
   committed transaction of any earlier owner wrote (librdkafka also asks for stable offsets,
   ``require_stable``, under its default ``isolation.level=read_committed``).
3. The owner processes from there; each batch of one partition is one transaction holding its
   output and the offset after its last record. An aborted batch is fetched again from its first
   record (``GroupConsumer.seek``, while the member owns it); a fenced producer is dropped and
   the partition's records are refused (:class:`~groupkit.errors.FencedError`) until the
   member, fenced too, loses it.
4. Nothing else commits these offsets: ``add_ownership_hook`` refuses a consumer with
   auto-commit or the offset keep-alive on (groupkit's commit on revoke is off with
   auto-commit), and a hook that owns the offsets turns offset hints off, so the new owner
   always starts at the looked-up offset (never at a hint).
5. A revoked partition's producer is closed (aborting any open transaction) *before* the
   partition is released in the control log; a lost one's is closed too.

So, per partition, the committed transactions form one chain: each starts at the offset the
previous one committed, because its epoch's look-up (2) came after every older epoch's last
transaction was settled (1), and an older epoch commits nothing afterwards. Every input record
is in exactly one committed transaction: read with ``isolation.level=read_committed``, the
output holds it exactly once. The zombies, walked through:

- **Frozen past its session, then resumed** (SIGSTOP, a long GC pause) mid-transaction: the
  group expires it and grants the partition; the new owner's ``init_transactions()`` aborts the
  zombie's open transaction. Resumed, the zombie's produce, offset commit or commit fails with
  a fencing error: it raises ``FencedError`` and the member's own session check loses the
  partition at its next ``poll``. If the zombie's commit reached the coordinator before the new
  owner's ``init_transactions()``, that returns only once the commit is complete, and the
  look-up (2) sees its offsets: the new owner continues after them.
- **kill -9 mid-transaction**: the open transaction is aborted by the next owner's
  ``init_transactions()`` (or by ``transaction.timeout.ms``), its output never visible to
  ``read_committed`` readers; its records are processed again from the committed offset.
- **Rebalance mid-transaction**: a revocation runs inside ``poll``, between the user's
  transactions, and closes the producer before the release; a batch whose transaction failed
  was aborted and is not committed. The next owner starts from the last committed offset.

The cost is one producer (and one transactional id) per owned partition, the reason KIP-447
replaced this design for broker-coordinated groups. Don't ``poll`` inside a transaction: a
hand-off runs there. Offsets are no longer kept alive by groupkit: an idle partition's offset
expires after the broker's ``offsets.retention.minutes`` (7 days by default) unless a
transaction commits it again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as KTopicPartition

from groupkit.errors import ConfigError, FencedError
from groupkit.log import get_logger
from groupkit.protocol.records import Partitions
from groupkit.runtime.consumer import GroupConsumer
from groupkit.types import TopicPartition

__all__ = ["TransactionalProcessor", "by_partition", "transactional_id"]

_log = get_logger("groupkit.eos")

#: the errors by which the broker says a newer epoch of the transactional.id exists
_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def transactional_id(prefix: str, group: str, tp: TopicPartition) -> str:
    """The ``transactional.id`` of input partition ``tp``: the same on every member."""
    return f"{prefix}-{group}-{tp.topic}-{tp.partition}"


def by_partition(msgs: Sequence[Message]) -> list[list[Message]]:
    """The records of ``msgs`` (a ``consume`` batch) split by partition, each in offset order:
    one :meth:`TransactionalProcessor.transaction` each. Error events are left out."""
    out: dict[tuple[str | None, int | None], list[Message]] = {}
    for m in msgs:
        if m.error() is None:
            out.setdefault((m.topic(), m.partition()), []).append(m)
    return list(out.values())


def _is_fenced(e: KafkaException) -> bool:
    err = e.args[0] if e.args else None
    return isinstance(err, KafkaError) and (err.code() in _FENCED or err.fatal())


def _retriable(e: KafkaException) -> bool:
    err = e.args[0] if e.args else None
    return isinstance(err, KafkaError) and err.retriable()


class TransactionalProcessor:
    """The transactional producers of one ``GroupConsumer``'s partitions (module docstring).

    ``producer_config`` is a ``confluent_kafka.Producer`` config without ``transactional.id``
    (set per partition from ``transactional_id_prefix``, the group and the partition). Create
    it before ``subscribe``; the consumer needs ``'enable.auto.commit': False`` and
    ``'groupkit.offsets.keepalive.interval.ms': 0``. Then, for each partition's batch::

        with eos.transaction(batch) as producer:
            for msg in batch:
                producer.produce("out", key=msg.key(), value=transform(msg.value()))
        # committed: the output and the offset after the batch's last record
    """

    owns_offsets = True

    def __init__(
        self,
        consumer: GroupConsumer,
        producer_config: Mapping[str, Any],
        *,
        transactional_id_prefix: str = "groupkit",
        timeout: float = 30.0,
    ) -> None:
        if "transactional.id" in producer_config:
            raise ConfigError("transactional.id is set per partition by TransactionalProcessor")
        if consumer.assignment():
            # Their producers would come after their offsets were looked up (see step 1).
            raise ConfigError("create the TransactionalProcessor before subscribe()")
        self._consumer = consumer
        self._config = dict(producer_config)
        self._prefix = transactional_id_prefix
        self._timeout = timeout
        self._producers: dict[TopicPartition, Producer] = {}
        consumer.add_ownership_hook(self)

    # ------------------------------------------------------------------ the user's side

    @contextmanager
    def transaction(self, msgs: Sequence[Message]) -> Iterator[Producer]:
        """One transaction for ``msgs``, records of one partition in offset order: yields the
        partition's producer; on leaving, commits what it produced with the offset after the
        last record. An exception inside aborts it (the batch is fetched again) and is raised;
        a fenced producer raises :class:`FencedError` (the partition has a newer owner)."""
        if not msgs:
            raise ValueError("a transaction needs at least one record")
        first, last = msgs[0], msgs[-1]
        tp = TopicPartition(first.topic() or "", first.partition() or 0)
        if any((m.topic(), m.partition()) != tp for m in msgs):
            raise ValueError("a transaction covers the records of one partition")
        producer = self._producers.get(tp)
        if producer is None:
            raise FencedError(f"{tp} is not owned here (or its producer was fenced)")
        try:
            producer.begin_transaction()
            yield producer
            offsets = [KTopicPartition(tp.topic, tp.partition, (last.offset() or 0) + 1)]
            self._retry(lambda: producer.send_offsets_to_transaction(
                offsets, self._consumer.consumer_group_metadata(), self._timeout))  # fmt: skip
            self._retry(lambda: producer.commit_transaction(self._timeout))
        except KafkaException as e:
            if _is_fenced(e):
                self._drop(tp, producer)
                raise FencedError(f"{tp}: a newer owner fenced this producer ({e})") from e
            self._abort(tp, producer, first.offset() or 0)
            raise
        except BaseException:
            self._abort(tp, producer, first.offset() or 0)
            raise

    def close(self) -> None:
        """Close every producer left (aborting any open transaction)."""
        for tp in list(self._producers):
            self._close(tp)

    def __enter__(self) -> TransactionalProcessor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ ownership hooks

    def assigning(self, parts: Partitions) -> None:
        """Fence every older owner of ``parts`` before their offsets are looked up."""
        group = self._consumer.probe.group_id
        made: dict[TopicPartition, Producer] = {}
        failed: list[BaseException] = []

        def init(tp: TopicPartition) -> None:
            tid = transactional_id(self._prefix, group, tp)
            try:
                p = Producer({**self._config, "transactional.id": tid})
                self._retry(lambda: p.init_transactions(self._timeout))
                made[tp] = p
            except BaseException as e:
                failed.append(e)

        # In parallel: each init may wait for an older epoch's transaction to be settled.
        threads = [threading.Thread(target=init, args=(tp,)) for tp in sorted(parts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for tp in parts & self._producers.keys():
            self._close(tp)
        self._producers.update(made)
        if failed:
            raise failed[0]

    def revoked(self, parts: Partitions) -> None:
        for tp in parts:
            self._close(tp)

    def lost(self, parts: Partitions) -> None:
        for tp in parts:
            self._close(tp)

    # ------------------------------------------------------------------ internals

    def _retry(self, call: Any, tries: int = 3) -> None:
        for i in range(tries):
            try:
                call()
                return
            except KafkaException as e:
                if i == tries - 1 or not _retriable(e):
                    raise

    def _abort(self, tp: TopicPartition, producer: Producer, first: int) -> None:
        """Abort the open transaction and fetch the batch again from ``first``."""
        try:
            producer.abort_transaction(self._timeout)
        except KafkaException as e:
            if _is_fenced(e):
                self._drop(tp, producer)
                return
            raise
        # On the poll thread, like every change of the assignment: what it lists now is owned
        # for the seek, and a partition given up meanwhile has nothing to fetch again.
        if tp in {TopicPartition(p.topic, p.partition) for p in self._consumer.assignment()}:
            self._consumer.seek(KTopicPartition(tp.topic, tp.partition, first))

    def _drop(self, tp: TopicPartition, producer: Producer) -> None:
        _log.warning("eos.fenced", partition=str(tp))
        if self._producers.get(tp) is producer:
            self._close(tp)

    def _close(self, tp: TopicPartition) -> None:
        p = self._producers.pop(tp, None)
        if p is not None:
            with suppress(KafkaException, RuntimeError):
                p.close()
