"""The report job: ``python -m kgroup.analytics.job`` or ``spark-submit .../job.py``.

Usage::

    JOB=$(python -c 'import kgroup.analytics.job as j; print(j.__file__)')
    spark-submit --master spark://HOST:7077 "$JOB" /logs/2026-11-26 hdfs://nn/logs/more \\
        --out /reports/incident-42

    python -m kgroup.analytics.job LOGS... --out DIR [--clock-skew S] [--master M]

No master is set here: under ``spark-submit`` its ``--master`` applies, and ``--master`` on
this command line passes through to the session builder. ``kgroup report`` runs this job
with ``local[*]`` when it is given no ``--master``. Events can also come from a Kafka topic
(``--kafka-bootstrap`` and ``--kafka-topic``; ``--stream`` keeps the tables current as
events arrive), through Spark's Kafka source (see :mod:`._kafka`).

The job prints its stages and the number of events read as it goes, and a summary at the
end. Exit codes: 0 done (bad records do not fail the job: they are counted and written),
2 bad usage (for example a path that does not exist).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from pyspark import SparkContext
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from kgroup.analytics import _fs
from kgroup.analytics._command import add_arguments
from kgroup.analytics._pipeline import PipelineResult, python_reader_asked, run_pipeline
from kgroup.analytics._read import LogFiles, empty_source, read_files

__all__ = [
    "FIRST_TIER_ONLY",
    "LOCAL_DEFAULTS",
    "build_session",
    "local_settings",
    "main",
    "reads_in_python",
    "run",
    "wants_html",
]


#: The JVM's settings on a local master when ``--conf`` does not give them: a 512 MiB heap,
#: the serial collector, bounded code cache, direct memory, metaspace and thread stacks.
#: With the Python driver, the process pair stays within 1 GiB (the benchmark's figures
#: are with these; the serial collector and a 64 MiB code cache took 50-80 MiB off the
#: parallel collector's peak at the same speed at 10M events).
LOCAL_DEFAULTS = {
    "spark.driver.memory": "512m",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:ReservedCodeCacheSize=64m "
    "-XX:MaxDirectMemorySize=128m -XX:MaxMetaspaceSize=256m -Xss512k",
}
#: Added to the JVM's options on a local master when the python reader reads the logs:
#: only the JIT's first tier. There the JVM shares two cores with the Python workers and
#: the optimising tier (C2) spent them compiling code the job then ran for seconds (10M
#: events: 73.7 and 76.2 s against 84.8 and 88.0 s). Spark's JSON reader is the JVM's own
#: hot loop and needs C2 (10M events: 276.2 s with the flag against 151.5 s without).
FIRST_TIER_ONLY = "-XX:TieredStopAtLevel=1"


def local_settings(given: Iterable[str], *, python_reader: bool) -> dict[str, str]:
    """The settings a local master's JVM gets from kgroup: :data:`LOCAL_DEFAULTS` but the
    keys ``given`` (by ``--conf``), and :data:`FIRST_TIER_ONLY` in the JVM's options for
    the python reader."""
    given = set(given)
    settings = {k: v for k, v in LOCAL_DEFAULTS.items() if k not in given}
    options = settings.get("spark.driver.extraJavaOptions")
    if options is not None and python_reader:
        settings["spark.driver.extraJavaOptions"] = f"{options} {FIRST_TIER_ONLY}"
    return settings


def build_session(
    master: str | None,
    *,
    kafka: bool = False,
    conf: Sequence[str] = (),
    python_reader: bool = False,
) -> SparkSession:
    """The job's session. ``master`` None leaves the choice to ``spark-submit`` (or
    PySpark's own default, ``local[*]``). ``kafka`` adds the ``spark-sql-kafka`` package
    matching the installed PySpark. ``conf``: ``KEY=VALUE`` settings, applied last.
    ``python_reader``: the python reader will read the logs (on a local master the JVM
    then runs with :data:`FIRST_TIER_ONLY`)."""
    builder = SparkSession.builder.appName("kgroup-report")
    if master:
        builder = builder.master(master)
    builder = builder.config("spark.sql.session.timeZone", "UTC").config(
        "spark.ui.showConsoleProgress", "false"
    )
    if kafka:
        from kgroup.analytics._kafka import kafka_package

        builder = builder.config("spark.jars.packages", kafka_package())
    given_keys = {item.partition("=")[0].strip() for item in conf}
    if master and master.startswith("local") and SparkContext._active_spark_context is None:
        # This process starts the JVM, which is the driver and the executors at once: keep
        # the two together within about 1 GiB unless told otherwise.
        for key, value in local_settings(given_keys, python_reader=python_reader).items():
            builder = builder.config(key, value)
        os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    for item in conf:
        key, _, value = item.partition("=")
        builder = builder.config(key.strip(), value.strip())
    spark = builder.getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    given = spark.sparkContext.getConf()
    if not given.contains("spark.sql.maxConcurrentOutputFileWriters"):
        # The staged lines are written partitioned by kind: with a writer per partition
        # open at once Spark need not sort every line by kind first.
        spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", "4")
    if not given.contains("spark.sql.shuffle.partitions"):
        # Spark's 200 is for clusters; two per core keeps a small machine's tasks few.
        cores = spark.sparkContext.defaultParallelism
        spark.conf.set("spark.sql.shuffle.partitions", str(min(200, max(2, 2 * cores))))
    spark.sparkContext.setLogLevel("WARN")
    return spark


class Progress:
    """Prints the job's stages, and while a stage runs, Spark's task counts for it (from
    the status tracker, at most every ``interval`` seconds, only when they change)."""

    def __init__(
        self, spark: SparkSession, stream: TextIO, *, quiet: bool, interval: float = 2.0
    ) -> None:
        self._spark = spark
        self._stream = stream
        self._quiet = quiet
        self._interval = interval
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = ""

    def __call__(self, text: str) -> None:
        self.say(text)

    def say(self, text: str) -> None:
        if not self._quiet:
            print(f"[{time.monotonic() - self._t0:7.1f}s] {text}", file=self._stream, flush=True)

    def _watch(self) -> None:
        tracker = self._spark.sparkContext.statusTracker()
        while not self._stop.wait(self._interval):
            try:
                parts = []
                for stage_id in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(stage_id)
                    if info is not None:
                        parts.append(
                            f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                        )
            except Exception:  # the context is stopping: nothing more to show
                return
            line = ", ".join(parts)
            if line and line != self._last:
                self._last = line
                self.say(f"  spark {line}")

    def __enter__(self) -> Progress:
        if not self._quiet:
            self._thread = threading.Thread(target=self._watch, name="kgroup-progress")
            self._thread.daemon = True
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def wants_html(args: argparse.Namespace) -> bool:
    """Whether the run renders the HTML report (asked for, and the module is there): only
    then are the tables' rows collected on the driver."""
    if args.no_html:
        return False
    try:
        import kgroup.analytics.report  # noqa: F401
    except ImportError:
        return False
    return True


