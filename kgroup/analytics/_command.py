"""``kgroup report``: the CLI's entry to the job, importable without PySpark installed.

``kgroup report PATH... --out DIR [--master M] [--clock-skew SECONDS]`` runs
:mod:`kgroup.analytics.job` in this process on ``local[*]`` unless ``--master`` says
otherwise. Without the ``analytics`` extra it prints how to install it and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._names import DEFAULT_CLOCK_SKEW_S

__all__ = ["add_arguments", "add_parser", "run"]

_HINT = "kgroup report needs PySpark (and Java 17+): pip install 'kgroup[analytics]'"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options (shared with ``kgroup report``)."""
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="event-log files or directories (every *.jsonl / *.jsonl.gz under them, "
        "recursively); local paths or any Hadoop URI Spark understands",
    )
    parser.add_argument("--out", required=True, help="output directory (local path or URI)")
    parser.add_argument(
        "--master",
        help="Spark master URL (local[2], spark://HOST:7077, yarn, k8s://...); "
        "by default the one spark-submit gives, else local[*]",
    )
    parser.add_argument(
        "--clock-skew",
        type=float,
        default=DEFAULT_CLOCK_SKEW_S,
        metavar="SECONDS",
        help="overlapping claims this short or shorter are taken for clock skew between "
        f"hosts and not reported (default {DEFAULT_CLOCK_SKEW_S})",
    )
    parser.add_argument("--kafka-bootstrap", metavar="HOST:PORT", help="read events from Kafka")
    parser.add_argument("--kafka-topic", metavar="TOPIC", help="the events topic")
    parser.add_argument(
        "--starting-offsets",
        default="earliest",
        help="Kafka source startingOffsets (default earliest)",
    )
    parser.add_argument(
        "--stream",
        action="store_true",
        help="with --kafka-*: a Structured Streaming job that rewrites the tables after "
        "every micro-batch until stopped",
    )
    parser.add_argument(
        "--trigger-seconds",
        type=float,
        default=5.0,
        help="with --stream: seconds between micro-batches (default 5)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the session kgroup starts (repeatable), e.g. "
        "spark.driver.memory=2g; under spark-submit use its own --conf",
    )
    parser.add_argument(
        "--reader",
        choices=("auto", "python", "spark"),
        default="auto",
        help="how log files are read: python (local files, parsed in Python tasks: the "
        "fastest; on a cluster kgroup[analytics] must be on every executor), spark (Spark's "
        "JSON reader: any file system), auto (python on a local master when every file is "
        "local; the default)",
    )
    parser.add_argument("--no-html", action="store_true", help="skip the HTML report")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def add_parser(sub: Any) -> None:
    """Add the ``report`` subcommand to the CLI's subparsers ``sub``."""
    text = "event-log report on Spark: rebalances, unavailability, churn, heartbeats, safety"
    add_arguments(sub.add_parser("report", help=text, description=text))


def run(args: argparse.Namespace) -> int:
    """Run ``kgroup report`` (``local[*]`` unless ``--master`` is given)."""
    try:
        from .job import run as run_job
    except ImportError as exc:
        print(f"{_HINT} ({exc})", file=sys.stderr)
        return 2
    return run_job(args, default_master="local[*]")
