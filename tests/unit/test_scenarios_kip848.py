"""Spec §12 scenarios H48-H53 (KIP-848), and the rest of §10's client rules, on the sans-I/O
consumer-protocol core with a fake clock (milliseconds).

The harness plays both drivers: the heartbeat task (``heartbeat_action``, answers) and
``poll()`` (``polled``, ``poll_action``, running what it is told and recording the callbacks
it would call).
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from kgroup._core._consumer_protocol import TopicPartition
from kgroup._core._kip848_actions import (
    HeartbeatFindCoordinator,
    HeartbeatIdle,
    HeartbeatWait,
    PollIdle,
    RaiseError,
    Reconcile,
    ReleaseLost,
    ReleaseOnLeave,
    ResolveTopics,
    SendConsumerHeartbeat,
)
from kgroup._core._kip848_member import ConsumerProtocolMember
from kgroup._core._kip848_reactions import HEARTBEAT_REACTIONS, HeartbeatReaction
from kgroup._core._kip848_state import ConsumerProtocolSettings, ConsumerState, IdPartition
from kgroup._core._messages import FindCoordinatorResponse
from kgroup._core._messages_848 import ConsumerGroupHeartbeatResponse, TopicIdPartitions
from kgroup._errors import (
    ErrorCode,
    FencedInstanceId,
    GroupAuthorizationFailed,
    LocalProtocolError,
    TopicAuthorizationFailed,
    UnexpectedBrokerError,
    UnsupportedVersion,
)

E = ErrorCode
S = ConsumerState
T1 = uuid.UUID("00000000-0000-0000-0000-0000000000a1")
T2 = uuid.UUID("00000000-0000-0000-0000-0000000000b2")
NAMES = {T1: "t1", T2: "t2"}


def tp(topic: str, *partitions: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, p) for p in partitions)


def assignment(*pairs: tuple[uuid.UUID, tuple[int, ...]]) -> tuple[TopicIdPartitions, ...]:
    return tuple(TopicIdPartitions(topic_id=t, partitions=ps) for t, ps in pairs)


@dataclass
class Harness:
    settings: dict[str, Any] = field(default_factory=dict)
    now: float = 0.0
    metadata: dict[uuid.UUID, str] = field(default_factory=lambda: dict(NAMES))
    calls: list[tuple[str, frozenset[TopicPartition]]] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lookups: list[frozenset[uuid.UUID]] = field(default_factory=list)

    def __post_init__(self) -> None:
        st = ConsumerProtocolSettings(
            **{
                "group_id": "g",
                "member_id": "m-1",
                "topics": ("t1", "t2"),
                "max_poll_interval_ms": 300_000,
                # The scenarios check the spec's (Kafka's) schedule; kgroup's pickup
                # heartbeats (deviation 18) and heartbeat grid (deviation 22) are tested
                # on their own.
                "pickup_first_ms": None,
                "heartbeat_grid": False,
                **self.settings,
            }
        )
        self.m = ConsumerProtocolMember(
            st,
            now=0.0,
            observer=lambda event, **f: self.events.append((event, f)),
            uniform=lambda a, b: 1.0,
        )

    # -- time and discovery --
    def at(self, t: float) -> None:
        assert t >= self.now
        self.now = t

    def found(self) -> None:
        self.m.on_find_coordinator_response(
            FindCoordinatorResponse(error_code=0, node_id=1, host="b", port=9092), self.now
        )

    # -- heartbeat driver --
    def hb(self) -> Any:
        return self.m.heartbeat_action(self.now)

    def send(self) -> SendConsumerHeartbeat:
        action = self.hb()
        assert isinstance(action, SendConsumerHeartbeat), action
        return action

    def answer(
        self,
        sent: SendConsumerHeartbeat,
        *,
        epoch: int = 0,
        code: int = 0,
        assigned: tuple[TopicIdPartitions, ...] | None = None,
        interval: int = 5_000,
        message: str | None = None,
    ) -> None:
        resp = ConsumerGroupHeartbeatResponse(
            error_code=code,
            error_message=message,
            member_id="m-1" if code == 0 else None,
            member_epoch=epoch if code == 0 else -1,
            heartbeat_interval_ms=interval if code == 0 else 0,
            assignment=assigned,
        )
        self.m.on_heartbeat_response(sent, resp, self.now)

    # -- poll driver --
    def poll(self) -> Any:
        """One application poll: run every action until idle; return the last one."""
        self.m.polled(self.now)
        return self.drain()

    def drain(self) -> Any:
        for _ in range(20):
            action = self.m.poll_action(self.now)
            if isinstance(action, Reconcile):
                if action.revoked:
                    self.calls.append(("revoked", action.revoked))
                self.calls.append(("assigned", action.assigned))
                self.m.reconciled(action, self.now)
            elif isinstance(action, ReleaseLost):
                self.calls.append(("lost", action.partitions))
                self.m.lost_released(self.now)
            elif isinstance(action, ReleaseOnLeave):
                self.calls.append(("lost" if action.lost else "revoked", action.partitions))
                self.m.leave_prepared(self.now)
            elif isinstance(action, ResolveTopics):
                self.lookups.append(action.topic_ids)
                known = {t: n for t, n in self.metadata.items() if t in action.topic_ids}
                self.m.topics_resolved(known, self.now)
            elif isinstance(action, RaiseError):
                self.errors.append(action.error)
                return action
            else:
                assert isinstance(action, PollIdle)
                return action
        raise AssertionError("poll driver does not settle")

    def joined(self, epoch: int = 5, assigned: Any = ((T1, (0, 1)),)) -> SendConsumerHeartbeat:
        """Join, get ``assigned`` at ``epoch``, reconcile; return the acknowledging send."""
        self.found()
        self.poll()
        self.answer(self.send(), epoch=epoch, assigned=assignment(*assigned))
        self.poll()
        return self.send()

    def heartbeats_until_leave(self) -> SendConsumerHeartbeat:
        """Answer every heartbeat at the member's epoch until it sends a leave."""
        while True:
            action = self.hb()
            if isinstance(action, SendConsumerHeartbeat) and action.leave:
                return action
            if isinstance(action, SendConsumerHeartbeat):
                self.answer(action, epoch=self.m.member_epoch)
                continue
            assert isinstance(action, HeartbeatWait), action
            self.at(action.until)

    def state(self) -> ConsumerState:
        """The member's state (a call, so that type checkers do not narrow it)."""
        return self.m.state

    def event_names(self) -> list[str]:
        return [e for e, _ in self.events]


# ---------------------------------------------------------------------------------------------
# §12 H48-H53
# ---------------------------------------------------------------------------------------------


def test_h48_join_then_acknowledge_at_once() -> None:
    """H48. The first heartbeat carries the client-generated member id, epoch 0, the
    rebalance timeout, the subscription and ``TopicPartitions=[]``; on an answer with epoch
    5 and an assignment the member reconciles (assigned callback), then at once sends a
    heartbeat with epoch 5 and the new TopicPartitions."""
    h = Harness()
    assert isinstance(h.hb(), HeartbeatIdle)  # UNSUBSCRIBED until the first poll
    h.found()
    h.poll()
    assert h.state() is S.JOINING
    join = h.send()
    r = join.request
    assert (r.member_id, r.member_epoch, r.rebalance_timeout_ms) == ("m-1", 0, 300_000)
    assert r.subscribed_topic_names == ("t1", "t2")
    assert r.topic_partitions == ()
    assert r.group_id == "g" and r.instance_id is None
    assert r.subscribed_topic_regex == ""  # no regex: an empty one (Kafka drops it)
    assert isinstance(h.hb(), HeartbeatWait)  # one heartbeat in flight at a time
    h.at(40)
    h.answer(join, epoch=5, assigned=assignment((T1, (0, 1))))
    assert h.state() is S.RECONCILING
    h.poll()
    assert h.calls == [("assigned", tp("t1", 0, 1))]
    assert h.state() is S.ACKNOWLEDGING
    ack = h.send()  # at once, not after the interval
    assert ack.sent_at == 40
    assert ack.request.member_epoch == 5
    assert ack.request.topic_partitions == assignment((T1, (0, 1)))
    assert h.state() is S.STABLE  # as soon as the acknowledgement is sent
    h.at(60)
    h.answer(ack, epoch=5)
    # Steady state: incremental heartbeats on the broker's interval, send to send.
    wait = h.hb()
    assert isinstance(wait, HeartbeatWait) and wait.until == 40 + 5_000
    h.at(5_040)
    steady = h.send().request
    assert steady.member_epoch == 5
    assert steady.topic_partitions is None and steady.subscribed_topic_names is None
    assert steady.rebalance_timeout_ms == -1


