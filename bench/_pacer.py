"""The benches' load, ``LoadProducer.every_partition``, in a process of its own.

In the bench's own process the producer shares a GIL with the harness, which reads every
member's audit every 20 ms while it waits for a group to settle; a round that waits for the GIL
is a round late, and a partition without a record is a partition that cannot be seen
"consuming again". Here the process does nothing but produce, and answers the bench's
questions (:meth:`Pacer.stats`) over a pipe.
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any


@dataclass
class PacerStats:
    count: int  # records produced since the pacer started
    dropped_rounds: int  # rounds skipped (see LoadProducer): the machine was slower than asked
    queued: list[int]  # per round since the last call: records waiting in the client's queue


def _run(bootstrap: str, topic: str, partitions: int, period: float, conn: Connection) -> None:
    from groupkit.dev.harness import LoadProducer

    pacer = LoadProducer.every_partition(bootstrap, topic, partitions, period).start()
    seen = 0
    try:
        while conn.recv() == "stats":
            queued = pacer.queued[seen:]
            seen += len(queued)
            conn.send(PacerStats(pacer.count, pacer.dropped_rounds, queued))
    finally:
        pacer.stop()
        conn.send(PacerStats(pacer.count, pacer.dropped_rounds, pacer.queued[seen:]))


class Pacer:
    """``with Pacer(bootstrap, topic, partitions, period) as pacer: ...``"""

    def __init__(self, bootstrap: str, topic: str, partitions: int, period: float) -> None:
        ctx = mp.get_context("spawn")  # no inherited librdkafka state or threads
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_run, args=(bootstrap, topic, partitions, period, child),
                                 daemon=True, name="bench-pacer")  # fmt: skip
        #: what the process had produced when it stopped (``stats`` answers it from then on)
        self._final: PacerStats | None = None

    def __enter__(self) -> Pacer:
        self._proc.start()
        return self

    def stats(self) -> PacerStats:
        """What was produced so far; ``queued`` covers the rounds since the last call. Once
        the pacer has stopped: what it had produced then."""
        if self._final is not None:
            return self._final
        self._conn.send("stats")
        if not self._conn.poll(30):
            raise RuntimeError("the bench's producer process does not answer")
        got: PacerStats = self._conn.recv()
        return got

    def __exit__(self, *exc: Any) -> None:
        if self._proc.is_alive():
            self._conn.send("stop")
            if self._conn.poll(90):  # the producer flushes for up to 30 s, then goes
                self._final = self._conn.recv()
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
