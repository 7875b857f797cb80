"""Cooperative rebalancing on the core (spec §6.2-§6.4, §7.5, §7.6; scenarios G42-G44).

The member's join path is stepped by the harness exactly as ``GroupMember.poll()`` steps it;
the listener decisions come from the real :class:`ConsumerEmbedding`. As follower the broker
and the leader are scripted; as leader the harness runs the assignor as the runtime does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kgroup._core._assignors import BaseAssignor, MemberSubscription, RebalanceProtocol
from kgroup._core._consumer_protocol import Assignment, Subscription, TopicPartition
from kgroup._core._embedding import ListenerCall
from kgroup._core._member import AwaitLeaseProof, PrepareJoin, RaiseFatal, SendJoinGroup, Sleep
from kgroup._core._messages import JoinGroupMember
from kgroup._core._state import MemberState
from kgroup._errors import AssignmentError, ErrorCode

E = ErrorCode


def subscription_of(request_protocols: Sequence[tuple[str, bytes]], name: str) -> Subscription:
    return Subscription.decode(dict(request_protocols)[name])


def rebalance_announced(h: Any) -> None:
    """The broker answers the next heartbeat with REBALANCE_IN_PROGRESS."""
    h.advance(3_000)
    h.hb_respond(h.hb_send(), E.REBALANCE_IN_PROGRESS)
    assert h.core.rejoin_needed


def test_g42_cooperative_two_phase_as_follower(make_harness, coop_assignor) -> None:
    """G42. A owns t-0..t-3 under a COOPERATIVE assignor and B joins. Rebalance 1 leaves A
    with {0, 1} (the leader withholds the two that move); A revokes exactly {2, 3} and rejoins
    at once; rebalance 2 gives A {0, 1} again. A never sees a revoke for what it keeps."""
    h = make_harness(assignors=(coop_assignor,))
    name = coop_assignor.name
    h.stable("A", generation=1, owned=h.tps("t", 0, 1, 2, 3), protocol=name)
    h.calls.clear()
    rebalance_announced(h)

    # Rebalance 1: no revocation before JoinGroup; the Subscription says what A owns.
    h.poll()
    assert h.prepare(lost=False) == ()
    assert h.embedding.owned == h.tps("t", 0, 1, 2, 3)  # still owned and processed
    request = h.send_join()
    sub = subscription_of(request.protocols, name)
    assert set(sub.owned_partitions) == h.tps("t", 0, 1, 2, 3)
    assert sub.generation_id == 1
    sync = h.join_response(generation=2, member_id="A", leader="B", protocol_name=name)
    assert sync is not None
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0, 1)), protocol_name=name)
    completion = h.complete()
    assert completion.calls == (
        ListenerCall("on_partitions_revoked", h.tps("t", 2, 3)),
        ListenerCall("on_partitions_assigned", frozenset()),
    )
    assert h.core.rejoin_needed  # "need to revoke partitions and re-join"

    # ... at once: no backoff, straight to JoinGroup, owning only what it kept.
    assert h.prepare(lost=False) == ()
    request = h.send_join()
    sub = subscription_of(request.protocols, name)
    assert set(sub.owned_partitions) == h.tps("t", 0, 1)
    assert sub.generation_id == 2

    # Rebalance 2: the leader hands {2, 3} to B; A keeps {0, 1}.
    assert h.join_response(generation=3, member_id="A", leader="B", protocol_name=name)
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0, 1)), protocol_name=name)
    completion = h.complete()
    assert completion.calls == (ListenerCall("on_partitions_assigned", frozenset()),)
    assert completion.rejoin_reason is None
    assert h.state is MemberState.STABLE
    revoked = [c.partitions for c in h.calls if c.callback == "on_partitions_revoked"]
    assert revoked == [h.tps("t", 2, 3)]
    assert not [c for c in h.calls if c.callback == "on_partitions_lost"]


def test_g42_lost_generation_reports_lost_not_revoked(make_harness, coop_assignor) -> None:
    """Under COOPERATIVE too, a reset generation means the partitions were lost: the
    pre-join hook reports ``on_partitions_lost`` (never revoked) and the next Subscription
    claims nothing."""
    h = make_harness(assignors=(coop_assignor,))
    name = coop_assignor.name
    h.stable("A", generation=4, owned=h.tps("t", 0, 1), protocol=name)
    h.calls.clear()
    h.advance(3_000)
    h.hb_respond(h.hb_send(), E.UNKNOWN_MEMBER_ID)
    h.poll()
    assert h.prepare(lost=True) == (ListenerCall("on_partitions_lost", h.tps("t", 0, 1)),)
    request = h.send_join()
    sub = subscription_of(request.protocols, name)
    assert sub.owned_partitions == ()
    assert sub.generation_id == -1


class MovesOwnedPartitions(BaseAssignor):
    """A broken COOPERATIVE assignor: everything goes to the last member, owned or not."""

    name = "grabby"
    supported_protocols = (RebalanceProtocol.COOPERATIVE,)

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, Assignment]:
        ids = sorted(m.member_id for m in members)
        everything = tuple(
            TopicPartition(t, p) for t in sorted(partitions_per_topic)
            for p in range(partitions_per_topic[t])
        )  # fmt: skip
        return {mid: Assignment(partitions=everything if mid == ids[-1] else ()) for mid in ids}


def test_g43_cooperative_validation_at_the_leader(make_harness) -> None:
    """G43. A custom COOPERATIVE assignor moves an owned partition directly to another
    member: the leader raises a fatal assignor-contract error and sends no SyncGroup."""
    h = make_harness(assignors=(MovesOwnedPartitions(),), partitions={"t": 4})
    h.stable("A", generation=1, owned=h.tps("t", 0, 1, 2, 3), protocol="grabby")
    rebalance_announced(h)
    h.poll()
    assert h.prepare(lost=False) == ()
    own = h.send_join()
    members = [
        JoinGroupMember(
            member_id="A", group_instance_id=None, metadata=dict(own.protocols)["grabby"]
        ),
        JoinGroupMember(
            member_id="B",
            group_instance_id=None,
            metadata=Subscription(topics=("t",)).encode(),
        ),
    ]
    sync = h.join_response(
        generation=2, member_id="A", leader="A", protocol_name="grabby", members=members
    )
    assert sync is None  # no SyncGroup
    fatal = h.expect(RaiseFatal)
    assert isinstance(fatal.error, AssignmentError)
    assert "t-0 from 'A' to 'B'" in str(fatal.error)
    assert "broke the cooperative protocol" in str(fatal.error)


def test_g43_partition_claimed_by_its_new_owner_is_not_a_move(make_harness) -> None:
    """Two members claiming one partition (a stale claim): giving it to either claimant is
    not a direct move; the check only refuses a partition reaching a member that did not own
    it while another gives it up (as the Java client's validation)."""
    h = make_harness(assignors=(MovesOwnedPartitions(),), partitions={"t": 1})
    h.stable("A", generation=1, owned=h.tps("t", 0), protocol="grabby")
    rebalance_announced(h)
    h.poll()
    h.prepare(lost=False)
    own = h.send_join()
    b_claims = Subscription(
        topics=("t",), owned_partitions=(TopicPartition("t", 0),), generation_id=0
    ).encode()
    members = [
        JoinGroupMember(
            member_id="A", group_instance_id=None, metadata=dict(own.protocols)["grabby"]
        ),
        JoinGroupMember(member_id="B", group_instance_id=None, metadata=b_claims),
    ]
    sync = h.join_response(
        generation=2, member_id="A", leader="A", protocol_name="grabby", members=members
    )
    assert sync is not None
    assert h.core.fatal is None


def test_g42_revoke_then_immediate_rejoin_needs_no_sleep(make_harness, coop_assignor) -> None:
    """After a cooperative revoke the next join action is PrepareJoin then SendJoinGroup,
    with no backoff Sleep in between (§7.6 step 2: "immediately requests a rejoin"), when
    the SyncGroup was answered as soon as the JoinGroup (no sync grace to wait out)."""
    h = make_harness(assignors=(coop_assignor,))
    name = coop_assignor.name
    h.stable("A", generation=1, owned=h.tps("t", 0, 1), protocol=name)
    rebalance_announced(h)
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    h.join_response(generation=2, member_id="A", leader="B", protocol_name=name)
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)), protocol_name=name)
    h.complete()
    first = h.action()
    assert isinstance(first, PrepareJoin)
    h.embedding.prepare(lost=first.lost)
    second = h.action()
    assert isinstance(second, SendJoinGroup), second
    assert not isinstance(second, Sleep)


