"""Events from a Kafka topic, through Spark's Kafka source, in batch and streaming.

Spark's Kafka source is not part of PySpark's jars: it is the Maven package
``org.apache.spark:spark-sql-kafka-0-10_2.13`` of the same version as the installed PySpark
(:func:`kafka_package`; PySpark 4.3.0's own is not on Maven Central, and 4.2.0's serves it),
which Spark fetches from Maven Central through
``spark.jars.packages`` (``kgroup report`` sets it; with ``spark-submit`` pass
``--packages``). Each record's value is one event line; the record's topic and partition
stand for the file (``kafka:TOPIC/PARTITION``) and its offset for the line number.

**Batch** (:func:`kafka_source`): everything from ``startingOffsets`` to the end of the
topic as it is when the job starts.

**Streaming** (:func:`run_stream`): a Structured Streaming query over the topic whose
``foreachBatch`` appends each micro-batch's raw records to ``<out>/_stream/raw/`` (one
directory per batch id, overwritten if Spark replays the batch, so a replay adds nothing
twice) and then recomputes every table from all records so far, exactly as the batch job
would from the same records. The query's checkpoint is ``<out>/_stream/checkpoint``: a
restarted job goes on where it stopped. It runs until it is stopped (SIGINT or SIGTERM
stop it cleanly after the current micro-batch).
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from . import _fs
from ._names import DEFAULT_CLOCK_SKEW_S
from ._pipeline import PipelineResult, run_pipeline

__all__ = ["kafka_package", "kafka_source", "records_source", "run_stream", "start_stream"]


#: PySpark releases whose own ``spark-sql-kafka`` was not on Maven Central when this was
#: written, and the published connector used instead (the newest one before it, tested
#: with it in tests/analytics/test_kafka.py).
_UNPUBLISHED = {"4.3.0": "4.2.0"}


def kafka_package() -> str:
    """The Maven coordinates of Spark's Kafka source for the installed PySpark: the same
    version, or the one ``KGROUP_SPARK_KAFKA_VERSION`` names, or for a release whose
    connector is not published, the newest published one before it."""
    version = os.environ.get("KGROUP_SPARK_KAFKA_VERSION") or pyspark.__version__
    version = _UNPUBLISHED.get(version, version)
    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"


def records_source(records: DataFrame) -> DataFrame:
    """Kafka records (the Kafka source's columns) as a source of raw lines."""
    return records.select(
        F.col("value").cast("string").alias("value"),
        F.concat(
            F.lit("kafka:"), F.col("topic"), F.lit("/"), F.col("partition").cast("string")
        ).alias("file"),
        F.lit(0).cast("long").alias("blk"),
        F.col("offset").cast("long").alias("pos"),
    )


def kafka_source(
    spark: SparkSession, bootstrap: str, topic: str, starting_offsets: str = "earliest"
) -> DataFrame:
    """The topic's records from ``starting_offsets`` to its current end, as a source."""
    records = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        .option("endingOffsets", "latest")
        .option("failOnDataLoss", "false")
        .load()
    )
    return records_source(records)


def start_stream(
    spark: SparkSession,
    *,
    bootstrap: str,
    topic: str,
    out: str,
    on_tables: Callable[[PipelineResult, float], None],
    clock_skew_s: float = DEFAULT_CLOCK_SKEW_S,
    starting_offsets: str = "earliest",
    trigger_seconds: float = 5.0,
    progress: Callable[[str], None] = lambda _text: None,
    collect: bool = True,
) -> StreamingQuery:
    """Start the streaming query (see the module docstring) and return it. After each
    micro-batch the tables under ``out`` are current and ``on_tables(result, started)``
    runs (``started``: when the micro-batch began, ``time.monotonic()``; ``collect``: the
    result carries the tables' rows)."""
    raw_dir = _fs.join(out, "_stream", "raw")

    def on_batch(batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        records_source(batch).write.mode("overwrite").parquet(
            _fs.join(raw_dir, f"batch={batch_id}")
        )
        everything = spark.read.parquet(raw_dir).select("value", "file", "blk", "pos")
        progress(f"micro-batch {batch_id}: recomputing the tables")
        result = run_pipeline(
            spark,
            everything,
            out=out,
            clock_skew_s=clock_skew_s,
            numbered_by_pos=True,
            progress=progress,
            collect=collect,
        )
        on_tables(result, started)

    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", "false")
        .load()
    )
    return (
        stream.writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", _fs.join(out, "_stream", "checkpoint"))
        .trigger(processingTime=f"{trigger_seconds} seconds")
        .start()
    )


def run_stream(spark: SparkSession, args: argparse.Namespace, progress: Any) -> int:
    """Run the streaming job until SIGINT / SIGTERM; 0 when it stopped cleanly."""
    from .job import finish, wants_html

    stop = threading.Event()
    query = start_stream(
        spark,
        bootstrap=args.kafka_bootstrap,
        topic=args.kafka_topic,
        out=args.out,
        on_tables=lambda result, started: finish(spark, result, args, progress, started),
        clock_skew_s=args.clock_skew,
        starting_offsets=args.starting_offsets,
        trigger_seconds=args.trigger_seconds,
        progress=progress,
        collect=wants_html(args),
    )
    previous = _on_signals(stop.set)
    try:
        progress(f"streaming from {args.kafka_topic}; stop with Ctrl-C or SIGTERM")
        while query.isActive and not stop.is_set():
            query.awaitTermination(1)
    finally:
        _restore(previous)
        query.stop()
    failure = query.exception()
    if failure is not None:
        progress(f"the streaming query failed: {failure}")
        return 1
    progress("streaming stopped")
    return 0


def _on_signals(handler: Callable[[], None]) -> dict[int, Any]:
    previous: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, lambda _s, _f: handler())
    return previous


def _restore(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
