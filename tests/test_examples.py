"""The examples/ scripts, each run as its own process against the session's broker.

Each test produces records, runs an example as a user would (``python examples/X.py ...``) and
checks what it promises: every record handled exactly once and committed, the custom assignor's
placement, the metrics endpoint, and a clean exit (status 0) on its own or on SIGTERM.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from groupkit import MemberSubscription, TopicPartition
from groupkit.assignors import unregister_assignor
from groupkit.dev.harness import wait_for
from tests.conftest import unique_name
from tests.groupharness import committed_offsets

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parent.parent


class Example:
    """One example process; its output (stdout and stderr) is collected line by line."""

    def __init__(self, script: str, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / script), *args],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def starting(self, prefix: str) -> list[str]:
        """The lines that start with ``prefix``, without it."""
        return [line[len(prefix) :] for line in list(self.lines) if line.startswith(prefix)]

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_exit(self, timeout: float = 30) -> int:
        """Wait for the process to end (and its output to be read); its exit status."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout}s:\n{self.output()}") from None
        self._reader.join(5)
        return code

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, as a service manager stops it; the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def run_example() -> Iterator[Callable[..., Example]]:
    """``run_example("basic.py", "--topic", t, ...)``; whatever is still running is killed."""
    started: list[Example] = []

    def run(script: str, *args: str) -> Example:
        started.append(Example(script, *args))
        return started[-1]

    yield run
    for e in started:
        e.kill()


def produce(bootstrap: str, topic: str, partitions: int, n: int) -> set[str]:
    """``n`` records ``v0``, ``v1``... spread over every partition; their values."""
    producer = Producer({"bootstrap.servers": bootstrap})
    values = [f"v{i}" for i in range(n)]
    for i, v in enumerate(values):
        producer.produce(topic, v.encode(), partition=i % partitions)
    assert producer.flush(30) == 0
    return set(values)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offset of each partition (-1001: none)."""
    return list(committed_offsets(bootstrap, group, topic, partitions).values())


def records(example: Example) -> list[str]:
    """The values of the ``record <tp>@<offset> <value>`` lines, in order."""
    return [line.split(" ", 1)[1] for line in example.starting("record ")]


def common(bootstrap: str, group: str, topic: str) -> list[str]:
    return ["--bootstrap-servers", bootstrap, "--group", group, "--topic", topic]


@pytest.mark.parametrize("stop", ["max-records", "sigterm"])
@pytest.mark.parametrize("script", ["basic.py", "asyncio_worker.py"])
def test_worker_handles_every_record_once_and_commits(
    script: str,
    stop: str,
    bootstrap: str,
    topic_factory: Callable[..., str],
    run_example: Callable[..., Example],
) -> None:
    topic, group = topic_factory(partitions=3), unique_name("g")
    values = produce(bootstrap, topic, 3, 30)
    limit = ["--max-records", "30"] if stop == "max-records" else []
    worker = run_example(script, *common(bootstrap, group, topic), *limit)
    if stop == "sigterm":
        wait_for(lambda: len(records(worker)) >= 30, 30, f"30 records:\n{worker.output()}")
        assert worker.stop() == 0, worker.output()
    else:
        assert worker.wait_exit() == 0, worker.output()
    assert sorted(records(worker)) == sorted(values), worker.output()
    assert sorted(p for line in worker.starting("assigned: ") for p in line.split()) == [
        f"{topic}-{p}" for p in range(3)
    ]
    # Closing revoked everything (on_revoke ran and committed): a restart would start at the end.
    assert sorted(p for line in worker.starting("revoked: ") for p in line.split()) == [
        f"{topic}-{p}" for p in range(3)
    ]
    assert worker.starting("done: ") == ["30 records"]
    assert committed(bootstrap, group, topic, 3) == [10, 10, 10]


def owned(example: Example) -> set[str]:
    """What the example owns now, from its ``assigned:`` / ``revoked:`` lines."""
    mine: set[str] = set()
    for line in list(example.lines):
        kind, _, parts = line.partition(": ")
        if kind == "assigned":
            mine |= set(parts.split())
        elif kind in ("revoked", "lost"):
            mine -= set(parts.split())
    return mine


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_capacity_assignor_is_proportional() -> None:
    try:
        assignor = load_example("custom_assignor.py").CapacityAssignor()
    finally:  # importing it registered it: the registry test lists the built-in ones only
        unregister_assignor("capacity")
    members = {
        "b": MemberSubscription(["t", "u"], capacity=3),
        "a": MemberSubscription(["t"], capacity=1),
    }
    assert assignor.assign({"t": 8, "u": 2}, members) == {
        "a": [TopicPartition("t", p) for p in (0, 1)],
        "b": [TopicPartition("t", p) for p in range(2, 8)]
        + [TopicPartition("u", 0), TopicPartition("u", 1)],
    }
    # 7 by 1:1:1 -> 2.33 each; the one left over goes to the first member by id.
    three = {m: MemberSubscription(["t"]) for m in "xyz"}
    assert [len(v) for v in assignor.assign({"t": 7}, three).values()] == [3, 2, 2]


def test_custom_assignor_places_by_capacity_in_a_group_of_two(
    bootstrap: str, topic_factory: Callable[..., str], run_example: Callable[..., Example]
) -> None:
    topic, group = topic_factory(partitions=8), unique_name("g")
    every = {f"{topic}-{p}" for p in range(8)}
    small = run_example("custom_assignor.py", *common(bootstrap, group, topic), "--capacity", "1")
    wait_for(lambda: owned(small) == every, 30, f"one member owning all:\n{small.output()}")
    big = run_example("custom_assignor.py", *common(bootstrap, group, topic), "--capacity", "3")

    def placed() -> bool:
        mine, theirs = owned(small), owned(big)
        return len(mine) == 2 and len(theirs) == 6 and mine | theirs == every

    wait_for(placed, 30, f"2 + 6 partitions:\n{small.output()}\n---\n{big.output()}")
    # The ranges are contiguous: whichever member id sorts first has the low partitions.
    assert sorted(owned(small)) in ([f"{topic}-0", f"{topic}-1"], [f"{topic}-6", f"{topic}-7"])
    big.proc.send_signal(signal.SIGTERM)
    assert small.stop() == 0, small.output()
    assert big.wait_exit() == 0, big.output()


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """``{(sample name, labels): value}`` of groupkit's series at ``url``."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("groupkit_")
    }


