"""When ``DataConsumer`` auto-commits (runtime/data_consumer.py): every interval while it owns
partitions, never in the turn that assigns some. librdkafka starts no newly assigned partition
while a commit of its handle is in flight; the assignment is served on its thread after
``assign`` returns. The handle is real: what is tested is when a commit would be sent."""

from __future__ import annotations

import pytest

from groupkit.runtime import data_consumer
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.data_consumer import DataConsumer
from groupkit.types import TopicPartition as TP

INTERVAL_S = 0.2


def _consumer(bootstrap: str) -> DataConsumer:
    cfg = GroupConfig.from_dict({
        "bootstrap.servers": bootstrap,
        "group.id": "auto-commit-timing",
        "auto.commit.interval.ms": int(INTERVAL_S * 1000),
    })  # fmt: skip
    return DataConsumer(cfg, lambda: "m", lambda: None)


def test_auto_commit_waits_an_interval_and_skips_the_turn_of_an_assign(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _consumer(bootstrap)
    now = [1000.0]
    # the consumer's clock, moved by the test (librdkafka's own is not Python's)
    monkeypatch.setattr(data_consumer.time, "monotonic", lambda: now[0])
    try:
        t0 = now[0]
        assert not d.auto_commit_due(t0 + 10)  # owns nothing: nothing to commit
        d.assign({TP("t", 0)}, {})
        # the first partitions: an interval later, when the rest of a newcomer's share came
        assert not d.auto_commit_due(t0 + INTERVAL_S - 0.01)
        assert d.auto_commit_due(t0 + INTERVAL_S + 0.01)
        # due again an interval after that commit, unless partitions were assigned just
        # before: then once the assignment has started (0.1 s), not a whole interval later
        now[0] = t0 + 2 * INTERVAL_S
        d.assign({TP("t", 1)}, {TP("t", 1): 5})
        assert not d.auto_commit_due(t0 + 2 * INTERVAL_S + 0.02)
        assert d.auto_commit_due(t0 + 2 * INTERVAL_S + 0.11)
        assert d.owned == {TP("t", 0), TP("t", 1)}
    finally:
        d.handle.close()
