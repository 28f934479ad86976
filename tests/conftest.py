"""Shared fixtures: a real Kafka broker for the session, and unique topics per test.

The ``kafka`` fixture takes, in order: an external cluster named by
``GROUPKIT_BOOTSTRAP_SERVERS``; a testcontainers Kafka when a Docker engine answers a ping; else
the local broker that ``groupkit.dev.broker`` runs from Apache Kafka's own jars. It never skips:
a test that needs a broker fails when none can be had.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from groupkit import GroupConsumer


@dataclass
class KafkaBackend:
    """The broker serving this test session."""

    bootstrap: str
    kind: str  # "external", "testcontainers", "local"
    version: str
    local: Any = None  # the groupkit.dev.broker.LocalBroker (LocalCluster) that this run started
    created_topics: list[str] = field(default_factory=list)
    #: librdkafka clients still alive when this run stopped its broker (leaks)
    outlived: int = 0
    stopped: bool = False

    def describe(self) -> str:
        return f"{self.kind} broker, Apache Kafka {self.version}, at {self.bootstrap}"


_SERVED: list[KafkaBackend] = []


def _announce(backend: KafkaBackend) -> None:
    _SERVED.append(backend)
    print(f"\n[groupkit] kafka: {backend.describe()}")


#: what the workers of a ``pytest -n`` run reported of their brokers (``_served``)
_WORKERS_SERVED: list[tuple[str, int, str]] = []


def _served() -> list[tuple[str, int, str]]:
    """This process's brokers: (``describe()``, clients that outlived it, kind)."""
    return [(b.describe(), b.outlived, b.kind) for b in _SERVED]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which broker served, so a CI log shows the tests ran against a real one."""
    served = _served() + _WORKERS_SERVED
    for described, outlived, kind in served:
        terminalreporter.write_line(f"groupkit tests ran against: {described}")
        if outlived:
            terminalreporter.write_line(
                f"groupkit: {outlived} librdkafka client(s) were still alive when the "
                f"{kind} broker stopped: a test or fixture leaks a client",
                red=True,
            )


# ---------------------------------------------------------------- workers (make test)
#
# `make test` runs `pytest -n 3` (pytest-xdist) with the scheduler below: one group of tests
# per worker. The pure layers' hypothesis suites (minutes of CPU, no broker); the
# offset-retention test (over two minutes of waiting, on a broker of its own); and everything
# else, one test at a time as without xdist (one broker for the session, timings as before).
# (Not --dist loadgroup: pytest 9.2 ignores the group suffix xdist 3.8 gives a test's id.)

#: test modules that need no broker
_PURE = ("test_protocol_", "test_assignor_", "test_lagstatus")
#: test modules that start a broker of their own and mostly wait (the Kafka 3.x smoke test's
#: broker is of another release)
_OWN_BROKER = ("test_offset_retention.py", "test_kafka3_smoke.py")


def _worker_group(module: str) -> str:
    return "pure" if module.startswith(_PURE) else "own" if module in _OWN_BROKER else "broker"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkerGroup(LoadScopeScheduling):  # type: ignore[misc]
        """Whole groups (``_worker_group``) as the units of work: each goes to one worker."""

        def _split_scope(self, nodeid: str) -> str:
            return _worker_group(nodeid.split("::", 1)[0].rsplit("/", 1)[-1])

    return ByWorkerGroup(config, log)


_niced = False


def pytest_runtest_setup(item: pytest.Item) -> None:
    """The pure suites' worker takes only the CPU the broker tests leave idle (theirs are
    real-time sessions and timeouts): it runs at the lowest priority."""
    global _niced
    if (not _niced and os.environ.get("PYTEST_XDIST_WORKER")
            and _worker_group(item.path.name) == "pure"):  # fmt: skip
        os.nice(19)
        _niced = True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """``GK_DEBUG_LEAKS=1``: name each test after which (its teardown included) more librdkafka
    clients live than before it (a session or module fixture's client shows up once, at the
    first test that used it)."""
    if not os.environ.get("GK_DEBUG_LEAKS"):
        return (yield)
    from groupkit.dev.broker import live_client_handles, wait_clients_closed

    before = live_client_handles()
    try:
        return (yield)
    finally:
        after = wait_clients_closed(1.0, baseline=before)
        if after > before:
            print(f"GK_DEBUG_LEAKS: {item.nodeid} left {after - before} more client(s) alive "
                  f"({after} in all)", file=sys.__stderr__)  # fmt: skip


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker tells the controller which broker served it (``pytest_testnodedown``)."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["groupkit_served"] = _served()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    out = getattr(node, "workeroutput", None) or {}
    _WORKERS_SERVED.extend(tuple(x) for x in out.get("groupkit_served", ()))


def stop_after_clients(backend: KafkaBackend, stop: Callable[[], object]) -> None:
    """Stop this run's broker only once every client of the session is gone (a client that
    outlives its broker retries it for ever, logging ``Connect ... failed``)."""
    from groupkit.dev.broker import wait_clients_closed

    # While another broker of this session still serves, its own clients (e.g. the ``admin``
    # fixture's) may live on: nothing can be told apart, so only wait briefly.
    others = [b for b in _SERVED if b is not backend and b.local is not None and not b.stopped]
    try:
        live = wait_clients_closed(1.0 if others else 10.0)
        if live and os.environ.get("GK_DEBUG_LEAKS"):  # who holds them (closed ones too)
            import gc

            from confluent_kafka import Consumer, Producer
            from confluent_kafka.admin import AdminClient

            for o in gc.get_objects():
                if isinstance(o, (AdminClient, Producer, Consumer)):
                    # (to the process's own stderr: an xdist worker's stdout never shows)
                    print("client", o, "held by", [str(r)[:200] for r in gc.get_referrers(o)],
                          file=sys.__stderr__)  # fmt: skip
        backend.outlived = 0 if others else live
    finally:
        backend.stopped = True
        stop()


def _docker_engine_answers() -> bool:
    """A ``docker`` binary on PATH proves nothing; only a ping of the engine does."""
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


def _external() -> KafkaBackend | None:
    """The cluster ``GROUPKIT_BOOTSTRAP_SERVERS`` names, if it names one (it wins)."""
    external = os.environ.get("GROUPKIT_BOOTSTRAP_SERVERS")
    if not external:
        return None
    backend = KafkaBackend(external, "external", os.environ.get("GROUPKIT_KAFKA_VERSION", "?"))
    _announce(backend)
    return backend


def local_version() -> str:
    from groupkit.dev.broker import DEFAULT_KAFKA_VERSION

    return os.environ.get("GROUPKIT_KAFKA_VERSION", DEFAULT_KAFKA_VERSION)


def _serve(local: Any, kind: str) -> Iterator[KafkaBackend]:
    """Start ``local`` (a LocalBroker or LocalCluster) for the session; stop it after the
    session's clients are gone."""
    backend = KafkaBackend(local.start(), kind, local.version, local=local)
    _announce(backend)
    try:
        yield backend
    finally:
        stop_after_clients(backend, local.stop)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBackend]:
    external = _external()
    if external is not None:
        yield external
        return
    if _docker_engine_answers():
        from testcontainers.community.kafka import KafkaContainer

        image = os.environ.get("GROUPKIT_KAFKA_IMAGE", "confluentinc/cp-kafka:8.1.0")
        with KafkaContainer(image).with_kraft() as container:
            backend = KafkaBackend(container.get_bootstrap_server(), "testcontainers", image)
            _announce(backend)
            yield backend
        return
    from groupkit.dev.broker import LocalBroker

    yield from _serve(LocalBroker(tmp_path_factory.mktemp("broker"), version=local_version()),
                      "local")  # fmt: skip


