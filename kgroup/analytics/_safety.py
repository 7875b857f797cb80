"""Safety: every interval in which two members claimed the same partition (or item).

Two ownership intervals (:mod:`._ownership`) of one group, topic and partition held by
different members *overlap* for ``[max(from_ts), min(to_ts)]`` when that is longer than zero.
Timestamps come from each member's own host clock, so a real handover between hosts can look
like a short overlap: an overlap is reported only when it lasts longer than the clock-skew
allowance (``--clock-skew``, default
:data:`~kgroup.analytics._names.DEFAULT_CLOCK_SKEW_S` = 0.1 s), and each row records the
allowance used. ``member_a`` is the member whose interval starts first (sorted by
``(from_ts, member_uid, from_seq)``), ``member_b`` the other.

Finding the pairs without comparing every interval with every other: sorted by start, an
interval can overlap an earlier one only if it starts before the latest end among the
earlier ones. Those few candidates are then joined with the earlier intervals of their
partition.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ._ownership import seconds_between

__all__ = ["overlaps"]


def overlaps(ownership: DataFrame, skew_allowance_s: float) -> DataFrame:
    """The ``overlaps`` table."""
    key = ("group", "topic", "partition")
    order = Window.partitionBy(*key).orderBy("from_ts", "member_uid", "from_seq")
    iv = ownership.select(
        *key,
        "member_uid",
        "host",
        "from_ts",
        "to_ts",
        "from_seq",
        F.row_number().over(order).alias("rank"),
        F.max("to_ts").over(order.rowsBetween(Window.unboundedPreceding, -1)).alias("prev_end"),
    )
    b = iv.where(F.col("prev_end").isNotNull() & (F.col("prev_end") > F.col("from_ts"))).alias("b")
    a = iv.alias("a")
    pairs = b.join(
        a,
        (F.col("a.group") == F.col("b.group"))
        & (F.col("a.topic") == F.col("b.topic"))
        & (F.col("a.partition") == F.col("b.partition"))
        & (F.col("a.rank") < F.col("b.rank"))
        & (F.col("a.to_ts") > F.col("b.from_ts"))
        & (F.col("a.member_uid") != F.col("b.member_uid")),
    )
    start = F.col("b.from_ts")
    end = F.least(F.col("a.to_ts"), F.col("b.to_ts"))
    seconds = seconds_between(start, end)
    return pairs.select(
        F.col("b.group").alias("group"),
        F.col("b.topic").alias("topic"),
        F.col("b.partition").alias("partition"),
        F.col("a.member_uid").alias("member_a"),
        F.col("b.member_uid").alias("member_b"),
        F.col("a.host").alias("host_a"),
        F.col("b.host").alias("host_b"),
        start.alias("from_ts"),
        end.alias("to_ts"),
        seconds.alias("seconds"),
        F.lit(float(skew_allowance_s)).alias("skew_allowance_s"),
    ).where(F.col("seconds") > F.lit(float(skew_allowance_s)))
