"""Exactly-once read-process-write (groupkit.eos) on a real broker, with zombies and crashes.

Worker processes (tests/eos_worker.py) copy an input topic of keyed records to an output topic,
one transaction per partition batch, each holding its transaction open a while so that the
faults land inside one. While a load producer writes, a member is frozen (SIGSTOP) inside a
transaction past its session and resumed, one is killed with kill -9 inside a transaction, one
joins and one leaves. Read with ``isolation.level=read_committed``, the output must hold every
acknowledged input record exactly once, each key's records in order.

The control (:func:`test_without_the_partition_fencing_a_zombie_duplicates`) runs the frozen
member's case with the fencing off (each process its own ``transactional.id`` prefix): the
zombie's transaction commits after its successor reprocessed the same batch, and the output
holds that batch twice. That is the failure the per-partition ``transactional.id`` prevents.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KTP

from groupkit import GroupConsumer
from groupkit.dev.harness import TP, AuditLog, Group, LoadProducer, MemberProcess, wait_for
from groupkit.eos import TransactionalProcessor, by_partition
from groupkit.errors import ConfigError
from tests import groupharness
from tests.conftest import unique_name

pytestmark = [pytest.mark.broker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
SESSION_MS = 3000
PARTITIONS = 6
#: acknowledged input records a run through every fault must hold at least
ENOUGH = 1000


class EosGroup(Group[MemberProcess]):
    """``tests.eos_worker`` processes of one group."""

    def __init__(self, bootstrap: str, group: str, src: str, dst: str, workdir: Path) -> None:
        super().__init__(workdir)
        self.bootstrap, self.group, self.src, self.dst = bootstrap, group, src, dst
        self.control_topic = unique_name("ctl")
        self.protocol = "cooperative"

    def spawn(self, name: str, prefix: str = "groupkit", hold_ms: int = 150) -> MemberProcess:
        audit = self.workdir / f"{name}.jsonl"
        cmd = [
            sys.executable, "-m", "tests.eos_worker", "--bootstrap", self.bootstrap,
            "--group", self.group, "--input", self.src, "--output", self.dst,
            "--audit", str(audit), "--control-topic", self.control_topic,
            "--session-timeout-ms", str(SESSION_MS), "--hold-ms", str(hold_ms),
            "--prefix", prefix, "--protocol", self.protocol,
        ]  # fmt: skip
        proc, out = self.popen(name, cmd, ROOT)
        return self.add(MemberProcess(name, proc, AuditLog(audit), out))

    def wait_stable(self, what: str, timeout: float = 90) -> None:
        parts = {(self.src, p) for p in range(PARTITIONS)}
        wait_for(lambda: self.is_stable(parts), timeout, f"{what}: {self.describe()}")

    def check_alive(self) -> None:
        for m in self.members.values():
            if m.killed_at is None and m.proc.poll() not in (None, 0):
                raise AssertionError(f"{m.name} died: {m.log_tail()}")


def count(m: MemberProcess, e: str) -> int:
    return sum(1 for f in m.facts() if f["e"] == e)


def next_transaction(m: MemberProcess) -> None:
    """Wait until ``m`` opens a transaction after now (its next ``txn`` fact)."""
    n = count(m, "txn")
    wait_for(lambda: count(m, "txn") > n, 60, f"a new transaction of {m.name}", step=0.01)


def freeze_in_transaction(m: MemberProcess, tries: int = 5) -> dict[str, Any]:
    """SIGSTOP ``m`` while a transaction of its is open (its last fact is a ``txn``: it has
    produced a batch and holds it uncommitted); return that fact."""
    for _ in range(tries):
        next_transaction(m)
        m.pause()
        last = m.facts()[-1]
        if last["e"] == "txn":
            return last
        m.resume()  # it had committed already: try the next one
    raise AssertionError(f"could not freeze {m.name} inside a transaction")


def kill_in_transaction(m: MemberProcess) -> None:
    next_transaction(m)
    m.kill()


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[TP, int]:
    """The group's committed offsets, stable ones only (``read_committed``: a pending
    transactional commit is waited for)."""
    read_committed = {"isolation.level": "read_committed"}
    return groupharness.committed_offsets(bootstrap, group, topic, PARTITIONS, **read_committed)


def read_output(bootstrap: str, topic: str) -> list[tuple[bytes | None, dict[str, Any]]]:
    """Every committed record of ``topic`` (``read_committed``), up to each partition's end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("reader"),
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "enable.auto.commit": False})  # fmt: skip
    out: list[tuple[bytes | None, dict[str, Any]]] = []
    try:
        c.assign([KTP(topic, p, 0) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition() or 0)
                        continue
                    raise AssertionError(f"reading the output: {err}")
                out.append((m.key(), json.loads(m.value() or b"{}")))
        assert len(at_end) == PARTITIONS, "the output was not read to its end"
        return out
    finally:
        c.close()


def check_exactly_once(
    out: list[tuple[bytes | None, dict[str, Any]]], acked: dict[TP, set[int]]
) -> tuple[set[TP | tuple[str, int, int]], Counter[tuple[str, int, int]]]:
    """The missing input records and the duplicated ones of ``out``."""
    seen = Counter((r["tp"][0], r["tp"][1], r["o"]) for _k, r in out)
    expected = {(tp[0], tp[1], o) for tp, offs in acked.items() for o in offs}
    missing: set[Any] = expected - seen.keys()
    dups = Counter({k: n for k, n in seen.items() if n > 1})
    return missing, dups


def wait_all_committed(g: EosGroup, ends: dict[TP, int], timeout: float = 120) -> None:
    def done() -> bool:
        g.check_alive()
        got = committed_offsets(g.bootstrap, g.group, g.src)
        return all(got.get(tp, -1) >= end for tp, end in ends.items())

    wait_for(done, timeout, "every input record committed", step=0.5)


@pytest.fixture
def eos_group(bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path) -> Any:
    src = topic_factory(partitions=PARTITIONS, prefix="in")
    dst = topic_factory(partitions=PARTITIONS, prefix="out")
    g = EosGroup(bootstrap, unique_name("g"), src, dst, tmp_path)
    yield g
    g.stop_all()


@pytest.mark.parametrize("protocol", ["cooperative", "eager"])
def test_every_record_exactly_once_through_zombies_crashes_and_rebalances(
    eos_group: EosGroup, protocol: str
) -> None:
    g = eos_group
    g.protocol = protocol
    w0, w1, w2 = (g.spawn(f"w{i}") for i in range(3))
    g.wait_stable("three members")
    load = LoadProducer.keyed(g.bootstrap, g.src, rate_per_s=100).start()
    try:
        # 1. A zombie: frozen inside a transaction past its session, then resumed.
        frozen = freeze_in_transaction(w0)
        g.wait_stable("the others took over the frozen member's partitions")
        assert time.monotonic() - w0.pauses[-1][0] > SESSION_MS / 1000
        w0.resume()
        # The broker refused the zombie's transaction: the new owner's init_transactions()
        # bumped the epoch of the partition's transactional.id.
        wait_for(lambda: any(f["e"] == "fenced" and f["tp"] == frozen["tp"]
                             for f in w0.facts()), 30, "the zombie fenced")  # fmt: skip
        assert not any(f["e"] == "committed" and f["tp"] == frozen["tp"]
                       and f["t"] > frozen["t"] for f in w0.facts())  # fmt: skip
        g.wait_stable("the zombie back in the group")
        # 2. kill -9 inside a transaction.
        kill_in_transaction(w1)
        g.wait_stable("the survivors took over the killed member's partitions")
        # 3. Rebalances while transactions run: one joins, one leaves.
        w3 = g.spawn("w3")
        g.wait_stable("a fourth member joined")
        w2.close()
        g.wait_stable("a member left")
        left = time.monotonic()

        def final_group_worked() -> bool:
            # The load goes on until every member of the final group has committed a
            # transaction, and the run holds the volume checked below.
            return sum(len(v) for v in list(load.acked.values())) >= ENOUGH and all(
                any(f["e"] == "committed" and f["t"] > left for f in w.facts()) for w in g.live()
            )

        wait_for(final_group_worked, 60, f"the final group to commit, {ENOUGH} records acked")
    finally:
        load.stop()
    acked = dict(load.acked)
    assert sum(len(v) for v in acked.values()) >= ENOUGH
    wait_all_committed(g, load.end_offsets())
    for m in (w0, w3):
        m.close()
    out = read_output(g.bootstrap, g.dst)
    missing, dups = check_exactly_once(out, acked)
    assert not missing, f"{len(missing)} input records lost, e.g. {sorted(missing)[:5]}"
    assert not dups, f"{len(dups)} input records duplicated, e.g. {sorted(dups)[:5]}"
    # Each key's records in input order (one input partition per key, one chain of
    # transactions per partition).
    per_key: dict[bytes | None, list[int]] = defaultdict(list)
    for key, r in out:
        per_key[key].append(int(r["v"]))
    assert all(v == sorted(v) for v in per_key.values())


def test_without_the_partition_fencing_a_zombie_duplicates(eos_group: EosGroup) -> None:
    """The control: each process's own transactional.id prefix, so no epoch is bumped when a
    partition changes hands. The frozen member's open transaction is not aborted; resumed, it
    commits a batch its successor has processed again: duplicates."""
    g = eos_group
    w0 = g.spawn("w0", prefix=unique_name("solo"))
    w1 = g.spawn("w1", prefix=unique_name("solo"))
    g.wait_stable("two members")
    load = LoadProducer.keyed(g.bootstrap, g.src, rate_per_s=100).start()
    try:
        frozen = freeze_in_transaction(w0)
        tp = frozen["tp"]
        # The successor processed the frozen batch again (from the offset committed before it).
        wait_for(lambda: any(f["e"] == "committed" and f["tp"] == tp
                             and f["next"] > frozen["first"] + frozen["n"] for f in w1.facts()),
                 60, "the successor past the frozen batch")  # fmt: skip
        w0.resume()
        wait_for(lambda: any(f["e"] in ("committed", "fenced") and f["tp"] == tp
                             and f["t"] > frozen["t"] for f in w0.facts()),
                 30, "the zombie's transaction ended")  # fmt: skip
    finally:
        load.stop()
    w1.close()
    out = read_output(g.bootstrap, g.dst)
    _missing, dups = check_exactly_once(out, dict(load.acked))
    batch = {(tp[0], tp[1], o) for o in range(frozen["first"], frozen["first"] + frozen["n"])}
    assert batch <= dups.keys(), "without the fencing, the zombie's batch is in the output twice"


def test_the_example_copies_every_record_once(
    bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """examples/exactly_once.py, run as a user would, until it has been idle for a while."""
    src = topic_factory(partitions=PARTITIONS, prefix="in")
    dst = topic_factory(partitions=PARTITIONS, prefix="out")
    p = Producer({"bootstrap.servers": bootstrap})
    words = [f"word-{i}" for i in range(300)]
    for i, w in enumerate(words):
        p.produce(src, key=f"k{i % 17}".encode(), value=w.encode())
    assert p.flush(30) == 0
    group = unique_name("g")
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "exactly_once.py"), "--bootstrap", bootstrap,
         "--group", group, "--input", src, "--output", dst, "--stop-after-idle", "5"],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("reader"),
                  "isolation.level": "read_committed", "enable.partition.eof": True})  # fmt: skip
    got: list[str] = []
    try:
        c.assign([KTP(dst, i, 0) for i in range(PARTITIONS)])
        at_end: set[int] = set()
        wait_for(lambda: _read_some(c, got, at_end), 60, "the output read to its end", step=0)
    finally:
        c.close()
    assert sorted(got) == sorted(w.upper() for w in words)
    assert committed_offsets(bootstrap, group, src) == _ends(bootstrap, src)