def test_h48_first_reconciliation_calls_assigned_even_when_empty() -> None:
    """on_partitions_assigned fires on every join, even with nothing assigned (§10.5 step 6),
    so the application learns it joined."""
    h = Harness()
    h.found()
    h.poll()
    h.answer(h.send(), epoch=1, assigned=())
    h.poll()
    assert h.calls == [("assigned", frozenset())]
    assert h.state() is S.ACKNOWLEDGING


def test_h49_fenced_loses_partitions_and_rejoins_with_the_same_id() -> None:
    """H49. FENCED_MEMBER_EPOCH: on_partitions_lost(owned) fires, the assignment clears, and
    the next heartbeat carries the same member id with epoch 0 and full fields, at once."""
    h = Harness()
    h.answer(h.joined(), epoch=5)
    h.at(5_000)
    hb = h.send()
    h.at(5_010)
    h.answer(hb, code=E.FENCED_MEMBER_EPOCH)
    assert h.state() is S.FENCED
    assert isinstance(h.hb(), HeartbeatIdle)  # no heartbeat until the loss is released
    assert h.m.valid_until == float("-inf")  # stop trusting the partitions at once
    h.poll()
    assert h.calls[-1] == ("lost", tp("t1", 0, 1))
    assert h.m.owned == frozenset()
    assert h.state() is S.JOINING
    rejoin = h.send()
    assert rejoin.sent_at == 5_010  # no backoff
    r = rejoin.request
    assert (r.member_id, r.member_epoch, r.topic_partitions) == ("m-1", 0, ())
    assert r.rebalance_timeout_ms == 300_000 and r.subscribed_topic_names == ("t1", "t2")


@pytest.mark.parametrize("code", [E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID])
def test_h49_both_fencing_codes(code: int) -> None:
    h = Harness()
    h.answer(h.joined(), code=code)
    assert h.state() is S.FENCED
    assert "member.fenced" in h.event_names()


def test_h50_lost_answer_next_heartbeat_is_full_and_adopts_the_new_epoch() -> None:
    """H50. The answer that bumped the epoch 5 -> 6 is lost: the next heartbeat is full,
    carries epoch 5 and the owned partitions (a subset of the new assignment, which the
    broker accepts as the previous epoch), and the member adopts epoch 6 from its answer."""
    h = Harness()
    h.answer(h.joined(), epoch=5)
    h.at(5_000)
    lost = h.send()
    h.at(35_000)
    h.m.on_heartbeat_failed(lost, h.now, "request timed out", disconnected=True)
    assert h.m.coordinator is None
    assert isinstance(h.hb(), HeartbeatFindCoordinator)
    h.found()
    retry = h.hb()
    assert isinstance(retry, HeartbeatWait)  # the backoff of the failure
    h.at(retry.until)
    again = h.send().request
    assert again.member_epoch == 5
    assert again.topic_partitions == assignment((T1, (0, 1)))  # full
    assert again.rebalance_timeout_ms == 300_000 and again.subscribed_topic_names is not None
    h.answer(h.m._in_flight[0], epoch=6, assigned=assignment((T1, (0, 1, 2))))  # type: ignore[index]
    assert h.m.member_epoch == 6 and h.state() is S.RECONCILING


def test_h51_revoke_before_acknowledging() -> None:
    """H51. The target drops p1: the revoke callback runs with {p1} (the Reconcile action
    names the epoch a commit before it must carry), and the acknowledgement reports the
    partitions without p1. A commit retried on STALE_MEMBER_EPOCH uses the newest epoch:
    ``member_epoch`` is read at each attempt."""
    h = Harness(settings={"max_poll_interval_ms": 20_000})
    h.answer(h.joined(assigned=((T1, (0, 1)),)), epoch=5)
    h.at(5_000)
    h.m.polled(h.now)
    hb = h.send()
    h.answer(hb, epoch=6, assigned=assignment((T1, (0,))))
    assert h.state() is S.RECONCILING
    action = h.m.poll_action(h.now)
    assert isinstance(action, Reconcile)
    assert action.revoked == tp("t1", 1) and action.assigned == frozenset()
    assert action.epoch == 6
    # Until the revoke completes the member still owns p1, and must release it by the
    # broker's revocation deadline (the rebalance timeout after the asking heartbeat).
    assert h.m.valid_until == 5_000 + 20_000
    h.m.reconciled(action, h.now)
    assert h.state() is S.ACKNOWLEDGING
    sent = h.send()
    assert sent.request.topic_partitions == assignment((T1, (0,)))
    h.at(6_000)
    h.m.polled(h.now)
    # The broker has not heard of the revoke yet: the deadline still bounds the lease (a
    # late or lost acknowledgement does not stop the broker's timer).
    assert h.m.valid_until == 25_000
    h.answer(sent, epoch=6)
    # Now it has: the poll deadline (6 s + 20 s) bounds the lease, being below the session
    # bound (5 s + 45 s).
    assert h.m.valid_until == 26_000


def test_h52_poll_timer_leaves_loses_and_rejoins_on_the_next_poll() -> None:
    """H52. The application stalls past max.poll.interval.ms: the member sends a leave
    heartbeat (epoch -1) without awaiting it, stops heartbeating, releases its partitions as
    lost at the next poll, and rejoins with epoch 0 and the same member id."""
    h = Harness(settings={"max_poll_interval_ms": 60_000})
    h.answer(h.joined(), epoch=5)
    action = h.heartbeats_until_leave()
    assert h.now == 60_000
    assert action.request.member_epoch == -1
    assert h.state() is S.STALE
    assert isinstance(h.hb(), HeartbeatIdle)
    assert h.m.valid_until == float("-inf")
    h.at(90_000)
    h.poll()
    assert h.calls[-1] == ("lost", tp("t1", 0, 1))
    assert h.state() is S.JOINING
    rejoin = h.send().request
    assert (rejoin.member_id, rejoin.member_epoch) == ("m-1", 0)


def test_h52_static_member_leaves_with_minus_two() -> None:
    h = Harness(settings={"max_poll_interval_ms": 60_000, "instance_id": "i-1"})
    h.answer(h.joined(), epoch=5)
    leave = h.heartbeats_until_leave()
    assert h.now == 60_000
    assert leave.leave and leave.request.member_epoch == -2
    assert leave.request.instance_id == "i-1"


def test_h53_unsupported_version_is_fatal_and_names_classic() -> None:
    """H53. UNSUPPORTED_VERSION: a fatal error from poll() that recommends the classic
    protocol."""
    h = Harness()
    h.found()
    h.poll()
    h.answer(h.send(), code=E.UNSUPPORTED_VERSION)
    assert h.state() is S.FATAL
    action = h.poll()
    assert isinstance(action, RaiseError) and action.fatal
    assert isinstance(action.error, UnsupportedVersion)
    assert 'group_protocol="classic"' in str(action.error)
    assert isinstance(h.hb(), HeartbeatIdle)
    assert isinstance(h.poll(), RaiseError)  # terminal: every poll raises


# ---------------------------------------------------------------------------------------------
# The rest of §10.5-§10.7
# ---------------------------------------------------------------------------------------------


