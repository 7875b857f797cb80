"""The shared state of a classic group member, and the rules every part of it uses.

:class:`MemberBase` holds every variable of spec §1.2 (plus the lease's bookkeeping), the
member-state table check (``_set_state``), the rebalance-chain phase check (``_enter``),
rejoin requests (§2.3), Generation resets (§2.4), fatal errors (§5.4), forgetting the
coordinator (§4.0.3) and leaving (T12). The parts built on it (lease, discovery, heartbeat,
rebalance chain) add behaviour only; :class:`kgroup._core._member.MemberCore` composes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .._errors import KGroupError, LocalProtocolError, error_for_code
from ._messages import LeaveGroupRequest
from ._settings import MemberSettings
from ._signals import SignalFlags, Signals
from ._state import (
    ALLOWED,
    ALLOWED_TRANSITIONS,
    CHAIN_IN_FLIGHT,
    NO_GENERATION,
    ChainPhase,
    Coordinator,
    Generation,
    MemberState,
)
from ._timers import ExponentialBackoff, HeartbeatTimers, Lease

__all__ = [
    "FOLLOW_UP_FIRST_MS",
    "HANDOFF_REASON",
    "HasMemberSettings",
    "MemberBase",
    "Observer",
    "truncate_reason",
]

_MAX_REASON = 255

#: The JoinGroup reason of a handoff on close (deviations.md row 14).
HANDOFF_REASON = "handing off partitions before leaving"

#: The first wait (ms) before heartbeating once a follow-up rebalance is announced
#: (MemberBase.follow_up_interval).
FOLLOW_UP_FIRST_MS = 5.0


def truncate_reason(reason: str) -> str:
    """A reason as sent (JoinGroup v8+, LeaveGroup v5+): at most 255 characters (§2.3)."""
    return reason if len(reason) <= _MAX_REASON else reason[:_MAX_REASON]


Observer = Callable[..., None]


class HasMemberSettings(Protocol):
    """A configuration that can produce the core's settings (``GroupConfig``)."""

    def member_settings(self) -> MemberSettings: ...


