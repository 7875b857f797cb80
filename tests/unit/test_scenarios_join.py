"""Spec §12 scenarios A1-A13 (discovery and join) and B14-B17 (sync phase), on the core.

Each test drives :class:`MemberCore` through the ``Harness`` (tests/unit/conftest.py), which
executes the core's actions the way ``kgroup/_runtime/_member.py`` does, and asserts the
exact requests the core asks to send and the state/Generation after each step. Where a
scenario names runtime behaviour (closing a connection, enforcing a request timeout,
refreshing metadata), the test checks the core's part of it and says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kgroup._core._consumer_protocol import Assignment, Subscription
from kgroup._core._embedding import ListenerCall
from kgroup._core._member import (
    AwaitJoin,
    CompleteJoin,
    FindCoordinator,
    Idle,
    PrepareJoin,
    RaiseFatal,
    SendJoinGroup,
    Sleep,
)
from kgroup._core._messages import FindCoordinatorRequest, JoinGroupRequest, SyncGroupRequest
from kgroup._core._state import NO_GENERATION, Generation, MemberState
from kgroup._errors import (
    AssignmentError,
    ErrorCode,
    FencedInstanceId,
    GroupAuthorizationFailed,
    GroupError,
    GroupMaxSizeReached,
    InconsistentGroupProtocol,
    InvalidGroupId,
    InvalidSessionTimeout,
    UnexpectedBrokerError,
    UnsupportedVersion,
)

if TYPE_CHECKING:
    from tests.unit.conftest import Harness

E = ErrorCode
S = MemberState


def joined_with_member_id(h: Harness, member_id: str = "X") -> JoinGroupRequest:
    """Cold start up to the second JoinGroup, which carries ``member_id`` (KIP-394)."""
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)
    h.send_join()
    h.join_response(E.MEMBER_ID_REQUIRED, member_id=member_id)
    return h.send_join()


def follower_sync(h, generation: int = 1, member_id: str = "X", protocol: str = "range"):
    return h.join_response(
        generation=generation,
        member_id=member_id,
        leader="leader-0",
        protocol_name=protocol,
        protocol_type="consumer",
    )


# --- A. Discovery and join --------------------------------------------------------------------


def test_a1_cold_join_dynamic_member(make_harness) -> None:
    """A1. Given a new consumer subscribed to t (4 partitions), when it polls: FindCoordinator,
    JoinGroup(member_id="", 300000/45000, one protocol per assignor in order); on
    MEMBER_ID_REQUIRED(X) a second JoinGroup with X, no backoff, no second pre-join hook; as
    leader a SyncGroup entry for every member, then STABLE."""
    h = make_harness(assignors=("range", "roundrobin"))
    h.poll()
    # key_type 0 (GROUP) is added by the wire layer; the core names the group.
    assert h.find_coordinator(node_id=1) == FindCoordinatorRequest(group_id="g")
    assert h.core.coordinator is not None and h.core.coordinator.node_id == 1
    assert h.prepare(lost=True) == ()  # nothing owned yet: no callback
    first = h.send_join()
    assert first == JoinGroupRequest(
        group_id="g",
        session_timeout_ms=45_000,
        rebalance_timeout_ms=300_000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=first.protocols,
        reason=first.reason,
    )
    assert not first.reason
    assert [name for name, _ in first.protocols] == ["range", "roundrobin"]
    for _, metadata in first.protocols:
        assert Subscription.decode(metadata) == Subscription(topics=("t",), generation_id=-1)
    assert h.last_join.timeout_ms == 305_000
    assert h.state is S.PREPARING_REBALANCE

    assert h.join_response(E.MEMBER_ID_REQUIRED, member_id="X") is None
    assert h.core.generation == Generation(-1, "X", None)
    assert h.state is S.PREPARING_REBALANCE
    second = h.send_join()  # at the same instant: no Sleep, no PrepareJoin before it
    assert second.member_id == "X"
    assert second.protocols == first.protocols
    assert second.reason == "need to re-join with the given member-id: X"
    assert [type(a) for a in h.actions] == [
        FindCoordinator,
        PrepareJoin,
        SendJoinGroup,
        SendJoinGroup,
    ]

    sync = h.join_response(
        generation=1,
        member_id="X",
        leader="X",
        protocol_name="range",
        protocol_type="consumer",
        members=[h.member_entry("X", ["t"]), h.member_entry("Y", ["t"])],
    )
    assert h.core.is_leader
    assert h.state is S.COMPLETING_REBALANCE  # type: ignore[comparison-overlap]
    assert sync is not None
    assert sync.request == SyncGroupRequest(
        group_id="g",
        generation_id=1,
        member_id="X",
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=(
            ("X", h.assignment_bytes(h.tps("t", 0, 1))),
            ("Y", h.assignment_bytes(h.tps("t", 2, 3))),
        ),
    )
    assert sync.timeout_ms == 30_000
    assert isinstance(h.action(), AwaitJoin)  # never a second JoinGroup while one is pending

    h.sync_response(
        assignment=h.assignment_bytes(h.tps("t", 0, 1)),
        protocol_type="consumer",
        protocol_name="range",
    )
    assert h.state is S.STABLE
    assert h.core.generation == Generation(1, "X", "range")
    h.complete()
    assert h.calls == [ListenerCall("on_partitions_assigned", h.tps("t", 0, 1))]
    assert isinstance(h.action(), Idle)
    assert not h.core.rejoin_needed and h.core.rejoin_reason == ""


@pytest.mark.parametrize("instance", [None, "i1"])
def test_a2_follower_join(make_harness, instance: str | None) -> None:
    """A2. Given JoinGroup succeeds with leader != member_id. Then SyncGroup carries
    assignments=[], the generation/member id/instance id, protocol_type/name; the assignment
    is decoded and on_partitions_assigned is called once with the added set."""
    h = make_harness(group_instance_id=instance)
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)
    join = h.send_join()
    assert join.group_instance_id == instance
    sync = follower_sync(h, generation=3, member_id="m-2")
    assert not h.core.is_leader
    assert sync is not None
    assert sync.request == SyncGroupRequest(
        group_id="g",
        generation_id=3,
        member_id="m-2",
        group_instance_id=instance,
        protocol_type="consumer",
        protocol_name="range",
        assignments=(),
    )
    h.sync_response(
        assignment=h.assignment_bytes(h.tps("t", 2, 3)),
        protocol_type="consumer",
        protocol_name="range",
    )
    h.complete()
    assert h.calls == [ListenerCall("on_partitions_assigned", h.tps("t", 2, 3))]
    assert h.embedding.owned == h.tps("t", 2, 3)
    assert h.core.generation == Generation(3, "m-2", "range")
    assert isinstance(h.action(), Idle)


def _leader_assignments(h, leader: str, members) -> dict[str, list[str]]:
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)
    h.send_join()
    sync = h.join_response(
        generation=1,
        member_id=leader,
        leader=leader,
        protocol_name="range",
        protocol_type="consumer",
        members=members,
    )
    assert sync is not None
    return {
        mid: [str(tp) for tp in Assignment.decode(data).partitions]
        for mid, data in sync.request.assignments
    }


def test_a_join_answer_naming_no_leader_marks_the_member_leaderless(make_harness) -> None:
    """A classic member of a consumer group (§10.9) is answered with no leader: the broker
    assigns. The core says so (``leaderless``: the metadata watch then takes it on,
    deviations.md row 21); an answer naming a leader, or a reset generation, clears it."""
    h = make_harness()
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)
    h.send_join()
    sync = h.join_response(
        generation=4, member_id="m-1", leader="", protocol_name="range", protocol_type="consumer"
    )
    assert sync is not None and sync.request.assignments == ()
    assert h.core.leaderless and not h.core.is_leader
    h.sync_response(
        assignment=h.assignment_bytes(h.tps("t", 0)),
        protocol_type="consumer",
        protocol_name="range",
    )
    h.complete()
    assert h.state is MemberState.STABLE and h.core.leaderless
    h.core.request_rejoin("test")
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    follower_sync(h, generation=5, member_id="m-1")
    assert not h.core.leaderless and not h.core.is_leader
    h.core.leaderless = True
    h.core.reset_generation(keep_member_id=False, reason="test")
    assert not h.core.leaderless


def test_a3_leader_assignment_range(make_harness) -> None:
    """A3. Given two dynamic members "a…" < "b…" on t0 and t1 (3 partitions each). Then the
    leader assigns a: t0p0,t0p1,t1p0,t1p1 and b: t0p2,t1p2."""
    h = make_harness(topics=("t0", "t1"), partitions={"t0": 3, "t1": 3})
    members = [h.member_entry("b-7f", ["t0", "t1"]), h.member_entry("a-19", ["t0", "t1"])]
    assert _leader_assignments(h, "b-7f", members) == {
        "a-19": ["t0-0", "t0-1", "t1-0", "t1-1"],
        "b-7f": ["t0-2", "t1-2"],
    }


def test_a4_static_ordering_range(make_harness) -> None:
    """A4. Given instance ids i2 (member "a…") and i1 (member "z…"). Then i1 is ordered
    first, regardless of member ids."""
    h = make_harness(group_instance_id="i2", partitions={"t": 3})
    members = [
        h.member_entry("a-1", ["t"], instance="i2"),
        h.member_entry("z-1", ["t"], instance="i1"),
    ]
    assert _leader_assignments(h, "a-1", members) == {"a-1": ["t-2"], "z-1": ["t-0", "t-1"]}


@pytest.mark.parametrize(
    ("jitter_at", "expected"),
    [
        (0.5, [100, 200, 400, 800, 1000, 1000]),  # no jitter
        (0.0, [80, 160, 320, 640, 800, 800]),  # -20%
        (1.0, [120, 240, 480, 960, 1000, 1000]),  # +20%, capped at retry_backoff_max_ms
    ],
)
@pytest.mark.parametrize(
    "failure",
    [E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS, None],
)
def test_a5_find_coordinator_backoff(
    make_harness, jitter_at: float, expected: list[int], failure: int | None
) -> None:
    """A5. Given FindCoordinator keeps failing. Then retries are spaced about 100, 200, 400,
    800 ms (±20%), then 800-1000 ms, never above 1000. (The metadata refresh before each
    retry is the runtime's Cluster; here: the core's Sleep between lookups.)"""
    h = make_harness(jitter_at=jitter_at)
    h.poll()
    spacing = []
    for _ in expected:
        h.expect(FindCoordinator)
        started = h.now
        if failure is None:  # transport failure: no broker reachable, timeout
            h.core.on_find_coordinator_failed(h.now, "no broker reachable")
        else:
            h.lookup(error=failure)
        sleep = h.expect(Sleep)
        h.at(sleep.until - 1)
        assert h.expect(Sleep).until == sleep.until  # still backing off just before
        h.at(sleep.until)
        spacing.append(h.now - started)
    assert spacing == pytest.approx(expected)
    assert all(s <= 1000 for s in spacing)
    h.find_coordinator()
    assert h.core.coordinator is not None
    h.prepare(lost=True)
    h.send_join()
    assert h.core.fatal is None


def test_a6_find_coordinator_authorization(make_harness) -> None:
    """A6. Given GROUP_AUTHORIZATION_FAILED from FindCoordinator. Then poll() raises a
    group-authorization error and no JoinGroup is attempted."""
    h = make_harness()
    h.poll()
    h.find_coordinator(error=E.GROUP_AUTHORIZATION_FAILED)
    fatal = h.expect(RaiseFatal)
    assert isinstance(fatal.error, GroupAuthorizationFailed)
    assert fatal.error.group_id == "g"
    assert fatal.error.error_code == E.GROUP_AUTHORIZATION_FAILED
    assert h.core.coordinator is None
    assert h.state is S.UNJOINED
    # A later poll retries discovery (as Java does); it never jumps to JoinGroup.
    h.poll()
    assert isinstance(h.action(), FindCoordinator)
    assert not any(isinstance(a, (PrepareJoin, SendJoinGroup)) for a in h.actions)


def test_a7_join_coordinator_load_in_progress(make_harness) -> None:
    """A7. JoinGroup COORDINATOR_LOAD_IN_PROGRESS: retry JoinGroup after retry.backoff.ms
    with the same member_id, without rediscovering the coordinator."""
    h = make_harness()
    joined_with_member_id(h, "X")
    coordinator = h.core.coordinator
    sent_at = h.now
    assert h.join_response(E.COORDINATOR_LOAD_IN_PROGRESS) is None
    assert h.core.coordinator is coordinator
    assert h.expect(Sleep).until == sent_at + 100
    h.at(sent_at + 99)
    assert isinstance(h.action(), Sleep)
    h.at(sent_at + 100)
    again = h.send_join()
    assert again.member_id == "X"
    assert h.core.generation == Generation(-1, "X", None)
    assert h.events_named("member.coordinator_lost") == []
    assert not any(isinstance(a, (FindCoordinator, PrepareJoin)) for a in h.actions[3:])


@pytest.mark.parametrize("code", [E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE])
def test_a8_join_not_coordinator(make_harness, code: int) -> None:
    """A8. JoinGroup NOT_COORDINATOR: mark the coordinator unknown, close its connection,
    FindCoordinator, rejoin the new coordinator with the same member_id. (Closing is the
    runtime's reaction to the core's member.coordinator_lost event.)"""
    h = make_harness()
    joined_with_member_id(h, "X")
    failed_at = h.now
    h.join_response(code)
    assert h.core.coordinator is None
    assert [e["node_id"] for e in h.events_named("member.coordinator_lost")] == [1]
    h.find_coordinator(node_id=2)
    assert h.core.coordinator is not None and h.core.coordinator.node_id == 2
    assert h.expect(Sleep).until == failed_at + 100  # retry.backoff.ms (constant)
    h.at(failed_at + 100)
    assert h.send_join().member_id == "X"
    assert h.state is S.PREPARING_REBALANCE


def test_a9_join_unknown_member_id(make_harness) -> None:
    """A9. Given the client holds member id X, JoinGroup UNKNOWN_MEMBER_ID. Then the next
    JoinGroup carries member_id="" and is sent without backoff."""
    h = make_harness()
    h.stable("X", generation=4, owned=h.tps("t", 0, 1))
    h.core.request_rejoin("subscription has changed")
    h.poll()
    h.prepare(lost=False)  # eager: revoke all
    assert h.send_join().member_id == "X"
    h.join_response(E.UNKNOWN_MEMBER_ID)
    assert h.core.generation == NO_GENERATION
    assert h.state is S.UNJOINED
    assert h.core.rejoin_needed
    h.prepare(lost=True)  # a reset Generation: needs_join_prepare is set again (T4)
    assert h.send_join().member_id == ""  # same instant: no Sleep
    assert not any(isinstance(a, Sleep) for a in h.actions)


@pytest.mark.parametrize(
    ("code", "error_cls"),
    [
        (E.INCONSISTENT_GROUP_PROTOCOL, InconsistentGroupProtocol),
        (E.INVALID_SESSION_TIMEOUT, InvalidSessionTimeout),
        (E.INVALID_GROUP_ID, InvalidGroupId),
        (E.GROUP_MAX_SIZE_REACHED, GroupMaxSizeReached),
        (E.GROUP_AUTHORIZATION_FAILED, GroupAuthorizationFailed),
        (E.FENCED_INSTANCE_ID, FencedInstanceId),
        (E.UNSUPPORTED_VERSION, UnsupportedVersion),
        (E.UNKNOWN_SERVER_ERROR, UnexpectedBrokerError),
    ],
)
def test_a10_fatal_join_errors(make_harness, code: int, error_cls: type[GroupError]) -> None:
    """A10. For each fatal JoinGroup error: poll() raises, and no further JoinGroup is sent
    until the app polls again."""
    h = make_harness(group_instance_id="i1" if code == E.FENCED_INSTANCE_ID else None)
    joined_with_member_id(h, "X")
    h.join_response(code)
    assert h.state is S.UNJOINED
    assert not h.core.heartbeat_enabled
    fatal = h.expect(RaiseFatal)  # the very next step raises; no JoinGroup before it
    assert type(fatal.error) is error_cls
    assert fatal.error.error_code == code
    assert fatal.error.api == "JoinGroup"
    assert fatal.error.group_id == "g"
    # The user catches it and polls again: the join is retried (T13).
    h.poll()
    assert h.send_join().member_id == "X"


def test_a11_join_request_timeout(make_harness) -> None:
    """A11. Given max.poll.interval.ms=60000 and a JoinGroup never answered. Then the request
    times out after 65000 ms (not 30000), the coordinator is marked unknown and the client
    rejoins with the same member id. (The runtime enforces SendJoinGroup.timeout_ms and
    reports the timeout with on_join_failed.)"""
    h = make_harness(max_poll_interval_ms=60_000)
    joined_with_member_id(h, "X")
    assert h.last_join.timeout_ms == 65_000
    assert h.last_join.request.rebalance_timeout_ms == 60_000
    h.advance(65_000)
    h.core.on_join_failed(h.now, "request timed out after 65000 ms")
    assert h.core.coordinator is None
    assert len(h.events_named("member.coordinator_lost")) == 1
    assert h.core.rejoin_reason.startswith("rebalance failed due to")
    failed_at = h.now
    h.find_coordinator(node_id=1)
    h.at(h.expect(Sleep).until)
    assert h.now == failed_at + 100
    assert h.send_join().member_id == "X"
    assert h.core.generation == Generation(-1, "X", None)


@pytest.mark.parametrize(
    ("max_poll", "request_timeout", "expected"),
    [(60_000, 30_000, 65_000), (10_000, 30_000, 30_000), (300_000, 30_000, 305_000)],
)
def test_a11_join_timeout_values(
    make_harness, max_poll: int, request_timeout: int, expected: int
) -> None:
    """A11. JoinGroup timeout = max(request.timeout.ms, rebalance timeout + 5000)."""
    h = make_harness(max_poll_interval_ms=max_poll, request_timeout_ms=request_timeout)
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)
    h.send_join()
    assert h.last_join.timeout_ms == expected


def test_a11_join_timeout_does_not_overflow(make_harness) -> None:
    """A11. With max.poll.interval.ms = 2^31-1 the computed timeout does not overflow."""
    h = make_harness(max_poll_interval_ms=2**31 - 1)
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)
    join = h.send_join()
    assert join.rebalance_timeout_ms == 2**31 - 1
    assert h.last_join.timeout_ms >= 2**31 - 1  # never wrapped to a negative/small value


def test_a12_join_protocol_type_mismatch(make_harness) -> None:
    """A12. Given a JoinGroup v7 response with protocol_type="connect". Then a fatal
    INCONSISTENT_GROUP_PROTOCOL, and no SyncGroup."""
    h = make_harness()
    joined_with_member_id(h, "X")
    sync = h.join_response(
        generation=1, member_id="X", leader="X", protocol_name="range", protocol_type="connect"
    )
    assert sync is None
    assert h.state is S.UNJOINED
    fatal = h.expect(RaiseFatal)
    assert isinstance(fatal.error, InconsistentGroupProtocol)
    assert fatal.error.api == "JoinGroup"


@pytest.mark.parametrize(
    ("protocol_type", "protocol_name"), [("consumer", "roundrobin"), ("connect", "range")]
)
def test_a12_sync_protocol_mismatch(make_harness, protocol_type: str, protocol_name: str) -> None:
    """A12. Given a SyncGroup v5 response whose protocol_name (or type) differs from the
    JoinGroup's. Then a fatal INCONSISTENT_GROUP_PROTOCOL; nothing is installed."""
    h = make_harness(assignors=("range", "roundrobin"))
    joined_with_member_id(h, "X")
    follower_sync(h, protocol="range")
    h.sync_response(
        assignment=h.assignment_bytes(h.tps("t", 0)),
        protocol_type=protocol_type,
        protocol_name=protocol_name,
    )
    assert h.state is S.UNJOINED
    fatal = h.expect(RaiseFatal)
    assert isinstance(fatal.error, InconsistentGroupProtocol)
    assert fatal.error.api == "SyncGroup"
    assert h.calls == []


