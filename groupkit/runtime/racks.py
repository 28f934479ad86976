"""The racks of each partition's replicas, for the leader's rack-aware assignor (KIP-881).

``describe_topics`` answers, per partition, its replicas as brokers with their ``broker.rack``:
one round trip gives what Kafka's assignors read from the cluster metadata. The leader asks
only when it is about to plan with an assignor that reads racks (``Assignor.uses_racks``) and
some member has a rack, and keeps the answer: replicas move only by a reassignment, so a
topic is asked again only when its partition count changed or its answer is older than
:data:`RACKS_MAX_AGE_S` (librdkafka's own metadata refresh interval). A failed lookup plans
without racks (logged): rack locality is an optimisation, never a reason to stall a rebalance.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from groupkit.assignors.base import reads_racks
from groupkit.log import get_logger
from groupkit.protocol.assign import AssignRequest

_log = get_logger("groupkit.runtime.racks")

#: how long a topic's replica racks are used before they are asked again (seconds)
RACKS_MAX_AGE_S = 300.0
#: how long a lookup may take before the plan is made without racks (seconds)
LOOKUP_TIMEOUT_S = 5.0
#: how long a topic whose lookup failed is planned without racks before it is asked again: the
#: lookup runs on the leader's control thread, which must not wait on it at every plan
RETRY_AFTER_S = 30.0

#: per topic, per partition index, the racks of its replicas (brokers without a rack left out)
TopicRacks = dict[str, list[list[str]]]


class RackCache:
    """A leader's cache of the replica racks of the topics it plans."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: topic -> (partition count, when asked, racks by partition)
        self._known: dict[str, tuple[int, float, list[list[str]]]] = {}
        #: topic -> when its lookup failed
        self._failed: dict[str, float] = {}
        #: lookups made (each one round trip for all the topics it asks)
        self.lookups = 0

    def for_request(
        self, admin: AdminClient, assignor: object, request: AssignRequest
    ) -> TopicRacks | None:
        """The replica racks of a plan's topics, if its assignor reads them and some member
        has a rack; ``None`` otherwise (no lookup)."""
        if not reads_racks(assignor) or not any(m.rack for m in request.members.values()):
            return None
        return self.get(admin, request.partitions_per_topic)

    def get(self, admin: AdminClient, counts: Mapping[str, int]) -> TopicRacks:
        """The racks of ``counts``' topics, asking ``admin`` only for those not known."""
        now = self._clock()
        stale = sorted(
            t
            for t, n in counts.items()
            if n > 0
            and ((k := self._known.get(t)) is None or k[0] != n or now - k[1] >= RACKS_MAX_AGE_S)
            and now - self._failed.get(t, -RETRY_AFTER_S) >= RETRY_AFTER_S
        )
        if stale:
            self.lookups += 1
            found = describe_racks(admin, stale)
            for t in stale:
                r = found.get(t)
                if r is None or len(r) != counts[t]:  # not answered, or a count in flux
                    self._failed[t] = now
                    self._known.pop(t, None)
                else:
                    self._failed.pop(t, None)
                    self._known[t] = (len(r), now, r)
        return {t: self._known[t][2] for t in counts if t in self._known}


def describe_racks(admin: AdminClient, topics: list[str]) -> TopicRacks:
    """``{topic: [racks of partition 0's replicas, ...]}`` of the topics the cluster answers."""
    out: TopicRacks = {}
    try:
        futures = admin.describe_topics(TopicCollection(topics), request_timeout=LOOKUP_TIMEOUT_S)
    except Exception as e:  # a closed or misconfigured client: plan without racks
        _log.warning("racks.unavailable", topics=topics, error=str(e))
        return out
    for topic, future in futures.items():
        try:
            desc = future.result(timeout=LOOKUP_TIMEOUT_S)
        except Exception as e:
            _log.warning("racks.unavailable", topics=[topic], error=str(e))
            continue
        parts = sorted(desc.partitions, key=lambda p: p.id)
        out[topic] = [[n.rack for n in p.replicas if n.rack] for p in parts]
    return out
