"""``groupkit reset-offsets``: an operator's offset reset, safe on a running group.

Kafka's ``kafka-consumer-groups --reset-offsets`` refuses a group with active members, and sees
a groupkit group as empty (its members never join the broker's group), so it would accept the
reset and the members' next commits would overwrite it. This command goes through the control
log instead (docs/protocol.md, "Resets"):

1. :func:`plan_reset` replays the group's control log as a newcomer does (what ``describe``
   reads), checks the input, and computes the new offset of each partition from the scenario,
   exactly as Kafka's tool does: ``--to-earliest`` / ``--to-latest`` (log start / end),
   ``--to-offset N`` and ``--shift-by N`` (clamped to the log start and end, as Kafka clamps),
   ``--to-datetime`` / ``--by-duration`` (``offsets_for_times``: the first record stamped at or
   after that time; the log end if none is). A dry run prints that plan and stops.
2. :func:`execute_reset` on a group with live members writes one reset record (signed with the
   group's key, if it has one) and follows the log until every member that was live at that
   record has acknowledged it (a record of its own naming it) and every partition the group
   consumes has had its new offset committed by its owner; partitions no live member
   subscribes to are committed here, directly. A member that owns a reset partition stops
   handing out its records, starts it again at the new offset and commits it before it
   acknowledges; nothing from before the reset is committed after it (runtime/handoff.py).
   If that does not happen within ``timeout``, the command fails (exit 1) and names who did
   not acknowledge. On an empty group it commits the offsets directly, as Kafka's tool does
   (a consumer with the group's id that joins nothing), then checks the group stayed empty.

Bad input changes nothing and is an :class:`~groupkit.errors.InputError` (exit 2): no
scenario or two, no topic selection, an unknown group (no record in the control log and no
committed offset) or topic, a partition out of range, and a ``--to-datetime`` or
``--by-duration`` before the log start of a partition (a time before its first retained
record: unlike Kafka's tool, which silently resets to the earliest offset then, that is
refused, because the records of that time are gone: say ``--to-earliest`` if that is meant).
"""

from __future__ import annotations

import datetime as dt
import getpass
import re
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KTopicPartition

from groupkit.errors import BrokerError, ControlTopicError, InputError, ResetFailed
from groupkit.protocol import GroupState, ownership
from groupkit.protocol.records import HmacSigner, encode, reset_record
from groupkit.protocol.vocab import RejectReason, ReplayKind
from groupkit.runtime.admin import connect_admin
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.control_log import ControlReader, ControlWriter
from groupkit.runtime.control_topic import partition_for_group
from groupkit.runtime.group_tools import (
    control_partitions,
    live_now,
    read_group,
    reader_config,
    table,
)
from groupkit.runtime.lag import committed_offsets, end_offsets
from groupkit.types import TopicPartition

#: the plan's columns: kafka-consumer-groups --reset-offsets' (GROUP TOPIC PARTITION
#: NEW-OFFSET) with the current offset beside the new one
RESET_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET")

SCENARIOS = ("to_earliest", "to_latest", "to_offset", "to_datetime", "by_duration", "shift_by")


@dataclass(frozen=True)
class ResetPlan:
    group: str
    #: partition -> (current committed offset or None, new offset)
    rows: dict[TopicPartition, tuple[int | None, int]]
    #: live members when planned (empty: the group is empty)
    live: tuple[str, ...]
    #: topics the live members subscribe to
    consumed: frozenset[str]
    control_partition: int
    state: GroupState = field(repr=False)


@dataclass(frozen=True)
class ResetOutcome:
    #: ``dry_run``, ``committed`` (an empty group) or ``acknowledged`` (a running one)
    how: str
    acknowledged_by: tuple[str, ...] = ()
    #: partitions committed here directly (nobody consumes them)
    committed_directly: tuple[TopicPartition, ...] = ()
    reset_offset: int | None = None


