"""A memo for decoded control records: bounded in entries and estimated bytes, whoever writes
the records, and still hitting when more keys cycle through it than it holds (the codec's decode
memos: protocol/codec.py)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

__all__ = ["BoundedMemo"]

_K = TypeVar("_K")
_V = TypeVar("_V")


class BoundedMemo(dict[_K, _V], Generic[_K, _V]):
    """A memo bounded in entries and in (estimated) bytes, whoever writes the records, whose
    hits do not stop when more keys cycle through it than it holds.

    A memo cleared when full, or one that evicts its oldest entry for every new one (FIFO,
    LRU), misses on every record once a group's members outnumber its entries: each
    heartbeat's entry was evicted since the member's previous one. This one, once full, keeps
    what it holds and takes one new key in :data:`TURNOVER` (evicting the entries written
    longest ago): a cycle over more keys than it holds still hits on the ones it holds, and
    entries nobody writes any more (a member that left, or keys a bad writer invented) still
    make room over time. Lookups are ``dict.get``: nothing is spent on the hit path."""

    #: once full, one new key in this many is taken
    TURNOVER = 8

    __slots__ = ("_refused", "_weights", "max_entries", "max_weight", "stores", "weight")

    def __init__(self, max_entries: int, max_weight: int) -> None:
        super().__init__()
        self.max_entries = max_entries
        self.max_weight = max_weight
        #: the entries' estimated bytes, in all
        self.weight = 0
        #: entries written (the misses that decoded whole): for tests and benchmarks
        self.stores = 0
        self._weights: dict[_K, int] = {}
        self._refused = 0

    def put(self, key: _K, value: _V, weight: int) -> None:
        """Keep ``value`` for ``key`` (replacing the key's entry), if the bounds allow."""
        if weight > self.max_weight // 16:
            self.pop(key)  # (one entry never takes more than a sixteenth)
            return
        old = self._weights.pop(key, None)
        if old is not None:
            del self[key]
            self.weight -= old
        elif len(self) >= self.max_entries or self.weight + weight > self.max_weight:
            self._refused += 1
            if self._refused % self.TURNOVER:
                return
        # (a key's new entry may weigh more than its previous one: it makes room too)
        while self and (len(self) >= self.max_entries or self.weight + weight > self.max_weight):
            self.pop(next(iter(self)))
        self[key] = value  # (at the end: the entries written longest ago come first)
        self._weights[key] = weight
        self.weight += weight
        self.stores += 1

    def pop(self, key: _K, default: Any = None) -> Any:
        w = self._weights.pop(key, None)
        if w is not None:
            self.weight -= w
        return super().pop(key, default)

    def clear(self) -> None:
        super().clear()
        self._weights.clear()
        self.weight = 0
