"""The consumer-protocol heartbeat driver (spec §10.6, §10.7) and coordinator discovery.

The runtime's heartbeat task asks :meth:`HeartbeatDriver.heartbeat_action` what to do and
reports answers with :meth:`~HeartbeatDriver.on_heartbeat_response` or
:meth:`~HeartbeatDriver.on_heartbeat_failed`. At most one heartbeat is in flight. Scheduling:

- none while UNSUBSCRIBED, FENCED, STALE or FATAL, or with no coordinator (then a lookup);
- at once when LEAVING, or JOINING or ACKNOWLEDGING (unless a backoff is pending);
- otherwise on the group's next grid tick (:mod:`._kip848_grid`; at most one broker
  interval after the previous send), except after an answer that brought a new
  assignment (or the join): then at doubling gaps from ``pickup_first_ms`` until the gap
  reaches the interval, held at ``pickup_hold_gap_ms`` for ``pickup_hold_ms`` when that gap
  is at most a quarter of the interval, and never past the next grid tick (pickup
  heartbeats: partitions another member is still revoking arrive in the answer to one of
  them);
- the poll timer: when the application has not polled for ``max_poll_interval_ms``, the
  member sends a leave heartbeat (epoch -1, or -2 when static) without awaiting its answer,
  becomes STALE and releases its partitions as lost at the next poll, which rejoins.

ACKNOWLEDGING moves on (to STABLE, or RECONCILING when a newer target waits) as soon as its
heartbeat is sent, and LEAVING as soon as the leave heartbeat is sent: both as Kafka's client
does (§10.4).
"""

from __future__ import annotations

import uuid
from collections import defaultdict

from .._errors import (
    ErrorCode,
    GroupAuthorizationFailed,
    GroupError,
    TopicAuthorizationFailed,
    UnsupportedVersion,
    error_for_code,
)
from ._kip848_actions import (
    HeartbeatAction,
    HeartbeatFindCoordinator,
    HeartbeatIdle,
    HeartbeatWait,
    SendConsumerHeartbeat,
)
from ._kip848_base import ConsumerMemberBase, SentFields
from ._kip848_grid import next_tick
from ._kip848_reactions import (
    UNRELEASED_WINDOW_SESSIONS,
    HeartbeatReaction,
    heartbeat_reaction,
    instance_holder,
)
from ._kip848_state import ConsumerState, IdPartition
from ._messages import FindCoordinatorRequest, FindCoordinatorResponse
from ._messages_848 import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicIdPartitions,
)
from ._reactions import Api, Reaction, reaction_for
from ._state import NO_GENERATION, Coordinator

__all__ = ["CLASSIC_HINT", "HeartbeatDriver", "by_topic"]

S = ConsumerState
R = HeartbeatReaction

#: What an UnsupportedVersion answer to ConsumerGroupHeartbeat tells the user.
CLASSIC_HINT = (
    "the broker does not offer the consumer group protocol (KIP-848), or has not enabled it; "
    'use group_protocol="classic" (or group_protocol_fallback=True)'
)

_NO_HEARTBEAT = frozenset({S.UNSUBSCRIBED, S.FENCED, S.STALE, S.FATAL})
_SEND_AT_ONCE = frozenset({S.JOINING, S.ACKNOWLEDGING})


def by_topic(partitions: frozenset[IdPartition]) -> tuple[TopicIdPartitions, ...]:
    """``partitions`` as the wire groups them: per topic id, partitions sorted."""
    grouped: defaultdict[uuid.UUID, list[int]] = defaultdict(list)
    for p in partitions:
        grouped[p.topic_id].append(p.partition)
    return tuple(
        TopicIdPartitions(topic_id=tid, partitions=tuple(sorted(grouped[tid])))
        for tid in sorted(grouped, key=str)
    )


