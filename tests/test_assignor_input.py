"""Bad input to the assignors, and the checker catching bad assignments."""

from __future__ import annotations

import pytest

from groupkit.assignors import MemberSubscription as M
from groupkit.assignors import (
    TopicPartition,
    assignor_names,
    get_assignor,
    register_assignor,
    unregister_assignor,
)
from groupkit.assignors.invariants import (
    assert_valid,
    check_balanced,
    check_complete,
    check_no_swaps,
    check_sticky,
)
from groupkit.assignors.range import RangeAssignor
from groupkit.errors import ConfigError, UnknownAssignorError
from groupkit.log import capture


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownAssignorError) as e:
        get_assignor("nope")
    for name in assignor_names():
        assert name in str(e.value)
    assert isinstance(e.value, ConfigError)


def test_users_can_register_their_own() -> None:
    class Mine(RangeAssignor):
        name = "test-mine"

    register_assignor("test-mine", Mine)
    try:
        assert isinstance(get_assignor("test-mine"), Mine)
        assert "test-mine" in assignor_names()
    finally:
        unregister_assignor("test-mine")
    assert "test-mine" not in assignor_names()


@pytest.mark.parametrize("name", ["range", "roundrobin", "sticky", "fair", "lag", "balanced"])
def test_topic_without_partitions_is_skipped_and_logged(name: str) -> None:
    with capture() as logs:
        result = get_assignor(name).assign(
            {"t": 2, "empty": 0}, {"a": M(["t", "empty", "unknown"]), "b": M(["t"])}
        )
    assert sorted(tp for tps in result.values() for tp in tps) == [("t", 0), ("t", 1)]
    skipped = [e for e in logs if e["event"] == "assignor.topics_skipped"]
    assert skipped and skipped[0]["topics"] == ["empty", "unknown"]


@pytest.mark.parametrize("name", assignor_names())
def test_negative_counts_and_lags_are_config_errors(name: str) -> None:
    a = get_assignor(name)
    with pytest.raises(ConfigError, match="partition count"):
        a.assign({"t": -1}, {"a": M(["t"])})
    with pytest.raises(ConfigError, match="lag"):
        a.assign({"t": 1}, {"a": M(["t"])}, {TopicPartition("t", 0): -5})


@pytest.mark.parametrize("name", assignor_names())
def test_empty_group_and_no_topics(name: str) -> None:
    a = get_assignor(name)
    assert a.assign({"t": 3}, {}) == {}
    assert a.assign({}, {"a": M([])}) == {"a": []}
    assert a.assign({"t": 3}, {"a": M(["u"])}) == {"a": []}


def test_assignors_are_stateless_instances() -> None:
    a = get_assignor("sticky")
    assert a is not get_assignor("sticky")
    first = a.assign({"t": 4}, {"x": M(["t"]), "y": M(["t"])})
    a.assign({"t": 9}, {"z": M(["t"])})
    assert a.assign({"t": 4}, {"x": M(["t"]), "y": M(["t"])}) == first


# -- the checker catches what it should ------------------------------------------------------

PARTS = {"t": 4}
TWO = {"a": M(["t"]), "b": M(["t"])}


def tp(p: int) -> TopicPartition:
    return TopicPartition("t", p)


def test_checker_finds_missing_double_and_foreign() -> None:
    found = check_complete(PARTS, TWO, {"a": [tp(0), tp(1)], "b": [tp(1), tp(9)]})
    text = "\n".join(found)
    assert "t-1 is assigned twice" in text
    assert "t-9, which does not exist" in text
    assert "t-2 is subscribed but not assigned" in text
    assert check_complete(PARTS, {"a": M(["u"]), **{"b": TWO["b"]}}, {"a": [tp(0)], "b": []})
    assert check_complete(PARTS, TWO, {"a": [tp(0), tp(1), tp(2), tp(3)]})  # b missing


def test_checker_finds_imbalance() -> None:
    assert check_balanced(PARTS, TWO, {"a": [tp(0), tp(1), tp(2)], "b": [tp(3)]})
    assert not check_balanced(PARTS, TWO, {"a": [tp(0), tp(1)], "b": [tp(2), tp(3)]})
    # b cannot take topic u, so a's 3 partitions of u are fine.
    parts = {"t": 1, "u": 3}
    members = {"a": M(["t", "u"]), "b": M(["t"])}
    assert not check_balanced(
        parts, members, {"a": [("u", 0), ("u", 1), ("u", 2)], "b": [("t", 0)]}
    )


def test_checker_finds_needless_moves_and_swaps() -> None:
    members = {
        "a": M(["t"], owned=[tp(0), tp(1)], generation=1),
        "b": M(["t"], owned=[tp(2), tp(3)], generation=1),
    }
    swapped = {"a": [tp(0), tp(2)], "b": [tp(1), tp(3)]}
    assert check_no_swaps(PARTS, members, swapped)
    assert check_sticky(PARTS, members, {"a": [tp(0)], "b": [tp(1), tp(2), tp(3)]})
    with pytest.raises(AssertionError, match="swap"):
        assert_valid(PARTS, members, swapped, sticky=True)
    assert_valid(PARTS, members, {"a": [tp(0), tp(1)], "b": [tp(2), tp(3)]}, sticky=True)
