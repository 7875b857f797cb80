"""The report's plots, drawn as inline SVG by plain Python (no library, no JavaScript).

Every plot is one ``<svg class="plot">`` with a ``viewBox`` (it scales to the page width),
a ``data-plot`` attribute naming its kind (``timeline``, ``histogram``, ``bars``,
``hbars``; the browser test counts them), ``role="img"`` and an ``aria-label``. Each mark
carries a ``<title>``, which browsers show as a tooltip. Colours and classes come from the
stylesheet in :mod:`kgroup.analytics._report_assets`; only fills computed by
:func:`~kgroup.analytics._report_util.colour` are inline.

The functions here draw what they are given: choosing and capping what to draw is the
caller's job (:mod:`kgroup.analytics._report_groups`), so that the page can say what was
left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from kgroup.analytics._report_util import Html, colour, esc, fmt_int, fmt_ts

__all__ = [
    "Bar",
    "Lane",
    "Mark",
    "Timeline",
    "bars_svg",
    "hbars_svg",
    "histogram_svg",
    "timeline_svg",
]

# Nice tick steps for a time axis, in seconds.
_TIME_STEPS = (
    0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
    3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Bar:
    """One owned-partition interval in a lane."""

    start: float
    end: float
    topic: str
    partition: int | None
    tip: str


@dataclass(slots=True)
class Lane:
    """One member's row in the timeline."""

    key: str
    label: str
    tip: str
    bars: list[Bar] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Mark:
    """A span (rebalance, overlap) or an instant (generation start, when ``end`` is None)
    drawn across the lanes; ``lanes`` limits it to some lanes (an overlap's two members)."""

    start: float
    end: float | None
    label: str
    tip: str
    lanes: tuple[str, ...] = ()


@dataclass(slots=True)
class Timeline:
    """Everything a group's timeline shows, already chosen and capped."""

    start: float
    end: float
    lanes: list[Lane]
    generations: list[Mark]
    rebalances: list[Mark]
    overlaps: list[Mark]


def _n(value: float) -> str:
    """A coordinate, short: one decimal, no trailing ``.0``."""
    out = f"{value:.1f}"
    return out[:-2] if out.endswith(".0") else out


def _svg(kind: str, label: str, width: float, height: float, body: list[str]) -> Html:
    return Html(
        f'<svg class="plot" data-plot="{kind}" role="img" aria-label="{esc(label)}" '
        f'viewBox="0 0 {_n(width)} {_n(height)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{esc(label)}</title>{''.join(body)}</svg>"
    )