# --------------------------------------------------------------------------- input


def parse_topics(specs: Sequence[str]) -> dict[str, list[int] | None]:
    """``--topic T`` / ``--topic T:0,2`` (Kafka's syntax) -> ``{topic: partitions or None}``."""
    out: dict[str, list[int] | None] = {}
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not topic:
            raise InputError(f"--topic {spec!r}: no topic name")
        if not sep:
            out[topic] = None
            continue
        try:
            ps = sorted({int(p) for p in parts.split(",") if p.strip()})
        except ValueError:
            raise InputError(f"--topic {spec!r}: partitions must be integers, e.g. t:0,1") from None
        if not ps or ps[0] < 0:
            raise InputError(f"--topic {spec!r}: partitions must be integers >= 0")
        prev = out.get(topic, [])
        out[topic] = None if topic in out and prev is None else sorted({*(prev or []), *ps})
    return out


def parse_datetime(text: str) -> int:
    """Kafka's ``--to-datetime`` format ``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone
    (``Z``, ``+02:00``); no zone means UTC here (Kafka's tool takes the local zone: say it)."""
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(
            f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss[+HH:MM|Z]"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


_DURATION = re.compile(
    r"^P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration_ms(text: str) -> int:
    """Kafka's ``--by-duration`` format, ISO 8601 ``PnDTnHnMnS`` (e.g. ``PT10M``, ``P1DT2H``)."""
    m = _DURATION.match(text.strip().upper())
    if m is None or text.strip().upper() in ("P", "PT") or not any(m.groupdict().values()):
        raise InputError(f"--by-duration {text!r}: expected PnDTnHnMnS, e.g. PT15M or P1D")
    d, h, mi, s = (float(m.group(x) or 0) for x in "dhms")
    return int(((d * 24 + h) * 60 + mi) * 60_000 + s * 1000)


def scenario_of(args: Mapping[str, Any]) -> tuple[str, Any]:
    """The one scenario given (``InputError`` for none or several)."""
    given = [(s, args[s]) for s in SCENARIOS if args.get(s) not in (None, False)]
    if len(given) != 1:
        names = ", ".join("--" + s.replace("_", "-") for s in SCENARIOS)
        raise InputError(
            f"give exactly one scenario ({names})"
            + (
                ""
                if not given
                else f"; got {', '.join('--' + s.replace('_', '-') for s, _ in given)}"
            )
        )
    return given[0]


# --------------------------------------------------------------------------- planning


def _read_group(cfg: GroupConfig, admin: Any, timeout: float) -> tuple[GroupState, int]:
    """The group's state at the end of its control log (as ``describe`` reads it); an empty
    one, at partition -1, without a control topic (a group groupkit never ran)."""
    signer = HmacSigner(cfg.signing_key.encode()) if cfg.signing_key else None
    try:
        n = control_partitions(admin, cfg, timeout)
    except ControlTopicError:
        return GroupState(cfg.group_id, cfg.session_timeout_ms, cfg.rebalance_timeout_ms,
                          verifier=signer, version=cfg.protocol_version), -1  # fmt: skip
    partition = partition_for_group(cfg.group_id, n)
    reader = ControlReader(reader_config(cfg), cfg.control_topic, partition)
    try:
        state, complete = read_group(reader, cfg, signer, timeout)
    finally:
        reader.close()
    if not complete:
        raise BrokerError(f"timed out reading control topic {cfg.control_topic!r}")
    return state, partition


def plan_reset(
    config: dict[str, Any],
    scenario: tuple[str, Any],
    topics: Mapping[str, list[int] | None] | None,
    timeout: float = 30.0,
) -> ResetPlan:
    """The new offset of each selected partition (``topics=None``: ``--all-topics``, every
    topic the group's members subscribe to, live or not). Changes nothing."""
    cfg = GroupConfig.from_dict(config)
    admin = connect_admin(cfg.client_config("admin"), timeout)
    state, partition = _read_group(cfg, admin, timeout)
    live = tuple(live_now(state))
    known = not (not state.members and state.assignment is None)
    if topics is None:
        # the topics its members subscribe to, or did in the newest generation (an empty
        # group's members have left; Kafka's tool takes the topics with committed offsets)
        a = state.assignment
        subscribed = {t for m in state.members.values() for t in m.topics}
        if a is not None:
            subscribed |= {t for c in a.members.values() for t in c.topics}
        chosen: dict[str, list[int] | None] = dict.fromkeys(sorted(subscribed))
        if not chosen:
            raise InputError(
                f"group {cfg.group_id!r}: no topic to reset (its control log names none); "
                "name them with --topic"
            )
    else:
        chosen = dict(topics)
    md = admin.list_topics(timeout=timeout)
    parts: list[TopicPartition] = []
    for t, ps in sorted(chosen.items()):
        tm = md.topics.get(t)
        if tm is None or tm.error is not None:
            raise InputError(f"topic {t!r} does not exist")
        n = len(tm.partitions)
        for p in ps or range(n):
            if p >= n:
                raise InputError(f"partition {t}:{p} out of range: {t} has {n} partitions")
            parts.append(TopicPartition(t, p))
    current = committed_offsets(admin, cfg.group_id, parts, timeout=timeout)
    if not known and all(o is None for o in current.values()):
        raise InputError(
            f"group {cfg.group_id!r} not found: no record of it on control topic "
            f"{cfg.control_topic!r} and no committed offset for these partitions"
        )
    low = end_offsets(admin, parts, earliest=True, timeout=timeout)
    high = end_offsets(admin, parts, timeout=timeout)
    new = _new_offsets(cfg, scenario, parts, current, low, high, timeout)
    consumed = frozenset(t for mid in live for t in state.members[mid].topics)
    return ResetPlan(cfg.group_id, {p: (current.get(p), new[p]) for p in parts}, live,
                     consumed, partition, state)  # fmt: skip


def _new_offsets(
    cfg: GroupConfig,
    scenario: tuple[str, Any],
    parts: list[TopicPartition],
    current: Mapping[TopicPartition, int | None],
    low: Mapping[TopicPartition, int],
    high: Mapping[TopicPartition, int],
    timeout: float,
) -> dict[TopicPartition, int]:
    kind, value = scenario

    def clamp(p: TopicPartition, o: int) -> int:
        return max(low.get(p, 0), min(high.get(p, 0), o))

    if kind == "to_earliest":
        return {p: low.get(p, 0) for p in parts}
    if kind == "to_latest":
        return {p: high.get(p, 0) for p in parts}
    if kind == "to_offset":
        return {p: clamp(p, int(value)) for p in parts}
    if kind == "shift_by":
        # Kafka's tool shifts from the committed offset; without one, from where the group
        # would start (auto.offset.reset)
        def base(p: TopicPartition) -> int:
            c = current.get(p)
            if c is not None:
                return c
            earliest = cfg.data_consumer.get("auto.offset.reset") == "earliest"
            return low.get(p, 0) if earliest else high.get(p, 0)

        return {p: clamp(p, base(p) + int(value)) for p in parts}
    if kind == "to_datetime":
        at = parse_datetime(str(value))
    elif kind == "by_duration":
        at = int(time.time() * 1000) - parse_duration_ms(str(value))
    else:  # pragma: no cover - scenario_of allows no other
        raise InputError(f"unknown scenario {kind}")
    return _offsets_for_time(cfg, parts, at, low, high, timeout)


def _offsets_for_time(
    cfg: GroupConfig,
    parts: list[TopicPartition],
    at: int,
    low: Mapping[TopicPartition, int],
    high: Mapping[TopicPartition, int],
    timeout: float,
) -> dict[TopicPartition, int]:
    """Kafka's ``offsets_for_times``, refusing a time before a partition's first retained
    record (module docstring)."""
    reader_id = f"groupkit-reset-{uuid.uuid4().hex[:8]}"  # never the group's: commits nothing
    c = Consumer(cfg.client_config("reset-offsets", **{
        "group.id": reader_id, "enable.auto.commit": False}))  # fmt: skip
    try:
        got = c.offsets_for_times([KTopicPartition(p.topic, p.partition, at) for p in parts],
                                  timeout=timeout)  # fmt: skip
        out: dict[TopicPartition, int] = {}
        for k in got:
            p = TopicPartition(k.topic, k.partition)
            if k.error is not None:
                raise BrokerError(f"offsets_for_times of {p}: {k.error}")
            out[p] = high.get(p, 0) if k.offset is None or k.offset < 0 else int(k.offset)
            if out[p] == low.get(p, 0) and low.get(p, 0) < high.get(p, 0):
                first = _first_timestamp(c, p, low[p], timeout)
                if first is not None and at < first:
                    stamp = dt.datetime.fromtimestamp(first / 1000, dt.UTC).isoformat()
                    raise InputError(
                        f"{p.topic}:{p.partition}: the time asked for is before the log start "
                        f"(its first retained record, offset {low[p]}, is stamped {stamp}); "
                        "use --to-earliest to reset to the log start"
                    )
        return out
    finally:
        c.close()


def _first_timestamp(c: Consumer, p: TopicPartition, offset: int, timeout: float) -> int | None:
    c.assign([KTopicPartition(p.topic, p.partition, offset)])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            return int(m.timestamp()[1])
        raise BrokerError(f"cannot read the first record of {p}")
    finally:
        c.unassign()


# --------------------------------------------------------------------------- executing


def execute_reset(config: dict[str, Any], plan: ResetPlan, timeout: float = 60.0) -> ResetOutcome:
    """Apply ``plan`` (module docstring); raises :class:`ResetFailed` on a timeout."""
    cfg = GroupConfig.from_dict(config)
    offsets = {p: new for p, (_cur, new) in plan.rows.items()}
    if not plan.live:
        return _commit_empty(cfg, offsets, timeout)
    signer = HmacSigner(cfg.signing_key.encode()) if cfg.signing_key else None
    reset_id = uuid.uuid4().hex
    key, value = reset_record(cfg.group_id, reset_id, offsets, requested_by=_who(),
                              based_on=plan.state.offset)  # fmt: skip
    raw_key, raw_value = encode(key, value, signer)
    reader = ControlReader(reader_config(cfg), cfg.control_topic, plan.control_partition)
    writer = ControlWriter(cfg, cfg.control_topic, plan.control_partition)
    delivered: list[tuple[Any, int]] = []
    state = plan.state
    try:
        reader.seek(state.offset + 1)
        writer.write(raw_key, raw_value, lambda err, off: delivered.append((err, off)))
        deadline = time.monotonic() + timeout
        while not delivered:
            if time.monotonic() >= deadline:
                raise ResetFailed("the reset record was not written in time; nothing changed")
            writer.service(0.1)
        err, at = delivered[0]
        if err is not None:
            raise BrokerError(f"cannot write the reset record: {err}")
        waiting: dict[str, str] = {}
        asked: dict[str, str] | None = None  # who the reset waits for, as of its record
        while True:
            for r in reader.poll(0.2):
                res = state.replay(r.offset, r.key, r.value, r.timestamp_ms)
                if r.offset == at and res.kind == ReplayKind.REJECTED:
                    if res.reason == RejectReason.RESET_OF_EMPTY_GROUP:  # everyone left meanwhile
                        return _commit_empty(cfg, offsets, timeout)
                    raise ResetFailed(
                        f"the group refused the reset record ({res.reason}: {res.detail}); "
                        "check groupkit.signing.key"
                    )
            rs = state.reset
            if state.offset >= at:
                if rs is None:
                    # the group emptied meanwhile (it forgets a reset then): as on an empty one
                    return _commit_empty(cfg, offsets, timeout)
                if rs.at != at:
                    raise ResetFailed(f"a newer reset (offset {rs.at}) superseded this one")
                if asked is None:
                    asked = dict(rs.waiting)
                waiting = ownership.reset_waiting(state)
                consumed = {t for m in state.live_members().values() for t in m.topics}
                open_parts = [p for p in rs.unsettled() if p.topic in consumed]
                if not waiting and not open_parts:
                    direct = sorted(p for p in rs.unsettled() if p.topic not in consumed)
                    if direct:
                        _commit(cfg, {p: offsets[p] for p in direct}, timeout)
                    acked = tuple(sorted(m for m, inc in (asked or {}).items()
                                         if state.members.get(m) is not None
                                         and state.members[m].incarnation == inc
                                         and state.is_live(m)))  # fmt: skip
                    return ResetOutcome("acknowledged", acked, tuple(direct), at)
            if time.monotonic() >= deadline:
                who = ", ".join(sorted(waiting)) or "-"
                left = sorted(str(p) for p in (rs.unsettled() if rs is not None else {}))
                raise ResetFailed(
                    f"reset (control offset {at}) not acknowledged within {timeout:g} s by: "
                    f"{who}; partitions not yet committed by an owner: {', '.join(left) or '-'}. "
                    "Members that acknowledge later still carry it out; run describe to check"
                )
    finally:
        reader.close()
        writer.close(1)


def _commit_empty(cfg: GroupConfig, offsets: dict[TopicPartition, int],
                  timeout: float) -> ResetOutcome:  # fmt: skip
    """Kafka's way on an empty group: commit directly; then make sure it stayed empty."""
    _commit(cfg, offsets, timeout)
    admin = connect_admin(cfg.client_config("admin"), timeout)
    state, _ = _read_group(cfg, admin, timeout)
    live = live_now(state)
    if live:
        raise ResetFailed(
            f"the group became active while its offsets were reset (members {', '.join(live)}): "
            "they may have started from the old offsets; run the reset again"
        )
    return ResetOutcome("committed", (), tuple(sorted(offsets)))


def _commit(cfg: GroupConfig, offsets: Mapping[TopicPartition, int], timeout: float) -> None:
    """Commit ``offsets`` for the group with a consumer of its id that joins nothing."""
    c = Consumer(cfg.client_config("reset-offsets", **{
        "group.id": cfg.group_id, "enable.auto.commit": False}))  # fmt: skip
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                got = c.commit(offsets=[KTopicPartition(p.topic, p.partition, o)
                                        for p, o in sorted(offsets.items())],
                               asynchronous=False)  # fmt: skip
                bad = [f"{k.topic}:{k.partition} {k.error}" for k in got or () if k.error]
                if bad:
                    raise BrokerError(f"commit refused: {'; '.join(bad)}")
                return
            except KafkaException as e:
                if time.monotonic() >= deadline:
                    raise BrokerError(f"cannot commit the offsets: {e}") from e
                time.sleep(0.2)  # the coordinator is loading or moving
    finally:
        c.close()


def _who() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # no user name in a container: say so rather than fail
        user = "?"
    return f"{user}@{socket.gethostname()}"


# --------------------------------------------------------------------------- output


def render_plan(plan: ResetPlan, as_json: bool = False) -> str:
    rows = [[plan.group, p.topic, p.partition, cur, new]
            for p, (cur, new) in sorted(plan.rows.items())]  # fmt: skip
    if as_json:
        import json

        return json.dumps(
            [dict(zip(("group", "topic", "partition", "current_offset", "new_offset"), r,
                      strict=True)) for r in rows],
            indent=2,
        )  # fmt: skip
    return "\n".join(table(RESET_COLUMNS, rows))
