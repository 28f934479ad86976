"""The short chaos run: every kind of fault once (see tests/chaos.py), then the audit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import CLUSTER_FAULTS, FAULTS, Chaos


# cooperative-sticky: groupkit's default, whose joins and leaves hand partitions over without
# the leader (admission, inheritance), on the default protocol version; range: every change
# through the leader's plans, on protocol version 1, which groups may still choose
@pytest.mark.parametrize(("assignor", "version"), [("cooperative-sticky", None), ("range", 1)])
def test_chaos_short(tmp_path: Path, assignor: str, version: int | None) -> None:
    chaos = Chaos(tmp_path, members=5, partitions=10, session_timeout_ms=3000, seed=11,
                  assignor=assignor, protocol_version=version)  # fmt: skip
    report = chaos.run(duration_s=0)  # one of each fault, no random extras
    print(report.summary())
    assert [f["fault"] for f in report.faults] == list(FAULTS)
    assert report.produced > 500
    assert report.lost == 0
    assert report.running_overlaps == []
    assert report.unexplained_duplicates == []
    assert report.zombie_late_records == []
    # Each fault was followed by a stable group within session timeout + margin (else
    # wait_stable would have failed the run); record how fast, for the log.
    assert all(float(f["stable_after_s"]) <= 3.0 + 20.0 for f in report.faults)  # type: ignore[arg-type]


def test_chaos_cluster_short(tmp_path: Path) -> None:
    """The short run on a three-broker cluster (one node's clock 1 s ahead): every fault once,
    the cluster's own included, with groupkit's default assignor."""
    chaos = Chaos(tmp_path, members=4, partitions=8, session_timeout_ms=4000, seed=13, brokers=3)
    report = chaos.run(duration_s=0)
    print(report.summary())
    assert [f["fault"] for f in report.faults] == list(CLUSTER_FAULTS)
    assert report.produced > 500
    assert report.lost == 0
    assert report.running_overlaps == []
    assert report.unexplained_duplicates == []
    assert report.zombie_late_records == []
