"""The fault proxy (groupkit.dev.proxy) on plain sockets: what it forwards, holds and lets
through again. Its use against Kafka is tests/test_cluster_partition.py."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from groupkit.dev.broker import free_port
from groupkit.dev.proxy import FaultProxy, parse_client_id


def request(client_id: bytes | None) -> bytes:
    """A Kafka request header (ApiVersions v3) with its size prefix."""
    cid = b"" if client_id is None else client_id
    body = struct.pack(">hhih", 18, 3, 7, -1 if client_id is None else len(cid)) + cid
    return struct.pack(">i", len(body)) + body


@pytest.fixture
def echo_port() -> Iterator[int]:
    """An upstream that echoes every byte."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve(c: socket.socket) -> None:
        with c:
            while data := c.recv(65536):
                c.sendall(data)

    def accept() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield srv.getsockname()[1]
    srv.close()


def connect(port: int, client_id: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    first = request(client_id)
    s.sendall(first)
    assert recv_exactly(s, len(first)) == first
    return s


def recv_exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "closed"
        out += chunk
    return out


def silent(s: socket.socket, seconds: float = 0.5) -> bool:
    """Nothing arrives within ``seconds`` (the one place a test must wait for an absence)."""
    s.settimeout(seconds)
    try:
        return not s.recv(1)
    except TimeoutError:
        return True
    finally:
        s.settimeout(5)


def test_parse_client_id() -> None:
    assert parse_client_id(request(b"app.control-writer")[4:]) == "app.control-writer"
    assert parse_client_id(request(None)[4:]) is None
    with pytest.raises(ValueError):
        parse_client_id(b"\x00\x12")


def test_cut_holds_and_heal_forwards_in_order(echo_port: int) -> None:
    port = free_port()
    with FaultProxy({port: echo_port}) as proxy:
        writer = connect(port, b"m.control-writer")
        reader = connect(port, b"m.control-reader")
        cut = proxy.cut("both", r"m\.control-writer")  # can read but not write
        writer.sendall(b"held-1")
        reader.sendall(b"flows")
        assert recv_exactly(reader, 5) == b"flows"
        writer.sendall(b"held-2")
        assert silent(writer)
        late = connect_nowait(port, b"m.control-writer")  # a new connection is held too
        assert silent(late)
        assert set(proxy.clients()) >= {"m.control-writer", "m.control-reader"}
        proxy.heal(cut)
        assert recv_exactly(writer, 12) == b"held-1held-2"  # nothing lost, in order
        assert recv_exactly(late, len(request(b"m.control-writer"))) == request(b"m.control-writer")
        for s in (writer, reader, late):
            s.close()


def connect_nowait(port: int, client_id: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(request(client_id))
    return s


def test_one_direction(echo_port: int) -> None:
    """ "up" holds what the client sends; "down" lets it reach the upstream but holds replies."""
    port = free_port()
    with FaultProxy({port: echo_port}) as proxy:
        s = connect(port, b"c")
        for direction in ("up", "down"):
            proxy.cut(direction)  # type: ignore[arg-type]
            s.sendall(direction.encode())
            assert silent(s)
            proxy.heal()
            assert recv_exactly(s, len(direction)) == direction.encode()
        s.close()
