"""Heartbeat statistics and loop-stall detection (``HeartbeatStats``, ``SampleWindow``),
driven with plain numbers as the clock: every ``now`` is injected, nothing sleeps."""

from __future__ import annotations

import random

import pytest

from kgroup import GroupConfig, GroupMember
from kgroup._core._timers import HeartbeatStats, SampleWindow

STATS_KEYS = {
    # the keys stats() always had
    "state",
    "generation",
    "rebalances",
    "last_rebalance_ms",
    "last_heartbeat_age_ms",
    # the keys added with loop-stall detection and isolated mode
    "member_id",
    "assignment",
    "isolated",
    "heartbeats_sent",
    "heartbeats_acknowledged",
    "heartbeats_failed",
    "heartbeats_late",
    "heartbeat_lateness_ms",
    "heartbeat_rtt_ms",
    "last_heartbeat_lateness_ms",
    "lease_remaining_ms",
    # the containment counters
    "event_hook_failures",
    "log_sink_failures",
    # the event log's drops
    "event_log_dropped",
}


# -- SampleWindow ---------------------------------------------------------------------------------


def test_empty_window_reports_none() -> None:
    assert SampleWindow().summary() == {"p50": None, "p99": None, "max": None}


def test_window_percentiles_are_nearest_rank() -> None:
    window = SampleWindow()
    for value in range(1, 101):  # 1..100, shuffled: order must not matter
        window.add(float(value))
    assert window.summary() == {"p50": 50.0, "p99": 99.0, "max": 100.0}

    shuffled = SampleWindow()
    values = [float(v) for v in range(1, 101)]
    random.Random(7).shuffle(values)
    for sample in values:
        shuffled.add(sample)
    assert shuffled.summary() == window.summary()


def test_single_sample_is_every_percentile() -> None:
    window = SampleWindow()
    window.add(3.5)
    assert window.summary() == {"p50": 3.5, "p99": 3.5, "max": 3.5}


def test_window_keeps_only_the_last_samples() -> None:
    window = SampleWindow(1024)
    window.add(1_000_000.0)  # an old outlier, pushed out by 1024 newer samples
    for _ in range(1024):
        window.add(2.0)
    assert len(window) == 1024
    assert window.summary() == {"p50": 2.0, "p99": 2.0, "max": 2.0}


def test_window_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="size must be at least 1"):
        SampleWindow(0)


# -- HeartbeatStats: lateness -----------------------------------------------------------------


def test_on_time_wake_is_not_late() -> None:
    stats = HeartbeatStats(stall_warn_ms=500)
    stats.waiting(due=1_000.0, now=0.0)
    assert stats.woke(1_000.0) == 0.0
    assert stats.late == 0
    assert stats.last_lateness_ms == 0.0


def test_early_wake_records_nothing_and_keeps_waiting() -> None:
    stats = HeartbeatStats(stall_warn_ms=500)
    stats.waiting(due=1_000.0, now=0.0)
    assert stats.woke(400.0) is None  # woken early (poll(), an answer): not a sample
    assert len(stats.lateness) == 0
    assert stats.due == 1_000.0
    assert stats.woke(1_030.0) == 30.0  # the next run after the deadline is sampled


def test_blocked_loop_shows_as_lateness_and_counts_as_late() -> None:
    stats = HeartbeatStats(stall_warn_ms=500)
    stats.waiting(due=1_000.0, now=0.0)
    lateness = stats.woke(13_000.0)  # the loop was blocked for 12 s
    assert lateness == 12_000.0
    assert stats.is_late(lateness)
    assert stats.late == 1
    assert stats.last_lateness_ms == 12_000.0
    assert stats.lateness.summary()["max"] == 12_000.0


def test_threshold_is_exclusive() -> None:
    stats = HeartbeatStats(stall_warn_ms=500)
    stats.waiting(due=1_000.0, now=0.0)
    assert stats.woke(1_500.0) == 500.0
    assert stats.late == 0
    stats.waiting(due=2_500.0, now=1_500.0)
    assert stats.woke(3_000.5) == 500.5
    assert stats.late == 1


def test_one_sample_per_wait() -> None:
    stats = HeartbeatStats(stall_warn_ms=500)
    stats.waiting(due=1_000.0, now=0.0)
    assert stats.woke(2_000.0) == 1_000.0
    # The driver runs again without a new wait (it is sending): no second sample.
    assert stats.woke(2_001.0) is None
    assert len(stats.lateness) == 1


def test_waiting_for_a_deadline_already_passed_is_not_a_wait() -> None:
    # A heartbeat timer that had already expired when the driver went to wait (the driver
    # waited for something else) proves nothing about the loop: no sample.
    stats = HeartbeatStats(stall_warn_ms=500)
    stats.waiting(due=1_000.0, now=1_200.0)
    assert stats.due is None
    assert stats.woke(5_000.0) is None


