"""The narrow settings value the core reads: no broker addresses, no TLS, no credentials.

The runtime builds it from its configuration (``GroupConfig.member_settings()``); the core
never sees the configuration object itself, so a secret cannot reach a core log event or
error message by accident, and the core does not depend on how configuration is loaded or
validated (validation happens once, in ``GroupConfig``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MemberSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberSettings:
    """What the membership core reads (times in milliseconds, Kafka's names in brackets).

    - ``group_id`` [group.id] and ``group_instance_id`` [group.instance.id]: sent in every
      group request; an instance id makes the member static (KIP-345).
    - ``session_timeout_ms``, ``heartbeat_interval_ms``: the session and heartbeat timers.
    - ``max_poll_interval_ms``: the poll timer, also sent as the rebalance timeout.
    - ``retry_backoff_ms``, ``retry_backoff_max_ms``: the backoffs (constant for the join
      chain, exponential for coordinator lookups).
    - ``request_timeout_ms``: the timeout of every group request except JoinGroup.
    - ``leaves_on_close``: whether close() sends LeaveGroup (resolved: Kafka's rule or the
      KIP-1092 override).
    """

    group_id: str
    group_instance_id: str | None = None
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    request_timeout_ms: int
    leaves_on_close: bool

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def rebalance_timeout_ms(self) -> int:
        """The rebalance timeout sent in JoinGroup: the poll interval (spec §3.1)."""
        return self.max_poll_interval_ms

    @property
    def join_timeout_ms(self) -> int:
        """JoinGroup request timeout: rebalance timeout + 5 s, never below
        request_timeout_ms (spec §3.1), computed without int32 overflow."""
        return max(self.request_timeout_ms, self.max_poll_interval_ms + 5_000)
