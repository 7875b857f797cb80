"""The analytics tests' shared SparkSession: one per test process (session scope), tuned for
speed on two cores: ``local[2]``, no UI, two shuffle partitions, the driver on loopback.

Spark is only ever called from the test's own (main) thread: no test here runs Spark inside
an event loop. Tests that need a broker produce with aiokafka under ``asyncio.run`` first and
call Spark after it returns.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_conf() -> dict[str, str]:
    """The settings of the shared session (the cluster test passes the same ones)."""
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.driver.memory": "1g",
    }


#: Why the shared session has no Kafka source (None: it has one).
kafka_unavailable: list[str] = []


def _session(packages: str | None) -> SparkSession:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("kgroup-analytics-tests")
    for key, value in spark_conf().items():
        builder = builder.config(key, value)
    if packages:
        builder = builder.config("spark.jars.packages", packages)
    return builder.getOrCreate()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The shared session, with Spark's Kafka source (fetched from Maven Central, cached
    under ~/.ivy2.5.2) when it can be had; without it the Kafka tests skip (fail on CI)."""
    pytest.importorskip("pyspark", reason="pip install 'kgroup[analytics]' (PySpark)")
    from kgroup.analytics._kafka import kafka_package

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        session = _session(kafka_package())
    except Exception as exc:  # the package could not be resolved: no Kafka source
        kafka_unavailable.append(f"{kafka_package()}: {exc}")
        session = _session(None)
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