def test_a12_absent_protocol_fields_are_accepted(make_harness) -> None:
    """A12 (converse). Responses below JoinGroup v7 / SyncGroup v5 carry no protocol
    type/name (None): no mismatch."""
    h = make_harness()
    joined_with_member_id(h, "X")
    h.join_response(generation=1, member_id="X", leader="L", protocol_name="range")
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)))
    assert h.state is S.STABLE
    h.complete()


def test_leader_selected_unknown_assignor_is_fatal(make_harness) -> None:
    """§6.3 step 1: the coordinator selected an assignor this leader does not have: a fatal
    error from the next poll, and no SyncGroup is sent."""
    h = make_harness()
    joined_with_member_id(h, "X")
    sync = h.join_response(
        generation=1,
        member_id="X",
        leader="X",
        protocol_name="roundrobin",
        members=[h.member_entry("X", ["t"])],
    )
    assert sync is None
    assert h.state is S.UNJOINED
    fatal = h.expect(RaiseFatal)
    assert isinstance(fatal.error, AssignmentError)
    assert "roundrobin" in str(fatal.error)


def test_t2_join_response_after_heartbeat_reset(make_harness) -> None:
    """§2.2 T2 guard / §2.5: a heartbeat sent while STABLE returns ILLEGAL_GENERATION after
    the rejoin's JoinGroup went out (the Generation is still the one it was sent under, so
    the reset applies). The JoinGroup success that follows is not applied: the attempt
    fails as "unjoined" (retriable, after backoff) and restarts with the pre-join hook."""
    h = make_harness()
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.at(3_000)
    in_flight = h.hb_send()
    h.core.request_rejoin("subscription has changed")
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    h.hb_respond(in_flight, E.ILLEGAL_GENERATION)
    assert h.state is S.UNJOINED
    assert h.core.generation == Generation(-1, "X", None)
    assert h.join_response(generation=2, member_id="X", leader="L", protocol_name="range") is None
    assert h.state is S.UNJOINED
    assert h.core.generation == Generation(-1, "X", None)
    assert h.expect(Sleep).until == 3_100
    h.at(3_100)
    h.prepare(lost=True)
    assert h.send_join().member_id == "X"


