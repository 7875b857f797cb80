"""Unavailability: partition-seconds with no owner.

Per group, topic and partition, the ownership intervals (:mod:`._ownership`, from every
member) are sorted by ``(from_ts, to_ts, member_uid)``. A gap opens where an interval starts
after every earlier one has ended (strictly later: touching intervals leave no gap), from
the latest earlier end to that start. ``previous_owner`` is the member whose interval ended
last before the gap (ties: the greatest member_uid), ``next_owner`` the member whose interval
ends it. After a partition's last interval, a gap runs to the group's last event (any
member's) with ``next_owner`` null, if that is later. Time before a partition's first owner
is not counted: nothing says the partition existed.

``rebalance_id`` is the first rebalance of the group (:mod:`._rebalances`) whose span
``[start_ts, end_ts]`` meets the gap ``[from_ts, to_ts]``, or null when none does (a crash
whose partitions were never re-assigned, for example).

``unavailability_by_rebalance``: per group, rebalance (null included) and topic, the sum of
the gaps' seconds and how many distinct partitions had one.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ._ownership import seconds_between

__all__ = ["unavailability", "unavailability_by_rebalance"]


def unavailability(ownership: DataFrame, rebalances: DataFrame, group_last: DataFrame) -> DataFrame:
    """The ``unavailability`` table. ``group_last``: group, last_ts (the group's last event)."""
    key = ("group", "topic", "partition")
    order = Window.partitionBy(*key).orderBy("from_ts", "to_ts", "member_uid")
    before = order.rowsBetween(Window.unboundedPreceding, -1)
    ends = F.struct("to_ts", "member_uid")
    iv = ownership.select(
        *key,
        "member_uid",
        "from_ts",
        "to_ts",
        F.max("to_ts").over(before).alias("prev_end"),
        F.max_by("member_uid", ends).over(before).alias("prev_owner"),
    )
    inner = iv.where(F.col("prev_end").isNotNull() & (F.col("from_ts") > F.col("prev_end")))
    inner = inner.select(
        *key,
        F.col("prev_end").alias("from_ts"),
        F.col("from_ts").alias("to_ts"),
        "prev_owner",
        F.col("member_uid").alias("next_owner"),
    )
    last = ownership.groupBy(*key).agg(
        F.max("to_ts").alias("end"), F.max_by("member_uid", ends).alias("owner")
    )
    trailing = (
        last.join(F.broadcast(group_last), "group")
        .where(F.col("last_ts") > F.col("end"))
        .select(
            *key,
            F.col("end").alias("from_ts"),
            F.col("last_ts").alias("to_ts"),
            F.col("owner").alias("prev_owner"),
            F.lit(None).cast("string").alias("next_owner"),
        )
    )
    gaps = inner.unionByName(trailing)
    r = rebalances.select(
        F.col("group").alias("r_group"),
        F.col("rebalance_id"),
        F.col("start_ts").alias("r_start"),
        F.col("end_ts").alias("r_end"),
    )
    met = gaps.join(
        F.broadcast(r),
        (gaps["group"] == r["r_group"])
        & (r["r_start"] <= gaps["to_ts"])
        & (r["r_end"] >= gaps["from_ts"]),
        "left",
    )
    return (
        met.groupBy(*key, "from_ts", "to_ts", "prev_owner", "next_owner")
        .agg(F.min("rebalance_id").alias("rebalance_id"))
        .select(
            *key,
            "rebalance_id",
            "from_ts",
            "to_ts",
            seconds_between(F.col("from_ts"), F.col("to_ts")).alias("seconds"),
            F.col("prev_owner").alias("previous_owner"),
            "next_owner",
        )
    )


def unavailability_by_rebalance(unavailability: DataFrame) -> DataFrame:
    """The ``unavailability_by_rebalance`` table."""
    return unavailability.groupBy("group", "rebalance_id", "topic").agg(
        F.sum("seconds").alias("partition_seconds"),
        F.countDistinct("partition").alias("partitions"),
    )
