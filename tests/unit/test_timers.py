"""Retry backoff (spec §3.1, KIP-580) and the heartbeat-side timers (§3.1, §5.3)."""

from __future__ import annotations

import random

import pytest

from kgroup._core._timers import ExponentialBackoff, HeartbeatTimers, Timer


def fixed(factor: float):
    """A ``uniform`` that always returns ``factor`` (checking it is asked for ±20%)."""

    def uniform(lo: float, hi: float) -> float:
        assert (lo, hi) == pytest.approx((0.8, 1.2))
        return factor

    return uniform


@pytest.mark.parametrize(
    ("factor", "expected"),
    [
        (1.0, [100, 200, 400, 800, 1000, 1000, 1000]),
        (0.8, [80, 160, 320, 640, 800, 800, 800]),
        (1.2, [120, 240, 480, 960, 1000, 1000, 1000]),
    ],
)
def test_backoff_formula(factor: float, expected: list[int]) -> None:
    """backoff(n) = min(max, base * 2^min(n, log2(max/base)) * U(0.8, 1.2))."""
    backoff = ExponentialBackoff(100, 1000, uniform=fixed(factor))
    assert [backoff.backoff(n) for n in range(7)] == pytest.approx(expected)


def test_backoff_ranges_with_real_jitter() -> None:
    """Attempts 0..3 are about 100, 200, 400, 800 (±20%); then in [800, 1000]; never above
    1000, whatever the attempt count."""
    backoff = ExponentialBackoff(100, 1000, uniform=random.Random(7).uniform)
    for _ in range(200):
        for n, nominal in enumerate([100, 200, 400, 800]):
            assert 0.8 * nominal <= backoff.backoff(n) <= 1.2 * nominal
        for n in (4, 5, 10, 64, 10_000):
            assert 800 <= backoff.backoff(n) <= 1000


def test_backoff_uses_random_jitter_by_default() -> None:
    backoff = ExponentialBackoff(100, 1000)
    values = {backoff.backoff(0) for _ in range(50)}
    assert len(values) > 1
    assert all(80 <= v <= 120 for v in values)


@pytest.mark.parametrize(("base", "maximum"), [(1000, 1000), (2000, 1000), (500, 100)])
def test_backoff_base_at_least_max_is_constant_max(base: int, maximum: int) -> None:
    """If base >= max, the backoff is the constant max, without jitter."""

    def no_jitter(lo: float, hi: float) -> float:
        raise AssertionError("jitter must not be drawn when base >= max")

    backoff = ExponentialBackoff(base, maximum, uniform=no_jitter)
    assert [backoff.backoff(n) for n in range(6)] == [maximum] * 6


def test_backoff_without_jitter() -> None:
    backoff = ExponentialBackoff(100, 1000, jitter=0.0)
    assert [backoff.backoff(n) for n in range(6)] == pytest.approx([100, 200, 400, 800, 1000, 1000])


def test_timer() -> None:
    timer = Timer(1_000, 500)
    assert not timer.expired(1_499)
    assert timer.expired(1_500)
    assert timer.remaining(1_200) == 300
    assert timer.remaining(2_000) == 0
    timer.reset(2_000, 100)
    assert timer.deadline == 2_100


def make_timers(now: float = 0.0) -> HeartbeatTimers:
    return HeartbeatTimers(
        now=now,
        heartbeat_interval_ms=3_000,
        session_timeout_ms=45_000,
        max_poll_interval_ms=300_000,
        backoff=ExponentialBackoff(100, 1000, uniform=fixed(1.0)),
    )


def test_heartbeat_timer_reset_on_send_not_on_success() -> None:
    """§3.1: the heartbeat timer restarts at the full interval when a heartbeat is *sent*;
    a success resets the session timer and the attempt count only."""
    timers = make_timers()
    assert timers.heartbeat.deadline == 3_000
    timers.sent(3_000)
    assert timers.in_flight
    assert timers.heartbeat.deadline == 6_000
    timers.received(3_900)
    assert not timers.in_flight
    assert timers.heartbeat.deadline == 6_000
    assert timers.session.deadline == 3_900 + 45_000
    assert timers.last_heartbeat_received == 3_900


def test_heartbeat_failures_back_off_and_success_resets_attempts() -> None:
    """§5.3: a failure sets the heartbeat timer to backoff(attempts++); success resets the
    attempt count (the next failure is ~100 ms again)."""
    timers = make_timers()
    deadlines = []
    now = 3_000.0
    for _ in range(6):
        timers.sent(now)
        timers.failed(now)
        deadlines.append(timers.heartbeat.deadline - now)
        now = timers.heartbeat.deadline
    assert deadlines == pytest.approx([100, 200, 400, 800, 1000, 1000])
    assert timers.attempts == 6
    timers.sent(now)
    timers.received(now)
    assert timers.attempts == 0
    timers.sent(now + 3_000)
    timers.failed(now + 3_000)
    assert timers.heartbeat.deadline == pytest.approx(now + 3_100)


def test_reset_all_and_polled() -> None:
    timers = make_timers()
    timers.sent(1_000)
    timers.reset_all(10_000)
    assert not timers.in_flight
    assert timers.heartbeat.deadline == 13_000
    assert timers.session.deadline == 55_000
    assert timers.poll.deadline == 310_000
    timers.polled(20_000)
    assert timers.poll.deadline == 320_000
    timers.reset_session(30_000)
    assert timers.session.deadline == 75_000