def test_unresolved_topic_ids_reconcile_the_resolvable_part_first() -> None:
    """§10.5 step 2: ids without a name are looked up; the resolvable part is reconciled
    now and the rest once a later lookup names them."""
    h = Harness(metadata={T1: "t1"})  # t2 is not in metadata yet
    h.found()
    h.poll()
    h.answer(h.send(), epoch=3, assigned=assignment((T1, (0,)), (T2, (0,))))
    h.poll()
    assert h.lookups == [frozenset({T1, T2})]
    assert h.calls == [("assigned", tp("t1", 0))]
    h.answer(h.send(), epoch=3)  # acknowledges t1-0
    assert h.state() is S.RECONCILING  # t2 still to come
    assert isinstance(h.poll(), PollIdle)
    h.metadata[T2] = "t2"
    h.at(999)
    h.poll()
    assert len(h.lookups) == 1  # the retry waits for the backoff
    h.at(1_000)
    h.poll()
    assert h.lookups[-1] == frozenset({T2})
    assert h.calls[-1] == ("assigned", tp("t2", 0))
    assert h.send().request.topic_partitions == assignment((T1, (0,)), (T2, (0,)))


def test_one_reconciliation_at_a_time_and_abort_on_rejoin() -> None:
    """A target arriving mid-reconciliation waits for it; a fencing mid-reconciliation
    aborts the acknowledgement, and the loss released afterwards includes what the
    reconciliation installed."""
    h = Harness()
    h.answer(h.joined(), epoch=5)
    h.at(5_000)
    hb = h.send()
    h.answer(hb, epoch=6, assigned=assignment((T1, (0, 1, 2))))
    first = h.m.poll_action(h.now)
    assert isinstance(first, Reconcile) and first.assigned == tp("t1", 2)
    h.at(10_000)
    hb = h.send()  # the interval heartbeat, while the callbacks run
    h.answer(hb, code=E.FENCED_MEMBER_EPOCH)
    assert isinstance(h.m.poll_action(h.now), PollIdle)  # the loss waits for the callbacks
    h.m.reconciled(first, h.now)
    assert h.state() is S.FENCED  # not acknowledged
    h.drain()
    assert h.calls[-1] == ("lost", tp("t1", 0, 1, 2))
    assert h.state() is S.JOINING


def test_same_target_again_acknowledges_without_callbacks() -> None:
    h = Harness()
    h.answer(h.joined(), epoch=5)
    h.at(5_000)
    h.answer(h.send(), epoch=7, assigned=assignment((T1, (0, 1))))
    assert h.state() is S.STABLE  # the target equals what is owned: nothing to reconcile
    n = len(h.calls)
    h.poll()
    assert len(h.calls) == n


def test_voluntary_leave_revokes_then_sends_minus_one_once() -> None:
    h = Harness()
    h.answer(h.joined(), epoch=5)
    assert h.m.leave(h.now)
    assert h.state() is S.PREPARE_LEAVING
    h.drain()
    assert h.calls[-1] == ("revoked", tp("t1", 0, 1))
    assert h.state() is S.LEAVING
    leave = h.send()
    assert leave.leave and leave.request.member_epoch == -1
    assert h.state() is S.UNSUBSCRIBED
    assert isinstance(h.hb(), HeartbeatIdle)
    h.poll()
    assert h.state() is S.UNSUBSCRIBED  # a poll after close does not rejoin


def test_remain_in_group_sends_no_leave() -> None:
    h = Harness(settings={"leave_epoch_on_close": None})
    h.answer(h.joined(), epoch=5)
    h.m.leave(h.now)
    h.drain()
    assert h.state() is S.UNSUBSCRIBED


def test_leave_without_coordinator_is_given_up() -> None:
    h = Harness()
    h.answer(h.joined(), epoch=5)
    h.m.leave(h.now)
    h.m.mark_coordinator_unknown("test")
    h.drain()
    assert h.state() is S.UNSUBSCRIBED


def test_fenced_while_preparing_to_leave_completes_the_leave_as_lost() -> None:
    h = Harness()
    h.answer(h.joined(), epoch=5)
    h.at(5_000)
    hb = h.send()
    h.m.leave(h.now)
    h.answer(hb, code=E.FENCED_MEMBER_EPOCH)
    h.drain()
    assert h.calls[-1] == ("lost", tp("t1", 0, 1))
    assert h.state() is S.UNSUBSCRIBED


def test_session_lease_expires_without_answers() -> None:
    """The member trusts its partitions until its last answered heartbeat's send time plus
    the broker's session timeout; past it the member fences itself."""
    h = Harness(settings={"session_timeout_ms": 45_000})
    ack = h.joined()
    h.answer(ack, epoch=5)
    assert h.m.valid_until == ack.sent_at + 45_000
    h.at(5_000)
    sent = h.send()
    h.at(35_000)
    h.m.on_heartbeat_failed(sent, h.now, "timed out")
    h.at(ack.sent_at + 45_000)
    assert isinstance(h.hb(), HeartbeatIdle)
    assert h.state() is S.FENCED
    assert "member.lease_expired" in h.event_names()
    h.poll()
    assert h.calls[-1] == ("lost", tp("t1", 0, 1))


def test_error_makes_the_next_heartbeat_full() -> None:
    h = Harness()
    h.answer(h.joined(), epoch=5)
    h.at(5_000)
    h.answer(h.send(), code=E.COORDINATOR_LOAD_IN_PROGRESS)
    wait = h.hb()
    assert isinstance(wait, HeartbeatWait) and wait.until == 5_100  # backoff
    h.at(5_100)
    r = h.send().request
    assert r.topic_partitions is not None and r.subscribed_topic_names is not None
    assert r.rebalance_timeout_ms == 300_000


@pytest.mark.parametrize("code", [E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE])
def test_coordinator_moved_looks_up_again_without_backoff(code: int) -> None:
    h = Harness()
    h.answer(h.joined(), epoch=5)
    h.at(5_000)
    h.answer(h.send(), code=code)
    assert h.m.coordinator is None
    assert h.m.take_signals().drop_coordinator
    assert isinstance(h.hb(), HeartbeatFindCoordinator)
    h.found()
    assert h.send().request.topic_partitions is not None  # full, at once


def refuse_joins(h: Harness, code: int, message: str | None = None) -> int:
    """Answer every join ``h`` sends with ``code`` (and ``message``), waiting out each
    backoff, until the member stops sending; return how many joins it sent. Between
    answers, ``poll()`` reports nothing (the refusals are retried silently)."""
    h.found()
    h.poll()
    sends = 0
    while True:
        action = h.hb()
        if isinstance(action, HeartbeatWait):
            h.at(action.until)
            continue
        if not isinstance(action, SendConsumerHeartbeat):
            return sends
        assert action.request.member_epoch == 0
        sends += 1
        h.answer(action, code=code, message=message)
        if h.state() is S.JOINING:
            assert isinstance(h.poll(), PollIdle)


def test_unreleased_instance_id_is_retried_for_two_sessions_then_fatal() -> None:
    """Deviation 16: UNRELEASED_INSTANCE_ID is retried with backoff until two of the
    broker's session timeouts have passed since the first one, then fatal."""
    h = Harness(settings={"instance_id": "i-1", "session_timeout_ms": 45_000})
    refuse_joins(h, E.UNRELEASED_INSTANCE_ID)
    assert h.state() is S.FATAL
    assert 90_000 <= h.now < 92_000
    assert isinstance(h.poll(), RaiseError)


def test_topic_authorization_failed_is_reported_once_and_the_member_stays() -> None:
    h = Harness()
    h.answer(h.joined(), epoch=5)
    h.at(5_000)
    h.answer(h.send(), code=E.TOPIC_AUTHORIZATION_FAILED)
    action = h.poll()
    assert isinstance(action, RaiseError) and not action.fatal
    assert isinstance(action.error, TopicAuthorizationFailed)
    assert h.state() is S.STABLE
    assert isinstance(h.poll(), PollIdle)


