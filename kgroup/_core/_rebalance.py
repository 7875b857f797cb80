"""The rebalance chain: pre-join hook, JoinGroup, assignment, SyncGroup, completion (§6).

The join driver (the application's ``poll()``) asks :meth:`RebalanceChain.next_join_action`
what to do next; inside the chain the handlers answer with the next step
(:class:`ComputeAssignment`, :class:`SendSyncGroup`). Where the chain stands is
``self.phase`` (:class:`~kgroup._core._state.ChainPhase`), moved only through ``_enter``
and checked against :data:`~kgroup._core._state.ALLOWED`. Error answers are looked up in
:mod:`kgroup._core._reactions`, which applies the stale-generation rule (§2.5).

The chain survives an interrupted ``poll()`` (its requests stay in flight and the next poll
waits for them, never sending a second JoinGroup) and a raising completion (the next poll
hands out the same assignment again), as spec §6.1 requires.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._errors import ErrorCode, InconsistentGroupProtocol, KGroupError
from ._actions import (
    AwaitJoin,
    AwaitLeaseProof,
    ChainAction,
    CompleteJoin,
    ComputeAssignment,
    FindCoordinator,
    Idle,
    JoinAction,
    PrepareJoin,
    RaiseFatal,
    SendJoinGroup,
    SendSyncGroup,
    Sleep,
)
from ._base import truncate_reason
from ._lease import LeaseRules
from ._messages import JoinGroupRequest, JoinGroupResponse, SyncGroupRequest, SyncGroupResponse
from ._reactions import Api, Reaction, reaction_for, unhandled
from ._state import CHAIN_IN_FLIGHT, CHAIN_SYNCED, ChainPhase, Generation, MemberState

__all__ = ["RebalanceChain"]


class RebalanceChain(LeaseRules):
    """The join driver's decisions (see the module docstring)."""

    def next_join_action(self, now: float) -> JoinAction:
        """What the application's poll path must do next (spec §6.1 as a step function)."""
        self.check_lease(now)
        if self._fatal is not None:
            err, self._fatal = self._fatal, None
            # A fatal error that left the member in its generation (e.g. authorization on a
            # heartbeat) disabled heartbeats; once it is handed over, heartbeat again, so a
            # caller that catches it and polls on keeps its membership (the runtime wakes
            # the heartbeat task on RaiseFatal).
            if self.state in (MemberState.COMPLETING_REBALANCE, MemberState.STABLE):
                self.heartbeat_enabled = True
            self._signals.wake_heartbeat = True
            return RaiseFatal(err)
        if self._lease_expired_at is not None:
            # The lease ran out: release the partitions as lost now, whatever the chain is
            # doing, so that a later completion reports them as newly assigned.
            self._lease_expired_at = None
            self._installed = False
            if self.phase is ChainPhase.IDLE and self.needs_join_prepare:
                # This release is the pre-join hook of the coming rebalance.
                self.needs_join_prepare = False
                if self.rebalance_started_at is None:
                    self.rebalance_started_at = now
            return PrepareJoin(lost=True, generation=self.generation, lease_expired=True)
        if self.phase in CHAIN_IN_FLIGHT:
            return AwaitJoin()
        if self.phase in CHAIN_SYNCED:
            # Join completion sanity check, on the first run and on every re-run of an
            # abandoned completion (its caller was cancelled): the heartbeat driver may have
            # reset us meanwhile.
            if self.generation == self._chain_generation and self.state is MemberState.STABLE:
                if self.phase is not ChainPhase.COMPLETING and self._lease_deadline() <= now:
                    # Never install an assignment under a lapsed lease: get a fresh proof.
                    if self.phase is ChainPhase.SYNCED:
                        self._enter(ChainPhase.AWAITING_PROOF, "lease lapsed before completion")
                        self.timers.heartbeat.reset(now, 0)
                        self._signals.wake_heartbeat = True
                        self._emit("member.lease_proof_needed", deadline=self._lease_deadline())
                    return AwaitLeaseProof(now + self.settings.retry_backoff_ms)
                self._enter(ChainPhase.COMPLETING, "completion handed out")
                self._installed = True
                return CompleteJoin(self.generation, self._synced_assignment, self.is_leader)
            self._enter(ChainPhase.IDLE, "completion sanity check failed")
        if not self.rejoin_needed:
            return Idle()
        if self.coordinator is None:
            if now < self._find_retry_at:
                return Sleep(self._find_retry_at)
            return FindCoordinator()
        if now < self._join_retry_at:
            return Sleep(self._join_retry_at)
        if self.needs_join_prepare:
            # Cleared first, so a raising hook is not re-run for the same rebalance.
            self.needs_join_prepare = False
            if self.rebalance_started_at is None:
                self.rebalance_started_at = now
            self._installed = False
            return PrepareJoin(lost=self.generation.is_reset, generation=self.generation)
        if self._renew_before_rejoin(now):
            return AwaitLeaseProof(now + self.settings.retry_backoff_ms)
        return self._send_join(now)

    def poll_work_pending(self) -> bool:
        """True when ``poll()`` has a step to run now: a fatal error to raise, a lapsed lease
        to release, a completed join to install, or a rejoin to start. False while only a
        JoinGroup/SyncGroup is in flight: a COOPERATIVE member keeps working on what it owns
        meanwhile. (No side effects, unlike :meth:`next_join_action`.)"""
        if self._fatal is not None or self._lease_expired_at is not None:
            return True
        if self.phase in CHAIN_IN_FLIGHT:
            return False
        return self.phase in CHAIN_SYNCED or self.rejoin_needed

    def _renew_before_rejoin(self, now: float) -> bool:
        """A member that keeps partitions through the rebalance (COOPERATIVE) must not lose
        them only because the join takes long: from its JoinGroup on it sends no heartbeats,
        and its lease then rests on the last proof. When less than half a session of it is
        left, one heartbeat first renews it (the group is still stable for this member); the
        JoinGroup goes once that answer arrives, or after ``request_timeout_ms`` at most."""
        if self.state is not MemberState.STABLE or not self.holds_assignment():
            self._renewing_since = None
            return False
        remaining = self.lease.session_deadline(self._created_at) - now
        if remaining >= self.settings.session_timeout_ms / 2:
            self._renewing_since = None
            return False
        if self._renewing_since is None:
            self._renewing_since = now
            self.timers.heartbeat.reset(now, 0)
            self._signals.wake_heartbeat = True
            self._emit("member.lease_proof_needed", deadline=self._lease_deadline())
            return True
        return now - self._renewing_since < self.settings.request_timeout_ms

    def _send_join(self, now: float) -> SendJoinGroup:
        self._renewing_since = None
        cfg = self.settings
        protocols = tuple(self._protocols(self.generation))
        member_id = self.generation.member_id
        first = self._remember_join((member_id, protocols), now)
        self._join_sent = (member_id, protocols, now if member_id == "" else first)
        request = JoinGroupRequest(
            group_id=cfg.group_id,
            session_timeout_ms=cfg.session_timeout_ms,
            rebalance_timeout_ms=cfg.rebalance_timeout_ms,
            member_id=self.generation.member_id,
            group_instance_id=cfg.group_instance_id,
            protocol_type=self.protocol_type,
            protocols=protocols,
            reason=truncate_reason(self.rejoin_reason) if self.rejoin_reason else None,
        )
        if self.rebalance_started_at is None:
            self.rebalance_started_at = now
        self._set_state(MemberState.PREPARING_REBALANCE, "join group sent")
        self._enter(ChainPhase.JOINING, "join group sent")
        self._chain_generation = self.generation
        self._emit("member.join_sent", reason=self.rejoin_reason)
        return SendJoinGroup(request, cfg.join_timeout_ms)

    def _chain_retry(self, now: float, reason: str, *, backoff: bool) -> None:
        """End the chain; restart from JoinGroup now (T6) or after retry_backoff (T5)."""
        self._enter(ChainPhase.IDLE, reason)
        self.request_rejoin(reason)
        self._join_retry_at = now + self.settings.retry_backoff_ms if backoff else 0.0

    def on_join_response(self, resp: JoinGroupResponse, now: float) -> ChainAction:
        self.check_lease(now)
        if self.phase is not ChainPhase.JOINING:
            return None  # the chain was abandoned (close, or a reset that restarted it)
        code = resp.error_code
        reaction = reaction_for(
            Api.JOIN_GROUP, code, sent=self._chain_generation, current=self.generation
        )
        if reaction is Reaction.OK:
            if self.state is not MemberState.PREPARING_REBALANCE:
                self._chain_retry(now, "rebalance failed: member no longer joining", backoff=True)
                return None
            if resp.protocol_type is not None and resp.protocol_type != self.protocol_type:
                self._enter(ChainPhase.IDLE, "JoinGroup answered another protocol type")
                self._fail_join_fatal(
                    InconsistentGroupProtocol,
                    f"JoinGroup answered protocol type {resp.protocol_type!r}, "
                    f"expected {self.protocol_type!r}",
                    "JoinGroup",
                )
                return None
            self.generation = Generation(resp.generation_id, resp.member_id, resp.protocol_name)
            self._chain_generation = self.generation
            self._set_state(MemberState.COMPLETING_REBALANCE, "joined")
            self.heartbeat_enabled = True
            self._signals.wake_heartbeat = True
            self.timers.reset_all(now)
            self.is_leader = resp.leader == resp.member_id
            self.leaderless = resp.leader == ""
            self._join_answered_at = now
            # Lease: the session was restarted after the first JoinGroup with this member id
            # and metadata was sent (see kgroup._core._lease).
            sent_id, sent_protocols, proof = self._join_sent
            if sent_id == "":
                # A static member's first JoinGroup: the coordinator stored these protocols
                # under the id it answers with (a later rejoin with them may be answered
                # from the stable group without any session restart).
                self._remember_join((resp.member_id, sent_protocols), proof)
            self.lease.prove_session(proof)
            self._emit(
                "member.joined",
                leader=resp.leader,
                is_leader=self.is_leader,
                protocol=resp.protocol_name,
                members=len(resp.members),
                skip_assignment=resp.skip_assignment,
            )
            if self.is_leader and not resp.skip_assignment:
                self._enter(ChainPhase.ASSIGNING, "leader assigns")
                return ComputeAssignment(self.generation, resp.protocol_name or "", resp.members)
            return self._send_sync((), now)
        if reaction is Reaction.ADOPT_MEMBER_ID:
            # T3: adopt the id and rejoin at once, without backoff or a second pre-join hook.
            self.generation = Generation(-1, resp.member_id, None)
            self._chain_retry(
                now, f"need to re-join with the given member-id: {resp.member_id}", backoff=False
            )
            return None
        if reaction is Reaction.RESET_GENERATION:
            self._enter(ChainPhase.IDLE, "JoinGroup: UNKNOWN_MEMBER_ID")
            self.reset_generation(keep_member_id=False, reason="JoinGroup: UNKNOWN_MEMBER_ID")
            self._join_retry_at = 0.0
            return None
        if reaction is Reaction.STALE:
            self._enter(ChainPhase.IDLE, f"JoinGroup: stale {ErrorCode.describe(code)}")
            self._join_retry_at = 0.0
            return None
        if reaction is Reaction.RETRY_NOW or reaction is Reaction.RETRY_BACKOFF:
            self._chain_retry(
                now,
                f"rebalance failed due to {ErrorCode(code).name}",
                backoff=reaction is Reaction.RETRY_BACKOFF,
            )
            return None
        if reaction is Reaction.COORDINATOR_MOVED:
            self.mark_coordinator_unknown(f"JoinGroup: {ErrorCode.describe(code)}")
            self._chain_retry(now, f"rebalance failed due to {ErrorCode(code).name}", backoff=True)
            return None
        if reaction is Reaction.FATAL or reaction is Reaction.UNAUTHORIZED:
            self._enter(ChainPhase.IDLE, "JoinGroup failed")
            self._abandon_join(f"JoinGroup failed with {ErrorCode.describe(code)}")
            self._fatal_error(code, "JoinGroup")
            return None
        unhandled(Api.JOIN_GROUP, code, reaction)

    def _abandon_join(self, reason: str) -> None:
        """After a fatal join/sync error: no longer joining; the next poll tries again."""
        self.request_rejoin(reason)
        if self.state is not MemberState.UNJOINED:
            self._set_state(MemberState.UNJOINED, reason)
        self.heartbeat_enabled = False

    def _fail_join_fatal(
        self, cls: type[InconsistentGroupProtocol], message: str, api: str
    ) -> None:
        self._abandon_join(message)
        self.record_fatal(
            cls(
                message,
                group_id=self.settings.group_id,
                member_id=self.generation.member_id,
                generation_id=self.generation.generation_id,
                api=api,
            )
        )

    def assignment_computed(
        self, assignments: Mapping[str, bytes], now: float | None = None
    ) -> ChainAction:
        """The leader's assignment for every member; answers with the SyncGroup to send.
        ``now`` (optional) is when it is sent; without it the lease counts the SyncGroup as
        sent when the JoinGroup answer arrived (earlier, so conservative)."""
        if now is not None:
            self.check_lease(now)
        if self.phase is not ChainPhase.ASSIGNING:
            return None
        return self._send_sync(
            tuple(sorted(assignments.items())), self._join_answered_at if now is None else now
        )

    def chain_failed_fatal(self, err: KGroupError) -> None:
        """A fatal failure inside the chain that is not a broker answer: the leader could
        not assign (unknown assignor, assignor bug; no SyncGroup is sent), or no API version
        in common. The error surfaces from the next poll."""
        if self.phase not in CHAIN_IN_FLIGHT:
            return
        self._enter(ChainPhase.IDLE, f"rebalance failed: {type(err).__name__}")
        self._abandon_join(f"rebalance failed: {type(err).__name__}")
        self.record_fatal(err)

    def _send_sync(self, assignments: tuple[tuple[str, bytes], ...], now: float) -> SendSyncGroup:
        cfg = self.settings
        self._enter(ChainPhase.SYNCING, "sync group sent")
        self._sync_sent_at = now
        request = SyncGroupRequest(
            group_id=cfg.group_id,
            generation_id=self.generation.generation_id,
            member_id=self.generation.member_id,
            group_instance_id=cfg.group_instance_id,
            protocol_type=self.protocol_type,
            protocol_name=self.generation.protocol_name,
            assignments=assignments,
        )
        return SendSyncGroup(request, cfg.request_timeout_ms)

    def on_sync_response(self, resp: SyncGroupResponse, now: float) -> None:
        self.check_lease(now)
        if self.phase is not ChainPhase.SYNCING:
            return
        code = resp.error_code
        sent = self._chain_generation
        reaction = reaction_for(Api.SYNC_GROUP, code, sent=sent, current=self.generation)
        if reaction is Reaction.OK:
            if not self._is_current(sent) or self.state is not MemberState.COMPLETING_REBALANCE:
                # Reset by the heartbeat driver while SyncGroup was in flight (T7 guard).
                self._chain_retry(now, "rebalance failed due to ILLEGAL_GENERATION", backoff=False)
                return
            if resp.protocol_type is not None and resp.protocol_type != self.protocol_type:
                self._enter(ChainPhase.IDLE, "SyncGroup answered another protocol type")
                self._fail_join_fatal(
                    InconsistentGroupProtocol,
                    f"SyncGroup answered protocol type {resp.protocol_type!r}, "
                    f"expected {self.protocol_type!r}",
                    "SyncGroup",
                )
                return
            if resp.protocol_name is not None and resp.protocol_name != sent.protocol_name:
                self._enter(ChainPhase.IDLE, "SyncGroup answered another protocol")
                self._fail_join_fatal(
                    InconsistentGroupProtocol,
                    f"SyncGroup answered protocol {resp.protocol_name!r}, JoinGroup selected "
                    f"{sent.protocol_name!r}",
                    "SyncGroup",
                )
                return
            self._set_state(MemberState.STABLE, "synced")
            self._sync_answered_at = now
            # Lease: the coordinator was not rebalancing (nor waiting for our SyncGroup) when
            # it arrived, after we sent it. (No session proof: see kgroup._core._lease.)
            self.lease.prove_no_rebalance(self._sync_sent_at)
            self.rejoin_needed = False
            self.rejoin_reason = ""
            self._enter(ChainPhase.SYNCED, "synced")
            self._synced_assignment = resp.assignment
            self.rebalances += 1
            if self.rebalance_started_at is not None:
                self.last_rebalance_ms = now - self.rebalance_started_at
                self.rebalance_started_at = None
            # The lease may need a renewal heartbeat now (a join that took most of the
            # session timeout): the heartbeat task recomputes its wait.
            self._signals.wake_heartbeat = True
            self._emit("member.synced", rebalance_ms=self.last_rebalance_ms)
            return
        if reaction is Reaction.RETRY_NOW or reaction is Reaction.RETRY_BACKOFF:
            self._chain_retry(
                now,
                f"rebalance failed due to {ErrorCode(code).name}",
                backoff=reaction is Reaction.RETRY_BACKOFF,
            )
            return
        if reaction in (
            Reaction.RESET_GENERATION,
            Reaction.RESET_GENERATION_KEEP_ID,
            Reaction.STALE,
        ):
            reason = f"SyncGroup: {ErrorCode(code).name}"
            self._enter(ChainPhase.IDLE, reason)
            if reaction is Reaction.STALE:
                self.request_rejoin(reason)
            else:
                self.reset_generation(
                    keep_member_id=reaction is Reaction.RESET_GENERATION_KEEP_ID, reason=reason
                )
            self._join_retry_at = 0.0
            return
        if reaction is Reaction.COORDINATOR_MOVED:
            self.mark_coordinator_unknown(f"SyncGroup: {ErrorCode.describe(code)}")
            self._chain_retry(now, f"rebalance failed due to {ErrorCode(code).name}", backoff=True)
            return
        if reaction is Reaction.FATAL or reaction is Reaction.UNAUTHORIZED:
            self._enter(ChainPhase.IDLE, "SyncGroup failed")
            self._abandon_join(f"SyncGroup failed with {ErrorCode.describe(code)}")
            self._fatal_error(code, "SyncGroup")
            return
        unhandled(Api.SYNC_GROUP, code, reaction)

    def on_join_failed(self, now: float, reason: str) -> None:
        """The JoinGroup or SyncGroup request failed in transport (disconnect, timeout,
        unreachable coordinator): mark the coordinator unknown, back off, restart from
        JoinGroup with the same member id (T5)."""
        self.check_lease(now)
        if self.phase not in CHAIN_IN_FLIGHT:
            return
        self.mark_coordinator_unknown(reason)
        self._chain_retry(now, f"rebalance failed due to {reason}", backoff=True)

    def join_completed(
        self, now: float, *, follow_up: bool = False, rejoin: str | None = None
    ) -> None:
        """The completion step (assignment installed, callbacks run) is done.
        ``follow_up``: the leader marked the generation (``Completion.follow_up``); unless
        this member rejoins anyway, it expects the follow-up rebalance (heartbeat driver).
        ``rejoin``: the completion's own reason to rejoin (``Completion.rejoin_reason``:
        cooperative revocations, claims lost mid-join); that rejoin waits out the
        :meth:`_sync_grace`."""
        self.check_lease(now)
        if rejoin:
            self.request_rejoin(rejoin)
            # DEVIATION (spec §7.6 step 2; deviations.md row 15): Java rejoins at once.
            if self.phase is ChainPhase.COMPLETING and self.state is MemberState.STABLE:
                self._join_retry_at = max(self._join_retry_at, self._sync_grace())
        if self.phase is ChainPhase.COMPLETING:
            self._enter(ChainPhase.IDLE, "join completed")
            self.needs_join_prepare = True
            self._synced_assignment = b""
            # The installed assignment starts the lease: the heartbeat task must watch it.
            self._signals.wake_heartbeat = True
            if follow_up and not self.rejoin_needed and self.state is MemberState.STABLE:
                self.expect_follow_up(now)

    def _sync_grace(self) -> float:
        """Not before when a member that rejoins because of its own completion may send its
        JoinGroup: its SyncGroup's answer plus as long again as it waited from its JoinGroup
        answer to that (the leader's assignment and a round trip), at most a tenth of the
        heartbeat interval. The JoinGroup answers of a generation go out together, so the
        other members' SyncGroups are on their way; a JoinGroup that reached the
        coordinator first would fail them, and each would miss this generation's assignment
        (and its revocations) and cost the group a third rebalance. The member keeps
        processing what it kept meanwhile; a revoke callback longer than this costs
        nothing more."""
        waited = max(0.0, self._sync_answered_at - self._join_answered_at)
        return self._sync_answered_at + min(waited, self.settings.heartbeat_interval_ms / 10)

    def on_invalid_assignment(self, now: float) -> None:
        """The completion could not install the assignment (the embedding rejected its
        bytes): the completion step is over, and the member rejoins."""
        self.join_completed(now)
        self.request_rejoin("invalid assignment")

    def abandon_chain(self) -> None:
        """The runtime dropped the in-flight chain (close): forget it."""
        if self.phase in CHAIN_IN_FLIGHT:
            self._enter(ChainPhase.IDLE, "rebalance abandoned")
            self.request_rejoin("rebalance abandoned")
