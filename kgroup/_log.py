"""kgroup's structlog logger and the stable event names it emits.

Events (all carry ``group``, ``member_id`` and ``generation``):

- ``member.state_changed`` (old, new, reason), ``member.joined``, ``member.join_sent``,
  ``member.synced`` (rebalance_ms), ``member.rejoin_requested`` (reason)
- ``member.coordinator_found`` / ``member.coordinator_lost`` / ``member.coordinator_lookup_failed``
- ``member.heartbeat_ok`` (debug), ``member.heartbeat_failed`` (error),
  ``member.heartbeat_stale_error``, ``member.poll_timeout``
- ``member.leaving`` (reason, send_leave_group), ``member.fatal_error`` (error, message)
- ``member.partitions_revoked`` / ``_assigned`` / ``_lost`` (partitions),
  ``member.listener_error`` (callback, error)
- ``member.lease_expired`` / ``member.lease_proof_needed`` / ``member.lease_renewed``
- ``heartbeat.late`` (lag_ms, due, threshold_ms, isolated), ``member.isolated``,
  ``member.abandoned`` (isolated mode: the application's loop closed without close())
- ``offsets.committed`` (debug), ``offsets.retry`` (api, reason, attempt),
  ``offsets.commit_failed`` / ``offsets.fetch_failed`` (error, message)
- ``consumer.started``, ``consumer.positioned``, ``consumer.offset_fetch_failed``,
  ``consumer.committed`` (debug), ``consumer.commit_failed``,
  ``consumer.auto_commit_failed``, ``consumer.records_dropped`` (debug), ``consumer.closed``
- ``connection.protocol_error`` (broker, api, error), ``connection.unknown_error_code``

No event carries a credential.
"""

from __future__ import annotations

from typing import Any

import structlog

__all__ = ["log_core_event", "logger"]

logger = structlog.get_logger("kgroup")

_DEBUG_EVENTS = frozenset({"member.heartbeat_ok", "member.heartbeat_stale_error"})
_WARNING_EVENTS = frozenset(
    {"member.heartbeat_failed", "member.poll_timeout", "member.coordinator_lost"}
)


def log_core_event(event: str, **fields: Any) -> None:
    """The core's observer: forward a core event to structlog at a fitting level."""
    if event in _DEBUG_EVENTS:
        logger.debug(event, **fields)
    elif event in _WARNING_EVENTS:
        logger.warning(event, **fields)
    elif event == "member.fatal_error":
        logger.error(event, **fields)
    else:
        logger.info(event, **fields)
