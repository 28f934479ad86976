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
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from groupkit.errors import DevBrokerError

DEFAULT_KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"
SLF4J_VERSION = "2.0.17"
MIN_JAVA = 17


def cache_root() -> Path:
    """``$GROUPKIT_CACHE`` or ``~/.cache/groupkit``."""
    env = os.environ.get("GROUPKIT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "groupkit"


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


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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
    state: str  # "running", "stopped", "crashed" (pid gone, files left), "unresponsive"
    bootstrap: str | None
    pid: int | None
    log: Path

    def describe(self) -> str:
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


class LocalBroker:
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
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(data),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Tests and the demo create what they use; a typo'd topic must not spring into being.
            "auto.create.topics.enable": "false",
            # Let compaction of the control topic happen within a test's lifetime.
            "log.cleaner.backoff.ms": "1000",
        }
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
            controller_port = free_port()
            (self.state_dir / "controller.port").write_text(str(controller_port))
        else:
            if self.port == 0 and self._bootstrap_path.exists():
                self.port = int(self._bootstrap_path.read_text().strip().rsplit(":", 1)[1])
            controller_port = int((self.state_dir / "controller.port").read_text())
        props = self.state_dir / "server.properties"
        props.write_text(self._properties(controller_port))
        log4j = self.state_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=self.log_path))
        classpath = f"{lib}/*"
        jvm = [
            "java",
            f"-Xmx{self.heap}",
            "-Xms128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            classpath,
        ]
        if fresh:
            cluster_id = new_cluster_id()
            fmt = subprocess.run(
                [
                    *jvm,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    cluster_id,
                    "-c",
                    str(props),
                    "--standalone",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
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
        self._wait_ready(timeout)
        return self.bootstrap

    def _wait_ready(self, timeout: float) -> None:
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
                if md.brokers:
                    return
            except Exception:
                pass
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
    """``groupkit broker start|stop|status|fetch``."""
    version = args.kafka_version or DEFAULT_KAFKA_VERSION
    broker = LocalBroker(args.dir, version=version, port=args.port)
    if args.action == "fetch":
        java_major_version()
        lib = ensure_jars(version)
        print(f"Apache Kafka {version} jars in {lib}")
        return 0
    if args.action == "start":
        print(f"starting Apache Kafka {version} (KRaft, single node) ...", file=sys.stderr)
        bootstrap = broker.start()
        print(f"broker running: bootstrap.servers={bootstrap}")
        print(f"log: {broker.log_path}; stop with: groupkit broker stop")
        return 0
    if args.action == "stop":
        st = broker.status()
        if broker.stop():
            print(f"stopped the broker (pid {st.pid})")
        elif st.state == "crashed":
            print(f"the broker (pid {st.pid}) had already exited; cleaned up its state")
        else:
            print("no local broker was running")
        return 0
    st = broker.status()
    print(st.describe())
    return 0 if st.state == "running" else 1
