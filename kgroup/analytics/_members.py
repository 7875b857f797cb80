"""One row per member (``member_uid``): who it is and how its log ends.

Columns: member_uid, group, host, pid, client_id, member_id (the last non-empty one),
instance_id (the last non-null one), first_ts, last_ts, last_seq, closed (its last event is
``member.closed`` or ``eventlog.stopped``; otherwise the member crashed, and its claims end
at ``last_ts``), and the event counts :mod:`._churn` reads. Computed by the pass of
:mod:`._judge`, member by member.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ._names import EVENT_CLOSED_NAMES

__all__ = ["members"]

#: The columns of the members table, in order.
MEMBER_COLUMNS = (
    "member_uid", "group", "host", "pid", "client_id", "member_id", "instance_id",
    "first_ts", "last_ts", "last_seq", "closed", "joins", "leaves", "session_expiries",
    "poll_timeouts", "fencings", "lease_expiries",
)  # fmt: skip


def members(judged: DataFrame) -> DataFrame:
    """The members, from the per-member rows of :func:`._judge.judge` (which computes the
    columns: ``max_by`` on ``seq`` and counts over the member's kept events)."""
    rows = judged.where(F.col("member_uid").isNotNull())
    return rows.select(
        *[
            F.col("last_event").isin(*EVENT_CLOSED_NAMES).alias(c) if c == "closed" else F.col(c)
            for c in MEMBER_COLUMNS
        ]
    )
