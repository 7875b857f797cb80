"""The classic group member as a sans-I/O state machine (spec §2-§6).

Theory of operation
-------------------
:class:`MemberCore` owns every variable of spec §1.2 and nothing else: no socket, no task,
no clock. Two drivers call it, each with ``now`` in milliseconds:

- the **join driver** (the application's ``poll()``) asks :meth:`next_join_action` what to do
  next and reports what happened: :meth:`on_join_response`, :meth:`on_sync_response`,
  :meth:`assignment_computed`, :meth:`on_join_failed`, :meth:`join_completed`, ...
- the **heartbeat driver** asks :meth:`heartbeat_action` and reports
  :meth:`on_heartbeat_response` / :meth:`on_heartbeat_failed`.

Coordinator discovery is shared: either driver may run it and report
:meth:`on_find_coordinator_response`. Whenever the core forgets the coordinator
(:attr:`coordinator` becomes ``None`` or a new :class:`Coordinator`), the runtime must close
the connection it holds for the old one: that fails every request in flight on it (§4.0.3).

Every response handler compares the Generation captured when the request was sent with the
current one (:meth:`_is_current`, the stale-response rule of §2.5) before applying any
generation-dependent error, because the other driver may have moved the member on while the
request was in flight.

The core knows nothing of partitions or topics: the embedded protocol (``protocol_type`` and
the ``protocols`` callable) supplies JoinGroup metadata, and assignments pass through as
bytes. Fatal errors are stored and handed to the join driver as :class:`RaiseFatal`.

The lease (kgroup's deviation from the Java client)
---------------------------------------------------
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
    metadata under that id, simulation seed 5514.)

  A SyncGroup proves nothing about the session: the coordinator restarts sessions when it
  hands out the leader's assignment, but answers a SyncGroup that arrives once the group is
  STABLE without doing so (simulation seed 13 found this).
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
before the callback, but the member holds them until it returns (simulation seed 4207).
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

Known limit (simulation seed 12182, with graceful connection closes): a JoinGroup the member
gave up on (its connection was dropped) may still reach the coordinator later, after the
member rejoined through another JoinGroup; the coordinator then counts the stale request as
the member's rejoin to the NEXT rebalance and can complete it at once, handing the member's
partitions to others within its lease. No send-time proof excludes that (the classic
protocol cannot fence a member's own older request; Java shares the exposure). The runtime
narrows it by aborting (RST), not gracefully closing, connections it gives up on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .._errors import (
    ErrorCode,
    FencedInstanceId,
    GroupAuthorizationFailed,
    InconsistentGroupProtocol,
    KGroupError,
    LocalProtocolError,
    error_for_code,
)
from ._messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from ._reactions import Api, Reaction, reaction_for, unhandled
from ._settings import MemberSettings
from ._signals import SignalFlags, Signals
from ._state import (
    ALLOWED,
    ALLOWED_TRANSITIONS,
    CHAIN_IN_FLIGHT,
    CHAIN_SYNCED,
    NO_GENERATION,
    ChainPhase,
    Coordinator,
    Generation,
    MemberState,
)
from ._timers import ExponentialBackoff, HeartbeatTimers, Lease

__all__ = [
    "AwaitJoin",
    "AwaitLeaseProof",
    "CompleteJoin",
    "ComputeAssignment",
    "FindCoordinator",
    "HeartbeatAction",
    "HeartbeatDisabled",
    "HeartbeatFindCoordinator",
    "HeartbeatWait",
    "Idle",
    "JoinAction",
    "MemberCore",
    "PollTimeoutLeave",
    "PrepareJoin",
    "RaiseFatal",
    "SendHeartbeat",
    "SendJoinGroup",
    "SendSyncGroup",
    "Sleep",
]

_MAX_REASON = 255


def _truncate(reason: str) -> str:
    return reason if len(reason) <= _MAX_REASON else reason[:_MAX_REASON]


def _earliest(until: float, lease_wake: float | None) -> float:
    return until if lease_wake is None else min(until, lease_wake)


# ---------------------------------------------------------------------------------------------
# Actions for the join driver
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing to do: the member is STABLE and no rejoin is needed."""


@dataclass(frozen=True, slots=True)
class FindCoordinator:
    """The coordinator is unknown: run (or join) the FindCoordinator lookup."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Back off until ``until`` (ms) before asking again."""

    until: float


