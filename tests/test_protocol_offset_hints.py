"""Offset hints: a member that takes a partition starts at the offset its previous
owner committed and named in the record that released it, with no look-up.

Random schedules of :mod:`tests.test_protocol_hypothesis` (both protocols, every assignor,
crashes, pauses, slow readers, forged and stale records), with revocations deferred as the
runtime defers them, and the simulator's committed offsets (``GroupSim``: each owner processes
a record per tick and commits now and then; a release commits first). After every step:

- no member starts a partition beyond every record processed so far (no loss), at a hint or not;
- a hint is never ahead of the partition's committed offset when it is taken;
- with no crash, pause or forged record in the schedule, a hint *is* the committed offset.

About a third of the schedules start some partition at a hint (most of the rest move nothing
between live owners).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from groupkit.errors import RecordRejected
from groupkit.protocol import ownership
from groupkit.protocol.records import (
    HmacSigner,
    assignment_record,
    covered_member,
    decode,
    encode,
    member_record,
)
from groupkit.protocol.state import GroupState
from groupkit.types import TopicPartition as TP
from tests.test_protocol_hypothesis import (
    EXAMPLES,
    GroupSchedule,
    schedule_settings,
    schedule_start,
)


class HintSchedule(GroupSchedule):
    #: a crash, pause or forged record happened: hints may lag the committed offset
    disturbed: bool

    @schedule_start([0, 100, 700])
    def start(self, protocol: str, assignor: str, t0: int, t1: int, release: int | None) -> None:
        super().start(protocol, assignor, t0, t1, release)
        self.disturbed = False
        for name in ("crash", "pause", "inject"):
            setattr(self.sim, name, self._disturbing(getattr(self.sim, name)))
        # A group already running, so that a join or a leave moves partitions (and their
        # offsets) between live owners from the first step on.
        for mid in ("m0", "m1"):
            self.sim.join(mid, ["t0", "t1"])
        for _ in range(10):
            self.sim.tick()
            self.check()

    def _disturbing(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            self.disturbed = True
            return fn(*args)

        return run

    def check(self) -> None:
        super().check()
        if not self.disturbed:
            lagging = [h for h in self.sim.hint_starts if h[2] != h[3]]
            assert not lagging, lagging


HintSchedule.TestCase.settings = schedule_settings(EXAMPLES)
TestHintSchedule = HintSchedule.TestCase


# --------------------------------------------------------------------------- records

SIGNER = HmacSigner(b"group key")


def _release(**kw: Any) -> tuple[bytes, bytes | None]:
    k, v = member_record("g", "m", incarnation="i", seq=3, topics=["t"], owned=[("t", 0)],
                         joined_at=5, prev_ts=7, **kw)  # fmt: skip
    return encode(k, v, SIGNER)


def test_committed_offsets_round_trip_signed() -> None:
    k, raw = _release(committed={TP("t", 1): 42, TP("u", 0): 0})
    _, v = decode(k, raw, SIGNER)
    assert v is not None and v.committed == ((TP("t", 1), 42), (TP("u", 0), 0))  # type: ignore[union-attr]
    assert raw is not None and b'"committed":{"t":[[1,42]]' in raw
    # the signature covers the field: another offset does not verify
    forged = raw.replace(b"[[1,42]]", b"[[1,99]]")
    with pytest.raises(RecordRejected) as e:
        decode(k, forged, SIGNER)
    assert e.value.reason == "bad_signature"


def test_a_record_without_the_field_decodes_with_none() -> None:
    """Records written before the field existed (and every record with none to carry)."""
    k, raw = _release()
    assert raw is not None and b"committed" not in raw
    _, v = decode(k, raw, SIGNER)
    assert v is not None and v.committed == ()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("committed", "reason"),
    [
        (b'{"t":[[1,-1]]}', "bad_value"),  # negative offset
        (b'{"t":[[0,5]]}', "bad_value"),  # a partition the record still claims
        (b'{"t":[[1,5],[1,6]]}', "bad_value"),  # twice
        (b'{"t":[[1,true]]}', "wrong_type"),
        (b'{"t":[[1]]}', "wrong_type"),
        (b'{"t":[1,5]}', "wrong_type"),
        (b"[]", "wrong_type"),
    ],
)
def test_bad_committed_offsets_reject_the_record(committed: bytes, reason: str) -> None:
    k, raw = _release(committed={TP("t", 1): 12345})
    assert raw is not None
    bad = raw[raw.index(b"{") :].replace(b'{"t":[[1,12345]]}', committed)  # unsigned
    with pytest.raises(RecordRejected) as e:
        decode(k, bytes([1, 0]) + bad)
    assert e.value.reason == reason


def test_the_factory_refuses_what_the_decoder_would_reject() -> None:
    with pytest.raises(ValueError):
        _release(committed={TP("t", 1): -1})
    with pytest.raises(ValueError):
        _release(committed={TP("t", 0): 3})


# --------------------------------------------------------------------------- replay rules


class _Log:
    """A hand-written control log of one group, replayed as it is written."""

    def __init__(self) -> None:
        self.st = GroupState("g", session_timeout_ms=10_000)
        self.offset = -1
        self.seq: dict[str, int] = {}

    def _feed(self, k: bytes, v: bytes | None, ts: int) -> str:
        self.offset += 1
        res = self.st.replay(self.offset, k, v, ts)
        return res.reason or res.kind

    def beat(self, mid: str, ts: int, owned: tuple[int, ...] = (),
             committed: dict[int, int] | None = None) -> str:  # fmt: skip
        """A record of ``mid``: continuing its membership if the log has it."""
        seq = self.seq[mid] = self.seq.get(mid, 0) + 1
        m = self.st.members.get(mid)
        k, v = member_record(
            "g", mid, incarnation=f"i{mid}", seq=seq, topics=["t"],
            owned=[("t", p) for p in owned], owned_generation=self.st.generation if owned else 0,
            acked_generation=self.st.generation, seen_generation=self.st.generation,
            joined_at=m.joined_at if m else None, prev_ts=m.last_seen if m else None,
            since_generation=m.since_generation if m else 0,
            committed={TP("t", p): o for p, o in (committed or {}).items()},
        )  # fmt: skip
        return self._feed(*encode(k, v), ts)

    def grant(
        self, ts: int, phase: str = "complete", **members: tuple[tuple[int, ...], ...]
    ) -> str:
        """A generation from the leader: per member (assigned, revoke, pending)."""
        st = self.st
        assert st.leader is not None
        lead = st.members[st.leader]
        k, v = assignment_record(
            "g", generation=st.generation + 1, leader_id=st.leader,
            leader_incarnation=lead.incarnation, leader_joined_at=lead.joined_at,
            protocol="cooperative", phase=phase, assignor="range", partition_counts={"t": 4},
            members={
                mid: covered_member(f"i{mid}", ["t"], *([("t", p) for p in ps] for ps in parts))
                for mid, parts in members.items()
            },
        )  # fmt: skip
        return self._feed(*encode(k, v), ts)

    def hints(self, mid: str) -> dict[int, int]:
        got = ownership.hints_for(self.st, mid, f"i{mid}", [TP("t", p) for p in range(4)])
        return {tp.partition: o for tp, o in got.items()}


def _moving() -> _Log:
    """``a`` owns t-0..3; ``b`` joins; t-2 and t-3 are revoked from ``a`` for ``b``, and ``a``'s
    record lets them go with the offsets it committed (and one for a partition it never had)."""
    log = _Log()
    assert log.beat("a", 1000) == "member" and log.beat("a", 1100) == "member"
    assert log.grant(1200, a=((0, 1, 2, 3), (), ())) == "assignment"
    assert log.beat("a", 1300, owned=(0, 1, 2, 3)) == "member"
    assert log.beat("b", 1400) == "member" and log.beat("b", 1500) == "member"
    assert log.grant(1600, "partial", a=((0, 1), (2, 3), ()), b=((), (), (2, 3))) == "assignment"
    assert log.beat("a", 1700, owned=(0, 1), committed={2: 50, 3: 60}) == "member"
    return log


def test_the_first_receiver_starts_at_the_release_and_its_claim_ends_the_hint() -> None:
    log = _moving()
    assert log.grant(1800, b=((2, 3), (), ()), a=((0, 1), (), ())) == "assignment"
    assert log.hints("b") == {2: 50, 3: 60}
    assert log.hints("a") == {} and log.hints("c") == {}
    assert ownership.hints_for(log.st, "b", "another incarnation", [TP("t", 2)]) == {}
    assert log.beat("b", 1900, owned=(2, 3)) == "member"
    assert log.hints("b") == {} and not log.st.offset_hints


def test_a_newer_generation_that_keeps_the_partition_pending_for_its_target_keeps_it() -> None:
    """A partial generation written after the release (the leader plans for a newcomer that
    the owners' admission already served, say) still names ``b`` as the target of t-2 and
    t-3: ``b`` starts at the release's offsets. Were they pending for another member, that
    member would look them up (the hint was for ``b``)."""
    log = _moving()
    assert log.grant(1800, "partial", a=((0, 1), (), ()), b=((), (), (2, 3))) == "assignment"
    assert log.hints("b") == {2: 50, 3: 60}
    log = _moving()
    assert log.beat("c", 1750) == "member" and log.beat("c", 1760) == "member"
    assert log.grant(1800, "partial", a=((0, 1), (), ()), b=((), (), (2,)),
                     c=((), (), (3,))) == "assignment"  # fmt: skip
    assert log.hints("b") == {2: 50} and log.hints("c") == {}


def test_a_partition_granted_to_another_member_is_looked_up() -> None:
    """``b`` acknowledges the grant without taking it (it was fenced, say): the leader grants
    the partitions elsewhere, and that member looks the offsets up: ``b`` may have committed."""
    log = _moving()
    assert log.grant(1800, b=((2, 3), (), ()), a=((0, 1), (), ())) == "assignment"
    assert log.beat("b", 1900) == "member"  # acked, owns nothing
    assert log.grant(2000, a=((0, 1, 2, 3), (), ()), b=((), (), ())) == "assignment"
    assert log.hints("a") == {} and log.hints("b") == {}


def test_only_what_the_record_releases_is_taken() -> None:
    log = _moving()
    assert log.beat("b", 1800, committed={1: 7}) == "member"  # b never claimed t-1
    assert log.st.hints_ignored == {"not_released": 1}
    assert TP("t", 1) not in log.st.offset_hints


def test_hints_age_out_and_go_with_an_empty_group() -> None:
    log = _moving()
    for ts in (1800, 5000, 9000, 11_800):  # b stays; a expires a session after its release
        assert log.beat("b", ts) == "member"
    assert log.st.leader == "b" and log.st.offset_hints
    assert log.grant(11_850, b=((0, 1, 2, 3), (), ())) == "assignment"
    assert log.hints("b") == {}
    log = _moving()
    log.beat("z", 30_000)  # everybody expired before this record: the group was empty
    assert not log.st.offset_hints