#: Broker settings of the test cluster: a kill -9'd node is fenced (and its partitions led
#: elsewhere) after 4 s instead of the default 9 s, so a fault test's sessions can be short.
#: The heartbeat interval is also each broker heartbeat's request timeout: 400 ms proved too
#: short for a broker on a loaded machine (it never got unfenced). The replica selector lets a
#: consumer with ``client.rack`` fetch from a replica in its rack (KIP-392,
#: tests/test_cluster_racks.py); consumers without one still fetch from leaders.
CLUSTER_PROPERTIES = {
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "1000",
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
}


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBackend]:
    """Three KRaft brokers (``dev.broker.LocalCluster``: RF 3, ``min.insync.replicas`` 2, racks
    r0..r2), shared by the session; ``cluster.local`` is the LocalCluster to inject faults
    with; each node also has a ``PROXIED`` listener for a fault proxy
    (``groupkit.dev.proxy``, tests/test_cluster_partition.py).
    ``GROUPKIT_BOOTSTRAP_SERVERS`` still wins: then ``local`` is ``None``, and a test that must
    kill, skew or cut off a broker says it cannot."""
    external = _external()
    if external is not None:
        yield external
        return
    from groupkit.dev.broker import LocalCluster

    local = LocalCluster(tmp_path_factory.mktemp("cluster"), version=local_version(),
                         extra_properties=CLUSTER_PROPERTIES, proxied=True)  # fmt: skip
    yield from _serve(local, "local 3-node cluster")