def test_group_id_not_found_is_fatal_in_the_group() -> None:
    h = Harness()
    h.answer(h.joined(), code=E.GROUP_ID_NOT_FOUND)
    assert h.state() is S.FATAL
    assert isinstance(h.m.fatal, UnexpectedBrokerError)


def test_a_join_refused_with_group_id_not_found_is_retried_then_fatal() -> None:
    """Deviation 19: GROUP_ID_NOT_FOUND answering a join (a classic group Kafka cannot
    convert yet) is retried with backoff, silently, until a run of such answers spans
    deviation 16's window (two of the broker's session timeouts); then it is fatal."""
    h = Harness(settings={"session_timeout_ms": 45_000})
    assert refuse_joins(h, E.GROUP_ID_NOT_FOUND) > 2
    assert h.state() is S.FATAL
    assert 90_000 <= h.now < 92_000
    assert isinstance(h.m.fatal, UnexpectedBrokerError)
    assert isinstance(h.poll(), RaiseError)


def test_a_join_refused_with_group_id_not_found_gets_in_once_the_group_converts() -> None:
    """Deviation 19: once the broker converts the group, the retried join goes on as any
    join does, and a later refusal run starts a new window."""
    h = Harness(settings={"session_timeout_ms": 45_000})
    h.found()
    h.poll()
    h.answer(h.send(), code=E.GROUP_ID_NOT_FOUND)
    action = h.hb()
    assert isinstance(action, HeartbeatWait)  # backing off, not fatal
    h.at(action.until)
    h.at(30_000)
    h.answer(h.send(), epoch=7, assigned=assignment((T1, (0,))))
    assert h.state() is not S.FATAL
    h.poll()
    assert ("assigned", tp("t1", 0)) in h.calls
    assert h.m._refused_since is None


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (E.FENCED_INSTANCE_ID, FencedInstanceId),
        (E.GROUP_AUTHORIZATION_FAILED, GroupAuthorizationFailed),
        (E.INVALID_REQUEST, UnexpectedBrokerError),
        (E.UNSUPPORTED_ASSIGNOR, UnexpectedBrokerError),
        (E.INVALID_REGULAR_EXPRESSION, UnexpectedBrokerError),
        (E.GROUP_MAX_SIZE_REACHED, Exception),
        (9999, UnexpectedBrokerError),
    ],
)
def test_fatal_codes(code: int, error: type[Exception]) -> None:
    h = Harness()
    h.found()
    h.poll()
    h.answer(h.send(), code=code)
    assert h.state() is S.FATAL
    assert isinstance(h.m.fatal, error)
    assert h.m.fatal.error_code == code  # type: ignore[attr-defined]


def test_reaction_table_matches_the_spec() -> None:
    R = HeartbeatReaction
    assert HEARTBEAT_REACTIONS[E.FENCED_MEMBER_EPOCH] is R.FENCED
    assert HEARTBEAT_REACTIONS[E.UNKNOWN_MEMBER_ID] is R.FENCED
    assert HEARTBEAT_REACTIONS[E.COORDINATOR_LOAD_IN_PROGRESS] is R.RETRY_BACKOFF
    assert HEARTBEAT_REACTIONS[E.UNSUPPORTED_VERSION] is R.UNSUPPORTED


def test_regex_subscription_and_assignor_are_sent_on_join_only() -> None:
    h = Harness(settings={"topics": (), "topic_regex": "t.*", "server_assignor": "range"})
    ack = h.joined()
    assert ack.request.subscribed_topic_regex is None  # unchanged since the join
    h2 = Harness(settings={"topics": (), "topic_regex": "t.*", "server_assignor": "range"})
    h2.found()
    h2.poll()
    r = h2.send().request
    assert r.subscribed_topic_regex == "t.*" and r.subscribed_topic_names == ()
    assert r.server_assignor == "range"


def test_illegal_transition_is_a_kgroup_bug() -> None:
    h = Harness()
    with pytest.raises(LocalProtocolError, match="UNSUBSCRIBED -> STABLE"):
        h.m._set_state(S.STABLE, "test")


def test_stale_answer_after_rejoin_is_ignored() -> None:
    h = Harness()
    h.answer(h.joined(), epoch=5)
    h.at(5_000)
    old = h.send()
    h.m.on_heartbeat_failed(old, h.now, "late")  # the runtime gave up on it
    h.answer(old, code=E.FENCED_MEMBER_EPOCH)  # ... and its answer arrives after all
    assert h.state() is S.STABLE


def test_the_poll_deadline_bounds_the_lease_and_its_expiry_is_reported() -> None:
    """Past the poll deadline the member leaves and the broker hands its partitions out at
    once: the lease ends there, and ``member.lease_expired`` says so before the leave."""
    h = Harness(settings={"max_poll_interval_ms": 60_000})
    h.answer(h.joined(), epoch=5)
    assert h.m.valid_until == 45_000  # the session bound (ack sent at 0) is the lower
    h.heartbeats_until_leave()
    names = h.event_names()
    assert names.index("member.lease_expired") < names.index("member.leave_sent")
    expired = dict(h.events)["member.lease_expired"]
    assert expired["deadline"] == 60_000


def test_subscribe_sends_the_new_subscription_at_once_and_clears_the_old_kind() -> None:
    """A subscription change goes out in the next heartbeat, sent at once: new names; names
    to a regex (with an empty list, which drops the names); a regex to names (with an empty
    regex, which drops the regex). Unchanged fields stay out."""
    h = Harness()
    h.answer(h.joined(), epoch=5)
    assert not h.m.subscribe(("t2", "t1"), None, h.now)  # the same, in another order
    h.at(100)
    assert h.m.subscribe(("t1",), None, h.now)
    r = h.send().request
    assert (r.subscribed_topic_names, r.subscribed_topic_regex) == (("t1",), None)
    h.answer(h.m._in_flight[0], epoch=6)  # type: ignore[index]
    h.at(200)
    h.m.subscribe((), "t.*", h.now)
    r = h.send().request
    assert (r.subscribed_topic_names, r.subscribed_topic_regex) == ((), "t.*")
    h.answer(h.m._in_flight[0], epoch=7)  # type: ignore[index]
    h.at(300)
    h.m.subscribe(("t2",), None, h.now)
    r = h.send().request
    assert (r.subscribed_topic_names, r.subscribed_topic_regex) == (("t2",), "")
    assert r.rebalance_timeout_ms == -1 and r.topic_partitions is None
    assert "member.subscription_changed" in h.event_names()


# ---------------------------------------------------------------------------------------------
# Bugs the simulation found (seeds with --flavor consumer)
# ---------------------------------------------------------------------------------------------


def test_fenced_member_heartbeat_idle_is_not_a_past_deadline() -> None:
    """A fenced member still holding partitions parks its heartbeat task (no deadline):
    HeartbeatIdle(-inf) made the task spin."""
    h = Harness()
    h.answer(h.joined(), epoch=5)
    h.at(5_000)
    h.answer(h.send(), code=E.FENCED_MEMBER_EPOCH)
    idle = h.hb()
    assert isinstance(idle, HeartbeatIdle) and idle.until is None


def test_a_fencing_ends_the_lease_at_once_and_says_when() -> None:
    """Seeds 82, 96, 116: a fenced answer (or the poll timer) ends the lease now, or at its
    deadline if that passed already, and ``member.lease_expired`` says so, before the loss
    is released in a later poll."""
    h = Harness(settings={"session_timeout_ms": 45_000})
    ack = h.joined()
    h.answer(ack, epoch=5)
    h.at(5_000)
    hb = h.send()
    h.at(50_000)  # the answer comes after the session bound (0 + 45 s) passed
    h.answer(hb, code=E.FENCED_MEMBER_EPOCH)
    expired = [f for e, f in h.events if e == "member.lease_expired"]
    assert [f["deadline"] for f in expired] == [45_000]
    h.poll()  # the loss is released; no second report
    assert len([e for e, _ in h.events if e == "member.lease_expired"]) == 1


