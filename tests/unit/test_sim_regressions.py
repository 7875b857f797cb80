"""Regressions for holes the deterministic simulation (tests/simulation) found in the lease.

Each test names the seed that found it; replay with
``python -m tests.simulation --seed N --trace --flavor F`` (F as the test says; ``range``
for the seeds found before the simulation drew a group kind per seed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kgroup import WorkSharding
from kgroup._core._embedding import CLAIMS_LOST_REJOIN, ListenerCall
from kgroup._core._group_protocol import ProtocolAssignment, ProtocolEmbedding, encode_assignment
from kgroup._core._member import (
    AwaitLeaseProof,
    CompleteJoin,
    MemberCore,
    PrepareJoin,
    SendJoinGroup,
)
from kgroup._core._state import Generation
from kgroup._errors import ErrorCode

E = ErrorCode


def leased(
    make_harness: Callable[..., Any], holds: Callable[[Any], bool] | None = None, **config: Any
) -> Any:
    h = make_harness(**config)
    holds = holds or (lambda h: bool(h.embedding.owned))
    h.core = MemberCore(
        h.config,
        protocol_type=h.embedding.protocol_type,
        protocols=h.embedding.metadata,
        now=h.now,
        observer=h._observe,
        uniform=h._uniform,
        holds_assignment=lambda: holds(h),
    )
    return h


def test_seed_13_sync_answered_by_a_stable_group_proves_no_session(make_harness) -> None:
    """Seed 13. The member's JoinGroup was parked in the barrier, its answer lost; it
    rejoined later with the same metadata and the STABLE group answered at once, then
    answered its SyncGroup at once: neither restarts the session on the broker, which
    expired the member one session after the barrier completed. The lease used to start at
    the SyncGroup's send time (far too late). Now it starts at the first JoinGroup with
    this metadata, and an assignment whose lease has already lapsed waits for a heartbeat."""
    h = leased(make_harness, session_timeout_ms=10_000, heartbeat_interval_ms=3_000)
    h.stable("X", generation=3, owned=h.tps("t", 0))
    h.run_heartbeats(until=20_000, app_polls_every=1_000)  # proofs keep the lease fresh
    h.core.request_rejoin("test")
    h.poll()
    h.prepare(lost=False)
    first = h.send_join()  # parked at the coordinator; the barrier completes at ~21 000
    h.core.on_join_failed(35_000, "request timed out")  # the answer never arrived
    h.at(35_100)
    h.lookup(1)
    retry = h.send_join()
    assert retry.protocols == first.protocols  # same member id and metadata
    h.join_response(
        generation=4, member_id="X", leader="L", protocol_name="range", protocol_type="consumer"
    )
    assert h.core.lease.session_proof == 20_000  # not 35 100
    h.at(35_102)
    h.sync_response(
        assignment=h.assignment_bytes(h.tps("t", 1)),
        protocol_type="consumer",
        protocol_name="range",
    )
    assert h.core.lease.session_proof == 20_000  # a SyncGroup proves no session refresh
    assert h.core.lease.rebalance_proof == 35_100
    # 20 000 + 10 000 has passed: no CompleteJoin before a heartbeat proves the session.
    assert isinstance(h.action(), AwaitLeaseProof)
    sent = h.hb_send()
    h.at(35_110)
    h.hb_respond(sent)
    assert isinstance(h.action(), CompleteJoin)
    assert h.core.lease.session_proof == 35_102


def test_seed_5514_static_first_join_metadata_is_remembered_under_its_member_id(
    make_harness,
) -> None:
    """Seed 5514. A static member's first JoinGroup (member id "") stored its metadata
    under the id the coordinator answered with. Much later, after ILLEGAL_GENERATION, it
    rejoined with that id and the same metadata, and the STABLE group answered at once
    (no session restart). The lease counted from the rejoin; it must count from the first
    JoinGroup that carried this metadata, the one with member id ""."""
    h = leased(
        make_harness, group_instance_id="i1", session_timeout_ms=10_000, heartbeat_interval_ms=3_000
    )
    h.poll()
    h.find_coordinator()
    h.prepare(lost=True)
    first = h.send_join()  # at 0, member id ""
    assert first.member_id == ""
    h.join_response(
        generation=1, member_id="i1-1", leader="L", protocol_name="range", protocol_type="consumer"
    )
    h.sync_response(
        assignment=h.assignment_bytes(h.tps("t", 0)),
        protocol_type="consumer",
        protocol_name="range",
    )
    h.complete()
    h.at(3_000)
    h.hb_respond(h.hb_send(), E.ILLEGAL_GENERATION)  # reset, keeping the member id
    h.at(8_000)
    h.poll()
    assert h.expect(PrepareJoin).lost
    h.embedding.prepare(lost=True)
    retry = h.send_join()
    assert (retry.member_id, retry.protocols) == ("i1-1", first.protocols)
    h.join_response(
        generation=2, member_id="i1-1", leader="L", protocol_name="range", protocol_type="consumer"
    )
    assert h.core.lease.session_proof == 0  # the "" JoinGroup's send time, not 8 000


def test_seed_4207_the_lease_covers_a_running_revoke_callback(make_harness) -> None:
    """Seed 4207. The embedding drops revoked partitions before on_partitions_revoked runs,
    but the member holds them until the callback returns. With
    ``holds_assignment=lambda: bool(owned)`` a member paused inside a long revoke callback
    had no lease at all. The runtime must count a running revoke callback as holding; the
    core then expires the lease during the callback as usual."""
    revoking = {"on": False}
    h = leased(
        make_harness,
        holds=lambda h: bool(h.embedding.owned) or revoking["on"],
        session_timeout_ms=10_000,
        heartbeat_interval_ms=3_000,
    )
    h.stable("X", generation=1, owned=h.tps("t", 0))
    h.at(1_000)
    h.core.request_rejoin("group is already rebalancing")
    h.poll()
    calls = h.prepare(lost=False)
    assert calls == (ListenerCall("on_partitions_revoked", h.tps("t", 0)),)
    revoking["on"] = True  # the callback runs (and the process is paused inside it)
    assert h.core.valid_until == 10_000
    h.at(12_000)
    h.core.check_lease(h.now)
    revoking["on"] = False
    assert [e["deadline"] for e in h.events_named("member.lease_expired")] == [10_000]
    # The release is a no-op now (nothing owned) and the rejoin goes on.
    assert h.expect(PrepareJoin).lease_expired
    assert isinstance(h.action(), SendJoinGroup)


def test_seed_140_cooperative_claims_lost_mid_join_are_released_by_a_rejoin(
    make_harness,
) -> None:
    """Seed 140 (``--flavor cooperative-sticky``; also seeds 69 and 170). A COOPERATIVE
    member's JoinGroup claimed t-0..t-2; the join took longer than the session, so the lease
    reported them lost before the answer. The leader, which read the claim, kept t-0 with
    the member and withheld t-1 and t-2 from everyone (they move). The member owned nothing
    at completion, so there was nothing to revoke and it never rejoined: t-1 and t-2 stayed
    unassigned until an unrelated rebalance. The completion must rejoin when its assignment
    leaves out anything the JoinGroup claimed."""
    h = leased(
        make_harness,
        assignors=("cooperative-sticky",),
        session_timeout_ms=10_000,
        heartbeat_interval_ms=3_000,
    )
    name = "cooperative-sticky"
    h.stable("X", generation=5, owned=h.tps("t", 0, 1, 2), protocol=name)
    h.core.request_rejoin("a member joined")
    h.poll()
    assert h.prepare(lost=False) == ()  # cooperative: keeps t-0..t-2 through the join
    h.send_join()
    assert h.embedding.claimed == h.tps("t", 0, 1, 2)
    h.at(15_000)  # the coordinator holds the JoinGroup past the session: the lease lapses
    assert h.prepare(lost=True) == (ListenerCall("on_partitions_lost", h.tps("t", 0, 1, 2)),)
    h.join_response(
        generation=6, member_id="X", leader="L", protocol_name=name, protocol_type="consumer"
    )
    h.sync_response(
        assignment=h.assignment_bytes(h.tps("t", 0)), protocol_type="consumer", protocol_name=name
    )
    assert isinstance(h.action(), AwaitLeaseProof)  # never installed under a lapsed lease
    sent = h.hb_send()
    h.at(15_010)
    h.hb_respond(sent)
    completion = h.complete()
    assert completion.calls == (ListenerCall("on_partitions_assigned", h.tps("t", 0)),)
    assert completion.rejoin_reason == CLAIMS_LOST_REJOIN
    assert h.core.rejoin_needed
    # The rejoin claims only what the member owns now; the leader can hand t-1, t-2 over.
    h.poll()
    assert h.prepare(lost=False) == ()
    h.send_join()
    assert h.embedding.claimed == h.tps("t", 0)


def test_seed_23_items_claimed_then_lost_mid_join_make_the_member_rejoin() -> None:
    """Seed 23 (``--flavor shards``; the same hole as seed 140, for a GroupProtocol):
    WorkSharding items claimed in the JoinGroup and lost before the assignment arrived must
    make the member rejoin when the assignment leaves them out."""
    embedding = ProtocolEmbedding(WorkSharding(["r0", "r1", "r2"]))
    generation = Generation(2, "X", "balanced-sticky")
    embedding.complete(generation, encode_assignment(ProtocolAssignment(frozenset({"r0", "r1"}))))
    embedding.metadata(generation)  # the JoinGroup claims r0 and r1
    assert embedding.claimed == frozenset({"r0", "r1"})
    assert embedding.prepare(lost=True) == (
        ListenerCall("on_partitions_lost", frozenset({"r0", "r1"})),
    )
    completion = embedding.complete(
        Generation(3, "X", "balanced-sticky"),
        encode_assignment(ProtocolAssignment(frozenset({"r0"}))),
    )
    assert completion.calls == (ListenerCall("on_partitions_assigned", frozenset({"r0"})),)
    assert completion.rejoin_reason == CLAIMS_LOST_REJOIN
    # Everything claimed came back: no rejoin.
    embedding.metadata(Generation(3, "X", "balanced-sticky"))
    again = embedding.complete(
        Generation(4, "X", "balanced-sticky"),
        encode_assignment(ProtocolAssignment(frozenset({"r0", "r2"}))),
    )
    assert again.rejoin_reason is None
