"""The protocol core stays readable a module at a time: none is over 900 lines.

A module that grows past the cap holds more than one job; split it by job (as state.py's replay,
ownership.py's derivations and snapshot.py's conversion are), rather than raise the cap.
"""

from __future__ import annotations

from pathlib import Path

import groupkit.protocol

MAX_LINES = 900


def test_no_protocol_module_is_over_the_cap() -> None:
    root = Path(groupkit.protocol.__file__).parent
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in root.glob("*.py")}
    assert len(sizes) > 10  # every module was found
    assert {n: s for n, s in sizes.items() if s > MAX_LINES} == {}
