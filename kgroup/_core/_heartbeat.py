"""The heartbeat driver (spec §5) and the application's poll timer (§3.1).

The heartbeat task asks :meth:`HeartbeatDriver.heartbeat_action` what to do, sends the
heartbeat it is given and reports the answer. Every wait it is given also ends at the lease
deadline while an assignment is held (and earlier when a lease-renewal heartbeat is due), so
the lease is checked on time.
"""

from __future__ import annotations

from .._errors import ErrorCode, FencedInstanceId
from ._actions import (
    HeartbeatAction,
    HeartbeatDisabled,
    HeartbeatFindCoordinator,
    HeartbeatWait,
    PollTimeoutLeave,
    SendHeartbeat,
)
from ._lease import SESSION_TIMED_OUT, LeaseRules
from ._messages import HeartbeatRequest, HeartbeatResponse
from ._reactions import Api, Reaction, reaction_for, unhandled
from ._state import Generation, MemberState

__all__ = ["FOLLOW_UP_LATE", "HeartbeatDriver"]


#: The rejoin reason when an announced follow-up rebalance did not start (base.expect_follow_up).
FOLLOW_UP_LATE = "the follow-up rebalance the leader announced has not started: re-join"


def _earliest(until: float, lease_wake: float | None) -> float:
    return until if lease_wake is None else min(until, lease_wake)


