"""``groupkit describe`` and ``groupkit list`` on the real broker: the columns of
``kafka-consumer-groups --describe`` and groupkit's own, the ``--members`` and ``--state`` views,
``--json`` for each, the groups of a control topic with their state, and bad input.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KTP

from groupkit import GroupConsumer
from groupkit.cli import main
from groupkit.dev.harness import wait_for
from groupkit.runtime.describe import PARTITION_COLUMNS, describe_group, render
from tests.conftest import unique_name
from tests.groupharness import pump


@pytest.fixture
def describe(conf: dict[str, Any], bootstrap: str) -> list[str]:
    """``groupkit describe``'s arguments for the group of ``conf``."""
    return ["describe", "--bootstrap-servers", bootstrap, "--group", conf["group.id"],
            "--control-topic", conf["groupkit.control.topic"]]  # fmt: skip


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


#: CreateTime of the first record of ``running``'s topic: a minute and a half ago
BASE_MS = int(time.time() * 1000) - 90_000


def _time_lag(partition: int) -> float:
    """Direct measurement: now − CreateTime of ``running``'s record at offset 5."""
    return time.time() - (BASE_MS + (10 + partition) * 1000) / 1000


@pytest.fixture
def running(
    conf: dict[str, Any],
    topic_factory: Callable[..., str],
    consumers: list[GroupConsumer],
    bootstrap: str,
) -> tuple[str, list[GroupConsumer], str]:
    """A stable group of two members (client ids c0, c1) on a 2-partition topic of 15 records
    each, committed at 5 on both partitions; a second group on the same control topic that
    has left (closed). Record ``i`` (of partition ``i % 2``) has CreateTime :data:`BASE_MS`
    + ``i`` s, so offset 5 of partition ``p`` is record ``10 + p``."""
    topic = topic_factory(partitions=2, config={"message.timestamp.type": "CreateTime"})
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        p.produce(topic, value=b"x", partition=i % 2, timestamp=BASE_MS + i * 1000)
    assert p.flush(10) == 0
    # latest: nothing is read, so the lag stays what the commit below leaves
    members = [GroupConsumer({**conf, "auto.offset.reset": "latest", "client.id": f"c{i}"})
               for i in range(2)]  # fmt: skip
    consumers.extend(members)
    for c in members:
        c.subscribe([topic])
    pump(members, lambda: all(len(c.assignment()) == 1 for c in members), 30, "one each")
    for c in members:
        (tp,) = c.assignment()
        c.commit(offsets=[KTP(topic, tp.partition, 5)], asynchronous=False)
    wait_for(lambda: describe_group(conf, with_lag=False)["state"] == "Stable", 30, "Stable")
    gone_group = unique_name("gone")
    gone = GroupConsumer({**conf, "group.id": gone_group})
    gone.subscribe([topic])
    pump([gone, *members], lambda: bool(gone.assignment()), 30, "the other group's member")
    gone.close()
    return topic, members, gone_group


