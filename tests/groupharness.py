"""A group of ``tests.group_worker`` processes on groupkit's one harness (groupkit.dev.harness),
with what only the tests ask of it: whether the group consumes again after a fault, whether the
others took over from a member cut off, and how to cut one off through the fault proxy.

Every wait here is on a condition (an audit fact, a process state), bounded by a deadline.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from groupkit.dev.harness import TP, AuditLog, Group, MemberProcess, wait_for
from groupkit.runtime.control_topic import partition_for_group

ROOT = Path(__file__).resolve().parent.parent

#: Ways to cut a member off through the fault proxy (groupkit.dev.proxy): what it can
#: still do -> the client.ids to hold, as a pattern of its own client.id (groupkit names its
#: internal clients ``<client.id>.<role>``, the data consumer ``<client.id>``: runtime/config.py).
CUTS = {
    "both-ways": r"{id}(\..+)?",
    "read-not-write": r"{id}\.control-writer",
    "write-not-read": r"{id}(\.control-reader)?",
}


def cut_pattern(kind: str, client_id: str) -> str:
    """The client.id pattern that cuts member ``client_id`` off as ``kind`` (see CUTS)."""
    return CUTS[kind].replace("{id}", re.escape(client_id))


class WorkerGroup(Group[MemberProcess]):
    """Members of one group, each a ``tests.group_worker`` process subscribed at start."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: list[str],
        workdir: Path,
        protocol: str = "cooperative",
        assignor: str = "range",
        session_timeout_ms: int = 3000,
        control_topic: str = "__groupkit",
        extra: dict[str, Any] | None = None,
        worker: str = "tests.group_worker",
    ) -> None:
        """``worker``: the module each member runs (``tests.aio_group_worker``: the asyncio
        flavour, same arguments and audit)."""
        super().__init__(workdir)
        self.worker = worker
        self.bootstrap, self.group, self.topics = bootstrap, group, topics
        self.protocol, self.assignor = protocol, assignor
        self.session_timeout_ms, self.control_topic = session_timeout_ms, control_topic
        self.extra = extra or {}

    def spawn(
        self,
        name: str | None = None,
        topics: Iterable[str] | None = None,
        slow_control_ms: int = 0,
        bootstrap: str | None = None,
        client_id: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> MemberProcess:
        """``bootstrap``: this worker's own (e.g. through a fault proxy); ``client_id``: its
        ``client.id`` (its internal clients append ``.<role>``); ``extra``: config of this
        worker on top of the group's (e.g. its ``group.instance.id``)."""
        name = name or f"w{len(self.members)}"
        audit = self.workdir / f"{name}.jsonl"
        cmd = [
            sys.executable, "-m", self.worker,
            "--bootstrap", bootstrap or self.bootstrap, "--group", self.group,
            "--topics", ",".join(topics or self.topics), "--audit", str(audit),
            "--protocol", self.protocol, "--assignor", self.assignor,
            "--session-timeout-ms", str(self.session_timeout_ms),
            "--heartbeat-ms", str(max(100, self.session_timeout_ms // 10)),
            "--control-topic", self.control_topic,
            "--extra", json.dumps({**self.extra, **(extra or {})}),
            "--slow-control-ms", str(slow_control_ms),
            *(["--client-id", client_id] if client_id else []),
        ]  # fmt: skip
        proc, out = self.popen(name, cmd, ROOT)
        return self.add(MemberProcess(name, proc, AuditLog(audit), out))

    def wait_stable(self, partitions: set[TP], timeout: float = 60) -> float:
        return wait_for(lambda: self.is_stable(partitions), timeout,
                        f"every partition owned once: {self.describe()}")  # fmt: skip

    def consumed_since(self, members: Iterable[MemberProcess], since: float) -> set[TP]:
        """The partitions each of ``members`` owns and has processed a record of after
        ``since``."""
        fresh: set[TP] = set()
        for m in members:
            mine = m.owned()
            for f in m.facts():
                if f["e"] == "msg" and f["t"] > since:
                    tp: TP = (f["tp"][0], f["tp"][1])
                    if tp in mine:
                        fresh.add(tp)
        return fresh

    def consuming_since(self, partitions: set[TP], since: float) -> bool:
        """Stable, and every partition's owner has processed one of its records after ``since``
        (the producer must be writing to every partition)."""
        return self.is_stable(partitions) and self.consumed_since(self.live(), since) >= partitions

    def taken_over(self, w: MemberProcess, partitions: set[TP], since: float) -> bool:
        """``w`` (still running, e.g. cut off) owns nothing, and the other live workers own
        every partition once and have each consumed one of their records after ``since``."""
        if w.owned():
            return False
        others = [o for o in self.live() if o is not w]
        return (self.owned_once(partitions, others)
                and self.consumed_since(others, since) >= partitions)  # fmt: skip

    def stale(self, since: float) -> str:
        """Per live worker: owned partitions without a record processed since ``since``."""
        out = []
        for w in self.live():
            idle = sorted(w.owned() - self.consumed_since([w], since))
            if idle:
                out.append(f"{w.name} owns but has not consumed {idle}")
        return "; ".join(out) or "every owned partition consumed"


def control_partition(admin: AdminClient, group: WorkerGroup) -> tuple[str, int]:
    """The group's partition of its control topic (from the topic's partition count, once the
    topic exists)."""
    ctl = group.control_topic
    wait_for(lambda: ctl in admin.list_topics(timeout=10).topics, 30, f"topic {ctl}")
    count = len(admin.list_topics(ctl, timeout=10).topics[ctl].partitions)
    return ctl, partition_for_group(group.group, count)
