"""A user-written assignor: each member gets partitions in proportion to its capacity.

``CapacityAssignor`` subclasses groupkit's ``Assignor`` and is registered under the name
``capacity`` with ``register_assignor``; the group uses it by naming it in ``groupkit.assignor``.
Each member states its capacity in ``groupkit.capacity`` (any positive number, default 1), which
groupkit carries in the member's record to the leader's assignor. A member of capacity 3 next
to one of capacity 1 gets three quarters of each topic's partitions. Every member registers the
assignor before it joins: whichever is the leader runs it.

It prints what each rebalance moves (``assigned: ...``, ``revoked: ...``) and a summary on
exit. Run two against the local broker (``groupkit broker start`` first, see README.md), on a
topic with several partitions::

    python examples/custom_assignor.py --topic orders --group weighted --capacity 1 &
    python examples/custom_assignor.py --topic orders --group weighted --capacity 3
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Mapping

from confluent_kafka import TopicPartition as KafkaTopicPartition

from groupkit import Assignor, GroupConsumer, MemberSubscription, TopicPartition, register_assignor


class CapacityAssignor(Assignor):
    """Per topic, contiguous ranges of partitions sized by the members' capacities."""

    name = "capacity"

    def _assign(
        self,
        partitions_per_topic: dict[str, int],
        members: dict[str, MemberSubscription],  # sorted by member id
        lags: dict[TopicPartition, int],
    ) -> Mapping[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in members}
        for topic, count in partitions_per_topic.items():
            subscribed = [m for m in members if topic in members[m].topics]
            if not subscribed:
                continue
            weight = {m: members[m].capacity or 1.0 for m in subscribed}
            quota = {m: count * weight[m] / sum(weight.values()) for m in subscribed}
            share = {m: int(quota[m]) for m in subscribed}
            # What rounding down left over goes to the largest remainders (ties: member id).
            by_remainder = sorted(subscribed, key=lambda m: (share[m] - quota[m], m))
            for m in by_remainder[: count - sum(share.values())]:
                share[m] += 1
            first = 0
            for m in subscribed:
                out[m] += [TopicPartition(topic, p) for p in range(first, first + share[m])]
                first += share[m]
        return out


register_assignor(CapacityAssignor.name, CapacityAssignor)


def names(partitions: list[KafkaTopicPartition]) -> str:
    return " ".join(f"{p.topic}-{p.partition}" for p in partitions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--group", default="groupkit-example-capacity")
    parser.add_argument("--topic", default="groupkit-example")
    parser.add_argument("--capacity", type=float, default=1.0)
    parser.add_argument("--max-records", type=int, default=0, help="stop after N (0: never)")
    args = parser.parse_args()

    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    consumer = GroupConsumer({
        "bootstrap.servers": args.bootstrap_servers,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "groupkit.assignor": CapacityAssignor.name,
        "groupkit.capacity": args.capacity,
    })  # fmt: skip
    consumer.subscribe(
        [args.topic],
        on_assign=lambda c, parts: print(f"assigned: {names(parts)}", flush=True),
        on_revoke=lambda c, parts: print(f"revoked: {names(parts)}", flush=True),
    )
    handled = 0
    with consumer:
        while not stopping and (args.max_records == 0 or handled < args.max_records):
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                handled += 1  # auto-commit (the default) commits what poll handed out
    print(f"done: {handled} records", flush=True)


if __name__ == "__main__":
    main()
