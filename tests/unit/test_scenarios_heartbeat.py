"""Spec §12 scenarios C19-C26 (heartbeats), on the sans-I/O core.

The ``Harness`` (tests/unit/conftest.py) plays ``GroupMember._heartbeat_loop``: it asks
``heartbeat_action(now)``, sends what it is told, reports ``on_heartbeat_response`` /
``on_heartbeat_failed``, runs a lookup on ``HeartbeatFindCoordinator`` and sleeps until the
deadline of ``HeartbeatWait``. Times are milliseconds on a fake clock; the member becomes
STABLE at t=0, so its first heartbeat is due at 3000.
"""

from __future__ import annotations

from itertools import pairwise

import pytest

from kgroup._core._embedding import ListenerCall
from kgroup._core._member import (
    CompleteJoin,
    HeartbeatDisabled,
    HeartbeatFindCoordinator,
    HeartbeatWait,
    Idle,
    RaiseFatal,
    SendHeartbeat,
)
from kgroup._core._messages import HeartbeatRequest
from kgroup._core._state import NO_GENERATION, Generation, MemberState
from kgroup._errors import ErrorCode, FencedInstanceId

E = ErrorCode
S = MemberState


def test_c19_cadence_stable_send_to_send(make_harness) -> None:
    """C19. In STABLE, heartbeats go out every 3000 ms, measured send to send."""
    h = make_harness()
    h.stable("X", generation=1, owned=h.tps("t", 0))
    assert isinstance(h.hb(), HeartbeatWait)
    assert h.hb().until == 3_000
    sends = []
    for _ in range(5):
        h.at(h.hb_expect(HeartbeatWait).until)
        sent = h.hb_send()
        sends.append(h.now)
        assert sent.request == HeartbeatRequest(
            group_id="g", generation_id=1, member_id="X", group_instance_id=None
        )
        assert sent.generation == Generation(1, "X", "range")
        assert sent.timeout_ms == 30_000
        h.advance(700)  # a slow response does not push the next heartbeat back
        h.hb_respond(sent)
    assert sends == [3_000, 6_000, 9_000, 12_000, 15_000]


def test_c19_no_heartbeat_while_preparing(make_harness) -> None:
    """C19. In PREPARING_REBALANCE no heartbeat is sent, even if JoinGroup takes 60 s; if
    COMPLETING_REBALANCE lasts longer than one interval (slow SyncGroup), heartbeats are
    sent during it."""
    h = make_harness()
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.at(1_000)
    h.core.request_rejoin("subscription has changed")
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    assert h.state is S.PREPARING_REBALANCE
    log = h.run_heartbeats(until=61_000)
    assert log.sent == []
    assert log.disabled_at == 1_000
    for t in range(1_000, 61_001, 5_000):
        h.at(t)
        assert isinstance(h.hb(), HeartbeatDisabled)
    h.at(61_000)
    sync = h.join_response(
        generation=2, member_id="X", leader="L", protocol_name="range", protocol_type="consumer"
    )
    assert sync is not None
    assert h.state is S.COMPLETING_REBALANCE  # type: ignore[comparison-overlap]
    log = h.run_heartbeats(until=68_000)  # SyncGroup still outstanding
    assert log.send_times == [64_000, 67_000]
    assert {s.request.generation_id for _, s in log.sent} == {2}
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)))
    assert h.state is S.STABLE


def test_c20_rebalance_in_progress_while_stable(make_harness) -> None:
    """C20. REBALANCE_IN_PROGRESS while STABLE: rejoin_needed becomes true, the session timer
    is reset, heartbeats continue, and the next poll() sends JoinGroup."""
    h = make_harness()
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.at(3_000)
    sent = h.hb_send()
    h.at(3_010)
    h.hb_respond(sent, E.REBALANCE_IN_PROGRESS)
    assert h.core.rejoin_needed
    assert h.core.rejoin_reason == "group is already rebalancing"
    assert h.core.timers.session.deadline == 3_010 + 45_000
    assert h.core.timers.attempts == 0
    assert h.state is S.STABLE
    log = h.run_heartbeats(until=9_500, answer=E.REBALANCE_IN_PROGRESS)
    assert log.send_times == [6_000, 9_000]
    assert h.core.timers.session.deadline == 9_000 + 45_000
    h.poll()
    h.prepare(lost=False)
    assert h.send_join().member_id == "X"


