"""The rooms stay rooms: the library never imports its development tools (groupkit.dev).

A consumer's process should not load a broker launcher, a fault proxy or a test harness; only
the ``groupkit`` command's ``broker`` and ``demo`` subcommands reach into ``groupkit.dev``, when
they run."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import groupkit

CHECK = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("groupkit.dev"))))
"""


def test_no_library_module_imports_the_dev_tools() -> None:
    names = [m.name for m in pkgutil.walk_packages(groupkit.__path__, "groupkit.")
             if not m.name.startswith("groupkit.dev")]  # fmt: skip
    assert "groupkit.cli" in names and "groupkit.runtime.consumer" in names
    proc = subprocess.run([sys.executable, "-c", CHECK, json.dumps(names)], capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    assert json.loads(proc.stdout) == []
