"""Development and demo tools: a real Kafka broker on loopback, a fault proxy, the demo.

Nothing here is on a consumer's path. The library (``GroupConsumer``, the protocol, the
assignors, metrics, the pipeline) never imports this package; only the ``groupkit`` command
does, for ``groupkit broker`` and ``groupkit demo``, and so do the tests and the benches.

- :mod:`groupkit.dev.broker`: Apache Kafka's own broker (or a three-node cluster) run from its
  jars, with a skewed wall clock on demand (``skewclock/SystemTime.java``), and
  ``groupkit broker``; its parts are :mod:`~groupkit.dev.jars` (the jars from Maven Central),
  :mod:`~groupkit.dev.ports` (ports, processes, live clients), :mod:`~groupkit.dev.node` (one
  broker) and :mod:`~groupkit.dev.cluster` (three brokers in one quorum);
- :mod:`groupkit.dev.proxy`: a TCP proxy in front of those brokers that can cut one client off;
- :mod:`groupkit.dev.demo`: ``groupkit demo``, a group watched live;
- :mod:`groupkit.dev.demo_worker`: the demo's member and producer processes (also the
  entrypoint of ``deploy/Dockerfile``);
- :mod:`groupkit.dev.harness`: the one test harness (member processes, their audit, the
  ownership checker) that ``tests/`` and ``bench/`` share.
"""
