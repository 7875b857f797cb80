"""The consumer-protocol heartbeat grid and the handoff on close (deviations.md row 22).

- regular heartbeats fall on the group's grid (``phase + k * interval`` on the wall clock),
  so members that joined at different times, on hosts whose monotonic clocks differ,
  heartbeat at the same instants; no gap is longer than the interval;
- ``leave(handoff=True)`` keeps the partitions until ``handoff_lead_ms`` before the next
  tick, then releases them and sends the leave heartbeat at once; it does not wait for a
  static member, a member without partitions, one without the grid, or past the deadline;
  a member fenced meanwhile releases its partitions as lost at once.
"""

from __future__ import annotations

import itertools
import random

import pytest

from kgroup._core._kip848_actions import (
    HeartbeatWait,
    PollIdle,
    ReleaseOnLeave,
    SendConsumerHeartbeat,
)
from kgroup._core._kip848_grid import grid_phase, next_tick, release_time
from kgroup._core._kip848_state import ConsumerState
from kgroup._errors import ErrorCode
from tests.unit.test_scenarios_kip848 import T1, Harness, assignment, tp

INTERVAL = 5_000
GRID = {"heartbeat_grid": True}


def _on_grid(t: float, offset: float, group_id: str = "g") -> bool:
    return (t + offset - grid_phase(group_id, INTERVAL)) % INTERVAL == pytest.approx(0, abs=1e-6)


def test_next_tick_is_the_first_grid_instant_after() -> None:
    rng = random.Random(7)
    for _ in range(500):
        after = rng.uniform(0, 1e7)
        offset = rng.uniform(-1e9, 1e9)
        tick = next_tick(after, group_id="g", interval_ms=INTERVAL, wall_offset_ms=offset)
        assert after < tick <= after + INTERVAL
        assert _on_grid(tick, offset)
    phase = grid_phase("g", INTERVAL)
    exact = phase + 3 * INTERVAL
    assert (
        next_tick(exact, group_id="g", interval_ms=INTERVAL, wall_offset_ms=0) == exact + INTERVAL
    )
    phases = {grid_phase(f"group-{i}", INTERVAL) for i in range(50)}
    assert len(phases) > 40, "groups are spread over the interval"
    assert all(0 <= p < INTERVAL for p in phases)


def _stable(h: Harness, offset: float, join_at: float, partitions: tuple[int, ...] = (0,)) -> None:
    """Join at ``join_at`` (answered 10 ms later with t1-0, or ``partitions`` of t1),
    acknowledge, and answer it."""
    h.m.wall_offset_ms = offset
    h.at(join_at)
    h.found()
    h.poll()
    join = h.send()
    h.at(join_at + 10)
    h.answer(join, epoch=5, assigned=assignment((T1, partitions)))
    h.poll()
    ack = h.send()
    h.at(join_at + 20)
    h.answer(ack, epoch=5)


def _regular_sends(h: Harness, count: int) -> list[float]:
    sends: list[float] = []
    while len(sends) < count:
        action = h.hb()
        if isinstance(action, HeartbeatWait):
            h.at(action.until)
            continue
        sends.append(action.sent_at)
        h.at(h.now + 3)
        h.answer(action, epoch=5)
    return sends


def test_members_that_joined_apart_heartbeat_on_the_same_wall_instants() -> None:
    """Two members of one group, on hosts whose monotonic clocks are 1,234,567 ms apart,
    joined 1.7 s apart: after their first regular heartbeat they send at the same wall
    instants, one interval apart; no gap, the first included, passes the interval."""
    a, b = Harness(settings=GRID), Harness(settings=GRID)
    _stable(a, offset=5_000_000.0, join_at=100.0)
    _stable(b, offset=5_000_000.0 - 1_234_567.0, join_at=100.0 + 1_234_567.0 + 1_700.0)
    walls = []
    for h in (a, b):
        sends = _regular_sends(h, 4)
        offset = h.m.wall_offset_ms
        assert all(_on_grid(t, offset) for t in sends)
        gaps = [y - x for x, y in itertools.pairwise(sends)]
        assert gaps == [INTERVAL] * 3
        walls.append({round(t + offset) for t in sends})
    assert walls[0] & walls[1], "the two members share grid instants"


def test_the_first_regular_heartbeat_comes_within_an_interval() -> None:
    h = Harness(settings=GRID)
    _stable(h, offset=0.0, join_at=0.0)
    first = _regular_sends(h, 1)[0]
    assert 10 < first <= 10 + INTERVAL  # the acknowledgement was sent at 10
    assert _on_grid(first, 0.0)


def test_pickup_heartbeats_never_skip_a_grid_tick() -> None:
    """Pickup gaps (held at 200 ms, then doubling: deviation 18) stop at the next grid
    tick: a handoff on close counts on every member heartbeating on each tick (CI caught
    1.0 s gaps in ``test_kip848_handoff.py`` when pickups skipped ticks). Checked for
    joins all over the interval."""
    for step in range(0, INTERVAL, 125):
        h = Harness(settings={**GRID, "pickup_first_ms": 25})
        _stable(h, offset=float(step), join_at=0.0)
        sends = _regular_sends(h, 25)
        tick = next_tick(10.0, group_id="g", interval_ms=INTERVAL, wall_offset_ms=float(step))
        while tick <= sends[-1]:
            assert tick in sends, (step, tick, sends)
            tick += INTERVAL
        assert any(not _on_grid(t, float(step)) for t in sends[:3]), "pickups came first"