def _read_some(c: Consumer, got: list[str], at_end: set[int], parts: int = PARTITIONS) -> bool:
    for m in c.consume(500, 0.5):
        err = m.error()
        if err is not None and err.code() == KafkaError._PARTITION_EOF:
            at_end.add(m.partition() or 0)
        elif err is None:
            got.append((m.value() or b"").decode())
    return len(at_end) == parts


def _ends(bootstrap: str, topic: str) -> dict[TP, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("ends")})
    try:
        return {
            (topic, i): c.get_watermark_offsets(KTP(topic, i), timeout=10)[1]
            for i in range(PARTITIONS)
        }
    finally:
        c.close()


def test_an_aborted_batch_is_fetched_again_and_committed_once(
    bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    """A transaction whose body raises is aborted, and its records come back from the next
    ``consume``: processed again, they are in the output once."""
    src = topic_factory(partitions=1, prefix="in")
    dst = topic_factory(partitions=1, prefix="out")
    # The shared helper, not a producer of this frame: the traceback of the RuntimeError caught
    # below still refers to this frame at the session's end, and a producer held by it outlived
    # the broker (the leak check's "1 librdkafka client(s) were still alive").
    groupharness.produce(bootstrap, src, {0: 20})
    consumer = GroupConsumer({
        "bootstrap.servers": bootstrap, "group.id": unique_name("g"),
        "auto.offset.reset": "earliest", "session.timeout.ms": 3000,
        "groupkit.control.topic": unique_name("ctl"), "enable.auto.commit": False,
        "groupkit.offsets.keepalive.interval.ms": 0,
    })  # fmt: skip
    eos = TransactionalProcessor(consumer, {"bootstrap.servers": bootstrap})
    done: list[int] = []
    failed_once = False
    try:
        consumer.subscribe([src])
        deadline = time.monotonic() + 60
        while len(done) < 20 and time.monotonic() < deadline:
            for batch in by_partition(consumer.consume(5, 0.2)):
                try:
                    with eos.transaction(batch) as producer:
                        for m in batch:
                            producer.produce(dst, value=m.value())
                        if not failed_once and (batch[-1].offset() or 0) >= 7:
                            failed_once = True
                            raise RuntimeError("the processing failed")
                    done.extend(m.offset() or 0 for m in batch)
                except RuntimeError:
                    pass
    finally:
        consumer.close()
        eos.close()
    assert failed_once
    assert done == list(range(20)), "the aborted batch was fetched again, from its first record"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("reader"),
                  "isolation.level": "read_committed", "enable.partition.eof": True})  # fmt: skip
    got: list[str] = []
    try:
        c.assign([KTP(dst, 0, 0)])
        at_end: set[int] = set()
        wait_for(lambda: _read_some(c, got, at_end, 1), 60, "the output read to its end", step=0)
    finally:
        c.close()
    assert sorted(got, key=int) == [str(i) for i in range(20)]


def test_offsets_committed_outside_the_transactions_are_refused(conf: dict[str, Any]) -> None:
    consumer = GroupConsumer(conf)  # auto-commit and the offset keep-alive on
    try:
        with pytest.raises(ConfigError, match=r"enable\.auto\.commit"):
            TransactionalProcessor(consumer, {"bootstrap.servers": conf["bootstrap.servers"]})
    finally:
        consumer.close()
