"""The public surface is curated: these names are what users and DESIGN.md rely on."""

from __future__ import annotations

import groupkit
import groupkit.assignors
import groupkit.errors
import groupkit.protocol


def test_top_level_exports() -> None:
    assert sorted(groupkit.__all__) == ["GroupConsumer", "__version__"]
    assert groupkit.GroupConsumer.__module__ == "groupkit.runtime.consumer"


def test_assignor_exports() -> None:
    assert set(groupkit.assignors.__all__) >= {
        "Assignor", "MemberSubscription", "TopicPartition", "assignor_names", "get_assignor",
        "register_assignor",
    }  # fmt: skip
    assert groupkit.assignors.assignor_names() == [
        "balanced", "cooperative-sticky", "fair", "lag", "range", "roundrobin", "sticky",
    ]  # fmt: skip
    # A TopicPartition is a NamedTuple: plain tuples compare equal.
    assert groupkit.assignors.TopicPartition("t", 1) == ("t", 1)


def test_every_error_is_a_groupkit_error() -> None:
    errors = [
        v for v in vars(groupkit.errors).values()
        if isinstance(v, type) and issubclass(v, Exception)
    ]  # fmt: skip
    assert len(errors) >= 8
    assert all(issubclass(e, groupkit.errors.GroupkitError) for e in errors)
    assert issubclass(groupkit.errors.ConfigError, ValueError)


def test_every_exported_name_exists() -> None:
    for module in (groupkit, groupkit.assignors, groupkit.protocol):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def test_importing_starts_nothing_and_configures_nothing() -> None:
    import subprocess
    import sys

    code = (
        "import logging, threading, structlog\n"
        "import groupkit, groupkit.assignors, groupkit.protocol, groupkit.runtime.consumer\n"
        "print(threading.active_count(), len(logging.getLogger().handlers),"
        " structlog.is_configured())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    assert out.stdout.split() == ["1", "0", "False"]
