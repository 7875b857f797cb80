"""Spec §12 scenarios D27-D29 (poll timer) and E30-E33 (coordinator moves, restarts and
partitions), on the sans-I/O core.

The ``Harness`` (tests/unit/conftest.py) plays both runtime drivers on a fake clock in
milliseconds; the member becomes STABLE at t=0. kgroup has no offset commits, so the
commit parts of D27 and E32 are not asserted (noted where they occur).
"""

from __future__ import annotations

import pytest

from kgroup._core._embedding import ListenerCall
from kgroup._core._member import (
    FindCoordinator,
    HeartbeatDisabled,
    Idle,
    PrepareJoin,
    SendHeartbeat,
    Sleep,
)
from kgroup._core._messages import LeaveGroupRequest
from kgroup._core._state import NO_GENERATION, Generation, MemberState
from kgroup._errors import ErrorCode

E = ErrorCode
S = MemberState


# --- D. Poll timer / slow processing ----------------------------------------------------------


def test_d27_slow_processing_dynamic_member(make_harness) -> None:
    """D27. Given max.poll.interval.ms=10000 and no poll for 11 s. Then at about 10 s the
    client sends LeaveGroup (reason "consumer poll timeout has expired."), its Generation is
    reset and heartbeats stop; the next poll() fires on_partitions_lost and rejoins with
    member_id=""."""
    h = make_harness(max_poll_interval_ms=10_000)
    h.stable("X", generation=1, owned=h.tps("t", 0, 1))
    log = h.run_heartbeats(until=11_000)  # the app does not poll
    assert log.send_times == [3_000, 6_000, 9_000]  # heartbeats were healthy meanwhile
    assert log.leave is not None
    assert h.now == 10_000
    assert log.leave.leave == LeaveGroupRequest(
        group_id="g",
        member_id="X",
        group_instance_id=None,
        reason="consumer poll timeout has expired.",
    )
    assert h.events_named("member.poll_timeout") == [
        {"group": "g", "member_id": "X", "generation": 1, "max_poll_interval_ms": 10_000}
    ]
    assert h.core.generation == NO_GENERATION
    assert h.state is S.UNJOINED
    assert isinstance(h.hb(), HeartbeatDisabled)
    h.at(11_000)
    assert isinstance(h.hb(), HeartbeatDisabled)
    # (commitSync of the old partitions failing with CommitFailed: kgroup has no commits.)
    h.poll()
    assert h.prepare(lost=True) == (ListenerCall("on_partitions_lost", h.tps("t", 0, 1)),)
    join = h.send_join()
    assert join.member_id == ""
    assert join.reason == "consumer poll timeout has expired."


def test_d28_slow_processing_static_member(make_harness) -> None:
    """D28. Same as D27 with group.instance.id=i1: no LeaveGroup, heartbeats stop; polling
    again rejoins with instance id i1 and member id "". (Getting the previous assignment
    back without a rebalance is the broker's part.)"""
    h = make_harness(max_poll_interval_ms=10_000, group_instance_id="i1")
    h.stable("X", generation=1, owned=h.tps("t", 0, 1))
    log = h.run_heartbeats(until=11_000)
    assert log.leave is not None
    assert log.leave.leave is None
    assert h.now == 10_000
    assert [e["send_leave_group"] for e in h.events_named("member.leaving")] == [False]
    assert h.core.generation == NO_GENERATION
    assert isinstance(h.hb(), HeartbeatDisabled)
    h.at(11_000)
    h.poll()
    h.prepare(lost=True)
    join = h.send_join()
    assert (join.group_instance_id, join.member_id) == ("i1", "")


