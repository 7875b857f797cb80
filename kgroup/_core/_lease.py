"""The lease: how long the member may trust its assignment (kgroup's deviation from Java).

A member cut off from the coordinator (network black hole, paused process) still believes in
its assignment while the coordinator may already have given its partitions to another member.
The Java client resets its session timer from *receive* times and never fences itself, so
two consumers can process the same partition for a while. kgroup bounds every assignment by a
locally computed deadline, :attr:`MemberCore.valid_until`::

    valid_until = min(S + session_timeout, N + rebalance_timeout, poll_deadline)

- ``S``: a lower bound on the last time the coordinator restarted this member's session
  timer, from SEND times (the broker received a request after we sent it):

  * a Heartbeat answered NONE or REBALANCE_IN_PROGRESS under the current Generation (the
    coordinator reschedules the session of every heartbeat it accepts);
  * a JoinGroup answered NONE: the send time of the FIRST JoinGroup this member sent with
    the same member id and the same protocols. The coordinator restarts sessions when a
    join barrier completes, but answers a follower that rejoins a STABLE (or COMPLETING)
    group with unchanged metadata at once, without touching its session; that metadata was
    stored, and its barrier completed, after our first JoinGroup carrying it was sent. (A
    static member's JoinGroup with member id "" counts from its own send time, and is
    remembered under the member id it is answered with: the coordinator stored its
    metadata under that id.)

  A SyncGroup proves nothing about the session: the coordinator restarts sessions when it
  hands out the leader's assignment, but answers a SyncGroup that arrives once the group is
  STABLE without doing so.
- ``N``: the send time of the latest Heartbeat answered NONE that was sent while STABLE in
  the current Generation, or of the latest successful SyncGroup: the coordinator was not
  rebalancing when it arrived (and no longer waits for our SyncGroup), so it cannot drop us
  for a missed rejoin before ``N + rebalance_timeout`` (a heartbeat answered NONE while we
  were still COMPLETING does not count: the coordinator's pending-sync timer started before
  it).
- ``poll_deadline``: when the poll timer expires and the heartbeat driver leaves (§3.1).

The lease applies while the member holds an assignment (``holds_assignment()``; by default,
from CompleteJoin to the next PrepareJoin). The runtime passes a callable that is also true
while an ``on_partitions_revoked`` callback runs: the embedding drops revoked partitions
before the callback, but the member holds them until it returns.
Every entry point that takes ``now`` first checks it against the proofs known *before* the
call, so a late answer cannot revive a lapsed lease.
Once ``now >= valid_until``, the core emits ``member.lease_expired`` (``deadline`` = the
lapsed ``valid_until``), requests a rejoin, and the next join action is
``PrepareJoin(lost=True, lease_expired=True)``, even while a Join/Sync chain is in flight
(so a later CompleteJoin reports every partition as newly assigned). The Generation and the
member id are kept: a coordinator that never dropped us answers the rejoin with the current
generation. The member's hold of its partitions ends at the deadline, whatever happens next.

A new assignment is never installed under a lapsed lease: when SyncGroup succeeds but
``valid_until`` (with the new proofs) is already past, e.g. because the join barrier took
longer than the session timeout, the join driver gets :class:`AwaitLeaseProof` instead of
CompleteJoin and a heartbeat is due at once; its NONE answer (``member.lease_renewed``)
proves the session and the completion proceeds.

Known limit: a JoinGroup the member gave up on (its connection was dropped) may still reach
the coordinator later, after the member rejoined through another JoinGroup; the coordinator
then counts the stale request as the member's rejoin to the NEXT rebalance and can complete
it at once, handing the member's partitions to others within its lease. No send-time proof
excludes that (the classic protocol cannot fence a member's own older request; Java shares
the exposure). The runtime narrows it by aborting (RST), not gracefully closing, connections
it gives up on.
"""

from __future__ import annotations

from ._base import MemberBase
from ._state import CHAIN_SYNCED, ChainPhase, Generation, MemberState

__all__ = ["SESSION_TIMED_OUT", "LeaseRules"]

#: The reason of ``member.coordinator_lost`` when the client-side session timer runs out.
SESSION_TIMED_OUT = "session timed out without receiving a heartbeat response"


