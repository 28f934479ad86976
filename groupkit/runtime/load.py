"""The leader's measure of the load, and its re-plans that follow it.

What the load re-plan reads (protocol/placement.py), and where it is measured: all of it by
the leader alone, from the broker, through the one reader of offsets the lag-aware assignors
use (:func:`~groupkit.runtime.lag.read_offsets`). No member reports anything new, and no
record grows: what every follower reads stays as it was.

- A partition's **lag**: its end offset minus the group's committed offset, as ``lag`` and
  ``balanced`` read it when they plan.
- Its **produce rate**: how fast its end offset moves, between samples of the end offsets.
- Its **consume rate**: how fast the group's committed offset moves, between samples, counted
  only while one member owned it (a sample made under another owner starts again). Summed
  over a member's partitions, that is what the member processes: a lower bound of its rate
  while it keeps up, its true rate while it is busy (placement.py says which is which).
- A member's declared **capacity** (``groupkit.capacity``): from its member record, as
  ``balanced`` reads it.

:class:`LoadMeter` keeps the samples; :class:`LoadFollower` runs the leader's side: a sample
every :func:`sample_every_ms`, on a daemon thread (the admin round trips never delay a turn of
the control thread), and every ``interval`` of them the decision, on the same thread. The
control thread only hands it the group as it stands and takes back a re-plan to write
(``Node.replan``), which the node writes only if the group is still stable at the generation
the decision saw.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient

from groupkit.errors import BrokerError
from groupkit.log import get_logger
from groupkit.protocol import GroupState
from groupkit.protocol.placement import LoadDecision, LoadPolicy, PartitionLoad, Replan, decide
from groupkit.protocol.planner import Planner
from groupkit.protocol.vocab import DecisionReason
from groupkit.runtime.config import GroupConfig
from groupkit.runtime.lag import GroupOffsets, read_offsets
from groupkit.types import MemberSubscription, TopicPartition

_log = get_logger("groupkit.load")

#: samples a partition keeps at most (its window is the load interval)
MAX_SAMPLES = 64


def sample_every_ms(interval_ms: int) -> int:
    """How often the leader samples offsets: five samples an interval, within [1 s, 10 s]."""
    return min(10_000, max(1_000, interval_ms // 5))


@dataclass(frozen=True, slots=True)
class _Sample:
    at_ms: int
    end: int
    committed: int | None
    owner: str | None


class LoadMeter:
    """Samples of each partition's end and committed offsets, and the rates they make."""

    def __init__(self, window_ms: int) -> None:
        #: rates are taken over the samples of this long (at least two samples)
        self.window_ms = window_ms
        self._samples: dict[TopicPartition, deque[_Sample]] = {}
        self._lag: dict[TopicPartition, int] = {}

    def add(self, offsets: GroupOffsets, owners: Mapping[TopicPartition, str], now_ms: int) -> None:
        """One read of the offsets (``read_offsets``), made at ``now_ms`` (monotonic)."""
        for tp, end in offsets.end.items():
            q = self._samples.setdefault(tp, deque(maxlen=MAX_SAMPLES))
            s = _Sample(now_ms, end, offsets.committed.get(tp), owners.get(tp))
            if q and (end < q[-1].end or now_ms <= q[-1].at_ms):
                q.clear()  # the log was truncated or recreated, or the clock stood: start again
            q.append(s)
            while len(q) > 2 and now_ms - q[1].at_ms >= self.window_ms:
                q.popleft()
        self._lag = dict(offsets.lag)
        for tp in set(self._samples) - set(offsets.end):
            del self._samples[tp]  # no longer asked: no longer the group's

    def loads(self) -> dict[TopicPartition, PartitionLoad]:
        """Each sampled partition's lag and rates (a rate needs two samples: else 0, or for
        the consume rate ``None``, unmeasured)."""
        out: dict[TopicPartition, PartitionLoad] = {}
        for tp, q in sorted(self._samples.items()):
            last = q[-1]
            produce = 0.0
            if len(q) >= 2:
                produce = (last.end - q[0].end) * 1000 / (last.at_ms - q[0].at_ms)
            # the commits under the current owner only (another's rate says nothing of it),
            # back to where the committed offset went back (a reset) or was not known
            run = [last] if last.owner is not None and last.committed is not None else []
            for s in list(q)[-2::-1]:
                if not run or s.owner != last.owner or s.committed is None:
                    break
                if s.committed > (run[-1].committed or 0):
                    break
                run.append(s)
            consume = None
            if len(run) >= 2:
                first = run[-1]
                gone = (last.committed or 0) - (first.committed or 0)
                consume = gone * 1000 / (last.at_ms - first.at_ms)
            out[tp] = PartitionLoad(self._lag.get(tp, 0), max(0.0, produce), consume)
        return out

    def forget(self) -> None:
        self._samples = {}
        self._lag = {}


@dataclass(frozen=True, slots=True)
class _Job:
    """What the control thread hands the worker: the group as it stands."""

    generation: int
    members: dict[str, MemberSubscription]
    owners: dict[TopicPartition, str]
    log_time: int
    last_replan: int | None
    decide: bool


