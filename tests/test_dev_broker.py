"""``groupkit broker``: the local broker's life cycle and its errors on bad set-ups."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from groupkit.dev import broker as dev_broker
from groupkit.dev.harness import wait_for
from groupkit.errors import DevBrokerError


def _groupkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "groupkit.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


def test_start_status_stop_and_crash_detection(tmp_path: Path) -> None:
    state = tmp_path / "broker"
    default_free = dev_broker.port_is_free(dev_broker.DEFAULT_PORT)
    start = _groupkit("broker", "start", "--dir", str(state))
    assert start.returncode == 0, start.stderr
    assert "bootstrap.servers=127.0.0.1:" in start.stdout
    # 9092, where the examples look, when it was free; else a free port, and a word on it.
    on_default = f"bootstrap.servers=127.0.0.1:{dev_broker.DEFAULT_PORT}\n" in start.stdout
    assert on_default == default_free, (default_free, start.stdout)
    assert ("is taken" in start.stderr) == (not default_free), start.stderr
    try:
        status = _groupkit("broker", "status", "--dir", str(state))
        assert status.returncode == 0
        assert status.stdout.startswith("running:")
        # A second start on the same folder is refused, naming the running broker.
        again = _groupkit("broker", "start", "--dir", str(state))
        assert again.returncode == 1
        assert "already runs" in again.stderr

        # kill -9 the broker behind the CLI's back: status must call it crashed, not running.
        pid = int((state / "broker.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        broker = dev_broker.LocalBroker(state)
        # The pid may linger a moment as it dies.
        wait_for(lambda: broker.status().state == "crashed", 10, "the broker to be seen crashed")
        crashed = _groupkit("broker", "status", "--dir", str(state))
        assert crashed.returncode == 1 and crashed.stdout.startswith("crashed:")
        stop = _groupkit("broker", "stop", "--dir", str(state))
        assert "already exited" in stop.stdout
        assert _groupkit("broker", "status", "--dir", str(state)).stdout.startswith("stopped")
    finally:
        _groupkit("broker", "stop", "--dir", str(state))


def test_start_falls_back_to_a_free_port_when_9092_is_taken(tmp_path: Path) -> None:
    state = tmp_path / "broker"
    with contextlib.ExitStack() as held:
        if dev_broker.port_is_free(dev_broker.DEFAULT_PORT):  # else something else holds it
            s = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", dev_broker.DEFAULT_PORT))
            s.listen()
        start = _groupkit("broker", "start", "--dir", str(state))
    try:
        assert start.returncode == 0, start.stderr
        (line,) = [x for x in start.stdout.splitlines() if "bootstrap.servers=" in x]
        bootstrap = line.split("bootstrap.servers=", 1)[1]
        assert bootstrap.startswith("127.0.0.1:")
        assert bootstrap != f"127.0.0.1:{dev_broker.DEFAULT_PORT}"
        assert f"port {dev_broker.DEFAULT_PORT} is taken" in start.stderr
        assert bootstrap in start.stderr  # the address clients must use instead
        status = _groupkit("broker", "status", "--dir", str(state))
        assert status.stdout.startswith(f"running: bootstrap {bootstrap} "), status.stdout
    finally:
        _groupkit("broker", "stop", "--dir", str(state))


def test_fetch_resolves_every_tested_version() -> None:
    fetch = _groupkit("broker", "fetch")
    assert fetch.returncode == 0, fetch.stderr
    for version in dev_broker.TESTED_KAFKA_VERSIONS:
        assert f"Apache Kafka {version} jars in " in fetch.stdout
        assert any(dev_broker.kafka_home(version).glob("lib/kafka_2.13-*.jar"))


def test_clean_stop(tmp_path: Path) -> None:
    broker = dev_broker.LocalBroker(tmp_path / "b")
    bootstrap = broker.start()
    assert broker.status().state == "running"
    assert broker.status().bootstrap == bootstrap
    assert broker.stop() is True
    assert broker.status().state == "stopped"
    assert "shut down completed" in broker.log_path.read_text() or "shutting down" in (
        broker.log_path.read_text().lower()
    )


def test_restart_keeps_data_and_port(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = dev_broker.LocalBroker(tmp_path / "b")
    bootstrap = broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("kept", 2, 1)])["kept"].result(timeout=30)
        broker.kill()
        assert broker.start(fresh=False) == bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        md = admin.list_topics(timeout=30)
        assert "kept" in md.topics and len(md.topics["kept"].partitions) == 2
    finally:
        broker.stop()


def test_missing_java_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no java, no mvn
    with pytest.raises(DevBrokerError, match=r"java not found on PATH: install .*openjdk"):
        dev_broker.java_major_version()


def test_missing_mvn_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GROUPKIT_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DevBrokerError, match=r"mvn not found on PATH: install Maven"):
        dev_broker.ensure_jars()


def test_unknown_kafka_version_fails_resolution_clearly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GROUPKIT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(
        DevBrokerError, match=r"could not resolve org.apache.kafka:kafka_2.13:0.0.1"
    ):
        dev_broker.ensure_jars("0.0.1")


def test_cli_reports_missing_java_without_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path), "GROUPKIT_CACHE": str(tmp_path / "c")}
    res = _groupkit("broker", "start", "--dir", str(tmp_path / "b"), env=env)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert "java not found on PATH" in res.stderr


def test_broker_that_does_not_come_up_shows_the_log_tail(tmp_path: Path) -> None:
    # An invalid setting makes the real broker refuse to start: the error must carry its log.
    broker = dev_broker.LocalBroker(
        tmp_path / "b", extra_properties={"num.network.threads": "not-a-number"}
    )
    with pytest.raises(DevBrokerError) as info:
        broker.start(timeout=60)
    text = str(info.value)
    assert "num.network.threads" in text
    assert broker.status().state in ("stopped", "crashed")
    broker.stop()


def test_cluster_ids_never_look_like_options() -> None:
    ids = {dev_broker.new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
