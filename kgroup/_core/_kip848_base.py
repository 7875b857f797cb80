"""The shared state of a consumer-protocol member, and the rules both drivers use.

:class:`ConsumerMemberBase` holds the member's variables, the checked state change
(``_set_state`` against :data:`~kgroup._core._kip848_state.TRANSITIONS`), fencing, fatal
errors, forgetting the coordinator and the lease. The heartbeat driver
(:mod:`._kip848_heartbeat`) and the poll driver (:mod:`._kip848_reconcile`) add behaviour;
:class:`~kgroup._core._kip848_member.ConsumerProtocolMember` composes them.

Fields and their writers (one thread; the drivers interleave only between calls):

- ``state``: both drivers, through ``_set_state``.
- ``member_epoch``, ``heartbeat_interval_ms``, ``target``: the heartbeat driver (answers).
- ``owned``: the poll driver (``reconciled``, ``lost_released``): always what the runtime
  holds, so a lost release after a fencing mid-reconciliation releases what was installed.
- ``names``: topic id -> name, filled by ``topics_resolved``; kept for owned topics.
- ``coordinator``: discovery; cleared by :meth:`mark_coordinator_unknown`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from .._errors import KGroupError, LocalProtocolError
from ._consumer_protocol import TopicPartition
from ._kip848_actions import Reconcile, SendConsumerHeartbeat
from ._kip848_state import (
    IN_GROUP,
    TRANSITIONS,
    ConsumerProtocolSettings,
    ConsumerState,
    IdPartition,
)
from ._messages import TopicIds
from ._messages_848 import LEAVE_EPOCH
from ._signals import SignalFlags, Signals
from ._state import Coordinator, Generation
from ._timers import ExponentialBackoff

__all__ = ["ConsumerMemberBase", "SentFields"]

S = ConsumerState
Observer = Callable[..., None]


@dataclass(frozen=True, slots=True)
class SentFields:
    """What the broker has from this member: the fields of the last answered heartbeat (an
    incremental heartbeat leaves out what did not change). Forgotten after any error, so
    that the next heartbeat is full (§10.2)."""

    rebalance_timeout_ms: int
    topics: tuple[str, ...]
    topic_regex: str
    server_assignor: str | None
    rack_id: str | None
    owned: frozenset[IdPartition]


class ConsumerMemberBase:
    """The state both drivers share (see the module docstring)."""

    def __init__(
        self,
        settings: ConsumerProtocolSettings,
        *,
        now: float,
        observer: Observer | None = None,
        uniform: Callable[[float, float], float] | None = None,
    ) -> None:
        self.settings = settings
        self.member_id = settings.member_id
        self._observer = observer
        self._backoff = ExponentialBackoff(
            settings.retry_backoff_ms, settings.retry_backoff_max_ms, uniform=uniform
        )
        self._signals = SignalFlags()
        self.state = S.UNSUBSCRIBED
        self.member_epoch = 0
        #: The broker's interval; 0 until its first answer.
        self.heartbeat_interval_ms = 0
        self.coordinator: Coordinator | None = None
        self.owned: frozenset[IdPartition] = frozenset()
        self.names: dict[uuid.UUID, str] = {}
        #: The topic id under which the member last held each partition, by name: what its
        #: offsets go by (OffsetCommit and OffsetFetch v10, :meth:`offset_topic_ids`). Set
        #: when a reconciliation starts, for all it will own (nothing is owned otherwise).
        self._held_ids: dict[tuple[str, int], uuid.UUID] = {}
        #: The subscription: topic names, or a broker-side regex (then no names).
        self.topics: tuple[str, ...] = tuple(sorted(settings.topics))
        self.topic_regex: str | None = settings.topic_regex
        #: The latest assignment the broker gave (None: none since joining).
        self.target: frozenset[IdPartition] | None = None
        self.fatal: KGroupError | None = None
        #: Whether the broker ever gave this member an epoch.
        self.joined_once = False
        #: There is no leader in a consumer-protocol group (GroupMember.is_leader).
        self.is_leader = False
        # Discovery.
        self._find_attempts = 0
        self._find_retry_at = 0.0
        # The heartbeat driver.
        self._sent: SentFields | None = None
        self._hb_attempts = 0
        self._hb_retry_at = 0.0
        self._next_heartbeat_at = 0.0
        #: The gap to the next pickup heartbeat (settings.pickup_first_ms), None when the
        #: member heartbeats at the broker's interval.
        self._pickup_gap: float | None = None
        #: When the answer that started the pickup was sent (its hold runs from there).
        self._pickup_since = 0.0
        #: The wall clock minus the member's clock (ms), for the heartbeat grid; the
        #: runtime keeps it current (0: the member's clock is the wall clock).
        self.wall_offset_ms = 0.0
        #: A close with a handoff releases at this time (None: at once).
        self._release_at: float | None = None
        #: Counts joins: an answer or a reconciliation from before the latest join is stale.
        self._join_count = 0
        #: The first reconciliation after a join always runs (on_partitions_assigned fires
        #: on every join, even with nothing assigned).
        self._assigned_since_join = False
        #: When the first of a run of UNRELEASED_INSTANCE_ID answers, or of joins refused
        #: with GROUP_ID_NOT_FOUND, arrived (deviations 16 and 19; the run ends fatally with
        #: one to a request sent a session later).
        self._refused_since: float | None = None
        #: When the latest request of that run was sent: a longer gap to the next one than
        #: a watching member leaves means it stalled, and the run starts again.
        self._refused_sent_at = 0.0
        # The poll timer.
        self._poll_deadline = now + settings.max_poll_interval_ms
        # The lease: the send time of the last answered heartbeat proves the session until
        # it plus the broker's session timeout; a revoke is due within the rebalance
        # timeout of the heartbeat whose answer asked for it.
        self._session_proof: float | None = None
        #: The session timeouts the broker may apply (learn_session_timeout): the
        #: configured one is the ceiling; a raise read twice in a row waits in
        #: ``_raise_seen``, then applies to proofs sent after ``_raised``'s time, while the
        #: earlier proofs keep ``_raised``'s bound.
        self._ceiling_ms = settings.session_timeout_ms
        self._raise_seen: int | None = None
        self._raised: tuple[int, float] | None = None
        #: Set when the lease ended early (fenced, poll timer); cleared by a new join.
        self._lease_ended = False
        self._revoke_deadline: float | None = None
        self._in_flight: tuple[SendConsumerHeartbeat, int, SentFields] | None = None
        #: What the member reported owning in heartbeats that got no answer since the last
        #: answered one (None: none such). The broker may have read them and taken the
        #: partitions they left out as released (PollDriver._awaits_heartbeat).
        self._unanswered_report: frozenset[IdPartition] | None = None
        #: When the first heartbeat of the member's epoch that got no answer since the last
        #: answered one was sent (None: none such). The broker may have read it and started
        #: a revocation's deadline then, in an answer the member never saw.
        self._unanswered_since: float | None = None
        #: The epoch of the next leave heartbeat, and whether the member is STALE after it
        #: (a poll-timer leave) rather than UNSUBSCRIBED (close()).
        self._leave_epoch = LEAVE_EPOCH
        self._stale_after_leave = False
        #: close() has started: the first poll() no longer joins.
        self._closing = False
        # The poll driver.
        self._lost_reason: str | None = None
        self._report: KGroupError | None = None
        self._reconciling: Reconcile | None = None
        self._reconcile_join = 0
        self._token = 0
        self._resolving = False
        self._resolve_at = 0.0

    # -- observation ---------------------------------------------------------------------

    def _emit(self, event: str, **fields: Any) -> None:
        if self._observer is not None:
            self._observer(
                event,
                group_id=self.settings.group_id,
                member_id=self.member_id,
                member_epoch=self.member_epoch,
                protocol="consumer",
                **fields,
            )

    def take_signals(self) -> Signals:
        """The wake-ups raised since the last call (runtime: set the matching Events)."""
        return self._signals.take()

    # -- the state machine ---------------------------------------------------------------

    def _set_state(self, new: ConsumerState, reason: str) -> None:
        old = self.state
        if new is old:
            return
        if new is not S.FATAL and new not in TRANSITIONS[old]:
            raise LocalProtocolError(
                f"illegal consumer-protocol transition {old.name} -> {new.name} ({reason}) at "
                f"epoch {self.member_epoch}"
            )
        self.state = new
        self._signals.wake_poll = True
        self._signals.wake_heartbeat = True
        self._emit("member.state_changed", old=old.name, new=new.name, reason=reason)

    def _start_joining(self, reason: str) -> None:
        """Join (or rejoin) with epoch 0 and the same member id: a full heartbeat, now."""
        self._set_state(S.JOINING, reason)
        self.member_epoch = 0
        self.target = None
        self._sent = None
        self._join_count += 1
        self._assigned_since_join = False
        self._revoke_deadline = None
        self._hb_retry_at = 0.0
        self._lease_ended = False
        self._unanswered_report = None
        self._unanswered_since = None

    def _fence(self, reason: str, now: float) -> None:
        """Fenced (§10.7), or the lease ran out: the partitions are lost; the poll driver
        releases them, then the member rejoins."""
        self._end_lease(now)
        self._set_state(S.FENCED, reason)
        self.member_epoch = 0
        self.target = None
        self._sent = None
        self._revoke_deadline = None
        self._unanswered_report = None
        self._unanswered_since = None
        self._hb_attempts = 0
        self._hb_retry_at = 0.0
        self._lost_reason = reason
        self._emit("member.fenced", reason=reason)

    def record_fatal(self, err: KGroupError) -> None:
        """Store a fatal error (raised from every later ``poll()``); the member is FATAL."""
        if self.fatal is None:
            self.fatal = err
            self._emit("member.fatal_error", error=type(err).__name__, message=str(err))
        self._set_state(S.FATAL, str(err))

    def mark_coordinator_unknown(self, reason: str) -> None:
        """Forget the coordinator (the runtime closes its connection, failing what is in
        flight on it); the next heartbeat is full."""
        if self.coordinator is not None:
            self._emit("member.coordinator_lost", reason=reason)
            self._signals.drop_coordinator = True
        self.coordinator = None
        self._sent = None
        self._signals.wake_heartbeat = True

    @property
    def generation(self) -> Generation:
        """The member as the classic API names it: ``generation_id`` is the member epoch,
        and there is no protocol name (the broker assigns)."""
        return Generation(self.member_epoch, self.member_id, None)

    # -- names -----------------------------------------------------------------------------

    def named(self, partitions: Iterable[IdPartition]) -> frozenset[TopicPartition]:
        """``partitions`` with topic names (every one must be resolved)."""
        return frozenset(TopicPartition(self.names[p.topic_id], p.partition) for p in partitions)

    # -- the lease -------------------------------------------------------------------------

    @property
    def valid_until(self) -> float | None:
        """Until when the member may trust what it owns (None: it owns nothing). Minus
        infinity once it is fenced, stale or leaving without an epoch. The bounds: the
        session (the last answered heartbeat's send time plus the broker's session timeout),
        a pending revoke's deadline, and the poll deadline. Partitions a reconciliation is
        installing count as owned: the assign callback has started with them."""
        if not self._holding():
            return None
        if self.state not in IN_GROUP or self._lost_reason is not None or self._lease_ended:
            return float("-inf")
        if self._session_proof is None:
            return float("-inf")
        deadline = self._session_proof + self._session_timeout_of(self._session_proof)
        if self._revoke_deadline is not None:
            deadline = min(deadline, self._revoke_deadline)
        # Past the poll deadline the member leaves the group, and the broker gives its
        # partitions away at once.
        return min(deadline, self._poll_deadline)

    def check_lease(self, now: float) -> None:
        """Fence the member locally when its lease has run out: by then the broker may have
        removed it (session) or fenced it (revocation deadline) and given its partitions to
        another member."""
        if not self._holding():
            # Nothing owned, so no lease; but the broker may have removed the member (its
            # session), or fenced it for a revoke it did not hear of in time (simulation
            # consumer seed 11268: paused past the deadline, then it installed a partition
            # of its old target that another member held). An old target must not be
            # installed now: rejoin.
            if self._session_lapsed(now):
                self._fence("session expired", now)
            elif self._revoke_lapsed(now):
                self._fence("revocation deadline passed", now)
            return
        until = self.valid_until
        if until is not None and now >= until and self.state in IN_GROUP:
            if self.state is S.PREPARE_LEAVING:
                self._end_lease(now)
                self.member_epoch = 0  # the leave goes on, without a leave heartbeat
                return
            self._fence("lease expired", now)

    def _remember_ids(self, partitions: Iterable[IdPartition]) -> None:
        """The member holds (or starts installing) ``partitions``: their ids are the ones
        its offsets of these partitions go by from now on."""
        for p in partitions:
            self._held_ids[(self.names[p.topic_id], p.partition)] = p.topic_id

    def offset_topic_ids(self, partitions: Iterable[TopicPartition]) -> TopicIds:
        """The topic ids to commit or fetch ``partitions`` by: for each, the id of the topic
        the member holds, or last held, it under; empty (all by name) when one was never
        held.

        By id, a commit of a partition of a topic deleted since (and perhaps created again
        under its name, with a new id) fails with UNKNOWN_TOPIC_ID instead of being stored
        for the new topic's partition, which another member may own; a fetch does not
        read the offsets of the deleted topic."""
        ids: list[tuple[str, int, uuid.UUID]] = []
        for tp in partitions:
            topic_id = self._held_ids.get((tp.topic, tp.partition))
            if topic_id is None:
                return ()
            ids.append((tp.topic, tp.partition, topic_id))
        return tuple(ids)

    def held(self) -> frozenset[TopicPartition]:
        """By name: what the member owns, and what a running reconciliation installs."""
        return self.named(self._holding())

    def _holding(self) -> frozenset[IdPartition]:
        """What the member owns, and what a running reconciliation installs."""
        reconciling = self._reconciling
        if reconciling is None:
            return self.owned
        return self.owned | reconciling.owned_after

    def _in_group_with_epoch(self) -> bool:
        return self.state in (S.RECONCILING, S.ACKNOWLEDGING, S.STABLE) and self.member_epoch > 0

    def _session_lapsed(self, now: float) -> bool:
        """In the group with an epoch, and no answered heartbeat for a session timeout."""
        return (
            self._in_group_with_epoch()
            and self._session_proof is not None
            and now >= self._session_proof + self._session_timeout_of(self._session_proof)
        )

    def _revoke_lapsed(self, now: float) -> bool:
        """In the group with an epoch, and the broker has not heard of a revoke within its
        deadline (it stays set until the broker has, HeartbeatDriver._accept)."""
        return (
            self._in_group_with_epoch()
            and self._revoke_deadline is not None
            and now >= self._revoke_deadline
        )

    def _session_timeout_of(self, proof: float) -> int:
        """The session timeout that bounds a proof (a heartbeat's send time): the current
        bound, or for a proof sent before the bound was last raised the one before it."""
        raised = self._raised
        if raised is not None and proof < raised[1]:
            return raised[0]
        return self.settings.session_timeout_ms

    def _end_lease(self, now: float) -> None:
        """The member stops trusting what it owns, now or at its lease deadline if that came
        first: report that time (``member.lease_expired``), so that whoever watches the
        holds ends them there, and not only when the loss is released in a later poll."""
        until = self.valid_until
        if until is not None and until != float("-inf"):
            self._emit("member.lease_expired", deadline=min(until, now))
        self._lease_ended = True

    def learn_session_timeout(self, broker_ms: int, now: float | None = None) -> int:
        """Take the consumer session timeout the broker applies to this group (the runtime
        reads it with DescribeConfigs: the group's ``consumer.session.timeout.ms``, or the
        broker's ``group.consumer.session.timeout.ms`` it falls back to), read at ``now``.

        The lease never assumes more than the configured ``consumer_session_timeout_ms``
        (a user setting can make it more cautious than the broker, never longer). Within
        that ceiling:

        - a value below the bound lowers it at once, for every proof held too (lowering it
          may end the lease at once, which the next entry point notices: check_lease);
        - a value above it is taken only when two reads in a row give it (the runtime reads
          a minute apart: the change has long reached the group's coordinator by then),
          and only for proofs from heartbeats sent after the second read: the broker
          bounded the earlier ones by the timeout it had then.

        A value that is not a positive integer changes nothing. Returns the bound now in
        effect (for new proofs)."""
        before = self.settings.session_timeout_ms
        if isinstance(broker_ms, bool) or not isinstance(broker_ms, int) or broker_ms <= 0:
            return before
        wanted = min(broker_ms, self._ceiling_ms)
        if wanted < before:
            self.settings = replace(self.settings, session_timeout_ms=wanted)
            self._raise_seen = None
            if self._raised is not None and self._raised[0] >= wanted:
                self._raised = None  # the lower bound holds for every proof
            # else: proofs from before the last raise keep their smaller bound
            self._signals.wake_heartbeat = True
            self._signals.wake_poll = True
        elif wanted > before and self._raise_seen == wanted and now is not None:
            self.settings = replace(self.settings, session_timeout_ms=wanted)
            self._raise_seen = None
            earlier = self._raised
            # Proofs sent before now keep the bound they had (the smaller one, when an
            # earlier raise is still in its turn-over).
            kept = before if earlier is None else min(before, earlier[0])
            self._raised = (kept, now)
            self._signals.wake_heartbeat = True
        elif wanted > before:
            self._raise_seen = wanted
        else:
            self._raise_seen = None
        self._emit(
            "member.session_timeout_learned",
            broker_ms=broker_ms,
            session_timeout_ms=self.settings.session_timeout_ms,
        )
        return self.settings.session_timeout_ms
