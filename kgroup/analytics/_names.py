"""Names shared by the pipeline, its command and its tests: the tables and their columns
(the output-table contract, v1), the reasons a line is a bad record, the event names the
metrics read, and the defaults. No ``pyspark`` import here."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "BAD_REASONS",
    "DEFAULT_CLOCK_SKEW_S",
    "EVENTS_READ",
    "EVENT_CLOSED_NAMES",
    "FENCED_INSTANCE_ID",
    "HISTOGRAM_EDGES_MS",
    "SCHEMA_VERSION",
    "TABLES",
    "TIMESTAMP_COLUMNS",
    "UNKNOWN_MEMBER_ID",
]

#: The event-log schema version this pipeline reads; a line with another ``v`` is a bad
#: record (``unknown_version``).
SCHEMA_VERSION = 1

#: The events the tables read by name (ownership, rebalances, generations' leader). The
#: judging keeps these, and the first and last event of every run of one member's events
#: with one (group, generation), which is all the generations table takes from the others.
EVENTS_READ = (
    "member.state_changed",
    "member.joined",
    "member.partitions_assigned",
    "member.partitions_revoked",
    "member.partitions_lost",
)

#: Overlapping claims no longer than this (seconds) are taken for clock skew between hosts
#: and not reported (``--clock-skew``).
DEFAULT_CLOCK_SKEW_S = 0.1

#: Why a line is a bad record, in the order the checks run.
BAD_REASONS = (
    "malformed", "truncated", "corrupt_file", "unknown_version", "duplicate", "out_of_order",
)  # fmt: skip

#: A member whose last event is one of these left gracefully; any other last event is a
#: crash (its claims end at that event).
EVENT_CLOSED_NAMES = ("member.closed", "eventlog.stopped")

#: Fixed edges of the heartbeat histogram buckets, in milliseconds (1-2-5 steps). Bucket i
#: holds values in [edge[i], edge[i+1]); the last bucket is open (``bucket_hi_ms`` null).
#: Values below 0 are counted in the first bucket.
HISTOGRAM_EDGES_MS: tuple[float, ...] = (
    0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0,
    1_000.0, 2_000.0, 5_000.0, 10_000.0, 20_000.0, 50_000.0,
)  # fmt: skip

#: Every output table and its columns, in order (the contract the HTML report renders).
TABLES: Mapping[str, tuple[str, ...]] = {
    "summary": (
        "events", "bad_records", "duplicates", "out_of_order", "groups", "members",
        "first_ts", "last_ts", "job_seconds",
    ),
    "generations": ("group", "generation", "first_ts", "last_ts", "leader", "members"),
    "ownership": (
        "group", "member_uid", "member_id", "host", "topic", "partition",
        "from_ts", "to_ts", "seconds", "end",
    ),
    "rebalances": (
        "group", "rebalance_id", "start_ts", "end_ts", "duration_s", "reason", "members",
        "complete",
    ),
    "rebalance_stats": ("group", "rebalances", "p50_s", "p95_s", "max_s"),
    "unavailability": (
        "group", "topic", "partition", "rebalance_id", "from_ts", "to_ts", "seconds",
        "previous_owner", "next_owner",
    ),
    "unavailability_by_rebalance": (
        "group", "rebalance_id", "topic", "partition_seconds", "partitions",
    ),
    "churn": (
        "group", "member_uid", "member_id", "instance_id", "host", "pid", "joins", "leaves",
        "evictions", "fencings", "lease_expiries", "crashes", "first_ts", "last_ts", "flaps",
    ),
    "heartbeat_health": (
        "group", "member_uid", "host", "heartbeats", "rtt_p50_ms", "rtt_p99_ms",
        "late_p50_ms", "late_p99_ms", "failures", "session_expiries", "stalls",
        "max_stall_ms",
    ),
    "heartbeat_failures": ("group", "member_uid", "error", "count"),
    "heartbeat_histogram": ("group", "metric", "bucket_lo_ms", "bucket_hi_ms", "count"),
    "overlaps": (
        "group", "topic", "partition", "member_a", "member_b", "host_a", "host_b",
        "from_ts", "to_ts", "seconds", "skew_allowance_s",
    ),
    "bad_records": ("file", "line", "reason", "member_uid", "seq", "text"),
}  # fmt: skip

#: The columns that are timestamps (UTC ``timestamp`` in Parquet, RFC 3339 strings in the
#: rows handed to the HTML report).
TIMESTAMP_COLUMNS = frozenset({"first_ts", "last_ts", "from_ts", "to_ts", "start_ts", "end_ts"})

#: Kafka error codes the metrics count: the coordinator no longer knows the member (its
#: session expired or it was removed), and a static member fenced by a newer instance.
UNKNOWN_MEMBER_ID = 25
FENCED_INSTANCE_ID = 82