def _render_html(spark: SparkSession, result: PipelineResult, out: str, say: Any) -> str | None:
    """Write ``<out>/report.html`` with :func:`kgroup.analytics.report.render_html` when
    that module is installed; return its path, or None (with a note) when it is not."""
    try:
        from kgroup.analytics.report import render_html
    except ImportError as exc:
        say(f"HTML report skipped: kgroup.analytics.report is not available ({exc})")
        return None
    target = _fs.join(out, "report.html")
    if _fs.is_local(target):
        render_html(result.tables, _fs.local_path(target), truncated=result.truncated)
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, "report.html")
            render_html(result.tables, local, truncated=result.truncated)
            with open(local, "rb") as handle:
                _fs.write_bytes(spark, target, handle.read())
    return target


def _summary_text(result: PipelineResult, out: str, html: str | None, seconds: float) -> str:
    s = result.summary
    lines = [
        "summary",
        f"  events        {s['events']:,}",
        f"  groups        {s['groups']:,}",
        f"  members       {s['members']:,}",
        f"  bad records   {s['bad_records']:,} (duplicates {s['duplicates']:,}, "
        f"out of order {s['out_of_order']:,}); see {_fs.join(out, 'bad_records')}",
        f"  time span     {s['first_ts'] or '-'} .. {s['last_ts'] or '-'}",
        f"  time taken    {seconds:.1f} s",
        f"  tables        {_fs.join(out, 'tables')}",
        f"  report        {html or '(no HTML report)'}",
    ]
    if result.overlaps:
        lines.append(
            f"  SAFETY        {result.overlaps:,} overlapping claim(s): see "
            f"{_fs.join(out, 'tables', 'overlaps')}"
        )
    if result.truncated:
        lines.append(f"  note          report rows capped for: {', '.join(result.truncated)}")
    return "\n".join(lines)


