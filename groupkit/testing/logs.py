"""The simulator's logs: an in-memory partition, stamped by a broker clock that may be off.

:class:`ControlLog` is a group's control partition in :mod:`groupkit.testing.sim`, and in
protocol version 2 its liveness log too (each with its own broker clock).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class LogRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


@dataclass(slots=True)
class ControlLog:
    """The control partition: a list, with the broker clock that stamps appends.

    ``skew`` is how far the clock of the broker that leads the partition is off the members'
    clocks: setting it mid-run is the partition's leadership moving to another broker (whose
    ``LogAppendTime`` then stamps every append). Members' monotonic clocks follow ``clock``.
    """

    records: list[LogRecord] = field(default_factory=list)
    clock: int = 0
    skew: int = 0
    #: the members' clock when each record was appended (its stamp is that plus ``skew``)
    appended_at: list[int] = field(default_factory=list)

    def append(self, key: bytes | None, value: bytes | None, timestamp: int | None = None) -> int:
        """Append now (or at ``timestamp``: the time a delayed produce reaches the broker)."""
        off = len(self.records)
        at = self.clock if timestamp is None else timestamp
        # stamped by the leading broker's clock, which may be off (and jump back when the
        # leadership moves); readers see the record by the time it was really appended
        self.records.append(LogRecord(off, key, value, at + self.skew))
        self.appended_at.append(at)
        return off

    def compacted(
        self, clean_to: int | None = None, tombstones_before: int | None = None
    ) -> list[LogRecord]:
        """What compaction leaves once the cleaner has reached offset ``clean_to``.

        Below ``clean_to`` (default: the whole log) only the newest record of each key stays;
        from ``clean_to`` on, every record stays. A tombstone below ``clean_to`` that is the
        newest of its key stays until ``delete.retention.ms`` has passed: it is dropped if its
        timestamp is before ``tombstones_before`` (default: every such tombstone is dropped).
        """
        end = len(self.records) if clean_to is None else max(0, min(clean_to, len(self.records)))
        last: dict[bytes | None, LogRecord] = {}
        for r in self.records[:end]:
            last[r.key] = r
        kept = sorted(
            (
                r
                for r in last.values()
                if r.value is not None
                or (tombstones_before is not None and r.timestamp >= tombstones_before)
            ),
            key=lambda r: r.offset,
        )
        return kept + self.records[end:]
