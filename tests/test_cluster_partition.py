"""A member cut off from the brokers while its process runs, on the session's 3-broker ``cluster``,
through the fault proxy (``groupkit.dev.proxy``).

A group of three member processes reads an RF-3 topic while a keyed producer writes. Member
``w0`` bootstraps through the proxy, so every connection of its four clients goes through it
(``client.id`` ``w0`` for the data consumer, ``w0.control-reader``, ``w0.control-writer``,
``w0.admin``); the other members and the producer talk to the brokers directly. Then, for longer
than a session, the proxy holds (as an iptables DROP would) the traffic of:

- every client of ``w0``: cut off both ways;
- only its control producer: it can read but not write (its heartbeats stop landing);
- only its consumers (control reader and data consumer): it can write but not read (its
  heartbeats land, but it cannot see them, so it cannot know its session holds);
- one direction of every client of ``w0``: its requests reach the brokers but no answer comes
  back (``answers-lost``: its heartbeats land, unacknowledged, and it reads nothing).

Each case must show, within session timeout + ``MARGIN_S`` of the cut: ``w0`` reports everything
it owned lost (it fenced itself), the other two own and consume every partition, and no
partition is owned by two members at once (audited at the end, over the whole run, ``w0``
included: it keeps running throughout). While cut off and fenced, every commit ``w0`` tries is
refused as fenced. After the heal ``w0`` rejoins and the group is whole again within session
timeout + ``MARGIN_S``; finally ``tests.chaos.audit``: 0 lost records, duplicates only on
partitions ``w0`` owned when it was cut off.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupkit.dev.harness import MemberProcess, wait_for
from groupkit.dev.proxy import FaultProxy
from tests.conftest import KafkaBackend
from tests.groupharness import CUTS, cut_pattern
from tests.test_cluster_faults import (
    MARGIN_S,
    SESSION_MS,
    Run,
    assert_clean,
    local_cluster,
    running_group,
)


@pytest.fixture
def proxy(cluster: KafkaBackend) -> Iterator[FaultProxy]:
    lc = local_cluster(cluster)
    with FaultProxy.for_cluster(lc) as p:
        yield p


def fenced_after(w: MemberProcess, since: float) -> float:
    return max(f["t"] for f in w.facts() if f["e"] == "lost" and f["t"] > since) - since


def granted_after(run: Run, w: MemberProcess, since: float) -> float:
    return max(f["t"] for o in run.group.members.values() if o is not w for f in o.facts()
               if f["e"] == "assign" and f["t"] > since) - since  # fmt: skip


#: case -> (the clients held, as a groupharness.CUTS kind; the direction held)
CASES = {kind: (kind, "both") for kind in CUTS} | {"answers-lost": ("both-ways", "down")}


@pytest.mark.parametrize("case", list(CASES))
def test_member_cut_off_then_healed(
    case: str, cluster: KafkaBackend, proxy: FaultProxy, tmp_path: Path
) -> None:
    lc = local_cluster(cluster)
    with running_group(lc, tmp_path, first_via=lc.proxy_bootstrap) as run:
        w = run.group.members["w0"]
        # Every client of w0 really goes through the proxy (and nobody else's does).
        seen = set(proxy.clients())
        assert {"w0", "w0.control-reader", "w0.control-writer"} <= seen, seen
        assert all(c is not None and c.startswith("w0") for c in seen), seen
        owned = w.owned()
        assert owned
        run.dup_allowed |= owned  # what it processed but could not commit is read again
        lost_before = len(w.events("lost"))

        t0 = time.monotonic()
        clients, direction = CASES[case]
        cut = proxy.cut(direction, cut_pattern(clients, "w0"))  # type: ignore[arg-type]
        try:
            wait_for(lambda: run.group.taken_over(w, run.parts, t0), run.session_s + MARGIN_S,
                     f"the others to take over w0's partitions ({case})")  # fmt: skip
        except AssertionError as e:
            raise AssertionError(f"{e}: {run.group.describe()}") from None
        run.stable_after[f"cut {case}"] = round(time.monotonic() - t0, 2)
        assert set(w.events("lost")[lost_before:]) >= owned, "w0 did not fence itself"
        print(f"{case}: w0 lost its partitions {fenced_after(w, t0):.2f}s after the cut, the "
              f"others owned them all {granted_after(run, w, t0):.2f}s after")  # fmt: skip
        assert w.alive

        # A fenced member's commits are refused (by groupkit, before anything is sent).
        facts = len(w.facts())
        w.send("commit")
        wait_for(lambda: any(f["e"] == "commit_done" for f in w.facts()[facts:]), 30,
                 "w0 to try its commits")  # fmt: skip
        tries = [f for f in w.facts()[facts:] if f["e"] in ("committed", "commit_refused")]
        assert tries, "w0 processed nothing to commit"
        assert all(f["e"] == "commit_refused" and f["fenced"] for f in tries), tries

        proxy.heal(cut)
        t1 = time.monotonic()
        run.stable(f"heal {case}", t1)
        assert w.owned(), "w0 did not rejoin"
        report = run.finish()
    assert_clean(report)
    assert all(t <= SESSION_MS / 1000 + MARGIN_S for t in run.stable_after.values())
