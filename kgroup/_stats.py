"""Typed snapshots for observability: :class:`MemberStats` and :class:`ConsumerStats`.

Times are in milliseconds. ``as_dict()`` gives the flat JSON-ready mapping (the keys are
the field names; percentile summaries become ``{"p50", "p99", "max"}`` dicts).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["ConsumerStats", "MemberStats", "Percentiles"]


@dataclass(frozen=True, slots=True)
class Percentiles:
    """A summary of recent samples (the last 1024); None values when there are none."""

    p50: float | None
    p99: float | None
    max: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberStats:
    """``GroupMember.stats()``: a snapshot of one member."""

    #: ``MemberState`` name: UNJOINED, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE.
    state: str
    generation: int
    member_id: str
    #: The partitions owned now, as sorted ``"topic-partition"`` strings.
    assignment: tuple[str, ...]
    #: The coordinator side runs on its own thread (``isolate_heartbeat``).
    isolated: bool
    rebalances: int
    last_rebalance_ms: float | None
    last_heartbeat_age_ms: float | None
    heartbeats_sent: int
    #: Answered with no error or with REBALANCE_IN_PROGRESS (the session stayed alive).
    heartbeats_acknowledged: int
    #: Answered with another error, or not answered.
    heartbeats_failed: int
    #: Ran more than ``loop_stall_warn_ms`` after they were due.
    heartbeats_late: int
    heartbeat_lateness_ms: Percentiles
    heartbeat_rtt_ms: Percentiles
    last_heartbeat_lateness_ms: float | None
    #: How long the assignment is still vouched for; None when nothing is held, 0 once the
    #: lease lapsed.
    lease_remaining_ms: float | None
    #: Event hook calls that raised (each hook's first failure is logged).
    event_hook_failures: int
    #: Log events this process could not write because a log sink raised.
    log_sink_failures: int
    #: Event log records dropped (its queue full, or its sink failing); 0 without a log.
    event_log_dropped: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The snapshot as a flat, JSON-ready dict."""
        out = dataclasses.asdict(self)
        out["assignment"] = list(self.assignment)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerStats(MemberStats):
    """``GroupConsumer.stats()``: the member's snapshot plus the records consumer's counts."""

    records_delivered: int
    records_dropped: int
    commits_ok: int
    commits_failed: int
    auto_commits_ok: int
    auto_commits_failed: int
    #: Age of the last successful commit; None before the first.
    last_commit_age_ms: float | None
    assigned: int
    fetching: int
    paused: int
