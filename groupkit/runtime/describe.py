"""``groupkit describe`` and ``groupkit list``: groups as their control log says they are.

``describe`` catches up on the group's control partition as a newcomer does (from the newest
snapshot, else from the beginning: runtime/catch_up.py) through the same ``GroupState.replay``
the members use, so what it prints is exactly what a member would see. Its views follow
``kafka-consumer-groups --describe``: the partitions (GROUP TOPIC PARTITION CURRENT-OFFSET
LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID, then groupkit's own columns), ``--members`` and
``--state``. ``TIME-LAG`` is how old the oldest unconsumed record is, in seconds (runtime/lag.py's
:class:`~groupkit.runtime.lag.TimeLagReader`: describe reads that record's timestamp directly),
``-`` where it is unknown; a member's is the largest of its partitions'. ``list`` reads every
partition of the control topic once, tells each record's group from its key alone (records.py's
key codec) and replays each group's records.

``--status`` (``status_samples``) reads the offsets that many times, ``status_interval`` seconds
apart, and judges each partition with Burrow's rules (groupkit/lagstatus.py) as an onlooker does
(runtime/lag_status.py's :func:`~groupkit.runtime.lag_status.sampled_status`): a ``STATUS``
column per partition and the group's status on a line of its own. It sees every partition,
owned or not, so one that nobody owns, or whose owner died, is STOP while it lags; but only
committed offsets that move during its run, never a commit: a lagging partition whose offset
did not move is STOP however its owner is doing, and STALL never shows.

A group's state, in Kafka's words where they fit (:func:`group_state`): ``Empty`` (no live
member), ``Stable`` (the current generation covers exactly the live members, is complete and
every one of them has acknowledged it), else ``Rebalancing``. Liveness is judged with the
describer's ``session.timeout.ms`` (pass the group's with ``-X``) against the newest broker time
in the log, and against the wall clock, so a group nobody writes for any more shows ``Empty``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError
from confluent_kafka import TopicPartition as KTopicPartition

from groupkit.errors import BrokerError, InputError, RecordRejected
from groupkit.lagstatus import PartitionStatus, group_status
from groupkit.protocol import GroupState, ownership
from groupkit.protocol.records import HmacSigner, decode_key
from groupkit.protocol.vocab import Phase, RejectReason
from groupkit.runtime.admin import connect_admin
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.control_log import ControlReader
from groupkit.runtime.control_topic import partition_for_group
from groupkit.runtime.group_tools import (
    control_partitions,
    live_now,
    read_group,
    reader_config,
    table,
)
from groupkit.runtime.lag import TimeLagReader, read_offsets
from groupkit.runtime.lag_status import sampled_status
from groupkit.types import TopicPartition

#: the partitions view's columns: kafka-consumer-groups --describe's, then groupkit's own
PARTITION_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                     "CONSUMER-ID", "HOST", "CLIENT-ID", "TIME-LAG", "GENERATION", "LEADER",
                     "STATE", "INSTANCE-ID")  # fmt: skip
MEMBER_COLUMNS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "LAG", "TIME-LAG",
                  "LIVE", "GENERATION", "LEADER", "INSTANCE-ID")  # fmt: skip
STATE_COLUMNS = ("GROUP", "CONTROL-PARTITION", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS",
                 "GENERATION", "LEADER", "PROTOCOL", "PHASE")  # fmt: skip
LIST_COLUMNS = ("GROUP", "STATE", "#MEMBERS", "GENERATION", "CONTROL-PARTITION")


def group_state(state: GroupState, now_ms: int | None = None) -> str:
    """``Empty``, ``Stable`` or ``Rebalancing`` (see the module docstring)."""
    live = live_now(state, now_ms)
    if not live:
        return "Empty"
    a = state.assignment
    if (
        a is not None
        and a.phase == Phase.COMPLETE
        and set(a.members) == set(live)
        and all(state.covers(m) for m in live)
        and all(state.members[m].acked_generation >= a.generation for m in live)
        and not ownership.in_flight(state)
    ):
        return "Stable"
    return "Rebalancing"


def _client(m: Any, key: str) -> str | None:
    return dict(m.client).get(key)


def describe_group(
    config: dict[str, Any],
    with_lag: bool = True,
    timeout: float = 30.0,
    status_samples: int = 0,
    status_interval: float = 1.0,
) -> dict[str, Any]:
    """The group's state as a JSON-ready dict (``config`` as for ``GroupConsumer``).

    With ``status_samples`` (and ``with_lag``), the offsets are read that many times,
    ``status_interval`` seconds apart, and each partition gets Burrow's ``status`` and the
    group its ``status`` (see the module docstring for what that can see); else both are
    ``None``.

    Raises :class:`~groupkit.errors.ControlTopicError` when the control topic does not exist
    and :class:`~groupkit.errors.InputError` when it holds no record of the group."""
    cfg = GroupConfig.from_dict(config)
    admin = connect_admin(cfg.client_config("admin"), timeout)
    partition = partition_for_group(cfg.group_id, control_partitions(admin, cfg, timeout))
    reader = ControlReader(reader_config(cfg), cfg.control_topic, partition)
    signer = HmacSigner(cfg.signing_key.encode()) if cfg.signing_key else None
    try:
        # from the group's newest snapshot, as a newcomer does (runtime/catch_up.py); what
        # was read by the timeout is shown
        state, _ = read_group(reader, cfg, signer, timeout)
    finally:
        reader.close()
    if not state.members and state.assignment is None:
        raise InputError(
            f"group {cfg.group_id!r} not found: control topic {cfg.control_topic!r} "
            f"(partition {partition}) holds no record of it"
        )
    now_ms = int(time.time() * 1000)
    live = set(live_now(state, now_ms))
    kafka_state = group_state(state, now_ms)
    a = state.assignment
    assigned = {m: sorted(a.assigned(m)) for m in a.members} if a is not None else {}
    owner = {tp: mid for mid, ps in assigned.items() for tp in ps}
    claimed = {tp: mid for mid, m in state.members.items() if mid in live for tp in m.claims}
    # Every partition of the live members' topics (Kafka's tool lists what has offsets;
    # groupkit knows what its group reads), and whatever is assigned or claimed.
    topics = sorted({t for mid in live for t in state.members[mid].topics})
    parts: set[TopicPartition] = set(owner) | set(claimed)
    if topics:
        md = admin.list_topics(timeout=timeout)
        for t in topics:
            tm = md.topics.get(t)
            if tm is not None and tm.error is None:
                parts |= {TopicPartition(t, p) for p in tm.partitions}
    end: dict[TopicPartition, int] = {}
    committed: dict[TopicPartition, int | None] = {}
    lags: dict[TopicPartition, int] = {}
    time_lags: dict[TopicPartition, float | None] = {}
    statuses: dict[TopicPartition, PartitionStatus] | None = None
    if with_lag and parts:
        got_offsets = read_offsets(admin, cfg.group_id, parts, cfg.lag_reset, timeout)
        if status_samples > 0:
            reads = [(int(time.time() * 1000), got_offsets)]
            for _ in range(status_samples - 1):
                time.sleep(status_interval)  # the samples' spacing, not a wait for a state
                got_offsets = read_offsets(admin, cfg.group_id, parts, cfg.lag_reset, timeout)
                reads.append((int(time.time() * 1000), got_offsets))
            statuses = sampled_status(reads)
        end, committed, lags = (dict(got_offsets.end), dict(got_offsets.committed),
                                dict(got_offsets.lag))  # fmt: skip
        # one look: reading each first unconsumed record is cheap enough here
        time_lags = TimeLagReader(cfg.client_config("timelag")).time_lag(got_offsets)
    rows = []
    for tp in sorted(parts):
        mid = owner.get(tp) or claimed.get(tp)
        m = state.members.get(mid) if mid is not None else None
        if tp in owner and claimed.get(tp, owner[tp]) == owner[tp]:
            pstate = "owned" if claimed.get(tp) == owner[tp] else "assigned"
        elif tp in claimed:
            pstate = "revoking"
        else:
            pstate = "unassigned"
        cur = committed.get(tp)
        rows.append(
            {
                "group": cfg.group_id,
                "topic": tp.topic,
                "partition": tp.partition,
                "current_offset": cur,
                "log_end_offset": end.get(tp),
                "lag": (end[tp] - cur if cur is not None and tp in end else None),
                "time_lag": time_lags.get(tp),
                "status": None if statuses is None else statuses.get(tp, PartitionStatus.OK),
                "consumer_id": mid,
                "host": _client(m, "host") if m is not None else None,
                "client_id": _client(m, "client.id") if m is not None else None,
                "generation": m.owned_generation if m is not None else None,
                "leader": mid is not None and state.leader == mid,
                "state": pstate,
                "instance_id": m.instance_id if m is not None else None,
            }
        )
    members = []
    for mid, m in sorted(state.members.items()):
        mine = assigned.get(mid, [])
        members.append(
            {
                "member_id": mid,
                "live": mid in live,
                "leader": state.leader == mid,
                "host": _client(m, "host"),
                "client_id": _client(m, "client.id"),
                "instance_id": m.instance_id,
                # the process in the member's seat now (a static seat's changes on restart)
                "incarnation": m.proc,
                "topics": list(m.topics),
                "owned": [[tp.topic, tp.partition] for tp in sorted(m.claims)],
                "assigned": [[tp.topic, tp.partition] for tp in mine],
                "generation": m.owned_generation,
                "acked_generation": m.acked_generation,
                "joined_at_ms": m.joined_at,
                "last_seen_ms": m.last_seen,
                "lag": sum(lags.get(tp, 0) for tp in mine),
                "partition_lag": {str(tp): lags.get(tp, 0) for tp in mine},
                # the oldest unconsumed record of its partitions (those whose age is known)
                "time_lag": max(
                    (s for tp in mine if (s := time_lags.get(tp)) is not None), default=None
                ),
            }
        )
    return {
        "group": cfg.group_id,
        "state": kafka_state,
        "control_topic": cfg.control_topic,
        "control_partition": partition,
        # the protocol version the group speaks (docs/protocol-v2.md)
        "protocol_version": state.version,
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
        # the newest re-plan for the load (protocol/placement.py), carried by every later
        # generation: why, its predicted gain, what it moved, when (log time)
        "replan": (
            None
            if a is None or a.replan is None
            else {
                "reason": a.replan.reason,
                "gain": a.replan.gain,
                "moved": a.replan.moved,
                "generation": a.replan.generation,
                "at_ms": a.replan.at,
            }
        ),
        # an operator's offset reset not yet carried out by the group (runtime/reset.py)
        "reset": _pending_reset(state),
        "members": members,
        "live_members": len(live),
        "partitions": rows,
        "total_lag": sum(lags.values()),
        "status": None if statuses is None else group_status(statuses.values()),
        "rejected": dict(sorted(state.rejections.items())),
    }


def _pending_reset(state: GroupState) -> dict[str, Any] | None:
    """The group's newest offset reset while it is still being carried out: the partitions
    whose owner has not yet restarted them at the new offset, and the members live at the
    reset that have not acknowledged it (``None`` when there is none, or it is done)."""
    rs = state.reset
    if rs is None:
        return None
    unsettled = rs.unsettled()
    waiting = ownership.reset_waiting(state)
    if not unsettled and not waiting:
        return None
    return {
        "reset_id": rs.reset_id,
        "at": rs.at,
        "unsettled": [[tp.topic, tp.partition, o] for tp, o in sorted(unsettled.items())],
        "waiting": sorted(waiting),
    }


def list_groups(config: dict[str, Any], timeout: float = 30.0) -> list[dict[str, Any]]:
    """Every group with a record on the control topic, with its state (``config`` names the
    cluster and ``groupkit.control.topic``; ``group.id`` is not needed)."""
    cfg = GroupConfig.from_dict({"group.id": "groupkit-list", **config})
    admin = connect_admin(cfg.client_config("admin"), timeout)
    n = control_partitions(admin, cfg, timeout)
    signer = HmacSigner(cfg.signing_key.encode()) if cfg.signing_key else None
    reader_conf = {"group.id": reader_config(cfg).group_id, "enable.auto.commit": False}
    consumer = Consumer(cfg.client_config("list", **reader_conf))
    #: per control partition, its records in order (groups on one partition share its clock)
    records: dict[int, list[tuple[int, bytes | None, bytes | None, int]]] = {}
    groups: dict[str, int] = {}
    try:
        #: partition -> its end (high watermark) when the scan started: read up to there
        todo: dict[int, int] = {}
        for p in range(n):
            low, high = consumer.get_watermark_offsets(
                KTopicPartition(cfg.control_topic, p), timeout=timeout
            )
            if high > low:
                todo[p] = high
        consumer.assign([KTopicPartition(cfg.control_topic, p, OFFSET_BEGINNING) for p in todo])
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() >= deadline:
                raise BrokerError(f"timed out reading control topic {cfg.control_topic!r}")
            for msg in consumer.consume(500, 0.2):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise BrokerError(f"cannot read control topic {cfg.control_topic!r}: {err}")
                    continue
                p = msg.partition() or 0
                offset = msg.offset() or 0
                key = msg.key()
                # the group from the key alone: no value is decoded here (a key that is not
                # groupkit's, every reader ignores)
                with contextlib.suppress(RecordRejected):
                    groups.setdefault(decode_key(key).group, p)
                records.setdefault(p, []).append((offset, key, msg.value(), msg.timestamp()[1]))
            # (the position also moves past what the log holds but hands out: markers)
            for kp in consumer.position([KTopicPartition(cfg.control_topic, p) for p in todo]):
                if kp.offset is not None and kp.offset >= todo[kp.partition]:
                    del todo[kp.partition]
    finally:
        consumer.close()
    now_ms = int(time.time() * 1000)
    out = []
    for g, p in sorted(groups.items()):
        state = GroupState(g, cfg.session_timeout_ms, cfg.rebalance_timeout_ms, verifier=signer,
                           version=cfg.protocol_version)  # fmt: skip
        _replay_all(state, records.get(p, ()))
        if not state.members and state.rejections[RejectReason.OTHER_VERSION.value]:
            # a group of the other protocol version (as group_tools.read_group)
            state = GroupState(g, cfg.session_timeout_ms, cfg.rebalance_timeout_ms,
                               verifier=signer, version=3 - cfg.protocol_version)  # fmt: skip
            _replay_all(state, records.get(p, ()))
        out.append(
            {
                "group": g,
                "state": group_state(state, now_ms),
                "members": len(live_now(state, now_ms)),
                "generation": state.generation,
                "control_partition": p,
            }
        )
    return out


def _replay_all(
    state: GroupState, records: Iterable[tuple[int, bytes | None, bytes | None, int]]
) -> None:
    for offset, key, value, ts in records:
        state.replay(offset, key, value, ts)


def render(desc: dict[str, Any], as_json: bool = False, view: str = "partitions") -> str:
    """``describe``'s output: ``view`` is ``partitions`` (the default), ``members`` or
    ``state``; as JSON, the whole description, the members, or the state."""
    if as_json:
        doc: Any = desc
        if view == "members":
            doc = desc["members"]
        elif view == "state":
            doc = _state_doc(desc)
        return json.dumps(doc, indent=2, sort_keys=True)
    g = desc["group"]
    lines: list[str] = []
    if view == "state":
        s = _state_doc(desc)
        lines += table(STATE_COLUMNS, [[g, s["control_partition"], s["assignor"], s["state"],
                                         s["members"], s["generation"], s["leader"],
                                         s["protocol"], s["phase"]]])  # fmt: skip
    elif view == "members":
        lines += table(MEMBER_COLUMNS, [
            [g, m["member_id"], m["host"], m["client_id"], len(m["assigned"]), m["lag"],
             _cell(m["time_lag"]), "yes" if m["live"] else "no", m["generation"],
             "*" if m["leader"] else "", m["instance_id"]]
            for m in desc["members"]
        ])  # fmt: skip
    else:
        if desc["live_members"] == 0:
            lines.append(f"Consumer group '{g}' has no active members.")
            lines.append("")
        with_status = desc.get("status") is not None
        columns = PARTITION_COLUMNS + (("STATUS",) if with_status else ())
        lines += table(columns, [
            [r["group"], r["topic"], r["partition"], r["current_offset"], r["log_end_offset"],
             r["lag"], r["consumer_id"], r["host"], r["client_id"], _cell(r["time_lag"]),
             r["generation"], "*" if r["leader"] else "", r["state"], r["instance_id"],
             *([r["status"]] if with_status else [])]
            for r in desc["partitions"]
        ])  # fmt: skip
        if with_status:
            lines.append(f"status: {desc['status']}")
    fb = desc.get("fallback")
    if fb:
        lines.append(
            f"fallback: planned by {fb['assignor']}, {desc['assignor']} failed "
            f"({fb['reason']}): {fb['detail']}"
        )
    rp = desc.get("replan")
    if rp:
        ago = (desc["log_time_ms"] - rp["at_ms"]) / 1000
        lines.append(
            f"last re-plan for the load: generation {rp['generation']}, {ago:.0f} s ago, "
            f"{rp['reason']}, {rp['moved']} partition(s) moved, predicted gain "
            f"{rp['gain']:.0%}"
        )
    rs = desc.get("reset")
    if rs:
        waiting = ", ".join(rs["waiting"]) or "nobody"
        lines.append(
            f"reset {rs['reset_id']} pending: {len(rs['unsettled'])} partition(s) not yet "
            f"restarted at their new offset; not yet acknowledged by: {waiting}"
        )
    if desc["rejected"]:
        lines.append(
            "rejected records: " + ", ".join(f"{k}={v}" for k, v in desc["rejected"].items())
        )
    return "\n".join(lines)


def _cell(seconds: float | None) -> str | None:
    """A time lag as the table shows it: seconds to a tenth (``-`` when unknown)."""
    return None if seconds is None else f"{seconds:.1f}"


def _state_doc(desc: dict[str, Any]) -> dict[str, Any]:
    return {
        "group": desc["group"],
        "state": desc["state"],
        "members": desc["live_members"],
        "generation": desc["generation"],
        "leader": desc["leader"],
        "assignor": desc["assignor"],
        "protocol": desc["protocol"],
        "phase": desc["phase"],
        "control_topic": desc["control_topic"],
        "control_partition": desc["control_partition"],
    }


def render_list(groups: list[dict[str, Any]], as_json: bool = False) -> str:
    if as_json:
        return json.dumps(groups, indent=2, sort_keys=True)
    return "\n".join(table(LIST_COLUMNS, [
        [g["group"], g["state"], g["members"], g["generation"], g["control_partition"]]
        for g in groups
    ]))  # fmt: skip
