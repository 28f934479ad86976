"""Holds: what a membership that ended early (a restart, a tombstone, a seat taken over) may
still have, kept from every grant until that membership's session would have ended (version 1)
or a verdict ends its process's run (version 2); and their echo in member records.

A hold starts at the record that ends the membership, from what that membership may hold then
(``ownership.may_hold``), which only a reader that replayed the membership knows. So a record
of the member id that replaces a live membership, and every later record of that id while the
hold lasts, echoes it (``MemberRecord.held``): a reader of the compacted topic, which never saw
the record that started the hold, builds it from the newest record of the id, which compaction
keeps (docs/protocol.md, "Membership and continuation"). :func:`hold_on` is the hold itself,
:func:`echo` what a writer says, :func:`echoed` what a reader takes from a record.
"""

from __future__ import annotations

from collections.abc import Iterable

import groupkit.protocol.ownership as ownership
from groupkit.protocol.group import NEVER, GroupData, Hold, MemberState
from groupkit.protocol.records import HeldEcho, MemberRecord


def hold_on(state: GroupData, old: MemberState, leaving: bool = False) -> Hold | None:
    """The hold on live membership ``old``, which a record about to be applied ends: what it
    may hold, until its session would have ended (version 2: until a verdict ends its run).

    ``leaving``: that record is the membership's own leaving record (``old`` is its state).
    Its process takes nothing after writing it, and claims in it everything it may still run
    (docs/protocol.md, "Expiry and tombstones"), so its claims are all it holds: not the
    grants it never took, nor what was reserved for it."""
    held = old.claims if leaving else ownership.may_hold(state, old.member_id)
    if not held:
        return None
    until = state.expires_at(old)
    return Hold(f"{old.member_id}/{old.proc}", held, NEVER if until is None else until, old.run)


def process_of(holder: str, member_id: str) -> str | None:
    """The process (incarnation) of hold ``holder`` if it is one of ``member_id``'s."""
    prefix = f"{member_id}/"
    if not holder.startswith(prefix) or "/" in holder[len(prefix) :]:
        return None
    return holder[len(prefix) :]


def echo(state: GroupData, member_id: str, incarnation: str) -> tuple[HeldEcho, ...]:
    """What a record of process ``incarnation`` of ``member_id`` echoes: the holds its
    replay has on the id's other processes, and the one its record will start if the replay
    shows a live membership of another process under the id (a restart, a seat's takeover).
    Nothing for a static seat in version 2: its holds end at ``process_ended`` verdicts, which
    a reader of the compacted log may lack (a later process's took their key), and last a
    process lease only (docs/protocol-v2.md, L7)."""
    out: dict[tuple[str, int], HeldEcho] = {}
    m = state.members.get(member_id)
    if state.version == 2 and m is not None and m.instance_id is not None:
        return ()
    for h in state.holds:
        proc = process_of(h.holder, member_id)
        if proc is not None and proc != incarnation and h.until > state.log_time:
            out[(proc, h.run)] = _echo_of(h, proc)
    if m is not None and m.proc != incarnation and state.is_live(member_id):
        starts = hold_on(state, m)
        if starts is not None:
            out[(m.proc, starts.run)] = _echo_of(starts, m.proc)
    return tuple(out[k] for k in sorted(out))


def _echo_of(h: Hold, proc: str) -> HeldEcho:
    return HeldEcho(proc, h.partitions, None if h.until == NEVER else h.until, h.run)


def echoed(state: GroupData, member_id: str, v: MemberRecord, ts: int) -> list[Hold]:
    """The holds of record ``v`` (appended at ``ts``) that this reader lacks, or has less of,
    and that have not ended: version 1, by the log's time (a hold never outlasts a session
    after the record that names it: the writer's replay had it then); version 2, by the
    member's newest verdict (docs/protocol-v2.md, L3.2). The reader replaces its own hold on
    the same process and run with the one returned, which covers both."""
    out: list[Hold] = []
    if state.version == 2 and v.instance_id is not None:
        return out  # (see echo)
    for e in v.held:
        if state.version == 1:
            if e.until is None:
                continue
            until = min(e.until, ts + state.session_timeout_ms)
            if until <= state.log_time:
                continue
        else:
            w = state.verdicts.get(member_id)
            if w is not None and w.kind == "expired" and w.ends(e.process, e.run):
                continue
            until = NEVER
        holder = f"{member_id}/{e.process}"
        own = next((h for h in state.holds if h.holder == holder and h.run == e.run), None)
        if own is not None and e.partitions <= own.partitions and until <= own.until:
            continue
        if own is not None:
            until = max(until, own.until)
        out.append(Hold(holder, e.partitions | (own.partitions if own else frozenset()), until,
                        e.run))  # fmt: skip
    return out


def end_echoed(state: GroupData, member_id: str, run: tuple[str, int] | None = None) -> None:
    """Version 2: end the holds on ``member_id``'s processes that ``state`` took from an echo
    alone (``GroupData.echo_holders``): every one when a verdict ends the membership that
    echoed them (``run`` ``None``), else those whose newest echo came from a record of process
    ``run[0]`` in a run up to ``run[1]``, which an ``expired`` verdict ended.

    The second is for a membership that left before the verdict on its run: its leaving record,
    which compaction keeps as its key's newest, echoes the hold, and the verdict on the held
    process, which ended the hold for the full reader, shares its key with the verdict on the
    echoing run, which a judge writes no earlier, so a reader of the compacted log may have only
    the latter (docs/protocol-v2.md, L3.8)."""
    ended = {h for h, (proc, r) in state.echo_holders.items()
             if process_of(h, member_id) is not None
             and (run is None or (proc == run[0] and r <= run[1]))}  # fmt: skip
    if ended:
        state.holds = [h for h in state.holds if h.holder not in ended]
        for h in ended:
            del state.echo_holders[h]


def note_echo(state: GroupData, member_id: str, v: MemberRecord | None) -> None:
    """Version 2: which processes the member id's newest accepted record (``None``: its
    tombstone) echoes a hold on (``GroupData.echoed``), as compaction keeps that record."""
    if state.version != 2:
        return
    if v is not None and v.held:
        state.echoed[member_id] = frozenset(e.process for e in v.held)
    else:
        state.echoed.pop(member_id, None)


def restated(
    state: GroupData, member_id: str, process: str, found: Iterable[tuple[str, int]] = ()
) -> tuple[tuple[str, int], ...]:
    """Version 2: what a new ``expired`` verdict on ``member_id``'s ``process`` restates
    (``VerdictRecord.ended``; docs/protocol-v2.md, L3.9): the runs of the id's other processes
    that its newest verdict ends, or that the judge's own verdicts not read back yet end
    (``found``), on which its newest record echoes a hold. The new verdict takes that one's
    key, and a reader of the compacted log that builds the hold from the echo must see it end
    as the full reader did."""
    echoed = state.echoed.get(member_id)
    if not echoed:
        return ()
    v = state.verdicts.get(member_id)
    runs: dict[str, int] = {}
    for p, r in (*(((v.process, v.run), *v.ended) if v is not None else ()), *found):
        if p != process and p in echoed:
            runs[p] = max(r, runs.get(p, r))
    return tuple(sorted(runs.items()))
