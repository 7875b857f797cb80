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

``heartbeat_failures``: per member and error (``error``, else ``code N``, else ``unknown``),
how many heartbeats failed with it. ``heartbeat_histogram``: per group, the heartbeats'
``rtt`` and ``late`` values counted in fixed log-spaced buckets
(:data:`kgroup.analytics._names.HISTOGRAM_EDGES_MS`; only non-empty buckets).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ._names import HISTOGRAM_EDGES_MS, UNKNOWN_MEMBER_ID
from ._read import HEARTBEATS as _HEARTBEATS

__all__ = ["heartbeat_failures", "heartbeat_health", "heartbeat_histogram"]


def _count(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def heartbeat_health(events: DataFrame, members: DataFrame) -> DataFrame:
    """The ``heartbeat_health`` table: one row per member."""
    ev = F.col("event")
    hb = ev.isin(*_HEARTBEATS)
    failed = ev == "member.heartbeat_failed"
    late = ev == "heartbeat.late"
    rtt = F.when(hb, F.col("hb_rtt_ms"))
    lateness = F.when(hb, F.col("hb_late_ms"))
    # One exact percentile aggregate per column, for both quantiles (each aggregate keeps
    # its own count of every distinct value: two per column would do that twice).
    quantiles = F.array(F.lit(0.5), F.lit(0.99))
    agg = (
        events.where(hb | late)
        .groupBy("member_uid")
        .agg(
            _count(hb).alias("heartbeats"),
            F.percentile(rtt, quantiles).alias("rtt_q"),
            F.percentile(lateness, quantiles).alias("late_q"),
            _count(failed).alias("failures"),
            _count(failed & (F.col("error_code") == UNKNOWN_MEMBER_ID)).alias("session_expiries"),
            _count(late).alias("stalls"),
            F.max(F.when(late, F.col("hb_late_ms"))).alias("max_stall_ms"),
        )
    )
    m = members.select("member_uid", "group", "host")
    zero = F.lit(0).cast("long")
    return m.join(agg, "member_uid", "left").select(
        "group",
        "member_uid",
        "host",
        F.coalesce(F.col("heartbeats"), zero).alias("heartbeats"),
        F.col("rtt_q")[0].alias("rtt_p50_ms"),
        F.col("rtt_q")[1].alias("rtt_p99_ms"),
        F.col("late_q")[0].alias("late_p50_ms"),
        F.col("late_q")[1].alias("late_p99_ms"),
        F.coalesce(F.col("failures"), zero).alias("failures"),
        F.coalesce(F.col("session_expiries"), zero).alias("session_expiries"),
        F.coalesce(F.col("stalls"), zero).alias("stalls"),
        "max_stall_ms",
    )


def heartbeat_failures(events: DataFrame) -> DataFrame:
    """The ``heartbeat_failures`` table."""
    label = F.coalesce(
        F.col("error"),
        F.concat(F.lit("code "), F.col("error_code").cast("string")),
        F.lit("unknown"),
    )
    return (
        events.where(F.col("event") == "member.heartbeat_failed")
        .groupBy("group", "member_uid", label.alias("error"))
        .agg(F.count(F.lit(1)).alias("count"))
    )


def _bucket(value: Column) -> Column:
    """The index of the bucket holding ``value`` (0 for anything below the second edge)."""
    index: Column = F.lit(0)
    for i, edge in enumerate(HISTOGRAM_EDGES_MS[1:], start=1):
        index = F.when(value >= edge, F.lit(i)).otherwise(index)
    return index


def heartbeat_histogram(events: DataFrame) -> DataFrame:
    """The ``heartbeat_histogram`` table."""
    hb = events.where(F.col("event").isin(*_HEARTBEATS))
    values = hb.select(
        "group",
        F.explode(
            F.array(
                F.struct(F.lit("rtt").alias("metric"), F.col("hb_rtt_ms").alias("value")),
                F.struct(F.lit("late").alias("metric"), F.col("hb_late_ms").alias("value")),
            )
        ).alias("m"),
    ).select("group", F.col("m.metric").alias("metric"), F.col("m.value").alias("value"))
    counted = (
        values.where(F.col("value").isNotNull())
        .groupBy("group", "metric", _bucket(F.col("value")).alias("bucket"))
        .agg(F.count(F.lit(1)).alias("count"))
    )
    edges = F.array(*[F.lit(e) for e in HISTOGRAM_EDGES_MS])
    n = len(HISTOGRAM_EDGES_MS)
    hi = F.when(F.col("bucket") + 1 < n, F.element_at(edges, F.col("bucket") + 2))
    return counted.select(
        "group",
        "metric",
        F.element_at(edges, F.col("bucket") + 1).alias("bucket_lo_ms"),
        hi.cast("double").alias("bucket_hi_ms"),
        "count",
    )
