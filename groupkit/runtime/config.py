"""The ``GroupConsumer`` configuration: a confluent-kafka config dict plus ``groupkit.*`` keys.

Users hand ``GroupConsumer`` the same dict they would give ``confluent_kafka.Consumer``. This
module splits it into:

1. groupkit's own settings (``groupkit.*`` keys, and the group keys it takes over from
   librdkafka: ``session.timeout.ms``, ``heartbeat.interval.ms``, ``max.poll.interval.ms``,
   ``enable.auto.commit``, ``auto.commit.interval.ms``), validated here; an unknown
   ``groupkit.*`` key is an error, so a typo never silently falls back to a default;
2. the connection settings (``bootstrap.servers``, ``security.protocol``, ``sasl.*``, ``ssl.*``,
   ``client.id`` …) that every internal client (control consumer and producer, admin, data
   consumer) must receive, so a secured cluster works for all of them;
3. the data consumer's own settings (everything else).

``client.rack`` keeps its Kafka meaning too: the member's rack, which rack-aware assignors
match to the racks of each partition's replicas (KIP-881), and where the data consumer fetches
from a replica in that rack when the brokers' ``replica.selector.class`` allows it (KIP-392).
``groupkit.client.rack`` is the same setting under groupkit's own name. Only the data consumer
gets ``client.rack``: a control reader fetching from a follower would see records later.

``group.instance.id`` keeps its Kafka meaning (KIP-345): the member is *static*, its member id
is the instance id, and a new process with it takes the seat back, with its partitions and no
rebalance, if it starts within ``session.timeout.ms`` (docs/protocol.md, "Static seats").
Static members may use sessions of minutes. It is not passed to the data consumer (which never
joins the broker's group).

The data consumer never joins the broker's group: it only ``assign()``s, and uses ``group.id``
for committed offsets. groupkit commits itself (librdkafka's auto-commit is off), because a
commit must be refused once the member is fenced, which librdkafka's timer cannot know. It does
get groupkit's ``session.timeout.ms``: librdkafka holds a commit that finds no coordinator for
that long, and only that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from groupkit.errors import ConfigError
from groupkit.protocol.records import PROTOCOLS
from groupkit.protocol.vocab import RebalanceProtocol
from groupkit.runtime.client_log import with_client_log

#: The protocol versions a member speaks (``groupkit.protocol.version``).
PROTOCOL_VERSIONS = (1, 2)
#: ... and the one it speaks unless told otherwise
PROTOCOL_VERSION = 2

# groupkit.* keys: name -> (default, parser, description)
_GROUPKIT_KEYS: dict[str, tuple[Any, str]] = {
    "groupkit.assignor": ("cooperative-sticky", "str"),
    "groupkit.rebalance.protocol": (RebalanceProtocol.COOPERATIVE.value, "str"),
    "groupkit.control.topic": ("__groupkit", "str"),
    # Used only when groupkit creates the control topic (an existing one keeps its count).
    # Every group on a partition replays every other group's records on it, so one partition
    # makes each join pay for the whole cluster's heartbeats. Kafka gives __consumer_offsets
    # 50. With 16 a group shares its partition with (groups - 1) / 16 others on average (a
    # cluster of 17 groups: one other, whose records a reader skips by key), and creating it
    # stays cheap on the small clusters groupkit often creates it on: 16 log directories with
    # idle compacted segments, 48 replicas at RF 3. Choose it once: adding partitions later
    # moves groups to other partitions (partition_for_group), splitting running groups.
    "groupkit.control.topic.partitions": (16, "int"),
    "groupkit.control.topic.replication.factor": (-1, "int"),  # -1: the broker's default
    "groupkit.control.topic.create": (True, "bool"),
    "groupkit.rebalance.timeout.ms": (None, "int"),  # default: max.poll.interval.ms
    "groupkit.lag.auto.offset.reset": (None, "str"),  # default: auto.offset.reset
    "groupkit.telemetry.topic": ("__groupkit_telemetry", "str"),
    "groupkit.telemetry.enable": (False, "bool"),
    "groupkit.telemetry.interval.ms": (10_000, "int"),
    "groupkit.signing.key": (None, "str"),
    "groupkit.client.rack": (None, "str"),
    "groupkit.capacity": (None, "float"),
    "groupkit.max.clock.skew.ms": (None, "int"),  # default: see MAX_CLOCK_SKEW_MS
    # How long the leader waits for its assignor's plan before the fallback plans instead
    # (protocol/assign.py). Default: half the session. The assignor runs off the heartbeat
    # path (runtime/planning.py), so this bounds how long a rebalance waits, not the session.
    "groupkit.assignor.timeout.ms": (None, "int"),
    # Whether close() leaves the group (tombstone: the member's partitions move at once).
    # Default: yes for a dynamic member, no for a static one (group.instance.id), whose seat
    # then waits a session for its restart, as Kafka's (internal.leave.group.on.close).
    "groupkit.leave.group.on.close": (None, "bool"),
    # How often an owner commits again the committed offset of a partition it owns that no
    # commit has touched meanwhile (runtime/data_consumer.py, "Keep-alive"). The data consumer
    # commits as a simple consumer, so the broker deletes an offset once it is older than
    # offsets.retention.minutes, even while the group runs. An offset is at most about twice
    # this old while its group lives. Default: a quarter of the broker's retention, read from
    # the cluster, at most OFFSETS_KEEPALIVE_DEFAULT_MS, which is also what is assumed where
    # the read fails (runtime/retention.py). 0: never (the broker's retention then applies to
    # a live group too).
    "groupkit.offsets.keepalive.interval.ms": (None, "int"),
    # How often a member samples the committed and log-end offsets of the partitions it owns
    # for their Burrow status (runtime/lag_status.py). A window holds LAG_STATUS_WINDOW
    # samples, as Burrow's ten, so a partition is judged over ten intervals; 10 s is Burrow's
    # pace. A sample is two small requests (one ListOffsets, one OffsetFetch through a consumer
    # the member keeps: lag.CommittedReader), about a millisecond of CPU. 0: off.
    "groupkit.lag.status.interval.ms": (10_000, "int"),
    # How often the leader asks whether the load warrants moving a few partitions, and the
    # least time between two such re-plans (runtime/load.py, protocol/placement.py). 0: off.
    # Default: LOAD_INTERVAL_BALANCED_MS for `balanced` under the cooperative protocol, else
    # off (the classic assignors place by counts; an eager group never re-plans for load).
    "groupkit.load.rebalance.interval.ms": (None, "int"),
    # The protocol version the group speaks (docs/protocol-v2.md). Version 2 keeps heartbeats
    # out of the control topic: they go to the liveness topic, which only the leader and its
    # successors read, so a follower's traffic does not grow with the group. Version 1, every
    # member reading every heartbeat, stays for groups that run it. Every member of a group
    # must speak the same version (one refuses the other's records).
    "groupkit.protocol.version": (PROTOCOL_VERSION, "int"),
    # Version 2's liveness topic (heartbeats and snapshots). Default: the control topic's name
    # and ".liveness". Created like the control topic, but deleted by time, not compacted.
    "groupkit.liveness.topic": (None, "str"),
    # Version 2: how often the leader writes its lease into the control topic (the clock of
    # followers that read no heartbeat). Default: a third of the session.
    "groupkit.lease.interval.ms": (None, "int"),
    # Version 2, a static member (group.instance.id): how long its process may process after
    # its newest confirmed heartbeat, skew allowance included (docs/protocol-v2.md, L7). Its
    # seat lasts the session; after a crash, its restarted process takes the seat's partitions
    # once this lease has run out, not the session. Renewed three times within itself.
    # Default: 3 s, or three skew allowances where the allowance is above a second.
    "groupkit.process.lease.ms": (None, "int"),
}

#: ``groupkit.load.rebalance.interval.ms`` for ``balanced`` unless set: half a minute, so a
#: hot spot is followed within a minute, while a re-plan (a partition paused for about a
#: hundred milliseconds) stays rare beside the load it moves.
LOAD_INTERVAL_BALANCED_MS = 30_000

#: The keep-alive interval where ``groupkit.offsets.keepalive.interval.ms`` is not set and the
#: broker's retention cannot be read, and the most it is set to from the retention: a day, a
#: seventh of Kafka's default retention (7 days since Kafka 2.0; 1 day before).
OFFSETS_KEEPALIVE_DEFAULT_MS = 86_400_000

#: How far apart the clocks of the brokers that may lead the control partition can be, unless
#: ``groupkit.max.clock.skew.ms`` says otherwise: a member fences itself this much before its
#: session would end (member.py, "Clock skew"). NTP keeps brokers within milliseconds; a second
#: covers a broker whose time daemon has failed for a while. Capped by default at a fifth of the
#: session, so a tuned 1 s session still leaves a member 800 ms to read its heartbeat back.
MAX_CLOCK_SKEW_MS = 1_000


def default_clock_skew_ms(session_ms: int) -> int:
    """``groupkit.max.clock.skew.ms`` left unset: :data:`MAX_CLOCK_SKEW_MS`, at most a fifth of
    the session."""
    return min(MAX_CLOCK_SKEW_MS, session_ms // 5)


#: ``groupkit.process.lease.ms`` unless set: back within seconds of a crash, while a heartbeat
#: or two may still be late
PROCESS_LEASE_MS = 3_000

#: The liveness topic's name, unless ``groupkit.liveness.topic`` says otherwise: the control
#: topic's, and this.
LIVENESS_TOPIC_SUFFIX = ".liveness"

#: How long a member that may not create the control topic waits for the cluster's metadata
#: to show it before it says the topic does not exist, unless ``topic.metadata.propagation.max.ms``
#: says otherwise. A topic's creation reaches each broker through the metadata log after the
#: controller has answered (usually well within a second; a busy broker takes longer), so a
#: member started right after its topic was created may be told by the broker it asks that
#: the topic is unknown. Kafka's clients wait for such a topic within a bound rather than
#: fail: librdkafka for ``topic.metadata.propagation.max.ms`` (30 s by default, the setting
#: this honours, so one setting means one wait in every client of the app), the Java
#: producer for ``max.block.ms`` (60 s).
TOPIC_PROPAGATION_MS = 30_000

# Keys every internal client needs to reach and authenticate to the cluster.
_CONNECTION_PREFIXES = ("security.", "sasl.", "ssl.", "ssl_", "socket.", "broker.", "client.")
_CONNECTION_KEYS = {
    "bootstrap.servers",
    "metadata.broker.list",
    "client.dns.lookup",
    "enable.ssl.certificate.verification",
    "enable.sasl.oauthbearer.unsecure.jwt",
    "https.ca.location",  # the OIDC token endpoint's CA (sasl.oauthbearer.method=oidc)
    "https.ca.pem",
    "oauth_cb",  # confluent-kafka's OAUTHBEARER token callback
    "oauthbearer_token_refresh_cb",
    "error_cb",
    "log_level",
    "logger",
    "debug",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "retry.backoff.ms",
    "api.version.request",
    "topic.metadata.refresh.interval.ms",
    "metadata.max.age.ms",
}

#: the largest ``session.timeout.ms`` librdkafka accepts of the data consumer: no more than its
#: ``max.poll.interval.ms``, librdkafka's default of 300 s (groupkit takes that key over)
_DATA_CONSUMER_MAX_SESSION_MS = 300_000

# Group-coordination keys librdkafka would act on; groupkit takes them over.
_GROUP_KEYS = {
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "partition.assignment.strategy",
    "group.protocol",
    "group.remote.assignor",
    "group.instance.id",
    "on_commit",
}


def parse_setting(key: str, value: Any, kind: str) -> Any:
    """``value`` of setting ``key`` as ``kind`` ("int", "float", "bool" or "str"), parsed as
    librdkafka parses a config string; ``None`` stays ``None``. :class:`ConfigError` if it is
    not one."""
    if value is None:
        return None
    try:
        if kind == "int":
            if isinstance(value, bool):
                raise ValueError(value)
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("true", "1", "yes"):
                return True
            if text in ("false", "0", "no"):
                return False
            raise ValueError(value)
        return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: expected {kind}, got {value!r}") from None


def _ms(conf: Mapping[str, Any], key: str, default: int) -> int:
    value = parse_setting(key, conf.get(key, default), "int")
    if value <= 0:
        raise ConfigError(f"{key} must be > 0, got {value}")
    return int(value)


@dataclass(frozen=True)
class GroupConfig:
    """Validated settings of one ``GroupConsumer``."""

    group_id: str
    assignor: str
    protocol: str
    control_topic: str
    control_partitions: int
    control_replication_factor: int
    create_control_topic: bool
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    rebalance_timeout_ms: int
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    #: where a partition without a committed offset counts its lag from ("earliest" or
    #: "latest"): auto.offset.reset, as the data consumer starts there
    lag_reset: str
    telemetry_enable: bool
    telemetry_topic: str
    telemetry_interval_ms: int
    signing_key: str | None
    rack: str | None
    capacity: float | None
    max_clock_skew_ms: int
    assignor_timeout_ms: int = 5_000
    #: the keep-alive interval set, else :data:`OFFSETS_KEEPALIVE_DEFAULT_MS` until the
    #: broker's retention is read (``offsets_keepalive_from_retention``)
    offsets_keepalive_ms: int = OFFSETS_KEEPALIVE_DEFAULT_MS
    #: ``groupkit.offsets.keepalive.interval.ms`` is not set: derive it from the retention
    offsets_keepalive_from_retention: bool = False
    #: how often the owned partitions' offsets are sampled for their status (0: off)
    lag_status_interval_ms: int = 10_000
    #: how often the leader asks whether to re-plan for the load (0: off)
    load_interval_ms: int = 0
    #: ``group.instance.id``: a static member (KIP-345), or ``None``
    instance_id: str | None = None
    #: whether ``close()`` leaves the group (``groupkit.leave.group.on.close``)
    leave_on_close: bool = True
    #: how long a control topic the metadata does not show is waited for, without
    #: ``create_control_topic`` (``topic.metadata.propagation.max.ms``)
    topic_propagation_ms: int = TOPIC_PROPAGATION_MS
    #: the protocol version the group speaks (``groupkit.protocol.version``: 1 or 2)
    protocol_version: int = PROTOCOL_VERSION
    #: version 2's liveness topic (``groupkit.liveness.topic``; default the control topic's
    #: name and ``.liveness``)
    liveness_topic: str = ""
    #: version 2: how often the leader writes its lease (``groupkit.lease.interval.ms``)
    lease_interval_ms: int = 0
    #: version 2, a static member: its process lease (``groupkit.process.lease.ms``)
    process_lease_ms: int = PROCESS_LEASE_MS
    connection: dict[str, Any] = field(default_factory=dict)
    data_consumer: dict[str, Any] = field(default_factory=dict)
    user_config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, conf: Mapping[str, Any]) -> GroupConfig:
        unknown = sorted(k for k in conf if k.startswith("groupkit.") and k not in _GROUPKIT_KEYS)
        if unknown:
            raise ConfigError(
                f"unknown groupkit setting(s) {', '.join(unknown)}; known: "
                + ", ".join(sorted(_GROUPKIT_KEYS))
            )
        gk = {
            k: parse_setting(k, conf.get(k, default), kind)
            for k, (default, kind) in _GROUPKIT_KEYS.items()
        }
        group_id = conf.get("group.id")
        if not group_id or not isinstance(group_id, str):
            raise ConfigError("group.id is required: it names the group and its committed offsets")
        if not conf.get("bootstrap.servers") and not conf.get("metadata.broker.list"):
            raise ConfigError("bootstrap.servers is required")
        protocol = gk["groupkit.rebalance.protocol"]
        if protocol not in PROTOCOLS:
            raise ConfigError(
                f"groupkit.rebalance.protocol must be one of {', '.join(PROTOCOLS)}, "
                f"got {protocol!r}"
            )
        from groupkit.assignors import get_assignor

        get_assignor(gk["groupkit.assignor"])  # an unknown name fails now, listing known ones
        session = _ms(conf, "session.timeout.ms", 10_000)
        heartbeat = _ms(conf, "heartbeat.interval.ms", min(1_000, session // 3))
        if heartbeat >= session:
            raise ConfigError(
                f"heartbeat.interval.ms ({heartbeat}) must be lower than "
                f"session.timeout.ms ({session})"
            )
        max_poll = _ms(conf, "max.poll.interval.ms", 300_000)
        rebalance_timeout = gk["groupkit.rebalance.timeout.ms"] or max_poll
        reset = str(conf.get("auto.offset.reset", "latest")).lower()
        reset = {
            "smallest": "earliest",
            "beginning": "earliest",
            "largest": "latest",
            "end": "latest",
        }.get(reset, reset)
        if reset not in ("earliest", "latest", "error"):
            raise ConfigError(f"auto.offset.reset must be earliest, latest or error, got {reset!r}")
        lag_reset = gk["groupkit.lag.auto.offset.reset"] or reset
        skew = gk["groupkit.max.clock.skew.ms"]
        if skew is None:
            skew = default_clock_skew_ms(session)
        elif not 0 <= skew < session // 2:
            raise ConfigError(
                f"groupkit.max.clock.skew.ms must be >= 0 and below half of session.timeout.ms "
                f"({session // 2}), got {skew}: a member fences itself that much early"
            )
        assignor_timeout = gk["groupkit.assignor.timeout.ms"]
        if assignor_timeout is None:
            assignor_timeout = session // 2
        elif assignor_timeout <= 0:
            raise ConfigError(f"groupkit.assignor.timeout.ms must be > 0, got {assignor_timeout}")
        keepalive = gk["groupkit.offsets.keepalive.interval.ms"]
        keepalive_from_retention = keepalive is None
        if keepalive is None:
            keepalive = OFFSETS_KEEPALIVE_DEFAULT_MS
        elif keepalive < 0:
            raise ConfigError(
                f"groupkit.offsets.keepalive.interval.ms must be >= 0 (0: off), got {keepalive}"
            )
        lag_status_interval = gk["groupkit.lag.status.interval.ms"]
        if lag_status_interval < 0:
            raise ConfigError(
                f"groupkit.lag.status.interval.ms must be >= 0 (0: off), got {lag_status_interval}"
            )
        load_interval = gk["groupkit.load.rebalance.interval.ms"]
        if load_interval is None:
            load_interval = (
                LOAD_INTERVAL_BALANCED_MS
                if gk["groupkit.assignor"] == "balanced"
                and protocol == RebalanceProtocol.COOPERATIVE
                else 0
            )
        elif load_interval < 0:
            raise ConfigError(
                f"groupkit.load.rebalance.interval.ms must be >= 0 (0: off), got {load_interval}"
            )
        elif load_interval > 0 and protocol != RebalanceProtocol.COOPERATIVE:
            raise ConfigError(
                "groupkit.load.rebalance.interval.ms needs the cooperative protocol: an eager "
                "generation revokes every partition, a re-plan for the load only a few"
            )
        instance_id = conf.get("group.instance.id")
        if instance_id is not None and (not isinstance(instance_id, str) or not instance_id):
            raise ConfigError(f"group.instance.id must be a non-empty string, got {instance_id!r}")
        leave_on_close = gk["groupkit.leave.group.on.close"]
        if leave_on_close is None:
            leave_on_close = instance_id is None
        propagation = parse_setting(
            "topic.metadata.propagation.max.ms",
            conf.get("topic.metadata.propagation.max.ms", TOPIC_PROPAGATION_MS),
            "int",
        )
        if propagation < 0:
            raise ConfigError(f"topic.metadata.propagation.max.ms must be >= 0, got {propagation}")
        parts = gk["groupkit.control.topic.partitions"]
        if parts < 1:
            raise ConfigError("groupkit.control.topic.partitions must be >= 1")

        version = gk["groupkit.protocol.version"]
        if version not in PROTOCOL_VERSIONS:
            raise ConfigError(f"groupkit.protocol.version must be 1 or 2, got {version}")
        liveness_topic = gk["groupkit.liveness.topic"]
        if liveness_topic is None:
            liveness_topic = f"{gk['groupkit.control.topic']}{LIVENESS_TOPIC_SUFFIX}"
        elif not liveness_topic or liveness_topic == gk["groupkit.control.topic"]:
            raise ConfigError(
                f"groupkit.liveness.topic must name a topic other than the control topic, "
                f"got {liveness_topic!r}"
            )
        lease_interval = gk["groupkit.lease.interval.ms"]
        if lease_interval is None:
            lease_interval = session // 3
        elif not 0 < lease_interval <= session // 2:
            raise ConfigError(
                f"groupkit.lease.interval.ms must be > 0 and at most half of session.timeout.ms "
                f"({session // 2}), got {lease_interval}: followers judge the leader gone "
                "after a session and a lease interval without its lease"
            )

        process_lease = gk["groupkit.process.lease.ms"]
        if process_lease is None:
            process_lease = max(PROCESS_LEASE_MS, 3 * skew)
        process_lease = min(process_lease, session)
        # (only a static member of version 2 has a lease of its own: L7)
        if instance_id is not None and version == 2 and process_lease <= 2 * skew:
            raise ConfigError(
                f"groupkit.process.lease.ms must be above twice groupkit.max.clock.skew.ms "
                f"({2 * skew}), got {process_lease}: a static process fences itself a skew "
                "allowance before its lease ends, and renews it every third of it"
            )

        rack = _rack(conf.get("client.rack"), gk["groupkit.client.rack"])
        connection = {
            k: v
            for k, v in conf.items()
            if (k in _CONNECTION_KEYS or k.startswith(_CONNECTION_PREFIXES)) and k != "client.rack"
        }
        data = {
            k: v for k, v in conf.items() if not k.startswith("groupkit.") and k not in _GROUP_KEYS
        }
        # groupkit commits itself (see the module docstring); librdkafka must not.
        data["enable.auto.commit"] = False
        data = with_client_log(data)  # silent until the app configures logging
        # A commit that finds no coordinator waits for one for librdkafka's session.timeout.ms
        # (``rd_kafka_cgrp_defer_offset_commit``; 45 s by default), then fails. Sent when the
        # coordinator returns, it could land after the member's partitions went to others and
        # rewind what they committed (seconds late, through more broker restarts). The data
        # consumer never joins a group, so librdkafka uses its session for nothing else:
        # groupkit's bounds the wait (tests/test_stale_commits.py), as far as librdkafka lets it.
        data["session.timeout.ms"] = min(session, _DATA_CONSUMER_MAX_SESSION_MS)
        data.setdefault("enable.auto.offset.store", True)
        data["auto.offset.reset"] = reset
        if rack is not None:
            data["client.rack"] = rack
        return cls(
            group_id=group_id,
            assignor=gk["groupkit.assignor"],
            protocol=protocol,
            control_topic=gk["groupkit.control.topic"],
            control_partitions=parts,
            control_replication_factor=gk["groupkit.control.topic.replication.factor"],
            create_control_topic=gk["groupkit.control.topic.create"],
            session_timeout_ms=session,
            heartbeat_interval_ms=heartbeat,
            max_poll_interval_ms=max_poll,
            rebalance_timeout_ms=rebalance_timeout,
            enable_auto_commit=parse_setting(
                "enable.auto.commit", conf.get("enable.auto.commit", True), "bool"
            ),
            auto_commit_interval_ms=_ms(conf, "auto.commit.interval.ms", 5_000),
            lag_reset=lag_reset,
            telemetry_enable=gk["groupkit.telemetry.enable"],
            telemetry_topic=gk["groupkit.telemetry.topic"],
            telemetry_interval_ms=gk["groupkit.telemetry.interval.ms"],
            signing_key=gk["groupkit.signing.key"],
            rack=rack,
            capacity=gk["groupkit.capacity"],
            max_clock_skew_ms=skew,
            assignor_timeout_ms=assignor_timeout,
            offsets_keepalive_ms=keepalive,
            offsets_keepalive_from_retention=keepalive_from_retention,
            lag_status_interval_ms=lag_status_interval,
            load_interval_ms=load_interval,
            instance_id=instance_id,
            leave_on_close=leave_on_close,
            topic_propagation_ms=propagation,
            protocol_version=version,
            liveness_topic=liveness_topic,
            lease_interval_ms=lease_interval,
            process_lease_ms=process_lease,
            connection=connection,
            data_consumer=data,
            user_config=dict(conf),
        )

    def client_config(self, role: str | None = None, **overrides: Any) -> dict[str, Any]:
        """Settings for an internal client: the user's connection and security settings first.

        ``role`` names the client: its ``client.id`` is the user's (or ``groupkit``) with
        ``.role`` appended, so broker logs, request metrics and a fault proxy can tell a
        member's control reader, control writer, admin and telemetry producer apart (the data
        consumer keeps the user's own ``client.id``, which client-id quotas may name).

        The client's librdkafka log goes to groupkit's loggers (:mod:`.client_log`).

        It never has the broker create a topic it merely asks about
        (``allow.auto.create.topics``, whatever the user set for the data consumer): librdkafka
        lets producer-type handles (the admin client and the control writer among them) do so
        by default, and a broker with Kafka's default ``auto.create.topics.enable=true`` would
        then create a missing control topic with its own defaults (deleted by time, not
        compacted) before groupkit creates it as it must be."""
        conf = {**self.connection, "allow.auto.create.topics": False, **overrides}
        if role is not None:
            conf["client.id"] = f"{self.connection.get('client.id', 'groupkit')}.{role}"
        return with_client_log(conf)


def _rack(standard: Any, alias: str | None) -> str | None:
    """The member's rack from ``client.rack``, or its alias ``groupkit.client.rack``."""
    rack = None if standard is None or standard == "" else str(standard)
    if rack is not None and alias and alias != rack:
        raise ConfigError(
            f"client.rack ({rack!r}) and groupkit.client.rack ({alias!r}) name different "
            "racks; set client.rack alone"
        )
    return rack or alias or None
