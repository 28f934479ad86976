"""``groupkit describe``: a group as its control log says it is, with each member's lag.

It catches up on the group's control partition as a newcomer does (from the newest snapshot,
else from the beginning: runtime/catch_up.py) through the same ``GroupState.replay`` the members
use, so what it prints is exactly what a member would see.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from groupkit.errors import ControlTopicError
from groupkit.protocol import GroupState
from groupkit.protocol.records import HmacSigner
from groupkit.runtime.admin import connect_admin
from groupkit.runtime.catch_up import bounded_catch_up
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.control_log import ControlReader
from groupkit.runtime.control_topic import partition_for_group
from groupkit.runtime.lag import fetch_lags


def describe_group(
    config: dict[str, Any], with_lag: bool = True, timeout: float = 30.0
) -> dict[str, Any]:
    """The group's state as a JSON-ready dict (``config`` as for ``GroupConsumer``)."""
    cfg = GroupConfig.from_dict(config)
    admin = connect_admin(cfg.client_config("admin"), timeout)
    md = admin.list_topics(topic=cfg.control_topic, timeout=timeout)
    topic = md.topics.get(cfg.control_topic)
    if topic is None or topic.error is not None or not topic.partitions:
        raise ControlTopicError(f"control topic {cfg.control_topic!r} does not exist")
    partition = partition_for_group(cfg.group_id, len(topic.partitions))
    # A reader group id of its own: describing must never touch the group's offsets.
    reader_cfg = GroupConfig.from_dict(
        {**cfg.user_config, "group.id": f"groupkit-describe-{uuid.uuid4().hex[:8]}"}
    )
    reader = ControlReader(reader_cfg, cfg.control_topic, partition)
    signer = HmacSigner(cfg.signing_key.encode()) if cfg.signing_key else None
    state = GroupState(cfg.group_id, cfg.session_timeout_ms, cfg.rebalance_timeout_ms,
                       verifier=signer)  # fmt: skip
    try:
        end = reader.high_watermark(timeout)
        deadline = time.monotonic() + timeout
        # from the group's newest snapshot, as a newcomer does (runtime/catch_up.py)
        got = bounded_catch_up(reader, end, cfg.group_id, cfg.session_timeout_ms,
                               cfg.rebalance_timeout_ms, signer,
                               lambda: time.monotonic() >= deadline)  # fmt: skip
        if got.state is not None:
            state = got.state
        while reader.position < end and time.monotonic() < deadline:
            for r in reader.poll(0.2):
                state.replay(r.offset, r.key, r.value, r.timestamp_ms)
    finally:
        reader.close()
    a = state.assignment
    assigned = {m: sorted(a.assigned(m)) for m in a.members} if a is not None else {}
    lags: dict[Any, int] = {}
    if with_lag and assigned:
        parts = [tp for ps in assigned.values() for tp in ps]
        lags = fetch_lags(admin, cfg.group_id, parts, cfg.auto_offset_reset)
    members = []
    for mid, m in sorted(state.members.items()):
        mine = assigned.get(mid, [])
        members.append(
            {
                "member_id": mid,
                "live": state.is_live(mid),
                "leader": state.leader == mid,
                "topics": list(m.topics),
                "owned": [[tp.topic, tp.partition] for tp in sorted(m.claims)],
                "assigned": [[tp.topic, tp.partition] for tp in mine],
                "acked_generation": m.acked_generation,
                "joined_at_ms": m.joined_at,
                "last_seen_ms": m.last_seen,
                "lag": sum(lags.get(tp, 0) for tp in mine),
                "partition_lag": {str(tp): lags.get(tp, 0) for tp in mine},
            }
        )
    return {
        "group": cfg.group_id,
        "control_topic": cfg.control_topic,
        "control_partition": partition,
        "log_offset": state.offset,
        "log_time_ms": state.log_time,
        "leader": state.leader,
        "generation": state.generation,
        "protocol": a.protocol if a else None,
        "phase": a.phase if a else None,
        "assignor": a.assignor if a else None,
        # the group's assignor failed and the built-in fallback planned (protocol/assign.py)
        "fallback": (
            None
            if a is None or a.fallback is None
            else {
                "reason": a.fallback.reason,
                "detail": a.fallback.detail,
                "assignor": a.fallback.assignor,
            }
        ),
        "members": members,
        "total_lag": sum(lags.values()),
        "rejected": dict(sorted(state.rejections.items())),
    }


def render(desc: dict[str, Any], as_json: bool = False) -> str:
    if as_json:
        return json.dumps(desc, indent=2, sort_keys=True)
    lines = [
        f"group {desc['group']}  generation {desc['generation']}  leader {desc['leader']}  "
        f"protocol {desc['protocol']}  phase {desc['phase']}  assignor {desc['assignor']}",
        f"control {desc['control_topic']}[{desc['control_partition']}] at offset "
        f"{desc['log_offset']}; total lag {desc['total_lag']}",
    ]
    fb = desc.get("fallback")
    if fb:
        lines.append(
            f"fallback: planned by {fb['assignor']}, {desc['assignor']} failed "
            f"({fb['reason']}): {fb['detail']}"
        )
    if desc["rejected"]:
        lines.append(
            "rejected records: " + ", ".join(f"{k}={v}" for k, v in desc["rejected"].items())
        )
    header = f"{'MEMBER':<36} {'LIVE':<5} {'LEAD':<5} {'PARTS':>5} {'LAG':>10}  ASSIGNED"
    lines += ["", header]
    for m in desc["members"]:
        parts = ", ".join(f"{t}-{p}" for t, p in m["assigned"])
        lines.append(
            f"{m['member_id']:<36} {('yes' if m['live'] else 'no'):<5} "
            f"{('*' if m['leader'] else ''):<5} {len(m['assigned']):>5} {m['lag']:>10}  {parts}"
        )
    return "\n".join(lines)