class MemberBase:
    """The state every part of the member shares, and the rules every part uses.

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
      deadline (see :mod:`kgroup._core._lease`).

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
        #: The last JoinGroup answer named no leader: a classic member of a consumer group
        #: (KIP-848 §10.9), which the broker assigns. Such a member watches the partition
        #: counts itself (deviations.md row 21).
        self.leaderless = False
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
        # The lease (kgroup._core._lease).
        self.lease = Lease(
            session_timeout_ms=settings.session_timeout_ms,
            rebalance_timeout_ms=settings.max_poll_interval_ms,
        )
        self._holds = holds_assignment
        self._installed = False  # default holds_assignment: CompleteJoin .. next PrepareJoin
        self._created_at = now
        self._lease_expired_at: float | None = None  # the lapsed deadline, until released
        self.lease_expirations = 0
        # A follow-up rebalance the leader announced (deviations.md row 12): (generation id,
        # when to rejoin if it has not started, when it was announced); see expect_follow_up().
        self._follow_up: tuple[int, float, float] | None = None
        # The heartbeat in flight: (send time, Generation, sent while STABLE).
        self._hb_sent: tuple[float, Generation, bool] | None = None
        #: When the last heartbeat was sent (for the lease-renewal heartbeat).
        self._last_heartbeat_sent_at: float | None = None
        self._join_answered_at = now
        self._sync_answered_at = now
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

    def _may_heartbeat(self) -> bool:
        """Whether the member's state lets the heartbeat driver run (§5.1): joined, not
        rejoining, no fatal error."""
        return self._fatal is None and self.state not in (
            MemberState.UNJOINED,
            MemberState.PREPARING_REBALANCE,
        )

    def expect_follow_up(self, now: float) -> None:
        """The leader marked this generation: a member gives up something it claimed, and
        the rebalance that hands it over follows for certain (deviations.md row 12). Until
        the coordinator announces it (a heartbeat answered REBALANCE_IN_PROGRESS), the
        heartbeat driver heartbeats on the schedule of :meth:`follow_up_interval`; if it has
        not started within one heartbeat interval, this member rejoins by itself. (Rejoining
        at once would start it before slower members have their assignment of this
        generation: their SyncGroup would fail, and the group would need a third
        rebalance.)"""
        until = now + self.settings.heartbeat_interval_ms
        self._follow_up = (self.generation.generation_id, until, now)
        self.timers.heartbeat.reset(now, self.follow_up_interval(now))
        self._signals.wake_heartbeat = True
        self._emit("member.follow_up_expected", rejoin_at=until)

    def follow_up_interval(self, now: float) -> float:
        """The wait before the next heartbeat while a follow-up rebalance is expected.

        The member that revokes rejoins once its revoke callback has returned and its sync
        grace (deviations.md row 15) is over, usually a few milliseconds after the sync, so
        the first heartbeat goes after
        :data:`FOLLOW_UP_FIRST_MS`. Each later wait is as long as the time already waited
        (heartbeats at 5, 10, 20, 40 ... ms after the sync), up to a tenth of the heartbeat
        interval: the follow-up is seen within twice the time it took to start, and a
        slow revoke callback costs about ten heartbeats per interval, as before."""
        follow_up = self._follow_up
        waited = now - follow_up[2] if follow_up is not None else 0.0
        cap = max(FOLLOW_UP_FIRST_MS, self.settings.heartbeat_interval_ms / 10)
        return float(min(cap, max(FOLLOW_UP_FIRST_MS, waited)))

    def _follow_up_deadline(self) -> float | None:
        """When to rejoin if the expected follow-up rebalance has not started; None when
        none is expected (any more): the member left STABLE, rejoins, or has moved on."""
        follow_up = self._follow_up
        if follow_up is None:
            return None
        if (
            follow_up[0] != self.generation.generation_id
            or self.state is not MemberState.STABLE
            or self.rejoin_needed
        ):
            self._follow_up = None
            return None
        return follow_up[1]

    def reset_generation(self, *, keep_member_id: bool, reason: str) -> None:
        """§2.4: forget the Generation (keeping the member id for ILLEGAL_GENERATION)."""
        member_id = self.generation.member_id if keep_member_id else ""
        self.generation = Generation(-1, member_id, None)
        self._set_state(MemberState.UNJOINED, reason)
        self.is_leader = self.leaderless = False
        self.needs_join_prepare = True
        self.request_rejoin(reason)

    def mark_coordinator_unknown(self, reason: str) -> bool:
        """Forget the coordinator (state and Generation stay). True if one was known."""
        if self.coordinator is None:
            return False
        self._emit("member.coordinator_lost", reason=reason, node_id=self.coordinator.node_id)
        self.coordinator = None
        # Drop its connection; the heartbeat task looks the coordinator up again.
        self._signals.drop_coordinator = True
        self._signals.wake_heartbeat = True
        return True

    # -- protocol decisions the runtime asks about ----------------------------------------------

    def rebalance_pending(self) -> bool:
        """True when the join driver has rebalance work to do: a rejoin was requested (the
        heartbeat saw a rebalance, the lease ran out, ...) or the member is not STABLE."""
        return self.rejoin_needed or self.state is not MemberState.STABLE

    def close_releases_lost(self) -> bool:
        """Whether close() releases the owned partitions as *lost* rather than revoked: the
        Generation was reset or the member is not STABLE, so another member may own them
        already and a commit for them would be rejected (§6.2)."""
        return self.generation.is_reset or self.state is not MemberState.STABLE

    # -- handing off before leaving (deviations.md row 14) -----------------------------------

    def may_hand_off(self) -> bool:
        """Whether close() may hand the partitions off before it leaves: the member will
        send LeaveGroup (a member that does not leave has nothing to hand over: static by
        default), knows its coordinator, is STABLE in a valid generation with no rebalance
        step in flight, and has no fatal error or lapsed lease pending."""
        return (
            self.settings.leaves_on_close
            and self.coordinator is not None
            and self.state is MemberState.STABLE
            and self.phase is ChainPhase.IDLE
            and not self.generation.is_reset
            and self._fatal is None
            and self._lease_expired_at is None
        )

    def begin_handoff(self, now: float) -> None:
        """Start the handoff: one rejoin whose subscription carries the leaving mark (the
        embedding adds it); the poll timer restarts, close() being the application's call."""
        self.timers.polled(now)
        self.request_rejoin(HANDOFF_REASON)
        self._emit("member.handoff_started")

    def handoff_ended(self, outcome: str, partitions: list[str]) -> None:
        """Observation only: how the handoff ended (``member.handoff_done``)."""
        self._emit("member.handoff_done", outcome=outcome, partitions=partitions)

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
                reason=truncate_reason(reason),
            )
        self._emit("member.leaving", reason=reason, send_leave_group=request is not None)
        if self.phase in CHAIN_IN_FLIGHT:
            self._enter(ChainPhase.IDLE, reason)
        self.reset_generation(keep_member_id=False, reason=reason)
        self.heartbeat_enabled = False
        return request
