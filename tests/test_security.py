"""Security on a real broker: SASL/PLAIN with ACLs, and HMAC-signed control records.

The module starts its own broker (``LocalBroker(sasl_users=..., authorizer=True)``): every
listener, the controller's included, takes only SASL_PLAINTEXT, and Kafka's StandardAuthorizer
denies whatever no ACL allows. Principals:

- ``admin``: super user; creates topics and ACLs, produces test data;
- ``alice``: exactly the ACLs README "Security" lists for a group member;
- ``bob``: alice's ACLs minus WRITE on the control topic (WRITE on another topic instead);
- ``carol``: alice's ACLs minus WRITE on the control topic and with no WRITE anywhere;
- ``dave``: alice's ACLs minus READ on the group;
- ``erin``: alice's ACLs minus DESCRIBE_CONFIGS on the cluster (the broker's offset retention);
- ``mallory``: may READ and WRITE the control topic but does not have the group's key.

Because no listener accepts an unauthenticated client, a group that works proves every
internal client (control reader and writer, admin, data consumer, lag fetching, describe)
received the user's SASL settings.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from groupkit import GroupConsumer
from groupkit.dev.broker import LocalBroker
from groupkit.dev.harness import wait_for
from groupkit.errors import BrokerError, GroupkitError
from groupkit.log import capture
from groupkit.protocol.records import (
    HmacSigner,
    assignment_record,
    covered_member,
    encode,
    member_record,
    member_tombstone,
)
from groupkit.runtime.admin import connect_admin, create_topic
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.describe import describe_group
from groupkit.runtime.lag import committed_offsets
from groupkit.types import TopicPartition
from tests.conftest import ReleasedAdmin, unique_name

USERS = {
    "admin": "admin-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
    "carol": "carol-secret",
    "mallory": "mallory-secret",
    "dave": "dave-secret",
    "erin": "erin-secret",
}
#: the broker's ``offsets.retention.minutes``: a member keeps its offsets alive at a quarter of
#: it (15 minutes), where it may read it, and a day where it may not
RETENTION_MINUTES = 60
KEY = "correct horse battery staple"


@pytest.fixture(scope="module")
def sasl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    props = {"offsets.retention.minutes": str(RETENTION_MINUTES)}
    with LocalBroker(Path(tmp_path_factory.mktemp("sasl-broker")), sasl_users=USERS,
                     authorizer=True, extra_properties=props) as broker:  # fmt: skip
        yield broker


@pytest.fixture(scope="module")
def root(sasl: LocalBroker) -> Iterator[AdminClient]:
    """(Released before ``sasl`` stops its broker: see conftest.ReleasedAdmin.)"""
    client = ReleasedAdmin(sasl.client_config("admin"))
    yield client  # type: ignore[misc]
    client.release()


def allow(sasl: LocalBroker, admin: AdminClient, user: str,
          grants: list[tuple[ResourceType, str, AclOperation]]) -> None:  # fmt: skip
    """Create ACLs, then wait until the broker applies them.

    ``create_acls`` returns once the controller has them; the broker's authorizer learns them
    from the metadata log a moment later (longer on a busy machine). So wait until ``user``
    sees each granted topic that exists and may read each granted group."""
    bindings = [
        AclBinding(rt, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op,
                   AclPermissionType.ALLOW)
        for rt, name, op in grants
    ]  # fmt: skip
    for f in admin.create_acls(bindings).values():
        f.result(timeout=30)
    existing = admin.list_topics(timeout=10).topics
    as_user = connect_admin(sasl.client_config(user))
    readable = [n for rt, n, _ in grants if rt == ResourceType.TOPIC and n in existing]

    def applied() -> bool:
        for rt, name, _op in grants:
            if rt == ResourceType.TOPIC and name in existing:
                t = as_user.list_topics(topic=name, timeout=5).topics.get(name)
                if t is None or t.error is not None:
                    return False
            elif rt == ResourceType.GROUP and readable:
                try:  # (not AdminClient.list_consumer_group_offsets: see lag.committed_offsets)
                    committed_offsets(as_user, name, [TopicPartition(readable[0], 0)], 5)
                except BrokerError:
                    return False
        return True

    wait_for(applied, 30, f"the broker to apply {user}'s ACLs", step=0.1)


def member_acls(data: str, control: str, group: str, write_control: bool = True,
                read_group: bool = True, describe_cluster: bool = True,
                ) -> list[tuple[ResourceType, str, AclOperation]]:  # fmt: skip
    """What README "Security" says a member needs (the control topic created by a member)."""
    grants = [
        (ResourceType.TOPIC, data, AclOperation.READ),
        (ResourceType.TOPIC, control, AclOperation.READ),
        (ResourceType.TOPIC, control, AclOperation.DESCRIBE_CONFIGS),
        (ResourceType.TOPIC, control, AclOperation.CREATE),
    ]
    if describe_cluster:  # (confluent-kafka names the cluster resource BROKER)
        grants.append((ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE_CONFIGS))
    if read_group:
        grants.append((ResourceType.GROUP, group, AclOperation.READ))
    # protocol version 2's liveness topic, as README "Security" says
    liveness = f"{control}.liveness"
    grants += [(ResourceType.TOPIC, liveness, op) for op in (
        AclOperation.READ, AclOperation.DESCRIBE_CONFIGS, AclOperation.CREATE)]  # fmt: skip
    if write_control:
        grants.append((ResourceType.TOPIC, control, AclOperation.WRITE))
        grants.append((ResourceType.TOPIC, liveness, AclOperation.WRITE))
    return grants


@pytest.fixture
def names() -> dict[str, str]:
    return {"data": unique_name("data"), "control": unique_name("ctl"), "group": unique_name("g")}


def conf_for(sasl: LocalBroker, user: str, names: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        **sasl.client_config(user),
        "group.id": names["group"],
        "groupkit.control.topic": names["control"],
        "session.timeout.ms": 3000,
        "heartbeat.interval.ms": 300,
        "auto.offset.reset": "earliest",
        **extra,
    }


@pytest.fixture
def consumers() -> Iterator[list[GroupConsumer]]:
    made: list[GroupConsumer] = []
    yield made
    for c in made:
        with contextlib.suppress(GroupkitError):  # one whose control loop failed re-raises
            c.close()


def _pump(cs: list[GroupConsumer], cond: Callable[[], bool], timeout: float, what: str,
          got: list[Any] | None = None) -> None:  # fmt: skip
    def step() -> bool:
        for c in cs:
            m = c.poll(0.01)
            if m is not None and got is not None:
                got.append(m)
        return cond()

    wait_for(step, timeout, what, step=0)


def produce(sasl: LocalBroker, topic: str, n: int, partitions: int) -> None:
    p = Producer(sasl.client_config("admin"))
    for i in range(n):
        p.produce(topic, key=str(i).encode(), value=b"v%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


# ------------------------------------------------------------------ config (no broker)


def test_every_security_setting_reaches_every_internal_client() -> None:
    def token(_config: str) -> tuple[str, float]:
        return "t", time.time() + 60

    secure = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "id",
        "ssl.ca.location": "/ca.pem",
        "enable.ssl.certificate.verification": "true",
        "enable.sasl.oauthbearer.unsecure.jwt": "false",
        "https.ca.location": "/oidc-ca.pem",
        "oauth_cb": token,
        "client.id": "svc",
    }
    cfg = GroupConfig.from_dict({"bootstrap.servers": "b:9092", "group.id": "g", **secure,
                                 "groupkit.signing.key": KEY})  # fmt: skip
    internal = cfg.client_config(**{"group.id": "x"})  # control reader/writer, admin, describe
    for key, value in secure.items():
        assert internal[key] == value, key
        assert cfg.data_consumer[key] == value, key
    assert not any(k.startswith("groupkit.") for k in internal)
    assert not any(k.startswith("groupkit.") for k in cfg.data_consumer)
    assert cfg.signing_key == KEY


# ------------------------------------------------------------------ SASL + ACLs


def test_a_group_works_with_credentials_and_acls(
    sasl: LocalBroker, root: AdminClient, names: dict[str, str], consumers: list[GroupConsumer]
) -> None:
    data, group = names["data"], names["group"]
    create_topic(root, data, 4)
    allow(sasl, root, "alice", member_acls(data, names["control"], group))
    conf = conf_for(sasl, "alice", names)
    a, b = GroupConsumer(conf), GroupConsumer(conf)
    consumers += [a, b]
    a.subscribe([data])
    b.subscribe([data])
    produce(sasl, data, 40, 4)
    got: list[Any] = []
    # (the generation that covers b comes a heartbeat after b owns its share)
    with capture(logging.WARNING) as events:
        _pump([a, b], lambda: len(a.assignment()) == 2 == len(b.assignment()) and len(got) >= 40
              and a.generation == b.generation and a._data.retention is b._data.retention is None,
              60, "two members sharing 4 partitions, covered, consuming 40 records",
              got)  # fmt: skip
    # both read the broker's retention (DESCRIBE_CONFIGS on the cluster) and keep alive at a
    # quarter of it
    assert not [e for e in events if e["event"] == "offsets.retention_unknown"], events
    assert a._data.keepalive.interval == b._data.keepalive.interval == RETENTION_MINUTES * 15
    assert all(m.error() is None for m in got), [m.error() for m in got if m.error()]
    assert {a.generation} == {b.generation}
    owned_a = {p.partition for p in a.assignment()}
    owned_b = {p.partition for p in b.assignment()}
    assert owned_a | owned_b == {0, 1, 2, 3} and not owned_a & owned_b
    # commits go through (group READ) and are visible to the group
    for c in (a, b):
        try:
            c.commit(asynchronous=False)
        except KafkaException as e:
            # A member whose partitions' records were all read (and committed on revoke) by
            # the other before the hand-over has nothing stored: the commit is still allowed.
            assert e.args[0].code() == KafkaError._NO_OFFSET, e
    check = Consumer({**sasl.client_config("admin"), "group.id": group})
    try:
        committed = check.committed([KTP(data, p) for p in range(4)], timeout=30)
    finally:
        check.close()
    assert sum(tp.offset for tp in committed) == 40
    # describe and lag fetching authenticate too
    desc = describe_group(conf)
    assert len(desc["members"]) == 2 and desc["total_lag"] == 0
    assert desc["generation"] == a.generation


# No timed assertions (the suite's rule): "not a hang" is that the call returns an error at all,
# bounded by connect_admin's own 10 s and, for poll, by the 20 s loop below.


def test_no_credentials_fail_clearly(sasl: LocalBroker) -> None:
    with pytest.raises(BrokerError, match=r"cannot reach Kafka at .*security\.protocol"):
        GroupConsumer({"bootstrap.servers": sasl.bootstrap, "group.id": "g"})


def test_wrong_password_fails_clearly(sasl: LocalBroker) -> None:
    with pytest.raises(BrokerError, match=r"authentication to Kafka at .* failed: .*"
                       r"Invalid username or password.*sasl\.password"):  # fmt: skip
        GroupConsumer({**sasl.client_config("alice"), "sasl.password": "guess",
                       "group.id": "g"})  # fmt: skip


@pytest.mark.parametrize(
    ("user", "expect"),
    [
        # WRITE on some topic: the producer gets its idempotence PID, the record is refused
        ("bob", r"cannot write to control topic .*Topic authorization failed.*WRITE on topic"),
        # WRITE nowhere: even the idempotence PID is refused (KIP-679)
        ("carol", r"cannot write to control topic .*Cluster authorization failed.*WRITE on"),
    ],
)
def test_a_member_without_write_on_the_control_topic_fails_clearly(
    sasl: LocalBroker,
    root: AdminClient,
    names: dict[str, str],
    consumers: list[GroupConsumer],
    user: str,
    expect: str,
) -> None:
    data = names["data"]
    create_topic(root, data, 2)
    grants = member_acls(data, names["control"], names["group"], write_control=False)
    if user == "bob":
        output = unique_name("out")
        grants.append((ResourceType.TOPIC, output, AclOperation.WRITE))
    allow(sasl, root, user, grants)
    c = GroupConsumer(conf_for(sasl, user, names))
    consumers.append(c)
    c.subscribe([data])
    t0 = time.monotonic()
    with pytest.raises(GroupkitError, match=expect):
        while time.monotonic() - t0 < 20:
            c.poll(0.1)
    assert c.assignment() == []


def test_a_member_without_read_on_its_group_is_told_by_poll_then_starts_once_allowed(
    sasl: LocalBroker, root: AdminClient, names: dict[str, str], consumers: list[GroupConsumer]
) -> None:
    data = names["data"]
    create_topic(root, data, 2)
    produce(sasl, data, 10, 2)
    allow(sasl, root, "dave", member_acls(data, names["control"], names["group"], read_group=False))
    c = GroupConsumer(conf_for(sasl, "dave", names))
    consumers.append(c)
    c.subscribe([data])
    errors: list[Any] = []
    t0 = time.monotonic()
    while not errors and time.monotonic() - t0 < 20:
        m = c.poll(0.1)
        if m is not None and m.error() is not None:
            errors.append(m.error())
    assert errors and errors[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED, errors
    assert len(c.assignment()) == 2  # the group itself works: it needs no group ACL
    # (a synchronous commit now waits about a minute for the coordinator, then fails with
    # _WAIT_COORD: librdkafka's behaviour, not tested here for its length)

    # Once allowed, the member starts where the group's offsets say (FindCoordinator was
    # refused, so no look-up was sent yet: nothing is stranded, nothing to re-assign).
    allow(sasl, root, "dave", [(ResourceType.GROUP, names["group"], AclOperation.READ)])
    got: list[Any] = []
    _pump([c], lambda: len({(m.partition(), m.offset()) for m in got if m.error() is None})
          == 10, 60, "all 10 records once the group ACL exists", got)  # fmt: skip


def test_a_member_that_may_not_read_the_retention_keeps_alive_daily_and_says_so_once(
    sasl: LocalBroker, root: AdminClient, names: dict[str, str], consumers: list[GroupConsumer]
) -> None:
    """Without DESCRIBE_CONFIGS on the cluster the group works as ever; the keep-alive runs at
    the setting's default, and one warning says what was assumed and why."""
    data = names["data"]
    create_topic(root, data, 2)
    produce(sasl, data, 10, 2)
    allow(sasl, root, "erin",
          member_acls(data, names["control"], names["group"], describe_cluster=False))  # fmt: skip
    got: list[Any] = []
    with capture(logging.WARNING) as events:
        c = GroupConsumer(conf_for(sasl, "erin", names))
        consumers.append(c)
        c.subscribe([data])
        _pump([c], lambda: len(got) >= 10 and c._data.retention is None, 60,
              "all 10 records and the retention's read refused", got)  # fmt: skip
        for _ in range(20):  # more turns of the poll loop: still one warning
            c.poll(0.01)
    assert all(m.error() is None for m in got), [m.error() for m in got if m.error()]
    assert c._data.keepalive.interval == 86_400.0
    unknown = [e for e in events if e["event"] == "offsets.retention_unknown"]
    assert len(unknown) == 1, events
    assert unknown[0]["assumed_keepalive_interval_ms"] == 86_400_000
    assert "AUTHORIZATION" in unknown[0]["reason"].upper(), unknown[0]