def test_metrics_endpoint_serves_groupkit_metrics(
    bootstrap: str, topic_factory: Callable[..., str], run_example: Callable[..., Example]
) -> None:
    topic, group = topic_factory(partitions=2), unique_name("g")
    produce(bootstrap, topic, 2, 20)
    worker = run_example("metrics.py", *common(bootstrap, group, topic), "--metrics-port", "0")
    wait_for(lambda: len(worker.starting("record ")) == 20, 30, f"20 records:\n{worker.output()}")
    [url] = worker.starting("metrics: ")
    member = {("group", group)}
    last: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}

    def value(name: str, **labels: str) -> float | None:
        return last.get((name, frozenset(member | set(labels.items()))))

    def settled() -> bool:
        # Lag falls to 0 once auto-commit (every 5 s by default) has committed the 20 records.
        nonlocal last
        last = {k: v for k, v in scrape(url).items() if ("group", group) in k[1]}
        if not last:
            return False
        member_id = dict(next(iter(last))[1])["member"]
        member.add(("member", member_id))
        return (
            value("groupkit_records_consumed_total", topic=topic) == 20
            and value("groupkit_consumergroup_assigned_partitions") == 2
            and value("groupkit_consumergroup_is_leader") == 1
            and value("groupkit_consumergroup_lag_sum") == 0
            and all(
                value("groupkit_consumergroup_committed_offset", topic=topic, partition=str(p))
                == 10
                for p in range(2)
            )
        )

    wait_for(settled, 30, "the metrics of 20 records consumed and committed")
    assert value("groupkit_partitions_assigned_total") == 2, last
    assert worker.stop() == 0, worker.output()
    # The library started no server of its own: the example's was the only one, now shut.
    with pytest.raises(OSError):
        scrape(url)
