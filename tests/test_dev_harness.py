"""The harness's audit and its invariant checker, on audit files written here (no broker): what
the chaos run, the cluster tests and the benches count on when they say "0 overlaps, 0 lost".
And its load producer, against the broker: the load the benches' "consuming again" rests on."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from groupkit.dev.harness import (
    Audit,
    AuditLog,
    Group,
    LoadProducer,
    MemberProcess,
    missing,
    overlaps,
    wait_for,
)


def test_audit_log_reads_what_was_appended_and_skips_a_cut_line(tmp_path: Path) -> None:
    path = tmp_path / "w0.jsonl"
    audit = Audit(path)
    log = AuditLog(path)
    assert log.refresh() == []  # nothing written yet
    audit.ownership("assign", [("t", 0), ("t", 1)])
    assert [f["e"] for f in log.refresh()] == ["assign"]
    assert log.owned == {("t", 0), ("t", 1)}
    audit.ownership("revoke", [("t", 1)])
    assert [f["e"] for f in log.refresh()] == ["revoke"]
    assert log.owned == {("t", 0)}
    with open(path, "a") as f:
        f.write('{"e":"closed"}\n{"e": "revo')  # kill -9 in the middle of a line
    assert [f["e"] for f in log.refresh()] == ["closed"]  # the cut line is not read
    assert log.closed and log.owned == set()


def test_overlaps_finds_a_partition_owned_by_two_members_at_once() -> None:
    tp = ("t", 0)
    handed_over = {tp: [(0.0, 1.0, "a"), (1.0, 2.0, "b")]}  # touching is a clean hand-off
    assert overlaps(handed_over) == []
    doubled = {tp: [(0.0, 1.5, "a"), (1.0, 2.0, "b"), (3.0, 4.0, "a")]}
    assert len(overlaps(doubled)) == 1
    assert overlaps(doubled, ignore=["a"]) == []  # a frozen member is checked apart
    # one long interval overlapping two later ones is caught twice, not only by its neighbour
    assert len(overlaps({tp: [(0.0, 9.0, "a"), (1.0, 2.0, "b"), (3.0, 4.0, "c")]})) == 2


def test_missing_counts_acknowledged_records_never_processed() -> None:
    ends = {("t", 0): 3, ("t", 1): 2}
    done = {("t", 0): Counter({0: 1, 1: 2, 2: 1}), ("t", 1): Counter({1: 1})}
    assert missing(ends, done) == {("t", 1): {0}}


def test_group_intervals_end_at_revoke_close_and_kill(tmp_path: Path) -> None:
    """Intervals from two real (idle) processes' audits: one closes, one is killed -9."""
    group: Group[MemberProcess] = Group(tmp_path)
    procs = {}
    for name in ("a", "b"):
        cmd = [sys.executable, "-c", "import sys; sys.stdin.read()"]
        proc, out = group.popen(name, cmd, tmp_path)
        procs[name] = group.add(MemberProcess(name, proc, AuditLog(tmp_path / name), out))
    a, b = Audit(tmp_path / "a"), Audit(tmp_path / "b")
    a.write("assign", tps=[["t", 0], ["t", 1]], t=1.0)
    a.write("revoke", tps=[["t", 1]], t=2.0)
    a.write("closed", t=5.0)
    b.write("assign", tps=[["t", 1]], t=2.5)
    b.write("state", member="b", generation=3, leader=True)
    assert group.leader() is procs["b"]
    killed_at = procs["b"].kill()
    assert group.intervals() == {
        ("t", 0): [(1.0, 5.0, "a")],
        ("t", 1): [(1.0, 2.0, "a"), (2.5, killed_at, "b")],
    }
    assert group.overlaps() == []
    assert procs["a"].owned() == set() and procs["b"].owned() == set()  # closed; dead
    procs["a"].proc.kill()
    procs["a"].proc.wait(10)
    wait_for(lambda: not procs["a"].alive, 5, "a to be gone")


def test_the_every_partition_load_writes_every_round_a_broker_keeps_up_with(
    bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=4)
    load = LoadProducer.every_partition(bootstrap, topic, 4, period=0.05).start()
    try:
        wait_for(lambda: load.count >= 4 * 20, 60, "20 rounds produced")
    finally:
        load.stop()
    # A round is skipped only while two are undelivered, which an idle broker's acknowledgement
    # within 100 ms hardly ever is; a delivered record whose report was not served yet counts
    # in the client's queue, and taken for undelivered it would skip every other round.
    assert load.dropped_rounds < 5, load.dropped_rounds
