"""Member churn: how often each member joined, left, was evicted, fenced, lost its lease or
crashed.

Per member (one row each, ``group`` and identity from :mod:`._members`):

``joins``
    ``member.joined`` events (a JoinGroup answered: each generation the member entered).
``leaves``
    ``member.leaving`` events (the member left its generation on purpose).
``evictions``
    The coordinator put the member out: ``member.heartbeat_failed`` with error code 25
    (UNKNOWN_MEMBER_ID: its session expired or it was removed), plus ``member.poll_timeout``
    (``poll()`` not called within ``max_poll_interval_ms``).
``fencings``
    ``member.heartbeat_failed`` or ``member.fatal_error`` with error code 82
    (FENCED_INSTANCE_ID: a newer instance took its static identity).
``lease_expiries``
    ``member.lease_expired`` events.
``crashes``
    1 when the log ends without ``member.closed`` / ``eventlog.stopped``, else 0.
``flaps``
    joins + evictions + fencings + crashes: the report lists the members with the most.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

__all__ = ["churn"]


def churn(members: DataFrame) -> DataFrame:
    """The ``churn`` table, from :func:`._members.members`."""
    evictions = F.col("session_expiries") + F.col("poll_timeouts")
    crashes = F.when(F.col("closed"), 0).otherwise(1).cast("long")
    return members.select(
        "group",
        "member_uid",
        "member_id",
        "instance_id",
        "host",
        "pid",
        "joins",
        "leaves",
        evictions.alias("evictions"),
        "fencings",
        "lease_expiries",
        crashes.alias("crashes"),
        "first_ts",
        "last_ts",
        (F.col("joins") + evictions + F.col("fencings") + crashes).alias("flaps"),
    )
