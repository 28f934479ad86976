"""Three Apache Kafka brokers on loopback in one controller quorum, for the fault tests.

``LocalCluster`` (``groupkit broker start --brokers 3``): three
:class:`~groupkit.dev.node.LocalBroker` nodes, each broker and controller, in one static
three-voter quorum, in ``<state>/node<i>``, with ``broker.rack`` ``r<i>``, replication factor 3
and ``min.insync.replicas`` 2. A node can be killed (SIGKILL) and restarted on its data and
ports, optionally with its wall clock off by whole seconds (``skewed_clock_jvm_args``), to show a
broker whose clock is skewed. ``LocalCluster(proxied=True)`` (or ``LocalBroker(proxied=True)``)
gives every node a second plaintext listener, ``PROXIED``, advertising a port that
``groupkit.dev.proxy.FaultProxy`` listens on, so a client that bootstraps there
(``proxy_bootstrap``) reaches every broker through the proxy, which can cut it off.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from groupkit.dev.jars import DEFAULT_KAFKA_VERSION
from groupkit.dev.node import (
    BrokerStatus,
    LocalBroker,
    Startable,
    default_state_dir,
    new_cluster_id,
)
from groupkit.dev.ports import free_port
from groupkit.errors import DevBrokerError


class LocalCluster(Startable):
    """``brokers`` KRaft nodes on loopback, each broker and controller, in one voter quorum.

    Node ``i`` lives in ``state_dir/node<i>`` (a :class:`LocalBroker` with ``node.id`` ``i``
    and ``broker.rack`` ``r<i>``); ``state_dir/cluster`` marks the folder as a cluster's, so
    ``groupkit broker status|stop`` in another process finds every node again. Topics get
    replication factor 3 (``default.replication.factor``, the offsets topic) and
    ``min.insync.replicas`` 2, so one node may die without losing an acknowledged write.
    """

    MARKER = "cluster"
    #: seconds the last node of a stopping cluster gets before SIGKILL (see :meth:`stop`)
    last_grace = 3.0

    def __init__(
        self,
        state_dir: Path | str | None = None,
        version: str = DEFAULT_KAFKA_VERSION,
        brokers: int = 3,
        extra_properties: Mapping[str, str] | None = None,
        heap: str = "384m",
        proxied: bool = False,
    ) -> None:
        """``proxied``: every node also gets a ``PROXIED`` listener that advertises a port a
        fault proxy listens on (:meth:`proxy_routes`, ``groupkit.dev.proxy``)."""
        if brokers < 1:
            raise DevBrokerError(f"a cluster needs at least one broker, got {brokers}")
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self.version = version
        self.nodes = [
            LocalBroker(
                self.state_dir / f"node{i}",
                version,
                extra_properties=extra_properties,
                heap=heap,
                node_id=i,
                rack=f"r{i}",
                replication_factor=min(3, brokers),
                min_insync_replicas=min(2, brokers),
                proxied=proxied,
            )
            for i in range(brokers)
        ]

    @classmethod
    def found_in(cls, state_dir: Path | str | None) -> LocalCluster | None:
        """The cluster whose state is in ``state_dir``, if a cluster's start left it there."""
        folder = Path(state_dir) if state_dir else default_state_dir()
        marker = folder / cls.MARKER
        if not marker.exists():
            return None
        proxied = (folder / "node0" / "proxy.ports").exists()
        return cls(folder, brokers=int(marker.read_text().strip() or 3), proxied=proxied)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def proxy_bootstrap(self) -> str:
        """The bootstrap list through the fault proxy (a ``proxied`` cluster, started)."""
        return ",".join(f"127.0.0.1:{n.proxy_port}" for n in self.nodes)

    def proxy_routes(self) -> dict[int, int]:
        """Per node, the port the fault proxy must listen on -> the ``PROXIED`` listener's."""
        if not all(n.proxied and n.proxy_port for n in self.nodes):
            raise DevBrokerError("proxy_routes: start a LocalCluster(proxied=True) first")
        return {n.proxy_port: n.proxied_port for n in self.nodes}

    def client_config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap}

    def node(self, node_id: int) -> LocalBroker:
        return self.nodes[node_id]

    def _wire(self) -> None:
        """Every node's ports (fresh ones, or the last start's) and the voter set naming them."""
        for n in self.nodes:
            if (n.state_dir / "controller.port").exists():
                n.load_ports()
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        for n in self.nodes:
            n.quorum_voters = voters

    def start(self, timeout: float = 120.0, fresh: bool = True) -> str:
        """Start every node and return the bootstrap list once each serves metadata."""
        running = [n for n in self.nodes if n.status().state == "running"]
        if running:
            raise DevBrokerError(
                f"a cluster already runs from {self.state_dir} ({running[0].bootstrap}, ...); "
                "`groupkit broker stop` first"
            )
        if fresh:
            cluster_id = new_cluster_id()
            for n in self.nodes:
                n.cluster_id = cluster_id
                n.port = n.port or free_port()
                n.controller_port = free_port()
                n.proxy_port = n.proxied_port = 0  # launch() picks fresh ones
        self._wire()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / self.MARKER).write_text(f"{len(self.nodes)}\n")
        try:
            # Formatting is a JVM start per node: in parallel, it costs one.
            with ThreadPoolExecutor(len(self.nodes)) as pool:
                list(pool.map(lambda n: n.launch(fresh), self.nodes))
            deadline = time.monotonic() + timeout
            for n in self.nodes:
                n.wait_ready(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        (self.state_dir / "bootstrap").write_text(self.bootstrap + "\n")
        return self.bootstrap

    def status(self) -> BrokerStatus:
        """``running`` when every node runs, ``degraded`` when some do, else as one broker."""
        states = [n.status() for n in self.nodes]
        kinds = {s.state for s in states}
        log = self.state_dir / "node0" / "broker.log"
        boot = ",".join(s.bootstrap for s in states if s.bootstrap) or None
        pid = next((s.pid for s in states if s.pid is not None), None)
        if kinds == {"running"}:
            state = "running"
        elif "running" in kinds:
            state = "degraded"
        elif kinds == {"stopped"}:
            state = "stopped"
        elif "crashed" in kinds:
            state = "crashed"
        else:
            state = "unresponsive"
        pairs = zip(self.nodes, states, strict=True)
        detail = ", ".join(f"node {n.node_id} {s.state}" for n, s in pairs)
        return BrokerStatus(state, boot, pid, log, nodes=detail)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the nodes one after another (SIGTERM, SIGKILL after ``timeout``); whether
        one ran.

        One after another, so each broker's controlled shutdown finds a controller quorum
        (stopped all at once, every node waited out its timeout). The last node has no quorum
        left to grant its controlled shutdown and would wait for one forever: it gets
        ``last_grace`` seconds, then SIGKILL (its replicas are on the others' disks too)."""
        stopped = []
        for i, n in enumerate(self.nodes):
            last = i == len(self.nodes) - 1 and len(self.nodes) > 1
            stopped.append(n.stop(min(timeout, self.last_grace) if last else timeout))
        (self.state_dir / self.MARKER).unlink(missing_ok=True)
        return any(stopped)

    def kill(self, node_id: int) -> None:
        """SIGKILL one node, keeping its data for :meth:`restart`."""
        self.nodes[node_id].kill()

    def restart(
        self, node_id: int, clock_offset_s: int | None = None, timeout: float = 90.0
    ) -> None:
        """Start a stopped or killed node again on its data and ports, its wall clock
        ``clock_offset_s`` seconds off (``skewed_clock_jvm_args``; 0: the machine's clock;
        ``None``: as it was)."""
        n = self.nodes[node_id]
        n.stop()
        if clock_offset_s is not None:
            n.clock_offset_s = clock_offset_s
        self._wire()
        n.start(timeout=timeout, fresh=False)

    def leader(self, topic: str, partition: int, timeout: float = 30.0) -> int:
        """The node id leading ``topic``'s ``partition`` now (-1 while it has none, or while
        the node that answered does not know the partition yet: a topic just created, seen by
        a node just restarted)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.client_config(), "log_level": 0})
        md = admin.list_topics(topic, timeout=timeout)
        t = md.topics.get(topic)
        p = None if t is None else t.partitions.get(partition)
        leader: int = -1 if p is None else p.leader
        return leader
