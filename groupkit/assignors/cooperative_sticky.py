"""``cooperative-sticky``: the sticky plan under the name Kafka users know.

In Kafka, CooperativeStickyAssignor is the sticky algorithm plus the incremental cooperative
protocol (KIP-429): a partition that changes owner is first revoked, and only granted to its
new owner in a second rebalance. In groupkit that two-phase protocol belongs to the
coordinator (``groupkit.protocol``), which applies it to the plan of *any* assignor, so this
assignor only has to produce the sticky plan.
"""

from __future__ import annotations

from groupkit.assignors.sticky import StickyAssignor


class CooperativeStickyAssignor(StickyAssignor):
    """The sticky plan; the coordinator runs it cooperatively."""

    name = "cooperative-sticky"
