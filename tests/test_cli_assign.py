"""``groupkit assign``: JSON in, JSON out, exit 2 and one line on bad input."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from groupkit.cli import main


def run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: str, *args: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(["assign", *args])
    out, err = capsys.readouterr()
    return code, out, err


DOC = {
    "partitions": {"t0": 3},
    "members": {"C0": {"topics": ["t0"]}, "C1": {"topics": ["t0"], "owned": [], "generation": 4}},
    "lags": {"t0": [100000, 50000, 60000]},
}


def test_lag_example_through_the_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(monkeypatch, capsys, json.dumps(DOC), "--assignor", "lag")
    assert code == 0, err
    assert json.loads(out) == {"assignment": {"C0": [["t0", 0]], "C1": [["t0", 1], ["t0", 2]]}}


def test_every_member_present_and_sorted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {
        "partitions": {"b": 2, "a": 2},
        "members": {"z": {"topics": ["a", "b"]}, "y": {"topics": ["a", "b"]}, "x": {"topics": []}},
    }
    code, out, _ = run(monkeypatch, capsys, json.dumps(doc), "--assignor", "sticky")
    assert code == 0
    result = json.loads(out)["assignment"]
    assert sorted(result) == ["x", "y", "z"] and result["x"] == []
    for tps in result.values():
        assert tps == sorted(tps)


def test_owned_and_generation_are_used(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {
        "partitions": {"t": 4},
        "members": {
            "c1": {"topics": ["t"], "owned": [["t", 0], ["t", 1]], "generation": 3},
            "c2": {"topics": ["t"], "owned": [["t", 2], ["t", 3]], "generation": 3},
            "c3": {"topics": ["t"]},
        },
    }
    code, out, _ = run(monkeypatch, capsys, json.dumps(doc), "--assignor", "cooperative-sticky")
    assert code == 0
    assert json.loads(out)["assignment"] == {
        "c1": [["t", 0], ["t", 1]],
        "c2": [["t", 2]],
        "c3": [["t", 3]],
    }


@pytest.mark.parametrize(
    ("stdin", "needle"),
    [
        ("{not json", "invalid JSON"),
        ("[]", "JSON object"),
        ('{"partitions": {"t": 1}}', "'members'"),
        ('{"partitions": {"t": "x"}, "members": {}}', "partition count"),
        ('{"partitions": {"t": -1}, "members": {"a": {"topics": ["t"]}}}', "partition count"),
        ('{"partitions": {"t": 1}, "members": {"a": {}}}', "'topics'"),
        ('{"partitions": {"t": 1}, "members": {"a": {"topics": ["t"], "owned": [1]}}}', "owned"),
        (
            '{"partitions": {"t": 1}, "members": {"a": {"topics": ["t"]}}, "lags": {"t": [-3]}}',
            "lag",
        ),
        ('{"partitions": {"t": 1}, "members": {"a": {"topics": ["t"]}}, "lags": [1]}', "lags"),
        (
            '{"partitions": {"t": 1}, "members": {"a": {"topics": ["t"], "capacity": 0}}}',
            "capacity",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: str, needle: str
) -> None:
    code, out, err = run(monkeypatch, capsys, stdin, "--assignor", "balanced")
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and needle in err, err


def test_unknown_assignor_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(monkeypatch, capsys, json.dumps(DOC), "--assignor", "nope")
    assert code == 2
    assert "known:" in err and "sticky" in err and err.count("\n") == 1


def test_as_a_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "groupkit.cli", "assign", "--assignor", "range"],
        input=json.dumps(DOC),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["assignment"]["C0"] == [["t0", 0], ["t0", 1]]
    bad = subprocess.run(
        [sys.executable, "-m", "groupkit.cli", "assign", "--assignor", "range"],
        input="{",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
