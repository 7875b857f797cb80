"""The tables computed side by side (kgroup.analytics._pipeline with ._tasks): a failing
table stops the run with its own error once the other jobs are done, the progress lines
name every table once, and the rows handed to the report are the first in report order
(the Spark tests compare every table's content with the reference)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from kgroup.analytics import _pipeline
from kgroup.analytics._pipeline import TABLE_ORDER, PipelineResult, collect_rows, run_pipeline
from kgroup.analytics._read import read_files
from tests.analytics._logs import Options, simulate, write_logs

# One worker runs every Spark test (one JVM; see the Makefile's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("spark")


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("concurrent") / "logs"
    # Six overlapping claims among them: more than the smallest row limit below.
    opts = Options(groups=4, overlaps=1.0, duration_s=60.0)
    write_logs(simulate(32, opts), path, 32, spoil=True)
    return path


def run(
    spark: SparkSession, logs: Path, out: Path, said: list[str] | None = None
) -> PipelineResult:
    return run_pipeline(
        spark,
        read_files(spark, [str(logs)]),
        out=str(out),
        clock_skew_s=0.1,
        numbered_by_pos=False,
        progress=(said.append if said is not None else lambda _t: None),
        reader="python",
    )


def table_path(out: Path, name: str) -> str:
    return str(out / name if name == "bad_records" else out / "tables" / name)


def no_workers_left(spark: SparkSession) -> None:
    assert not [t for t in threading.enumerate() if t.name.startswith("kgroup-task")]
    assert list(spark.sparkContext.statusTracker().getActiveJobsIds()) == []


class TableBug(LookupError):
    pass


def test_a_failing_table_raises_its_own_error_after_the_others(
    spark: SparkSession, logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def churn(_members: DataFrame) -> DataFrame:
        raise TableBug("churn is broken")

    monkeypatch.setattr(_pipeline, "churn", churn)
    said: list[str] = []
    with pytest.raises(TableBug, match="churn is broken"):
        run(spark, logs, tmp_path / "out", said)
    no_workers_left(spark)
    assert not any("churn" in line for line in said)


def test_a_spark_error_in_a_table_keeps_its_type(
    spark: SparkSession, logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def heartbeat_failures(judged: DataFrame) -> DataFrame:
        return judged.select("no_such_column")

    monkeypatch.setattr(_pipeline, "heartbeat_failures", heartbeat_failures)
    with pytest.raises(AnalysisException):
        run(spark, logs, tmp_path / "out")
    no_workers_left(spark)


def test_progress_names_each_table_once_and_the_rows_keep_their_order(
    spark: SparkSession, logs: Path, tmp_path: Path
) -> None:
    said: list[str] = []
    got = run(spark, logs, tmp_path / "out", said)
    no_workers_left(spark)
    wrote = [line for line in said if line.startswith("wrote ")]
    assert sorted(line.split()[1] for line in wrote) == sorted(TABLE_ORDER)
    assert [line.split()[2] for line in wrote] == [f"({i}/12)" for i in range(1, 13)]
    assert said.index("summary") > said.index(wrote[-1])
    assert list(got.tables) == [*TABLE_ORDER, "summary"]
    assert got.overlaps == len(got.tables["overlaps"]) > 0
    for name in TABLE_ORDER:
        whole = collect_rows(spark.read.parquet(table_path(tmp_path / "out", name)), name)
        assert got.tables[name] == whole, name
    # Without the report's rows the overlaps are still counted.
    bare = run_pipeline(
        spark,
        read_files(spark, [str(logs)]),
        out=str(tmp_path / "bare"),
        clock_skew_s=0.1,
        numbered_by_pos=False,
        progress=lambda _t: None,
        collect=False,
        reader="python",
    )
    assert bare.tables == {"summary": [got.summary | {"job_seconds": bare.summary["job_seconds"]}]}
    assert bare.overlaps == got.overlaps


def test_tables_over_the_limit_give_their_first_rows_in_report_order(
    spark: SparkSession, logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pipeline, "REPORT_ROW_LIMIT", 3)
    got = run(spark, logs, tmp_path / "out")
    capped = []
    for name in TABLE_ORDER:
        whole = collect_rows(spark.read.parquet(table_path(tmp_path / "out", name)), name)
        assert got.tables[name] == whole[:3], name
        if len(whole) > 3:
            capped.append(name)
    assert got.truncated == capped and "ownership" in capped and "overlaps" in capped
    # More overlaps than were collected: counted by Spark.
    overlaps = spark.read.parquet(table_path(tmp_path / "out", "overlaps")).count()
    assert got.overlaps == overlaps > 4


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
