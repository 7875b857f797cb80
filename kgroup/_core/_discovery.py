"""Coordinator discovery (spec §4.1): FindCoordinator, its answers and its backoff.

Either driver may run the lookup; the runtime keeps at most one in flight. A lookup that
fails (an error answer, a transport failure, or a found coordinator that cannot be reached)
backs off exponentially before the next one.
"""

from __future__ import annotations

from .._errors import ErrorCode, GroupAuthorizationFailed
from ._lease import LeaseRules
from ._messages import FindCoordinatorRequest, FindCoordinatorResponse
from ._reactions import Api, Reaction, reaction_for, unhandled
from ._state import Coordinator

__all__ = ["Discovery"]


class Discovery(LeaseRules):
    """Coordinator lookup (see the module docstring)."""

    def find_coordinator_request(self) -> FindCoordinatorRequest:
        return FindCoordinatorRequest(group_id=self.settings.group_id)

    def find_coordinator_retry_at(self) -> float:
        return self._find_retry_at

    def on_find_coordinator_response(self, resp: FindCoordinatorResponse, now: float) -> None:
        self.check_lease(now)
        code = resp.error_code
        reaction = reaction_for(
            Api.FIND_COORDINATOR, code, sent=self.generation, current=self.generation
        )
        if reaction is Reaction.OK:
            self.coordinator = Coordinator(resp.node_id, resp.host, resp.port)
            self._find_attempts = 0
            self.timers.reset_session(now)
            self._signals.wake_heartbeat = True
            self._emit(
                "member.coordinator_found", node_id=resp.node_id, host=resp.host, port=resp.port
            )
        elif reaction is Reaction.RETRY_BACKOFF:
            self._find_failed(now, ErrorCode.describe(code))
        elif reaction is Reaction.UNAUTHORIZED:
            self.record_fatal(
                GroupAuthorizationFailed(
                    f"not authorized to use group {self.settings.group_id!r} (FindCoordinator)",
                    group_id=self.settings.group_id,
                    member_id=self.generation.member_id,
                    generation_id=self.generation.generation_id,
                    api="FindCoordinator",
                )
            )
        elif reaction is Reaction.FATAL:
            self._fatal_error(code, "FindCoordinator", resp.error_message)
        else:
            unhandled(Api.FIND_COORDINATOR, code, reaction)

    def on_find_coordinator_failed(self, now: float, reason: str) -> None:
        """The lookup failed in transport (no broker reachable, disconnect, timeout)."""
        self._find_failed(now, reason)

    def on_coordinator_unreachable(self, now: float, reason: str) -> None:
        """Discovery succeeded but connecting to the coordinator failed (§4.1)."""
        self.mark_coordinator_unknown(reason)
        self._find_failed(now, reason)

    def _find_failed(self, now: float, reason: str) -> None:
        delay = self._backoff.backoff(self._find_attempts)
        self._find_attempts += 1
        self._find_retry_at = now + delay
        self._emit("member.coordinator_lookup_failed", reason=reason, retry_in_ms=round(delay))
