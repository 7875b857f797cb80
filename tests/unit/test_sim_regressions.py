"""Regressions for holes the deterministic simulation (tests/simulation) found in the lease.

Each test names the seed that found it; replay with
``python -m tests.simulation --seed N --trace --assignor range``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kgroup._core._embedding import ListenerCall
from kgroup._core._member import (
    AwaitLeaseProof,
    CompleteJoin,
    MemberCore,
    PrepareJoin,
    SendJoinGroup,
)
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
