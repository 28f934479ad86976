"""``GroupConsumer`` has every public method of the installed ``confluent_kafka.Consumer``, with
its signature and meaning on the partitions the member owns.

confluent-kafka's methods are C functions: ``inspect.signature`` cannot read them, but each
docstring opens with its signature (``.. py:function:: seek(partition)``), which is compared
with ours; the broker tests then call both classes with the same arguments. A new
confluent-kafka version that adds a method fails the first test until ``GroupConsumer`` has it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KTP

from groupkit import AssignmentOwnedError, GroupConsumer
from groupkit.dev.harness import wait_for
from tests.groupharness import produce, pump

_SIGNATURE = re.compile(r"\.\. py:function:: (\w+)\((.*)\)")
#: "wait for ever", as confluent-kafka spells it in one method or another
_FOREVER = {None, -1, "None", "-1"}


def _public() -> list[str]:
    return sorted(m for m in dir(Consumer) if not m.startswith("_"))


def _confluent_params(method: str) -> list[tuple[str, str | None]]:
    """``(name, default)`` of each parameter of ``Consumer.<method>``, from its docstring
    (none documented: no parameters)."""
    doc = getattr(Consumer, method).__doc__ or ""
    m = _SIGNATURE.search(doc)
    if m is None or m.group(1) != method:
        return []
    params = []
    for raw in filter(None, (p.strip(" []") for p in m.group(2).split(","))):
        name, _, default = raw.partition("=")
        params.append((name.strip(), default.strip() or None))
    return params


def test_group_consumer_has_every_public_method_of_consumer() -> None:
    missing = [m for m in _public() if not callable(getattr(GroupConsumer, m, None))]
    assert missing == [], f"GroupConsumer lacks Consumer's {missing}"


@pytest.mark.parametrize("method", _public())
def test_signatures_match(method: str) -> None:
    ours = inspect.signature(getattr(GroupConsumer, method))
    params = [p for p in ours.parameters.values() if p.name != "self"]
    theirs = _confluent_params(method)
    if method == "consume" and not theirs:  # (documented in every version we know)
        pytest.fail("Consumer.consume's docstring has no signature line")
    assert [p.name for p in params[: len(theirs)]] == [n for n, _ in theirs], (method, ours)
    # everything beyond confluent's parameters is optional (nothing more to pass)
    assert all(p.default is not inspect.Parameter.empty for p in params[len(theirs) :])
    for (name, default), p in zip(theirs, params, strict=False):
        if default is None:
            assert p.default is inspect.Parameter.empty, (method, name, "required")
        elif default in _FOREVER:
            assert p.default in _FOREVER, (method, name, p.default)
        else:
            assert repr(p.default) == default or str(p.default) == default, (method, name)
    # callable the way Consumer is: positionally, and by keyword
    args = [f"<{n}>" for n, _ in theirs]
    ours.bind(None, *args)
    ours.bind(None, **{n: a for (n, _), a in zip(theirs, args, strict=True)})


def test_assign_and_unassign_are_refused_without_a_broker() -> None:
    c = GroupConsumer.__new__(GroupConsumer)  # the refusal needs no connection
    for call in (
        lambda: c.assign([KTP("t", 0)]),
        c.unassign,
        lambda: c.incremental_assign([KTP("t", 0)]),
        lambda: c.incremental_unassign([KTP("t", 0)]),
    ):
        with pytest.raises(AssignmentOwnedError, match="groupkit owns the assignment"):
            call()


# ------------------------------------------------------------------ on the broker


def _code(call: Callable[[], Any]) -> int | None:
    try:
        call()
    except KafkaException as e:
        return int(e.args[0].code())
    return None


def test_same_arguments_same_answers_as_consumer(
    bootstrap: str,
    topic_factory: Callable[..., str],
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
) -> None:
    """Both classes called with the same arguments: the reads agree, and on a partition the
    member does not own, ``seek``/``pause``/``resume`` answer as ``Consumer`` does for a
    partition it has not assigned."""
    topic = topic_factory(partitions=2)
    other = topic_factory(partitions=1)
    produce(bootstrap, topic, {0: 4, 1: 2})
    g = GroupConsumer(conf)
    consumers.append(g)
    g.subscribe([topic])
    wait_for(lambda: g.poll(0.01) is None and len(g.assignment()) == 2, 30, "both partitions",
             step=0)  # fmt: skip
    k = Consumer({"bootstrap.servers": bootstrap, "group.id": conf["group.id"]})
    try:
        k.assign([KTP(topic, 0), KTP(topic, 1)])
        for args, kw in [((KTP(topic, 0),), {}), ((KTP(topic, 1),), {"timeout": 10}),
                         ((KTP(topic, 0), 10, False), {})]:  # fmt: skip
            assert g.get_watermark_offsets(*args, **kw) == k.get_watermark_offsets(*args, **kw)
        times = [KTP(topic, 0, 0), KTP(topic, 1, 0)]
        assert [(p.partition, p.offset) for p in g.offsets_for_times(times, timeout=10)] == [
            (p.partition, p.offset) for p in k.offsets_for_times(times, timeout=10)
        ]
        assert g.cluster_id() == k.cluster_id() is not None
        assert g.cluster_id(10) == k.cluster_id(10)
        assert set(g.list_topics(topic, 10).topics) == set(k.list_topics(topic, 10).topics)
        assert {topic, other} <= set(g.list_topics(timeout=10).topics)
        assert g.memberid() == g.member_id is not None

        # not owned: seek raises what Consumer raises for a partition it has not assigned
        k.unassign()
        for tp in (KTP(other, 0, 0), KTP(topic, 7, 0)):
            want = _code(lambda tp=tp: k.seek(tp))
            assert want in (KafkaError._STATE, KafkaError._UNKNOWN_PARTITION), want
            assert _code(lambda tp=tp: g.seek(tp)) == want, tp
        # pause/resume of partitions not owned: ignored, as Consumer ignores unassigned ones
        assert k.pause([KTP(other, 0)]) is None and g.pause([KTP(other, 0)]) is None
        assert k.resume([KTP(other, 0)]) is None and g.resume([KTP(other, 0)]) is None
        assert g._data.paused == set()

        md = g.consumer_group_metadata()
        assert type(md) is type(k.consumer_group_metadata())
    finally:
        k.close()
    with pytest.raises(AssignmentOwnedError):
        g.assign([KTP(topic, 0)])
    assert len(g.assignment()) == 2  # nothing changed
    g.set_sasl_credentials("user", "secret")  # (PLAINTEXT: accepted, used by no connection)
    assert g._cfg.connection["sasl.username"] == "user"


class _App:
    """A ``GroupConsumer`` polled by the test, recording the records it was handed and the
    partitions it was given and gave up."""

    def __init__(self, conf: dict[str, Any], topics: list[str],
                 consumers: list[GroupConsumer]) -> None:  # fmt: skip
        self.got: list[tuple[str, int, int]] = []
        self.revoked: list[tuple[str, int]] = []
        self.c = GroupConsumer(conf)
        consumers.append(self.c)

        def on_revoke(_c: Any, parts: list[KTP]) -> None:
            self.revoked += [(p.topic, p.partition) for p in parts]

        self.c.subscribe(topics, on_revoke=on_revoke)

    def poll(self, timeout: float = 0.01) -> None:
        m = self.c.poll(timeout)
        if m is not None and m.error() is None:
            self.got.append((m.topic(), m.partition(), m.offset()))

    def owned(self) -> set[int]:
        return {p.partition for p in self.c.assignment()}

    def of(self, parts: set[int], since: int = 0) -> list[tuple[str, int, int]]:
        return [r for r in self.got[since:] if r[1] in parts]


def _idle(apps: list[_App], seconds: float) -> None:
    """Poll for ``seconds`` (to show that something does *not* arrive)."""
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for a in apps:
            a.poll()


def test_pause_holds_across_a_rebalance_of_other_partitions(
    bootstrap: str,
    topic_factory: Callable[..., str],
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
) -> None:
    topic = topic_factory(partitions=4)
    a = _App(conf, [topic], consumers)
    pump([a], lambda: a.owned() == {0, 1, 2, 3}, 30, "a owns all four")
    a.c.pause([KTP(topic, p) for p in range(4)])
    b = _App(conf, [topic], consumers)
    pump([a, b], lambda: len(a.owned()) == len(b.owned()) == 2, 30, "two partitions move to b")
    kept, moved = a.owned(), b.owned()
    assert a.revoked and {p for _, p in a.revoked} == moved  # only what moved was revoked
    produce(bootstrap, topic, {p: 5 for p in range(4)})
    pump([a, b], lambda: len(b.of(moved)) == 10, 30, "b's 10 records of the moved partitions")
    _idle([a, b], 1.0)
    assert a.got == [], "a paused partition that stayed was fetched"
    assert a.c._data.paused == {(topic, p) for p in kept}

    # b leaves: its partitions come back to a, resumed (as in Kafka); a's kept ones stay paused
    b.c.close()
    pump([a], lambda: a.owned() == {0, 1, 2, 3}, 30, "a owns all four again")
    produce(bootstrap, topic, {p: 3 for p in range(4)})
    pump([a], lambda: len(a.of(moved)) == 6, 30, "the records of the partitions that came back")
    _idle([a], 1.0)
    assert a.of(kept) == [], "a paused partition was fetched across a rebalance"
    a.c.resume([KTP(topic, p) for p in kept])
    pump([a], lambda: len(a.of(kept)) == 16, 30, "the kept partitions' records after resume")
    assert sorted(o for _, p, o in a.of(kept)) == sorted(list(range(8)) * 2)


def test_seek_is_honoured_by_the_next_poll(
    bootstrap: str,
    topic_factory: Callable[..., str],
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
) -> None:
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, {0: 10})
    a = _App(conf, [topic], consumers)
    pump([a], lambda: len(a.got) == 10, 30, "ten records")
    a.c.seek(KTP(topic, 0, 3))
    pump([a], lambda: len(a.got) > 10, 10, "the record after the seek")
    assert a.got[10] == (topic, 0, 3)
    pump([a], lambda: len(a.got) == 17, 10, "the rest after the seek")
    assert [o for _, _, o in a.got[10:]] == list(range(3, 10))
    from confluent_kafka import OFFSET_BEGINNING

    a.c.seek(KTP(topic, 0, OFFSET_BEGINNING))  # a logical offset
    pump([a], lambda: len(a.got) == 27, 10, "all ten again from the beginning")
    assert [o for _, _, o in a.got[17:]] == list(range(10))


@pytest.mark.parametrize("protocol", ["cooperative", "eager"])
def test_seek_is_honoured_by_the_revoke_commit(
    bootstrap: str,
    topic_factory: Callable[..., str],
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
    protocol: str,
) -> None:
    """``a`` is handed 20 records of each partition, seeks both back to 5 (paused, so it hands
    nothing out after the seek), and one partition moves to ``b``: the revoke commit, and the
    offset its release carries, is 5, not 20 (the position from before the seek), so ``b``
    starts at 5."""
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, {0: 20, 1: 20})
    conf = {**conf, "groupkit.rebalance.protocol": protocol, "auto.commit.interval.ms": 100}
    a = _App(conf, [topic], consumers)
    pump([a], lambda: len(a.got) == 40, 30, "a's forty records")
    a.c.pause([KTP(topic, 0), KTP(topic, 1)])
    for p in (0, 1):
        a.c.seek(KTP(topic, p, 5))
    _idle([a], 0.3)  # (auto-commit runs meanwhile: it commits what was sought)
    handed = len(a.got)
    b = _App(conf, [topic], consumers)
    pump([a, b], lambda: len(a.owned()) == len(b.owned()) == 1, 30, "one partition moves to b")
    if protocol == "cooperative":  # (eager: a's partition was revoked and came back resumed)
        assert len(a.got) == handed, "a paused partition was fetched"
    (moved,) = b.owned()
    pump([a, b], lambda: len(b.of({moved})) == 15, 30, "b's records of the moved partition")
    assert [o for _, _, o in b.of({moved})] == list(range(5, 20))
    (committed,) = b.c.committed([KTP(topic, moved)])
    assert committed.offset >= 5
    if protocol == "eager":  # a's own partition was revoked too, and came back at 5, resumed
        (kept,) = a.owned()
        pump([a, b], lambda: len(a.of({kept}, handed)) == 15, 30, "a's records from 5 again")
        assert [o for _, _, o in a.of({kept}, handed)] == list(range(5, 20))


def test_seek_in_on_assign_starts_the_partition_there(
    bootstrap: str,
    topic_factory: Callable[..., str],
    conf: dict[str, Any],
    consumers: list[GroupConsumer],
) -> None:
    """As with Kafka's ``onPartitionsAssigned``: a seek in ``on_assign`` is where the partition
    starts, although librdkafka is still looking its committed offset up then (it refuses
    such a seek with ``_STATE``; the partition is assigned again at the offset)."""
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, {0: 10, 1: 10})
    got: list[tuple[int, int]] = []
    c = GroupConsumer(conf)
    consumers.append(c)

    def on_assign(consumer: Any, parts: list[KTP]) -> None:
        for p in parts:
            consumer.seek(KTP(p.topic, p.partition, 4 + p.partition))

    c.subscribe([topic], on_assign=on_assign)

    def step() -> bool:
        m = c.poll(0.01)
        if m is not None and m.error() is None:
            got.append((m.partition() or 0, m.offset() or 0))
        return len(got) >= 11

    wait_for(step, 30, "the records from the offsets sought", step=0)
    assert sorted(got) == [(0, o) for o in range(4, 10)] + [(1, o) for o in range(5, 10)]
