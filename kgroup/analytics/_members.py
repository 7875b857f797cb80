"""One row per member (``member_uid``): who it is and how its log ends.

Columns: member_uid, group, host, pid, client_id, member_id (the last non-empty one),
instance_id (the last non-null one), first_ts, last_ts, last_seq, closed (its last event is
``member.closed`` or ``eventlog.stopped``; otherwise the member crashed, and its claims end
at ``last_ts``), and the event counts :mod:`._churn` reads. One aggregation over the events
(no shuffle of the events themselves: partial aggregation per partition).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ._names import EVENT_CLOSED_NAMES, FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID

__all__ = ["members"]


def _count(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def members(events: DataFrame) -> DataFrame:
    """The members of ``events`` (see the module docstring)."""
    ev = F.col("event")
    code = F.col("error_code")
    failed = ev == "member.heartbeat_failed"
    agg = events.groupBy("member_uid").agg(
        F.max_by("group", "seq").alias("group"),
        F.max_by("host", "seq").alias("host"),
        F.max_by("pid", "seq").alias("pid"),
        F.max_by("client_id", "seq").alias("client_id"),
        F.max_by("member_id", F.when(F.col("member_id") != "", F.col("seq"))).alias("member_id"),
        F.max_by("instance_id", F.when(F.col("instance_id").isNotNull(), F.col("seq"))).alias(
            "instance_id"
        ),
        F.min("ts").alias("first_ts"),
        F.max("ts").alias("last_ts"),
        F.max("seq").alias("last_seq"),
        F.max_by("event", "seq").alias("last_event"),
        _count(ev == "member.joined").alias("joins"),
        _count(ev == "member.leaving").alias("leaves"),
        _count(failed & (code == UNKNOWN_MEMBER_ID)).alias("session_expiries"),
        _count(ev == "member.poll_timeout").alias("poll_timeouts"),
        _count(
            ev.isin("member.heartbeat_failed", "member.fatal_error") & (code == FENCED_INSTANCE_ID)
        ).alias("fencings"),
        _count(ev == "member.lease_expired").alias("lease_expiries"),
    )
    return agg.withColumn("closed", F.col("last_event").isin(*EVENT_CLOSED_NAMES)).drop(
        "last_event"
    )
