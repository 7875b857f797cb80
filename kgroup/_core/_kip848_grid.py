"""The heartbeat grid of a consumer-protocol group (deviations.md row 22).

Under the consumer protocol a member learns that another one left only in the answer to its
own next heartbeat, so the leaver's partitions stay unowned until then: half a heartbeat
interval on average, since nothing aligns the members' heartbeats. kgroup's members align
their regular heartbeats on a grid shared by the whole group, the instants

    phase + k * interval        (wall clock, ms; k an integer)

where ``interval`` is the broker's heartbeat interval (the same for every member of the
group) and ``phase`` is drawn from the group id, so that different groups on one
coordinator do not heartbeat together. Every gap stays at most one interval (the first one
after a pickup or a join is shorter), so the session is kept as before.

A member that closes with a handoff (``GroupConfig.handoff_on_close``) knows when the
others will next heartbeat: it keeps processing its partitions until ``lead_ms`` before a
tick, then revokes them and sends its leave heartbeat, so the others get them in the answer
to their heartbeat on that tick, a few tens of milliseconds later instead of half an
interval.

The grid is read on the wall clock (``wall_offset_ms`` turns the member's monotonic clock
into it), so members on different hosts agree as closely as their clocks do. Nothing
depends on it for safety: a member off the grid only loses the saving.
"""

from __future__ import annotations

import math
import zlib

__all__ = ["grid_phase", "next_tick", "release_time"]


def grid_phase(group_id: str, interval_ms: float) -> float:
    """The group's offset on the grid, in [0, interval): the same in every member."""
    return float(zlib.crc32(group_id.encode("utf-8")) % max(1, int(interval_ms)))


def next_tick(after: float, *, group_id: str, interval_ms: float, wall_offset_ms: float) -> float:
    """The first grid instant strictly after ``after`` (both on the member's clock)."""
    wall = after + wall_offset_ms
    phase = grid_phase(group_id, interval_ms)
    k = math.floor((wall - phase) / interval_ms) + 1
    tick = phase + k * interval_ms - wall_offset_ms
    while tick <= after:  # float rounding at an exact tick
        tick += interval_ms
    return tick


def release_time(
    now: float, *, group_id: str, interval_ms: float, wall_offset_ms: float, lead_ms: float
) -> float:
    """When a handoff close starts releasing: ``lead_ms`` before the first tick that leaves
    at least that much time from ``now``."""
    return (
        next_tick(
            now + lead_ms, group_id=group_id, interval_ms=interval_ms, wall_offset_ms=wall_offset_ms
        )
        - lead_ms
    )