def test_c20_rebalance_in_progress_ignored_while_completing(make_harness) -> None:
    """§4.4: REBALANCE_IN_PROGRESS in COMPLETING_REBALANCE is ignored (no extra rejoin), but
    still keeps the session alive."""
    h = make_harness()
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)
    h.send_join()
    h.join_response(generation=1, member_id="X", leader="L", protocol_name="range")
    reason = h.core.rejoin_reason
    h.at(3_000)
    h.hb_respond(h.hb_send(), E.REBALANCE_IN_PROGRESS)
    assert h.core.timers.session.deadline == 48_000
    assert h.core.rejoin_reason == reason  # no new rejoin trigger
    assert h.events_named("member.rejoin_requested") == []
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)))
    assert h.state is S.STABLE
    assert not h.core.rejoin_needed


@pytest.mark.parametrize(
    ("code", "member_id"), [(E.ILLEGAL_GENERATION, "X"), (E.UNKNOWN_MEMBER_ID, "")]
)
def test_c21_heartbeat_illegal_generation(make_harness, code: ErrorCode, member_id: str) -> None:
    """C21. Heartbeat ILLEGAL_GENERATION (current generation): UNJOINED and heartbeats stop;
    the next poll() calls on_partitions_lost (not revoked) with all owned partitions, then
    JoinGroup with the old member id (UNKNOWN_MEMBER_ID: with "")."""
    h = make_harness()
    h.stable("X", generation=7, owned=h.tps("t", 0, 1))
    h.at(3_000)
    h.hb_respond(h.hb_send(), code)
    assert h.state is S.UNJOINED
    assert h.core.generation == Generation(-1, member_id, None)
    assert h.core.rejoin_needed and h.core.needs_join_prepare
    assert isinstance(h.hb(), HeartbeatDisabled)
    h.at(6_000)
    assert isinstance(h.hb(), HeartbeatDisabled)  # no heartbeat once unjoined
    h.poll()
    assert h.prepare(lost=True) == (ListenerCall("on_partitions_lost", h.tps("t", 0, 1)),)
    join = h.send_join()
    assert join.member_id == member_id
    assert join.reason == f"encountered {code.name} from Heartbeat response"


@pytest.mark.parametrize("code", [E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.FENCED_INSTANCE_ID])
def test_c22_stale_heartbeat_error_is_ignored(make_harness, code: ErrorCode) -> None:
    """C22. Given a heartbeat sent under generation 5 whose UNKNOWN_MEMBER_ID arrives after
    the member reached generation 6. Then no reset happens and the member stays STABLE."""
    h = make_harness(group_instance_id="i1" if code == E.FENCED_INSTANCE_ID else None)
    h.stable("X", generation=5, owned=h.tps("t", 0))
    h.at(3_000)
    old = h.hb_send()
    assert old.request.generation_id == 5
    h.core.request_rejoin("group is already rebalancing")
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    h.join_response(generation=6, member_id="X", leader="L", protocol_name="range")
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 1)))
    h.complete()
    assert h.core.generation == Generation(6, "X", "range")
    h.hb_respond(old, code)
    assert h.state is S.STABLE
    assert h.core.generation == Generation(6, "X", "range")
    assert not h.core.rejoin_needed
    assert h.core.fatal is None
    assert [e["error"] for e in h.events_named("member.heartbeat_stale_error")] == [code.name]
    assert isinstance(h.action(), Idle)
    assert not isinstance(h.hb(), HeartbeatDisabled)


