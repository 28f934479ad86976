"""Bad input written into a live group's control partition on the real broker.

A client that may write the control topic (and the group has no signing key) writes, into the
partition of a stable two-member group: unknown key and schema versions, an assignment forged
by the member that is not the leader, stale generations posing as the leader, exact copies of
earlier records, a record of the other protocol version posing as a member (which must stop no
one), and oversized records (900 KB of JSON claiming 130,000 partitions, a zlib bomb, a range
bomb). The group must keep working: still stable, same leader, same ownership, still
consuming, and every rejection counted by reason in ``coordinator.state.rejections`` and
reported to the observers (which feed the metrics). The garbage-bytes case lives in
``test_group_consumer_edges.py``.
"""

from __future__ import annotations

import json
import time
import zlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KTP

from groupkit import GroupConsumer
from groupkit.dev.harness import wait_for
from groupkit.protocol import GroupState
from groupkit.protocol.records import (
    AssignmentKey,
    MemberKey,
    assignment_record,
    covered_member,
    decode_key,
    encode,
    encode_key,
)
from groupkit.runtime.describe import group_state
from groupkit.runtime.hooks import GroupObserver
from tests.conftest import unique_name


class Rejections(GroupObserver):
    """What the metrics layer is told: rejections by reason."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    def record_rejected(self, state: GroupState, reason: str, detail: str) -> None:
        self.seen[reason] += 1


def _pump(cs: list[GroupConsumer], cond: Callable[[], bool], timeout: float, what: str,
          got: list[Any] | None = None) -> None:  # fmt: skip
    def step() -> bool:
        for c in cs:
            m = c.poll(0.01)
            if m is not None and got is not None and m.error() is None:
                got.append(m)
        return cond()

    wait_for(step, timeout, what, step=0)


def _control_log(bootstrap: str, topic: str, partition: int) -> list[tuple[bytes, bytes | None]]:
    """Every record of the control partition up to its current end, as raw bytes."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("spy"),
                  "enable.auto.commit": False})  # fmt: skip
    high = c.get_watermark_offsets(KTP(topic, partition), timeout=10)[1]
    c.assign([KTP(topic, partition, 0)])
    out: list[tuple[bytes, bytes | None]] = []
    deadline = time.monotonic() + 20
    while len(out) < high and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error() is not None:
            continue
        key, value = m.key(), m.value()
        assert isinstance(key, bytes)
        out.append((key, value if isinstance(value, bytes) else None))
    c.close()
    return out