@dataclass(frozen=True, slots=True)
class AwaitLeaseProof(Sleep):
    """SyncGroup succeeded, but the lease the new assignment would start with has already
    lapsed (no proof of a recent session refresh): a heartbeat is due now. Wake the
    heartbeat driver, then ask again once ``member.lease_renewed`` is emitted (or at
    ``until``, a retry-backoff from now). A subclass of :class:`Sleep`, so a driver that
    only knows Sleep still works (it polls every retry backoff)."""


@dataclass(frozen=True, slots=True)
class PrepareJoin:
    """Run the pre-join hook once for this rebalance: release owned partitions as *lost* if
    the Generation was reset, else as *revoked* (spec §6.2), then ask again."""

    lost: bool
    generation: Generation
    #: The release is due to the member's lease running out (the hold ended at the deadline).
    lease_expired: bool = False


@dataclass(frozen=True, slots=True)
class SendJoinGroup:
    request: JoinGroupRequest
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class AwaitJoin:
    """A Join/Sync chain is in flight: wait for it (never send a second JoinGroup)."""


@dataclass(frozen=True, slots=True)
class CompleteJoin:
    """SyncGroup succeeded: install ``assignment`` and run the completion callbacks, then call
    :meth:`MemberCore.join_completed` (spec §6.4)."""

    generation: Generation
    assignment: bytes
    is_leader: bool


@dataclass(frozen=True, slots=True)
class RaiseFatal:
    error: KGroupError


JoinAction = (
    Idle
    | FindCoordinator
    | Sleep
    | AwaitLeaseProof
    | PrepareJoin
    | SendJoinGroup
    | AwaitJoin
    | CompleteJoin
    | RaiseFatal
)

# Actions inside the Join->Sync chain (returned by on_join_response / assignment_computed).


@dataclass(frozen=True, slots=True)
class ComputeAssignment:
    """This member leads: compute an assignment for every member, then report it with
    :meth:`MemberCore.assignment_computed`."""

    generation: Generation
    protocol_name: str
    members: tuple[JoinGroupMember, ...]


@dataclass(frozen=True, slots=True)
class SendSyncGroup:
    request: SyncGroupRequest
    timeout_ms: int


ChainAction = ComputeAssignment | SendSyncGroup | None

# ---------------------------------------------------------------------------------------------
# Actions for the heartbeat driver
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatDisabled:
    """Not in a generation that heartbeats: park until enabled, or until ``until`` (ms) when
    it is set: the member still holds an assignment whose lease runs out then, and the core
    must be asked again at that time so that it notices (:meth:`MemberCore.check_lease`)."""

    until: float | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatFindCoordinator:
    """Coordinator unknown: start a lookup if none is running, then wait until ``until``."""

    until: float


@dataclass(frozen=True, slots=True)
class HeartbeatWait:
    """Nothing due before ``until`` (ms); a wake-up may end the wait early."""

    until: float


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    request: HeartbeatRequest
    generation: Generation
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class PollTimeoutLeave:
    """The poll timer expired: the member left its generation. Send ``leave`` if not None
    (dynamic members), best effort."""

    leave: LeaveGroupRequest | None


HeartbeatAction = (
    HeartbeatDisabled | HeartbeatFindCoordinator | HeartbeatWait | SendHeartbeat | PollTimeoutLeave
)

Observer = Callable[..., None]


class HasMemberSettings(Protocol):
    """A configuration that can produce the core's settings (``GroupConfig``)."""

    def member_settings(self) -> MemberSettings: ...


