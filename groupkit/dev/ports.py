"""Loopback ports, processes, and this process's Kafka clients, for the local brokers.

``free_port()`` hands out ports below the kernel's ephemeral range, never twice in one process;
``live_client_handles()`` counts this process's librdkafka clients, and ``wait_clients_closed()``
is what a test fixture or bench calls before stopping its broker, since a client that outlives
its broker retries it for ever.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import socket
import time
from pathlib import Path


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``port`` can be bound on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


#: Ports this process has handed out: a cluster asks for several before any is bound.
_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A loopback port nobody listens on right now, and no outgoing connection will take.

    A port is handed out tens of seconds before its listener binds it (a fault proxy starts once
    its cluster serves). ``bind(0)`` would pick it from the kernel's ephemeral range, where every
    client connection made meanwhile takes its source port, so it is picked below that range;
    and never twice by one process.
    """
    low, _ = _ephemeral_range()
    lowest = 10000 if low > 12000 else 1024
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(lowest, low) if low > lowest else rng.randrange(1024, 65536)
        if port not in _handed_out and port_is_free(port):
            _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a crowded machine
        s.bind(("127.0.0.1", 0))
        picked: int = s.getsockname()[1]
        _handed_out.add(picked)
        return picked


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def live_client_handles() -> int:
    """Live librdkafka clients (Producer, Consumer, AdminClient) in this process.

    Each handle runs one ``rdk:main`` thread, which destroying the handle joins, so counting
    those threads counts handles (Linux: ``/proc/self/task``; elsewhere 0)."""
    n = 0
    with contextlib.suppress(OSError):
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    n += f.read().strip() == "rdk:main"
            except OSError:  # a thread that just ended
                pass
    return n


def wait_clients_closed(timeout: float = 10.0, baseline: int = 0) -> int:
    """Before stopping a broker: collect garbage and wait until at most ``baseline`` clients
    live (a handle dropped on another thread takes a moment to join its threads); return how
    many still do. A client that outlives its broker retries it for ever (``Connect to ipv4#...
    failed: Connection refused`` at the end of a run)."""
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        live = live_client_handles()
        if live <= baseline or time.monotonic() >= deadline:
            return live
        time.sleep(0.05)
