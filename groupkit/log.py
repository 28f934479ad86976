"""Logging as a library should: silent until the app configures logging.

groupkit's events are structured (an event name and key-values; every event of the control loop
carries ``group`` and ``member``, and ``generation`` where one is involved), and they go to the
standard library logger ``groupkit`` (``groupkit.runtime``, ``groupkit.consumer``, ...), which
has a ``NullHandler``, as Python's logging HOWTO asks of a library. What an app sees:

- **It configures nothing**: nothing. No line on stdout or stderr (not even warnings: the
  ``NullHandler`` keeps ``logging.lastResort`` quiet).
- **It uses ``logging``** (``logging.basicConfig(level=logging.INFO)``, a ``dictConfig``):
  groupkit's events arrive as ordinary records of the ``groupkit.*`` loggers, filtered by
  their levels, and formatted by the app's formatter. The message is the event and its
  key-values: ``rebalance group=orders leader=w1-3f2a generation=7 moved=3 ...``.
- **It uses structlog**: structlog's own configuration applies to the app's loggers, not to
  groupkit's, which always go through ``logging`` (the choice that lets ``logging`` levels
  and handlers govern groupkit the same way in every app). To render groupkit's events with
  the app's structlog processors, put structlog's ``ProcessorFormatter`` on a handler of the
  ``groupkit`` logger (or the root logger)::

      handler = logging.StreamHandler()
      handler.setFormatter(structlog.stdlib.ProcessorFormatter(processors=[
          structlog.stdlib.ProcessorFormatter.remove_processors_meta,
          structlog.processors.add_log_level,
          structlog.processors.TimeStamper(fmt="iso"),
          structlog.processors.JSONRenderer(),
      ]))
      logging.getLogger("groupkit").addHandler(handler)
      logging.getLogger("groupkit").setLevel(logging.INFO)

  The formatter receives each event's key-values as a dict (the record's ``msg``), as it does
  for the app's own events routed by ``ProcessorFormatter.wrap_for_formatter``: nothing is
  parsed back out of a string.
- **It wants one call**: :func:`configure` sets up ``logging`` (and structlog, for the app's
  own ``structlog.get_logger()`` events) to write one line per event, JSON or for a terminal::

      {"event": "rebalance", "group": "orders", "leader": "w1-3f2a...", "reason": "member_joined",
       "protocol": "cooperative", "generation": 7, "generations": 2, "moved": 3, "revoked": 3,
       "duration_ms": 41.2, "outcome": "completed", "level": "info", "timestamp": "..."}

A level that is off costs one ``Logger.isEnabledFor`` call (cached by ``logging``): the event
is neither built nor formatted. Formatting happens in the handler, only for records it emits.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import structlog

from groupkit.errors import ConfigError

__all__ = ["Logger", "capture", "configure", "get_logger"]

ROOT = "groupkit"

logging.getLogger(ROOT).addHandler(logging.NullHandler())

#: method name -> (stdlib level, the level name structlog's processors expect)
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


class _Event(dict[str, Any]):
    """One event as a record's ``msg``: a dict for ``ProcessorFormatter`` (which copies it),
    the event and its key-values as text for any other formatter (``str(msg)``)."""

    __slots__ = ()

    def __str__(self) -> str:
        parts = [str(self.get("event", ""))]
        for k, v in self.items():
            if k == "event" or k == "exc_info":  # a traceback is the formatter's job
                continue
            s = v if isinstance(v, str) and v and " " not in v and "=" not in v else repr(v)
            parts.append(f"{k}={s}")
        return " ".join(parts)


class Logger(structlog.BoundLoggerBase):
    """A structlog bound logger (``bind``, ``unbind``, ``new``) over a ``logging.Logger``.

    ``log.info("rebalance", group=..., moved=3)`` emits one record on the wrapped logger if
    its level is enabled, with ``msg`` the event dict; nothing is built otherwise.
    """

    _logger: logging.Logger

    def _emit(self, method: str, event: str, kw: dict[str, Any], exc: bool = False) -> None:
        ed = _Event(event=event)
        ed.update(self._context)
        ed.update(kw)
        exc_info: Any = ed.get("exc_info")
        if exc or exc_info is True:
            exc_info = sys.exc_info()  # now: a handler may format it later, elsewhere
        if exc_info:
            ed["exc_info"] = exc_info
        # _logger/_name are what ProcessorFormatter looks for to treat msg as an event dict.
        self._logger.log(
            _LEVELS[method],
            ed,
            exc_info=exc_info or None,
            extra={"_logger": self._logger, "_name": method},
            stacklevel=3,  # the caller of debug()/info()/..., not this module
        )

    def debug(self, event: str, **kw: Any) -> None:
        if self._logger.isEnabledFor(logging.DEBUG):
            self._emit("debug", event, kw)

    def info(self, event: str, **kw: Any) -> None:
        if self._logger.isEnabledFor(logging.INFO):
            self._emit("info", event, kw)

    def warning(self, event: str, **kw: Any) -> None:
        if self._logger.isEnabledFor(logging.WARNING):
            self._emit("warning", event, kw)

    def error(self, event: str, **kw: Any) -> None:
        if self._logger.isEnabledFor(logging.ERROR):
            self._emit("error", event, kw)

    def exception(self, event: str, **kw: Any) -> None:
        """An error with the exception being handled (call it in an ``except`` block)."""
        if self._logger.isEnabledFor(logging.ERROR):
            self._emit("error", event, kw, exc=True)

    def critical(self, event: str, **kw: Any) -> None:
        if self._logger.isEnabledFor(logging.CRITICAL):
            self._emit("critical", event, kw)


def get_logger(name: str = ROOT, **bound: Any) -> Logger:
    """A logger for ``name`` (a ``groupkit.*`` name for groupkit's own modules) with ``bound``
    key-values (e.g. ``group=``, ``member=``) on every event."""
    return Logger(logging.getLogger(name), (), dict(bound))


# --------------------------------------------------------------------------- for apps

_installed: logging.Handler | None = None


def configure(
    json: bool = True, level: int | str = logging.INFO, stream: TextIO | None = None
) -> None:
    """Set up the process's logging for an app that has none of its own: one line per event
    on ``stream`` (stderr), from groupkit, from ``logging`` and from ``structlog.get_logger()``.

    ``json=True`` writes JSON lines for log shippers; ``json=False`` writes aligned, readable
    lines for a terminal. ``level`` filters below it (a name like ``"debug"`` or a number).
    Calling it again replaces what the previous call set up.
    """
    global _installed
    if isinstance(level, str):
        number = logging.getLevelName(level.upper())
        if not isinstance(number, int):
            raise ConfigError(f"unknown log level {level!r}")
        level = number
    shared: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: list[Any]
    if json:
        renderer = [
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=False),
        ]
    else:
        renderer = [structlog.dev.ConsoleRenderer(colors=stream is None and _tty())]
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,  # records of plain logging users
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *shared,
                *renderer,
            ],
        )
    )
    root = logging.getLogger()
    if _installed is not None:
        root.removeHandler(_installed)
    root.addHandler(handler)
    root.setLevel(level)
    _installed = handler
    # The app's own structlog loggers go the same way, through logging to this handler.
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )


@contextmanager
def capture(level: int = logging.DEBUG) -> Iterator[list[dict[str, Any]]]:
    """For tests: the events groupkit logs inside the block, as dicts with the event, its
    key-values and ``log_level`` (the shape of ``structlog.testing.capture_logs``)."""
    events: list[dict[str, Any]] = []

    class _Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            ed = dict(record.msg) if isinstance(record.msg, dict) else {"event": record.msg}
            ed["log_level"] = record.levelname.lower()
            events.append(ed)

    logger = logging.getLogger(ROOT)
    handler, old = _Capture(level), logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield events
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


def _tty() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())
