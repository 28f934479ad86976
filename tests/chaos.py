"""Chaos: a group of member processes under random faults, audited for ownership and delivery.

Used by ``tests/test_chaos.py`` (short runs in CI) and by ``make soak``
(``python -m tests.chaos --duration 600``, and ``--brokers 3``). Everything runs on loopback
against a broker (or a three-broker cluster) this run starts itself, so it can stop, kill and
restart it, and every wait is bounded.

1. Start a broker, a topic, a keyed producer and ``members`` worker processes (one of them
   reads its control log slowly), planned by ``assignor`` (groupkit's default,
   ``cooperative-sticky``, unless given).
2. Inject faults, first one of each kind in a fixed order, then at random (seeded) until the
   duration is up: kill -9 a member; freeze a member (SIGSTOP) past its session timeout, then
   continue it (a zombie); kill the leader in the middle of a rebalance; stop and restart the
   broker; start a member whose control-topic reads are delayed; cut a running member off from
   the brokers past its session, then heal it (``partition``: every member talks to the brokers
   through a fault proxy, groupkit.dev.proxy, under its own client.id; the cut is picked
   from ``groupharness.CUTS``: both ways, read but not write, write but not read).
   On a cluster (``brokers=3``, ``groupkit.dev.broker.LocalCluster``; topics with three
   replicas, ``min.insync.replicas`` 2) the broker fault restarts one node, and three more
   faults join: kill -9 the node leading the group's control partition; kill -9 one leading
   data partitions only; and move the control partition's leadership (the leader's controlled
   shutdown, then its restart) while a member is frozen just under its session. One node of
   the cluster runs with its wall clock ``SKEW_S`` ahead (``LocalCluster.restart(
   clock_offset_s=...)``), and the members allow for it (``groupkit.max.clock.skew.ms``): as
   leadership moves, log time jumps back and forth.
3. After each fault, the group must be stable again (every partition owned by exactly one
   running member) within ``session timeout + margin``.
4. At the end: stop the producer, wait until every acknowledged offset was processed, and
   count overlapping ownership between running members (must be 0), lost records (must be 0)
   and duplicates (allowed only on partitions whose owner crashed, froze, or lost its session
   to a broker outage).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from groupkit.dev.broker import LocalBroker, LocalCluster
from groupkit.dev.harness import TP, LoadProducer, MemberProcess, missing, tps, wait_for
from groupkit.dev.proxy import FaultProxy
from groupkit.runtime.admin import create_topic
from groupkit.runtime.config import PROTOCOL_VERSION
from tests.groupharness import CUTS, WorkerGroup, control_partition, cut_pattern

FAULTS = ("kill", "zombie", "kill_leader_mid_rebalance", "broker_restart", "slow_member",
          "partition")  # fmt: skip
CLUSTER_FAULTS = (*FAULTS, "kill_control_leader", "kill_data_leader", "frozen_leader_move")
#: seconds the skewed node of a cluster run is ahead, and the members' allowance for it
SKEW_S = 1
SKEW_ALLOWANCE_MS = 1500


@dataclass
class ChaosReport:
    faults: list[dict[str, object]] = field(default_factory=list)
    produced: int = 0
    processed: int = 0
    lost: int = 0
    duplicates: int = 0
    unexplained_duplicates: list[str] = field(default_factory=list)
    running_overlaps: list[str] = field(default_factory=list)
    zombie_overlaps: int = 0
    zombie_late_records: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        return (
            self.lost == 0
            and not self.running_overlaps
            and not self.unexplained_duplicates
            and not self.zombie_late_records
        )

    def summary(self) -> str:
        return json.dumps(
            {k: v for k, v in self.__dict__.items() if k != "faults"}, indent=2, default=str
        )


def late_records(
    z: MemberProcess, frozen: set[TP], paused_at: float, paused_wall: float = float("-inf")
) -> list[str]:
    """Records of ``frozen`` partitions the zombie was handed after its freeze began without
    having been granted them again: each one is a fencing failure.

    A record *processed* after the freeze may still have been handed out before it (SIGSTOP
    can land between ``consume`` returning a batch and the worker auditing it; no fence can
    take back what was already handed out, which is why a zombie's commits are refused
    instead). A record *produced* after the freeze began (its create time, ``ts``, is later
    than ``paused_wall``) can only have been fetched after the zombie resumed: the fence must
    have stopped it. So only those count (a fact without ``ts`` counts too; without
    ``paused_wall`` every record processed after the freeze counts)."""
    bad = []
    regranted: dict[TP, float] = {}
    for f in z.facts():
        if f["t"] <= paused_at:
            continue
        if f["e"] == "assign":
            for tp in set(tps(f)) & frozen:
                regranted.setdefault(tp, f["t"])
            continue
        if f["e"] != "msg":
            continue
        tp: TP = (f["tp"][0], f["tp"][1])
        if (
            tp in frozen
            and f["t"] < regranted.get(tp, float("inf"))
            and f.get("ts", float("inf")) > paused_wall * 1000
        ):
            bad.append(f"{z.name} processed {tp}@{f['o']}, produced after its freeze")
    return bad


class FaultRun:
    """A group of workers under faults, and what its final audit needs: the partitions on which
    a duplicate is explained (a crash, a freeze, an outage) and the report. The chaos run and the
    cluster fault tests (tests/test_cluster_faults.py, test_cluster_partition.py) are both one.

    ``deadline_from_since``: whether :meth:`stable` allows session + margin from ``since`` (the
    fault: a cluster test's bound) or from the call (the chaos run, whose fault handling may
    itself wait for the group before it asks)."""

    deadline_from_since = False

    def __init__(self, group: WorkerGroup, producer: LoadProducer, parts: set[TP],
                 session_s: float, margin_s: float,
                 log: Callable[[str], None] = print) -> None:  # fmt: skip
        self.group, self.producer, self.parts = group, producer, parts
        self.session_s, self.margin_s, self.log = session_s, margin_s, log
        self.report = ChaosReport()
        #: partitions on which a duplicate is explained by a crash, a freeze or an outage
        self.dup_allowed: set[TP] = set()
        #: what :meth:`stable` waited for -> seconds from its ``since`` to stable
        self.stable_after: dict[str, float] = {}

    def stable(self, after: str, since: float | None = None) -> float:
        """Wait until every partition is owned once and consumed again after ``since`` (default:
        now); return the seconds waited."""
        now = time.monotonic()
        t = now if since is None else since
        timeout = self.session_s + self.margin_s - (now - t if self.deadline_from_since else 0)
        try:
            took = wait_for(lambda: self.group.consuming_since(self.parts, t), max(0.0, timeout),
                            f"the group to own and consume everything after {after}")  # fmt: skip
        except AssertionError as e:
            # Described now, at the deadline (not as the wait began, when after a broker
            # restart every member has just lost everything).
            silent = self.producer.silent_since(t)
            self.group.dump_stacks()
            raise AssertionError(
                f"{e}: {self.group.describe()}; {self.group.stale(t)}; "
                f"no record acknowledged since to partitions {silent}"
            ) from None
        self.stable_after[after] = round(time.monotonic() - t, 2)
        self.log(f"[chaos] stable {took:.2f}s after {after}: {self.group.describe()}")
        return took

    def freeze_through(self, z: MemberProcess, move: Callable[[], object], pause_s: float,
                       what: str, must_fit: bool = True) -> None:  # fmt: skip
        """Freeze ``z`` (SIGSTOP) for ``pause_s``, calling ``move()`` meanwhile; then wait for the
        group to be stable and audit the frozen member's fence (``late_records``).

        ``must_fit``: fail if ``move()`` took longer than the freeze (a test of exactly this
        window); else the freeze just ends when ``move()`` returns."""
        frozen = z.owned()
        self.dup_allowed |= frozen
        paused_at = z.pause()
        paused_wall = time.time()  # records created after this exist only after the freeze
        move()
        left = paused_at + pause_s - time.monotonic()
        assert left > 0 or not must_fit, f"{what}: the move took longer than the freeze"
        if left > 0:
            time.sleep(left)  # the fault itself: a freeze of a fixed length, not a wait
        resumed_at = z.resume()
        self.stable(what, since=resumed_at)
        self.report.zombie_late_records += late_records(z, frozen, paused_at, paused_wall)

    def finish(self) -> ChaosReport:
        """Stop the producer and audit the run (:func:`audit`)."""
        return audit(self.group, self.producer, self.dup_allowed, self.report)


class Chaos(FaultRun):
    def __init__(
        self,
        workdir: Path,
        *,
        members: int = 5,
        partitions: int = 10,
        session_timeout_ms: int = 3000,
        margin_s: float = 20.0,
        seed: int = 7,
        protocol: str = "cooperative",
        assignor: str = "cooperative-sticky",
        brokers: int = 1,
        protocol_version: int | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.workdir = workdir
        self.members = members
        self.partitions = partitions
        self.rng = random.Random(seed)
        # None: the library's default version
        extra: dict[str, object] = (
            {} if protocol_version is None else {"groupkit.protocol.version": protocol_version}
        )
        self.cluster: LocalCluster | None = None
        self.brokers: LocalBroker | LocalCluster
        if brokers > 1:
            from tests.conftest import CLUSTER_PROPERTIES

            self.cluster = LocalCluster(workdir / "cluster", brokers=brokers, proxied=True,
                                        extra_properties=CLUSTER_PROPERTIES)  # fmt: skip
            self.cluster.nodes[-1].clock_offset_s = SKEW_S
            self.bootstrap = self.cluster.start()
            self.brokers = self.cluster
            extra["groupkit.max.clock.skew.ms"] = SKEW_ALLOWANCE_MS
        else:
            self.broker = LocalBroker(workdir / "broker", proxied=True)
            self.bootstrap = self.broker.start()
            self.brokers = self.broker
        self.proxy = FaultProxy.for_cluster(self.brokers).start()
        self.faults = CLUSTER_FAULTS if self.cluster else FAULTS
        self.topic = "chaos"
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})
        # -1: the brokers' default replication factor (3 on the cluster)
        create_topic(self.admin, self.topic, partitions, replication_factor=-1)
        group = WorkerGroup(self.bootstrap, "chaos-group", [self.topic], workdir,
                            protocol=protocol, assignor=assignor,
                            session_timeout_ms=session_timeout_ms, extra=extra)  # fmt: skip
        super().__init__(group, LoadProducer.keyed(self.bootstrap, self.topic, 200),
                         {(self.topic, p) for p in range(partitions)}, session_timeout_ms / 1000,
                         margin_s, log)  # fmt: skip

    # ------------------------------------------------------------------ running

    def run(self, duration_s: float) -> ChaosReport:
        try:
            self.producer.start()
            for i in range(self.members):
                self.spawn(slow_control_ms=150 if i == self.members - 1 else 0)
            self.stable("start")
            end = time.monotonic() + duration_s
            for fault in self.faults:
                self.inject(fault)
            while time.monotonic() < end:
                self.inject(self.rng.choice(self.faults))
            self.finish()
        finally:
            self.producer.stop()
            self.group.stop_all()
            del self.admin  # its handle must not outlive the brokers
            self.proxy.stop()
            if self.cluster is not None:
                self.cluster.stop()
            else:
                self.broker.stop()
        return self.report

    def spawn(self, slow_control_ms: int = 0) -> MemberProcess:
        """A member that talks to the broker through the fault proxy, as client.id its name."""
        name = f"w{len(self.group.members)}"
        return self.group.spawn(name, slow_control_ms=slow_control_ms,
                                bootstrap=self.brokers.proxy_bootstrap, client_id=name)  # fmt: skip

    def running(self) -> list[MemberProcess]:
        return self.group.live()

    def leader(self) -> MemberProcess | None:
        for w in self.running():
            if w.state().get("leader"):
                return w
        return None

    def crash(self, w: MemberProcess) -> None:
        self.dup_allowed |= w.owned()
        w.kill()

    def replace(self, w: MemberProcess, slow_control_ms: int = 0) -> None:
        """kill -9 ``w`` and start a new member in its place: the group keeps its size."""
        self.crash(w)
        self.spawn(slow_control_ms=slow_control_ms)

    def inject(self, fault: str) -> None:
        t0 = time.monotonic()
        extra: dict[str, object] = {}
        victims = [w for w in self.running() if not w.paused]
        self.log(f"[chaos] fault {fault}")
        if fault == "kill":
            self.replace(self.rng.choice(victims))
        elif fault == "zombie":
            z = self.rng.choice(victims)
            self.dup_allowed |= z.owned()
            frozen = z.owned()
            paused_at = z.pause()
            paused_wall = time.time()  # records created after this exist only after the freeze
            # Long enough that the log expires it and the others take its partitions.
            wait_for(lambda: self.group.is_stable(self.parts), self.session_s + self.margin_s,
                     "the others to take over the zombie's partitions")  # fmt: skip
            resumed_at = z.resume()
            self.log(f"[chaos] zombie {z.name} frozen {paused_at:.3f} .. {resumed_at:.3f}")
            wait_for(lambda: set(z.events("lost")) >= frozen or not z.alive, self.margin_s,
                     "the zombie to report its partitions lost")  # fmt: skip
            self.report.zombie_late_records += late_records(z, frozen, paused_at, paused_wall)
        elif fault == "kill_leader_mid_rebalance":
            wait_for(lambda: self.leader() is not None, self.margin_s, "a leader")
            lead = self.leader()
            assert lead is not None
            newcomer = self.spawn()  # its join starts a rebalance...
            wait_for(lambda: any(f["e"] == "started" for f in newcomer.facts()), self.margin_s,
                     "the newcomer to join")  # fmt: skip
            self.crash(lead)  # ...and the leader dies while planning it
        elif fault == "broker_restart" and self.cluster is not None:
            # One node stopped and started again (a rolling restart's step): leaderships move
            # away and back by controlled shutdown; members may lose sessions meanwhile.
            self.dup_allowed |= self.parts
            node = self.rng.randrange(len(self.cluster.nodes))
            self.cluster.node(node).stop()
            self.cluster.restart(node)
            self.producer.renew()
        elif fault == "broker_restart":
            # Every member loses its session while the broker is down: any partition may
            # then be processed again from its last commit.
            self.dup_allowed |= self.parts
            self.broker.stop()
            self.broker.start(fresh=False)
            self.producer.renew()  # the load's client, not the group's (LoadProducer.renew)
            t0 = time.monotonic()  # time to recover is counted from the broker's return
        elif fault == "slow_member":
            self.replace(self.rng.choice(victims), slow_control_ms=300)
        elif fault == "kill_control_leader":
            # No heartbeat lands until the controller fences the dead leader: every member may
            # lose its session, so any partition may be processed again from its last commit.
            self.dup_allowed |= self.parts
            t0 = self.kill_node(self.control_leader())
        elif fault == "kill_data_leader":
            # The control partition stays led: a partition may change hands only if a member
            # misses its session while clients fail over (counted after the run, handed_over).
            ctl = self.control_leader()
            leaders = {self.node_leading(self.topic, p) for p in range(self.partitions)} - {ctl, -1}
            killed_at = time.monotonic()
            t0 = self.kill_node(self.rng.choice(sorted(leaders)) if leaders else ctl)
            self.dup_allowed |= self.handed_over(killed_at)
        elif fault == "frozen_leader_move":
            t0 = self.frozen_leader_move(victims)
        elif fault == "partition":
            z = self.rng.choice(victims)
            how = self.rng.choice(sorted(CUTS))
            extra["cut"] = f"{z.name} {how}"
            self.dup_allowed |= z.owned()  # what it processed but could not commit is re-read
            cut = self.proxy.cut("both", cut_pattern(how, z.name))
            try:
                wait_for(lambda: self.group.taken_over(z, self.parts, t0),
                         self.session_s + self.margin_s,
                         f"the others to take over from {z.name}, cut off {how}")  # fmt: skip
            except AssertionError as e:
                raise AssertionError(f"{e}: {self.group.describe()}") from None
            extra["taken_over_s"] = round(time.monotonic() - t0, 3)
            self.proxy.heal(cut)
            t0 = time.monotonic()  # time to recover is counted from the heal
        took = self.stable(fault, since=t0)
        total = round(time.monotonic() - t0, 3)
        self.report.faults.append({"fault": fault, "stable_after_s": round(took, 3),
                                   "total_s": total, **extra})  # fmt: skip

    # ------------------------------------------------------------------ cluster faults

    def node_leading(self, topic: str, partition: int) -> int:
        assert self.cluster is not None
        return self.cluster.leader(topic, partition)

    def control_leader(self) -> int:
        """The node leading the group's partition of its control topic."""
        return self.node_leading(*control_partition(self.admin, self.group))

    def kill_node(self, node: int) -> float:
        """kill -9 ``node``, wait for the group to be stable without it, restart it; the time
        to recover is counted from the restart (the caller's ``stable``)."""
        assert self.cluster is not None
        t0 = time.monotonic()
        self.cluster.kill(node)
        self.log(f"[chaos] killed node {node}")
        self.stable(f"kill -9 of node {node}", since=t0)
        self.cluster.restart(node)
        return time.monotonic()

    def handed_over(self, since: float) -> set[TP]:
        """Partitions that changed hands after ``since``: after a data leader's kill, such a
        partition may be re-read from its last commit (a member that missed its session while
        clients failed over); one that kept its owner must not be."""
        return {tp for tp, spans in self.group.intervals().items()
                if any(start > since for start, _, _ in spans)}  # fmt: skip

    def frozen_leader_move(self, victims: list[MemberProcess]) -> float:
        """Freeze a member just under its session while the control partition's leadership
        moves (its leader's controlled shutdown): with one node's clock ahead, log time may
        jump forward by the skew meanwhile. The member must fence itself in time (no record
        handed to it after the others may own its partitions: ``late_records``)."""
        assert self.cluster is not None
        owners = [w for w in victims if w.owned()] or victims
        z = self.rng.choice(owners)
        node = self.control_leader()

        def move() -> None:
            self.cluster.node(node).stop()  # type: ignore[union-attr]  # a controlled shutdown
            self.log(f"[chaos] {z.name} frozen; node {node} stopped (control leader now "
                     f"{self.control_leader()})")  # fmt: skip

        # The freeze ends when the move is done if that takes longer (a loaded machine).
        self.freeze_through(z, move, self.session_s - 0.5, f"{z.name} frozen through a "
                            "leadership move", must_fit=False)  # fmt: skip
        self.cluster.restart(node)
        return time.monotonic()


