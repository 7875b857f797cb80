"""Events from a Kafka topic on Apache Kafka, through Spark's Kafka source: batch, and a
Structured Streaming query that keeps the tables current as events arrive.

Events are produced with aiokafka (under ``asyncio.run``, before Spark is called: Spark
never runs on an event loop's thread). The expected tables come from the reference, fed the
same records (each partition a "file", each offset its line number).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from pyspark.sql import SparkSession

from kgroup.analytics._command import add_arguments
from kgroup.analytics._command import run as run_command
from kgroup.analytics._kafka import kafka_source, start_stream
from kgroup.analytics._pipeline import PipelineResult, run_pipeline
from kgroup.testing import KafkaBroker
from tests.analytics._compare import assert_tables_equal
from tests.analytics._logs import Options, simulate
from tests.analytics._reference import reference_tables
from tests.analytics.conftest import kafka_unavailable

# One worker runs every Spark test (one JVM; see the Makefile's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("spark")


PARTITIONS = 3


@pytest.fixture
def kafka_spark(spark: SparkSession) -> SparkSession:
    if kafka_unavailable:
        message = f"Spark's Kafka source is unavailable: {kafka_unavailable[0]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return spark


def event_lines(seed: int) -> list[str]:
    members = simulate(seed, Options(groups=2, members=(2, 3), duration_s=40.0, overlaps=0.5))
    events = sorted((e for m in members for e in m), key=lambda e: (e["ts"], e["member_uid"]))
    lines = [json.dumps(e, separators=(",", ":")) for e in events]
    lines.insert(len(lines) // 2, "this is not an event")
    lines.append(lines[10])  # a duplicate
    return lines


async def produce(bootstrap: str, topic: str, lines: list[str]) -> list[tuple[int, int, str]]:
    """Send ``lines`` (spread over the partitions by member) and return each one's
    (partition, offset, line)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        futures = []
        for i, line in enumerate(lines):
            partition = (hash(line[60:100]) if line.startswith("{") else i) % PARTITIONS
            futures.append(await producer.send(topic, line.encode(), partition=partition))
        sent = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return [(md.partition, md.offset, line) for md, line in zip(sent, lines, strict=True)]


def expected(topic: str, records: list[tuple[int, int, str]]) -> dict[str, list[dict[str, Any]]]:
    by_partition: dict[int, list[tuple[int, str]]] = {}
    for partition, offset, line in records:
        by_partition.setdefault(partition, []).append((offset, line))
    sources = [(f"kafka:{topic}/{p}", sorted(rows)) for p, rows in sorted(by_partition.items())]
    return reference_tables(sources, numbered_by_pos=True)


@pytest.mark.timeout(600)  # 123 s once on a loaded two-core machine
def test_batch_read_from_kafka(
    kafka_spark: SparkSession,
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = make_topic(PARTITIONS)
    records = asyncio.run(produce(kafka_broker.bootstrap, topic, event_lines(31)))
    got = run_pipeline(
        kafka_spark,
        kafka_source(kafka_spark, kafka_broker.bootstrap, topic),
        out=str(tmp_path / "out"),
        clock_skew_s=0.1,
        numbered_by_pos=True,
        progress=lambda _t: None,
    )
    want = expected(topic, records)
    assert got.summary["events"] == want["summary"][0]["events"]
    assert got.summary["bad_records"] == 2
    assert_tables_equal(got.tables, want)


@pytest.mark.timeout(600)  # two micro-batches; 189 s once on a loaded two-core machine
def test_streaming_keeps_the_tables_current(
    kafka_spark: SparkSession,
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = make_topic(PARTITIONS)
    out = tmp_path / "out"
    results: list[PipelineResult] = []
    # The first events are in the topic before the query starts (one micro-batch takes them
    # all); the next arrive while it runs.
    records = asyncio.run(produce(kafka_broker.bootstrap, topic, event_lines(41)))
    query = start_stream(
        kafka_spark,
        bootstrap=kafka_broker.bootstrap,
        topic=topic,
        out=str(out),
        on_tables=lambda result, _started: results.append(result),
        trigger_seconds=0.5,
    )
    try:
        query.processAllAvailable()
        want = expected(topic, records)
        assert results and results[-1].summary["events"] == want["summary"][0]["events"]
        assert_tables_equal(results[-1].tables, want)
        # More events arrive: the tables catch up.
        records += asyncio.run(produce(kafka_broker.bootstrap, topic, event_lines(42)))
        query.processAllAvailable()
        want = expected(topic, records)
        assert results[-1].summary["events"] == want["summary"][0]["events"]
        assert_tables_equal(results[-1].tables, want)
        on_disk = kafka_spark.read.parquet(str(out / "tables" / "churn")).count()
        assert on_disk == len(want["churn"])
    finally:
        query.stop()
    assert query.exception() is None


#: How long the command test waits for its first summary before it stops the command
#: anyway (and fails on the missing summary). A micro-batch took 14 s on an idle machine
#: and over 100 s on a loaded two-core one; the test's own timeout is longer still, so a
#: slow run fails here, with the session's Py4J connection intact, not inside a Spark call.
FIRST_SUMMARY_S = 360


@pytest.mark.timeout(600)
def test_report_stream_command_runs_until_stopped(
    kafka_spark: SparkSession,
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``kgroup report --stream``'s command path on the shared session: it writes the
    summary after a micro-batch and stops cleanly (exit 0) on SIGTERM."""
    topic = make_topic(PARTITIONS)
    records = asyncio.run(produce(kafka_broker.bootstrap, topic, event_lines(51)))
    out = tmp_path / "out"
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [
            "--out", str(out), "--kafka-bootstrap", kafka_broker.bootstrap,
            "--kafka-topic", topic, "--stream", "--trigger-seconds", "0.5", "--no-html",
        ]
    )  # fmt: skip
    guard = signal.getsignal(signal.SIGTERM)
    stopped = threading.Event()
    gave_up: list[float] = []

    def stop_when_written() -> None:
        # Once the command's own handler is in place and a micro-batch wrote the summary;
        # at the deadline, once the handler is in place, whether or not it did.
        deadline = time.monotonic() + FIRST_SUMMARY_S
        while not stopped.is_set():
            handled = signal.getsignal(signal.SIGTERM) != guard
            if handled and (out / "summary.json").exists():
                os.kill(os.getpid(), signal.SIGTERM)
                return
            if handled and time.monotonic() > deadline:
                gave_up.append(FIRST_SUMMARY_S)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            stopped.wait(0.1)

    watcher = threading.Thread(target=stop_when_written, daemon=True)
    watcher.start()
    try:
        code = run_command(args)
    finally:
        stopped.set()
        watcher.join()
    assert not gave_up, f"no summary after {FIRST_SUMMARY_S} s of streaming"
    assert code == 0
    assert signal.getsignal(signal.SIGTERM) == guard  # the handler is put back
    summary = json.loads((out / "summary.json").read_text())
    want = expected(topic, records)["summary"][0]
    assert (summary["events"], summary["bad_records"]) == (want["events"], 2)
    printed = capsys.readouterr().out
    assert "streaming from" in printed and "streaming stopped" in printed