def revoked_after_slow_sync(h: Any, name: str, sync_ms: float) -> float:
    """A owns t-0, t-1; the rebalance's SyncGroup is answered ``sync_ms`` after its
    JoinGroup; A is told to give up t-1. Returns when the SyncGroup was answered."""
    h.stable("A", generation=1, owned=h.tps("t", 0, 1), protocol=name)
    rebalance_announced(h)
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    h.join_response(generation=2, member_id="A", leader="B", protocol_name=name)
    h.advance(sync_ms)
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)), protocol_name=name)
    return float(h.now)


def test_revoking_member_rejoins_after_the_sync_grace(make_harness, coop_assignor) -> None:
    """Deviation 15: the member that revokes waits, before its JoinGroup, as long again as
    its SyncGroup took after the JoinGroup answer, so that the other members' SyncGroups of
    the same generation reach the coordinator before the rebalance it starts."""
    h = make_harness(assignors=(coop_assignor,), heartbeat_interval_ms=3_000)
    synced = revoked_after_slow_sync(h, coop_assignor.name, 4)
    completion = h.complete()
    assert completion.rejoin_reason and h.core.rejoin_needed
    wait = h.action()
    assert isinstance(wait, Sleep) and wait.until == synced + 4
    h.at(wait.until)
    first = h.action()
    assert isinstance(first, PrepareJoin)
    h.embedding.prepare(lost=first.lost)
    assert isinstance(h.action(), SendJoinGroup)


