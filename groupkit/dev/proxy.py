"""A TCP fault proxy between Kafka clients and a local cluster: network partitions on loopback.

For the fault tests and the soak (never on the runtime path); it lives next to
:mod:`groupkit.dev.broker` because it is the other half of ``LocalCluster(proxied=True)``: each
node then has a ``PROXIED`` listener that advertises the port this proxy listens on for that
node. A client that bootstraps through the proxy (``LocalCluster.proxy_bootstrap``) is told the
proxy's address of every broker by the metadata, so every connection it opens goes through here,
while the other clients and the brokers among themselves talk directly.

What a cut does. A partition made with iptables ``DROP`` keeps every socket open and loses the
packets: the sender's TCP retransmits, the receiver gets nothing, and the client's requests time
out. After the heal the retransmitted bytes arrive, late. The proxy models exactly that: a cut
direction of a connection stops *reading* from its source (the bytes wait in the kernel's
buffers; a chunk already read waits here) and forwards nothing; the heal forwards everything in
order. Nothing is dropped, so a connection's Kafka framing survives a heal; a close by either
end is noticed only once its direction flows again, as a FIN behind a DROP would be. A new
connection made during a cut is accepted (the proxy must read its first request to know whose
it is) and then held too: the client sees a broker that never answers, as behind a DROP.

Per client. The first request on each new connection is parsed for its header (int32 size,
int16 api_key, int16 api_version, int32 correlation_id, int16-length client_id), so a cut can
match clients by ``client.id`` (a regular expression, full match): e.g. only a member's control
producer ("can read but not write") or only its consumers ("can write but not read"). A cut
without a pattern matches every connection.

The proxy runs its own asyncio loop in a daemon thread; :meth:`FaultProxy.cut` and
:meth:`FaultProxy.heal` are synchronous and take effect before they return.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import re
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from groupkit.errors import DevBrokerError

if TYPE_CHECKING:
    from groupkit.dev.broker import LocalBroker, LocalCluster

Direction = Literal["up", "down", "both"]
#: client -> broker, broker -> client
_UP, _DOWN = "up", "down"
_CHUNK = 64 * 1024
#: the first request is small (ApiVersions); anything larger is not a Kafka client
_MAX_FIRST_REQUEST = 1 << 20


@dataclass(frozen=True)
class Cut:
    """One fault: ``direction`` of every connection whose client.id matches ``clients``."""

    id: int
    direction: Direction
    clients: re.Pattern[str] | None

    def blocks(self, client_id: str | None, direction: str) -> bool:
        if self.direction != "both" and self.direction != direction:
            return False
        if self.clients is None:
            return True
        return client_id is not None and self.clients.fullmatch(client_id) is not None


@dataclass(eq=False)  # identity: a set of open connections
class _Conn:
    listen_port: int
    client_id: str | None = None
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    #: bytes forwarded per direction (a test can check a client really goes through here)
    forwarded: dict[str, int] = field(default_factory=lambda: {_UP: 0, _DOWN: 0})


def parse_client_id(request: bytes) -> str | None:
    """The client.id of a Kafka request (without its int32 size prefix); ``None`` if absent."""
    if len(request) < 10:
        raise ValueError(f"a Kafka request header is at least 10 bytes, got {len(request)}")
    (length,) = struct.unpack_from(">h", request, 8)
    if length < 0:
        return None
    raw = request[10 : 10 + length]
    if len(raw) != length:
        raise ValueError("the client_id runs past the request")
    return raw.decode("utf-8", errors="replace")


class FaultProxy:
    """Forwards ``listen port -> upstream port`` on 127.0.0.1 and cuts connections on demand."""

    def __init__(self, routes: Mapping[int, int], host: str = "127.0.0.1") -> None:
        self.routes = dict(routes)
        self.host = host
        self._cuts: list[Cut] = []
        self._ids = itertools.count(1)
        self._conns: set[_Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def for_cluster(cls, cluster: LocalBroker | LocalCluster) -> FaultProxy:
        """A proxy for a started ``LocalCluster(proxied=True)`` (or ``LocalBroker``)."""
        return cls(cluster.proxy_routes())

    # ------------------------------------------------------------------ life cycle

    def start(self) -> FaultProxy:
        if self._thread is not None:
            return self
        loop = asyncio.new_event_loop()
        ready: list[BaseException | None] = []
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._listen())
                ready.append(None)
            except BaseException as e:  # reported to start()'s caller
                ready.append(e)
                started.set()
                return
            started.set()
            loop.run_forever()
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="groupkit-fault-proxy", daemon=True)
        self._thread.start()
        started.wait()
        if ready[0] is not None:
            self._thread.join()
            self._thread = None
            raise DevBrokerError(f"the fault proxy could not listen: {ready[0]}") from ready[0]
        return self

    async def _listen(self) -> None:
        for port, upstream in self.routes.items():
            server = await asyncio.start_server(
                functools.partial(self._serve, port=port, up_port=upstream), self.host, port
            )
            self._servers.append(server)

    def stop(self) -> None:
        """Close every connection and stop listening."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        self._loop = self._thread = None

    async def _shutdown(self) -> None:
        for s in self._servers:
            s.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for s in self._servers:
            await s.wait_closed()
        self._servers.clear()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ faults

    def cut(self, direction: Direction = "both", clients: str | None = None) -> Cut:
        """Stop forwarding ``direction`` ("up": client -> broker, "down", or "both") of every
        connection, now and new, of a client whose client.id fully matches ``clients`` (a
        regular expression; ``None``: every client). Returns the cut, for :meth:`heal`."""
        if direction not in ("up", "down", "both"):
            raise ValueError(f"direction must be up, down or both, got {direction!r}")
        c = Cut(next(self._ids), direction, re.compile(clients) if clients is not None else None)
        self._call(self._apply, [*self._cuts, c])
        return c

    def heal(self, cut: Cut | None = None) -> None:
        """Lift ``cut`` (``None``: every cut): what was held is forwarded, in order."""
        keep = [c for c in self._cuts if cut is not None and c.id != cut.id]
        self._call(self._apply, keep)

    def clients(self) -> dict[str | None, dict[str, int]]:
        """Bytes forwarded per direction, summed by client.id, over the open connections."""
        out: dict[str | None, dict[str, int]] = {}
        for c in list(self._conns):
            agg = out.setdefault(c.client_id, {_UP: 0, _DOWN: 0})
            for d, n in c.forwarded.items():
                agg[d] += n
        return out

    def _call(self, fn: object, *args: object) -> None:
        if self._loop is None:
            raise DevBrokerError("the fault proxy is not running: start() it first")

        async def run() -> None:
            fn(*args)  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def _apply(self, cuts: list[Cut]) -> None:
        """On the loop: set the cuts, and open or close every connection's gates to match."""
        self._cuts = cuts
        for conn in self._conns:
            self._set_gates(conn)

    def _set_gates(self, conn: _Conn) -> None:
        for d, gate in conn.gates.items():
            if any(c.blocks(conn.client_id, d) for c in self._cuts):
                gate.clear()
            else:
                gate.set()

    # ------------------------------------------------------------------ forwarding

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int, up_port: int
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = _Conn(port, gates={_UP: asyncio.Event(), _DOWN: asyncio.Event()})
        up_writer: asyncio.StreamWriter | None = None
        try:
            # Learn whose connection this is before anything is forwarded.
            head = await reader.readexactly(4)
            (size,) = struct.unpack(">i", head)
            if not 10 <= size <= _MAX_FIRST_REQUEST:
                return
            first = await reader.readexactly(size)
            with contextlib.suppress(ValueError):
                conn.client_id = parse_client_id(first)
            self._conns.add(conn)
            self._set_gates(conn)
            await conn.gates[_UP].wait()  # a new connection during a cut: held, unanswered
            up_reader, up_writer = await asyncio.open_connection(self.host, up_port)
            up_writer.write(head + first)
            conn.forwarded[_UP] += len(head) + len(first)
            await asyncio.gather(
                self._pipe(conn, _UP, reader, up_writer),
                self._pipe(conn, _DOWN, up_reader, writer),
            )
        except (OSError, asyncio.IncompleteReadError):
            pass  # a peer went away (or the broker is down): close both ends
        except asyncio.CancelledError:
            pass  # stop(): ending normally keeps asyncio's server callback from logging it
        finally:
            self._conns.discard(conn)
            for w in (writer, up_writer):
                if w is not None:
                    w.close()
            self._tasks.discard(task)

    async def _pipe(
        self,
        conn: _Conn,
        direction: str,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
    ) -> None:
        gate = conn.gates[direction]
        try:
            while True:
                await gate.wait()  # cut: read nothing, so the bytes wait in the kernel
                data = await src.read(_CHUNK)
                if not data:
                    break
                await gate.wait()  # cut while reading: hold the chunk, then forward it in order
                dst.write(data)
                await dst.drain()
                conn.forwarded[direction] += len(data)
        finally:
            # One end closed (seen only while this direction flows): close the other side, so
            # the other pipe ends too.
            dst.close()
