"""The demo's processes: a group member serving ``/metrics``, and a producer with skewed load.

``groupkit demo`` runs them on one machine; ``docker-compose.yml`` runs the same two commands
in containers (``deploy/Dockerfile``)::

    python -m groupkit.dev.demo_worker worker --bootstrap-servers B --topic T --metrics-port 8000
    python -m groupkit.dev.demo_worker produce --bootstrap-servers B --topic T --rate 200

The worker is what a real service looks like: a ``GroupConsumer`` with a Prometheus observer,
its registry served over HTTP, JSON logs on stderr, a clean leave on SIGTERM or SIGINT. It
"processes" at most ``--max-rate`` records a second, so a member that owns hot partitions
falls behind and its lag shows it. SIGUSR1 makes it stop handing out records while it stays
in the group (its control thread keeps heartbeating), as a poll loop stuck in the app would;
SIGUSR2 makes it go on. That is how the stopped-member alert is seen firing, and, since the
worker samples its partitions' Burrow status (``--lag-status-interval-ms``, every 2 s here) on
a thread of its own, its partitions turn STOP and the status alert fires too. While it leads,
it publishes the group's lag telemetry every ``--telemetry-interval-ms`` (2 s) to
``__groupkit_telemetry``, which ``groupkit replay --bootstrap-servers B`` reads.

The producer spreads ``--rate`` records a second over the partitions by a Zipf law (partition
``p`` gets a share proportional to ``1 / (p + 1) ** skew``), so partition 0 is the hottest.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

# The table of ``groupkit demo`` and the tests read these events from the JSON logs.
EVENT_READY = "demo.worker.ready"
EVENT_PRODUCER_DONE = "demo.producer.done"
EVENT_STALLED = "demo.worker.stalled"


def _stop_event() -> threading.Event:
    """Set on SIGTERM/SIGINT, and when the parent that started us is gone."""
    stop = threading.Event()

    def handler(_sig: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    # A process that does not stop in time is sent SIGQUIT before SIGKILL (``groupkit demo``'s
    # stop): its threads' stacks go to its log, to say where it hung.
    faulthandler.register(signal.SIGQUIT, all_threads=True)
    parent = os.getppid()
    if os.environ.get("GROUPKIT_DEMO_CHILD") == "1":

        def watch() -> None:
            # ``groupkit demo`` killed with SIGKILL leaves no one to stop us: notice it.
            while not stop.wait(1.0):
                if os.getppid() != parent:
                    stop.set()

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    return stop


def wait_for_topic(
    bootstrap: str, topic: str, stop: threading.Event, timeout: float
) -> AdminClient:
    """Wait for Kafka and ``topic`` (in docker compose the broker starts at the same time)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while not stop.is_set():
        try:
            md = admin.list_topics(topic=topic, timeout=5)
            t = md.topics.get(topic)
            if t is not None and t.error is None and t.partitions:
                return admin
        except KafkaException:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"topic {topic!r} not found at {bootstrap} within {timeout:.0f}s")
        stop.wait(1.0)
    raise SystemExit(0)


# --------------------------------------------------------------------------- worker


def _stall_event() -> threading.Event:
    """Set by SIGUSR1, cleared by SIGUSR2: the worker stops polling meanwhile."""
    stalled = threading.Event()

    def handler(sig: int, _frame: object) -> None:
        if sig == signal.SIGUSR1:
            stalled.set()
        else:
            stalled.clear()

    signal.signal(signal.SIGUSR1, handler)
    signal.signal(signal.SIGUSR2, handler)
    return stalled


