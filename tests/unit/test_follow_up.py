"""The follow-up mark (deviations.md row 12): when a cooperative rebalance makes a member
give up something it claimed, a kgroup leader marks every assignment of the generation; a
kgroup member that reads the mark and revokes nothing heartbeats faster until the follow-up
rebalance starts, and rejoins by itself if it has not started within a heartbeat interval."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from kgroup import LeaderElection, ProtocolAssignment, WorkSharding
from kgroup._core._assignors import BaseAssignor, MemberSubscription, RebalanceProtocol
from kgroup._core._consumer_protocol import Assignment, Subscription, TopicPartition
from kgroup._core._embedding import FOLLOW_UP_MARKER, ConsumerEmbedding
from kgroup._core._group_protocol import (
    ProtocolEmbedding,
    decode_assignment_flags,
    encode_assignment,
    encode_metadata,
)
from kgroup._core._heartbeat import FOLLOW_UP_LATE
from kgroup._core._member import HeartbeatWait, PrepareJoin, SendHeartbeat
from kgroup._core._messages import JoinGroupMember
from kgroup._core._state import Generation
from kgroup._errors import AssignmentError, ErrorCode

E = ErrorCode

TP = TopicPartition


def join(member_id: str, owned: Sequence[TopicPartition] = (), generation: int = -1) -> Any:
    sub = Subscription(topics=("t",), owned_partitions=tuple(owned), generation_id=generation)
    return JoinGroupMember(member_id=member_id, group_instance_id=None, metadata=sub.encode())


def tps(*partitions: int) -> tuple[TopicPartition, ...]:
    return tuple(TP("t", p) for p in partitions)


def marked(assignment: Assignment) -> bytes:
    """An assignment as a kgroup leader marks it."""
    return assignment.encode() + FOLLOW_UP_MARKER


@pytest.mark.parametrize("name", ["cooperative-sticky", "sticky", "range"])
def test_leader_marks_every_assignment_when_a_member_gives_up_a_claim(name: str) -> None:
    leader = ConsumerEmbedding(["t"], [name])
    out = leader.assign(name, [join("a", tps(0, 1, 2, 3), 1), join("b")], {"t": 4})
    decoded = {m: Assignment.decode_with_tail(b) for m, b in out.items()}
    # After the Assignment's last field, where every other reader ignores it; never as
    # user data, which Kafka refuses to convert to a consumer group (deviation 12).
    assert {m: tail for m, (_, tail) in decoded.items()} == {
        "a": FOLLOW_UP_MARKER,
        "b": FOLLOW_UP_MARKER,
    }
    assert all(a.user_data is None for a, _ in decoded.values())
    assert len(decoded["a"][0].partitions) == 2  # a gives up two of its four claims


@pytest.mark.parametrize("name", ["cooperative-sticky", "range"])
def test_no_mark_when_every_claim_is_kept(name: str) -> None:
    leader = ConsumerEmbedding(["t"], [name])
    first = leader.assign(name, [join("a"), join("b")], {"t": 4})
    owned = {m: Assignment.decode(b).partitions for m, b in first.items()}
    assert all(b == Assignment.decode(b).encode() for b in first.values())
    again = leader.assign(name, [join(m, owned[m], 1) for m in ("a", "b")], {"t": 4})
    assert all(b == Assignment.decode(b).encode() for b in again.values())


def test_follower_rejoins_at_once_and_its_assignor_never_sees_the_mark() -> None:
    seen: list[bytes | None] = []

    class Recording(BaseAssignor):
        name = "recording"
        supported_protocols = (RebalanceProtocol.COOPERATIVE,)

        def assign(
            self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
        ) -> dict[str, Assignment]:
            raise AssertionError("the follower does not assign")

        def on_assignment(self, assignment: Assignment, generation: int) -> None:
            seen.append(assignment.user_data)

    member = ConsumerEmbedding(["t"], [Recording()])
    generation = Generation(2, "b", "recording")
    completion = member.complete(generation, marked(Assignment(partitions=tps(2))))
    assert completion.follow_up and completion.rejoin_reason is None
    assert completion.assignment == frozenset(tps(2))
    plain = Assignment(partitions=tps(2)).encode()
    assert not member.complete(Generation(3, "b", "recording"), plain).follow_up
    # Where kgroup leaders before it put the mark: the user data, when the assignor set none.
    legacy = Assignment(partitions=tps(2), user_data=FOLLOW_UP_MARKER).encode()
    assert member.complete(Generation(4, "b", "recording"), legacy).follow_up
    # Bytes after the layout that are not the mark mean nothing (a newer version's fields).
    other = Assignment(partitions=tps(2)).encode() + b"\x00\x01"
    assert not member.complete(Generation(5, "b", "recording"), other).follow_up
    assert seen == [None, None, None, None]


def test_an_assignors_own_user_data_is_kept_and_the_mark_follows_it() -> None:
    """A custom assignor that writes assignment user data keeps it; the mark comes after
    it, so its members expect the follow-up too."""

    class WithUserData(BaseAssignor):
        name = "with-user-data"
        supported_protocols = (RebalanceProtocol.COOPERATIVE,)

        def assign(
            self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
        ) -> dict[str, Assignment]:
            # everything to the last member, except what the first still owns: withheld
            first, last = sorted(m.member_id for m in members)
            return {
                first: Assignment(partitions=(), user_data=b"mine"),
                last: Assignment(partitions=(), user_data=None),
            }

    leader = ConsumerEmbedding(["t"], [WithUserData()])
    out = leader.assign("with-user-data", [join("a", tps(0), 1), join("b")], {"t": 1})
    assert Assignment.decode_with_tail(out["a"]) == (
        Assignment(partitions=(), user_data=b"mine"),
        FOLLOW_UP_MARKER,
    )
    assert Assignment.decode_with_tail(out["b"]) == (Assignment(partitions=()), FOLLOW_UP_MARKER)
    follower = ConsumerEmbedding(["t"], [WithUserData()])
    completion = follower.complete(Generation(2, "a", "with-user-data"), out["a"])
    assert completion.follow_up


def test_eager_groups_are_never_marked() -> None:
    """Eager members claim nothing (they revoke everything before they join)."""
    a, b = ConsumerEmbedding(["t"], ["range"]), ConsumerEmbedding(["t"], ["range"])
    a.owned = frozenset(tps(0, 1, 2, 3))
    joins = []
    for member_id, emb in (("a", a), ("b", b)):
        emb.prepare(lost=False)
        joins.append(
            JoinGroupMember(
                member_id=member_id,
                group_instance_id=None,
                metadata=dict(emb.metadata(Generation(1, member_id, "range")))["range"],
            )
        )
    out = a.assign("range", joins, {"t": 4})
    assert all(Assignment.decode(v).user_data is None for v in out.values())


# --- GroupProtocol members ------------------------------------------------------------------


def protocol_join(member_id: str, owned: frozenset[str], generation: int, user: bytes) -> Any:
    return JoinGroupMember(
        member_id=member_id,
        group_instance_id=None,
        metadata=encode_metadata(user, owned, generation),
    )


def test_work_sharding_marks_a_generation_that_withholds_a_move() -> None:
    shards = [f"s{i}" for i in range(4)]
    leader = ProtocolEmbedding(WorkSharding(shards, cooperative=True))
    user = leader.protocol.metadata()
    out = leader.assign(
        leader.protocol.name,
        [
            protocol_join("a", frozenset(shards), 1, user),
            protocol_join("b", frozenset(), -1, user),
        ],
        {},
    )
    flags = {m: decode_assignment_flags(v)[1] for m, v in out.items()}
    assert flags == {"a": True, "b": True}
    follower = ProtocolEmbedding(WorkSharding(shards, cooperative=True))
    completion = follower.complete(Generation(2, "b", leader.protocol.name), out["b"])
    assert completion.follow_up and completion.rejoin_reason is None
    # The next generation hands the withheld shards over; nothing is given up: no mark.
    kept = decode_assignment_flags(out["a"])[0].items
    again = leader.assign(
        leader.protocol.name,
        [protocol_join("a", kept, 2, user), protocol_join("b", frozenset(), 2, user)],
        {},
    )
    assert not any(decode_assignment_flags(v)[1] for v in again.values())


def test_leader_election_eager_is_never_marked() -> None:
    leader = ProtocolEmbedding(LeaderElection())
    user = leader.protocol.metadata()
    out = leader.assign(
        leader.protocol.name,
        [protocol_join("a", frozenset(), -1, user), protocol_join("b", frozenset(), -1, user)],
        {},
    )
    assert not any(decode_assignment_flags(v)[1] for v in out.values())


def test_group_protocol_assignment_flags_round_trip_and_truncation() -> None:
    assignment = ProtocolAssignment(frozenset({"x"}), b"d")
    assert decode_assignment_flags(encode_assignment(assignment, follow_up=True)) == (
        assignment,
        True,
    )
    data = encode_assignment(assignment)
    member = ProtocolEmbedding(WorkSharding(["x"], cooperative=True))
    with pytest.raises(AssignmentError, match="flags"):
        member.complete(Generation(1, "m", member.protocol.name), data[:-1])


# --- the member core: faster heartbeats, then a rejoin of its own ------------------------------


def follower_with_mark(h: Any, name: str) -> None:
    """h's member joins generation 2 as a follower and gets a marked, empty assignment."""
    h.stable("B", generation=1, protocol=name)
    h.core.request_rejoin("test")
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    h.join_response(generation=2, member_id="B", leader="A", protocol_name=name)
    h.sync_response(assignment=marked(Assignment(partitions=())), protocol_name=name)
    completion = h.complete()
    assert completion.follow_up


