"""The cluster path and the command line, in real processes.

``test_spark_submit_on_a_standalone_cluster`` starts a Spark standalone master and one worker
from the installed PySpark (``spark-class org.apache.spark.deploy.master.Master`` /
``...worker.Worker``) on loopback, and runs the job file through ``spark-submit --master
spark://127.0.0.1:PORT``: the tables it writes must equal the reference's. Readiness is read
from the daemons' own log lines (no sleeping).

``test_kgroup_report_command`` runs ``kgroup report`` as a user would (``local[*]``) and checks
its progress lines, its summary, the files it writes and its exit code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pyspark
import pytest
from pyspark.sql import SparkSession

import kgroup.analytics.job
from kgroup._broker_process import free_port
from kgroup.analytics import TABLES
from kgroup.analytics._pipeline import collect_rows
from tests.analytics._compare import assert_tables_equal
from tests.analytics._logs import Options, simulate, write_logs
from tests.analytics._reference import reference_tables, source_lines

# One worker runs every Spark test (one JVM; see the Makefile's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("spark")


SPARK_HOME = Path(pyspark.__file__).parent
CHECKOUT = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["SPARK_HOME"] = str(SPARK_HOME)
    e["SPARK_LOCAL_IP"] = "127.0.0.1"
    e["PYSPARK_PYTHON"] = sys.executable
    e["PYSPARK_DRIVER_PYTHON"] = sys.executable
    e["PYTHONPATH"] = str(CHECKOUT) + os.pathsep + e.get("PYTHONPATH", "")
    e["SPARK_LOG_DIR"] = e["SPARK_WORKER_DIR"] = ""
    return {k: v for k, v in e.items() if v != ""}


class Daemon:
    """A Spark daemon process whose output lines are read on a thread; ``wait_for(text)``
    blocks until a line contains ``text`` (or the process exits, or the deadline)."""

    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name = name
        self.log = log
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env(),
        )
        assert self.proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        with open(self.log, "w") as sink:
            for line in stream:
                sink.write(line)
                sink.flush()
                with self._cond:
                    self.lines.append(line)
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, text: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"{self.name}: no {text!r} (log: {self.log})")
                self._cond.wait(min(left, 1.0))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[str]:
    """A master and one worker (2 cores, 1 GiB) on loopback; yields the master URL."""
    port = free_port()
    master = Daemon(
        "master",
        [
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1",
            "--port", str(port),
            "--webui-port", str(free_port()),
        ],
        tmp_path / "master.log",
    )  # fmt: skip
    url = f"spark://127.0.0.1:{port}"
    worker: Daemon | None = None
    try:
        master.wait_for("I have been elected leader")
        worker = Daemon(
            "worker",
            [
                "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1",
                "--webui-port", str(free_port()),
                "--cores", "2",
                "--memory", "1g",
                "--work-dir", str(tmp_path / "work"),
                url,
            ],
            tmp_path / "worker.log",
        )  # fmt: skip
        worker.wait_for("Successfully registered with master")
        yield url
    finally:
        if worker is not None:
            worker.stop()
        master.stop()


@pytest.mark.slow  # about 90 s with the daemons' start: beyond make test's 20-minute budget
def test_spark_submit_on_a_standalone_cluster(
    standalone_cluster: str, spark: SparkSession, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    write_logs(simulate(51, Options(groups=3, overlaps=0.5)), logs, 51, spoil=True)
    out = tmp_path / "out"
    job = kgroup.analytics.job.__file__
    proc = subprocess.run(
        [
            str(SPARK_HOME / "bin" / "spark-submit"),
            "--master", standalone_cluster,
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.executor.memory=512m",
            "--conf", "spark.sql.shuffle.partitions=2",
            "--conf", "spark.ui.enabled=false",
            job, str(logs), "--out", str(out), "--no-html",
        ],
        capture_output=True,
        text=True,
        env=env(),
        timeout=240,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert f"on {standalone_cluster}" in proc.stdout  # the master spark-submit gave
    want = reference_tables(source_lines([str(logs)]))
    summary = json.loads((out / "summary.json").read_text())
    for key in ("events", "bad_records", "duplicates", "out_of_order", "groups", "members"):
        assert summary[key] == want["summary"][0][key], key
    got = {}
    for name in TABLES:
        if name == "summary":
            continue
        path = out / "bad_records" if name == "bad_records" else out / "tables" / name
        got[name] = collect_rows(spark.read.parquet(str(path)), name)
    assert_tables_equal(got, want)


def test_kgroup_report_command(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_logs(simulate(61, Options(groups=2)), logs, 61, spoil=True)
    out = tmp_path / "report"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kgroup",
            "report",
            str(logs),
            "--out",
            str(out),
            "--clock-skew",
            "0.25",
            "--master",
            "local[2]",
        ],
        capture_output=True,
        text=True,
        env=env(),
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    text = proc.stdout
    for stage in ("reading and validating", "rebalances", "unavailability", "summary"):
        assert stage in text
    want = reference_tables(source_lines([str(logs)]), 0.25)["summary"][0]
    assert f"read {want['events'] + want['bad_records']:,} lines" in text
    assert f"events        {want['events']:,}" in text
    assert f"bad records   {want['bad_records']:,}" in text
    assert "time taken" in text and str(out / "tables") in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["events"] == want["events"] and summary["groups"] == 2
    assert sorted(p.name for p in (out / "tables").iterdir()) == sorted(
        n for n in TABLES if n != "bad_records"
    )
    assert not (out / "_work").exists()
    html = out / "report.html"
    try:
        import kgroup.analytics.report  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        assert not html.exists() and "HTML report skipped" in text
    else:
        assert html.exists() and str(html) in text
    # A path that does not exist is a usage error, not a crash.
    bad = subprocess.run(
        [sys.executable, "-m", "kgroup", "report", str(tmp_path / "nope"), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env(),
        timeout=240,
        check=False,
    )
    assert bad.returncode == 2 and "kgroup report:" in bad.stderr