def test_idle_periods_are_not_lateness() -> None:
    # Heartbeats disabled (rebalance) or coordinator unknown: the driver is idle; the time
    # it spends so is not lateness even if the old timer is long past.
    stats = HeartbeatStats(stall_warn_ms=500)
    stats.waiting(due=1_000.0, now=0.0)
    assert stats.woke(900.0) is None
    stats.idle()
    assert stats.woke(60_000.0) is None
    assert stats.late == 0
    assert stats.lateness.summary() == {"p50": None, "p99": None, "max": None}


def test_a_slow_broker_is_round_trip_not_lateness() -> None:
    stats = HeartbeatStats(stall_warn_ms=500)
    # Due at 1000, runs at 1000, sends; the answer takes 4 s.
    stats.waiting(due=1_000.0, now=0.0)
    assert stats.woke(1_000.0) == 0.0
    stats.sending()
    stats.answered(sent_at=1_000.0, now=5_000.0, ok=True)
    # Next run right after the answer: the timer (1 s after the send) expired long ago,
    # but the driver never waited for it, so no lateness sample.
    assert stats.woke(5_000.0) is None
    assert stats.rtt.summary() == {"p50": 4_000.0, "p99": 4_000.0, "max": 4_000.0}
    assert stats.late == 0


# -- HeartbeatStats: counters and round trips ------------------------------------------------


def test_counters() -> None:
    stats = HeartbeatStats(stall_warn_ms=500)
    for i in range(5):
        stats.sending()
        stats.answered(sent_at=i * 1_000.0, now=i * 1_000.0 + 10 + i, ok=i != 3)
    stats.sending()
    stats.lost()
    assert (stats.sent, stats.acknowledged, stats.failed) == (6, 4, 2)
    # Round trips of answered heartbeats only: 10, 11, 12, 13, 14.
    assert stats.rtt.summary() == {"p50": 12.0, "p99": 14.0, "max": 14.0}


def test_a_steady_driver_with_jitter() -> None:
    """A driver waking 0..40 ms late every interval, with one 2 s stall in the middle."""
    stats = HeartbeatStats(stall_warn_ms=500)
    now = 0.0
    jitter = [float(j % 41) for j in range(0, 400, 7)]  # deterministic 0..40 ms
    for i, extra in enumerate(jitter):
        due = now + 1_000.0
        stats.waiting(due=due, now=now)
        now = due + (2_000.0 if i == 20 else extra)
        lateness = stats.woke(now)
        assert lateness is not None
        stats.sending()
        stats.answered(sent_at=now, now=now + 3.0, ok=True)
        now += 3.0
    summary = stats.lateness.summary()
    assert stats.late == 1
    assert summary["max"] == 2_000.0
    assert summary["p50"] is not None and summary["p50"] <= 40.0
    assert stats.sent == stats.acknowledged == len(jitter)


# -- GroupMember.stats() --------------------------------------------------------------------------


def test_member_stats_keys_before_start() -> None:
    member = GroupMember(
        GroupConfig(bootstrap_servers="127.0.0.1:9", group_id="g", topics=["t"]),
        clock=lambda: 100.0,
    )
    stats = member.stats().as_dict()
    assert set(stats) == STATS_KEYS
    assert stats["state"] == "UNJOINED"
    assert stats["generation"] == -1
    assert stats["member_id"] == ""
    assert stats["assignment"] == []
    assert stats["isolated"] is False
    assert stats["rebalances"] == 0
    assert stats["heartbeats_sent"] == 0
    assert stats["heartbeat_lateness_ms"] == {"p50": None, "p99": None, "max": None}
    assert stats["heartbeat_rtt_ms"] == {"p50": None, "p99": None, "max": None}
    assert stats["last_heartbeat_lateness_ms"] is None
    assert stats["lease_remaining_ms"] is None


async def test_member_stats_keys_when_started_with_injected_clock() -> None:
    now = [1_000.0]
    config = GroupConfig(
        bootstrap_servers="127.0.0.1:9", group_id="g", topics=["t"], isolate_heartbeat=True
    )
    member = GroupMember(config, clock=lambda: now[0])
    await member.start()
    try:
        stats = member.stats().as_dict()
        assert set(stats) == STATS_KEYS
        assert stats["isolated"] is True
        assert stats["state"] == "UNJOINED"
        assert stats["last_heartbeat_age_ms"] is None
        assert stats["lease_remaining_ms"] is None  # nothing held
    finally:
        await member.close()
    assert member.closed