def test_d29_poll_timer_reset_while_coordinator_unknown(make_harness) -> None:
    """D29. Given the coordinator is unreachable for 2 x max.poll.interval.ms while the app
    polls continuously. Then no poll-timeout LeaveGroup is produced once it returns."""
    h = make_harness(max_poll_interval_ms=60_000)
    h.stable("X", generation=1, owned=h.tps("t", 0))
    back_at = 3_000 + 2 * 60_000

    def answer(now: float, sent: SendHeartbeat) -> int | None:
        return None if now < back_at else E.NONE  # the first heartbeat hits the outage

    def lookup(now: float) -> int | None:
        return None if now < back_at else 1

    log = h.run_heartbeats(
        until=back_at + 10_000, answer=answer, lookup=lookup, app_polls_every=500
    )
    assert log.leave is None
    assert h.events_named("member.leaving") == []
    assert h.events_named("member.poll_timeout") == []
    assert log.send_times[0] == 3_000
    resumed = [t for t in log.send_times if t >= back_at]
    assert resumed and resumed[0] - back_at < 1_100  # found again within one lookup backoff
    assert h.state is S.STABLE
    assert h.core.generation == Generation(1, "X", "range")
    # kgroup's lease (issue 5): the outage outlived the session, so the assignment lapsed at
    # S + session_timeout (S = 0, the SyncGroup) and is released as lost before a rejoin.
    assert [e["deadline"] for e in h.events_named("member.lease_expired")] == [45_000]
    assert h.action() == PrepareJoin(lost=True, generation=h.core.generation, lease_expired=True)


def test_d29_without_polls_the_poll_timer_does_expire(make_harness) -> None:
    """D29 (control). The same outage without application polls: once the coordinator is
    back, the expired poll timer makes the member leave."""
    h = make_harness(max_poll_interval_ms=60_000)
    h.stable("X", generation=1, owned=h.tps("t", 0))
    back_at = 3_000 + 2 * 60_000
    log = h.run_heartbeats(
        until=back_at + 10_000,
        answer=lambda now, sent: None if now < back_at else E.NONE,
        lookup=lambda now: None if now < back_at else 1,
    )
    assert log.leave is not None
    assert h.now >= back_at


# --- E. Coordinator moves, broker restart, partitions ----------------------------------------


def test_e30_coordinator_moves_while_stable(make_harness) -> None:
    """E30. Given heartbeats start returning NOT_COORDINATOR and FindCoordinator now returns
    broker 2. Then heartbeats continue against broker 2 with the same generation and member
    id; no JoinGroup and no callbacks."""
    h = make_harness()
    h.stable("X", generation=4, owned=h.tps("t", 0, 1))
    calls = list(h.calls)
    h.at(3_000)
    h.hb_respond(h.hb_send(), E.NOT_COORDINATOR)
    assert h.core.coordinator is None
    assert [e["node_id"] for e in h.events_named("member.coordinator_lost")] == [1]
    log = h.run_heartbeats(until=10_000, lookup=2, app_polls_every=1_000)
    assert log.lookups == [3_000]
    assert h.core.coordinator is not None and h.core.coordinator.node_id == 2
    assert log.send_times == [3_100, 6_100, 9_100]
    for _, sent in log.sent:
        assert (sent.request.generation_id, sent.request.member_id) == (4, "X")
    assert h.state is S.STABLE
    assert isinstance(h.action(), Idle)
    assert h.calls == calls
    assert h.joins == [h.joins[0]]  # only the initial JoinGroup


