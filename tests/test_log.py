"""groupkit logs as a library should (groupkit/log.py): silent until the app configures logging.

Each kind of app runs in its own interpreter, so that its logging set-up is the only one: one
that configures nothing, one that uses ``logging``, one that uses structlog, one that calls
``groupkit.log.configure()``. Each makes groupkit log through its real code paths (an assignor
skipping a topic with no partitions, a warning) and through a module logger of the runtime.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest
import structlog

from groupkit import log

#: Events groupkit logs, at each level, from real module loggers; the info one carries group
#: and member as the control loop's events do.
EMIT = """
import groupkit
from groupkit.assignors import MemberSubscription, get_assignor
from groupkit.runtime import consumer, coordinator
get_assignor("range").assign({"t": 1}, {"a": MemberSubscription(["t", "none"])})  # a warning
coordinator._log.info("rebalance", group="orders", member="m1", generation=7, moved=3)
consumer._log.debug("auto_commit.skipped", error="boom")
try:
    raise RuntimeError("the loop broke")
except RuntimeError:
    coordinator._log.exception("control_loop.failed", member="m1")
"""


def _run(setup: str, after: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", setup + EMIT + after], capture_output=True,
                          text=True, check=True, timeout=60)  # fmt: skip


def test_an_app_that_configures_nothing_sees_nothing() -> None:
    out = _run("")
    assert (out.stdout, out.stderr) == ("", "")
    # The NullHandler is what keeps logging's last resort from printing the warnings.
    out = _run("import logging\n", 'print(logging.getLogger("groupkit").handlers)')
    assert out.stdout.strip() == "[<NullHandler (NOTSET)>]" and out.stderr == ""


def test_an_app_that_uses_logging_gets_the_events_with_their_key_values() -> None:
    out = _run(
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout,"
        " format='%(levelname)s %(name)s %(module)s:%(funcName)s %(message)s')\n"
    )
    lines = out.stdout.splitlines()
    assert lines[0] == ("WARNING groupkit.assignors base:validate_input assignor.topics_skipped"
                        " topics=['none'] reason='no partitions'")  # fmt: skip
    assert lines[1] == ("INFO groupkit.runtime <string>:<module> rebalance group=orders"
                        " member=m1 generation=7 moved=3")  # fmt: skip
    assert lines[2] == "ERROR groupkit.runtime <string>:<module> control_loop.failed member=m1"
    assert lines[3] == "Traceback (most recent call last):"  # logging formats the exception
    assert lines[-1] == "RuntimeError: the loop broke"
    assert "auto_commit.skipped" not in out.stdout  # debug: below the app's level
    assert out.stderr == ""


def test_an_app_that_uses_logging_chooses_groupkits_level() -> None:
    out = _run(
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(message)s')\n"
        "logging.getLogger('groupkit').setLevel(logging.DEBUG)\n"
        "logging.getLogger('groupkit.assignors').setLevel(logging.ERROR)\n"
    )
    events = [ln.split()[0] for ln in out.stdout.splitlines() if not ln[:1].isspace()]
    assert events[:3] == ["rebalance", "auto_commit.skipped", "control_loop.failed"]


STRUCTLOG_APP = """
import logging, sys, structlog

def mine(logger, name, event_dict):  # the app's own processor
    event_dict["app"] = "mine"
    return event_dict

