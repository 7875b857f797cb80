"""kgroup.analytics: the membership event log's data pipeline, on Apache Spark (PySpark).

``kgroup report PATH... --out DIR`` (or ``spark-submit .../kgroup/analytics/job.py``) reads
the JSON-lines event logs that kgroup members write (schema v1, see the docs' event-log
reference), or the events topic through Spark's Kafka source, and writes one Parquet table
per metric, ``summary.json`` and an HTML report.

Theory of operation:

1. **Read** (:mod:`._read`): every ``*.jsonl`` / ``*.jsonl.gz`` under the paths becomes one
   row per line with its file and position; each line is parsed against an explicit schema.
   Lines that are not valid events (malformed, unknown ``v``, a truncated last line), and
   events that repeat a ``(member_uid, seq)`` or whose ``ts`` goes back in time against a
   lower ``seq`` of the same member, become *bad records* (file, line, reason) and take no
   further part. The valid events are staged as Parquet once.
2. **Metrics**, one module per family, all from the staged events: ownership intervals and
   generations (:mod:`._ownership`), rebalances (:mod:`._rebalances`), unavailability
   (:mod:`._unavailability`), churn (:mod:`._churn`), heartbeat health
   (:mod:`._heartbeats`), overlapping claims (:mod:`._safety`).
3. **Output** (:mod:`.job`): the tables, ``bad_records``, ``summary.json``, and the HTML
   report through :func:`kgroup.analytics.report.render_html` when that module is present.

Nothing here imports kgroup's runtime, and only the modules that need it import ``pyspark``:
importing this package without the ``analytics`` extra installed works (the command prints
an install hint instead).
"""

from __future__ import annotations

from ._names import BAD_REASONS, TABLES

__all__ = ["BAD_REASONS", "TABLES"]