class HeartbeatDriver(LeaseRules):
    """The heartbeat loop's decisions and the poll timer (see the module docstring)."""

    def poll(self, now: float) -> bool:
        """The application polled: reset the poll timer (even while the coordinator is
        unknown, §3.1). Returns True when a heartbeat is due and the heartbeat driver
        should be woken (§5.3)."""
        self.check_lease(now)  # against the old poll deadline: a late poll revives nothing
        self.timers.polled(now)
        due = self.heartbeat_enabled and self.timers.heartbeat.expired(now)
        if due:
            self._signals.wake_heartbeat = True
        return due

    def heartbeat_action(self, now: float) -> HeartbeatAction:
        """One iteration of the heartbeat loop (spec §5.1). Every wait also ends at the
        lease deadline while an assignment is held, so the lease is checked on time."""
        self.check_lease(now)
        if not self.heartbeat_enabled:
            return HeartbeatDisabled(self._lease_wake())
        if not self._may_heartbeat():
            self.heartbeat_enabled = False
            return HeartbeatDisabled(self._lease_wake())
        backoff = self.settings.retry_backoff_ms
        lease_wake = self._lease_wake()
        if self.coordinator is None:
            return HeartbeatFindCoordinator(
                _earliest(max(now + backoff, self._find_retry_at), lease_wake)
            )
        timers = self.timers
        if timers.session.expired(now):
            self.mark_coordinator_unknown(SESSION_TIMED_OUT)
            return HeartbeatFindCoordinator(
                _earliest(max(now + backoff, self._find_retry_at), lease_wake)
            )
        if timers.poll.expired(now):
            self._emit(
                "member.poll_timeout",
                max_poll_interval_ms=self.settings.max_poll_interval_ms,
            )
            leave = self.maybe_leave("consumer poll timeout has expired.", poll_timeout=True)
            return PollTimeoutLeave(leave)
        follow_up = self._follow_up_deadline()
        if follow_up is not None and now >= follow_up:
            self._follow_up = None
            self.request_rejoin(FOLLOW_UP_LATE)
            follow_up = None
        if timers.in_flight:
            return HeartbeatWait(_earliest(now + backoff, lease_wake))
        renew_at = self._lease_renew_at()
        renew = renew_at is not None and now >= renew_at
        if not timers.heartbeat.expired(now) and not renew:
            wake = _earliest(renew_at, lease_wake) if renew_at is not None else lease_wake
            return HeartbeatWait(
                _earliest(
                    min(timers.heartbeat.deadline, timers.session.deadline, timers.poll.deadline),
                    _earliest(follow_up, wake) if follow_up is not None else wake,
                )
            )
        self._last_heartbeat_sent_at = now
        timers.sent(now)
        if follow_up is not None:
            timers.heartbeat.reset(now, self.follow_up_interval(now))
        self._hb_sent = (now, self.generation, self.state is MemberState.STABLE)
        request = HeartbeatRequest(
            group_id=self.settings.group_id,
            generation_id=self.generation.generation_id,
            member_id=self.generation.member_id,
            group_instance_id=self.settings.group_instance_id,
        )
        return SendHeartbeat(request, self.generation, self.settings.request_timeout_ms)

    def on_heartbeat_response(self, sent: Generation, resp: HeartbeatResponse, now: float) -> None:
        self.check_lease(now)  # with the proofs known before this answer
        code = resp.error_code
        timers = self.timers
        proof = self._heartbeat_sent_at(sent)
        reaction = reaction_for(Api.HEARTBEAT, code, sent=sent, current=self.generation)
        if reaction is Reaction.OK:
            timers.received(now, proof[0] if proof is not None else None)
            if proof is not None:
                self.lease.prove_session(proof[0])
                if proof[1]:
                    self.lease.prove_no_rebalance(proof[0])
                self._lease_renewed(now)
            self._emit("member.heartbeat_ok")
            return
        if reaction is Reaction.REBALANCING or reaction is Reaction.IGNORE:
            # Counts as a successful heartbeat: the session stays alive until we rejoin.
            timers.received(now, proof[0] if proof is not None else None)
            if proof is not None:
                self.lease.prove_session(proof[0])
                self._lease_renewed(now)
            if reaction is Reaction.REBALANCING and self.state is MemberState.STABLE:
                self.request_rejoin("group is already rebalancing")
            return
        if reaction is Reaction.STALE:
            timers.received(now)  # a stale answer about an older generation: ignore
            self._emit("member.heartbeat_stale_error", error=ErrorCode(code).name)
            return
        if reaction in (
            Reaction.RESET_GENERATION,
            Reaction.RESET_GENERATION_KEEP_ID,
            Reaction.FENCED,
        ):
            timers.in_flight = False
            name = ErrorCode(code).name
            self._emit("member.heartbeat_failed", error=name)
            generation = self.generation
            self.reset_generation(
                keep_member_id=reaction is Reaction.RESET_GENERATION_KEEP_ID,
                reason=f"encountered {name} from Heartbeat response",
            )
            if reaction is Reaction.FENCED:
                self.record_fatal(
                    FencedInstanceId(
                        f"another member joined with group_instance_id "
                        f"{self.settings.group_instance_id!r}; this one is fenced",
                        group_id=self.settings.group_id,
                        member_id=generation.member_id,
                        generation_id=generation.generation_id,
                        api="Heartbeat",
                    )
                )
            return
        if reaction not in (
            Reaction.COORDINATOR_MOVED,
            Reaction.UNAUTHORIZED,
            Reaction.RETRY_BACKOFF,
        ):
            unhandled(Api.HEARTBEAT, code, reaction)
        # A heartbeat failure: backoff (§5.3), then the reaction's own step.
        timers.failed(now)
        self._emit("member.heartbeat_failed", error=ErrorCode.describe(code))
        if reaction is Reaction.COORDINATOR_MOVED:
            self.mark_coordinator_unknown(f"Heartbeat: {ErrorCode.describe(code)}")
        elif reaction is Reaction.UNAUTHORIZED:
            self._fatal_error(code, "Heartbeat")

    def on_heartbeat_failed(self, now: float, reason: str) -> None:
        """Transport failure (disconnect, request timeout) of a heartbeat."""
        self.check_lease(now)
        self._hb_sent = None
        self.timers.failed(now)
        self._emit("member.heartbeat_failed", error=reason)
        self.mark_coordinator_unknown(f"Heartbeat: {reason}")