def test_an_acknowledgement_always_carries_the_owned_partitions() -> None:
    """Seed 293: after 'target already owned' the acknowledgement carries TopicPartitions
    even when they equal the last ones sent: the broker moves a member past a revocation
    only on a heartbeat that reports its partitions."""
    h = Harness()
    h.answer(h.joined(), epoch=5)
    h.at(5_000)
    h.answer(h.send(), epoch=6, assigned=assignment((T1, (0,))))
    action = h.m.poll_action(h.now)
    assert isinstance(action, Reconcile)
    h.m.reconciled(action, h.now)
    ack = h.send()
    assert ack.request.topic_partitions == assignment((T1, (0,)))
    h.answer(ack, epoch=6)
    # RECONCILING with a target the member already owns, and that it already reported (how
    # a reconciliation interrupted after its install, or a target repeated at a new epoch,
    # leaves it): it acknowledges, and the acknowledgement carries the partitions.
    h.m._set_state(S.RECONCILING, "test: a target already owned")
    assert isinstance(h.m.poll_action(h.now), PollIdle)
    assert h.state() is S.ACKNOWLEDGING
    assert h.send().request.topic_partitions == assignment((T1, (0,)))


def test_poll_idle_never_names_a_past_time() -> None:
    """Seed 73: with a topic id unresolved and the retry time past, poll_action named that
    past time outside RECONCILING, and poll() spun on it."""
    h = Harness(metadata={T1: "t1"})
    h.found()
    h.poll()
    h.answer(h.send(), epoch=3, assigned=assignment((T1, (0,)), (T2, (0,))))
    h.poll()
    assert h.state() is S.ACKNOWLEDGING  # t2 unresolved, its retry at 1 000
    h.at(5_000)
    idle = h.m.poll_action(h.now)
    assert isinstance(idle, PollIdle) and (idle.until is None or idle.until > h.now)


def test_an_interrupted_reconciliation_goes_on_at_the_next_poll_and_close() -> None:
    """A poll() cancelled during a reconciliation's callbacks reports what the runtime
    holds; close() then releases and leaves instead of waiting for a reconciliation that
    will never report (the simulation's hang)."""
    h = Harness()
    h.answer(h.joined(), epoch=5)
    h.at(5_000)
    h.answer(h.send(), epoch=6, assigned=assignment((T1, (1, 2))))
    action = h.m.poll_action(h.now)
    assert isinstance(action, Reconcile)
    h.m.reconcile_interrupted(action, installed=False)  # cut short in the revoke callback
    assert h.m.owned == frozenset({IdPartition(T1, 1)})
    assert h.state() is S.RECONCILING
    again = h.m.poll_action(h.now)
    assert isinstance(again, Reconcile) and again.assigned == tp("t1", 2)
    h.m.reconcile_interrupted(again, installed=True)
    h.m.leave(h.now)
    h.drain()
    assert h.calls[-1] == ("revoked", tp("t1", 1, 2))
    assert h.state() is S.LEAVING


def test_a_member_owning_nothing_rejoins_once_its_session_has_lapsed() -> None:
    """Seeds 197, 384, ...: a member that owns nothing has no lease, but after a pause
    longer than the session the broker has removed it: it must not install its old target
    (another member may own it now), but rejoin."""
    h = Harness(settings={"session_timeout_ms": 45_000, "max_poll_interval_ms": 300_000})
    h.found()
    h.poll()
    join = h.send()
    h.answer(join, epoch=3, assigned=assignment((T1, (0,))))  # answered at 0: the proof
    assert h.state() is S.RECONCILING and not h.m.owned
    h.at(50_000)  # poll() comes back after the session
    action = h.m.poll_action(h.now)
    assert not isinstance(action, Reconcile)
    assert h.state() is S.JOINING
    assert h.send().request.member_epoch == 0


def test_unreleased_instance_window_starts_again_after_another_outcome() -> None:
    """Deviation 16's window counts consecutive UNRELEASED_INSTANCE_ID answers: a lost
    answer or a coordinator that moved starts it again (the broker may have re-armed the
    holder's session, or made this member its own holder again)."""
    h = Harness(settings={"instance_id": "i-1", "session_timeout_ms": 45_000})
    h.found()
    h.poll()
    h.answer(h.send(), code=E.UNRELEASED_INSTANCE_ID)
    h.at(40_000)
    hb = h.send()
    h.m.on_heartbeat_failed(hb, h.now, "timed out", disconnected=False)
    h.at(41_000)
    h.answer(h.send(), code=E.UNRELEASED_INSTANCE_ID)
    for at in (50_000, 80_000, 95_000, 125_000):  # 95 s after the first: 54 s into the
        h.at(at)  # new window
        h.answer(h.send(), code=E.UNRELEASED_INSTANCE_ID)
        assert h.state() is S.JOINING
    h.at(131_000)  # two sessions (90 s) into the new window
    h.answer(h.send(), code=E.UNRELEASED_INSTANCE_ID)
    assert h.state() is S.FATAL


def test_unreleased_instance_window_judges_a_late_answer_by_its_send_time() -> None:
    """Deviation 16's window runs to the *sending* of the latest UNRELEASED_INSTANCE_ID
    answer's request: a late answer only says the instance was held when the request got
    to the broker. Simulation seed 213: the window opened at 17.2 s (session 10 s), a join
    sent at 20.6 s was answered 9.5 s late, at 30.0 s; the broker had released the
    instance at 23.8 s (its holder, this member's own incarnation, had heartbeated at
    13.8 s), and that late answer made the member fatal."""
    h = Harness(
        settings={"instance_id": "i-1", "session_timeout_ms": 10_000, "request_timeout_ms": 10_000}
    )
    h.found()
    h.poll()
    h.at(17_200)
    h.answer(h.send(), code=E.UNRELEASED_INSTANCE_ID)  # the window opens
    h.at(20_560)
    late = h.send()
    h.at(30_017)  # 12.8 s after the window opened, but sent 3.4 s after it
    h.answer(late, code=E.UNRELEASED_INSTANCE_ID)
    assert h.state() is S.JOINING
    action = h.hb()
    assert isinstance(action, HeartbeatWait)
    h.at(action.until)
    h.answer(h.send(), epoch=10)  # the instance was released meanwhile: joined
    assert h.state() is S.STABLE
    assert h.m.member_epoch == 10


def test_unreleased_instance_window_still_ends_for_a_live_holder() -> None:
    """A request sent two sessions after the window opened and still answered
    UNRELEASED_INSTANCE_ID is fatal, however late its answer comes."""
    h = Harness(
        settings={"instance_id": "i-1", "session_timeout_ms": 10_000, "request_timeout_ms": 10_000}
    )
    h.found()
    h.poll()
    h.answer(h.send(), code=E.UNRELEASED_INSTANCE_ID)
    h.at(9_000)
    h.answer(h.send(), code=E.UNRELEASED_INSTANCE_ID)
    h.at(19_999)
    h.answer(h.send(), code=E.UNRELEASED_INSTANCE_ID)
    assert h.state() is S.JOINING
    action = h.hb()
    assert isinstance(action, HeartbeatWait)
    h.at(action.until)
    sent = h.send()
    assert sent.sent_at >= 20_000
    h.at(sent.sent_at + 5_000)
    h.answer(sent, code=E.UNRELEASED_INSTANCE_ID)
    assert h.state() is S.FATAL


def owned_by(holder: str) -> str:
    """Kafka 4.4.0's UNRELEASED_INSTANCE_ID message for a join by m-1 as i-1."""
    return (
        "Static member m-1 with instance id i-1 cannot join the group because the instance"
        f" id is owned by {holder} member."
    )


