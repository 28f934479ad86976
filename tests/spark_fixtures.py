"""Spark for the pipeline tests (not in conftest: shared file).

- ``spark``: a session-scoped local SparkSession: ``local[2]``, UI off, two shuffle
  partitions, Spark's Kafka source on the classpath.
- ``spark_cluster``: a module-scoped Spark standalone cluster on loopback, a master and one
  two-core worker started from pyspark's own launcher (:mod:`groupkit.dev.spark_cluster`),
  stopped after the module. Jobs go to it from a process of their own (``groupkit replay
  --master``), as a user submits them: this process may hold the local session already.

Import a fixture into a test module with ``from tests.spark_fixtures import spark  # noqa:
F401``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from groupkit.pipeline.spark import spark_session

    session = spark_session(
        "local[2]",
        kafka=True,
        shuffle_partitions=2,
        app="groupkit-tests",
        conf={
            "spark.default.parallelism": "2",
            "spark.sql.adaptive.coalescePartitions.enabled": "true",
            "spark.driver.memory": os.environ.get("GROUPKIT_SPARK_MEMORY", "1g"),
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from groupkit.dev.spark_cluster import StandaloneCluster

    work: Path = tmp_path_factory.mktemp("spark-cluster")
    cluster = StandaloneCluster(workers=1, cores=2, memory="1g", work_dir=work)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