def test_sync_grace_is_bounded_and_spent_by_a_slow_callback(make_harness, coop_assignor) -> None:
    """The grace is at most a tenth of the heartbeat interval, and a revoke callback that
    ran longer than it has spent it: the JoinGroup then goes at once."""
    h = make_harness(assignors=(coop_assignor,), heartbeat_interval_ms=1_000)
    synced = revoked_after_slow_sync(h, coop_assignor.name, 2_000)
    h.complete()
    wait = h.action()
    assert isinstance(wait, Sleep) and wait.until == synced + 100  # 1 000 ms / 10

    h = make_harness(assignors=(coop_assignor,), heartbeat_interval_ms=1_000)
    synced = revoked_after_slow_sync(h, coop_assignor.name, 50)
    h.advance(80)  # the revoke callback took 80 ms, more than the 50 ms grace
    h.complete()
    first = h.action()
    assert isinstance(first, PrepareJoin), first


def slow_first_phase(h: Any, name: str) -> None:
    """A owns t-0..t-3; rebalance 1 is held by the broker for 30 s of the 45 s session, then
    A is told to give up {2, 3}: it has revoked them and must rejoin."""
    h.stable("A", generation=1, owned=h.tps("t", 0, 1, 2, 3), protocol=name)
    rebalance_announced(h)
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    h.advance(30_000)
    h.join_response(generation=2, member_id="A", leader="B", protocol_name=name)
    h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0, 1)), protocol_name=name)
    h.complete()
    assert h.prepare(lost=False) == ()


