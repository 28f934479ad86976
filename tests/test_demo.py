"""The demo's pieces that need no broker: the skewed load, the table, the command line."""

from __future__ import annotations

import pytest

from groupkit.cli import build_parser
from groupkit.dev.demo import DEMO_LOAD_INTERVAL_MS, MemberView, load_interval_ms, render
from groupkit.dev.demo_worker import zipf_weights


def test_zipf_weights_make_partition_zero_hottest() -> None:
    w = zipf_weights(12, 1.0)
    assert sum(w) == pytest.approx(1.0)
    assert w == sorted(w, reverse=True) and w[0] == pytest.approx(12 * w[11])
    assert zipf_weights(4, 0.0) == [0.25] * 4  # no skew


def test_table_shows_members_partitions_lag_and_rebalances() -> None:
    views = [
        MemberView("w0", "w0-ab-1", "127.0.0.1:9301", 7, True, {0: 1234, 3: 5}, 1239, 80.0, 3, 0,
                   ok=True),
        MemberView("w1", "w1-ab-2", "127.0.0.1:9302", 7, False, {1: 0, 2: None}, 0, 42.0,
                   ok=True),
        MemberView("w2", address="127.0.0.1:9303"),
    ]  # fmt: skip
    rebalance = {"event": "rebalance", "timestamp": "2026-01-01T10:11:12Z", "generation": 7,
                 "protocol": "cooperative", "reason": "membership_changed", "moved": 3,
                 "revoked": 3, "duration_ms": 41.5, "outcome": "completed"}  # fmt: skip
    text = render(["header"], views, [rebalance], ["10:11:10 adding member w2"])
    lines = text.splitlines()
    row0 = next(line for line in lines if line.startswith("w0 "))
    assert "*" in row0 and "0(1.2k) 3(5)" in row0 and "127.0.0.1:9301" in row0
    assert "1(0) 2(?)" in next(line for line in lines if line.startswith("w1 "))
    assert "starting or unreachable" in next(line for line in lines if line.startswith("w2 "))
    assert "group lag 1239" in text and "live members 3" in text
    assert "10:11:12  gen   7  cooperative membership_changed" in text
    assert "adding member w2" in text


def test_demo_command_line_defaults() -> None:
    args = build_parser().parse_args(["demo"])
    assert (args.members, args.partitions, args.protocol) == (3, 12, "cooperative")
    assert args.bootstrap_servers is None and args.duration == 0
    args = build_parser().parse_args(
        ["demo", "--members", "5", "--assignor", "balanced", "--protocol", "eager"]
    )
    assert (args.members, args.assignor, args.protocol) == (5, "balanced", "eager")


def test_the_demo_follows_the_load_unless_told_otherwise() -> None:
    args = build_parser().parse_args(["demo"])
    assert args.assignor == "balanced" and load_interval_ms(args) == DEMO_LOAD_INTERVAL_MS
    contrast = build_parser().parse_args(["demo", "--assignor", "cooperative-sticky"])
    assert load_interval_ms(contrast) == 0
    eager = build_parser().parse_args(["demo", "--protocol", "eager"])
    assert load_interval_ms(eager) == 0
    given = build_parser().parse_args(["demo", "--load-interval-ms", "5000"])
    assert load_interval_ms(given) == 5000
