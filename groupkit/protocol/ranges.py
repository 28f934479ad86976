"""Partitions on the wire, range-encoded: per topic a sorted list of ``p`` or ``[first, last]``.

A group's records name many partitions (an assignment names every one), mostly in runs, so a
run costs a few bytes whatever its length. Decoding counts the partitions a record expands to
against a budget before expanding any, so a few bytes cannot make a reader allocate millions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from groupkit.errors import RecordRejected
from groupkit.protocol.schema import Partitions
from groupkit.protocol.vocab import RejectReason
from groupkit.types import TopicPartition

MAX_PARTITIONS = 1 << 20  # partitions in one record, over all its fields: refuses range bombs


def encode_partitions(parts: Iterable[tuple[str, int]]) -> dict[str, list[Any]]:
    """Range-encode: per topic a sorted list of ``p`` or ``[first, last]`` (inclusive)."""
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    out: dict[str, list[Any]] = {}
    for t in sorted(by_topic):
        ps = sorted(set(by_topic[t]))
        runs: list[Any] = []
        i = 0
        while i < len(ps):
            j = i
            while j + 1 < len(ps) and ps[j + 1] == ps[j] + 1:
                j += 1
            runs.append(ps[i] if i == j else [ps[i], ps[j]])
            i = j + 1
        out[t] = runs
    return out


MAX_RANGE = 1 << 20  # a topic has at most ~1M partitions; refuses range bombs


class PartitionBudget:
    """How many more partitions one record may expand to (see :data:`MAX_PARTITIONS`)."""

    __slots__ = ("left",)

    def __init__(self, n: int = MAX_PARTITIONS) -> None:
        self.left = n

    def take(self, n: int, name: str) -> None:
        self.left -= n
        if self.left < 0:
            raise RecordRejected(
                RejectReason.TOO_LARGE, f"{name}: more than {MAX_PARTITIONS} partitions"
            )


def decode_partitions(
    v: Any, name: str = "partitions", budget: PartitionBudget | None = None
) -> Partitions:
    """Inverse of :func:`encode_partitions`; rejects anything malformed.

    Ranges are counted against ``budget`` (one per record) *before* they are expanded, so a
    few bytes like ``{"t": [[0, 1048575], [0, 1048575], ...]}`` cannot make a reader allocate
    or loop over millions of partitions.
    """
    budget = budget if budget is not None else PartitionBudget()
    if not isinstance(v, dict):
        raise RecordRejected(RejectReason.WRONG_TYPE, f"{name}: not an object")
    ranges: list[tuple[str, int, int]] = []
    n = 0
    for t, runs in v.items():
        if not t or not isinstance(runs, list):
            raise RecordRejected(RejectReason.WRONG_TYPE, f"{name}: bad topic entry")
        for r in runs:
            if is_int(r):
                lo = hi = r
            elif isinstance(r, list) and len(r) == 2 and is_int(r[0]) and is_int(r[1]):
                lo, hi = r
            else:
                raise RecordRejected(RejectReason.WRONG_TYPE, f"{name}: bad range {r!r}")
            if lo < 0 or hi < lo or hi >= MAX_RANGE:
                raise RecordRejected(RejectReason.BAD_VALUE, f"{name}: bad range {r!r}")
            ranges.append((t, lo, hi))
            n += hi - lo + 1
            if n > budget.left:
                budget.take(n, name)  # raises, before anything is expanded
    budget.take(n, name)
    out: set[TopicPartition] = set()
    for t, lo, hi in ranges:
        out.update(TopicPartition(t, p) for p in range(lo, hi + 1))
    return frozenset(out)


def is_int(x: Any) -> bool:
    """A JSON integer: ``json`` reads ``true`` as a bool, which is an int to Python."""
    return isinstance(x, int) and not isinstance(x, bool)