class HeartbeatDriver(ConsumerMemberBase):
    """The heartbeat driver (see the module docstring)."""

    # -- discovery -------------------------------------------------------------------------

    def find_coordinator_request(self) -> FindCoordinatorRequest:
        return FindCoordinatorRequest(group_id=self.settings.group_id)

    def on_find_coordinator_response(self, resp: FindCoordinatorResponse, now: float) -> None:
        reaction = reaction_for(
            Api.FIND_COORDINATOR, resp.error_code, sent=NO_GENERATION, current=NO_GENERATION
        )
        if reaction is Reaction.OK:
            self.coordinator = Coordinator(resp.node_id, resp.host, resp.port)
            self._find_attempts = 0
            self._sent = None
            self._signals.wake_heartbeat = True
            self._emit(
                "member.coordinator_found", node_id=resp.node_id, host=resp.host, port=resp.port
            )
        elif reaction is Reaction.UNAUTHORIZED:
            self.record_fatal(
                GroupAuthorizationFailed(
                    f"not authorized to use group {self.settings.group_id!r} (FindCoordinator)",
                    group_id=self.settings.group_id,
                    member_id=self.member_id,
                    generation_id=self.member_epoch,
                    api="FindCoordinator",
                )
            )
        elif reaction is Reaction.RETRY_BACKOFF:
            self.on_find_coordinator_failed(now, ErrorCode.describe(resp.error_code))
        else:
            self.record_fatal(self._error(resp.error_code, "FindCoordinator", resp.error_message))

    def on_coordinator_unreachable(self, now: float, reason: str) -> None:
        """The lookup named a coordinator that could not be reached: as a failed lookup."""
        self.on_find_coordinator_failed(now, reason)

    def on_find_coordinator_failed(self, now: float, reason: str) -> None:
        """The lookup failed (an error answer, no broker reachable, or the coordinator it
        named could not be reached): back off exponentially."""
        self.mark_coordinator_unknown(reason)
        delay = self._backoff.backoff(self._find_attempts)
        self._find_attempts += 1
        self._find_retry_at = now + delay
        self._emit("member.coordinator_lookup_failed", reason=reason, retry_in_ms=round(delay))

    # -- what to do next -------------------------------------------------------------------

    def heartbeat_action(self, now: float) -> HeartbeatAction:
        """What the heartbeat task does now (see the module docstring)."""
        polling = self.state in (S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE)
        if polling and now >= self._poll_deadline:
            self._poll_timer_expired(now)  # before the lease, whose bound it also is
        self.check_lease(now)
        leaving_unheard = self.state is S.PREPARE_LEAVING and self.member_epoch <= 0
        if self.state in _NO_HEARTBEAT or leaving_unheard:
            # Woken at the lease deadline only while it is still ahead (a past one, or the
            # minus infinity of a member that stopped trusting its partitions, is no wait).
            lease = self.valid_until
            return HeartbeatIdle(lease if lease is not None and lease > now else None)
        if self.coordinator is None:
            if self.state is S.LEAVING:
                # No coordinator to tell: the leave is given up (§10.6), its session will end.
                self._left("leave heartbeat not sent: coordinator unknown")
                return HeartbeatIdle()
            return HeartbeatFindCoordinator(max(now, self._find_retry_at))
        if self._in_flight is not None:
            sent = self._in_flight[0]
            return HeartbeatWait(sent.sent_at + sent.timeout_ms)
        if self.state is S.LEAVING:
            return self._send(now, leave=True)
        due = now if self.state in _SEND_AT_ONCE else self._next_heartbeat_at
        due = max(due, self._hb_retry_at)
        if now < due:
            # Woken early by the poll timer only while it runs (a member preparing to leave
            # no longer polls: its deadline may be long past), and by a lease deadline
            # still ahead; a past one is no wait (it would wake the task at once, forever).
            until = min(due, self._poll_deadline) if polling else due
            lease = self.valid_until
            if lease is not None and lease > now:
                until = min(until, lease)
            return HeartbeatWait(max(until, now))
        return self._send(now, leave=False)

    def polled(self, now: float) -> None:
        """The application polled: reset the poll timer; a STALE member rejoins (§10.6)."""
        self._poll_deadline = now + self.settings.max_poll_interval_ms
        if self.state is S.UNSUBSCRIBED and self.fatal is None and not self._closing:
            self._start_joining("first poll")
        elif self.state is S.STALE and self._lost_reason is None:
            self._start_joining("polled again after the poll timer expired")

    def _poll_timer_expired(self, now: float) -> None:
        self._end_lease(now)
        self._emit("member.poll_timeout", max_poll_interval_ms=self.settings.max_poll_interval_ms)
        self._leave_epoch = self.settings.poll_timeout_leave_epoch
        self._stale_after_leave = True
        self._set_state(S.LEAVING, "poll timer expired")

    def _left(self, reason: str) -> None:
        """The leave heartbeat went out (or cannot): UNSUBSCRIBED, or STALE after a poll
        timeout (whose partitions the next poll releases as lost)."""
        if self._stale_after_leave:
            self._stale_after_leave = False
            self._lost_reason = "poll timer expired"
            self._set_state(S.STALE, reason)
        else:
            self._set_state(S.UNSUBSCRIBED, reason)
        self.member_epoch = 0
        self.target = None
        self._sent = None
        self._revoke_deadline = None

    def _request(self, leave: bool) -> tuple[ConsumerGroupHeartbeatRequest, SentFields]:
        st = self.settings
        fields = SentFields(
            rebalance_timeout_ms=st.rebalance_timeout_ms,
            # Kafka keeps a field a heartbeat leaves out (null) and replaces it with what it
            # carries: an empty list drops the names, an empty string drops the regex. So a
            # subscription is sent as both, the other one empty (librdkafka's mock cluster
            # also insists on both).
            topics=() if self.topic_regex is not None else self.topics,
            topic_regex=self.topic_regex or "",
            server_assignor=st.server_assignor,
            rack_id=st.rack_id,
            owned=self._reported_owned() if self.member_epoch > 0 else frozenset(),
        )
        if leave:
            req = ConsumerGroupHeartbeatRequest(
                group_id=st.group_id,
                member_id=self.member_id,
                member_epoch=self._leave_epoch,
                instance_id=st.instance_id,
            )
            return req, fields
        last = None if self.member_epoch == 0 else self._sent
        full = last is None

        def changed(name: str) -> bool:
            return full or getattr(last, name) != getattr(fields, name)

        req = ConsumerGroupHeartbeatRequest(
            group_id=st.group_id,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            instance_id=st.instance_id,
            rack_id=fields.rack_id if changed("rack_id") else None,
            rebalance_timeout_ms=(
                fields.rebalance_timeout_ms if changed("rebalance_timeout_ms") else -1
            ),
            subscribed_topic_names=fields.topics if changed("topics") else None,
            subscribed_topic_regex=fields.topic_regex if changed("topic_regex") else None,
            server_assignor=fields.server_assignor if changed("server_assignor") else None,
            # An acknowledgement always reports what the member owns: the broker moves a
            # member past a revocation only on a heartbeat that carries its partitions.
            # DEVIATION (spec §10.5, deviations.md row 23): so does every heartbeat while a
            # revocation runs that the member has nothing left to give up for (partitions
            # it was given but never installed).
            topic_partitions=(
                by_topic(fields.owned)
                if changed("owned")
                or self.state is S.ACKNOWLEDGING
                or self._revoked_unreported(fields.owned)
                else None
            ),
        )
        return req, fields

    def _revoked_unreported(self, owned: frozenset[IdPartition]) -> bool:
        """A revocation's deadline runs on the broker, and the member holds nothing outside
        its target: only a heartbeat that says so moves it past the revocation (else the
        broker fences it at the deadline, simulation consumer seed 11268)."""
        target = self.target
        return self._revoke_deadline is not None and target is not None and owned <= target

    def _reported_owned(self) -> frozenset[IdPartition]:
        """The partitions a heartbeat reports: what the member owns, and while a
        reconciliation runs, also what it is installing (its assign callback may have
        started, so the member holds them). Reporting less would tell the broker the member
        released a partition it is taking up (a newer target may have dropped it meanwhile),
        and the broker would give it to another member at once."""
        return self._holding()

    def subscribe(self, topics: tuple[str, ...], topic_regex: str | None, now: float) -> bool:
        """Change the subscription (names, or a broker-side regex); the next heartbeat,
        sent at once, carries it. False when nothing changed."""
        topics = () if topic_regex is not None else tuple(sorted(topics))
        if (topics, topic_regex) == (self.topics, self.topic_regex):
            return False
        self.topics, self.topic_regex = topics, topic_regex
        self._next_heartbeat_at = min(self._next_heartbeat_at, now)
        self._signals.wake_heartbeat = True
        self._emit("member.subscription_changed", topics=list(topics), pattern=topic_regex)
        return True

    def _send(self, now: float, *, leave: bool) -> SendConsumerHeartbeat:
        req, fields = self._request(leave)
        action = SendConsumerHeartbeat(
            req, sent_at=now, timeout_ms=self.settings.request_timeout_ms, leave=leave
        )
        self._next_heartbeat_at = now + self.heartbeat_interval_ms
        if leave:
            self._emit("member.leave_sent", epoch=req.member_epoch)
            self._left("leave heartbeat sent")
            return action
        self._in_flight = (action, self._join_count, fields)
        if self.state is S.ACKNOWLEDGING:
            more = self._needs_reconciliation()
            self._set_state(S.RECONCILING if more else S.STABLE, "acknowledgement sent")
        return action

    def _needs_reconciliation(self) -> bool:
        if self.target is None:
            return False
        return not self._assigned_since_join or self.target != self.owned

    # -- answers ---------------------------------------------------------------------------

    def on_heartbeat_failed(
        self, sent: SendConsumerHeartbeat, now: float, reason: str, *, disconnected: bool = True
    ) -> None:
        """The heartbeat got no answer (timeout, disconnect, or its answer could not be
        read): back off; on a disconnect forget the coordinator. The next one is full."""
        if not self._take_in_flight(sent):
            return
        assert self._in_flight is not None
        reported = self._in_flight[2].owned
        if sent.request.topic_partitions is not None and sent.request.member_epoch > 0:
            earlier = self._unanswered_report
            self._unanswered_report = reported if earlier is None else earlier & reported
        if sent.request.member_epoch > 0 and self._unanswered_since is None:
            self._unanswered_since = sent.sent_at
        self._in_flight = None
        self._sent = None
        self._refused_since = None  # the join may have reached the broker: a new window
        if disconnected:
            self.mark_coordinator_unknown(reason)
        self._back_off(now)
        self._emit("member.heartbeat_failed", error=reason)

    def _take_in_flight(self, sent: SendConsumerHeartbeat) -> bool:
        if sent.leave:
            return False  # a leave's answer is not awaited
        if self._in_flight is None or self._in_flight[0] is not sent:
            return False
        self._signals.wake_heartbeat = True
        if self.state is S.RECONCILING and self._reconciling is None:
            self._signals.wake_poll = True  # a reconciliation may await this answer
        return True

    def _back_off(self, now: float) -> None:
        """A failed heartbeat: the interval timer is reset and an exponential backoff
        applies, so the next attempt comes after the backoff (§10.6)."""
        self._next_heartbeat_at = now
        self._pickup_gap = None
        self._hb_retry_at = now + self._backoff.backoff(self._hb_attempts)
        self._hb_attempts += 1

    def on_heartbeat_response(
        self, sent: SendConsumerHeartbeat, resp: ConsumerGroupHeartbeatResponse, now: float
    ) -> None:
        """Judge the answer to ``sent`` (§10.7) and apply it (§10.5 step 1)."""
        if not self._take_in_flight(sent):
            return
        assert self._in_flight is not None
        _, join_count, fields = self._in_flight
        self._in_flight = None
        if join_count != self._join_count or self.state in _NO_HEARTBEAT:
            return  # sent before the member rejoined, fenced or left: stale
        code = resp.error_code
        reaction = heartbeat_reaction(code)
        if reaction is R.OK:
            self._emit("member.heartbeat_ok")
            self._accept(sent, resp, fields, now)
            return
        self._emit("member.heartbeat_failed", error=ErrorCode.describe(code))
        self._sent = None
        # Deviation 19: a join refused with GROUP_ID_NOT_FOUND may be a classic group that
        # Kafka cannot convert yet (its current assignments carry user data: a custom
        # assignor's, or an earlier kgroup leader's follow-up mark): retried as deviation 16
        # retries UNRELEASED_INSTANCE_ID.
        refused_join = (
            reaction is R.GROUP_NOT_FOUND
            and sent.request.member_epoch == 0
            and self.state is not S.PREPARE_LEAVING
        )
        if reaction is not R.UNRELEASED_INSTANCE and not refused_join:
            # Deviation 16's window counts consecutive UNRELEASED_INSTANCE_ID answers (and
            # deviation 19's refused joins): any other outcome (a coordinator that moved or
            # loads and re-arms the holder's session, a lost answer) starts it again.
            self._refused_since = None
        if reaction is R.COORDINATOR_MOVED:
            self.mark_coordinator_unknown(ErrorCode.describe(code))
            self._hb_attempts = 0
            self._hb_retry_at = 0.0
            self._next_heartbeat_at = now
        elif reaction is R.RETRY_BACKOFF:
            self._back_off(now)
        elif reaction is R.FENCED:
            if self.state is S.PREPARE_LEAVING:
                self.member_epoch = 0  # the leave goes on, without a leave heartbeat
            else:
                self._fence(f"heartbeat answered {ErrorCode.describe(code)}", now)
        elif reaction is R.UNRELEASED_INSTANCE or refused_join:
            # The window runs from the arrival of the first such answer to the *sending*
            # of the latest: a late answer (delayed, or read after a pause) says only that
            # the instance was held when its request reached the broker. A holder that no
            # longer heartbeats (this member's own earlier incarnation, or a crashed
            # process's) is released one session after its last heartbeat, which the
            # broker took before the first answer; so only an answer to a request sent a
            # session after the first answer proves a live holder, and two sessions allow
            # for a coordinator load that re-armed the holder's session unseen
            # (UNRELEASED_WINDOW_SESSIONS).
            #
            # Two cases start the run again. The broker names this member's own id as the
            # holder: that is this member's earlier incarnation, which no other process
            # can be (member ids are generated per member), so the member waits for the
            # release however long it takes (a coordinator that loads the group re-arms
            # the holder's session). Or the member stalled (paused, or its loop blocked)
            # between two requests for longer than a request's timeout and a backoff: a
            # coordinator may have moved and re-armed the holder's session unseen
            # (simulation consumer seed 1304 saw both: paused 14.8 s across two moves).
            stalled = sent.sent_at - self._refused_sent_at > (
                self.settings.request_timeout_ms + self.settings.retry_backoff_max_ms
            )
            own = reaction is R.UNRELEASED_INSTANCE and (
                instance_holder(resp.error_message) == self.member_id
            )
            if self._refused_since is None or stalled or own:
                self._refused_since = now
            self._refused_sent_at = sent.sent_at
            window = UNRELEASED_WINDOW_SESSIONS * self.settings.session_timeout_ms
            if sent.sent_at - self._refused_since >= window:
                self.record_fatal(self._error(code, "ConsumerGroupHeartbeat", resp.error_message))
            else:
                self._back_off(now)
        elif reaction is R.REPORT_TOPIC_AUTHORIZATION:
            self._report = TopicAuthorizationFailed(
                self.topics,
                f"ConsumerGroupHeartbeat: {resp.error_message or 'topic authorization failed'}",
            )
            self._signals.wake_poll = True
            self._back_off(now)
        elif reaction is R.GROUP_NOT_FOUND and self.state is S.PREPARE_LEAVING:
            self.member_epoch = 0
        elif reaction is R.UNSUPPORTED:
            self.record_fatal(
                UnsupportedVersion(
                    f"ConsumerGroupHeartbeat failed with {ErrorCode.describe(code)}: "
                    + CLASSIC_HINT,
                    group_id=self.settings.group_id,
                    member_id=self.member_id,
                    generation_id=self.member_epoch,
                    error_code=code,
                    api="ConsumerGroupHeartbeat",
                )
            )
        else:
            self.record_fatal(self._error(code, "ConsumerGroupHeartbeat", resp.error_message))

    def _accept(
        self,
        sent: SendConsumerHeartbeat,
        resp: ConsumerGroupHeartbeatResponse,
        fields: SentFields,
        now: float,
    ) -> None:
        self._hb_attempts = 0
        self._hb_retry_at = 0.0
        self._refused_since = None
        self._unanswered_report = None  # this answer says what the broker made of them
        unanswered_since, self._unanswered_since = self._unanswered_since, None
        self._sent = fields
        if resp.member_id and resp.member_id != self.member_id:
            self._emit("member.member_id_changed", old=self.member_id, new=resp.member_id)
            self.member_id = resp.member_id
        joined = self.member_epoch == 0 and resp.member_epoch > 0
        self.joined_once = self.joined_once or joined
        self.member_epoch = resp.member_epoch
        if resp.heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = resp.heartbeat_interval_ms
        self._session_proof = sent.sent_at
        self._signals.wake_heartbeat = True
        if joined:
            self._emit("member.joined", heartbeat_interval_ms=self.heartbeat_interval_ms)
        changed = joined
        target = (
            None
            if resp.assignment is None
            else frozenset(
                IdPartition(t.topic_id, p) for t in resp.assignment for p in t.partitions
            )
        )
        # A revocation in this answer started its deadline on the broker when it first
        # answered with it: perhaps in the answer to an earlier heartbeat that never arrived.
        revoked_from = (
            sent.sent_at if unanswered_since is None else min(sent.sent_at, unanswered_since)
        )
        if target is not None and self.state is S.PREPARE_LEAVING:
            self._handoff_answered(target, revoked_from)
        elif target is not None:
            # The broker counts as the member's what it last assigned it, installed or not
            # (Kafka's CurrentAssignmentBuilder): a target that drops any of it starts the
            # broker's revocation deadline, even for partitions the member never installed.
            held = self.owned | (self.target or frozenset())
            if target != self.target:
                self.target = target
                changed = True
                self._emit("member.assignment_received", partitions=len(target))
            if held - target and self._revoke_deadline is None:
                self._revoke_deadline = revoked_from + self.settings.rebalance_timeout_ms
        self._next_heartbeat_at = sent.sent_at + self._next_gap(sent.sent_at, changed)
        reported = sent.request.topic_partitions is not None
        if self.target is not None and reported and not (fields.owned | self.owned) - self.target:
            # This answered heartbeat carried the member's partitions, none outside the
            # target, and it owns nothing more since (a reconciliation of an older target
            # may have installed some after the heartbeat was sent): the broker has moved
            # the member past the revocation, whose deadline no longer applies. Kafka does
            # so only on a heartbeat that carries them (one without keeps it waiting).
            self._revoke_deadline = None
        if self.state in (S.JOINING, S.STABLE) and self._needs_reconciliation():
            self._set_state(S.RECONCILING, "new target assignment")
        elif self.state is S.JOINING:
            self._set_state(S.STABLE, "joined without an assignment yet")

    def _handoff_answered(self, target: frozenset[IdPartition], sent_at: float) -> None:
        """An assignment reached a member waiting to hand off on close: if it takes back
        something the member owns, the broker's revocation deadline runs from this
        heartbeat, so the member stops waiting and releases at once (the lease keeps that
        deadline until then)."""
        if self._release_at is None:
            return
        if self.owned - target:
            self._release_at = None
            if self._revoke_deadline is None:
                self._revoke_deadline = sent_at + self.settings.rebalance_timeout_ms
            self._signals.wake_poll = True
            self._emit("member.handoff_cut_short", reason="the broker revokes partitions")

    def _next_gap(self, sent_at: float, changed: bool) -> float:
        """The wait from this answered heartbeat's send (at ``sent_at``) to the next one:
        the pickup gap, which starts over on a new assignment and doubles on every other
        answer until it reaches the interval (deviations.md row 18), but never past the
        group's next grid tick; otherwise until that tick (row 22), or one interval."""
        tick_gap: float | None = None
        if self.settings.heartbeat_grid and self.heartbeat_interval_ms > 0:
            tick = next_tick(
                sent_at,
                group_id=self.settings.group_id,
                interval_ms=self.heartbeat_interval_ms,
                wall_offset_ms=self.wall_offset_ms,
            )
            tick_gap = tick - sent_at
        first = self.settings.pickup_first_ms
        if first is not None:
            if changed:
                self._pickup_gap = float(first)
                self._pickup_since = sent_at
            elif self._pickup_gap is not None:
                self._pickup_gap *= 2
                hold_gap = self.settings.pickup_hold_gap_ms
                if (
                    sent_at - self._pickup_since < self.settings.pickup_hold_ms
                    and 4 * hold_gap <= self.heartbeat_interval_ms
                ):
                    # The hold: the gap stops growing at pickup_hold_gap_ms for a while, as a
                    # replacement member often joins within a second or two of a change.
                    # Not with a short interval: the grid's ticks come nearly as often.
                    self._pickup_gap = min(self._pickup_gap, float(hold_gap))
            if self._pickup_gap is not None and self._pickup_gap >= self.heartbeat_interval_ms:
                self._pickup_gap = None
            if self._pickup_gap is not None:
                # A pickup never skips a grid tick: a handoff on close counts on every
                # member heartbeating on each one.
                return self._pickup_gap if tick_gap is None else min(self._pickup_gap, tick_gap)
        if tick_gap is not None:
            return tick_gap
        return self.heartbeat_interval_ms

    def _error(self, code: int, api: str, message: str | None) -> GroupError:
        return error_for_code(
            code,
            api=api,
            group_id=self.settings.group_id,
            member_id=self.member_id,
            generation_id=self.member_epoch,
            message=message,
        )
