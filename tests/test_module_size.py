"""No module of ``groupkit/`` is over 900 lines.

A module has one job; past a few hundred lines it usually holds two, and a reader must keep
both in mind to change either. The cap is where a module is split by kind (as ``state.py``'s
mutators and ``ownership.py``'s derivations were), not a target to fill.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "groupkit"
MAX_LINES = 900


def test_no_module_is_over_the_cap() -> None:
    sizes = {
        str(p.relative_to(PACKAGE.parent)): len(p.read_text().splitlines())
        for p in PACKAGE.rglob("*.py")
    }
    assert sizes, "no modules found"
    over = {name: n for name, n in sorted(sizes.items()) if n > MAX_LINES}
    assert over == {}, f"split these by job (at most {MAX_LINES} lines each): {over}"
