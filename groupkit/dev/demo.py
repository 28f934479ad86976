"""``groupkit demo``: a real broker, a skewed producer and a group of members, watched live.

What it does, in order:

1. Uses ``--bootstrap-servers``, or the local development broker (``groupkit broker``): a
   running one is reused, otherwise one is started and stopped again at the end.
2. Creates the demo topic (``--partitions``, default 12) and starts the producer process
   (``python -m groupkit.dev.demo_worker produce``): ``--rate`` records a second, Zipf-skewed so
   partition 0 is the hottest.
3. Starts ``--members`` member processes (``python -m groupkit.dev.demo_worker worker``), each a
   ``GroupConsumer`` serving ``/metrics`` on its own port and processing at most
   ``--max-rate`` records a second, so the owners of hot partitions fall behind.
4. Every ``--refresh`` seconds scrapes every member's ``/metrics`` and draws a table: members,
   leader, generation, partitions with their lag, consumption rate, and the last rebalances
   (from the leader's ``rebalance`` log lines), and each re-plan for the load in the events
   (``balanced``, the default, follows the load every 10 s; ``--assignor cooperative-sticky``
   shows the contrast). Every ``--churn-interval`` seconds it adds a
   member, or removes the oldest one (usually the leader), so rebalances keep happening.
5. The leader publishes the group's lag telemetry every ``--telemetry-interval-ms`` (2 s) to
   ``__groupkit_telemetry``: ``groupkit replay --bootstrap-servers B`` replays it.
6. Writes ``status.json`` and a Prometheus config (``prometheus/prometheus.yml`` with a
   ``file_sd`` target list kept up to date as members come and go) into ``--state-dir``.
7. Stops on Ctrl-C, SIGTERM or after ``--duration``: members leave cleanly (revoke, commit,
   tombstone), then the producer, then the broker it started.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from groupkit.dev.demo_worker import EVENT_PRODUCER_DONE, EVENT_READY

DEFAULT_METRICS_PORT = 9301
#: how often the demo's leader asks whether to follow the load (shorter than the library's
#: default, so a re-plan shows within the first minute)
DEMO_LOAD_INTERVAL_MS = 10_000


def load_interval_ms(args: argparse.Namespace) -> int:
    """The members' ``groupkit.load.rebalance.interval.ms`` (``--load-interval-ms``)."""
    if args.load_interval_ms is not None:
        return int(args.load_interval_ms)
    on = args.assignor == "balanced" and args.protocol == "cooperative"
    return DEMO_LOAD_INTERVAL_MS if on else 0


@dataclass
class Child:
    """One process of the demo, with its log read incrementally."""

    name: str
    role: str  # worker | producer
    proc: subprocess.Popen[bytes]
    log: Path
    port: int = 0
    member_id: str | None = None
    ready: bool = False
    stopping: bool = False
    done: bool = False
    started: float = field(default_factory=time.monotonic)
    _offset: int = 0
    _partial: str = ""

    def new_events(self) -> list[dict[str, Any]]:
        """JSON log lines written since the last call (other lines are skipped)."""
        try:
            with self.log.open("r", errors="replace") as f:
                f.seek(self._offset)
                chunk = f.read()
                self._offset = f.tell()
        except FileNotFoundError:
            return []
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        out = []
        for line in lines:
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    out.append(json.loads(line))
        return out

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"


@dataclass
class MemberView:
    """One member as its ``/metrics`` shows it."""

    name: str
    member_id: str = "?"
    address: str = ""
    generation: int = 0
    leader: bool = False
    partitions: dict[int, int | None] = field(default_factory=dict)  # partition -> lag
    lag: int = 0
    rate: float = 0.0
    members: int | None = None
    paused: int | None = None
    rebalances: float = 0.0
    paused_seconds: float = 0.0
    ok: bool = False


