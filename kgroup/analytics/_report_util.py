"""Reading table rows and writing safe HTML, for the HTML report.

Two rules hold in every ``_report_*`` module:

* **Every string from the data is escaped.** Member ids, topics, hosts, reasons and error
  names are user data. HTML is built from :class:`Html` fragments (trusted, already
  escaped) and plain ``str`` values (untrusted): :func:`esc` escapes a ``str`` and passes
  an :class:`Html` through, and :func:`tag` and :func:`table` call it on everything they
  are given. Nothing from the data goes into a ``<script>`` or ``<style>`` element, and
  element ids are built from indexes, never from names.
* **A bad value never breaks the report.** The pipeline hands over rows typed by the table
  contract (docs/guide/report-html.md), but the accessors here (:func:`text`,
  :func:`number`, :func:`count`, :func:`timestamp`) turn a missing, null or mistyped value
  into ``""`` or ``None`` instead of raising.
"""

from __future__ import annotations

import colorsys
import html
import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

__all__ = [
    "Html",
    "ReportLimits",
    "Row",
    "colour",
    "count",
    "esc",
    "fmt_duration",
    "fmt_int",
    "fmt_num",
    "fmt_ts",
    "number",
    "table",
    "tag",
    "text",
    "timestamp",
]

Row = Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportLimits:
    """How much the report draws, so that 100 groups of 50 members still give a page that
    opens quickly. Wherever a limit cuts something, the page says what and how much.

    Attributes:
        lanes: member lanes in one group's timeline.
        intervals: ownership bars in one group's timeline.
        marks: generation lines, and rebalance shadings, in one group's timeline.
        rows: rows in each table inside a group's section.
        bars: bars in a group's unavailability-per-rebalance chart.
        total_intervals: ownership bars in all the timelines together: with many groups,
            each gets ``total_intervals // groups`` (at least 50) instead of ``intervals``.
        top: rows in each table and chart that spans all groups (the safety table is never
            cut: every overlap is listed).
    """

    lanes: int = 30
    intervals: int = 600
    marks: int = 300
    rows: int = 20
    bars: int = 60
    total_intervals: int = 20_000
    top: int = 25

    def intervals_per_group(self, groups: int) -> int:
        """The ownership bars one group's timeline may draw when there are ``groups``."""
        return min(self.intervals, max(self.total_intervals // max(groups, 1), 50))

    def __post_init__(self) -> None:
        for name in ("lanes", "intervals", "marks", "rows", "bars", "total_intervals", "top"):
            if getattr(self, name) < 1:
                raise ValueError(f"ReportLimits.{name} must be at least 1")


class Html(str):
    """A fragment of HTML that is already safe: built here, or escaped on the way in."""

    __slots__ = ()


def esc(value: object) -> Html:
    """``value`` as safe HTML: an :class:`Html` fragment as it is, anything else escaped
    as text (quotes too, so the result is also safe inside an attribute value)."""
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def tag(name: str, content: object = "", /, **attrs: object) -> Html:
    """``<name attrs>content</name>``. ``name`` and the attribute names are the caller's
    constants; attribute values and ``content`` go through :func:`esc`. A trailing
    underscore is dropped from an attribute name (``class_``), other underscores become
    dashes (``data_kind``); an attribute whose value is None or False is left out."""
    parts = [name]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        attr = key.rstrip("_").replace("_", "-")
        parts.append(attr if value is True else f'{attr}="{esc(value)}"')
    return Html(f"<{' '.join(parts)}>{esc(content)}</{name}>")


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    class_: str = "",
    numeric: Iterable[int] = (),
) -> Html:
    """A ``<table>``: ``headers`` (constants) and ``rows`` of cells, each escaped unless it
    is :class:`Html`. Columns whose indexes are in ``numeric`` are right-aligned."""
    right = set(numeric)
    head = "".join(
        f'<th class="num">{esc(h)}</th>' if i in right else f"<th>{esc(h)}</th>"
        for i, h in enumerate(headers)
    )
    body: list[str] = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{esc(c)}</td>' if i in right else f"<td>{esc(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    cls = f' class="{esc(class_)}"' if class_ else ""
    return Html(f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


# -- reading values -------------------------------------------------------------------------


def text(row: Row, key: str) -> str:
    """The value at ``key`` as text; ``""`` when missing or null."""
    value = row.get(key)
    return "" if value is None else str(value)


def number(row: Row, key: str) -> float | None:
    """The value at ``key`` as a finite float, or None (missing, null, not a number, NaN,
    infinite). Anything ``float()`` takes counts (``int``, ``Decimal`` from a Spark
    decimal column, numpy scalars, numeric strings); booleans do not."""
    value = row.get(key)
    if value is None or isinstance(value, bool):
        return None
    try:
        result = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return result if math.isfinite(result) else None


def count(row: Row, key: str) -> int:
    """The value at ``key`` as a non-negative whole number; 0 when it is not one."""
    value = number(row, key)
    return int(value) if value is not None and value > 0 else 0


@lru_cache(maxsize=65536)
def _parse_ts(value: str) -> float | None:
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if parsed.tzinfo is None:  # the contract says UTC; a bare time is read as UTC
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def timestamp(row: Row, key: str) -> float | None:
    """The value at ``key`` as POSIX seconds: an RFC 3339 string (``...Z``, the contract)
    or a ``datetime``; None when missing or unreadable."""
    value = row.get(key)
    if isinstance(value, str):
        return _parse_ts(value)
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return None


# -- formatting -----------------------------------------------------------------------------


def fmt_ts(seconds: float | None, *, time_only: bool = False) -> str:
    """POSIX seconds as ``YYYY-MM-DD HH:MM:SS.mmm`` UTC (``HH:MM:SS.mmm`` with
    ``time_only``); ``—`` for None."""
    if seconds is None:
        return "—"
    try:
        moment = datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):  # beyond what datetime can show
        return f"{seconds:.3f} s since 1970"
    stamp = moment.strftime("%H:%M:%S" if time_only else "%Y-%m-%d %H:%M:%S")
    return f"{stamp}.{moment.microsecond // 1000:03d}"


def fmt_num(value: float | None, digits: int = 1) -> str:
    """A float with ``digits`` decimals and thousands separators; ``—`` for None."""
    return "—" if value is None else f"{value:,.{digits}f}"


def fmt_int(value: float | None) -> str:
    """A whole number with thousands separators; ``—`` for None."""
    return "—" if value is None else f"{round(value):,d}"


def fmt_duration(seconds: float | None) -> str:
    """A duration for people: ``850 ms``, ``12.3 s``, ``4 min 05 s``, ``2 h 03 min``."""
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest:02d} s"
    hours, rest = divmod(round(seconds) // 60, 60)
    return f"{hours} h {rest:02d} min"


def colour(topic: str, partition: int | None) -> str:
    """A stable colour (``#rrggbb``) for a topic's partition: the hue from the topic's name
    (CRC-32, so the same topic gets the same colour in every report), the lightness from
    the partition number. Only hex digits leave this function: safe in an attribute."""
    hue = zlib.crc32(topic.encode("utf-8", "replace")) % 360
    shade = 0 if partition is None else partition % 5
    red, green, blue = colorsys.hls_to_rgb(hue / 360, (34 + 8 * shade) / 100, 0.62)
    return f"#{round(red * 255):02x}{round(green * 255):02x}{round(blue * 255):02x}"
