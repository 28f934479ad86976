"""Rack-aware assignment and fetching from the member's rack, on the three-broker ``cluster``.

The session's cluster has brokers 0, 1, 2 on racks r0, r1, r2 and Kafka's
``RackAwareReplicaSelector`` (conftest.CLUSTER_PROPERTIES), so a consumer with ``client.rack``
is told by a partition's leader to fetch from a replica in its own rack (KIP-392).

Three members, one per rack (``client.rack``), subscribe to two topics whose replicas do not
cover every rack (at replication factor 3 every partition would be local to every member, and
the test would pass by itself):

- ``solo``, replication factor 1: partition ``p`` lives on broker ``p mod 3`` only;
- ``pair``, replication factor 2, every partition led by broker 0, its follower alternating
  between brokers 1 and 2: the members in r1 and r2 can only read ``pair`` locally from a
  follower.

The group's leader looks the replica racks up (describe_topics) and its assignor
(cooperative-sticky) gives every member only partitions with a replica in its rack. Then each
member's librdkafka statistics show it fetching every partition from the broker in its rack,
for r1's and r2's ``pair`` partitions a follower, not the leader, and the records arrive.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from groupkit import GroupConsumer
from groupkit.dev.broker import LocalCluster
from groupkit.dev.harness import wait_for
from groupkit.runtime.admin import wait_for_topic
from groupkit.runtime.racks import RackCache
from tests.conftest import KafkaBackend, ReleasedAdmin, delete_topics, unique_name

PARTITIONS = 6
RECORDS = 20  # per partition
SOLO = [[p % 3] for p in range(PARTITIONS)]
PAIR = [[0, 1 + p % 2] for p in range(PARTITIONS)]


def local_cluster(backend: KafkaBackend) -> LocalCluster:
    if backend.local is None:
        pytest.skip("GROUPKIT_BOOTSTRAP_SERVERS names a cluster whose racks this test cannot set")
    lc: LocalCluster = backend.local
    for n in lc.nodes:
        if n.status().state != "running":
            lc.restart(n.node_id)
    return lc


class Member:
    """A GroupConsumer in ``rack``, keeping its newest librdkafka statistics."""

    def __init__(self, conf: dict[str, Any], rack: str, topics: list[str]) -> None:
        self.rack = rack
        self.stats: dict[str, Any] = {}
        self.got: dict[tuple[str, int], int] = {}
        self.c = GroupConsumer({**conf, "client.rack": rack, "statistics.interval.ms": 200,
                                "stats_cb": self._stats})  # fmt: skip
        self.c.subscribe(topics)

    def _stats(self, doc: str) -> None:
        self.stats = json.loads(doc)

    def step(self) -> None:
        msg = self.c.poll(0.05)
        if msg is not None and msg.error() is None:
            tp = (msg.topic(), msg.partition())
            self.got[tp] = self.got.get(tp, 0) + 1

    def owned(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.c.assignment()}

    def fetching_from(self, topic: str, p: int) -> tuple[int, int]:
        """``(broker fetched from, leader)`` of a partition, from the statistics."""
        part = self.stats.get("topics", {}).get(topic, {}).get("partitions", {}).get(str(p), {})
        return int(part.get("broker", -1)), int(part.get("leader", -1))


@pytest.fixture
def topics(cluster: KafkaBackend) -> Iterator[tuple[LocalCluster, Any, str, str]]:
    lc = local_cluster(cluster)
    # pytest holds the last test's arguments past the cluster's end: release the client first
    admin = ReleasedAdmin(lc.client_config())
    solo, pair = unique_name("solo"), unique_name("pair")
    new = [NewTopic(t, PARTITIONS, replica_assignment=a) for t, a in ((solo, SOLO), (pair, PAIR))]
    futures = admin.create_topics(new)
    for f in futures.values():
        f.result(timeout=30)
    for t in (solo, pair):
        wait_for_topic(admin, t, PARTITIONS)
    try:
        yield lc, admin, solo, pair
    finally:
        delete_topics(admin, [solo, pair])
        admin.release()


def test_brokers_select_the_consumers_rack(cluster: KafkaBackend) -> None:
    lc = local_cluster(cluster)
    admin = AdminClient(lc.client_config())
    for node in (0, 1, 2):
        res = ConfigResource(ConfigResource.Type.BROKER, str(node))
        conf = admin.describe_configs([res])[res].result(timeout=30)
        assert conf["broker.rack"].value == f"r{node}"
        assert conf["replica.selector.class"].value.endswith("RackAwareReplicaSelector")


def test_members_get_and_fetch_rack_local_partitions(
    topics: tuple[LocalCluster, Any, str, str],
) -> None:
    lc, admin, solo, pair = topics
    # The leader's lookup, as it sees the two topics: one round trip, then from its cache.
    cache = RackCache()
    racks = cache.get(admin, {solo: PARTITIONS, pair: PARTITIONS})
    assert racks == {solo: [[f"r{b[0]}"] for b in SOLO],
                     pair: [[f"r{b}" for b in bs] for bs in PAIR]}  # fmt: skip
    assert cache.get(admin, {solo: PARTITIONS, pair: PARTITIONS}) == racks
    assert cache.lookups == 1
    # a topic the cluster does not know is planned without racks, and not asked at every plan
    missing = unique_name("missing")
    assert cache.get(admin, {solo: PARTITIONS, missing: 3}) == {solo: racks[solo]}
    assert cache.get(admin, {solo: PARTITIONS, missing: 3}) == {solo: racks[solo]}
    assert cache.lookups == 2

    conf = {"bootstrap.servers": lc.bootstrap, "group.id": unique_name("g"),
            "groupkit.control.topic": unique_name("ctl"), "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}  # fmt: skip
    members = [Member(conf, f"r{i}", [solo, pair]) for i in range(3)]
    try:
        producer = Producer({"bootstrap.servers": lc.bootstrap, "linger.ms": 5})
        for t in (solo, pair):
            for p in range(PARTITIONS):
                for i in range(RECORDS):
                    producer.produce(t, value=b"%d" % i, partition=p)
        assert producer.flush(30) == 0
        del producer

        def local(m: Member, tp: tuple[str, int]) -> bool:
            return m.rack in racks[tp[0]][tp[1]]

        def settled() -> bool:
            for m in members:
                m.step()
            owned = [m.owned() for m in members]
            return (sum(map(len, owned)) == 2 * PARTITIONS
                    and all(len(o) == 4 and all(local(m, tp) for tp in o)
                            for m, o in zip(members, owned, strict=True)))  # fmt: skip

        wait_for(settled, 90, "every member to own 4 partitions, all with a replica in its rack")

        # A member may have read a partition before the group settled and handed it on: the
        # records count by partition, over the members, not by member.
        everything = [(t, p) for t in (solo, pair) for p in range(PARTITIONS)]
        waiting: dict[str, Any] = {}  # what the wait is still for, for its failure message

        def fetching_locally() -> bool:
            for m in members:
                m.step()
            unread = [tp for tp in everything if sum(m.got.get(tp, 0) for m in members) < RECORDS]
            remote = {m.rack: [(tp, m.fetching_from(*tp)) for tp in sorted(m.owned())
                               if m.fetching_from(*tp)[0] != int(m.rack[1])]
                      for m in members}  # fmt: skip
            waiting.update(unread=unread, remote={r: f for r, f in remote.items() if f})
            return not unread and not any(remote.values())

        t0 = time.monotonic()
        # (the leader redirects a consumer to its rack's replica in a fetch response, once that
        # follower is in sync: on a loaded machine that took more than a minute once)
        try:
            wait_for(fetching_locally, 120, "every member to fetch every partition from its rack")
        except AssertionError as e:
            raise AssertionError(f"{e}; still {waiting}") from None
        followers = [(m.rack, p, m.fetching_from(pair, p)) for m in members[1:]
                     for t, p in sorted(m.owned()) if t == pair]  # fmt: skip
        print(
            f"fetching from the member's rack after {time.monotonic() - t0:.1f}s; "
            f"pair partitions read from followers: {followers}"
        )
        # r1's and r2's pair partitions are led by broker 0, and read from their own broker
        assert len(followers) == 4
        assert all(broker == int(rack[1]) and leader == 0 for rack, _, (broker, leader)
                   in followers)  # fmt: skip
    finally:
        for m in members:
            m.c.close()
        delete_topics(admin, [conf["groupkit.control.topic"]])