def scrape(child: Child, timeout: float = 1.0) -> MemberView:
    from prometheus_client.parser import text_string_to_metric_families

    view = MemberView(child.name, child.member_id or "?", f"127.0.0.1:{child.port}")
    try:
        with urllib.request.urlopen(child.url, timeout=timeout) as resp:
            text = resp.read().decode()
    except OSError:
        return view
    view.ok = True
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            v = s.value
            name = s.name
            if name == "groupkit_consumergroup_generation":
                view.generation = int(v)
                view.member_id = s.labels.get("member", view.member_id)
            elif name == "groupkit_consumergroup_is_leader":
                view.leader = v == 1
            elif name == "groupkit_consumergroup_assigned_partitions":
                pass
            elif name == "groupkit_consumer_records_lag":
                view.partitions.setdefault(int(s.labels["partition"]), None)
            elif name == "groupkit_consumergroup_lag":
                view.partitions[int(s.labels["partition"])] = int(v)
            elif name == "groupkit_consumergroup_lag_sum":
                view.lag = int(v)
            elif name == "groupkit_records_consumed_rate":
                view.rate = v
            elif name == "groupkit_consumergroup_members":
                view.members = int(v)
            elif name == "groupkit_consumergroup_paused_partitions":
                view.paused = int(v)
            elif name == "groupkit_rebalances_total":
                view.rebalances += v
            elif name == "groupkit_paused_partition_seconds_total":
                view.paused_seconds += v
    return view


def _short(n: float) -> str:
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    if n >= 1000:
        return f"{n / 1000:.1f}k"
    return f"{n:.0f}"


def render(
    header: list[str],
    views: list[MemberView],
    rebalances: list[dict[str, Any]],
    events: list[str],
    width: int = 120,
) -> str:
    """The live table as text (pure, for tests)."""
    lines = list(header)
    lines.append("")
    lines.append(f"{'NAME':<5} {'MEMBER':<26} {'METRICS':<16} {'LEAD':<4} {'GEN':>4} {'PARTS':>5} "
                 f"{'LAG':>7} {'REC/S':>6}  PARTITION(LAG)")  # fmt: skip
    total_lag = 0
    live = None
    paused = None
    for v in views:
        if not v.ok:
            lines.append(f"{v.name:<5} {'(starting or unreachable)':<26} {v.address:<16}")
            continue
        total_lag += v.lag
        if v.leader:
            live, paused = v.members, v.paused
        parts = " ".join(
            f"{p}({'?' if lag is None else _short(lag)})" for p, lag in sorted(v.partitions.items())
        )
        row = (
            f"{v.name:<5} {v.member_id[:26]:<26} {v.address:<16} {('*' if v.leader else ''):<4} "
            f"{v.generation:>4} "
            f"{len(v.partitions):>5} {_short(v.lag):>7} {v.rate:>6.0f}  {parts}"
        )
        lines.append(row[:width])
    lines.append("")
    live_s = "?" if live is None else str(live)
    paused_s = "?" if paused is None else str(paused)
    lines.append(
        f"group lag {total_lag} (sum over members); live members {live_s} (leader's view); "
        f"paused partitions {paused_s}"
    )
    lines.append("")
    lines.append("LAST REBALANCES (the leader's `rebalance` log lines)")
    if not rebalances:
        lines.append("  (none yet)")
    for r in rebalances[-6:]:
        lines.append(
            f"  {str(r.get('timestamp', ''))[11:19]}  gen {r.get('generation')!s:>3}  "
            f"{r.get('protocol', '')!s:<11} {r.get('reason', '')!s:<24} moved {r.get('moved')!s:>3}"
            f"  revoked {r.get('revoked')!s:>3}  {r.get('duration_ms')!s:>7} ms  "
            f"{r.get('outcome', '')}"
        )
    lines.append("")
    lines.append("EVENTS")
    lines += [f"  {e}" for e in events[-6:]] or ["  (none yet)"]
    return "\n".join(lines)


def _free_port(avoid: set[int], start: int) -> int:
    from groupkit.dev.broker import free_port, port_is_free

    if start <= 0:
        return free_port()
    for port in range(start, start + 200):
        if port not in avoid and port_is_free(port, "0.0.0.0"):
            return port
    return free_port()