def test_unreleased_instance_held_by_this_member_itself_is_waited_out() -> None:
    """Deviation 16: when Kafka names this member's own id as the instance's holder (its
    earlier incarnation, e.g. fenced by a lease that expired during a coordinator load),
    the member retries past any session until the instance is released: no other process
    can hold its member id. Each coordinator load re-arms that holder's session (simulation
    consumer seed 1304). Another holder still ends the run two sessions later."""
    h = Harness(settings={"instance_id": "i-1", "session_timeout_ms": 10_000})
    h.found()
    h.poll()
    sends = 0
    while h.now < 35_000:
        action = h.hb()
        if isinstance(action, HeartbeatWait):
            h.at(action.until)
            continue
        h.answer(action, code=E.UNRELEASED_INSTANCE_ID, message=owned_by("m-1"))
        sends += 1
        assert h.state() is S.JOINING, h.now
    assert sends > 10
    action = h.hb()
    if isinstance(action, HeartbeatWait):
        h.at(action.until)
        action = h.send()
    h.answer(action, epoch=4)  # released at last: joined
    assert h.state() is S.STABLE
    assert not h.errors
    # Another holder: fatal two sessions after its first such answer.
    h2 = Harness(settings={"instance_id": "i-1", "session_timeout_ms": 10_000})
    refuse_joins(h2, E.UNRELEASED_INSTANCE_ID, owned_by("m-0"))
    assert h2.state() is S.FATAL
    assert 20_000 <= h2.now < 22_000


def test_unreleased_instance_window_starts_again_after_the_member_stalled() -> None:
    """Deviation 16: a gap between two refused requests longer than a request timeout
    plus the longest backoff means the member stalled (paused, or its loop blocked); a
    coordinator may have moved and re-armed the holder's session meanwhile, unseen, so the
    run starts again (simulation consumer seed 1304: paused 14.8 s across two moves)."""
    h = Harness(
        settings={
            "instance_id": "i-1",
            "session_timeout_ms": 10_000,
            "request_timeout_ms": 5_000,
            "retry_backoff_max_ms": 1_000,
        }
    )
    h.found()
    h.poll()
    h.answer(h.send(), code=E.UNRELEASED_INSTANCE_ID)  # the run opens at 0
    h.at(8_000)  # stalled: the next request goes out 8 s later
    h.answer(h.send(), code=E.UNRELEASED_INSTANCE_ID)
    h.at(12_000)  # sent 12 s after the run first opened, 4 s after it opened again
    h.answer(h.send(), code=E.UNRELEASED_INSTANCE_ID)
    assert h.state() is S.JOINING
    for at in (17_000, 22_000, 27_000):  # 5 s apart: within a request timeout and a
        h.at(at)  # backoff, so the run goes on
        h.answer(h.send(), code=E.UNRELEASED_INSTANCE_ID)
        assert h.state() is S.JOINING
    h.at(28_000)  # two sessions after the run opened again
    h.answer(h.send(), code=E.UNRELEASED_INSTANCE_ID)
    assert h.state() is S.FATAL


def test_revocation_deadline_kept_for_partitions_installed_after_the_heartbeat() -> None:
    """Simulation seed 20695 (``--flavor consumer``): a heartbeat sent before the member
    installed its target (so it reported nothing owned) is answered with a newer target
    that revokes a partition, after the poll installed the older one. The answer told the
    broker nothing of that partition, whose revocation deadline runs from the heartbeat's
    send: the lease must end there, not one session after."""
    h = Harness(settings={"max_poll_interval_ms": 6_000, "session_timeout_ms": 10_000})
    h.found()
    h.poll()
    h.answer(h.send(), epoch=5, assigned=assignment((T1, (0, 1))))
    assert h.state() is S.RECONCILING
    action = h.hb()
    assert isinstance(action, HeartbeatWait)
    h.at(action.until)
    before = h.send()  # sent before the poll installs t1-0 and t1-1
    assert before.request.topic_partitions is None
    h.at(before.sent_at + 1_800)
    h.poll()  # installs the older target
    assert h.m.owned == {IdPartition(T1, 0), IdPartition(T1, 1)}
    h.answer(before, epoch=5, assigned=assignment((T1, (0,))))  # revoke t1-1
    assert h.m.valid_until == before.sent_at + 6_000


def test_revocation_deadline_for_partitions_assigned_but_not_yet_installed() -> None:
    """Simulation seed 8940 (found with the pickup heartbeats): a target arrives, the
    member has not reconciled it yet, and the next answer drops one of its partitions.
    Kafka counts what it assigned as the member's, installed or not, and waits for a
    heartbeat carrying the member's partitions without it, until the rebalance timeout;
    heartbeats without partitions do not end that wait. So the member's next heartbeat
    carries its partitions (seed 11268), and the answer to it ends the deadline, before
    the application has reconciled."""
    h = Harness(settings={"max_poll_interval_ms": 6_000, "session_timeout_ms": 20_000})
    h.found()
    h.poll()
    h.answer(h.send(), epoch=5, assigned=assignment((T1, (0,))), interval=500)
    h.poll()
    ack = h.send()
    h.at(10)
    h.answer(ack, epoch=5, interval=500)

    def beat(reports: bool = False) -> SendConsumerHeartbeat:
        action = h.hb()
        assert isinstance(action, HeartbeatWait)
        h.at(action.until)
        sent = h.send()
        assert (sent.request.topic_partitions is not None) is reports
        h.at(h.now + 5)
        return sent

    h.answer(beat(), epoch=6, assigned=assignment((T1, (0, 1, 2))), interval=500)
    second = beat()
    h.answer(second, epoch=7, assigned=assignment((T1, (0, 1))), interval=500)  # drops t1-2
    assert h.m.owned == {IdPartition(T1, 0)}
    h.m.polled(h.now)  # the application is in poll(), its callbacks not run yet
    assert h.m.valid_until == second.sent_at + 6_000  # the broker's revocation deadline
    report = beat(reports=True)  # what the member holds: t1-0, nothing of t1-2
    assert report.request.topic_partitions == assignment((T1, (0,)))
    h.answer(report, epoch=7, interval=500)
    until = h.m.valid_until
    assert until is not None and until > second.sent_at + 6_000  # past the revocation
    h.poll()  # reconciles t1-0, t1-1; the acknowledgement carries them
    assert h.m.owned == {IdPartition(T1, 0), IdPartition(T1, 1)}
    done = h.send()
    assert done.request.topic_partitions == assignment((T1, (0, 1)))


def test_a_heartbeat_during_a_reconciliation_reports_what_is_being_installed() -> None:
    """Simulation seed 3464: while the assign callback for t1-2 runs, a newer target drops
    t1-2, and a full heartbeat (after NOT_COORDINATOR) reports the member's partitions.
    Reporting only what was installed before would tell the broker t1-2 is released, and
    it would hand it to another member while the callback still runs: the report includes
    what the reconciliation installs, and the revocation deadline stays."""
    h = Harness(settings={"max_poll_interval_ms": 10_000, "session_timeout_ms": 20_000})
    h.found()
    h.poll()
    h.answer(h.send(), epoch=5, assigned=assignment((T1, (0,))), interval=500)
    h.poll()
    h.at(10)
    h.answer(h.send(), epoch=5, interval=500)
    action = h.hb()
    assert isinstance(action, HeartbeatWait)
    h.at(action.until)
    h.answer(h.send(), epoch=6, assigned=assignment((T1, (0, 2))), interval=500)
    h.m.polled(h.now)
    installing = h.m.poll_action(h.now)  # the assign callback for t1-2 starts...
    assert isinstance(installing, Reconcile) and installing.assigned == tp("t1", 2)
    action = h.hb()
    assert isinstance(action, HeartbeatWait)
    h.at(action.until)
    beat = h.send()
    assert beat.request.topic_partitions == assignment((T1, (0, 2)))  # reported at once
    h.at(h.now + 5)
    h.answer(beat, epoch=7, assigned=assignment((T1, (0,))))  # a newer target drops t1-2
    deadline = beat.sent_at + 10_000
    h.m.polled(h.now)  # (keeps the poll deadline beyond the revocation deadline)
    assert h.m.valid_until == deadline
    action = h.hb()
    assert isinstance(action, HeartbeatWait)
    h.at(action.until)
    failed = h.send()
    h.m.on_heartbeat_failed(failed, h.now + 5, "NOT_COORDINATOR", disconnected=True)
    h.at(h.now + 5)
    h.found()
    h.m.polled(h.now)
    retry = h.hb()
    assert isinstance(retry, HeartbeatWait)  # the backoff
    h.at(retry.until)
    full = h.send()  # full after the error: t1-2 is still reported, being installed
    assert full.request.topic_partitions == assignment((T1, (0, 2)))
    h.at(h.now + 5)
    h.answer(full, epoch=7)
    h.m.polled(h.now)
    assert h.m.valid_until == deadline  # the broker still waits for t1-2's revocation


