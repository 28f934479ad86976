"""One call run on a daemon thread while the caller does something else meanwhile.

Used where two broker round trips (or a round trip and a warm-up) can be in flight together:
:meth:`Background.result` waits for the call and returns its value, or re-raises its error in
the caller's thread (an error on a helper thread must not be lost).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """Run ``fn`` on a daemon thread; :meth:`result` waits for it and returns its value or
    re-raises its error."""

    def __init__(self, fn: Callable[[], T], name: str = "groupkit-background") -> None:
        self._value: list[T] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], T]) -> None:
        try:
            self._value.append(fn())
        except BaseException as e:  # handed to result()
            self._error = e

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value[0]