@pytest.mark.parametrize("failure", [None, E.COORDINATOR_LOAD_IN_PROGRESS])
def test_c23_failure_speeds_up_next_heartbeat(make_harness, failure: int | None) -> None:
    """C23. Given a heartbeat fails (a disconnect; or a retriable error code). Then the next
    one is attempted ~100 ms later; consecutive failures back off exponentially up to ~1000
    ms; the first success restores the 3000 ms cadence."""
    h = make_harness()
    h.stable("X", generation=1, owned=h.tps("t", 0))

    def answer(now: float, sent: SendHeartbeat) -> int | None:
        return failure if now < 6_500 else E.NONE

    log = h.run_heartbeats(until=13_000, answer=answer, app_polls_every=1_000)
    times = log.send_times
    assert times[0] == 3_000
    gaps = [b - a for a, b in pairwise(times)]
    assert gaps == [100, 200, 400, 800, 1_000, 1_000, 3_000, 3_000]
    assert {s.request.generation_id for _, s in log.sent} == {1}
    assert h.state is S.STABLE
    if failure is None:  # each disconnect forgot the coordinator; it was found again
        assert len(log.lookups) == 6
    else:
        assert log.lookups == []


def test_c24_dropped_heartbeat_responses(make_harness) -> None:
    """C24. Given heartbeat responses are black-holed on a live connection. Then (one
    heartbeat in flight at most) the request times out after request.timeout.ms, the
    coordinator is marked unknown (the runtime closes its connection on the
    member.coordinator_lost event) and FindCoordinator is sent; heartbeats resume in the
    same generation, and no rebalance happens. (The runtime enforces SendHeartbeat.timeout_ms
    and reports on_heartbeat_failed.)"""
    h = make_harness()
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.at(3_000)
    lost = h.hb_send()
    assert lost.timeout_ms == 30_000
    for t in range(3_000, 33_000, 250):
        h.at(t)
        h.poll()
        assert isinstance(h.hb(), HeartbeatWait), t  # never a second heartbeat in flight
    h.at(33_000)
    h.hb_fail("request timed out after 30000 ms")
    assert h.core.coordinator is None
    assert len(h.events_named("member.coordinator_lost")) == 1
    assert isinstance(h.hb(), HeartbeatFindCoordinator)
    h.lookup(node_id=1)
    log = h.run_heartbeats(until=40_000)
    assert log.send_times[:2] == [33_100, 36_100]
    assert all(s.request.generation_id == 1 and s.request.member_id == "X" for _, s in log.sent)
    assert h.state is S.STABLE
    assert not h.core.rejoin_needed
    assert isinstance(h.action(), Idle)


def test_c25_client_side_session_timer(make_harness) -> None:
    """C25. Given every heartbeat fails retriably for longer than session.timeout.ms while
    the coordinator is still known. Then the client marks the coordinator unknown (not a
    leave), keeps its Generation, and rediscovers."""
    h = make_harness()
    h.stable("X", generation=2, owned=h.tps("t", 0))
    log = h.run_heartbeats(
        until=50_000, answer=E.COORDINATOR_LOAD_IN_PROGRESS, app_polls_every=1_000
    )
    assert log.leave is None
    assert log.lookups[0] == 45_000  # session timer armed at t=0 (join) expired
    lost = h.events_named("member.coordinator_lost")
    assert lost[0]["reason"] == "session timed out without receiving a heartbeat response"
    assert h.events_named("member.leaving") == []
    assert h.core.generation == Generation(2, "X", "range")
    assert h.state is S.STABLE
    # kgroup's lease (issue 5): no proof for a whole session, so the assignment lapsed at
    # S + session_timeout = 0 + 45 000; the member keeps its Generation but must rejoin.
    assert [e["deadline"] for e in h.events_named("member.lease_expired")] == [45_000]
    assert h.core.rejoin_needed
    assert len(log.sent) > 40  # it kept trying at the backoff cadence meanwhile
    assert h.core.coordinator is not None  # rediscovered


