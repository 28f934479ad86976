"""Topic administration the runtime, the demo and the tests share.

``CreateTopics`` returns once the controller has accepted a topic, but a broker may answer
``UNKNOWN_TOPIC_OR_PART`` for a moment afterwards, until its metadata cache has caught up. So
``create_topic`` waits until the topic's metadata shows every partition with a leader.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from groupkit.errors import BrokerError


class GroupkitAdmin(AdminClient):
    """An ``AdminClient`` that remembers its settings, so that a companion client (the
    consumer :func:`groupkit.runtime.lag.committed_offsets` uses) reaches the cluster the same
    way. ``broker_ids``: the brokers of the metadata it connected with (``connect_admin``)."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        super().__init__(dict(settings))
        self.settings: dict[str, Any] = dict(settings)
        self.broker_ids: list[int] = []


def connect_admin(conf: Mapping[str, Any], timeout: float = 10.0) -> GroupkitAdmin:
    """An ``AdminClient`` that has reached the cluster, or a ``BrokerError`` saying why not.

    librdkafka reports a failed SASL handshake only through ``error_cb``, while the request
    itself just times out as a "transport failure". So the errors are collected here and an
    authentication failure is raised at once, with librdkafka's reason and the settings to check.
    A user's own ``error_cb`` still receives every error.
    """
    errors: deque[KafkaError] = deque(maxlen=16)
    user_cb = conf.get("error_cb")

    def on_error(err: KafkaError) -> None:
        errors.append(err)
        if callable(user_cb):
            user_cb(err)

    where = conf.get("bootstrap.servers") or conf.get("metadata.broker.list")
    admin = GroupkitAdmin({**conf, "error_cb": on_error})
    deadline = time.monotonic() + timeout
    fast_failures = 0
    while True:
        wait = max(0.1, min(1.0, deadline - time.monotonic()))
        t0 = time.monotonic()
        try:
            admin.broker_ids = sorted(admin.list_topics(timeout=wait).brokers)
            return admin
        except KafkaException as e:
            # A failure well before the wait is librdkafka knowing every broker is down.
            fast_failures = fast_failures + 1 if time.monotonic() - t0 < wait / 2 else 0
            admin.poll(0)  # serve error_cb
            auth = [x for x in errors if x.code() == KafkaError._AUTHENTICATION]
            failure = None
            if auth:
                failure = BrokerError(
                    f"authentication to Kafka at {where} failed: {auth[-1].str()} (check "
                    "security.protocol, sasl.mechanism, sasl.username and sasl.password)"
                )
            elif fast_failures >= 3 or time.monotonic() >= deadline:
                seen = "; ".join(dict.fromkeys(x.str() for x in errors))
                failure = BrokerError(
                    f"cannot reach Kafka at {where}: {e}"
                    + (f" ({seen})" if seen else "")
                    + "; is the address right, and does the listener need security.protocol "
                    "(SASL_*/SSL) settings?"
                )
            if failure is not None:
                # A handle kept alive by the error would go on reconnecting to the unreachable
                # cluster for as long as the error lives: the new error's traceback holds this
                # frame, and the cause's runs through confluent-kafka's list_topics, whose
                # frame holds the admin too (the message says all the cause's traceback did).
                del admin
                raise failure from e.with_traceback(None)
            time.sleep(0.1 if fast_failures else 0)


def wait_for_topic(admin: AdminClient, name: str, partitions: int, timeout: float = 30.0) -> None:
    """Block until ``name`` has ``partitions`` partitions, each with a leader."""
    deadline = time.monotonic() + timeout
    last = "no metadata yet"
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(
                topic=name, timeout=max(0.5, min(5.0, deadline - time.monotonic()))
            )
        except KafkaException as e:  # one request timed out, a broker restarting: ask again
            last = str(e)
            time.sleep(0.05)
            continue
        t = md.topics.get(name)
        if t is not None and t.error is None:
            ready = [p for p in t.partitions.values() if p.leader >= 0 and p.error is None]
            if len(ready) >= partitions:
                return
            last = f"{len(ready)} of {partitions} partitions have a leader"
        elif t is not None:
            last = str(t.error)
        time.sleep(0.05)  # metadata refresh is a request per call; no event to wait on
    raise BrokerError(f"topic {name!r} did not become ready within {timeout:.0f}s ({last})")


#: What a broker's metadata says of a topic whose creation it has not caught up with yet (a
#: fresh topic's partitions have no leader for a moment, too): asking again cures these
_NOT_YET = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.LEADER_NOT_AVAILABLE,
    }
)


class MetadataSource(Protocol):
    """A client that answers metadata requests: an ``AdminClient`` or a ``Consumer``."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...


def appeared_topic(admin: MetadataSource, name: str, timeout: float) -> Any | None:
    """The metadata of topic ``name`` once it shows up in the cluster's within ``timeout``
    seconds, else ``None``.

    ``CreateTopics`` returns once the controller has the topic; each broker learns it from the
    metadata log afterwards, so a broker may answer that the topic is unknown for a moment (on
    a three-broker cluster one did for up to half a second, asked right after the creation
    through another broker). So an answer that the topic is unknown is asked again, every
    50 ms, until ``timeout``. An answer no wait cures (no DESCRIBE on the topic) is ``None`` at
    once. A :class:`BrokerError` if the last ask could not reach the cluster: absence is only
    concluded from a broker's answer."""
    deadline = time.monotonic() + timeout
    while True:
        unreachable: KafkaException | None = None
        try:
            t = admin.list_topics(
                topic=name, timeout=max(0.5, min(5.0, deadline - time.monotonic()))
            ).topics.get(name)
        except KafkaException as e:  # one request timed out, a broker restarting: ask again
            unreachable, t = e, None
        err: KafkaError | None = t.error if t is not None else None
        if t is not None and err is None:
            return t
        if err is not None and err.code() not in _NOT_YET and not err.retriable():
            return None
        if time.monotonic() >= deadline:
            if unreachable is not None:
                raise BrokerError(f"cannot reach the cluster to look up {name!r}: {unreachable}")
            return None
        # metadata refresh is a request per call; no event to wait on
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


def create_topic(
    admin: AdminClient,
    name: str,
    partitions: int,
    replication_factor: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    exist_ok: bool = False,
) -> bool:
    """Create ``name`` and wait until it is usable. Returns False if it existed (``exist_ok``).

    A retriable refusal (a controller moving, a broker restarting) is asked again until
    ``timeout``; after one, "already exists" is our own earlier request's doing."""
    deadline = time.monotonic() + timeout
    retried = False
    while True:
        futures = admin.create_topics(
            [NewTopic(name, partitions, replication_factor, config=dict(config or {}))],
            operation_timeout=max(1.0, deadline - time.monotonic()),
        )
        try:
            futures[name].result(timeout=max(1.0, deadline - time.monotonic()))
            created = True
            break
        except KafkaException as e:
            err: Any = e.args[0] if e.args else None
            code = err.code() if isinstance(err, KafkaError) else None
            if code == KafkaError.TOPIC_ALREADY_EXISTS and (exist_ok or retried):
                created = retried
                break
            if code is None or not err.retriable() or time.monotonic() >= deadline:
                raise BrokerError(f"could not create topic {name!r}: {err}") from e
            retried = True
            time.sleep(0.1)  # the controller answers again within moments; nothing to wait on
    wait_for_topic(admin, name, partitions if created else 1, timeout)
    return created