def _write_json(path: Path, doc: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)  # atomic: Prometheus' file_sd never reads half a file


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.state_dir = Path(args.state_dir) if args.state_dir else _default_state_dir()
        self.run_id = uuid.uuid4().hex[:6]
        self.topic = args.topic or f"groupkit-demo-{self.run_id}"
        self.group = args.group or self.topic
        self.workers: list[Child] = []
        self.producer: Child | None = None
        self.broker: Any = None
        self.bootstrap = ""
        self.rebalances: deque[dict[str, Any]] = deque(maxlen=20)
        self.events: deque[str] = deque(maxlen=20)
        self.started = time.monotonic()
        self.next_churn: float | None = None  # set once the first members are up
        #: when churning began: ``--churn-for`` counts from there
        self.churn_from = self.started
        self.seq = 0
        self.tty = sys.stdout.isatty() and not args.no_table
        self.prom_dir = self.state_dir / "prometheus"
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="scrape")
        self._last_views: dict[str, MemberView] = {}

    # ------------------------------------------------------------------ set-up

    def _say(self, msg: str) -> None:
        print(msg, flush=True)

    def _event(self, msg: str) -> None:
        stamp = datetime.now().strftime("%H:%M:%S")
        self.events.append(f"{stamp} {msg}")
        if not self.tty:
            self._say(f"[demo] {stamp} {msg}")

    def _start_broker(self) -> str:
        if self.args.bootstrap_servers:
            return str(self.args.bootstrap_servers)
        from groupkit.dev.broker import LocalBroker

        broker = LocalBroker()
        st = broker.status()
        if st.state == "running" and st.bootstrap:
            self._say(f"using the local broker already running at {st.bootstrap}")
            return st.bootstrap
        self._say("starting a local Apache Kafka broker (KRaft, single node) ...")
        bootstrap = broker.start()
        self.broker = broker
        self._say(f"broker running at {bootstrap} (log {broker.log_path})")
        return bootstrap

    def _spawn(self, role: str, name: str, extra: list[str]) -> Child:
        log = self.state_dir / f"{name}.log"
        cmd = [sys.executable, "-m", "groupkit.dev.demo_worker", role,
               "--bootstrap-servers", self.bootstrap, "--topic", self.topic, *extra]  # fmt: skip
        out = log.open("wb")  # a fresh log per run: its events are this run's
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Own session: Ctrl-C reaches only the demo, which then stops members in order.
            start_new_session=True,
            env={**os.environ, "GROUPKIT_DEMO_CHILD": "1", "PYTHONUNBUFFERED": "1"},
        )
        out.close()
        return Child(name, role, proc, log)

    def add_worker(self) -> Child:
        name = f"w{self.seq}"
        self.seq += 1
        used = {w.port for w in self.workers}
        base = self.args.metrics_port
        port = _free_port(used, base + len(self.workers) if base > 0 else 0)
        a = self.args
        child = self._spawn("worker", name, [
            "--group", self.group, "--name", f"{name}-{self.run_id}",
            "--metrics-port", str(port), "--metrics-addr", a.metrics_addr,
            "--assignor", a.assignor, "--protocol", a.protocol, "--max-rate", str(a.max_rate),
            "--session-timeout-ms", str(a.session_timeout_ms),
            "--lag-status-interval-ms", str(a.lag_status_interval_ms),
            "--load-interval-ms", str(load_interval_ms(a)),
            "--telemetry-interval-ms", str(a.telemetry_interval_ms),
            *(["--kafka-exporter-names"] if a.kafka_exporter_names else []),
        ])  # fmt: skip
        child.port = port
        self.workers.append(child)
        self._write_status()
        return child

    def _write_status(self) -> None:
        live = [w for w in self.workers if not w.done]
        _write_json(
            self.prom_dir / "targets.json",
            [{"targets": [f"127.0.0.1:{w.port}" for w in live if w.ready],
              "labels": {"job": "groupkit-demo", "demo": self.run_id}}],
        )  # fmt: skip
        _write_json(
            self.state_dir / "status.json",
            {
                "bootstrap": self.bootstrap,
                "topic": self.topic,
                "group": self.group,
                "partitions": self.args.partitions,
                "prometheus_config": str(self.prom_dir / "prometheus.yml"),
                "producer": None
                if self.producer is None
                else {
                    "pid": self.producer.proc.pid,
                    "done": self.producer.done,
                    "log": str(self.producer.log),
                },
                "members": {
                    w.name: {
                        "pid": w.proc.pid,
                        "port": w.port,
                        "url": w.url,
                        "member_id": w.member_id,
                        "ready": w.ready,
                        "stopping": w.stopping,
                        "log": str(w.log),
                    }
                    for w in live
                },
            },
        )

    def _write_prometheus_config(self) -> Path:
        self.prom_dir.mkdir(parents=True, exist_ok=True)
        path = self.prom_dir / "prometheus.yml"
        path.write_text(
            "# Written by `groupkit demo`: scrapes every member of the running demo.\n"
            "global:\n  scrape_interval: 5s\n"
            "scrape_configs:\n  - job_name: groupkit-demo\n    file_sd_configs:\n"
            f"      - files: ['{self.prom_dir / 'targets.json'}']\n"
        )
        return path

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        a = self.args
        self.state_dir.mkdir(parents=True, exist_ok=True)
        prom_config = self._write_prometheus_config()
        self.bootstrap = self._start_broker()
        from confluent_kafka.admin import AdminClient

        from groupkit.runtime.admin import create_topic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        create_topic(admin, self.topic, a.partitions, exist_ok=True)
        # Not kept for the run: this frame lives on (in Ctrl-C's traceback too) while stop()
        # stops the broker, and the admin would keep reconnecting to it.
        del admin
        self._say(f"topic {self.topic} ({a.partitions} partitions), group {self.group}, "
                  f"protocol {a.protocol}, assignor {a.assignor}")  # fmt: skip
        self.producer = self._spawn("produce", "producer", [
            "--partitions", str(a.partitions), "--rate", str(a.rate), "--skew", str(a.skew),
            "--duration", str(a.produce_seconds),
        ])  # fmt: skip
        for _ in range(a.members):
            self.add_worker()
        self._write_status()
        self._say(f"starting {a.members} members ...")
        deadline = time.monotonic() + 90
        while not all(w.ready for w in self.workers) and time.monotonic() < deadline:
            self._pump()
            time.sleep(0.2)
        self._say("")
        # The churn's clock starts with the group, not with the demo: on a busy machine the
        # members' start can take a good part of ``--churn-for``.
        self.churn_from = time.monotonic()
        if a.churn_interval > 0:
            self.next_churn = self.churn_from + a.churn_interval
        for w in self.workers:
            self._say(f"  {w.name} metrics: {w.url}")
        self._say(f"  Prometheus config scraping them all: {prom_config}")
        self._say(f"    e.g.  prometheus --config.file={prom_config}")
        self._say(f"  logs and status.json in {self.state_dir}")
        self._say(f"  groupkit describe --bootstrap-servers {self.bootstrap} --group {self.group}")
        self._say("  stop with Ctrl-C" + (f" (or after {a.duration:.0f}s)" if a.duration else ""))
        self._say("")
        last_print = 0.0
        while True:
            now = time.monotonic()
            if a.duration and now - self.started >= a.duration:
                self._event(f"--duration {a.duration:.0f}s reached")
                break
            self._pump()
            self._churn(now)
            views = [] if a.no_table else self._views()
            if self.tty:
                sys.stdout.write("\x1b[H\x1b[2J" + self._table(views) + "\n")
                sys.stdout.flush()
            elif not a.no_table and now - last_print >= 5:
                last_print = now
                self._say(self._table(views) + "\n")
            time.sleep(a.refresh)
        return 0

    def _views(self) -> list[MemberView]:
        """Scrape every running member at once; a slow one shows its previous view."""
        live = [w for w in self.workers if not w.done and not w.stopping]
        futures = [(w, self._pool.submit(scrape, w, 3.0)) for w in live]
        out = []
        for w, fut in futures:
            view = fut.result()
            if view.ok:
                self._last_views[w.name] = view
            else:
                view = self._last_views.get(w.name, view)
            out.append(view)
        return out

    def _table(self, views: list[MemberView]) -> str:
        a = self.args
        elapsed = time.monotonic() - self.started
        producing = self.producer is not None and not self.producer.done
        churn = ""
        if self.next_churn is not None:
            churn = f"   next churn in {max(0, self.next_churn - time.monotonic()):.0f}s"
        load = f"{a.rate:.0f} rec/s, Zipf skew {a.skew:.1f} (partition 0 hottest)"
        every = load_interval_ms(a)
        follow = f"follows the load every {every / 1000:g} s" if every else "load-following off"
        header = [
            f"groupkit demo  topic {self.topic} ({a.partitions} partitions)  group {self.group}  "
            f"protocol {a.protocol}  assignor {a.assignor} ({follow})",
            f"producer {load if producing else 'stopped'}"
            f"; members process <= {a.max_rate:.0f} rec/s each   "
            f"elapsed {int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}{churn}   Ctrl-C stops",
        ]
        return render(header, views, list(self.rebalances), list(self.events))

    def _pump(self) -> None:
        """Read new log events and notice processes that exited."""
        changed = False
        for child in [*self.workers, *([self.producer] if self.producer else [])]:
            for ev in child.new_events():
                kind = ev.get("event")
                if kind == EVENT_READY and not child.ready:
                    child.ready = True
                    child.member_id = ev.get("member")
                    changed = True
                    self._event(f"{child.name} joined as {child.member_id} ({child.url})")
                elif kind == "rebalance":
                    self.rebalances.append(ev)
                    if not self.tty and self.args.no_table:
                        self._event(
                            f"rebalance gen {ev.get('generation')} {ev.get('reason')} moved "
                            f"{ev.get('moved')} {ev.get('duration_ms')} ms {ev.get('outcome')}"
                        )
                elif kind == "load.replan":
                    self._event(self._replan_line(ev))
                elif kind == EVENT_PRODUCER_DONE:
                    self._event(f"producer stopped after {ev.get('sent')} records")
                elif ev.get("level") in ("error", "critical"):
                    self._event(f"{child.name}: {kind} {ev.get('error', '')}".strip())
            code = child.proc.poll()
            if code is not None and not child.done:
                child.done = True
                changed = True
                if child.role == "produce":
                    if code != 0:
                        self._event(f"producer exited with code {code} (see {child.log})")
                elif child.stopping:
                    self._event(f"{child.name} left the group (exit {code})")
                else:
                    self._event(f"{child.name} exited with code {code} (see {child.log})")
        if changed:
            self._write_status()

    def _replan_line(self, ev: dict[str, Any]) -> str:
        """A leader's re-plan for the load, members by their demo names."""
        names = {w.member_id: w.name for w in self.workers if w.member_id}
        moves = []
        for m in ev.get("partitions") or []:
            part, _, route = str(m).partition(":")
            src, _, dst = route.partition("->")
            moves.append(f"{part.rsplit('-', 1)[-1]} {names.get(src, src)}->{names.get(dst, dst)}")
        gain = ev.get("gain")
        gain_s = f"{gain:.0%}" if isinstance(gain, int | float) else "?"
        return (f"re-plan for the load ({ev.get('reason')}): partition {', '.join(moves)}; "
                f"predicted gain {gain_s}")  # fmt: skip

    def _churn(self, now: float) -> None:
        a = self.args
        if self.next_churn is None or now < self.next_churn:
            return
        # By the schedule, not by when this turn came: a slow turn does not skip a step.
        if a.churn_for and self.next_churn - self.churn_from > a.churn_for:
            self.next_churn = None
            return
        self.next_churn = now + a.churn_interval
        running = [w for w in self.workers if not w.done and not w.stopping]
        if len(running) <= a.members or len(running) <= 1:
            w = self.add_worker()
            self._event(f"adding member {w.name} (port {w.port})")
        else:
            oldest = running[0]
            oldest.stopping = True
            oldest.proc.send_signal(signal.SIGTERM)
            self._event(f"removing member {oldest.name} (the oldest; SIGTERM, clean leave)")
            self._write_status()

    # ------------------------------------------------------------------ tear-down

    def stop(self) -> None:
        """Members first (clean leave), then the producer, then a broker we started."""
        children = [w for w in self.workers if not w.done]
        for w in children:
            with contextlib.suppress(ProcessLookupError):
                w.proc.send_signal(signal.SIGTERM)
        if self.producer is not None and not self.producer.done:
            with contextlib.suppress(ProcessLookupError):
                self.producer.proc.send_signal(signal.SIGTERM)
            children.append(self.producer)
        deadline = time.monotonic() + 20
        try:
            for c in children:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    c.proc.wait(max(0.1, deadline - time.monotonic()))
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: kill what is left
        unclean = [c for c in children if c.proc.poll() is None]
        for c in unclean:  # their threads' stacks to their logs, then SIGKILL
            with contextlib.suppress(ProcessLookupError):
                c.proc.send_signal(signal.SIGQUIT)
        for c in unclean:
            with contextlib.suppress(subprocess.TimeoutExpired):
                c.proc.wait(1)
            c.proc.kill()
            c.proc.wait()
        for c in children:
            c.done = True
        if self.prom_dir.exists():
            self._write_status()
        left = ", ".join(w.name for w in children if w not in unclean)
        killed = ", ".join(f"{c.name} (stacks in {c.log})" for c in unclean)
        self._say(f"stopped: {left or 'nothing'} exited cleanly"
                  + (f"; killed {killed}" if unclean else ""))  # fmt: skip
        if self.broker is not None and not self.args.keep_broker:
            self.broker.stop()
            self._say("stopped the local broker this demo started")
        self._say(f"logs: {self.state_dir}")
        self._pool.shutdown(wait=False, cancel_futures=True)


