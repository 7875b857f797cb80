"""Rebalances: how often each group rebalanced, why, and for how long.

**How a rebalance is delimited.** From each member's ``member.state_changed`` events (in
``seq`` order) come its *unstable intervals*: one opens at a change to a state other than
STABLE when the member was not already in one (its first change after starting, or a change
away from STABLE), and closes at its next change to STABLE. A member whose log ends inside an
unstable interval (it left the group, or crashed mid-rebalance) *departed*: its interval
closes at the first change to STABLE by another member of the group at or after the
interval's start (the group settling without it), or at the member's own last event if no
other member ever settles (then the rebalance is not ``complete``).

A group's unstable intervals are merged wherever they overlap or touch (sorted by start, a
new rebalance begins when an interval starts after every earlier one has ended). Each merged
span is one rebalance: ``start_ts`` is the first member leaving STABLE, ``end_ts`` the last
member STABLE again, ``duration_s`` the difference; ``reason`` is the ``reason`` of the
earliest opening change (ties: smallest member_uid, then seq); ``members`` how many members
had an interval in it; ``complete`` whether the span ends with a member entering STABLE.
A crash logged while STABLE opens nothing by itself: the rebalance starts when the survivors
leave STABLE (the gap before is in ``unavailability``).

``rebalance_stats``: per group with events, the number of rebalances and the p50, p95 and
maximum ``duration_s`` of the complete ones (exact quantiles, Spark SQL ``percentile``:
linear interpolation between closest ranks, type 7; null when none is complete).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ._ownership import seconds_between

__all__ = ["rebalance_stats", "rebalances"]

STABLE = "STABLE"


def _intervals(events: DataFrame, members: DataFrame) -> DataFrame:
    """Every member's unstable intervals: group, member_uid, seq, start_ts, end_ts,
    ended_stable, reason."""
    sc = events.where(
        (F.col("event") == "member.state_changed") & F.col("state_after").isNotNull()
    ).select("group", "member_uid", "seq", "ts", "state_after", "reason")
    w = Window.partitionBy("member_uid").orderBy("seq")
    prev = F.lag("state_after").over(w)
    inside = prev.isNotNull() & (prev != STABLE)
    stable = F.col("state_after") == STABLE
    opens = ~stable & ~inside
    closes = stable & inside
    trans = sc.select("*", opens.alias("opens"), closes.alias("closes")).where(
        F.col("opens") | F.col("closes")
    )
    w2 = Window.partitionBy("member_uid").orderBy("seq")
    trans = trans.select(
        "group",
        "member_uid",
        "seq",
        "ts",
        "reason",
        "opens",
        F.lead("ts").over(w2).alias("close_ts"),
    )
    opened = trans.where(F.col("opens")).drop("opens")
    settled = trans.where(~F.col("opens")).select(
        F.col("group").alias("s_group"),
        F.col("member_uid").alias("s_member"),
        F.col("ts").alias("s_ts"),
    )
    closed = opened.where(F.col("close_ts").isNotNull()).select(
        "group",
        "member_uid",
        "seq",
        F.col("ts").alias("start_ts"),
        F.col("close_ts").alias("end_ts"),
        F.lit(True).alias("ended_stable"),
        "reason",
    )
    departed = opened.where(F.col("close_ts").isNull())
    settling = (
        departed.join(
            settled,
            (departed["group"] == settled["s_group"])
            & (departed["member_uid"] != settled["s_member"])
            & (settled["s_ts"] >= departed["ts"]),
            "left",
        )
        .groupBy("group", "member_uid", "seq", "ts", "reason")
        .agg(F.min("s_ts").alias("settle_ts"))
    )
    last = members.select("member_uid", "last_ts")
    departed_rows = settling.join(F.broadcast(last), "member_uid").select(
        "group",
        "member_uid",
        "seq",
        F.col("ts").alias("start_ts"),
        F.coalesce(F.col("settle_ts"), F.col("last_ts")).alias("end_ts"),
        F.col("settle_ts").isNotNull().alias("ended_stable"),
        "reason",
    )
    return closed.unionByName(departed_rows)


def rebalances(events: DataFrame, members: DataFrame) -> DataFrame:
    """The ``rebalances`` table."""
    iv = _intervals(events, members)
    order = Window.partitionBy("group").orderBy("start_ts", "member_uid", "seq")
    prev_end = F.max("end_ts").over(order.rowsBetween(Window.unboundedPreceding, -1))
    new = F.when(prev_end.isNull() | (F.col("start_ts") > prev_end), 1).otherwise(0)
    iv = iv.withColumn("new", new)
    iv = iv.withColumn(
        "rebalance_id",
        F.sum("new").over(order.rowsBetween(Window.unboundedPreceding, 0)).cast("long"),
    )
    agg = iv.groupBy("group", "rebalance_id").agg(
        F.min("start_ts").alias("start_ts"),
        F.max("end_ts").alias("end_ts"),
        F.min_by("reason", F.struct("start_ts", "member_uid", "seq")).alias("reason"),
        F.countDistinct("member_uid").alias("members"),
        F.max_by("ended_stable", F.struct("end_ts", "ended_stable")).alias("complete"),
    )
    return agg.select(
        "group",
        "rebalance_id",
        "start_ts",
        "end_ts",
        seconds_between(F.col("start_ts"), F.col("end_ts")).alias("duration_s"),
        "reason",
        "members",
        "complete",
    )


def rebalance_stats(rebalances: DataFrame, groups: DataFrame) -> DataFrame:
    """The ``rebalance_stats`` table: one row per group in ``groups`` (a one-column
    DataFrame of group ids)."""
    done = F.when(F.col("complete"), F.col("duration_s"))
    stats = rebalances.groupBy("group").agg(
        F.count(F.lit(1)).alias("rebalances"),
        F.percentile(done, F.lit(0.5)).alias("p50_s"),
        F.percentile(done, F.lit(0.95)).alias("p95_s"),
        F.max(done).alias("max_s"),
    )
    return groups.join(stats, "group", "left").select(
        "group",
        F.coalesce(F.col("rebalances"), F.lit(0)).cast("long").alias("rebalances"),
        "p50_s",
        "p95_s",
        "max_s",
    )