def test_a13_reason_propagation(make_harness) -> None:
    """A13. Given a heartbeat returned REBALANCE_IN_PROGRESS. Then the next JoinGroup v8
    carries a non-empty reason (<= 255 chars); after a successful sync the reason is reset,
    so the following rejoin carries the new trigger's reason."""
    h = make_harness()
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.advance(3_000)
    h.hb_respond(h.hb_send(), E.REBALANCE_IN_PROGRESS)
    assert h.core.rejoin_needed
    h.poll()
    h.prepare(lost=False)
    assert h.send_join().reason == "group is already rebalancing"
    follower_sync(h, generation=2)
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)))
    assert h.core.rejoin_reason == ""
    h.complete()
    assert isinstance(h.action(), Idle)

    long_reason = "subscription has changed " + "x" * 300
    h.core.request_rejoin(long_reason)
    h.poll()
    h.prepare(lost=False)
    join = h.send_join()
    assert join.reason == long_reason[:255]
    assert join.reason is not None and len(join.reason) == 255


# --- B. Sync phase ---------------------------------------------------------------------------


def test_b14_sync_rebalance_in_progress(make_harness, coop_assignor) -> None:
    """B14. SyncGroup REBALANCE_IN_PROGRESS: JoinGroup again immediately (no backoff) with
    the same member id; the generation is not reset and no lost callback fires."""
    h = make_harness(assignors=(coop_assignor,))
    h.stable("X", generation=1, owned=h.tps("t", 0, 1))
    h.core.request_rejoin("group is already rebalancing")
    h.poll()
    assert h.prepare(lost=False) == ()  # cooperative: subscribed partitions are kept
    h.send_join()
    follower_sync(h, generation=2, protocol="coop-range")
    calls_before = list(h.calls)
    h.sync_response(E.REBALANCE_IN_PROGRESS)
    assert h.core.generation == Generation(2, "X", "coop-range")
    assert h.state is S.COMPLETING_REBALANCE
    join = h.send_join()  # same instant, no Sleep, no PrepareJoin
    assert join.member_id == "X"
    assert h.state is S.PREPARING_REBALANCE  # type: ignore[comparison-overlap]
    assert h.calls == calls_before
    assert h.embedding.owned == h.tps("t", 0, 1)


