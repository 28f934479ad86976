"""A worker that exposes groupkit's Prometheus metrics over HTTP.

The app builds a ``groupkit.metrics.PrometheusObserver`` on a prometheus-client
``CollectorRegistry`` and passes it to ``GroupConsumer``; it registers groupkit's metrics (lag,
assignment, rebalances, records consumed, ...; the table is in README.md, "Observability") on that
registry. groupkit never starts a server itself: this example serves the registry with
``groupkit.metrics.serve``. It prints the endpoint's address, then one line per record.

Run it against the local broker (``groupkit broker start`` first, see README.md), then scrape::

    python examples/metrics.py --topic orders --metrics-port 9300
    curl -s localhost:9300/metrics | grep ^groupkit_
"""

from __future__ import annotations

import argparse
import signal

from prometheus_client import CollectorRegistry

from groupkit import GroupConsumer
from groupkit.metrics import PrometheusObserver, serve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--group", default="groupkit-example")
    parser.add_argument("--topic", default="groupkit-example")
    parser.add_argument("--metrics-port", type=int, default=9300, help="0: any free port")
    parser.add_argument("--max-records", type=int, default=0, help="stop after N (0: never)")
    args = parser.parse_args()

    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    registry = CollectorRegistry()  # this app's own; pass prometheus_client.REGISTRY to share
    metrics = PrometheusObserver(registry)
    consumer = GroupConsumer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
        },
        observers=[metrics],
    )
    server, _ = serve(args.metrics_port, registry)
    print(f"metrics: http://localhost:{server.server_port}/metrics", flush=True)
    consumer.subscribe([args.topic])
    handled = 0
    try:
        with consumer:
            while not stopping and (args.max_records == 0 or handled < args.max_records):
                msg = consumer.poll(1.0)
                if msg is None or msg.error():
                    continue
                print(f"record {msg.topic()}-{msg.partition()}@{msg.offset()}", flush=True)
                handled += 1
    finally:
        server.shutdown()
    print(f"done: {handled} records", flush=True)


if __name__ == "__main__":
    main()