def audit(
    group: WorkerGroup, producer: LoadProducer, dup_allowed: set[TP], report: ChaosReport
) -> ChaosReport:
    """Stop ``producer``, wait until every acknowledged offset was processed, and count into
    ``report``: lost records, duplicates (unexplained unless on a ``dup_allowed`` partition),
    overlapping ownership between running members, and that of frozen members apart."""
    producer.stop()
    ends = producer.end_offsets()
    report.produced = sum(ends.values())

    with contextlib.suppress(AssertionError):  # what is missing is counted as lost below
        wait_for(lambda: not missing(ends, group.processed()), 60,
                 "every produced record to be processed")  # fmt: skip
    done = group.processed()
    report.lost = sum(len(gone) for gone in missing(ends, done).values())
    for tp in ends:
        dups = [o for o, n in done.get(tp, {}).items() if n > 1]
        report.duplicates += len(dups)
        if dups and tp not in dup_allowed:
            report.unexplained_duplicates.append(f"{tp}: {sorted(dups)[:5]}")
    report.processed = sum(sum(c.values()) for c in done.values())
    zombies = [w.name for w in group.members.values() if w.pauses]
    report.running_overlaps = group.overlaps(ignore=zombies)
    report.zombie_overlaps = len(group.overlaps()) - len(report.running_overlaps)
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=600, help="seconds of random faults")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--protocol", default="cooperative")
    # groupkit's default; a sticky assignor is also the one whose joins and leaves hand
    # partitions over without the leader (admission, inheritance: protocol/state.py)
    ap.add_argument("--assignor", default="cooperative-sticky")
    ap.add_argument(
        "--brokers",
        type=int,
        default=1,
        choices=(1, 3),
        help="3: a local three-broker cluster, with its faults",
    )
    ap.add_argument("--workdir", default=None, help="keep audits and logs here")
    ap.add_argument(
        "--protocol-version", type=int, default=None, choices=(1, 2),
        help="every member's groupkit.protocol.version (default: groupkit's)",
    )  # fmt: skip
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="groupkit-soak-") as tmp:
        workdir = Path(args.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        session = 3000 if args.brokers == 1 else 4000  # the cluster's allows for the skew
        chaos = Chaos(workdir, seed=args.seed, protocol=args.protocol, assignor=args.assignor,
                      brokers=args.brokers, session_timeout_ms=session,
                      protocol_version=args.protocol_version)  # fmt: skip
        report = chaos.run(args.duration)
    print(f"seed {args.seed}, {args.protocol} / {args.assignor}, protocol version "
          f"{args.protocol_version or PROTOCOL_VERSION}: {len(report.faults)} faults")  # fmt: skip
    for f in report.faults:
        print(f"  {f}")
    print(report.summary())
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