def test_pickup_heartbeats_come_first_then_the_grid() -> None:
    h = Harness(settings={**GRID, "pickup_first_ms": 25})
    _stable(h, offset=0.0, join_at=0.0)
    sends = _regular_sends(h, 20)
    gaps = [y - x for x, y in itertools.pairwise([10.0, *sends])]
    assert gaps[:3] == [50, 100, 200]  # the pickup doubling (row 18), from the ack at 10
    assert _on_grid(sends[-1], 0.0) and _on_grid(sends[-2], 0.0)
    assert all(g <= INTERVAL for g in gaps)


def test_a_handoff_close_keeps_the_partitions_until_the_lead_before_a_tick() -> None:
    h = Harness(settings=GRID)
    _stable(h, offset=0.0, join_at=0.0)
    _regular_sends(h, 1)
    h.at(h.now + 1_234)
    assert h.m.leave(h.now, handoff=True)
    release = release_time(
        h.now, group_id="g", interval_ms=INTERVAL, wall_offset_ms=0.0, lead_ms=50
    )
    assert _on_grid(release + 50, 0.0) and h.now < release <= h.now + INTERVAL
    idle = h.m.poll_action(h.now)
    assert isinstance(idle, PollIdle) and idle.until == release
    assert "member.handoff_waiting" in h.event_names()
    # The member keeps heartbeating (it still owns t1-0) until the release.
    while h.now < release:
        action = h.hb()
        if isinstance(action, HeartbeatWait):
            h.at(min(action.until, release))
            continue
        h.answer(action, epoch=5)
    assert h.calls[-1] == ("assigned", tp("t1", 0))  # nothing revoked before the release
    release_action = h.m.poll_action(h.now)
    assert isinstance(release_action, ReleaseOnLeave) and not release_action.lost
    assert release_action.partitions == tp("t1", 0)
    h.m.leave_prepared(h.now)
    leave = h.send()
    assert leave.leave and leave.request.member_epoch == -1 and leave.sent_at == release


@pytest.mark.parametrize(
    ("case", "settings"),
    [
        ("static", {"instance_id": "i-1", "leave_epoch_on_close": -2}),
        ("no leave heartbeat", {"leave_epoch_on_close": None}),
        ("no grid", {"heartbeat_grid": False}),
        ("not asked", {}),
        ("past the deadline", {}),
        ("nothing owned", {}),
    ],
)
def test_a_close_releases_at_once_when_no_handoff_applies(
    case: str, settings: dict[str, object]
) -> None:
    h = Harness(settings={**GRID, **settings})
    _stable(h, offset=0.0, join_at=0.0)
    if case == "nothing owned":
        h.m.owned = frozenset()
    handoff = case != "not asked"
    deadline = h.now + 1.0 if case == "past the deadline" else None
    assert h.m.leave(h.now, handoff=handoff, deadline=deadline)
    action = h.m.poll_action(h.now)
    assert isinstance(action, ReleaseOnLeave)
    assert "member.handoff_waiting" not in h.event_names()


def _next_send(h: Harness) -> SendConsumerHeartbeat:
    """Move time on to the member's next heartbeat, and return it (unanswered)."""
    while True:
        action = h.hb()
        if not isinstance(action, HeartbeatWait):
            assert isinstance(action, SendConsumerHeartbeat)
            return action
        h.at(action.until)


def test_a_member_fenced_while_it_waits_to_hand_off_releases_as_lost_at_once() -> None:
    h = Harness(settings={**GRID, "pickup_first_ms": 25})  # a pickup heartbeat in the wait
    _stable(h, offset=0.0, join_at=0.0)
    assert h.m.leave(h.now, handoff=True)
    assert isinstance(h.m.poll_action(h.now), PollIdle)
    action = _next_send(h)
    assert isinstance(h.m.poll_action(h.now), PollIdle)  # still waiting
    h.answer(action, code=ErrorCode.FENCED_MEMBER_EPOCH)
    released = h.m.poll_action(h.now)
    assert isinstance(released, ReleaseOnLeave) and released.lost
    h.m.leave_prepared(h.now)
    assert h.state() is ConsumerState.UNSUBSCRIBED  # no leave heartbeat without an epoch


def test_a_revocation_asked_while_waiting_to_hand_off_releases_at_once() -> None:
    """The broker takes a partition back (a newcomer's target) while the member waits for
    the tick: its revocation deadline (the rebalance timeout) runs from that heartbeat,
    and may be shorter than the wait, so the member releases everything at once."""
    h = Harness(settings={**GRID, "pickup_first_ms": 25})
    _stable(h, offset=0.0, join_at=0.0, partitions=(0, 1))
    assert h.m.leave(h.now, handoff=True)
    assert isinstance(h.m.poll_action(h.now), PollIdle)
    action = _next_send(h)
    assert isinstance(h.m.poll_action(h.now), PollIdle)  # still waiting
    h.at(h.now + 2)
    h.answer(action, epoch=5, assigned=assignment((T1, (0,))))  # t1-1 goes to a newcomer
    assert "member.handoff_cut_short" in h.event_names()
    rebalance_timeout = h.m.settings.rebalance_timeout_ms
    assert h.m.valid_until is not None and h.m.valid_until <= action.sent_at + rebalance_timeout
    released = h.m.poll_action(h.now)
    assert isinstance(released, ReleaseOnLeave) and not released.lost
    assert released.partitions == tp("t1", 0, 1)
