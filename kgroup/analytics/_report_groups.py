"""One group's section of the report: its ownership timeline, rebalances, unavailability,
heartbeats and churn, in a ``<details>`` element.

:func:`build_timeline` chooses what the timeline draws and caps it by
:class:`~kgroup.analytics._report_util.ReportLimits`; :func:`group_section` draws the rest.
The cross-group sections are in :mod:`kgroup.analytics.report`.
"""

from __future__ import annotations

import math
import re

from kgroup.analytics._report_svg import Bar, Lane, Mark, Timeline, bars_svg, timeline_svg
from kgroup.analytics._report_tables import (
    Index,
    cap_note,
    churn_table,
    failures_table,
    group_name,
    health_table,
    heartbeat_plots,
    item_label,
    members_text,
    partition_of,
    partition_table,
)
from kgroup.analytics._report_util import (
    Html,
    ReportLimits,
    Row,
    colour,
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

__all__ = ["build_timeline", "group_section"]


# -- the timeline ---------------------------------------------------------------------------


def _span(ix: Index, group: str) -> tuple[float, float] | None:
    found: list[float] = []
    for name, keys in (
        ("ownership", ("from_ts", "to_ts")),
        ("generations", ("first_ts", "last_ts")),
        ("rebalances", ("start_ts", "end_ts")),
        ("overlaps", ("from_ts", "to_ts")),
        ("churn", ("first_ts", "last_ts")),
    ):
        for row in ix.of(group, name):
            for key in keys:
                t = timestamp(row, key)
                if t is not None:
                    found.append(t)
    if not found:
        return None
    start, end = min(found), max(found)
    return start, max(end, start + 1.0)


def build_timeline(ix: Index, group: str, limits: ReportLimits) -> tuple[Timeline | None, Html]:
    """The group's timeline, capped by ``limits``, and notes saying what the caps left
    out. None when the tables hold no time for the group."""
    span = _span(ix, group)
    if span is None:
        return None, Html("")
    start, end = span
    overlaps = ix.of(group, "overlaps")
    in_overlap = {text(r, m) for r in overlaps for m in ("member_a", "member_b")}
    overlap_items = {(text(r, "topic"), partition_of(r)) for r in overlaps}
    lanes: dict[str, Lane] = {}
    first: dict[str, float] = {}
    owned: dict[str, float] = {}
    urgent: set[int] = set()  # ids of bars on an item that overlapped: always drawn
    for row in ix.of(group, "ownership"):
        a = timestamp(row, "from_ts")
        if a is None:
            continue
        b = timestamp(row, "to_ts")
        b = end if b is None else max(a, b)
        uid = text(row, "member_uid") or text(row, "member_id")
        lane = lanes.get(uid)
        if lane is None:
            lane = lanes[uid] = _lane(ix, uid)
        topic, part = text(row, "topic"), partition_of(row)
        tip = (
            f"{item_label(topic, part)} {fmt_ts(a, time_only=True)} to "
            f"{fmt_ts(b, time_only=True)} ({fmt_duration(b - a)}, {text(row, 'end') or '?'})"
        )
        bar = Bar(a, b, topic, part, tip)
        if uid in in_overlap and (topic, part) in overlap_items:
            urgent.add(id(bar))
        lane.bars.append(bar)
        first[uid] = min(first.get(uid, a), a)
        owned[uid] = owned.get(uid, 0.0) + (b - a)
    for row in ix.of(group, "churn"):
        uid = text(row, "member_uid")
        if uid and uid not in lanes:
            lanes[uid] = _lane(ix, uid)
            seen = timestamp(row, "first_ts")
            first[uid] = end if seen is None else seen
    notes: list[Html] = []
    most = limits.intervals_per_group(len(ix.groups))
    chosen, total = _choose_lanes(lanes, in_overlap, owned, limits.lanes, most)
    if len(chosen) < len(lanes):
        notes.append(
            cap_note(
                f"{len(chosen)} of {len(lanes)} members drawn, each with all its intervals "
                f"(at most {limits.lanes} lanes and {most:,d} intervals): those in an overlap "
                "first, then those that owned partitions longest."
            )
        )
    if total > most:  # one lane (or the overlap lanes) alone is over the budget
        ranked = sorted(
            (b for lane in chosen for b in lane.bars),
            key=lambda b: (id(b) not in urgent, b.start - b.end),
        )
        keep = {id(b) for b in ranked[:most]}
        for lane in chosen:
            lane.bars = [b for b in lane.bars if id(b) in keep]
        notes.append(
            cap_note(
                f"{most:,d} of {total:,d} ownership intervals of these members drawn: "
                "those of an overlapping partition first, then the longest; a gap in a "
                "lane may be an interval left out."
            )
        )
    chosen.sort(key=lambda lane: (first.get(lane.key, end), _natural(lane.label), lane.key))
    return (
        Timeline(
            start,
            end,
            chosen,
            _generation_marks(ix, group, limits, notes),
            _rebalance_marks(ix, group, limits, notes),
            [_overlap_mark(ix, row, end) for row in overlaps],
        ),
        Html("".join(notes)),
    )


def _choose_lanes(
    lanes: dict[str, Lane],
    in_overlap: set[str],
    owned: dict[str, float],
    most_lanes: int,
    most_bars: int,
) -> tuple[list[Lane], int]:
    """The lanes to draw and how many bars they hold. Whole lanes, in priority order
    (members in an overlap, then by time owned), while their bars fit in ``most_bars``:
    a lane with some of its intervals left out would show gaps in ownership that never
    happened. The first lane and the overlap lanes are drawn even over the budget."""
    order = sorted(lanes, key=lambda k: (k not in in_overlap, -owned.get(k, -1.0), k))
    chosen: list[Lane] = []
    total = 0
    for key in order:
        size = len(lanes[key].bars)
        if total + size <= most_bars or not chosen or key in in_overlap:
            chosen.append(lanes[key])
            total += size
            if len(chosen) == most_lanes:
                break
    return chosen, total


def _natural(label: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key that orders ``consumer-2`` before ``consumer-10``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part)
        for part in re.split(r"(\d+)", label)
        if part
    )


