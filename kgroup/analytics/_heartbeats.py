"""Heartbeat health: round trips, lateness, failures and event-loop stalls per member.

A *heartbeat* is a ``member.heartbeat_ok`` or ``member.heartbeat_failed`` event. Per member:

``heartbeats``, ``failures``
    How many heartbeats, and how many of them failed.
``rtt_p50_ms``, ``rtt_p99_ms``, ``late_p50_ms``, ``late_p99_ms``
    Exact quantiles of the heartbeats' ``hb_rtt_ms`` and ``hb_late_ms`` (non-null values):
    Spark SQL ``percentile``, linear interpolation between closest ranks (Hyndman-Fan type 7,
    numpy's default): with n sorted values x and h = (n - 1) p, the value is
    x[floor h] + (h - floor h) (x[floor h + 1] - x[floor h]). Null when there are no values.
``session_expiries``
    Failed heartbeats with error code 25 (UNKNOWN_MEMBER_ID).
``stalls``, ``max_stall_ms``
    ``heartbeat.late`` events (the event loop ran a heartbeat late: a loop stall), and the
    greatest ``hb_late_ms`` among them (null when none).

All of it is folded out of the heartbeats in the pass of :mod:`._judge`, member by member;
the tables here read those per-member figures. ``heartbeat_failures``: per member and error
(``error``, else ``code N``, else ``unknown``), how many heartbeats failed with it.
``heartbeat_histogram``: per group (the member's), the heartbeats' ``rtt`` and ``late``
values counted in fixed log-spaced buckets (:data:`kgroup.analytics._names.HISTOGRAM_EDGES_MS`;
only non-empty buckets).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ._names import HISTOGRAM_EDGES_MS

__all__ = ["heartbeat_failures", "heartbeat_health", "heartbeat_histogram"]


def _members(judged: DataFrame) -> DataFrame:
    return judged.where(F.col("member_uid").isNotNull())


def heartbeat_health(judged: DataFrame) -> DataFrame:
    """The ``heartbeat_health`` table: one row per member, from :func:`._judge.judge`."""
    return _members(judged).select(
        "group",
        "member_uid",
        "host",
        "heartbeats",
        F.col("rtt_q")[0].alias("rtt_p50_ms"),
        F.col("rtt_q")[1].alias("rtt_p99_ms"),
        F.col("late_q")[0].alias("late_p50_ms"),
        F.col("late_q")[1].alias("late_p99_ms"),
        "failures",
        "session_expiries",
        "stalls",
        "max_stall_ms",
    )


def heartbeat_failures(judged: DataFrame) -> DataFrame:
    """The ``heartbeat_failures`` table (``group``: the member's)."""
    labels = _members(judged).select(
        "group", "member_uid", F.explode("failure_labels").alias("error")
    )
    return labels.groupBy("group", "member_uid", "error").agg(F.count(F.lit(1)).alias("count"))


def heartbeat_histogram(judged: DataFrame) -> DataFrame:
    """The ``heartbeat_histogram`` table (``group``: the members')."""
    n = len(HISTOGRAM_EDGES_MS)
    counts = _members(judged).select(
        "group",
        F.explode(
            F.array(
                F.struct(F.lit("rtt").alias("metric"), F.col("rtt_hist").alias("c")),
                F.struct(F.lit("late").alias("metric"), F.col("late_hist").alias("c")),
            )
        ).alias("m"),
    )
    per_bucket = counts.select(
        "group", F.col("m.metric").alias("metric"), F.posexplode("m.c").alias("bucket", "count")
    )
    summed = (
        per_bucket.groupBy("group", "metric", "bucket")
        .agg(F.sum("count").alias("count"))
        .where(F.col("count") > 0)
    )
    edges = F.array(*[F.lit(e) for e in HISTOGRAM_EDGES_MS])
    hi = F.when(F.col("bucket") + 1 < n, F.element_at(edges, F.col("bucket") + 2))
    return summed.select(
        "group",
        "metric",
        F.element_at(edges, F.col("bucket") + 1).alias("bucket_lo_ms"),
        hi.cast("double").alias("bucket_hi_ms"),
        F.col("count").cast("long").alias("count"),
    )
