"""The member lease (issue 5): ``MemberCore.valid_until`` and ``member.lease_expired``.

``valid_until = min(S + session_timeout, N + rebalance_timeout, poll_deadline)`` where S is
the send time of the latest answer proving a session refresh (Heartbeat NONE /
REBALANCE_IN_PROGRESS, SyncGroup success), N the send time of the latest answer proving the
coordinator was not rebalancing (Heartbeat NONE sent while STABLE, SyncGroup success). See
the module docstring of ``kgroup/_core/_member.py``.

The Harness joins at t=0 with a SyncGroup sent at t=0, so S = N = 0 right after ``stable()``.
Most tests use ``leased()``, a Harness whose core is told what the embedding holds, as the
runtime does (``holds_assignment=lambda: bool(embedding.owned)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kgroup._core._embedding import ListenerCall
from kgroup._core._lease import SESSION_TIMED_OUT
from kgroup._core._member import (
    AwaitJoin,
    AwaitLeaseProof,
    ComputeAssignment,
    FindCoordinator,
    HeartbeatDisabled,
    HeartbeatFindCoordinator,
    HeartbeatWait,
    Idle,
    MemberCore,
    PollTimeoutLeave,
    PrepareJoin,
    SendHeartbeat,
    SendJoinGroup,
    SendSyncGroup,
    Sleep,
)
from kgroup._core._messages import HeartbeatResponse, JoinGroupResponse
from kgroup._core._state import Generation, MemberState
from kgroup._errors import ErrorCode

E = ErrorCode
S = MemberState

SESSION = 45_000
REBALANCE = 300_000


def leased(make_harness: Callable[..., Any], **config: Any) -> Any:
    """A Harness whose core asks the embedding whether partitions are held (the runtime's
    wiring), instead of the default CompleteJoin..PrepareJoin approximation."""
    h = make_harness(**config)
    h.core = MemberCore(
        h.config,
        protocol_type=h.embedding.protocol_type,
        protocols=h.embedding.metadata,
        now=h.now,
        observer=h._observe,
        uniform=h._uniform,
        holds_assignment=lambda: bool(h.embedding.owned),
    )
    return h


def expirations(h: Any) -> list[float]:
    return [e["deadline"] for e in h.events_named("member.lease_expired")]


# --- the deadline -------------------------------------------------------------------------------


def test_no_lease_before_an_assignment(make_harness) -> None:
    h = leased(make_harness)
    assert h.core.valid_until is None
    h.stable("X", generation=1, owned=())  # an empty assignment holds nothing
    assert h.core.valid_until is None
    h.run_heartbeats(until=10 * SESSION, answer=E.COORDINATOR_LOAD_IN_PROGRESS)
    assert expirations(h) == []


def test_join_and_sync_start_the_lease(make_harness) -> None:
    h = leased(make_harness)
    h.stable("X", generation=1, owned=h.tps("t", 0))
    assert (h.core.lease.session_proof, h.core.lease.rebalance_proof) == (0, 0)
    assert h.core.valid_until == SESSION  # min(0 + 45 000, 0 + 300 000, poll 300 000)


def test_heartbeat_proof_counts_from_the_send_time_not_the_answer(make_harness) -> None:
    h = leased(make_harness)
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.at(3_000)
    sent = h.hb_send()
    h.at(9_000)  # a slow answer: the broker refreshed the session somewhere in 3 000..9 000
    h.hb_respond(sent)
    assert (h.core.lease.session_proof, h.core.lease.rebalance_proof) == (3_000, 3_000)
    assert h.core.valid_until == 3_000 + SESSION


def test_rebalance_in_progress_proves_the_session_only(make_harness) -> None:
    """Heartbeats answered REBALANCE_IN_PROGRESS keep the session alive, but a rebalance
    started: the coordinator drops us N + rebalance_timeout after the last NONE at the
    earliest, so the lease ends there even while every heartbeat succeeds."""
    h = leased(
        make_harness,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=3_000,
        max_poll_interval_ms=20_000,
    )
    h.stable("X", generation=1, owned=h.tps("t", 0, 1))
    h.run_heartbeats(until=6_001)  # NONE at 3 000 and 6 000
    assert h.core.valid_until == min(6_000 + 10_000, 6_000 + 20_000, 20_000)
    log = h.run_heartbeats(until=40_000, answer=E.REBALANCE_IN_PROGRESS, app_polls_every=1_000)
    assert log.leave is None  # the app polls; only the rebalance bound applies
    assert h.core.lease.rebalance_proof == 6_000
    assert h.core.lease.session_proof is not None and h.core.lease.session_proof > 20_000
    assert expirations(h) == [6_000 + 20_000]


def test_heartbeat_answered_none_while_completing_does_not_prove_no_rebalance(
    make_harness, coop_assignor
) -> None:
    """The coordinator's pending-sync timer started before a heartbeat sent in
    COMPLETING_REBALANCE, so NONE then proves the session only."""
    h = leased(make_harness, assignors=(coop_assignor,))
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.core.request_rejoin("test")
    h.at(1_000)
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    h.join_response(
        generation=2,
        member_id="X",
        leader="L",
        protocol_name="coop-range",
        protocol_type="consumer",
    )
    assert h.state is S.COMPLETING_REBALANCE
    h.at(h.hb_expect(HeartbeatWait).until)
    sent = h.hb_send()
    h.hb_respond(sent)
    assert h.core.lease.session_proof == 4_000
    assert h.core.lease.rebalance_proof == 0  # still the SyncGroup of generation 1


def test_stale_heartbeat_answer_proves_nothing(make_harness) -> None:
    h = leased(make_harness)
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.at(3_000)
    sent = h.hb_send()
    stale = Generation(0, "X", "range")
    h.core.on_heartbeat_response(stale, HeartbeatResponse(error_code=E.NONE), h.now)
    assert h.core.lease.session_proof == 0
    h.hb_respond(sent)  # the record was consumed by the stale answer: still no proof
    assert h.core.lease.session_proof == 0


def test_poll_deadline_bounds_the_lease(make_harness) -> None:
    """A dynamic member that stops polling leaves at the poll deadline: the lease ends
    there first, then the poll-timeout leave runs; one lost callback at the next poll."""
    h = leased(make_harness, max_poll_interval_ms=20_000, session_timeout_ms=10_000)
    h.stable("X", generation=1, owned=h.tps("t", 0))
    log = h.run_heartbeats(until=60_000)
    assert log.leave is not None and log.leave.leave is not None
    assert h.now == 20_000
    assert expirations(h) == [20_000]
    h.poll()
    assert h.prepare(lost=True) == (ListenerCall("on_partitions_lost", h.tps("t", 0)),)
    assert h.send_join().member_id == ""  # the poll-timeout leave reset the member id


# --- expiry -------------------------------------------------------------------------------------


def test_expiry_releases_as_lost_and_rejoins_with_the_same_member_id(make_harness) -> None:
    h = leased(make_harness)
    h.stable("X", generation=3, owned=h.tps("t", 0, 1))
    log = h.run_heartbeats(until=SESSION + 500, answer=None, lookup=None)
    assert log.leave is None
    [event] = h.events_named("member.lease_expired")
    assert event["deadline"] == SESSION
    assert event["session_deadline"] == SESSION
    assert event["rebalance_deadline"] == REBALANCE
    assert h.core.valid_until == SESSION  # the lapsed deadline, until released
    assert h.core.generation == Generation(3, "X", "range")  # nothing reset
    assert h.core.rejoin_needed
    h.poll()
    action = h.expect(PrepareJoin)
    assert (action.lost, action.lease_expired) == (True, True)
    assert h.embedding.prepare(lost=True) == (ListenerCall("on_partitions_lost", h.tps("t", 0, 1)),)
    assert h.core.valid_until is None
    h.lookup(1)
    join = h.send_join()  # the release was this rebalance's pre-join hook: no second one
    assert join.member_id == "X"
    assert len(expirations(h)) == 1


def test_late_answer_does_not_revive_a_lapsed_lease(make_harness) -> None:
    h = leased(make_harness)
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.at(3_000)
    sent = h.hb_send()
    h.at(SESSION + 2_000)  # the answer would prove 3 000 + 45 000 > now, but arrives late
    h.hb_respond(sent)
    assert expirations(h) == [SESSION]
    assert h.core.valid_until == SESSION


def test_late_poll_does_not_revive_a_lapsed_lease(make_harness) -> None:
    h = leased(make_harness, max_poll_interval_ms=20_000, session_timeout_ms=10_000)
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.at(25_000)  # the heartbeat driver never ran (a paused process)
    h.poll()
    assert expirations(h) == [10_000]  # S + session came first


def test_heartbeat_driver_wakes_at_the_deadline(make_harness) -> None:
    h = leased(make_harness, heartbeat_interval_ms=3_000, session_timeout_ms=10_000)
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.at(3_000)
    h.hb_send()  # never answered
    assert h.hb_expect(HeartbeatWait).until == 3_100  # in flight: poll again after backoff
    h.core.on_heartbeat_failed(9_900, "timeout")
    h.at(9_900)
    assert h.hb().until == 10_000  # the lease deadline is the next wake-up
    h.at(10_000)
    assert isinstance(h.hb(), HeartbeatWait | HeartbeatFindCoordinator)
    assert expirations(h) == [10_000]


def lost_reasons(h: Any) -> list[str]:
    return [e["reason"] for e in h.events_named("member.coordinator_lost")]


def test_session_bound_expiry_applies_the_session_timer_at_once(make_harness) -> None:
    """C25 with a round trip: the last heartbeat answered NONE was sent at 3 000 and received
    at 3 050, then every heartbeat fails retriably. The lease ends at 3 000 + session, one
    round trip before the client-side session timer (3 050 + session). Whichever task
    checks the lease first (here the application's poll, which goes on to rejoin and
    disables heartbeats), the coordinator is marked unknown for the session at that moment;
    otherwise the rejoin could go to a coordinator that stopped answering, unnoticed."""
    h = leased(make_harness, heartbeat_interval_ms=3_000)
    h.stable("X", generation=2, owned=h.tps("t", 0))
    h.at(3_000)
    sent = h.hb_send()
    h.at(3_050)
    h.hb_respond(sent)
    for t in range(6_000, SESSION + 3_000, 3_000):
        h.at(t)
        h.hb_respond(h.hb_send(), E.COORDINATOR_LOAD_IN_PROGRESS)
    assert h.core.timers.session.deadline == 3_050 + SESSION
    h.at(3_000 + SESSION)
    h.poll()
    assert expirations(h) == [3_000 + SESSION]
    assert lost_reasons(h) == [SESSION_TIMED_OUT]
    assert h.core.coordinator is None
    assert h.core.generation == Generation(2, "X", "range")  # not a leave, not a reset
    assert h.expect(PrepareJoin).lost
    h.embedding.prepare(lost=True)
    assert isinstance(h.action(), FindCoordinator)  # rediscovery before the rejoin
    h.at(3_050 + SESSION)
    h.hb()  # the heartbeat driver's own session check finds nothing left to do
    assert len(lost_reasons(h)) == 1


def test_other_lease_bounds_leave_the_coordinator_known(make_harness) -> None:
    """The poll bound (and the rebalance bound) say nothing about the coordinator."""
    h = leased(make_harness, max_poll_interval_ms=20_000, session_timeout_ms=30_000)
    h.stable("X", generation=1, owned=h.tps("t", 0))
    log = h.run_heartbeats(until=60_000)
    assert log.leave is not None
    assert expirations(h) == [20_000]
    assert lost_reasons(h) == []


def test_session_bound_expiry_while_rejoining_is_only_the_lease(
    make_harness, coop_assignor
) -> None:
    """A cooperative member holds its partitions through a rejoin while its heartbeats are
    disabled: the session timer does not run then, so the lease's end does not mark the
    coordinator unknown (the JoinGroup in flight answers for the coordinator)."""
    h = leased(make_harness, assignors=(coop_assignor,))
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.core.request_rejoin("test")
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    assert h.state is S.PREPARING_REBALANCE
    h.at(SESSION)
    h.poll()
    assert expirations(h) == [SESSION]
    assert lost_reasons(h) == []


def test_disabled_heartbeat_driver_still_wakes_for_the_lease(make_harness) -> None:
    """After ILLEGAL_GENERATION the member is UNJOINED but holds its partitions until the
    next poll: the parked heartbeat driver must still wake at the lease deadline."""
    h = leased(make_harness)
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.at(3_000)
    h.hb_respond(h.hb_send(), E.ILLEGAL_GENERATION)
    assert h.hb_expect(HeartbeatDisabled).until == SESSION  # S = 0 (the answer proved nothing)
    h.at(SESSION)
    assert h.hb_expect(HeartbeatDisabled).until is None
    assert expirations(h) == [SESSION]
    h.poll()
    assert h.expect(PrepareJoin) == PrepareJoin(
        lost=True, generation=Generation(-1, "X", None), lease_expired=True
    )


def test_default_holding_is_completejoin_to_preparejoin(make_harness) -> None:
    """Without holds_assignment the core counts the assignment held from CompleteJoin to
    the next PrepareJoin (exact for EAGER)."""
    h = make_harness(runtime_holding=False)
    assert h.core.valid_until is None
    h.stable("X", generation=1, owned=())
    assert h.core.valid_until == SESSION
    h.core.request_rejoin("test")
    h.poll()
    h.prepare(lost=False)
    assert h.core.valid_until is None


# --- chains in flight (COOPERATIVE members hold partitions while rejoining) ----------------------


def prove_with_a_heartbeat(h: Any) -> None:
    """AwaitLeaseProof: the heartbeat is due at once; answer it NONE."""
    action = h.expect(AwaitLeaseProof)
    assert action.until == h.now + 100  # a Sleep subclass: retry-backoff polling fallback
    assert h.events_named("member.lease_proof_needed")
    sent = h.hb_send()
    h.advance(2)
    h.hb_respond(sent)
    assert h.events_named("member.lease_renewed")


def test_expiry_during_a_join_releases_before_the_completion(make_harness, coop_assignor) -> None:
    h = leased(
        make_harness,
        assignors=(coop_assignor,),
        session_timeout_ms=10_000,
        heartbeat_interval_ms=3_000,
    )
    h.stable("X", generation=1, owned=h.tps("t", 0, 1))
    h.core.request_rejoin("test")
    h.poll()
    assert h.prepare(lost=False) == ()  # cooperative: kept
    h.send_join()
    h.at(10_000)  # the JoinGroup is parked at the coordinator; no heartbeats meanwhile
    assert h.hb_expect(HeartbeatDisabled).until is None  # noticed now
    assert expirations(h) == [10_000]
    action = h.expect(PrepareJoin)  # released at once, the chain stays in flight
    assert (action.lost, action.lease_expired) == (True, True)
    assert h.embedding.prepare(lost=True) == (ListenerCall("on_partitions_lost", h.tps("t", 0, 1)),)
    assert isinstance(h.action(), AwaitJoin)
    sync = h.join_response(
        generation=2,
        member_id="X",
        leader="L",
        protocol_name="coop-range",
        protocol_type="consumer",
    )
    assert isinstance(sync, SendSyncGroup)
    assert h.core.lease.session_proof == 0  # the JoinGroup was sent at 0
    h.at(10_500)
    h.sync_response(
        assignment=h.assignment_bytes(h.tps("t", 0, 1)),
        protocol_type="consumer",
        protocol_name="coop-range",
    )
    assert h.core.lease.rebalance_proof == 10_000  # the SyncGroup, sent at 10 000
    # 0 + 10 000 has passed: the new assignment waits for a heartbeat's proof.
    prove_with_a_heartbeat(h)
    completion = h.complete()
    assert completion.calls == (ListenerCall("on_partitions_assigned", h.tps("t", 0, 1)),)
    assert h.core.valid_until == 10_500 + 10_000
    assert isinstance(h.action(), Idle)


def test_expiry_between_sync_and_completion(make_harness, coop_assignor) -> None:
    """The SyncGroup answer arrives after the old lease lapsed: the old partitions are
    released as lost first, then (after a fresh proof) the completion assigns everything."""
    h = leased(
        make_harness,
        assignors=(coop_assignor,),
        session_timeout_ms=10_000,
        heartbeat_interval_ms=3_000,
    )
    h.stable("X", generation=1, owned=h.tps("t", 0, 1))
    h.core.request_rejoin("test")
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    h.at(2_000)
    h.join_response(
        generation=2,
        member_id="X",
        leader="L",
        protocol_name="coop-range",
        protocol_type="consumer",
    )
    h.at(10_001)
    h.sync_response(
        assignment=h.assignment_bytes(h.tps("t", 1, 2)),
        protocol_type="consumer",
        protocol_name="coop-range",
    )
    assert expirations(h) == [10_000]
    assert h.expect(PrepareJoin).lease_expired
    h.embedding.prepare(lost=True)
    prove_with_a_heartbeat(h)
    completion = h.complete()
    assert completion.calls == (ListenerCall("on_partitions_assigned", h.tps("t", 1, 2)),)
    assert h.core.valid_until == 10_001 + 10_000


def test_long_join_barrier_waits_for_a_proof(make_harness) -> None:
    """The join barrier took longer than the session: the assignment is installed only
    once a heartbeat proves the session; an ILLEGAL_GENERATION instead means it never is."""
    h = leased(make_harness, session_timeout_ms=10_000, heartbeat_interval_ms=3_000)
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)
    h.send_join()
    h.at(12_000)
    h.join_response(
        generation=1, member_id="X", leader="L", protocol_name="range", protocol_type="consumer"
    )
    h.sync_response(
        assignment=h.assignment_bytes(h.tps("t", 0)),
        protocol_type="consumer",
        protocol_name="range",
    )
    h.expect(AwaitLeaseProof)
    h.hb_respond(h.hb_send(), E.ILLEGAL_GENERATION)
    assert h.core.generation == Generation(-1, "X", None)
    assert h.expect(PrepareJoin).lost  # the synced assignment was never installed
    assert h.embedding.owned == frozenset()
    assert h.calls == []


def test_leader_sync_send_time(make_harness) -> None:
    """The leader's SyncGroup proves no rebalance from the time given to
    assignment_computed (else from the JoinGroup answer, earlier, so conservative); the
    session proof is the JoinGroup's send time, never the SyncGroup's."""
    h = leased(make_harness)
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)  # the first join: no Generation yet
    h.send_join()
    h.at(1_000)
    step = h.core.on_join_response(
        JoinGroupResponse(
            error_code=E.NONE,
            generation_id=1,
            protocol_type="consumer",
            protocol_name="range",
            leader="X",
            member_id="X",
            members=(h.member_entry("X", ["t"]),),
        ),
        h.now,
    )
    assert isinstance(step, ComputeAssignment)
    h.at(1_700)
    sync = h.core.assignment_computed({"X": h.assignment_bytes(h.tps("t", 0))}, h.now)
    assert isinstance(sync, SendSyncGroup)
    h.sync_response(
        assignment=h.assignment_bytes(h.tps("t", 0)),
        protocol_type="consumer",
        protocol_name="range",
    )
    h.complete()
    assert h.core.lease.rebalance_proof == 1_700
    assert h.core.lease.session_proof == 0


@pytest.mark.parametrize("code", [E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION])
def test_reset_then_lease_expiry_releases_once(make_harness, code: int) -> None:
    """A reset (lost at the next poll) and a lapsed lease before that poll: one release."""
    h = leased(make_harness)
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.at(3_000)
    h.hb_respond(h.hb_send(), code)
    h.at(SESSION + 1)
    h.poll()
    before = len(h.actions)
    assert h.expect(PrepareJoin).lost
    h.embedding.prepare(lost=True)
    if h.core.coordinator is None:
        h.lookup(1)
    assert isinstance(h.action(), SendJoinGroup)
    assert [type(c).__name__ for c in h.actions[before:]].count("PrepareJoin") == 1


def test_poll_timeout_leave_still_sent(make_harness) -> None:
    h = leased(
        make_harness,
        max_poll_interval_ms=20_000,
        session_timeout_ms=30_000,
        heartbeat_interval_ms=3_000,
    )
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.run_heartbeats(until=19_999)
    h.at(20_000)
    action = h.hb()
    assert isinstance(action, PollTimeoutLeave) and action.leave is not None
    assert expirations(h) == [20_000]


def _join_held_for(h: Any, held_ms: float) -> None:
    """Join as a follower whose JoinGroup the broker held for ``held_ms`` (it waited out
    a crashed member), then sync and install one partition."""
    h.poll()
    while True:
        action = h.action()
        if isinstance(action, FindCoordinator):
            h.lookup(1)
        elif isinstance(action, PrepareJoin):
            h.embedding.prepare(lost=action.lost)
        elif isinstance(action, Sleep):
            h.at(action.until)
        elif isinstance(action, SendJoinGroup):
            break
    h.advance(held_ms)
    h.join_response(
        generation=1, member_id="m-1", leader="l", protocol_name="range", protocol_type="consumer"
    )
    h.sync_response(
        assignment=h.assignment_bytes(h.tps("t", 0)),
        protocol_type="consumer",
        protocol_name="range",
    )
    h.complete()


def test_a_join_that_took_most_of_the_session_renews_the_lease_at_once(make_harness) -> None:
    """Found by the records consumer's crash test: the only session proof after a long join
    is the JoinGroup's send time, so the lease ran out 0.2 s after the sync, before the first
    heartbeat (due one interval later). A heartbeat goes out at once instead; its answer
    renews the lease, and the cadence is normal again afterwards."""
    h = make_harness(session_timeout_ms=6_000, heartbeat_interval_ms=500)
    _join_held_for(h, 5_800)
    joined_at = h.now
    assert h.core.valid_until is not None and h.core.valid_until <= 6_000
    beat = h.hb_expect(SendHeartbeat)
    h.advance(5)
    h.hb_respond(beat)
    assert h.core.valid_until == joined_at + 6_000  # proof: that heartbeat's send time
    wait = h.hb_expect(HeartbeatWait)
    assert wait.until == joined_at + 500  # back to the normal interval
    h.at(6_500)
    assert not h.core.check_lease(h.now)


def test_no_early_heartbeat_after_a_quick_join(make_harness) -> None:
    h = make_harness(session_timeout_ms=6_000, heartbeat_interval_ms=500)
    _join_held_for(h, 100)
    wait = h.hb_expect(HeartbeatWait)
    assert wait.until == h.now + 500
