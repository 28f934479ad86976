"""Logging for apps that embed groupkit.

groupkit logs through ``structlog.get_logger()`` and configures nothing on import: an app that
configures structlog (or routes it into the standard library's ``logging``) gets groupkit's
events its own way. Every event of the control loop carries ``group`` and ``member`` (and
``generation`` where one is involved), and every rebalance ends with one ``rebalance`` line on
its leader::

    {"event": "rebalance", "group": "orders", "leader": "w1-3f2a...", "reason": "member_joined",
     "protocol": "cooperative", "generation": 7, "generations": 2, "moved": 3, "revoked": 3,
     "duration_ms": 41.2, "outcome": "completed", "level": "info", "timestamp": "..."}

An app that has no logging set up of its own can call :func:`configure` once at start-up.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

__all__ = ["configure", "get_logger"]


def configure(
    json: bool = True, level: int | str = logging.INFO, stream: TextIO | None = None
) -> None:
    """Configure structlog for the whole process: one line per event on ``stream`` (stderr).

    ``json=True`` writes JSON lines for log shippers; ``json=False`` writes aligned, readable
    lines for a terminal. ``level`` filters below it (a name like ``"debug"`` or a number).
    """
    if isinstance(level, str):
        number = logging.getLevelName(level.upper())
        if not isinstance(number, int):
            raise ValueError(f"unknown log level {level!r}")
        level = number
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if json:
        processors += [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=False),
        ]
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=stream is None and _tty()))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str, **bound: Any) -> Any:
    """A structlog logger with ``bound`` key-values (e.g. ``group=``, ``member=``) on every
    event."""
    return structlog.get_logger(name).bind(**bound)


def _tty() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())