shared = [structlog.processors.add_log_level, mine]
structlog.configure(
    processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
    logger_factory=structlog.stdlib.LoggerFactory(),
)
handler = logging.StreamHandler(sys.stdout)
handler.setFormatter(structlog.stdlib.ProcessorFormatter(processors=[
    structlog.stdlib.ProcessorFormatter.remove_processors_meta, *shared,
    structlog.processors.format_exc_info, structlog.processors.JSONRenderer(),
]))
root = logging.getLogger()
root.addHandler(handler)
root.setLevel(logging.INFO)
structlog.get_logger("app").info("app.started", port=8080)
"""


def test_an_app_that_uses_structlog_renders_groupkits_events_its_own_way() -> None:
    out = _run(STRUCTLOG_APP)
    docs = [json.loads(ln) for ln in out.stdout.splitlines()]
    assert [d["event"] for d in docs] == [
        "app.started", "assignor.topics_skipped", "rebalance", "control_loop.failed",
    ]  # fmt: skip
    assert all(d["app"] == "mine" for d in docs)  # the app's processors ran on every event
    assert docs[2] == {"event": "rebalance", "group": "orders", "member": "m1",
                       "generation": 7, "moved": 3, "level": "info", "app": "mine"}  # fmt: skip
    assert docs[1]["topics"] == ["none"] and docs[1]["level"] == "warning"
    assert docs[3]["level"] == "error" and "RuntimeError: the loop broke" in docs[3]["exception"]
    assert out.stderr == ""


def test_structlog_configuration_alone_does_not_route_groupkit() -> None:
    """The documented choice: groupkit's events always go through ``logging``; an app that
    configures only structlog (no logging handler) still hears nothing from groupkit."""
    out = _run(
        "import structlog, sys\n"
        "structlog.configure(processors=[structlog.processors.JSONRenderer()],"
        " logger_factory=structlog.PrintLoggerFactory(sys.stdout))\n"
        "structlog.get_logger().info('app.started')\n"
    )
    assert out.stdout.splitlines() == ['{"event": "app.started"}'] and out.stderr == ""


# --------------------------------------------------------------------------- configure()


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


@pytest.mark.usefixtures("restore_logging")
def test_configure_writes_json_lines() -> None:
    """The format the bench (``GK_BENCH_LOGS``) and the harness workers parse."""
    buf = io.StringIO()
    log.configure(json=True, level="info", stream=buf)
    log.get_logger("groupkit.t", group="g1", member="m1").info("rebalance", generation=3)
    log.get_logger("groupkit.t").debug("hidden")
    structlog.get_logger("app").warning("app.event", n=1)  # the app's own structlog events
    logging.getLogger("other").warning("plain %s", "logging")  # and plain logging's
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [d["event"] for d in lines] == ["rebalance", "app.event", "plain logging"]
    first = lines[0]
    assert list(first)[:5] == ["event", "group", "member", "generation", "level"]
    assert (first["group"], first["member"], first["generation"], first["level"]) == (
        "g1", "m1", 3, "info"
    )  # fmt: skip
    assert first["timestamp"].endswith("Z") and "T" in first["timestamp"]
    assert lines[1]["n"] == 1 and lines[1]["level"] == "warning"
    assert lines[2]["level"] == "warning"


@pytest.mark.usefixtures("restore_logging")
def test_configure_again_replaces_and_debug_level_and_console() -> None:
    first = io.StringIO()
    log.configure(json=True, level="debug", stream=first)
    log.get_logger("groupkit.t").debug("shown", member="m1")
    assert json.loads(first.getvalue())["event"] == "shown"
    buf = io.StringIO()
    log.configure(json=False, stream=buf)
    log.get_logger("groupkit.t").warning("partitions.lost", member="m1")
    assert "partitions.lost" in buf.getvalue() and "member=m1" in buf.getvalue()
    assert first.getvalue().count("\n") == 1  # the first handler was removed
    with pytest.raises(ValueError, match="unknown log level"):
        log.configure(level="loud")


# --------------------------------------------------------------------------- the logger


def test_a_disabled_level_builds_nothing() -> None:
    class Loud:
        def __repr__(self) -> str:
            raise AssertionError("formatted")

        __str__ = __repr__

    logger = logging.getLogger("groupkit.t.disabled")
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        log.get_logger("groupkit.t.disabled").debug("hot", value=Loud())
        assert seen == []
        log.get_logger("groupkit.t.disabled").warning("kept", value=1)
        assert [r.getMessage() for r in seen] == ["kept value=1"]
    finally:
        logger.removeHandler(handler)


def test_bind_and_capture() -> None:
    base = log.get_logger("groupkit.t", group="g")
    with log.capture() as events:
        base.bind(member="m1").info("x", n=1)
        base.debug("y")
    assert events == [
        {"event": "x", "group": "g", "member": "m1", "n": 1, "log_level": "info"},
        {"event": "y", "group": "g", "log_level": "debug"},
    ]
    assert logging.getLogger("groupkit").level == logging.NOTSET  # restored