def test_cooperative_rejoin_renews_an_old_lease_first(make_harness, coop_assignor) -> None:
    """The second phase keeps {0, 1} through a JoinGroup that may be held for long, with no
    heartbeats meanwhile. With less than half a session left on the lease, a heartbeat goes
    first; its answer renews the lease and the JoinGroup follows at once."""
    h = make_harness(assignors=(coop_assignor,))
    slow_first_phase(h, coop_assignor.name)
    wait = h.action()
    assert isinstance(wait, AwaitLeaseProof), wait
    assert h.events_named("member.lease_proof_needed")
    sent = h.hb_send()  # the heartbeat is due now
    h.advance(5)
    h.hb_respond(sent, E.NONE)
    assert h.events_named("member.lease_renewed")
    request = h.send_join()
    assert set(subscription_of(request.protocols, coop_assignor.name).owned_partitions) == (
        h.tps("t", 0, 1)
    )
    assert h.core.valid_until is not None and h.core.valid_until >= h.now + 45_000 - 10


def test_cooperative_rejoin_does_not_wait_for_ever_on_the_renewal(
    make_harness, coop_assignor
) -> None:
    """No answer to the renewing heartbeat: the JoinGroup goes after request_timeout_ms."""
    h = make_harness(assignors=(coop_assignor,), request_timeout_ms=2_000)
    slow_first_phase(h, coop_assignor.name)
    assert isinstance(h.action(), AwaitLeaseProof)
    h.advance(1_999)
    assert isinstance(h.action(), AwaitLeaseProof)
    h.advance(1)
    h.send_join()


def test_a_fresh_lease_needs_no_renewal(make_harness, coop_assignor) -> None:
    h = make_harness(assignors=(coop_assignor,))
    name = coop_assignor.name
    h.stable("A", generation=1, owned=h.tps("t", 0, 1), protocol=name)
    h.core.request_rejoin("test")
    h.poll()
    assert h.prepare(lost=False) == ()
    h.send_join()
    assert not h.events_named("member.lease_proof_needed")


def test_g44_protocol_selection_and_the_subscription_each_entry_carries(make_harness) -> None:
    """G44 on the core, with the built-in assignors: [range, cooperative-sticky] is EAGER and
    JoinGroup lists range first; [cooperative-sticky] is COOPERATIVE; [range, roundrobin]
    EAGER. Every protocol entry carries a Subscription v3 whose generation_id is the
    current generation (-1 before the first)."""
    from kgroup import RebalanceProtocol

    cases = [
        (("range", "cooperative-sticky"), RebalanceProtocol.EAGER),
        (("cooperative-sticky",), RebalanceProtocol.COOPERATIVE),
        (("range", "roundrobin"), RebalanceProtocol.EAGER),
    ]
    for assignors, protocol in cases:
        h = make_harness(assignors=assignors)
        assert h.embedding.rebalance_protocol is protocol
        h.poll()
        h.lookup()
        h.poll()
        first = h.action()
        if isinstance(first, PrepareJoin):
            h.embedding.prepare(lost=first.lost)
            first = h.action()
        assert isinstance(first, SendJoinGroup), first
        names = [name for name, _ in first.request.protocols]
        assert names == list(assignors)
        for _, data in first.request.protocols:
            assert data[:2] == b"\x00\x03"  # Subscription version 3
            assert Subscription.decode(data).generation_id == -1
        h.joins.append(first.request)
        h.join_response(generation=7, member_id="A", leader="B", protocol_name=assignors[0])
        h.sync_response(assignment=h.assignment_bytes(h.tps("t", 0)), protocol_name=assignors[0])
        h.complete()
        h.core.request_rejoin("test")
        h.poll()
        h.prepare(lost=False)
        again = h.send_join()
        assert {Subscription.decode(d).generation_id for _, d in again.protocols} == {7}