def run_worker(args: argparse.Namespace) -> int:
    import prometheus_client

    from groupkit import GroupConsumer, log
    from groupkit.metrics import PrometheusObserver, serve

    log.configure(json=not args.console_logs)
    logger = log.get_logger("groupkit.demo.worker", group=args.group)
    stop = _stop_event()
    wait_for_topic(args.bootstrap_servers, args.topic, stop, args.wait)
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created
    registry = prometheus_client.CollectorRegistry()
    server, _thread = serve(args.metrics_port, registry, addr=args.metrics_addr)
    port = server.server_address[1]
    name = args.name or socket.gethostname()
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_servers,
        "group.id": args.group,
        "client.id": name,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": max(100, args.session_timeout_ms // 10),
        "auto.commit.interval.ms": 1000,
        "groupkit.assignor": args.assignor,
        "groupkit.rebalance.protocol": args.protocol,
        "groupkit.lag.status.interval.ms": args.lag_status_interval_ms,
    }
    if args.load_interval_ms is not None:
        conf["groupkit.load.rebalance.interval.ms"] = args.load_interval_ms
    if args.telemetry_interval_ms > 0:
        conf["groupkit.telemetry.enable"] = True
        conf["groupkit.telemetry.interval.ms"] = args.telemetry_interval_ms
        conf["groupkit.telemetry.topic"] = args.telemetry_topic
    observer = PrometheusObserver(registry, kafka_exporter_names=args.kafka_exporter_names)
    consumer = GroupConsumer(conf, observers=[observer])
    consumer.subscribe([args.topic])
    stalled = _stall_event()
    logger.info(EVENT_READY, member=consumer.member_id, metrics_port=port, pid=os.getpid())
    # Read in small batches so a slow "processing" never delays a hand-off by more than 0.1 s.
    batch = max(1, min(500, int(args.max_rate / 10))) if args.max_rate > 0 else 500
    try:
        while not stop.is_set():
            if stalled.is_set():
                logger.info(EVENT_STALLED)
                while stalled.is_set() and not stop.is_set():
                    stop.wait(0.1)  # stuck "processing": nothing polled, nothing committed
                logger.info("demo.worker.resumed")
                continue
            t0 = time.monotonic()
            msgs = consumer.consume(batch, 0.1)
            if msgs and args.max_rate > 0:
                stop.wait(max(0.0, len(msgs) / args.max_rate - (time.monotonic() - t0)))
    finally:
        logger.info("demo.worker.closing", member=name)
        consumer.close()
        server.shutdown()
        logger.info("demo.worker.closed", member=name)
    return 0


# --------------------------------------------------------------------------- producer


def zipf_weights(partitions: int, skew: float) -> list[float]:
    """Share of each partition: proportional to ``1 / (p + 1) ** skew``, summing to 1."""
    raw = [1.0 / (p + 1) ** skew for p in range(partitions)]
    total = sum(raw)
    return [w / total for w in raw]


def run_producer(args: argparse.Namespace) -> int:
    from groupkit import log
    from groupkit.runtime.admin import create_topic

    log.configure(json=not args.console_logs)
    logger = log.get_logger("groupkit.demo.producer", topic=args.topic)
    stop = _stop_event()
    admin = AdminClient({"bootstrap.servers": args.bootstrap_servers})
    deadline = time.monotonic() + args.wait
    while True:  # Kafka may still be starting (docker compose)
        try:
            create_topic(admin, args.topic, args.partitions, exist_ok=True)
            break
        except Exception as e:
            if time.monotonic() > deadline or stop.is_set():
                raise SystemExit(f"could not create {args.topic!r}: {e}") from e
            stop.wait(1.0)
    md = admin.list_topics(topic=args.topic, timeout=10)
    partitions = len(md.topics[args.topic].partitions)
    weights = zipf_weights(partitions, args.skew)
    producer = Producer({"bootstrap.servers": args.bootstrap_servers, "linger.ms": 20})
    rng = random.Random(args.seed)
    logger.info("demo.producer.started", rate=args.rate, partitions=partitions, skew=args.skew,
                weights=[round(w, 3) for w in weights])  # fmt: skip
    started = time.monotonic()
    sent = 0
    carry = 0.0
    last = started
    while not stop.is_set():
        now = time.monotonic()
        if args.duration and now - started >= args.duration:
            break
        carry += (now - last) * args.rate
        last = now
        n, carry = int(carry), carry - int(carry)
        for p in rng.choices(range(partitions), weights, k=n):
            value = f"{sent} {time.time():.3f}".encode()
            producer.produce(args.topic, value, partition=p)
            sent += 1
        producer.poll(0)
        stop.wait(0.05)
    producer.flush(10)
    logger.info(EVENT_PRODUCER_DONE, sent=sent, seconds=round(time.monotonic() - started, 1))
    return 0


