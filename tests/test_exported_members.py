"""The public surface is curated: these names are what users and DESIGN.md rely on.

Every exception lives in ``groupkit.errors``: a class defined anywhere else in the package fails
here, found both by importing every module (classes built at import time) and by reading every
module's source (classes inside functions, and modules that need an extra that is missing).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import pkgutil
from pathlib import Path

import pytest

import groupkit
import groupkit.assignors
import groupkit.errors
import groupkit.protocol

#: name -> the module that defines it
SURFACE = {
    "GroupConsumer": "groupkit.runtime.consumer",
    "GroupObserver": "groupkit.runtime.hooks",
    "TopicPartition": "groupkit.types",
    "MemberSubscription": "groupkit.types",
    "Assignor": "groupkit.assignors.base",
    "assignor_names": "groupkit.assignors.base",
    "get_assignor": "groupkit.assignors.base",
    "register_assignor": "groupkit.assignors.base",
    **{name: "groupkit.errors" for name in groupkit.errors.__all__},
}


def _exceptions_in(module: object) -> dict[str, type[BaseException]]:
    return {
        k: v for k, v in vars(module).items()
        if isinstance(v, type) and issubclass(v, BaseException)
    }  # fmt: skip


def test_top_level_exports() -> None:
    assert sorted(groupkit.__all__) == sorted([*SURFACE, "__version__"])
    for name, module in SURFACE.items():
        assert getattr(groupkit, name).__module__ == module, name


def test_every_exception_is_exported() -> None:
    defined = {k for k, v in _exceptions_in(groupkit.errors).items()
               if v.__module__ == "groupkit.errors"}  # fmt: skip
    assert defined == set(groupkit.errors.__all__)
    assert defined <= set(groupkit.__all__)
    assert {"ConsumerClosedError", "ControlLoopError", "InputError", "MalformedTelemetry",
            "PipelineError"} <= defined  # fmt: skip


def test_aio_module_exports() -> None:
    """``groupkit.aio`` is a public module of its own (DESIGN.md), not imported by ``groupkit``
    (importing groupkit loads no asyncio consumer)."""
    import groupkit.aio

    assert groupkit.aio.__all__ == ["AIOGroupConsumer"]
    assert groupkit.aio.AIOGroupConsumer.__module__ == "groupkit.aio"
    assert "AIOGroupConsumer" not in groupkit.__all__


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
    errors = list(_exceptions_in(groupkit.errors).values())
    assert len(errors) >= 14
    assert all(issubclass(e, groupkit.errors.GroupkitError) for e in errors)
    assert issubclass(groupkit.errors.ConfigError, ValueError)
    assert issubclass(groupkit.errors.MalformedTelemetry, ValueError)  # was a bare ValueError


def test_the_drawn_tree_matches_the_classes() -> None:
    """Each line of the docstring's tree names a class and, by its indent, its parent."""
    doc = groupkit.errors.__doc__ or ""
    lines = [ln for ln in doc.splitlines() if ln.strip().startswith(("GroupkitError", "├", "└"))
             or "── " in ln]  # fmt: skip
    drawn: dict[str, str | None] = {}
    parents: list[tuple[int, str]] = []  # (column of the name, name)
    for ln in lines:
        col = ln.index("── ") + 3 if "── " in ln else len(ln) - len(ln.lstrip())
        name = ln[col:].split()[0].split("(")[0]
        while parents and parents[-1][0] >= col:
            parents.pop()
        drawn[name] = parents[-1][1] if parents else None
        parents.append((col, name))
    classes = {k: v for k, v in _exceptions_in(groupkit.errors).items() if k in drawn or
               v.__module__ == "groupkit.errors"}  # fmt: skip
    assert set(drawn) == set(classes)
    for name, parent in drawn.items():
        cls = classes[name]
        if parent is None:
            assert cls.__bases__ == (Exception,)
        else:
            assert cls.__bases__[0] is classes[parent], (name, parent)


def test_every_error_says_whether_it_is_retriable_and_usable() -> None:
    for name in groupkit.errors.__all__:
        if name == "GroupkitError":
            continue
        doc = (getattr(groupkit.errors, name).__doc__ or "").lower()
        assert "retriable" in doc, name
        assert "usable" in doc, name


def test_every_exported_name_exists() -> None:
    for module in (groupkit, groupkit.assignors, groupkit.protocol, groupkit.errors):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


# ----------------------------------------------------------------------- no stray exceptions

_KNOWN_EXCEPTIONS = {
    k for k, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
} | set(groupkit.errors.__all__)


def _strays_in_source(source: str) -> list[str]:
    """Classes in ``source`` whose base looks like an exception: a builtin or groupkit one by
    name, or any name ending in Error, Exception or Warning (also through a dotted path)."""
    strays = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            if name in _KNOWN_EXCEPTIONS or name.endswith(("Error", "Exception", "Warning")):
                strays.append(node.name)
                break
    return strays


def test_the_source_scan_finds_strays() -> None:
    src = (
        "import confluent_kafka\n"
        "class A(ValueError): ...\n"
        "class B(GroupkitError): ...\n"
        "def f():\n    class C(confluent_kafka.KafkaException): ...\n"
        "class D(object): ...\n"
        "class E(Protocol): ...\n"
    )
    assert _strays_in_source(src) == ["A", "B", "C"]


def _modules() -> list[str]:
    names = ["groupkit"] + [
        m.name for m in pkgutil.walk_packages(groupkit.__path__, "groupkit.")
    ]  # fmt: skip
    assert len(names) >= 40  # the walk found the package, not an empty directory
    return names


def _source(name: str) -> str:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, name
    return Path(spec.origin).read_text()


@pytest.mark.parametrize("name", _modules())
def test_no_exception_class_outside_errors(name: str) -> None:
    if name == "groupkit.errors":
        return
    assert _strays_in_source(_source(name)) == [], f"{name}: define exceptions in errors.py"
    try:
        module = importlib.import_module(name)
    except ImportError as e:
        # A module that needs a missing extra (PySpark, say) was covered by the source scan;
        # any other import failure is a bug.
        assert e.name is not None and not e.name.startswith("groupkit"), e
        return
    own = [k for k, v in _exceptions_in(module).items() if v.__module__ == name]
    assert own == [], f"{name}: define exceptions in errors.py"


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
