"""The consumer embedding's listener decisions (spec §6.2 prepare, §6.4 completion, leave)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from kgroup._core._assignors import (
    Assignor,
    BaseAssignor,
    MemberSubscription,
    RangeAssignor,
    RebalanceProtocol,
)
from kgroup._core._consumer_protocol import Assignment, Subscription, TopicPartition
from kgroup._core._embedding import Callback, Completion, ConsumerEmbedding, ListenerCall
from kgroup._core._messages import JoinGroupMember
from kgroup._core._state import Generation
from kgroup._errors import AssignmentError

T = TopicPartition


def tps(topic: str, *partitions: int) -> frozenset[TopicPartition]:
    return frozenset(T(topic, p) for p in partitions)


def encoded(*partitions: TopicPartition) -> bytes:
    return Assignment(partitions=tuple(partitions)).encode()


class CoopRange(BaseAssignor):
    name = "coop-range"
    supported_protocols = (RebalanceProtocol.COOPERATIVE,)

    def __init__(self) -> None:
        self.assignments: list[tuple[Assignment, int]] = []

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, Assignment]:
        return RangeAssignor().assign(partitions_per_topic, members)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self.assignments.append((assignment, generation_id))


def eager(*topics: str) -> ConsumerEmbedding:
    return ConsumerEmbedding(topics or ("t",), ["range"])


def cooperative(*topics: str, assignor: Assignor | None = None) -> ConsumerEmbedding:
    return ConsumerEmbedding(topics or ("t",), [assignor or CoopRange()])


GEN = Generation(3, "m-1", "range")
COOP_GEN = Generation(3, "m-1", "coop-range")


# --- prepare (pre-join hook, §6.2) ----------------------------------------------------------


@pytest.mark.parametrize("make", [eager, cooperative])
def test_prepare_lost_when_generation_reset(make) -> None:
    emb = make()
    emb.owned = tps("t", 0, 1)
    assert emb.prepare(lost=True) == (ListenerCall("on_partitions_lost", tps("t", 0, 1)),)
    assert emb.owned == frozenset()


@pytest.mark.parametrize("make", [eager, cooperative])
def test_prepare_lost_with_nothing_owned_calls_nothing(make) -> None:
    assert make().prepare(lost=True) == ()


def test_prepare_eager_revokes_everything() -> None:
    emb = eager()
    emb.owned = tps("t", 0, 1)
    assert emb.prepare(lost=False) == (ListenerCall("on_partitions_revoked", tps("t", 0, 1)),)
    assert emb.owned == frozenset()


def test_prepare_eager_revokes_even_an_empty_set() -> None:
    """§6.2: under EAGER, on_partitions_revoked is called even when nothing is owned."""
    assert eager().prepare(lost=False) == (ListenerCall("on_partitions_revoked", frozenset()),)


def test_prepare_cooperative_revokes_only_unsubscribed_topics() -> None:
    emb = cooperative("a", "b")
    emb.owned = tps("a", 0) | tps("b", 1)
    assert emb.prepare(lost=False) == ()
    assert emb.owned == tps("a", 0) | tps("b", 1)
    emb.topics = ("a",)  # the subscription changed
    assert emb.prepare(lost=False) == (ListenerCall("on_partitions_revoked", tps("b", 1)),)
    assert emb.owned == tps("a", 0)


# --- complete (§6.4) ------------------------------------------------------------------------


def test_complete_assigns_the_added_set() -> None:
    emb = eager()
    completion = emb.complete(GEN, encoded(T("t", 0), T("t", 2)))
    assert completion == Completion(
        calls=(ListenerCall("on_partitions_assigned", tps("t", 0, 2)),),
        rejoin_reason=None,
        assignment=tps("t", 0, 2),
    )
    assert emb.owned == tps("t", 0, 2)


def test_complete_empty_assignment_still_calls_assigned() -> None:
    """§6.4 step 9: on_partitions_assigned is called even when ``added`` is empty."""
    emb = eager()
    completion = emb.complete(GEN, encoded())
    assert completion.calls == (ListenerCall("on_partitions_assigned", frozenset()),)
    assert emb.owned == frozenset()


def test_complete_cooperative_added_and_revoked() -> None:
    """Cooperative: revoked = owned - assigned is called first, then assigned(added), and a
    rejoin is requested."""
    assignor = CoopRange()
    emb = cooperative(assignor=assignor)
    emb.owned = tps("t", 0, 1)
    completion = emb.complete(COOP_GEN, encoded(T("t", 1), T("t", 2)))
    assert completion.calls == (
        ListenerCall("on_partitions_revoked", tps("t", 0)),
        ListenerCall("on_partitions_assigned", tps("t", 2)),
    )
    assert completion.rejoin_reason == "need to revoke partitions and re-join"
    assert emb.owned == tps("t", 1, 2)
    assert assignor.assignments == [(Assignment(partitions=(T("t", 1), T("t", 2))), 3)]


def test_complete_cooperative_nothing_revoked_needs_no_rejoin() -> None:
    emb = cooperative()
    emb.owned = tps("t", 0)
    completion = emb.complete(COOP_GEN, encoded(T("t", 0), T("t", 1)))
    assert completion.calls == (ListenerCall("on_partitions_assigned", tps("t", 1)),)
    assert completion.rejoin_reason is None


@pytest.mark.parametrize("data", [b"", b"\x00"])
def test_short_assignment_is_an_error(data: bytes) -> None:
    """B17 / §6.4 step 2: fewer than 2 bytes is not an empty assignment."""
    emb = eager()
    emb.owned = tps("t", 0)
    with pytest.raises(AssignmentError, match=f"{len(data)}-byte assignment"):
        emb.complete(GEN, data)
    assert emb.owned == tps("t", 0)


def test_malformed_assignment_is_an_error() -> None:
    with pytest.raises(AssignmentError, match="malformed"):
        eager().complete(GEN, b"\x00\x03\x00\x00\x00\x05")


def test_assignment_outside_subscription_requests_rejoin_without_callbacks() -> None:
    """B18 / §6.4 step 3: request a rejoin and return without running any callback."""
    emb = eager("t2")
    emb.owned = tps("t2", 0)
    completion = emb.complete(GEN, encoded(T("t1", 0), T("t1", 1)))
    assert completion.calls == ()
    assert completion.rejoin_reason == "received assignment does not match the current subscription"
    assert emb.owned == tps("t2", 0)


# --- release on leave (close / unsubscribe) -------------------------------------------------


@pytest.mark.parametrize(
    ("lost", "callback"), [(True, "on_partitions_lost"), (False, "on_partitions_revoked")]
)
def test_release_on_leave(lost: bool, callback: Callback) -> None:
    emb = eager()
    emb.owned = tps("t", 0, 3)
    assert emb.release(lost=lost) == (ListenerCall(callback, tps("t", 0, 3)),)
    assert emb.owned == frozenset()
    assert emb.release(lost=lost) == ()  # nothing owned: no callback


# --- JoinGroup metadata and the leader ------------------------------------------------------


def test_metadata_eager_sends_no_owned_partitions() -> None:
    emb = ConsumerEmbedding(("t",), ["range", "roundrobin"])
    emb.owned = tps("t", 0)
    protocols = emb.metadata(Generation(4, "m", "range"))
    assert [name for name, _ in protocols] == ["range", "roundrobin"]
    for _, data in protocols:
        assert Subscription.decode(data) == Subscription(topics=("t",), generation_id=4)


def test_metadata_cooperative_sends_owned_partitions() -> None:
    emb = cooperative()
    emb.owned = tps("t", 1, 0)
    ((name, data),) = emb.metadata(Generation(-1, "", None))
    assert name == "coop-range"
    sub = Subscription.decode(data)
    assert sub.owned_partitions == (T("t", 0), T("t", 1))
    assert sub.generation_id == -1


def test_leader_assigns_every_member_and_rejects_unknown_assignor() -> None:
    emb = eager()
    members = [
        JoinGroupMember(
            member_id=m, group_instance_id=None, metadata=Subscription(topics=("t",)).encode()
        )
        for m in ("b", "a", "c")
    ]
    out = emb.assign("range", members, {"t": 2})
    assert sorted(out) == ["a", "b", "c"]
    assert Assignment.decode(out["c"]).partitions == ()  # an encoded empty assignment
    with pytest.raises(AssignmentError, match="roundrobin"):
        emb.assign("roundrobin", members, {"t": 2})


def test_completion_with_an_assignor_this_member_lacks_is_an_assignment_error() -> None:
    """§6.4 step 2: the group's protocol_name must name one of this member's assignors."""
    from kgroup._core._consumer_protocol import Assignment
    from kgroup._core._embedding import ConsumerEmbedding
    from kgroup._core._state import Generation
    from kgroup._errors import AssignmentError

    embedding = ConsumerEmbedding(["t"], ["range"])
    data = Assignment(partitions=()).encode()
    with pytest.raises(AssignmentError, match="roundrobin"):
        embedding.complete(Generation(1, "m", "roundrobin"), data)
    assert embedding.complete(Generation(1, "m", "range"), data).assignment == frozenset()