def test_marked_member_heartbeats_faster_until_the_coordinator_announces_it(
    make_harness, coop_assignor
) -> None:
    h = make_harness(assignors=(coop_assignor,), heartbeat_interval_ms=3_000)
    follower_with_mark(h, coop_assignor.name)
    start = h.now
    assert not h.core.rejoin_needed  # it does not rejoin at once (no SyncGroup race)
    assert h.events_named("member.follow_up_expected")
    sent_at = []
    for _ in range(9):  # 5 ms after the sync, then doubling up to interval / 10 (300 ms)
        wait = h.hb_expect(HeartbeatWait)
        h.at(wait.until)
        sent_at.append(h.now - start)
        h.hb_respond(h.hb_send())
    assert sent_at == [5, 10, 20, 40, 80, 160, 320, 620, 920]
    h.at(h.hb_expect(HeartbeatWait).until)
    h.hb_respond(h.hb_send(), E.REBALANCE_IN_PROGRESS)  # a revoking member rejoined
    assert h.core.rejoin_reason == "group is already rebalancing"
    h.poll()
    assert isinstance(h.action(), PrepareJoin)  # joins the follow-up at once


def test_marked_member_rejoins_by_itself_after_one_interval(make_harness, coop_assignor) -> None:
    """The member that had to revoke never rejoined (e.g. a static member replaced without a
    rebalance): one heartbeat interval after the sync, the member starts the rebalance."""
    h = make_harness(assignors=(coop_assignor,), heartbeat_interval_ms=3_000)
    follower_with_mark(h, coop_assignor.name)
    start = h.now
    while not h.core.rejoin_needed:
        wait = h.hb()
        if isinstance(wait, SendHeartbeat):
            h.hb_respond(wait)
            continue
        assert isinstance(wait, HeartbeatWait)
        if h.core.rejoin_needed:
            break
        h.at(wait.until)
    assert h.now - start == 3_000
    assert h.core.rejoin_reason == FOLLOW_UP_LATE
    # after the rebalance, heartbeats are back to the normal interval
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    h.join_response(generation=3, member_id="B", leader="A", protocol_name=coop_assignor.name)
    h.sync_response(assignment=Assignment(partitions=()).encode(), protocol_name=coop_assignor.name)
    assert not h.complete().follow_up
    synced = h.now
    h.at(h.hb_expect(HeartbeatWait).until)
    assert h.now - synced == 3_000


def test_a_revoking_member_rejoins_at_once_and_expects_nothing(make_harness, coop_assignor) -> None:
    h = make_harness(assignors=(coop_assignor,))
    name = coop_assignor.name
    h.stable("B", generation=1, owned=h.tps("t", 0, 1), protocol=name)
    h.core.request_rejoin("test")
    h.poll()
    h.prepare(lost=False)
    h.send_join()
    h.join_response(generation=2, member_id="B", leader="A", protocol_name=name)
    h.sync_response(
        assignment=marked(Assignment(partitions=tuple(h.tps("t", 0)))), protocol_name=name
    )
    completion = h.complete()
    assert completion.follow_up
    assert h.core.rejoin_reason == "need to revoke partitions and re-join"
    assert not h.events_named("member.follow_up_expected")