def _lane(ix: Index, uid: str) -> Lane:
    who = ix.who(uid)
    label = who if len(who) <= 28 else who[:27] + "…"
    host = ix.host.get(uid, "")
    return Lane(uid, label, f"{who} (uid {uid}){' on ' + host if host else ''}")


def _generation_marks(ix: Index, group: str, limits: ReportLimits, notes: list[Html]) -> list[Mark]:
    marks: list[Mark] = []
    for row in ix.of(group, "generations"):
        t = timestamp(row, "first_ts")
        if t is None:
            continue
        gen = text(row, "generation")
        tip = (
            f"generation {gen} from {fmt_ts(t)} to {fmt_ts(timestamp(row, 'last_ts'))}; "
            f"leader {ix.who(text(row, 'leader'))}; {members_text(row.get('members'))} members"
        )
        marks.append(Mark(t, None, f"g{gen}", tip))
    marks.sort(key=lambda m: m.start)
    if len(marks) > limits.marks:
        step = -(-len(marks) // limits.marks)
        notes.append(
            cap_note(f"One generation line in {step} drawn ({len(marks):,d} generations).")
        )
        marks = marks[::step]
    return marks


def _rebalance_marks(ix: Index, group: str, limits: ReportLimits, notes: list[Html]) -> list[Mark]:
    marks: list[Mark] = []
    for row in ix.of(group, "rebalances"):
        t = timestamp(row, "start_ts")
        if t is None:
            continue
        e = timestamp(row, "end_ts")
        tip = (
            f"rebalance #{text(row, 'rebalance_id')} ({text(row, 'reason') or 'no reason'}): "
            f"{fmt_ts(t)} → {fmt_ts(e)}, {fmt_duration(number(row, 'duration_s'))}"
            + ("" if row.get("complete") is not False else ", never completed")
        )
        marks.append(Mark(t, e, "", tip))
    if len(marks) > limits.marks:
        notes.append(cap_note(f"The {limits.marks} longest of {len(marks):,d} rebalances shaded."))
        marks.sort(key=lambda m: (m.end if m.end is not None else math.inf) - m.start)
        marks = marks[-limits.marks :]
    return marks


def _overlap_mark(ix: Index, row: Row, end: float) -> Mark:
    a = timestamp(row, "from_ts")
    a = end if a is None else a
    b = timestamp(row, "to_ts")
    item = item_label(text(row, "topic"), partition_of(row))
    ma, mb = text(row, "member_a"), text(row, "member_b")
    tip = f"OVERLAP on {item}: {ix.who(ma)} and {ix.who(mb)}, {fmt_ts(a)} → {fmt_ts(b)}"
    return Mark(a, b, item, tip, (ma, mb))


def _legend(ix: Index, group: str) -> Html:
    topics = sorted({text(r, "topic") for r in ix.of(group, "ownership")})
    items = [
        f'<svg viewBox="0 0 14 10"><rect width="14" height="10" fill="{colour(t, 0)}"/></svg>'
        f"{esc(t or '(no topic)')}"
        for t in topics[:12]
    ]
    more = f" and {len(topics) - 12} more topics" if len(topics) > 12 else ""
    marks = (
        '<svg viewBox="0 0 14 10"><rect class="rb" width="14" height="10"/></svg>rebalance'
        '<svg viewBox="0 0 14 10"><rect class="rb open" width="14" height="10"/></svg>'
        "rebalance never completed"
        '<svg viewBox="0 0 14 10"><line class="gen" x1="7" x2="7" y1="0" y2="10"/></svg>'
        "generation start"
        '<svg viewBox="0 0 14 10"><rect class="ov" x="1" y="1" width="12" height="8"/></svg>'
        "overlap"
    )
    return Html(
        f'<p class="legend">Topics (partitions shade dark to light):{"".join(items)}'
        f'{esc(more)}</p><p class="legend">{marks}</p>'
    )


# -- one group's section -------------------------------------------------------------------


def group_section(ix: Index, group: str, index: int, limits: ReportLimits, open_: bool) -> Html:
    """The ``<details>`` of one group. ``index`` makes its id (``group-<index>``): ids
    never come from the data."""
    name = group_name(group)
    overlaps = len(ix.of(group, "overlaps"))
    badges = [
        tag("span", f"{ix.members(group):,d} members", class_="badge"),
        tag("span", f"{len(ix.of(group, 'generations')):,d} generations", class_="badge"),
        tag("span", f"{len(ix.of(group, 'rebalances')):,d} rebalances", class_="badge"),
    ]
    if overlaps:
        badges.append(tag("span", f"{overlaps:,d} overlaps", class_="badge bad"))
    timeline, notes = build_timeline(ix, group, limits)
    parts = [
        Html(f"<summary>{esc(name)}{''.join(badges)}</summary>"),
        tag("h3", "Generations and ownership"),
    ]
    if timeline is None:
        parts.append(tag("p", "No ownership or generations recorded.", class_="empty"))
    else:
        parts += [_legend(ix, group), notes, timeline_svg(timeline, f"Timeline of {name}")]
    parts += [
        _rebalances(ix, group, limits),
        _unavailability(ix, group, limits),
        _heartbeats(ix, group, limits),
        _churn(ix, group, limits),
    ]
    return Html(
        f'<details class="group" id="group-{index}" data-name="{esc(name)}"'
        f"{' open' if open_ else ''}>{''.join(parts)}</details>"
    )


def _duration_or_inf(row: Row) -> float:
    """A rebalance's duration; one with none (it never completed) counts as longest."""
    duration = number(row, "duration_s")
    return math.inf if duration is None else duration


def _rebalances(ix: Index, group: str, limits: ReportLimits) -> Html:
    rows = ix.of(group, "rebalances")
    out = [tag("h3", "Rebalances")]
    for stat in ix.of(group, "rebalance_stats")[:1]:
        out.append(
            tag(
                "p",
                f"{fmt_int(number(stat, 'rebalances'))} rebalances; duration p50 "
                f"{fmt_duration(number(stat, 'p50_s'))}, p95 {fmt_duration(number(stat, 'p95_s'))}"
                f", max {fmt_duration(number(stat, 'max_s'))}.",
                class_="note",
            )
        )
    if not rows:
        out.append(tag("p", "No rebalance recorded.", class_="empty"))
        return Html("".join(out))
    if len(rows) > limits.rows:
        out.append(cap_note(f"The {limits.rows} longest of {len(rows):,d} rebalances listed."))
        rows = sorted(rows, key=_duration_or_inf)[-limits.rows :]
    rows = sorted(rows, key=lambda r: (number(r, "rebalance_id") or 0.0, text(r, "start_ts")))
    out.append(
        table(
            ["#", "start", "end", "duration", "reason", "members", "completed"],
            (
                [
                    text(r, "rebalance_id"),
                    fmt_ts(timestamp(r, "start_ts")),
                    fmt_ts(timestamp(r, "end_ts")),
                    fmt_duration(number(r, "duration_s")),
                    text(r, "reason"),
                    members_text(r.get("members")),
                    "no" if r.get("complete") is False else "yes",
                ]
                for r in rows
            ),
            numeric=(0, 3, 5),
        )
    )
    return Html("".join(out))


def _unavailability(ix: Index, group: str, limits: ReportLimits) -> Html:
    out = [tag("h3", "Unavailability")]
    per: dict[float | None, list[Row]] = {}
    for row in ix.of(group, "unavailability_by_rebalance"):
        per.setdefault(number(row, "rebalance_id"), []).append(row)
    items: list[tuple[float | None, float, str]] = []
    for rid, rows in per.items():
        total = sum(number(r, "partition_seconds") or 0.0 for r in rows)
        topics = ", ".join(
            f"{text(r, 'topic')}: {fmt_num(number(r, 'partition_seconds'))} s over "
            f"{fmt_int(number(r, 'partitions'))} partitions"
            for r in rows
        )
        rid_text = "outside rebalances" if rid is None else f"#{rid:g}"
        items.append((rid, total, f"rebalance {rid_text}: {total:,.1f} partition-s ({topics})"))
    if items:
        if len(items) > limits.bars:
            out.append(cap_note(f"The {limits.bars} worst of {len(items):,d} rebalances charted."))
            items = sorted(items, key=lambda it: it[1])[-limits.bars :]
        items.sort(key=lambda it: math.inf if it[0] is None else it[0])
        bars = [("—" if rid is None else f"{rid:g}", v, tip) for rid, v, tip in items]
        chart = bars_svg(
            bars,
            f"Unavailability per rebalance in {group_name(group)}",
            x_unit="rebalance #",
            y_unit="partition-seconds without an owner",
        )
        out.append(Html(f'<div class="plots"><figure class="wide">{chart}</figure></div>'))
    else:
        out.append(tag("p", "No partition was left without an owner.", class_="empty"))
    out.append(partition_table(ix.of(group, "unavailability"), limits.rows, with_group=False))
    return Html("".join(out))


def _heartbeats(ix: Index, group: str, limits: ReportLimits) -> Html:
    out = [tag("h3", "Heartbeats")]
    out.append(heartbeat_plots(ix.of(group, "heartbeat_histogram"), group_name(group)))
    rows = ix.of(group, "heartbeat_health")
    out.append(health_table(ix, rows, limits.rows, with_group=False))
    out.append(failures_table(ix.of(group, "heartbeat_failures"), limits.rows))
    return Html("".join(out))


def _churn(ix: Index, group: str, limits: ReportLimits) -> Html:
    return Html(
        tag("h3", "Churn") + churn_table(ix.of(group, "churn"), limits.rows, with_group=False)
    )
