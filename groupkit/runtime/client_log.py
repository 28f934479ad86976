"""librdkafka's own log lines, routed to groupkit's loggers.

librdkafka writes its log to stderr unless a client is given a ``logger``, so a library that
promises silence until the app configures logging must give every internal client one (the
control reader and writer, the data consumer, the admin and telemetry clients). Their lines go
to the ``groupkit.librdkafka`` logger as the event ``librdkafka`` with the line's facility
(``fac``), the client's name and its message, at the level confluent-kafka maps librdkafka's
syslog level to (a ``GETPID`` retry is a warning, a ``debug`` context's line is debug).

confluent-kafka hands a client's lines over from its ``poll()`` (they wait in the client's log
queue until then), so they arrive on the thread that polls the client. A user's own ``logger``
setting wins: the lines go to it instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from groupkit.log import get_logger

__all__ = ["ClientLog", "LineWatch", "with_client_log"]

_log = get_logger("groupkit.librdkafka")

#: (level, facility, message) of one line, for a client that acts on its own log
LineWatch = Callable[[int, str, str], None]


class ClientLog:
    """A ``logger`` for one librdkafka client: forwards each line to ``groupkit.librdkafka``
    (or to the user's own ``logger``, when the settings name one), and first shows it to
    ``watch`` (if any), which the control writer uses to learn when its producer id is
    assigned."""

    def __init__(self, watch: LineWatch | None = None, forward: Any = None) -> None:
        self._watch = watch
        self._forward = forward

    def log(self, level: int, fmt: str, *args: Any) -> None:
        # confluent-kafka calls log(level, "%s [%s] %s", facility, client name, message).
        if len(args) == 3:
            fac, client, message = (str(a) for a in args)
        else:
            fac, client, message = "", "", fmt % args if args else fmt
        if self._watch is not None:
            self._watch(level, fac, message)
        if self._forward is not None:
            self._forward.log(level, fmt, *args)
        elif level >= logging.CRITICAL:
            _log.critical("librdkafka", fac=fac, client=client, message=message)
        elif level >= logging.ERROR:
            _log.error("librdkafka", fac=fac, client=client, message=message)
        elif level >= logging.WARNING:
            _log.warning("librdkafka", fac=fac, client=client, message=message)
        elif level >= logging.INFO:
            _log.info("librdkafka", fac=fac, client=client, message=message)
        else:
            _log.debug("librdkafka", fac=fac, client=client, message=message)


def with_client_log(conf: dict[str, Any], watch: LineWatch | None = None) -> dict[str, Any]:
    """``conf`` with a :class:`ClientLog` as its ``logger`` (in front of the user's own
    ``logger``, if the settings name one: its lines still go there)."""
    user = conf.get("logger")
    if isinstance(user, ClientLog):
        return conf
    return {**conf, "logger": ClientLog(watch, forward=user)}