# -- pickup heartbeats (deviations.md row 18) ---------------------------------------------


def _joined_and_acknowledged(h: Harness) -> SendConsumerHeartbeat:
    """Join at 0, answered at 10 with p0; acknowledged at once (sent at 10)."""
    h.found()
    h.poll()
    join = h.send()
    h.at(10)
    h.answer(join, epoch=5, assigned=assignment((T1, (0,))))
    h.poll()
    ack = h.send()
    assert ack.sent_at == 10
    return ack


def _pickup_gaps(settings: dict[str, Any], count: int) -> list[float]:
    h = Harness(settings=settings)
    sent = _joined_and_acknowledged(h)
    sends = [sent.sent_at]
    for _ in range(count):
        h.at(h.now + 1)
        h.answer(sent, epoch=5)  # nothing new
        wait = h.hb()
        assert isinstance(wait, HeartbeatWait)
        h.at(wait.until)
        sent = h.send()
        sends.append(sent.sent_at)
    return [b - a for a, b in itertools.pairwise(sends)]


def test_pickup_heartbeats_double_from_the_first_gap_up_to_the_interval() -> None:
    """After a new assignment the member heartbeats at doubling gaps (25 ms started by the
    answer that brought it, then 50, 100, ... from each send) until the gap reaches the
    broker's interval, then at the interval again. For the first 2 s (the hold) the gaps
    stop growing at 200 ms (the hold, on by default)."""
    gaps = _pickup_gaps({"pickup_first_ms": 25}, 22)
    # The join was sent at 0 and the acknowledgement at 10: 60, 160, 360, then every 200 ms
    # until the send at 1,960, the last within the 2 s hold; then 400 ... 3,200 (the next
    # doubling, 6,400, passes the 5 s interval), then the interval.
    assert gaps[:3] == [50, 100, 200]
    assert gaps[3:12] == [200] * 9
    assert gaps[12:17] == [400, 800, 1_600, 3_200, 5_000]
    assert set(gaps[16:]) == {5_000}
    # Without the hold: doubling only.
    gaps = _pickup_gaps({"pickup_first_ms": 25, "pickup_hold_ms": 0}, 12)
    assert gaps[:8] == [50, 100, 200, 400, 800, 1_600, 3_200, 5_000]
    assert set(gaps[7:]) == {5_000}


def test_pickup_starts_over_when_an_answer_brings_more_partitions() -> None:
    """The answer to a pickup heartbeat that brings a partition another member released
    starts the doubling over: partitions often come in steps, one per releasing member."""
    h = Harness(settings={"pickup_first_ms": 25})
    ack = _joined_and_acknowledged(h)
    h.at(20)
    h.answer(ack, epoch=5)
    wait = h.hb()
    assert isinstance(wait, HeartbeatWait) and wait.until == 10 + 50
    h.at(60)
    pickup = h.send()
    h.at(70)
    h.answer(pickup, epoch=5, assigned=assignment((T1, (0, 1))))  # p1, released by another
    h.poll()
    assert h.calls[-1] == ("assigned", tp("t1", 1))
    ack2 = h.send()  # the acknowledgement goes at once
    h.at(80)
    h.answer(ack2, epoch=5)
    wait = h.hb()
    assert isinstance(wait, HeartbeatWait) and wait.until == 70 + 50  # started over


def test_pickup_off_and_after_a_failure_the_interval_rules() -> None:
    """``pickup_first_ms=None`` heartbeats at the interval only (Kafka's schedule); and a
    failed heartbeat ends the pickup: after its backoff, the interval applies again."""
    h = Harness()  # pickup_first_ms=None
    ack = _joined_and_acknowledged(h)
    h.at(20)
    h.answer(ack, epoch=5)
    wait = h.hb()
    assert isinstance(wait, HeartbeatWait) and wait.until == 10 + 5_000
    h = Harness(settings={"pickup_first_ms": 25})
    ack = _joined_and_acknowledged(h)
    h.at(20)
    h.answer(ack, epoch=5)
    h.at(60)
    pickup = h.send()
    h.m.on_heartbeat_failed(pickup, 100, "timed out", disconnected=False)
    h.at(100)
    retry = h.hb()
    assert isinstance(retry, HeartbeatWait)  # the backoff
    h.at(retry.until)
    again = h.send()
    h.at(again.sent_at + 5)
    h.answer(again, epoch=5)
    wait = h.hb()
    assert isinstance(wait, HeartbeatWait) and wait.until == again.sent_at + 5_000


def _adding_behind_a_full_report(h: Harness) -> SendConsumerHeartbeat:
    """The member owns t1-0; its target adds t1-1 at epoch 6; a heartbeat fails, and the
    full one after it (reporting t1-0 only) is in flight while ``poll()`` would install
    t1-1: it waits. Returns that full heartbeat, unanswered."""
    h.found()
    h.poll()
    h.answer(h.send(), epoch=5, assigned=assignment((T1, (0,))))
    h.poll()  # installs t1-0
    h.answer(h.send(), epoch=5)  # acknowledged
    h.at(5_000)
    h.answer(h.send(), epoch=6, assigned=assignment((T1, (0, 1))))  # t1-1 added
    assert h.state() is S.RECONCILING
    h.at(h.hb().until)
    failed = h.send()
    h.m.on_heartbeat_failed(failed, h.now, "connection reset", disconnected=False)
    h.at(h.hb().until)
    full = h.send()  # after an error: full, reporting t1-0 only
    assert full.request.topic_partitions == assignment((T1, (0,)))
    assert isinstance(h.poll(), PollIdle)  # t1-1 is not taken up while it is in flight
    return full


@pytest.mark.parametrize("newer", [True, False], ids=["moved-away", "still-ours"])
def test_a_reconciliation_waits_for_a_heartbeat_that_reports_partitions_without_its_own(
    newer: bool,
) -> None:
    """Simulation seeds 1234 and 1956 (``--flavor consumer``, partitions added under the
    faults): a full heartbeat (after an error) reported the member's partitions; then the
    poll path installed one more from its target before the broker read that heartbeat.
    The broker took the missing partition as released and, under a newer target, gave it
    to another member at once: two owners. A reconciliation that would take up partitions
    the heartbeat in flight does not report now waits for its answer: either the
    partition went to another member (it is never installed) or it is still this
    member's (installed then)."""
    h = Harness()
    full = _adding_behind_a_full_report(h)
    assert h.m.owned == {IdPartition(T1, 0)}
    assert not h.m.poll_work_pending()
    h.at(h.now + 10)
    h.m.take_signals()
    if newer:  # the broker gave t1-1 to another member
        h.answer(full, epoch=7, assigned=assignment((T1, (0,))))
        h.poll()
        assert h.m.owned == {IdPartition(T1, 0)}
        assert ("assigned", frozenset({TopicPartition("t1", 1)})) not in h.calls
    else:  # t1-1 is still this member's: installed now
        h.answer(full, epoch=6)
        assert h.m.take_signals().wake_poll  # the waiting poll() looks again
        h.drain()
        assert h.m.owned == {IdPartition(T1, 0), IdPartition(T1, 1)}