class MemberCore:
    """The membership state machine of one classic group member. See the module docstring.

    Fields and their writers (everything runs on one thread; the drivers interleave only
    between calls):

    - ``state``, ``generation``: join driver (responses), heartbeat driver (resets, leave).
    - ``rejoin_needed``, ``rejoin_reason``: any trigger; cleared only by a successful sync.
    - ``needs_join_prepare``: set on reset and after a completed join; cleared by PrepareJoin.
    - ``phase``: the rebalance chain (:class:`ChainPhase`), moved only by :meth:`_enter`
      against the table :data:`~kgroup._core._state.ALLOWED`; the join driver's handlers.
    - ``coordinator``: set by discovery, cleared by :meth:`mark_coordinator_unknown`.
    - ``heartbeat_enabled``: set when JoinGroup succeeds; cleared by the heartbeat driver.
    - ``lease``: proofs written by the response handlers; :attr:`valid_until` derives the
      deadline (see the module docstring).

    ``holds_assignment`` tells the core whether the member holds partitions now (the
    runtime passes ``lambda: bool(embedding.owned)``). Without it the core assumes the
    assignment is held from CompleteJoin until the next PrepareJoin, which is exact for
    EAGER embeddings only (a COOPERATIVE member keeps partitions across PrepareJoin).
    """

    def __init__(
        self,
        settings: MemberSettings | HasMemberSettings,
        *,
        protocol_type: str,
        protocols: Callable[[Generation], Sequence[tuple[str, bytes]]],
        now: float,
        observer: Observer | None = None,
        uniform: Callable[[float, float], float] | None = None,
        holds_assignment: Callable[[], bool] | None = None,
    ) -> None:
        if not isinstance(settings, MemberSettings):
            settings = settings.member_settings()
        self.settings = settings
        self.protocol_type = protocol_type
        self._protocols = protocols
        self._observer = observer
        self._backoff = ExponentialBackoff(
            settings.retry_backoff_ms, settings.retry_backoff_max_ms, uniform=uniform
        )
        self.timers = HeartbeatTimers(
            now=now,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            session_timeout_ms=settings.session_timeout_ms,
            max_poll_interval_ms=settings.max_poll_interval_ms,
            backoff=self._backoff,
        )
        self.state = MemberState.UNJOINED
        self.generation = NO_GENERATION
        self.coordinator: Coordinator | None = None
        self.rejoin_needed = True
        self.rejoin_reason = ""
        self.needs_join_prepare = True
        self.heartbeat_enabled = False
        self.is_leader = False
        self._fatal: KGroupError | None = None
        # The Join->Sync chain (:class:`ChainPhase`); moves only through :meth:`_enter`.
        self.phase = ChainPhase.IDLE
        self._chain_generation = NO_GENERATION  # Generation the chain's request was sent under
        self._synced_assignment = b""
        self._join_retry_at = 0.0
        self._find_retry_at = 0.0
        self._find_attempts = 0
        self.rebalance_started_at: float | None = None
        self.last_rebalance_ms: float | None = None
        self.rebalances = 0
        # The lease (module docstring).
        self.lease = Lease(
            session_timeout_ms=settings.session_timeout_ms,
            rebalance_timeout_ms=settings.max_poll_interval_ms,
        )
        self._holds = holds_assignment
        self._installed = False  # default holds_assignment: CompleteJoin .. next PrepareJoin
        self._created_at = now
        self._lease_expired_at: float | None = None  # the lapsed deadline, until released
        self.lease_expirations = 0
        # The heartbeat in flight: (send time, Generation, sent while STABLE).
        self._hb_sent: tuple[float, Generation, bool] | None = None
        #: When the last heartbeat was sent (for the lease-renewal heartbeat).
        self._last_heartbeat_sent_at: float | None = None
        self._join_answered_at = now
        self._sync_sent_at = now
        # (member id, protocols) -> send time of the first JoinGroup carrying them.
        self._join_first_sent: dict[tuple[str, tuple[tuple[str, bytes], ...]], float] = {}
        self._join_sent: tuple[str, tuple[tuple[str, bytes], ...], float] = ("", (), now)
        self._signals = SignalFlags()

    # -- helpers -------------------------------------------------------------------------------

    def take_signals(self) -> Signals:
        """What the runtime must do because of the calls since the last take (see
        :mod:`kgroup._core._signals`). The runtime calls this after every core call."""
        return self._signals.take()

    def _emit(self, event: str, **fields: Any) -> None:
        if self._observer is not None:
            self._observer(
                event,
                group=self.settings.group_id,
                member_id=self.generation.member_id,
                generation=self.generation.generation_id,
                **fields,
            )

    def _set_state(self, new: MemberState, reason: str) -> None:
        old = self.state
        if new is old and new is not MemberState.PREPARING_REBALANCE:
            return
        if new not in ALLOWED_TRANSITIONS[old]:
            raise LocalProtocolError(
                f"illegal member transition {old.name} -> {new.name} ({reason}) in generation "
                f"{self.generation.generation_id}"
            )
        self.state = new
        self._signals.wake_poll = True
        if new is not old:
            self._emit("member.state_changed", old=old.name, new=new.name, reason=reason)

    def _enter(self, new: ChainPhase, reason: str) -> None:
        """Move the rebalance chain to ``new``, checked against :data:`ALLOWED`."""
        old = self.phase
        if new not in ALLOWED[old]:
            raise LocalProtocolError(
                f"illegal rebalance chain transition {old.name} -> {new.name} ({reason}) in "
                f"generation {self.generation.generation_id}"
            )
        self.phase = new

    def _is_current(self, sent: Generation) -> bool:
        """The stale-response rule (§2.5): apply generation-dependent errors only if the
        member is still in the Generation the request was sent under."""
        return sent == self.generation

    def _fatal_error(self, code: int, api: str, message: str | None = None) -> None:
        err = error_for_code(
            code,
            api=api,
            group_id=self.settings.group_id,
            member_id=self.generation.member_id,
            generation_id=self.generation.generation_id,
            message=message,
        )
        self.record_fatal(err)

    def record_fatal(self, err: KGroupError) -> None:
        """Store a fatal error for the next ``poll()`` (spec §5.4). The first one wins."""
        if self._fatal is None:
            self._fatal = err
        self._signals.wake_poll = True
        self._emit("member.fatal_error", error=type(err).__name__, message=str(err))

    @property
    def fatal(self) -> KGroupError | None:
        return self._fatal

    def request_rejoin(self, reason: str) -> None:
        """Any rejoin trigger (§2.3): the move happens at the next join-driver step."""
        if not self.rejoin_needed or self.rejoin_reason != reason:
            self._emit("member.rejoin_requested", reason=reason)
            self._signals.wake_poll = True
        self.rejoin_needed = True
        self.rejoin_reason = reason

    def reset_generation(self, *, keep_member_id: bool, reason: str) -> None:
        """§2.4: forget the Generation (keeping the member id for ILLEGAL_GENERATION)."""
        member_id = self.generation.member_id if keep_member_id else ""
        self.generation = Generation(-1, member_id, None)
        self._set_state(MemberState.UNJOINED, reason)
        self.is_leader = False
        self.needs_join_prepare = True
        self.request_rejoin(reason)

    def mark_coordinator_unknown(self, reason: str) -> bool:
        """Forget the coordinator (state and Generation stay). True if one was known."""
        if self.coordinator is None:
            return False
        self._emit("member.coordinator_lost", reason=reason, node_id=self.coordinator.node_id)
        self.coordinator = None
        self._signals.drop_coordinator = True
        return True

    # -- the lease -------------------------------------------------------------------------------

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
        return True

    # -- application poll ------------------------------------------------------------------------

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

    # -- coordinator discovery -------------------------------------------------------------------

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

    # -- the join driver -------------------------------------------------------------------------

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
        return self._send_join(now)

    def _send_join(self, now: float) -> SendJoinGroup:
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
            reason=_truncate(self.rejoin_reason) if self.rejoin_reason else None,
        )
        if self.rebalance_started_at is None:
            self.rebalance_started_at = now
        self._set_state(MemberState.PREPARING_REBALANCE, "join group sent")
        self._enter(ChainPhase.JOINING, "join group sent")
        self._chain_generation = self.generation
        self._emit("member.join_sent", reason=self.rejoin_reason)
        return SendJoinGroup(request, cfg.join_timeout_ms)

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
            self._join_answered_at = now
            # Lease: the session was restarted after the first JoinGroup with this member id
            # and metadata was sent (see the module docstring).
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
            # Lease: the coordinator was not rebalancing (nor waiting for our SyncGroup) when
            # it arrived, after we sent it. (No session proof: see the module docstring.)
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

    def join_completed(self, now: float) -> None:
        """The completion step (assignment installed, callbacks run) is done."""
        self.check_lease(now)
        if self.phase is ChainPhase.COMPLETING:
            self._enter(ChainPhase.IDLE, "join completed")
            self.needs_join_prepare = True
            self._synced_assignment = b""
            # The installed assignment starts the lease: the heartbeat task must watch it.
            self._signals.wake_heartbeat = True

    def abandon_chain(self) -> None:
        """The runtime dropped the in-flight chain (close): forget it."""
        if self.phase in CHAIN_IN_FLIGHT:
            self._enter(ChainPhase.IDLE, "rebalance abandoned")
            self.request_rejoin("rebalance abandoned")

    # -- the heartbeat driver --------------------------------------------------------------------

    def heartbeat_action(self, now: float) -> HeartbeatAction:
        """One iteration of the heartbeat loop (spec §5.1). Every wait also ends at the
        lease deadline while an assignment is held, so the lease is checked on time."""
        self.check_lease(now)
        if not self.heartbeat_enabled:
            return HeartbeatDisabled(self._lease_wake())
        if (
            self.state in (MemberState.UNJOINED, MemberState.PREPARING_REBALANCE)
            or self._fatal is not None
        ):
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
            self.mark_coordinator_unknown(
                "session timed out without receiving a heartbeat response"
            )
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
        if timers.in_flight:
            return HeartbeatWait(_earliest(now + backoff, lease_wake))
        renew_at = self._lease_renew_at()
        renew = renew_at is not None and now >= renew_at
        if not timers.heartbeat.expired(now) and not renew:
            return HeartbeatWait(
                _earliest(
                    min(timers.heartbeat.deadline, timers.session.deadline, timers.poll.deadline),
                    _earliest(renew_at, lease_wake) if renew_at is not None else lease_wake,
                )
            )
        self._last_heartbeat_sent_at = now
        timers.sent(now)
        self._hb_sent = (now, self.generation, self.state is MemberState.STABLE)
        request = HeartbeatRequest(
            group_id=self.settings.group_id,
            generation_id=self.generation.generation_id,
            member_id=self.generation.member_id,
            group_instance_id=self.settings.group_instance_id,
        )
        return SendHeartbeat(request, self.generation, self.settings.request_timeout_ms)

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
        """A completion waits for a proof (AwaitLeaseProof) and this one suffices."""
        if self.phase is ChainPhase.AWAITING_PROOF and self._lease_deadline() > now:
            self._signals.wake_poll = True
            self._emit("member.lease_renewed", valid_until=self._lease_deadline())

    def on_heartbeat_response(self, sent: Generation, resp: HeartbeatResponse, now: float) -> None:
        self.check_lease(now)  # with the proofs known before this answer
        code = resp.error_code
        timers = self.timers
        proof = self._heartbeat_sent_at(sent)
        reaction = reaction_for(Api.HEARTBEAT, code, sent=sent, current=self.generation)
        if reaction is Reaction.OK:
            timers.received(now)
            if proof is not None:
                self.lease.prove_session(proof[0])
                if proof[1]:
                    self.lease.prove_no_rebalance(proof[0])
                self._lease_renewed(now)
            self._emit("member.heartbeat_ok")
            return
        if reaction is Reaction.REBALANCING or reaction is Reaction.IGNORE:
            # Counts as a successful heartbeat: the session stays alive until we rejoin.
            timers.received(now)
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

    # -- leaving ---------------------------------------------------------------------------------

    def maybe_leave(self, reason: str, *, poll_timeout: bool = False) -> LeaveGroupRequest | None:
        """T12: reset the Generation and return the LeaveGroup to send, if any.

        LeaveGroup is sent only by members that leave (dynamic ones, or as configured on
        close, KIP-1092), with a known coordinator, a joined state and a member id (§4.5).
        On ``poll_timeout`` only dynamic members leave, whatever the close setting (a
        static member only stops heartbeating, §8).
        """
        cfg = self.settings
        leaves = not cfg.is_static if poll_timeout else cfg.leaves_on_close
        request = None
        if (
            leaves
            and self.coordinator is not None
            and self.state is not MemberState.UNJOINED
            and self.generation.member_id
        ):
            request = LeaveGroupRequest(
                group_id=cfg.group_id,
                member_id=self.generation.member_id,
                group_instance_id=cfg.group_instance_id,
                reason=_truncate(reason),
            )
        self._emit("member.leaving", reason=reason, send_leave_group=request is not None)
        if self.phase in CHAIN_IN_FLIGHT:
            self._enter(ChainPhase.IDLE, reason)
        self.reset_generation(keep_member_id=False, reason=reason)
        self.heartbeat_enabled = False
        return request
