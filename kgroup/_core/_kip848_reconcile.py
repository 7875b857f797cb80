"""The consumer-protocol poll driver: reconciliation (§10.5), lost partitions, and leaving.

Everything here runs in the application's ``poll()`` (and close()), where the rebalance
callbacks run, as KIP-62 wants. :meth:`PollDriver.poll_action` returns, in this order of
priority:

1. :class:`RaiseError`: a fatal error (every call), or a one-time report;
2. :class:`ReleaseLost`: the member was fenced, its lease ran out, or it stopped polling;
3. :class:`ReleaseOnLeave`: close() started (PREPARE_LEAVING);
4. :class:`ResolveTopics`: the target names topic ids whose names are unknown;
5. :class:`Reconcile`: the resolvable part of the target differs from what is owned (or
   this is the first reconciliation since joining: ``on_partitions_assigned`` fires on
   every join, even with nothing assigned);
6. :class:`PollIdle`.

One reconciliation runs at a time; a target that arrives meanwhile is taken up when it
finishes. If the member rejoined or left RECONCILING meanwhile, the result is recorded as
what the runtime now holds but not acknowledged (the abort of §10.5 step 7). A callback that
raises does not stop the reconciliation: its partitions are released or installed anyway
and the error is raised from ``poll()`` afterwards, as for the classic protocol
(:class:`~kgroup.ListenerError`; deviation 17 in docs/design/deviations.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from ._kip848_actions import (
    PollAction,
    PollIdle,
    RaiseError,
    Reconcile,
    ReleaseLost,
    ReleaseOnLeave,
    ResolveTopics,
)
from ._kip848_base import ConsumerMemberBase
from ._kip848_grid import release_time
from ._kip848_state import ConsumerState, IdPartition
from ._messages_848 import LEAVE_EPOCH

__all__ = ["PollDriver"]

S = ConsumerState


class PollDriver(ConsumerMemberBase):
    """The poll driver (see the module docstring)."""

    def poll_action(self, now: float) -> PollAction:
        """What ``poll()`` (or close()) does next."""
        self.check_lease(now)
        if self.fatal is not None:
            return RaiseError(self.fatal, fatal=True)
        if self._report is not None:
            report, self._report = self._report, None
            return RaiseError(report, fatal=False)
        if self._lost_reason is not None and self._reconciling is None:
            if not self.owned:  # nothing to report lost: go on at once
                self.lost_released(now)
                return self.poll_action(now)
            return ReleaseLost(self.named(self.owned), self._lost_reason)
        if self.state is S.PREPARE_LEAVING:
            if self._reconciling is not None:
                return PollIdle()
            release_at = self._release_at
            if release_at is not None and now < release_at and self.member_epoch > 0:
                return PollIdle(release_at)  # a handoff: keep the partitions until then
            self._release_at = None
            return ReleaseOnLeave(self.named(self.owned), lost=self.member_epoch <= 0)
        if self.state is S.RECONCILING and self._reconciling is None:
            if self._awaits_heartbeat():
                return PollIdle()  # woken by the heartbeat's answer
            return self._reconcile(now)
        return PollIdle(self._resolve_wake(now))

    def poll_work_pending(self) -> bool:
        """Whether ``poll()`` has something to do or raise now."""
        if self.fatal is not None or self._report is not None or self._lost_reason:
            return True
        return (
            self.state is S.RECONCILING
            and self._reconciling is None
            and not self._awaits_heartbeat()
        )

    def _awaits_heartbeat(self) -> bool:
        """Whether the next reconciliation waits for the heartbeat in flight: it would take
        up partitions that heartbeat does not report. The broker, reading it, may take them
        as released and, under a newer target, give them to another member at once, while
        this member installs them (seen in the simulation: a heartbeat sent, then the poll
        path assigned a partition, then the broker read the heartbeat). Its answer says
        whether they are still this member's. A reconciliation that only revokes never
        waits (a heartbeat that still reports a revoked partition only delays its handoff),
        nor does one behind a heartbeat that leaves its partitions out (Kafka then counts
        what it assigned as owned).

        A heartbeat that reported the partitions without them and got no answer (timed out,
        disconnected) may have been read all the same: the reconciliation then waits for
        the next answered heartbeat, whose answer (a full one, after a failure) carries the
        broker's view (seen in the simulation: the answer timed out, the member installed
        the partition, and the broker had given it to another member on that heartbeat)."""
        if self.target is None:
            return False
        adding = frozenset(p for p in self.target if p.topic_id in self.names) - self.owned
        unanswered = self._unanswered_report
        if unanswered is not None and not adding <= unanswered:
            return True
        if self._in_flight is None:
            return False
        sent, _, fields = self._in_flight
        if sent.request.topic_partitions is None:
            return False
        return not adding <= fields.owned

    def rebalance_pending(self) -> bool:
        """Whether the member is joining, converging on a new target, or must rejoin."""
        return self.poll_work_pending() or self.state in (S.JOINING, S.FENCED, S.STALE)

    def _resolve_wake(self, now: float) -> float | None:
        """When ``poll()`` must look again for a topic lookup: the retry time, if the
        member is reconciling, ids are still unresolved and that time is ahead (never a
        time already past, which would make ``poll()`` spin)."""
        if self.state is S.RECONCILING and self._unresolved() and self._resolve_at > now:
            return self._resolve_at
        return None

    # -- reconciliation --------------------------------------------------------------------

    def _unresolved(self) -> frozenset[uuid.UUID]:
        if self.target is None:
            return frozenset()
        return frozenset(p.topic_id for p in self.target if p.topic_id not in self.names)

    def _reconcile(self, now: float) -> PollAction:
        assert self.target is not None
        unresolved = self._unresolved()
        if unresolved and not self._resolving and now >= self._resolve_at:
            self._resolving = True
            return ResolveTopics(unresolved)
        resolvable = frozenset(p for p in self.target if p.topic_id in self.names)
        if resolvable == self.owned and self._assigned_since_join:
            acknowledged = self._sent is not None and self._sent.owned == self.owned
            if unresolved and acknowledged:
                return PollIdle(self._resolve_wake(now))  # nothing new until resolved
            self._set_state(S.ACKNOWLEDGING, "target already owned")
            return PollIdle()
        self._token += 1
        action = Reconcile(
            revoked=self.named(self.owned - resolvable),
            assigned=self.named(resolvable - self.owned),
            owned_after=resolvable,
            epoch=self.member_epoch,
            token=self._token,
        )
        self._reconciling = action
        self._remember_ids(resolvable)
        self._reconcile_join = self._join_count
        self._emit(
            "member.reconciling",
            revoked=len(action.revoked),
            assigned=len(action.assigned),
            unresolved_topics=len(unresolved),
        )
        return action

    def may_install(self, action: Reconcile, now: float) -> bool:
        """Whether ``action``, its revoke callback done, may install its new partitions and
        call the assign callback: not once the member lost what it holds meanwhile (fenced,
        its lease ended during the revoke callback) or failed; the broker may have given
        them to another member. Then ``action`` ends here, interrupted and not installed,
        and the next ``poll()`` reports what the member kept as lost."""
        self.check_lease(now)
        if self._reconciling is action and self._lost_reason is None and self.fatal is None:
            return True
        self.reconcile_interrupted(action, installed=False)
        return False

    def reconciled(self, action: Reconcile, now: float) -> None:
        """The runtime ran ``action`` to the end: it holds ``action.owned_after``."""
        if self._reconciling is not action:
            return
        self._reconciling = None
        self._hold(action.owned_after)
        if self.state is S.RECONCILING and self._reconcile_join == self._join_count:
            self._assigned_since_join = True
            self._set_state(S.ACKNOWLEDGING, "reconciled")
            self._emit("member.reconciled", owned=len(self.owned))
        self._signals.wake_poll = True

    def reconcile_interrupted(self, action: Reconcile, *, installed: bool) -> None:
        """The runtime stopped ``action`` part-way (its ``poll()`` was cancelled): it holds
        ``action.owned_after`` if it ``installed`` the new set, else only what it kept.
        Not acknowledged; the next ``poll()`` reconciles again from there."""
        if self._reconciling is not action:
            return
        self._reconciling = None
        self._hold(action.owned_after if installed else self.owned & action.owned_after)
        self._emit("member.reconcile_interrupted", owned=len(self.owned))
        self._signals.wake_poll = True

    def _hold(self, owned: frozenset[IdPartition]) -> None:
        # The revocation deadline stays until the broker has heard that the partitions are
        # gone (HeartbeatDriver._accept): a late or lost acknowledgement does not stop it.
        self.owned = owned
        self._signals.wake_heartbeat = True  # the lease may have moved

    # -- topic names -----------------------------------------------------------------------

    def topics_resolved(self, names: Mapping[uuid.UUID, str], now: float) -> None:
        """A Metadata lookup named these topic ids; ids it did not name stay unresolved and
        are looked up again after the retry backoff (a topic just created may not be in
        every broker's metadata yet)."""
        self._resolving = False
        self.names.update(names)
        if self._unresolved():
            self._resolve_at = now + self.settings.retry_backoff_max_ms
        self._signals.wake_poll = True

    def topics_unresolved(self, now: float, reason: str) -> None:
        """The Metadata lookup failed: try again after the retry backoff."""
        self._resolving = False
        self._resolve_at = now + self.settings.retry_backoff_max_ms
        self._emit("member.topic_lookup_failed", reason=reason)

    # -- lost partitions -------------------------------------------------------------------

    def lost_released(self, now: float) -> None:
        """``on_partitions_lost`` ran: the member holds nothing. A fenced member rejoins at
        once; a STALE one too, since this is a ``poll()``."""
        self._lost_reason = None
        self._hold(frozenset())
        if self.state in (S.FENCED, S.STALE) and not self._closing:
            self._start_joining(f"rejoining after {self.state.name.lower()}")

    # -- leaving ---------------------------------------------------------------------------

    def leave(self, now: float, *, handoff: bool = False, deadline: float | None = None) -> bool:
        """close() starts: release the partitions, then send the leave heartbeat. Returns
        False when there is nothing to leave (never joined, already left, fatal).

        With ``handoff``, a member that will leave the group (epoch -1) and owns partitions
        keeps them until ``handoff_lead_ms`` before the group's next grid tick, so that the
        others take them over in the answers to their heartbeats on that tick
        (:mod:`._kip848_grid`); not when the release would start after ``deadline``."""
        self._closing = True
        if self.state in (S.UNSUBSCRIBED, S.FATAL, S.LEAVING):
            return False
        if self.state in (S.FENCED, S.STALE):
            self.member_epoch = 0
        self._stale_after_leave = False
        self._lost_reason = None
        self._release_at = None
        st = self.settings
        if (
            handoff
            and st.heartbeat_grid
            and st.leave_epoch_on_close == LEAVE_EPOCH
            and self.member_epoch > 0
            and self.owned
            and self.heartbeat_interval_ms > 0
            and self.coordinator is not None
        ):
            release_at = release_time(
                now,
                group_id=st.group_id,
                interval_ms=self.heartbeat_interval_ms,
                wall_offset_ms=self.wall_offset_ms,
                lead_ms=st.handoff_lead_ms,
            )
            if deadline is None or release_at < deadline:
                self._release_at = release_at
                self._emit("member.handoff_waiting", release_in_ms=round(release_at - now))
        self._set_state(S.PREPARE_LEAVING, "closing")
        return True

    def leave_prepared(self, now: float) -> None:
        """The partitions were released for close(): send the leave heartbeat (-1, or -2
        for a static member, or none at all, per ``leave_epoch_on_close``), unless the
        member has no epoch or no coordinator to send it to."""
        self._hold(frozenset())
        epoch = self.settings.leave_epoch_on_close
        if epoch is None or self.member_epoch <= 0 or self.coordinator is None:
            self._set_state(S.UNSUBSCRIBED, "left without a leave heartbeat")
            self.member_epoch = 0
            return
        self._leave_epoch = epoch
        self._set_state(S.LEAVING, "partitions released")
