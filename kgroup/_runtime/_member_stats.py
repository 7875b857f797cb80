"""``GroupMember.stats()``: one typed snapshot of a member, for either group protocol."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._log import sink_failures
from .._stats import MemberStats, Percentiles
from ._shared import Shared

if TYPE_CHECKING:
    from ._member import GroupMember

__all__ = ["member_stats"]


def member_stats(member: GroupMember, shared: Shared) -> MemberStats:
    """The snapshot (times in ms). A consumer-protocol member has no rebalance count and
    no heartbeat-age timer of the classic kind: those read as 0 and None."""
    now = shared.now()
    hb = shared.hb_stats
    with shared.lock:
        core = shared.core
        timers = getattr(core, "timers", None)
        received = None if timers is None else timers.last_heartbeat_received
        valid_until = None if core is None else core.valid_until
        generation = member.generation
        return MemberStats(
            state=member.state.name,
            generation=generation.generation_id,
            member_id=generation.member_id,
            assignment=tuple(sorted(str(tp) for tp in member.assignment)),
            isolated=shared.config.isolate_heartbeat,
            rebalances=getattr(core, "rebalances", 0),
            last_rebalance_ms=getattr(core, "last_rebalance_ms", None),
            last_heartbeat_age_ms=None if received is None else now - received,
            heartbeats_sent=hb.sent,
            heartbeats_acknowledged=hb.acknowledged,
            heartbeats_failed=hb.failed,
            heartbeats_late=hb.late,
            heartbeat_lateness_ms=Percentiles(**hb.lateness.summary()),
            heartbeat_rtt_ms=Percentiles(**hb.rtt.summary()),
            last_heartbeat_lateness_ms=hb.last_lateness_ms,
            lease_remaining_ms=None if valid_until is None else max(0.0, valid_until - now),
            event_hook_failures=shared.hook_failures,
            log_sink_failures=sink_failures(),
            event_log_dropped=0 if shared.recorder is None else shared.recorder.dropped,
        )