class LoadFollower:
    """The leader's sampling of the load and its decisions (module docstring)."""

    def __init__(
        self,
        admin: AdminClient,
        group_id: str,
        lag_reset: str,
        policy: LoadPolicy,
        name: str = "groupkit-load",
        read: Callable[..., GroupOffsets] = read_offsets,
        planner: Planner | None = None,
    ) -> None:
        self.admin = admin
        self.group_id = group_id
        self.lag_reset = lag_reset
        self.policy = policy
        self.name = name
        self._read = read
        self.planner = planner
        self.meter = LoadMeter(policy.interval_ms)
        self._thread: threading.Thread | None = None
        self._result: tuple[int, LoadDecision] | None = None
        self._sampled_at: int | None = None
        self._decided_at: int | None = None
        #: the newest decision made (for the log and tests)
        self.last: LoadDecision | None = None

    @classmethod
    def of(
        cls, cfg: GroupConfig, admin: AdminClient, member_id: str, planner: Planner | None = None
    ) -> LoadFollower | None:
        """The follower ``cfg`` asks for (``groupkit.load.rebalance.interval.ms``), or ``None``;
        ``planner``: the leader's, which says whether the group is stable, and whose assignor
        is asked first (``Assignor.replan``)."""
        if cfg.load_interval_ms <= 0:
            return None
        policy = LoadPolicy(interval_ms=cfg.load_interval_ms)
        return cls(admin, cfg.group_id, cfg.lag_reset, policy, name=f"groupkit-load-{member_id}",
                   planner=planner)  # fmt: skip

    def due(self, now_ms: int) -> bool:
        """A sample is due (and no sample is being made)."""
        if self._thread is not None:
            return False
        every = sample_every_ms(self.policy.interval_ms)
        return self._sampled_at is None or now_ms - self._sampled_at >= every

    def start(self, state: GroupState, now_ms: int, counts: Mapping[str, int], ready: bool) -> None:
        """Sample now on the worker; and decide too if the group is stable (the planner finds
        it so with these partition ``counts``, and the node is ``ready`` to lead: no plan or
        write of its own under way) and the interval has passed since the last decision.
        Call when :meth:`due`, under the caller's lock on ``state``."""
        stable = ready and (
            self.planner is None
            or self.planner.plan(state, counts, defer=True).reason == DecisionReason.STABLE
        )
        a = state.assignment
        if a is None:
            return
        owners = {tp: m for m, c in a.members.items() for tp in c.assigned}
        live = state.live_members()
        members = {
            m: MemberSubscription(c.topics, c.assigned, a.generation,
                                  capacity=live[m].capacity if m in live else None)
            for m, c in a.members.items()
        }  # fmt: skip
        decide_now = stable and (
            self._decided_at is None or now_ms - self._decided_at >= self.policy.interval_ms
        )
        job = _Job(a.generation, members, owners, state.log_time,
                   a.replan.at if a.replan is not None else None, decide_now)  # fmt: skip
        self._sampled_at = now_ms
        if decide_now:
            self._decided_at = now_ms
        self._thread = threading.Thread(target=self._run, args=(job, now_ms), name=self.name,
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def _run(self, job: _Job, now_ms: int) -> None:
        try:
            offsets = self._read(self.admin, self.group_id, sorted(job.owners), self.lag_reset)
        except BrokerError as e:
            _log.warning("load.unavailable", group=self.group_id, error=str(e))
            return
        except Exception:
            _log.exception("load.failed", group=self.group_id)
            return
        self.meter.add(offsets, job.owners, now_ms)
        if job.decide:
            d = decide(job.members, self.meter.loads(), job.log_time, job.last_replan,
                       policy=self.policy,
                       assignor=self.planner.assignor if self.planner else None)  # fmt: skip
            self._result = (job.generation, d)
            if d.replan is not None:  # the control thread writes it if the group is still stable
                log_replan(self.group_id, d.replan, job.generation + 1)

    def take(self) -> tuple[int, LoadDecision] | None:
        """The decision made (with the generation it saw), once the worker is done."""
        t = self._thread
        if t is None or t.is_alive():
            return None
        self._thread = None
        out, self._result = self._result, None
        if out is not None:
            self.last = out[1]
        return out

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for a sample under way (its clients closed)."""
        t = self._thread
        if t is not None:
            t.join(timeout)

    def stop_leading(self) -> None:
        """No longer the leader: the samples of another leader's time say nothing."""
        if self._sampled_at is not None:
            self.meter.forget()
            self._sampled_at = self._decided_at = None


def log_replan(group: str, r: Replan, generation: int) -> None:
    """The one log line of a re-plan for the load, with its reason and predicted gain (the
    generation that writes it is logged as any, ``rebalance.generation`` with reason ``load``)."""
    _log.info("load.replan", group=group, reason=r.reason, gain=round(r.gain, 3),
              moved=len(r.moves), generation=generation,
              partitions=[f"{mv.partition}:{mv.source}->{mv.target}" for mv in r.moves],
              utilization_before=round(r.before.utilization, 3),
              utilization_after=round(r.after.utilization, 3),
              delay_s_before=round(r.before.delay_s, 1),
              delay_s_after=round(r.after.delay_s, 1))  # fmt: skip