def test_e31_coordinator_restart_with_reload(make_harness) -> None:
    """E31. Given the coordinator restarts and the new one answers COORDINATOR_LOAD_IN_PROGRESS
    to JoinGroup and heartbeats for 5 s. Then the client keeps retrying with backoff and
    completes without a fatal error."""
    h = make_harness()
    h.stable("X", generation=1, owned=h.tps("t", 0))
    # Heartbeats: the restart closes the connection, then 5 s of LOAD_IN_PROGRESS.
    h.at(3_000)
    h.hb_fail("connection closed")
    loaded_at = 3_000 + 5_000

    def answer(now: float, sent: SendHeartbeat) -> int:
        return E.COORDINATOR_LOAD_IN_PROGRESS if now < loaded_at else E.NONE

    log = h.run_heartbeats(until=15_000, answer=answer, app_polls_every=1_000)
    assert h.core.fatal is None
    assert h.state is S.STABLE and not h.core.rejoin_needed
    assert log.send_times[0] == 3_100
    assert max(t for t in log.send_times if t < loaded_at) > loaded_at - 1_100
    after = [t for t in log.send_times if t >= loaded_at]
    assert after[1] - after[0] == 3_000  # back to the normal cadence

    # JoinGroup: a rejoin during the reload retries every retry.backoff.ms until loaded.
    h.core.request_rejoin("group is already rebalancing")
    h.poll()
    h.prepare(lost=False)
    start = h.now
    attempts = []
    while True:
        attempts.append(h.now)
        assert h.send_join().member_id == "X"
        if h.now >= start + 5_000:
            break
        h.join_response(E.COORDINATOR_LOAD_IN_PROGRESS)
        sleep = h.expect(Sleep)
        assert sleep.until == h.now + 100
        h.at(sleep.until)
    assert len(attempts) == 51
    h.join_response(generation=2, member_id="X", leader="L", protocol_name="range")
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)))
    h.complete()
    assert h.state is S.STABLE
    assert h.core.generation == Generation(2, "X", "range")
    assert h.core.fatal is None
    assert not any(isinstance(a, FindCoordinator) for a in h.actions[-len(attempts) * 2 :])


@pytest.mark.parametrize(
    ("code", "member_id"), [(E.UNKNOWN_MEMBER_ID, ""), (E.ILLEGAL_GENERATION, "X")]
)
def test_e32_session_expiry_while_partitioned(make_harness, code: int, member_id: str) -> None:
    """E32. Given the client is partitioned from all brokers for 60 s (> 45 s session) and the
    broker evicted it. When connectivity returns, the first heartbeat gets UNKNOWN_MEMBER_ID
    (or ILLEGAL_GENERATION); the client fires on_partitions_lost (not revoked) and rejoins as
    a new member; it never owns partitions under the newer generation. (Commits: none in
    kgroup.)"""
    h = make_harness()
    h.stable("X", generation=1, owned=h.tps("t", 0, 1))
    back_at = 3_000 + 60_000

    def answer(now: float, sent: SendHeartbeat) -> int | None:
        return None if now < back_at else code

    log = h.run_heartbeats(
        until=back_at + 10_000,
        answer=answer,
        lookup=lambda now: None if now < back_at else 1,
        app_polls_every=1_000,
    )
    assert log.disabled_at is not None
    assert log.send_times[0] == 3_000
    first_back = [t for t in log.send_times if t >= back_at]
    assert len(first_back) == 1  # the first heartbeat after the partition got the error
    assert h.state is S.UNJOINED
    assert h.core.generation == Generation(-1, member_id, None)
    assert h.events_named("member.leaving") == []
    h.poll()
    assert isinstance(h.action(), PrepareJoin)
    assert h.embedding.prepare(lost=True) == (ListenerCall("on_partitions_lost", h.tps("t", 0, 1)),)
    assert h.embedding.owned == frozenset()
    assert h.send_join().member_id == member_id


def test_e33_pending_member_id_required_expiry(make_harness) -> None:
    """E33. Given MEMBER_ID_REQUIRED and a second JoinGroup lost for longer than the session
    timeout. Then the eventual retry gets UNKNOWN_MEMBER_ID and the client restarts with
    member_id="". (The runtime times the lost request out after SendJoinGroup.timeout_ms.)"""
    h = make_harness()
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)
    h.send_join()
    h.join_response(E.MEMBER_ID_REQUIRED, member_id="X")
    assert h.send_join().member_id == "X"
    timeout = h.last_join.timeout_ms
    assert timeout > h.config.session_timeout_ms
    h.advance(timeout)
    h.core.on_join_failed(h.now, "request timed out")
    h.find_coordinator()
    h.at(h.expect(Sleep).until)
    assert h.send_join().member_id == "X"
    h.join_response(E.UNKNOWN_MEMBER_ID)
    assert h.core.generation == NO_GENERATION
    assert h.prepare(lost=True) == ()
    retry = h.send_join()
    assert retry.member_id == ""
    h.join_response(E.MEMBER_ID_REQUIRED, member_id="Y")
    assert h.send_join().member_id == "Y"
