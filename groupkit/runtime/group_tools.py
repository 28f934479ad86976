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
from groupkit.protocol.records import Signer
from groupkit.protocol.vocab import RejectReason
from groupkit.runtime.catch_up import read_to_end
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.control_log import ControlReader

_OTHER = RejectReason.OTHER_VERSION.value


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


def read_group(
    reader: ControlReader, cfg: GroupConfig, verifier: Signer | None, timeout: float
) -> tuple[GroupState, bool]:
    """The group's state at the end of its control log, for a one-shot tool (``read_to_end``),
    in the protocol version ``cfg`` names; a group that log shows speaking the other version
    only (every record of it refused as ``other_version``) is read again in that one. The
    flag: whether the state reached the log's end."""
    got = _read(reader, cfg, verifier, timeout, cfg.protocol_version)
    state = got[0]
    if not state.members and state.rejections[_OTHER]:
        return _read(reader, cfg, verifier, timeout, 3 - cfg.protocol_version)
    return got


def _read(
    reader: ControlReader, cfg: GroupConfig, verifier: Signer | None, timeout: float, version: int
) -> tuple[GroupState, bool]:
    return read_to_end(reader, cfg.group_id, cfg.session_timeout_ms, cfg.rebalance_timeout_ms,
                       verifier, timeout, version)  # fmt: skip


def live_now(state: GroupState, now_ms: int | None = None) -> list[str]:
    """The live members, by the log's clock and by the wall clock (``now_ms``, else now).

    Version 2: a member's records are written only when something changes, and its liveness is
    judged from the liveness log, which a tool does not read; so the live memberships, as long
    as the control log's clock (the leader's lease, every lease interval) moved within two
    sessions: a group whose every member is gone shows none after that."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if state.version == 2:
        fresh = state.log_time + 2 * state.session_timeout_ms > now
        return list(state.live_members()) if fresh else []
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