@pytest.fixture(scope="session")
def bootstrap(kafka: KafkaBackend) -> str:
    return kafka.bootstrap


class ReleasedAdmin:
    """An AdminClient whose handle :meth:`release` destroys (for session and module fixtures).

    An AdminClient has no close(): only its last reference going destroys it, and pytest still
    holds a session or module fixture's value (the last test's arguments) while the other
    fixtures of that scope are torn down, i.e. when the broker fixture stops the broker. So
    such a fixture hands out this, and drops the client itself at its own teardown."""

    def __init__(self, conf: dict[str, Any]) -> None:
        from confluent_kafka.admin import AdminClient

        self._client: Any = AdminClient(conf)

    def __getattr__(self, name: str) -> Any:
        if self.__dict__.get("_client") is None:
            raise RuntimeError("the session's admin client was released")
        return getattr(self._client, name)

    def release(self) -> None:
        self._client = None


@pytest.fixture(scope="session")
def admin(bootstrap: str):  # type: ignore[no-untyped-def]
    """The session's AdminClient (released before ``kafka`` stops the broker)."""
    client = ReleasedAdmin({"bootstrap.servers": bootstrap})
    yield client
    client.release()


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(
    admin: object, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> str:
    """Create ``name`` and wait until its metadata shows every partition led."""
    from groupkit.runtime.admin import create_topic as create

    create(admin, name, partitions, config=config)  # type: ignore[arg-type]
    return name


def delete_topics(admin: object, names: list[str]) -> None:
    if not names:
        return
    futures = admin.delete_topics(names, operation_timeout=30)  # type: ignore[attr-defined]
    for f in futures.values():
        # Already gone is fine: deletion is tidiness, not the test.
        with contextlib.suppress(Exception):
            f.result(timeout=60)


@pytest.fixture
def topic_factory(admin: object) -> Iterator[Callable[..., str]]:
    """``topic_factory(partitions=1, config=None, prefix="t")`` creates a uniquely named topic;
    every topic it made is deleted after the test."""
    made: list[str] = []

    def make(partitions: int = 1, config: dict[str, str] | None = None, prefix: str = "t") -> str:
        name = create_topic(admin, unique_name(prefix), partitions, config)
        made.append(name)
        return name

    yield make
    delete_topics(admin, made)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


# Shared by the GroupConsumer tests (a module may still define its own of the same name).
@pytest.fixture
def conf(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": unique_name("g"),
        "session.timeout.ms": 3000,
        "heartbeat.interval.ms": 300,
        "auto.offset.reset": "earliest",
        "groupkit.control.topic": unique_name("ctl"),
    }


@pytest.fixture
def consumers() -> Iterator[list[GroupConsumer]]:
    made: list[GroupConsumer] = []
    yield made
    for c in made:
        c.close()


@pytest.fixture
def make_group(bootstrap: str, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``make_group(topics, **kw)``: a ``tests.groupharness.WorkerGroup`` of worker processes
    (``kw`` as for it) with a unique group id; every member is stopped after the test."""
    from tests.groupharness import WorkerGroup

    groups: list[WorkerGroup] = []

    def make(topics: list[str], **kw: Any) -> WorkerGroup:
        g = WorkerGroup(bootstrap, unique_name("g"), topics, tmp_path, **kw)
        groups.append(g)
        return g

    yield make
    for g in groups:
        g.stop_all()