@pytest.mark.parametrize("newer", [True, False], ids=["moved-away", "still-ours"])
def test_a_reconciliation_waits_past_a_lost_answer_to_such_a_heartbeat(newer: bool) -> None:
    """Simulation seed 927 (``--flavor consumer``, with the heartbeat grid): the full
    heartbeat that reported the member's partitions without the one it was about to
    install timed out; the broker had read it, taken that partition as released and given
    it to another member. The member must not install it on the timeout: only the answer
    to a later heartbeat (full, after the failure) says whether it is still its own."""
    h = Harness()
    full = _adding_behind_a_full_report(h)
    h.at(h.now + 8_000)
    h.m.on_heartbeat_failed(full, h.now, "request timed out", disconnected=True)
    assert isinstance(h.poll(), PollIdle)  # the broker may have read it: still waiting
    assert not h.m.poll_work_pending()
    assert h.m.owned == {IdPartition(T1, 0)}
    h.found()
    h.at(h.hb().until)
    again = h.send()
    assert again.request.topic_partitions == assignment((T1, (0,)))
    h.at(h.now + 10)
    if newer:  # the broker had given t1-1 to another member on the lost one
        h.answer(again, epoch=7, assigned=assignment((T1, (0,))))
        h.poll()
        assert ("assigned", frozenset({TopicPartition("t1", 1)})) not in h.calls
        assert h.m.owned == {IdPartition(T1, 0)}
    else:
        h.answer(again, epoch=6, assigned=assignment((T1, (0, 1))))
        h.poll()
        assert h.m.owned == {IdPartition(T1, 0), IdPartition(T1, 1)}


def test_partitions_being_installed_are_under_the_lease() -> None:
    """Simulation seed 1298 (``--flavor consumer``): the process paused inside its assign
    callback for longer than the session; when it resumed, the core owned nothing yet (the
    reconciliation had not ended), so it fenced itself for "session expired" without ending
    a lease, and the partitions counted as held until the loss was released, after another
    member had them. The partitions a reconciliation installs are under the lease: it has
    a deadline while the callback runs, and running past it ends the lease there."""
    h = Harness()
    h.found()
    h.poll()
    join = h.send()
    h.answer(join, epoch=5, assigned=assignment((T1, (0, 1))))
    h.m.topics_resolved(NAMES, h.now)
    h.m.polled(h.now)
    action = h.m.poll_action(h.now)
    assert isinstance(action, Reconcile)  # the assign callback starts, and runs on
    session = h.m.settings.session_timeout_ms
    assert h.m.valid_until == join.sent_at + session
    h.at(join.sent_at + session + 5_000)  # the process resumes, past its session
    h.hb()
    assert h.state() is S.FENCED
    expired = [f["deadline"] for e, f in h.events if e == "member.lease_expired"]
    assert expired == [join.sent_at + session]
    h.m.reconciled(action, h.now)  # the callback returns
    h.drain()
    assert h.calls[-1] == ("lost", tp("t1", 0, 1))


def test_a_revocation_deadline_runs_from_a_heartbeat_whose_answer_was_lost() -> None:
    """Simulation seed 262 (``--flavor consumer``, with the pickup hold): the broker read a
    heartbeat, dropped t1-1 from the member's target and started the revocation deadline,
    but the answer never arrived; the member learned of the revocation from the answer to
    its next heartbeat. Kafka fences a member that has not revoked by the deadline, which
    ran from the lost heartbeat: the lease must end by then, not a rebalance timeout after
    the heartbeat whose answer the member read."""
    h = Harness(settings={"max_poll_interval_ms": 6_000, "session_timeout_ms": 20_000})
    h.found()
    h.poll()
    h.answer(h.send(), epoch=5, assigned=assignment((T1, (0, 1))), interval=500)
    h.poll()
    ack = h.send()
    h.at(10)
    h.answer(ack, epoch=5, interval=500)
    assert h.m.owned == {IdPartition(T1, 0), IdPartition(T1, 1)}
    action = h.hb()
    assert isinstance(action, HeartbeatWait)
    h.at(action.until)
    lost = h.send()
    h.at(lost.sent_at + 3_000)
    h.m.on_heartbeat_failed(lost, h.now, "request timed out", disconnected=True)
    h.found()
    h.at(max(h.now, h.hb().until))
    again = h.send()
    h.at(h.now + 5)
    h.answer(again, epoch=6, assigned=assignment((T1, (0,))), interval=500)  # drops t1-1
    h.m.polled(h.now)
    assert h.m.valid_until == lost.sent_at + 6_000  # not again.sent_at + 6_000


def test_a_member_holding_nothing_rejoins_once_an_unheard_revoke_is_past_its_deadline() -> None:
    """Simulation consumer seed 11268: a member got partitions it never installed (its
    application did not poll), then a target that took some back. Kafka counts what it
    assigned as owned, so the revocation deadline ran, and the member's heartbeats never
    told the broker it held none of them: the broker fenced it at the deadline and gave the
    partitions on. When the application polled again, after the deadline, the member
    installed the rest of its old target, a partition another member held. Holding
    nothing, it had no lease to end: now it rejoins instead. (Its heartbeats now report
    that it holds nothing, which spares the fencing; here none of them is answered.)"""
    # The rebalance timeout is max_poll_interval_ms; the application's poll() is entered
    # (the poll timer resets) but stuck before it reconciles, as a slow poll is.
    h = Harness(settings={"max_poll_interval_ms": 3_000, "session_timeout_ms": 45_000})
    h.found()
    h.poll()
    h.answer(h.send(), epoch=3, assigned=assignment((T1, (0, 1))), interval=500)
    assert h.state() is S.RECONCILING and not h.m.owned  # not installed: no poll since

    def heartbeat(assigned: tuple[TopicIdPartitions, ...] | None = None) -> SendConsumerHeartbeat:
        action = h.hb()
        while isinstance(action, HeartbeatWait):
            h.at(action.until)
            action = h.hb()
        assert isinstance(action, SendConsumerHeartbeat)
        h.at(h.now + 5)
        h.answer(action, epoch=3, assigned=assigned, interval=500)
        h.m.polled(h.now)
        return action

    revoking = heartbeat(assignment((T1, (0,))))  # t1-1 taken back: the deadline runs
    deadline = revoking.sent_at + 3_000
    while True:  # the heartbeats that would tell the broker all go unanswered
        action = h.hb()
        while isinstance(action, HeartbeatWait) and action.until < deadline:
            h.at(action.until)
            action = h.hb()
        if not isinstance(action, SendConsumerHeartbeat):
            break
        assert action.request.topic_partitions == (), "it says it holds nothing"
        h.at(h.now + 5)
        h.m.on_heartbeat_failed(action, h.now, "timed out", disconnected=False)
        h.m.polled(h.now)
    h.at(deadline)
    h.poll()
    assert h.calls == []  # nothing installed, so nothing lost either
    assert h.state() is S.JOINING
    assert h.send().request.member_epoch == 0


def test_a_revoke_of_partitions_never_installed_is_reported_at_the_next_heartbeat() -> None:
    """A target that takes back partitions the member was given but never installed: the
    member's next heartbeat reports what it holds (nothing), so the broker moves it past the
    revocation at once, and the application's late poll installs the rest (without the
    report Kafka waits for one until the revocation deadline, then fences the member:
    simulation consumer seed 11268)."""
    h = Harness(settings={"max_poll_interval_ms": 3_000, "session_timeout_ms": 45_000})
    h.found()
    h.poll()
    h.answer(h.send(), epoch=3, assigned=assignment((T1, (0, 1))), interval=500)
    h.at(h.hb().until)
    h.answer(h.send(), epoch=3, assigned=assignment((T1, (0,))), interval=500)
    assert h.m._revoke_deadline is not None
    h.m.polled(h.now)
    h.at(h.hb().until)
    report = h.send()
    assert report.request.topic_partitions == ()
    h.answer(report, epoch=3, interval=500)
    assert h.m._revoke_deadline is None
    h.at(h.hb().until)
    assert h.send().request.topic_partitions is None  # once is enough
    h.at(h.now + 3_000)
    h.poll()
    assert h.calls == [("assigned", tp("t1", 0))]
    assert h.state() is S.ACKNOWLEDGING
