"""The counters of one member's control loop (``Coordinator.stats``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Stats:
    """What the control loop has done, counted as it goes."""

    records_read: int = 0
    records_written: int = 0
    rebalances: Counter[str] = field(default_factory=Counter)
    write_errors: int = 0
    #: the largest broker clock difference seen beyond groupkit.max.clock.skew.ms (0: none)
    clock_skew_ms: int = 0
    #: how the member caught up at start: "snapshot" (bounded) or "full"
    catch_up: str = ""
    #: records fetched from the log's tail to find the snapshot (not replayed unless after it)
    catch_up_scanned: int = 0
    #: records replayed to catch up (``records_read`` then; it goes on counting what the
    #: member reads after, from GroupConsumer() on)
    catch_up_replayed: int = 0
    #: times the cluster did not answer the member's catch-up (it waits and asks again)
    unanswered: int = 0
    #: times the control reader stopped fetching and was renewed (``Coordinator._watch_reader``)
    reader_renewals: int = 0
    #: times the control writer stopped delivering and was renewed (``Coordinator._watch_writer``)
    writer_renewals: int = 0