def test_describe_shows_kafka_columns_then_groupkits(
    conf: dict[str, Any], running: tuple[str, list[GroupConsumer], str], describe: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    topic, members, _gone = running
    base = describe
    code, out, _ = _cli(capsys, *base)
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == list(PARTITION_COLUMNS)
    owner = {c.assignment()[0].partition: c for c in members}
    host = socket.gethostname()
    assert len(rows) == 2
    for row in rows:
        cells = row.split()
        part = int(cells[2])
        c = owner[part]
        leader = "*" if c.is_leader else None
        expect = [conf["group.id"], topic, str(part), "5", "15", "10", c.member_id, host,
                  f"c{members.index(c)}"]  # fmt: skip
        assert cells[:9] == expect, row
        assert float(cells[9]) == pytest.approx(_time_lag(part), abs=1.0), row
        assert cells[10] == str(c.generation), row
        assert cells[11:] == ([leader] if leader else []) + ["owned", "-"], row

    code, out, _ = _cli(capsys, *base, "--json")
    assert code == 0
    desc = json.loads(out)
    assert desc["state"] == "Stable" and desc["total_lag"] == 20
    by_part = {r["partition"]: r for r in desc["partitions"]}
    for part, c in owner.items():
        r = by_part[part]
        assert (r["current_offset"], r["log_end_offset"], r["lag"]) == (5, 15, 10)
        assert (r["consumer_id"], r["host"], r["client_id"]) == (
            c.member_id, host, f"c{members.index(c)}")  # fmt: skip
        assert r["generation"] == c.generation and r["leader"] == c.is_leader
        assert r["state"] == "owned" and r["instance_id"] is None
        assert r["time_lag"] == pytest.approx(_time_lag(part), abs=1.0)
    # the JSON's null is the table's '-'
    desc["partitions"][0]["time_lag"] = None
    row = render(desc).splitlines()[1].split()
    assert row[2] == str(desc["partitions"][0]["partition"]) and row[9] == "-"


def test_describe_members_and_state_views(
    conf: dict[str, Any], running: tuple[str, list[GroupConsumer], str], describe: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    _topic, members, _gone = running
    base = describe
    code, out, _ = _cli(capsys, *base, "--members")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split()[:5] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    assert sorted(r.split()[1] for r in rows) == sorted(c.member_id for c in members)
    code, out, _ = _cli(capsys, *base, "--members", "--json")
    got = {m["member_id"]: m for m in json.loads(out)}
    for i, c in enumerate(members):
        m = got[c.member_id]
        assert (m["client_id"], m["live"], m["leader"], m["lag"]) == (
            f"c{i}", True, c.is_leader, 10)  # fmt: skip
        (tp,) = c.assignment()
        assert m["time_lag"] == pytest.approx(_time_lag(tp.partition), abs=1.0)

    code, out, _ = _cli(capsys, *base, "--state")
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:5] == [
        "GROUP", "CONTROL-PARTITION", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]  # fmt: skip
    assert row.split()[2:5] == ["cooperative-sticky", "Stable", "2"]
    code, out, _ = _cli(capsys, *base, "--state", "--json")
    state = json.loads(out)
    leader = next(c for c in members if c.is_leader)
    assert state["state"] == "Stable" and state["members"] == 2
    assert state["leader"] == leader.member_id and state["generation"] == leader.generation


def test_list_shows_each_group_of_the_control_topic_with_its_state(
    conf: dict[str, Any], running: tuple[str, list[GroupConsumer], str], bootstrap: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    _topic, members, gone = running
    base = ["list", "--bootstrap-servers", bootstrap,
            "--control-topic", conf["groupkit.control.topic"]]  # fmt: skip
    code, out, _ = _cli(capsys, *base, "--json")
    assert code == 0
    groups = {g["group"]: g for g in json.loads(out)}
    assert set(groups) == {conf["group.id"], gone}
    live = groups[conf["group.id"]]
    assert (live["state"], live["members"], live["generation"]) == (
        "Stable", 2, members[0].generation)  # fmt: skip
    assert (groups[gone]["state"], groups[gone]["members"]) == ("Empty", 0)
    code, out, _ = _cli(capsys, *base)
    header, *rows = out.splitlines()
    assert header.split() == ["GROUP", "STATE", "#MEMBERS", "GENERATION", "CONTROL-PARTITION"]
    assert sorted(r.split()[:3] for r in rows) == sorted(
        [[conf["group.id"], "Stable", "2"], [gone, "Empty", "0"]])  # fmt: skip


def test_bad_input_is_a_clear_error_with_exit_code_2(
    conf: dict[str, Any], running: tuple[str, list[GroupConsumer], str], bootstrap: str,
) -> None:  # fmt: skip
    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "groupkit.cli", *argv],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip

    ctl = conf["groupkit.control.topic"]
    res = run("describe", "--bootstrap-servers", bootstrap, "--group", "nobody-here",
              "--control-topic", ctl)  # fmt: skip
    assert res.returncode == 2 and not res.stdout
    assert "group 'nobody-here' not found" in res.stderr
    missing = unique_name("no-ctl")
    for argv in (("describe", "--group", conf["group.id"]), ("list",)):
        res = run(*argv, "--bootstrap-servers", bootstrap, "--control-topic", missing)
        assert res.returncode == 2 and not res.stdout, res
        assert f"control topic {missing!r} does not exist" in res.stderr
