"""The self-contained HTML report on the pipeline's tables.

:func:`render_html` takes the tables of the contract (``summary``, ``generations``,
``ownership``, ``rebalances``, ``rebalance_stats``, ``unavailability``,
``unavailability_by_rebalance``, ``churn``, ``heartbeat_health``, ``heartbeat_failures``,
``heartbeat_histogram``, ``overlaps``) as Python rows, timestamps as RFC 3339 strings, and
writes one HTML file that opens in any browser with no network: the stylesheet, the plots
(SVG drawn here) and a small script are all inline, and the page's Content-Security-Policy
forbids every request.

The page, in order:

1. **Safety**: every overlap (two members claiming one partition, or the leadership, at
   once), with both members, their hosts, the times and the clock-skew allowance; or a
   plain "no overlap found".
2. **Summary**: events, bad records, groups, members, the period covered.
3. **Groups**: an overview table, then one collapsible section per group (groups with an
   overlap first) with its ownership timeline, rebalances, unavailability, heartbeats and
   churn.
4. **Heartbeats**, **Unavailability**, **Churn**: the same questions across all groups.

Pure standard library: the report never imports Spark, so it can be rendered (and tested)
from rows built by hand. What it draws is capped by :class:`ReportLimits`; every cap that
cuts something says so on the page. docs/guide/report-html.md explains how to read it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kgroup.analytics._report_assets import CSS, JS, csp
from kgroup.analytics._report_groups import group_section
from kgroup.analytics._report_svg import hbars_svg
from kgroup.analytics._report_tables import (
    Index,
    cap_note,
    churn_table,
    failures_table,
    group_name,
    health_table,
    heartbeat_plots,
    item_label,
    partition_of,
    partition_table,
)
from kgroup.analytics._report_util import (
    Html,
    ReportLimits,
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

__all__ = ["ReportLimits", "build_html", "render_html"]

# Groups render open when there are this few of them (a group with an overlap always does).
_OPEN_GROUPS = 3


def render_html(
    tables: Mapping[str, Sequence[Mapping[str, Any]]],
    out_path: str | os.PathLike[str],
    *,
    limits: ReportLimits | None = None,
    truncated: Iterable[str] = (),
) -> Path:
    """Write the HTML report on ``tables`` to ``out_path`` and return its path.

    Args:
        tables: the contract's tables by name, each a sequence of rows (mappings from
            column name to value). A missing table is an empty one; empty tables give a
            report that says there was nothing to show.
        out_path: the file to write (its directory is created if needed). The file is
            written whole and then renamed into place, so a reader never sees half a page.
        limits: how much to draw (:class:`ReportLimits`; the defaults suit 100 groups of
            50 members).
        truncated: the names of the tables of which ``tables`` holds only the first rows
            (the pipeline's ``PipelineResult.truncated``); the page warns about them.

    Returns:
        ``out_path`` as a :class:`~pathlib.Path`.
    """
    page = build_html(tables, limits=limits, truncated=truncated)
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(page, encoding="utf-8")
    partial.replace(path)
    return path


def build_html(
    tables: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    limits: ReportLimits | None = None,
    truncated: Iterable[str] = (),
) -> str:
    """The report on ``tables`` as one HTML document (what :func:`render_html` writes)."""
    limits = limits or ReportLimits()
    ix = Index(tables)
    cut = sorted(set(truncated))
    anchors = {group: f"group-{i}" for i, group in enumerate(ix.groups)}
    sections = [
        ("safety", "Safety", _safety(ix, anchors, "overlaps" in cut)),
        ("summary", "Summary", _summary(ix, limits)),
        ("groups", "Groups", _groups(ix, anchors, limits)),
        ("heartbeats", "Heartbeats", _heartbeats(ix, limits)),
        ("unavailability", "Unavailability", _unavailability(ix, limits)),
        ("churn", "Churn", _churn(ix, limits)),
    ]
    nav = "".join(f'<a href="#{key}">{esc(title)}</a>' for key, title, _ in sections)
    body = "".join(
        f'<section id="{key}"><h2>{esc(title)}</h2>{content}</section>'
        for key, title, content in sections
    )
    start, end = _period(ix)
    subtitle = tag(
        "p",
        f"{fmt_ts(start)} to {fmt_ts(end)} UTC ({fmt_duration(end - start)})"
        if start is not None and end is not None
        else "No events in the period covered.",
    )
    if cut:
        subtitle = Html(
            subtitle
            + tag(
                "p",
                "This report was handed only the first rows of the tables "
                + ", ".join(cut)
                + ": groups late in their order may look incomplete. The Parquet tables "
                "are complete.",
                class_="verdict warn",
            )
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp())}">'
        '<link rel="icon" href="data:,"><title>kgroup membership report</title>'
        f"<style>{CSS}</style></head><body>"
        f"<header><h1>kgroup membership report</h1>{subtitle}</header>"
        f"<nav>{nav}</nav><main>{body}</main><script>{JS}</script></body></html>\n"
    )


def _period(ix: Index) -> tuple[float | None, float | None]:
    summary = ix.rows["summary"][:1]
    if summary:
        start, end = timestamp(summary[0], "first_ts"), timestamp(summary[0], "last_ts")
        if start is not None and end is not None:
            return start, end
    times = [
        t
        for row in ix.rows["churn"]
        for t in (timestamp(row, "first_ts"), timestamp(row, "last_ts"))
        if t is not None
    ]
    return (min(times), max(times)) if times else (None, None)


def _member_cell(ix: Index, uid: str) -> Html:
    who = ix.who(uid)
    if who == uid:
        return esc(who)
    return Html(f'{esc(who)}<br><span class="note">uid {esc(uid)}</span>')


def _group_link(anchors: Mapping[str, str], group: str) -> Html:
    return Html(f'<a href="#{anchors.get(group, "groups")}">{esc(group_name(group))}</a>')


# -- safety -----------------------------------------------------------------------------------


def _safety(ix: Index, anchors: Mapping[str, str], cut: bool) -> Html:
    overlaps = ix.rows["overlaps"]
    if not overlaps:
        if ix.rows["ownership"]:
            message = (
                "No overlap found: at no time did two members claim the same partition or "
                "the leadership, beyond the pipeline's clock-skew allowance."
            )
        else:
            message = (
                "No overlap found, but the tables hold no ownership intervals: there was "
                "nothing to compare."
            )
        return tag("p", message, class_="verdict ok")
    order = {group: i for i, group in enumerate(ix.groups)}
    rows = sorted(
        overlaps,
        key=lambda r: (order.get(text(r, "group"), 0), timestamp(r, "from_ts") or 0.0),
    )
    groups = {text(r, "group") for r in rows}
    allowances = sorted({a for r in rows if (a := number(r, "skew_allowance_s")) is not None})
    verdict = tag(
        "p",
        ("At least " if cut else "")
        + f"{len(rows):,d} overlap{'s' if len(rows) != 1 else ''} found in {len(groups):,d} "
        f"group{'s' if len(groups) != 1 else ''}: two members claimed the same partition or "
        "the leadership at the same time.",
        class_="verdict bad",
    )
    skew = tag(
        "p",
        "Each claim is timed by its own host's clock. Two claims count as an overlap only "
        "when they still overlap after allowing for clock skew between the two hosts of "
        + (" or ".join(f"{a:g} s" for a in allowances) if allowances else "an unknown amount")
        + " (the skew allowance column); the times shown are as the hosts logged them.",
        class_="note",
    )
    body = [
        [
            _group_link(anchors, text(r, "group")),
            item_label(text(r, "topic"), partition_of(r)),
            _member_cell(ix, text(r, "member_a")),
            text(r, "host_a"),
            _member_cell(ix, text(r, "member_b")),
            text(r, "host_b"),
            fmt_ts(timestamp(r, "from_ts")),
            fmt_ts(timestamp(r, "to_ts")),
            fmt_duration(number(r, "seconds")),
            fmt_num(number(r, "skew_allowance_s"), 3),
        ]
        for r in rows
    ]
    headers = ["group", "partition", "member A", "host A", "member B", "host B", "from", "to"]
    headers += ["for", "skew allowance s"]
    more = (
        tag(
            "p",
            "Only the first overlaps were handed to this report; the Parquet table "
            "overlaps lists them all.",
            class_="verdict warn",
        )
        if cut
        else Html("")
    )
    return Html(verdict + more + skew + table(headers, body, class_="overlaps", numeric=(8, 9)))


# -- summary and the groups -------------------------------------------------------------------


def _summary(ix: Index, limits: ReportLimits) -> Html:
    row: Row = ix.rows["summary"][0] if ix.rows["summary"] else {}
    groups = number(row, "groups")
    members_n = number(row, "members")
    start, end = _period(ix)
    period = (
        f"{fmt_ts(start)} to {fmt_ts(end)} ({fmt_duration(end - start)})"
        if start is not None and end is not None
        else "—"
    )
    pairs = [
        ("events", fmt_int(number(row, "events"))),
        ("bad records (skipped)", fmt_int(number(row, "bad_records"))),
        ("duplicates", fmt_int(number(row, "duplicates"))),
        ("out of order", fmt_int(number(row, "out_of_order"))),
        ("groups", fmt_int(groups if groups is not None else len(ix.groups))),
        ("members", fmt_int(members_n if members_n is not None else ix.members())),
        ("period (UTC)", period),
        ("job time", fmt_duration(number(row, "job_seconds"))),
    ]
    out = Html(
        '<table class="kv"><tbody>'
        + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in pairs)
        + "</tbody></table>"
    )
    if not ix.rows["summary"] and not ix.groups:
        return Html(tag("p", "The tables are empty: no events to report.", class_="empty") + out)
    return Html(out + _bad_records(ix.rows["bad_records"], limits.top))


def _bad_records(rows: Sequence[Row], most: int) -> Html:
    """Bad records by reason, with the first example of each (file, line, text)."""
    if not rows:
        return Html("")
    per: dict[str, list[Row]] = {}
    for row in rows:
        per.setdefault(text(row, "reason") or "(no reason)", []).append(row)
    ranked = sorted(per.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    body = []
    for reason, examples in ranked[:most]:
        first = examples[0]
        sample = text(first, "text")
        body.append(
            [
                reason,
                f"{len(examples):,d}",
                f"{text(first, 'file')}:{text(first, 'line')}",
                sample if len(sample) <= 100 else sample[:99] + "…",
            ]
        )
    return Html(
        tag("h3", "Bad records by reason")
        + tag(
            "p",
            "Skipped lines and events, counted among the rows handed to the report; the "
            "pipeline's bad_records output lists each with its file and line.",
            class_="note",
        )
        + table(["reason", "records", "first at", "first text"], body, numeric=(1,))
    )


def _groups(ix: Index, anchors: Mapping[str, str], limits: ReportLimits) -> Html:
    if not ix.groups:
        return tag("p", "No group in the tables.", class_="empty")
    overview: list[list[object]] = []
    for group in ix.groups:
        stats = ix.of(group, "rebalance_stats")[:1]
        stat: Row = stats[0] if stats else {}
        unavailable = sum(number(r, "seconds") or 0.0 for r in ix.of(group, "unavailability"))
        overlaps = len(ix.of(group, "overlaps"))
        overview.append(
            [
                _group_link(anchors, group),
                f"{ix.members(group):,d}",
                f"{len(ix.of(group, 'generations')):,d}",
                f"{len(ix.of(group, 'rebalances')):,d}",
                fmt_duration(number(stat, "p95_s")),
                fmt_duration(number(stat, "max_s")),
                fmt_num(unavailable),
                tag("strong", f"{overlaps:,d}") if overlaps else "0",
                f"{sum(count(r, 'flaps') for r in ix.of(group, 'churn')):,d}",
            ]
        )
    headers = ["group", "members", "generations", "rebalances", "rebalance p95", "max"]
    headers += ["unavailable partition-s", "overlaps", "flaps"]
    tools = (
        '<div class="tools"><input id="group-filter" type="search" '
        'placeholder="Filter groups by name" aria-label="Filter groups by name">'
        '<button type="button" id="expand-all">Expand all</button>'
        '<button type="button" id="collapse-all">Collapse all</button></div>'
    )
    few = len(ix.groups) <= _OPEN_GROUPS
    details = "".join(
        group_section(ix, g, i, limits, few or bool(ix.of(g, "overlaps")))
        for i, g in enumerate(ix.groups)
    )
    return Html(
        table(headers, overview, class_="overview", numeric=range(1, 9))
        + tag("p", "Each group below opens to its timeline and tables.", class_="note")
        + tools
        + details
    )


# -- across all groups ------------------------------------------------------------------------


def _heartbeats(ix: Index, limits: ReportLimits) -> Html:
    health = ix.rows["heartbeat_health"]
    totals = tag(
        "p",
        f"{fmt_int(sum(count(r, 'heartbeats') for r in health))} heartbeats, "
        f"{fmt_int(sum(count(r, 'failures') for r in health))} failed; "
        f"{fmt_int(sum(count(r, 'session_expiries') for r in health))} session expiries; "
        f"{fmt_int(sum(count(r, 'stalls') for r in health))} event-loop stalls, the longest "
        f"{fmt_num(max((number(r, 'max_stall_ms') or 0.0 for r in health), default=None))} ms.",
        class_="note",
    )
    return Html(
        tag("h3", "Distributions, all groups")
        + heartbeat_plots(ix.rows["heartbeat_histogram"], "all groups")
        + tag("h3", "Members with the latest heartbeats")
        + totals
        + health_table(ix, health, limits.top, with_group=True)
        + tag("h3", "Failures by error")
        + failures_table(ix.rows["heartbeat_failures"], limits.top)
    )


def _unavailability(ix: Index, limits: ReportLimits) -> Html:
    per: dict[tuple[str, str], tuple[float, int]] = {}
    for row in ix.rows["unavailability_by_rebalance"]:
        key = (text(row, "group"), text(row, "rebalance_id") or "—")
        seconds, partitions = per.get(key, (0.0, 0))
        per[key] = (
            seconds + (number(row, "partition_seconds") or 0.0),
            partitions + count(row, "partitions"),
        )
    total = sum(number(r, "seconds") or 0.0 for r in ix.rows["unavailability"])
    out = [
        tag(
            "p",
            f"{fmt_num(total)} partition-seconds without an owner in all, over "
            f"{len(ix.rows['unavailability']):,d} gaps.",
            class_="note",
        ),
        tag("h3", "Rebalances that left partitions without an owner longest"),
    ]
    if per:
        ranked = sorted(per.items(), key=lambda kv: (-kv[1][0], kv[0]))
        if len(ranked) > limits.top:
            out.append(cap_note(f"The {limits.top} worst of {len(ranked):,d} rebalances."))
        items = [
            (
                f"{group_name(g)} · rebalance {rid}",
                seconds,
                f"{group_name(g)}, rebalance {rid}: {seconds:,.1f} partition-s, "
                f"{partitions:,d} partitions",
            )
            for (g, rid), (seconds, partitions) in ranked[: limits.top]
        ]
        out.append(hbars_svg(items, "Unavailability per rebalance, worst first", "partition-s"))
    else:
        out.append(tag("p", "No partition was left without an owner.", class_="empty"))
    out.append(tag("h3", "Partitions longest without an owner"))
    out.append(
        partition_table(ix.rows["unavailability"], limits.top, with_group=True)
        or tag("p", "No gap in ownership.", class_="empty")
    )
    return Html("".join(out))


def _churn(ix: Index, limits: ReportLimits) -> Html:
    rows = ix.rows["churn"]
    keys = ("joins", "leaves", "evictions", "fencings", "lease_expiries", "crashes")
    totals = ", ".join(f"{sum(count(r, k) for r in rows):,d} {k.replace('_', ' ')}" for k in keys)
    return Html(
        tag("p", f"All groups: {totals}.", class_="note")
        + tag("h3", "Top flapping members")
        + churn_table(rows, limits.top, with_group=True)
    )
