"""Collecting a table's rows for the report (kgroup.analytics._pipeline.collect_rows): the
first rows in report order, in one query (the Spark tests compare every table's content with
the reference)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kgroup.analytics._pipeline import collect_rows

# One worker runs every Spark test (one JVM; see the Makefile's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("spark")


def test_collect_rows_keeps_the_read_order_of_rows_equal_in_report_order(
    spark: SparkSession, tmp_path: Path
) -> None:
    # heartbeat_failures' report order is (group, member_uid, error): rows equal in it (not
    # in a real table) come in the order they are read in, across files, with or without a
    # limit, as a whole collect sorted in Python gives them.
    path = str(tmp_path / "ties")
    schema = "group string, member_uid string, error string, count long"
    for part in range(3):  # a file each, read in more than one partition
        rows: list[tuple[Any, ...]] = [("g", "m", "e", part * 10 + i) for i in range(4)]
        rows += [("g", None, "e", part * 10 + i) for i in range(2)]
        rows += [(None, "m", "e", part)]
        spark.createDataFrame(rows, schema).coalesce(1).write.mode("append").parquet(path)
    table = spark.read.parquet(path)
    assert table.rdd.getNumPartitions() > 1
    read_order = [r.asDict() for r in table.collect()]

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return tuple((0, "") if r[c] is None else (1, r[c]) for c in r if c != "count")

    whole = sorted(read_order, key=key)
    assert collect_rows(table, "heartbeat_failures") == whole
    assert collect_rows(table, "heartbeat_failures", 100) == whole
    assert collect_rows(table, "heartbeat_failures", 6) == whole[:7]
    assert collect_rows(table, "heartbeat_failures", 0) == whole[:1]
