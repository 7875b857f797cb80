"""The report's tables read once and indexed by group, and the tables that both a group's
section and the cross-group sections show (heartbeat health, failures, churn,
unavailability per partition)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kgroup.analytics._report_svg import histogram_svg
from kgroup.analytics._report_util import (
    Html,
    Row,
    count,
    esc,
    fmt_duration,
    fmt_int,
    fmt_num,
    fmt_ts,
    number,
    table,
    tag,
    text,
    timestamp,
)

__all__ = [
    "TABLES",
    "Index",
    "cap_note",
    "churn_table",
    "failures_table",
    "group_name",
    "health_table",
    "heartbeat_plots",
    "histogram_buckets",
    "item_label",
    "members_text",
    "partition_of",
    "partition_table",
]

TABLES = (
    "summary",
    "generations",
    "ownership",
    "rebalances",
    "rebalance_stats",
    "unavailability",
    "unavailability_by_rebalance",
    "churn",
    "heartbeat_health",
    "heartbeat_failures",
    "heartbeat_histogram",
    "overlaps",
    "bad_records",  # file, line, reason, member_uid, seq, text: no group
)
_PER_GROUP = TABLES[1:-1]


class Index:
    """The tables' rows, by table and by group, read once. A table that is missing is
    empty; a row that is not a mapping is skipped."""

    def __init__(self, tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        self.rows: dict[str, list[Row]] = {}
        for name in TABLES:
            given = tables.get(name) or ()
            self.rows[name] = [row for row in given if isinstance(row, Mapping)]
        self._by_group: dict[str, dict[str, list[Row]]] = {}
        for name in _PER_GROUP:
            for row in self.rows[name]:
                per = self._by_group.setdefault(text(row, "group"), {})
                per.setdefault(name, []).append(row)
        self.member_id: dict[str, str] = {}
        self.host: dict[str, str] = {}
        for row in self.rows["churn"] + self.rows["ownership"]:
            uid = text(row, "member_uid")
            if uid:
                self.member_id.setdefault(uid, text(row, "member_id"))
                self.host.setdefault(uid, text(row, "host"))
        # Groups with an overlap first, then by name.
        self.groups = sorted(self._by_group, key=lambda g: (not self.of(g, "overlaps"), g))

    def of(self, group: str, name: str) -> list[Row]:
        """The rows of table ``name`` for ``group``."""
        return self._by_group.get(group, {}).get(name, [])

    def members(self, group: str | None = None) -> int:
        """How many distinct members the churn, ownership and heartbeat tables name, in
        ``group`` or (None) in all groups."""
        seen: set[tuple[str, str]] = set()
        for name in ("churn", "ownership", "heartbeat_health"):
            rows = self.rows[name] if group is None else self.of(group, name)
            seen.update((text(r, "group"), text(r, "member_uid")) for r in rows)
        return len(seen)

    def who(self, uid: str) -> str:
        """A member as people know it: its member id when the tables give one, else its
        uid."""
        return self.member_id.get(uid) or uid or "(unknown member)"


def group_name(group: str) -> str:
    return group if group else "(no group)"


def partition_of(row: Row) -> int | None:
    value = number(row, "partition")
    return None if value is None else int(value)


def item_label(topic: str, partition: int | None) -> str:
    """A partition as ``topic-3``. An item that is not a partition (the pipeline writes the
    leadership as topic ``leader``, partition -1) by its topic field, or ``leader``."""
    if partition is None or partition < 0:
        return topic or "leader"
    return f"{topic}-{partition}"


def members_text(value: object) -> str:
    """The contract's ``members`` column: a count, or the members themselves."""
    if isinstance(value, list | tuple):
        return f"{len(value):,d}"
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return f"{int(value):,d}"
    return "—" if value is None else str(value)


def cap_note(message: str) -> Html:
    return tag("p", message, class_="cap")


def histogram_buckets(rows: Iterable[Row], metric: str) -> list[tuple[float, float | None, int]]:
    """The ``heartbeat_histogram`` rows of one metric, summed by bucket, in bucket order."""
    sums: dict[tuple[float, float | None], int] = {}
    for row in rows:
        lo = number(row, "bucket_lo_ms")
        if text(row, "metric") != metric or lo is None:
            continue
        key = (lo, number(row, "bucket_hi_ms"))
        sums[key] = sums.get(key, 0) + count(row, "count")
    return [(lo, hi, n) for (lo, hi), n in sorted(sums.items(), key=lambda kv: kv[0][0])]


def partition_table(rows: Sequence[Row], most: int, *, with_group: bool) -> Html:
    """Unavailability per partition: episodes, total and longest gap, and how many gaps no
    member ever closed."""
    per: dict[tuple[str, str, int | None], list[float]] = {}
    never: dict[tuple[str, str, int | None], int] = {}
    for row in rows:
        key = (text(row, "group"), text(row, "topic"), partition_of(row))
        per.setdefault(key, []).append(number(row, "seconds") or 0.0)
        if not text(row, "next_owner"):
            never[key] = never.get(key, 0) + 1
    if not per:
        return Html("")
    ranked = sorted(per.items(), key=lambda kv: (-sum(kv[1]), kv[0][0], kv[0][1]))
    note = (
        cap_note(f"The {most} worst of {len(ranked):,d} partitions listed.")
        if len(ranked) > most
        else Html("")
    )
    headers = ["partition", "gaps", "total", "longest", "never re-owned"]
    if with_group:
        headers.insert(0, "group")
    body: list[list[object]] = []
    for (grp, topic, part), secs in ranked[:most]:
        line: list[object] = [
            item_label(topic, part),
            f"{len(secs):,d}",
            fmt_duration(sum(secs)),
            fmt_duration(max(secs)),
            f"{never.get((grp, topic, part), 0):,d}",
        ]
        body.append([group_name(grp), *line] if with_group else line)
    first = 1 if with_group else 0
    return Html(note + table(headers, body, numeric=[first + 1, first + 2, first + 3, first + 4]))