# ------------------------------------------------------------------ HMAC signing


def _settled(*consumers: GroupConsumer) -> bool:
    """Every consumer's replay shows a complete assignment that covers every one of them and
    that every member acknowledged. (Covers: a newcomer owns its admitted share before the
    generation that covers it is written, Planner.admission_under_way.)"""
    ids = {c.member_id for c in consumers}
    for c in consumers:
        if c.coordinator is None:
            return False
        with c.coordinator.lock:
            st = c.coordinator.state
            a = st.assignment
            if (
                a is None
                or a.phase != "complete"
                or not ids <= set(a.members)
                or any(
                    m not in st.members or st.members[m].acked_generation != a.generation
                    for m in a.members
                )
            ):
                return False
    return True


def test_forged_control_records_are_rejected_in_a_signed_group(
    sasl: LocalBroker, root: AdminClient, names: dict[str, str], consumers: list[GroupConsumer]
) -> None:
    data, control, group = names["data"], names["control"], names["group"]
    create_topic(root, data, 4)
    allow(sasl, root, "alice", member_acls(data, control, group))
    # mallory may write the control topic: only the key stands in her way
    allow(sasl, root, "mallory", [(ResourceType.TOPIC, control, AclOperation.WRITE),
                            (ResourceType.TOPIC, control, AclOperation.READ)])  # fmt: skip
    conf = conf_for(sasl, "alice", names, **{"groupkit.signing.key": KEY})
    a, b = GroupConsumer(conf), GroupConsumer(conf)
    consumers += [a, b]
    a.subscribe([data])
    _pump([a], lambda: len(a.assignment()) == 4, 60, "a to own everything")
    b.subscribe([data])
    # Settled, not only shared: a member takes a pending partition at its owner's release
    # (a handoff), before the leader's follow-up grant, so the plan read below must be the
    # complete one every member has acknowledged, or the follow-up would change it.
    _pump([a, b], lambda: len(a.assignment()) == 2 == len(b.assignment()) and _settled(a, b), 60,
          "a and b to share, the group settled")  # fmt: skip
    assert a.coordinator is not None and b.coordinator is not None
    state = a.coordinator.state
    with a.coordinator.lock:
        leader = state.leader
        assert leader is not None
        other = b.member_id if leader == a.member_id else a.member_id
        assert other is not None
        lm, om = state.members[leader], state.members[other]
        gen = state.generation
        before = state.assignment
        seq = max(lm.seq, om.seq)
    owned_before = {c.member_id: sorted(c.assignment(), key=str) for c in (a, b)}

    # A forged assignment that would hand every partition to the non-leader, exactly as the
    # leader would write it: unsigned, and signed with a wrong key.
    forged_assignment = assignment_record(
        group, generation=gen + 1, leader_id=leader, leader_incarnation=lm.incarnation,
        leader_joined_at=lm.joined_at, protocol="cooperative", phase="complete",
        assignor="range", partition_counts={data: 4},
        members={other: covered_member(om.incarnation, [data], [(data, p) for p in range(4)]),
                 leader: covered_member(lm.incarnation, [data])},
    )  # fmt: skip
    wrong = HmacSigner(b"not the group key")
    forgeries: list[tuple[bytes, bytes | None]] = []
    for signer in (None, wrong):
        forgeries.append(encode(*forged_assignment, signer))
        # the leader claiming nothing, the other claiming everything
        for mid, m, owned in ((leader, lm, []), (other, om, [(data, p) for p in range(4)])):
            forgeries.append(encode(*member_record(
                group, mid, incarnation=m.incarnation, seq=seq + 100, topics=[data],
                owned=owned, owned_generation=gen, acked_generation=gen, joined_at=m.joined_at,
            ), signer))  # fmt: skip
        # a newcomer older than everyone (it would lead)
        forgeries.append(encode(*member_record(
            group, "intruder", incarnation="x", seq=1, topics=[data], joined_at=0,
        ), signer))  # fmt: skip
    # a genuine signed record moved under another member's key: the tag binds the key
    reader = Consumer({**sasl.client_config("mallory"), "group.id": unique_name("spy"),
                       "enable.auto.commit": False})  # fmt: skip
    partition = a.coordinator.control_partition  # the one the members read
    reader.assign([KTP(control, partition, 0)])
    genuine = None
    t0 = time.monotonic()
    while genuine is None and time.monotonic() - t0 < 20:
        m = reader.poll(0.5)
        key = m.key() if m is not None and m.error() is None else None
        if m is not None and isinstance(key, bytes) and key[1:2] == b"M" and m.value():
            genuine = m.value()
    reader.close()
    assert genuine is not None
    forgeries.append((encode(*member_tombstone(group, "intruder2"))[0], genuine))

    p = Producer(sasl.client_config("mallory"))
    for k, v in forgeries:
        p.produce(control, key=k, value=v, partition=partition)
    assert p.flush(30) == 0
    hw = Consumer({**sasl.client_config("admin"), "group.id": "hw"})
    high = hw.get_watermark_offsets(KTP(control, partition), timeout=10)[1]
    hw.close()
    _pump([a, b], lambda: all(c.coordinator is not None and c.coordinator.state.offset >= high - 1
                              for c in (a, b)), 30, "both to replay the forgeries")  # fmt: skip
    for c in (a, b):
        assert c.coordinator is not None
        rej = c.coordinator.state.rejections
        assert rej["unsigned"] >= 4 and rej["bad_signature"] >= 5, rej
        # not applied: the plan is the same (the leader may re-assert it, as a rejected record
        # on the assignment key would otherwise be what compaction keeps)
        after = c.coordinator.state.assignment
        assert after is not None and before is not None
        assert {m: x.assigned for m, x in after.members.items()} == {
            m: x.assigned for m, x in before.members.items()
        }
        assert c.coordinator.state.leader == leader
        assert "intruder" not in c.coordinator.state.members
    # the group carries on as it was: same generation, same ownership, still consuming
    produce(sasl, data, 20, 4)
    got: list[Any] = []
    _pump([a, b], lambda: len(got) >= 20, 30, "the group to keep consuming", got)
    assert {c.member_id: sorted(c.assignment(), key=str) for c in (a, b)} == owned_before
    assert a.generation == b.generation >= gen
