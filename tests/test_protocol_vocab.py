"""The vocabularies are StrEnums whose values are the wire and label strings they replaced; the
value types behave as the tuples they replaced."""

import json

from groupkit.metrics import KNOWN_REJECTIONS
from groupkit.protocol.records import PHASES, PROTOCOLS, MemberRef
from groupkit.protocol.vocab import (
    MEMBER_TRANSITIONS,
    AssignorFailure,
    LossReason,
    MemberEvent,
    MemberPhase,
    Phase,
    RebalanceProtocol,
    RejectReason,
    ReplayKind,
)


def test_members_are_their_strings_on_the_wire_and_in_labels() -> None:
    assert RebalanceProtocol.COOPERATIVE == "cooperative"
    assert json.dumps({"p": Phase.REVOKE}) == '{"p": "revoke"}'
    assert f"{MemberPhase.LEFT}" == str(MemberPhase.LEFT) == "left"
    assert hash(ReplayKind.REASSERT) == hash("reassert")
    assert PROTOCOLS == ("eager", "cooperative")
    assert PHASES == ("revoke", "partial", "complete")
    assert all(type(p) is str for p in (*PROTOCOLS, *PHASES))


def test_metric_rejection_labels_come_from_the_one_enum() -> None:
    assert tuple(r.value for r in RejectReason) == KNOWN_REJECTIONS
    assert all(type(r) is str for r in KNOWN_REJECTIONS)
    # the reasons the metric started with before the enum are all still there, spelled alike
    before = {
        "bad_bytes", "unknown_version", "unknown_kind", "missing_field", "wrong_type",
        "bad_value", "too_large", "unsigned", "bad_signature", "offset_regressed",
        "stale_member_record", "acked_regressed", "future_generation", "unowned_claim",
        "stale_generation", "bad_phase", "not_leader", "unsafe_grant", "inconsistent",
        "fenced_instance",
    }  # fmt: skip
    assert before <= set(KNOWN_REJECTIONS)


def test_member_events_and_failure_reasons_keep_their_log_and_label_strings() -> None:
    # what the member's table is driven by, and what ``member.event`` logs and the
    # ``groupkit_assignor_failures_total`` reason label say: the strings they were before
    assert [e.value for e in MemberEvent] == [
        "send_record", "covered", "uncovered", "fenced", "leave", "left",
    ]  # fmt: skip
    assert [r.value for r in LossReason] == [
        "session_lapsed", "replaced", "expired", "membership_restarted", "instance_fenced",
    ]  # fmt: skip
    assert [f.value for f in AssignorFailure] == ["raised", "invalid", "timeout"]
    # the table speaks only these words
    assert {e for _, e in MEMBER_TRANSITIONS} == set(MemberEvent)
    assert all(type(e) is MemberEvent for _, e in MEMBER_TRANSITIONS)


def test_a_member_ref_is_the_pair_it_replaced() -> None:
    ref = MemberRef("m1", "i1")
    assert ref == ("m1", "i1") and hash(ref) == hash(("m1", "i1"))
    mid, inc = ref
    assert (mid, inc) == (ref.member_id, ref.incarnation)
    assert json.dumps(ref) == '["m1", "i1"]'