def reads_in_python(args: argparse.Namespace, master: str | None) -> bool:
    """Whether the python reader will read the logs ``args`` name (unless a line only
    Spark's reader reads as an event sends them to it): the pipeline's choice
    (:func:`._pipeline.python_reader_asked`), made before the session starts."""
    kafka = bool(args.kafka_bootstrap or args.kafka_topic)
    return (
        not kafka
        and python_reader_asked(args.reader, master, numbered_by_pos=kafka)
        and all(_fs.is_local(p) for p in args.paths)
    )


def run(args: argparse.Namespace, *, default_master: str | None = None) -> int:
    """Run the job as ``args`` (from :func:`add_arguments`) say."""
    kafka = bool(args.kafka_bootstrap or args.kafka_topic)
    if kafka and not (args.kafka_bootstrap and args.kafka_topic):
        print("kgroup report: --kafka-bootstrap and --kafka-topic go together", file=sys.stderr)
        return 2
    if kafka and args.paths:
        print("kgroup report: give PATHs or --kafka-*, not both", file=sys.stderr)
        return 2
    if args.stream and not kafka:
        print("kgroup report: --stream needs --kafka-bootstrap and --kafka-topic", file=sys.stderr)
        return 2
    if args.clock_skew < 0:
        print("kgroup report: --clock-skew must be >= 0", file=sys.stderr)
        return 2
    missing = [p for p in args.paths if _fs.is_local(p) and not os.path.exists(_fs.local_path(p))]
    if missing:
        print(f"kgroup report: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    started = time.monotonic()
    bad_conf = [c for c in args.conf if "=" not in c]
    if bad_conf:
        print(f"kgroup report: --conf wants KEY=VALUE, not {bad_conf[0]!r}", file=sys.stderr)
        return 2
    master = args.master or default_master
    spark = build_session(
        master, kafka=kafka, conf=args.conf, python_reader=reads_in_python(args, master)
    )
    with Progress(spark, sys.stdout, quiet=args.quiet) as progress:
        progress(f"Spark {spark.version} on {spark.sparkContext.master}")
        if args.stream:
            from kgroup.analytics._kafka import run_stream

            return run_stream(spark, args, progress)
        source: DataFrame | LogFiles
        if kafka:
            from kgroup.analytics._kafka import kafka_source

            source = kafka_source(
                spark, args.kafka_bootstrap, args.kafka_topic, args.starting_offsets
            )
        elif args.paths:
            try:
                # Local files are listed in Python, and read by Spark only if need be.
                files = LogFiles(spark, list(args.paths))
                source = files if files.local else read_files(spark, files.paths)
            except AnalysisException as exc:
                print(f"kgroup report: {exc}", file=sys.stderr)
                return 2
        else:
            source = empty_source(spark)
        result = run_pipeline(
            spark,
            source,
            out=args.out,
            clock_skew_s=args.clock_skew,
            numbered_by_pos=kafka,
            progress=progress,
            collect=wants_html(args),
            reader=args.reader,
        )
        finish(spark, result, args, progress, started)
    return 0


def finish(
    spark: SparkSession,
    result: PipelineResult,
    args: argparse.Namespace,
    progress: Progress,
    started: float,
) -> None:
    """Write ``summary.json`` and the HTML report, and print the summary."""
    seconds = time.monotonic() - started
    result.summary["job_seconds"] = round(seconds, 3)
    data = dict(result.summary)
    data["out"] = args.out
    data["report_rows_capped"] = list(result.truncated)
    _fs.write_bytes(
        spark, _fs.join(args.out, "summary.json"), (json.dumps(data, indent=2) + "\n").encode()
    )
    html = None if args.no_html else _render_html(spark, result, args.out, progress.say)
    if not args.quiet:
        print(_summary_text(result, args.out, html, seconds), flush=True)


def main(argv: Sequence[str] | None = None, *, default_master: str | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="kgroup.analytics.job", description="kgroup event-log report (PySpark)"
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(args, default_master=default_master)


if __name__ == "__main__":  # pragma: no cover - run by spark-submit or python -m
    sys.exit(main())