class LeaseRules(MemberBase):
    """The lease rules (see the module docstring); the proofs are written by the response
    handlers of the other parts, through the methods here and ``self.lease``."""

    #: When a heartbeat to renew the lease before a rejoin was asked for (None: not now;
    #: see ``RebalanceChain._renew_before_rejoin``).
    _renewing_since: float | None = None

    def holds_assignment(self) -> bool:
        """Whether the member holds partitions now (the lease applies only then)."""
        return self._holds() if self._holds is not None else self._installed

    def _lease_deadline(self) -> float:
        lease = self.lease
        fallback = self._created_at  # holding without any proof: trust nothing
        return min(
            lease.session_deadline(fallback),
            lease.rebalance_deadline(fallback),
            self.timers.poll.deadline,
        )

    @property
    def valid_until(self) -> float | None:
        """Until when (ms) the member may trust its assignment; None when it holds none.

        After the lease ran out, the lapsed deadline, until the partitions are released
        (``PrepareJoin(lost=True)``). Never moves earlier while an assignment is held.
        """
        if self._lease_expired_at is not None:
            return self._lease_expired_at
        if not self.holds_assignment():
            return None
        return self._lease_deadline()

    def _lease_wake(self) -> float | None:
        """When the heartbeat driver must ask again so that the lease is checked on time."""
        if self._lease_expired_at is not None or not self.holds_assignment():
            return None
        return self._lease_deadline()

    def handoff_releases_lost(self, now: float) -> bool:
        """close() after a handoff that did not complete: whether what the member still
        holds is released as *lost*. The member is mid-rebalance by its own rejoin, which
        alone does not let anyone else own its partitions: they are revoked (the
        application may commit) while the generation stands and the lease vouches for them,
        and lost once either is gone."""
        if self.generation.is_reset:
            return True
        if self.state is MemberState.STABLE:
            return False
        deadline = self.valid_until
        return deadline is None or deadline <= now

    def check_lease(self, now: float) -> bool:
        """Check the lease at ``now``; True while it has lapsed and the partitions are not
        released yet. The first call at or after the deadline emits ``member.lease_expired``
        and requests a rejoin (the next join action releases the partitions as lost).

        Every entry point calls this first; the runtime may also call it from a timer set at
        :attr:`valid_until` (a heartbeat in flight keeps the heartbeat driver busy)."""
        if self._lease_expired_at is not None:
            return True
        if not self.holds_assignment():
            return False
        deadline = self._lease_deadline()
        if now < deadline:
            return False
        self._lease_expired_at = deadline
        self.lease_expirations += 1
        self._signals.wake_poll = True
        lease = self.lease
        self._emit(
            "member.lease_expired",
            deadline=deadline,
            session_deadline=lease.session_deadline(self._created_at),
            rebalance_deadline=lease.rebalance_deadline(self._created_at),
            poll_deadline=self.timers.poll.deadline,
            late_ms=now - deadline,
        )
        self.request_rejoin("the member's lease expired")
        if deadline == lease.session_deadline(self._created_at) and self._session_timer_due():
            # DEVIATION (lease, deviations.md row 10): the client-side session timer runs out
            # one round trip after the lease; it is applied now, or the rejoin requested
            # above could disable heartbeats first and a coordinator that stopped answering
            # them would stay known.
            self.mark_coordinator_unknown(SESSION_TIMED_OUT)
        return True

    def _session_timer_due(self) -> bool:
        """Whether the heartbeat driver checks the client-side session timer now and it is
        certain to run out within one round trip: it was last reset by the answer to the
        heartbeat whose send time is the lease's session proof."""
        timers = self.timers
        return (
            self.heartbeat_enabled
            and self._may_heartbeat()
            and timers.session_reset_by is not None
            and timers.session_reset_by == self.lease.session_proof
        )

    def _lease_renew_at(self) -> float | None:
        """When to send a heartbeat early because the lease's session proof runs out within
        one heartbeat interval (after a join that took most of the session timeout, the
        only proof is the JoinGroup's send time). None when no such heartbeat is due: nothing
        is held or about to be installed, or one was already sent for this proof."""
        if self._lease_expired_at is not None:
            return None
        if not (self.holds_assignment() or self.phase in CHAIN_SYNCED):
            return None
        deadline = self.lease.session_deadline(self._created_at)
        renew_at = deadline - self.settings.heartbeat_interval_ms
        if self._last_heartbeat_sent_at is not None and self._last_heartbeat_sent_at >= renew_at:
            return None
        return renew_at

    def _heartbeat_sent_at(self, sent: Generation) -> tuple[float, bool] | None:
        """(send time, sent while STABLE) of the heartbeat answered now, if it was sent under
        the current Generation (a stale answer proves nothing about the current hold)."""
        record, self._hb_sent = self._hb_sent, None
        if record is None or record[1] != sent or not self._is_current(sent):
            return None
        return record[0], record[2]

    def _lease_renewed(self, now: float) -> None:
        """A completion, or a rejoin that keeps partitions, waits for a proof
        (AwaitLeaseProof) and this one suffices."""
        renewing = self._renewing_since is not None
        if (self.phase is ChainPhase.AWAITING_PROOF or renewing) and self._lease_deadline() > now:
            self._signals.wake_poll = True
            self._emit("member.lease_renewed", valid_until=self._lease_deadline())

    def _remember_join(
        self, key: tuple[str, tuple[tuple[str, bytes], ...]], sent_at: float
    ) -> float:
        """The first send time of a JoinGroup carrying ``key`` (member id, protocols). Keys of
        other member ids are forgotten: their metadata is no longer this member's."""
        stale = [k for k in self._join_first_sent if k[0] != key[0]]
        for k in stale:
            del self._join_first_sent[k]
        first = self._join_first_sent.get(key)
        if first is None or sent_at < first:
            self._join_first_sent[key] = first = sent_at
        return first
