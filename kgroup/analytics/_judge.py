"""The one pass over the parsed lines: judge every line and aggregate it by member.

The lines are shuffled once, by member, and sorted by ``(seq, file, pos)`` within each
member. One walk along that order marks duplicates and out-of-order events (the rules of
:mod:`._read`), and one aggregation per member then folds everything the metrics need out of
the heartbeats (nine lines in ten), so that no heartbeat is ever written out:

- the member's identity and counts (:mod:`._members`: ``max_by`` on ``seq``);
- the heartbeat health figures (exact percentiles of the kept heartbeats' round trips and
  lateness, counts, stalls), the labels of its failed heartbeats, and its histogram counts;
- ``events``: the kept events the other metrics read, that is every event they read by name
  (:data:`._names.EVENTS_READ`) and the events where the member's ``(group, generation)``
  changes (the first and last kept event of every run of one ``(group, generation)``: a
  kept event is never earlier than any event before it, so a run's ends carry its first and
  last ``ts``, which is all the ``generations`` table takes from the events inside it);
- ``faults``: the duplicates and out-of-order events, with file and position;
- ``spans``: for every file split the member has lines in, at least its lines with the
  lowest and highest position there (a line whose neighbours along ``seq`` are in another
  split, or further on in this one), from which :func:`blocks` counts each split's lines.

A line that is not an event gets a row of its own (``member_uid`` null) with its text.
Nothing here holds more than one member's lines at a time.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ._names import EVENTS_READ, FENCED_INSTANCE_ID, HISTOGRAM_EDGES_MS, UNKNOWN_MEMBER_ID
from ._read import EVENT_COLUMNS, HEARTBEATS

__all__ = ["blocks", "judge", "judged_events", "judged_faults", "judged_lines"]

#: Aggregates the planner may run sort-based: the judged lines are already sorted by member.
SORT_AGGREGATE_CONF = ("spark.sql.execution.useObjectHashAggregateExec", "false")


def _count(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def _bucket(value: Column) -> Column:
    """The index of the histogram bucket holding ``value`` (0 below the second edge)."""
    index: Column = F.lit(0)
    for i, edge in enumerate(HISTOGRAM_EDGES_MS[1:], start=1):
        index = F.when(value >= edge, F.lit(i)).otherwise(index)
    return index


def _same(column: str, other: Column) -> Column:
    return F.col(column).eqNullSafe(other)


def judge(parsed: DataFrame) -> DataFrame:
    """One row per member (``member_uid``) and one per line that is not an event
    (``member_uid`` null, ``bad`` set): see the module docstring."""
    valid = F.col("line_reason").isNull()
    lines = parsed.select(
        F.when(valid, F.col("member_uid")).alias("mkey"),
        F.when(~valid, F.col("pos")).alias("bkey"),
        "*",
    )
    w = Window.partitionBy("mkey", "bkey").orderBy("seq", "file", "pos")
    before = w.rowsBetween(Window.unboundedPreceding, -1)
    fault = (
        F.when(~valid, F.lit(None).cast("string"))
        .when(F.lag("seq").over(w) == F.col("seq"), F.lit("duplicate"))
        .when(F.col("ts") < F.max("ts").over(before), F.lit("out_of_order"))
        .otherwise(F.lit(None).cast("string"))
    )
    judged = lines.select("*", fault.alias("fault"))

    def neighbour_continues(offset: int) -> Column:
        # The line before (-1) or after (+1) along seq is a kept event of the same run.
        near = F.lag if offset < 0 else F.lead
        return (
            near(F.lit(1), 1).over(w).isNotNull()
            & near("fault", 1).over(w).isNull()
            & _same("group", near("group", 1).over(w))
            & _same("generation", near("generation", 1).over(w))
        )

    def neighbour_inside(offset: int) -> Column:
        # The neighbour is in the same split and further from the split's end (before:
        # lower position; after: higher).
        near = F.lag if offset < 0 else F.lead
        pos = near("pos", 1).over(w)
        further = pos < F.col("pos") if offset < 0 else pos > F.col("pos")
        return (
            _same("file", near("file", 1).over(w))
            & _same("blk", near("blk", 1).over(w))
            & F.coalesce(further, F.lit(False))
        )

    marked = judged.select(
        "*",
        (~neighbour_continues(-1) | ~neighbour_continues(1)).alias("run_end"),
        (~neighbour_inside(-1) | ~neighbour_inside(1)).alias("span_end"),
    )
    return _aggregate(marked)


def _aggregate(marked: DataFrame) -> DataFrame:
    valid = F.col("line_reason").isNull()
    kept = valid & F.col("fault").isNull()
    ev = F.col("event")
    hb = kept & ev.isin(*HEARTBEATS)
    failed = kept & (ev == "member.heartbeat_failed")
    stall = kept & (ev == "heartbeat.late")
    code = F.col("error_code")
    seq = F.when(kept, F.col("seq"))
    quantiles = F.array(F.lit(0.5), F.lit(0.99))
    rtt = F.when(hb, F.col("hb_rtt_ms"))
    late = F.when(hb, F.col("hb_late_ms"))
    label = F.coalesce(
        F.col("error"),
        F.concat(F.lit("code "), code.cast("string")),
        F.lit("unknown"),
    )
    n = len(HISTOGRAM_EDGES_MS)
    rtt_b = F.when(hb & F.col("hb_rtt_ms").isNotNull(), _bucket(F.col("hb_rtt_ms")))
    late_b = F.when(hb & F.col("hb_late_ms").isNotNull(), _bucket(F.col("hb_late_ms")))
    with_buckets = marked.select("*", rtt_b.alias("rtt_b"), late_b.alias("late_b"))
    event = F.struct(*[F.col(c) for c in EVENT_COLUMNS])
    return (
        with_buckets.groupBy("mkey", "bkey")
        .agg(
            F.first(
                F.when(
                    ~valid,
                    F.struct(
                        "file",
                        "blk",
                        "pos",
                        F.col("line_reason").alias("reason"),
                        "json_ok",
                        "text",
                    ),
                ),
                ignorenulls=True,
            ).alias("bad"),
            F.max_by("group", seq).alias("group"),
            F.max_by("host", seq).alias("host"),
            F.max_by("pid", seq).alias("pid"),
            F.max_by("client_id", seq).alias("client_id"),
            F.max_by("member_id", F.when(F.col("member_id") != "", seq)).alias("member_id"),
            F.max_by("instance_id", F.when(F.col("instance_id").isNotNull(), seq)).alias(
                "instance_id"
            ),
            F.min(F.when(kept, F.col("ts"))).alias("first_ts"),
            F.max(F.when(kept, F.col("ts"))).alias("last_ts"),
            F.max(seq).alias("last_seq"),
            F.max_by("event", seq).alias("last_event"),
            _count(kept).alias("events"),
            _count(kept & (ev == "member.joined")).alias("joins"),
            _count(kept & (ev == "member.leaving")).alias("leaves"),
            _count(failed & (code == UNKNOWN_MEMBER_ID)).alias("session_expiries"),
            _count(kept & (ev == "member.poll_timeout")).alias("poll_timeouts"),
            _count(
                kept
                & ev.isin("member.heartbeat_failed", "member.fatal_error")
                & (code == FENCED_INSTANCE_ID)
            ).alias("fencings"),
            _count(kept & (ev == "member.lease_expired")).alias("lease_expiries"),
            _count(hb).alias("heartbeats"),
            F.percentile(rtt, quantiles).alias("rtt_q"),
            F.percentile(late, quantiles).alias("late_q"),
            _count(failed).alias("failures"),
            _count(stall).alias("stalls"),
            F.max(F.when(stall, F.col("hb_late_ms"))).alias("max_stall_ms"),
            F.collect_list(F.when(failed, label)).alias("failure_labels"),
            F.array(*[_count(F.col("rtt_b") == i) for i in range(n)]).alias("rtt_hist"),
            F.array(*[_count(F.col("late_b") == i) for i in range(n)]).alias("late_hist"),
            F.collect_list(F.when(kept & (ev.isin(*EVENTS_READ) | F.col("run_end")), event)).alias(
                "events_kept"
            ),
            F.collect_list(
                F.when(
                    valid & F.col("fault").isNotNull(),
                    F.struct("file", "blk", "pos", F.col("fault").alias("reason"), "seq"),
                )
            ).alias("faults"),
            F.collect_list(F.when(valid & F.col("span_end"), F.struct("file", "blk", "pos"))).alias(
                "spans"
            ),
        )
        .withColumnRenamed("mkey", "member_uid")
        .drop("bkey")
    )


def judged_events(judged: DataFrame) -> DataFrame:
    """The kept events of :func:`judge`'s ``events_kept`` (the events read by name and the ends
    of every run of one (group, generation)), with
    ``kind`` (``heartbeat`` or ``other``)."""
    rows = judged.where(F.col("member_uid").isNotNull()).select(F.explode("events_kept").alias("e"))
    return rows.select(
        *[F.col("e")[c].alias(c) for c in EVENT_COLUMNS],
        F.when(F.col("e")["event"].isin(*HEARTBEATS), F.lit("heartbeat"))
        .otherwise(F.lit("other"))
        .alias("kind"),
    )


def judged_faults(judged: DataFrame) -> DataFrame:
    """The duplicates and out-of-order events: file, blk, pos, reason, member_uid, seq."""
    rows = judged.select("member_uid", F.explode("faults").alias("f"))
    return rows.select(
        F.col("f.file").alias("file"),
        F.col("f.blk").alias("blk"),
        F.col("f.pos").alias("pos"),
        F.col("f.reason").alias("reason"),
        "member_uid",
        F.col("f.seq").alias("seq"),
    )


def judged_lines(judged: DataFrame) -> DataFrame:
    """The lines that are not events: file, blk, pos, reason, json_ok, text."""
    return judged.where(F.col("member_uid").isNull()).select("bad.*")


def blocks(judged: DataFrame) -> DataFrame:
    """Per file split (``file``, ``blk``): ``first_pos`` and ``n``, its number of lines
    (the positions of one split's lines are consecutive)."""
    spans = judged.select(F.explode("spans").alias("s")).select("s.*")
    bad = judged_lines(judged).select("file", "blk", "pos")
    return (
        spans.unionByName(bad)
        .groupBy("file", "blk")
        .agg(F.min("pos").alias("first_pos"), F.max("pos").alias("last_pos"))
        .select("file", "blk", "first_pos", (F.col("last_pos") - F.col("first_pos") + 1).alias("n"))
    )
