"""Paths under the output directory, local or on any Hadoop file system.

The tables are written by Spark wherever ``--out`` points (``/tmp/report``,
``hdfs://nn/reports/x``, ``s3a://...``). The few files the driver writes itself
(``summary.json``, ``report.html``) and the staging directory it removes go through the
same Hadoop file system API, so a URI output works on a cluster as a local path does here.
"""

from __future__ import annotations

import os
import shutil
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import SparkSession

__all__ = ["delete", "is_local", "join", "local_path", "write_bytes"]


def is_local(path: str) -> bool:
    """Whether ``path`` is on this machine's file system (no scheme, or ``file:``)."""
    scheme = urlparse(path).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def local_path(path: str) -> str:
    """``path`` without a ``file:`` scheme."""
    return urlparse(path).path if path.startswith("file:") else path


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def _hadoop(spark: SparkSession, path: str) -> tuple[Any, Any]:
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(conf), hpath


def delete(spark: SparkSession, path: str) -> None:
    """Remove ``path`` and everything under it (nothing if it does not exist)."""
    if is_local(path):
        shutil.rmtree(local_path(path), ignore_errors=True)
        return
    fs, hpath = _hadoop(spark, path)
    fs.delete(hpath, True)


def write_bytes(spark: SparkSession, path: str, data: bytes) -> None:
    """Create or replace the file ``path`` with ``data``."""
    if is_local(path):
        target = local_path(path)
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        # Replaced in one step: a reader (or a streaming job's next batch) never sees a
        # half-written file.
        partial = f"{target}.partial"
        with open(partial, "wb") as handle:
            handle.write(data)
        os.replace(partial, target)
        return
    fs, hpath = _hadoop(spark, path)
    stream = fs.create(hpath, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()