@pytest.mark.parametrize("protocol", ["cooperative", "eager"])
def test_a_live_group_shrugs_off_bad_control_records(
    bootstrap: str, topic_factory: Callable[..., str], consumers: list[GroupConsumer],
    protocol: str,
) -> None:  # fmt: skip
    data = topic_factory(partitions=4)
    group, ctl = unique_name("g"), unique_name("ctl")
    conf = {
        "bootstrap.servers": bootstrap, "group.id": group, "groupkit.control.topic": ctl,
        # A session long enough that a member starved of CPU while it decodes the 900 KB
        # attack on a loaded machine does not lapse: what is tested is that the records are
        # rejected without a rebalance, not how fast a member reads (3 s sessions made the
        # leader change under load, unrelated to the attacks).
        "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500,
        "auto.offset.reset": "earliest", "groupkit.rebalance.protocol": protocol,
    }  # fmt: skip
    watch = [Rejections(), Rejections()]
    a = GroupConsumer(conf, observers=[watch[0]])
    b = GroupConsumer(conf, observers=[watch[1]])
    consumers += [a, b]
    a.subscribe([data])
    _pump([a], lambda: len(a.assignment()) == 4, 30, "a to own everything")
    b.subscribe([data])

    def shared() -> bool:
        # each owns two, and the rebalance is over: b takes a's partitions at a's release
        # (a handoff), before the leader's follow-up generation, which must not land after
        # the generation the attacks are built from is taken
        if not len(a.assignment()) == 2 == len(b.assignment()) or a.coordinator is None:
            return False
        with a.coordinator.lock:
            return group_state(a.coordinator.state) == "Stable"

    _pump([a, b], shared, 30, "a and b to share, stable")
    assert a.coordinator is not None and b.coordinator is not None
    with a.coordinator.lock:
        st = a.coordinator.state
        leader = st.leader
        assert leader is not None and st.assignment is not None
        other = b.member_id if leader == a.member_id else a.member_id
        assert other is not None
        om = st.members[other]
        gen, plan = st.generation, st.assignment
    owned_before = {c.member_id: sorted(map(str, c.assignment())) for c in (a, b)}
    partition = a.coordinator.control_partition  # the one the members read
    history = _control_log(bootstrap, ctl, partition)

    def assignment(gen_: int, leader_id: str, owner: str) -> tuple[bytes, bytes | None]:
        ld = st.members[leader_id]
        return encode(*assignment_record(
            group, generation=gen_, leader_id=leader_id, leader_incarnation=ld.incarnation,
            leader_joined_at=ld.joined_at, protocol=protocol, phase="complete",
            assignor="range", partition_counts={data: 4},
            members={owner: covered_member(st.members[owner].incarnation, [data],
                                           [(data, p) for p in range(4)])},
        ))  # fmt: skip

    def member_value(version: int = st.version, **fields: Any) -> bytes:
        # the other member's next record, as its process would write it: it continues the
        # membership (version 1: prev_ts names the record of it this state saw last; version
        # 2: the liveness run it lives in), with the value's header (version, no flags)
        doc = {"inc": om.incarnation, "seq": om.seq + 10_000, "topics": [data], "owned": {},
               "owned_gen": gen, "acked_gen": gen, "joined_at": om.joined_at, "rack": None,
               "capacity": None, "client": {}, "since_gen": om.since_generation}  # fmt: skip
        doc.update({"prev_ts": om.last_seen} if version == 1 else {"run": max(om.run, 1)})
        doc.update(fields)
        return bytes([version, 0]) + json.dumps(doc, separators=(",", ":")).encode()

    akey = encode_key(AssignmentKey(group))
    okey = encode_key(MemberKey(group, other))
    expected: Counter[str] = Counter()
    attacks: list[tuple[bytes, bytes | None]] = []

    def attack(reason: str, key: bytes, value: bytes | None) -> None:
        attacks.append((key, value))
        expected[reason] += 1

    # unknown versions: of the key, and of the value under a valid key
    attack("unknown_version", b"\x02" + akey[1:], b"\x01\x00{}")
    attack("unknown_version", okey, b"\x03" + member_value()[1:])
    # the other member's record in the other protocol version: no member of that version is in
    # the group (its incarnation is a live member's of this one), so it stops no one
    attack("other_version", okey, member_value(version=3 - st.version))
    # an assignment forged by the member that is not the leader: valid encoding, real identity
    attack("not_leader", *assignment(gen + 1, other, other))
    # stale generations posing as the leader
    attack("stale_generation", *assignment(gen, leader, other))
    if gen > 1:
        attack("stale_generation", *assignment(gen - 1, leader, other))
    # exact copies of earlier records: the other member's first record, the first assignment
    first_member = next((k, v) for k, v in history
                        if v is not None and decode_key(k) == MemberKey(group, other))  # fmt: skip
    attack("stale_member_record", *first_member)
    first_assignment = next((k, v) for k, v in history if decode_key(k) == AssignmentKey(group))
    if gen > 1:
        attack("stale_generation", *first_assignment)
    # oversized: 900 KB of plain JSON claiming 130,000 partitions never granted
    huge = member_value(owned={data: list(range(0, 260_000, 2))})
    assert 850_000 < len(huge) < 1_000_000
    attack("unowned_claim", okey, huge)
    # oversized once inflated: 3 KB of zlib that would be 9 MB of JSON
    bomb = bytes([st.version, 1]) + zlib.compress(
        member_value(client={"pad": " " * 9_000_000})[2:], 9
    )
    assert len(bomb) < 20_000
    attack("too_large", okey, bomb)
    # a range bomb: 40 bytes per million partitions
    attack("too_large", okey, member_value(owned={data: [[0, 1048575]] * 64}))

    p = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 2_000_000})
    for k, v in attacks:
        p.produce(ctl, key=k, value=v, partition=partition)
    assert p.flush(30) == 0
    hw = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("hw")})
    high = hw.get_watermark_offsets(KTP(ctl, partition), timeout=10)[1]
    hw.close()
    _pump([a, b], lambda: all(c.coordinator is not None and c.coordinator.state.offset >= high - 1
                              for c in (a, b)), 30, "both to replay the attacks")  # fmt: skip

    for c, w in zip((a, b), watch, strict=True):
        assert c.coordinator is not None
        rej = c.coordinator.state.rejections
        for reason, n in expected.items():
            assert rej[reason] >= n, (reason, dict(rej), dict(expected))
            assert w.seen[reason] == rej[reason], (reason, dict(w.seen), dict(rej))
        now = c.coordinator.state
        assert now.leader == leader
        assert now.assignment is not None
        assert {m: x.assigned for m, x in now.assignment.members.items()} == {
            m: x.assigned for m, x in plan.members.items()
        }
    # still stable, same owners, still consuming
    prod = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        prod.produce(data, value=b"x", partition=i % 4)
    assert prod.flush(10) == 0
    got: list[Any] = []
    _pump([a, b], lambda: len(got) >= 40, 30, "the group to keep consuming", got)
    assert {c.member_id: sorted(map(str, c.assignment())) for c in (a, b)} == owned_before
