"""A session-scoped local SparkSession for the pipeline tests (not in conftest: shared file).

``local[2]``, UI off, two shuffle partitions, Spark's Kafka source on the classpath. Import
the fixture into a test module with ``from tests.spark_fixtures import spark  # noqa: F401``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
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
