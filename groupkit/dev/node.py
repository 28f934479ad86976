"""One Apache Kafka broker on loopback: a JVM in KRaft combined mode (broker and controller).

1. ``LocalBroker.start()`` writes a minimal ``server.properties`` on free loopback ports, formats
   the storage with a fresh cluster id (``StorageTool format``), starts ``kafka.Kafka`` in a new
   session with a modest heap, and waits until an AdminClient sees it.
2. ``LocalBroker.stop()`` sends SIGTERM (a clean controlled shutdown) and SIGKILL only if the
   broker does not exit in time.

State lives in one folder (``server.properties``, ``data/``, ``broker.log``, ``broker.pid``,
``bootstrap``), so ``groupkit broker status`` in another process can find the broker again and
tell a live broker from a crashed or leftover one.

A node alone is its own controller quorum: from Kafka 3.9 on a dynamic one
(``controller.quorum.bootstrap.servers``, formatted ``--standalone``); before 3.9, which has no
dynamic quorum, a static voter set of itself (``controller.quorum.voters``). A
:class:`~groupkit.dev.cluster.LocalCluster` gives its nodes a static voter set of them all.

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

import base64
import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from groupkit.cache import cache_root
from groupkit.dev.jars import (
    DEFAULT_KAFKA_VERSION,
    ensure_jars,
    java_major_version,
    skewed_clock_jvm_args,
    version_tuple,
)
from groupkit.dev.ports import free_port, pid_alive, port_open
from groupkit.errors import DevBrokerError


def default_state_dir() -> Path:
    return cache_root() / "broker"


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, base64url without padding.

    One that starts with ``-`` would be read by the storage tool's argument parser as an
    option (``expected one argument``), so such ids are drawn again.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


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


class Startable:
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


class LocalBroker(Startable):
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

    def _static_voters(self, controller_port: int) -> str | None:
        """The static voter set this node is formatted and started with; ``None``: a dynamic
        quorum of this one node. Kafka before 3.9 has no dynamic quorum (KIP-853): a node alone
        there is the one voter of a static set."""
        if self.quorum_voters:
            return self.quorum_voters
        if version_tuple(self.version) < (3, 9):
            return f"{self.node_id}@127.0.0.1:{controller_port}"
        return None

    def _properties(self, controller_port: int) -> str:
        data = self.state_dir / "data"
        rf, isr = str(self.replication_factor), str(self.min_insync_replicas)
        voters = self._static_voters(controller_port)
        quorum = (
            {"controller.quorum.voters": voters}
            if voters
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
            "group.initial.rebalance.delay.ms": "0",
            # Tests and the demo create what they use; a typo'd topic must not spring into being.
            "auto.create.topics.enable": "false",
            # Let compaction of the control topic happen within a test's lifetime.
            "log.cleaner.backoff.ms": "1000",
        }
        if version_tuple(self.version) >= (4, 0):  # the share groups' coordinator (KIP-932)
            props["share.coordinator.state.topic.replication.factor"] = rf
            props["share.coordinator.state.topic.min.isr"] = isr
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
        if not pid_alive(pid):
            return BrokerStatus("crashed", boot, pid, self.log_path)
        port = int(boot.rsplit(":", 1)[1]) if boot else 0
        if not port or not port_open(port):
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
            # One node is its own dynamic quorum (--standalone); a static voter set needs no flag.
            standalone = [] if self._static_voters(self.controller_port) else ["--standalone"]
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
            while was_running and pid_alive(pid) and time.monotonic() < deadline:
                if self._proc is not None and self._proc.pid == pid:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self._proc.wait(timeout=0.2)
                else:
                    time.sleep(0.1)  # another process's child: nothing to wait on but time
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                if self._proc is not None and self._proc.pid == pid:
                    self._proc.wait()
        self._cleanup_pid(pid)
        return was_running

    def kill(self) -> None:
        """SIGKILL the broker, leaving its data for a restart with ``start(fresh=False)``."""
        st = self.status()
        if st.pid is not None and pid_alive(st.pid):
            os.kill(st.pid, signal.SIGKILL)
            if self._proc is not None and self._proc.pid == st.pid:
                self._proc.wait()
        self._cleanup_pid(st.pid)

    def _cleanup_pid(self, pid: int | None) -> None:
        self._pid_path.unlink(missing_ok=True)
        self._proc = None


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
