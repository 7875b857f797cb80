"""The JVM settings ``kgroup report`` gives a local master, by reader (no Spark started)."""

from __future__ import annotations

import argparse

import pytest

from kgroup.analytics._command import add_arguments
from kgroup.analytics.job import FIRST_TIER_ONLY, LOCAL_DEFAULTS, local_settings, reads_in_python


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "master", "python"),
    [
        (["logs", "--out", "o"], "local[*]", True),
        (["logs", "--out", "o"], "local[2]", True),
        (["logs", "--out", "o"], "spark://h:7077", False),
        (["logs", "--out", "o"], None, False),
        (["logs", "hdfs://nn/logs", "--out", "o"], "local[*]", False),
        (["logs", "--out", "o", "--reader", "spark"], "local[*]", False),
        (["logs", "--out", "o", "--reader", "python"], "spark://h:7077", True),
        (["--kafka-bootstrap", "b:9092", "--kafka-topic", "t", "--out", "o"], "local[*]", False),
        (["--out", "o"], "local[*]", True),
    ],
)
def test_the_reader_is_known_before_the_session(
    argv: list[str], master: str | None, python: bool
) -> None:
    assert reads_in_python(_args(*argv), master) is python


def test_only_the_python_reader_runs_the_jit_first_tier_only() -> None:
    options = "spark.driver.extraJavaOptions"
    fast = local_settings((), python_reader=True)
    assert fast[options] == f"{LOCAL_DEFAULTS[options]} {FIRST_TIER_ONLY}"
    assert fast["spark.driver.memory"] == LOCAL_DEFAULTS["spark.driver.memory"]
    assert FIRST_TIER_ONLY not in local_settings((), python_reader=False)[options]
    # Options given with --conf replace kgroup's whole string: no flag added to them.
    assert local_settings([options], python_reader=True) == {
        "spark.driver.memory": LOCAL_DEFAULTS["spark.driver.memory"]
    }