def _time_ticks(start: float, end: float, most: int = 8) -> list[tuple[float, str]]:
    span = end - start
    # Past the nicest steps (a log over months or a stray timestamp), whole days.
    step = next((s for s in _TIME_STEPS if span / s <= most), None)
    step = step if step is not None else math.ceil(span / most / 86400) * 86400.0
    first = -(-start // step) * step
    with_date = span > 86400
    if span > 366 * 86400:
        return [(at, fmt_ts(at)[:10]) for at in (start + span * k / most for k in range(most + 1))]
    ticks: list[tuple[float, str]] = []
    at = first
    while at <= end + 1e-9:
        if with_date:
            label = fmt_ts(at)[5:16]
        elif step < 1:
            label = fmt_ts(at, time_only=True)[:10]
        else:
            label = fmt_ts(at, time_only=True)[:8]
        ticks.append((at, label))
        at += step
    return ticks


# -- the ownership timeline -----------------------------------------------------------------

_T_WIDTH = 1000.0
_T_LABEL = 180.0  # left column: member labels
_T_RIGHT = 30.0  # room for the last time label
_T_TOP = 22.0  # generation labels above the lanes
_T_LANE = 16.0
_T_GAP = 4.0
_T_BOTTOM = 22.0  # time axis below the lanes
_T_MAX_STRIPES = 8  # partitions held at once shown as this many thin stripes at most


def _stripes(bars: list[Bar]) -> tuple[list[int], int]:
    """A stripe (sub-row) for each bar, so that bars held at the same time do not cover
    each other: greedy interval colouring in start order. Returns the stripe per bar (in
    the order given) and the number of stripes."""
    order = sorted(range(len(bars)), key=lambda i: (bars[i].start, bars[i].end))
    ends: list[float] = []
    stripe = [0] * len(bars)
    for i in order:
        bar = bars[i]
        for s, busy_until in enumerate(ends):
            if busy_until <= bar.start:
                ends[s] = bar.end
                stripe[i] = s
                break
        else:
            ends.append(bar.end)
            stripe[i] = len(ends) - 1
    return stripe, max(1, len(ends))


def timeline_svg(tl: Timeline, label: str) -> Html:
    """One lane per member, a bar per owned-partition interval coloured by topic and
    partition, dashed lines at generation starts, rebalances shaded, overlaps outlined."""
    span = max(tl.end - tl.start, 1e-3)
    plot_w = _T_WIDTH - _T_LABEL - _T_RIGHT
    lanes_h = len(tl.lanes) * (_T_LANE + _T_GAP)
    height = _T_TOP + lanes_h + _T_BOTTOM
    bottom = _T_TOP + lanes_h

    def x(t: float) -> float:
        return _T_LABEL + (min(max(t, tl.start), tl.end) - tl.start) / span * plot_w

    def w(a: float, b: float) -> str:
        return _n(max(x(b) - x(a), 0.6))

    lane_y = {lane.key: _T_TOP + i * (_T_LANE + _T_GAP) for i, lane in enumerate(tl.lanes)}
    out: list[str] = []
    for i, lane in enumerate(tl.lanes):
        y = lane_y[lane.key]
        out.append(
            f'<rect class="lane{" alt" if i % 2 else ""}" x="{_n(_T_LABEL)}" y="{_n(y - 1)}" '
            f'width="{_n(plot_w)}" height="{_n(_T_LANE + 2)}"/>'
        )
    for rb in tl.rebalances:
        cls = "rb" if rb.end is not None else "rb open"
        end = rb.end if rb.end is not None else tl.end
        out.append(
            f'<rect class="{cls}" x="{_n(x(rb.start))}" y="{_n(_T_TOP - 4)}" '
            f'width="{w(rb.start, end)}" height="{_n(lanes_h + 4)}">'
            f"<title>{esc(rb.tip)}</title></rect>"
        )
    last_label = -1e9
    for gen in tl.generations:
        gx = x(gen.start)
        out.append(
            f'<line class="gen" x1="{_n(gx)}" x2="{_n(gx)}" y1="{_n(_T_TOP - 6)}" '
            f'y2="{_n(bottom)}"><title>{esc(gen.tip)}</title></line>'
        )
        if gx - last_label >= 34:
            out.append(f'<text class="genl" x="{_n(gx + 2)}" y="12">{esc(gen.label)}</text>')
            last_label = gx
    for lane in tl.lanes:
        y = lane_y[lane.key]
        stripe, stripes = _stripes(lane.bars)
        shown = min(stripes, _T_MAX_STRIPES)
        sub = _T_LANE / shown
        for bar, s in zip(lane.bars, stripe, strict=True):
            out.append(
                f'<rect x="{_n(x(bar.start))}" y="{_n(y + (s % shown) * sub)}" '
                f'width="{w(bar.start, bar.end)}" height="{_n(max(sub - 0.4, 0.8))}" '
                f'fill="{colour(bar.topic, bar.partition)}"><title>{esc(bar.tip)}</title></rect>'
            )
        out.append(
            f'<text class="lanel" x="{_n(_T_LABEL - 6)}" y="{_n(y + _T_LANE - 4)}">'
            f"{esc(lane.label)}<title>{esc(lane.tip)}</title></text>"
        )
    for ov in tl.overlaps:
        end = ov.end if ov.end is not None else ov.start
        ov_w = _n(max(x(end) - x(ov.start), 0.6) + 2)
        # Outline the two members' lanes; across every lane when neither is drawn.
        boxes = [(lane_y[k] - 2, _T_LANE + 4) for k in ov.lanes if k in lane_y]
        for y, h in boxes or [(_T_TOP - 2, lanes_h)]:
            out.append(
                f'<rect class="ov" x="{_n(x(ov.start) - 1)}" y="{_n(y)}" width="{ov_w}" '
                f'height="{_n(h)}"><title>{esc(ov.tip)}</title></rect>'
            )
    out.append(
        f'<line class="axis" x1="{_n(_T_LABEL)}" x2="{_n(_T_WIDTH - _T_RIGHT)}" '
        f'y1="{_n(bottom)}" y2="{_n(bottom)}"/>'
    )
    for at, tick in _time_ticks(tl.start, tl.end):
        tx = x(at)
        out.append(
            f'<line class="tick" x1="{_n(tx)}" x2="{_n(tx)}" y1="{_n(bottom)}" '
            f'y2="{_n(bottom + 4)}"/><text class="tickl" x="{_n(tx)}" '
            f'y="{_n(bottom + 16)}">{esc(tick)}</text>'
        )
    return _svg("timeline", label, _T_WIDTH, height, out)


# -- histograms and bars ----------------------------------------------------------------------


def _ms(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:g}s"
    return f"{value:g}"


def _value_axis(
    out: list[str], left: float, right: float, top: float, bottom: float, peak: float
) -> None:
    for frac in (0.0, 0.5, 1.0):
        y = bottom - frac * (bottom - top)
        out.append(
            f'<line class="grid" x1="{_n(left)}" x2="{_n(right)}" y1="{_n(y)}" y2="{_n(y)}"/>'
            f'<text class="vall" x="{_n(left - 4)}" y="{_n(y + 4)}">'
            f"{esc(fmt_int(peak * frac) if peak >= 10 else f'{peak * frac:g}')}</text>"
        )


def histogram_svg(buckets: Sequence[tuple[float, float | None, int]], label: str) -> Html:
    """A histogram over log-spaced buckets ``(lo_ms, hi_ms or None, count)``, drawn as
    equal-width bars (so the x axis is logarithmic, like the buckets)."""
    width, height = 480.0, 190.0
    left, right, top, bottom = 52.0, 470.0, 12.0, 150.0
    peak = max((c for _, _, c in buckets), default=0) or 1
    slot = (right - left) / max(len(buckets), 1)
    out: list[str] = []
    _value_axis(out, left, right, top, bottom, peak)
    every = max(1, -(-len(buckets) // 8))
    for i, (lo, hi, n) in enumerate(buckets):
        h = n / peak * (bottom - top)
        bx = left + i * slot
        span = f"{_ms(lo)} to {_ms(hi)} ms" if hi is not None else f"≥ {_ms(lo)} ms"
        out.append(
            f'<rect class="hbar" x="{_n(bx + 0.5)}" y="{_n(bottom - h)}" '
            f'width="{_n(max(slot - 1, 0.5))}" height="{_n(h)}">'
            f"<title>{esc(f'{span}: {n:,d}')}</title></rect>"
        )
        if i % every == 0:
            out.append(
                f'<text class="tickl" x="{_n(bx)}" y="{_n(bottom + 14)}">{esc(_ms(lo))}</text>'
            )
    out.append(
        f'<line class="axis" x1="{_n(left)}" x2="{_n(right)}" y1="{_n(bottom)}" '
        f'y2="{_n(bottom)}"/><text class="axisl" x="{_n((left + right) / 2)}" '
        f'y="{_n(height - 8)}">ms (log buckets)</text>'
    )
    return _svg("histogram", label, width, height, out)


def bars_svg(
    items: Sequence[tuple[str, float, str]], label: str, *, x_unit: str, y_unit: str
) -> Html:
    """Vertical bars ``(label, value, tooltip)`` in the order given, at most 36 units
    wide each."""
    width, height = 640.0, 200.0
    left, right, top, bottom = 60.0, 630.0, 18.0, 160.0
    peak = max((v for _, v, _ in items), default=0.0) or 1.0
    slot = min((right - left) / max(len(items), 1), 40.0)
    out: list[str] = []
    _value_axis(out, left, right, top, bottom, peak)
    every = max(1, -(-len(items) // 16))
    for i, (name, value, tip) in enumerate(items):
        h = value / peak * (bottom - top)
        bx = left + i * slot
        out.append(
            f'<rect class="vbar" x="{_n(bx + 2)}" y="{_n(bottom - h)}" '
            f'width="{_n(max(slot - 4, 0.5))}" height="{_n(h)}"><title>{esc(tip)}</title></rect>'
        )
        if i % every == 0:
            out.append(
                f'<text class="tickl" x="{_n(bx + slot / 2)}" y="{_n(bottom + 14)}">'
                f"{esc(name)}</text>"
            )
    out.append(
        f'<line class="axis" x1="{_n(left)}" x2="{_n(right)}" y1="{_n(bottom)}" '
        f'y2="{_n(bottom)}"/><text class="axisl" x="{_n((left + right) / 2)}" '
        f'y="{_n(height - 6)}">{esc(x_unit)}</text>'
        f'<text class="vall start" x="4" y="10">{esc(y_unit)}</text>'
    )
    return _svg("bars", label, width, height, out)


def hbars_svg(items: Sequence[tuple[str, float, str]], label: str, unit: str) -> Html:
    """Horizontal bars ``(label, value, tooltip)``, one row each, in the order given."""
    width, row = 1000.0, 18.0
    left, right, top = 330.0, 900.0, 6.0
    height = top + len(items) * row + 6
    peak = max((v for _, v, _ in items), default=0.0) or 1.0
    out: list[str] = []
    for i, (name, value, tip) in enumerate(items):
        y = top + i * row
        bw = max(value / peak * (right - left), 0.5)
        name = name if len(name) <= 52 else name[:51] + "…"  # the tooltip has it whole
        out.append(
            f'<text class="lanel" x="{_n(left - 6)}" y="{_n(y + 12)}">{esc(name)}</text>'
            f'<rect class="vbar" x="{_n(left)}" y="{_n(y + 2)}" width="{_n(bw)}" '
            f'height="{_n(row - 4)}"><title>{esc(tip)}</title></rect>'
            f'<text class="vall start" x="{_n(left + bw + 4)}" y="{_n(y + 12)}">'
            f"{esc(f'{value:,.1f} {unit}')}</text>"
        )
    return _svg("hbars", label, width, height, out)