# --------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m groupkit.dev.demo_worker", description=__doc__)
    sub = ap.add_subparsers(dest="role", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-servers", default=os.environ.get("BOOTSTRAP_SERVERS"),
                        required="BOOTSTRAP_SERVERS" not in os.environ)  # fmt: skip
    common.add_argument("--topic", default=os.environ.get("DEMO_TOPIC", "groupkit-demo"))
    common.add_argument("--wait", type=float, default=120.0,
                        help="seconds to wait for Kafka and the topic")  # fmt: skip
    common.add_argument("--console-logs", action="store_true", help="readable logs, not JSON")

    w = sub.add_parser("worker", parents=[common], help="a group member serving /metrics")
    w.add_argument("--group", default=os.environ.get("DEMO_GROUP", "groupkit-demo"))
    w.add_argument("--name", default=None, help="client.id (default: the host name)")
    w.add_argument("--metrics-port", type=int, default=8000, help="0 picks a free port")
    w.add_argument("--metrics-addr", default="0.0.0.0")
    w.add_argument("--assignor", default=os.environ.get("DEMO_ASSIGNOR", "cooperative-sticky"))
    w.add_argument("--protocol", default=os.environ.get("DEMO_PROTOCOL", "cooperative"),
                   choices=["cooperative", "eager"])  # fmt: skip
    w.add_argument("--max-rate", type=float, default=float(os.environ.get("DEMO_MAX_RATE", 80)),
                   help="records per second this member processes (0: unlimited)")  # fmt: skip
    w.add_argument("--session-timeout-ms", type=int, default=6000)
    # Faster than the library's 10 s: the dashboard's status panels fill within seconds.
    w.add_argument(
        "--lag-status-interval-ms",
        type=int,
        default=int(os.environ.get("DEMO_LAG_STATUS_INTERVAL_MS", 2000)),
        help="groupkit.lag.status.interval.ms: Burrow status samples (0: off)",
    )
    w.add_argument("--load-interval-ms", type=int, default=None,
                   help="groupkit.load.rebalance.interval.ms (default: the library's)")  # fmt: skip
    # A few seconds, not the library's 10 s: the demo changes its membership every 20 s, and a
    # replay of its telemetry needs several snapshots between two changes.
    w.add_argument(
        "--telemetry-interval-ms",
        type=int,
        default=int(os.environ.get("DEMO_TELEMETRY_INTERVAL_MS", 2000)),
        help="the leader publishes lag telemetry for groupkit replay this often (0: off)",
    )
    w.add_argument("--telemetry-topic", default="__groupkit_telemetry",
                   help="groupkit.telemetry.topic")  # fmt: skip
    w.add_argument("--kafka-exporter-names", action="store_true",
                   help="also export the lag under kafka_exporter's metric names")  # fmt: skip
    w.set_defaults(func=run_worker)

    p = sub.add_parser("produce", parents=[common], help="skewed load on the demo topic")
    p.add_argument("--partitions", type=int, default=12, help="when creating the topic")
    p.add_argument("--rate", type=float, default=float(os.environ.get("DEMO_RATE", 200)),
                   help="records per second, all partitions together")  # fmt: skip
    p.add_argument("--skew", type=float, default=1.0, help="Zipf exponent (0: even load)")
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds")
    p.add_argument("--seed", type=int, default=None)
    p.set_defaults(func=run_producer)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