@pytest.mark.parametrize(
    ("code", "member_id"), [(E.ILLEGAL_GENERATION, "X"), (E.UNKNOWN_MEMBER_ID, "")]
)
def test_b15_sync_illegal_generation_vs_unknown_member(
    make_harness, coop_assignor, code: int, member_id: str
) -> None:
    """B15. SyncGroup ILLEGAL_GENERATION: the next JoinGroup keeps member_id=X; with
    UNKNOWN_MEMBER_ID it sends "". Either way owned partitions are reported lost at the next
    pre-join hook."""
    h = make_harness(assignors=(coop_assignor,))
    h.stable("X", generation=1, owned=h.tps("t", 0, 1))
    h.core.request_rejoin("group is already rebalancing")
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    follower_sync(h, generation=2, protocol="coop-range")
    h.sync_response(code)
    assert h.core.generation == Generation(-1, member_id, None)
    assert h.state is S.UNJOINED
    assert h.prepare(lost=True) == (ListenerCall("on_partitions_lost", h.tps("t", 0, 1)),)
    assert h.send_join().member_id == member_id
    assert not any(isinstance(a, Sleep) for a in h.actions)


def test_b16_coordinator_restart_mid_sync(make_harness) -> None:
    """B16. Given the coordinator closes the connection after JoinGroup succeeded and before
    the SyncGroup response. Then the client rediscovers and restarts from JoinGroup (not
    SyncGroup) with the retained member id."""
    h = make_harness()
    joined_with_member_id(h, "X")
    sync = follower_sync(h, generation=1)
    assert sync is not None
    assert h.state is S.COMPLETING_REBALANCE
    h.core.on_join_failed(h.now, "connection closed")
    assert h.core.coordinator is None
    failed_at = h.now
    h.find_coordinator(node_id=2)
    h.at(h.expect(Sleep).until)
    assert h.now == failed_at + 100
    join = h.send_join()
    assert join.member_id == "X"
    assert h.state is S.PREPARING_REBALANCE  # type: ignore[comparison-overlap]
    assert h.core.generation == Generation(1, "X", "range")
    # A SyncGroup answer from the dead connection is ignored by the new chain.
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)))
    assert h.state is S.PREPARING_REBALANCE
    assert isinstance(h.action(), AwaitJoin)


def test_b17_short_assignment(make_harness) -> None:
    """B17. Given a SyncGroup response with a 0-byte assignment. Then poll() raises and the
    client does not treat it as a valid empty assignment (no assigned callback)."""
    h = make_harness()
    joined_with_member_id(h, "X")
    follower_sync(h)
    h.sync_response(assignment=b"")
    assert h.state is S.STABLE
    with pytest.raises(AssignmentError):
        h.complete()
    assert h.calls == []
    assert h.embedding.owned == frozenset()
    # kgroup's runtime then rejoins instead of re-raising forever (see the report).
    assert h.core.rejoin_needed


def test_b17_completion_is_kept_until_done(make_harness) -> None:
    """B17 / §6.1. The core keeps a completion pending until join_completed(): a poll that
    did not finish it gets the same assignment bytes again (Java re-raises from it)."""
    h = make_harness()
    joined_with_member_id(h, "X")
    follower_sync(h)
    h.sync_response(assignment=b"")
    first = h.expect(CompleteJoin)
    again = h.expect(CompleteJoin)
    assert again == first
    assert again.assignment == b""
