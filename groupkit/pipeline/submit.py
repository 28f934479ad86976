"""``groupkit replay`` as a file for ``spark-submit``, which takes a script path, not a command.

::

    spark-submit --master spark://HOST:7077 \\
        "$(python -c 'import groupkit.pipeline.submit as s; print(s.__file__)')" --input T.jsonl

runs ``groupkit replay --input T.jsonl`` on spark-submit's master. A script's own folder goes
first on ``sys.path``; this one's holds modules of the package (``spark``, ``replay``), so it
is taken off before anything is imported by name.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    from groupkit.cli import main as cli

    return cli(["replay", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    sys.exit(main())
