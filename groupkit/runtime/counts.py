"""The leader's partition counts of the topics its group subscribes to, refreshed each second.

Only a topic not yet counted is asked for at once; a refresh runs in the background, so a
leader never waits on a metadata round trip to plan (it was one hop of every join: the counts
were usually a second old when the newcomer's record arrived). A count that changes is planned
for in the turn after the refresh (Planner: partitions_changed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from confluent_kafka.admin import AdminClient

from groupkit.log import get_logger

_log = get_logger("groupkit.runtime")


class PartitionCounts:
    """Partition counts of topics, asked of the cluster through ``admin``."""

    def __init__(self, admin: AdminClient, member_id: str) -> None:
        self.admin = admin
        self.member_id = member_id
        self._counts: dict[str, int] = {}
        self._counts_at = 0.0
        self._counting = False  # a background refresh of _counts is under way

    def of(self, topics: Iterable[str]) -> dict[str, int]:
        """The count of each of ``topics`` (0: unknown), a second old at most."""
        now = time.monotonic()
        topics = sorted(topics)
        if any(t not in self._counts for t in topics):
            self._refresh(topics, now)
        elif now - self._counts_at >= 1.0 and not self._counting:
            self._counting = True
            threading.Thread(
                target=self._refresh_in_background, args=(topics, now), daemon=True,
                name=f"groupkit-metadata-{self.member_id}",
            ).start()  # fmt: skip
        counts = self._counts
        return {t: counts.get(t, 0) for t in topics}

    def _refresh(self, topics: list[str], now: float) -> None:
        try:
            md = self.admin.list_topics(timeout=5)
            counts: dict[str, int] = {}
            for t in topics:
                tm = md.topics.get(t)
                counts[t] = len(tm.partitions) if tm is not None and tm.error is None else 0
            self._counts = counts  # one assignment: the control thread reads whole dicts
            self._counts_at = now
        except Exception as e:
            _log.warning("metadata.unavailable", error=str(e))

    def _refresh_in_background(self, topics: list[str], now: float) -> None:
        # Only this thread clears the flag: an inline refresh meanwhile must not let a second
        # background one start beside it.
        try:
            self._refresh(topics, now)
        finally:
            self._counting = False
