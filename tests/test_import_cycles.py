"""No import cycle inside ``groupkit/``, and metrics at the edge.

An ast walk of every module's imports made when it is imported: module level, including those
inside top-level ``if``/``try``/``with`` blocks, and those under ``if TYPE_CHECKING:`` (a type
that names a module is a dependency on it too), but not those inside functions (made on demand).
A cycle among them means two modules that cannot be read, tested or changed apart.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "groupkit"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(
    name: str, path: Path, known: Iterable[str], type_checking: bool = False, lazy: bool = False
) -> set[str]:
    """The modules of ``known`` that module ``name`` imports at import time (with
    ``type_checking``: also those under ``if TYPE_CHECKING:``; with ``lazy``: also those inside
    functions)."""
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: Iterable[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)  # a submodule
            elif isinstance(node, ast.If):
                if not _is_type_checking(node.test) or type_checking:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, ast.With | ast.ClassDef) or (  # a class body runs at import
                lazy and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            ):
                visit(node.body)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return {m for m in found if m in known and m != name}


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return sorted(out)


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imported(name, path, mods, type_checking=True) for name, path in mods.items()}


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_walk_sees_imports_of_every_kind() -> None:
    g = _graph()
    assert len(g) > 30  # every module was found
    assert "groupkit.runtime.coordinator" in g["groupkit.runtime.consumer"]  # from-import
    assert "groupkit.protocol.records" in g["groupkit.runtime.handoff"]


def test_no_import_cycle_in_groupkit() -> None:
    assert cycles(_graph()) == []


def test_metrics_sit_at_the_edge() -> None:
    """Metrics read a member through its probe, never the consumer (not even for types), and
    nothing below the edge imports them when it is imported."""
    mods = _modules()
    metrics = _imported(
        "groupkit.metrics", mods["groupkit.metrics"], mods, type_checking=True, lazy=True
    )
    assert "groupkit.runtime.consumer" not in metrics
    assert "groupkit.runtime.probe" in metrics
    core = ("groupkit.runtime", "groupkit.protocol", "groupkit.assignors", "groupkit.types")
    for name, path in mods.items():
        if name.startswith(core):
            assert "groupkit.metrics" not in _imported(name, path, mods), name


#: the layers, lowest first: a module may import its own layer and the ones below, never above
#: (README, "The map"). Imports inside functions and for types count too: a pure layer that
#: reaches up, even lazily, is no longer pure.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("groupkit.errors", "groupkit.types", "groupkit.log", "groupkit.cache"),
    # the assignors, and Burrow's lag status beside them: pure functions of values
    ("groupkit.assignors", "groupkit.lagstatus"),
    ("groupkit.protocol",),
    # the simulator and other test tools: protocol and assignors, never the runtime
    ("groupkit.testing",),
    ("groupkit.runtime",),
    ("groupkit.metrics", "groupkit.pipeline", "groupkit.dev", "groupkit.cli", "groupkit"),
)


def _layer(name: str) -> int:
    best, depth = len(LAYERS), -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and len(p) > depth:
                best, depth = i, len(p)
    return best


def test_layers_import_only_downwards() -> None:
    mods = _modules()
    up = []
    for name, path in mods.items():
        for dep in _imported(name, path, mods, type_checking=True, lazy=True):
            if _layer(dep) > _layer(name) and dep != "groupkit":
                up.append(f"{name} -> {dep}")
    assert up == [], up


def test_the_pure_layers_import_no_kafka_client() -> None:
    """The protocol and the assignors run without a broker (simulator, hypothesis, Spark)."""
    for name, path in _modules().items():
        if _layer(name) <= _layer("groupkit.protocol"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
            assert not any(m.split(".")[0] == "confluent_kafka" for m in names), name


def test_the_product_never_imports_its_test_tools() -> None:
    """``groupkit.testing`` ships for users' tests; no module of the product depends on it."""
    mods = _modules()
    for name, path in mods.items():
        if _layer(name) != _layer("groupkit.testing"):
            assert not any(
                _layer(d) == _layer("groupkit.testing")
                for d in _imported(name, path, mods, type_checking=True)
            ), name
