"""What the one-shot tools (``groupkit describe``, ``list`` and ``reset-offsets``) share.

A tool reads a group's control partition once, as a newcomer does (runtime/catch_up.py), with a
reader of its own, and says which members are live by the log's clock and by the wall clock:
a group nobody writes for any more has no live member, however its last records read.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from groupkit.errors import ControlTopicError
from groupkit.protocol import GroupState
from groupkit.runtime.config import GroupConfig


def control_partitions(admin: Any, cfg: GroupConfig, timeout: float) -> int:
    """How many partitions the control topic has; a clear error at once if it does not exist
    (a tool must not wait for a topic nobody is creating, as a member does:
    ``control_topic._partition_count``)."""
    md = admin.list_topics(topic=cfg.control_topic, timeout=timeout)
    topic = md.topics.get(cfg.control_topic)
    if topic is None or topic.error is not None or not topic.partitions:
        raise ControlTopicError(f"control topic {cfg.control_topic!r} does not exist")
    return len(topic.partitions)


def reader_config(cfg: GroupConfig) -> GroupConfig:
    """The tool's reader config: a reader group id of its own, so a tool never touches the
    group's offsets."""
    return GroupConfig.from_dict(
        {**cfg.user_config, "group.id": f"groupkit-describe-{uuid.uuid4().hex[:8]}"}
    )


def live_now(state: GroupState, now_ms: int | None = None) -> list[str]:
    """The live members, by the log's clock and by the wall clock (``now_ms``, else now)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return [
        mid
        for mid, m in state.live_members().items()
        if m.last_seen + state.session_timeout_ms > now
    ]


def table(columns: Iterable[str], rows: list[list[Any]]) -> list[str]:
    """Rows under their column names, left-aligned as Kafka's tools print them."""
    cols = list(columns)
    cells = [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*cols).rstrip()] + [fmt.format(*r).rstrip() for r in cells]
