"""Subscriptions that change and the leader's metadata watch (spec §7.7, §2.3) on real
brokers: partitions added to a subscribed topic, a pattern that starts matching a new
topic, ``subscribe()`` and ``enforce_rebalance()`` at runtime."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions

from kgroup import GroupConfig, MemberState, TopicPartition
from kgroup.testing import Broker
from kgroup.testing._members import MemberGroup, MemberRunner, covered
from tests.integration.conftest import group_config

T = TopicPartition


def holds(runners: list[MemberRunner], expected: set[TopicPartition]) -> bool:
    """Every runner STABLE; together they hold exactly ``expected``, each partition once."""
    seen = [tp for r in runners for tp in r.assignment]
    return (
        all(r.stable for r in runners)
        and len(seen) == len(set(seen)) == len(expected)
        and set(seen) == expected
    )


def every(topic: str, count: int) -> set[TopicPartition]:
    return {T(topic, p) for p in range(count)}


def by_pattern(
    broker: Broker, group: str, first: str, prefix: str, *, metadata_max_age_ms: int
) -> GroupConfig:
    """A member of ``group`` subscribed by the pattern ``<prefix>-.*`` (``first`` matches)."""
    return group_config(
        broker,
        group,
        first,
        topics=(),
        topic_pattern=rf"{prefix}-.*",
        metadata_max_age_ms=metadata_max_age_ms,
    )


async def add_partitions(broker: Broker, topic: str, total: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_partitions({topic: NewPartitions(total_count=total)})
    finally:
        await admin.close()


@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
async def test_leader_sees_partitions_added_and_the_group_takes_them(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(2)
    cfg = group_config(broker, unique_group, topic, metadata_max_age_ms=500)
    async with MemberGroup() as group:
        runners = [await group.start(cfg) for _ in range(2)]
        await group.wait_until(lambda: covered(runners, topic, 2), timeout=60, what="2 stable")
        generation = runners[0].member.generation.generation_id
        await add_partitions(broker, topic, 6)
        await group.wait_until(lambda: covered(runners, topic, 6), timeout=60, what="6 covered")
        assert runners[0].member.generation.generation_id > generation
        assert sorted(len(r.assignment) for r in runners) == [3, 3]
        assert not any(r.errors for r in runners)


@pytest.mark.parametrize("broker", ["kafka", "tansu"], indirect=True)
async def test_pattern_subscription_takes_a_new_topic(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    first = make_topic(2, name=f"{prefix}-a")
    cfg = by_pattern(broker, unique_group, first, prefix, metadata_max_age_ms=500)
    async with MemberGroup() as group:
        a = await group.start(cfg)
        assert a.member.subscription == (first,)
        await group.wait_until(lambda: holds([a], every(first, 2)), timeout=60, what="first")
        second = make_topic(3, name=f"{prefix}-b")
        await group.wait_until(
            lambda: holds([a], every(first, 2) | every(second, 3)), timeout=60, what="second"
        )
        assert list(a.member.subscription) == [first, second]
        assert not a.errors


@pytest.mark.parametrize("broker", ["kafka", "tansu"], indirect=True)
async def test_subscribe_and_enforce_rebalance_at_runtime(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    one, two = make_topic(2), make_topic(4)
    cfg = group_config(broker, unique_group, one)
    async with MemberGroup() as group:
        runners = [await group.start(cfg) for _ in range(2)]
        await group.wait_until(lambda: holds(runners, every(one, 2)), timeout=60, what="one")
        for r in runners:
            await r.member.subscribe([two])
        await group.wait_until(lambda: holds(runners, every(two, 4)), timeout=60, what="two")
        generation = runners[0].member.generation.generation_id
        runners[1].member.enforce_rebalance("test")
        await group.wait_until(
            lambda: (
                holds(runners, every(two, 4))
                and runners[0].member.generation.generation_id > generation
            ),
            timeout=60,
            what="enforced",
        )
        assert not any(r.errors for r in runners)


@pytest.mark.parametrize("broker", ["kafka"], indirect=True)
async def test_a_topic_matched_while_the_join_is_held_is_taken_after_it(
    broker: Broker, make_topic: Callable[..., str], unique_group: str
) -> None:
    """The pattern matches a new topic while the member's JoinGroup is held (the other
    member does not poll, so it does not rejoin): that JoinGroup named the old topics, so
    the member rejoins once synced and the new topic is assigned. (Before the fix, the
    sync forgot the rejoin and the topic stayed unassigned; found by the chaos suite.)"""
    prefix = f"held-{uuid.uuid4().hex[:8]}"
    first = make_topic(2, name=f"{prefix}-a")
    pattern_cfg = by_pattern(broker, unique_group, first, prefix, metadata_max_age_ms=100)
    name_cfg = group_config(broker, unique_group, first, max_poll_interval_ms=60_000)
    async with MemberGroup() as group:
        a = await group.start(pattern_cfg)
        b = await group.start(name_cfg)
        await group.wait_until(
            lambda: holds([a, b], every(first, 2)) and bool(a.assignment and b.assignment),
            timeout=60,
            what="two stable",
        )
        await b.pause()  # b heartbeats on but will not rejoin: a's JoinGroup waits for it
        a.member.enforce_rebalance("test: hold a's JoinGroup")
        await group.wait_until(
            lambda: a.member.state is MemberState.PREPARING_REBALANCE,
            timeout=30,
            what="a's JoinGroup sent",
        )
        second = make_topic(1, name=f"{prefix}-b")
        await group.wait_until(
            lambda: second in a.member.subscription, timeout=30, what="the pattern matched"
        )
        assert a.member.state is MemberState.PREPARING_REBALANCE  # still held
        b.resume()
        await group.wait_until(
            lambda: holds([a, b], every(first, 2) | every(second, 1)),
            timeout=60,
            what="the new topic assigned",
        )
        assert T(second, 0) in a.assignment  # only a subscribes to it
        assert not any(r.errors for r in (a, b))