def _default_state_dir() -> Path:
    from groupkit.cache import cache_root

    return cache_root() / "demo"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap-servers",
        default=None,
        help="use this cluster instead of the local development broker",
    )
    p.add_argument("--members", type=int, default=3, help="member processes to start")
    p.add_argument("--partitions", type=int, default=12)
    p.add_argument("--topic", default=None, help="default: groupkit-demo-<random>")
    p.add_argument("--group", default=None, help="default: the topic's name")
    p.add_argument("--assignor", default="balanced",
                   help="balanced (default) follows the load; cooperative-sticky shows the "
                        "contrast")  # fmt: skip
    p.add_argument(
        "--load-interval-ms",
        type=int,
        default=None,
        help="groupkit.load.rebalance.interval.ms of the members (default: "
        f"{DEMO_LOAD_INTERVAL_MS} with balanced under the cooperative protocol, else 0: off)",
    )
    p.add_argument("--protocol", default="cooperative", choices=["cooperative", "eager"])
    p.add_argument("--rate", type=float, default=200.0, help="records/s the producer writes")
    p.add_argument("--skew", type=float, default=1.0, help="Zipf exponent of partition load")
    p.add_argument(
        "--max-rate",
        type=float,
        default=80.0,
        help="records/s each member processes (0: unlimited)",
    )
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds")
    p.add_argument(
        "--produce-seconds",
        type=float,
        default=0.0,
        help="stop the producer after this many seconds (0: never)",
    )
    p.add_argument(
        "--churn-interval",
        type=float,
        default=20.0,
        help="add or remove a member this often (0: never)",
    )
    p.add_argument(
        "--churn-for",
        type=float,
        default=0.0,
        help="stop churning this many seconds after the first members are up (0: never)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        help="first member's /metrics port, the next ones follow (0: free ports)",
    )
    p.add_argument("--metrics-addr", default="127.0.0.1", help="address the members listen on")
    p.add_argument("--session-timeout-ms", type=int, default=6000)
    p.add_argument(
        "--lag-status-interval-ms",
        type=int,
        default=2000,
        help="members sample their partitions' Burrow status this often (0: off)",
    )
    p.add_argument(
        "--telemetry-interval-ms",
        type=int,
        default=2000,
        help="the leader publishes lag telemetry to __groupkit_telemetry this often, for "
        "groupkit replay (0: off)",
    )
    p.add_argument("--kafka-exporter-names", action="store_true",
                   help="members also export their lag under kafka_exporter's names")  # fmt: skip
    p.add_argument("--state-dir", default=None, help="logs, status.json, Prometheus config")
    p.add_argument("--refresh", type=float, default=1.0, help="seconds between table updates")
    p.add_argument("--no-table", action="store_true", help="print events only")
    p.add_argument("--keep-broker", action="store_true",
                   help="leave a broker the demo started running")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """``groupkit demo``: run until Ctrl-C, SIGTERM or ``--duration``; stop everything."""

    def terminate(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminate)
    # SIGINT too, explicitly: a process started by a script's background job (or by anything
    # that ignores SIGINT) inherits it ignored, and Python leaves it so: Ctrl-C, or a test's
    # SIGINT, would do nothing.
    previous_int = signal.signal(signal.SIGINT, terminate)
    demo = Demo(args)
    try:
        return demo.run()
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    finally:
        try:
            demo.stop()
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="groupkit demo", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
