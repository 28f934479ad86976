"""Where groupkit keeps what it fetches or builds once: Kafka's jars, Spark's connector jars, the
development broker's state and its compiled skewed clock, the demo's files."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$GROUPKIT_CACHE`` or ``~/.cache/groupkit``."""
    env = os.environ.get("GROUPKIT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "groupkit"
