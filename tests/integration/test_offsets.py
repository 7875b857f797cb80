"""OffsetCommit and OffsetFetch through a GroupMember, on Apache Kafka and tansu.

Spec §4.6, §4.7 and §9: commits carry the member's generation; a commit from the eager
revoke callback (sent before the JoinGroup) is accepted and seen by the next owner; a
member that lost its generation gets CommitFailed, and one that is rebalancing gets
RebalanceInProgress without anything being sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from kgroup import (
    CommitFailed,
    GroupMember,
    MemberState,
    OffsetAndMetadata,
    RebalanceInProgress,
    RebalanceListener,
    TopicPartition,
)
from kgroup._runtime._offsets import commit_offsets, fetch_committed
from kgroup.testing import Broker
from tests.integration.conftest import group_config

both_brokers = pytest.mark.parametrize("broker", ["kafka", "tansu"], indirect=True)
# The generation-dependent cases run on Kafka only: the reference broker, and each tansu
# rejoin costs half a session timeout (the default run stays within its time budget).
kafka_only = pytest.mark.parametrize("broker", ["kafka"], indirect=True)


async def poll_until(member: GroupMember, done: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(60):
        while not done():
            await member.poll(timeout=0.2)
    assert done(), what


@both_brokers
async def test_commit_then_fetch_round_trip(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(3)
    tps = [TopicPartition(topic, p) for p in range(3)]
    async with GroupMember(group_config(broker, unique_group, topic)) as member:
        await poll_until(member, lambda: len(member.assignment) == 3, "assigned")
        assert await fetch_committed(member, tps) == dict.fromkeys(tps)
        await commit_offsets(member, {tps[0]: OffsetAndMetadata(42, "note"), tps[1]: 7})
        committed = await fetch_committed(member, tps)
    first, second = committed[tps[0]], committed[tps[1]]
    assert first is not None and first.offset == 42
    # tansu (0.6) stores the offset but not its metadata: it answers "" (README, "Where
    # tansu differs from Kafka").
    assert first.metadata == ("note" if type(broker).__name__ == "KafkaBroker" else "")
    assert second is not None and second.offset == 7
    assert committed[tps[2]] is None


@both_brokers
async def test_commit_from_revoke_callback_reaches_the_next_owner(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """§9.2: under eager rebalancing the revoke callback commits before JoinGroup, with the
    generation it still holds; the broker accepts it and the new owner fetches it."""
    topic = make_topic(2)
    cfg = group_config(broker, unique_group, topic)
    commits: list[tuple[MemberState, int]] = []

    class CommitOnRevoke(RebalanceListener):
        member: GroupMember

        async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
            if partitions:
                commits.append((self.member.state, self.member.generation.generation_id))
                await commit_offsets(self.member, {tp: 100 + tp.partition for tp in partitions})

    listener = CommitOnRevoke()
    first = GroupMember(cfg, listener=listener)
    listener.member = first
    async with first:
        await poll_until(first, lambda: len(first.assignment) == 2, "first owns both")
        async with GroupMember(cfg) as second:
            # Both poll until the second member owns one partition and the first the other.
            def balanced() -> bool:
                return len(first.assignment) == 1 and len(second.assignment) == 1

            async def drive(member: GroupMember, stop: asyncio.Event) -> None:
                while not stop.is_set():
                    await member.poll(timeout=0.2)
                    if balanced():
                        done.set()

            stop = asyncio.Event()
            done = asyncio.Event()
            tasks = [asyncio.create_task(drive(m, stop)) for m in (first, second)]
            try:
                async with asyncio.timeout(60):
                    await done.wait()
            finally:
                stop.set()
                await asyncio.gather(*tasks)
            assert commits and commits[0][0] is MemberState.STABLE
            moved = next(iter(second.assignment))
            got = (await fetch_committed(second, [moved]))[moved]
            assert got is not None and got.offset == 100 + moved.partition
            await asyncio.gather(first.close(), second.close())


@kafka_only
async def test_commit_after_losing_the_generation_raises_commit_failed(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """A member whose generation is gone (here: it stopped heartbeating past the session
    timeout and the broker evicted it) gets CommitFailed; nothing is stored."""
    topic = make_topic(1)
    tp = TopicPartition(topic, 0)
    cfg = group_config(broker, unique_group, topic, session_timeout_ms=6_000)
    async with GroupMember(cfg) as member:
        await poll_until(member, lambda: member.assignment == {tp}, "assigned")
        # Lose the generation the way the broker would make us: reset it as an
        # UNKNOWN_MEMBER_ID heartbeat answer does (§2.4), then commit without polling.
        member._core_call(
            lambda core: core.reset_generation(keep_member_id=False, reason="test eviction")
        )
        with pytest.raises(CommitFailed, match="not part of an active generation"):
            await commit_offsets(member, {tp: 5})
        await poll_until(member, lambda: member.state is MemberState.STABLE, "rejoined")
        assert (await fetch_committed(member, [tp]))[tp] is None


@kafka_only
async def test_commit_while_rebalancing_raises_rebalance_in_progress(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """F35 on a real broker: while the JoinGroup is in flight (PREPARING_REBALANCE) a commit
    fails locally with RebalanceInProgress; after the rebalance completes it succeeds."""
    topic = make_topic(1)
    tp = TopicPartition(topic, 0)
    cfg = group_config(broker, unique_group, topic)
    async with GroupMember(cfg) as member:
        await poll_until(member, lambda: member.assignment == {tp}, "assigned")
        # Catch the member rebalancing: right after poll(timeout=0) sent the JoinGroup it
        # is PREPARING (or COMPLETING, if the answer came within that call); a single
        # member's rebalance can also finish inside the call on a loaded machine: try again.
        for _ in range(20):
            member._core_call(lambda core: core.request_rejoin("test"))
            await member.poll(timeout=0)
            if member.state is not MemberState.STABLE:
                break
        else:
            pytest.fail("the member never stayed rebalancing past one poll(timeout=0)")
        with pytest.raises(RebalanceInProgress, match="call poll"):
            await commit_offsets(member, {tp: 3})
        await poll_until(
            member, lambda: member.state is MemberState.STABLE and bool(member.assignment), "back"
        )
        await commit_offsets(member, {tp: 3})
        got = (await fetch_committed(member, [tp]))[tp]
        assert got == OffsetAndMetadata(3, "", got.leader_epoch if got else -1)
