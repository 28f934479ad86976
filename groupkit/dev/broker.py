"""A real Apache Kafka broker on loopback, for tests and the demo (never on the runtime path).

The broker is Apache Kafka's own code, resolved from Maven Central with ``mvn`` and run as its
own JVM process in KRaft mode. This module is the public face of the local brokers and the
``groupkit broker`` command; each job lives in its own module:

- :mod:`groupkit.dev.jars`: the jars of a Kafka release from Maven Central, the Java that runs
  them, the skewed clock compiled against them;
- :mod:`groupkit.dev.ports`: free loopback ports, live processes, this process's Kafka clients;
- :mod:`groupkit.dev.node`: one broker (``LocalBroker``), its state folder and its life cycle;
- :mod:`groupkit.dev.cluster`: three brokers in one quorum (``LocalCluster``).

``groupkit broker start`` listens on 9092, where the examples look by default, when that port
is free, and else on a free port; it prints the address either way.
"""

from __future__ import annotations

import argparse
import sys

from groupkit.dev.cluster import LocalCluster
from groupkit.dev.jars import (
    DEFAULT_KAFKA_VERSION,
    LOG4J_VERSION,
    MIN_JAVA,
    OLDEST_KAFKA_VERSION,
    SLF4J_VERSION,
    TESTED_KAFKA_VERSIONS,
    ensure_jars,
    java_major_version,
    kafka_home,
    skewed_clock_jvm_args,
    version_tuple,
)
from groupkit.dev.node import (
    BrokerStatus,
    LocalBroker,
    Startable,
    default_state_dir,
    new_cluster_id,
)
from groupkit.dev.ports import (
    free_port,
    live_client_handles,
    pid_alive,
    port_is_free,
    port_open,
    wait_clients_closed,
)
from groupkit.errors import DevBrokerError

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "DEFAULT_PORT",
    "LOG4J_VERSION",
    "MIN_JAVA",
    "OLDEST_KAFKA_VERSION",
    "SLF4J_VERSION",
    "TESTED_KAFKA_VERSIONS",
    "BrokerStatus",
    "LocalBroker",
    "LocalCluster",
    "Startable",
    "cli",
    "default_state_dir",
    "ensure_jars",
    "free_port",
    "java_major_version",
    "kafka_home",
    "live_client_handles",
    "new_cluster_id",
    "pid_alive",
    "port_is_free",
    "port_open",
    "skewed_clock_jvm_args",
    "version_tuple",
    "wait_clients_closed",
]

#: the port ``groupkit broker start`` takes when it is free: Kafka's own default, and the one
#: the examples' ``--bootstrap-servers localhost:9092`` names
DEFAULT_PORT = 9092


# --- command line -------------------------------------------------------------------------


def cli(args: argparse.Namespace) -> int:
    """``groupkit broker start|stop|status|fetch`` (``--brokers 3``: a cluster)."""
    version = args.kafka_version or DEFAULT_KAFKA_VERSION
    brokers = getattr(args, "brokers", 1)
    if args.action == "fetch":
        java_major_version()
        for v in [args.kafka_version] if args.kafka_version else TESTED_KAFKA_VERSIONS:
            print(f"Apache Kafka {v} jars in {ensure_jars(v)}")
        return 0
    # stop/status find a cluster from its folder; start makes one when asked for more nodes.
    found = LocalCluster.found_in(args.dir)
    local: LocalBroker | LocalCluster
    if args.action == "start" and brokers > 1:
        if args.port:
            raise DevBrokerError("--port names one listener; a cluster picks free ports")
        local = found or LocalCluster(args.dir, version=version, brokers=brokers)
    else:
        port = args.port
        if args.action == "start" and not port and port_is_free(DEFAULT_PORT):
            port = DEFAULT_PORT
        local = found or LocalBroker(args.dir, version=version, port=port)
    if args.action == "start":
        if isinstance(local, LocalCluster):
            what = f"a cluster of {len(local.nodes)} nodes"
        else:
            what = "single node"
        print(f"starting Apache Kafka {version} (KRaft, {what}) ...", file=sys.stderr)
        bootstrap = local.start()
        print(f"broker running: bootstrap.servers={bootstrap}")
        if isinstance(local, LocalBroker) and not args.port and local.port != DEFAULT_PORT:
            print(f"port {DEFAULT_PORT} is taken: give clients --bootstrap-servers {bootstrap}",
                  file=sys.stderr)  # fmt: skip
        print(f"log: {local.status().log}; stop with: groupkit broker stop")
        return 0
    if args.action == "stop":
        st = local.status()
        if local.stop():
            print(f"stopped the broker{'s' if isinstance(local, LocalCluster) else ''} "
                  f"(pid {st.pid})")  # fmt: skip
        elif st.state == "crashed":
            print(f"the broker (pid {st.pid}) had already exited; cleaned up its state")
        else:
            print("no local broker was running")
        return 0
    st = local.status()
    print(st.describe())
    return 0 if st.state == "running" else 1
