"""Subscriptions that change, the leader's metadata watch (spec §7.7, §2.3) and
``enforce_rebalance``: the real GroupMember over kgroup.testing's in-memory coordinator."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kgroup import ConfigError, GroupMember, MemberState, TopicPartition, UsageError
from kgroup._core._consumer_protocol import Assignment, Subscription
from kgroup._core._embedding import ConsumerEmbedding
from kgroup._core._messages import JoinGroupMember, JoinGroupRequest
from kgroup._core._state import Generation
from kgroup._runtime._classic import ClassicRuntime
from kgroup.testing import InMemoryCoordinator
from tests.unit.test_in_memory_coordinator import Members

T = TopicPartition


def every(topic: str, count: int) -> set[TopicPartition]:
    return {T(topic, p) for p in range(count)}


def owned(members: list[GroupMember]) -> set[TopicPartition]:
    return set().union(*(m.assignment for m in members))


def stable(members: list[GroupMember]) -> bool:
    return all(m.state is MemberState.STABLE for m in members)


@pytest.fixture
async def cluster() -> AsyncIterator[Members]:
    members = Members(InMemoryCoordinator({"t": 2, "u": 2, "other": 1}))
    try:
        yield members
    finally:
        await members.aclose()


# --- the embedding's decisions ----------------------------------------------------------------


def test_snapshot_is_taken_by_assign_and_compared() -> None:
    emb = ConsumerEmbedding(("t",), ["range"])
    assert emb.metadata_changed({"t": 9}) is None  # no snapshot: not the leader
    member = JoinGroupMember(
        member_id="a",
        group_instance_id=None,
        metadata=Subscription(topics=("t", "gone")).encode(),
    )
    emb.assign("range", [member], {"t": 2})
    assert emb.assignment_snapshot == {"gone": None, "t": 2}
    assert emb.metadata_changed({"t": 2}) is None
    assert emb.metadata_changed({"t": 3}) == (
        "metadata changed since the assignment (t: 2 partitions -> 3 partitions)"
    )
    assert "gone: no metadata -> 1 partitions" in (emb.metadata_changed({"t": 2, "gone": 1}) or "")
    emb.prepare(lost=False)
    assert emb.assignment_snapshot is None  # a new rebalance: the next leader's snapshot


def test_subscribe_reports_a_change_only_when_the_set_changes() -> None:
    emb = ConsumerEmbedding(("a", "b"), ["range"])
    assert not emb.subscribe(["b", "a", "a"])
    assert emb.subscribe(["c"])
    assert emb.topics == ("c",)
    emb.owned = frozenset({T("c", 0)})
    assert emb.metadata(Generation(1, "m", "range"))  # built from the new topics
    assert Subscription.decode(emb.metadata(Generation(1, "m", "range"))[0][1]).topics == ("c",)


def test_a_subscription_changed_after_the_join_asks_for_another_rebalance() -> None:
    """The leader assigned by the topics the JoinGroup carried: a change after it was sent
    (a pattern refresh, subscribe()) reaches the group only through one more JoinGroup."""
    emb = ConsumerEmbedding(("t",), ["range"])
    generation = Generation(1, "m", "range")
    emb.metadata(generation)  # the JoinGroup: subscribed to t
    assignment = Assignment(partitions=(T("t", 0),)).encode()
    assert emb.complete(generation, assignment).rejoin_reason is None
    emb.metadata(generation)
    assert emb.subscribe(["t", "v"])  # while that JoinGroup was in flight
    completion = emb.complete(generation, assignment)
    assert completion.rejoin_reason == "the subscription changed while the member was joining"
    assert completion.assignment == {T("t", 0)}  # installed all the same
    emb.metadata(generation)  # the next JoinGroup carries t and v
    assert emb.complete(generation, assignment).rejoin_reason is None


def test_a_leaderless_member_watches_from_its_own_counts() -> None:
    """A member whose JoinGroup named no leader takes the counts of its first refresh as
    the snapshot (deviations.md row 21), then compares as a leader does."""
    emb = ConsumerEmbedding(("t", "u"), ["range"])
    emb.watch({"t": 2, "other": 5})
    assert emb.assignment_snapshot == {"t": 2, "u": None}
    assert emb.metadata_changed({"t": 2}) is None
    assert emb.metadata_changed({"t": 4}) == (
        "metadata changed since the assignment (t: 2 partitions -> 4 partitions)"
    )
    emb.prepare(lost=False)  # a rebalance: the next generation takes its own counts
    assert emb.assignment_snapshot is None


# --- the runtime ----------------------------------------------------------------------------


async def test_leader_notices_partitions_added_and_rebalances(cluster: Members) -> None:
    """§7.7: a subscribed topic grows from 2 to 4 partitions; the leader's metadata watch
    sees it within metadata_max_age_ms and the group is rebalanced onto all four."""
    a = await cluster.start(topics=["t"], metadata_max_age_ms=100)
    b = await cluster.start(topics=["t"], metadata_max_age_ms=100)
    both = [a, b]
    await cluster.wait(
        lambda: stable(both) and owned(both) == every("t", 2) and bool(b.assignment), "two"
    )
    generation = a.generation.generation_id
    cluster.coordinator.partitions["t"] = 4
    await cluster.wait(lambda: stable(both) and owned(both) == every("t", 4), "grown")
    assert a.generation.generation_id > generation
    assert len(a.assignment) == len(b.assignment) == 2


async def test_no_rebalance_while_metadata_is_unchanged(cluster: Members) -> None:
    a = await cluster.start(topics=["t"], metadata_max_age_ms=20)
    await cluster.wait(lambda: stable([a]) and owned([a]) == every("t", 2), "alone")
    generation = a.generation.generation_id
    runtime = a._runtime
    assert isinstance(runtime, ClassicRuntime)
    watch = runtime._metadata  # the refresh count: wait for real refreshes, not for time
    start = watch.refreshes
    await cluster.wait(lambda: watch.refreshes >= start + 5, "five refreshes")
    assert a.generation.generation_id == generation
    assert a.state is MemberState.STABLE


async def test_pattern_subscription_follows_new_topics(cluster: Members) -> None:
    a = await cluster.start(topics=(), topic_pattern=r"t|u|v", metadata_max_age_ms=50)
    assert a.subscription == ("t", "u")  # resolved before the first JoinGroup
    await cluster.wait(lambda: stable([a]) and owned([a]) == every("t", 2) | every("u", 2), "t, u")
    generation = a.generation.generation_id
    cluster.coordinator.partitions["v"] = 3
    await cluster.wait(
        lambda: stable([a]) and owned([a]) == every("t", 2) | every("u", 2) | every("v", 3),
        "v appears",
    )
    assert list(a.subscription) == ["t", "u", "v"]
    assert a.generation.generation_id > generation
    del cluster.coordinator.partitions["u"]
    await cluster.wait(
        lambda: stable([a]) and owned([a]) == every("t", 2) | every("v", 3), "u goes"
    )


async def test_subscribe_at_runtime(cluster: Members) -> None:
    a = await cluster.start(topics=["t"])
    await cluster.wait(lambda: stable([a]) and owned([a]) == every("t", 2), "t")
    await a.subscribe(["u", "other"])
    assert a.subscription == ("other", "u")
    await cluster.wait(
        lambda: stable([a]) and owned([a]) == every("u", 2) | every("other", 1), "u, other"
    )
    await a.subscribe(pattern=r"t.*")
    assert list(a.subscription) == ["t"]
    await cluster.wait(lambda: stable([a]) and owned([a]) == every("t", 2), "t again")
    generation = a.generation.generation_id
    await a.subscribe(["t"])  # unchanged: no rebalance
    assert not a.rebalance_pending
    assert a.generation.generation_id == generation


async def test_subscribe_rejects_bad_arguments(cluster: Members) -> None:
    a = await cluster.start(topics=["t"])
    with pytest.raises(UsageError, match="either topics or pattern"):
        await a.subscribe(["t"], pattern="t")
    with pytest.raises(UsageError, match="either topics or pattern"):
        await a.subscribe()
    with pytest.raises(ConfigError, match="pattern"):
        await a.subscribe(pattern="(")
    with pytest.raises(ConfigError, match="topics"):
        await a.subscribe(["bad name"])
    assert a.subscription == ("t",)


async def test_enforce_rebalance_starts_a_new_generation(cluster: Members) -> None:
    a = await cluster.start(topics=["t"])
    await cluster.wait(lambda: stable([a]) and owned([a]) == every("t", 2), "t")
    generation = a.generation.generation_id
    a.enforce_rebalance("assignor inputs changed")
    assert a.rebalance_pending
    await cluster.wait(lambda: stable([a]) and a.generation.generation_id > generation, "new")
    with pytest.raises(UsageError):
        a.enforce_rebalance("")


def test_config_topic_pattern_is_checked() -> None:
    from kgroup import GroupConfig

    with pytest.raises(ConfigError, match=r"topic_pattern.*not a valid regular expression"):
        GroupConfig(bootstrap_servers="h:1", group_id="g", topic_pattern="(")
    with pytest.raises(ConfigError, match="either topics or topic_pattern"):
        GroupConfig(bootstrap_servers="h:1", group_id="g", topics=["t"], topic_pattern="t")
    with pytest.raises(ConfigError, match="metadata_max_age_ms"):
        GroupConfig(bootstrap_servers="h:1", group_id="g", metadata_max_age_ms=0)


async def test_a_topic_matched_while_the_join_is_held_is_assigned_after_it() -> None:
    """The pattern picks a new topic up while the member's JoinGroup waits at the barrier:
    that JoinGroup still names the old topics, so the member rejoins once it is synced
    (found by the chaos suite: the new topic stayed unassigned for good)."""
    members = Members(InMemoryCoordinator({"t": 2, "u": 2}, join_window_ms=1_000))
    try:
        a = await members.start(topics=(), topic_pattern=r"t|u|v", metadata_max_age_ms=20)
        transport = members.transports[0]

        def join_held() -> bool:
            return any(isinstance(r, JoinGroupRequest) and r.member_id for r in transport.requests)

        await members.wait(join_held, "the JoinGroup with a member id")
        members.coordinator.partitions["v"] = 3
        await members.wait(lambda: "v" in a.subscription, "v matched")
        assert a.state is MemberState.PREPARING_REBALANCE  # the JoinGroup is still held
        await members.wait(
            lambda: stable([a]) and owned([a]) == every("t", 2) | every("u", 2) | every("v", 3),
            "v assigned",
        )
    finally:
        await members.aclose()
