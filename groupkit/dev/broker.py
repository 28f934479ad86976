"""A real Apache Kafka broker on loopback, for tests and the demo (never on the runtime path).

The broker is Apache Kafka's own code, resolved from Maven Central with ``mvn`` and run as its
own JVM process in KRaft combined mode (one node that is broker and controller at once):

1. ``ensure_jars(version)`` resolves ``org.apache.kafka:kafka_2.13`` and a log4j2 binding with
   ``mvn dependency:copy-dependencies`` into ``~/.cache/groupkit/kafka/<version>/lib``, once;
   later runs reuse the folder (a ``.complete`` marker says it was resolved whole).
2. ``LocalBroker.start()`` writes a minimal ``server.properties`` on free loopback ports, formats
   the storage with a fresh cluster id (``StorageTool format --standalone``), starts
   ``kafka.Kafka`` in a new session with a modest heap, and waits until an AdminClient sees it.
3. ``LocalBroker.stop()`` sends SIGTERM (a clean controlled shutdown) and SIGKILL only if the
   broker does not exit in time.

State lives in one folder (``server.properties``, ``data/``, ``broker.log``, ``broker.pid``,
``bootstrap``), so ``groupkit broker status`` in another process can find the broker again and
tell a live broker from a crashed or leftover one.

A cluster (``LocalCluster``, ``groupkit broker start --brokers 3``): three such nodes, each
broker and controller, in one static three-voter quorum, in ``<state>/node<i>``, with
``broker.rack`` ``r<i>``, replication factor 3 and ``min.insync.replicas`` 2. A node can be
killed (SIGKILL) and restarted on its data and ports, optionally with its wall clock off by whole
seconds (``skewed_clock_jvm_args``), to show a broker whose clock is skewed.
``LocalCluster(proxied=True)`` (or ``LocalBroker(proxied=True)``) gives every node a second
plaintext listener, ``PROXIED``, advertising a port that ``groupkit.dev.proxy.FaultProxy``
listens on, so a client that bootstraps there (``proxy_bootstrap``) reaches every broker through
the proxy, which can cut it off.

``live_client_handles()`` counts this process's librdkafka clients; ``wait_clients_closed()``
is what a test fixture or bench calls before stopping its broker, since a client that outlives
its broker retries it for ever.

Security (for the security tests; off by default, so ``groupkit broker start`` is unchanged):
``LocalBroker(sasl_users={"admin": "admin-secret", "alice": "alice-secret"})`` serves only
SASL_PLAINTEXT with the PLAIN mechanism, on the client listener and the controller listener alike
(the broker talks to its own controller as ``admin_user``), so no port accepts an unauthenticated
client. ``authorizer=True`` adds Kafka's ``StandardAuthorizer`` with ``admin_user`` as the only
super user and no ACLs: every other principal is denied until ACLs are created (e.g. with the
AdminClient's ``create_acls`` through ``client_config(admin_user)``).
``client_config(user)`` gives the confluent-kafka settings to connect as ``user``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import gc
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from groupkit.cache import cache_root
from groupkit.errors import DevBrokerError

DEFAULT_KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"
SLF4J_VERSION = "2.0.17"
MIN_JAVA = 17


def default_state_dir() -> Path:
    return cache_root() / "broker"


# --- prerequisites ------------------------------------------------------------------------


def java_major_version(java: str = "java") -> int:
    """The major version of ``java`` on PATH; a clear error if it is missing or too old."""
    exe = shutil.which(java)
    if exe is None:
        raise DevBrokerError(
            f"java not found on PATH: install a Java {MIN_JAVA}+ runtime "
            "(Debian: apt-get install openjdk-17-jre-headless)"
        )
    out = subprocess.run([exe, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise DevBrokerError(f"could not read the Java version from {exe} -version")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8" style
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise DevBrokerError(
            f"Java {major} found at {exe}; Kafka 4 needs Java {MIN_JAVA}+ "
            "(Debian: apt-get install openjdk-17-jre-headless)"
        )
    return major


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.groupkit</groupId>
  <artifactId>devbroker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>{slf4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""


def kafka_home(version: str = DEFAULT_KAFKA_VERSION) -> Path:
    return cache_root() / "kafka" / version


def ensure_jars(version: str = DEFAULT_KAFKA_VERSION, quiet: bool = True) -> Path:
    """Resolve Apache Kafka ``version``'s jars into the cache once; return the ``lib`` folder."""
    home = kafka_home(version)
    lib = home / "lib"
    if (home / ".complete").exists() and any(lib.glob("kafka_2.13-*.jar")):
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DevBrokerError(
            "mvn not found on PATH: install Maven to fetch Kafka's jars "
            "(Debian: apt-get install maven), or set GROUPKIT_BOOTSTRAP_SERVERS"
        )
    home.mkdir(parents=True, exist_ok=True)
    pom = home / "pom.xml"
    pom.write_text(_POM.format(kafka=version, slf4j=SLF4J_VERSION, log4j=LOG4J_VERSION))
    if lib.exists():
        shutil.rmtree(lib)
    cmd = [
        mvn,
        "-B",
        *(["-q"] if quiet else []),
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={lib}",
        "-DincludeScope=runtime",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not any(lib.glob("kafka_2.13-*.jar")):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise DevBrokerError(
            f"could not resolve org.apache.kafka:kafka_2.13:{version} from Maven Central "
            f"(mvn exit {proc.returncode}); is the version right and Maven Central reachable?\n"
            f"{tail}"
        )
    # A reload4j binding would fight log4j2 for slf4j; the broker logs through log4j2 only.
    for stray in lib.glob("*reload4j*.jar"):
        stray.unlink()
    (home / ".complete").write_text(version + "\n")
    return lib


# --- the broker ---------------------------------------------------------------------------


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, base64url without padding.

    One that starts with ``-`` would be read by the storage tool's argument parser as an
    option (``expected one argument``), so such ids are drawn again.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


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


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _pid_alive(pid: int) -> bool:
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


_SKEW_CLOCK_SOURCE = Path(__file__).parent / "skewclock" / "SystemTime.java"


def skewed_clock_jvm_args(lib: Path, offset_s: int) -> tuple[list[str], list[str]]:
    """JVM arguments that run a broker with its wall clock ``offset_s`` seconds off.

    Kafka reads wall-clock time through one class, ``org.apache.kafka.common.utils.SystemTime``;
    ``skewclock/SystemTime.java`` replaces it (compiled once against this Kafka's clients jar,
    put before the jars on the class path) with the machine's clock plus
    ``-Dgroupkit.clock.offset.ms``. The broker then stamps LogAppendTime and times sessions as a
    broker whose clock is off; the monotonic clock stays, as a skewed wall clock leaves it.
    (libfaketime, which shifts the whole process's clock, made a broker take minutes to start
    here: a lock on every clock read.) Returns the class-path entries to put first and the
    JVM options; nothing for ``offset_s`` 0.
    """
    if offset_s == 0:
        return [], []
    out = cache_root() / "skewclock" / lib.parent.name
    built = out / "org" / "apache" / "kafka" / "common" / "utils" / "SystemTime.class"
    if not built.exists() or built.stat().st_mtime < _SKEW_CLOCK_SOURCE.stat().st_mtime:
        javac = shutil.which("javac")
        if javac is None:
            raise DevBrokerError("a broker with a skewed clock needs javac (a Java JDK, not a JRE)")
        clients = sorted(lib.glob("kafka-clients-*.jar"))
        if not clients:
            raise DevBrokerError(f"no kafka-clients jar in {lib}")
        out.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [javac, "-nowarn", "-cp", str(clients[0]), "-d", str(out), str(_SKEW_CLOCK_SOURCE)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise DevBrokerError("compiling the skewed clock failed:\n" + done.stderr[-2000:])
    return [str(out)], [f"-Dgroupkit.clock.offset.ms={offset_s * 1000}"]


_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


@dataclass
class BrokerStatus:
    state: str  # "running", "stopped", "crashed" (pid gone, files left), "unresponsive",
    # and for a cluster "degraded" (some nodes run)
    bootstrap: str | None
    pid: int | None
    log: Path
    nodes: str | None = None  # a cluster's per-node states

    def describe(self) -> str:
        text = self._describe()
        return f"{text} [{self.nodes}]" if self.nodes else text

    def _describe(self) -> str:
        if self.state == "degraded":
            return f"degraded: only some nodes run; bootstrap {self.bootstrap}, log {self.log}"
        if self.state == "running":
            return f"running: bootstrap {self.bootstrap} (pid {self.pid}), log {self.log}"
        if self.state == "stopped":
            return "stopped: no local broker is running"
        if self.state == "crashed":
            return (
                f"crashed: pid {self.pid} is gone but its state was left behind "
                f"(see {self.log}); `groupkit broker stop` cleans up"
            )
        return (
            f"unresponsive: pid {self.pid} runs but {self.bootstrap} does not answer ({self.log})"
        )


class _StartedInWith:
    """``with LocalBroker(...) as broker`` (or a cluster): started on entry, stopped however the
    block ends."""

    def start(self) -> str:
        raise NotImplementedError

    def stop(self) -> bool:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalBroker(_StartedInWith):
    """One single-node KRaft broker whose state lives in ``state_dir``."""

    def __init__(
        self,
        state_dir: Path | str | None = None,
        version: str = DEFAULT_KAFKA_VERSION,
        port: int = 0,
        extra_properties: Mapping[str, str] | None = None,
        heap: str = "512m",
        sasl_users: Mapping[str, str] | None = None,
        admin_user: str = "admin",
        authorizer: bool = False,
        *,
        node_id: int = 1,
        rack: str | None = None,
        replication_factor: int = 1,
        min_insync_replicas: int = 1,
        clock_offset_s: int = 0,
        proxied: bool = False,
    ) -> None:
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self.version = version
        self.port = port
        self.extra_properties = dict(extra_properties or {})
        self.heap = heap
        self.sasl_users = dict(sasl_users or {})
        self.admin_user = admin_user
        self.authorizer = authorizer
        _check_sasl_users(self.sasl_users, admin_user, authorizer)
        if proxied and self.sasl_users:
            raise DevBrokerError("the PROXIED listener is plaintext: not with sasl_users")
        self.node_id = node_id
        self.rack = rack
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas
        #: seconds this node's wall clock is off (``skewed_clock_jvm_args``), from its next start on
        self.clock_offset_s = clock_offset_s
        self.controller_port = 0
        #: a second plaintext listener, ``PROXIED``, on ``proxied_port``, that advertises
        #: ``proxy_port`` instead: a fault proxy (groupkit.dev.proxy) listens there and forwards
        #: to ``proxied_port``, so a client that bootstraps through the proxy is told the proxy's
        #: address of every broker by the metadata, and all of its traffic keeps going through it
        self.proxied = proxied
        self.proxy_port = 0
        self.proxied_port = 0
        #: a static controller quorum (``id@host:port,...``), set by :class:`LocalCluster`;
        #: ``None`` is a quorum of this one node
        self.quorum_voters: str | None = None
        #: the id a fresh start formats the storage with (``None``: a new one)
        self.cluster_id: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # paths
    @property
    def log_path(self) -> Path:
        return self.state_dir / "broker.log"

    @property
    def _pid_path(self) -> Path:
        return self.state_dir / "broker.pid"

    @property
    def _bootstrap_path(self) -> Path:
        return self.state_dir / "bootstrap"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def _proxy_ports_path(self) -> Path:
        return self.state_dir / "proxy.ports"

    @property
    def proxy_bootstrap(self) -> str:
        """The bootstrap address through the fault proxy (``proxied``, started)."""
        return f"127.0.0.1:{self.proxy_port}"

    def proxy_routes(self) -> dict[int, int]:
        """The port the fault proxy must listen on -> the ``PROXIED`` listener's."""
        if not (self.proxied and self.proxy_port):
            raise DevBrokerError("proxy_routes: start a LocalBroker(proxied=True) first")
        return {self.proxy_port: self.proxied_port}

    def client_config(self, user: str | None = None) -> dict[str, str]:
        """confluent-kafka settings to reach this broker (as ``user`` on a SASL broker;
        default ``admin_user``)."""
        conf = {"bootstrap.servers": self.bootstrap}
        if self.sasl_users:
            name = user or self.admin_user
            conf.update(
                {
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": name,
                    "sasl.password": self.sasl_users.get(name, ""),
                }
            )
        return conf

    def _security_properties(self, controller_port: int) -> dict[str, str]:
        """SASL/PLAIN on every listener (and the authorizer), when ``sasl_users`` is set."""
        if not self.sasl_users:
            return {}
        admin_pw = self.sasl_users[self.admin_user]
        jaas = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{self.admin_user}" password="{admin_pw}" '
            + " ".join(f'user_{u}="{pw}"' for u, pw in sorted(self.sasl_users.items()))
            + ";"
        )
        props = {
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{self.port}",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "listener.name.controller.plain.sasl.jaas.config": jaas,
        }
        if self.authorizer:
            props["authorizer.class.name"] = (
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            )
            props["super.users"] = f"User:{self.admin_user}"
            props["allow.everyone.if.no.acl.found"] = "false"
        return props

    def _properties(self, controller_port: int) -> str:
        data = self.state_dir / "data"
        rf, isr = str(self.replication_factor), str(self.min_insync_replicas)
        quorum = (
            {"controller.quorum.voters": self.quorum_voters}
            if self.quorum_voters
            else {"controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}"}
        )
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            **quorum,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(data),
            "num.partitions": "1",
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            "group.initial.rebalance.delay.ms": "0",
            # Tests and the demo create what they use; a typo'd topic must not spring into being.
            "auto.create.topics.enable": "false",
            # Let compaction of the control topic happen within a test's lifetime.
            "log.cleaner.backoff.ms": "1000",
        }
        if self.rack is not None:
            props["broker.rack"] = self.rack
        if self.proxied:
            # Kafka answers metadata with the endpoints of the listener the request came in on.
            props["listeners"] += f",PROXIED://127.0.0.1:{self.proxied_port}"
            props["advertised.listeners"] += f",PROXIED://127.0.0.1:{self.proxy_port}"
            props["listener.security.protocol.map"] += ",PROXIED:PLAINTEXT"
        props.update(self._security_properties(controller_port))
        props.update(self.extra_properties)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def status(self) -> BrokerStatus:
        pid = None
        if self._pid_path.exists():
            try:
                pid = int(self._pid_path.read_text().strip())
            except ValueError:
                pid = None
        boot = self._bootstrap_path.read_text().strip() if self._bootstrap_path.exists() else None
        if pid is None:
            return BrokerStatus("stopped", None, None, self.log_path)
        if not _pid_alive(pid):
            return BrokerStatus("crashed", boot, pid, self.log_path)
        port = int(boot.rsplit(":", 1)[1]) if boot else 0
        if not port or not _port_open(port):
            return BrokerStatus("unresponsive", boot, pid, self.log_path)
        return BrokerStatus("running", boot, pid, self.log_path)

    def start(self, timeout: float = 90.0, fresh: bool = True) -> str:
        """Start the broker and return its bootstrap address once an AdminClient sees it.

        ``fresh`` wipes the data folder and formats a new cluster; ``fresh=False`` restarts on
        the same data and port (a broker restart, as the chaos tests need).
        """
        self.launch(fresh)
        self.wait_ready(timeout)
        return self.bootstrap

    def launch(self, fresh: bool = True) -> None:
        """Format (when ``fresh``) and start the JVM without waiting for it to serve.

        :class:`LocalCluster` launches every node before waiting on any: a node of a
        three-voter quorum cannot serve until a second voter is up.
        """
        current = self.status()
        if current.state == "running":
            raise DevBrokerError(
                f"a broker already runs from {self.state_dir}: {current.bootstrap} "
                f"(pid {current.pid}); `groupkit broker stop` first"
            )
        if current.state in ("crashed", "unresponsive"):
            self._cleanup_pid(current.pid)
        java_major_version()
        lib = ensure_jars(self.version)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if fresh:
            shutil.rmtree(self.state_dir / "data", ignore_errors=True)
            if self.port == 0:
                self.port = free_port()
            if self.controller_port == 0:
                self.controller_port = free_port()
            (self.state_dir / "controller.port").write_text(str(self.controller_port))
            if self.proxied:
                self.proxy_port = self.proxy_port or free_port()
                self.proxied_port = self.proxied_port or free_port()
                self._proxy_ports_path.write_text(f"{self.proxy_port} {self.proxied_port}\n")
        else:
            self.load_ports()
        props = self.state_dir / "server.properties"
        props.write_text(self._properties(self.controller_port))
        log4j = self.state_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=self.log_path))
        skew_path, skew_opts = skewed_clock_jvm_args(lib, self.clock_offset_s)
        classpath = os.pathsep.join([*skew_path, f"{lib}/*"])
        jvm = [
            "java",
            f"-Xmx{self.heap}",
            "-Xms128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            *skew_opts,
            "-cp",
            classpath,
        ]
        if fresh:
            cluster_id = self.cluster_id or new_cluster_id()
            # One node is its own quorum (--standalone); a static voter set needs no flag.
            standalone = [] if self.quorum_voters else ["--standalone"]
            fmt = subprocess.run(
                [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                 "-c", str(props), *standalone],
                capture_output=True,
                text=True,
                check=False,
            )  # fmt: skip
            if fmt.returncode != 0:
                raise DevBrokerError(
                    "formatting the broker storage failed:\n" + (fmt.stdout + fmt.stderr)[-2000:]
                )
        out = open(self.state_dir / "broker.out", "ab")  # noqa: SIM115 - owned by the child
        self._proc = subprocess.Popen(
            [*jvm, "kafka.Kafka", str(props)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in a terminal must not kill the broker half-way
            cwd=self.state_dir,
        )
        out.close()
        self._pid_path.write_text(str(self._proc.pid))
        self._bootstrap_path.write_text(self.bootstrap + "\n")

    def load_ports(self) -> None:
        """The ports of the last fresh start (a restart keeps them: clients and voters know
        them)."""
        if self.port == 0 and self._bootstrap_path.exists():
            self.port = int(self._bootstrap_path.read_text().strip().rsplit(":", 1)[1])
        if self.controller_port == 0:
            self.controller_port = int((self.state_dir / "controller.port").read_text())
        if self.proxied and self.proxy_port == 0 and self._proxy_ports_path.exists():
            ports = self._proxy_ports_path.read_text().split()
            self.proxy_port, self.proxied_port = int(ports[0]), int(ports[1])

    def wait_ready(self, timeout: float) -> None:
        """Wait until this node serves metadata that lists itself (registered and unfenced)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.client_config(), "log_level": 0})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise DevBrokerError(
                    f"the broker exited with code {self._proc.returncode} while starting; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            try:
                md = admin.list_topics(timeout=1.0)
                if self.node_id in md.brokers:
                    return
            except Exception:
                pass
            time.sleep(0.1)  # list_topics may fail at once (connection refused)
        del admin  # (the error's traceback would keep it retrying the stopped broker)
        self.stop()
        raise DevBrokerError(
            f"the broker did not answer on {self.bootstrap} within {timeout:.0f}s; "
            f"last lines of {self.log_path}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 25) -> str:
        texts = []
        for path in (self.log_path, self.state_dir / "broker.out"):
            if path.exists():
                texts += path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(texts[-lines:]) or "(no log written)"

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the broker; return whether one was running. SIGKILL only after ``timeout``."""
        st = self.status()
        if st.pid is None:
            return False
        pid = st.pid
        was_running = st.state != "crashed"
        if was_running:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                was_running = False
            deadline = time.monotonic() + timeout
            while was_running and _pid_alive(pid) and time.monotonic() < deadline:
                if self._proc is not None and self._proc.pid == pid:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self._proc.wait(timeout=0.2)
                else:
                    time.sleep(0.1)  # another process's child: nothing to wait on but time
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                if self._proc is not None and self._proc.pid == pid:
                    self._proc.wait()
        self._cleanup_pid(pid)
        return was_running

    def kill(self) -> None:
        """SIGKILL the broker, leaving its data for a restart with ``start(fresh=False)``."""
        st = self.status()
        if st.pid is not None and _pid_alive(st.pid):
            os.kill(st.pid, signal.SIGKILL)
            if self._proc is not None and self._proc.pid == st.pid:
                self._proc.wait()
        self._cleanup_pid(st.pid)

    def _cleanup_pid(self, pid: int | None) -> None:
        self._pid_path.unlink(missing_ok=True)
        self._proc = None


class LocalCluster(_StartedInWith):
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


_SASL_NAME = re.compile(r"[A-Za-z0-9._-]+")


def _check_sasl_users(users: Mapping[str, str], admin_user: str, authorizer: bool) -> None:
    """Names and passwords go into a JAAS line: keep them to what needs no quoting."""
    if authorizer and not users:
        raise DevBrokerError("authorizer=True needs sasl_users: ACLs name SASL principals")
    if not users:
        return
    if admin_user not in users:
        raise DevBrokerError(f"sasl_users must include the admin user {admin_user!r}")
    for user, password in users.items():
        if not _SASL_NAME.fullmatch(user):
            raise DevBrokerError(f"SASL user name {user!r}: use letters, digits, '.', '_', '-'")
        if not password or any(c in password for c in '"\\;\n\r'):
            raise DevBrokerError(
                f"SASL password of {user!r}: non-empty, without quotes, backslashes, ';' or "
                "line breaks"
            )


# --- command line -------------------------------------------------------------------------


def cli(args: argparse.Namespace) -> int:
    """``groupkit broker start|stop|status|fetch`` (``--brokers 3``: a cluster)."""
    version = args.kafka_version or DEFAULT_KAFKA_VERSION
    brokers = getattr(args, "brokers", 1)
    if args.action == "fetch":
        java_major_version()
        lib = ensure_jars(version)
        print(f"Apache Kafka {version} jars in {lib}")
        return 0
    # stop/status find a cluster from its folder; start makes one when asked for more nodes.
    found = LocalCluster.found_in(args.dir)
    local: LocalBroker | LocalCluster
    if args.action == "start" and brokers > 1:
        if args.port:
            raise DevBrokerError("--port names one listener; a cluster picks free ports")
        local = found or LocalCluster(args.dir, version=version, brokers=brokers)
    else:
        local = found or LocalBroker(args.dir, version=version, port=args.port)
    if args.action == "start":
        if isinstance(local, LocalCluster):
            what = f"a cluster of {len(local.nodes)} nodes"
        else:
            what = "single node"
        print(f"starting Apache Kafka {version} (KRaft, {what}) ...", file=sys.stderr)
        bootstrap = local.start()
        print(f"broker running: bootstrap.servers={bootstrap}")
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
