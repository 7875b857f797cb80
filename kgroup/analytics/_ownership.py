"""Ownership intervals and generations.

**Ownership.** A member owns a partition (or a non-consumer item: ``{"topic": "leader",
"partition": -1}``) from the ``ts`` of the ``member.partitions_assigned`` that names it to the
``ts`` of the ``member.partitions_revoked`` / ``member.partitions_lost`` that names it (the
callback's start), or to the member's last event if its log ends first: ``end`` is then
``closed`` (the last event is ``member.closed`` / ``eventlog.stopped``) or ``crash``. Each
event sets the state absolutely (assigned: owned; revoked or lost: not owned), so along a
member's ``seq`` an assignment opens an interval exactly when the previous action on that
partition was not an assignment, and a revoke or loss closes one exactly when it was. The
value ``open`` of ``end`` is reserved: a log that simply stops is a crash (schema rule).

**Generations.** Per group and generation (``generation`` >= 0 on any event): the first and
last ``ts`` of an event carrying it, the leader named by ``member.joined`` (the greatest if
members disagree), and how many members carried it.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

__all__ = ["generations", "ownership", "seconds_between"]


def seconds_between(start: Column, end: Column) -> Column:
    """``end - start`` in float seconds, from whole microseconds (exact up to the one final
    division, the same in the reference implementation)."""
    return (F.unix_micros(end) - F.unix_micros(start)) / F.lit(1_000_000.0)


def ownership(events: DataFrame, members: DataFrame) -> DataFrame:
    """The ``ownership`` table, plus ``from_seq`` (the assigning event's ``seq``, which
    with ``member_uid``, topic and partition identifies an interval)."""
    ev = F.col("event")
    items = F.when(ev == "member.partitions_assigned", F.col("assigned")).when(
        ev == "member.partitions_revoked", F.col("revoked")
    )
    items = items.when(ev == "member.partitions_lost", F.col("lost"))
    action = (
        F.when(ev == "member.partitions_assigned", F.lit("assigned"))
        .when(ev == "member.partitions_revoked", F.lit("revoked"))
        .otherwise(F.lit("lost"))
    )
    acts = events.where(
        ev.isin("member.partitions_assigned", "member.partitions_revoked", "member.partitions_lost")
    ).select(
        "member_uid",
        "seq",
        "ts",
        "member_id",
        action.alias("action"),
        F.explode(F.coalesce(items, F.array())).alias("tp"),
    )
    acts = acts.select(
        "member_uid",
        "seq",
        "ts",
        "member_id",
        "action",
        F.col("tp.topic").alias("topic"),
        F.col("tp.partition").alias("partition"),
    ).where(F.col("topic").isNotNull() & F.col("partition").isNotNull())
    key = ("member_uid", "topic", "partition")
    w = Window.partitionBy(*key).orderBy("seq")
    prev = F.lag("action").over(w)
    is_assign = F.col("action") == "assigned"
    starts = is_assign & (prev.isNull() | (prev != "assigned"))
    ends = ~is_assign & prev.isNotNull() & (prev == "assigned")
    trans = acts.select("*", starts.alias("starts"), ends.alias("ends"))
    trans = trans.where(F.col("starts") | F.col("ends")).drop("starts", "ends")
    w2 = Window.partitionBy(*key).orderBy("seq")
    trans = trans.select(
        *key,
        "seq",
        "ts",
        "member_id",
        "action",
        F.lead("ts").over(w2).alias("next_ts"),
        F.lead("action").over(w2).alias("next_action"),
    ).where(F.col("action") == "assigned")
    m = members.select(
        "member_uid",
        "group",
        "host",
        "last_ts",
        F.when(F.col("closed"), F.lit("closed")).otherwise(F.lit("crash")).alias("final"),
    )
    joined = trans.join(F.broadcast(m), "member_uid")
    to_ts = F.coalesce(F.col("next_ts"), F.col("last_ts"))
    return joined.select(
        "group",
        "member_uid",
        "member_id",
        "host",
        "topic",
        "partition",
        F.col("ts").alias("from_ts"),
        to_ts.alias("to_ts"),
        seconds_between(F.col("ts"), to_ts).alias("seconds"),
        F.coalesce(F.col("next_action"), F.col("final")).alias("end"),
        F.col("seq").alias("from_seq"),
    )


def generations(events: DataFrame) -> DataFrame:
    """The ``generations`` table."""
    return (
        events.where(F.col("generation").isNotNull() & (F.col("generation") >= 0))
        .groupBy("group", "generation")
        .agg(
            F.min("ts").alias("first_ts"),
            F.max("ts").alias("last_ts"),
            F.max(F.when(F.col("event") == "member.joined", F.col("leader"))).alias("leader"),
            F.countDistinct("member_uid").alias("members"),
        )
    )