def test_c26_fenced_instance_id_in_heartbeat(make_harness) -> None:
    """C26. Given a static member gets FENCED_INSTANCE_ID under its current generation. Then
    the next poll() raises FencedInstanceId; a poll() after catching it rejoins and heartbeats
    again (kgroup re-enables its heartbeat driver rather than starting a new task)."""
    h = make_harness(group_instance_id="i1")
    h.stable("X", generation=3, owned=h.tps("t", 0, 1))
    h.at(3_000)
    h.hb_respond(h.hb_send(), E.FENCED_INSTANCE_ID)
    assert h.core.generation == NO_GENERATION
    assert h.state is S.UNJOINED
    assert isinstance(h.hb(), HeartbeatDisabled)
    h.poll()
    fatal = h.expect(RaiseFatal)
    assert isinstance(fatal.error, FencedInstanceId)
    assert (fatal.error.api, fatal.error.member_id, fatal.error.generation_id) == (
        "Heartbeat",
        "X",
        3,
    )
    # Caught; the application polls again.
    h.poll()
    assert h.prepare(lost=True) == (ListenerCall("on_partitions_lost", h.tps("t", 0, 1)),)
    join = h.send_join()
    assert (join.group_instance_id, join.member_id) == ("i1", "")
    h.join_response(generation=4, member_id="Y", leader="L", protocol_name="range")
    assert h.core.heartbeat_enabled
    h.at(6_000)
    assert h.hb_send().request.generation_id == 4


def test_t7_heartbeat_reset_while_sync_in_flight(make_harness) -> None:
    """§2.2 T6/T7, §5.2: a heartbeat sent in COMPLETING_REBALANCE gets ILLEGAL_GENERATION
    while SyncGroup is in flight. The late SyncGroup success must not make the member
    STABLE: it restarts from JoinGroup at once, keeping its member id."""
    h = make_harness()
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)
    h.send_join()
    h.join_response(generation=1, member_id="X", leader="L", protocol_name="range")
    h.at(3_000)
    h.hb_respond(h.hb_send(), E.ILLEGAL_GENERATION)
    assert h.state is S.UNJOINED
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)))
    assert h.state is S.UNJOINED
    assert h.core.generation == Generation(-1, "X", None)
    h.prepare(lost=True)
    assert h.send_join().member_id == "X"  # no CompleteJoin, no Sleep
    assert h.calls == []


def test_join_completion_sanity_check(make_harness) -> None:
    """§2.2 "Join completion sanity check": the heartbeat driver resets the Generation
    between the SyncGroup success and the completion step. The completion is not run; the
    member rejoins."""
    h = make_harness()
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)
    h.send_join()
    h.join_response(generation=1, member_id="X", leader="L", protocol_name="range")
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)))
    assert h.state is S.STABLE
    h.at(3_000)
    h.hb_respond(h.hb_send(), E.UNKNOWN_MEMBER_ID)
    h.prepare(lost=True)
    assert h.send_join().member_id == ""
    assert h.calls == []


def test_join_completion_sanity_check_on_rerun(make_harness) -> None:
    """§2.2 sanity check / §6.1 loop, with B17's pending completion: the poll running the
    completion was interrupted (no join_completed), then the heartbeat driver reset the
    Generation. The next poll must not re-run the completion for the dead generation (no
    assigned callback, nothing installed under it): it releases as lost and rejoins."""
    h = make_harness()
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)
    h.send_join()
    h.join_response(generation=1, member_id="X", leader="L", protocol_name="range")
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)))
    h.expect(CompleteJoin)  # the runtime's poll is cancelled before join_completed()
    h.at(3_000)
    h.hb_respond(h.hb_send(), E.ILLEGAL_GENERATION)
    assert h.state is S.UNJOINED
    h.poll()
    h.prepare(lost=True)
    assert h.send_join().member_id == "X"
    assert h.calls == []


def test_fatal_heartbeat_error_in_generation_resumes_heartbeats_after_poll(make_harness) -> None:
    """§4.4 DEVIATION: GROUP_AUTHORIZATION_FAILED on a heartbeat is fatal at the next poll,
    but the member keeps its generation. Once poll() has raised it, heartbeats resume, so a
    caller that catches the error and polls on is not silently evicted."""
    from kgroup._errors import GroupAuthorizationFailed

    h = make_harness()
    h.stable("X", generation=3, owned=h.tps("t", 0))
    h.at(3_000)
    h.hb_respond(h.hb_send(), E.GROUP_AUTHORIZATION_FAILED)
    assert isinstance(h.hb(), HeartbeatDisabled)
    assert h.state is S.STABLE
    h.poll()
    assert isinstance(h.expect(RaiseFatal).error, GroupAuthorizationFailed)
    assert h.core.heartbeat_enabled
    h.at(10_000)
    assert h.hb_send().request.generation_id == 3