def heartbeat_plots(rows: Sequence[Row], where: str) -> Html:
    figures: list[str] = []
    for metric, title in (("rtt", "Round trip"), ("late", "Lateness against schedule")):
        buckets = histogram_buckets(rows, metric)
        if not buckets:
            continue
        total = sum(n for _, _, n in buckets)
        figures.append(
            f"<figure>{histogram_svg(buckets, f'{title} of heartbeats in {where}')}"
            f"<figcaption>{esc(f'{title} (ms), {total:,d} heartbeats')}</figcaption></figure>"
        )
    if not figures:
        return tag("p", "No heartbeat histogram.", class_="empty")
    return Html(f'<div class="plots">{"".join(figures)}</div>')


def health_table(ix: Index, rows: Sequence[Row], most: int, *, with_group: bool) -> Html:
    """Heartbeat health per member, the latest-p99 first."""
    if not rows:
        return tag("p", "No heartbeat health rows.", class_="empty")
    ranked = sorted(rows, key=lambda r: -(number(r, "late_p99_ms") or -1.0))
    note = (
        cap_note(f"The {most} of {len(ranked):,d} members with the latest p99 listed.")
        if len(ranked) > most
        else Html("")
    )
    headers = ["member", "host", "heartbeats", "rtt p50 ms", "rtt p99 ms", "late p50 ms"]
    headers += ["late p99 ms", "failures", "session expiries", "stalls", "longest stall ms"]
    body: list[list[object]] = []
    for r in ranked[:most]:
        line: list[object] = [
            ix.who(text(r, "member_uid")),
            text(r, "host"),
            fmt_int(number(r, "heartbeats")),
            *(fmt_num(number(r, k)) for k in ("rtt_p50_ms", "rtt_p99_ms")),
            *(fmt_num(number(r, k)) for k in ("late_p50_ms", "late_p99_ms")),
            *(fmt_int(number(r, k)) for k in ("failures", "session_expiries", "stalls")),
            fmt_num(number(r, "max_stall_ms")),
        ]
        body.append([group_name(text(r, "group")), *line] if with_group else line)
    first = 3 if with_group else 2
    headers = (["group"] if with_group else []) + headers
    return Html(note + table(headers, body, numeric=range(first, first + 9)))


def failures_table(rows: Sequence[Row], most: int) -> Html:
    """Heartbeat failures summed by error code, the most frequent first."""
    per: dict[str, int] = {}
    members: dict[str, set[str]] = {}
    for row in rows:
        error = text(row, "error") or "(no error code)"
        per[error] = per.get(error, 0) + count(row, "count")
        members.setdefault(error, set()).add(text(row, "group") + "\0" + text(row, "member_uid"))
    if not per:
        return tag("p", "No heartbeat failed.", class_="empty")
    ranked = sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))
    note = (
        cap_note(f"The {most} most frequent of {len(ranked):,d} errors listed.")
        if len(ranked) > most
        else Html("")
    )
    body = [[e, f"{n:,d}", f"{len(members[e]):,d}"] for e, n in ranked[:most]]
    return Html(note + table(["heartbeat error", "failures", "members"], body, numeric=(1, 2)))


def churn_table(rows: Sequence[Row], most: int, *, with_group: bool) -> Html:
    """Members by flaps (joins + evictions + fencings + crashes), the most first."""
    if not rows:
        return tag("p", "No member recorded.", class_="empty")
    ranked = sorted(rows, key=lambda r: (-count(r, "flaps"), -count(r, "leaves")))
    note = (
        cap_note(f"The {most} most flapping of {len(ranked):,d} members listed.")
        if len(ranked) > most
        else Html("")
    )
    keys = ("joins", "leaves", "evictions", "fencings", "lease_expiries", "crashes", "flaps")
    headers = ["member", "instance id", "host", "pid", "joins", "leaves", "evictions"]
    headers += ["fencings", "lease expiries", "crashes", "flaps", "first seen", "last seen"]
    body: list[list[object]] = []
    for r in ranked[:most]:
        line: list[object] = [
            text(r, "member_id") or text(r, "member_uid"),
            text(r, "instance_id") or "—",
            text(r, "host"),
            text(r, "pid"),
            *(f"{count(r, k):,d}" for k in keys),
            fmt_ts(timestamp(r, "first_ts")),
            fmt_ts(timestamp(r, "last_ts")),
        ]
        body.append([group_name(text(r, "group")), *line] if with_group else line)
    first = 4 if with_group else 3
    headers = (["group"] if with_group else []) + headers
    return Html(note + table(headers, body, numeric=range(first, first + 8)))
